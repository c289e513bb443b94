"""Spend limits under load: how far concurrent calls overshoot a key's limit, and what reserving costs a call.

*Overshoot* (in process, a fake upstream that holds every call until all of them reached it or were refused):
$1/M prices in and out, calls of 1,000 input (by the estimate and the upstream's count) and 1,000 output tokens
($0.002 each), a $0.01 limit. 200 concurrent calls through one gateway; then 2 gateways with their own ledgers
(two hosts) sharing one Redis, 20 concurrent calls each, $0.05 limit. Reported: what the upstream billed, the
limit, and the bound (the limit plus one call's worst case).

*Reservation overhead*: the bookkeeping of one limited call (reserve its worst case, then settle) timed on its
own, :data:`ROUNDS` sequential calls: through Redis on loopback, and through the ledger file (the default, the
workers of one host). An unlimited key's call never reaches it (``Caller.limited`` is False: no lookup, no
estimate, no round trip).

Run: ``python -m bench.spend`` (needs ``redis-server`` on the PATH).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

import aiohttp

from turnout import Client
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.shared_spend import SharedSpend
from turnout.gateway.spend import Hold, SpendBook
from turnout.ledger import Ledger
from turnout.provider import Provider
from turnout.types import Capabilities, ChatRequest, ChatResponse, StreamEvent, Usage

ROUNDS = 1000
#: Runs of :data:`ROUNDS` calls each (the machine is shared: each run's p50 is reported, and their median).
RUNS = 5
KEY = "bench-team-key"
CALL_USD = 0.002
WORST_USD = 0.0021
BODY = {"model": "gpt-4.1", "max_tokens": 1000, "messages": [{"role": "user", "content": "x" * 4000}]}


class Held(Provider):
    """Holds each call until :attr:`gate` opens; counts arrivals and what it bills."""

    def __init__(self, expected: int) -> None:
        self.gate = asyncio.Event()
        self.expected = expected
        self.arrived = 0
        self.refused = 0
        self.billed = 0.0
        self.settled = asyncio.Event()

    def check(self) -> None:
        if self.arrived + self.refused >= self.expected:
            self.settled.set()

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.arrived += 1
        self.check()
        await self.gate.wait()
        self.billed += CALL_USD
        return ChatResponse(text="ok", model=model, usage=Usage(input_tokens=1000, output_tokens=1000))

    async def stream(  # pragma: no cover - not streamed here
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        raise NotImplementedError
        yield

    def capabilities(self, model: str | None = None) -> Capabilities:
        return Capabilities()


def _config(ledger: Path, limit: float, redis_url: str | None) -> str:
    state = f'[state]\nbackend = "redis"\nurl = "{redis_url}"\n' if redis_url else ""
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n{state}'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway.keys.team]\nkey = "{KEY}"\ndaily_limit_usd = {limit}\n'
        '[providers.models.openai.main]\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        "pricing = { input = 1.0, output = 1.0 }\n"
    )


@contextlib.asynccontextmanager
async def _gateway(text: str, upstream: Held) -> AsyncIterator[GatewayServer]:
    client = Client.from_toml(text, adapter_builder=lambda *_: upstream, surface="gateway")
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


async def _burst(urls: list[str], per_url: int, upstream: Held) -> None:
    async def one(session: aiohttp.ClientSession, url: str) -> None:
        headers = {"Authorization": f"Bearer {KEY}"}
        async with session.post(url + "/v1/chat/completions", json=BODY, headers=headers) as resp:
            await resp.read()
            if resp.status == 429:
                upstream.refused += 1
                upstream.check()

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.create_task(one(session, url)) for url in urls for _ in range(per_url)]
        await upstream.settled.wait()
        upstream.gate.set()
        await asyncio.gather(*tasks)


async def overshoot_one_gateway(tmp: Path) -> tuple[float, float, int]:
    """200 concurrent calls, $0.01 limit, one gateway: (billed, limit, calls served)."""
    upstream = Held(200)
    async with _gateway(_config(tmp / "one.sqlite3", 0.01, None), upstream) as server:
        await _burst([server.url], 200, upstream)
    return upstream.billed, 0.01, upstream.arrived


async def overshoot_two_hosts(tmp: Path, redis_url: str) -> tuple[float, float, int]:
    """Two gateways (own ledgers) sharing one Redis, 20 concurrent calls each, $0.05 limit."""
    upstream = Held(40)
    async with contextlib.AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(_gateway(_config(tmp / f"h{n}.sqlite3", 0.05, redis_url), upstream))
            for n in range(2)
        ]
        await _burst([s.url for s in servers], 20, upstream)
    return upstream.billed, 0.05, upstream.arrived


async def reservation_ms(tmp: Path, redis_url: str | None) -> list[float]:
    """Milliseconds of one reserve-and-settle, :data:`ROUNDS` times in a row."""
    ledger = Ledger(tmp / ("r.sqlite3" if redis_url else "f.sqlite3"))
    shared = SharedSpend(redis_url, prefix="bench:", ledger_path=ledger.path) if redis_url else None
    book = SpendBook(ledger, shared=shared)
    out = []
    for n in range(ROUNDS):
        t0 = time.perf_counter()
        hold = await book.reserve("team", 0.0021, 1e9, f"call-{id(book)}-{n}")
        assert isinstance(hold, Hold)
        book.release(hold, 0.002, 2000)
        if shared is not None:
            await shared.settled()  # count the settle's round trip too
        out.append((time.perf_counter() - t0) * 1000.0)
    await book.aclose()
    await ledger.aclose()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, within: float = 5.0) -> None:
    """Return once something accepts connections on ``port`` (redis-server started)."""
    deadline = time.monotonic() + within
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


async def measure(url: str) -> None:
    """Run every scenario against the Redis at ``url`` and print the results."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        one = await overshoot_one_gateway(tmp)
        two = await overshoot_two_hosts(tmp, url)
        via_redis = [await reservation_ms(tmp, url) for _ in range(RUNS)]
        via_file = [await reservation_ms(tmp, None) for _ in range(RUNS)]
    for name, (billed, limit, served) in (("200 concurrent, one gateway", one), ("2 hosts x 20, one Redis", two)):
        print(
            f"{name}: billed ${billed:.4f} for a ${limit:.2f} limit ({billed / limit:.2f} x; bound "
            f"${limit + WORST_USD:.4f}); {served} calls served"
        )
    for name, runs in (("Redis", via_redis), ("ledger file", via_file)):
        p50s = [statistics.median(ms) for ms in runs]
        p99s = [statistics.quantiles(ms, n=100)[98] for ms in runs]
        print(
            f"reserve + settle through {name}: p50 {statistics.median(p50s):.3f} ms (runs: "
            + ", ".join(f"{x:.3f}" for x in p50s)
            + f"), p99 {statistics.median(p99s):.3f} ms; {RUNS} runs of {ROUNDS} calls"
        )


def main() -> None:
    """Start a redis-server on a free loopback port, measure, stop it."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("bench.spend needs redis-server on the PATH")
    port = _free_port()
    redis = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port)
        asyncio.run(measure(f"redis://127.0.0.1:{port}/0"))
    finally:
        redis.terminate()
        redis.wait(5)


if __name__ == "__main__":
    main()
