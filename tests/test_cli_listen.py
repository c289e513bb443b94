"""Every command that listens reports an address it cannot bind in one line, with the port and what to do."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from servers import turnout_command
from turnout.cli.demo import demo_config, serve_demo
from turnout.client import Client
from turnout.core.errors import ConfigError
from turnout.sim import Simulator

GATEWAY = """
default_provider = "openai.main"

[providers.models.openai.main]
uri = "http://127.0.0.1:9/v1"
api_key = "sk-test-listen"
model = "gpt-4.1"

[gateway]
api_keys = ["gw-test-listen"]

[ledger]
enabled = false
"""


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port something else is listening on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*turnout_command(), *args], capture_output=True, text=True, timeout=60, check=False)


def _assert_one_line(result: subprocess.CompletedProcess[str], port: int) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback
    assert f"127.0.0.1:{port}" in lines[0]
    assert "already in use" in lines[0] and "--port" in lines[0]


def test_sim_on_a_busy_port_says_so_in_one_line(busy_port: int) -> None:
    """`turnout sim` on a port in use exits 2 with one line naming the port and --port, not a traceback."""
    _assert_one_line(_run("sim", "--port", str(busy_port)), busy_port)


def test_serve_on_a_busy_port_says_so_in_one_line(tmp_path: Path, busy_port: int) -> None:
    """`turnout serve` on a port in use exits 2 with one line naming the port and --port."""
    config = tmp_path / "turnout.toml"
    config.write_text(GATEWAY)
    _assert_one_line(_run("serve", "--config", str(config), "--port", str(busy_port)), busy_port)


def test_serve_with_workers_on_a_busy_port_fails_once_before_starting_them(tmp_path: Path, busy_port: int) -> None:
    """`turnout serve --workers 2` on a port in use exits 2 with one line, before any worker starts."""
    config = tmp_path / "turnout.toml"
    config.write_text(GATEWAY)
    result = _run("serve", "--config", str(config), "--port", str(busy_port), "--workers", "2")
    _assert_one_line(result, busy_port)
    assert "worker" not in result.stderr


async def test_demo_serve_on_a_busy_port_raises_the_same_error(tmp_path: Path, busy_port: int) -> None:
    """The demo's gateway on a port in use raises the listen error the command line prints with exit 2."""
    async with Simulator() as sim, Client.from_toml(demo_config(sim, tmp_path / "ledger.sqlite3")) as client:
        with pytest.raises(ConfigError) as caught:
            await serve_demo(Console(record=True, force_terminal=False), client, busy_port)
    assert caught.value.code == "listen_failed"
    assert f"127.0.0.1:{busy_port}" in str(caught.value)
    assert "the port is already in use" in str(caught.value) and "--port" in str(caught.value)


def test_demo_serve_on_a_busy_port_says_so_before_the_tour(busy_port: int) -> None:
    """`turnout demo --serve --port N` on a port in use exits 2 with one line, without running the tour first."""
    result = _run("demo", "--serve", "--port", str(busy_port))
    _assert_one_line(result, busy_port)
    assert result.stdout == ""  # no tour was printed
