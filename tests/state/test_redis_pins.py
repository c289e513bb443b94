"""Conversations' pins shared through Redis: another process sends a conversation to the same member."""

from __future__ import annotations

import pytest

from turnout.state.pins import Pin
from turnout.state.redis import RedisStore

pytestmark = pytest.mark.redis


async def test_a_pin_made_by_one_process_is_followed_by_another(redis_url: str) -> None:
    """A pins a conversation; B hears it and answers the same pin; a move by B reaches A; the key expires in Redis."""
    a, b = RedisStore(redis_url, prefix="aff1:"), RedisStore(redis_url, prefix="aff1:")
    try:
        await a.start()
        await b.start()
        now = a.clock()
        a.pin("p:conv", Pin("openai.east", 1), now=now, ttl=300.0)
        assert await b.wait_until(lambda: b.pinned("p:conv", b.clock()) is not None, 2.0)
        assert b.pinned("p:conv", b.clock()) == Pin("openai.east", 1)
        b.pin("p:conv", Pin("azure.west", 0), now=b.clock(), ttl=300.0)
        assert await a.wait_until(lambda: a.pinned("p:conv", a.clock()) == Pin("azure.west", 0), 2.0)
        ttl = await a._client().pttl("aff1:aff:p:conv")
        assert 0 < ttl <= 300_000
        assert a.pin_counts(a.clock()) == {"azure.west": 1}
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_malformed_announcement_is_ignored(redis_url: str) -> None:
    """A pin message that does not parse (or has expired) changes nothing in the mirror."""
    store = RedisStore(redis_url, prefix="aff2:")
    try:
        store._apply("aff nonsense p:x")
        store._apply("aff 1,openai.a@1.0 p:y")  # its deadline is long past
        store._apply("aff x,openai.a@9999999999 p:z")
        assert store.pin_counts(store.clock()) == {}
    finally:
        await store.aclose()
