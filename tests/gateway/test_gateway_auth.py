"""Client keys, header encoding and model routing: the gateway's small pure decisions."""

from __future__ import annotations

import logging

import pytest
from gateway_support import decode_header

from turnout.config import key_id, load_config_toml
from turnout.core.errors import ConfigError
from turnout.gateway.access import ANONYMOUS, Caller, RouteChoice, route_choice
from turnout.gateway.auth import Authenticator, gateway_keys, key_digest
from turnout.gateway.bounds import header_value

CONFIG = """
default_provider = "openai.main"
[providers.models.openai.main]
api_key = "sk-a"
model = "gpt-4.1"
[providers.models.ollama.local]
[[model_routes]]
hint = "fast"
model_provider = "openai.main"
model = "gpt-4.1-mini"
"""


def authenticator(*keys: str) -> Authenticator:
    """An authenticator whose callers are named by their keys' ids."""
    return Authenticator(
        [(key_digest(k), Caller(name=key_id(k), names={}, open_profiles=frozenset())) for k in keys],
        Caller(name=ANONYMOUS, names={}, open_profiles=frozenset()),
    )


def name_of(caller: Caller | None) -> str | None:
    return caller.name if caller is not None else None


def test_bearer_and_x_api_key_are_accepted_and_named_by_key_id() -> None:
    """Either header authenticates; the caller is its key's, whichever configured key matches."""
    auth = authenticator("k-one", "k-two")
    assert name_of(auth.caller("Bearer k-one", None)) == key_id("k-one")
    assert name_of(auth.caller("bearer  k-two ", None)) == key_id("k-two")
    assert name_of(auth.caller(None, "k-two")) == key_id("k-two")
    assert name_of(auth.caller("Basic abc", "k-one")) == key_id("k-one")


@pytest.mark.parametrize(
    ("authorization", "x_api_key"),
    [(None, None), ("Bearer wrong", None), ("Bearer ", None), (None, "k-one-and-more"), ("Bearer k-on", None)],
)
def test_wrong_or_missing_keys_are_rejected(authorization: str | None, x_api_key: str | None) -> None:
    """A missing, empty, wrong or prefix key is rejected."""
    assert authenticator("k-one").caller(authorization, x_api_key) is None


def test_no_configured_key_serves_openly_with_a_loud_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Without a configured key every caller is accepted, and a warning says so."""
    with caplog.at_level(logging.WARNING, logger="turnout.gateway"):
        auth = authenticator()
    assert name_of(auth.caller(None, None)) == ANONYMOUS
    assert "NO CLIENT API KEY IS CONFIGURED" in caplog.text


def test_keys_from_the_config_and_the_env_variable() -> None:
    """api_keys (literal or ${ENV}) and the comma-separated api_keys_env variable are all accepted."""
    text = '[gateway]\napi_keys = ["lit", "${GW_ONE}"]\napi_keys_env = "GW_MORE"\n'
    env = {"GW_ONE": "from-env", "GW_MORE": " a , b ,"}
    assert gateway_keys(load_config_toml(text, env=env), env) == ["lit", "from-env", "a", "b"]


@pytest.mark.parametrize(
    ("text", "env", "path"),
    [
        ('[gateway]\napi_keys = ["${GW_UNSET}"]\n', {}, "gateway.api_keys[0]"),
        ('[gateway]\napi_keys_env = "GW_EMPTY"\n', {"GW_EMPTY": " , "}, "gateway.api_keys_env"),
    ],
)
def test_a_key_that_resolves_to_nothing_fails_closed(text: str, env: dict[str, str], path: str) -> None:
    """A configured key that resolves to nothing is a config error, never an open gateway."""
    with pytest.raises(ConfigError) as info:
        gateway_keys(load_config_toml(text, env=env), env)
    assert info.value.path == path


def test_header_values_are_latin1_safe() -> None:
    """ASCII passes through; the ⚡ notice, other non-ASCII and CR/LF are RFC 8187 percent-encoded."""
    notice = "⚡ a (x.y) was unavailable; this reply was served by b (z.w)."
    assert header_value("gpt-4.1") == "gpt-4.1"
    encoded = header_value(notice)
    encoded.encode("latin-1")
    assert encoded.isascii() and " " not in encoded
    assert decode_header(encoded) == notice
    assert "\r" not in header_value("evil\r\nx-injected: 1") and "\n" not in header_value("a\nb")


@pytest.mark.parametrize(
    ("model", "choice"),
    [
        ("hint:fast", RouteChoice("hint:fast", None)),
        ("hint:unknown", RouteChoice("hint:unknown", None)),
        ("openai.main", RouteChoice(None, "openai.main")),
        ("ollama.local/llama3.2", RouteChoice("llama3.2", "ollama.local")),
        ("gpt-4.1", RouteChoice("gpt-4.1", None)),
        ("openai.other", RouteChoice("openai.other", None)),
        ("openrouter/anthropic/claude", RouteChoice("openrouter/anthropic/claude", None)),
        ("", RouteChoice(None, None)),
    ],
)
def test_model_routing(model: str, choice: RouteChoice) -> None:
    """A hint routes by hint, a configured family.alias (optionally /model) by profile, anything else is a model."""
    assert route_choice(load_config_toml(CONFIG, env={}), model) == choice
