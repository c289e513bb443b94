"""The circuit breaker's rules: when it opens, what it lets through, how its interval grows."""

from __future__ import annotations

import random

import pytest

from turnout.state.base import BreakerRecord
from turnout.walk.breaker import BreakerSettings, Gate, Streak, gate

S = BreakerSettings()


def test_three_failed_calls_in_a_row_open_a_fresh_entry() -> None:
    """An entry with no record but failures opens after the default run of three failed calls."""
    streak = Streak(S)
    assert not streak.failure(0.0) and not streak.failure(1.0)
    assert streak.failure(2.0)


def test_a_run_after_served_calls_opens_it_at_three() -> None:
    """An entry that served every other call in the window opens after three failed calls in a row."""
    streak = Streak(S)
    streak.failure(0.0)
    for t in range(1, 21):
        streak.success(float(t))
    assert not streak.failure(21.0) and not streak.failure(22.0)
    assert streak.failure(23.0)


def test_a_flaky_entry_needs_a_run_its_own_failure_rate_does_not_explain() -> None:
    """At a recent failure rate of a third, a run of three is chance: the run needed grows with that rate."""
    streak = Streak(BreakerSettings(min_calls=10_000))
    for t in range(30):
        if t % 3 == 0:
            streak.failure(t * 0.1)
        else:
            streak.success(t * 0.1)
    # 10 of 30 calls failed outside a run: a run of k comes up by chance (1/3)**k per call; with 30 calls in the
    # window it must be below 1 % per window: (1/3)**k < 0.01 / 33, so k = 8 (counting the run itself in the calls)
    assert [streak.failure(3.0 + n * 0.1) for n in range(8)] == [False] * 7 + [True]


def test_a_serving_entry_failing_a_sixth_of_its_calls_never_opens_at_high_volume() -> None:
    """300 calls a second for a minute, a sixth failing at random (seeded): the breaker never opens."""
    rng = random.Random(7)
    streak = Streak(S)
    opened = 0
    for n in range(300 * 60):
        now = n / 300
        if rng.random() < 1 / 6:
            opened += streak.failure(now)
        else:
            streak.success(now)
    assert opened == 0


def test_a_high_failure_rate_over_the_window_opens_it_without_a_run() -> None:
    """Half of ten calls failing in the window opens it (failure_rate 0.5, min_calls 10), though never two in a row."""
    streak = Streak(BreakerSettings(failures=100, min_calls=10, failure_rate=0.5))
    opened = [streak.failure(t) if t % 2 == 0 else (streak.success(t), False)[1] for t in range(10)]
    assert opened == [False] * 10  # the 10th call is served
    assert streak.failure(10.0)  # 6 of 11 failed


def test_the_default_failure_rate_sits_well_above_a_serving_entry() -> None:
    """By default 80 % of at least 20 calls in the window must fail: 75 % does not open it, 80 % does."""
    streak = Streak(BreakerSettings(failures=1000))  # the rate rule alone
    opened = []
    for n in range(20):  # 15 of 20 calls fail
        opened.append(streak.failure(n * 0.1) if n % 4 != 3 else (streak.success(n * 0.1), False)[1])
    assert not any(opened)
    assert [streak.failure(2.0 + n * 0.1) for n in range(5)] == [False] * 4 + [True]  # 20 of 25 failed


def test_old_calls_leave_the_window() -> None:
    """Failures older than the window no longer count towards the rate."""
    streak = Streak(BreakerSettings(failures=100, window_secs=30.0, min_calls=4, failure_rate=0.5))
    for t in (0.0, 1.0, 2.0):
        streak.failure(t)
        streak.success(t + 0.5)
    assert not streak.failure(100.0)  # the earlier six calls are out of the window: one call, below min_calls
    assert streak.calls == 1


def test_a_healthy_entry_records_nothing() -> None:
    """Served calls with no failure in the window cost no bookkeeping."""
    streak = Streak(S)
    for t in range(100):
        streak.success(float(t))
    assert streak.failures == 0 and streak.calls == 0 and streak.idle


def test_gate_reads_the_record_against_the_clock() -> None:
    """No record: closed; before its deadline: open; after it: due for one probe."""
    record = BreakerRecord(opened_at=10.0, until=15.0, interval=5.0)
    assert gate(None, 12.0) is Gate.CLOSED
    assert gate(record, 14.9) is Gate.OPEN
    assert gate(record, 15.0) is Gate.DUE


@pytest.mark.parametrize(("interval", "expected"), [(5.0, 10.0), (10.0, 20.0), (40.0, 60.0), (60.0, 60.0), (1.0, 10.0)])
def test_the_interval_doubles_after_a_failed_probe_up_to_the_cap(interval: float, expected: float) -> None:
    """5 s, 10 s, 20 s, 40 s, then 60 s at most."""
    assert S.next_interval(interval) == expected


def test_failures_of_calls_in_flight_together_are_one_link_of_the_run() -> None:
    """Fast failures of a burst reported before its answers do not make a run; each must follow a known failure."""
    streak = Streak(S, since=0.0)
    burst = [streak.failure(0.002, reached=0.001) for _ in range(10)]  # ten calls reached it at once and failed
    assert burst == [False] * 10 and streak.failures == 1
    assert not streak.failure(0.010, reached=0.005)  # reached it after the burst's failure was known: a second link
    assert streak.failure(0.020, reached=0.015)  # and a third: a chain of three failed calls opens a fresh entry


def test_a_served_call_ends_the_run_and_earlier_arrivals_cannot_extend_it() -> None:
    """After an answer, only failures of calls that reached the entry after that answer count."""
    streak = Streak(S, since=0.0)
    streak.failure(1.0, reached=0.5)
    streak.failure(2.0, reached=1.5)
    streak.success(3.0)
    assert streak.failures == 0
    assert not streak.failure(3.5, reached=2.5)  # it reached the entry before the answer: no link
    assert streak.failures == 0
