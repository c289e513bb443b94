"""Circuit breakers: an entry that keeps failing is skipped by every call until one probe finds it healthy.

Each entry (profile and model) has a breaker. Its inputs are *calls*, not tries: a call that reached the
entry gives one signal, whatever its retries there. The call was *served* (a retry that succeeded counts as a
served call: the entry answered it), or it *failed*: the walk left the entry on a health failure, an error class
``retryable`` (5xx, 529, resets, refused connections), ``timeout`` (connect, first token, idle) or a stream cut after
output (``stream_interrupted``). Client errors, context-window errors, refusals and rate limits (which have their own
cooldown) give no signal.

The rules follow Envoy's outlier detection (consecutive failures, a failure percentage with a request-volume
minimum) and go beyond its fixed streak, which at hundreds of calls a second a flaky entry reaches by chance:

- **Closed**: calls go through. The breaker opens on a *run* of failed calls in a row (a chain: each reached the
  entry after the previous one failed and after the entry's last answer, see :class:`Streak`) that the entry's own
  recent record does not explain: at least ``failures`` of them, and so many that, at the failure rate the entry
  showed over the last ``window_secs`` outside this run, a run that long would come up by chance less than once
  in a hundred windows (:data:`STREAK_CHANCE`; a fresh entry, or one that served every call, opens after
  ``failures``).
  It also opens when at least ``min_calls`` calls in the window failed at a rate of ``failure_rate`` or more. A
  serving entry (one that answers most calls) therefore never opens.
- **Open**: calls skip the entry at no cost, recorded as a ``breaker_skip`` attempt, until ``open_secs`` have
  passed.
- **Half-open**: the first call to claim the probe tries the entry once while the others keep skipping it. A
  success closes the breaker; a failure opens it again for twice the interval, at most ``max_open_secs``.

Counting is per process; the open state and the probe are shared through the state store, so with Redis one
process's open breaker is every process's and N workers send one probe between them. A walk never ejects every
entry: when each is open or cooling down, it tries them all as if closed (the panic rule, :mod:`turnout.walk.walk`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

from turnout.state.base import BreakerRecord

#: How unlikely by chance a run of failed calls must be, at the entry's own recent failure rate, to open its breaker
#: (the run would come up less than once in a hundred windows of the entry's calls).
STREAK_CHANCE = 0.01
#: The window's resolution: it is kept as this many buckets of calls, so its memory is bounded at any call rate.
WINDOW_BUCKETS = 10
#: The longest run kept (a run this long opens any breaker whose ``failures`` is at most this).
MAX_RUN = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerSettings:
    """When a breaker opens and for how long (``[reliability.breaker]``, overridable per profile).

    Attributes:
        enabled: Whether the entry has a breaker.
        failures: The shortest run of failed calls in a row that opens it (longer when the entry's recent record
            makes such a run likely by chance).
        window_secs: The window over which calls are counted.
        min_calls: Calls in the window before the failure rate counts.
        failure_rate: The share of failed calls in the window that opens it (well above a serving entry's).
        open_secs: How long it first stays open.
        max_open_secs: The longest it stays open (the interval doubles after each failed probe).
    """

    enabled: bool = True
    failures: int = 3
    window_secs: float = 30.0
    min_calls: int = 20
    failure_rate: float = 0.8
    open_secs: float = 5.0
    max_open_secs: float = 60.0

    def next_interval(self, interval: float) -> float:
        """The open interval after a failed probe of a breaker that was open for ``interval``."""
        return min(max(interval, self.open_secs) * 2, self.max_open_secs)


class Gate(Enum):
    """What a breaker lets through now."""

    CLOSED = "closed"
    """Calls go through."""
    OPEN = "open"
    """Calls skip the entry."""
    DUE = "half_open"
    """The open interval is over: one call may probe the entry."""


def entry_key(profile: str, model: str) -> str:
    """The key of an entry's breaker: ``family.alias/model`` (the model may hold more slashes; the profile none)."""
    return f"{profile}/{model}"


def split_entry_key(key: str) -> tuple[str, str]:
    """``(profile, model)`` of an :func:`entry_key`."""
    profile, _, model = key.partition("/")
    return profile, model


def gate(record: BreakerRecord | None, now: float) -> Gate:
    """What a breaker in ``record`` (None: closed) lets through at ``now``."""
    if record is None:
        return Gate.CLOSED
    return Gate.OPEN if now < record.until else Gate.DUE


class Streak:
    """One entry's recent health in this process: the run of failed calls, and the calls of the last window.

    Made at the entry's first failure; while it lives, every call that reaches the entry is counted in it (one
    signal per call), in :data:`WINDOW_BUCKETS` buckets of the window (bounded memory at any call rate).

    The run is a chain of failed calls, each of which *reached* the entry after the previous one in the chain
    had failed, and after the entry last served a call. Calls in flight together report out of order (a burst's
    timeouts land together, one timeout after the burst's answers; a burst's fast 503s land before its answers),
    so a run counted in report order, or by arrival alone, sees runs a serving entry never made: a chain counts
    each failure only once what came before it is known. A dead entry's chain grows with every call that follows
    a failure: sequential calls open it on the third; calls in flight together, after three rounds of failures.

    Args:
        settings: The entry's breaker settings.
        since: When the streak is made (the first failure's report): the calls that reached the entry before it,
            whose answers were not recorded (a healthy entry records nothing), do not extend the first failure's
            run, since any of them may have been served.
    """

    __slots__ = ("_buckets", "_failed", "_link", "_run", "_served", "_served_since", "settings")

    def __init__(self, settings: BreakerSettings, since: float = -math.inf) -> None:
        self.settings = settings
        self._run: list[float] = []  # when each failed call of the current run reached the entry
        self._served_since = since  # when the entry last served a call (the answer's time)
        self._link = since  # when the chain's last failure was reported
        self._buckets: deque[list[float]] = deque()  # [start, served, failed]
        self._served = 0
        self._failed = 0

    @property
    def failures(self) -> int:
        """Failed calls in a row (the current run: they reached the entry after its last answer)."""
        return len(self._run)

    def restart(self) -> None:
        """The breaker opened: the run starts again (the window is kept)."""
        self._run.clear()

    def success(self, now: float) -> None:
        """A served call, answered at ``now``: the run ends.

        Counted only while a failure is in the window (served calls matter only against failures), so an entry
        that fails no call records nothing: the healthy path stays free.
        """
        if now >= self._served_since:
            self._served_since = now
        self._run.clear()
        self._expire(now)
        if self._failed:
            self._note(now, 1, 0)
        elif self._buckets:
            self._buckets.clear()
            self._served = 0

    def failure(self, now: float, reached: float | None = None) -> bool:
        """A failed call, which reached the entry at ``reached`` (default ``now``); True when it should open."""
        reached = now if reached is None else reached
        first = not self._buckets  # the failure that made the streak (or the first after its window emptied)
        after = reached >= self._served_since and reached >= self._link  # the same instant counts as after
        if (first or after) and len(self._run) < MAX_RUN:
            self._run.append(reached)
            self._link = now
        self._expire(now)
        self._note(now, 0, 1)
        s = self.settings
        calls = self._served + self._failed
        if calls >= s.min_calls and self._failed >= s.failure_rate * calls:
            return True
        return self.failures >= self.run_needed()

    def run_needed(self) -> int:
        """The run of failed calls that opens the breaker now, by the entry's record outside the current run.

        ``failures`` at least; longer when the entry failed some of its other calls in the window: a run that long
        at that rate comes up by chance less than :data:`STREAK_CHANCE` times per window of calls.
        """
        s = self.settings
        calls = self._served + self._failed
        before = calls - self.failures  # the window's calls outside the current run
        failed_before = self._failed - self.failures
        if before <= 0 or failed_before <= 0:
            return s.failures  # nothing, or only served calls, outside the run: a run is evidence at once
        rate = failed_before / before
        if rate >= 1.0:
            return s.failures
        return max(s.failures, math.ceil(math.log(STREAK_CHANCE / calls) / math.log(rate)))

    @property
    def calls(self) -> int:
        """Calls counted in the window."""
        return self._served + self._failed

    @property
    def idle(self) -> bool:
        """No run of failures and no failure in the window: the streak has nothing to remember."""
        return not self._run and self._failed == 0

    def _expire(self, now: float) -> None:
        """Drop the buckets that left the window."""
        buckets = self._buckets
        horizon = now - self.settings.window_secs
        while buckets and buckets[0][0] <= horizon:
            _, old_served, old_failed = buckets.popleft()
            self._served -= int(old_served)
            self._failed -= int(old_failed)

    def _note(self, now: float, served: int, failed: int) -> None:
        buckets = self._buckets
        if buckets and now < buckets[-1][0] + self.settings.window_secs / WINDOW_BUCKETS:
            bucket = buckets[-1]
            bucket[1] += served
            bucket[2] += failed
        else:
            buckets.append([now, float(served), float(failed)])
        self._served += served
        self._failed += failed
