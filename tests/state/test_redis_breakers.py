"""Circuit breakers shared through Redis: one process's open breaker is every process's, and one probe is sent."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from fakes import E, Scripted, err, req, walk
from turnout.cli.main import app
from turnout.core.attribution import DispatchScope
from turnout.state.base import BreakerRecord
from turnout.state.redis import RedisStore
from turnout.walk.breakers import Breakers

pytestmark = pytest.mark.redis


async def test_an_open_breaker_is_seen_by_another_process_on_its_first_call(redis_url: str) -> None:
    """Process A's three calls failing on the primary open its breaker; process B, started after, skips it at once."""
    a, b = RedisStore(redis_url, prefix="br1:"), RedisStore(redis_url, prefix="br1:")
    try:
        await a.start()
        primary_a, backup_a = Scripted(err(503)), Scripted("ok")
        walk_a = walk(E("openai.a", "m", [primary_a]), E("anthropic.b", "m", [backup_a]), store=a, breakers=Breakers(a))
        # the record's deadlines are wall-clock, shared with B
        walk_a.context = replace(walk_a.context, env=replace(walk_a.context.env, clock=time.time))
        for _ in range(3):  # one signal per call: the third failed call opens it
            await walk_a.run(req(), "m", None, DispatchScope())
        assert a.breaker("openai.a/m") is not None
        await b.start()  # a new process: the first synchronisation brings the open breaker
        primary_b, backup_b = Scripted("never"), Scripted("ok")
        walk_b = walk(E("openai.a", "m", [primary_b]), E("anthropic.b", "m", [backup_b]), store=b, breakers=Breakers(b))
        walk_b.context = replace(walk_b.context, env=replace(walk_b.context.env, clock=time.time))
        scope = DispatchScope()
        await walk_b.run(req(), "m", None, scope)
        assert [(x.provider, x.outcome) for x in scope.attempts] == [
            ("openai.a", "breaker_skip"),
            ("anthropic.b", "ok"),
        ]
        assert primary_b.calls == []
    finally:
        await a.aclose()
        await b.aclose()


async def test_n_processes_claim_one_probe_between_them(redis_url: str) -> None:
    """Five stores race for the probe of a half-open breaker: exactly one wins; after it reports, it is closed."""
    stores = [RedisStore(redis_url, prefix="br2:") for _ in range(5)]
    try:
        for s in stores:
            await s.start()
        now = time.time()
        await stores[0].open_breaker("openai.a/m", BreakerRecord(opened_at=now - 10, until=now - 5, interval=5.0))
        assert await stores[4].wait_until(lambda: stores[4].breaker("openai.a/m") is not None, within=5)
        won = await asyncio.gather(*(s.claim_breaker_probe("openai.a/m", now, 30.0) for s in stores))
        assert sorted(won) == [False] * 4 + [True]
        winner = stores[won.index(True)]
        await winner.close_breaker("openai.a/m")
        for s in stores:
            assert await s.wait_until(lambda s=s: s.breaker("openai.a/m") is None, within=5)
        # closed, the next outage's probe can be taken again
        await stores[1].open_breaker("openai.a/m", BreakerRecord(opened_at=now, until=now, interval=5.0))
        assert await stores[2].claim_breaker_probe("openai.a/m", now, 30.0)
    finally:
        for s in stores:
            await s.aclose()


async def test_a_probe_claimed_while_redis_is_down_is_taken_locally(redis_server: object) -> None:
    """Without Redis the store still hands out one probe per lease in its own process."""
    store = RedisStore("redis://127.0.0.1:1/0", prefix="br3:", connect_timeout=0.2)
    try:
        await store.start()
        now = time.time()
        assert await store.claim_breaker_probe("x.y/m", now, 30.0)
        assert not await store.claim_breaker_probe("x.y/m", now + 1, 30.0)
        assert await store.claim_breaker_probe("x.y/m", now + 31, 30.0)
    finally:
        await store.aclose()


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_status_shows_open_and_half_open_breakers_from_redis(redis_url: str, tmp_path: Path, as_json: bool) -> None:
    """``turnout status`` lists Redis's breakers: open with its time left, or half-open; a client's model escaped."""
    hostile = "m\x1b]0;pwned\x07\nforged-row"

    async def open_two() -> None:
        store = RedisStore(redis_url, prefix="br4:")
        try:
            await store.start()
            now = time.time()
            await store.open_breaker("openai.a/m", BreakerRecord(opened_at=now, until=now + 30, interval=30.0))
            await store.open_breaker(f"openai.b/{hostile}", BreakerRecord(opened_at=now - 9, until=now - 4, interval=5))
        finally:
            await store.aclose()

    asyncio.run(open_two())
    path = tmp_path / "turnout.toml"
    path.write_text(
        'default_provider = "openai.a"\n[providers.models.openai.a]\napi_key = "sk-never-shown"\nmodel = "m"\n'
        f'[state]\nbackend = "redis"\nurl = "{redis_url}"\nkey_prefix = "br4:"\n'
    )
    result = CliRunner().invoke(app, ["status", "--config", str(path), *(["--json"] if as_json else [])])
    assert result.exit_code == 0, result.output
    if as_json:
        first, second = orjson.loads(result.output)["breakers"]
        assert (first["entry"], first["profile"], first["model"]) == ("openai.a/m", "openai.a", "m")
        assert first["state"] == "open"
        assert 29 < first["remaining_seconds"] <= 30 and first["interval"] == 30.0
        assert (second["profile"], second["model"], second["state"]) == ("openai.b", hostile, "half_open")
        assert second["remaining_seconds"] == 0.0
    else:
        assert re.search(r"breaker  openai\.a/m  open  (29\.\d|30\.0)s left \(opened for 30s\)", result.output)
        assert "breaker  openai.b/m\\x1b]0;pwned\\x07\\nforged-row  half-open  the next call probes it" in result.output
        assert "\x1b" not in result.output and "\nforged-row" not in result.output
