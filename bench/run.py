"""Run every benchmark scenario in one run and write ``bench/results.md`` and ``bench/results.png``.

Usage: ``python -m bench.run [--quick] [--only chat,stream,...,breaker,flaky,pools,hedge] [--out DIR]``
(``make bench`` runs the full set).

The full run takes about 13 minutes on 2 cores; ``--quick`` runs fewer rounds and seeds. Everything talks to
127.0.0.1 only, and every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from bench import breaker, calls, concurrency, flaky, gateway, hedge, pools, procs, report, startup
from bench.settings import FULL, QUICK, Settings

SCENARIOS = ("chat", "stream", "failover", "concurrency", "startup", "gateway", "breaker", "flaky", "pools", "hedge")
T = TypeVar("T")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _guard(results: report.Results, key: str, fn: Callable[[], T]) -> T | None:
    """Run one scenario; a failure is recorded in the results (and the run goes on)."""
    _say(f"[bench] {key} …")
    t0 = time.perf_counter()
    try:
        out = fn()
    except Exception as exc:  # a scenario that cannot run is reported, not fatal to the others
        results.failures[key] = f"{type(exc).__name__}: {str(exc)[:600]}"
        _say(f"[bench] {key} failed: {results.failures[key]}")
        traceback.print_exc(file=sys.stderr)
        return None
    _say(f"[bench] {key} done in {time.perf_counter() - t0:.1f} s")
    return out


def _async(coro_fn: Callable[[], Awaitable[T]]) -> Callable[[], T]:
    return lambda: asyncio.run(coro_fn())  # type: ignore[arg-type]


def _concurrency(url: str, kind: str, s: Settings) -> concurrency.Concurrency:
    return concurrency.measure(url, kind, s.streams, s.stream_waves)


def run(s: Settings, only: set[str], out_dir: Path, argv: list[str]) -> report.Results:
    """Run the selected scenarios against one upstream and write the report."""
    os.environ.update(procs.OFFLINE_ENV)  # before LiteLLM is imported in this process
    procs.pin(procs.CLIENT_CPU)
    results = report.Results(settings=s, machine=procs.machine(), started=dt.datetime.now(dt.UTC))
    results.commands.append(" ".join(["python -m bench.run", *argv]))
    results.commands.append(f"python -m bench.upstream --cpu {procs.UPSTREAM_CPU}  (the upstream, one process)")
    t0 = time.perf_counter()
    with procs.upstream() as url, tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmpdir:
        tmp = Path(tmpdir)
        if "chat" in only:
            results.chat = _guard(results, "chat", _async(lambda: calls.non_streaming(url, s, tmp)))
        if "stream" in only:
            results.stream = _guard(results, "stream", _async(lambda: calls.streaming(url, s)))
        if "failover" in only:
            results.failover = _guard(results, "failover", _async(lambda: calls.failover(url, s)))
        if "concurrency" in only:
            results.commands.append(
                f"python -m bench.concurrency --url URL --contender {{raw,turnout}} --streams {s.streams} "
                f"--waves {s.stream_waves}  (each in a fresh process pinned to CPU {procs.CLIENT_CPU})"
            )
            for kind in concurrency.CONTENDERS:
                c = _guard(results, f"concurrency ({kind})", functools.partial(_concurrency, url, kind, s))
                if c is not None:
                    results.concurrency.append(c)
        if "startup" in only:
            results.commands.append(
                "python -c '<snippet>'  (start-up: one fresh interpreter per run, see bench/startup.py)"
            )
            results.startup = _guard(results, "startup", lambda: startup.measure(s.startup_runs)) or []
            results.imports = startup.top_imports() if results.startup else []
        if "gateway" in only:
            if procs.wrk_path():
                results.commands.append(
                    f"wrk -t1 -c{s.gateway_connections} -d{round(s.gateway_seconds)}s -s post.lua URL  (saturation)"
                )
            results.gateway = _guard(results, "gateway", _async(lambda: gateway.measure(url, s)))
        if "breaker" in only:
            results.commands.append(
                "python -m bench.hotpath --instructions --only chat [--breaker-off]  (the breaker's healthy-path "
                "bookkeeping, inside the breaker scenario)"
            )
            results.breaker = _guard(results, "breaker", _async(lambda: breaker.measure(url, s)))
        if "flaky" in only:
            results.flaky = _guard(results, "flaky", _async(lambda: flaky.measure(s.flaky_calls, s.flaky_seeds)))
        if "pools" in only:
            results.commands.append(
                "python -m bench.walkchild URL  (pools: three children pinned to CPU "
                f"{procs.CLIENT_CPU}: this tree's turnout, the one before pools and a copy of this one, alternating)"
            )
            results.pools = _guard(results, "pools", _async(lambda: pools.measure(url, s)))
        if "hedge" in only:
            results.commands.append(
                "python -m bench.hotpath --instructions --only chat [--hedge-idle]  (hedging's cost when off, inside "
                "the hedge scenario)"
            )
            results.hedge = _guard(results, "hedge", _async(lambda: hedge.measure(url, s)))
    results.seconds = time.perf_counter() - t0
    report.write(results, out_dir)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Turnout benchmarks: ratios to raw aiohttp, LiteLLM and the openai SDK."
    )
    parser.add_argument("--quick", action="store_true", help="a 1-2 minute smoke run with small counts")
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="where results.md/png go")
    args = parser.parse_args(argv)
    raw_argv = sys.argv[1:] if argv is None else argv
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    unknown = only - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    s = QUICK if args.quick else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    results = run(s, only, args.out, [shlex.quote(a) for a in raw_argv])
    _say(f"[bench] wrote {args.out / 'results.md'} in {results.seconds / 60:.1f} min")
    for v in report.verdicts(results):
        _say(
            f"  {'met ' if v.met else ('n/a ' if v.met is None else 'MISS')} {v.target}: {v.measured} (limit {v.limit})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
