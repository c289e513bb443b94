"""Key pools and rotation: every attempt is bound to one concrete credential.

A profile's pool rotates round-robin over its keys, skipping dead keys and keys cooling down after a rate
limit. With more than one key, a rate limit cools down that key alone (cooldown key
``family.alias#<key id>``) and the retry uses the next key; the profile itself cools down only when no key
is left. Keys are never stored in the state store or logs: only their ids (SHA-256 prefixes).

A key is dead only when another call confirms its rejection, and rests before one request probes it again
(:mod:`turnout.state.dead_keys` decides; the pool reports rejections, hands out the probe and logs both).

Rate-limit headroom: the pool hears what each key's answers say is left (:meth:`KeyPool.observe`,
through the :class:`~turnout.providers.headroom.HeadroomWatch` of the key's adapter). A key with no requests or tokens
left is cooled down until its budget refills, before it earns a 429: its own cooldown in a pool of two or
more, else the profile's. Rotation passes over keys short of headroom while another usable key is not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from turnout.core.secrets import key_id
from turnout.providers.headroom import HeadroomBook, HeadroomWatch
from turnout.state.base import StateStore
from turnout.state.dead_keys import KeyHealth

log = logging.getLogger("turnout.keys")


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
        store: Where cooldowns and key rejections live.
        clock: Wall clock (seconds), the walk's.
        book: The profile's headroom readings (None: the pool neither hears nor uses headroom).
    """

    __slots__ = (
        "_choices",
        "_cooldown_keys",
        "_low",
        "_next",
        "_only",
        "book",
        "clock",
        "ids",
        "profile",
        "rotates",
        "store",
    )

    def __init__(
        self,
        profile: str,
        keys: Sequence[str],
        store: StateStore,
        clock: Callable[[], float] = time.time,
        *,
        book: HeadroomBook | None = None,
    ) -> None:
        self.profile = profile
        self.clock = clock
        self.ids: tuple[str, ...] = tuple(key_id(k) for k in keys)
        self.store = store
        #: Whether there is more than one key to rotate between.
        self.rotates = len(self.ids) > 1
        self._next = 0
        # Built once: a pick returns one of these, and a rate limit cools one of these keys down.
        self._choices = tuple(KeyChoice(i, kid) for i, kid in enumerate(self.ids)) or (KeyChoice(0, None),)
        # A pool that does not rotate (one key, or none: ``""``) picks the same choice every time: found by one read.
        self._only: str | None = None if self.rotates else (self.ids[0] if self.ids else "")
        self._cooldown_keys = {kid: f"{profile}#{kid}" for kid in self.ids}
        self.book = book
        # The book's keys short of headroom (the same dict, kept current by the book); empty without a book.
        self._low: dict[str | None, float] = book.low if book is not None else {}

    def key_cooldown(self, kid: str) -> str:
        """The cooldown key of one credential."""
        return self._cooldown_keys.get(kid) or f"{self.profile}#{kid}"

    def _alive(self, kid: str, now: float) -> bool:
        """Not dead: never rejected, suspected, healthy again, or dead with its probe free to take."""
        health = self.store.key_health(kid)
        return health is None or health.state(now) in ("healthy", "suspected", "probe_due")

    def _take(self, kid: str, health: KeyHealth, now: float) -> bool:
        """Whether this pick may use a key with a rejection record (taking its probe when one is due)."""
        state = health.state(now)
        if state == "probe_due":
            if not self.store.claim_probe(kid, now):
                return False
            log.warning("key %s of profile %s: its rest is over; one request probes it", kid, self.profile)
            return True
        return state in ("healthy", "suspected")

    def usable(self, index: int, now: float) -> bool:
        """The key at ``index`` is neither dead nor (in a rotating pool) cooling down."""
        kid = self.ids[index]
        if not self._alive(kid, now):
            return False
        return not (self.rotates and self.store.cooldown_until(self._cooldown_keys[kid], now) is not None)

    def pick(self, now: float, prefer: int | None = None) -> KeyChoice | None:
        """The next usable key in rotation order; None when every key is dead or cooling down.

        A key short of headroom is passed over while another usable key is not; when every usable key is
        short, rotation goes on among them. ``prefer``: the key that served the call's conversation last
        (:mod:`turnout.walk.affinity`), taken first while it is usable and not short of headroom.
        """
        only = self._only
        if only is not None:  # one key or none (the usual pool: asked once per try)
            if not only:
                return self._choices[0]
            health = self.store.key_health(only)
            if health is None or self._take(only, health, now):
                return self._choices[0]
            return None
        n = len(self.ids)
        low = self._low
        if prefer is not None and 0 <= prefer < n and self.usable(prefer, now):
            kid = self.ids[prefer]
            short = kid in low and self.book is not None and self.book.is_low(kid, now)
            if not short and self._claim(prefer, now):
                return self._choices[prefer]
        passed = -1  # the first usable key passed over for want of headroom
        for step in range(n):
            i = (self._next + step) % n
            if self.usable(i, now):
                if low and self.ids[i] in low and self.book is not None and self.book.is_low(self.ids[i], now):
                    if passed < 0:
                        passed = i
                    continue
                if self._claim(i, now):
                    return self._choices[i]
        if passed >= 0:
            for step in range(n):
                i = (passed + step) % n
                if self.ids[i] in low and self.usable(i, now) and self._claim(i, now):
                    return self._choices[i]
        return None

    def _claim(self, i: int, now: float) -> bool:
        """Take the usable key at ``i`` for this pick (its probe, when one is due) and advance the rotation."""
        kid = self.ids[i]
        health = self.store.key_health(kid)
        if health is not None and not self._take(kid, health, now):
            return False
        self._next = (i + 1) % len(self.ids)
        return True

    def has_usable(self, now: float) -> bool:
        """Whether some key can be used now (without advancing the rotation)."""
        return not self.ids or any(self.usable(i, now) for i in range(len(self.ids)))

    def other_usable(self, index: int, now: float) -> bool:
        """Whether a key other than the one at ``index`` can be used now."""
        return any(self.usable(i, now) for i in range(len(self.ids)) if i != index)

    def other_live(self, index: int, now: float) -> bool:
        """Whether a key other than the one at ``index`` is not dead."""
        return any(self._alive(kid, now) for i, kid in enumerate(self.ids) if i != index)

    def soonest_key_free(self, now: float) -> float | None:
        """When the first cooling (not dead) key becomes usable again, if any is cooling."""
        ends = [
            until
            for kid in self.ids
            if self._alive(kid, now) and (until := self.store.cooldown_until(self.key_cooldown(kid), now)) is not None
        ]
        return min(ends) if ends else None

    def all_dead(self) -> bool:
        """Every key of the pool is dead (rejected and confirmed, resting or probed by another request)."""
        now = self.clock()
        return bool(self.ids) and not any(self._alive(k, now) for k in self.ids)

    def watch(self, kid: str | None) -> HeadroomWatch:
        """The watch an adapter bound to the key ``kid`` (None: keyless) hands its answers' headers to."""
        return HeadroomWatch(kid, self.observe)

    def observe(self, kid: str | None, headers: Mapping[str, str]) -> Awaitable[None] | None:
        """Hear what an answer on key ``kid`` said is left; cool the key down when a budget is used up.

        The cooldown lasts until the budget refills, at most the book's ``max_cooldown``; the store keeps a
        later deadline it already has. Returns the store write to await (None: nothing to write).
        """
        book = self.book
        if book is None:
            return None
        now = self.clock()
        room = book.hear(kid, headers, now)
        until = room.exhausted_until if room is not None else None
        if until is None:
            return None
        until = min(until, now + book.max_cooldown)
        if until <= now:
            return None
        key = self.key_cooldown(kid) if self.rotates and kid is not None else self.profile
        log.info(
            "key %s of profile %s has no requests or tokens left; cooling %s down for %.1fs, until its budget refills",
            kid or "-",
            self.profile,
            key,
            until - now,
        )
        return self.store.set_cooldown(key, until)

    async def report_auth_failure(self, kid: str, *, witness: str) -> None:
        """The provider rejected the key ``kid`` in the call ``witness``: record it, and log what it changed.

        A first rejection makes the key suspected; a rejection from another call makes it dead for a rest,
        after which one request probes it (:mod:`turnout.state.dead_keys`).
        """
        now = self.clock()
        before = self.store.key_health(kid)
        after = await self.store.report_auth_failure(kid, witness=witness, now=now)
        if after == before:
            return
        if after.strikes == 0:
            log.warning(
                "key %s of profile %s was rejected by the provider; it dies if another call confirms it",
                kid,
                self.profile,
            )
        else:
            log.warning(
                "key %s of profile %s is dead (rejected by the provider, %d confirmation(s)); "
                "one request probes it in %.0fs",
                kid,
                self.profile,
                after.strikes,
                max(after.dead_until - now, 0.0),
            )
