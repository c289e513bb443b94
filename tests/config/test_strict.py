"""Configuration strictness: wrong types, names that refer to nothing, empty variables, settings without effect."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from turnout.cli.main import app
from turnout.config import build_plan, collect_warnings, load_config_file, load_config_toml, schema
from turnout.core.errors import ConfigError
from turnout.gateway.access import Access

ROOT = Path(__file__).resolve().parents[2]

BASE = """
default_provider = "openai.primary"

[providers.models.openai.primary]
api_key = "sk-primary"
model = "gpt-4.1"

[providers.models.anthropic.backup]
api_key = "sk-ant-backup"
model = "claude-haiku-4-5"
"""


def err(text: str, env: dict[str, str] | None = None) -> ConfigError:
    """The error loading ``text`` and materialising its plan raises."""
    with pytest.raises(ConfigError) as info:
        build_plan(load_config_toml(text, env=env or {}))
    return info.value


# --- types ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "line", "path"),
    [
        ("reliability", 'provider_retries = "1"', "reliability.provider_retries"),
        ("reliability", "provider_retries = true", "reliability.provider_retries"),
        ("reliability", "provider_backoff_ms = 1.5", "reliability.provider_backoff_ms"),
        ("providers.models.openai.primary", 'timeout_secs = "30"', "providers.models.openai.primary.timeout_secs"),
        ("providers.models.openai.primary", 'native_tools = "true"', "providers.models.openai.primary.native_tools"),
        ("providers.models.openai.primary", "vision = 1", "providers.models.openai.primary.vision"),
        (
            "providers.models.openai.primary",
            'context_window = "200000"',
            "providers.models.openai.primary.context_window",
        ),
        ("notices", "intra_family = 1", "notices.intra_family"),
        ("gateway", 'port = "8787"', "gateway.port"),
        ("ledger", 'enabled = "false"', "ledger.enabled"),
        ("reliability.breaker", 'open_secs = "5"', "reliability.breaker.open_secs"),
        ("reliability.hedge", 'after_ms = "150"', "reliability.hedge.after_ms"),
    ],
)
def test_a_value_of_the_wrong_type_fails_with_its_key_path(table: str, line: str, path: str) -> None:
    """A string where a number or boolean belongs (or a boolean where a number does) is an error, never coerced."""
    text = (
        BASE.replace(f"[{table}]\n", f"[{table}]\n{line}\n")
        if f"[{table}]\n" in BASE
        else f"{BASE}\n[{table}]\n{line}\n"
    )
    e = err(text)
    assert (e.path, e.code) == (path, "invalid_value")
    assert "(got " in e.message


def test_a_union_value_says_what_each_member_wanted_at_the_key_path() -> None:
    """after_ms takes a number or "auto": the error is at the key itself and names both."""
    e = err(BASE + '\n[providers.models.openai.primary.hedge]\nafter_ms = "soon"\n')
    assert e.path == "providers.models.openai.primary.hedge.after_ms"
    assert "valid number" in e.message and "'auto'" in e.message and "more error" not in e.message


def test_integers_still_fill_number_keys() -> None:
    """TOML integers are numbers: timeout_secs = 30 and pricing = {input = 3} load."""
    cfg = load_config_toml(
        BASE.replace('model = "gpt-4.1"', 'model = "gpt-4.1"\ntimeout_secs = 30\npricing = { input = 3, output = 15 }'),
        env={},
    )
    assert cfg.profiles()["openai.primary"].timeout_secs == 30.0


def test_check_fails_on_a_string_where_a_number_belongs(tmp_path: Path) -> None:
    """`turnout check` exits 1 naming the key path of provider_retries = "1"."""
    path = tmp_path / "turnout.toml"
    path.write_text(BASE + '\n[reliability]\nprovider_retries = "1"\n')
    result = CliRunner().invoke(app, ["check", "--config", str(path)])
    assert result.exit_code == 1
    assert "reliability.provider_retries: Input should be a valid integer (got '1')" in result.output


def test_every_section_of_the_schema_is_strict() -> None:
    """Every table of turnout.toml validates strictly, also one added later (they share the base's settings)."""
    sections = [
        obj
        for obj in vars(schema).values()
        if isinstance(obj, type) and issubclass(obj, schema._Section) and obj is not schema._Section
    ]
    assert len(sections) > 10
    assert all(section.model_config.get("strict") is True for section in sections)


# --- names that refer to another ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path", "suggestion"),
    [
        (
            BASE.replace('default_provider = "openai.primary"', 'default_provider = "openai.primry"'),
            "default_provider",
            "openai.primary",
        ),
        (
            BASE.replace('default_provider = "openai.primary"', 'default_provider = "primry"'),
            "default_provider",
            "primary",
        ),
        (
            BASE + '\n[[model_routes]]\nhint = "fast"\nmodel_provider = "anthropic.bakup"\nmodel = "m"\n',
            "model_routes[0].model_provider",
            "anthropic.backup",
        ),
        (
            BASE + '\n[pools.both]\nmembers = ["openai.primary", "anthropic.backpu"]\n',
            "pools.both.members[1]",
            "anthropic.backup",
        ),
        (
            BASE
            + '\n[pools.both]\nmembers = ["openai.primary", "anthropic.backup"]\n'
            + 'weights = { "anthropic.bakcup" = 2 }\n',
            'pools.both.weights."anthropic.bakcup"',
            "anthropic.backup",
        ),
        (BASE + '\n[senders.vip]\nprovider = "anthropic.backpu"\n', "senders.vip.provider", "anthropic.backup"),
    ],
)
def test_a_reference_to_nothing_suggests_the_closest_name(text: str, path: str, suggestion: str) -> None:
    """A profile or pool reference that names nothing configured says "did you mean" the closest name."""
    e = err(text)
    assert e.path == path
    assert f"did you mean {suggestion!r}?" in e.message


def test_a_dangling_fallback_warning_suggests_the_closest_profile() -> None:
    """A fallback naming nothing configured is still pruned with a warning, which now suggests the closest name."""
    cfg = load_config_toml(
        BASE.replace('model = "gpt-4.1"', 'model = "gpt-4.1"\nfallback = ["anthropic.bakup"]'), env={}
    )
    (warning,) = [w for w in collect_warnings(cfg) if w.code == "dangling_fallback_ref"]
    assert warning.path == "providers.models.openai.primary.fallback[0]"
    assert warning.message.endswith("did you mean 'anthropic.backup'?")


def test_a_reference_far_from_every_name_gets_no_suggestion() -> None:
    """No suggestion is made when nothing configured is close."""
    e = err(BASE.replace('default_provider = "openai.primary"', 'default_provider = "zzzz.qqqq"'))
    assert "did you mean" not in e.message


# --- environment variables ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ['api_key = "${PRIMARY_KEY}"', 'api_key_env = "PRIMARY_KEY"', 'api_keys = ["${PRIMARY_KEY}"]']
)
def test_an_empty_environment_variable_is_named_as_empty(key: str) -> None:
    """A credential variable that is set but empty is named as empty, not only "has no credential"."""
    text = BASE.replace('api_key = "sk-primary"', key)
    assert "$PRIMARY_KEY is set but empty" in err(text, env={"PRIMARY_KEY": ""}).message
    assert "$PRIMARY_KEY is set but empty" in err(text, env={"PRIMARY_KEY": "  "}).message
    assert "$PRIMARY_KEY is not set" in err(text, env={}).message


def test_an_empty_gateway_key_variable_is_named_as_empty() -> None:
    """[gateway] api_keys_env naming an empty variable fails as empty, an unset one as not set."""
    text = BASE + '\n[gateway]\napi_keys_env = "GATEWAY_KEYS"\n'
    assert err(text, env={"GATEWAY_KEYS": ""}).message == "environment variable GATEWAY_KEYS is set but empty"
    assert err(text, env={}).message == "environment variable GATEWAY_KEYS is not set"


# --- settings without effect --------------------------------------------------------------------------------------


def _unused(text: str) -> list[tuple[str, str]]:
    cfg = load_config_toml(text, env={})
    return [(w.path, w.message) for w in collect_warnings(cfg) if w.code == "setting_unused"]


def test_a_hedge_table_without_enabled_is_warned_about() -> None:
    """[reliability.hedge] with after_ms but not enabled = true hedges nothing: `turnout check` says so."""
    ((path, message),) = _unused(BASE + "\n[reliability.hedge]\nafter_ms = 150\n")
    assert path == "reliability.hedge"
    assert "after_ms" in message and "enabled = true" in message and "no profile hedges" in message


def test_a_profile_hedge_table_without_enabled_is_warned_about() -> None:
    """A profile's hedge table that sets after_ms, with hedging off above it, is warned about at its path."""
    ((path, message),) = _unused(BASE + "\n[providers.models.openai.primary.hedge]\nafter_ms = 150\n")
    assert path == "providers.models.openai.primary.hedge"
    assert "openai.primary does not hedge" in message


def test_hedge_settings_used_by_an_enabled_profile_are_not_warned_about() -> None:
    """[reliability.hedge] after_ms is the default for a profile that enables hedging: no warning."""
    text = BASE + "\n[reliability.hedge]\nafter_ms = 150\n\n[providers.models.openai.primary.hedge]\nenabled = true\n"
    assert _unused(text) == []
    assert _unused(BASE + "\n[reliability.hedge]\nenabled = true\nafter_ms = 150\n") == []


def test_a_disabled_breaker_with_settings_is_warned_about() -> None:
    """A breaker table that sets keys and enabled = false (here or above) is warned about."""
    ((path, message),) = _unused(BASE + "\n[reliability.breaker]\nenabled = false\nopen_secs = 5\n")
    assert path == "reliability.breaker" and "open_secs" in message
    ((path, _),) = _unused(BASE + "\n[providers.models.openai.primary.breaker]\nenabled = false\nfailures = 3\n")
    assert path == "providers.models.openai.primary.breaker"
    assert _unused(BASE + "\n[reliability.breaker]\nopen_secs = 5\n") == []


def test_redis_settings_under_the_memory_backend_are_warned_about() -> None:
    """[state] url with backend = "memory" has no effect: warned about."""
    ((path, message),) = _unused(BASE + '\n[state]\nurl = "redis://127.0.0.1:6379/0"\n')
    assert path == "state.url" and "memory backend" in message
    assert "redis://" not in message  # a URL may carry a password: never shown


def test_check_prints_the_hedge_warning(tmp_path: Path) -> None:
    """`turnout check` prints the warning for a hedge table without enabled, and still exits 0."""
    path = tmp_path / "turnout.toml"
    path.write_text(BASE + "\n[reliability.hedge]\nafter_ms = 150\n")
    result = CliRunner().invoke(app, ["check", "--config", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "setting_unused  reliability.hedge" in result.output


# --- shipped configurations -----------------------------------------------------------------------------------


def test_the_example_config_loads_and_checks_without_strictness_errors() -> None:
    """examples/turnout.toml loads strictly, builds its plan and has no setting without effect."""
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-example",
        "OPENAI_API_KEY": "sk-example-1",
        "OPENAI_API_KEY_2": "sk-example-2",
        "DEEPSEEK_API_KEY": "sk-example-ds",
        "GEMINI_API_KEY": "gemini-example",
        "TURNOUT_GATEWAY_KEY": "gw-example",
    }
    cfg = load_config_file(ROOT / "examples" / "turnout.toml", env=env)
    build_plan(cfg)
    assert [w for w in collect_warnings(cfg) if w.code == "setting_unused"] == []


@pytest.mark.parametrize(
    ("tail", "path", "suggestion"),
    [
        ('[gateway.keys.app]\nkey = "gw-app"\nmodels = ["hint:fsat"]\n', "gateway.keys.app.models[0]", "hint:fast"),
        ('[gateway.keys.app]\nkey = "gw-app"\nsender = "vpi"\n', "gateway.keys.app.sender", "vip"),
        ('[gateway.aliases]\nquick = "hint:fsat"\n', "gateway.aliases.quick", "hint:fast"),
    ],
)
def test_gateway_names_that_refer_to_nothing_suggest_the_closest(tail: str, path: str, suggestion: str) -> None:
    """A gateway key's models and sender, and an alias's hint, that name nothing say "did you mean"."""
    text = BASE + '\n[[model_routes]]\nhint = "fast"\nmodel_provider = "anthropic.backup"\nmodel = "m"\n'
    text += '\n[senders.vip]\nprovider = "anthropic.backup"\n\n' + tail
    with pytest.raises(ConfigError) as info:
        Access(load_config_toml(text, env={})).check()
    assert info.value.path == path
    assert f"did you mean {suggestion!r}?" in info.value.message
