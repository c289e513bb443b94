"""1,000 concurrent streams through one client, in a dedicated child process: RSS per stream and throughput.

The child runs one contender (``turnout`` or ``raw``) so its RSS is that contender's alone:

1. *held*: ``streams`` concurrent streams from the ``/paced`` upstream (10 bursts of 10 chunks, 100 ms apart,
   so every stream stays open about a second and all of them are open at once). A sampler reads the RSS
   every 5 ms; RSS per stream = (peak − baseline after warm-up) / streams.
2. *throughput*: ``waves`` times, ``streams`` concurrent unpaced 100-chunk streams; streams/s, chunks/s and
   the client's CPU time per stream.

Run by :func:`measure` (``python -m bench.concurrency --url … --contender turnout``); prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from bench import procs
from bench.contenders import EXPECTED_STREAM, Raw, TurnoutClient
from bench.upstream import STREAM_CHUNKS

CONTENDERS = ("raw", "turnout")


def _make(kind: str, url: str, prefix: str) -> Any:
    if kind == "raw":
        return Raw(url, prefix=prefix, limit=0)
    return TurnoutClient(url, primary_prefix=prefix)


async def _sample_peak(proc: Any, stop: asyncio.Event, peak: list[int]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        await asyncio.sleep(0.005)


async def _child(kind: str, url: str, streams: int, waves: int) -> dict[str, Any]:
    import psutil

    proc = psutil.Process()
    held = _make(kind, url, "/paced")
    fast = _make(kind, url, "")
    try:
        for client in (held, fast):  # warm up: code paths, a few pooled connections (paced ones concurrently)
            texts = await asyncio.gather(*(client.stream() for _ in range(20)))
            if any(t != EXPECTED_STREAM for t in texts):
                raise RuntimeError(f"{kind}: wrong stream")
        gc.collect()
        baseline = proc.memory_info().rss
        peak = [baseline]
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_peak(proc, stop, peak))
        t0 = time.perf_counter()
        texts = await asyncio.gather(*(held.stream() for _ in range(streams)))
        held_s = time.perf_counter() - t0
        stop.set()
        await sampler
        if any(t != EXPECTED_STREAM for t in texts):
            raise RuntimeError(f"{kind}: a held stream was wrong")
        del texts
        gc.collect()
        cpu0 = sum(proc.cpu_times()[:2])
        t0 = time.perf_counter()
        for _ in range(waves):
            texts = await asyncio.gather(*(fast.stream() for _ in range(streams)))
            if any(t != EXPECTED_STREAM for t in texts):
                raise RuntimeError(f"{kind}: a stream was wrong")
        wall = time.perf_counter() - t0
        cpu = sum(proc.cpu_times()[:2]) - cpu0
    finally:
        await held.aclose()
        await fast.aclose()
    total = streams * waves
    return {
        "contender": kind,
        "streams": streams,
        "baseline_rss": baseline,
        "peak_rss": peak[0],
        "hwm": procs.peak_rss(),
        "held_s": held_s,
        "streams_per_s": total / wall,
        "chunks_per_s": total * STREAM_CHUNKS / wall,
        "cpu_us_per_stream": cpu / total * 1e6,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Concurrency:
    """What one contender's child process measured."""

    contender: str
    streams: int
    baseline_mib: float
    peak_mib: float
    maxrss_mib: float
    per_stream_kib: float
    held_s: float
    streams_per_s: float
    chunks_per_s: float
    cpu_us_per_stream: float


def measure(url: str, kind: str, streams: int, waves: int, timeout: float = 240.0) -> Concurrency:
    """Run the scenario for one contender in a fresh child process pinned to the client CPU."""
    out = subprocess.run(
        [
            procs.PY,
            "-m",
            "bench.concurrency",
            "--url",
            url,
            "--contender",
            kind,
            "--streams",
            str(streams),
            "--waves",
            str(waves),
        ],
        cwd=procs.ROOT,
        env=procs.offline_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=procs.pinned_to(procs.CLIENT_CPU),
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"concurrency child ({kind}) failed: {out.stderr.strip()[-2000:]}")
    d = json.loads(out.stdout.strip().splitlines()[-1])
    mib = 1024 * 1024
    return Concurrency(
        contender=kind,
        streams=d["streams"],
        baseline_mib=d["baseline_rss"] / mib,
        peak_mib=d["peak_rss"] / mib,
        maxrss_mib=d["hwm"] / mib,
        per_stream_kib=(d["peak_rss"] - d["baseline_rss"]) / d["streams"] / 1024,
        held_s=d["held_s"],
        streams_per_s=d["streams_per_s"],
        chunks_per_s=d["chunks_per_s"],
        cpu_us_per_stream=d["cpu_us_per_stream"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="One contender's concurrent streams (a child of bench.run).")
    parser.add_argument("--url", required=True)
    parser.add_argument("--contender", choices=CONTENDERS, required=True)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--waves", type=int, default=3)
    args = parser.parse_args()
    result = asyncio.run(_child(args.contender, args.url, args.streams, args.waves))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
