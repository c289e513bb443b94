"""A headless Chromium driven over the DevTools protocol with aiohttp's websocket client, on loopback only.

The browser runs with a fresh profile in a temporary directory and with its background traffic turned off
(no first-run pages, component updates, safe-browsing lookups, metrics or sync), and every host name but
loopback fails to resolve. :meth:`Browser.problems` lists what the page reported: console errors, uncaught
exceptions and Content-Security-Policy violations. Closing the browser is bounded in time: a browser that does
not exit when asked is killed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import aiohttp

#: The names Chromium is installed under.
EXECUTABLES = ("chromium", "chromium-browser")
#: What to install when it is missing.
INSTALL_HINT = "install Chromium (Debian/Ubuntu: sudo apt-get install chromium; `make test` does it when run as root)"
FLAGS = (
    "--headless=new",
    "--remote-debugging-port=0",  # a free port, written to DevToolsActivePort in the profile
    "--remote-debugging-address=127.0.0.1",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--metrics-recording-only",
    "--no-pings",
    "--safebrowsing-disable-auto-update",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--password-store=basic",
    "--use-mock-keychain",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
)
#: Bounds: the browser's start, one command, closing it.
START_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 5.0


def chromium() -> str | None:
    """The Chromium executable, if one is installed."""
    return next((path for name in EXECUTABLES if (path := shutil.which(name)) is not None), None)


class Browser:
    """One headless Chromium and one of its pages.

    ::

        async with Browser(chromium()) as browser:
            await browser.navigate("http://127.0.0.1:8787/")
            text = await browser.evaluate("document.body.innerText")
    """

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.events: list[dict[str, Any]] = []
        self._profile = Path(tempfile.mkdtemp(prefix="turnout-chromium-"))
        self._proc: asyncio.subprocess.Process | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._changed = asyncio.Event()

    async def __aenter__(self) -> Self:
        try:
            await self._start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _start(self) -> None:
        args = [self.executable, *FLAGS, f"--user-data-dir={self._profile}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to run its sandbox as root
        self._proc = await asyncio.create_subprocess_exec(
            *args,
            "about:blank",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # its own process group: closing kills its helper processes too
        )
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:  # Chromium writes its port to DevToolsActivePort once it listens
                lines = _lines(self._profile / "DevToolsActivePort")
                if len(lines) >= 2:
                    break
                if self._proc.returncode is not None:
                    raise RuntimeError(f"chromium exited with {self._proc.returncode} before it listened")
                await asyncio.sleep(0.05)
            port = int(lines[0])
            self._http = aiohttp.ClientSession()
            async with self._http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            page = next(t for t in targets if t.get("type") == "page")
            self._ws = await self._http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        self._reader = asyncio.ensure_future(self._read())
        for domain in ("Page", "Runtime", "Log"):
            await self.send(f"{domain}.enable")

    async def _read(self) -> None:
        assert self._ws is not None
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = message.json()
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            else:
                self.events.append(data)
                self._changed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the DevTools connection closed"))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Run one DevTools command on the page; its result (an error answer raises)."""
        assert self._ws is not None
        ident = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        await self._ws.send_json({"id": ident, "method": method, "params": params})
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            answer = await future
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def wait_for(self, method: str, after: int = 0) -> dict[str, Any]:
        """The first event named ``method`` among the events from index ``after`` on (waits for it, bounded)."""
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            found.extend(e for e in self.events[after:] if e["method"] == method)
            return bool(found)

        await self.until(seen)
        return found[0]

    async def until(self, check: Callable[[], bool]) -> None:
        """Wait until ``check()`` holds, checking again at each event the page reports (bounded)."""
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            while True:
                self._changed.clear()
                if check():
                    return
                await self._changed.wait()

    async def navigate(self, url: str) -> None:
        """Load ``url`` and wait for its load event."""
        seen = len(self.events)
        await self.send("Page.navigate", url=url)
        await self.wait_for("Page.loadEventFired", seen)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (DevTools runs it; the page itself has no script)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluation failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def submit(self, script: str) -> None:
        """Run ``script`` (which submits a form or follows a link) and wait for the next page's load event."""
        seen = len(self.events)
        await self.evaluate(script)
        await self.wait_for("Page.loadEventFired", seen)

    async def screenshot(self, *, width: int, height: int | None = None) -> bytes:
        """A PNG of the page at ``width`` CSS pixels (``height``: the whole page when None)."""
        await self.send(
            "Emulation.setDeviceMetricsOverride", width=width, height=height or 800, deviceScaleFactor=1, mobile=False
        )
        if height is None:
            height = int(await self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
            await self.send(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        return base64.b64decode(shot["data"])

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and CSP violations the page reported so far."""
        out = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded":
                entry = params.get("entry", {})
                text = str(entry.get("text", ""))
                if entry.get("level") == "error" or "Content Security Policy" in text:
                    out.append(f"log ({entry.get('source')}, {entry.get('level')}): {text}")
        return out

    async def aclose(self) -> None:
        """Close the connection, stop the browser (killed when it does not exit in time), remove its profile."""
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._ws.close(), CLOSE_TIMEOUT_S)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait((self._reader,), timeout=CLOSE_TIMEOUT_S)
        if self._http is not None:
            await self._http.close()
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), CLOSE_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            with contextlib.suppress(ProcessLookupError):  # helpers that outlived the browser itself
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(self._profile, ignore_errors=True)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []
