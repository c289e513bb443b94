"""Credential work (google-auth's refresh, botocore's chain) on its own threads, never the default executor.

A token endpoint that never answers is an aiohttp handler (or a listening socket nobody accepts on) on loopback;
``NO_GCE_CHECK`` and ``AWS_EC2_METADATA_DISABLED`` are set for the whole session by ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from botocore.session import Session

from google_creds import service_account_file
from turnout import Client
from turnout.core.errors import ProviderError
from turnout.ledger.writer import Ledger
from turnout.providers import aws
from turnout.providers.credential_threads import CredentialThreads
from turnout.providers.google_auth import TokenSource

#: How long a test waits for something that should be prompt (far above its normal time).
BOUND = 5.0


class HungTokenEndpoint:
    """A token endpoint that takes requests and answers none until :meth:`release`."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.requests = 0
        self._release = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.arrived.set()
        await self._release.wait()
        return web.json_response({"error": "unavailable"}, status=503)

    def release(self) -> None:
        """Answer the waiting requests (a 503), so their threads end."""
        self._release.set()


@pytest.fixture
async def hung() -> AsyncIterator[HungTokenEndpoint]:
    endpoint = HungTokenEndpoint()
    app = web.Application()
    app.router.add_post("/token", endpoint.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    endpoint.url = f"http://127.0.0.1:{port}/token"
    try:
        yield endpoint
    finally:
        endpoint.release()
        await runner.cleanup()


@pytest.fixture
async def one_thread_default_executor() -> AsyncIterator[None]:
    """The loop's default executor has one thread: anything blocked in it would stall every ``to_thread``."""
    pool = ThreadPoolExecutor(max_workers=1)
    asyncio.get_running_loop().set_default_executor(pool)
    yield
    pool.shutdown(wait=False, cancel_futures=True)


async def test_a_hung_token_endpoint_delays_no_ledger_reservation_and_close_is_bounded(
    hung: HungTokenEndpoint, tmp_path: Path
) -> None:
    """While 16 Vertex calls wait on a token endpoint that never answers, ledger reservations and many
    ``asyncio.to_thread`` jobs run at once promptly, and closing the client returns within a bound.
    """
    credentials = service_account_file(tmp_path, hung.url)
    config = {
        "default_provider": "vertex.main",
        "providers": {
            "models": {
                "vertex": {
                    "main": {
                        "uri": "http://127.0.0.1:9",
                        "project": "p",
                        "region": "us-central1",
                        "model": "gemini-2.0-flash",
                        "credentials_file": str(credentials),
                    }
                }
            }
        },
        "reliability": {"provider_retries": 0},
    }
    ledger = Ledger(tmp_path / "ledger.sqlite3", batch_delay=0)
    client = Client.from_dict(config, ledger=ledger)
    client.abandoned_wait_s = 0.5  # how long closing waits for the upstream tries of calls given up on
    calls = [asyncio.ensure_future(client.chat("hi")) for _ in range(16)]
    try:
        async with asyncio.timeout(20):
            await hung.arrived.wait()
        started = time.monotonic()
        async with asyncio.timeout(BOUND):
            reserved = await asyncio.gather(*(ledger.reserve(f"r{i}", "team", 0.01, 100.0, 0.0) for i in range(16)))
            jobs = await asyncio.gather(*(asyncio.to_thread(int, i) for i in range(64)))
        assert all(reserved) and jobs == list(range(64))
        assert time.monotonic() - started < BOUND
        assert hung.requests == 1  # one refresh in flight for the profile, shared by the 16 calls
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        async with asyncio.timeout(BOUND):
            await client.aclose()


@pytest.mark.usefixtures("one_thread_default_executor")
async def test_a_hung_refresh_holds_no_default_executor_thread_and_each_wait_is_bounded(
    hung: HungTokenEndpoint, tmp_path: Path
) -> None:
    """Eight calls share one hung refresh, each gives up at its timeout with a retryable error, a later call
    fails at once without waiting on it again, and the default executor (one thread here) stays free throughout.
    """
    source = TokenSource("vertex.main", str(service_account_file(tmp_path, hung.url)), timeout=1.0)
    waits = [asyncio.ensure_future(source.token()) for _ in range(8)]
    async with asyncio.timeout(20):
        await hung.arrived.wait()
    async with asyncio.timeout(BOUND):
        assert await asyncio.to_thread(int, 7) == 7
    async with asyncio.timeout(BOUND):
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
    assert all(isinstance(o, ProviderError) and o.error_type == "token_timeout" for o in outcomes)
    assert all(o.error_class.value == "retryable" for o in outcomes if isinstance(o, ProviderError))
    async with asyncio.timeout(BOUND / 10):  # the refresh has outlasted a whole wait: a later call fails at once
        with pytest.raises(ProviderError) as later:
            await source.token()
    assert later.value.error_type == "token_timeout" and "under way" in str(later.value)
    assert hung.requests == 1


@pytest.mark.usefixtures("one_thread_default_executor")
async def test_a_hung_aws_credential_chain_is_bounded_and_off_the_default_executor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Botocore's chain hanging (a credential_process or endpoint that never answers): concurrent calls share
    one resolution, each fails retryably at its timeout, a later one at once, and the default executor stays free.
    """
    loop = asyncio.get_running_loop()
    entered = asyncio.Event()
    release = threading.Event()
    asked: list[int] = []

    def hang(self: Any) -> None:
        asked.append(1)
        loop.call_soon_threadsafe(entered.set)
        release.wait(60)

    monkeypatch.setattr(Session, "get_credentials", hang)
    creds = aws.AwsCredentials("bedrock.test", None, timeout=1.0)
    try:
        waits = [asyncio.ensure_future(creds.get()) for _ in range(8)]
        async with asyncio.timeout(BOUND):
            await entered.wait()  # the chain has started (on its own thread)
            assert await asyncio.to_thread(int, 3) == 3
            outcomes = await asyncio.gather(*waits, return_exceptions=True)
        assert all(isinstance(o, ProviderError) and o.error_type == "credentials_timeout" for o in outcomes)
        async with asyncio.timeout(BOUND / 10):  # the chain has outlasted a whole wait: a later call fails at once
            with pytest.raises(ProviderError) as later:
                await creds.get()
        assert later.value.error_type == "credentials_timeout" and "under way" in str(later.value)
        assert len(asked) == 1
    finally:
        release.set()


def test_a_hung_refresh_does_not_hold_up_the_process_exit(tmp_path: Path) -> None:
    """A program whose token refresh hangs (a token endpoint that accepts and never answers) ends promptly
    after its call gave up: ``asyncio.run`` and the interpreter's exit wait for no credential thread.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # connections complete in the backlog; nobody accepts or answers
    port = listener.getsockname()[1]
    credentials = service_account_file(tmp_path, f"http://127.0.0.1:{port}/token")
    code = f"""
import asyncio
from turnout.providers import google_auth
google_auth.REQUEST_TIMEOUT_S = 120.0  # the transport's own bound, far beyond the test's
async def main():
    source = google_auth.TokenSource("vertex.main", {str(credentials)!r}, timeout=0.5)
    try:
        await source.token()
    except Exception as exc:
        print(type(exc).__name__, getattr(exc, "error_type", None))
asyncio.run(main())
"""
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ProviderError token_timeout"
    assert elapsed < 20.0


def test_credential_threads_are_daemons_bounded_in_number_and_queue_the_rest() -> None:
    """Jobs run on daemon threads, at most ``limit`` at once; the next waits in order for a free thread."""
    threads = CredentialThreads(limit=2)
    release = threading.Event()
    seen: list[tuple[int, bool]] = []

    def job(n: int) -> int:
        seen.append((n, threading.current_thread().daemon))
        release.wait(BOUND)
        return n

    futures = [threads.submit(lambda n=n: job(n)) for n in range(3)]
    assert threads.running == 2 and not futures[2].running()
    release.set()
    assert [f.result(BOUND) for f in futures] == [0, 1, 2]
    assert sorted(seen) == [(0, True), (1, True), (2, True)]
