"""The benchmark's statistics: medians, nearest-rank percentiles and the round-resampled ratio interval."""

from __future__ import annotations

import math
import random

from bench.stats import percentile, ratio_interval, summarize


def test_percentile_is_nearest_rank() -> None:
    """The q quantile is the value at rank ceil(q·n), clamped to the sample."""
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.0) == 1.0
    assert math.isnan(percentile([], 0.5))


def test_summary_reports_microseconds() -> None:
    """Durations given in seconds are summarised in microseconds."""
    s = summarize("x", [0.001, 0.002, 0.003])
    assert (s.n, s.median_us, s.mean_us) == (3, 2000.0, 2000.0)


def _rounds(per_round: list[tuple[float, float]], batch: int) -> tuple[list[float], list[float]]:
    rng = random.Random(1)
    floor: list[float] = []
    other: list[float] = []
    for base, factor in per_round:
        floor += [base * (1 + rng.uniform(-0.01, 0.01)) for _ in range(batch)]
        other += [base * factor * (1 + rng.uniform(-0.01, 0.01)) for _ in range(batch)]
    return floor, other


def test_ratio_interval_brackets_a_steady_ratio_tightly() -> None:
    """When every round has the same ratio, the interval is narrow around it, whatever the drift in level."""
    floor, other = _rounds([(100.0 + 10 * r, 1.2) for r in range(30)], batch=20)
    low, high = ratio_interval(floor, other, 20)
    assert 1.17 < low <= 1.2 <= high < 1.23


def test_ratio_interval_widens_when_rounds_disagree() -> None:
    """Rounds whose ratios differ give a wider interval than rounds that agree."""
    floor, other = _rounds([(100.0, 1.0 if r % 2 else 1.4) for r in range(30)], batch=20)
    low, high = ratio_interval(floor, other, 20)
    steady = ratio_interval(*_rounds([(100.0, 1.2)] * 30, batch=20), 20)
    assert high - low > 3 * (steady[1] - steady[0])
    assert low < 1.2 < high


def test_ratio_interval_is_reproducible_and_needs_two_rounds() -> None:
    """The same samples give the same interval; one round gives none."""
    floor, other = _rounds([(100.0, 1.1 + r / 100) for r in range(10)], batch=10)
    assert ratio_interval(floor, other, 10) == ratio_interval(floor, other, 10)
    assert all(math.isnan(v) for v in ratio_interval(floor[:10], other[:10], 10))
