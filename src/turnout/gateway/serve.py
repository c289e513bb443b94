"""Running the gateway: ``turnout serve`` (:func:`run`), and :class:`GatewayServer` for in-process use.

Shutdown is graceful and bounded: on SIGTERM (or Ctrl-C) the gateway keeps its port open but answers every
new request 503 (``/health`` too, so a load balancer stops sending), waits up to ``[gateway] drain_secs``
(default 25, inside Kubernetes' default grace of 30 s) for the requests in flight to finish, then ends those
still open in their own protocol (:meth:`~turnout.gateway.app.Gateway.cut`: a stream gets its surface's error
event and a proper end of body) and exits. A second signal cuts them at once and exits within about a second.

With ``workers > 1`` the parent process starts that many worker processes on one port with
``SO_REUSEPORT``; the kernel spreads connections between them. The parent supervises them: a worker that
dies (an out-of-memory kill, a crash) is started again while the others keep serving, at most
:data:`~turnout.gateway.workers.MAX_RESTARTS` times in :data:`~turnout.gateway.workers.RESTART_WINDOW_S`
seconds (more is a crash loop, and the server stops with exit status 1); a worker that cannot start at all
(a configuration or listen error) stops the whole start with exit status 1. Cooldowns and dead keys are shared
through Redis when ``[state] backend = "redis"``. The parent makes a private directory where each worker
publishes its totals every second, so ``/metrics``, ``/status`` and the status page describe the whole server
whichever worker answers (:mod:`turnout.gateway.workers`), and one secret that signs the status page's session
cookies, handed to each worker over the pipe that starts it (:mod:`turnout.gateway.signin`). The directory is
removed when the workers have stopped.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from multiprocessing.connection import wait
from types import FrameType, TracebackType
from typing import Any, Self

from aiohttp import web

from turnout.client import Client
from turnout.config import Config, find_config_path, load_config_file
from turnout.core.errors import ConfigError, cannot_listen
from turnout.gateway.access import Access
from turnout.gateway.accesslog import use_queue
from turnout.gateway.app import Gateway
from turnout.gateway.auth import default_keys, named_keys
from turnout.gateway.connections import ConnectionGuard, GuardedSite, Limits
from turnout.gateway.signin import new_secret
from turnout.gateway.workers import Peers, RestartBudget, publish_restarts
from turnout.state import MemoryStore

log = logging.getLogger("turnout.gateway")

#: The collector's thresholds while serving (young, middle, old generation); see ``_serve``.
GC_THRESHOLDS = (20_000, 20, 100)
#: After draining and cutting: how long aiohttp waits for handlers that are still running before cancelling them.
_CLOSE_TIMEOUT_S = 1.0


class GatewayServer:
    """A :class:`~turnout.gateway.app.Gateway` listening on a TCP port in the running event loop.

    ::

        async with GatewayServer(Gateway(client)) as server:
            openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=...)

    Args:
        gateway: The gateway to serve.
        host: The address to listen on.
        port: The port, or 0 for a free one.
        reuse_port: Set ``SO_REUSEPORT`` (several worker processes on one port).

    Attributes:
        guard: The connection limits of ``[gateway]`` (:mod:`turnout.gateway.connections`).
    """

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int = 0, *, reuse_port: bool = False) -> None:
        self.gateway = gateway
        self.guard = ConnectionGuard(Limits.of(gateway.client.config.gateway))
        self.host = host
        self._requested_port = port
        self._reuse_port = reuse_port
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    async def start(self) -> None:
        """Start listening (and answer to the bound address as a ``Host``)."""
        self.gateway.edges.allow_host(self.host)
        limits = self.guard.limits
        # aiohttp's own keep-alive bound matches the idle timeout; the guard enforces it too
        options: dict[str, Any] = {"access_log": None, "keepalive_timeout": limits.idle_timeout}
        runner = web.AppRunner(
            self.gateway.app, handler_cancellation=True, shutdown_timeout=_CLOSE_TIMEOUT_S, **options
        )
        await runner.setup()
        try:
            site = GuardedSite(
                runner,
                self.guard,
                self.host,
                self._requested_port,
                reuse_port=self._reuse_port,
                backlog=1024,
                handler_options=options,
            )
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    @property
    def port(self) -> int:
        """The port it listens on."""
        if self._port is None:
            raise RuntimeError("the gateway is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (clients append ``/v1``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def stop(self, grace: float | None = None) -> bool:
        """Drain (new requests get 503, those in flight get ``grace`` seconds, then are cut), then close.

        Args:
            grace: Seconds the requests in flight get (default: ``[gateway] drain_secs``).

        Returns:
            True when every request in flight finished within ``grace``.
        """
        if self._runner is None:
            return True
        if grace is None:
            grace = self.gateway.client.config.gateway.drain_secs
        try:
            return await self.gateway.drain(grace)
        finally:  # also when the drain is cut short (a second signal)
            runner, self._runner = self._runner, None
            if runner is not None:
                await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


# --- the command ------------------------------------------------------------------------------------


def run(config_path: str | None, host: str | None, port: int | None, workers: int) -> None:
    """Serve the gateway until SIGTERM or Ctrl-C (``turnout serve``).

    Args:
        config_path: The config file (default: ``$TURNOUT_CONFIG``, then ``./turnout.toml``).
        host: Listen address (default: ``[gateway] host``).
        port: Listen port (default: ``[gateway] port``).
        workers: Worker processes sharing the port.

    Raises:
        ConfigError: The configuration is invalid or cannot be served.
    """
    path = str(find_config_path(config_path))
    config = load_config_file(path)
    # a client key that resolves to nothing, or an access rule naming nothing configured, fails here (not open)
    Access(config).callers(default_keys(config), named_keys(config))
    Client(config, ledger=False, store=MemoryStore())  # every route builds (nothing opened yet)
    host = host or config.gateway.host
    port = config.gateway.port if port is None else port
    _configure_logging()
    descriptor_limit(config.gateway.max_connections)  # per process: each worker has its own cap
    if workers <= 1:
        _run_loop(_serve(config, host, port, reuse_port=False, worker=False))
        return
    if port == 0:
        raise ConfigError("several workers cannot share port 0; choose a port", path="gateway.port")
    can_listen(host, port)
    _supervise(path, host, port, workers)


def can_listen(host: str, port: int) -> None:
    """Bind ``host:port`` as the workers will, and let go: a busy port fails here, once, not in every worker.

    ``turnout demo --serve`` asks too, before its tour, rather than after it.

    Raises:
        ConfigError: The address cannot be bound (code ``listen_failed``).
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's servers do
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            probe.bind(address)
    except OSError as exc:
        raise cannot_listen(host, port, exc, path="gateway.port") from None


#: Descriptors kept for everything but client connections: upstream connections, the ledger, Redis, logs.
DESCRIPTOR_RESERVE = 512


def descriptor_limit(connections: int) -> int:
    """Raise the soft descriptor limit (up to the hard one) so ``connections`` clients and the reserve fit.

    Without it, a default soft limit of 1024 runs out before ``[gateway] max_connections`` does, and the
    kernel's accept errors take the place of the gateway's own cap. Worker processes inherit the limit.

    Returns:
        The soft limit now in force.
    """
    try:
        import resource
    except ImportError:  # not on this platform: nothing to raise
        return connections + DESCRIPTOR_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + DESCRIPTOR_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= want:
        return want if soft == resource.RLIM_INFINITY else soft
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    if new < want:
        log.warning(
            "turnout gateway: the descriptor limit (ulimit -n) is %d; [gateway] max_connections = %d needs about %d",
            new,
            connections,
            want,
        )
    return new


def _configure_logging() -> None:
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    use_queue(sys.stderr)


def _run_loop(main: Any) -> None:
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]

        factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def _serve(
    config: Config,
    host: str,
    port: int,
    *,
    reuse_port: bool,
    worker: bool,
    peers: Peers | None = None,
    session_secret: bytes | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    client = Client(config, surface="gateway")
    gateway = Gateway(client, owns_client=True, peers=peers, session_secret=session_secret)
    server = GatewayServer(gateway, host, port, reuse_port=reuse_port)
    try:
        await server.start()
    except OSError as exc:
        raise cannot_listen(host, port, exc, path="gateway.port") from None
    gc.freeze()  # what exists now lives as long as the server: keep it out of every later collection
    # Requests allocate many short-lived containers, nearly all freed by reference counting; at the default
    # threshold (700) a young collection runs every few requests only to walk what requests in flight still
    # hold. Fewer, larger young collections do the same work at a fraction of the cost.
    gc.set_threshold(*GC_THRESHOLDS)
    loop = asyncio.get_running_loop()
    stop, force = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        (force if stop.is_set() else stop).set()

    loop.add_signal_handler(signal.SIGTERM, on_signal)
    if worker:  # the parent relays Ctrl-C as SIGTERM; ignoring SIGINT here keeps it from counting twice
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        loop.add_signal_handler(signal.SIGINT, on_signal)
    log.info("turnout gateway listening on %s (pid %d)", server.url, os.getpid())
    if on_ready is not None:
        on_ready()
    await stop.wait()
    grace = config.gateway.drain_secs
    log.info(
        "turnout gateway draining: new requests get 503, %d in flight get up to %g s", server.gateway.in_flight, grace
    )
    drain = asyncio.ensure_future(server.stop(grace))
    forced = asyncio.ensure_future(force.wait())
    await asyncio.wait((drain, forced), return_when=asyncio.FIRST_COMPLETED)
    if not drain.done():
        log.info("turnout gateway: second signal, ending the requests in flight now")
        await gateway.cut()
        await asyncio.wait((drain,))
    elif not drain.result():
        log.info("turnout gateway: drain_secs passed; the requests still in flight were ended")
    forced.cancel()
    log.info("turnout gateway stopped")


def _worker(path: str, host: str, port: int, directory: str, secret: bytes, ready: Any) -> None:
    _configure_logging()
    try:
        config = load_config_file(path)
        serving = _serve(
            config,
            host,
            port,
            reuse_port=True,
            worker=True,
            peers=Peers(directory),
            session_secret=secret,
            on_ready=ready.set,
        )
        _run_loop(serving)
    except ConfigError as exc:
        log.error("turnout gateway worker: %s", exc)
        raise SystemExit(1) from None


class _Slot:
    """One worker place of the server: its current process and whether that process is serving."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Any = None
        self.ready: Any = None
        #: Some process of this place served once (a later death is restarted; a first one fails the start).
        self.served = False


def _supervise(path: str, host: str, port: int, workers: int) -> None:
    """Run ``workers`` worker processes; restart one that dies, within the :class:`RestartBudget`.

    A worker whose first process never starts serving (a configuration or listen error) stops the whole server
    with exit status 1; so does a crash loop (more restarts than the budget allows).
    """
    ctx = multiprocessing.get_context("spawn")
    directory = tempfile.mkdtemp(prefix="turnout-gateway-")  # mode 0700: this user's processes only
    secret = new_secret()  # pickled to each worker over its start pipe: not in argv, the environment or a file
    slots = [_Slot(i) for i in range(workers)]
    budget = RestartBudget()
    stopping = False

    def launch(slot: _Slot) -> None:
        slot.ready = ctx.Event()
        slot.proc = ctx.Process(
            target=_worker,
            args=(path, host, port, directory, secret, slot.ready),
            name=f"turnout-gateway-{slot.index}",
        )
        slot.proc.start()
        if stopping:  # a signal came while it started: it stops too
            os.kill(slot.proc.pid, signal.SIGTERM)

    def relay(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for slot in slots:
            p = slot.proc
            if p is not None and p.pid is not None and p.exitcode is None:
                os.kill(p.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, relay) for s in (signal.SIGTERM, signal.SIGINT)}
    failed = False
    try:
        for slot in slots:
            launch(slot)
        running = list(slots)
        while running:
            for sentinel in wait([s.proc.sentinel for s in running]):
                slot = next(s for s in running if s.proc.sentinel == sentinel)
                slot.proc.join()
                slot.served = slot.served or slot.ready.is_set()
                if stopping:
                    running.remove(slot)
                elif _restarts(slot, budget, directory):
                    launch(slot)
                else:
                    failed = True
                    running.remove(slot)
                    relay(signal.SIGTERM, None)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        shutil.rmtree(directory, ignore_errors=True)
    if failed:
        raise SystemExit(1)


def _restarts(slot: _Slot, budget: RestartBudget, directory: str) -> bool:
    """Whether the worker place ``slot``, whose process died, starts a new one; logs the restart, or why not.

    A place that never served fails the start; a restart beyond the ``budget`` is a crash loop. The count of
    restarts is published in the server's ``directory`` (``/metrics`` shows it).
    """
    code = slot.proc.exitcode
    if not slot.served:
        log.error("turnout gateway: worker %s could not start (exit %s); stopping", slot.index, code)
        return False
    if not budget.allow():
        log.error(
            "turnout gateway: worker %s exited with %s; %d restarts in %.0f s, stopping",
            slot.index,
            code,
            budget.limit,
            budget.window,
        )
        return False
    log.warning(
        "turnout gateway: worker %s (pid %s) exited with %s; starting it again (restart %d)",
        slot.index,
        slot.proc.pid,
        code,
        budget.total,
    )
    publish_restarts(directory, budget.total)
    return True
