"""Loading turnout.toml: key paths in errors, suggestions, secrets, routes."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnout.config import load_config_dict, load_config_file, load_config_toml
from turnout.config.loader import find_config_path, format_path
from turnout.core.errors import ConfigError

BASE = """
default_provider = "openai.main"
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
"""


def err(text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config_toml(text, env=env or {})
    return info.value


def test_format_path() -> None:
    """Locations render as dotted keys with list indexes."""
    assert format_path(("providers", "models", "openai", "main", "fallback", 1)) == (
        "providers.models.openai.main.fallback[1]"
    )


def test_unknown_profile_key_names_path_and_suggests() -> None:
    """An unknown key is an error naming its path and the closest known key."""
    e = err(BASE + 'fallbak = ["x"]\n')
    assert e.path == "providers.models.openai.main.fallbak"
    assert e.code == "unknown_key"
    assert "did you mean 'fallback'" in str(e)


def test_unknown_top_level_and_section_keys() -> None:
    """Unknown keys are caught in every section."""
    assert err(BASE + "[reliability]\nprovider_retry = 3\n").path == "reliability.provider_retry"
    assert err("colour = 1\n" + BASE).path == "colour"
    assert err(BASE + "[[model_routes]]\nhint='a'\nmodel_provider='openai.main'\nmodel='m'\nkey='x'\n").path == (
        "model_routes[0].key"
    )


def test_invalid_value_names_path() -> None:
    """A wrongly typed value names its exact key path."""
    e = err(BASE + "timeout_secs = -1\n")
    assert e.path == "providers.models.openai.main.timeout_secs"
    e = err(BASE + "fallback = [1]\n")
    assert e.path == "providers.models.openai.main.fallback[0]"


def test_toml_syntax_error() -> None:
    """Invalid TOML is a ConfigError with the parser's position."""
    assert err("a = [").code == "toml_syntax"


def test_secrets_from_env_and_literal() -> None:
    """${ENV} and api_key_env resolve from the environment; values never show in repr."""
    cfg = load_config_toml(
        BASE.replace('"sk-main"', '"${MAIN_KEY}"')
        + '[providers.models.anthropic.b]\napi_key_env = "B_KEY"\nmodel = "claude"\n',
        env={"MAIN_KEY": "sk-secret-main", "B_KEY": "sk-secret-b"},
    )
    p = cfg.profiles()
    assert p["openai.main"].api_key is not None
    assert p["openai.main"].api_key.reveal() == "sk-secret-main"
    assert p["anthropic.b"].env_key is not None and p["anthropic.b"].env_key.reveal() == "sk-secret-b"
    assert "sk-secret" not in repr(cfg)


def test_unknown_family_needs_kind() -> None:
    """A family Turnout does not know needs kind and uri."""
    e = err('default_provider="acme.x"\n[providers.models.acme.x]\napi_key="k"\n')
    assert (e.path, e.code) == ("providers.models.acme.x.kind", "unknown_family")
    e = err('default_provider="acme.x"\n[providers.models.acme.x]\napi_key="k"\nkind="openai-compatible"\n')
    assert (e.path, e.code) == ("providers.models.acme.x.uri", "missing_uri")
    cfg = load_config_toml(
        'default_provider="acme.x"\n[providers.models.acme.x]\napi_key="k"\nkind="openai-compatible"\n'
        'uri="http://127.0.0.1:9/v1"\n',
        env={},
    )
    assert cfg.profiles()["acme.x"].kind == "openai-compatible"


def test_bad_kind_lists_choices() -> None:
    """An unknown kind lists the valid ones."""
    e = err(BASE + 'kind = "soap"\n')
    assert e.path == "providers.models.openai.main.kind" and "openai-compatible" in str(e)


def test_azure_needs_endpoint() -> None:
    """An Azure profile needs uri or resource+deployment."""
    assert err('default_provider="azure.a"\n[providers.models.azure.a]\napi_key="k"\n').code == "missing_uri"


def test_conflicting_key_settings() -> None:
    """api_keys and api_key cannot both be set."""
    assert err(BASE + 'api_keys = ["a", "b"]\n').code == "conflicting_keys"


def test_default_provider_must_resolve() -> None:
    """default_provider must name a profile; with several profiles it must be set."""
    assert err(BASE.replace("openai.main", "openai.nope", 1)).path == "default_provider"
    two = '[providers.models.openai.a]\napi_key="k"\n[providers.models.openai.b]\napi_key="k"\n'
    assert err(two).code == "missing_default"


@pytest.mark.parametrize(
    ("route", "path", "code"),
    [
        ("hint=' '\nmodel_provider='openai.main'\nmodel='m'", "model_routes[0].hint", "blank_hint"),
        ("hint='a'\nmodel_provider=''\nmodel='m'", "model_routes[0].model_provider", "invalid_route"),
        ("hint='a'\nmodel_provider='openai'\nmodel='m'", "model_routes[0].model_provider", "invalid_route"),
        ("hint='a'\nmodel_provider='openai.'\nmodel='m'", "model_routes[0].model_provider", "invalid_route"),
        (
            "hint='a'\nmodel_provider='openai.zzz'\nmodel='m'",
            "model_routes[0].model_provider",
            "unknown_route_target",
        ),
        ("hint='a'\nmodel_provider='openai.main'\nmodel=''", "model_routes[0].model", "invalid_route"),
    ],
)
def test_invalid_routes_are_fatal(route: str, path: str, code: str) -> None:
    """Blank hints, malformed or unknown targets and blank models fail when the config loads."""
    e = err(BASE + "[[model_routes]]\n" + route + "\n")
    assert (e.path, e.code) == (path, code)


def test_duplicate_hint_is_fatal() -> None:
    """Two routes with one hint are a config error naming both (ZeroClaw silently keeps the last)."""
    route = "[[model_routes]]\nhint='fast'\nmodel_provider='openai.main'\nmodel='m'\n"
    e = err(BASE + route + route)
    assert (e.path, e.code) == ("model_routes[1].hint", "duplicate_hint")
    assert "model_routes[0]" in str(e)


def test_sender_provider_must_resolve() -> None:
    """A per-sender override must name a profile."""
    assert err(BASE + "[senders.u1]\nprovider='x.y'\n").path == "senders.u1.provider"


def test_redis_backend_needs_url() -> None:
    """The redis state backend needs a URL."""
    assert err(BASE + "[state]\nbackend='redis'\n").path == "state.url"


def test_load_from_file_and_dict(tmp_path: Path) -> None:
    """Files, TOML strings and dicts load the same configuration."""
    f = tmp_path / "turnout.toml"
    f.write_text(BASE)
    a = load_config_file(f, env={})
    b = load_config_dict(
        {
            "default_provider": "openai.main",
            "providers": {"models": {"openai": {"main": {"api_key": "sk-main", "model": "gpt-4.1"}}}},
        },
        env={},
    )
    assert a == b
    with pytest.raises(ConfigError, match="not found"):
        load_config_file(tmp_path / "missing.toml")


def test_config_path_precedence() -> None:
    """--config, then $TURNOUT_CONFIG, then ./turnout.toml."""
    assert str(find_config_path("a.toml", env={"TURNOUT_CONFIG": "b.toml"})) == "a.toml"
    assert str(find_config_path(None, env={"TURNOUT_CONFIG": "b.toml"})) == "b.toml"
    assert str(find_config_path(None, env={})) == "turnout.toml"


def test_zeroclaw_keys_load() -> None:
    """A ZeroClaw provider section with its other keys loads as is."""
    cfg = load_config_toml(
        BASE + 'temperature = 0.2\nmax_tokens = 512\nwire_api = "chat_completions"\nlive_pricing = true\n'
        "provider_extra = { seed = 1 }\n[reliability]\nprovider_retries = 1\nprovider_backoff_ms = 100\n"
        "scheduler_retries = 2\n",
        env={},
    )
    assert cfg.reliability.provider_retries == 1


_ROUTE = '[[model_routes]]\nhint = "a"\nmodel_provider = "openai.main"\nmodel = "m"\n'


@pytest.mark.parametrize(
    ("tail", "path"),
    [
        ('api_keys = "sk-SECRET-VALUE"\n', "providers.models.openai.main.api_keys"),
        ('api_key = ["sk-SECRET-VALUE"]\n', "providers.models.openai.main.api_key"),
        ('extra_headers = "sk-SECRET-VALUE"\n', "providers.models.openai.main.extra_headers"),
        ('extra_headers = { x-auth = ["sk-SECRET-VALUE"] }\n', "providers.models.openai.main.extra_headers.x-auth"),
        ('uri = ["https://user:SECRET-VALUE@host"]\n', "providers.models.openai.main.uri"),
        ('[gateway]\napi_keys = "sk-SECRET-VALUE"\n', "gateway.api_keys"),
        ('[gateway.keys.team]\nkey = ["sk-SECRET-VALUE"]\n', "gateway.keys.team.key"),
        ('[reliability]\napi_keys = "sk-SECRET-VALUE"\n', "reliability.api_keys"),
        (_ROUTE + 'api_key = ["sk-SECRET-VALUE"]\n', "model_routes[0].api_key"),
        ('[state]\nurl = ["redis://:SECRET-VALUE@127.0.0.1:6379/0"]\n', "state.url"),
    ],
)
def test_errors_never_echo_a_secret_bearing_value(tail: str, path: str) -> None:
    """A wrongly typed secret-bearing value is named by its path, never shown (also not in a list)."""
    e = err(BASE.replace('api_key = "sk-main"\n', "") + tail)
    assert e.path == path
    assert "SECRET-VALUE" not in str(e) and "SECRET-VALUE" not in repr(e.args)


def test_errors_still_show_ordinary_values() -> None:
    """A wrongly typed ordinary value is still shown, so the message says what was wrong."""
    assert "(got 'many')" in str(err(BASE + '[reliability]\nprovider_retries = "many"\n'))


@pytest.mark.parametrize(
    ("line", "path"),
    [
        ("responses_ttl_secs = 0", "gateway.responses_ttl_secs"),
        ("responses_max_items = 0", "gateway.responses_max_items"),
        ('responses_max_bytes = "big"', "gateway.responses_max_bytes"),
    ],
)
def test_a_bad_responses_bound_names_its_key_path(line: str, path: str) -> None:
    """The kept-conversation bounds of [gateway] are validated, and an error names the key path."""
    from turnout.config import load_config_toml

    toml = f'default_provider = "openai.main"\n[gateway]\n{line}\n[providers.models.openai.main]\nmodel = "m"\n'
    with pytest.raises(ConfigError) as err:
        load_config_toml(toml)
    assert err.value.path == path
