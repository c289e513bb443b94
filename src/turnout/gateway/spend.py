"""Daily spend per client key, enforced from the ledger.

The ledger records every call with the name of the gateway key that made it, and knows, per key and UTC day,
the cost of the calls it was given and of those it wrote. At start-up, and then at most once per
:data:`REFRESH_S` while limited keys are in use, the book asks the ledger's writer for today's total per key in
the file (every worker process writes the same file) together with what this process had written of it when it
read; what a key spent is that total, plus what this process gave the ledger since minus what it had written.
So a call counts from the moment it ends until the file holds it, and after that through the file: never
twice, and never not at all, also while the file refuses writes (disk full, read-only, moved). The day is the
UTC day.

Calls still running are counted by their reservations (:mod:`turnout.gateway.reserve`), not here.
Attempts without a known price count as $0 (give such profiles a ``pricing`` table).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from turnout.ledger import Ledger, LedgerUnavailable

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
    """Today's spend per key name: the ledger file's totals plus this process's calls the file lacks.

    Args:
        ledger: The ledger the client writes every call to.
        clock: Wall-clock seconds (tests inject a fake).

    Attributes:
        readable: Whether the last refresh could read the file (False: the totals are the last ones read).
    """

    def __init__(self, ledger: Ledger, clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger
        self.clock = clock
        self._day = day_start(clock())
        self._totals: dict[str, float] = {}  # in the file, as of the last refresh
        self._written: dict[str, float] = {}  # of which this process wrote, as of the same moment
        self._refreshed = float("-inf")
        self._task: asyncio.Task[None] | None = None
        self.readable = True

    def spent(self, name: str) -> float:
        """What ``name`` spent today, as far as is known now; starts a refresh when the totals are stale."""
        now = self.clock()
        if day_start(now) != self._day:
            self._day = day_start(now)
            self._totals, self._written = {}, {}
            self._refreshed = float("-inf")
        if now - self._refreshed >= REFRESH_S and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.refresh())
        unwritten = self.ledger.given(name, self._day) - self._written.get(name, 0.0)
        return self._totals.get(name, 0.0) + (unwritten if unwritten > 0.0 else 0.0)

    def today(self) -> dict[str, float]:
        """What every key known to have spent today spent (``/status``)."""
        names = set(self._totals) | set(self.ledger.given_since(self._day))
        return {name: self.spent(name) for name in sorted(names)}

    async def refresh(self) -> None:
        """Read today's totals from the ledger file (through its writer, after what is queued)."""
        self._refreshed = self.clock()
        day = self._day
        try:
            totals, written = await self.ledger.spend_since(day)
        except LedgerUnavailable:  # the ledger logs its trouble; the last totals and every unwritten call count
            self.readable = False
        else:
            self.readable = True
            if day == self._day:
                self._totals, self._written = totals, written
        finally:
            self._task = None

    @property
    def recording(self) -> bool:
        """Whether the ledger can record now (its last write succeeded, and its file could be read)."""
        return self.ledger.health.ok and self.readable

    async def aclose(self) -> None:
        """Wait for a refresh in progress."""
        if self._task is not None:
            await asyncio.wait((self._task,))
