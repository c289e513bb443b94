"""Key pools and rotation: every attempt is bound to one concrete credential.

A profile's pool rotates round-robin over its keys, skipping dead keys (rejected with 401/403) and keys
cooling down after a rate limit. With more than one key, a rate limit cools down that key alone (cooldown
key ``family.alias#<key id>``) and the retry uses the next key; the profile itself cools down only when no
key is left. Keys are never stored in the state store or logs: only their ids (SHA-256 prefixes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnout.config.secrets import key_id
from turnout.state.base import StateStore


@dataclass(frozen=True, slots=True)
class KeyChoice:
    """The credential chosen for one attempt: its position in the pool and its id (None without a key)."""

    index: int
    key_id: str | None


class KeyPool:
    """The credentials of one profile, shared by all its entries.

    Args:
        profile: The profile name, ``family.alias``.
        keys: The credentials in rotation order (empty for a keyless profile).
        store: Where cooldowns and dead keys live.
    """

    __slots__ = ("_choices", "_cooldown_keys", "_next", "ids", "profile", "rotates", "store")

    def __init__(self, profile: str, keys: Sequence[str], store: StateStore) -> None:
        self.profile = profile
        self.ids: tuple[str, ...] = tuple(key_id(k) for k in keys)
        self.store = store
        #: Whether there is more than one key to rotate between.
        self.rotates = len(self.ids) > 1
        self._next = 0
        # Built once: a pick returns one of these, and a rate limit cools one of these keys down.
        self._choices = tuple(KeyChoice(i, kid) for i, kid in enumerate(self.ids)) or (KeyChoice(0, None),)
        self._cooldown_keys = {kid: f"{profile}#{kid}" for kid in self.ids}

    def key_cooldown(self, kid: str) -> str:
        """The cooldown key of one credential."""
        return self._cooldown_keys.get(kid) or f"{self.profile}#{kid}"

    def usable(self, index: int, now: float) -> bool:
        """The key at ``index`` is neither dead nor (in a rotating pool) cooling down."""
        kid = self.ids[index]
        if self.store.is_dead(kid):
            return False
        return not (self.rotates and self.store.cooldown_until(self._cooldown_keys[kid], now) is not None)

    def pick(self, now: float) -> KeyChoice | None:
        """The next usable key in rotation order; None when every key is dead or cooling down."""
        n = len(self.ids)
        if n <= 1:
            if n == 0 or not self.store.is_dead(self.ids[0]):
                return self._choices[0]
            return None
        for step in range(n):
            i = (self._next + step) % n
            if self.usable(i, now):
                self._next = (i + 1) % n
                return self._choices[i]
        return None

    def has_usable(self, now: float) -> bool:
        """Whether some key can be used now (without advancing the rotation)."""
        return not self.ids or any(self.usable(i, now) for i in range(len(self.ids)))

    def other_usable(self, index: int, now: float) -> bool:
        """Whether a key other than the one at ``index`` can be used now."""
        return any(self.usable(i, now) for i in range(len(self.ids)) if i != index)

    def other_live(self, index: int) -> bool:
        """Whether a key other than the one at ``index`` is not dead."""
        return any(not self.store.is_dead(kid) for i, kid in enumerate(self.ids) if i != index)

    def soonest_key_free(self, now: float) -> float | None:
        """When the first cooling (not dead) key becomes usable again, if any is cooling."""
        ends = [
            until
            for kid in self.ids
            if not self.store.is_dead(kid)
            and (until := self.store.cooldown_until(self.key_cooldown(kid), now)) is not None
        ]
        return min(ends) if ends else None

    def all_dead(self) -> bool:
        """Every key of the pool was rejected."""
        return bool(self.ids) and all(self.store.is_dead(k) for k in self.ids)
