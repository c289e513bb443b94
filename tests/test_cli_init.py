"""`turnout init --for <client>`: a gateway config in one step that serves the model names the agent sends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from typer.testing import CliRunner

from fakes import Fleet
from turnout import Client
from turnout.cli.main import app
from turnout.gateway import Gateway, GatewayServer

runner = CliRunner()
KEY = "init-gateway-key"


async def _post(server: GatewayServer, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
    hdrs = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **headers}
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.url + path, data=orjson.dumps(body), headers=hdrs) as r,
    ):
        await r.read()
        return r.status, r.headers.get("x-turnout-provider", "")


@pytest.mark.parametrize(
    ("client", "path", "body", "headers", "served"),
    [
        (
            "claude-code",
            "/v1/messages",
            {"model": "claude-opus-4-8[1m]", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
            {"anthropic-version": "2023-06-01"},
            "anthropic.main",
        ),
        (
            "claude-code",
            "/v1/messages",
            {"model": "claude-haiku-4-5-20251001", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
            {"anthropic-version": "2023-06-01"},
            "anthropic.small",
        ),
        ("codex", "/v1/responses", {"model": "gpt-5.5-codex", "input": "hi"}, {}, "openai.main"),
    ],
)
async def test_the_written_config_serves_the_agents_default_model_names(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    client: str,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    served: str,
) -> None:
    """The file init writes loads with its two variables set and routes the agent's own model names."""
    target = tmp_path / "turnout.toml"
    result = runner.invoke(app, ["init", "--for", client, "--path", str(target)])
    assert result.exit_code == 0, result.output
    assert "turnout serve" in result.output
    for name in ("TURNOUT_GATEWAY_KEY", "TURNOUT_ANTHROPIC_KEY", "TURNOUT_OPENAI_KEY"):
        monkeypatch.setenv(name, KEY if name == "TURNOUT_GATEWAY_KEY" else "sk-upstream")
    gateway_client = Client.from_toml(target.read_text(), adapter_builder=Fleet(), surface="gateway", ledger=False)
    async with GatewayServer(Gateway(gateway_client, owns_client=True)) as server:
        status, provider = await _post(server, path, body, headers)
    assert (status, provider) == (200, served)


def test_init_keeps_an_existing_file_and_names_the_presets(tmp_path: Path) -> None:
    """An existing file is not overwritten without --force; an unknown client lists those there are."""
    target = tmp_path / "turnout.toml"
    target.write_text("# mine\n")
    kept = runner.invoke(app, ["init", "--for", "claude-code", "--path", str(target)])
    after_kept = target.read_text()
    unknown = runner.invoke(app, ["init", "--for", "vim", "--path", str(tmp_path / "other.toml")])
    forced = runner.invoke(app, ["init", "--for", "codex", "--path", str(target), "--force"])
    assert kept.exit_code == 1 and after_kept == "# mine\n"
    assert "--force" in kept.output
    assert target.read_text().startswith("# turnout.toml for Codex")
    assert unknown.exit_code == 1 and "claude-code, codex" in unknown.output
    assert not (tmp_path / "other.toml").exists()
    assert forced.exit_code == 0
