"""A bounded shelf of values that expire: what a state store keeps in this process for a while.

The gateway's kept Responses conversations live here with the memory backend (and, with Redis, as the local copy
used while Redis is unreachable). It holds at most :data:`MAX_VALUES` values and :data:`MAX_BYTES` bytes; the
least recently used go first when a new value would pass either bound, and an expired value is gone when read.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

#: The most values a shelf holds.
MAX_VALUES = 10_000
#: The most bytes of values a shelf holds.
MAX_BYTES = 64 * 1024 * 1024


class Shelf:
    """Values by key, each until its deadline, least recently used dropped first beyond the bounds.

    Args:
        clock: Wall-clock seconds.
        max_values: The most values held.
        max_bytes: The most bytes held (a value larger than this is not kept).
    """

    def __init__(
        self, clock: Callable[[], float] = time.time, *, max_values: int = MAX_VALUES, max_bytes: int = MAX_BYTES
    ) -> None:
        self._clock = clock
        self._max_values = max_values
        self._max_bytes = max_bytes
        self._values: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._values)

    @property
    def size(self) -> int:
        """The bytes held."""
        return self._bytes

    def put(self, key: str, value: bytes, ttl: float) -> None:
        """Keep ``value`` under ``key`` for ``ttl`` seconds (replacing what it held)."""
        self._drop(key)
        if len(value) > self._max_bytes or ttl <= 0:
            return
        while self._values and (len(self._values) >= self._max_values or self._bytes + len(value) > self._max_bytes):
            _, (old, _) = self._values.popitem(last=False)
            self._bytes -= len(old)
        self._values[key] = (value, self._clock() + ttl)
        self._bytes += len(value)

    def get(self, key: str) -> bytes | None:
        """The value under ``key``, or None when there is none or it expired."""
        held = self._values.get(key)
        if held is None:
            return None
        if held[1] <= self._clock():
            self._drop(key)
            return None
        self._values.move_to_end(key)
        return held[0]

    def _drop(self, key: str) -> None:
        held = self._values.pop(key, None)
        if held is not None:
            self._bytes -= len(held[0])
