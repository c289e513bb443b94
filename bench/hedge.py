"""The hedging scenario: a primary with a heavy tail of slow first tokens, hedged on a fallback after "auto".

*Tail* (in process, against the simulator with real delays): the primary's first token comes after
:data:`PRIMARY_MS` ms, or after :data:`TAIL_S` s in :data:`TAIL_P` of its attempts (the simulator's seeded draw:
``ok-d0.05-tail2-tp0.04``); the fallback's after :data:`FALLBACK_MS` ms. :data:`CALLS` sequential streamed calls,
once with ``[reliability.hedge] enabled = true, after_ms = "auto"`` and the default budget, once without hedging,
each with a fresh simulator seeded alike (so the same calls draw the tail in both runs): seeds 1, 2, ... as many as
the settings say (fewer without hedging, whose result hardly varies: about 40 ×). ``"auto"`` hedges only once it has
seen :data:`~turnout.walk.stats.MIN_SAMPLES` answers of the primary, so each run first makes :data:`WARMUP` calls that
are not measured. Measured per call: the time to the first text event as the caller sees it (from the call to
the event); per run: the upstream requests beyond one per call (what hedging costs upstream), from the
simulator's log.

*Cost when off*: instructions per healthy non-streaming call (``python -m bench.hotpath --instructions --only
chat``) without hedging, and with hedging on but a delay that never fires (needs valgrind).
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench import hotpath
from bench.contenders import MESSAGES
from bench.settings import FULL, Settings
from bench.stats import percentile

PRIMARY_MS, TAIL_S, TAIL_P, FALLBACK_MS = 50, 2.0, 0.04, 80
CALLS, WARMUP = 100, 20
PRIMARY, FALLBACK = "primary-50ms-tail", "fallback-80ms"


@dataclass(slots=True, kw_only=True)
class Run:
    """One run of :data:`CALLS` measured calls (after :data:`WARMUP` calls that are not).

    Attributes:
        seed: The simulator's seed.
        hedging: Whether hedging was on.
        ttft_ms: Each measured call's time to its first text event, in milliseconds.
        requests: Upstream requests the measured calls made (both entries).
        tails: Measured calls whose primary attempt drew the tail.
        slow: Measured calls whose first text came after :data:`TAIL_S` (a tail nothing hedged in time).
        hedged: Hedges sent during the measured calls (the client's own count).
        won: Of those, hedges that answered first.
        seconds: The run's wall time, warm-up included.
    """

    seed: int
    hedging: bool
    ttft_ms: list[float]
    requests: int
    tails: int
    slow: int
    hedged: int = 0
    won: int = 0
    seconds: float = 0.0

    @property
    def p50(self) -> float:
        """Median time to first token, ms."""
        return statistics.median(self.ttft_ms)

    @property
    def p99(self) -> float:
        """99th percentile time to first token (nearest rank), ms."""
        return percentile(sorted(self.ttft_ms), 0.99)

    @property
    def ratio(self) -> float:
        """p99 over p50."""
        return self.p99 / self.p50

    @property
    def extra(self) -> float:
        """Upstream requests beyond one per call, as a share of the calls."""
        return (self.requests - len(self.ttft_ms)) / len(self.ttft_ms)


@dataclass(slots=True, kw_only=True)
class HedgeScenario:
    """Both parts of the hedging scenario (a part that could not run has its error in ``failures``)."""

    runs: list[Run] = field(default_factory=list)
    #: Instructions per call without hedging, and with hedging on that never fires (None: not measured).
    instructions_off: float | None = None
    instructions_idle: float | None = None
    failures: dict[str, str] = field(default_factory=dict)

    def of(self, *, hedging: bool) -> list[Run]:
        """The runs with hedging on (or off), in seed order."""
        return [r for r in self.runs if r.hedging is hedging]


def script(seed: int) -> dict[str, Any]:
    """The simulator's script: the heavy-tailed primary and the steady fallback, its draws seeded."""
    return {
        "seed": seed,
        "models": {
            PRIMARY: {"steps": [{"do": "ok", "delay": PRIMARY_MS / 1000, "tail": TAIL_S, "tail_p": TAIL_P}]},
            FALLBACK: {"steps": [{"do": "ok", "delay": FALLBACK_MS / 1000}]},
        },
    }


def config(base_url: str, *, hedging: bool) -> dict[str, Any]:
    """A primary with the fallback; hedging after ``"auto"`` with the default budget, or none."""
    out: dict[str, Any] = {
        "default_provider": "openai.primary",
        "providers": {
            "models": {
                "openai": {
                    "primary": {
                        "uri": base_url,
                        "api_key": "sk-bench-hedge",
                        "model": PRIMARY,
                        "fallback": ["openai.backup"],
                    },
                    "backup": {"uri": base_url, "api_key": "sk-bench-hedge", "model": FALLBACK},
                }
            }
        },
        "ledger": {"enabled": False},
    }
    if hedging:
        out["reliability"] = {"hedge": {"enabled": True, "after_ms": "auto"}}
    return out


async def run(seed: int, *, hedging: bool, calls: int = CALLS, warmup: int = WARMUP) -> Run:
    """``warmup`` calls, then ``calls`` measured sequential streamed calls, against a fresh seeded simulator."""
    from turnout import Client
    from turnout.sim import Simulator

    started = time.perf_counter()
    async with Simulator(script=script(seed)) as sim:
        async with Client.from_dict(config(sim.base_url("openai"), hedging=hedging), ledger=False) as client:
            for _ in range(warmup):
                await _first_text_ms(client)
            seen, before = len(sim.log), client.status()["hedging"]
            ttft = [await _first_text_ms(client) for _ in range(calls)]
            after = client.status()["hedging"]
        measured = sim.log[seen:]
    return Run(
        seed=seed,
        hedging=hedging,
        ttft_ms=ttft,
        requests=len(measured),
        tails=sum(1 for e in measured if e.model == PRIMARY and e.delay >= TAIL_S),
        slow=sum(1 for t in ttft if t >= TAIL_S * 1000.0),
        hedged=int(after["hedged"]) - int(before["hedged"]),
        won=int(after["hedge_wins"]) - int(before["hedge_wins"]),
        seconds=time.perf_counter() - started,
    )


async def _first_text_ms(client: Any) -> float:
    """One streamed call read to its end; the milliseconds from the call to its first text event."""
    t0 = time.perf_counter()
    first: float | None = None
    async for event in client.stream(MESSAGES):
        if first is None and event.type == "text":
            first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("a streamed call showed no text")
    return first * 1000.0


def instructions(url: str) -> tuple[float | None, float | None]:
    """Instructions per healthy call without hedging and with hedging that never fires; None without valgrind."""
    if shutil.which("valgrind") is None:
        return None, None
    return hotpath.instructions(url, "chat", "turnout"), hotpath.instructions(url, "chat", "turnout-hedge-idle")


async def measure(url: str, s: Settings) -> HedgeScenario:
    """The tail runs (hedging on, then off, for each seed the settings name), then the instruction counts."""
    out = HedgeScenario()
    try:
        for seed in range(1, s.hedge_seeds + 1):
            out.runs.append(await run(seed, hedging=True))
        for seed in range(1, s.hedge_off_seeds + 1):
            out.runs.append(await run(seed, hedging=False))
    except Exception as exc:  # reported in results.md; the other part still runs
        out.failures["tail"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    try:
        out.instructions_off, out.instructions_idle = await asyncio.to_thread(instructions, url)
    except Exception as exc:
        out.failures["instructions"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


# --- the report's targets and section ---------------------------------------------------------------------

#: The targets: p99 over p50 of the time to first token, and the extra upstream requests as a share of calls.
RATIO_LIMIT, EXTRA_LIMIT = 4.0, 0.07


def pooled(runs: list[Run]) -> tuple[float, float]:
    """Median and 99th percentile (nearest rank) of every measured call of ``runs``, ms."""
    every = sorted(t for r in runs for t in r.ttft_ms)
    return statistics.median(every), percentile(every, 0.99)


def extra(runs: list[Run]) -> float:
    """Upstream requests beyond one per call, as a share of every measured call of ``runs``."""
    calls = sum(len(r.ttft_ms) for r in runs)
    return (sum(r.requests for r in runs) - calls) / calls


def targets(h: HedgeScenario | None) -> list[tuple[str, str, str, bool | None]]:
    """``(target, measured, limit, met)`` of the hedging targets (met None: not measured)."""
    on = h.of(hedging=True) if h is not None else []
    scenario = f"first token after {PRIMARY_MS} ms, {TAIL_S:g} s in {TAIL_P * 100:g} %; fallback {FALLBACK_MS} ms"
    ratio_target = (
        f'Hedging ("auto", default budget; {scenario}): p99 / p50 time to first token, {len(on) or "the"} seeded '
        f"runs of {CALLS} streamed calls pooled"
    )
    extra_target = "Hedging: extra upstream requests, share of calls (the runs pooled; the most in one run)"
    if not on:
        return [(ratio_target, "–", f"≤ {RATIO_LIMIT:g} ×", None), (extra_target, "–", f"≤ {EXTRA_LIMIT:.0%}", None)]
    p50, p99 = pooled(on)
    alone = sum(1 for r in on if r.ratio <= RATIO_LIMIT)
    most = max(r.extra for r in on)
    return [
        (
            ratio_target,
            f"{p99 / p50:.1f} × ({p99:.0f} / {p50:.0f} ms); {alone} of {len(on)} runs alone",
            f"≤ {RATIO_LIMIT:g} ×",
            p99 / p50 <= RATIO_LIMIT,
        ),
        (extra_target, f"{extra(on):.1%} (most {most:.0%})", f"≤ {EXTRA_LIMIT:.0%}", extra(on) <= EXTRA_LIMIT + 1e-9),
    ]


def section(h: HedgeScenario | None, failure: str | None, measured: str) -> list[str]:
    """The report's section on hedging (``measured``: when and with which settings, as the other sections say)."""
    out = [
        "## Hedging",
        "",
        f"A primary whose first token comes after {PRIMARY_MS} ms, or after {TAIL_S:g} s in {TAIL_P * 100:g} % of its "
        f"attempts (the simulator's seeded draw), and a fallback at {FALLBACK_MS} ms (`bench/hedge.py`, the simulator "
        f"in process, real delays). {CALLS} sequential streamed calls per run with `[reliability.hedge] enabled = "
        'true, after_ms = "auto"` and the default budget (5 % of calls, bursts of 5), and without hedging. "auto" '
        "hedges only once it has seen 20 answers of the primary, so each run first makes "
        f"{WARMUP} calls that are not measured (their tail draws are not counted either). Each run has a fresh "
        "simulator and client; runs with the same seed draw the tail on the same calls. The time to first token "
        "is the caller's: from the call to its first text event. Extra requests: what reached the simulator "
        "beyond one per call.",
        "",
    ]
    if h is None:
        return [*out, f"Not measured: {failure or 'skipped'}", ""]
    out += [measured, ""]
    if h.runs:
        out += [
            "| hedging | seed | p50 ms | p99 ms | p99 / p50 | tail draws | calls after 2 s | hedges (answered "
            "first) | extra requests | s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {'on' if r.hedging else 'off'} | {r.seed} | {r.p50:.1f} | {r.p99:.1f} | {r.ratio:.1f} | {r.tails} "
            f"| {r.slow} | {r.hedged} ({r.won}) | {r.extra:.0%} | {r.seconds:.1f} |"
            for r in h.runs
        ]
        for hedging in (True, False):
            runs = h.of(hedging=hedging)
            if runs:
                p50, p99 = pooled(runs)
                out.append(
                    f"| {'on' if hedging else 'off'}, pooled | {len(runs)} seeds | {p50:.1f} | {p99:.1f} | "
                    f"{p99 / p50:.1f} | {sum(r.tails for r in runs)} | {sum(r.slow for r in runs)} | "
                    f"{sum(r.hedged for r in runs)} ({sum(r.won for r in runs)}) | {extra(runs):.1%} | |"
                )
        out += [
            "",
            "A call after 2 s is a tail no hedge cut short: its call found the budget spent. The draws are random, so "
            "the tail is 4 % only on average; a run with more, or with three tails within a few calls of each "
            "other, spends the burst and then earns one hedge per 20 calls. One such call leaves the p99 of a run "
            "of 100 alone (nearest rank: the second slowest call), two make it about 2 s; the pooled p99 reads the "
            "same runs as one longer sample.",
            "",
        ]
    if "tail" in h.failures:
        out += [f"Tail runs not measured: {h.failures['tail']}", ""]
    if h.instructions_off and h.instructions_idle:
        out.append(
            "Cost when off (`python -m bench.hotpath --instructions --only chat`, callgrind, the non-streaming call "
            f"of the chat scenario): {h.instructions_off:,.0f} instructions per call without hedging; hedging on with "
            f"a delay no call reaches (`--hedge-idle`): {h.instructions_idle:,.0f} "
            f"({h.instructions_idle - h.instructions_off:+,.0f}, {h.instructions_idle / h.instructions_off:.3f} ×). "
            "Hedging off adds no work to a call: the walk checks one attribute."
        )
    else:
        why = h.failures.get("instructions", "valgrind is not installed")
        out.append(f"Instructions per call: not measured ({why}).")
    return [*out, ""]


def main() -> int:
    """``python -m bench.hedge``: the tail runs of the full settings alone, printed (no upstream needed)."""

    async def each() -> None:
        plan = [(seed, True) for seed in range(1, FULL.hedge_seeds + 1)]
        plan += [(seed, False) for seed in range(1, FULL.hedge_off_seeds + 1)]
        for seed, hedging in plan:
            r = await run(seed, hedging=hedging)
            print(
                f"seed {r.seed} hedging {'on ' if r.hedging else 'off'}: p50 {r.p50:.1f} ms, p99 {r.p99:.1f} ms, "
                f"p99/p50 {r.ratio:.1f}, extra requests {r.extra:.0%}, tails {r.tails}, slow {r.slow}, "
                f"hedged {r.hedged}, won {r.won}, {r.seconds:.1f} s",
                flush=True,
            )

    asyncio.run(each())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
