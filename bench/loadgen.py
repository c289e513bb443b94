"""HTTP load for the gateway scenario: saturation (``wrk``, else aiohttp) and a fixed-rate open loop.

Both are bounded in time and talk to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from bench import procs
from bench.stats import Summary, summarize


@dataclass(frozen=True, slots=True, kw_only=True)
class Saturation:
    """Closed-loop load: requests per second and how many answers were not 200."""

    rps: float
    errors: int
    tool: str
    #: How many requests were answered (to divide a server's CPU time by).
    requests: int = 0


def _lua(body: bytes, key: str) -> str:
    escaped = body.decode().replace("\\", "\\\\").replace('"', '\\"')
    return (
        'wrk.method = "POST"\n'
        f'wrk.body = "{escaped}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {key}"\n'
    )


def saturate_wrk(url: str, body: bytes, key: str, *, seconds: float, connections: int, cpu: int | None) -> Saturation:
    """``wrk -t1`` against ``url`` for ``seconds`` (pinned to ``cpu``)."""
    wrk = procs.wrk_path()
    assert wrk is not None
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(_lua(body, key))
        script = f.name
    try:
        out = subprocess.run(
            [wrk, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", script, url],
            capture_output=True,
            text=True,
            timeout=seconds + 30,
            preexec_fn=procs.pinned_to(cpu),
            check=False,
        )
    finally:
        Path(script).unlink(missing_ok=True)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    if out.returncode != 0 or rps is None:
        raise RuntimeError(f"wrk failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out.stdout)
    socket_errors = re.search(r"Socket errors:.*", out.stdout)
    errors = int(bad.group(1)) if bad else 0
    if socket_errors:
        errors += sum(int(n) for n in re.findall(r"\d+", socket_errors.group(0)))
    done = re.search(r"(\d+) requests in", out.stdout)
    return Saturation(
        rps=float(rps.group(1)),
        errors=errors,
        tool=f"wrk -t1 -c{connections}",
        requests=int(done.group(1)) if done else 0,
    )


async def saturate_aiohttp(url: str, body: bytes, key: str, *, seconds: float, connections: int) -> Saturation:
    """The same closed loop with aiohttp (when ``wrk`` is not installed): ``connections`` workers."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    count = errors = 0
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal count, errors
            while time.perf_counter() < deadline:
                async with session.post(url, data=body) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
                count += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        wall = time.perf_counter() - t0
    return Saturation(rps=count / wall, errors=errors, tool=f"aiohttp, {connections} connections", requests=count)


async def fixed_rate(url: str, body: bytes, key: str, *, rate: float, count: int, name: str) -> tuple[Summary, int]:
    """An open loop: ``count`` requests, one every ``1/rate`` s, each timed alone. Returns (latencies, errors).

    Requests are sent on schedule whether or not earlier ones have answered (so a slow server is not
    spared load, unlike a closed loop); the run is bounded by ``count / rate`` plus 60 s.
    """
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    samples: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            nonlocal errors
            t0 = time.perf_counter()
            async with session.post(url, data=body) as resp:
                data = await resp.read()
            samples.append(time.perf_counter() - t0)
            if resp.status != 200 or b"choices" not in data:
                errors += 1

        for _ in range(20):  # warm: connections, code paths
            await one()
        samples.clear()
        tasks = []
        start = time.perf_counter()
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    return summarize(name, samples), errors


async def sequential_rounds(
    targets: Sequence[tuple[str, bytes, str, str]], *, count: int, batch: int = 20
) -> list[Summary]:
    """A closed loop on one connection per ``(url, body, key, name)`` target: ``count`` timed requests each.

    After 20 untimed requests per target, batches of ``batch`` back-to-back requests go to each in turn
    (A B C A B C …) until ``count`` are timed for each, so a drift in the machine's load reaches all alike.
    """
    sessions = [
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        for _, _, key, _ in targets
    ]
    samples: list[list[float]] = [[] for _ in targets]
    try:
        for session, (url, body, _, _) in zip(sessions, targets, strict=True):  # untimed: connect, warm up
            for _ in range(20):
                async with session.post(url, data=body) as resp:
                    await resp.read()
        while len(samples[0]) < count:
            for session, (url, body, _, name), times in zip(sessions, targets, samples, strict=True):
                for _ in range(min(batch, count - len(times))):
                    t0 = time.perf_counter()
                    async with session.post(url, data=body) as resp:
                        await resp.read()
                        if resp.status != 200:
                            raise RuntimeError(f"{name}: HTTP {resp.status}")
                    times.append(time.perf_counter() - t0)
    finally:
        for session in sessions:
            await session.close()
    return [summarize(name, times) for (_, _, _, name), times in zip(targets, samples, strict=True)]


def chat_body(model: str) -> bytes:
    """The request every load generator sends."""
    from bench.contenders import MESSAGES

    return orjson.dumps({"model": model, "messages": MESSAGES})
