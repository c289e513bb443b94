"""Vertex AI's cost against Anthropic's: one Claude call through the client, the token lookup included.

``Client.chat`` on a ``vertex`` profile (Claude through the Anthropic publisher: a bearer token from a
service-account key, exchanged once by google-auth at the upstream's token endpoint and then looked up from the
cache before every call) against an ``anthropic`` profile, both answered by the same loopback upstream (a bare
aiohttp server in its own process, returning the same fixed Messages body). The contenders alternate in rounds;
the ratio is of the medians per call.

Run: ``python -m bench.vertex [--rounds N] [--calls M] [--write]``; ``--write`` puts the results in their own
section of ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

TEXT = (
    "Hello from the benchmark upstream: a short, fixed answer of about twenty words, so every client decodes the same."
)
CLAUDE = "claude-sonnet-4-5"
SECTION = "## Vertex AI against Anthropic"


def _serve(port_out: Any) -> None:
    message = orjson.dumps(
        {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": CLAUDE,
            "content": [{"type": "text", "text": TEXT}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 12, "output_tokens": 24},
        }
    )
    token = orjson.dumps({"access_token": "ya29.bench-token", "expires_in": 3600, "token_type": "Bearer"})

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=message, content_type="application/json")

    async def grant(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=token, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/messages", answer)
        app.router.add_post("/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{target}", answer)
        app.router.add_post("/token", grant)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_out.send(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(main())


async def _calls(url: str, rounds: int, calls: int, credentials: Path) -> tuple[dict[str, list[float]], int]:
    from turnout import Client

    anthropic = {"anthropic": {"main": {"uri": url, "api_key": "sk-bench", "model": CLAUDE}}}
    vertex = {
        "vertex": {"main": {"uri": url, "project": "bench", "model": CLAUDE, "credentials_file": str(credentials)}}
    }
    clients = {
        "anthropic": Client.from_dict({"providers": {"models": anthropic}}, ledger=False),
        "vertex": Client.from_dict({"providers": {"models": vertex}}, ledger=False),
    }
    times: dict[str, list[float]] = {name: [] for name in clients}
    for c in clients.values():  # warm up: connections, the token, every first-call cache
        for _ in range(50):
            assert (await c.chat("hello")).text == TEXT
    for _ in range(rounds):
        for name, c in clients.items():
            for _ in range(calls):
                started = time.perf_counter()
                await c.chat("hello")
                times[name].append(time.perf_counter() - started)
    adapter = clients["vertex"].factory.adapter("vertex.main", None)
    refreshes = adapter.tokens.refreshes  # type: ignore[attr-defined]
    for c in clients.values():
        await c.aclose()
    return times, refreshes


def _report(calls: dict[str, list[float]], refreshes: int, rounds: int, per: int) -> str:
    med = {k: statistics.median(v) for k, v in calls.items()}
    ratio = med["vertex"] / med["anthropic"]
    verdict = "**met**" if ratio <= 1.3 else "**missed**"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return "\n".join(
        [
            SECTION,
            "",
            f"`python -m bench.vertex --rounds {rounds} --calls {per} --write`, {when}: one loopback upstream (a bare "
            "aiohttp server in its own process) answers both families with the same Messages body; the Vertex client "
            "looks its bearer token up before every call (google-auth exchanged a service-account key for it once, "
            f"at the upstream's token endpoint: {refreshes} exchange in {rounds * per + 50} calls). Load average at "
            f"the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.",
            "",
            "| target | anthropic | vertex | ratio | limit | |",
            "|---|---:|---:|---:|---:|---|",
            f"| A non-streaming Claude call through `Client.chat` (median) | {med['anthropic'] * 1e6:,.0f} µs | "
            f"{med['vertex'] * 1e6:,.0f} µs | {ratio:.3f} × | ≤ 1.3 × | {verdict} |",
            "",
            "What a Vertex call adds: the token lookup (a clock read and a comparison), the renewal guard around the "
            "call, and headers passed per request (a token changes, so they cannot be fixed with a session as an API "
            "key's are). The stream decoders are the Anthropic and Gemini ones, unchanged.",
            "",
        ]
    )


def _write(section: str) -> None:
    path = Path(__file__).resolve().with_name("results.md")
    text = path.read_text()
    start = text.find(SECTION)
    if start >= 0:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--write", action="store_true", help="write the section of bench/results.md")
    args = parser.parse_args()
    os.environ.setdefault("NO_GCE_CHECK", "true")  # never probe a metadata server
    receive, send = multiprocessing.Pipe(duplex=False)
    upstream = multiprocessing.Process(target=_serve, args=(send,), daemon=True)
    upstream.start()
    try:
        port = receive.recv()
        url = f"http://127.0.0.1:{port}"
        from turnout.sim.google import service_account_info

        with tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmp:
            credentials = Path(tmp) / "service-account.json"
            credentials.write_bytes(orjson.dumps(service_account_info(f"{url}/token", project="bench")))
            calls, refreshes = asyncio.run(_calls(url, args.rounds, args.calls, credentials))
    finally:
        upstream.terminate()
        upstream.join(5)
    section = _report(calls, refreshes, args.rounds, args.calls)
    print(section)
    if args.write:
        _write(section)


if __name__ == "__main__":
    main()
