"""The in-memory state store (one process)."""

from __future__ import annotations

from turnout.state.base import StateStore


class MemoryStore(StateStore):
    """Cooldowns and dead keys in dictionaries; expired cooldowns are pruned when read."""

    def __init__(self) -> None:
        self._cooldowns: dict[str, float] = {}
        self._dead: set[str] = set()

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

    def is_dead(self, key_id: str) -> bool:
        """See :class:`~turnout.state.base.StateStore`."""
        return key_id in self._dead

    async def mark_dead(self, key_id: str) -> None:
        """See :class:`~turnout.state.base.StateStore`."""
        self._dead.add(key_id)

    def dead_keys(self) -> frozenset[str]:
        """See :class:`~turnout.state.base.StateStore`."""
        return frozenset(self._dead)
