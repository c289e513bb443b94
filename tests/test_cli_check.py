"""`turnout check`: warnings with paths, the pruned order, exit codes, JSON."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from turnout.cli.main import app

runner = CliRunner()

MESSY = """
default_provider = "openai.p0"
[providers.models.openai.p0]
api_key = "sk-0"
model = "m0"
fallback_models = ["", "m0", "m0-mini"]
fallback = ["openai.p1", "ghost.one", "openai.p0"]
[providers.models.openai.p1]
api_key = "sk-1"
fallback = ["openai.p2"]
[providers.models.openai.p2]
api_key = "sk-2"
fallback = ["openai.p3"]
[providers.models.openai.p3]
api_key = "sk-3"
fallback = ["openai.p4"]
[providers.models.openai.p4]
api_key = "sk-4"
[[model_routes]]
hint = "fast"
model_provider = "openai.p4"
model = "tiny"
"""


def write(tmp_path: Path, text: str) -> str:
    f = tmp_path / "turnout.toml"
    f.write_text(text)
    return str(f)


def test_check_prints_all_five_codes_and_pruned_order(tmp_path: Path) -> None:
    """Every warning code appears with its exact path, then the pruned attempt order; exit 0."""
    result = runner.invoke(app, ["check", "--config", write(tmp_path, MESSY)])
    assert result.exit_code == 0, result.output
    out = result.output
    for code, path in [
        ("empty_fallback_model", "providers.models.openai.p0.fallback_models[0]"),
        ("fallback_model_duplicates_primary", "providers.models.openai.p0.fallback_models[1]"),
        ("dangling_fallback_ref", "providers.models.openai.p0.fallback[1]"),
        ("fallback_cycle", "providers.models.openai.p0.fallback[2]"),
        ("max_fallback_depth_exceeded", "providers.models.openai.p3.fallback"),
    ]:
        assert f"{code}  {path}" in out
    assert "1. openai.p0/m0  pinned  3 tries" in out
    assert "2. openai.p0/m0-mini  pinned  3 tries" in out
    assert "5. openai.p3/<requested model>  unpinned  3 tries" in out
    default_section = out.split("hint:fast")[0]
    assert "openai.p4" not in default_section.split("default: openai.p0")[1]  # pruned: deeper than 3
    assert "hint:fast -> openai.p4 (route model tiny)" in out


def test_check_json(tmp_path: Path) -> None:
    """--json prints warnings and orders as JSON."""
    result = runner.invoke(app, ["check", "--json", "--config", write(tmp_path, MESSY)])
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["ok"] is True
    assert len(data["warnings"]) == 5
    assert [e["profile"] for e in data["default"]["entries"]] == [
        "openai.p0",
        "openai.p0",
        "openai.p1",
        "openai.p2",
        "openai.p3",
    ]
    assert data["routes"][0]["hint"] == "fast"


def test_check_fallback_without_credential_exits_1(tmp_path: Path) -> None:
    """A reachable fallback without a key exits 1 naming both profiles."""
    text = MESSY.replace('api_key = "sk-2"\n', "")
    result = runner.invoke(app, ["check", "--config", write(tmp_path, text)])
    assert result.exit_code == 1
    assert "openai.p2" in result.output and "openai.p1" in result.output


def test_check_unknown_key_exits_1_with_path(tmp_path: Path) -> None:
    """An unknown key exits 1 with its path and a suggestion."""
    result = runner.invoke(app, ["check", "--config", write(tmp_path, MESSY + "[reliability]\nretries = 1\n")])
    assert result.exit_code == 1
    assert "reliability.retries" in result.output


def test_check_unknown_key_json(tmp_path: Path) -> None:
    """With --json a fatal error is JSON too."""
    result = runner.invoke(app, ["check", "--json", "--config", write(tmp_path, "bogus = 1\n" + MESSY)])
    assert result.exit_code == 1
    assert json.loads(result.output)["error"]["path"] == "bogus"


def test_check_usage_error_exits_2() -> None:
    """A usage error exits 2."""
    assert runner.invoke(app, ["check", "--no-such-flag"]).exit_code == 2


def test_check_missing_file_exits_1(tmp_path: Path) -> None:
    """A missing config file exits 1."""
    assert runner.invoke(app, ["check", "--config", str(tmp_path / "nope.toml")]).exit_code == 1


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "turnout.toml"
EXAMPLE_ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-example",
    "OPENAI_API_KEY": "sk-example-1",
    "OPENAI_API_KEY_2": "sk-example-2",
    "DEEPSEEK_API_KEY": "sk-ds-example",
    "GEMINI_API_KEY": "AIza-example",
    "TURNOUT_GATEWAY_KEY": "gw-example",
}


def test_example_config_checks_clean() -> None:
    """examples/turnout.toml loads with no warnings and the documented order."""
    result = runner.invoke(app, ["check", "--config", str(EXAMPLE)], env=EXAMPLE_ENV)
    assert result.exit_code == 0, result.output
    assert "No warnings." in result.output
    for line in [
        "1. anthropic.prod/claude-sonnet-4-5  pinned  3 tries",
        "2. anthropic.prod/claude-haiku-4-5  pinned  3 tries",
        "3. openai.backup/gpt-4.1  pinned  3 tries",
        "4. gemini.flash/gemini-2.5-flash  pinned  3 tries",
        "5. ollama.local/llama3.2  pinned  3 tries",
        "hint:reasoning -> deepseek.reasoner (route model deepseek-reasoner)",
        "hint:fast -> openai.responses (route model gpt-4.1-mini)",
    ]:
        assert line in result.output
    assert "sk-" not in result.output


def test_check_reports_a_gateway_access_error_with_its_path(tmp_path: Path) -> None:
    """`turnout check` validates [gateway] keys and aliases too, naming the key path."""
    text = (
        'default_provider = "openai.p0"\n[providers.models.openai.p0]\napi_key = "sk-0"\nmodel = "m0"\n'
        '[gateway.keys.team]\nkey = "k"\nmodels = ["no-such-model"]\n'
    )
    result = runner.invoke(app, ["check", "--config", write(tmp_path, text), "--json"])
    assert result.exit_code == 1
    error = json.loads(result.output)["error"]
    assert error["path"] == "gateway.keys.team.models[0]"
    assert error["code"] == "unknown_model"


POOLED = """
default_provider = "gpt"
[providers.models.azure.east]
uri = "https://east.example/openai/deployments/gpt"
api_key = "sk-east"
model = "gpt-4.1"
fallback_models = ["gpt-4.1-mini"]
[providers.models.azure.west]
uri = "https://west.example/openai/deployments/gpt"
api_key = "sk-west"
model = "gpt-4.1"
[providers.models.openai.backup]
api_key = "sk-backup"
model = "gpt-4o-mini"
[pools.gpt]
members = ["azure.east", "azure.west"]
strategy = "weighted"
weights = { "azure.east" = 3 }
fallback = ["openai.backup"]
"""


def test_check_prints_each_pool_with_its_strategy_and_marks_its_entries(tmp_path: Path) -> None:
    """A pool is printed with strategy, weights and fallback; the default order marks its members' entries."""
    result = runner.invoke(app, ["check", "--config", write(tmp_path, POOLED)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "pool gpt: weighted" in lines
    assert "  members: azure.east (weight 3), azure.west (weight 1)" in lines
    assert "  fallback: openai.backup" in lines
    assert "default: gpt (pool, weighted)" in lines
    assert "  1. azure.east/gpt-4.1  pinned  3 tries  [pool gpt]" in lines
    assert "  2. azure.west/gpt-4.1  pinned  3 tries  [pool gpt]" in lines
    assert "  3. azure.east/gpt-4.1-mini  pinned  3 tries  [pool gpt]" in lines
    assert "  4. openai.backup/gpt-4o-mini  pinned  3 tries" in lines


def test_check_json_lists_pools_and_each_entrys_pool(tmp_path: Path) -> None:
    """--json has a pools list and a pool name (or null) on every entry."""
    result = runner.invoke(app, ["check", "--json", "--config", write(tmp_path, POOLED.replace("weighted", "latency"))])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["pools"] == [
        {
            "name": "gpt",
            "strategy": "latency",
            "members": ["azure.east", "azure.west"],
            "weights": {"azure.east": 3.0, "azure.west": 1.0},
            "explore": 0.05,
            "fallback": ["openai.backup"],
        }
    ]
    assert [e["pool"] for e in body["default"]["entries"]] == ["gpt", "gpt", "gpt", None]
    assert [w["code"] for w in body["warnings"]] == ["pool_setting_unused"]


def test_check_reports_a_bad_pool_with_its_key_path(tmp_path: Path) -> None:
    """A pool naming an unknown member fails `turnout check` with exit 1 and the member's key path."""
    bad = POOLED.replace('members = ["azure.east", "azure.west"]', 'members = ["azure.east", "azure.north"]')
    result = runner.invoke(app, ["check", "--json", "--config", write(tmp_path, bad)])
    assert result.exit_code == 1
    assert json.loads(result.output)["error"] == {
        "code": "unknown_pool_member",
        "path": "pools.gpt.members[1]",
        "message": "member 'azure.north' does not name a configured profile; did you mean 'azure.west'?",
    }


CLOUDS = """
default_provider = "anthropic.main"
[providers.models.anthropic.main]
api_key = "sk-0001"
model = "claude-sonnet-4-5"
fallback = ["bedrock.main"]
[providers.models.bedrock.main]
region = "us-west-2"
api_key = "k-0001"
model = "claude-sonnet-4-5"
fallback = ["vertex.main"]
[providers.models.vertex.main]
project = "p"
model = "claude-sonnet-4-5"
"""


def test_check_prints_the_id_each_entry_sends(tmp_path: Path) -> None:
    """One canonical name on three clouds: check shows the Bedrock profile and Vertex version each will send."""
    result = runner.invoke(app, ["check", "--config", write(tmp_path, CLOUDS)])
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines() if line.strip()[:2] in ("1.", "2.", "3.")]
    assert lines[0].startswith("1. anthropic.main/claude-sonnet-4-5") and "sends" not in lines[0]
    assert lines[1].endswith("sends us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    assert lines[2].endswith("sends claude-sonnet-4-5@20250929")
    data = json.loads(runner.invoke(app, ["check", "--json", "--config", write(tmp_path, CLOUDS)]).output)
    assert [e["wire_model"] for e in data["default"]["entries"]] == [
        "claude-sonnet-4-5",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "claude-sonnet-4-5@20250929",
    ]


def _fan_out(members: int, retries: int) -> str:
    names = [f"openai.m{i}" for i in range(members)]
    text = (
        'default_provider = "wide"\n'
        f"[reliability]\nprovider_retries = {retries}\n"
        f"[pools.wide]\nmembers = {json.dumps(names)}\n"
        '[[model_routes]]\nhint = "wide"\nmodel_provider = "wide"\nmodel = "gpt-4.1"\n'
    )
    for i in range(members):
        text += f'[providers.models.openai.m{i}]\napi_key = "sk-{i}"\nmodel = "gpt-4.1"\n'
    return text


def test_check_warns_when_one_request_may_make_more_than_fifty_upstream_calls(tmp_path: Path) -> None:
    """6 pool members × 10 tries: a ``large_fan_out`` warning naming each route reaching them and the figure 60."""
    result = runner.invoke(app, ["check", "--config", write(tmp_path, _fan_out(6, 9))])
    assert result.exit_code == 0, result.output
    assert "large_fan_out  default_provider" in result.output
    assert "large_fan_out  model_routes[0]" in result.output
    assert "up to 60 upstream calls" in result.output
    assert "hint:wide" in result.output
    body = json.loads(runner.invoke(app, ["check", "--json", "--config", write(tmp_path, _fan_out(6, 9))]).output)
    codes = [(w["code"], w["path"]) for w in body["warnings"]]
    assert ("large_fan_out", "default_provider") in codes


def test_check_does_not_warn_at_fifty_upstream_calls_or_fewer(tmp_path: Path) -> None:
    """5 pool members × 10 tries is exactly 50: no fan-out warning."""
    result = runner.invoke(app, ["check", "--config", write(tmp_path, _fan_out(5, 9))])
    assert result.exit_code == 0, result.output
    assert "large_fan_out" not in result.output


def test_check_warns_about_a_fallback_chain_a_caller_may_name(tmp_path: Path) -> None:
    """A profile that is no route's target but fans out to 60 calls through its fallbacks is named by its path."""
    text = 'default_provider = "openai.small"\n[reliability]\nprovider_retries = 9\n'
    text += '[providers.models.openai.small]\napi_key = "sk-s"\nmodel = "gpt-4.1"\n'
    text += '[providers.models.openai.big]\napi_key = "sk-b"\nmodel = "gpt-4.1"\nfallback_models = ["a", "b"]\n'
    text += 'fallback = ["openai.f1"]\n[providers.models.openai.f1]\napi_key = "sk-f"\nmodel = "gpt-4.1"\n'
    text += 'fallback_models = ["c", "d"]\n'
    result = runner.invoke(app, ["check", "--config", write(tmp_path, text)])
    assert result.exit_code == 0, result.output
    assert "large_fan_out  providers.models.openai.big" in result.output
    assert "up to 60 upstream calls" in result.output
    assert "large_fan_out  default_provider" not in result.output


def test_check_warns_when_a_limited_key_reaches_a_model_without_a_price(tmp_path: Path) -> None:
    """A key with a spend limit that reaches a model without a price is warned about; other keys and models are not."""
    text = (
        'default_provider = "openai.main"\n'
        '[gateway.keys.team]\nkey = "gw-team"\ndaily_limit_usd = 5.0\n'
        '[gateway.keys.free]\nkey = "gw-free"\nrpm = 10\n'
        '[providers.models.openai.main]\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        '[providers.models.openai.mystery]\napi_key = "sk-up"\nmodel = "house-model-unpriced-7"\n'
        '[providers.models.openai.own]\napi_key = "sk-up"\nmodel = "house-model-unpriced-8"\n'
        "pricing = { input = 1.0, output = 2.0 }\n"
    )
    result = runner.invoke(app, ["check", "--config", write(tmp_path, text)])
    assert result.exit_code == 0, result.output
    assert "limited_key_unpriced_model  gateway.keys.team" in result.output
    assert "openai.mystery/house-model-unpriced-7" in result.output
    assert "house-model-unpriced-8" not in result.output
    assert "gateway.keys.free" not in result.output
