"""The circuit breaker's rules: when it opens, what it lets through, how its interval grows."""

from __future__ import annotations

import pytest

from turnout.breaker import BreakerRecord, BreakerSettings, Gate, Streak, gate

S = BreakerSettings()


def test_three_consecutive_health_failures_open_it() -> None:
    """The default streak of three opens the breaker; a success in between starts the count again."""
    streak = Streak(S)
    assert not streak.failure(0.0) and not streak.failure(1.0)
    streak.success(2.0)
    assert not streak.failure(3.0) and not streak.failure(4.0)
    assert streak.failure(5.0)


def test_a_high_failure_rate_over_the_window_opens_it_without_a_streak() -> None:
    """Half of ten tries failing in the window opens it, though never three in a row."""
    streak = Streak(S)
    opened = [streak.failure(t) if t % 2 == 0 else (streak.success(t), False)[1] for t in range(10)]
    assert opened[:9] == [False] * 9 and opened[9] is False  # the 10th try is a success
    assert streak.failure(10.0)  # 6 of 11 failed


def test_old_tries_leave_the_window() -> None:
    """Failures older than the window no longer count towards the rate."""
    streak = Streak(BreakerSettings(failures=100, window_secs=30.0, min_attempts=4, failure_rate=0.5))
    for t in (0.0, 1.0, 2.0):
        streak.failure(t)
        streak.success(t + 0.5)
    assert not streak.failure(100.0)  # the earlier six tries are out of the window: one try, below min_attempts


def test_a_healthy_entry_records_nothing() -> None:
    """Successes with no failure in the window cost no bookkeeping."""
    streak = Streak(S)
    for t in range(100):
        streak.success(float(t))
    assert streak.failures == 0 and not streak._tries


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
