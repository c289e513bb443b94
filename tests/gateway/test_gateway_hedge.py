"""Hedged requests through the gateway over simulator upstreams: the answer, its headers, /status and /metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from gateway_support import MESSAGES, SIM_TEXT, config, gateway, get, post, profile, sample

from turnout.sim import Simulator

PRIMARY, BACKUP = "gpt-slow", "gpt-backup"
HEDGE = "[reliability.hedge]\nenabled = true\nafter_ms = 50\n"


@pytest.fixture
async def timed_sim() -> AsyncIterator[Simulator]:
    """A simulator whose delays take real time (a hedge races on the event loop's own timers)."""
    async with Simulator() as simulator:
        yield simulator


def hedged(sim: Simulator, *, hedge: bool = True) -> str:
    """openai.primary falling back to openai.backup, hedged after 50 ms (or not at all)."""
    return config(
        "openai.primary",
        profile(sim, "openai.primary", PRIMARY, extra='fallback = ["openai.backup"]'),
        profile(sim, "openai.backup", BACKUP),
        extra=HEDGE if hedge else "",
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_silent_primary_is_hedged_and_the_fallback_answers_through_the_gateway(
    timed_sim: Simulator, stream: bool
) -> None:
    """The primary never answers: after 50 ms the backup gets the request too; its answer and headers are served."""
    sim = timed_sim
    sim.set_script({"models": {PRIMARY: {"steps": ["silence"]}}})
    async with gateway(hedged(sim)) as server:
        raw = await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES, "stream": stream})
        status = (await get(server, "/status")).json()
        metrics = (await get(server, "/metrics")).body.decode()
        page = (await get(server, "/")).body.decode()
    assert raw.status == 200
    assert SIM_TEXT.split()[0] in raw.body.decode()
    assert (raw.headers["x-turnout-provider"], raw.headers["x-turnout-model"]) == ("openai.backup", BACKUP)
    assert raw.headers["x-turnout-attempts"] == "2"
    assert [e.model for e in sim.log] == [PRIMARY, BACKUP]
    assert status["recent_attempts"]["by_provider"] == {"openai.backup": {"ok": 1}, "openai.primary": {"hedge_lost": 1}}
    assert status["hedging"] == {
        "enabled": True,
        "calls": 1,
        "hedged": 1,
        "rate": 1.0,
        "hedge_wins": 1,
        "original_wins": 0,
        "budget_left": 4.0,  # a full bucket (the burst of 5: the call's 5 % cannot add to it), less the hedge
    }
    assert sample(metrics, "turnout_upstream_attempts_total", provider="openai.primary", outcome="hedge_lost") == 1
    assert sample(metrics, "turnout_hedge_calls_total") == 1
    assert sample(metrics, "turnout_hedges_total") == 1
    assert sample(metrics, "turnout_hedge_wins_total", side="hedge") == 1
    assert sample(metrics, "turnout_hedge_wins_total", side="original") == 0
    assert sample(metrics, "turnout_hedge_budget_tokens") == 4.0
    assert "Hedges sent: 1 of 1 calls that could hedge (100.0%) · answered first: the hedge 1," in page


@pytest.mark.parametrize("stream", [False, True])
async def test_a_primary_that_answers_after_the_hedge_started_still_wins(timed_sim: Simulator, stream: bool) -> None:
    """The primary answers at 150 ms, the hedge at 1 s: the primary's answer is served, the hedge is lost."""
    sim = timed_sim
    sim.set_script(
        {"models": {PRIMARY: {"steps": [{"do": "ok", "delay": 0.15}]}, BACKUP: {"steps": [{"do": "ok", "delay": 1}]}}}
    )
    async with gateway(hedged(sim)) as server:
        raw = await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES, "stream": stream})
        status = (await get(server, "/status")).json()
    assert raw.status == 200 and raw.headers["x-turnout-provider"] == "openai.primary"
    assert raw.headers["x-turnout-attempts"] == "2"
    assert status["recent_attempts"]["by_provider"] == {"openai.backup": {"hedge_lost": 1}, "openai.primary": {"ok": 1}}
    assert (status["hedging"]["hedge_wins"], status["hedging"]["original_wins"]) == (0, 1)


async def test_without_hedging_status_says_so_and_metrics_have_no_hedge_samples(timed_sim: Simulator) -> None:
    """Hedging off: /status shows it disabled with nothing counted, /metrics lists the families without samples."""
    async with gateway(hedged(timed_sim, hedge=False)) as server:
        assert (await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES})).status == 200
        status = (await get(server, "/status")).json()
        metrics = (await get(server, "/metrics")).body.decode()
        page = (await get(server, "/")).body.decode()
    assert 'id="hedging"' not in page and 'id="routes"' in page
    assert status["hedging"]["enabled"] is False and status["hedging"]["calls"] == 0
    assert "# TYPE turnout_hedges_total counter" in metrics
    assert sample(metrics, "turnout_hedges_total") is None
    assert sample(metrics, "turnout_hedge_budget_tokens") is None
