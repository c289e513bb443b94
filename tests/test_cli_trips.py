"""A newcomer's first commands: a port out of range, the version, a ledger that is not there."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from turnout.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("command", ["serve", "sim"])
@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_a_port_out_of_range_is_a_usage_error_not_a_traceback(command: str, port: str) -> None:
    result = runner.invoke(app, [command, "--port", port])
    assert result.exit_code == 2
    assert "--port" in result.output and "Traceback" not in result.output and result.exception is not None
    assert isinstance(result.exception, SystemExit)


def test_version_prints_the_installed_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"turnout {version('turnout')}\n"


def test_a_ledger_that_is_not_there_is_said_so_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such.sqlite3"
    result = runner.invoke(app, ["ledger", "--path", str(missing)])
    assert result.exit_code == 1
    assert f"no ledger file at {missing}" in result.output and "0 calls" not in result.output
    as_json = runner.invoke(app, ["ledger", "--json", "--path", str(missing)])
    assert as_json.exit_code == 1
    assert orjson.loads(as_json.output)["error"]["code"] == "no_ledger"
    assert not missing.exists() and not missing.parent.exists()
