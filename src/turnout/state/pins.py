"""The affinity table: which pool member (and key) served each conversation last, bounded and expiring.

A conversation's pin lives ``ttl`` seconds from its last use (a provider keeps a cached prefix about as long
after its last hit); the table holds at most ``limit`` conversations and drops the least recently used first.
Both stores keep one (:class:`~turnout.state.memory.MemoryStore` alone, :class:`~turnout.state.redis.RedisStore`
as the mirror of the shared pins). What a pin means and when one is followed: :mod:`turnout.walk.affinity`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

#: Conversations kept by default (``[reliability.affinity] max_conversations``).
DEFAULT_MAX_CONVERSATIONS = 10_000


@dataclass(frozen=True, slots=True)
class Pin:
    """Where a conversation was served last: the pool member (``family.alias``) and its key's position."""

    member: str
    key: int = 0

    def encode(self) -> str:
        """``"<key> <member>"`` (the shared form)."""
        return f"{self.key} {self.member}"

    @staticmethod
    def decode(value: str | bytes | None) -> Pin | None:
        """The pin of :meth:`encode`'s form; None for anything else (a bounded, hostile-safe parse)."""
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if not isinstance(value, str) or len(value) > 512:
            return None
        key, _, member = value.partition(" ")
        if not member or not key.isdigit() or len(key) > 6:
            return None
        return Pin(member, int(key))


@dataclass(slots=True)
class _Held:
    """A pin in the table and its deadline (not frozen: a renewal moves the deadline in place)."""

    pin: Pin
    until: float


class PinTable:
    """Pins by conversation key, least recently used first, each with its deadline.

    Args:
        limit: The most conversations kept.
    """

    __slots__ = ("_counts", "_pins", "limit")

    def __init__(self, limit: int = DEFAULT_MAX_CONVERSATIONS) -> None:
        self.limit = limit
        self._pins: OrderedDict[str, _Held] = OrderedDict()
        self._counts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._pins)

    def get(self, key: str, now: float, renew: float | None = None) -> Pin | None:
        """The pin of ``key`` while it lives (an expired one is dropped).

        ``renew``: the pin found lives until then, as the most recently used (None: it is left as it is).
        """
        found = self._pins.get(key)
        if found is None:
            return None
        if found.until <= now:
            self._drop(key)
            return None
        if renew is not None:
            found.until = renew
            self._pins.move_to_end(key)
        return found.pin

    def until(self, key: str) -> float | None:
        """The deadline of ``key``'s pin (None: none kept)."""
        found = self._pins.get(key)
        return found.until if found is not None else None

    def put(self, key: str, pin: Pin, until: float, now: float) -> Pin | None:
        """Pin ``key`` until ``until`` as the most recently used; returns the pin it had (None: a new one)."""
        pins = self._pins
        old = pins.pop(key, None)
        if old is not None:
            self._counts[old.pin.member] -= 1
        self._pins[key] = _Held(pin, until)
        self._counts[pin.member] = self._counts.get(pin.member, 0) + 1
        self._prune(now)
        return old.pin if old is not None and old.until > now else None

    def counts(self, now: float) -> dict[str, int]:
        """Live conversations per member."""
        self._prune(now)
        return {member: n for member, n in self._counts.items() if n > 0}

    def _prune(self, now: float) -> None:
        """Drop the expired pins at the old end, then the oldest beyond the limit."""
        pins = self._pins
        while pins:
            key, held = next(iter(pins.items()))
            if held.until > now and len(pins) <= self.limit:
                break
            self._drop(key)

    def _drop(self, key: str) -> None:
        pin = self._pins.pop(key).pin
        self._counts[pin.member] -= 1
