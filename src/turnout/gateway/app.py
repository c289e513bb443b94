"""The gateway's aiohttp application: endpoints, the per-request guard, the access log and draining.

Every endpoint but ``/health`` runs behind one guard (a plain wrapper, cheaper than a middleware chain):
it refuses what a browser must not send (:meth:`~turnout.gateway.edges.Edges.refusal`), answers 503 while the gateway
drains, 401 without a valid key (before the body is read, so nothing is
forwarded), counts requests in flight, and when the request ends records its metrics and writes one
structured access-log line: method, path, status, duration, served provider and model, attempts, the
fallback flag, who ended it early (``closed_by``: ``client`` when the client went away, status 499; ``server`` when
the drain's deadline cut it) and the caller's key id; never a prompt, a response or a key. With tracing on, a request's
calls continue the trace its ``traceparent`` header names.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from itertools import compress, repeat
from logging.handlers import QueueListener
from operator import attrgetter, is_not
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from turnout.call import new_call_id
from turnout.client import Client
from turnout.core.attribution import Attempt
from turnout.core.errors import ConfigError, UnsupportedRequest
from turnout.gateway.access import (
    ANONYMOUS,
    Access,
    Caller,
    anthropic_model,
    model_object,
    not_available,
    openai_model,
)
from turnout.gateway.accesslog import access_log, logged_path, start_writer, stop_writer
from turnout.gateway.anthropic_surface import AnthropicSurface
from turnout.gateway.auth import Authenticator, default_keys, named_keys
from turnout.gateway.bounds import MAX_FIELD_CHARS, MAX_MODEL_CHARS, header_value
from turnout.gateway.chat import JSON, serve_chat
from turnout.gateway.conversations import Conversations
from turnout.gateway.counting import serve_count_tokens
from turnout.gateway.edges import Edges
from turnout.gateway.embeddings import serve_embeddings
from turnout.gateway.exchange import Exchange
from turnout.gateway.failures import (
    CLIENT_CLOSED,
    INTERNAL,
    SHUTTING_DOWN,
    UNAUTHORIZED,
    Failure,
    RequestRejected,
    failure_for,
)
from turnout.gateway.metrics import CONTENT_TYPE, Metrics
from turnout.gateway.openai_surface import OpenAISurface
from turnout.gateway.page import Answer, StatusPage
from turnout.gateway.responses_surface import ResponsesSurface
from turnout.gateway.shared_spend import SharedSpend, SharedUnavailable, pool_size
from turnout.gateway.signin import PageSessions, Revocations
from turnout.gateway.spend import SpendBook, keys_status, ledger_status
from turnout.gateway.status import RecentAttempts, status_payload
from turnout.gateway.surface import Surface
from turnout.gateway.workers import Peers, Totals, merge
from turnout.ledger.pricing import profile_rates
from turnout.ledger.writer import LedgerUnavailable
from turnout.reply import Reply
from turnout.walk.pools import pool_loads

if TYPE_CHECKING:
    from turnout.observability.tracing import Tracing

log = logging.getLogger("turnout.gateway")

_HEALTH_OK = b'{"status":"ok"}'
#: Finished requests counted at once (or sooner, when anything reads the totals).
FOLD_EVERY = 256
_ATTEMPTS = attrgetter("attempts")
_ENDED = attrgetter("ended")
_HEALTH_DRAINING = b'{"status":"draining"}'
#: How long the requests a drain cuts get to write their last event and end.
CUT_TIMEOUT_S = 1.0


Handler = Callable[[web.Request, Exchange, Surface], Awaitable[web.StreamResponse]]


class Gateway:
    """The gateway around one :class:`~turnout.client.Client`.

    Args:
        client: The client that serves every request (its ledger label should be ``gateway``).
        keys: Plain client keys with the default access (default: ``[gateway] api_keys`` and
            ``api_keys_env``); ``[gateway] api_key_hashes`` and ``[gateway.keys.<name>]`` keys are added. No key
            at all: no auth.
        owns_client: Close the client when the application is cleaned up.
        peers: The workers of the server this gateway is one of (``turnout serve --workers N``): it publishes
            its totals to them, and ``/metrics``, ``/status`` and the status page merge every worker's. None: this
            process is the whole server.
        session_secret: The secret that signs the status page's session cookies (every worker of a server needs
            the same one; default: a new one for this process).

    Attributes:
        app: The aiohttp application.
        access: What each client key may use (:mod:`turnout.gateway.access`).
        metrics: The Prometheus metrics (one registry per gateway).
        draining: True once :meth:`drain` began: new requests get 503.
        in_flight: Requests being served now.

    Raises:
        ConfigError: A client key resolves to nothing, or a ``[gateway]`` alias or key names nothing configured.
    """

    def __init__(
        self,
        client: Client,
        *,
        keys: list[str] | None = None,
        owns_client: bool = False,
        peers: Peers | None = None,
        session_secret: bytes | None = None,
    ) -> None:
        config = client.config
        self.client = client
        self.owns_client = owns_client
        self.max_body_bytes = config.gateway.max_body_bytes
        self.spend = _spend_book(client)
        self.access = Access(config, self.spend)
        callers = self.access.callers(default_keys(config, plain=keys), named_keys(config))
        if self.spend is None:  # limits are enforced from the ledger
            _refuse_limits(callers)
        self.auth = Authenticator(callers, self.access.caller(ANONYMOUS))
        self.metrics = Metrics(
            labelled=self.access.served_models(),
            breakers=client.factory.breakers,
            clock=client.factory.env.clock,
            rates=profile_rates(config, client.factory.catalogue).rates,
        )
        self.recent = RecentAttempts()
        self.peers = peers
        self.worker = peers.worker if peers is not None else str(os.getpid())
        self.draining = False
        #: True once :meth:`cut` began: a request cancelled now ends with the surface's shutdown error.
        self.cutting = False
        self.in_flight = 0
        self._running: set[asyncio.Task[Any]] = set()
        self.started = time.time()
        self._idle: asyncio.Event | None = None
        self._access_writer: QueueListener | None = None  # the access log's writer thread (turnout serve)
        #: Finished requests not yet counted in the metrics and recent attempts (see ``_fold``).
        self._done: list[Exchange] = []
        self.openai = OpenAISurface()
        self.anthropic = AnthropicSurface()
        self.responses = ResponsesSurface()
        self.conversations = Conversations(
            client.factory.store,
            ttl=config.gateway.responses_ttl_secs,
            max_items=config.gateway.responses_max_items,
            max_bytes=config.gateway.responses_max_bytes,
        )
        self.edges = Edges(
            config.gateway.cors_origins,
            self._edge_error,
            config.gateway.allowed_hosts,
            refused=lambda reason: self.metrics.refusals.labels(reason).inc(),
        )
        self.page = self._status_page(session_secret)
        self.app = self._application()

    def _status_page(self, session_secret: bytes | None) -> StatusPage:
        """The status page, its sessions signed with ``session_secret`` and revoked across the server's workers."""
        peers = self.peers
        revocations = Revocations(peers.directory if peers is not None else None)
        return StatusPage(
            self.client,
            self.auth,
            self.view,
            self.recent,
            sessions=PageSessions(session_secret, revocations=revocations),
            started=self.started,
            count_login=lambda outcome: self.metrics.logins.labels(outcome).inc(),
            money=self.money,
        )

    # --- the application ------------------------------------------------------------------------

    def _application(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body_bytes)
        json = {"json_body": True}
        app.router.add_post("/v1/chat/completions", self._guard("openai", self._chat, self.openai, **json))
        app.router.add_post("/v1/responses", self._guard("responses", self._chat, self.responses, **json))
        app.router.add_post("/v1/messages", self._guard("anthropic", self._chat, self.anthropic, **json))
        app.router.add_post("/v1/messages/count_tokens", self._guard("anthropic", self._count, self.anthropic, **json))
        app.router.add_post("/v1/embeddings", self._guard("embeddings", self._embeddings, self.openai, **json))
        app.router.add_get("/v1/models", self._guard("models", self._list_models))
        app.router.add_get("/v1/models/{model:.+}", self._guard("models", self._get_model))
        app.router.add_get("/status", self._guard("status", self._status))
        app.router.add_get("/metrics", self._guard("metrics", self._metrics))
        app.router.add_get("/health", self._health)
        app.router.add_get("/", self._page_guard(self.page.show))
        app.router.add_post("/login", self._page_guard(self.page.login))
        app.router.add_post("/logout", self._page_guard(self.page.logout))
        app.router.add_route("*", "/{tail:.*}", self.edges.fallback)  # last: what no route above serves
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self._access_writer = start_writer()
        await self.client.factory.start()  # a shared store (Redis) loads the shared state before serving
        if self.spend is not None and any(c.limited for c in self.auth.callers()):
            await self.spend.refresh()  # today's spend so far, before the first request is admitted
            try:
                await self.spend.reconcile()  # with Redis: this host's ledger raises its shared total
            except (SharedUnavailable, LedgerUnavailable):
                log.error("turnout gateway: cannot reconcile today's spend with Redis at start-up; will retry")
                if self.spend.shared is not None:
                    self.spend.shared.stale = True
        self._warm_up()
        if self.peers is not None:
            self.peers.start(self.totals)

    def _warm_up(self) -> None:
        """Load the price and context-window catalogue now, so the first request does not pay for it."""
        catalogue = self.client.factory.catalogue
        for name, profile in self.client.config.profiles().items():
            family = name.partition(".")[0]
            for model in (profile.model, *profile.fallback_models):
                if model:
                    catalogue.rates(family, model)
                    catalogue.context_window(family, model)

    async def _on_cleanup(self, app: web.Application) -> None:
        try:
            await self.client.finish_abandoned()  # their reservations are settled before the spend book closes
            if self.peers is not None:
                await self.peers.aclose()
            if self.spend is not None:
                await self.spend.aclose()
            if self.owns_client:
                await self.client.aclose()
        finally:
            if self._access_writer is not None:  # last: every request's line is queued by now
                await stop_writer(self._access_writer)

    def _surface_for(self, request: web.Request) -> Surface:
        return self.anthropic if "anthropic-version" in request.headers else self.openai

    def _edge_error(self, request: web.Request, failure: Failure) -> web.Response:
        return self.error_response(self._surface_for(request), failure)

    def _guard(
        self, name: str, handler: Handler, surface: Surface | None = None, *, json_body: bool = False
    ) -> Callable[..., Any]:
        running = self._running
        tracing = self.client.tracing
        if tracing is not None:  # calls continue the caller's trace (W3C traceparent)
            handler = _continuing(tracing, handler)

        async def endpoint(request: web.Request) -> web.StreamResponse:
            t0 = time.perf_counter()
            ex = Exchange(name, new_call_id())
            shape = surface if surface is not None else self._surface_for(request)
            refused = self.edges.refusal(request, json_body=json_body)
            response: web.StreamResponse | None = self._turned_away(shape, refused)
            if response is None:
                headers = request.headers
                ex.caller = self.auth.caller(headers.get("Authorization"), headers.get("x-api-key"))
                if ex.caller is None:
                    response = self.error_response(shape, UNAUTHORIZED)
                else:
                    self.in_flight += 1
                    task = asyncio.current_task()
                    if task is not None:  # a request always runs in a task
                        running.add(task)
                    try:
                        response = await handler(request, ex, shape)
                    except asyncio.CancelledError:
                        if not self.cutting or task is None:  # the client went away
                            ex.status = CLIENT_CLOSED
                            ex.closed_by = "client"
                            raise
                        task.uncancel()  # the drain's deadline: answer it, no output was sent yet
                        ex.closed_by = "server"
                        response = self.error_response(shape, SHUTTING_DOWN)
                        response.force_close()
                    except ConnectionError:  # the client went away as its answer was written (its headers)
                        ex.status = CLIENT_CLOSED
                        ex.closed_by = "client"
                        response = web.Response(status=CLIENT_CLOSED)  # aiohttp finds the connection closed
                    except Exception:
                        log.error("unexpected error serving %s %s", request.method, request.path, exc_info=True)
                        response = self.error_response(shape, INTERNAL)
                    finally:
                        running.discard(task)
                        self.in_flight -= 1
                        if self.in_flight == 0 and self._idle is not None:
                            self._idle.set()
                        if ex.status == CLIENT_CLOSED:
                            self._finish(request, ex, t0)
            if not (ex.stamped or response.prepared):  # a stream was stamped before it was prepared
                self.edges.stamp(request, response, ex.request_id)
            if ex.status != CLIENT_CLOSED:
                ex.status = response.status
                self._finish(request, ex, t0)
            return response

        return endpoint

    def _turned_away(self, shape: Surface, refused: Failure | None) -> web.Response | None:
        """The answer to a request refused before it is read: ``refused``, or 503 while draining.

        ``refused``: what a browser must not send (:mod:`~turnout.gateway.edges`). None: the request goes on. A
        refused request's body is never read, so its connection is not kept alive.
        """
        if refused is None and not self.draining:
            return None
        response = self.error_response(shape, refused if refused is not None else SHUTTING_DOWN)
        response.force_close()
        return response

    def _page_guard(self, handler: Callable[[web.Request], Awaitable[Answer]]) -> Callable[..., Any]:
        """The status page's routes: 503 while draining; the handler authenticates (a key or a session cookie)."""

        async def endpoint(request: web.Request) -> web.StreamResponse:
            t0 = time.perf_counter()
            ex = Exchange("page", new_call_id())
            refused = self.edges.refusal(request) if request.method == "POST" else self.edges.host_refusal(request)
            response: web.StreamResponse | None = self._turned_away(self.openai, refused)
            if response is None:
                try:
                    response, ex.caller = await handler(request)
                except ConnectionError:
                    raise
                except Exception:
                    log.error("unexpected error serving %s %s", request.method, request.path, exc_info=True)
                    response = self.error_response(self.openai, INTERNAL)
            self.edges.stamp(request, response, ex.request_id)
            ex.status = response.status
            self._finish(request, ex, t0)
            return response

        return endpoint

    # --- endpoints ------------------------------------------------------------------------------

    def _chat(self, request: web.Request, ex: Exchange, surface: Surface) -> Awaitable[web.StreamResponse]:
        # serve_chat's own coroutine: no frame of this one stays on the request's await chain
        return serve_chat(self, surface, request, ex)

    def _embeddings(self, request: web.Request, ex: Exchange, surface: Surface) -> Awaitable[web.StreamResponse]:
        return serve_embeddings(self, surface, request, ex)

    async def _count(self, request: web.Request, ex: Exchange, surface: Surface) -> web.StreamResponse:
        return await serve_count_tokens(self, self.anthropic, request, ex)  # the route is Anthropic's only

    async def _list_models(self, request: web.Request, ex: Exchange, surface: Surface) -> web.StreamResponse:
        assert ex.caller is not None  # the guard admitted the request
        body = ex.caller.models_json[1 if surface is self.anthropic else 0]
        return web.Response(body=body, content_type=JSON)

    async def _get_model(self, request: web.Request, ex: Exchange, surface: Surface) -> web.StreamResponse:
        """A model the caller may use: one it lists, or any other name chat would admit and route; else 404."""
        assert ex.caller is not None
        wanted = request.match_info["model"]
        anthropic = surface is self.anthropic
        name = ex.caller.names.get(wanted)
        if name is not None:
            item = anthropic_model(name) if anthropic else openai_model(name)
            return web.Response(body=orjson.dumps(item), content_type=JSON)
        try:
            admitted = self.access.admit(ex.caller, wanted)
            target = self.client.route(model=admitted.model, provider=admitted.provider)
        except (RequestRejected, ConfigError):
            return self.error_response(surface, not_available(wanted).failure)
        entry = target.reliable.entries[0]
        item = model_object(wanted, entry.profile, entry.model_for(target.model), anthropic=anthropic)
        return web.Response(body=orjson.dumps(item), content_type=JSON)

    async def _status(self, request: web.Request, ex: Exchange, surface: Surface) -> web.StreamResponse:
        if self.spend is not None:  # with Redis: what every host's calls hold now, as Redis says
            await self.spend.observe([c.name for c in self.auth.callers() if c.limited])
        body = status_payload(
            self.client.config,
            await self.view(),
            self.recent,
            draining=self.draining,
            started=self.started,
            now=self.client.factory.env.clock(),
            money=self.money(),
        )
        return web.Response(body=body, content_type=JSON)

    async def _metrics(self, request: web.Request, ex: Exchange, surface: Surface) -> web.StreamResponse:
        body = self.metrics.render(await self.view(), key_spend=self.key_spend())
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    # --- what the gateway knows -----------------------------------------------------------------

    def money(self) -> dict[str, Any]:
        """``/status``'s ``ledger`` (its health) and ``keys`` (each limited key's spend, reservations and limits).

        Every worker reads the same ledger file, so this process's view is the whole host's; the ledger's health is
        this process's writer's.
        """
        limits = [(c.name, c.daily_limit_usd, c.max_call_usd, c.rpm, c.tpm) for c in self.auth.callers() if c.limited]
        return {
            "ledger": ledger_status(self.client.ledger, self.spend, fail_closed=self.access.fail_closed),
            "keys": keys_status(self.spend, limits),
        }

    def key_spend(self) -> dict[str, float]:
        """Each limited key's spend today (``turnout_key_spend_usd``)."""
        if self.spend is None:
            return {}
        return {c.name: self.spend.spent(c.name) for c in self.auth.callers() if c.daily_limit_usd is not None}

    def totals(self) -> Totals:
        """This process's totals now: its metrics, recent attempts, requests in flight and upstream state."""
        factory = self.client.factory
        now = factory.env.clock()
        store = factory.store
        self._fold()
        ledger = self.client.ledger
        counters, histograms = self.metrics.export(
            ledger_errors=ledger.errors if ledger is not None else None, rejections=self.access.rejections
        )
        return Totals(
            worker=self.worker,
            at=now,
            in_flight=self.in_flight,
            requests=self.metrics.requests_finished(),
            counters=counters,
            histograms=histograms,
            recent=self.recent.buckets(),
            last=tuple(self.recent.last),
            cooldowns=store.cooldowns(now),
            keys={h.key_id: h for h in store.key_records()},
            breakers=store.breakers(),
            transitions={key: n for key, n in factory.breakers.transitions.items()},
            headroom=tuple(self.client.status()["headroom"]),
            pools=tuple(pool_loads(factory.pool_specs.values(), factory.stats)),
            hedging=factory.hedging.tally() if factory.hedging.enabled else None,
        )

    async def view(self) -> Totals:
        """What the whole server counted and knows: this process's totals, merged with the other workers'."""
        own = self.totals()
        if self.peers is None:
            return merge(own, [], self.client.factory.env.clock())
        peers = await self.peers.read_peers()
        return replace(merge(own, peers, self.client.factory.env.clock()), restarts=self.peers.restarts)

    async def _health(self, request: web.Request) -> web.StreamResponse:
        if self.draining:
            response = web.Response(status=503, body=_HEALTH_DRAINING, content_type=JSON)
        else:
            response = web.Response(body=_HEALTH_OK, content_type=JSON)
        return self.edges.stamp(request, response, new_call_id())

    # --- answers and records --------------------------------------------------------------------

    def error_response(self, surface: Surface, failure: Failure) -> web.Response:
        """An error in ``surface``'s shape, with ``Retry-After`` when the failure has one."""
        headers = {"Content-Type": JSON}
        if failure.retry_after is not None:
            headers["Retry-After"] = str(failure.retry_after)
        if failure.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="turnout"'
        if failure.provider is not None:
            headers["x-turnout-provider"] = header_value(failure.provider)
            headers["x-turnout-model"] = header_value(failure.model or "")
        return web.Response(status=failure.status, body=surface.error_body(failure), headers=headers)

    def failure_response(self, surface: Surface, exc: BaseException, ex: Exchange) -> web.Response:
        """The answer to a call that failed before any output: the surface's error, with its attempts counted."""
        clock = self.client.factory.env.clock
        now = clock()
        failure = failure_for(exc, self.client.factory.store.cooldowns(now), now)
        if isinstance(exc, UnsupportedRequest) and ex.route is not None:
            failure = replace(failure, message=f"{failure.message} (route {ex.route[:MAX_MODEL_CHARS]!r})")
        attempts: Sequence[Attempt] = getattr(exc, "attempts", ())
        self.observe_attempts(attempts, ex, provider=failure.provider, model=failure.model)
        response = self.error_response(surface, failure)
        response.headers["x-turnout-attempts"] = str(len(attempts))
        return response

    def observe_reply(self, reply: Reply, ex: Exchange) -> None:
        """Note the accepted reply of the request (recorded when the request ends)."""
        served = reply.served
        ex.provider = served.provider
        ex.model = served.model
        ex.attempts = reply.attempts
        ex.call_id = reply.call_id
        ex.fallback = (reply.requested.provider, served.provider) if reply.fallback is not None else None

    def observe_attempts(
        self, attempts: Sequence[Attempt], ex: Exchange, *, provider: str | None = None, model: str | None = None
    ) -> None:
        """Note the attempts of a call that produced no accepted reply (recorded when the request ends)."""
        ex.attempts = attempts
        ex.provider = provider
        ex.model = model

    def _finish(self, request: web.Request, ex: Exchange, t0: float) -> None:
        ex.seconds = seconds = time.perf_counter() - t0
        ex.ended = now = time.time()
        attempts = ex.attempts
        caller = ex.caller
        if ex.hold is not None and self.spend is not None:  # settled by its call's record (now, or when it comes)
            self.spend.ended(ex.hold)
        if attempts is not None and attempts.__class__ is not tuple:  # a stream's list, which may still grow
            ex.attempts = attempts = tuple(attempts)  # what it holds now
        done = self._done
        done.append(ex)
        if len(done) >= FOLD_EVERY:
            self._fold()
        if not access_log.isEnabledFor(logging.INFO):
            return
        line = orjson.dumps(
            {
                "ts": round(now, 3),
                "method": request.method,
                "path": logged_path(request.rel_url)[:MAX_FIELD_CHARS],
                "status": ex.status,
                "duration_ms": round(seconds * 1000.0, 3),
                "surface": ex.surface,
                "stream": ex.stream,
                "provider": ex.provider,
                "model": ex.model,
                "attempts": len(attempts) if attempts is not None else 0,
                "fallback": ex.fallback is not None,
                "interrupted": ex.interrupted,
                "closed_by": ex.closed_by,
                "caller": caller.name if caller is not None else None,
                "call_id": ex.call_id,
            }
        )
        access_log.info(line.decode())

    def _fold(self) -> None:
        """Count the requests finished since the last fold in the metrics and the recent attempts."""
        done, self._done = self._done, []
        self.metrics.fold(done)
        calls = list(compress(done, map(is_not, map(_ATTEMPTS, done), repeat(None))))
        self.recent.fold(list(map(_ATTEMPTS, calls)), list(map(_ENDED, calls)))

    # --- draining -------------------------------------------------------------------------------

    async def drain(self, grace: float) -> bool:
        """Stop accepting requests (503), wait up to ``grace`` seconds for those in flight, then :meth:`cut` the rest.

        Returns:
            True when every request finished in time.
        """
        self.draining = True
        if self.in_flight == 0:
            return True
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except TimeoutError:
            await self.cut()
            return False
        return True

    async def cut(self, within: float = CUT_TIMEOUT_S) -> None:
        """End every request in flight now, each in its own protocol, and wait (at most ``within`` s) until they have.

        A stream gets its surface's in-band error event (``shutting_down``) and a proper end of body; a request that
        sent nothing yet gets a 503 ``shutting_down``. The access log marks them ``closed_by: server``.
        """
        self.draining = self.cutting = True
        running = list(self._running)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=within)


def _spend_book(client: Client) -> SpendBook | None:
    """The daily spend book over ``client``'s ledger (shared through Redis with ``[state] backend = "redis"``).

    None when the client keeps no ledger. The ledger hands each call's record to the book, which settles the call's
    reservation with it.
    """
    config = client.config
    ledger = client.ledger
    if ledger is None:
        return None
    shared = None
    if config.state.backend == "redis" and config.state.url:
        shared = SharedSpend(
            config.state.url,
            prefix=config.state.key_prefix,
            ledger_path=ledger.path,
            max_connections=pool_size(config.gateway.max_connections),
        )
    spend = SpendBook(ledger, shared=shared)
    ledger.listener = spend
    return spend


def _refuse_limits(callers: Sequence[tuple[bytes, Caller]]) -> None:
    """Refuse keys with a limit on a gateway without a ledger: limits are enforced from the ledger.

    Raises:
        ConfigError: A key sets ``daily_limit_usd``, ``rpm`` or ``tpm``.
    """
    for _, c in callers:
        field = next((f for f in ("daily_limit_usd", "rpm", "tpm") if getattr(c, f) is not None), None)
        if field is not None:
            raise ConfigError(
                f"{field} is enforced from the ledger, and this gateway's client keeps none",
                path=f"gateway.keys.{c.name}.{field}",
                code="ledger_required",
            )


def _continuing(tracing: Tracing, handler: Handler) -> Handler:
    """``handler`` inside the trace the request's headers name: its calls' spans are children of it."""

    async def traced(request: web.Request, ex: Exchange, surface: Surface) -> web.StreamResponse:
        with tracing.continued(request.headers):
            return await handler(request, ex, surface)

    return traced


def create_app(client: Client, *, keys: list[str] | None = None, owns_client: bool = False) -> web.Application:
    """The aiohttp application of a gateway around ``client`` (see :class:`Gateway`)."""
    return Gateway(client, keys=keys, owns_client=owns_client).app
