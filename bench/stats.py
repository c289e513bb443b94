"""Samples, their summaries, and the alternating runner.

Every in-process scenario runs its contenders in alternation after a warm-up: round after round, each
contender makes one *batch* of calls (A B C D, A B C D, …). Drift of the shared machine (another process,
frequency scaling, a noisy neighbour) then hits every contender alike, which is what makes the ratios
stable where absolute times are not. Between batches the runner collects garbage and pauses briefly, so
one contender's leftovers (garbage, background threads) are not billed to the next. The heap that exists
after the warm-up (imports, clients, LiteLLM's tables) is frozen out of the collector for the run
(:func:`gc.freeze`), so those collections, and any a contender's garbage triggers during a timed call, cost
what that garbage costs and not a walk over hundreds of thousands of objects that every contender shares.

A slow contender may run only every few rounds (``Lane.every``); the floor and the contenders a target
judges run in every round, so their ratios rest on many more calls at little cost in time.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

#: Pause between two batches, so background work of one contender finishes before the next starts.
SETTLE_S = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """Median, p99 and count of one contender's per-call times, in microseconds."""

    name: str
    n: int
    median_us: float
    p99_us: float
    mean_us: float

    def ratio(self, floor: Summary) -> float:
        """Median over the floor's median."""
        return self.median_us / floor.median_us

    def p99_ratio(self, floor: Summary) -> float:
        """p99 over the floor's p99."""
        return self.p99_us / floor.p99_us


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, nearest rank."""
    if not sorted_values:
        return math.nan
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[rank]


def summarize(name: str, seconds: Sequence[float]) -> Summary:
    """Summarise per-call durations given in seconds."""
    values = sorted(seconds)
    return Summary(
        name=name,
        n=len(values),
        median_us=statistics.median(values) * 1e6 if values else math.nan,
        p99_us=percentile(values, 0.99) * 1e6,
        mean_us=statistics.fmean(values) * 1e6 if values else math.nan,
    )


Call = Callable[[], Awaitable[object]]


@dataclass(slots=True)
class Lane:
    """One contender in an alternating run: a name, the call to time, and its samples (seconds).

    ``every``: the lane runs in rounds ``0, every, 2 * every, …`` only. ``by_round`` keeps each batch under
    its round, so a ratio's interval can pair a lane's batch with the floor's batch of the same round.
    """

    name: str
    call: Call
    every: int = 1
    samples: list[float] = field(default_factory=list)
    by_round: dict[int, list[float]] = field(default_factory=dict)


async def settle() -> None:
    """Collect garbage and let background work finish before the next batch."""
    gc.collect()
    await asyncio.sleep(SETTLE_S)


async def alternate(lanes: Sequence[Lane], *, rounds: int, batch: int, warmup: int, budget_s: float) -> float:
    """Run ``warmup`` untimed calls per lane, then ``rounds`` rounds of one timed batch per lane in turn.

    The run stops early (after a whole round) once ``budget_s`` seconds have passed, so a slow contender
    cannot make it unbounded. Returns the seconds spent.
    """
    started = time.perf_counter()
    for lane in lanes:
        for _ in range(warmup):
            await lane.call()
    gc.collect()
    gc.freeze()
    try:
        await settle()
        perf = time.perf_counter
        for r in range(rounds):
            for lane in lanes:
                if r % lane.every:
                    continue
                call = lane.call
                out: list[float] = []
                for _ in range(batch):
                    t0 = perf()
                    await call()
                    out.append(perf() - t0)
                lane.by_round[r] = out
                lane.samples += out
                await settle()
            if perf() - started > budget_s:
                break
    finally:
        gc.unfreeze()
    return time.perf_counter() - started


def ratio_interval(
    floor: Mapping[int, Sequence[float]],
    lane: Mapping[int, Sequence[float]],
    *,
    level: float = 0.90,
    resamples: int = 400,
    seed: int = 9,
) -> tuple[float, float]:
    """A bootstrap interval for the ratio of a lane's median to the floor's, resampling whole rounds.

    ``floor`` and ``lane`` map a round to that round's batch (:attr:`Lane.by_round`); only rounds both ran
    count. A resampled round keeps the floor's batch and the lane's batch of that round together, with the
    drift they shared, so the interval shows how much the ratio depends on which rounds the run happened to
    get. It says nothing of drift that lasts a whole run. The seed is fixed, so a report is reproducible.
    """
    rounds = sorted(floor.keys() & lane.keys())
    if len(rounds) < 2:
        return math.nan, math.nan
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        pick = [rounds[rng.randrange(len(rounds))] for _ in rounds]
        a = [x for r in pick for x in floor[r]]
        b = [x for r in pick for x in lane[r]]
        ratios.append(statistics.median(b) / statistics.median(a))
    ratios.sort()
    tail = (1.0 - level) / 2
    return percentile(ratios, tail), percentile(ratios, 1.0 - tail)
