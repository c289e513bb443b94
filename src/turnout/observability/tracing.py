"""OpenTelemetry spans for finished calls: one span per call, one child span per attempt (the ``otel`` extra).

Nothing here runs while a call is in flight. Every attempt is already recorded with its start, duration, time
to first token, usage, cost, key id and outcome (:class:`~turnout.core.attribution.Attempt`), and every call ends
in :meth:`Call.accept <turnout.call.Call.accept>` or :meth:`Call.fail <turnout.call.Call.fail>`; there
:class:`Tracing` turns the records into spans with their recorded start and end times::

    turnout.chat | turnout.stream | turnout.turn    INTERNAL, child of the current context
      chat <model>                                  CLIENT, one per attempt (INTERNAL for a skipped entry)

Names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, ``error.type``), plus Turnout's own
``turnout.*`` attributes; docs/observability.md lists them all. No span holds a key (keys are named by key
id), and prompts and answers are recorded only with ``capture_content``.

Where the spans go (a provider handed to the client, the application's global provider, or Turnout's own
SDK pipeline) is decided by :mod:`turnout.observability.telemetry`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TypeAlias

import orjson
from opentelemetry import context, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from turnout.call import Call, call_outcome
from turnout.core.attribution import Attempt, FallbackNotice, RouteRef, total_cost
from turnout.core.types import ChatRequest, ChatResponse, ImagePart, Message, TextPart, Usage

log = logging.getLogger("turnout.tracing")

Attributes: TypeAlias = dict[str, AttributeValue]

#: The span of each kind of call.
CALL_SPANS = {"chat": "turnout.chat", "stream": "turnout.stream", "turn": "turnout.turn"}
#: How long :meth:`Tracing.aclose` waits for the spans still pending to be exported.
SHUTDOWN_S = 10.0
#: The event that marks the first streamed token on a span.
FIRST_TOKEN = "turnout.first_token"

#: ``gen_ai.provider.name`` of a family where the conventions name it; other families are named as they are.
PROVIDER_NAMES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "google": "gcp.gemini",
    "azure": "azure.ai.openai",
    "deepseek": "deepseek",
    "groq": "groq",
    "mistral": "mistral_ai",
    "xai": "x_ai",
}

#: Attempt outcomes that are no failure: the answer, an entry skipped (a cooldown, an open breaker), a race lost
#: to a hedge that answered.
_NOT_FAILED = frozenset(("ok", "hedge_lost", "cooldown_skip", "breaker_skip"))

#: Makes the provider on first use: ``(provider, shutdown)``. ``shutdown`` (None for a provider Turnout does not
#: own) exports what is pending and stops it; :meth:`Tracing.aclose` calls it.
ProviderSource: TypeAlias = Callable[[], tuple[TracerProvider, Callable[[], object] | None]]


def provider_name(family: str) -> str:
    """``gen_ai.provider.name`` for a family (``gemini`` → ``gcp.gemini``)."""
    return PROVIDER_NAMES.get(family, family)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _first_token_ns(attempt: Attempt) -> int:
    return _ns(attempt.started_at) + _ns((attempt.ttft_ms or 0.0) / 1000.0)


class Tracing:
    """Records finished calls as spans (a :class:`~turnout.call.CallTracer`).

    Args:
        source: Makes the tracer provider on first use (so a client that is built and never used sets up
            nothing), with its shutdown when it is Turnout's own.
        capture_content: Record prompts and answers (``gen_ai.input.messages``, ``gen_ai.output.messages``).
        max_content_chars: Bound on each captured text (longer ones are cut, the JSON shape kept).
    """

    __slots__ = ("_shutdown", "_source", "_tracer", "capture_content", "max_content_chars")

    def __init__(self, source: ProviderSource, *, capture_content: bool = False, max_content_chars: int = 4096) -> None:
        self._source = source
        self._tracer: Tracer | None = None
        self._shutdown: Callable[[], object] | None = None
        self.capture_content = capture_content
        self.max_content_chars = max_content_chars

    def tracer(self) -> Tracer:
        """The tracer spans are made with (the provider is resolved on the first call)."""
        tracer = self._tracer
        if tracer is None:
            provider, self._shutdown = self._source()
            tracer = self._tracer = provider.get_tracer("turnout")
        return tracer

    # --- the call path's two ends ---------------------------------------------------------------------

    def accepted(self, call: Call, response: ChatResponse, served: RouteRef, notice: FallbackNotice | None) -> None:
        """Record ``call``, answered by ``response`` from ``served``: its span and one child per attempt."""
        try:
            attributes = self._call_attributes(call)
            attributes["gen_ai.provider.name"] = provider_name(served.family)
            attributes["gen_ai.response.model"] = response.model or served.model
            attributes["turnout.served.profile"] = served.provider
            attributes["turnout.served.model"] = served.model
            attributes["turnout.outcome"] = "ok"
            attributes["turnout.fallback"] = notice is not None
            if response.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = (response.finish_reason,)
            _usage(attributes, response.usage)
            if self.capture_content:
                attributes["gen_ai.output.messages"] = self._output(response)
            self._emit(call, attributes, response, None)
        except Exception:  # telemetry never fails the call it describes
            log.warning("turnout: the spans of call %s were not recorded", call.call_id, exc_info=True)

    def failed(self, call: Call, exc: BaseException) -> None:
        """Record ``call``, ended by ``exc`` without an answer: its span (status ERROR) and its attempts."""
        try:
            attributes = self._call_attributes(call)
            attributes["gen_ai.provider.name"] = provider_name(call.requested.family)
            attributes["turnout.outcome"] = call_outcome(exc)
            attributes["turnout.fallback"] = False
            attributes["error.type"] = type(exc).__qualname__
            self._emit(call, attributes, None, exc)
        except Exception:
            log.warning("turnout: the spans of call %s were not recorded", call.call_id, exc_info=True)

    # --- the gateway ----------------------------------------------------------------------------------

    @contextmanager
    def continued(self, headers: Mapping[str, str]) -> Iterator[None]:
        """Within it, calls are children of the trace the incoming headers name (W3C ``traceparent``).

        The propagators are the standard ones (``OTEL_PROPAGATORS``; W3C trace context by default). When a
        span is already current (a server instrumentation made one for the request), it stays the parent.
        """
        if trace.get_current_span().get_span_context().is_valid:
            yield
            return
        token = context.attach(propagate.extract(headers))
        try:
            yield
        finally:
            context.detach(token)

    async def aclose(self) -> None:
        """Export what is pending and shut down Turnout's own provider, waiting at most :data:`SHUTDOWN_S`."""
        shutdown, self._shutdown = self._shutdown, None
        if shutdown is None:
            return
        try:
            await asyncio.wait_for(asyncio.to_thread(shutdown), SHUTDOWN_S)
        except TimeoutError:  # the collector is slow or gone: the export goes on in its thread, bounded by its timeout
            log.warning(
                "turnout: the trace exporter did not finish within %.0f s; pending spans may be lost", SHUTDOWN_S
            )

    # --- spans ----------------------------------------------------------------------------------------

    def _call_attributes(self, call: Call) -> Attributes:
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": call.requested.model,
            "turnout.profile": call.requested.provider,
            "turnout.call_id": call.call_id,
            "turnout.surface": call.surface,
            "turnout.attempts": len(call.attempts),
        }
        if call.stream:
            attributes["gen_ai.request.stream"] = True
        if call.caller is not None:
            attributes["turnout.caller"] = call.caller
        cost = total_cost(call.attempts)
        if cost is not None:
            attributes["turnout.cost_usd"] = cost
        request = call.request
        if request is not None:
            if request.max_tokens is not None:
                attributes["gen_ai.request.max_tokens"] = request.max_tokens
            if self.capture_content:
                attributes["gen_ai.input.messages"] = self._input(request)
        return attributes

    def _emit(
        self, call: Call, attributes: Attributes, response: ChatResponse | None, exc: BaseException | None
    ) -> None:
        tracer = self.tracer()
        end = time.time_ns()
        span = tracer.start_span(
            CALL_SPANS[call.operation], kind=SpanKind.INTERNAL, attributes=attributes, start_time=_ns(call.started)
        )
        parent = trace.set_span_in_context(span)
        attempts = call.attempts
        # the answer is the last ``ok`` attempt (the ledger's rule: a stream settled as empty is no longer ``ok``)
        accepted = max((i for i, a in enumerate(attempts) if a.outcome == "ok"), default=None) if exc is None else None
        for i, attempt in enumerate(attempts):
            self._attempt(tracer, parent, attempt, response if i == accepted else None)
        if accepted is not None:
            served = attempts[accepted]
            if served.ttft_ms is not None:  # what the caller waited for it, from the start of the call
                first = _first_token_ns(served)
                waited = round((first - _ns(call.started)) / 1e6, 3)
                span.add_event(FIRST_TOKEN, {"turnout.ttft_ms": waited}, timestamp=first)
        if exc is not None:
            span.set_status(Status(StatusCode.ERROR, call_outcome(exc)))
        span.end(end_time=end)

    def _attempt(self, tracer: Tracer, parent: context.Context, a: Attempt, response: ChatResponse | None) -> None:
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(a.family),
            "gen_ai.request.model": a.model,
            "turnout.profile": a.provider,
            "turnout.outcome": a.outcome,
            "turnout.entry": a.entry,
            "turnout.try": a.try_number,
        }
        if a.stream:
            attributes["gen_ai.request.stream"] = True
        if a.key_id is not None:
            attributes["turnout.key_id"] = a.key_id
        if a.status is not None:
            attributes["http.response.status_code"] = a.status
        if a.cost_usd is not None:
            attributes["turnout.cost_usd"] = a.cost_usd
        if a.detail is not None:
            attributes["turnout.detail"] = a.detail
        if a.retry_after is not None:
            attributes["turnout.retry_after_s"] = a.retry_after
        if a.ttft_ms is not None:
            attributes["gen_ai.response.time_to_first_chunk"] = a.ttft_ms / 1000.0
        _usage(attributes, a.usage)
        if response is not None:
            attributes["gen_ai.response.model"] = response.model or a.model
            if response.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = (response.finish_reason,)
        failed = a.outcome not in _NOT_FAILED
        if failed:
            attributes["error.type"] = a.outcome
        start = _ns(a.started_at)
        span: Span = tracer.start_span(
            f"chat {a.model}",
            context=parent,
            kind=SpanKind.CLIENT if a.try_number else SpanKind.INTERNAL,  # try 0 sent nothing (a skip, no key)
            attributes=attributes,
            start_time=start,
        )
        if a.ttft_ms is not None:
            span.add_event(FIRST_TOKEN, {"turnout.ttft_ms": a.ttft_ms}, timestamp=_first_token_ns(a))
        if failed:
            span.set_status(Status(StatusCode.ERROR, a.detail or a.outcome))
        span.end(end_time=start + _ns(a.duration_ms / 1000.0))

    # --- content (only with capture_content) ----------------------------------------------------------

    def _clip(self, text: str) -> str:
        limit = self.max_content_chars
        return text if len(text) <= limit else text[:limit] + "…"

    def _input(self, request: ChatRequest) -> str:
        """``gen_ai.input.messages``: the conversation in the conventions' JSON shape."""
        return orjson.dumps([self._message(m) for m in request.messages]).decode()

    def _output(self, response: ChatResponse) -> str:
        """``gen_ai.output.messages``: the answer in the conventions' JSON shape."""
        parts: list[dict[str, object]] = []
        if response.reasoning:
            parts.append({"type": "reasoning", "content": self._clip(response.reasoning)})
        if response.text:
            parts.append({"type": "text", "content": self._clip(response.text)})
        parts.extend(self._tool_call(c.id, c.name, c.arguments) for c in response.tool_calls)
        message = {"role": "assistant", "parts": parts, "finish_reason": response.finish_reason or "stop"}
        return orjson.dumps([message]).decode()

    def _message(self, message: Message) -> dict[str, object]:
        parts: list[dict[str, object]] = []
        if message.role == "tool":
            parts.append(
                {"type": "tool_call_response", "id": message.tool_call_id, "response": self._clip(message.text)}
            )
        else:
            if message.reasoning:
                parts.append({"type": "reasoning", "content": self._clip(message.reasoning)})
            for part in message.parts:
                if isinstance(part, TextPart):
                    parts.append({"type": "text", "content": self._clip(part.text)})
                elif isinstance(part, ImagePart):
                    parts.append(_image(part, self._clip))
            parts.extend(self._tool_call(c.id, c.name, c.arguments) for c in message.tool_calls)
        out: dict[str, object] = {"role": message.role, "parts": parts}
        if message.name:
            out["name"] = self._clip(message.name)
        return out

    def _tool_call(self, call_id: str, name: str, arguments: str) -> dict[str, object]:
        args: object = self._clip(arguments)
        if len(arguments) <= self.max_content_chars:
            with suppress(orjson.JSONDecodeError):  # else kept as the text the model produced
                args = orjson.loads(arguments)
        return {"type": "tool_call", "id": call_id, "name": self._clip(name), "arguments": args}


def _image(part: ImagePart, clip: Callable[[str], str]) -> dict[str, object]:
    """An image part: its URL, or for an inlined image only its media type (the bytes are not recorded)."""
    if part.is_data_url:
        return {"type": "image", "modality": "image", "mime_type": part.media_type}
    return {"type": "uri", "modality": "image", "uri": clip(part.url)}


def _usage(attributes: Attributes, usage: Usage | None) -> None:
    if usage is None:
        return
    attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
    attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    if usage.cached_input_tokens:
        attributes["gen_ai.usage.cache_read.input_tokens"] = usage.cached_input_tokens
    if usage.cache_write_tokens:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
