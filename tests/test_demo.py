"""``turnout demo``: the outage tour, the pool step and the hedging tour, against the in-process simulator."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from fakes import FakeClock
from turnout.cli.demo import (
    POOL_CALLS,
    PRIMARY,
    TIMING,
    Step,
    Tour,
    _run_step,
    _steps,
    demo_config,
    outage_script,
    outage_tour,
)
from turnout.cli.demo_hedge import HEDGE, hedge_as_told
from turnout.client import Client
from turnout.core.attribution import Attempt, RouteRef
from turnout.core.environment import Environment
from turnout.reply import Reply
from turnout.sim import Simulator


async def tour(tmp_path: Path, *, breaker: bool = True) -> tuple[bool, str, list[str], int]:
    """Run the tour on one fake clock shared by the simulator, the client and the tour's pacing.

    Returns whether it went as told, what it printed, the primary's outcome in each call, and the primary's hits.
    """
    clock = FakeClock()
    console = Console(record=True, width=200, force_terminal=False)
    async with Simulator(clock=clock, sleep=clock.sleep) as sim:
        config = demo_config(sim, tmp_path / "ledger.sqlite3")
        if not breaker:
            config += "\n[reliability.breaker]\nenabled = false\n"
        sim.set_script({"models": outage_script(TIMING)})
        async with Client.from_toml(
            config, ledger=False, env=Environment(clock=clock, sleep=clock.sleep, jitter=lambda: 0.0)
        ) as c:
            told = await outage_tour(console, c, sim, TIMING, clock=clock, sleep=clock.sleep)
        hits = sum(1 for e in sim.log if e.model == PRIMARY)
    text = console.export_text()
    firsts = [line.split()[3] for line in text.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    return told, text, firsts, hits


async def test_the_outage_tour_opens_skips_probes_reopens_and_closes(tmp_path: Path) -> None:
    """The primary fails three calls, is skipped, probed (fails: reopened for twice as long), skipped, probed, back."""
    told, text, firsts, hits = await tour(tmp_path)
    assert told, text
    assert firsts[:5] == ["503", "503", "503", "breaker_skip", "503"]  # calls 1-3 open it; call 5 is the failed probe
    assert firsts[-1] == "ok" and "breaker_skip" in firsts[5:-1]
    assert hits == 2 + 2 + 2 + 1 + 1  # three calls of two tries, one failed probe, one good probe
    assert text.count("open, ") >= 4 and text.rstrip().endswith(
        f"The primary was sent {hits} requests in {len(firsts)} calls."
    )


async def test_without_a_breaker_the_tour_says_it_did_not_go_as_told(tmp_path: Path) -> None:
    """With ``[reliability.breaker] enabled = false`` every call pays for the outage, and the tour reports it."""
    told, _, firsts, hits = await tour(tmp_path, breaker=False)
    assert not told
    assert "breaker_skip" not in firsts and hits >= 2 * (len(firsts) - 1)


async def test_the_pool_step_sends_most_calls_to_the_faster_member_and_shows_the_pool(tmp_path: Path) -> None:
    """The latency pool step measures both members, then the 30 ms one takes the calls; its table says so."""
    step = next(s for s in _steps() if isinstance(s, Step) and "pool" in s.title)
    console = Console(record=True, width=200, force_terminal=False)
    async with Simulator() as sim:
        sim.set_script({"models": step.script})
        async with Client.from_toml(demo_config(sim, tmp_path / "ledger.sqlite3"), ledger=False) as client:
            await _run_step(console, client, 10, step)
            (pool,) = client.status()["pools"]
    calls = {m["profile"]: m["calls"] for m in pool["members"]}
    assert sum(calls.values()) == POOL_CALLS
    # one call measures openai.east, exploration may add one; a loaded machine can slow a 30 ms answer, so only
    # the majority is asserted (the strategy itself is tested with fake numbers in test_pools.py)
    assert calls["azure.west"] > calls["openai.east"]
    out = console.export_text()
    assert "pool gpt-4o" in out and "moving TTFT ms" in out
    assert "was unavailable" not in out


async def test_the_hedging_tour_hedges_the_slow_calls_the_budget_allows(tmp_path: Path) -> None:
    """Seeded: calls 3 and 5 draw the tail and are hedged (the spare answers), call 7 finds the budget spent."""
    step = next(s for s in _steps() if isinstance(s, Tour) and "hedged" in s.title)
    console = Console(record=True, width=200, force_terminal=False)
    async with Simulator() as sim:
        sim.set_script({"models": step.script, "seed": step.seed})
        async with Client.from_toml(demo_config(sim, tmp_path / "ledger.sqlite3"), ledger=False) as client:
            told = await step.play(console, client, sim)
            status = client.status()["hedging"]
    out = console.export_text()
    assert told, out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == HEDGE.calls
    assert [int(r[0]) for r in rows if r[-2] == "yes"] == [3, 5]
    assert [r[-1] for r in rows] == ["openai.quick"] * 2 + ["openai.spare", "openai.quick"] * 2 + ["openai.quick"] * 2
    assert (status["hedged"], status["hedge_wins"], status["original_wins"]) == (2, 2, 0)
    assert "Hedges sent: 2 of 8 calls (25%); answered first: the hedge 2, the first entry 0" in out


def _reply(provider: str, *outcomes: str) -> Reply:
    route = RouteRef(provider=provider, model="m")
    attempts = tuple(Attempt(provider=provider, model="m", outcome=o, started_at=0.0) for o in outcomes)  # type: ignore[arg-type]
    return Reply(
        text="x",
        tool_calls=(),
        usage=None,
        finish_reason="stop",
        reasoning=None,
        requested=route,
        served=route,
        fallback=None,
        attempts=attempts,
        call_id="c",
    )


def test_the_hedging_tour_is_not_as_told_when_a_quick_call_was_hedged() -> None:
    """hedge_as_told rejects a hedged quick call, a hedge beyond the burst, and a run that never spent the budget."""
    quick, spare = _reply("openai.quick", "ok"), _reply("openai.spare", "hedge_lost", "ok")
    assert hedge_as_told([(False, quick), (True, spare), (True, spare), (True, quick)])
    assert not hedge_as_told([(False, spare), (True, spare), (True, spare), (True, quick)])
    assert not hedge_as_told([(False, quick), (True, spare), (True, spare), (True, spare)])
    assert not hedge_as_told([(False, quick), (True, spare), (True, spare)])


async def test_the_clouds_stop_is_served_by_anthropic_then_bedrock_then_vertex(tmp_path: Path) -> None:
    """One Claude name: Anthropic answers, Bedrock when Anthropic is overloaded, Vertex when Bedrock throttles."""
    from turnout.cli.demo_clouds import CALLS, clouds_config, clouds_tour

    console = Console(record=True, width=200, force_terminal=False)
    async with Simulator() as sim:
        config = demo_config(sim, tmp_path / "ledger.sqlite3") + clouds_config(sim, tmp_path)
        async with Client.from_toml(config, ledger=False) as c:
            told = await clouds_tour(console, c, sim)
        sent = [(e.model, e.outcome) for e in sim.log]
    assert told
    text = console.export_text()
    assert [profile for _, profile, _ in CALLS] == ["anthropic.clouds", "bedrock.clouds", "vertex.clouds"]
    assert "vertex.clouds/claude-sonnet-4-5" in text and "bedrock.clouds/claude-sonnet-4-5" in text
    assert sent[-1] == ("claude-sonnet-4-5@20250929", "ok")
    assert ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "status:429") in sent


async def test_the_prompt_cache_step_shows_the_second_turn_cached_and_the_money_saved(tmp_path: Path) -> None:
    """Turn 2 of the conversation reports its repeated prefix as cached input, costs less, and the saving shows."""
    step = next(s for s in _steps() if isinstance(s, Step) and "prompt cache" in s.title)
    console = Console(record=True, width=200, force_terminal=False)
    async with Simulator() as sim:
        sim.set_script({"models": step.script, "cache": {"ttl": step.cache_ttl}})
        async with Client.from_toml(demo_config(sim, tmp_path / "ledger.sqlite3"), ledger=False) as client:
            await _run_step(console, client, 2, step)
    text = console.export_text()
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.split()[:1] in (["1"], ["2"])}
    turn_in, turn_cached, turn_written, _, turn_saved = (rows["2"][i] for i in (1, 2, 3, 4, 5))
    assert "prompt cache" in text
    assert rows["1"][2] == "0" and int(rows["1"][3]) > 0  # turn 1 wrote the prefix
    assert int(turn_cached) > 0 and int(turn_cached) + int(turn_written) <= int(turn_in)
    assert float(turn_saved.lstrip("$")) > 0
