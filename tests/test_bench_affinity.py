"""The affinity benchmark, reduced: for every pool strategy, turns land where cached, shares stay bounded, and a
failing member's conversations move once and are cached on their new member.
"""

from __future__ import annotations

import pytest
from bench.affinity import STRATEGIES, TARGET_CACHED, TARGET_MOVED, TARGET_SHARE, Run, TurnResult, conversations


def test_the_measures_of_a_run() -> None:
    """Cached share of turns 2+, the most first turns on one member, and the later turns of moved conversations."""
    turns = [
        TurnResult(0, 1, "a", False),
        TurnResult(0, 2, "a", True),
        TurnResult(0, 3, "b", False, after_failure=True),  # moved off a here
        TurnResult(0, 4, "b", True, after_failure=True),
        TurnResult(0, 5, "c", True, after_failure=True),  # cached, but not on its new member
        TurnResult(1, 1, "b", False),
        TurnResult(1, 2, "b", True),
        TurnResult(1, 3, "b", True, after_failure=True),  # never on a: not moved
    ]
    run = Run(turns=turns, failed="a")
    assert run.cached_share() == pytest.approx(5 / 6)
    assert run.max_share() == pytest.approx(1 / 2)
    assert run.moved() == (1, 2, 1)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_turns_land_where_cached_shares_stay_bounded_and_a_failure_moves_conversations_once(
    strategy: str,
) -> None:
    """12 conversations × 5 turns at concurrency 6: ≥ 90 % of turns 2+ cached, no member over 60 % of the
    conversations, and after the busiest member fails ≥ 80 % of its conversations' later turns cached.
    """
    steady = await conversations(strategy, 7, affinity=True, turns=5)
    assert steady.cached_share() >= TARGET_CACHED
    assert steady.max_share() <= TARGET_SHARE
    failing = await conversations(strategy, 7, affinity=True, failing=True, turns=5)
    moved, later, cached = failing.moved()
    assert moved >= 1 and later >= 1
    assert cached / later >= TARGET_MOVED


async def test_without_affinity_a_spreading_strategy_misses_the_cache() -> None:
    """The same run with affinity off: weighted spreads the turns and most land away from their cached prefix."""
    run = await conversations("weighted", 7, affinity=False, turns=5)
    assert run.cached_share() < 0.6
