"""Prompt caching made visible: cached input per profile in /metrics, /status, the status page and turnout ledger."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from gateway_support import MESSAGES, Ended, config, gateway, get, post, profile, sample
from typer.testing import CliRunner

from fakes import call_record
from turnout.cli.main import app
from turnout.core.attribution import Attempt
from turnout.core.types import Usage
from turnout.gateway.metrics import Metrics, cache_by_profile
from turnout.gateway.page_data import PageData
from turnout.gateway.page_html import render_page
from turnout.ledger.cache import cache_summary
from turnout.ledger.pricing import Rates, _Rate
from turnout.ledger.writer import Ledger
from turnout.sim import Simulator

M = 1_000_000
PRICED = "pricing = { input = 3.0, output = 15.0, cached_input = 0.3, cache_write = 3.75 }\n"


def cached_script(sim: Simulator) -> None:
    sim.set_script(
        {
            "models": {
                "cached": {
                    "steps": [
                        {"do": "ok", "text": "hi", "usage": {"input": 1000, "output": 2, "cache_write": 800}},
                        {"do": "ok", "text": "hi", "usage": {"input": 1200, "output": 2, "cached_input": 800}},
                    ]
                }
            }
        }
    )


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini", "responses"])
async def test_cached_input_and_its_saving_reach_metrics_and_status(sim: Simulator, protocol: str) -> None:
    """Two turns (a cache write, then a read) count input, cached tokens and the money saved per profile."""
    cached_script(sim)
    family = {"responses": "openai"}.get(protocol, protocol)
    name = f"{family}.main"
    async with gateway(config(name, profile(sim, name, "cached", protocol=protocol, extra=PRICED))) as server:
        for _ in range(2):
            assert (await post(server, "/v1/chat/completions", {"model": "", "messages": MESSAGES})).status == 200
        text = (await get(server, "/metrics")).body.decode()
        status = (await get(server, "/status")).json()
    assert sample(text, "turnout_input_tokens_total", provider=name) == 2200
    assert sample(text, "turnout_cached_input_tokens_total", provider=name) == 800
    saved = sample(text, "turnout_cache_saved_usd_total", provider=name)
    assert saved == pytest.approx(800 * (3.0 - 0.3) / M)
    if protocol == "anthropic":  # the protocols that report cache creation
        assert sample(text, "turnout_cache_write_tokens_total", provider=name) == 800
    cache = next(p for p in status["profiles"] if p["name"] == name)["cache"]
    assert cache["input_tokens"] == 2200 and cache["cached_input_tokens"] == 800
    assert cache["hit_rate"] == round(800 / 2200, 4)
    assert cache["saved_usd"] == pytest.approx(800 * 2.7 / M)


def test_metrics_count_only_answered_attempts_and_price_the_saving_with_the_profile_rates() -> None:
    """A failed attempt's usage is not counted; without rates the tokens count and nothing is saved."""
    rates = Rates(input=_Rate(2.0), output=_Rate(8.0), cached_input=_Rate(0.5))
    usage = Usage(input_tokens=1000, cached_input_tokens=600)
    ok = Attempt(provider="openai.a", model="m", outcome="ok", usage=usage)
    failed = Attempt(provider="openai.a", model="m", outcome="retryable", usage=usage)
    priced = Metrics(labelled={("openai.a", "m")}, rates=lambda p, m: rates if p == "openai.a" else None)
    plain = Metrics(labelled={("openai.a", "m")})
    for metrics in (priced, plain):
        metrics.fold([Ended(attempts=(ok, failed))])
    priced_cache = cache_by_profile(priced.export()[0])["openai.a"]
    assert priced_cache == {
        "input_tokens": 1000,
        "cached_input_tokens": 600,
        "cache_write_tokens": 0,
        "hit_rate": 0.6,
        "saved_usd": round(600 * 1.5 / M, 6),
    }
    assert cache_by_profile(plain.export()[0])["openai.a"]["saved_usd"] == 0.0


def test_the_status_page_shows_each_profile_hit_rate_and_saving_escaped() -> None:
    """The page's prompt-cache section lists each profile's hit rate and money saved, escaping the name."""
    values: dict[str, Any] = {
        "now": 1.0,
        "uptime": 1.0,
        "workers": 1,
        "in_flight": 0,
        "state_backend": "memory",
        "routes": (),
        "last": (),
        "recent": {},
        "ledger": False,
    }
    cache = {"<b>x</b>": {"input_tokens": 2000, "cached_input_tokens": 1500, "hit_rate": 0.75, "saved_usd": 0.0405}}
    text = render_page(PageData(**values, cache=cache))
    assert 'id="cache"' in text and "75%" in text and "$0.0405" in text
    assert "&lt;b&gt;x&lt;/b&gt;" in text and "<b>x</b>" not in text
    assert 'id="cache"' not in render_page(PageData(**values))


def _write(db: Path) -> None:
    base = call_record("c1", model="m")
    first = replace(
        base.attempts[0], usage=Usage(input_tokens=1000, cache_write_tokens=800), started_at=base.ts, cost_usd=0.003
    )
    second = replace(first, usage=Usage(input_tokens=1200, cached_input_tokens=800), cost_usd=0.001)

    async def write() -> None:
        ledger = Ledger(db, batch_delay=0)
        ledger.record(replace(base, attempts=(first,)))
        ledger.record(replace(base, call_id="c2", attempts=(second,)))
        await ledger.aclose()

    asyncio.run(write())


def test_cache_summary_reads_the_ledger_and_prices_the_saving(tmp_path: Path) -> None:
    """Per profile and model: input, cached and written tokens, the hit rate, and the saving at the profile rates."""
    db = tmp_path / "ledger.sqlite3"
    _write(db)
    rates = Rates(input=_Rate(3.0), output=_Rate(15.0), cached_input=_Rate(0.3))
    (row,) = cache_summary(db, lambda p, m: rates, since=0.0)
    assert (row.provider, row.model, row.input_tokens, row.cached_input_tokens, row.cache_write_tokens) == (
        "openai.main",
        "m",
        2200,
        800,
        800,
    )
    assert row.hit_rate == pytest.approx(800 / 2200)
    assert row.saved_usd == pytest.approx(800 * 2.7 / M)
    (unpriced,) = cache_summary(db, lambda p, m: None)
    assert unpriced.saved_usd is None
    assert cache_summary(tmp_path / "missing.sqlite3", lambda p, m: rates) == []


def test_turnout_ledger_shows_a_prompt_cache_section(tmp_path: Path) -> None:
    """`turnout ledger` prints the cache table, and --json a cache list, with the saving priced from the config."""
    db = tmp_path / "ledger.sqlite3"
    _write(db)
    cfg = tmp_path / "turnout.toml"
    cfg.write_text(
        'default_provider = "openai.main"\n[providers.models.openai.main]\nmodel = "m"\napi_key = "sk-x"\n' + PRICED
    )
    text = CliRunner().invoke(app, ["ledger", "--path", str(db), "--config", str(cfg)], env={"COLUMNS": "400"})
    assert text.exit_code == 0, text.output
    assert "prompt cache:" in text.output and "36%" in text.output and "$0.002160" in text.output
    body = orjson.loads(CliRunner().invoke(app, ["ledger", "--path", str(db), "--config", str(cfg), "--json"]).output)
    assert body["cache"][0]["cached_input_tokens"] == 800
    assert body["cache"][0]["saved_usd"] == pytest.approx(800 * 2.7 / M)
    bare = orjson.loads(CliRunner().invoke(app, ["ledger", "--path", str(db), "--json"]).output)
    assert bare["cache"][0]["saved_usd"] is None  # no configuration: no price known
