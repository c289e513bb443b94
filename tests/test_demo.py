"""`turnout demo`: the pool step, run against the in-process simulator as the tour runs it."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from turnout.client import Client
from turnout.demo import POOL_CALLS, _run_step, _steps, demo_config
from turnout.sim import Simulator


async def test_the_pool_step_sends_most_calls_to_the_faster_member_and_shows_the_pool(tmp_path: Path) -> None:
    """The latency pool step measures both members, then the 30 ms one takes the calls; its table says so."""
    step = next(s for s in _steps() if "pool" in s.title)
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
