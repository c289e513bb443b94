"""The hedging benchmark's measures: p50, p99 and extra requests of a run, pooled runs, targets and results.md."""

from __future__ import annotations

import datetime as dt

from bench.hedge import HedgeScenario, Run, extra, pooled, section, targets
from bench.procs import machine
from bench.report import Results, markdown, verdicts
from bench.settings import QUICK


def run(seed: int, ttft: list[float], *, hedging: bool = True, requests: int | None = None) -> Run:
    slow = sum(1 for t in ttft if t >= 2000)
    return Run(
        seed=seed,
        hedging=hedging,
        ttft_ms=ttft,
        requests=len(ttft) + slow if requests is None else requests,
        tails=slow,
        slow=slow,
    )


def test_a_runs_percentiles_and_extra_requests() -> None:
    """p50 is the median, p99 the nearest rank (the second slowest of 100), extra the requests beyond one a call."""
    r = run(1, [50.0] * 97 + [190.0, 2000.0, 2010.0], requests=104)
    assert (r.p50, r.p99, r.extra) == (50.0, 2000.0, 0.04)
    assert r.ratio == 40.0
    one_slow = run(2, [50.0] * 98 + [190.0, 2000.0])
    assert one_slow.p99 == 190.0


def test_the_ratio_target_reads_the_pooled_runs_and_says_how_many_runs_meet_it_alone() -> None:
    """Pooled over runs, two slow calls in 200 are under the p99; the measured text counts the runs alone."""
    a = run(1, [50.0] * 98 + [190.0, 2000.0], requests=103)
    b = run(2, [50.0] * 98 + [200.0, 2005.0], requests=105)
    assert pooled([a, b]) == (50.0, 200.0)
    assert extra([a, b]) == 0.04
    h = HedgeScenario(runs=[a, b, run(1, [50.0] * 96 + [2000.0] * 4, hedging=False, requests=100)])
    (ratio, cost) = targets(h)
    assert ratio[1:] == ("4.0 × (200 / 50 ms); 2 of 2 runs alone", "≤ 4 ×", True)
    assert cost[1:] == ("4.0% (most 5%)", "≤ 7%", True)
    over = HedgeScenario(runs=[run(1, [50.0] * 96 + [2000.0] * 4, requests=108)])
    assert [t[3] for t in targets(over)] == [False, False]
    assert [t[3] for t in targets(None)] == [None, None]


def test_the_section_lists_each_run_and_the_pooled_rows() -> None:
    """Rows per run (on and off), pooled rows, and the instructions per call with hedging off and idle."""
    h = HedgeScenario(
        runs=[run(3, [50.0] * 98 + [190.0] * 2, requests=104), run(3, [50.0] * 96 + [2000.0] * 4, hedging=False)],
        instructions_off=1_000_000.0,
        instructions_idle=1_010_000.0,
    )
    text = "\n".join(section(h, None, "Measured now."))
    assert "| on | 3 | 50.0 | 190.0 | 3.8 | 0 | 0 | 0 (0) | 4% |" in text
    assert "| off | 3 | 50.0 | 2000.0 | 40.0 | 4 | 4 | 0 (0) | 4% |" in text
    assert "| on, pooled | 1 seeds |" in text and "| off, pooled | 1 seeds |" in text
    assert "1,000,000 instructions per call without hedging" in text and "(+10,000, 1.010 ×)" in text
    assert "Not measured: boom" in "\n".join(section(None, "boom", ""))


def test_the_report_includes_the_hedging_section_and_its_targets() -> None:
    """results.md has the section and the two hedging rows in its targets table."""
    results = Results(settings=QUICK, machine=machine(), started=dt.datetime.now(dt.UTC), hedge=HedgeScenario())
    assert "## Hedging" in markdown(results)
    assert sum(1 for v in verdicts(results) if v.target.startswith("Hedging")) == 2
