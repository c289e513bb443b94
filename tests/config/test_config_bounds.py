"""Config every call would fail on is refused at load, by key path: non-finite numbers, bad header names and values."""

from __future__ import annotations

import json
import math
import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from turnout import Client
from turnout.config import load_config_toml
from turnout.config import schema as schema_module
from turnout.core.errors import ConfigError

PROFILE = "providers.models.openai.main"
BASE = f'[{PROFILE}]\napi_key = "sk-up-secret-123"\nmodel = "gpt-4.1"\n'


def refused(text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config_toml(text, env=env or {})
    return caught.value


@pytest.mark.parametrize("value", ["inf", "1e308", "nan", "-inf"])
def test_a_timeout_that_is_not_finite_or_absurd_is_refused_with_its_key_path(value: str) -> None:
    """``timeout_secs = inf`` (1e308, nan) is a ConfigError at its key path, not an OverflowError on every call."""
    err = refused(BASE + f"timeout_secs = {value}\n")
    assert err.path == f"{PROFILE}.timeout_secs"
    assert err.code == "invalid_value"


@pytest.mark.parametrize(
    ("table", "key"),
    [
        (PROFILE, "connect_timeout_secs"),
        (PROFILE, "first_token_timeout_secs"),
        (PROFILE, "idle_timeout_secs"),
        ("gateway", "header_timeout_secs"),
        ("gateway", "idle_timeout_secs"),
        ("gateway", "body_timeout_secs"),
        ("gateway", "drain_secs"),
        ("reliability.breaker", "open_secs"),
        ("reliability.hedge", "after_ms"),
        ("reliability.affinity", "ttl_secs"),
    ],
)
def test_every_timeout_delay_and_cooldown_refuses_infinity(table: str, key: str) -> None:
    """Each seconds setting (and the hedge's delay) refuses ``inf`` and ``1e308`` with its key path."""
    for value in ("inf", "1e308"):
        text = BASE + f"{key} = {value}\n" if table == PROFILE else BASE + f"[{table}]\n{key} = {value}\n"
        err = refused(text)
        assert err.path == f"{table}.{key}"


def test_prices_limits_and_backoff_refuse_absurd_numbers() -> None:
    """A price of ``inf``, a daily limit of ``nan`` and a backoff of days are refused at their key paths."""
    assert refused(BASE + "pricing = { input = inf, output = 1.0 }\n").path == f"{PROFILE}.pricing.input"
    limit = '[gateway.keys.team]\nkey = "gw-k"\ndaily_limit_usd = nan\n'
    assert refused(BASE + limit).path == "gateway.keys.team.daily_limit_usd"
    assert refused(BASE + "[reliability]\nprovider_backoff_ms = 86400000\n").path == "reliability.provider_backoff_ms"


def test_the_largest_timeout_is_a_day_and_ordinary_values_load() -> None:
    """A day (86,400 s) loads; just above it does not: the bound keeps every deadline representable."""
    config = load_config_toml(BASE + "timeout_secs = 86400\nidle_timeout_secs = 0.5\n", env={})
    assert config.profiles()["openai.main"].timeout_secs == 86400
    assert refused(BASE + "timeout_secs = 86400.5\n").path == f"{PROFILE}.timeout_secs"


def test_an_extra_header_value_with_crlf_is_refused_without_showing_it() -> None:
    """An ``extra_headers`` value with CR LF is a ConfigError naming the header's key path, never the value."""
    err = refused(BASE + 'extra_headers = { "X-Team" = "a-secret-value\\r\\nX-Evil: 1" }\n')
    assert err.path == f"{PROFILE}.extra_headers.X-Team"
    assert "CR, LF" in err.message
    assert "a-secret-value" not in str(err)


def test_a_header_value_from_the_environment_is_checked_too() -> None:
    """A ``"${NAME}"`` header value resolved to text with a line feed is refused; its value is not shown."""
    env = {"TEAM_HEADER": "tok-private-77\n"}
    err = refused(BASE + 'extra_headers = { "X-Team" = "${TEAM_HEADER}" }\n', env)
    assert err.path == f"{PROFILE}.extra_headers.X-Team"
    assert "tok-private-77" not in str(err)


@pytest.mark.parametrize("name", ["x h:", "X-A:", "", "x\r\ny", "Ünïcode"])
def test_a_header_name_that_is_not_a_token_is_refused(name: str) -> None:
    """A header name such as ``"x h:"`` is a ConfigError at its key path (quoted, on one line), not sent raw."""
    err = refused(BASE + f'extra_headers = {{ {json.dumps(name)} = "v" }}\n')
    assert err.path is not None and err.path.startswith(f"{PROFILE}.extra_headers")
    assert "\r" not in str(err) and "\n" not in str(err)
    assert "not an HTTP header name" in err.message


def test_telemetry_headers_are_checked_like_extra_headers() -> None:
    """``[telemetry] headers`` is a header map too: a bad name and a bad value are refused."""
    assert refused(BASE + '[telemetry]\nheaders = { "a b" = "v" }\n').path == "telemetry.headers.'a b'"
    assert refused(BASE + '[telemetry]\nheaders = { "A" = "v\\u0000" }\n').path == "telemetry.headers.A"


def test_valid_headers_load_unchanged() -> None:
    """Tokens with punctuation, and values with spaces, tabs and non-ASCII text, load as written."""
    text = BASE + 'extra_headers = { "X-Org_ID.v2" = "team a\\tb é", "x-api~key!" = "k" }\n'
    headers = load_config_toml(text, env={}).profiles()["openai.main"].extra_headers
    assert {k: v.reveal() for k, v in headers.items()} == {"X-Org_ID.v2": "team a\tb é", "x-api~key!": "k"}


def test_client_from_toml_refuses_a_bad_timeout() -> None:
    """``Client.from_toml`` refuses the same config before any client exists."""
    with pytest.raises(ConfigError) as caught:
        Client.from_toml(BASE + "timeout_secs = inf\n", env={})
    assert caught.value.path == f"{PROFILE}.timeout_secs"


# --- every float setting of the schema, also those added later -------------------------------------------------


def _float_fields() -> list[tuple[type[BaseModel], str, Any]]:
    models = [
        m
        for m in vars(schema_module).values()
        if isinstance(m, type) and issubclass(m, BaseModel) and m.__module__ == schema_module.__name__
    ]
    return [(m, name, f.annotation) for m in models for name, f in m.model_fields.items() if _holds_float(f.annotation)]


def _holds_float(annotation: Any) -> bool:
    if annotation is float:
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return _holds_float(typing.get_args(annotation)[0])
    return any(_holds_float(a) for a in typing.get_args(annotation))


def _shaped(annotation: Any, value: float) -> Any:
    """``value`` where ``annotation`` takes a float: as is, or in a table (``Pool.weights``)."""
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        return next(_shaped(a, value) for a in typing.get_args(annotation) if _holds_float(a))
    if typing.get_origin(annotation) is dict:
        return {"k": value}
    return value


def test_every_float_setting_of_the_schema_refuses_inf_nan_and_huge_values() -> None:
    """No float key of any section accepts ``inf``, ``nan`` or 1e308 (a new float key must be bounded too)."""
    fields = _float_fields()
    assert len(fields) >= 20  # the walk found them
    for model, name, annotation in fields:
        for value in (math.inf, -math.inf, math.nan, 1e308):
            with pytest.raises(ValidationError) as caught:
                model.model_validate({name: _shaped(annotation, value)}, context={"env": {}})
            assert any(e["loc"][0] == name for e in caught.value.errors()), (model.__name__, name, value)
