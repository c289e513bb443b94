"""Pools' strategies (ordered, weighted, least_busy, latency), their ranking, and the load they report."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

import pytest

from fakes import Scripted
from turnout.state import MemoryStore
from turnout.walk.keys import KeyPool
from turnout.walk.pools import Pool, leading_members, member_loads, speed
from turnout.walk.reliable import Entry
from turnout.walk.stats import EWMA_WEIGHT, EntryStats, Stats

A, B, C = "openai.a", "openai.b", "openai.c"
KEYS = {A: (f"{A}/m",), B: (f"{B}/m",), C: (f"{C}/m",)}


class Chance:
    """A fake source of randomness: the given numbers in turn (the last one repeats)."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)
        self.drawn = 0

    def __call__(self) -> float:
        self.drawn += 1
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


def pool(strategy: str, chance: Chance | None = None, **options: object) -> Pool:
    return Pool("p", strategy, keys=KEYS, chance=chance or Chance(0.5), **options)  # type: ignore[arg-type]


def answered(stats: Stats, member: str, *seconds: float) -> None:
    """``member``'s primary entry answered once per time given (a try each)."""
    s = stats.of(f"{member}/m")
    for t in seconds:
        s.started()
        s.finished()
        s.first_token(t)


# --- ordered ----------------------------------------------------------------------------------------------


def test_ordered_keeps_the_configured_order_and_draws_nothing() -> None:
    """`ordered` is a fallback list: the members as configured, with no randomness spent."""
    chance = Chance(0.1)
    assert list(pool("ordered", chance).arrange([A, B, C], Stats())) == [A, B, C]
    assert chance.drawn == 0


def test_a_single_member_is_returned_as_it_is() -> None:
    """One member (the others already tried earlier in the walk) needs no arranging."""
    chance = Chance(0.0)
    for strategy in ("weighted", "least_busy", "latency"):
        assert list(pool(strategy, chance).arrange([B], Stats())) == [B]
    assert chance.drawn == 0


# --- weighted ---------------------------------------------------------------------------------------------


def test_weighted_puts_the_member_with_the_largest_draw_first() -> None:
    """Equal weights: each member's key is its draw, largest first (a uniform random order)."""
    assert list(pool("weighted", Chance(0.2, 0.9, 0.5)).arrange([A, B, C], None)) == [B, C, A]


def test_weighted_first_choice_follows_the_weights() -> None:
    """With weights 3:1 the heavier member comes first in about 3 calls of 4 (seeded draws)."""
    rng = random.Random(11)
    p = Pool("p", "weighted", keys=KEYS, weights={A: 3.0, B: 1.0}, chance=rng.random)
    firsts = Counter(p.arrange([A, B], None)[0] for _ in range(4000))
    assert firsts[A] / 4000 == pytest.approx(0.75, abs=0.03)


def test_weighted_zero_weight_comes_after_every_positive_one() -> None:
    """A member of weight 0 is a standby: never first while a positive member is there."""
    rng = random.Random(3)
    p = Pool("p", "weighted", keys=KEYS, weights={A: 0.0, B: 1.0, C: 2.0}, chance=rng.random)
    for _ in range(200):
        assert p.arrange([A, B, C], None)[-1] == A


# --- least_busy -------------------------------------------------------------------------------------------


def test_least_busy_puts_the_member_with_fewest_tries_in_flight_first() -> None:
    """Fewest in flight first, counting every entry of the member in this walk."""
    stats = Stats()
    for _ in range(3):
        stats.of(f"{A}/m").started()
    stats.of(f"{B}/m").started()
    p = Pool("p", "least_busy", keys={A: (f"{A}/m",), B: (f"{B}/m", f"{B}/m2"), C: (f"{C}/m",)}, chance=Chance(0.5))
    stats.of(f"{B}/m2").started()
    assert list(p.arrange([A, B, C], stats)) == [C, B, A]


def test_least_busy_breaks_ties_with_a_draw() -> None:
    """Idle members are ordered by a draw each, not always in configured order."""
    assert list(pool("least_busy", Chance(0.9, 0.1, 0.5)).arrange([A, B, C], Stats())) == [B, C, A]


def test_least_busy_sees_a_finished_try_leave() -> None:
    """A try that ends no longer counts as in flight."""
    stats = Stats()
    stats.of(f"{A}/m").started()
    p = pool("least_busy", Chance(0.5))
    assert list(p.arrange([A, B], stats)) == [B, A]
    stats.of(f"{A}/m").finished()
    stats.of(f"{B}/m").started()
    assert list(p.arrange([A, B], stats)) == [A, B]


def test_least_busy_and_latency_keep_the_order_without_stats() -> None:
    """A walk that keeps no stats gets the configured order from strategies that need them."""
    for strategy in ("least_busy", "latency"):
        assert list(pool(strategy, Chance(0.0)).arrange([A, B], None)) == [A, B]


# --- latency ----------------------------------------------------------------------------------------------


def test_latency_puts_the_lowest_moving_average_first() -> None:
    """Members ordered by their moving average time to first token, fastest first."""
    stats = Stats()
    answered(stats, A, 0.3)
    answered(stats, B, 0.05)
    answered(stats, C, 0.2)
    assert list(pool("latency", Chance(0.99), explore=0.05).arrange([A, B, C], stats)) == [B, C, A]


def test_latency_tries_an_unmeasured_member_first_and_a_silent_one_last() -> None:
    """Never tried ranks first (so it is measured); tried without ever answering ranks last."""
    stats = Stats()
    answered(stats, A, 0.05)
    stats.of(f"{C}/m").started()  # tried, no first token yet
    assert list(pool("latency", Chance(0.99)).arrange([A, B, C], stats)) == [B, A, C]


def test_latency_explores_another_member_with_the_configured_probability() -> None:
    """A draw below ``explore`` moves a member other than the fastest to the front (which one: the next draw)."""
    stats = Stats()
    answered(stats, A, 0.05)
    answered(stats, B, 0.1)
    answered(stats, C, 0.2)
    p = pool("latency", Chance(0.04, 0.6), explore=0.05)
    assert list(p.arrange([A, B, C], stats)) == [C, A, B]
    p = pool("latency", Chance(0.04, 0.2), explore=0.05)
    assert list(p.arrange([A, B, C], stats)) == [B, A, C]
    p = pool("latency", Chance(0.06), explore=0.05)
    assert list(p.arrange([A, B, C], stats)) == [A, B, C]


def test_latency_with_no_exploration_never_draws() -> None:
    """``explore = 0`` spends no randomness and always puts the fastest first."""
    stats = Stats()
    answered(stats, A, 0.2)
    answered(stats, B, 0.1)
    chance = Chance(0.0)
    for _ in range(5):
        assert pool("latency", chance, explore=0.0).arrange([A, B], stats)[0] == B
    assert chance.drawn == 0


def test_latency_moves_after_the_fast_member_slows_down() -> None:
    """The moving average follows a slow-down: 50 ms then 400 ms per answer overtakes a 200 ms member in a few."""
    stats = Stats()
    answered(stats, A, *[0.05] * 20)
    answered(stats, B, 0.2)
    p = pool("latency", Chance(0.99))
    assert p.arrange([A, B], stats)[0] == A
    slowed = 0
    while p.arrange([A, B], stats)[0] == A:
        answered(stats, A, 0.4)
        slowed += 1
    assert 1 <= slowed <= 5


def test_latency_notices_a_recovered_member_through_exploration() -> None:
    """A member that was slow and got fast again wins back the calls once exploration has measured it."""
    stats = Stats()
    answered(stats, A, 0.1)
    answered(stats, B, 1.0)  # B was slow; from now on it answers in 20 ms
    p = Pool("p", "latency", keys=KEYS, explore=0.1, chance=random.Random(5).random)
    firsts = []
    for _ in range(400):
        first = p.arrange([A, B], stats)[0]
        answered(stats, first, 0.1 if first == A else 0.02)
        firsts.append(first)
    assert firsts[:5] == [A] * 5
    assert firsts[-100:].count(B) >= 85


def test_speed_of_an_unpinned_member_weighs_its_models_by_calls() -> None:
    """A member that forwards the caller's model is judged by every model it was sent, weighted by calls."""
    stats = Stats()
    one, two = stats.of("openai.a/x"), stats.of("openai.a/y")
    for _ in range(3):
        one.started()
    one.first_token(0.1)
    two.started()
    two.first_token(0.5)
    assert speed([one, two], pinned=False) == pytest.approx((3 * 0.1 + 1 * 0.5) / 4)
    assert speed([one, two], pinned=True) == pytest.approx(0.1)
    assert speed([stats.of("openai.a/z")], pinned=True) == 0.0
    silent = stats.of("openai.a/w")
    silent.started()
    assert speed([silent], pinned=True) == math.inf


def test_latency_reads_unpinned_members_from_every_model_they_were_sent() -> None:
    """An unpinned member (keys None) is found by its profile, whatever model the caller sent it."""
    stats = Stats()
    answered(stats, A, 0.3)
    b = stats.of(f"{B}/caller-model")
    b.started()
    b.first_token(0.05)
    p = Pool("p", "latency", keys={A: (f"{A}/m",), B: None}, explore=0.0)
    assert list(p.arrange([A, B], stats)) == [B, A]


# --- which entries answer as the route itself ---------------------------------------------------------------


def _entry(profile: str, model: str, pool: Pool | None) -> Entry:
    return Entry(
        profile=profile, model=model, providers=(Scripted(),), keys=KeyPool(profile, [], MemoryStore()), pool=pool
    )


def test_leading_members_are_the_first_tier_of_a_leading_pool() -> None:
    """Each member's entry in the pool's first tier answers as the route; later tiers and fallbacks do not."""
    first, second = pool("ordered"), pool("ordered")
    entries: Sequence[Entry] = [
        _entry(A, "m", first),
        _entry(B, "m", first),
        _entry(A, "mini", second),
        _entry(C, "m", None),
    ]
    assert leading_members(entries) == frozenset({0, 1})
    assert leading_members([_entry(C, "m", None), _entry(A, "m", first)]) == frozenset()


# --- reported load ------------------------------------------------------------------------------------------


def test_member_loads_sum_a_members_entries_and_share_the_pools_calls() -> None:
    """Per member: tries in flight and started over all its models, its share, its main model's moving TTFT."""
    stats = Stats()
    answered(stats, A, 0.1, 0.1, 0.1)
    stats.of(f"{A}/mini").started()
    answered(stats, B, 0.2)
    stats.of("openai.other/m").started()  # not a member: not counted
    loads = {x.member: x for x in member_loads([A, B, C], stats)}
    assert (loads[A].calls, loads[A].in_flight) == (4, 1)
    assert loads[A].share == pytest.approx(0.8)
    assert loads[A].ttft_ms == pytest.approx(100.0)
    assert loads[B].share == pytest.approx(0.2)
    assert (loads[C].calls, loads[C].share, loads[C].ttft_ms) == (0, 0.0, None)
    assert [x.share for x in member_loads([A], None)] == [None]


# --- the moving average the latency strategy reads ------------------------------------------------------------


def test_moving_average_starts_at_the_first_time_and_weighs_the_newest_by_a_fifth() -> None:
    """The first time to first token is the average; each later one moves it by EWMA_WEIGHT of the difference."""
    s = EntryStats()
    assert s.ttft_avg is None
    s.first_token(0.05)
    assert s.ttft_avg == pytest.approx(0.05)
    s.first_token(0.40)
    assert s.ttft_avg == pytest.approx(0.05 + EWMA_WEIGHT * 0.35)
    for _ in range(30):
        s.first_token(0.40)
    assert s.ttft_avg == pytest.approx(0.40, abs=0.001)


def test_stats_count_tries_started_and_in_flight() -> None:
    """A try started is in flight until it finishes; calls count every try ever started."""
    s = EntryStats()
    s.started()
    s.started()
    s.finished()
    assert (s.in_flight, s.calls) == (1, 2)
