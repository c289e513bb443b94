"""The Redis state store: cooldowns and dead keys shared between processes, and surviving Redis outages."""

from __future__ import annotations

import time

import pytest

from servers import RedisServer
from turnout.state.redis import RedisStore

pytestmark = pytest.mark.redis


async def test_two_stores_share_cooldowns_and_dead_keys(redis_url: str) -> None:
    """A cooldown and a dead key set through one store appear in the other's mirror."""
    a, b = RedisStore(redis_url, prefix="t1:"), RedisStore(redis_url, prefix="t1:")
    try:
        await a.start()
        await b.start()
        until = time.time() + 30
        await a.set_cooldown("openai.main", until)
        await a.mark_dead("deadbeef")
        assert await b.wait_until(lambda: b.cooldown_until("openai.main", time.time()) == until, within=5)
        assert await b.wait_until(lambda: b.is_dead("deadbeef"), within=5)
        assert b.cooldowns(time.time()) == {"openai.main": until}
    finally:
        await a.aclose()
        await b.aclose()


async def test_cooldown_expires_with_redis_ttl(redis_url: str) -> None:
    """A cooldown ends on time: the Redis key expires and the mirror drops it."""
    a = RedisStore(redis_url, prefix="t2:")
    try:
        await a.start()
        await a.set_cooldown("p.q", time.time() + 0.2)
        import redis.asyncio as aioredis

        r = aioredis.from_url(redis_url)
        ttl = await r.pttl("t2:cd:p.q")
        await r.aclose()
        assert 0 < ttl <= 200
        assert a.cooldown_until("p.q", time.time() + 0.25) is None
    finally:
        await a.aclose()


async def test_later_deadline_wins(redis_url: str) -> None:
    """Setting an earlier deadline never shortens an existing cooldown."""
    a, b = RedisStore(redis_url, prefix="t3:"), RedisStore(redis_url, prefix="t3:")
    try:
        await a.start()
        await b.start()
        far = time.time() + 50
        await a.set_cooldown("x.y", far)
        await b.sync()
        await b.set_cooldown("x.y", time.time() + 5)
        await a.sync()
        assert a.cooldown_until("x.y", time.time()) == far
    finally:
        await a.aclose()
        await b.aclose()


async def test_redis_outage_keeps_working_then_resumes(redis_url: str, redis_server: RedisServer) -> None:
    """With Redis down writes stay local and nothing raises; when it returns the local state is shared."""
    a = RedisStore(redis_url, prefix="t4:")
    b = RedisStore(redis_url, prefix="t4:")
    try:
        await a.start()
        redis_server.stop()
        until = time.time() + 30
        await a.set_cooldown("anthropic.prod", until)  # must not raise
        await a.mark_dead("cafebabe")
        assert a.cooldown_until("anthropic.prod", time.time()) == until
        assert await a.wait_until(lambda: not a.connected, within=5)
        assert a.errors >= 1
        redis_server.start()
        assert await a.wait_until(lambda: a.connected, within=10)
        await b.start()
        assert await b.wait_until(lambda: b.cooldown_until("anthropic.prod", time.time()) == until, within=5)
        assert b.is_dead("cafebabe")
    finally:
        await a.aclose()
        await b.aclose()
