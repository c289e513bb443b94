"""The breaker benchmark's verdicts: each target is judged on what was measured, and a miss says so."""

from __future__ import annotations

import datetime as dt

from bench.breaker import DEAD, FLOOR, BreakerScenario, OutageRun
from bench.calls import ScenarioResult
from bench.procs import Machine
from bench.report import Results, markdown, verdicts
from bench.settings import QUICK
from bench.stats import Lane


def timing(dead_factor: float) -> ScenarioResult:
    """Two rounds in which the dead primaries' calls take ``dead_factor`` times the floor's."""
    lanes = [Lane(FLOOR, lambda: None), *(Lane(name, lambda: None) for name in DEAD.values())]
    for r in range(2):
        lanes[0].by_round[r] = [0.001] * 10
        for lane in lanes[1:]:
            lane.by_round[r] = [0.001 * dead_factor] * 10
    for lane in lanes:
        lane.samples = [x for batch in lane.by_round.values() for x in batch]
    return ScenarioResult.of("breaker", "A dead primary behind its open breaker", lanes, 1.0)


def run(**fields: object) -> OutageRun:
    good: dict[str, object] = {
        "mode": "503",
        "calls": 500,
        "opened_after": 1,
        "probes": 3,
        "intervals": [0.25, 0.5, 1.0],
        "recovered_after_s": 0.4,
        "interval_at_recovery_s": 1.0,
    }
    return OutageRun(**{**good, **fields})  # type: ignore[arg-type]


def judged(scenario: BreakerScenario) -> dict[str, bool | None]:
    results = Results(
        settings=QUICK,
        machine=Machine(cpu_model="test", cores=2, pinned=True, python="3", platform="test", versions={}),
        started=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        breaker=scenario,
    )
    assert "## A dead primary behind its circuit breaker" in markdown(results)
    return {v.target: v.met for v in verdicts(results) if "primary" in v.target}


def test_a_breaker_run_within_every_limit_meets_every_target() -> None:
    """4 % over the floor, open after call 1, no early probe, back within the interval."""
    scenario = BreakerScenario(
        timing=timing(1.04), outages=[run(), run(mode="silent", opened_after=3)], instructions_on=1005.0,
        instructions_off=1000.0,
    )  # fmt: skip
    assert set(judged(scenario).values()) == {True}


def test_each_miss_is_reported_as_not_met() -> None:
    """Too slow, opened late, an early probe, recovery after the interval: each is a miss."""
    scenario = BreakerScenario(
        timing=timing(1.06),
        outages=[run(opened_after=4, early_probes=1), run(mode="silent", recovered_after_s=1.2)],
        instructions_on=1020.0,
        instructions_off=1000.0,
    )
    assert set(judged(scenario).values()) == {False}


def test_a_run_that_never_recovers_or_was_not_measured_is_not_met_or_not_judged() -> None:
    """A primary that never served again fails the recovery target."""
    scenario = BreakerScenario(timing=timing(1.0), outages=[run(recovered_after_s=None)])
    met = judged(scenario)
    assert met["Recovered primary serves again within the open interval in force"] is False
