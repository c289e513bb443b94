"""What this process has seen of each entry's speed and load: calls in flight and time to first token.

The walk reports every try it makes (:meth:`EntryStats.started`, :meth:`EntryStats.finished`) and the time to
the first token of each answer (for a non-streaming call: to the whole response). Pools read the calls in
flight and the moving average (``least_busy``, ``latency``); hedging reads the recent median and spread
(``after_ms = "auto"``). Nothing here is shared between processes: each one balances what it sends.
"""

from __future__ import annotations

import math
from collections import deque

#: Weight of the newest time to first token in the moving average.
EWMA_WEIGHT = 0.2
#: How many recent times to first token the median and spread are taken over.
RECENT = 200
#: Fewest times seen before the median and spread are trusted.
MIN_SAMPLES = 20


class EntryStats:
    """One entry's load and speed in this process.

    Attributes:
        in_flight: Tries under way now.
        calls: Tries started since the process began.
        ttft_avg: Moving average of the time to first token, in seconds (None until one was seen).
    """

    __slots__ = ("_recent", "calls", "in_flight", "ttft_avg")

    def __init__(self) -> None:
        self.in_flight = 0
        self.calls = 0
        self.ttft_avg: float | None = None
        self._recent: deque[float] = deque(maxlen=RECENT)

    def started(self) -> None:
        """A try began."""
        self.in_flight += 1
        self.calls += 1

    def finished(self) -> None:
        """A try ended (whatever its outcome)."""
        self.in_flight -= 1

    def first_token(self, seconds: float) -> None:
        """The time to first token of one answer."""
        avg = self.ttft_avg
        self.ttft_avg = seconds if avg is None else avg + EWMA_WEIGHT * (seconds - avg)
        self._recent.append(seconds)

    def spread(self) -> tuple[float, float] | None:
        """``(median, median absolute deviation)`` of the recent times to first token; None with too few of them.

        Both stay where the ordinary answers are while fewer than half of the answers are slow, however slow those
        are: a heavy tail moves neither.
        """
        recent = self._recent
        if len(recent) < MIN_SAMPLES:
            return None
        median = _median(sorted(recent))
        return median, _median(sorted(abs(x - median) for x in recent))


def _median(ordered: list[float]) -> float:
    """The median of sorted values (the lower middle one of an even count)."""
    return ordered[math.ceil(len(ordered) / 2) - 1]


class Stats:
    """Every entry's :class:`EntryStats`, by entry key (``family.alias/model``), made on first use."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, EntryStats] = {}

    def of(self, key: str) -> EntryStats:
        """The stats of the entry ``key``."""
        stats = self._entries.get(key)
        if stats is None:
            stats = self._entries[key] = EntryStats()
        return stats

    def known(self) -> dict[str, EntryStats]:
        """Every entry seen so far."""
        return dict(self._entries)
