"""`turnout serve --workers 2`: the workers of one host share one spend limit through the ledger file."""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from gateway_support import GATEWAY_KEY
from test_gateway_ledger_faults import NONSENSE
from test_gateway_ledger_faults import toml as nonsense_toml
from test_gateway_ledger_faults import upstream as nonsense_upstream
from test_gateway_process import serve

from servers import free_port, loopback_app

pytestmark = pytest.mark.slow

LISTENING = re.compile(r"listening on (http://\S+) \(pid (\d+)\)")
TEAM_KEY = "gw-team-key-7"
CALLS = 200
CALL_USD = 0.002  # 1,000 in and 1,000 out at $1/M each
WORST_USD = 0.0021  # the reservation of one call: about 1,004 input tokens by the estimate, and max_tokens 1,000
BODY = {"model": "gpt-4.1", "max_tokens": 1000, "messages": [{"role": "user", "content": "x" * 4000}]}


class Upstream:
    """A loopback Chat Completions upstream that holds every call until its gate opens and counts what it bills."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.arrived = 0
        self.billed_usd = 0.0
        self.refused = 0
        self.settled = asyncio.Event()

    def check(self) -> None:
        if self.arrived + self.refused >= CALLS:
            self.settled.set()

    async def chat(self, request: web.Request) -> web.Response:
        self.arrived += 1
        self.check()
        await self.gate.wait()
        self.billed_usd += CALL_USD
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 1000},
        }
        return web.json_response(body)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        async with loopback_app(app) as url:
            yield url + "/v1"


def config(url: str, ledger: Path) -> str:
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway.keys.team]\nkey = "{TEAM_KEY}"\ndaily_limit_usd = 0.01\n'
        f'[providers.models.openai.main]\nuri = "{url}"\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        "pricing = { input = 1.0, output = 1.0 }\n"
    )


async def test_two_workers_share_one_limit_through_the_ledger(tmp_path: Path) -> None:
    """--workers 2, $0.01 limit, 200 concurrent calls spread over both workers: what the upstream bills stays within
    the limit plus one call's worst case; every other call is refused with 429 before it is sent.
    """
    upstream = Upstream()
    async with upstream.running() as url:
        toml = config(url, tmp_path / "ledger.sqlite3")
        async with serve(tmp_path, toml, "--port", str(free_port()), "--workers", "2") as gateway:
            first, second = await gateway.line(LISTENING), await gateway.line(LISTENING)
            assert first.group(2) != second.group(2)
            statuses: list[int] = []

            async def one(session: aiohttp.ClientSession) -> None:
                headers = {"Authorization": f"Bearer {TEAM_KEY}", "Content-Type": "application/json"}
                post = session.post(first.group(1) + "/v1/chat/completions", data=orjson.dumps(BODY), headers=headers)
                async with post as resp:
                    await resp.read()
                    statuses.append(resp.status)
                    if resp.status == 429:
                        upstream.refused += 1
                        upstream.check()

            # a connection per request, so the kernel spreads them over both workers
            connector = aiohttp.TCPConnector(force_close=True, limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                tasks = [asyncio.create_task(one(session)) for _ in range(CALLS)]
                async with asyncio.timeout(120):
                    await upstream.settled.wait()
                upstream.gate.set()
                await asyncio.gather(*tasks)
            gateway.proc.send_signal(signal.SIGTERM)
            assert await gateway.proc.wait() == 0
    assert upstream.billed_usd <= 0.01 + WORST_USD
    assert statuses.count(200) == upstream.arrived >= 4
    assert statuses.count(429) == CALLS - upstream.arrived


@pytest.mark.parametrize("usage", [NONSENSE["2**64-1"], NONSENSE["1e300"]], ids=["2**64-1", "1e300"])
async def test_a_nonsense_usage_leaves_the_gateway_recording_and_sigterm_ends_it(
    tmp_path: Path, usage: dict[str, object]
) -> None:
    """`turnout serve` over an upstream reporting a usage of 2**64-1 (or 1e300): every call answers 200 and is
    recorded, and SIGTERM ends the process promptly with status 0 (no writer thread left blocking it).
    """
    path = tmp_path / "ledger.sqlite3"
    async with (
        nonsense_upstream(usage) as url,
        serve(tmp_path, nonsense_toml(url, path), "--port", str(free_port())) as gateway,
    ):
        listening = await gateway.line(LISTENING)
        headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}
        body = orjson.dumps({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]})
        async with aiohttp.ClientSession() as session:
            statuses = []
            for _ in range(5):
                async with session.post(listening.group(1) + "/v1/chat/completions", data=body, headers=headers) as r:
                    await r.read()
                    statuses.append(r.status)
        gateway.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            code = await gateway.proc.wait()
    assert statuses == [200] * 5 and code == 0
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT usage_note, COUNT(*) FROM attempts GROUP BY 1").fetchall() == [("clamped", 5)]
    finally:
        db.close()
