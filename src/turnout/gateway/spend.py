"""Daily spend per client key, enforced from the ledger.

The ledger records every call with the name of the gateway key that made it. At start-up, and then at most
once per :data:`REFRESH_S` while limited keys are in use, the book reads today's total per key from the
ledger (every worker process writes the same file), and adds what this process spent since; so a limit
holds across restarts at once and across workers within about a second. The day is the UTC day.

A call that starts under the limit completes: calls already in flight when the limit is reached may carry
the spend past it. Attempts without a known price count as $0 (give such profiles a ``pricing`` table).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from turnout.attribution import Attempt
from turnout.ledger import Ledger, spend_by_caller

log = logging.getLogger("turnout.gateway")

#: How stale the ledger's totals may be before the next admission of a limited key refreshes them.
REFRESH_S = 1.0
_DAY_S = 86400.0


def day_start(now: float) -> float:
    """00:00 UTC of the day ``now`` (Unix seconds) falls in."""
    return now - now % _DAY_S


def seconds_to_midnight(now: float | None = None) -> float:
    """Seconds until the next 00:00 UTC, when every daily limit resets."""
    now = time.time() if now is None else now
    return day_start(now) + _DAY_S - now


class SpendBook:
    """Today's spend per key name: the ledger's totals plus this process's calls not yet counted in them.

    Args:
        ledger: The ledger the client writes every call to.
        clock: Wall-clock seconds (tests inject a fake).
    """

    def __init__(self, ledger: Ledger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.clock = clock
        self._day = day_start(clock())
        self._totals: dict[str, float] = {}  # from the ledger, as of the last refresh
        self._counting: dict[str, float] = {}  # spent before the refresh in progress (not yet in _totals)
        self._recent: dict[str, float] = {}  # spent since the last refresh began
        self._refreshed = float("-inf")
        self._task: asyncio.Task[None] | None = None

    def spent(self, name: str) -> float:
        """What ``name`` spent today, as far as is known now; starts a refresh when the totals are stale."""
        now = self.clock()
        if day_start(now) != self._day:
            self._day = day_start(now)
            self._totals, self._counting, self._recent = {}, {}, {}
            self._refreshed = float("-inf")
        if now - self._refreshed >= REFRESH_S and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.refresh())
        return self._totals.get(name, 0.0) + self._counting.get(name, 0.0) + self._recent.get(name, 0.0)

    def add(self, name: str, attempts: Iterable[Attempt]) -> None:
        """Count a finished call of ``name`` (its record is already queued in the ledger)."""
        cost = sum(a.cost_usd for a in attempts if a.cost_usd is not None)
        if cost:
            self._recent[name] = self._recent.get(name, 0.0) + cost

    async def refresh(self) -> None:
        """Read today's totals from the ledger (after writing what is queued)."""
        self._refreshed = self.clock()
        day = self._day
        for name, cost in self._recent.items():
            self._counting[name] = self._counting.get(name, 0.0) + cost
        self._recent = {}
        try:
            await self.ledger.flush()
            totals = await asyncio.to_thread(spend_by_caller, self.ledger.path, day)
        except Exception:  # an unreadable ledger must not take the gateway down: keep counting locally
            log.warning("turnout gateway: cannot read today's spend from the ledger", exc_info=True)
            for name, cost in self._counting.items():
                self._recent[name] = self._recent.get(name, 0.0) + cost
        else:
            if day == self._day:
                self._totals = totals
        finally:
            self._counting = {}
            self._task = None

    async def aclose(self) -> None:
        """Wait for a refresh in progress."""
        if self._task is not None:
            await asyncio.wait((self._task,))
