"""The public entry point: :class:`Client`.

::

    async with Client.from_file("turnout.toml") as client:
        reply = await client.chat([{"role": "user", "content": "hi"}], model="hint:fast")
        print(reply.text, reply.served, reply.notice)
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from turnout.call import Call, CallPlan, Operation
from turnout.config import Config, load_config_dict, load_config_file, load_config_toml, resolve_target_ref
from turnout.core.arguments import request_of
from turnout.core.attribution import RouteRef
from turnout.core.embeddings import EmbedReply, embed_request
from turnout.core.environment import Environment
from turnout.core.errors import ConfigError
from turnout.core.types import ChatRequest, Message, NativeRequest, ResponseFormat, ToolSpec
from turnout.factory import AdapterBuilder, Factory, missing_model_error
from turnout.ledger.pricing import Catalogue
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger
from turnout.providers.http import HttpClient
from turnout.reply import Reply
from turnout.runtime import ReplyStream, Session, Sink, Turn, drive
from turnout.state import MemoryStore, StateStore
from turnout.walk.embed import embed_through
from turnout.walk.entry import Served
from turnout.walk.pools import leading_members, pool_loads, pools_status
from turnout.walk.router import Router, Target

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from turnout.observability.tracing import Tracing

#: How many sets of call options keep their resolved target and plan (options are few in practice; bound them anyway).
_KEPT_PLANS = 256
#: How long :meth:`Client.aclose` waits for the upstream tries of calls their callers gave up on (see
#: :meth:`Client.chat`) before it cuts them; those are then billed their worst case (``Client.abandoned_wait_s``).
ABANDONED_WAIT_S = 10.0
#: How long a cut try is given to record itself (its adapter ends on the cancellation it is sent).
_CUT_WAIT_S = 1.0

MessagesArg = Iterable[Message | Mapping[str, Any]] | str
ToolsArg = Iterable[ToolSpec | Mapping[str, Any]] | None
ToolChoiceArg = str | Mapping[str, Any] | None
ResponseFormatArg = ResponseFormat | Mapping[str, Any] | None


def _state_store(config: Config) -> StateStore:
    if config.state.backend == "redis":
        try:
            from turnout.state.redis import RedisStore
        except ImportError as exc:
            raise ConfigError(
                'backend = "redis" needs the redis extra: pip install "turnout[redis]"', path="state.backend"
            ) from exc
        assert config.state.url is not None  # checked when the config loaded
        return RedisStore(config.state.url, prefix=config.state.key_prefix)
    return MemoryStore()


def _tracing(config: Config, provider: TracerProvider | None) -> Tracing | None:
    """The client's tracing, or None when it is off (then nothing of OpenTelemetry is imported)."""
    if provider is None and not config.telemetry.enabled:
        return None
    try:
        from turnout.observability.telemetry import build_tracing
    except ImportError as exc:
        raise ConfigError(
            '[telemetry] needs the otel extra: pip install "turnout[otel]"', path="telemetry.enabled"
        ) from exc
    return build_tracing(config.telemetry, provider)


class Client:
    """One reliable front over the providers of a configuration.

    Build it with :meth:`from_file`, :meth:`from_toml` or :meth:`from_dict`; use it as an async context
    manager (or call :meth:`aclose`). Construction validates everything and materialises the default
    route, so a bad configuration fails here, not on the first request.

    Args:
        config: A loaded configuration.
        ledger: True to follow ``[ledger]``; False to keep no ledger; or a :class:`Ledger` to use.
        store: Cooldown/key state (default: ``[state]`` from the config).
        http: A shared HTTP client (default: a new one).
        catalogue: Prices and context windows (default: the ``genai-prices`` catalogue).
        adapter_builder: Replaces HTTP adapters (for tests).
        env: The clock, sleep and jitter of every walk, an :class:`~turnout.core.environment.Environment`
            (default: the real ones; tests inject fakes).
        chance: Randomness of the pools' choices (for tests).
        surface: How calls are labelled in the ledger (``library``, ``gateway``, ``cli``).
        tracer_provider: An OpenTelemetry tracer provider for the spans of every call (turns tracing on;
            default: ``[telemetry]``, see docs/observability.md). Needs the ``otel`` extra.

    Call options: the arguments :meth:`chat`, :meth:`stream`, :meth:`turn` and :meth:`embed` share (each takes
    those its signature lists).

        messages: The conversation (``Message`` objects or OpenAI-style dicts), or one prompt string.
        model: ``hint:<name>``, a plain model for the active profile, or None for its default.
        provider: Another profile to make active for this call (``family.alias``).
        sender: A sender id whose ``[senders.<id>]`` override applies.
        tools: Tools the model may call (``ToolSpec`` or OpenAI-style dicts).
        temperature: Sampling temperature, a number of at least 0 (None: left out of the request).
        max_tokens: Upper bound on output tokens, a positive integer.
        tool_choice: ``auto``, ``none``, ``required``, the name of one of ``tools``, or the OpenAI dict
            ``{"type": "function", "function": {"name": ...}}``.
        response_format: Structured output, a :class:`~turnout.core.types.ResponseFormat` or the OpenAI dict
            (``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}``,
            ``{"type": "json_object"}``): entries that cannot honour it are skipped.
        native: The caller's request in its own wire protocol, for entries that speak it (the gateway's).
        call_id: The call's id (default: a new one); the gateway passes its request id.
        caller: Who makes the call, recorded in the ledger (the gateway passes its client key's name).
        cache_key: Your own name for the conversation (a session id): a pool sends every call with it back to
            the member that served it last, where its prompt is cached (default: the conversation is known by
            its request, see :mod:`turnout.walk.affinity`). Never sent to a provider.
    """

    def __init__(
        self,
        config: Config,
        *,
        ledger: bool | Ledger = True,
        store: StateStore | None = None,
        http: HttpClient | None = None,
        catalogue: Catalogue | None = None,
        adapter_builder: AdapterBuilder | None = None,
        env: Environment | None = None,
        chance: Callable[[], float] = random.random,
        surface: str = "library",
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.config = config
        self.surface = surface
        #: Records every finished call as spans (None: tracing is off).
        self.tracing = _tracing(config, tracer_provider)
        self.factory = Factory(
            config,
            http=http,
            store=store if store is not None else _state_store(config),
            catalogue=catalogue,
            adapter_builder=adapter_builder,
            env=env,
            chance=chance,
        )
        self.router = self.factory.router()
        #: ``[embeddings.spaces]``: each listed model name → its space's name.
        self._spaces = config.embeddings.space_names()
        #: The target and call plan of each set of options calls were made with (see :meth:`_plan`).
        self._plans: dict[tuple[str | None, str | None, str | None, Operation], tuple[Target, CallPlan]] = {}
        if isinstance(ledger, Ledger):
            self.ledger: Ledger | None = ledger
        elif ledger and config.ledger.enabled:
            self.ledger = Ledger(config.ledger.path)
        else:
            self.ledger = None
        #: The runs of non-streaming calls their callers gave up on while an upstream try was under way (see
        #: :meth:`chat`); :meth:`aclose` waits this long for them, then cuts them.
        self._abandoned: set[asyncio.Task[Served]] = set()
        self.abandoned_wait_s = ABANDONED_WAIT_S

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **options: Any) -> Client:
        """A client for the TOML file at ``path``."""
        return cls(load_config_file(Path(path)), **options)

    @classmethod
    def from_toml(cls, text: str, **options: Any) -> Client:
        """A client for TOML text."""
        return cls(load_config_toml(text), **options)

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any], **options: Any) -> Client:
        """A client for a mapping shaped like ``turnout.toml``."""
        return cls(load_config_dict(mapping), **options)

    async def __aenter__(self) -> Client:
        await self.factory.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close connections, flush the ledger and export the spans still pending.

        Calls given up on whose upstream try is still under way (see :meth:`chat`) are waited for, at most
        :attr:`abandoned_wait_s` seconds, then cut (each then billed its worst case) before anything closes.
        """
        await self.finish_abandoned()
        await self.factory.aclose()
        if self.ledger is not None:
            await self.ledger.aclose()
        if self.tracing is not None:
            await self.tracing.aclose()

    # --- routing -----------------------------------------------------------------------------

    def route(self, *, model: str | None = None, provider: str | None = None, sender: str | None = None) -> Target:
        """Where a call with these options goes: the walk and the model to send.

        ``sender`` applies ``[senders.<id>]`` (call arguments win); ``provider`` makes another profile (or a pool)
        the active one; ``model`` is a hint (``hint:fast``) or a plain model pinned on the active profile.

        Raises:
            ConfigError: An unknown profile, or a profile without a model and no model given.
        """
        if sender is not None and sender in self.config.senders:
            override = self.config.senders[sender]
            provider = provider if provider is not None else override.provider
            model = model if model is not None else override.model
        active: str | None = None
        if provider is not None:
            active = resolve_target_ref(self.config, provider)
            if active is None:
                raise ConfigError(
                    f"provider {provider!r} does not name a configured profile or pool", code="unknown_profile"
                )
        if active is None and model is None:
            target = self.router.resolve(None)
        else:
            is_hint = model is not None and model.startswith("hint:")
            router: Router = (
                self.router if active is None and is_hint else self.factory.router(active, None if is_hint else model)
            )
            target = router.resolve(model)
        if not target.model and target.reliable.entries[0].model is None:
            raise missing_model_error(target.reliable.entries[0].profile)
        return target

    # --- calls -------------------------------------------------------------------------------

    def record(self, call: CallRecord) -> None:
        """Send a finished call to the ledger (no-op without one)."""
        if self.ledger is not None:
            self.ledger.record(call)

    async def chat(
        self,
        messages: MessagesArg,
        *,
        model: str | None = None,
        provider: str | None = None,
        sender: str | None = None,
        tools: ToolsArg = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tool_choice: ToolChoiceArg = None,
        response_format: ResponseFormatArg = None,
        native: NativeRequest | None = None,
        call_id: str | None = None,
        caller: str | None = None,
        cache_key: str | None = None,
    ) -> Reply:
        """Ask for one complete answer through the reliable walk (the arguments: the call options of :class:`Client`).

        A call its caller gives up on (cancels: a timeout, a client that hung up) is billed what its provider bills
        as far as that can be known: the upstream try under way is not cut but left to end, bounded by its own
        timeouts, and no other try starts; then the call is recorded (outcome ``cancelled``) with that try's usage.
        The ``CancelledError`` reaches the caller at once. Only a try still under way when the client closes
        (after :attr:`abandoned_wait_s`) is cut and billed its worst case
        (:func:`~turnout.core.estimate.unseen_usage`).

        Raises:
            InvalidRequest: An argument cannot be sent (``.path`` names it); raised before any attempt.
            AllProvidersFailed: Every entry failed (``.attempts`` says how).
            RefusalError: The model refused.
            ContextWindowExceeded: The request is too large for every remaining model.
            ConfigError: The options name an unknown profile, or no model is known.
        """
        request = request_of(
            messages,
            tools=tools,
            temperature=temperature,
            max_tokens=max_tokens,
            tool_choice=tool_choice,
            response_format=response_format,
            native=native,
            cache_key=cache_key,
        )
        target, call = self._call(
            model, provider, sender, stream=False, call_id=call_id, caller=caller, request=request
        )
        # its own task, so that the caller's cancellation does not cut the upstream try under way
        run = asyncio.get_running_loop().create_task(target.reliable.run(request, target.model, temperature, call))
        try:
            served = await asyncio.shield(run)
        except asyncio.CancelledError:
            self._abandon(run, call)
            raise
        except BaseException as exc:
            call.fail(exc)
            raise
        return call.accept(served.response, served.route, served.entry)

    def _abandon(self, run: asyncio.Task[Served], call: Call) -> None:
        """The caller of ``call`` gave up: the try under way ends on its own, then the call is recorded."""
        call.abandoned = True  # the walk starts no other try
        if run.done():
            self._abandoned_ended(call, run)
            return
        self._abandoned.add(run)
        run.add_done_callback(lambda task: self._abandoned_ended(call, task))

    def _abandoned_ended(self, call: Call, run: asyncio.Task[Served]) -> None:
        """The run of a call given up on ended: the call is recorded as cancelled, with the attempts it made."""
        self._abandoned.discard(run)
        if not run.cancelled():
            run.exception()  # retrieved: the caller is gone, and what ended the walk is in its attempts
        call.fail(asyncio.CancelledError())  # the record settles what the call reserved (a gateway's spend book)

    async def finish_abandoned(self) -> None:
        """Wait (at most :attr:`abandoned_wait_s`) for the tries under way of calls given up on; cut the others.

        :meth:`aclose` does it first; a gateway does it before it closes what those calls are settled in.
        """
        if not self._abandoned:
            return
        _, late = await asyncio.wait(set(self._abandoned), timeout=self.abandoned_wait_s)
        for run in late:
            run.cancel()  # the walk records the cut try at its worst case
        if late:
            await asyncio.wait(late, timeout=_CUT_WAIT_S)

    def _call(
        self,
        model: str | None,
        provider: str | None,
        sender: str | None,
        *,
        stream: bool,
        call_id: str | None = None,
        caller: str | None = None,
        request: ChatRequest | None = None,
        operation: Operation | None = None,
    ) -> tuple[Target, Call]:
        """The target these options select, and a new call to it.

        The target and the plan its calls share are resolved once per options and kind of call (see :meth:`_plan`).
        """
        found = self._plans.get((model, provider, sender, operation or ("stream" if stream else "chat")))
        if found is None:
            found = self._plan(model, provider, sender, stream, operation)
        target, plan = found
        return target, Call(plan, call_id, caller, request)

    def _plan(
        self, model: str | None, provider: str | None, sender: str | None, stream: bool, operation: Operation | None
    ) -> tuple[Target, CallPlan]:
        """Resolve these options to their target and its calls' plan, and keep both for the next call with them.

        The route of a set of options never changes (the configuration is fixed); the kept ones are bounded, and an
        unknown hint is not kept, so that each call with it is warned about.
        """
        target = self.route(model=model, provider=provider, sender=sender)
        plan = CallPlan(
            requested=requested_route(target),
            operation=operation or ("stream" if stream else "chat"),
            ledger=self.ledger,
            surface=self.surface,
            intra_family=self.config.notices.intra_family,
            peers=leading_members(target.reliable.entries),
            tracer=self.tracing,
        )
        if model is None or not model.startswith("hint:") or target.hint is not None:
            plans = self._plans
            if len(plans) >= _KEPT_PLANS:
                plans.pop(next(iter(plans)))
            plans[(model, provider, sender, plan.operation)] = (target, plan)
        return target, plan

    def stream(
        self,
        messages: MessagesArg,
        *,
        model: str | None = None,
        provider: str | None = None,
        sender: str | None = None,
        tools: ToolsArg = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tool_choice: ToolChoiceArg = None,
        show_reasoning: bool = True,
        response_format: ResponseFormatArg = None,
        native: NativeRequest | None = None,
        call_id: str | None = None,
        caller: str | None = None,
        cache_key: str | None = None,
    ) -> ReplyStream:
        """Stream one answer: iterate the result for events; then ``.response`` is the :class:`Reply`.

        Every yielded event is output the caller may show at once: a failure before the first event
        is recovered through the non-streaming walk, a failure after it raises
        :class:`~turnout.core.errors.StreamInterruptedAfterOutput` with the text already yielded. Same options
        as :meth:`chat` (the call options of :class:`Client`), plus ``show_reasoning``: False leaves reasoning out
        of the yielded events (it is still in ``.response.reasoning``), so reasoning alone never makes a failure
        unrecoverable.
        """
        request = request_of(
            messages,
            tools=tools,
            temperature=temperature,
            max_tokens=max_tokens,
            tool_choice=tool_choice,
            response_format=response_format,
            native=native,
            cache_key=cache_key,
        )
        target, call = self._call(model, provider, sender, stream=True, call_id=call_id, caller=caller, request=request)
        turn = Turn(target.reliable, target.model, request, temperature, call, show_reasoning=show_reasoning)
        return ReplyStream(turn)

    async def turn(
        self,
        messages: MessagesArg,
        *,
        draft: Sink | None = None,
        events: Sink | None = None,
        cancel: asyncio.Event | None = None,
        model: str | None = None,
        provider: str | None = None,
        sender: str | None = None,
        tools: ToolsArg = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        tool_choice: ToolChoiceArg = None,
        cache_key: str | None = None,
    ) -> Reply:
        """Run one streamed turn through two sinks and return the accepted reply.

        Args:
            messages: The conversation.
            draft: Called with the whole current draft text each time it changes (sync or async). A
                recovery before visible output simply starts sending the new answer's text.
            events: Called with each immutable event (text, reasoning, provider tools, tool calls, usage,
                final); an event sent here is never retracted or duplicated.
            cancel: Set it to stop the turn: :class:`~turnout.core.errors.TurnCancelled` with the text shown.
            model: A call option (see :class:`Client`).
            provider: A call option (see :class:`Client`).
            sender: A call option (see :class:`Client`).
            tools: A call option (see :class:`Client`).
            temperature: A call option (see :class:`Client`).
            max_tokens: A call option (see :class:`Client`).
            tool_choice: A call option (see :class:`Client`).
            cache_key: A call option (see :class:`Client`).
        """
        request = request_of(
            messages,
            tools=tools,
            temperature=temperature,
            max_tokens=max_tokens,
            tool_choice=tool_choice,
            cache_key=cache_key,
        )
        target, call = self._call(model, provider, sender, stream=True, request=request, operation="turn")
        turn = Turn(
            target.reliable,
            target.model,
            request,
            temperature,
            call,
            cancel=cancel,
            events_visible=events is not None,
            draft=draft,
        )
        return await drive(turn, events)

    async def embed(
        self,
        inputs: str | Iterable[str] | Iterable[Sequence[int]],
        *,
        model: str | None = None,
        provider: str | None = None,
        sender: str | None = None,
        dimensions: int | None = None,
        user: str | None = None,
        call_id: str | None = None,
        caller: str | None = None,
    ) -> EmbedReply:
        """Embed texts (or token arrays) through the reliable walk, within one vector space (docs/embeddings.md).

        Args:
            inputs: One text, or texts (or lists of token ids), in order; the reply's vectors keep that order.
            model: A call option (see :class:`Client`); the route's first entry names the vector space.
            provider: A call option (see :class:`Client`).
            sender: A call option (see :class:`Client`).
            dimensions: The output size (sent as each protocol names it; refused where it is not taken).
            user: The caller's end-user id, for providers that take one (refused where it is not taken).
            call_id: The call's id (default: a new one); the gateway passes its request id.
            caller: Who makes the call, recorded in the ledger.

        Raises:
            InvalidRequest: The inputs or a parameter are malformed; nothing is sent.
            UnsupportedRequest: The route's first entry serves no embeddings or does not take a parameter; nothing
                is sent.
            AllProvidersFailed: A batch failed on every entry of the space (``.attempts`` says how).
            ConfigError: The options name an unknown profile, or no model is known.
        """
        request = embed_request(inputs, dimensions=dimensions, user=user)
        found = self._plans.get((model, provider, sender, "embed"))
        if found is None:
            found = self._plan(model, provider, sender, False, "embed")
        target, plan = found
        call = Call(plan, call_id, caller)
        try:
            served = await embed_through(target.reliable, request, target.model, call, self._spaces)
        except BaseException as exc:
            call.fail(exc)
            raise
        notice = call.accept_embedding(served.route, served.entry)
        return EmbedReply(
            vectors=served.vectors,
            usage=served.usage,
            requested=plan.requested,
            served=served.route,
            fallback=notice,
            attempts=tuple(call.attempts),
            call_id=call.call_id,
            batches=served.batches,
        )

    def session(self, provider: str | None = None, model: str | None = None, *, system: str | None = None) -> Session:
        """A conversation that keeps its history and its own profile/model overrides."""
        return Session(self, provider=provider, model=model, system=system)

    def status(self) -> dict[str, Any]:
        """Cooldowns (seconds left), dead keys, circuit breakers that are not closed, headroom, pools and hedging.

        ``breakers`` has one row per open or half-open entry (see :meth:`turnout.walk.breakers.Breakers.describe`);
        ``headroom`` one row per profile and key whose answers announced their rate limits in this process
        (see :meth:`turnout.providers.headroom.HeadroomBook.describe`); ``pools`` one row per pool with its members'
        load (see :func:`turnout.walk.pools.pools_status`); ``hedging`` whether any profile hedges, the calls that could
        have, the hedges sent and who answered first, and the budget left (see
        :meth:`turnout.walk.hedge.Hedging.describe`).
        """
        now = self.factory.env.clock()
        store = self.factory.store
        specs = self.factory.pool_specs.values()
        return {
            "cooldowns": {k: round(v - now, 3) for k, v in sorted(store.cooldowns(now).items())},
            "dead_keys": store.dead_keys(now),
            "breakers": self.factory.breakers.describe(now),
            "profiles": sorted(self.config.profiles()),
            "headroom": [row for _, book in sorted(self.factory.books.items()) for row in book.describe(now)],
            "pools": pools_status(specs, pool_loads(specs, self.factory.stats)),
            "hedging": self.factory.hedging.describe(),
        }


def requested_route(target: Target) -> RouteRef:
    """What a call to ``target`` asks for: the first entry of its walk, with the model it would send.

    For a pool, that is its first member as configured; an answer from any member is no fallback (see
    :func:`turnout.walk.pools.leading_members`).
    """
    first = target.reliable.entries[0]
    return first.route(first.model_for(target.model))
