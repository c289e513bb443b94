"""The in-memory state store (one process)."""

from __future__ import annotations

from turnout.state.base import StateStore
from turnout.state.dead_keys import KeyHealth, rejected


class MemoryStore(StateStore):
    """Cooldowns and rejected keys in dictionaries; expired cooldowns are pruned when read."""

    def __init__(self) -> None:
        self._cooldowns: dict[str, float] = {}
        self._keys: dict[str, KeyHealth] = {}

    def cooldown_until(self, key: str, now: float) -> float | None:
        """See :class:`~turnout.state.base.StateStore`."""
        until = self._cooldowns.get(key)
        if until is None:
            return None
        if until <= now:
            del self._cooldowns[key]
            return None
        return until

    async def set_cooldown(self, key: str, until: float) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        current = self._cooldowns.get(key)
        if current is None or until > current:
            self._cooldowns[key] = until

    async def clear_cooldown(self, key: str) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._cooldowns.pop(key, None)

    def cooldowns(self, now: float) -> dict[str, float]:
        """See :class:`~turnout.state.base.StateStore`."""
        for key in [k for k, v in self._cooldowns.items() if v <= now]:
            del self._cooldowns[key]
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
