"""Samples, their summaries, and the alternating runner.

Every in-process scenario runs its contenders in alternation after a warm-up: round after round, each
contender makes one *batch* of calls (A B C D, A B C D, …). Drift of the shared machine (another process,
frequency scaling, a noisy neighbour) then hits every contender alike, which is what makes the ratios
stable where absolute times are not. Between batches the runner collects garbage and pauses briefly, so
one contender's leftovers (garbage, background threads) are not billed to the next.
"""

from __future__ import annotations

import asyncio
import gc
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
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
    """One contender in an alternating run: a name, the call to time, and its samples (seconds)."""

    name: str
    call: Call
    samples: list[float] = field(default_factory=list)


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
    await settle()
    perf = time.perf_counter
    for _ in range(rounds):
        for lane in lanes:
            call = lane.call
            out = lane.samples
            for _ in range(batch):
                t0 = perf()
                await call()
                out.append(perf() - t0)
            await settle()
        if perf() - started > budget_s:
            break
    return time.perf_counter() - started


def ratio_interval(
    floor: Sequence[float],
    samples: Sequence[float],
    batch: int,
    *,
    level: float = 0.90,
    resamples: int = 400,
    seed: int = 9,
) -> tuple[float, float]:
    """A bootstrap interval for ``median(samples) / median(floor)`` that resamples whole rounds.

    :func:`alternate` appends one batch per lane and round, so round ``r`` is ``[r * batch, (r + 1) * batch)`` in
    both lanes. A resampled round keeps the floor's batch and the contender's batch of that round together, with
    the drift they shared; what the interval shows is how much the ratio depends on which rounds the run happened
    to get. It says nothing of drift that lasts a whole run. The seed is fixed, so a report is reproducible.
    """
    rounds = min(len(floor), len(samples)) // batch
    if rounds < 2:
        return math.nan, math.nan
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        pick = [rng.randrange(rounds) for _ in range(rounds)]
        a = [x for r in pick for x in floor[r * batch : (r + 1) * batch]]
        b = [x for r in pick for x in samples[r * batch : (r + 1) * batch]]
        ratios.append(statistics.median(b) / statistics.median(a))
    ratios.sort()
    tail = (1.0 - level) / 2
    return percentile(ratios, tail), percentile(ratios, 1.0 - tail)
