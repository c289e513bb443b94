"""The in-process simulator: start it on a free loopback port, point clients at it, read its log.

::

    async with Simulator(script={"models": {"flaky": {"steps": ["429-ra1", "ok"]}}}) as sim:
        client = openai.AsyncOpenAI(base_url=sim.base_url("openai"), api_key="sk-test")
        ...
        assert [e.outcome for e in sim.log] == ["status:429", "ok"]
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal, Self

from aiohttp import web

from turnout.sim.google import GoogleTokens
from turnout.sim.log import DEFAULT_MAX_ENTRIES, SimLog, SimLogEntry
from turnout.sim.scenarios import Scenarios
from turnout.sim.script import Script, ScriptSource, load_script
from turnout.sim.server import SimServer, Sleep

Protocol = Literal["openai", "responses", "anthropic", "gemini", "ollama", "azure", "bedrock", "vertex"]
PROTOCOLS: tuple[Protocol, ...] = ("openai", "responses", "anthropic", "gemini", "ollama", "azure", "bedrock", "vertex")

# Held requests (silence, stall) end at once on close; this only bounds a handler stuck elsewhere.
_SHUTDOWN_TIMEOUT = 2.0


class Simulator:
    """A fault-injecting provider simulator serving every protocol on one loopback port.

    Args:
        script: A :class:`~turnout.sim.script.Script`, a mapping, a path to a TOML/JSON script, or
            None (only the ``sim-`` model-name grammar; every other model answers ok).
        host: The address to listen on.
        port: The port, or 0 for a free one.
        clock: Monotonic seconds; flapping windows and durations are measured with it.
        sleep: Awaitable sleep used for delays and stream pacing (tests pass one that returns at once).
        max_log: The log keeps this many most recent requests.
        seed: Seeds the draws of heavy-tailed delays (a script's own ``seed`` wins; None: unseeded).

    Raises:
        ConfigError: The script is invalid.
    """

    def __init__(
        self,
        script: ScriptSource = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        max_log: int = DEFAULT_MAX_ENTRIES,
        seed: int | None = None,
    ) -> None:
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._log = SimLog(max_log)
        self._scenarios = Scenarios(load_script(script), clock, seed)
        self._server = SimServer(self._scenarios, self._log, clock=clock, sleep=sleep)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Start listening (``async with`` does this)."""
        if self._runner is not None:
            return
        runner = web.AppRunner(
            self._server.app(),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=_SHUTDOWN_TIMEOUT,
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._requested_port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        address = runner.addresses[0]
        self._port = int(address[1])
        self._scenarios.restart()

    async def aclose(self) -> None:
        """Stop: held requests are dropped, then the listener and connections close."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._server.closing.set()
        await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def port(self) -> int:
        """The port it listens on.

        Raises:
            RuntimeError: It has not been started.
        """
        if self._port is None:
            raise RuntimeError("the simulator is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://HOST:PORT``, no trailing slash."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    def base_url(self, protocol: Protocol, *, deployment: str = "sim-ok") -> str:
        """The base URL a client of ``protocol`` is configured with.

        ``openai`` and ``responses``: ``…/v1``; ``anthropic``, ``ollama`` and ``bedrock``: the root (clients
        append ``/v1/messages``, ``/api/chat`` and ``/model/{id}/converse``); ``gemini``: ``…/v1beta``; ``azure``:
        ``…/openai/deployments/<deployment>`` (the deployment is the model); ``vertex``: the root (a Vertex
        profile's ``uri``: clients append ``/v1/projects/…``).

        Raises:
            ValueError: Unknown protocol.
        """
        if protocol in ("openai", "responses"):
            return f"{self.url}/v1"
        if protocol in ("anthropic", "ollama", "bedrock", "vertex"):
            return self.url
        if protocol == "gemini":
            return f"{self.url}/v1beta"
        if protocol == "azure":
            return f"{self.url}/openai/deployments/{deployment}"
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")

    @property
    def google_token_uri(self) -> str:
        """The token endpoint a service-account file's ``token_uri`` names to get Vertex tokens from here."""
        return f"{self.url}/_sim/google/token"

    @property
    def google(self) -> GoogleTokens:
        """The Google access tokens issued here (their lifetime, how many, expiring them all)."""
        return self._server.google

    @property
    def log(self) -> list[SimLogEntry]:
        """Every request since start or reset, in arrival order (a snapshot)."""
        return self._log.entries()

    @property
    def script(self) -> Script:
        """The script in force."""
        return self._scenarios.script

    async def wait_for_log(self, count: int, *, settled: bool = True, within: float = 5.0) -> list[SimLogEntry]:
        """Wait until ``count`` requests are logged and, when ``settled``, none of them is ``pending``.

        ``settled=False`` waits only for the requests to arrive (e.g. to see a held request).

        Raises:
            TimeoutError: That did not happen within ``within`` seconds.
        """
        return await self._log.wait_for(count, within, settled=settled)

    def reset(self) -> None:
        """Clear the log and attempt counters; restart timed scenarios such as flapping."""
        self._server.reset()

    def set_script(self, script: ScriptSource) -> None:
        """Put a new script in force; attempt counters and timed scenarios restart, the log stays.

        Raises:
            ConfigError: The script is invalid (the old one stays in force).
        """
        self._scenarios.replace(load_script(script))
