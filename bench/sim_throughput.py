"""Simulator throughput: requests per second one simulator process serves on one core.

Run: ``.venv/bin/python bench/sim_throughput.py [--seconds 3] [--concurrency 64]``

The simulator runs in a child process pinned to one CPU (when the OS allows pinning); this process
drives it over loopback with aiohttp from another CPU and prints, for non-streaming answers in each
protocol and for an OpenAI stream, the requests per second measured on the wall clock and the
requests per CPU-second the simulator process used (its capacity on one free core; the two agree
when nothing else competes for the CPUs and the client is not the bottleneck). Bounded in time:
about ``(seconds + 0.5) * 6`` seconds. Talks only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "user", "content": "Say hello to the benchmark, briefly."}]

CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("openai chat", "/v1/chat/completions", {"model": "gpt-4.1", "messages": MESSAGES}),
    ("openai responses", "/v1/responses", {"model": "gpt-4.1", "input": "Say hello."}),
    ("anthropic", "/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": MESSAGES}),
    (
        "gemini",
        "/v1beta/models/gemini-2.5-flash:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]},
    ),
    ("ollama", "/api/chat", {"model": "llama3.2", "stream": False, "messages": MESSAGES}),
    (
        "openai chat, stream",
        "/v1/chat/completions",
        {"model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True}, "messages": MESSAGES},
    ),
]


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux ``/proc``), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu})


async def _serve() -> None:
    from turnout.sim import Simulator

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with Simulator(max_log=10_000) as sim:
        print(sim.port, flush=True)
        await stop.wait()


async def _drive(
    url: str, path: str, body: dict[str, Any], seconds: float, concurrency: int, pid: int
) -> tuple[float, float | None]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    headers = {"Authorization": "Bearer sk-bench"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        count = 0
        deadline = 0.0
        counting = False

        async def worker() -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                async with session.post(url + path, json=body) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"{path}: HTTP {resp.status}")
                if counting:
                    count += 1

        deadline = time.perf_counter() + 0.5  # warm up: connections, caches
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        counting = True
        cpu_start = _cpu_seconds(pid)
        start = time.perf_counter()
        deadline = start + seconds
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
        cpu_end = _cpu_seconds(pid)
        per_cpu = (
            None if cpu_start is None or cpu_end is None or cpu_end <= cpu_start else count / (cpu_end - cpu_start)
        )
        return count / wall, per_cpu


async def _bench(seconds: float, concurrency: int) -> None:
    child = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, __file__, "--serve"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)
        url = f"http://127.0.0.1:{int(line)}"
        pinned = "pinned to one CPU" if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1 else "unpinned"
        print(f"simulator at {url} ({pinned}); {concurrency} concurrent clients, {seconds:g} s per case")
        print(f"  {'case':<22} {'req/s':>8} {'req per simulator CPU-second':>30}")
        for name, path, body in CASES:
            rate, per_cpu = await _drive(url, path, body, seconds, concurrency, child.pid)
            capacity = "n/a" if per_cpu is None else f"{per_cpu:.0f}"
            print(f"  {name:<22} {rate:8.0f} {capacity:>30}")
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per case")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent client requests")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _pin(0)
        asyncio.run(_serve())
        return
    _pin(1)
    asyncio.run(_bench(args.seconds, args.concurrency))


if __name__ == "__main__":
    main()
