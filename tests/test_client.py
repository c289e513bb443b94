"""The Client: routing options, senders, attribution, notices, the ledger (with fake adapters)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fakes import FakeClock, Fleet, err
from turnout import Client
from turnout.core.errors import AllProvidersFailed, ConfigError, TurnoutError
from turnout.core.types import ChatResponse, Usage
from turnout.ledger.writer import summarize

BASE = """
default_provider = "anthropic.prod"
[providers.models.anthropic.prod]
api_key = "sk-ant-PLANTED-SECRET-1"
model = "claude-sonnet-4-5"
fallback_models = ["claude-haiku-4-5"]
fallback = ["openai.backup"]
pricing = { input = 3.0, output = 15.0 }
[providers.models.openai.backup]
api_key = "sk-openai-PLANTED-SECRET-2"
model = "gpt-4.1"
pricing = { input = 2.0, output = 8.0 }
[providers.models.openai.mini]
api_key = "sk-mini"
model = "gpt-4.1-mini"
[senders.vip]
provider = "openai.backup"
model = "gpt-4.1"
[reliability]
provider_retries = 1
"""


def client(fleet: Fleet, text: str = BASE, tmp_path: Path | None = None, **kw: Any) -> Client:
    clock = FakeClock()
    if tmp_path is not None:
        text += f'[ledger]\npath = "{tmp_path / "ledger.sqlite3"}"\n'
    else:
        kw.setdefault("ledger", False)
    return Client.from_toml(text, adapter_builder=fleet, env=clock.env, **kw)


async def test_direct_answer_has_no_fallback() -> None:
    """A first-try answer: requested == served, no notice, one ok attempt."""
    fleet = Fleet(anthropic__prod=["hello"])
    async with client(fleet) as c:
        reply = await c.chat("hi")
    assert reply.text == "hello"
    assert (reply.requested.provider, reply.requested.model) == ("anthropic.prod", "claude-sonnet-4-5")
    assert reply.served == reply.requested
    assert reply.fallback is None and reply.notice is None
    assert [a.outcome for a in reply.attempts] == ["ok"]


async def test_retry_on_same_entry_is_not_a_fallback() -> None:
    """A pure retry of the same entry is not a fallback."""
    fleet = Fleet(anthropic__prod=[err(503), "ok"])
    async with client(fleet) as c:
        reply = await c.chat("hi")
    assert reply.fallback is None
    assert [a.outcome for a in reply.attempts] == ["retryable", "ok"]


async def test_cross_family_fallback_carries_a_shown_notice() -> None:
    """When another family serves, the notice names both routes with family.alias and is shown."""
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=["from openai"])
    async with client(fleet) as c:
        reply = await c.chat("hi")
    assert reply.text == "from openai"
    assert (reply.served.provider, reply.served.model) == ("openai.backup", "gpt-4.1")
    assert reply.fallback is not None and reply.fallback.cross_family
    assert reply.notice == (
        "⚡ claude-sonnet-4-5 (anthropic.prod) was unavailable; this reply was served by gpt-4.1 (openai.backup)."
    )
    assert [(a.provider, a.model, a.outcome) for a in reply.attempts] == [
        ("anthropic.prod", "claude-sonnet-4-5", "retryable"),
        ("anthropic.prod", "claude-sonnet-4-5", "retryable"),
        ("anthropic.prod", "claude-haiku-4-5", "retryable"),
        ("anthropic.prod", "claude-haiku-4-5", "retryable"),
        ("openai.backup", "gpt-4.1", "ok"),
    ]


async def test_intra_family_fallback_notice_is_opt_in() -> None:
    """A same-family fallback is recorded but shown only with [notices] intra_family = true."""
    fleet = Fleet(anthropic__prod=[err(500), err(500), "from haiku"])
    async with client(fleet) as c:
        reply = await c.chat("hi")
    assert reply.fallback is not None and not reply.fallback.cross_family
    assert reply.served.model == "claude-haiku-4-5"
    assert reply.notice is None
    fleet = Fleet(anthropic__prod=[err(500), err(500), "from haiku"])
    async with client(fleet, BASE + "[notices]\nintra_family = true\n") as c:
        reply = await c.chat("hi")
    assert reply.notice is not None and "claude-haiku-4-5 (anthropic.prod)" in reply.notice


async def test_rejected_usage_is_not_added_to_the_reply() -> None:
    """The reply's usage is the accepted attempt's; the rejected attempt keeps its own usage and cost."""
    empty = ChatResponse(text="", usage=Usage(input_tokens=100, output_tokens=1))
    good = ChatResponse(text="ok", usage=Usage(input_tokens=10, output_tokens=5))
    fleet = Fleet(anthropic__prod=[empty, good])
    async with client(fleet) as c:
        reply = await c.chat("hi")
    assert reply.usage == Usage(input_tokens=10, output_tokens=5)
    rejected, accepted = reply.attempts
    assert rejected.usage == Usage(input_tokens=100, output_tokens=1)
    assert rejected.cost_usd == pytest.approx((100 * 3.0 + 1 * 15.0) / 1e6)
    assert accepted.cost_usd == pytest.approx((10 * 3.0 + 5 * 15.0) / 1e6)
    assert reply.cost_usd == pytest.approx(rejected.cost_usd + accepted.cost_usd)


async def test_provider_option_makes_another_profile_active() -> None:
    """provider= selects another profile for this call."""
    fleet = Fleet()
    async with client(fleet) as c:
        reply = await c.chat("hi", provider="openai.mini")
    assert (reply.served.provider, reply.served.model) == ("openai.mini", "gpt-4.1-mini")
    assert fleet.calls("anthropic.prod") == []


async def test_plain_model_pins_the_active_profile() -> None:
    """A plain model is the active profile's pin for this call (its fallback models still follow)."""
    fleet = Fleet(anthropic__prod=[err(500), err(500), "ok"])
    async with client(fleet) as c:
        reply = await c.chat("hi", model="claude-opus-4-1")
    assert fleet.calls("anthropic.prod")[:2] == ["claude-opus-4-1", "claude-opus-4-1"]
    assert reply.requested.model == "claude-opus-4-1"
    assert reply.served.model == "claude-haiku-4-5"


async def test_sender_override_serves_a_different_tier() -> None:
    """[senders.vip] routes that sender to its profile; others keep the default."""
    fleet = Fleet()
    async with client(fleet) as c:
        vip = await c.chat("hi", sender="vip")
        other = await c.chat("hi", sender="someone-else")
    assert vip.served.provider == "openai.backup"
    assert other.served.provider == "anthropic.prod"


async def test_unknown_provider_and_missing_model_are_config_errors() -> None:
    """A bad provider name or an unpinned profile without a model is a ConfigError."""
    text = BASE + '[providers.models.openai.free]\napi_key = "k"\n'
    async with client(Fleet(), text) as c:
        with pytest.raises(ConfigError):
            await c.chat("hi", provider="nope.nope")
        with pytest.raises(ConfigError, match="no model"):
            await c.chat("hi", provider="openai.free")
        assert (await c.chat("hi", provider="openai.free", model="gpt-x")).served.model == "gpt-x"


async def test_every_failure_is_a_turnout_error_with_attempts() -> None:
    """When all entries fail the error is a TurnoutError carrying the attempts."""
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=[err(502)])
    async with client(fleet) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.chat("hi")
    assert isinstance(info.value, TurnoutError)
    assert len(info.value.attempts) == 6


async def test_ledger_persists_attempts_without_secrets_or_content(tmp_path: Path) -> None:
    """The SQLite ledger has every attempt, no key, no prompt, no response text, no error text."""
    fleet = Fleet(anthropic__prod=[err(500, "PLANTED-ERROR-TEXT")], openai__backup=["PLANTED-RESPONSE"])
    async with client(fleet, tmp_path=tmp_path) as c:
        await c.chat("PLANTED-PROMPT please")
        fleet.built[("openai.backup", "sk-openai-PLANTED-SECRET-2")].steps = [err(500)]
        with pytest.raises(AllProvidersFailed):
            await c.chat("again")
    db_path = tmp_path / "ledger.sqlite3"
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())  # noqa: ASYNC240 - a test reading its own files
    for planted in (b"PLANTED-SECRET", b"PLANTED-PROMPT", b"PLANTED-RESPONSE", b"PLANTED-ERROR-TEXT", b"sk-"):
        assert planted not in raw
    db = sqlite3.connect(db_path)
    rows = db.execute("SELECT provider, model, outcome, accepted FROM attempts ORDER BY id").fetchall()
    calls = db.execute("SELECT outcome, fallback, served_provider FROM calls ORDER BY ts").fetchall()
    db.close()
    assert rows[:5] == [
        ("anthropic.prod", "claude-sonnet-4-5", "retryable", 0),
        ("anthropic.prod", "claude-sonnet-4-5", "retryable", 0),
        ("anthropic.prod", "claude-haiku-4-5", "retryable", 0),
        ("anthropic.prod", "claude-haiku-4-5", "retryable", 0),
        ("openai.backup", "gpt-4.1", "ok", 1),
    ]
    assert sorted(calls) == sorted([("ok", 1, "openai.backup"), ("all_failed", 0, None)])
    summary = summarize(db_path)
    assert (summary.calls, summary.failed_calls, summary.fallbacks) == (2, 1, 1)
    assert summary.failure_classes["retryable"] == len(rows) - 1


def test_construction_fails_on_missing_credentials() -> None:
    """A fallback without a key fails when the client is built, not on the first request."""
    text = BASE.replace('api_key = "sk-openai-PLANTED-SECRET-2"\n', "")
    with pytest.raises(ConfigError, match=r"openai\.backup"):
        client(Fleet(), text)
