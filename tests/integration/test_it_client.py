"""Client, attribution and the ledger through real HTTP: fallbacks across families with exact
attempt lists and costs, notices, senders, hint routes, the SQLite ledger, and ``turnout chat`` / ``ledger``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import genai_prices
import orjson
import pytest
from it_support import client, config, profile, trail, upstream
from typer.testing import CliRunner

from turnout import Client
from turnout.cli.main import app
from turnout.core.errors import AllProvidersFailed
from turnout.core.secrets import key_id
from turnout.core.types import Usage
from turnout.sim import Simulator

ANT_KEY, OAI_KEY, GEM_KEY = "sk-ant-it-0001", "sk-oai-it-0002", "gem-it-key-0003"

#: claude fails twice (retryable), gpt-4.1 answers empty twice (rejected, but billed), gemini serves.
THREE_FAMILIES_SCRIPT = {
    "models": {
        "claude-sonnet-4-5": {"steps": ["500"]},
        "gpt-4.1": {"steps": [{"do": "empty", "usage": {"input": 120, "output": 3}}]},
        "gemini-2.5-flash": {
            "steps": [
                {"do": "ok", "text": "Served by Gemini.", "usage": {"input": 120, "output": 4, "cached_input": 100}}
            ]
        },
    }
}


def three_families(sim: Simulator, **top: Any) -> dict[str, Any]:
    """anthropic.prod → openai.backup → gemini.flash; the first two priced in the profile, gemini by genai-prices."""
    return config(
        {
            "anthropic.prod": profile(
                sim,
                "anthropic",
                "claude-sonnet-4-5",
                key=ANT_KEY,
                pricing={"input": 3.0, "output": 15.0},
                fallback=["openai.backup"],
            ),
            "openai.backup": profile(
                sim, "openai", "gpt-4.1", key=OAI_KEY, pricing={"input": 2.0, "output": 8.0}, fallback=["gemini.flash"]
            ),
            "gemini.flash": profile(sim, "gemini", "gemini-2.5-flash", key=GEM_KEY),
        },
        retries=1,
        **top,
    )


def catalogue_cost(model: str, provider_id: str, usage: Usage) -> float:
    """The price genai-prices itself computes (an oracle independent of Turnout's cached rates)."""
    price = genai_prices.calc_price(
        genai_prices.Usage(
            input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cached_input_tokens,
            output_tokens=usage.output_tokens,
        ),
        model_ref=model,
        provider_id=provider_id,
    )
    return float(price.total_price)


async def test_three_family_fallback_has_exact_attempts_costs_and_notice(sim: Simulator) -> None:
    """Anthropic → OpenAI → Gemini: every attempt with its class, key, usage and cost; only the served usage counts."""
    sim.set_script(THREE_FAMILIES_SCRIPT)
    async with client(three_families(sim)) as c:
        reply = await c.chat("What is the weather like in Paris today?")

    served_usage = Usage(input_tokens=120, output_tokens=4, cached_input_tokens=100)
    empty_usage = Usage(input_tokens=120, output_tokens=3)
    empty_cost = (120 * 2.0 + 3 * 8.0) / 1e6
    gemini_cost = catalogue_cost("gemini-2.5-flash", "google", served_usage)
    assert gemini_cost > 0
    assert [(a.provider, a.model, a.outcome, a.status, a.key_id, a.usage) for a in reply.attempts] == [
        ("anthropic.prod", "claude-sonnet-4-5", "retryable", 500, key_id(ANT_KEY), None),
        ("anthropic.prod", "claude-sonnet-4-5", "retryable", 500, key_id(ANT_KEY), None),
        ("openai.backup", "gpt-4.1", "empty", None, key_id(OAI_KEY), empty_usage),
        ("openai.backup", "gpt-4.1", "empty", None, key_id(OAI_KEY), empty_usage),
        ("gemini.flash", "gemini-2.5-flash", "ok", None, key_id(GEM_KEY), served_usage),
    ]
    costs = [a.cost_usd for a in reply.attempts]
    assert costs[:2] == [None, None]
    assert costs[2:4] == [pytest.approx(empty_cost), pytest.approx(empty_cost)]
    assert costs[4] == pytest.approx(gemini_cost)
    assert [(a.entry, a.try_number) for a in reply.attempts] == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1)]
    assert all(a.duration_ms > 0 and a.ttft_ms is None and not a.stream for a in reply.attempts)

    assert reply.text == "Served by Gemini."
    assert reply.usage == served_usage  # rejected usage stays on the rejected attempts
    assert reply.cost_usd == pytest.approx(2 * empty_cost + gemini_cost)
    assert (reply.requested.provider, reply.requested.model) == ("anthropic.prod", "claude-sonnet-4-5")
    assert (reply.served.provider, reply.served.model) == ("gemini.flash", "gemini-2.5-flash")
    assert reply.fallback is not None and reply.fallback.cross_family and reply.fallback.shown
    assert reply.notice == (
        "⚡ claude-sonnet-4-5 (anthropic.prod) was unavailable; "
        "this reply was served by gemini-2.5-flash (gemini.flash)."
    )
    log = await sim.wait_for_log(5)
    assert [(e.protocol, e.model, e.outcome, e.key_id) for e in log] == [
        ("anthropic", "claude-sonnet-4-5", "status:500", key_id(ANT_KEY)),
        ("anthropic", "claude-sonnet-4-5", "status:500", key_id(ANT_KEY)),
        ("openai", "gpt-4.1", "empty", key_id(OAI_KEY)),
        ("openai", "gpt-4.1", "empty", key_id(OAI_KEY)),
        ("gemini", "gemini-2.5-flash", "ok", key_id(GEM_KEY)),
    ]


async def test_direct_answer_is_priced_from_the_catalogue(sim: Simulator) -> None:
    """A profile without ``pricing`` is priced by genai-prices from the simulator's exact usage."""
    cfg = config({"openai.main": profile(sim, "openai", "gpt-4.1-mini")})
    async with client(cfg) as c:
        reply = await c.chat("one two three four five")
    assert reply.usage == Usage(input_tokens=5, output_tokens=5)
    (attempt,) = reply.attempts
    assert attempt.cost_usd == pytest.approx(catalogue_cost("gpt-4.1-mini", "openai", reply.usage))
    assert reply.cost_usd == attempt.cost_usd
    assert reply.fallback is None and reply.served == reply.requested


async def test_unknown_price_is_null_not_zero(sim: Simulator) -> None:
    """A model neither the profile nor genai-prices prices has cost None."""
    cfg = config({"ollama.local": profile(sim, "ollama", "sim-ok", key=None)})
    async with client(cfg) as c:
        reply = await c.chat("hi")
    assert [(a.outcome, a.key_id, a.cost_usd) for a in reply.attempts] == [("ok", None, None)]
    assert reply.cost_usd is None
    assert (await sim.wait_for_log(1))[0].key_id is None  # a local family needs no key


async def test_intra_family_notice_is_shown_only_when_configured(sim: Simulator) -> None:
    """A same-family fallback is a fallback either way; its notice is shown only with intra_family = true."""
    profiles = {
        "openai.main": profile(sim, "openai", "sim-503", fallback_models=["sim-ok-t2"]),
    }
    async with client(config(profiles, retries=0)) as c:
        quiet = await c.chat("hi")
    async with client(config(profiles, retries=0, notices={"intra_family": True})) as c:
        loud = await c.chat("hi")
    for reply in (quiet, loud):
        assert trail(reply.attempts) == [
            ("openai.main", "sim-503", "retryable", 503),
            ("openai.main", "sim-ok-t2", "ok", None),
        ]
        assert reply.fallback is not None and not reply.fallback.cross_family
    assert quiet.notice is None
    assert loud.notice == "⚡ sim-503 (openai.main) was unavailable; this reply was served by sim-ok-t2 (openai.main)."


def senders_config(sim: Simulator) -> dict[str, Any]:
    return config(
        {
            "openai.main": profile(sim, "openai", "gpt-4.1-mini"),
            "anthropic.premium": profile(sim, "anthropic", "claude-sonnet-4-5", fallback=["openai.main"]),
        },
        default="openai.main",
        retries=1,
        senders={"vip-user-42": {"provider": "anthropic.premium", "model": "claude-opus-4-1"}},
    )


async def test_sender_override_serves_a_higher_tier_with_fallback_to_a_cheaper_one(sim: Simulator) -> None:
    """``[senders.<id>]`` makes another profile and model active for that sender; its own fallbacks still apply."""
    sim.set_script({"models": {"claude-opus-4-1": {"steps": ["ok", "overloaded"]}}})
    async with client(senders_config(sim)) as c:
        vip = await c.chat("hi", sender="vip-user-42")
        anyone = await c.chat("hi", sender="someone-else")
        nobody = await c.chat("hi")
        vip_degraded = await c.chat("hi", sender="vip-user-42")
    assert (vip.requested.provider, vip.requested.model) == ("anthropic.premium", "claude-opus-4-1")
    assert vip.served == vip.requested and vip.fallback is None
    for reply in (anyone, nobody):
        assert trail(reply.attempts) == [("openai.main", "gpt-4.1-mini", "ok", None)]
    assert trail(vip_degraded.attempts) == [
        ("anthropic.premium", "claude-opus-4-1", "retryable", 529),
        ("anthropic.premium", "claude-opus-4-1", "retryable", 529),
        ("openai.main", "gpt-4.1-mini", "ok", None),
    ]
    assert vip_degraded.notice == (
        "⚡ claude-opus-4-1 (anthropic.premium) was unavailable; this reply was served by gpt-4.1-mini (openai.main)."
    )
    log = await sim.wait_for_log(6)
    assert [(e.protocol, e.model) for e in log] == [
        ("anthropic", "claude-opus-4-1"),
        ("openai", "gpt-4.1-mini"),
        ("openai", "gpt-4.1-mini"),
        ("anthropic", "claude-opus-4-1"),
        ("anthropic", "claude-opus-4-1"),
        ("openai", "gpt-4.1-mini"),
    ]


def routes_config(sim: Simulator) -> dict[str, Any]:
    return config(
        {
            "anthropic.prod": profile(sim, "anthropic", "claude-sonnet-4-5"),
            "ollama.local": profile(sim, "ollama", None, key=None, fallback=["gemini.flash"]),
            "gemini.flash": profile(sim, "gemini", "gemini-2.5-flash"),
            "openai.reasoner": profile(sim, "openai", "o4-mini"),
        },
        model_routes=[
            {"hint": "fast", "model_provider": "ollama.local", "model": "sim-503-then-ok"},
            {"hint": "reasoning", "model_provider": "openai.reasoner", "model": "o3"},
            {"hint": "home", "model_provider": "anthropic.prod", "model": "claude-haiku-4-5"},
        ],
    )


async def test_hint_routes_select_a_target_and_keep_its_reliability(sim: Simulator) -> None:
    """``hint:<name>`` picks the route's target; a pinned profile sends its model; the walk still retries."""
    async with client(routes_config(sim)) as c:
        fast = await c.chat("hi", model="hint:fast")
        reasoning = await c.chat("hi", model="hint:reasoning")
        home = await c.chat("hi", model="hint:home")
        plain = await c.chat("hi")
    # an unpinned target forwards the route model, and its own retry policy applies
    assert (fast.requested.provider, fast.requested.model) == ("ollama.local", "sim-503-then-ok")
    assert trail(fast.attempts) == [
        ("ollama.local", "sim-503-then-ok", "retryable", 503),
        ("ollama.local", "sim-503-then-ok", "ok", None),
    ]
    assert fast.fallback is None
    # a pinned target serves its own model, not the route's
    assert trail(reasoning.attempts) == [("openai.reasoner", "o4-mini", "ok", None)]
    # a hint pointing back at the primary keeps the primary's pin
    assert trail(home.attempts) == [("anthropic.prod", "claude-sonnet-4-5", "ok", None)]
    assert trail(plain.attempts) == [("anthropic.prod", "claude-sonnet-4-5", "ok", None)]
    log = await sim.wait_for_log(5)
    assert [(e.protocol, e.model, e.outcome) for e in log] == [
        ("ollama", "sim-503-then-ok", "status:503"),
        ("ollama", "sim-503-then-ok", "ok"),
        ("openai", "o4-mini", "ok"),
        ("anthropic", "claude-sonnet-4-5", "ok"),
        ("anthropic", "claude-sonnet-4-5", "ok"),
    ]


async def test_unknown_hint_stays_on_the_default_target(sim: Simulator, caplog: pytest.LogCaptureFixture) -> None:
    """An unknown hint logs a warning and is served by the default target's pin."""
    async with client(routes_config(sim)) as c:
        reply = await c.chat("hi", model="hint:nope")
    assert trail(reply.attempts) == [("anthropic.prod", "claude-sonnet-4-5", "ok", None)]
    assert any("'nope'" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert await upstream(sim, 1) == [("claude-sonnet-4-5", "ok")]


async def test_hint_route_falls_back_within_its_target(sim: Simulator) -> None:
    """A failing route target walks its own fallbacks (cross-family), announced with a notice."""
    sim.set_script({"models": {"llama3.2": {"steps": ["404"]}}})
    cfg = routes_config(sim)
    cfg["model_routes"][0]["model"] = "llama3.2"
    async with client(cfg) as c:
        reply = await c.chat("hi", model="hint:fast")
    assert trail(reply.attempts) == [
        ("ollama.local", "llama3.2", "non_retryable", 404),
        ("gemini.flash", "gemini-2.5-flash", "ok", None),
    ]
    assert reply.notice == (
        "⚡ llama3.2 (ollama.local) was unavailable; this reply was served by gemini-2.5-flash (gemini.flash)."
    )


# --- the ledger ---------------------------------------------------------------------------------------------

PLANTED_KEY = "sk-PLANTED-SECRET-5f1e9a77c3"
PLANTED_PROMPT = "PLANTED-PROMPT-zebra-quartz-91"


async def test_ledger_records_every_attempt_and_no_secret_or_prompt(sim: Simulator, tmp_path: Path) -> None:
    """The SQLite ledger holds each call and attempt (with costs), and no key, prompt, answer or error text."""
    sim.set_script(THREE_FAMILIES_SCRIPT)
    db = tmp_path / "ledger.sqlite3"
    cfg = three_families(sim, ledger={"path": str(db)})
    cfg["providers"]["models"]["anthropic"]["prod"]["api_key"] = PLANTED_KEY
    cfg["providers"]["models"]["openai"]["cheap"] = profile(sim, "openai", "sim-ok", key=PLANTED_KEY)
    async with Client.from_dict(cfg) as c:
        ok = await c.chat(PLANTED_PROMPT)
        with pytest.raises(AllProvidersFailed):
            await c.chat(PLANTED_PROMPT, provider="openai.cheap", model="sim-quota")
    assert ok.served.provider == "gemini.flash"

    con = sqlite3.connect(db)
    try:
        calls = con.execute(
            "SELECT call_id, surface, stream, requested_provider, requested_model, served_provider, served_model, "
            "fallback, outcome, attempts, cost_usd FROM calls ORDER BY ts"
        ).fetchall()
        attempts = con.execute(
            "SELECT call_id, seq, provider, model, outcome, status, key_id, input_tokens, output_tokens, "
            "cached_input_tokens, cost_usd, accepted FROM attempts ORDER BY id"
        ).fetchall()
    finally:
        con.close()
    assert len(calls) == 2
    first, second = calls
    assert first[:10] == (
        ok.call_id,
        "library",
        0,
        "anthropic.prod",
        "claude-sonnet-4-5",
        "gemini.flash",
        "gemini-2.5-flash",
        1,
        "ok",
        5,
    )
    assert first[10] == pytest.approx(ok.cost_usd)
    assert second[3:10] == ("openai.cheap", "sim-quota", None, None, 0, "all_failed", 1)
    assert second[10] is None
    failed_rows = [row[1:] for row in attempts if row[0] == second[0]]
    quota = (0, "openai.cheap", "sim-quota", "rate_limited_non_retryable", 429, key_id(PLANTED_KEY))
    assert failed_rows == [(*quota, None, None, None, None, 0)]
    ok_rows = [row[1:] for row in attempts if row[0] == ok.call_id]
    assert [r[:6] + r[6:9] + (r[10],) for r in ok_rows] == [
        (0, "anthropic.prod", "claude-sonnet-4-5", "retryable", 500, key_id(PLANTED_KEY), None, None, None, 0),
        (1, "anthropic.prod", "claude-sonnet-4-5", "retryable", 500, key_id(PLANTED_KEY), None, None, None, 0),
        (2, "openai.backup", "gpt-4.1", "empty", None, key_id(OAI_KEY), 120, 3, 0, 0),
        (3, "openai.backup", "gpt-4.1", "empty", None, key_id(OAI_KEY), 120, 3, 0, 0),
        (4, "gemini.flash", "gemini-2.5-flash", "ok", None, key_id(GEM_KEY), 120, 4, 100, 1),
    ]
    assert [r[9] for r in ok_rows] == [pytest.approx(a.cost_usd) if a.cost_usd else None for a in ok.attempts]

    stored = await asyncio.to_thread(read_all, tmp_path)
    assert ok.call_id.encode() in stored and key_id(PLANTED_KEY).encode() in stored  # the grep sees the data
    for planted in (
        PLANTED_KEY,
        PLANTED_PROMPT,
        "Served by Gemini.",  # the answer
        "Internal server error",  # Anthropic's 500 body
        "exceeded your current quota",  # OpenAI's 429 body
    ):
        assert planted.encode() not in stored, planted

    result = CliRunner().invoke(app, ["ledger", "--path", str(db), "--json"])
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["calls"], summary["failed_calls"], summary["fallbacks"], summary["attempts"]) == (2, 1, 1, 6)
    assert summary["failure_classes"] == {"retryable": 2, "empty": 2, "rate_limited_non_retryable": 1}
    assert summary["cost_usd"] == pytest.approx(ok.cost_usd)
    routes = {(r["provider"], r["model"]): r for r in summary["routes"]}
    assert set(routes) == {
        ("anthropic.prod", "claude-sonnet-4-5"),
        ("openai.backup", "gpt-4.1"),
        ("gemini.flash", "gemini-2.5-flash"),
        ("openai.cheap", "sim-quota"),
    }
    backup = routes[("openai.backup", "gpt-4.1")]
    assert (backup["outcomes"], backup["input_tokens"], backup["output_tokens"]) == ({"empty": 2}, 240, 6)
    assert routes[("gemini.flash", "gemini-2.5-flash")]["cost_usd"] == pytest.approx(ok.attempts[4].cost_usd)
    assert routes[("anthropic.prod", "claude-sonnet-4-5")]["cost_usd"] is None


def read_all(directory: Path) -> bytes:
    """The bytes of every file in ``directory`` (the database and any journal beside it)."""
    return b"".join(p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file())


# --- the command line ---------------------------------------------------------------------------------------


@pytest.fixture
def threaded_sim() -> Iterator[Simulator]:
    """A simulator serving from its own thread and event loop, for CLI commands that run ``asyncio.run``."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="it-sim", daemon=True)
    thread.start()
    simulator = Simulator()
    asyncio.run_coroutine_threadsafe(simulator.start(), loop).result(timeout=10)
    try:
        yield simulator
    finally:
        asyncio.run_coroutine_threadsafe(simulator.aclose(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def cli_config(sim: Simulator, tmp_path: Path) -> Path:
    path = tmp_path / "turnout.toml"
    path.write_text(
        f"""
default_provider = "anthropic.prod"
[providers.models.anthropic.prod]
api_key = "{ANT_KEY}"
uri = "{sim.base_url("anthropic")}"
model = "sim-overloaded"
fallback = ["openai.backup"]
[providers.models.openai.backup]
api_key = "{OAI_KEY}"
uri = "{sim.base_url("openai")}"
model = "sim-ok-t3"
pricing = {{ input = 2.0, output = 8.0 }}
[reliability]
provider_retries = 1
provider_backoff_ms = 50
[ledger]
path = "{tmp_path / "cli-ledger.sqlite3"}"
"""
    )
    return path


def test_cli_chat_prints_the_answer_served_route_and_attempts(threaded_sim: Simulator, tmp_path: Path) -> None:
    """``turnout chat`` prints the answer, who served it, the notice and an attempts table; the ledger sums it."""
    path = cli_config(threaded_sim, tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["chat", "one two three", "--config", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "lorem ipsum dolor"
    cost = (3 * 2.0 + 3 * 8.0) / 1e6
    assert f"served by openai.backup/sim-ok-t3; cost ${cost:.6f}" in lines
    assert (
        "⚡ sim-overloaded (anthropic.prod) was unavailable; this reply was served by sim-ok-t3 (openai.backup)."
        in lines
    )
    table = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [row[:6] for row in table] == [
        ["1", "anthropic.prod", "sim-overloaded", "retryable", "529", key_id(ANT_KEY)],
        ["2", "anthropic.prod", "sim-overloaded", "retryable", "529", key_id(ANT_KEY)],
        ["3", "openai.backup", "sim-ok-t3", "ok", "-", key_id(OAI_KEY)],
    ]
    assert table[2][6:8] == ["3/3", f"${cost:.6f}"]

    result = runner.invoke(app, ["chat", "one two three", "--config", str(path), "--stream"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "lorem ipsum dolor"
    assert f"served by openai.backup/sim-ok-t3; cost ${cost:.6f}" in lines
    table = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"], ["3"])]
    # the stream failed before output, on both of its tries: one non-streaming recovery
    assert [row[:6] for row in table] == [
        ["1", "anthropic.prod", "sim-overloaded", "retryable", "529", key_id(ANT_KEY)],
        ["2", "anthropic.prod", "sim-overloaded", "retryable", "529", key_id(ANT_KEY)],
        ["3", "openai.backup", "sim-ok-t3", "ok", "-", key_id(OAI_KEY)],
    ]

    result = runner.invoke(app, ["chat", "one two three", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    body = orjson.loads(result.stdout)
    assert body["text"] == "lorem ipsum dolor"
    assert (body["requested"], body["served"]) == (
        {"provider": "anthropic.prod", "model": "sim-overloaded"},
        {"provider": "openai.backup", "model": "sim-ok-t3"},
    )
    assert body["fallback"] == (
        "⚡ sim-overloaded (anthropic.prod) was unavailable; this reply was served by sim-ok-t3 (openai.backup)."
    )
    assert [(a["provider"], a["outcome"], a["status"], a["key_id"], a["stream"]) for a in body["attempts"]] == [
        ("anthropic.prod", "retryable", 529, key_id(ANT_KEY), False),
        ("anthropic.prod", "retryable", 529, key_id(ANT_KEY), False),
        ("openai.backup", "ok", None, key_id(OAI_KEY), False),
    ]
    assert body["usage"]["input_tokens"] == 3 and body["usage"]["output_tokens"] == 3
    assert body["cost_usd"] == pytest.approx(cost)

    result = runner.invoke(app, ["ledger", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["calls"], summary["failed_calls"], summary["fallbacks"], summary["attempts"]) == (3, 0, 3, 9)
    assert summary["failure_classes"] == {"retryable": 6}
    assert summary["cost_usd"] == pytest.approx(3 * cost)
    routes = {(r["provider"], r["model"]): r["outcomes"] for r in summary["routes"]}
    assert routes == {("anthropic.prod", "sim-overloaded"): {"retryable": 6}, ("openai.backup", "sim-ok-t3"): {"ok": 3}}


def test_cli_chat_failure_prints_the_attempts_and_exits_1(threaded_sim: Simulator, tmp_path: Path) -> None:
    """When every entry fails, ``turnout chat`` exits 1 with the content-free error and the attempts."""
    path = cli_config(threaded_sim, tmp_path)
    text = path.read_text().replace('model = "sim-ok-t3"', 'model = "sim-quota"')
    path.write_text(text)
    result = CliRunner().invoke(app, ["chat", "hi", "--config", str(path), "--json"])
    assert result.exit_code == 1
    body = orjson.loads(result.stdout)
    assert body["ok"] is False and body["error"] == "AllProvidersFailed"
    assert body["message"].startswith("All model providers/models failed after 3 failure event(s).")
    assert [(a["provider"], a["outcome"]) for a in body["attempts"]] == [
        ("anthropic.prod", "retryable"),
        ("anthropic.prod", "retryable"),
        ("openai.backup", "rate_limited_non_retryable"),
    ]
