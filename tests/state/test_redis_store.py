"""The Redis state store: cooldowns and dead keys shared between processes, and surviving Redis outages."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from servers import RedisServer
from turnout.cli.main import app
from turnout.state.base import BreakerRecord
from turnout.state.dead_keys import rejected
from turnout.state.redis import RedisStore

pytestmark = pytest.mark.redis


async def kill(store: RedisStore, kid: str) -> None:
    """Two calls report the key rejected: it is dead."""
    await store.report_auth_failure(kid, witness="call-1", now=time.time())
    await store.report_auth_failure(kid, witness="call-2", now=time.time())


def is_dead(store: RedisStore, kid: str) -> bool:
    return [d["key_id"] for d in store.dead_keys(time.time())] == [kid]


async def test_two_stores_share_cooldowns_and_dead_keys(redis_url: str) -> None:
    """A cooldown and a key's rejections set through one store appear in the other's mirror."""
    a, b = RedisStore(redis_url, prefix="t1:"), RedisStore(redis_url, prefix="t1:")
    try:
        await a.start()
        await b.start()
        until = time.time() + 30
        await a.set_cooldown("openai.main", until)
        await kill(a, "deadbeef")
        assert await b.wait_until(lambda: b.cooldown_until("openai.main", time.time()) == until, within=5)
        assert await b.wait_until(lambda: is_dead(b, "deadbeef"), within=5)
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


async def test_the_mirror_follows_another_process_s_cooldowns_and_breakers(redis_url: str) -> None:
    """Another process's cooldown or open breaker reaches this store's mirror, also after a resync; so does its end."""
    a, b = RedisStore(redis_url, prefix="t9:"), RedisStore(redis_url, prefix="t9:")

    def cooling() -> bool:
        return b.cooldown_until("p.q", time.time()) is not None

    def open_breaker() -> bool:
        return b.breaker("p.q/m") is not None

    try:
        await a.start()
        await b.start()
        assert not cooling() and not open_breaker()
        await a.set_cooldown("p.q", time.time() + 30)
        assert await b.wait_until(cooling, within=5)
        await b.sync()  # a resync replaces the mirror's dictionaries
        assert cooling()
        await a.clear_cooldown("p.q")
        assert await b.wait_until(lambda: not cooling(), within=5)
        now = time.time()
        await a.open_breaker("p.q/m", BreakerRecord(opened_at=now, until=now + 30, interval=30))
        assert await b.wait_until(open_breaker, within=5)
        await b.sync()
        assert open_breaker()
        await a.close_breaker("p.q/m")
        assert await b.wait_until(lambda: not open_breaker(), within=5)
        await b.sync()
        assert not open_breaker()
    finally:
        await a.aclose()
        await b.aclose()


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
        await kill(a, "cafebabe")
        assert a.cooldown_until("anthropic.prod", time.time()) == until
        assert await a.wait_until(lambda: not a.connected, within=5)
        assert a.errors >= 1
        redis_server.start()
        assert await a.wait_until(lambda: a.connected, within=10)
        await b.start()
        assert await b.wait_until(lambda: b.cooldown_until("anthropic.prod", time.time()) == until, within=5)
        assert is_dead(b, "cafebabe")
    finally:
        await a.aclose()
        await b.aclose()


async def test_two_processes_each_seeing_one_rejection_confirm_it_between_them(redis_url: str) -> None:
    """One rejection in each of two processes is a confirmation: the shared record is updated atomically."""
    a, b = RedisStore(redis_url, prefix="t5:"), RedisStore(redis_url, prefix="t5:")
    try:
        await a.start()
        await b.start()
        first = await a.report_auth_failure("0badc0de", witness="a-1", now=time.time())
        assert first.strikes == 0
        second = await b.report_auth_failure("0badc0de", witness="b-1", now=time.time())  # b's mirror may lag
        assert second.strikes == 1
        assert await a.wait_until(lambda: is_dead(a, "0badc0de"), within=5)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_probe_taken_in_one_process_is_skipped_by_the_others(redis_url: str) -> None:
    """When a dead key's rest is over, one process takes the probe and the others see it taken."""
    a, b = RedisStore(redis_url, prefix="t6:"), RedisStore(redis_url, prefix="t6:")
    try:
        await a.start()
        await b.start()
        # confirmed two minutes ago: its first rest (a minute) is over, and its first rejection's record, kept in
        # Redis until its confirmation window ends, is still there when the second one confirms it
        past = time.time() - 120
        await a.report_auth_failure("feedf00d", witness="x", now=past)
        await a.report_auth_failure("feedf00d", witness="y", now=past)
        assert await b.wait_until(lambda: b.key_health("feedf00d") is not None, within=5)
        now = time.time()
        assert a.claim_probe("feedf00d", now)
        assert not a.claim_probe("feedf00d", now)
        assert await b.wait_until(lambda: b.dead_keys(time.time())[0]["state"] == "probing", within=5)
        assert not b.claim_probe("feedf00d", time.time())
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_status_shows_dead_keys_with_their_rest(redis_url: str, tmp_path: Path, as_json: bool) -> None:
    """``turnout status`` reads dead keys from Redis and shows each one's state, strikes and rest, by id only."""

    async def confirm() -> None:
        store = RedisStore(redis_url, prefix="t7:")
        try:
            await store.start()
            await kill(store, "a1b2c3d4")
        finally:
            await store.aclose()

    asyncio.run(confirm())
    path = tmp_path / "turnout.toml"
    path.write_text(
        'default_provider = "openai.main"\n[providers.models.openai.main]\napi_key = "sk-never-shown"\nmodel = "m"\n'
        f'[state]\nbackend = "redis"\nurl = "{redis_url}"\nkey_prefix = "t7:"\n'
    )
    args = ["status", "--config", str(path), *(["--json"] if as_json else [])]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "sk-never-shown" not in result.output
    if as_json:
        (dead,) = orjson.loads(result.output)["dead_keys"]
        assert (dead["key_id"], dead["state"], dead["strikes"]) == ("a1b2c3d4", "dead", 1)
        assert 59 < dead["remaining_seconds"] <= 60
    else:
        assert re.search(r"dead key a1b2c3d4  dead  strikes=1  probed in (59|60)s", result.output)


def test_an_older_announcement_does_not_take_a_key_back() -> None:
    """A process hears its own changes announced after it wrote them: an older record arriving late is ignored."""
    store = RedisStore("redis://127.0.0.1:1", prefix="t9:")
    now = time.time()
    suspected = rejected(None, "feedf00d", "x", now - 120)
    dead = rejected(suspected, "feedf00d", "y", now - 120)
    probing = dead.probing(now)
    store._keys["feedf00d"] = probing
    for older in (suspected, dead):
        store._apply(b"key feedf00d " + older.encode())
        assert store._keys["feedf00d"] == probing
    again = rejected(probing, "feedf00d", "z", now)  # the probe rejected: a longer rest
    store._apply(b"key feedf00d " + again.encode())
    assert store._keys["feedf00d"] == again


def test_a_key_that_recovered_takes_any_announcement() -> None:
    """Once a key's record has ended (its probe's lease over), a new first rejection replaces it."""
    store = RedisStore("redis://127.0.0.1:1", prefix="t9:")
    now = time.time()
    dead = rejected(rejected(None, "feedf00d", "x", now - 7200), "feedf00d", "y", now - 7200)
    store._keys["feedf00d"] = dead.probing(now - 3600)  # probed an hour ago, never rejected again: recovered
    fresh = rejected(None, "feedf00d", "w", now)
    store._apply(b"key feedf00d " + fresh.encode())
    assert store._keys["feedf00d"] == fresh
