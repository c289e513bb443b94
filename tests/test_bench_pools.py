"""The pools benchmark's measures: the fast member's share, when the pool moved, and its rows in results.md."""

from __future__ import annotations

import datetime as dt

from bench.pools import FAST, SLOW, Learning, Overhead, PoolScenario
from bench.procs import machine
from bench.report import Results, _pool_verdicts, _pools_section
from bench.settings import QUICK
from bench.stats import summarize


def learning(before: list[str], after: list[str]) -> Learning:
    return Learning(before=before, after=after, ttft_ms=[50.0] * (len(before) + len(after)), seconds=1.0)


def test_fast_share_counts_the_calls_of_a_range() -> None:
    """The share of calls start..stop (1-based, inclusive) served by the fast member."""
    run = learning([SLOW] + [FAST] * 49 + [FAST] * 45 + [SLOW] * 5, [])
    assert run.fast_share(1, 50) == 49 / 50
    assert run.fast_share(51, 100) == 45 / 50


def test_the_pool_moved_at_the_first_call_of_the_other_member_that_lasts() -> None:
    """Calls before the move are counted; exploration (up to 2 in 20) after it does not undo the move."""
    after = [FAST] * 3 + [SLOW] * 10 + [FAST] + [SLOW] * 30 + [FAST] + [SLOW] * 35
    assert learning([], after).moved_after == 3
    early_explore = [SLOW] + [FAST] * 20 + [SLOW] * 59  # an exploring call before the real move is not the move
    assert learning([], early_explore).moved_after == 21


def test_a_pool_that_never_moves_has_no_move() -> None:
    """Still on the slowed member at the end (or back on it too often): no move."""
    assert learning([], [FAST] * 80).moved_after is None
    assert learning([], ([SLOW] * 15 + [FAST] * 5) * 4).moved_after is None


def test_the_verdicts_and_rows_of_a_run() -> None:
    """Targets: ≥ 90 % on calls 51–100, moved within 50 calls, no-pool ratio ≤ 1.03; the section shows them."""
    run = learning([SLOW] + [FAST] * 99, [FAST] * 4 + [SLOW] * 76)
    cost = Overhead(
        now=summarize("now (no pool configured)", [0.000300] * 10),
        before=summarize("before pools (abc1234)", [0.000300] * 10),
        same=summarize("now, another process", [0.000303] * 10),
        interval=(0.99, 1.01),
        same_interval=(1.00, 1.02),
        base="abc1234",
        pools=[summarize("turnout", [0.0002] * 4), summarize("turnout, latency pool of 2", [0.00021] * 4)],
    )
    verdicts = _pool_verdicts(PoolScenario(learning=run, overhead=cost))
    assert [(v.measured, v.met) for v in verdicts] == [("100%", True), ("4", True), ("1.000 ×", True)]
    assert [v.met for v in _pool_verdicts(None)] == [None, None, None]

    results = Results(
        settings=QUICK,
        machine=machine(),
        started=dt.datetime.now(dt.UTC),
        pools=PoolScenario(learning=run, overhead=cost),
    )
    text = "\n".join(_pools_section(results))
    assert "| 51–100 | 100% | 50 |" in text
    assert "moved after 4 call(s)" in text
    assert "| now (no pool configured) | 10 | 300 | 300 | 1.000 × before | 0.99–1.01 |" in text
    assert "| now, another process | 10 | 303 | 303 | 1.010 × now | 1.00–1.02 |" in text
    assert "| turnout, latency pool of 2 | 4 | 210 | 210 | 1.05 |" in text
