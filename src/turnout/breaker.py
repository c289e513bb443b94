"""Circuit breakers: an entry that keeps failing is skipped by every call until one probe finds it healthy.

Each entry (profile and model) has a breaker (SPEC 6.7). It counts *health* failures only: an error class
``retryable`` (5xx, 529, resets, refused connections), ``timeout`` (connect, first token, idle) or a stream cut
after output (``stream_interrupted``). Client errors, context-window errors, refusals and rate limits (which
have their own cooldown) never count, and a success ends a streak.

- **Closed**: calls go through. The breaker opens after ``failures`` consecutive health failures, or when at
  least ``min_attempts`` tries in the last ``window_secs`` (counted from the first failure in it) failed at a
  rate of ``failure_rate`` or more.
- **Open**: calls skip the entry at no cost, recorded as a ``breaker_skip`` attempt, until ``open_secs`` have
  passed.
- **Half-open**: the first call to claim the probe tries the entry once while the others keep skipping it. A
  success closes the breaker; a failure opens it again for twice the interval, at most ``max_open_secs``.

Counting is per process; the open state and the probe are shared through the state store, so with Redis one
process's open breaker is every process's and N workers send one probe between them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerSettings:
    """When a breaker opens and for how long (``[reliability.breaker]``, overridable per profile).

    Attributes:
        enabled: Whether the entry has a breaker.
        failures: Consecutive health failures that open it.
        window_secs: The window over which the failure rate is counted.
        min_attempts: Tries in the window before the rate counts.
        failure_rate: The share of failed tries in the window that opens it.
        open_secs: How long it first stays open.
        max_open_secs: The longest it stays open (the interval doubles after each failed probe).
    """

    enabled: bool = True
    failures: int = 3
    window_secs: float = 30.0
    min_attempts: int = 10
    failure_rate: float = 0.5
    open_secs: float = 5.0
    max_open_secs: float = 60.0

    def next_interval(self, interval: float) -> float:
        """The open interval after a failed probe of a breaker that was open for ``interval``."""
        return min(max(interval, self.open_secs) * 2, self.max_open_secs)


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerRecord:
    """An open breaker, as the state store keeps it.

    Attributes:
        opened_at: When it (last) opened (Unix seconds).
        until: When a probe may try the entry again.
        interval: How long it stays open this time (doubles after a failed probe).
    """

    opened_at: float
    until: float
    interval: float

    def encode(self) -> str:
        """The record as a shared store keeps it: ``"opened_at until interval"``."""
        return f"{self.opened_at!r} {self.until!r} {self.interval!r}"

    @classmethod
    def decode(cls, text: str | bytes | None) -> BreakerRecord | None:
        """A record from :meth:`encode`'s form (None for anything else)."""
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        try:
            opened_at, until, interval = (float(part) for part in (text or "").split(" "))
        except ValueError:
            return None
        return cls(opened_at=opened_at, until=until, interval=interval)


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
    """One entry's recent health in this process: the failure streak and the tries of the last window."""

    __slots__ = ("_tries", "failures", "settings")

    def __init__(self, settings: BreakerSettings) -> None:
        self.settings = settings
        self.failures = 0
        self._tries: deque[tuple[float, bool]] = deque()

    def success(self, now: float) -> None:
        """A healthy answer: the streak ends.

        The rate is counted over the tries since the first failure still in the window, so a breaker that saw
        no failure lately records nothing (the healthy path stays free).
        """
        self.failures = 0
        if self._tries:
            self._note(now, False)

    def failure(self, now: float) -> bool:
        """A health failure; True when the breaker should open."""
        self.failures += 1
        self._note(now, True)
        s = self.settings
        if self.failures >= s.failures:
            return True
        tries = self._tries
        if len(tries) < s.min_attempts:
            return False
        failed = sum(1 for _, bad in tries if bad)
        return failed >= s.failure_rate * len(tries)

    @property
    def idle(self) -> bool:
        """No failure streak and nothing in the window: the streak has nothing to remember."""
        return self.failures == 0 and not self._tries

    def _note(self, now: float, bad: bool) -> None:
        tries = self._tries
        tries.append((now, bad))
        horizon = now - self.settings.window_secs
        while tries and tries[0][0] < horizon:
            tries.popleft()
