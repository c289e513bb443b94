"""The in-memory state store (one process)."""

from __future__ import annotations

import time
from collections.abc import Callable

from turnout.state.base import BreakerRecord, StateStore
from turnout.state.dead_keys import KeyHealth, rejected
from turnout.state.pins import Pin, PinTable
from turnout.state.shelf import Shelf


class MemoryStore(StateStore):
    """Cooldowns, rejected keys, open breakers and pins in dictionaries; expired ones are pruned when read.

    Kept values are on a bounded :class:`~turnout.state.shelf.Shelf`.

    Args:
        clock: Wall-clock seconds (when kept values expire).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._shelf = Shelf(clock)
        self._cooldowns: dict[str, float] = {}
        self._since: dict[str, float] = {}
        self._keys: dict[str, KeyHealth] = {}
        self._breakers: dict[str, BreakerRecord] = {}
        self._probes: dict[str, float] = {}
        self._pins = PinTable()

    def cooldown_until(self, key: str, now: float) -> float | None:
        """See :class:`~turnout.state.base.StateStore`."""
        until = self._cooldowns.get(key)
        if until is None:
            return None
        if until <= now:
            del self._cooldowns[key]
            self._since.pop(key, None)
            return None
        return until

    async def set_cooldown(self, key: str, until: float, *, since: float | None = None) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        current = self._cooldowns.get(key)
        if current is None or until > current:
            self._cooldowns[key] = until
            if current is None or (since is not None and current <= since):  # a new cooldown (an extended one
                if since is None:  # keeps its start)
                    self._since.pop(key, None)
                else:
                    self._since[key] = since

    def cooldown_since(self, key: str) -> float | None:
        """See :class:`~turnout.state.base.StateStore`."""
        return self._since.get(key) if key in self._cooldowns else None

    async def clear_cooldown(self, key: str) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._cooldowns.pop(key, None)
        self._since.pop(key, None)

    def cooldowns(self, now: float) -> dict[str, float]:
        """See :class:`~turnout.state.base.StateStore`."""
        for key in [k for k, v in self._cooldowns.items() if v <= now]:
            del self._cooldowns[key]
            self._since.pop(key, None)
        return dict(self._cooldowns)

    def key_health(self, key_id: str) -> KeyHealth | None:
        """See :class:`~turnout.state.base.StateStore`."""
        return self._keys.get(key_id)

    async def report_auth_failure(self, key_id: str, *, witness: str, now: float) -> KeyHealth:
        """See :class:`~turnout.state.base.StateStore`."""
        health = self._keys[key_id] = rejected(self._keys.get(key_id), key_id, witness, now)
        return health

    def claim_probe(self, key_id: str, now: float) -> bool:
        """See :class:`~turnout.state.base.StateStore`."""
        health = self._keys.get(key_id)
        if health is None or health.state(now) != "probe_due":
            return False
        self._keys[key_id] = health.probing(now)
        return True

    def key_records(self) -> list[KeyHealth]:
        """See :class:`~turnout.state.base.StateStore`."""
        return list(self._keys.values())

    def breaker(self, key: str) -> BreakerRecord | None:
        """See :class:`~turnout.state.base.StateStore`."""
        return self._breakers.get(key)

    async def open_breaker(self, key: str, record: BreakerRecord) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._breakers[key] = record
        self._probes.pop(key, None)

    async def close_breaker(self, key: str) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._breakers.pop(key, None)
        self._probes.pop(key, None)

    async def claim_breaker_probe(self, key: str, now: float, hold: float) -> bool:
        """See :class:`~turnout.state.base.StateStore`."""
        if self._probes.get(key, 0.0) > now:
            return False
        self._probes[key] = now + hold
        return True

    def breakers(self) -> dict[str, BreakerRecord]:
        """See :class:`~turnout.state.base.StateStore`."""
        return dict(self._breakers)

    def pinned(self, key: str, now: float, renew: float | None = None) -> Pin | None:
        """See :class:`~turnout.state.base.StateStore`."""
        return self._pins.get(key, now, None if renew is None else now + renew)

    def pin(self, key: str, pin: Pin, *, now: float, ttl: float) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._pins.put(key, pin, now + ttl, now)

    def pin_counts(self, now: float) -> dict[str, int]:
        """See :class:`~turnout.state.base.StateStore`."""
        return self._pins.counts(now)

    def limit_pins(self, limit: int) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._pins.limit = limit

    async def keep(self, key: str, value: bytes, ttl: float) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._shelf.put(key, value, ttl)

    async def kept(self, key: str) -> bytes | None:
        """See :class:`~turnout.state.base.StateStore`."""
        return self._shelf.get(key)
