"""Abusive connections: idle sockets, slowloris heads, slow bodies, the cap, malformed HTTP, accept errors."""

from __future__ import annotations

import asyncio
import errno
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from gateway_support import GATEWAY_KEY, fake_gateway

from fakes import Fleet
from turnout.gateway import GatewayServer
from turnout.gateway.connections import EveryOnceASecond

pytestmark = pytest.mark.slow

LIMITS = """
header_timeout_secs = {header}
idle_timeout_secs = {idle}
body_timeout_secs = {body}
max_connections = {cap}
"""
BASE = f"""
default_provider = "openai.main"
[ledger]
enabled = false
[providers.models.openai.main]
api_key = "sk-main"
model = "gpt-4.1"
[gateway]
api_keys = ["{GATEWAY_KEY}"]
"""
SLOW_BODY = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + GATEWAY_KEY.encode() + b"\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"model": ""'
)
PARTIAL_HEAD = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: "
HEALTH = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@asynccontextmanager
async def limited(header: float, idle: float, body: float, cap: int) -> AsyncIterator[GatewayServer]:
    text = BASE + LIMITS.format(header=header, idle=idle, body=body, cap=cap)
    async with fake_gateway(text, Fleet()) as (server, _):
        yield server


async def connect(server: GatewayServer, first: bytes = b"") -> Conn:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    if first:
        writer.write(first)
        await writer.drain()
    return reader, writer


async def closed_by_server(conn: Conn, within: float) -> bool:
    """Read until the server closes the connection (True), or give up after ``within`` seconds (False)."""
    reader, _ = conn
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def health_within(server: GatewayServer, seconds: float) -> tuple[bytes, float]:
    """The status line of GET /health on a new connection, and how long it took."""
    t0 = time.perf_counter()
    async with asyncio.timeout(seconds):
        reader, writer = await connect(server, HEALTH)
        line = await reader.readline()
    writer.close()
    return line, time.perf_counter() - t0


async def until(check: object, within: float = 3.0) -> None:
    """Poll ``check()`` (bounded in time) until it holds."""
    async with asyncio.timeout(within):
        while not check():  # type: ignore[operator]  # noqa: ASYNC110 - the guard's state has no event to await
            await asyncio.sleep(0.01)


async def test_an_attack_of_idle_slowloris_and_slow_body_connections() -> None:
    """300 abusive sockets against a cap of 64: /health answers within 1 s and the server closes every one."""
    async with limited(header=0.4, idle=0.6, body=0.4, cap=64) as server:
        attack: list[Conn] = []
        for i in range(300):
            first = SLOW_BODY if i % 15 == 0 else (PARTIAL_HEAD if i % 2 else b"")
            attack.append(await connect(server, first))
        assert server.guard.count <= 64
        line, took = await health_within(server, 1.0)
        closed = await asyncio.gather(*(closed_by_server(c, within=5.0) for c in attack))
        left = server.guard.count  # the guard forgets a connection as it closes it: only /health's may be left
        for _, writer in attack:
            writer.close()
    assert line.startswith(b"HTTP/1.1 200"), line
    assert took < 1.0
    assert all(closed)
    assert left <= 1


@pytest.mark.parametrize(
    ("first", "then", "bound"),
    [
        (b"", b"", "header"),  # never sends anything
        (PARTIAL_HEAD, b"", "header"),  # a head that never ends
        (HEALTH, b"", "idle"),  # kept alive after an answer, silent
        (HEALTH, PARTIAL_HEAD, "header"),  # kept alive, then the next head never ends
        (SLOW_BODY, b"", "body"),  # a body that never ends
    ],
    ids=["silent", "slowloris", "kept-alive", "kept-alive-slowloris", "slow-body"],
)
async def test_each_phase_has_its_timeout(first: bytes, then: bytes, bound: str) -> None:
    """A connection is closed by the timeout of the phase it stalls in, not before it."""
    timeouts = {"header": 0.3, "idle": 0.9, "body": 0.6}
    async with limited(header=timeouts["header"], idle=timeouts["idle"], body=timeouts["body"], cap=16) as server:
        conn = await connect(server, first)
        if first == HEALTH:
            assert (await conn[0].readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            await conn[0].readexactly(15)  # {"status":"ok"}
        if then:
            conn[1].write(then)
            await conn[1].drain()
        t0 = time.perf_counter()
        assert await closed_by_server(conn, within=5.0)
        took = time.perf_counter() - t0
        conn[1].close()
    assert took >= timeouts[bound] * 0.9


async def test_a_full_cap_of_busy_connections_turns_a_new_one_away_with_503() -> None:
    """When every connection is serving a request, a new one gets 503 and is closed; none is dropped."""
    async with limited(header=5, idle=5, body=30, cap=4) as server:
        busy = [await connect(server, SLOW_BODY) for _ in range(4)]
        await until(lambda: server.guard.phases()["busy"] == 4)
        refused = await connect(server, HEALTH)
        status = await refused[0].readline()
        assert await closed_by_server(refused, within=2.0)
        assert server.guard.count == 4
        for _, writer in (*busy, refused):
            writer.close()
    assert status.startswith(b"HTTP/1.1 503")


async def test_malformed_http_gets_a_fixed_answer_and_a_log_without_values(caplog: pytest.LogCaptureFixture) -> None:
    """A control character in Authorization: a fixed 400 body, and no header value in any log line."""
    secret = b"sk-PLANTED-GATEWAY-SECRET"
    request = b"GET /health HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + secret + b"\x01x\r\n\r\n"
    with caplog.at_level(logging.DEBUG):
        async with limited(header=5, idle=5, body=5, cap=16) as server:
            reader, writer = await connect(server, request)
            async with asyncio.timeout(5):
                answer = await reader.read()
            writer.close()
    assert answer.split(b"\r\n")[0].split(b" ")[1] == b"400"
    assert answer.endswith(
        b'{"error":{"message":"malformed HTTP request","type":"invalid_request_error","code":"bad_request"}}'
    )
    assert secret not in answer
    assert "PLANTED" not in caplog.text
    assert "malformed request" in caplog.text


async def test_accept_errors_are_logged_at_most_once_a_second(caplog: pytest.LogCaptureFixture) -> None:
    """While serving, 'socket.accept() out of system resource' is one log line a second, without a traceback."""
    async with limited(header=5, idle=5, body=5, cap=16):
        loop = asyncio.get_running_loop()
        handler = loop.get_exception_handler()
        assert handler is not None
        with caplog.at_level(logging.DEBUG):
            for _ in range(1000):
                handler(
                    loop,
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": OSError(errno.EMFILE, "Too many open files"),
                    },
                )
    assert loop.get_exception_handler() is None  # given back when the server stopped
    lines = [r for r in caplog.records if "cannot accept" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].exc_info is None
    assert "Too many open files" in lines[0].getMessage()


def test_the_limiter_counts_what_it_held_back() -> None:
    """One message per kind per second; the next one says how many were not logged."""
    now = [0.0]
    quiet = EveryOnceASecond(clock=lambda: now[0])
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("turnout.gateway")
    logger.addHandler(handler)
    try:
        for _ in range(5):
            quiet.log("a", logging.WARNING, "a happened")
        quiet.log("b", logging.WARNING, "b happened")
        now[0] = 1.5
        quiet.log("a", logging.WARNING, "a happened")
    finally:
        logger.removeHandler(handler)
    assert records == ["a happened", "b happened", "a happened (4 more in the last second not logged)"]


def test_serve_raises_the_descriptor_limit_to_fit_the_cap() -> None:
    """`turnout serve` lifts a low soft descriptor limit so max_connections fits (never past the hard limit)."""
    script = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from turnout.gateway.serve import descriptor_limit, DESCRIPTOR_RESERVE\n"
        "got = descriptor_limit(1024)\n"
        "now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]\n"
        "want = 1024 + DESCRIPTOR_RESERVE\n"
        "expected = want if hard == resource.RLIM_INFINITY else min(want, hard)\n"
        "assert got == now == expected, (got, now, expected)\n"
        "assert descriptor_limit(16) == now  # never lowered\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
