"""The circuit breakers of a client's entries: local streaks, and open records in the shared state store.

:mod:`turnout.walk.breaker` says when a breaker opens and what it lets through; this module keeps one streak per
entry (per process: every walk that reaches the entry, whatever its route, counts in it), opens, reopens and
closes the shared records, and counts the transitions for ``/metrics``. The walk reads an entry's open record
from :attr:`Breakers.store` (no I/O; :func:`turnout.walk.breaker.gate` says what it lets through) and asks this
module two things: the probe of a half-open entry, and what a call's outcome on an entry changes (one signal per
call: the walk reports an entry's failure once, when it leaves the entry).

Every transition is counted for ``/metrics``; the log gets one line per real transition of this process (a breaker
it opened, reopened or closed, never a repeat of another call's), and at most one per entry and kind of transition
every :data:`LOG_INTERVAL_S` (the next such line says how many it left out), so a breaker that flaps cannot flood
the log while its opening and its closing are each still told.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

from turnout.state.base import BreakerRecord, StateStore
from turnout.walk.breaker import BreakerSettings, Streak, gate, split_entry_key

log = logging.getLogger("turnout.breaker")

#: A breaker's transitions, as counted for ``/metrics``.
Transition = Literal["opened", "probe", "closed", "reopened"]

#: How long one probe may hold an entry before another call may probe it (a probe that never reports).
PROBE_HOLD_S = 30.0
#: The most entries with a streak kept at once: past it, the oldest streak is forgotten (an entry is a profile and
#: a model, and an unpinned profile sends the model a caller names, so the entries are not bounded by the config).
MAX_STREAKS = 4096
#: The shortest time between two log lines about one entry's breaker (the transitions between are counted).
LOG_INTERVAL_S = 60.0


class Breakers:
    """Every entry's breaker.

    Args:
        store: Where open breakers are shared.
        default: The settings of ``[reliability.breaker]``.
        profiles: Per-profile settings, where a profile overrides them.
    """

    def __init__(
        self,
        store: StateStore,
        default: BreakerSettings | None = None,
        profiles: Mapping[str, BreakerSettings] | None = None,
    ) -> None:
        self.store = store
        self.default = default if default is not None else BreakerSettings()
        self.profiles = dict(profiles or {})
        #: The entries with a failure streak or failures in the window (empty while everything is healthy).
        self.streaks: dict[str, Streak] = {}
        #: Transitions seen by this process, by (entry, transition).
        self.transitions: Counter[tuple[str, Transition]] = Counter()
        #: When each entry's breaker was last logged, and the transitions left out of the log since.
        self._logged: dict[tuple[str, Transition], tuple[float, int]] = {}

    @property
    def active(self) -> bool:
        """Whether any entry has a breaker (when none has, the walks are built without this registry: no cost)."""
        return self.default.enabled or any(s.enabled for s in self.profiles.values())

    def settings(self, profile: str) -> BreakerSettings:
        """The settings of ``profile``'s entries."""
        return self.profiles.get(profile, self.default)

    async def claim_probe(self, key: str, now: float) -> bool:
        """Take the one probe of the half-open entry ``key`` (False: another call has it)."""
        taken = await self.store.claim_breaker_probe(key, now, PROBE_HOLD_S)
        if taken:
            self.transitions[(key, "probe")] += 1
        return taken

    def streak_ends(self, key: str, now: float) -> None:
        """A call served by the entry ``key`` (not a probe), answered at ``now``: its run ends."""
        streak = self.streaks.get(key)
        if streak is not None:
            streak.success(now)
            if streak.idle:
                del self.streaks[key]

    async def succeeded(self, key: str, now: float, *, probing: bool) -> None:
        """A healthy answer from the entry ``key``: its run ends; a probe's success closes the breaker.

        The closing is counted and logged only when this process saw the breaker open (another call may have closed
        it first).
        """
        streak = self.streaks.get(key)
        if streak is not None:
            streak.success(now)
        was_open = self.store.breaker(key) is not None
        if probing or was_open:
            await self.store.close_breaker(key)
        if was_open:
            self.transitions[(key, "closed")] += 1
            self._log(key, "closed", now, "circuit breaker of %s closed: the entry answered again", key)

    async def failed(self, profile: str, key: str, now: float, *, probing: bool, reached: float | None = None) -> None:
        """A call failed on the entry ``key`` (one signal per call; it reached the entry at ``reached``).

        Count it; open the breaker, or reopen it after a failed probe.
        """
        settings = self.settings(profile)
        if not settings.enabled:
            return
        record = self.store.breaker(key)
        if probing or (record is not None and now >= record.until):
            interval = settings.next_interval(record.interval if record is not None else settings.open_secs)
            await self._open(key, BreakerRecord(opened_at=now, until=now + interval, interval=interval), "reopened")
            return
        if record is not None:
            return  # already open (another call's failure arrived first)
        streak = self.streaks.get(key)
        if streak is None:
            if len(self.streaks) >= MAX_STREAKS:
                del self.streaks[next(iter(self.streaks))]
            streak = self.streaks[key] = Streak(settings, since=now)
        if streak.failure(now, reached):
            # The open breaker takes over; the entry's window is kept (it closes onto the same record, so a flaky
            # entry's failure rate still says how long a run must be), only the run starts again.
            streak.restart()
            interval = settings.open_secs
            await self._open(key, BreakerRecord(opened_at=now, until=now + interval, interval=interval), "opened")

    async def _open(self, key: str, record: BreakerRecord, transition: Transition) -> None:
        await self.store.open_breaker(key, record)
        self.transitions[(key, transition)] += 1
        self._log(
            key,
            transition,
            record.opened_at,
            "circuit breaker of %s %s for %.1fs: calls skip the entry until one probe finds it healthy",
            key,
            transition,
            record.interval,
        )

    def _log(self, key: str, transition: Transition, now: float, message: str, *args: object) -> None:
        """One warning for a transition of ``key``'s breaker, unless one of its kind was logged in the last interval."""
        kind = (key, transition)
        last = self._logged.get(kind)
        if last is not None and now - last[0] < LOG_INTERVAL_S:
            self._logged[kind] = (last[0], last[1] + 1)
            return
        if last is None and len(self._logged) >= MAX_STREAKS:
            del self._logged[next(iter(self._logged))]
        self._logged[kind] = (now, 0)
        if last is not None and last[1]:
            message += " (%d more like it since the last such line, not logged; see /metrics)"
            args = (*args, last[1])
        log.warning(message, *args)

    def describe(self, now: float) -> list[dict[str, Any]]:
        """Every breaker that is not closed, for ``/status`` and ``turnout status`` (an entry not listed is closed).

        One row per entry, by entry key: ``entry`` (``family.alias/model``), ``profile``, ``model``, ``state``
        (``open``, or ``half_open`` once the open interval is over: the next call probes the entry, or one is
        probing it), ``open_until`` and ``opened_at`` (Unix seconds), ``remaining_seconds`` (0 when half-open) and
        ``interval`` (how long it was opened for).
        """
        return describe_breakers(self.store.breakers(), now)


def describe_breakers(records: Mapping[str, BreakerRecord], now: float) -> list[dict[str, Any]]:
    """The rows of :meth:`Breakers.describe` for open breaker records (as a state store lists them)."""
    rows = []
    for key, record in sorted(records.items()):
        profile, model = split_entry_key(key)
        rows.append(
            {
                "entry": key,
                "profile": profile,
                "model": model,
                "state": gate(record, now).value,
                "open_until": record.until,
                "remaining_seconds": round(max(0.0, record.until - now), 3),
                "opened_at": record.opened_at,
                "interval": record.interval,
            }
        )
    return rows
