"""Spend limits under attack: hang-ups, ``n`` > 1, no ``max_tokens`` and answers without usage, through Redis.

A loopback Chat Completions upstream bills what it generates, as a provider does: a whole answer's tokens from
the moment it accepted the request (a client that hangs up does not stop a non-streamed generation), a stream's
tokens as it sends them (a stream stops when its reader leaves). Without ``max_tokens`` it generates
:data:`UNBOUNDED_TOKENS` per choice, more than the gateway's default output bound, so only a bound the gateway
sends keeps a call within its reservation. A share of its answers carries no usage at all.

:data:`CALLS` concurrent calls of one limited key go through one gateway whose limits live in Redis: streamed or
not, ``n`` of 1 to 8 on the non-streamed ones, ``max_tokens`` on half of them, and a share that hangs up after a
random delay (some before the first byte). Reported: what the upstream billed against the limit and the bound
(the limit plus one call's largest reservation), what Redis and the ledger counted, the statuses (a 503 is
spurious: Redis is healthy throughout) and the reservations left in Redis after the run.

Run: ``python -m bench.spend_attack`` (needs ``redis-server`` on the PATH); ``python -m bench.spend`` runs it too.
Talks to 127.0.0.1 only; every loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from turnout import Client
from turnout.gateway import Gateway, GatewayServer

CALLS = 300
KEY = "bench-attack-key"
#: USD per million tokens, in and out, on the upstream and in the gateway's pricing table.
PRICE_PER_M = 10.0
LIMIT_USD = 5.0
#: Output tokens per choice the upstream generates when the request names no bound.
UNBOUNDED_TOKENS = 50_000
#: Tokens per streamed chunk, and the pause between chunks.
CHUNK_TOKENS = 500
CHUNK_PAUSE_S = 0.01
HANG_UP_SHARE = 0.3
NO_USAGE_SHARE = 0.3
PROMPT = "x" * 4000
SEED = 47


def _tokens(chars: int) -> int:
    return -(-chars // 4)


def _usd(tokens: int) -> float:
    return tokens * PRICE_PER_M / 1e6


@dataclass
class Upstream:
    """What the loopback upstream billed (USD, by its own count), and how many requests it saw."""

    billed: float = 0.0
    requests: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(SEED))

    def input_tokens(self, body: dict[str, object]) -> int:
        messages = body.get("messages")
        chars = (
            sum(len(str(m.get("content", ""))) for m in messages if isinstance(m, dict))
            if isinstance(messages, list)
            else 0
        )
        return _tokens(chars) + 4 * (len(messages) if isinstance(messages, list) else 0)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.requests += 1
        n = body.get("n") or 1
        bound = body.get("max_completion_tokens") or body.get("max_tokens") or UNBOUNDED_TOKENS
        prompt = self.input_tokens(body)
        usage_less = self.rng.random() < NO_USAGE_SHARE
        if body.get("stream"):
            return await self._stream(request, prompt, bound, usage_less)
        self.billed += _usd(prompt + n * bound)  # the provider generates the whole answer, whoever still waits
        await asyncio.sleep(self.rng.uniform(0.05, 0.3))
        choices = [
            {"index": i, "message": {"role": "assistant", "content": "tok " * bound}, "finish_reason": "length"}
            for i in range(n)
        ]
        answer: dict[str, object] = {"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4.1"}
        answer["choices"] = choices
        if not usage_less:
            answer["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": n * bound,
                "total_tokens": prompt + n * bound,
            }
        return web.json_response(answer, dumps=lambda v: orjson.dumps(v).decode())

    async def _stream(self, request: web.Request, prompt: int, bound: int, usage_less: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.billed += _usd(prompt)
        sent = 0
        try:
            while sent < bound:
                size = min(CHUNK_TOKENS, bound - sent)
                delta = {"index": 0, "delta": {"content": "tok " * size}, "finish_reason": None}
                await response.write(_chunk([delta]))
                sent += size
                self.billed += _usd(size)
                await asyncio.sleep(CHUNK_PAUSE_S)
            await response.write(_chunk([{"index": 0, "delta": {}, "finish_reason": "length"}]))
            if not usage_less:
                usage = {"prompt_tokens": prompt, "completion_tokens": sent, "total_tokens": prompt + sent}
                await response.write(_chunk([], usage))
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):  # the reader left: the provider stops generating
            return response
        return response


def _chunk(choices: list[dict[str, object]], usage: dict[str, int] | None = None) -> bytes:
    """One Chat Completions stream event."""
    chunk: dict[str, object] = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1"}
    chunk["choices"] = choices
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


@contextlib.asynccontextmanager
async def _upstream(upstream: Upstream, port: int) -> AsyncIterator[str]:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", upstream.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


def config(ledger: Path, redis_url: str, uri: str, prefix: str) -> str:
    """The gateway's configuration: one limited key, limits in Redis, one priced upstream."""
    price = f"pricing = {{ input = {PRICE_PER_M}, output = {PRICE_PER_M} }}\n"
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n'
        f'[state]\nbackend = "redis"\nurl = "{redis_url}"\nkey_prefix = "{prefix}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway.keys.team]\nkey = "{KEY}"\ndaily_limit_usd = {LIMIT_USD}\n'
        f'[providers.models.openai.main]\nuri = "{uri}"\napi_key = "sk-up"\nmodel = "gpt-4.1"\n{price}'
        "timeout_secs = 60\n"
    )


@dataclass
class Outcome:
    """One run's figures."""

    billed: float
    redis_spent: float
    ledger_spent: float
    statuses: Counter[str]
    stale_reservations: int
    largest_reservation: float
    seconds: float


async def _one(session: aiohttp.ClientSession, url: str, rng: random.Random, statuses: Counter[str]) -> None:
    stream = rng.random() < 0.5
    body: dict[str, object] = {"model": "gpt-4.1", "messages": [{"role": "user", "content": PROMPT}]}
    if stream:
        body["stream"] = True
    else:
        body["n"] = rng.choice((1, 2, 4, 8))
    if rng.random() < 0.5:
        body["max_tokens"] = rng.randint(100, 4000)
    hang_up = rng.uniform(0.0, 0.5) if rng.random() < HANG_UP_SHARE else None
    headers = {"Authorization": f"Bearer {KEY}"}

    async def call() -> None:
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
            statuses[str(resp.status)] += 1
            async for _ in resp.content.iter_any():
                pass

    try:
        async with asyncio.timeout(hang_up if hang_up is not None else 120.0):
            await call()
    except TimeoutError:
        statuses["hung up" if hang_up is not None else "timed out"] += 1


async def run(redis_url: str, tmp: Path, port: int) -> Outcome:
    """:data:`CALLS` concurrent calls of the attack mix; the figures once every settle is done."""
    import redis.asyncio as aioredis

    prefix = f"bench:attack:{time.time_ns()}:"
    upstream = Upstream()
    rng = random.Random(SEED)
    statuses: Counter[str] = Counter()
    ledger = tmp / "attack.sqlite3"
    t0 = time.perf_counter()
    async with _upstream(upstream, port) as uri:
        client = Client.from_toml(config(ledger, redis_url, uri, prefix), surface="gateway")
        async with GatewayServer(Gateway(client, owns_client=True)) as server:
            connector = aiohttp.TCPConnector(limit=0, force_close=True)
            async with aiohttp.ClientSession(connector=connector) as session:
                await asyncio.gather(*(_one(session, server.url, rng, statuses) for _ in range(CALLS)))
            await server.gateway.drain(120.0)  # the gateway finishes the calls its clients left
        seconds = time.perf_counter() - t0
    r = aioredis.from_url(redis_url)
    try:
        spent = held = 0.0
        stale = 0
        async for key in r.scan_iter(match=f"{prefix}spend:*"):
            spent += sum(float(v) for v in (await r.hvals(key)))
        async for key in r.scan_iter(match=f"{prefix}resv:*"):
            values = await r.hvals(key)
            stale += len(values)
            held += sum(float(v) for v in values)
    finally:
        await r.aclose()
    db = sqlite3.connect(ledger)
    try:
        (ledger_spent,) = db.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM attempts").fetchone()
    finally:
        db.close()
    worst = _usd(_tokens(len(PROMPT)) + 4 + 8 * 32_768)
    return Outcome(upstream.billed, spent, float(ledger_spent), statuses, stale, worst, seconds)


def report(o: Outcome) -> str:
    """The figures as text."""
    bound = LIMIT_USD + o.largest_reservation
    within = "within" if o.billed <= bound else "OVER"
    return (
        f"{CALLS} concurrent limited calls (hang-ups, n up to 8, no max_tokens on half, {NO_USAGE_SHARE:.0%} without "
        f"usage) on a ${LIMIT_USD:.2f} limit through Redis, {o.seconds:.1f} s: upstream billed ${o.billed:.4f} "
        f"({within} the bound ${bound:.4f} = limit + one call's largest reservation); Redis counted "
        f"${o.redis_spent:.4f}, the ledger ${o.ledger_spent:.4f}; statuses "
        + ", ".join(f"{k}: {v}" for k, v in sorted(o.statuses.items()))
        + f"; 503s: {o.statuses.get('503', 0)}; stale reservations in Redis after the run: {o.stale_reservations}"
    )


def main() -> None:
    """Start a redis-server on a free loopback port, run the attack, print the figures, stop it."""
    import tempfile

    from bench.spend import _free_port, redis_server

    with redis_server() as url, tempfile.TemporaryDirectory() as d:
        print(report(asyncio.run(run(url, Path(d), _free_port()))))


if __name__ == "__main__":
    main()
