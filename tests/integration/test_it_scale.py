"""Scale-out through real HTTP and a real Redis: two ``Client`` instances with separate stores share
cooldowns and dead keys, keep serving while Redis is down, and resume sharing when it returns.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
from it_support import client, config, profile, trail

from servers import RedisServer
from turnout import Client
from turnout.core.secrets import key_id
from turnout.sim import Simulator
from turnout.state.redis import RedisStore

pytestmark = pytest.mark.redis

Clients = Callable[..., Any]


def shared_config(sim: Simulator, redis_url: str, prefix: str, **main: Any) -> dict[str, Any]:
    """openai.main (429 with a 5 s hint unless told otherwise) → openai.spare, state in Redis under ``prefix``."""
    main.setdefault("model", "sim-429-ra5")
    return config(
        {
            "openai.main": profile(sim, "openai", fallback=["openai.spare"], **main),
            "openai.second": profile(sim, "openai", "sim-429-ra6", fallback=["openai.spare"]),
            "openai.spare": profile(sim, "openai", "sim-ok-t2"),
        },
        retries=1,
        state={"backend": "redis", "url": redis_url, "key_prefix": prefix},
    )


@pytest.fixture
async def clients(sim: Simulator, redis_url: str) -> AsyncIterator[Clients]:
    """Builds started clients sharing one Redis (a fresh key prefix per test); closes them afterwards."""
    prefix = f"it-{uuid.uuid4().hex[:8]}:"
    async with AsyncExitStack() as stack:

        async def make(n: int = 2, **main: Any) -> list[Client]:
            made = []
            for _ in range(n):
                c = await stack.enter_async_context(client(shared_config(sim, redis_url, prefix, **main)))
                await store(c).start()
                assert store(c).connected
                made.append(c)
            return made

        yield make


def store(c: Client) -> RedisStore:
    s = c.factory.store
    assert isinstance(s, RedisStore)
    return s


def cooling(s: RedisStore, key: str) -> Callable[[], bool]:
    return lambda: s.cooldown_until(key, time.time()) is not None


async def test_a_429_seen_by_one_client_makes_the_other_skip_the_profile(sim: Simulator, clients: Clients) -> None:
    """One client's 429 cools the profile down for the other: the upstream sees exactly one hit on it."""
    one, two = await clients()
    first = await one.chat("hi")
    assert trail(first.attempts) == [
        ("openai.main", "sim-429-ra5", "rate_limited", 429),
        ("openai.spare", "sim-ok-t2", "ok", None),
    ]
    assert await store(two).wait_until(cooling(store(two), "openai.main"), within=2.0)
    second = await two.chat("hi")
    assert trail(second.attempts) == [
        ("openai.main", "sim-429-ra5", "cooldown_skip", None),
        ("openai.spare", "sim-ok-t2", "ok", None),
    ]
    assert second.attempts[0].retry_after == pytest.approx(5.0, abs=0.5)
    assert set(two.status()["cooldowns"]) == {"openai.main"}
    log = await sim.wait_for_log(3)
    assert [e.model for e in log].count("sim-429-ra5") == 1
    assert [(e.model, e.outcome) for e in log] == [
        ("sim-429-ra5", "status:429"),
        ("sim-ok-t2", "ok"),
        ("sim-ok-t2", "ok"),
    ]


async def test_a_client_started_later_skips_a_shared_cooldown_on_its_first_call(
    sim: Simulator, clients: Clients, redis_url: str
) -> None:
    """``async with Client(...)`` loads the shared state: its very first call skips what another cooled down."""
    (one,) = await clients(1)
    assert [a.outcome for a in (await one.chat("hi")).attempts] == ["rate_limited", "ok"]
    prefix = store(one).prefix
    async with client(shared_config(sim, redis_url, prefix)) as late:  # no explicit start: entering is enough
        first = await late.chat("hi")
    assert trail(first.attempts) == [
        ("openai.main", "sim-429-ra5", "cooldown_skip", None),
        ("openai.spare", "sim-ok-t2", "ok", None),
    ]
    log = await sim.wait_for_log(3)
    assert [e.model for e in log].count("sim-429-ra5") == 1


async def test_a_shared_cooldown_expires_on_time(sim: Simulator, clients: Clients) -> None:
    """A 0.4 s Retry-After cools the profile for 0.4 s in both clients; then both use it again."""
    one, two = await clients(model="sim-429-ra0.4-then-ok")
    hit = time.time()
    await one.chat("hi")
    s2 = store(two)
    assert await s2.wait_until(cooling(s2, "openai.main"), within=2.0)
    until = s2.cooldown_until("openai.main", time.time())
    assert until is not None and hit + 0.3 < until <= time.time() + 0.4
    skipped = await two.chat("hi")
    assert [a.outcome for a in skipped.attempts] == ["cooldown_skip", "ok"]
    await asyncio.sleep(max(until - time.time(), 0.0) + 0.02)  # the behaviour under test is the deadline itself
    again_two = await two.chat("hi")
    again_one = await one.chat("hi")
    for reply in (again_two, again_one):
        assert trail(reply.attempts) == [("openai.main", "sim-429-ra0.4-then-ok", "ok", None)]
    assert two.status()["cooldowns"] == {} and one.status()["cooldowns"] == {}
    log = await sim.wait_for_log(5)
    assert [(e.model, e.outcome) for e in log] == [
        ("sim-429-ra0.4-then-ok", "status:429"),
        ("sim-ok-t2", "ok"),
        ("sim-ok-t2", "ok"),
        ("sim-429-ra0.4-then-ok", "ok"),
        ("sim-429-ra0.4-then-ok", "ok"),
    ]


async def test_a_key_rejected_by_two_clients_is_dead_for_both(sim: Simulator, clients: Clients) -> None:
    """One client's 401 only suspects the key; the other client's 401 confirms it, and neither sends it again."""
    dead, live = "sk-it-dead-0001", "sk-it-live-0002"
    # the upstream answers 401, ok, 401, ok, then ok: what a rejected key and a live one get, two calls running
    one, two = await clients(model="sim-auth-then-ok-then-auth-then-ok", key=None, api_keys=[dead, live])
    first = await one.chat("hi")
    assert [(a.outcome, a.status, a.key_id) for a in first.attempts] == [
        ("non_retryable", 401, key_id(dead)),
        ("ok", None, key_id(live)),
    ]
    s1, s2 = store(one), store(two)
    assert await s2.wait_until(lambda: s2.key_health(key_id(dead)) is not None, within=2.0)
    assert two.status()["dead_keys"] == []
    second = await two.chat("hi")  # another call (another process): the shared record confirms it
    assert [(a.outcome, a.key_id) for a in second.attempts] == [
        ("non_retryable", key_id(dead)),
        ("ok", key_id(live)),
    ]
    assert await s1.wait_until(lambda: one.status()["dead_keys"] != [], within=2.0)
    for c in (one, two):
        (entry,) = c.status()["dead_keys"]
        assert (entry["key_id"], entry["state"], entry["strikes"]) == (key_id(dead), "dead", 1)
    for c in (two, one, two):
        reply = await c.chat("hi")
        assert [(a.outcome, a.key_id) for a in reply.attempts] == [("ok", key_id(live))]
    log = await sim.wait_for_log(7)
    assert [(e.outcome, e.key_id) for e in log] == [
        ("status:401", key_id(dead)),
        ("ok", key_id(live)),
        ("status:401", key_id(dead)),
        ("ok", key_id(live)),
    ] + [("ok", key_id(live))] * 3


async def test_requests_survive_a_redis_outage_and_sharing_resumes(
    sim: Simulator, clients: Clients, redis_server: RedisServer
) -> None:
    """With Redis down every call still succeeds on the local view; once it is back, cooldowns are shared again."""
    one, two = await clients()
    s1, s2 = store(one), store(two)
    try:
        redis_server.stop()
        down_one = await one.chat("hi")
        down_two = await two.chat("hi")
        # each client learns the 429 on its own while nothing is shared
        for reply in (down_one, down_two):
            assert [(a.provider, a.outcome) for a in reply.attempts] == [
                ("openai.main", "rate_limited"),
                ("openai.spare", "ok"),
            ]
        assert not s1.connected and s1.errors > 0
    finally:
        redis_server.start()
    assert await s1.wait_until(lambda: s1.connected, within=5.0)
    assert await s2.wait_until(lambda: s2.connected, within=5.0)

    # sharing resumes: a new 429 in one client is skipped by the other
    first = await one.chat("hi", provider="openai.second")
    assert [a.outcome for a in first.attempts] == ["rate_limited", "ok"]
    assert await s2.wait_until(cooling(s2, "openai.second"), within=2.0)
    second = await two.chat("hi", provider="openai.second")
    assert trail(second.attempts) == [
        ("openai.second", "sim-429-ra6", "cooldown_skip", None),
        ("openai.spare", "sim-ok-t2", "ok", None),
    ]
    # what was learned during the outage was written back: a client started now skips openai.main at once
    (late,) = await clients(1)
    assert [a.outcome for a in (await late.chat("hi")).attempts] == ["cooldown_skip", "ok"]

    log = await sim.wait_for_log(8)
    assert [e.model for e in log].count("sim-429-ra5") == 2  # once per client during the outage, never after
    assert [e.model for e in log].count("sim-429-ra6") == 1
