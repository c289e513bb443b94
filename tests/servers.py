"""Real servers for tests: a free loopback port, the turnout command, and a redis-server tests may stop and start."""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from turnout.sim import Simulator


def turnout_command() -> list[str]:
    """The ``turnout`` command of the interpreter running the tests."""
    script = Path(sys.executable).with_name("turnout")
    return [str(script)] if script.exists() else [sys.executable, "-m", "turnout"]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def loopback_app(app: web.Application, **runner_options: Any) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port for the block; yields its base URL (``http://127.0.0.1:<port>``)."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


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

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Freeze the server (SIGSTOP) for the block: the kernel still accepts connections, nothing answers.

        The same as ``DEBUG SLEEP`` for a client, but it ends exactly when the block does (no waiting for a
        sleep to run out) and needs no ``enable-debug-command``.
        """
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.proc.send_signal(signal.SIGCONT)

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)


def redis_executable() -> str | None:
    """The redis-server binary, if installed."""
    return shutil.which("redis-server")


@contextmanager
def threaded_simulator(**options: Any) -> Iterator[Simulator]:
    """A simulator serving from its own thread and event loop, for commands that run ``asyncio.run`` themselves."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="threaded-sim", daemon=True)
    thread.start()
    simulator = Simulator(**options)
    try:
        asyncio.run_coroutine_threadsafe(simulator.start(), loop).result(timeout=10)
        yield simulator
    finally:
        asyncio.run_coroutine_threadsafe(simulator.aclose(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
