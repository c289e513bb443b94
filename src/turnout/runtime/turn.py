"""One streamed turn and its replay boundary (SPEC 7.3).

The turn opens the reliable stream and forwards what it produces to two kinds of sink: the *draft*
(mutable: the whole current text, replaceable) and the *events* (immutable: once sent, the user has
seen it). Text, reasoning and provider-executed tool events sent as events make output visible; tool
calls are held back until the stream completes, so they are never sent for an answer that is then
replaced.

- Failure before visible output: one recovery through the full reliable walk in non-streaming mode,
  skipping the exact entry whose stream failed (a single-entry walk gets one recovery attempt on it).
  The draft may be replaced; nothing is duplicated on the event sink.
- Failure after visible output: :class:`~turnout.errors.StreamInterruptedAfterOutput` with exactly the
  text already sent; never replayed.
- Cancellation is never retried.
- A stream that completes with no text and no tool calls is semantically empty: with
  ``provider_retries > 0`` one non-streaming recovery on the exact entry that produced it, then the
  remaining entries. Reasoning already shown is not shown again.
- A stream that ended after provider-executed tools without a final answer is never replayed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from turnout.attribution import Attempt, Outcome, Recovery
from turnout.errors import (
    EmptyCompletion,
    ProviderError,
    RefusalError,
    StreamingUnsupported,
    StreamInterruptedAfterOutput,
    TurnCancelled,
    TurnoutError,
)
from turnout.streams import ResponseBuilder, ThinkSplitter, without_think
from turnout.types import (
    ChatRequest,
    Final,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    UsageEvent,
    new_final,
)

#: A sink: a plain callable, sync or async.
Sink = Callable[[Any], Any]


async def call_sink(sink: Sink | None, value: Any) -> None:
    """Call a sync or async sink."""
    if sink is None:
        return
    result = sink(value)
    if inspect.isawaitable(result):
        await result


def _relabel_stream_attempt(attempts: list[Attempt], outcome: Outcome, usage: Any = None) -> None:
    for i in range(len(attempts) - 1, -1, -1):
        if attempts[i].stream:
            a = attempts[i]
            attempts[i] = replace(a, outcome=outcome, usage=usage if usage is not None else a.usage)
            return


class TurnState:
    """What the turn has shown so far."""

    __slots__ = ("forwarded", "provider_tools", "reasoning_shown", "visible")

    def __init__(self) -> None:
        self.forwarded: list[str] = []
        self.visible = False
        self.reasoning_shown = False
        self.provider_tools = False

    @property
    def partial_text(self) -> str:
        """Exactly the text sent as immutable events."""
        return "".join(self.forwarded)


async def turn_outputs(
    call: Any,
    request: ChatRequest,
    temperature: float | None,
    state: TurnState,
    cancel: asyncio.Event | None = None,
    *,
    events_visible: bool = True,
    draft: Sink | None = None,
    show_reasoning: bool = True,
) -> AsyncGenerator[StreamEvent, None]:
    """Run one turn, yielding its immutable events and sending draft updates; sets ``call.reply`` when accepted.

    ``call`` is a :class:`turnout.client.Call`. ``events_visible`` says whether the events reach someone
    (an event sink or an iterator): when they do not, text reaches only the draft, which stays replaceable,
    so a failure at any point is still recovered. ``draft`` receives the whole current draft text each time
    it changes. ``show_reasoning`` False keeps reasoning out of the events: it is still collected into the
    reply, but it is not shown, so it does not make output visible. Inline ``<think>…</think>`` spans in
    streamed text become reasoning. Raises the turn's typed error on failure.
    """
    walk = call.target.walk
    model = call.target.model
    scope = call.scope
    builder = ResponseBuilder()
    add = builder.add
    texts = builder.text_parts
    if events_visible:
        # Every answer text piece is shown as it is collected: the shown text and the answer's text are one list.
        state.forwarded = texts
    think = ThinkSplitter()
    thinking = False  # a think tag is open or may be starting: text goes through the splitter
    draft_text = ""
    reasoning_visible = events_visible and show_reasoning
    held_tools: list[ToolCallEvent] = []
    usage_event: UsageEvent | None = None
    completed = False
    stream_error: BaseException | None = None
    plain = cancel is None and draft is None and events_visible  # text events need nothing but a yield
    try:
        async with aclosing(walk.stream_batches_in_scope(request, model, temperature, scope)) as upstream:
            async for batch in upstream:
                for event in batch:
                    if plain and not thinking and type(event) is TextDelta and "<" not in (text := event.text) and text:
                        # the commonest case: shown as it is
                        texts.append(text)
                        state.visible = True
                        yield event
                        continue
                    if cancel is not None and cancel.is_set():
                        raise TurnCancelled(partial_text=state.partial_text, usage=builder.usage)
                    kind = event.type
                    if kind == "text" and not thinking and "<" not in (text := event.text) and text:
                        # no think tag in sight: forward as it is
                        texts.append(text)
                        if events_visible:
                            state.visible = True
                            yield event
                        if draft is not None:
                            draft_text += text
                            await call_sink(draft, draft_text)
                        continue
                    if kind == "text" or kind == "final":
                        pieces = think.feed(event.text) if kind == "text" else think.finish()
                        thinking = think.pending
                        for is_reasoning, piece in pieces:
                            if is_reasoning:
                                shown = ReasoningDelta(text=piece)
                                add(shown)
                                if reasoning_visible:
                                    state.visible = True
                                    state.reasoning_shown = True
                                    yield shown
                                continue
                            text_event = event if piece is getattr(event, "text", None) else TextDelta(text=piece)
                            add(text_event)
                            if events_visible:
                                state.visible = True
                                yield text_event
                            if draft is not None:
                                draft_text += piece
                                await call_sink(draft, draft_text)
                        if kind == "text":
                            continue
                    add(event)
                    if kind == "reasoning":
                        if event.text and reasoning_visible:
                            state.visible = True
                            state.reasoning_shown = True
                            yield event
                    elif kind == "provider_tool":
                        state.provider_tools = True
                        if events_visible:
                            state.visible = True
                            yield event
                    elif kind == "tool_call":
                        held_tools.append(event)
                    elif kind == "usage":
                        usage_event = event
                    elif kind == "final":
                        completed = True
    except (asyncio.CancelledError, TurnCancelled, GeneratorExit) as exc:
        _relabel_stream_attempt(scope.attempts, "cancelled", builder.usage)
        if isinstance(exc, TurnCancelled):
            exc.attempts = tuple(scope.attempts)
        call.fail(exc if not isinstance(exc, GeneratorExit) else TurnCancelled(partial_text=state.partial_text))
        raise
    except RefusalError as exc:
        if not _refusal_routable(walk, scope):
            exc.attempts = tuple(scope.attempts)
            call.fail(exc)
            raise
        stream_error = exc
    except TurnoutError as exc:
        stream_error = exc
    if stream_error is not None and state.visible:
        _relabel_stream_attempt(scope.attempts, "stream_interrupted", builder.usage)
        cause = stream_error.error_class if isinstance(stream_error, ProviderError) else None
        err = StreamInterruptedAfterOutput(
            f"the stream failed after output was shown ({type(stream_error).__name__}); it is not replayed",
            partial_text=state.partial_text,
            usage=builder.usage,
            attempts=scope.attempts,
            cause_class=cause,
        )
        call.fail(err)
        raise err from stream_error
    if completed:
        response = builder.build()
        if not response.is_semantically_empty:
            for tool in held_tools:
                yield tool
            if usage_event is not None:
                yield usage_event
            yield new_final(finish_reason=response.finish_reason, model=response.model)
            call.reply = call.accept(response)
            return
        _relabel_stream_attempt(scope.attempts, "empty", builder.usage)
        if state.provider_tools:
            err2 = EmptyCompletion("the stream ended after provider-executed tools without a final response")
            call.fail(err2)
            raise err2
        recovery_kind = "semantic_empty"
    else:
        recovery_kind = "failure"
    # Before any visible output (or a semantically empty answer): one non-streaming recovery.
    scope.recovery = _recovery_for(walk, scope, recovery_kind, stream_error)
    scope.served = None
    scope.served_entry = None
    try:
        recovered = await walk.chat_in_scope(request, model, temperature, scope)
    except BaseException as exc:
        if hasattr(exc, "attempts"):
            exc.attempts = tuple(scope.attempts)
        call.fail(exc)
        raise
    recovered = without_think(recovered)
    if recovered.reasoning and reasoning_visible and not state.reasoning_shown:
        yield ReasoningDelta(text=recovered.reasoning)
    if recovered.text:
        state.forwarded.append(recovered.text)
        state.visible = True
        yield TextDelta(text=recovered.text)
        if draft is not None:
            await call_sink(draft, recovered.text)
    for tool_call in recovered.tool_calls:
        yield ToolCallEvent(call=tool_call)
    if recovered.usage is not None:
        yield UsageEvent(usage=recovered.usage)
    yield Final(finish_reason=recovered.finish_reason, model=recovered.model)
    call.reply = call.accept(recovered)


def _refusal_routable(walk: Any, scope: Any) -> bool:
    if scope.served_entry is None or scope.served_entry[0] != walk.id:
        return False
    return bool(walk.entries[scope.served_entry[1]].refusal_fallback)


def _recovery_for(walk: Any, scope: Any, kind: str, error: BaseException | None) -> Recovery | None:
    if scope.served_entry is None or scope.served_entry[0] != walk.id or isinstance(error, StreamingUnsupported):
        return None  # no stream was opened: the whole walk runs
    index = scope.served_entry[1]
    single = len(walk.entries) == 1
    # semantic empty: one recovery on the exact entry when retries are allowed; a failure: skip the failed
    # entry, unless it is the only one (then one recovery attempt on it, where ZeroClaw makes none)
    allowed = (walk.retries > 0 or single) if kind == "semantic_empty" else single
    tries = 1 if allowed else 0
    return Recovery(walk=walk.id, entry=index, tries=tries)
