"""``turnout demo --serve``: after the tour, a gateway over the demo prints its page's address and a key to sign in."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from pathlib import Path

import aiohttp
import pytest
from rich.console import Console

from servers import turnout_command
from turnout.cli.demo import demo_config, serve_demo
from turnout.client import Client
from turnout.sim import Simulator

_URL = re.compile(r"Status page: (http://127\.0\.0\.1:\d+)/")
_KEY = re.compile(r"Client key:\s+(demo-[A-Za-z0-9_-]+)")


async def signed_in_page(url: str, key: str) -> str:
    """Sign in through the form with ``key`` and return the page the cookie opens."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        async with session.post(f"{url}/login", data={"key": key}, allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
        async with session.get(f"{url}/") as resp:
            assert resp.status == 200
            return await resp.text()


async def test_serve_demo_serves_the_page_with_the_printed_key_until_stopped(tmp_path: Path) -> None:
    """serve_demo prints the page's address and a fresh key; the key signs in; setting stop ends it promptly."""
    console = Console(record=True, width=200, force_terminal=False)
    stop, listening = asyncio.Event(), asyncio.Event()
    async with Simulator() as sim:
        config = demo_config(sim, tmp_path / "ledger.sqlite3")
        async with Client.from_toml(config) as client:
            serving = asyncio.ensure_future(serve_demo(console, client, stop=stop, listening=listening))
            async with asyncio.timeout(10):
                await listening.wait()
            text = console.export_text(clear=False)
            url, key = _URL.search(text), _KEY.search(text)
            assert url is not None and key is not None
            page = await signed_in_page(url.group(1), key.group(1))
            stop.set()
            async with asyncio.timeout(10):
                await serving
    assert "<h3>default</h3>" in page and "<h3>hint:reasoning</h3>" in page
    assert "anthropic.main" in page and "openai.backup" in page


@pytest.mark.slow
async def test_turnout_demo_serve_runs_the_tour_then_serves_until_ctrl_c() -> None:
    """The command runs the tour, serves a page the printed key opens (showing the tour), and exits on Ctrl-C."""
    proc = await asyncio.create_subprocess_exec(
        *turnout_command(),
        "demo",
        "--serve",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        start_new_session=True,
    )
    assert proc.stdout is not None
    output: list[str] = []
    try:
        async with asyncio.timeout(120):  # the tour takes a few seconds of real time
            while not _KEY.search("\n".join(output)):
                line = await proc.stdout.readline()
                assert line, "the demo exited early:\n" + "\n".join(output)
                output.append(line.decode())
        text = "\n".join(output)
        url, key = _URL.search(text), _KEY.search(text)
        assert url is not None and key is not None
        page = await signed_in_page(url.group(1), key.group(1))
        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(20):
            code = await proc.wait()
        output.append((await proc.stdout.read()).decode())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert code in (0, 1), "\n".join(output)  # the tour's own verdict; Ctrl-C itself is a clean exit
    assert "Traceback" not in "\n".join(output)
    assert "Ledger summary" in text
    assert "<h3>default</h3>" in page
    assert 'id="today"' in page and "No call yet today." not in page  # the tour's calls, from its ledger
