"""Headroom in the key pool: a used-up key cools down before its 429, and rotation avoids short keys."""

from __future__ import annotations

import logging

import pytest

from fakes import FakeClock
from turnout.core.secrets import key_id
from turnout.providers.headroom import HeadroomBook
from turnout.state import MemoryStore
from turnout.walk.keys import KeyPool

KEYS = ("sk-key-a-0001", "sk-key-b-0002", "sk-key-c-0003")
A, B, C = (key_id(k) for k in KEYS)
CAP = 60.0


def pool_of(*keys: str, clock: FakeClock | None = None, store: MemoryStore | None = None) -> KeyPool:
    """A pool over ``keys`` with a headroom book, on a fake clock."""
    clock = clock if clock is not None else FakeClock()
    store = store if store is not None else MemoryStore()
    return KeyPool("openai.main", list(keys), store, clock, book=HeadroomBook("openai.main", max_cooldown=CAP))


def left(requests: int, *, limit: int = 100, reset: str | None = "30s") -> dict[str, str]:
    """OpenAI-style headers announcing ``requests`` left of ``limit``."""
    headers = {"x-ratelimit-remaining-requests": str(requests), "x-ratelimit-limit-requests": str(limit)}
    if reset is not None:
        headers["x-ratelimit-reset-requests"] = reset
    return headers


async def cool(pool: KeyPool, kid: str | None, headers: dict[str, str]) -> None:
    """Hand ``headers`` to the pool, which must answer with a cooldown to write; write it."""
    cooling = pool.observe(kid, headers)
    assert cooling is not None
    await cooling


def picks(pool: KeyPool, n: int, now: float) -> list[str | None]:
    """The key ids of ``n`` successive picks."""
    out = []
    for _ in range(n):
        choice = pool.pick(now)
        out.append(choice.key_id if choice is not None else None)
    return out


def test_rotation_is_round_robin_when_nothing_is_known() -> None:
    """Without any reading the pool rotates over every key, as before."""
    pool = pool_of(*KEYS)
    assert picks(pool, 4, FakeClock.now) == [A, B, C, A]


def test_a_key_short_of_headroom_is_passed_over_while_others_have_room() -> None:
    """A key with less than a tenth of its budget left is avoided; the others share the calls round robin."""
    pool = pool_of(*KEYS)
    now = pool.clock()
    assert pool.observe(A, left(5)) is None  # short, not used up: no cooldown, only avoided
    assert picks(pool, 4, now) == [B, C, B, C]
    assert pool.observe(B, left(50)) is None  # plenty: B keeps its turn
    assert picks(pool, 2, now) == [B, C]


def test_when_every_usable_key_is_short_rotation_goes_on_among_them() -> None:
    """Short keys still serve when no key has more: the pool never refuses a usable key for want of headroom."""
    pool = pool_of(*KEYS[:2])
    now = pool.clock()
    pool.observe(A, left(3))
    pool.observe(B, left(4))
    assert picks(pool, 3, now) == [A, B, A]


def test_a_short_key_returns_to_rotation_when_its_budget_refills() -> None:
    """The mark lasts until the announced reset; an answer with room clears it at once."""
    clock = FakeClock()
    pool = pool_of(*KEYS[:2], clock=clock)
    pool.observe(A, left(1, reset="10s"))
    assert picks(pool, 2, clock.now + 9) == [B, B]
    assert picks(pool, 2, clock.now + 10) == [A, B]
    pool.observe(A, left(1, reset="10s"))
    pool.observe(A, left(90))
    assert picks(pool, 2, clock.now) == [A, B]


async def test_a_used_up_key_cools_down_until_its_reset_and_the_next_key_serves() -> None:
    """No requests left: that key (not the profile) cools down until the reset, so no call on it earns a 429."""
    clock = FakeClock()
    store = MemoryStore()
    pool = pool_of(*KEYS[:2], clock=clock, store=store)
    await cool(pool, A, left(0, reset="12s"))
    assert store.cooldowns(clock.now) == {pool.key_cooldown(A): clock.now + 12}
    assert picks(pool, 2, clock.now + 11.9) == [B, B]
    assert picks(pool, 2, clock.now + 12) == [A, B]  # refilled: back in rotation


async def test_the_cooldown_is_capped_like_the_walks_and_never_shortens_a_longer_one() -> None:
    """A reset far away cools for at most the cap; an existing later deadline (a 429's) is kept."""
    clock = FakeClock()
    store = MemoryStore()
    pool = pool_of(*KEYS[:2], clock=clock, store=store)
    await cool(pool, A, left(0, reset="6m0s"))
    assert store.cooldown_until(pool.key_cooldown(A), clock.now) == clock.now + CAP
    await store.set_cooldown(pool.key_cooldown(B), clock.now + 50)
    await cool(pool, B, left(0, reset="5s"))
    assert store.cooldown_until(pool.key_cooldown(B), clock.now) == clock.now + 50


@pytest.mark.parametrize("keys", [KEYS[:1], ()], ids=["single key", "keyless"])
async def test_a_profile_without_a_rotating_pool_cools_the_profile(keys: tuple[str, ...]) -> None:
    """With one key or none, the cooldown key is the profile's (``family.alias``), as a 429 would set."""
    clock = FakeClock()
    store = MemoryStore()
    pool = pool_of(*keys, clock=clock, store=store)
    kid = pool.ids[0] if pool.ids else None
    await cool(pool, kid, left(0, reset="3s"))
    assert store.cooldowns(clock.now) == {"openai.main": clock.now + 3}


def test_a_used_up_budget_with_an_unknown_or_past_reset_sets_no_cooldown() -> None:
    """Without a reset in the future there is no deadline to cool until: an unknown one only avoids the key."""
    pool = pool_of(*KEYS[:2])
    now = pool.clock()
    assert pool.observe(A, left(0, reset=None)) is None
    assert pool.store.cooldowns(now) == {}
    assert picks(pool, 2, now) == [B, B]
    assert pool.observe(A, left(0, reset="0s")) is None  # refilled as it was announced
    assert pool.store.cooldowns(now) == {}
    assert picks(pool, 2, now) == [A, B]


def test_a_pool_without_a_book_ignores_headroom() -> None:
    """A pool built without a book (as before headroom) neither cools nor avoids keys."""
    pool = KeyPool("openai.main", list(KEYS[:2]), MemoryStore(), FakeClock())
    assert pool.observe(A, left(0)) is None
    assert picks(pool, 2, FakeClock.now) == [A, B]


async def test_cooling_a_used_up_key_is_logged_by_key_id_only(caplog: pytest.LogCaptureFixture) -> None:
    """The log line names the profile, the key id and the cooldown, never the key."""
    pool = pool_of(*KEYS[:2])
    with caplog.at_level(logging.INFO, logger="turnout.keys"):
        await cool(pool, A, left(0, reset="7s"))
    assert f"key {A} of profile openai.main has no requests or tokens left" in caplog.text
    assert "7.0s" in caplog.text
    assert all(k not in caplog.text for k in KEYS)
