"""Values kept for a while (kept Responses conversations): the bounded shelf, the memory store and Redis."""

from __future__ import annotations

import pytest

from turnout.state.memory import MemoryStore
from turnout.state.redis import RedisStore
from turnout.state.shelf import Shelf


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_value_is_gone_after_its_ttl() -> None:
    """A value is read until its deadline and is gone at it."""
    clock = Clock()
    shelf = Shelf(clock)
    shelf.put("a", b"one", 10)
    clock.now += 9.9
    assert shelf.get("a") == b"one"
    clock.now += 0.1
    assert shelf.get("a") is None and len(shelf) == 0 and shelf.size == 0


def test_the_least_recently_used_go_first_beyond_the_count() -> None:
    """With three values at most, a fourth drops the one read least recently."""
    shelf = Shelf(Clock(), max_values=3)
    for key in "abc":
        shelf.put(key, key.encode(), 60)
    assert shelf.get("a") == b"a"  # a is now the most recently used
    shelf.put("d", b"d", 60)
    assert [shelf.get(k) for k in "abcd"] == [b"a", None, b"c", b"d"]


def test_the_bytes_are_bounded_and_a_too_large_value_is_not_kept() -> None:
    """Values go, oldest first, until a new one fits the byte bound; one larger than the bound is not kept."""
    shelf = Shelf(Clock(), max_bytes=10)
    shelf.put("a", b"12345", 60)
    shelf.put("b", b"12345", 60)
    shelf.put("c", b"123", 60)
    assert shelf.get("a") is None and shelf.get("b") == b"12345" and shelf.get("c") == b"123"
    assert shelf.size == 8
    shelf.put("huge", b"x" * 11, 60)
    assert shelf.get("huge") is None and shelf.size == 8
    shelf.put("b", b"1", 60)  # replacing a value frees its bytes
    assert shelf.size == 4


async def test_the_memory_store_keeps_values_on_its_clock() -> None:
    """MemoryStore.keep / kept: a value until its TTL on the store's clock."""
    clock = Clock()
    store = MemoryStore(clock)
    await store.keep("k", b"v", 5)
    assert await store.kept("k") == b"v"
    clock.now += 5
    assert await store.kept("k") is None


@pytest.mark.redis
async def test_redis_shares_kept_values_between_stores_and_expires_them(redis_url: str) -> None:
    """A value one store keeps is read by another store on the same Redis, which holds it for its TTL."""
    a, b = RedisStore(redis_url, prefix="kept1:"), RedisStore(redis_url, prefix="kept1:")
    try:
        await a.start()
        await b.start()
        await a.keep("conv", b"items", 60)
        assert await b.kept("conv") == b"items"
        assert await b.kept("missing") is None
        ttl_ms = await a._client().pttl("kept1:kept:conv")  # Redis expires it on its own clock
        assert 59_000 < ttl_ms <= 60_000
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.redis
async def test_without_redis_a_value_is_kept_in_the_process(redis_server: object) -> None:
    """While Redis is unreachable, keep and kept use the process's own bounded copy."""
    store = RedisStore("redis://127.0.0.1:1/0", prefix="kept2:", connect_timeout=0.2)
    try:
        await store.start()
        await store.keep("conv", b"items", 60)
        assert await store.kept("conv") == b"items"
    finally:
        await store.aclose()
