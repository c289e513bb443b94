"""The Redis store's life cycle: a started store has the shared state; closing never hangs."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest
from redis.asyncio.client import PubSub

from fakes import Fleet, err
from servers import RedisServer, free_port
from turnout import Client
from turnout.state.redis import RedisStore

pytestmark = pytest.mark.redis

CONFIG = """
default_provider = "openai.main"
[providers.models.openai.main]
api_key = "sk-main"
model = "m"
fallback = ["openai.spare"]
[providers.models.openai.spare]
api_key = "sk-spare"
model = "s"
"""


def quick_store(url: str, prefix: str) -> RedisStore:
    """A store with short timeouts, so a Redis that does not answer costs little per round."""
    return RedisStore(url, prefix=prefix, connect_timeout=0.1, command_timeout=0.3)


@contextmanager
def redis_state(server: RedisServer, url: str, state: str) -> Iterator[str]:
    """The URL to use while Redis is ``up``, ``down`` (nothing listens) or ``paused`` (accepts, never answers)."""
    if state == "down":
        yield f"redis://127.0.0.1:{free_port()}/0"
        return
    with server.paused() if state == "paused" else nullcontext():
        yield url


@pytest.mark.slow
@pytest.mark.parametrize("state", ["up", "down", "paused"])
async def test_open_use_close_50_times_each_close_under_2s(
    redis_url: str, redis_server: RedisServer, state: str
) -> None:
    """A Redis-backed client opened, used and closed 50 times closes each time within 2 s, whatever Redis does."""
    prefix = f"lc-{uuid.uuid4().hex[:8]}:"
    slowest = 0.0
    with redis_state(redis_server, redis_url, state) as url:
        for _ in range(50):
            fleet = Fleet(openai__main=[err(429, headers={"retry-after": "5"})], openai__spare=["ok"])
            client = Client.from_toml(CONFIG, ledger=False, store=quick_store(url, prefix), adapter_builder=fleet)
            async with client:
                reply = await client.chat("hi")  # a 429 writes a cooldown: the store is used, not only read
                assert reply.text == "ok"
                t0 = time.monotonic()
            slowest = max(slowest, time.monotonic() - t0)
    assert slowest < 2.0


@pytest.mark.parametrize("race", ["timeout", "swallowed"])
async def test_close_stops_the_loop_when_the_cancellation_is_lost(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, race: str
) -> None:
    """A cancellation lost in the pub/sub read (as on Python 3.11 when it races the read's timeout) still stops it."""
    original = PubSub.get_message
    losing = True

    async def racing(self: PubSub, *args: Any, **kwargs: Any) -> Any:
        try:
            return await original(self, *args, **kwargs)
        except asyncio.CancelledError:
            if not losing:
                raise
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()  # what asyncio.timeout does when it takes the cancellation for its own expiry
            if race == "timeout":
                raise TimeoutError from None
            return None

    monkeypatch.setattr(PubSub, "get_message", racing)
    store = RedisStore(redis_url, prefix="lc-race:")
    await store.start()
    assert store.connected
    closing = asyncio.ensure_future(store.aclose())
    done, _ = await asyncio.wait({closing}, timeout=2.0)  # not wait_for: it would wait for a hung close to end
    if closing not in done:  # let a hung loop go, so the failure is reported rather than hanging the test
        losing = False
        while not closing.done():
            if store._task is not None:
                store._task.cancel()
            await asyncio.wait({closing}, timeout=0.1)
    assert closing in done, "aclose() did not finish within 2 s"
    assert not store.connected


async def test_start_waits_for_the_shared_state(redis_url: str) -> None:
    """After start() a new store's very first read sees a cooldown that another store set."""
    a = RedisStore(redis_url, prefix="lc-start:")
    b = RedisStore(redis_url, prefix="lc-start:")
    try:
        await a.start()
        until = time.time() + 30
        await a.set_cooldown("openai.main", until)
        await b.start()
        assert b.cooldown_until("openai.main", time.time()) == until
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("state", ["down", "paused"])
async def test_start_without_redis_goes_on_with_the_local_view_and_logs_once(
    redis_url: str, redis_server: RedisServer, caplog: pytest.LogCaptureFixture, state: str
) -> None:
    """start() against an unreachable Redis returns within the connect timeout, logs one warning, keeps working."""
    caplog.set_level(logging.WARNING, logger="turnout.state")
    with redis_state(redis_server, redis_url, state) as url:
        store = quick_store(url, "lc-down:")
        try:
            t0 = time.monotonic()
            await store.start()
            assert time.monotonic() - t0 < 1.0
            assert not store.connected
            until = time.time() + 30
            await store.set_cooldown("openai.main", until)  # local only; never raises
            assert store.cooldown_until("openai.main", time.time()) == until
            await store.start()
        finally:
            await store.aclose()
    warnings = [r for r in caplog.records if r.name == "turnout.state"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
