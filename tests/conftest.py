"""Shared test helpers: fixture paths and small builders."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = (ROOT.parent / "shared" / "fixtures").resolve()


@pytest.fixture
def fixtures() -> Path:
    """The recorded provider payloads shipped beside the repository."""
    assert FIXTURES.is_dir(), f"recorded fixtures not found at {FIXTURES}"
    return FIXTURES

import sys  # noqa: E402

# Test helpers (tests/fakes.py) are importable from every test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))


import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """A real redis-server on a loopback port, which tests may stop and start again."""

    def __init__(self, exe: str, port: int) -> None:
        self.exe = exe
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A redis-server on a free loopback port for the whole session (stopped afterwards)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed: run `make test` as root, or `sudo apt-get install redis-server`")
    server = RedisServer(exe, free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of a running, empty Redis."""
    if redis_server.proc is None:
        redis_server.start()
    redis_server.flush()
    return redis_server.url
