"""[gateway.model_aliases]: a coding agent's own model names (exact or by pattern) go where the operator says."""

from __future__ import annotations

from typing import Any

import pytest
from gateway_support import GATEWAY_KEY, fake_gateway, get, post

from fakes import Fleet
from turnout import Client
from turnout.config import load_config_toml
from turnout.core.errors import ConfigError
from turnout.gateway import Gateway

TEAM_KEY = "gw-team-key-2"
BASE = f"""
default_provider = "openai.main"
[ledger]
enabled = false
[reliability]
provider_retries = 0
[gateway]
api_keys = ["{GATEWAY_KEY}"]
[gateway.model_aliases]
"claude-haiku-*" = "anthropic.small"
"claude-*" = "anthropic.big"
"gpt-5*" = "hint:fast"
sonnet = "anthropic.big/claude-sonnet-9"
[gateway.keys.team]
key = "{TEAM_KEY}"
models = ["claude-*"]
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
[providers.models.anthropic.big]
api_key = "sk-big"
model = "claude-opus-9"
[providers.models.anthropic.small]
api_key = "sk-small"
model = "claude-haiku-9"
[providers.models.openai.codex]
api_key = "sk-codex"
model = "gpt-codex-9"
[[model_routes]]
hint = "fast"
model_provider = "openai.codex"
model = "gpt-codex-9"
"""
MESSAGES: dict[str, Any] = {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
CHAT: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}


def served_by(raw: Any) -> tuple[str, str]:
    assert raw.status == 200, raw.body
    return raw.headers["x-turnout-provider"], raw.headers["x-turnout-model"]


async def test_claude_code_model_names_route_by_pattern_first_match_wins() -> None:
    """Claude Code's names (``claude-opus-4-8[1m]``, ``claude-haiku-…``) reach the profiles their patterns name."""
    fleet = Fleet()
    async with fake_gateway(BASE, fleet) as (server, _):
        opus = await post(server, "/v1/messages", {**MESSAGES, "model": "claude-opus-4-8[1m]"})
        haiku = await post(server, "/v1/messages", {**MESSAGES, "model": "claude-haiku-4-5-20251001"})
        codex = await post(server, "/v1/chat/completions", {**CHAT, "model": "gpt-5.5-codex"})
        exact = await post(server, "/v1/chat/completions", {**CHAT, "model": "sonnet"})
        lookup = await get(server, "/v1/models/claude-opus-4-8")
    assert served_by(opus) == ("anthropic.big", "claude-opus-9")
    assert served_by(haiku) == ("anthropic.small", "claude-haiku-9")
    assert served_by(codex) == ("openai.codex", "gpt-codex-9")
    assert served_by(exact) == ("anthropic.big", "claude-sonnet-9")
    assert lookup.status == 200


async def test_a_name_no_pattern_matches_is_still_404_and_a_key_gets_only_its_patterns() -> None:
    """Patterns widen nothing else: other names stay 404, and a key listing ``claude-*`` may not use ``gpt-5*``."""
    fleet = Fleet()
    async with fake_gateway(BASE, fleet) as (server, _):
        other = await post(server, "/v1/chat/completions", {**CHAT, "model": "o3-pro"})
        team_claude = await post(server, "/v1/messages", {**MESSAGES, "model": "claude-opus-4-8"}, key=TEAM_KEY)
        team_gpt = await post(server, "/v1/chat/completions", {**CHAT, "model": "gpt-5.5"}, key=TEAM_KEY)
        listed = [m["id"] for m in (await get(server, "/v1/models")).json()["data"]]
    assert other.status == 404 and other.json()["error"]["code"] == "model_not_found"
    assert served_by(team_claude) == ("anthropic.big", "claude-opus-9")
    assert team_gpt.status == 404
    assert "sonnet" in listed and not any("*" in m for m in listed)  # a pattern is no model name
    assert fleet.calls("anthropic.small") == []


async def test_a_pattern_may_name_a_pool() -> None:
    """A pattern's target may be a pool: the request is served by one of its members."""
    text = (
        BASE
        + """
[pools.claudes]
members = ["anthropic.big", "anthropic.small"]
strategy = "ordered"
"""
    )
    text = text.replace('"claude-*" = "anthropic.big"', '"claude-*" = "claudes"')
    fleet = Fleet()
    async with fake_gateway(text, fleet) as (server, _):
        raw = await post(server, "/v1/messages", {**MESSAGES, "model": "claude-opus-4-8"})
    assert served_by(raw) == ("anthropic.big", "claude-opus-9")


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ('"claude-*" = "anthropic.nope"', "unknown_route_target"),
        ('"claude-*" = "hint:nope"', "unknown_route_target"),
    ],
)
def test_a_pattern_naming_nothing_configured_fails_with_its_key_path(line: str, code: str) -> None:
    """A model alias whose target is not configured fails at start, naming gateway.model_aliases.<pattern>."""
    text = BASE.replace('"claude-*" = "anthropic.big"', line)
    client = Client(load_config_toml(text), ledger=False)
    with pytest.raises(ConfigError) as caught:
        Gateway(client)
    assert caught.value.code == code
    assert caught.value.path == "gateway.model_aliases.claude-*"


async def test_a_pattern_to_a_profile_without_a_model_sends_the_clients_name() -> None:
    """``"claude-*" = "anthropic.open"`` (no pinned model): the name the client sent is the model upstream."""
    text = BASE.replace('"claude-*" = "anthropic.big"', '"claude-*" = "anthropic.open"')
    text += '[providers.models.anthropic.open]\napi_key = "sk-open"\n'
    fleet = Fleet()
    async with fake_gateway(text, fleet) as (server, _):
        raw = await post(server, "/v1/messages", {**MESSAGES, "model": "claude-opus-4-1"})
    assert served_by(raw) == ("anthropic.open", "claude-opus-4-1")
