"""With ``[state] backend = "redis"``: one limit for every host, reconciled with each host's ledger at start-up."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from gateway_support import post
from test_gateway_limits import CHAT, TEAM_KEY, Upstream

from fakes import FakeClock
from turnout import Client
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.shared_spend import RESERVATION_TTL_S, SharedSpend
from turnout.gateway.spend import RPM, TPM, Hold, SpendBook
from turnout.ledger.writer import Ledger

pytestmark = pytest.mark.redis

WORST_USD = 0.0021


def config(ledger: Path, redis_url: str, *, limit: float = 0.05, key: str = "", extra: str = "") -> str:
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n'
        f'[state]\nbackend = "redis"\nurl = "{redis_url}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f"[gateway]\n{extra}"
        f'[gateway.keys.team]\nkey = "{TEAM_KEY}"\ndaily_limit_usd = {limit}\n{key}'
        '[providers.models.openai.main]\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        "pricing = { input = 1.0, output = 1.0 }\n"
    )


@asynccontextmanager
async def host(text: str, upstream: Upstream) -> AsyncIterator[GatewayServer]:
    """A gateway with its own ledger file (a host of its own) over ``upstream``."""
    clock = FakeClock()
    client = Client.from_toml(text, adapter_builder=lambda *_: upstream, env=clock.env, surface="gateway")
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


async def test_two_hosts_share_one_limit_through_redis(tmp_path: Path, redis_url: str) -> None:
    """Two gateways with their own ledgers and one Redis, 20 concurrent calls each, $0.05 limit: what the upstream
    bills stays within the limit plus one call's worst case.
    """
    upstream = Upstream()
    settled = asyncio.Event()
    refused: list[int] = []

    def check() -> None:
        if len(refused) + upstream.arrived >= 40:
            settled.set()

    upstream.on_arrival = check
    async with AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(host(config(tmp_path / f"host{n}.sqlite3", redis_url), upstream))
            for n in range(2)
        ]
        statuses: list[int] = []

        async def one(session: aiohttp.ClientSession, server: GatewayServer) -> None:
            headers = {"Authorization": f"Bearer {TEAM_KEY}"}
            async with session.post(server.url + "/v1/chat/completions", json=CHAT, headers=headers) as resp:
                await resp.read()
                statuses.append(resp.status)
                if resp.status == 429:
                    refused.append(resp.status)
                    check()

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(one(session, s)) for s in servers for _ in range(20)]
            await settled.wait()
            upstream.gate.set()
            await asyncio.gather(*tasks)
    assert upstream.billed_usd <= 0.05 + WORST_USD
    assert statuses.count(200) == upstream.arrived >= 20
    assert statuses.count(429) == 40 - upstream.arrived


async def test_a_restart_reconciles_with_the_ledger_without_counting_twice(tmp_path: Path, redis_url: str) -> None:
    """Spend a host's ledger holds but Redis lost (flushed) is raised back at start-up; spend Redis holds is not
    added again: the limit stays where the ledger says.
    """
    upstream = Upstream()
    upstream.gate.set()
    path = tmp_path / "host.sqlite3"
    text = config(path, redis_url, limit=0.005)
    async with host(text, upstream) as server:
        assert [(await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status for _ in range(2)] == [
            200,
            200,
        ]
    r = aioredis.from_url(redis_url)
    await r.flushall()  # Redis lost the day
    await r.aclose()
    async with host(text, upstream) as server:
        third = await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)
        fourth = await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)
    async with host(text, upstream):  # a restart with Redis intact adds nothing
        pass
    r = aioredis.from_url(redis_url)
    keys = await r.keys("turnout:spend:*:team")
    fields = await r.hvals(keys[0])
    await r.aclose()
    assert (third.status, fourth.status) == (200, 429)
    assert len(keys) == 1 and sum(float(v) for v in fields) == pytest.approx(3 * 0.002)
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT COUNT(*) FROM calls WHERE outcome = 'ok'").fetchone() == (3,)
    finally:
        db.close()


async def test_redis_unreachable_refuses_limited_keys_or_falls_back(tmp_path: Path) -> None:
    """Redis unreachable: limited keys get 503 under ``closed`` and are served under ``open`` (the host's own
    ledger then keeps the limit); unlimited keys are served either way.
    """
    upstream = Upstream()
    upstream.gate.set()
    dead = "redis://127.0.0.1:9/0"
    closed = config(tmp_path / "a.sqlite3", dead, extra='api_keys = ["gw-closed-1"]\n')
    opened = config(tmp_path / "b.sqlite3", dead, extra='on_ledger_failure = "open"\napi_keys = ["gw-open-1"]\n')
    async with host(closed, upstream) as server:
        refused = await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)
        unlimited_closed = await post(server, "/v1/chat/completions", CHAT, key="gw-closed-1")
    async with host(opened, upstream) as server:
        served = await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)
        unlimited = await post(server, "/v1/chat/completions", CHAT, key="gw-open-1")
    assert refused.status == 503 and refused.json()["error"]["code"] == "ledger_unavailable"
    assert unlimited_closed.status == 200
    assert served.status == 200 and unlimited.status == 200


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_rpm_and_tpm_bound_a_key_per_minute(tmp_path: Path, redis_url: str, backend: str) -> None:
    """A key's ``rpm`` requests and ``tpm`` tokens per minute: within a minute the next call is refused, the next
    minute it is admitted again (in Redis for every host, else per process).
    """
    now = [20000 * 86400.0 + 7.0]
    ledger = Ledger(tmp_path / "l.sqlite3", batch_delay=0)
    shared = None
    if backend == "redis":
        shared = SharedSpend(redis_url, prefix="turnout:", ledger_path=ledger.path, clock=lambda: now[0])
    book = SpendBook(ledger, clock=lambda: now[0], shared=shared)
    first = await book.reserve("team", 0.0, 1.0, "c1", rpm=2, tpm=1000)
    second = await book.reserve("team", 0.0, 1.0, "c2", rpm=2, tpm=1000)
    assert isinstance(first, Hold) and isinstance(second, Hold)
    assert await book.reserve("team", 0.0, 1.0, "c3", rpm=2, tpm=1000) == RPM
    book.release(first, 0.001, 1500)
    if shared is not None:
        await shared.settled()  # the settle runs as its own task
    assert await book.reserve("team", 0.0, 1.0, "c4", rpm=5, tpm=1000) == TPM
    now[0] += 60.0
    assert isinstance(await book.reserve("team", 0.0, 1.0, "c5", rpm=2, tpm=1000), Hold)
    await book.aclose()
    await ledger.aclose()


async def test_a_reservation_in_redis_of_a_process_that_died_expires(tmp_path: Path, redis_url: str) -> None:
    """A reservation whose settle never comes (its process died) holds the limit only until its expiry."""
    now = [20000 * 86400.0 + 7.0]
    day = 20000 * 86400.0
    shared = SharedSpend(redis_url, prefix="turnout:", ledger_path=tmp_path / "l.sqlite3", clock=lambda: now[0])
    assert await shared.reserve("team", "dead-call", 1.0, 1.0, day, None, None) == 1  # then never settled
    assert await shared.reserve("team", "next", 0.1, 1.0, day, None, None) == 0
    now[0] += RESERVATION_TTL_S - 1.0
    assert await shared.reserve("team", "next", 0.1, 1.0, day, None, None) == 0
    now[0] += 2.0
    assert await shared.reserve("team", "next", 0.1, 1.0, day, None, None) == 1
    await shared.aclose()
