"""Spend limits under load: how far concurrent calls overshoot a key's limit, and what reserving costs a call.

*Overshoot* (in process, a fake upstream that holds every call until all of them reached it or were refused):
$1/M prices in and out, calls of 1,000 input (by the estimate and the upstream's count) and 1,000 output tokens
($0.002 each), a $0.01 limit. 200 concurrent calls through one gateway; then 2 gateways with their own ledgers
(two hosts) sharing one Redis, 20 concurrent calls each, $0.05 limit. Reported: what the upstream billed, the
limit, and the bound (the limit plus one call's worst case).

*Overshoot across processes* (``turnout serve`` subprocesses over a loopback upstream that holds every call the
same way): 200 concurrent calls on a $0.01 key through ``--workers 2`` (one ledger file); then two ``turnout
serve`` processes with their own ledgers sharing one Redis, 20 concurrent calls each, $0.05 limit.

*Reservation overhead*: the bookkeeping of one limited call (reserve its worst case, then settle) timed on its
own, :data:`ROUNDS` sequential calls: through Redis on loopback, and through the ledger file (the default, the
workers of one host). An unlimited key's call never reaches it (``Caller.limited`` is False: no lookup, no
estimate, no round trip): :func:`unlimited_calls` times sequential calls of an unlimited key through a gateway
whose spend limits live in Redis, beside the same calls of a limited key, and says whether the unlimited calls
opened a Redis connection for spend at all.

*Under attack* (:mod:`bench.spend_attack`): hang-ups, ``n`` > 1, no ``max_tokens`` and answers without usage.

Run: ``python -m bench.spend`` (needs ``redis-server`` on the PATH).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path

import aiohttp
from aiohttp import web

from turnout import Client
from turnout.core.provider import Provider
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, StreamEvent, Usage
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.shared_spend import SharedSpend
from turnout.gateway.spend import Hold, SpendBook
from turnout.ledger.writer import Ledger

ROUNDS = 1000
#: Runs of :data:`ROUNDS` calls each (the machine is shared: each run's p50 is reported, and their median).
RUNS = 5
KEY = "bench-team-key"
OPEN_KEY = "bench-open-key"
#: Sequential calls of each key in :func:`unlimited_calls`.
CALLS = 300
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


def _config(ledger: Path, limit: float, redis_url: str | None, uri: str | None = None, prefix: str = "") -> str:
    # prefix: each scenario's keys of its own in Redis, so that no scenario sees another's spend
    state = f'[state]\nbackend = "redis"\nurl = "{redis_url}"\nkey_prefix = "{prefix}"\n' if redis_url else ""
    upstream = f'uri = "{uri}"\n' if uri else ""
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n{state}'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway]\napi_keys = ["{OPEN_KEY}"]\n'
        f'[gateway.keys.team]\nkey = "{KEY}"\ndaily_limit_usd = {limit}\n'
        f'[providers.models.openai.main]\n{upstream}api_key = "sk-up"\nmodel = "gpt-4.1"\n'
        "pricing = { input = 1.0, output = 1.0 }\n"
    )


@contextlib.asynccontextmanager
async def _gateway(text: str, upstream: Held) -> AsyncIterator[GatewayServer]:
    client = Client.from_toml(text, adapter_builder=lambda *_: upstream, surface="gateway")
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


async def _burst(urls: list[str], per_url: int, upstream: Held, *, spread: bool = False) -> None:
    async def one(session: aiohttp.ClientSession, url: str) -> None:
        headers = {"Authorization": f"Bearer {KEY}"}
        async with session.post(url + "/v1/chat/completions", json=BODY, headers=headers) as resp:
            await resp.read()
            if resp.status == 429:
                upstream.refused += 1
                upstream.check()

    # spread: a connection per request, so the kernel deals them out to the workers of one port
    connector = aiohttp.TCPConnector(limit=0, force_close=spread)
    async with aiohttp.ClientSession(connector=connector) as session:
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
            await stack.enter_async_context(
                _gateway(_config(tmp / f"h{n}.sqlite3", 0.05, redis_url, prefix="bench:hosts:"), upstream)
            )
            for n in range(2)
        ]
        await _burst([s.url for s in servers], 20, upstream)
    return upstream.billed, 0.05, upstream.arrived


@contextlib.asynccontextmanager
async def _http_upstream(upstream: Held) -> AsyncIterator[str]:
    """A loopback Chat Completions upstream over ``upstream``'s gate and counts; yields its base URL."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await upstream.chat(ChatRequest(messages=()), "gpt-4.1")
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 1000},
        }
        return web.json_response(body)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


_LISTENING = re.compile(rb"listening on (http://\S+) \(pid \d+\)")


@contextlib.asynccontextmanager
async def _serve(tmp: Path, text: str, workers: int) -> AsyncIterator[str]:
    """``turnout serve`` with ``text`` (``workers`` workers); yields its URL once every worker listens."""
    path = tmp / f"turnout-{_free_port()}.toml"
    path.write_text(text)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "turnout", "serve", "--config", str(path), "--port", str(_free_port()),
        "--workers", str(workers), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        urls: list[str] = []
        async with asyncio.timeout(60):
            while len(urls) < workers:
                line = await proc.stderr.readline()
                if not line:
                    raise RuntimeError("turnout serve ended before listening")
                found = _LISTENING.search(line)
                if found:
                    urls.append(found.group(1).decode())
        drain = asyncio.create_task(_drain(proc.stderr))
        yield urls[0]
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await proc.wait()
        drain.cancel()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def overshoot_two_workers(tmp: Path) -> tuple[float, float, int]:
    """200 concurrent calls, $0.01 limit, ``turnout serve --workers 2`` (one ledger file)."""
    upstream = Held(200)
    async with _http_upstream(upstream) as uri, _serve(tmp, _config(tmp / "w.sqlite3", 0.01, None, uri), 2) as url:
        await _burst([url], 200, upstream, spread=True)
    return upstream.billed, 0.01, upstream.arrived


async def overshoot_two_processes(tmp: Path, redis_url: str) -> tuple[float, float, int]:
    """Two ``turnout serve`` processes (own ledgers) sharing one Redis, 20 concurrent calls each, $0.05 limit."""
    upstream = Held(40)
    async with _http_upstream(upstream) as uri, contextlib.AsyncExitStack() as stack:
        urls = [
            await stack.enter_async_context(
                _serve(tmp, _config(tmp / f"p{n}.sqlite3", 0.05, redis_url, uri, "bench:procs:"), 1)
            )
            for n in range(2)
        ]
        await _burst(urls, 20, upstream)
    return upstream.billed, 0.05, upstream.arrived


async def unlimited_calls(tmp: Path, redis_url: str) -> tuple[list[float], list[float], bool]:
    """Milliseconds per call of an unlimited and of a limited key (:data:`CALLS` each, alternating, sequential),
    through one gateway whose limits live in Redis; and whether the unlimited calls connected to Redis for spend.
    """
    upstream = Held(0)
    upstream.gate.set()
    text = _config(tmp / "u.sqlite3", 1e9, redis_url, prefix="bench:open:")
    client = Client.from_toml(text, adapter_builder=lambda *_: upstream, surface="gateway")
    gateway = Gateway(client, owns_client=True)
    assert gateway.spend is not None and gateway.spend.shared is not None
    spend = gateway.spend.shared
    body = {**BODY, "max_tokens": 10}
    times: dict[str, list[float]] = {OPEN_KEY: [], KEY: []}
    touched = False
    async with GatewayServer(gateway) as server, aiohttp.ClientSession() as session:
        for n in range(CALLS * 2):
            key = OPEN_KEY if n % 2 == 0 else KEY
            t0 = time.perf_counter()
            async with session.post(server.url + "/v1/chat/completions", json=body,
                                    headers={"Authorization": f"Bearer {key}"}) as resp:  # fmt: skip
                await resp.read()
                assert resp.status == 200
            times[key].append((time.perf_counter() - t0) * 1000.0)
            if n == 0:
                touched = spend._redis is not None  # after the first (unlimited) call, before any limited one
    return times[OPEN_KEY], times[KEY], touched


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
        workers = await overshoot_two_workers(tmp)
        procs = await overshoot_two_processes(tmp, url)
        unlimited, limited, touched = await unlimited_calls(tmp, url)
        via_redis = [await reservation_ms(tmp, url) for _ in range(RUNS)]
        via_file = [await reservation_ms(tmp, None) for _ in range(RUNS)]
    scenarios = (
        ("200 concurrent, one gateway", one),
        ("2 hosts x 20, one Redis", two),
        ("200 concurrent, turnout serve --workers 2", workers),
        ("2 turnout serve processes x 20, one Redis", procs),
    )
    for name, (billed, limit, served) in scenarios:
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
    print(
        f"whole calls through a gateway with Redis limits, {CALLS} each, alternating: unlimited key p50 "
        f"{statistics.median(unlimited):.3f} ms, limited key p50 {statistics.median(limited):.3f} ms; "
        f"the first unlimited call {'opened' if touched else 'did not open'} a Redis connection for spend"
    )


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A redis-server on a free loopback port (no persistence); yields its URL, stops it by PID."""
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
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        redis.terminate()
        redis.wait(5)


def main() -> None:
    """Start a redis-server on a free loopback port, measure (the attack mix too), stop it."""
    from bench import spend_attack

    with redis_server() as url:
        asyncio.run(measure(url))
        with tempfile.TemporaryDirectory() as d:
            print(spend_attack.report(asyncio.run(spend_attack.run(url, Path(d), _free_port()))))


if __name__ == "__main__":
    main()
