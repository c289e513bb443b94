"""One chat request through a surface: parse, route, call the client, answer (whole or streamed).

Non-streaming: ``client.chat``; every failure is answered in the surface's error shape with the status
:func:`turnout.gateway.failures.failure_for` gives it, and a refusal is a normal answer in the surface's
refusal form.

Streaming (on the wire): nothing is sent until the first event is ready, because until then the
client recovers failures through the non-streaming walk; so the headers name the entry that actually
produced the output, and a failure before it still gets a proper error status. After output, an
interruption ends the stream with the surface's in-band error event and never with its completion
signal, so a client can tell a cut answer from a complete one. A stream still open when a drain's deadline
passes (``[gateway] drain_secs``) ends the same way, with a ``shutting_down`` error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any

import orjson
from aiohttp import web

from turnout.core.attribution import FallbackNotice, RouteRef
from turnout.core.errors import ConfigError, RefusalError, StreamInterruptedAfterOutput, TurnoutError
from turnout.core.estimate import LIMITED_OUTPUT_BOUND
from turnout.gateway.access import Admitted
from turnout.gateway.bounds import attribution_headers, read_body
from turnout.gateway.exchange import Exchange, Host
from turnout.gateway.failures import CLIENT_CLOSED, Failure, RequestRejected, interrupted
from turnout.gateway.passthrough import bounded
from turnout.gateway.responses_stream import ResponsesStreamEncoder
from turnout.gateway.spend import Hold, worst_case
from turnout.gateway.surface import ChatCall, StreamEncoder, Surface
from turnout.reply import Reply
from turnout.walk.affinity import session_of
from turnout.walk.router import Target

log = logging.getLogger("turnout.gateway")

JSON = "application/json"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def serve_chat(gw: Host, surface: Surface, request: web.Request, ex: Exchange) -> web.StreamResponse:
    """Answer one chat request of ``surface``."""
    assert ex.caller is not None  # the guard authenticated the request
    try:
        body = await read_body(request, gw.max_body_bytes)
        call = surface.parse(body, request.headers)
        admitted = gw.access.admit(ex.caller, call.model)
        if call.kept is not None and call.kept.previous_id is not None:
            call = await gw.conversations.resume(call, ex.caller.name)
        if ex.caller.limited:  # after the kept conversation joined the input: its worst case counts all of it
            call, ex.hold = await _reserve(gw, admitted, call, ex)
    except RequestRejected as exc:
        return gw.error_response(surface, exc.failure)
    ex.stream = call.stream
    ex.route = call.model
    options = _options(admitted, call, ex, session_of(request.headers))
    if call.stream:
        return await _stream(gw, surface, request, call, options, ex)
    try:
        # a client that goes away leaves the upstream try under way to end on its own; the call's record, given to
        # the ledger then, settles its reservation with what it cost (the spend book listens to the ledger)
        reply = await gw.client.chat(call.messages, **options)
    except RefusalError as exc:
        if exc.request_rejected:  # the provider refused the request itself: an error, not an answer
            return gw.failure_response(surface, exc, ex)
        return _refusal(gw, surface, call, exc, ex)
    except TurnoutError as exc:
        return gw.failure_response(surface, exc, ex)
    if call.kept is not None and call.kept.store:
        return await _complete_kept(gw, surface, request, call, reply, ex)
    return _complete(gw, surface, request, call, reply, ex)


async def _reserve(gw: Host, admitted: Admitted, call: ChatCall, ex: Exchange) -> tuple[ChatCall, Hold | None]:
    """Reserve the worst case of a limited key's call before it is sent (see ``Access.reserve``).

    Returns the call as it is sent: with the output bound the reservation priced, so that the worst case is a
    real bound. A request without ``max_tokens`` gets :func:`limited_bound`; a body passed through carries the
    bound under its protocol's field (:func:`~turnout.gateway.passthrough.bounded`). The worst case is priced on
    the route the call takes, so a key with a spend limit is refused here a route with an entry of unknown price.
    """
    assert ex.caller is not None
    try:
        target = gw.client.route(model=admitted.model, provider=admitted.provider, sender=admitted.sender)
    except ConfigError:  # the call fails to route the same way, spending nothing
        return call, None
    most = call.max_tokens if call.max_tokens is not None else limited_bound(target)
    native = bounded(call.native, most) if call.native is not None else None
    call = dataclasses.replace(call, max_tokens=most, native=native)
    worst = worst_case(target, call.messages, call.tools, most, call.choices)
    return call, await gw.access.reserve(ex.caller, worst, ex.request_id, choices=call.choices)


def limited_bound(target: Target) -> int:
    """The output bound of a limited key's call that sets none: the least of its route's profiles' ``max_tokens``.

    A profile without one counts as :data:`~turnout.core.estimate.LIMITED_OUTPUT_BOUND`. The least, as the one bound is
    sent to every entry the call may reach: none is sent more than its profile allows.
    """
    return min(entry.max_tokens or LIMITED_OUTPUT_BOUND for entry in target.reliable.entries)


def _options(admitted: Admitted, call: ChatCall, ex: Exchange, session: str | None) -> dict[str, Any]:
    """The client options of one admitted call, whole or streamed alike (``session``: a header's conversation)."""
    assert ex.caller is not None
    return {
        "model": admitted.model,
        "provider": admitted.provider,
        "sender": admitted.sender,
        "tools": call.tools,
        "temperature": call.temperature,
        "max_tokens": call.max_tokens,
        "tool_choice": call.tool_choice,
        "response_format": call.response_format,
        "native": call.native,
        "call_id": ex.request_id,
        "caller": ex.caller.name,
        "cache_key": session,
    }


def _complete(
    gw: Host, surface: Surface, request: web.Request, call: ChatCall, reply: Reply, ex: Exchange
) -> web.Response:
    gw.observe_reply(reply, ex)
    served = reply.served
    headers = attribution_headers(
        served.provider,
        served.model,
        len(reply.attempts),
        reply.fallback.text if reply.fallback is not None else None,
        reply.call_id,
    )
    headers["Content-Type"] = JSON
    # stamped before the answer is made: aiohttp copies the headers once, instead of the guard adding to its copy
    ex.stamped = True
    return web.Response(body=surface.reply_body(reply, call), headers=gw.edges.stamped(request, headers, ex.request_id))


async def _complete_kept(
    gw: Host, surface: Surface, request: web.Request, call: ChatCall, reply: Reply, ex: Exchange
) -> web.Response:
    """:func:`_complete` for a Responses answer that is kept: kept before it is sent (the next turn may name it)."""
    assert ex.caller is not None
    response = _complete(gw, surface, request, call, reply, ex)
    body = response.body
    output = orjson.loads(body).get("output") if isinstance(body, bytes) else None
    await gw.conversations.keep(call, ex.caller.name, reply.call_id, output if isinstance(output, list) else [])
    return response


def _refusal(gw: Host, surface: Surface, call: ChatCall, exc: RefusalError, ex: Exchange) -> web.Response:
    provider, model = _refused_by(exc, call)
    gw.observe_attempts(exc.attempts, ex, provider=provider, model=model)
    headers = attribution_headers(provider, model, len(exc.attempts), None, None)
    headers["Content-Type"] = JSON
    return web.Response(body=surface.refusal_body(exc, model, call, uuid.uuid4().hex), headers=headers)


def _refused_by(exc: RefusalError, call: ChatCall) -> tuple[str, str]:
    last = exc.attempts[-1] if exc.attempts else None
    provider = last.provider if last is not None else (exc.provider or "")
    model = last.model if last is not None else (exc.model or call.model)
    return provider, model


async def _stream(
    gw: Host, surface: Surface, request: web.Request, call: ChatCall, options: dict[str, Any], ex: Exchange
) -> web.StreamResponse:
    """Answer a streamed chat request: its first event decides the headers, then the rest is relayed as it comes."""
    assert ex.caller is not None
    try:
        stream = gw.client.stream(call.messages, show_reasoning=call.show_reasoning, **options)
    except TurnoutError as exc:  # routing: an unknown profile, a missing model
        return gw.failure_response(surface, exc, ex)
    async with stream:
        events = stream.__aiter__()
        try:
            first = await events.__anext__()
        except RefusalError as exc:
            if exc.request_rejected:
                return gw.failure_response(surface, exc, ex)
            return await _refused_stream(gw, surface, request, call, exc, ex)
        except TurnoutError as exc:
            return gw.failure_response(surface, exc, ex)
        served = stream.served or stream.requested
        headers = _stream_headers(served, stream.attempt_count, stream.fallback, stream.call_id)
        # a stream the client abandons still reports its attempts (the list fills in as they end)
        gw.observe_attempts(stream.attempts, ex, provider=served.provider, model=served.model)
        response = gw.edges.stamp(request, web.StreamResponse(headers=headers), ex.request_id)
        await response.prepare(request)
        encoder = surface.stream_encoder(call, served.model, stream.call_id)
        try:
            await response.write(encoder.start() + encoder.event(first))
            ending = await _relay(events, encoder, response)
            if ending is None:
                reply = stream.response
                gw.observe_reply(reply, ex)
                finish = encoder.finish(reply.usage)
                if call.kept is not None and isinstance(encoder, ResponsesStreamEncoder):
                    # kept before the completion is sent: the client's next turn may name it at once
                    await gw.conversations.keep(call, ex.caller.name, stream.call_id, encoder.output)
                await response.write(finish)
            else:
                await response.write(_cut_short(gw, encoder, ending, served, ex))
        except ConnectionError:  # the client went away between two writes
            ex.status = CLIENT_CLOSED
            ex.closed_by = "client"
            return response
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not gw.cutting or task is None:  # the client went away
                raise
            task.uncancel()  # the drain's deadline: end the stream in its own protocol, then the body
            ex.interrupted = True
            ex.closed_by = "server"
            await response.write(encoder.interrupted(CUT_BY_SHUTDOWN))
        except Exception:  # a bug after the headers went out: still end the stream as cut, never as complete
            log.error("unexpected error while streaming %s", request.path, exc_info=True)
            ex.interrupted = True
            await response.write(encoder.interrupted(STREAM_FAILED))
        await response.write_eof()
        return response


async def _refused_stream(
    gw: Host, surface: Surface, request: web.Request, call: ChatCall, exc: RefusalError, ex: Exchange
) -> web.StreamResponse:
    """A stream refused before any output: a normal answer, the surface's refusal as its only event."""
    provider, model = _refused_by(exc, call)
    gw.observe_attempts(exc.attempts, ex, provider=provider, model=model)
    encoder = surface.stream_encoder(call, model, uuid.uuid4().hex)
    headers = {**SSE_HEADERS, **attribution_headers(provider, model, len(exc.attempts), None, None)}
    response = gw.edges.stamp(request, web.StreamResponse(headers=headers), ex.request_id)
    await response.prepare(request)
    await response.write(encoder.refusal(exc, started=False))
    await response.write_eof()
    return response


def _stream_headers(served: RouteRef, attempts: int, notice: FallbackNotice | None, call_id: str) -> dict[str, str]:
    """A stream's headers: server-sent events, attributed to the entry that produced its first event."""
    text = notice.text if notice is not None else None
    return {**SSE_HEADERS, **attribution_headers(served.provider, served.model, attempts, text, call_id)}


def _cut_short(gw: Host, encoder: StreamEncoder, ending: TurnoutError, served: RouteRef, ex: Exchange) -> bytes:
    """The last event of a stream that ended early after output: the refusal, or the interruption (noted)."""
    gw.observe_attempts(getattr(ending, "attempts", ()), ex, provider=served.provider, model=served.model)
    if isinstance(ending, RefusalError):
        return encoder.refusal(ending, started=True)
    ex.interrupted = True
    return encoder.interrupted(_interruption(ending))


async def _relay(events: Any, encoder: StreamEncoder, response: web.StreamResponse) -> TurnoutError | None:
    """Write the remaining events; the error that ended the stream early, or None when it completed."""
    try:
        async for event in events:
            data = encoder.event(event)
            if data:
                await response.write(data)
    except TurnoutError as exc:
        return exc
    return None


def _interruption(exc: TurnoutError) -> Failure:
    if isinstance(exc, StreamInterruptedAfterOutput):
        return interrupted(exc)
    return Failure(
        status=200,
        kind="upstream_interrupted",
        message=f"the stream failed after output was sent ({type(exc).__name__}); it is not replayed",
        code="stream_interrupted",
    )


CUT_BY_SHUTDOWN = Failure(
    status=200,
    kind="shutting_down",
    message="the gateway is shutting down; the answer is incomplete",
    code="shutting_down",
)
STREAM_FAILED = Failure(
    status=200, kind="internal", message="internal gateway error; the answer is incomplete", code="stream_interrupted"
)
