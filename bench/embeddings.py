"""Embedding calls: Turnout's overhead over raw aiohttp, for one call and for a 10,000-input call split in batches.

Usage: ``python -m bench.embeddings [--quick] [--write]``. It starts its own tiny upstream in a child process (pinned
to the upstream CPU, like :mod:`bench.upstream`): ``POST /v1/embeddings`` answered with precomputed bytes for the
request's input count (every vector the same 256 numbers), so the floor measures the client, not the server.

Two targets, each a median over rounds that interleave the contenders (the small calls alternate one by one):

- one call of 16 inputs: ``Client.embed`` / a raw aiohttp POST of the same body plus ``orjson.loads`` (≤ 1.3 ×);
- one call of 10,000 inputs: ``Client.embed`` (split to OpenAI's 2,048 inputs, five batches, reassembled in order)
  / the same five raw requests one after another, each decoded (≤ 1.5 ×);
- one call of 16 inputs to Bedrock's Titan Text Embeddings V2 (one input an InvokeModel request, 8 in flight), on a
  Bedrock API key (nothing signed; SigV4's own cost is :mod:`bench.clouds`'s) / the same 16 raw requests, 8 at a
  time, each decoded (≤ 1.3 ×).

``--write`` replaces the ``## Embeddings`` section of ``bench/results.md`` with this run's (the section is this
module's own: ``python -m bench.run`` does not write it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import aiohttp
import orjson
import yarl
from aiohttp import web

from bench import procs, sections

DIMENSIONS = 256
SMALL = 16
LARGE = 10_000
OPENAI_BATCH = 2048
SECTION = "## Embeddings"

_VECTOR = [round((i % 97) / 97 - 0.5, 6) for i in range(DIMENSIONS)]


def _answer(count: int) -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": _VECTOR} for i in range(count)]
    usage = {"prompt_tokens": count * 4, "total_tokens": count * 4}
    return orjson.dumps({"object": "list", "data": data, "model": "text-embedding-3-small", "usage": usage})


TITAN = "amazon.titan-embed-text-v2:0"
TITAN_PATH = "/model/amazon.titan-embed-text-v2%3A0/invoke"
TITAN_PARALLEL = 8
_TITAN_ANSWER = orjson.dumps({"embedding": _VECTOR, "inputTextTokenCount": 9, "embeddingsByType": {"float": _VECTOR}})


def serve() -> None:
    """The upstream: print the port, answer until terminated."""
    answers: dict[int, bytes] = {}

    async def invoke(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            body=_TITAN_ANSWER, content_type="application/json", headers={"X-Amzn-Bedrock-Input-Token-Count": "9"}
        )

    async def embeddings(request: web.Request) -> web.Response:
        count = len(orjson.loads(await request.read())["input"])
        body = answers.get(count)
        if body is None:
            body = answers[count] = _answer(count)
        return web.Response(body=body, content_type="application/json")

    async def main() -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/embeddings", embeddings)
        app.router.add_post("/model/{model}/invoke", invoke)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


@contextlib.contextmanager
def upstream() -> Iterator[str]:
    """This module's upstream in a child process on the upstream CPU: its base URL."""
    child = subprocess.Popen(
        [procs.PY, "-m", "bench.embeddings", "--serve"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=procs.ROOT,
        env=procs.offline_env(),
        preexec_fn=procs.pinned_to(procs.UPSTREAM_CPU),
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.strip():
            raise RuntimeError("the embeddings upstream did not start")
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        procs.stop(child)


def _texts(n: int) -> list[str]:
    return [f"document {i}: a short passage about railway turnouts and points" for i in range(n)]


async def _raw(session: aiohttp.ClientSession, url: str, texts: list[str]) -> float:
    """The floor: the same requests, one after another, each body decoded (seconds)."""
    t0 = time.perf_counter()
    for start in range(0, len(texts), OPENAI_BATCH):
        body = orjson.dumps(
            {
                "model": "text-embedding-3-small",
                "input": texts[start : start + OPENAI_BATCH],
                "encoding_format": "float",
            }
        )
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
            data = orjson.loads(await resp.read())
        assert len(data["data"]) == min(OPENAI_BATCH, len(texts) - start)
    return time.perf_counter() - t0


async def _raw_titan(session: aiohttp.ClientSession, base: str, texts: list[str]) -> float:
    """The floor for Titan: one request per input, at most :data:`TITAN_PARALLEL` at a time, each decoded."""
    url = yarl.URL(base + TITAN_PATH, encoded=True)
    gate = asyncio.Semaphore(TITAN_PARALLEL)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench-bedrock-key"}

    async def one(text: str) -> list[float]:
        async with gate:
            body = orjson.dumps({"inputText": text, "normalize": True, "dimensions": DIMENSIONS})
            async with session.post(url, data=body, headers=headers) as resp:
                vector: list[float] = orjson.loads(await resp.read())["embedding"]
                return vector

    t0 = time.perf_counter()
    vectors = await asyncio.gather(*(one(t) for t in texts))
    elapsed = time.perf_counter() - t0
    assert len(vectors) == len(texts)
    return elapsed


async def measure(base: str, rounds: int, small_calls: int) -> dict[str, float]:
    """Median seconds of each contender in each scenario (``small_raw``, ``small_turnout``, ``large_...``)."""
    from turnout import Client

    config = {
        "default_provider": "openai.main",
        "providers": {
            "models": {
                "openai": {"main": {"uri": f"{base}/v1", "api_key": "sk-bench", "model": "text-embedding-3-small"}},
                "bedrock": {
                    "titan": {"uri": base, "region": "us-east-1", "api_key": "bench-bedrock-key", "model": TITAN}
                },
            }
        },
        "ledger": {"enabled": False},
    }
    url = f"{base}/v1/embeddings"
    small, large = _texts(SMALL), _texts(LARGE)
    names = ("small_raw", "small_turnout", "large_raw", "large_turnout", "titan_raw", "titan_turnout")
    times: dict[str, list[float]] = {k: [] for k in names}
    async with aiohttp.ClientSession() as session, Client.from_dict(config) as client:
        for _ in range(3):  # warm both paths (connections, the price lookup)
            await _raw(session, url, small)
            await client.embed(small)
            await _raw_titan(session, base, small)
            await client.embed(small, provider="bedrock.titan", dimensions=DIMENSIONS)
        for _ in range(rounds):
            for _ in range(small_calls):  # alternating call by call: a shared machine's load hits both alike
                times["small_raw"].append(await _raw(session, url, small))
                t0 = time.perf_counter()
                reply = await client.embed(small)
                times["small_turnout"].append(time.perf_counter() - t0)
                assert len(reply.vectors) == SMALL
            for _ in range(max(1, small_calls // 4)):  # 16 requests a call: fewer calls give as many samples
                times["titan_raw"].append(await _raw_titan(session, base, small))
                t0 = time.perf_counter()
                reply = await client.embed(small, provider="bedrock.titan", dimensions=DIMENSIONS)
                times["titan_turnout"].append(time.perf_counter() - t0)
                assert len(reply.vectors) == SMALL and reply.batches == SMALL
            times["large_raw"].append(await _raw(session, url, large))
            t0 = time.perf_counter()
            reply = await client.embed(large)
            times["large_turnout"].append(time.perf_counter() - t0)
            assert len(reply.vectors) == LARGE and reply.batches == 5
    return {k: statistics.median(v) for k, v in times.items()}


def section(result: dict[str, float], rounds: int, small_calls: int) -> str:
    """The ``## Embeddings`` section of ``bench/results.md``."""
    small = result["small_turnout"] / result["small_raw"]
    large = result["large_turnout"] / result["large_raw"]
    titan = result["titan_turnout"] / result["titan_raw"]
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")

    def verdict(ratio: float, limit: float) -> str:
        return "**met**" if ratio <= limit else "**missed**"

    return "\n".join(
        [
            SECTION,
            "",
            f"Generated by `python -m bench.embeddings --write` on {when}: {rounds} rounds, {small_calls} small "
            "calls per contender a round (alternating), medians. Upstream: this module's own (precomputed answers, "
            f"{DIMENSIONS} numbers a vector) on the upstream CPU; the floor is raw aiohttp POSTs of the same bodies, "
            f"each decoded with orjson. Load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
            "(the machine was shared with other work: read the ratios, not the absolute times).",
            "",
            "| target | raw aiohttp | turnout | measured | limit | |",
            "|---|---:|---:|---:|---:|---|",
            f"| one call of {SMALL} inputs: Turnout / raw (median per call) | {result['small_raw'] * 1e6:,.0f} µs | "
            f"{result['small_turnout'] * 1e6:,.0f} µs | {small:.3f} × | ≤ 1.3 × | {verdict(small, 1.3)} |",
            f"| one call of {LARGE:,} inputs, split to {OPENAI_BATCH:,} (5 requests) and reassembled: Turnout / the "
            f"5 raw requests in a row | {result['large_raw'] * 1e3:,.1f} ms | "
            f"{result['large_turnout'] * 1e3:,.1f} ms | {large:.3f} × | ≤ 1.5 × | {verdict(large, 1.5)} |",
            f"| one call of {SMALL} inputs to Bedrock Titan V2 ({SMALL} InvokeModel requests, {TITAN_PARALLEL} in "
            f"flight; Bedrock API key): Turnout / the {SMALL} raw requests {TITAN_PARALLEL} at a time | "
            f"{result['titan_raw'] * 1e6:,.0f} µs | {result['titan_turnout'] * 1e6:,.0f} µs | {titan:.3f} × | "
            f"≤ 1.3 × | {verdict(titan, 1.3)} |",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help="run the upstream (used by the benchmark itself)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--write", action="store_true", help="write the section into bench/results.md")
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return 0
    rounds, small_calls = (3, 50) if args.quick else (11, 200)
    procs.pin(procs.CLIENT_CPU)
    with upstream() as base:
        result = asyncio.run(measure(base, rounds, small_calls))
    text = section(result, rounds, small_calls)
    sys.stdout.write(text + "\n")
    if args.write:
        sections.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
