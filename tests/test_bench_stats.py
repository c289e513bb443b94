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


Rounds = dict[int, list[float]]


def _rounds(per_round: list[tuple[float, float]], batch: int) -> tuple[Rounds, Rounds]:
    """Batches of the floor and of a lane per round: the floor around ``base``, the lane ``factor`` times that."""
    rng = random.Random(1)
    floor: Rounds = {}
    other: Rounds = {}
    for r, (base, factor) in enumerate(per_round):
        floor[r] = [base * (1 + rng.uniform(-0.01, 0.01)) for _ in range(batch)]
        other[r] = [base * factor * (1 + rng.uniform(-0.01, 0.01)) for _ in range(batch)]
    return floor, other


def test_ratio_interval_brackets_a_steady_ratio_tightly() -> None:
    """When every round has the same ratio, the interval is narrow around it, whatever the drift in level."""
    floor, other = _rounds([(100.0 + 10 * r, 1.2) for r in range(30)], batch=20)
    low, high = ratio_interval(floor, other)
    assert 1.17 < low <= 1.2 <= high < 1.23


def test_ratio_interval_widens_when_rounds_disagree() -> None:
    """Rounds whose ratios differ give a wider interval than rounds that agree."""
    floor, other = _rounds([(100.0, 1.0 if r % 2 else 1.4) for r in range(30)], batch=20)
    low, high = ratio_interval(floor, other)
    steady = ratio_interval(*_rounds([(100.0, 1.2)] * 30, batch=20))
    assert high - low > 3 * (steady[1] - steady[0])
    assert low < 1.2 < high


def test_ratio_interval_pairs_the_rounds_both_ran() -> None:
    """A lane that ran every third round is compared with the floor's batches of those rounds only."""
    floor, other = _rounds([(100.0 if r % 3 == 0 else 300.0, 1.2) for r in range(30)], batch=20)
    sparse = {r: batch for r, batch in other.items() if r % 3 == 0}
    low, high = ratio_interval(floor, sparse)
    assert 1.18 < low <= high < 1.22  # the floor's batches of the other rounds (3 × slower) would give 0.4-1.2


def test_ratio_interval_is_reproducible_and_needs_two_rounds() -> None:
    """The same samples give the same interval; one common round gives none."""
    floor, other = _rounds([(100.0, 1.1 + r / 100) for r in range(10)], batch=10)
    assert ratio_interval(floor, other) == ratio_interval(floor, other)
    assert all(math.isnan(v) for v in ratio_interval(floor, {0: other[0]}))


def test_a_lane_that_skips_rounds_is_compared_with_the_floor_of_its_own_rounds() -> None:
    """A contender run one round in three has its ratio against the floor's calls of those rounds only."""
    from bench.calls import ScenarioResult
    from bench.stats import Lane

    async def nothing() -> None:
        return None

    floor, every, sparse = Lane("floor", nothing), Lane("every", nothing), Lane("sparse", nothing, every=3)
    for r in range(9):
        level = 100.0 if r % 3 == 0 else 200.0  # the machine is faster in the rounds the sparse lane runs
        for lane, factor in ((floor, 1.0), (every, 1.1), (sparse, 2.0)):
            if r % lane.every == 0:
                lane.by_round[r] = [level * factor * 1e-6] * 5
                lane.samples += lane.by_round[r]
    result = ScenarioResult.of("k", "t", [floor, every, sparse], 1.0)
    assert math.isclose(result.ratio("sparse"), 2.0)
    assert math.isclose(result.ratio("every"), 1.1)
    assert result.floor_of("every") is result.floor and result.floor_of("sparse").n == 15
