"""Circuit breakers in the gateway: /status rows, /metrics gauges and counters, and an outage behind `turnout serve`."""

from __future__ import annotations

import asyncio
import re

import pytest
from gateway_support import GATEWAY_KEY, config, fake_gateway, gateway, get, instant, post, profile, sample
from typer.testing import CliRunner

from fakes import FakeClock, Fleet, err
from turnout.cli.main import app
from turnout.core.environment import Environment
from turnout.sim import Simulator

BASE = f"""
default_provider = "anthropic.prod"
[ledger]
enabled = false
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[reliability]
provider_retries = 1
[providers.models.anthropic.prod]
api_key = "sk-ant-PLANTED"
model = "claude-sonnet-4-5"
fallback = ["openai.backup"]
[providers.models.openai.backup]
api_key = "sk-openai-PLANTED"
model = "gpt-4.1"
[providers.models.openai.open]
api_key = "sk-open-PLANTED"
fallback = ["openai.backup"]
"""
CHAT = {"model": "", "messages": [{"role": "user", "content": "PROMPT-SENTINEL hello"}]}
PROD = "anthropic.prod/claude-sonnet-4-5"


async def test_status_and_metrics_follow_a_breaker_from_open_to_half_open_to_reopened() -> None:
    """Three calls open the primary's breaker; /status and /metrics show it open, then half-open, then reopened."""
    fleet = Fleet(anthropic__prod=[err(503)], openai__backup=["from backup"])
    async with fake_gateway(BASE, fleet) as (server, clock):
        for _ in range(4):  # three calls of two tries each (one signal per call: the third opens it), then a skip
            assert (await post(server, "/v1/chat/completions", CHAT)).status == 200
        status = (await get(server, "/status")).json()
        opened_at = status["breakers"][0]["opened_at"]
        assert opened_at <= clock.now  # the backoff sleeps of the fake clock move it
        clock.now = opened_at + 2.0
        status = (await get(server, "/status")).json()
        metrics = (await get(server, "/metrics")).body.decode()
        assert status["breakers"] == [
            {
                "entry": PROD,
                "profile": "anthropic.prod",
                "model": "claude-sonnet-4-5",
                "state": "open",
                "open_until": opened_at + 5.0,
                "remaining_seconds": 3.0,
                "opened_at": opened_at,
                "interval": 5.0,
            }
        ]
        assert status["recent_attempts"]["by_provider"]["anthropic.prod"] == {"breaker_skip": 1, "retryable": 6}
        assert sample(metrics, "turnout_breaker_state", entry=PROD) == 1
        assert sample(metrics, "turnout_breaker_state", entry="openai.backup/gpt-4.1") == 0
        assert sample(metrics, "turnout_breaker_transitions_total", entry=PROD, transition="opened") == 1
        skips = sample(metrics, "turnout_upstream_attempts_total", provider="anthropic.prod", outcome="breaker_skip")
        assert skips == 1
        assert sample(metrics, "turnout_upstream_latency_seconds_count", provider="anthropic.prod") == 6  # no skip

        clock.now += 3.0
        (half_open,) = (await get(server, "/status")).json()["breakers"]
        assert (half_open["state"], half_open["remaining_seconds"]) == ("half_open", 0.0)
        assert sample((await get(server, "/metrics")).body.decode(), "turnout_breaker_state", entry=PROD) == 2

        assert (await post(server, "/v1/chat/completions", CHAT)).status == 200  # the probe fails: reopened
        (reopened,) = (await get(server, "/status")).json()["breakers"]
        metrics = (await get(server, "/metrics")).body.decode()
    assert (reopened["state"], reopened["interval"], reopened["open_until"]) == ("open", 10.0, clock.now + 10.0)
    assert sample(metrics, "turnout_breaker_state", entry=PROD) == 1
    for transition, count in (("opened", 1), ("probe", 1), ("reopened", 1)):
        assert sample(metrics, "turnout_breaker_transitions_total", entry=PROD, transition=transition) == count
    assert fleet.calls("anthropic.prod") == ["claude-sonnet-4-5"] * 7


async def test_turnout_status_prints_a_running_gateways_breakers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``turnout status --gateway URL`` shows each breaker that is not closed, and how long it stays open."""
    fleet = Fleet(anthropic__prod=[err(503)], openai__backup=["from backup"])
    monkeypatch.setenv("TURNOUT_GATEWAY_KEY", GATEWAY_KEY)
    async with fake_gateway(BASE, fleet) as (server, _clock):
        for _ in range(3):
            assert (await post(server, "/v1/chat/completions", CHAT)).status == 200
        text = await asyncio.to_thread(CliRunner().invoke, app, ["status", "--gateway", server.url])
    assert text.exit_code == 0, text.output
    line = r"^  breaker  anthropic\.prod/claude-sonnet-4-5  open  \d+\.\ds left \(opened for 5s\), then one call probes"
    assert re.search(line, text.output, re.MULTILINE), text.output


async def test_a_breaker_of_a_model_a_client_chose_is_labelled_other() -> None:
    """An unpinned profile's breaker for a client's model shows in /status as is, and in /metrics only as ``other``."""
    fleet = Fleet(openai__open=[err(500)], openai__backup=["from backup"])
    chosen = 'openai.open/evil"model\\name'
    async with fake_gateway(BASE, fleet) as (server, _):
        for _ in range(3):
            assert (await post(server, "/v1/chat/completions", {**CHAT, "model": chosen})).status == 200
        status = (await get(server, "/status")).json()
        metrics = (await get(server, "/metrics")).body.decode()
    assert [(b["profile"], b["model"], b["state"]) for b in status["breakers"]] == [
        ("openai.open", 'evil"model\\name', "open")
    ]
    assert sample(metrics, "turnout_breaker_state", entry="openai.open/other") == 1
    assert sample(metrics, "turnout_breaker_transitions_total", entry="openai.open/other", transition="opened") == 1
    assert "evil" not in metrics and "sk-" not in metrics and "PROMPT" not in metrics


PRIMARY, BACKUP = "primary-model", "backup-model"


@pytest.mark.parametrize(
    ("mode", "stream", "probes"),
    [("status", False, [7.0, 17.0, 37.0]), pytest.param("silence", True, [7.0, 17.0, 37.0], marks=pytest.mark.slow)],
    ids=["503-chat", "silent-stream"],
)
async def test_the_gateway_skips_an_open_primary_probes_it_once_per_interval_and_returns_to_it(
    mode: str, stream: bool, probes: list[float]
) -> None:
    """Through `turnout serve`, a 30 s outage of the primary (503, or silent) is skipped, probed and forgotten.

    A request every second of a fake clock the simulator shares: the third request failing on the primary opens
    its breaker (a request's retries are one signal), for a 503 as for a silent primary (first-token timeout); then
    only the probes reach it (open 5 s, doubling), and the first probe after the outage serves.
    """
    clock = FakeClock()
    async with Simulator(clock=clock, sleep=instant) as sim:
        sim.set_script({"models": {PRIMARY: {"steps": [{"do": "flapping", "down": 30, "mode": mode}]}}})
        toml = config(
            "openai.main",
            profile(sim, "openai.main", PRIMARY, extra='fallback = ["openai.backup"]\nfirst_token_timeout_secs = 0.2'),
            profile(sim, "openai.backup", BACKUP),
        )
        start, served, hits = clock.now, [], []
        async with gateway(toml, env=Environment(clock=clock, sleep=instant)) as server:
            while clock.now - start <= 45:
                before = sum(1 for e in sim.log if e.model == PRIMARY)
                answer = await post(server, "/v1/chat/completions", {**CHAT, "stream": stream})
                assert answer.status == 200 and "Hello" in answer.body.decode()
                served.append((clock.now - start, answer.headers["x-turnout-provider"]))
                hits.append(sum(1 for e in sim.log if e.model == PRIMARY) - before)
                if clock.now - start == 10:
                    (row,) = (await get(server, "/status")).json()["breakers"]
                    assert (row["entry"], row["state"]) == (f"openai.main/{PRIMARY}", "open")
                clock.now += 1.0
    opened = 3
    back = next(at for at, provider in served if provider == "openai.main")
    assert back == probes[-1] and back - 30 <= 20  # back within the open interval in force when the outage ended
    assert all(n >= 1 for n in hits[:opened])
    during = [(at, n) for (at, _), n in zip(served[opened:], hits[opened:], strict=True) if at <= back]
    assert [at for at, n in during if n] == probes and all(n <= 1 for _, n in during)
    assert all(provider == "openai.backup" for at, provider in served if at < back)
    assert all(provider == "openai.main" for at, provider in served if at >= back)
