"""`turnout serve` as a real process: it serves, drains on SIGTERM (in flight finishes, new gets 503), exits 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
import pytest
from gateway_support import GATEWAY_KEY, MESSAGES, SIM_TEXT, config, profile, sample

from servers import turnout_command
from turnout.gateway.workers import decode
from turnout.sim import Simulator

pytestmark = pytest.mark.slow

_LISTENING = re.compile(r"listening on (http://\S+) \(pid (\d+)\)")


class Gateway:
    """A `turnout serve` child process and its stderr, read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    async def line(self, pattern: str | re.Pattern[str]) -> re.Match[str]:
        """Read stderr until a line matches (bounded, so a broken server fails the test instead of hanging)."""
        assert self.proc.stderr is not None
        async with asyncio.timeout(30):
            while True:
                raw = await self.proc.stderr.readline()
                if not raw:
                    raise AssertionError("the gateway exited; its output:\n" + "\n".join(self.lines))
                text = raw.decode().rstrip()
                self.lines.append(text)
                found = re.search(pattern, text)
                if found:
                    return found

    async def rest(self) -> str:
        """Everything it writes until it exits."""
        assert self.proc.stderr is not None
        self.lines.extend((await self.proc.stderr.read()).decode().splitlines())
        return "\n".join(self.lines)


@asynccontextmanager
async def serve(tmp_path: Path, toml: str, *args: str) -> AsyncIterator[Gateway]:
    """`turnout serve` with the config ``toml``; its temporary files go to ``tmp_path / "run"``."""
    path = tmp_path / "turnout.toml"
    path.write_text(toml)
    (tmp_path / "run").mkdir()
    proc = await asyncio.create_subprocess_exec(
        *turnout_command(),
        "serve",
        "--config",
        str(path),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path / "run")},
        start_new_session=True,  # its own process group: a failing test stops the workers too, not only the parent
    )
    try:
        yield Gateway(proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def chat(session: aiohttp.ClientSession, url: str, model: str) -> tuple[int, bytes]:
    body = orjson.dumps({"model": model, "messages": MESSAGES})
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}
    async with session.post(f"{url}/v1/chat/completions", data=body, headers=headers) as resp:
        return resp.status, await resp.read()


async def test_serve_drains_gracefully_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM: the request in flight completes, a new one gets 503, then the process exits 0."""
    gate = asyncio.Event()

    async def held(seconds: float) -> None:  # the upstream's delay lasts until the test opens the gate
        await gate.wait()

    async with Simulator(sleep=held) as sim:
        slow = 'aliases = { slow = "openai.main/sim-slow-d1" }\n'
        toml = config("openai.main", profile(sim, "openai.main", "sim-ok"), extra=slow)
        async with serve(tmp_path, toml, "--port", "0") as gateway, aiohttp.ClientSession() as session:
            url = (await gateway.line(_LISTENING)).group(1)
            before = await chat(session, url, "")
            in_flight = asyncio.ensure_future(chat(session, url, "slow"))
            await sim.wait_for_log(2, settled=False)
            gateway.proc.send_signal(signal.SIGTERM)
            await gateway.line("draining")
            refused_status, refused_body = await chat(session, url, "")
            gate.set()
            status, body = await in_flight
            assert await gateway.proc.wait() == 0
        output = await gateway.rest()
    assert _answer(before) == SIM_TEXT
    assert refused_status == 503
    assert orjson.loads(refused_body)["error"]["code"] == "shutting_down"
    assert status == 200
    assert _answer((status, body)) == SIM_TEXT
    assert "turnout gateway stopped" in output
    assert [e.outcome for e in sim.log] == ["ok", "ok"]  # the refused request never reached it
    assert list((tmp_path / "run").iterdir()) == []  # one process: no workers directory


def _answer(reply: tuple[int, bytes]) -> str:
    status, body = reply
    assert status == 200, body
    return str(orjson.loads(body)["choices"][0]["message"]["content"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_workers_share_one_port_and_stop_together(tmp_path: Path) -> None:
    """--workers 2 starts two processes on one port (SO_REUSEPORT); SIGTERM stops both and the parent exits 0."""
    async with Simulator() as sim:
        toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
        async with serve(tmp_path, toml, "--port", str(_free_port()), "--workers", "2") as gateway:
            first = await gateway.line(_LISTENING)
            second = await gateway.line(_LISTENING)
            async with aiohttp.ClientSession() as session:
                replies = await asyncio.gather(*(chat(session, first.group(1), "") for _ in range(6)))
            gateway.proc.send_signal(signal.SIGTERM)
            assert await gateway.proc.wait() == 0
        output = await gateway.rest()
    assert first.group(1) == second.group(1)
    assert first.group(2) != second.group(2)
    assert all(_answer(r) == SIM_TEXT for r in replies)
    assert output.count("turnout gateway stopped") == 2


async def _fresh(url: str, path: str, *, key: str = GATEWAY_KEY) -> bytes:
    """GET on a new connection (SO_REUSEPORT hands each new connection to one of the workers)."""
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.get(url + path, headers={"Authorization": f"Bearer {key}"}) as resp,
    ):
        assert resp.status == 200
        return await resp.read()


def _published(run: Path) -> dict[str, float]:
    """The chat requests each worker last published (from the files in the server's workers directory)."""
    out = {}
    for file in run.glob("turnout-gateway-*/*.json"):
        totals = decode(file.read_bytes())
        if totals is not None:
            out[totals.worker] = totals.counters.get("turnout_gateway_requests", {}).get(("openai", "200"), 0.0)
    return out


async def test_two_workers_describe_the_whole_server(tmp_path: Path) -> None:
    """--workers 2: whichever worker answers, /metrics and /status count every request both workers served."""
    sent = 40
    async with Simulator() as sim:
        toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
        async with serve(tmp_path, toml, "--port", str(_free_port()), "--workers", "2") as gateway:
            first, second = await gateway.line(_LISTENING), await gateway.line(_LISTENING)
            url, pids = first.group(1), {first.group(2), second.group(2)}
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                for _ in range(sent):  # one connection per request, so the kernel spreads them
                    assert _answer(await chat(session, url, "")) == SIM_TEXT
            async with asyncio.timeout(20):  # each worker publishes every second
                while True:
                    published = _published(tmp_path / "run")
                    if len(published) == 2 and sum(published.values()) == sent:
                        break
                    await asyncio.sleep(0.05)
            answered: set[str] = set()
            async with asyncio.timeout(30):
                while len(answered) < 2:  # scrape until both workers have answered (each is the first it lists)
                    metrics = (await _fresh(url, "/metrics")).decode()
                    status = orjson.loads(await _fresh(url, "/status"))
                    assert sample(metrics, "turnout_gateway_requests_total", surface="openai", status="200") == sent
                    assert sample(metrics, "turnout_upstream_attempts_total", outcome="ok") == sent
                    assert status["recent_attempts"]["by_outcome"] == {"ok": sent}
                    assert len(status["workers"]) == 2
                    answered.add(status["workers"][0]["worker"])
            gateway.proc.send_signal(signal.SIGTERM)
            assert await gateway.proc.wait() == 0
    assert all(n > 0 for n in published.values()), published  # both workers served some of the requests
    assert answered == set(published) == pids
    assert list((tmp_path / "run").iterdir()) == []  # the workers directory is removed at shutdown


async def _health(url: str) -> int:
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
        session.get(url + "/health") as resp,
    ):
        return resp.status


async def test_a_killed_worker_is_started_again_while_the_other_serves(tmp_path: Path) -> None:
    """--workers 2: after kill -9 of one worker the other keeps answering, /health stays 200, a new worker starts."""
    async with Simulator() as sim:
        toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
        async with serve(tmp_path, toml, "--port", str(_free_port()), "--workers", "2") as gateway:
            first, second = await gateway.line(_LISTENING), await gateway.line(_LISTENING)
            url, victim = first.group(1), int(first.group(2))
            os.kill(victim, signal.SIGKILL)
            restarted = await gateway.line(r"worker \d \(pid (\d+)\) exited with -9; starting it again")
            healths, replies = [], []
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                for _ in range(5):  # the dead worker's socket is closed: every new connection reaches a live one
                    healths.append(await _health(url))
                    replies.append(await chat(session, url, ""))
            third = await gateway.line(_LISTENING)
            # the parent writes its count before it starts the new worker; whichever worker answers reads it
            metrics = (await _fresh(url, "/metrics")).decode()
            gateway.proc.send_signal(signal.SIGTERM)
            assert await gateway.proc.wait() == 0
    assert int(restarted.group(1)) == victim
    assert healths == [200] * 5
    assert all(_answer(r) == SIM_TEXT for r in replies)
    assert sample(metrics, "turnout_gateway_worker_restarts_total") == 1
    assert third.group(1) == url
    assert third.group(2) not in {first.group(2), second.group(2)}


async def test_a_worker_that_cannot_start_fails_the_whole_start(tmp_path: Path) -> None:
    """--workers 2 on a port another socket holds: the start fails once, before any worker (exit 2), no restart loop."""
    async with Simulator() as sim:
        toml = config("openai.main", profile(sim, "openai.main", "sim-ok"))
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = str(taken.getsockname()[1])
            async with serve(tmp_path, toml, "--port", port, "--workers", "2") as gateway:
                async with asyncio.timeout(60):
                    assert await gateway.proc.wait() == 2  # a busy port is a usage error, found before the workers
                output = await gateway.rest()
    assert "cannot listen on" in output and "already in use" in output
    assert "starting it again" not in output


async def test_a_second_signal_ends_open_streams_and_exits_within_two_seconds(tmp_path: Path) -> None:
    """A stream stalled upstream, drain_secs 20: the second SIGTERM ends it with an error event; exit within 2 s."""
    async with Simulator() as sim:
        toml = config("openai.main", profile(sim, "openai.main", "sim-stall-a3"), extra="drain_secs = 20\n")
        async with serve(tmp_path, toml, "--port", "0") as gateway, aiohttp.ClientSession() as session:
            url = (await gateway.line(_LISTENING)).group(1)
            body = orjson.dumps({"model": "", "messages": MESSAGES, "stream": True})
            headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}
            async with session.post(f"{url}/v1/chat/completions", data=body, headers=headers) as resp:
                await resp.content.readuntil(b"\n\n")
                gateway.proc.send_signal(signal.SIGTERM)
                await gateway.line("draining")
                gateway.proc.send_signal(signal.SIGTERM)
                t0 = asyncio.get_running_loop().time()
                rest = (await resp.read()).decode()
            code = await gateway.proc.wait()
            took = asyncio.get_running_loop().time() - t0
        output = await gateway.rest()
    assert code == 0
    assert took < 2.0, output
    last = [chunk for chunk in rest.split("\n\n") if chunk.startswith("data: ")][-1]
    assert orjson.loads(last.removeprefix("data: "))["error"]["code"] == "shutting_down"
    assert "second signal" in output
