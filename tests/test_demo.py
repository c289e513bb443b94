"""``turnout demo``'s outage tour: the circuit breaker learns an outage and forgets it, as the tour says."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from fakes import FakeClock
from turnout.client import Client
from turnout.demo import DEMO_CONFIG, PRIMARY, TIMING, outage_script, outage_tour
from turnout.sim import Simulator


async def tour(tmp_path: Path, *, breaker: bool = True) -> tuple[bool, str, list[str], int]:
    """Run the tour on one fake clock shared by the simulator, the client and the tour's pacing.

    Returns whether it went as told, what it printed, the primary's outcome in each call, and the primary's hits.
    """
    clock = FakeClock()
    console = Console(record=True, width=200, force_terminal=False)
    async with Simulator(clock=clock, sleep=clock.sleep) as sim:
        config = DEMO_CONFIG.format(
            anthropic=sim.base_url("anthropic"),
            openai=sim.base_url("openai"),
            ledger=tmp_path / "ledger.sqlite3",
            open_secs=TIMING.open_secs,
        )
        if not breaker:
            config += "\n[reliability.breaker]\nenabled = false\n"
        sim.set_script({"models": outage_script(TIMING)})
        async with Client.from_toml(config, ledger=False, clock=clock, sleep=clock.sleep, jitter=lambda: 0.0) as c:
            told = await outage_tour(console, c, sim, TIMING, clock=clock, sleep=clock.sleep)
        hits = sum(1 for e in sim.log if e.model == PRIMARY)
    text = console.export_text()
    firsts = [line.split()[3] for line in text.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    return told, text, firsts, hits


async def test_the_outage_tour_opens_skips_probes_reopens_and_closes(tmp_path: Path) -> None:
    """The primary fails twice, is skipped, probed (fails: reopened for twice as long), skipped, probed and back."""
    told, text, firsts, hits = await tour(tmp_path)
    assert told, text
    assert firsts[:4] == ["503", "503", "breaker_skip", "503"]  # calls 1-2 open it; call 4 is the failed probe
    assert firsts[-1] == "ok" and "breaker_skip" in firsts[4:-1]
    assert hits == 2 + 2 + 1 + 1  # two calls of two tries, one failed probe, one good probe
    assert text.count("open, ") >= 4 and text.rstrip().endswith(
        f"The primary was sent {hits} requests in {len(firsts)} calls."
    )


async def test_without_a_breaker_the_tour_says_it_did_not_go_as_told(tmp_path: Path) -> None:
    """With ``[reliability.breaker] enabled = false`` every call pays for the outage, and the tour reports it."""
    told, _, firsts, hits = await tour(tmp_path, breaker=False)
    assert not told
    assert "breaker_skip" not in firsts and hits >= 2 * (len(firsts) - 1)
