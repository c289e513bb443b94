"""The state-store interface."""

from __future__ import annotations

from abc import ABC, abstractmethod


class StateStore(ABC):
    """Cooldowns (by key: ``family.alias`` or ``family.alias#<key id>``) and dead keys.

    Deadlines are wall-clock Unix seconds so several processes can share them.
    """

    @abstractmethod
    def cooldown_until(self, key: str, now: float) -> float | None:
        """The end of ``key``'s cooldown, or None when it is not cooling down at ``now``."""

    @abstractmethod
    async def set_cooldown(self, key: str, until: float) -> None:
        """Cool ``key`` down until ``until`` (keeps a later existing deadline)."""

    @abstractmethod
    async def clear_cooldown(self, key: str) -> None:
        """End ``key``'s cooldown now."""

    @abstractmethod
    def cooldowns(self, now: float) -> dict[str, float]:
        """Every active cooldown: key → deadline."""

    @abstractmethod
    def is_dead(self, key_id: str) -> bool:
        """Whether a credential was rejected (401/403) and must not be used again."""

    @abstractmethod
    async def mark_dead(self, key_id: str) -> None:
        """Mark a credential dead for the life of the process (or of the shared store)."""

    @abstractmethod
    def dead_keys(self) -> frozenset[str]:
        """Every dead key id."""

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Load the shared state before the first call (a store kept in this process has none to load).

        Bounded in time and never raises: a store that cannot reach its backend goes on with the local view.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections (bounded in time)."""
