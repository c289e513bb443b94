"""Stream memory soak: floods cut on their bound, and clients that never read, through ``turnout serve``.

*Floods*: a loopback upstream answers every streaming request with deltas that never end, in turn OpenAI SSE text,
Bedrock event-stream text and Bedrock tool-input fragments, for ``--seconds`` at most. The gateway's profiles keep
the default ``max_response_bytes`` (32 MiB; ``--max-bytes`` to change it), so each stream is cut on that bound: the
gateway ends it as interrupted (text shown) or as a provider failure (tool input, nothing shown). ``--floods``
floods, ``--concurrency`` at a time, each read to its end by its client.

*Clients that never read*: ``--idle-clients`` connections each send a streaming request for a flood and never read
a byte of the answer; after ``--idle-seconds`` the gateway's RSS is read, then the connections are closed.

Reported: the gateway process's RSS before, its peak (``VmHWM``) and after the floods, with the idle clients
connected, and after they left. The goal: RSS under 200 MiB throughout.

Run: ``python -m bench.soak_streams [--floods 100] [--seconds 30] [--concurrency 4] [--idle-clients 300]
[--idle-seconds 10] [--max-bytes N] [--write]`` (``--write`` puts the figures into ``bench/results.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from bench import sections
from turnout.sim.aws import event

KEY = "bench-soak-key-000000"
ROUTES = ("openai.flood", "bedrock.text", "bedrock.tool")
PIECE = "lorem ipsum dolor sit amet, consectetur adipiscing elit "  # one delta's text
_LISTENING = re.compile(rb"listening on (http://\S+) \(pid (\d+)\)")


class Flood:
    """The upstream: every stream is deltas for ``seconds`` at most (or until its client leaves), never an end."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = 0
        self.sent = 0

    async def openai(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        chunk = {"id": "c", "object": "chat.completion.chunk", "model": body.get("model", "flood")}
        delta = orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": PIECE}}]})
        return await self._flood(request, b"", b"data: " + delta + b"\n\n", "text/event-stream")

    async def bedrock(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        start = event("messageStart", b'{"role":"assistant"}')
        if request.match_info["model"].endswith("tool"):
            use = {"start": {"toolUse": {"toolUseId": "t1", "name": "get_weather"}}, "contentBlockIndex": 0}
            start += event("contentBlockStart", orjson.dumps(use))
            delta: dict[str, object] = {"delta": {"toolUse": {"input": PIECE}}, "contentBlockIndex": 0}
        else:
            delta = {"delta": {"text": PIECE}, "contentBlockIndex": 0}
        unit = event("contentBlockDelta", orjson.dumps(delta))
        return await self._flood(request, start, unit, "application/vnd.amazon.eventstream")

    async def _flood(self, request: web.Request, start: bytes, unit: bytes, content_type: str) -> web.StreamResponse:
        self.started += 1
        response = web.StreamResponse(headers={"Content-Type": content_type})
        await response.prepare(request)
        batch = unit * max(1, 16384 // len(unit))
        until = time.monotonic() + self.seconds
        with contextlib.suppress(ConnectionError, OSError):
            await response.write(start)
            while time.monotonic() < until:
                await response.write(batch)
                self.sent += len(batch)
            await response.write_eof()
        return response


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gateway_config(upstream: str, ledger: Path, max_bytes: int | None) -> str:
    bound = f"max_response_bytes = {max_bytes}\n" if max_bytes else ""
    bedrock = f'uri = "{upstream}"\nregion = "us-east-1"\napi_key = "bedrock-api-key-0001"\n{bound}'
    return (
        'default_provider = "openai.flood"\n'
        f'[ledger]\npath = "{ledger}"\n'
        "[reliability]\nprovider_retries = 0\n[reliability.breaker]\nenabled = false\n"
        f'[gateway]\napi_keys = ["{KEY}"]\n'
        f'[providers.models.openai.flood]\nuri = "{upstream}/v1"\napi_key = "sk-up"\nmodel = "flood"\n{bound}'
        f'[providers.models.bedrock.text]\n{bedrock}model = "flood-text"\n'
        f'[providers.models.bedrock.tool]\n{bedrock}model = "flood-tool"\n'
    )


@contextlib.asynccontextmanager
async def serve(config: str, tmp: Path) -> AsyncIterator[tuple[str, int]]:
    """``turnout serve`` with ``config``; yields its URL and the PID that serves, once it listens."""
    path = tmp / "soak.toml"
    path.write_text(config)
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "turnout", "serve", "--config", str(path), "--port", str(free_port()),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None
    drain: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(60):
            while not (found := _LISTENING.search(await proc.stderr.readline() or b"ended")):
                if proc.returncode is not None:
                    raise RuntimeError("turnout serve ended before listening")
        drain = asyncio.create_task(_drain(proc.stderr))
        yield found.group(1).decode(), int(found.group(2))
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await proc.wait()
    finally:
        if drain is not None:
            drain.cancel()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


def request_body(route: str) -> bytes:
    return orjson.dumps({"model": route, "stream": True, "messages": [{"role": "user", "content": "flood"}]})


async def one_flood(session: aiohttp.ClientSession, url: str, route: str) -> tuple[int, str]:
    """One flood read to its end by its client: the bytes it got, and how it ended."""
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    async with session.post(url + "/v1/chat/completions", data=request_body(route), headers=headers) as resp:
        got = 0
        last = b""
        async for chunk in resp.content.iter_any():
            got += len(chunk)
            last = (last + chunk)[-4096:]
    if resp.status != 200:
        return got, f"status {resp.status}"
    return got, "interrupted" if b"stream_interrupted" in last or b'"error"' in last else "other"


@dataclass(slots=True)
class Soak:
    """What one soak measured (MiB, seconds)."""

    floods: int = 0
    endings: dict[str, int] | None = None
    rounds: list[tuple[int, float]] | None = None  # (floods so far, RSS after them)
    seconds: float = 0.0
    before: float = 0.0
    peak: float = 0.0
    after: float = 0.0
    idle_clients: int = 0
    idle: float = 0.0
    idle_after: float = 0.0
    upstream_started: int = 0
    upstream_gib: float = 0.0


async def floods(url: str, n: int, concurrency: int) -> dict[str, int]:
    """``n`` floods, ``concurrency`` at a time, over every route in turn; how they ended."""
    endings: dict[str, int] = {}
    queue = iter(range(n))
    timeout = aiohttp.ClientTimeout(total=None, sock_read=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def worker() -> None:
            for i in queue:
                _, ending = await one_flood(session, url, ROUTES[i % len(ROUTES)])
                endings[ending] = endings.get(ending, 0) + 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return endings


def rounds(n: int, parts: int = 5) -> list[int]:
    """``n`` floods in (at most) ``parts`` rounds of about the same size."""
    return [size for i in range(parts) if (size := n * (i + 1) // parts - n * i // parts)]


async def idle_clients(url: str, n: int, seconds: float, pid: int) -> float:
    """``n`` connections that send a streaming request and never read; the gateway's RSS after ``seconds``."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    writers: list[asyncio.StreamWriter] = []
    try:
        for i in range(n):
            _, writer = await asyncio.open_connection(host, int(port))
            body = request_body(ROUTES[i % 2])  # text floods: the ones that write to the client
            writer.write(
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            writers.append(writer)
        await asyncio.sleep(seconds)  # the floods run into the clients' full windows meanwhile
        return rss_mib(pid)
    finally:
        for writer in writers:
            writer.transport.abort()


async def soak(args: argparse.Namespace) -> Soak:
    """Run the floods, then the idle clients, against one ``turnout serve``; what its RSS did."""
    upstream = Flood(args.seconds)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", upstream.openai)
    app.router.add_post("/model/{model}/converse-stream", upstream.bedrock)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    result = Soak(floods=args.floods, idle_clients=args.idle_clients)
    try:
        with tempfile.TemporaryDirectory(prefix="turnout-soak-") as d:
            async with serve(gateway_config(up, Path(d) / "ledger.sqlite3", args.max_bytes), Path(d)) as (url, pid):
                result.before = rss_mib(pid)
                t0 = time.perf_counter()
                result.endings, result.rounds = {}, []
                done = 0
                for size in rounds(args.floods):  # RSS after each fifth: flat, or growing with the floods
                    for ending, n in (await floods(url, size, args.concurrency)).items():
                        result.endings[ending] = result.endings.get(ending, 0) + n
                    done += size
                    result.rounds.append((done, rss_mib(pid)))
                result.seconds = time.perf_counter() - t0
                await asyncio.sleep(1.0)  # the last streams' closing work
                result.peak, result.after = rss_mib(pid, "VmHWM"), rss_mib(pid)
                if args.idle_clients:
                    result.idle = await idle_clients(url, args.idle_clients, args.idle_seconds, pid)
                    await asyncio.sleep(2.0)  # the gateway sees the clients go and ends their streams
                    result.idle_after = rss_mib(pid)
                    result.peak = rss_mib(pid, "VmHWM")
    finally:
        await runner.cleanup()
    result.upstream_started, result.upstream_gib = upstream.started, upstream.sent / 2**30
    return result


def report(r: Soak, args: argparse.Namespace) -> str:
    bound = f"{args.max_bytes} bytes" if args.max_bytes else "the default 32 MiB"
    endings = ", ".join(f"{k} {v}" for k, v in sorted((r.endings or {}).items()))
    lines = [
        "## Stream memory",
        "",
        f"`python -m bench.soak_streams --floods {args.floods} --seconds {args.seconds:g} --concurrency "
        f"{args.concurrency} --idle-clients {args.idle_clients} --idle-seconds {args.idle_seconds:g}`: "
        f"`turnout serve` over a loopback upstream whose streams never end (OpenAI SSE text, Bedrock text, Bedrock "
        f"tool input, in turn), `max_response_bytes` {bound}.",
        "",
        "| | gateway RSS (MiB) |",
        "|---|---|",
        f"| before | {r.before:.0f} |",
        *(f"| after {done} floods | {rss:.0f} |" for done, rss in (r.rounds or [])[:-1]),
        f"| after {r.floods} floods ({r.seconds:.0f} s; endings: {endings}) | {r.after:.0f} |",
    ]
    if r.idle_clients:
        lines += [
            f"| {r.idle_clients} clients that never read, after {args.idle_seconds:g} s | {r.idle:.0f} |",
            f"| after they left | {r.idle_after:.0f} |",
        ]
    lines += [
        f"| peak (VmHWM) | {r.peak:.0f} |",
        "",
        f"The upstream started {r.upstream_started} streams and wrote {r.upstream_gib:.2f} GiB.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak_streams", description=__doc__.split("\n")[0])
    parser.add_argument("--floods", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long one flood lasts at most")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--idle-clients", type=int, default=300)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--max-bytes", type=int, default=None, help="the profiles' max_response_bytes")
    parser.add_argument("--write", action="store_true", help="put the figures into bench/results.md")
    args = parser.parse_args()
    text = report(asyncio.run(soak(args)), args)
    print(text)
    if args.write:
        sections.write(text)


if __name__ == "__main__":
    main()
