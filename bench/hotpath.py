"""Client-side cost per call, raw aiohttp against Turnout, for work on the hot paths.

Wall-clock medians on a shared machine drift by tens of microseconds, so this tool measures what the client
process itself spends per call, two ways:

* CPU time (``time.thread_time``), the lowest of several rounds of alternating batches: quick, still noisy;
* with ``--instructions``: instructions counted by ``valgrind --tool=callgrind`` over the measured calls
  only (repeatable to about 0.1 %, whatever else the machine does; about 30 s per scenario and contender).

The upstream (:mod:`bench.upstream`) runs in its own process on the other CPU.

Usage::

    python -m bench.hotpath [--calls N] [--rounds R] [--only chat,stream,failover,cooldown] [--breaker-off]
    python -m bench.hotpath --instructions [--only ...] [--breaker-off | --hedge-idle]
    python -m bench.hotpath --profile chat [--sort cumtime] [--top 60]   # cProfile of one Turnout scenario
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import shutil
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import procs
from bench.contenders import EXPECTED_CHAT, EXPECTED_STREAM, Raw, TurnoutClient, turnout_config

SCENARIOS = ("chat", "stream", "failover", "cooldown")
#: The primary's upstream behaviour per scenario (see :mod:`bench.upstream`).
PREFIX = {"chat": "", "stream": "", "failover": "/rl-ra0", "cooldown": "/rl-ra60"}
Call = Callable[[], Awaitable[str]]
#: The contenders: the floor, Turnout, Turnout with ``[reliability.breaker] enabled = false``, and Turnout hedging
#: after :data:`HEDGE_IDLE_MS` (hedging on, but no call waits that long: what being on costs).
KINDS = ("raw", "turnout", "turnout-breaker-off", "turnout-hedge-idle")
HEDGE_IDLE_MS = 60_000.0


def contender(url: str, scenario: str, kind: str) -> tuple[Any, Call, str]:
    """``(object, call, expected answer)`` for one contender (one of :data:`KINDS`) of a scenario."""
    method = "stream" if scenario == "stream" else "chat"
    expected = EXPECTED_STREAM if method == "stream" else EXPECTED_CHAT
    if kind == "raw":
        obj: Any = Raw(url)
    else:
        config = turnout_config(
            url,
            primary_prefix=PREFIX[scenario],
            breaker=kind != "turnout-breaker-off",
            hedge_after_ms=HEDGE_IDLE_MS if kind == "turnout-hedge-idle" else None,
        )
        obj = TurnoutClient(url, config=config)
    return obj, getattr(obj, method), expected


async def _cpu_per_call(fn: Call, calls: int) -> float:
    t0 = time.thread_time()
    for _ in range(calls):
        await fn()
    return (time.thread_time() - t0) / calls * 1e6


async def cpu_time(url: str, scenario: str, calls: int, rounds: int, kind: str = "turnout") -> tuple[float, float]:
    """The lowest CPU time per call over ``rounds`` alternating batches: (raw, turnout)."""
    raw, raw_fn, expected = contender(url, scenario, "raw")
    tc, t_fn, _ = contender(url, scenario, kind)
    try:
        if await raw_fn() != expected or await t_fn() != expected:
            raise RuntimeError("a contender did not return the upstream's answer")
        for _ in range(max(50, calls // 4)):
            await raw_fn()
            await t_fn()
        raws, turns = [], []
        for _ in range(rounds):
            raws.append(await _cpu_per_call(raw_fn, calls))
            turns.append(await _cpu_per_call(t_fn, calls))
        return min(raws), min(turns)
    finally:
        await raw.aclose()
        await tc.aclose()


def _measured_child(url: str, scenario: str, kind: str, calls: int) -> None:
    """Run under callgrind: warm up, then make ``calls`` calls inside ``sorted`` (the collection toggle)."""
    loop = asyncio.new_event_loop()

    async def build() -> tuple[Any, Call, str]:
        return contender(url, scenario, kind)

    obj, fn, expected = loop.run_until_complete(build())

    async def run(n: int) -> None:
        for _ in range(n):
            if await fn() != expected:
                raise RuntimeError("a contender did not return the upstream's answer")

    loop.run_until_complete(run(100))
    gc.collect()
    sorted([0], key=lambda _: loop.run_until_complete(run(calls)))
    loop.run_until_complete(obj.aclose())


def _instructions_of(url: str, scenario: str, kind: str, calls: int) -> int:
    return procs.callgrind_instructions("bench.hotpath", f"{url} {scenario} {kind} {calls}")


def instructions(url: str, scenario: str, kind: str) -> float:
    """Instructions per call: the difference of two runs of different lengths (start-up costs cancel)."""
    short, long_ = (30, 120) if scenario == "stream" else (100, 400)
    with ThreadPoolExecutor(2) as pool:  # valgrind runs one thread: two runs at once
        a, b = pool.map(lambda n: _instructions_of(url, scenario, kind, n), (short, long_))
    return (b - a) / (long_ - short)


async def profile(
    url: str, scenario: str, calls: int, kind: str = "turnout", sort: str = "tottime", top: int = 40
) -> None:
    """cProfile of Turnout's calls in one scenario: the ``top`` functions by ``sort`` (own time by default)."""
    tc, fn, _ = contender(url, scenario, kind)
    try:
        for _ in range(100):
            await fn()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            await fn()
        prof.disable()
    finally:
        await tc.aclose()
    pstats.Stats(prof).sort_stats(sort).print_stats(top)


def _report(scenario: str, raw: float, turnout: float, unit: str) -> None:
    print(
        f"{scenario:9s} raw {raw:11,.1f} {unit}  turnout {turnout:11,.1f} {unit}  "
        f"overhead {turnout - raw:+11,.1f}  ratio {turnout / raw:5.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--profile", choices=SCENARIOS, default=None)
    parser.add_argument("--sort", default="tottime", help="with --profile: the pstats sort key (cumtime, ncalls, ...)")
    parser.add_argument("--top", type=int, default=40, help="with --profile: how many functions to show")
    parser.add_argument("--instructions", action="store_true", help="count instructions with callgrind")
    parser.add_argument("--breaker-off", action="store_true", help="Turnout with [reliability.breaker] enabled = false")
    parser.add_argument("--hedge-idle", action="store_true", help="Turnout hedging after a delay no call reaches")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, scenario, kind, calls = args.child.split()
        _measured_child(url, scenario, kind, int(calls))
        return
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    os.environ.update(procs.OFFLINE_ENV)
    procs.pin(procs.CLIENT_CPU)
    kind = "turnout-breaker-off" if args.breaker_off else "turnout-hedge-idle" if args.hedge_idle else "turnout"
    with procs.upstream() as url:
        if args.profile:
            asyncio.run(profile(url, args.profile, args.calls, kind, args.sort, args.top))
            return
        for scenario in args.only.split(","):
            if args.instructions:
                _report(scenario, instructions(url, scenario, "raw"), instructions(url, scenario, kind), "instr")
                continue
            calls = args.calls // 4 if scenario == "stream" else args.calls
            raw, turnout = asyncio.run(cpu_time(url, scenario, calls, args.rounds, kind))
            _report(scenario, raw, turnout, "µs")


if __name__ == "__main__":
    main()
