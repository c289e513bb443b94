"""Rate-limit headroom at the gateway: /status and /metrics show it, a used-up profile is skipped before its 429,
and ``turnout status --gateway`` reads it from a running gateway.
"""

from __future__ import annotations

import asyncio
import re

import orjson
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, config, gateway, get, post, profile
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from servers import free_port
from turnout.cli.main import app
from turnout.core.secrets import key_id
from turnout.sim import Simulator

KID = key_id("sk-up-openai.main")  # the upstream key gateway_support gives openai.main
CHAT = {"model": "openai.main", "messages": MESSAGES}


def budgets(requests: int) -> dict[str, object]:
    """The simulator script: model ``hr`` has ``requests`` requests and 1000 tokens per minute (enforced)."""
    return {"models": {"hr": {"steps": ["ok"], "headroom": {"requests": requests, "tokens": 1000, "window": 60}}}}


def toml(sim: Simulator) -> str:
    """openai.main (model ``hr``, one key) falling back to openai.backup."""
    return config(
        "openai.main",
        profile(sim, "openai.main", "hr", extra='fallback = ["openai.backup"]\n'),
        profile(sim, "openai.backup", "gpt-4.1"),
    )


def gauge(text: str, name: str, **labels: str) -> float | None:
    """The value of one gauge sample in Prometheus text (None when absent)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


async def test_status_and_metrics_show_the_headroom_each_key_announced(sim: Simulator) -> None:
    """/status lists the last headroom per profile and key; /metrics has it as gauges labelled by profile and key id."""
    sim.set_script(budgets(3))
    async with gateway(toml(sim)) as server:
        before = (await get(server, "/status")).json()
        for _ in range(2):
            assert (await post(server, "/v1/chat/completions", CHAT)).status == 200
        status = (await get(server, "/status")).json()
        metrics = (await get(server, "/metrics")).body.decode()
    assert before["headroom"] == []
    (row,) = status["headroom"]
    assert (row["profile"], row["key_id"], row["requests"], row["request_limit"], row["low"]) == (
        "openai.main",
        KID,
        1,
        3,
        False,
    )
    assert row["token_limit"] == 1000 and 0 < row["tokens"] < 1000 and 0 < row["requests_reset_in"] <= 60
    assert gauge(metrics, "turnout_headroom_requests", profile="openai.main", key_id=KID) == 1.0
    assert gauge(metrics, "turnout_headroom_tokens", profile="openai.main", key_id=KID) == row["tokens"]
    backup = key_id("sk-up-openai.backup")  # announced nothing: no sample
    assert gauge(metrics, "turnout_headroom_requests", profile="openai.backup", key_id=backup) is None


async def test_a_used_up_profile_is_skipped_before_it_earns_a_429(sim: Simulator) -> None:
    """The answer that spends the last request cools the profile: the next request goes to the fallback at once."""
    sim.set_script(budgets(1))
    async with gateway(toml(sim)) as server:
        first = await post(server, "/v1/chat/completions", CHAT)
        status = (await get(server, "/status")).json()
        second = await post(server, "/v1/chat/completions", CHAT)
    assert first.status == second.status == 200
    assert first.headers["x-turnout-provider"] == "openai.main"
    assert second.headers["x-turnout-provider"] == "openai.backup" and "x-turnout-fallback" in second.headers
    assert [c["profile"] for c in status["cooldowns"]] == ["openai.main"]
    assert 55 < status["cooldowns"][0]["remaining_seconds"] <= 60
    assert [(e.model, e.outcome) for e in sim.log] == [("hr", "ok"), ("gpt-4.1", "ok")]


async def test_turnout_status_reads_a_running_gateway(sim: Simulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """``turnout status --gateway URL`` prints the gateway's cooldowns and headroom (its key from the environment)."""
    sim.set_script(budgets(1))
    runner = CliRunner()
    async with gateway(toml(sim)) as server:
        await post(server, "/v1/chat/completions", CHAT)
        monkeypatch.delenv("TURNOUT_GATEWAY_KEY", raising=False)
        refused = await asyncio.to_thread(runner.invoke, app, ["status", "--gateway", server.url])
        monkeypatch.setenv("TURNOUT_GATEWAY_KEY", GATEWAY_KEY)
        text = await asyncio.to_thread(runner.invoke, app, ["status", "--gateway", server.url])
        as_json = await asyncio.to_thread(runner.invoke, app, ["status", "--gateway", server.url, "--json"])
    assert refused.exit_code == 1 and "refused the client key" in refused.output
    assert text.exit_code == 0, text.output
    assert re.search(r"^  cooling  openai\.main  \d+\.\ds left$", text.output, re.MULTILINE)
    assert f"  headroom openai.main  key {KID}  requests 0/1 (refills in " in text.output
    assert "tokens " in text.output and "/1000" in text.output
    assert GATEWAY_KEY not in text.output
    body = orjson.loads(as_json.output)
    assert body["headroom"][0]["requests"] == 0 and body["cooldowns"][0]["profile"] == "openai.main"


def test_turnout_status_reports_an_unreachable_gateway() -> None:
    """A gateway that does not answer is a clear error and exit code 1, never a traceback."""
    result = CliRunner().invoke(app, ["status", "--gateway", f"http://127.0.0.1:{free_port()}", "--json"])
    assert result.exit_code == 1
    assert orjson.loads(result.output)["error"]["code"] == "gateway_unreadable"
    bad = CliRunner().invoke(app, ["status", "--gateway", "ftp://example"])
    assert bad.exit_code == 1 and "must start with http://" in bad.output
