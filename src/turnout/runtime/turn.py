"""One streamed turn and its replay boundary.

A :class:`Turn` opens the route's reliable stream and forwards what it produces to two kinds of sink: the
*draft* (mutable: the whole current text, replaceable) and the *events* (immutable: once sent, the user has
seen it). Text, reasoning and provider-executed tool events sent as events make output visible; tool calls
are held back until the stream completes, so they are never sent for an answer that is then replaced.

- Failure before visible output: one recovery through the full reliable walk in non-streaming mode,
  skipping the exact entry whose stream failed (a single-entry walk gets one recovery attempt on it).
  The draft may be replaced; nothing is duplicated on the event sink.
- Failure after visible output: :class:`~turnout.core.errors.StreamInterruptedAfterOutput` with exactly the
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
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import Any, NoReturn

from turnout.call import Call
from turnout.core.attribution import RouteRef
from turnout.core.describe import aggregate_message
from turnout.core.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    EmptyCompletion,
    InvalidRequest,
    ProviderError,
    RefusalError,
    StreamingUnsupported,
    StreamInterruptedAfterOutput,
    TurnCancelled,
    TurnoutError,
)
from turnout.core.estimate import delivered_usage
from turnout.core.streams import ResponseBuilder, ThinkSplitter, without_think
from turnout.core.types import (
    ChatRequest,
    ChatResponse,
    Final,
    ProviderToolEvent,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    UsageEvent,
)
from turnout.reply import Reply
from turnout.runtime.cancel import CancelWatcher
from turnout.walk.reliable import ReliableProvider, ReliableStream, Resume

#: A sink: a plain callable, sync or async.
Sink = Callable[[Any], Any]

_NOTHING: tuple[StreamEvent, ...] = ()


async def call_sink(sink: Sink | None, value: Any) -> None:
    """Call a sync or async sink."""
    if sink is None:
        return
    result = sink(value)
    if inspect.isawaitable(result):
        await result


class Turn:
    """One streamed turn: the stream it reads, what it has shown, and its recovery before output.

    Args:
        reliable: The route's reliable provider.
        model: The model to send.
        request: The request.
        temperature: Sampling temperature.
        call: The call that records the turn.
        cancel: Set it to stop the turn (:class:`~turnout.core.errors.TurnCancelled`).
        events_visible: Whether the events reach someone (an event sink or an iterator). When they do not,
            text reaches only the draft, which stays replaceable, so a failure at any point is recovered.
        draft: Receives the whole current draft text each time it changes.
        show_reasoning: False keeps reasoning out of the events: it is still collected into the reply, but it
            is not shown, so it does not make output visible.

    Attributes:
        served: The route producing the events (provisional until the answer is accepted).
        entry: The index of that route's entry in the walk.
        reply: The accepted reply, once the turn completed.
    """

    __slots__ = (
        "_completed",
        "_draft_text",
        "_drafts",
        "_held_tools",
        "_reasoning_visible",
        "_recovering",
        "_shown_other",
        "_think",
        "_thinking",
        "_usage",
        "builder",
        "call",
        "cancel",
        "draft",
        "entry",
        "events_visible",
        "model",
        "provider_tools",
        "reasoning_shown",
        "reliable",
        "reply",
        "request",
        "served",
        "shown",
        "stream",
        "temperature",
    )

    def __init__(
        self,
        reliable: ReliableProvider,
        model: str,
        request: ChatRequest,
        temperature: float | None,
        call: Call,
        *,
        cancel: asyncio.Event | None = None,
        events_visible: bool = True,
        draft: Sink | None = None,
        show_reasoning: bool = True,
    ) -> None:
        self.reliable = reliable
        self.model = model
        self.request = request
        self.temperature = temperature
        self.call = call
        self.cancel = cancel
        self.events_visible = events_visible
        self.draft = draft
        self.builder = ResponseBuilder()
        # Shown text: with visible events every answer text piece is shown as it is collected, so the shown
        # text and the answer's text are one list.
        self.shown: list[str] = self.builder.text_parts if events_visible else []
        self._shown_other = False  # reasoning or provider-executed tools were shown
        self.reasoning_shown = False
        self.provider_tools = False
        self.served: RouteRef | None = None
        self.entry = 0
        self.reply: Reply | None = None
        self.stream: ReliableStream | None = None
        self._reasoning_visible = events_visible and show_reasoning
        self._think = ThinkSplitter()
        self._thinking = False  # a think tag is open or may be starting: text goes through the splitter
        self._draft_text = ""
        self._drafts: list[str] = []  # the draft texts to send before the events that made them are yielded
        self._held_tools: list[ToolCallEvent] = []
        self._usage: UsageEvent | None = None
        self._completed = False
        self._recovering = False

    @property
    def visible(self) -> bool:
        """Whether output reached someone who cannot un-see it: shown text, reasoning or provider-executed tools.

        Derived rather than set per text event: with visible events, collecting answer text is showing it.
        """
        return self._shown_other or bool(self.shown)

    @property
    def partial_text(self) -> str:
        """Exactly the text sent as immutable events."""
        return "".join(self.shown)

    @property
    def attempt_count(self) -> int:
        """The attempts so far, counting a stream still open (it records itself when it ends)."""
        return len(self.call.attempts) + (self.stream is not None and self.stream.in_flight)

    # --- the turn ---------------------------------------------------------------------------------

    async def events(self) -> AsyncGenerator[StreamEvent, None]:
        """Run the turn, yielding its immutable events; afterwards :attr:`reply` is the accepted reply.

        Raises:
            StreamInterruptedAfterOutput: The stream failed after output was shown.
            TurnCancelled: The turn was cancelled.
            TurnoutError: The turn failed before output (after its recovery, where one was allowed).
        """
        try:
            error: TurnoutError | None = None
            try:
                stream = self.stream = await self.reliable.open_stream(
                    self.request, self.model, self.temperature, self.call
                )
            except StreamingUnsupported:
                stream = None  # no entry can stream it: the recovery runs the whole walk
            if stream is not None:
                self.served, self.entry = stream.route, stream.entry
                stream.delivered = self.builder  # a completed stream without a believable usage is billed by it
                try:
                    chosen = False  # which side streams is known with the first batch (a hedge may win)
                    async with aclosing(stream.batches()) as upstream:
                        async for batch in upstream:
                            if not chosen:
                                self.served, self.entry, chosen = stream.route, stream.entry, True
                            for event in batch:
                                if self.cancel is not None and self.cancel.is_set():
                                    raise TurnCancelled(partial_text=self.partial_text, usage=self.builder.usage)
                                shown = _HANDLERS[event.type](self, event)
                                if self._drafts:
                                    await self._send_drafts()
                                for each in shown:
                                    yield each
                            self.builder.compact()  # once per read: a long stream holds its text, not its deltas
                except TurnCancelled:
                    raise
                except TurnoutError as exc:
                    error = exc
                if error is None and self._completed:
                    response = self.builder.build()
                    if not response.is_semantically_empty:  # a complete answer: the held events, then the reply
                        for event in self._closing(response):
                            yield event
                        self._accept(response)
                        return
            try:
                resume = self._resume(stream, error)
            finally:
                error = None  # the error's traceback holds this frame: keeping it would make a cycle for the collector
            self._release()  # nothing the stream collected is shown or answered any more: the recovery answers
            recovered, shown_events = await self._recover(resume)
            for event in shown_events:
                yield event
            self._accept(recovered)
        except (asyncio.CancelledError, TurnCancelled, GeneratorExit) as exc:
            if self.reply is None:
                self._cancelled(exc)
            raise

    # --- one method per event kind: each returns what is shown (a draft it makes waits in _drafts) ------

    def _text(self, event: TextDelta) -> Sequence[StreamEvent]:
        if not self._thinking and "<" not in event.text:
            return self._answer(event) if event.text else _NOTHING
        return self._split(self._think.feed(event.text), event)

    def _reasoning(self, event: ReasoningDelta) -> Sequence[StreamEvent]:
        self.builder.add(event)
        if event.text and self._reasoning_visible:
            self._shown_other = self.reasoning_shown = True
            return (event,)
        return _NOTHING

    def _provider_tool(self, event: ProviderToolEvent) -> Sequence[StreamEvent]:
        self.builder.add(event)
        self.provider_tools = True
        if self.events_visible:
            self._shown_other = True
            return (event,)
        return _NOTHING

    def _tool_call(self, event: ToolCallEvent) -> Sequence[StreamEvent]:
        self.builder.add(event)
        self._held_tools.append(event)
        return _NOTHING

    def _usage_event(self, event: UsageEvent) -> Sequence[StreamEvent]:
        self.builder.add(event)
        self._usage = event
        return _NOTHING

    def _final(self, event: Final) -> Sequence[StreamEvent]:
        shown = self._split(self._think.finish(), None)
        self.builder.add(event)
        self._completed = True
        return shown

    def _answer(self, event: TextDelta) -> Sequence[StreamEvent]:
        """Answer text: collected, drafted, and shown when events are visible."""
        if self.draft is not None:
            self._draft_text += event.text
            self._drafts.append(self._draft_text)
        self.builder.add(event)  # with visible events its text is shown text, from here to the yield
        if self.events_visible:
            return (event,)
        return _NOTHING

    def _split(self, pieces: list[tuple[bool, str]], event: TextDelta | None) -> list[StreamEvent]:
        """Text split by ``<think>`` tags: reasoning pieces, then answer pieces, in order."""
        self._thinking = self._think.pending
        out: list[StreamEvent] = []
        for is_reasoning, piece in pieces:
            if is_reasoning:
                out.extend(self._reasoning(ReasoningDelta(text=piece)))
            else:
                out.extend(self._answer(event if event is not None and piece is event.text else TextDelta(text=piece)))
        return out

    async def _send_drafts(self) -> None:
        """Send the draft sink each text the last event's handler drafted, in order."""
        drafts, self._drafts = self._drafts, []
        for text in drafts:
            await call_sink(self.draft, text)

    # --- after the stream ---------------------------------------------------------------------------

    def _resume(self, stream: ReliableStream | None, error: TurnoutError | None) -> Resume | None:
        """Where the recovery of a stream that gave no answer continues (None: the whole walk).

        Raises the turn's error when the stream may not be recovered: output was shown, provider-executed
        tools ran, or the policy stopped the walk (a refusal the profile does not route).
        """
        if stream is None:
            return None
        if isinstance(error, InvalidRequest):  # nothing was sent: no recovery would send it either
            try:
                self._fail(error)
            finally:
                del error  # its traceback holds this frame: keeping it would make a cycle for the collector
        if error is not None and self.visible:
            stream.record_verdict("stream_interrupted", delivered_usage(self.request, self.builder))
            cause = error.error_class if isinstance(error, ProviderError) else None
            usage = self.builder.usage
            interrupted = StreamInterruptedAfterOutput(
                f"the stream failed after output was shown ({type(error).__name__}); it is not replayed",
                partial_text=self._release(),
                usage=usage,
                attempts=self.call.attempts,
                cause_class=cause,
            )
            self.call.fail(interrupted)
            try:
                raise interrupted from error
            finally:
                del interrupted  # its traceback holds this frame: keeping it would make a cycle for the collector
        if error is None and self._completed:  # semantically empty
            stream.record_verdict("empty", self.builder.usage)
            if self.provider_tools:
                self._fail(EmptyCompletion("the stream ended after provider-executed tools without a final response"))
            return stream.resume_after(failed=False)
        resume = stream.resume_after(failed=True)
        if resume is None and error is not None:  # the policy stopped the walk
            try:
                self._fail(error)
            finally:
                del error  # its traceback holds this frame: keeping it would make a cycle for the collector
        return resume

    def _closing(self, response: ChatResponse) -> list[StreamEvent]:
        """The events that close a complete streamed answer: the held tool calls, its usage, then its Final."""
        closing: list[StreamEvent] = [*self._held_tools]
        if self._usage is not None:
            closing.append(self._usage)
        closing.append(Final(finish_reason=response.finish_reason, model=response.model))
        return closing

    async def _recover(self, resume: Resume | None) -> tuple[ChatResponse, list[StreamEvent]]:
        """The non-streaming recovery before output, and the events that show its answer."""
        self._recovering = True
        try:
            served = await self.reliable.run(self.request, self.model, self.temperature, self.call, resume=resume)
        except TurnoutError as exc:
            self._fail(exc)
        self.served, self.entry = served.route, served.entry
        recovered = without_think(served.response)
        shown: list[StreamEvent] = []
        if recovered.reasoning and self._reasoning_visible and not self.reasoning_shown:
            shown.append(ReasoningDelta(text=recovered.reasoning))
        if recovered.text:
            self.shown.append(recovered.text)
            shown.append(TextDelta(text=recovered.text))
            if self.draft is not None:
                await call_sink(self.draft, recovered.text)
        shown.extend(ToolCallEvent(call=tool_call) for tool_call in recovered.tool_calls)
        if recovered.usage is not None:
            shown.append(UsageEvent(usage=recovered.usage))
        shown.append(Final(finish_reason=recovered.finish_reason, model=recovered.model))
        return recovered, shown

    def _accept(self, response: ChatResponse) -> None:
        assert self.served is not None
        self.reply = self.call.accept(response, self.served, self.entry)

    def _fail(self, exc: TurnoutError) -> NoReturn:
        """Record the turn as failed with ``exc`` (carrying every attempt of the turn) and raise it."""
        if isinstance(exc, RefusalError | ContextWindowExceeded | AllProvidersFailed):
            exc.attempts = tuple(self.call.attempts)
        if isinstance(exc, AllProvidersFailed):  # its message tells the whole turn, the stream's tries included
            exc.args = (aggregate_message(exc.attempts, self.reliable.context.tries),)
        self.call.fail(exc)
        self._release()
        try:
            raise exc
        finally:
            del exc  # its traceback holds this frame: keeping it would make a cycle for the collector

    def _cancelled(self, exc: BaseException) -> None:
        if self.stream is not None and not self._recovering:
            self.stream.record_verdict("cancelled", delivered_usage(self.request, self.builder))
        if isinstance(exc, TurnCancelled):
            exc.attempts = tuple(self.call.attempts)
        partial = self._release()
        self.call.fail(TurnCancelled(partial_text=partial) if isinstance(exc, GeneratorExit) else exc)

    def _release(self) -> str:
        """Let go of what the stream collected, once the turn ended without its answer; the text shown, as one string.

        The turn outlives its stream: the caller may keep the :class:`~turnout.runtime.stream.ReplyStream`, and the
        error raised holds the :meth:`events` frame, so the turn, through its traceback. Neither should keep the
        stream's text pieces, reasoning and tool calls: what is kept is the shown text alone, as the one string the
        error carries too (:attr:`partial_text` gives that same string).
        """
        shown = self.shown
        partial = shown[0] if len(shown) == 1 else "".join(shown)
        shown[:] = (partial,) if partial else ()  # in place: the events frame holds this list too
        usage, self.builder = self.builder.usage, ResponseBuilder()
        self.builder.usage = usage
        if self.events_visible:
            self.builder.text_parts = shown  # shown text and answer text stay one list
        self._held_tools.clear()
        self._drafts.clear()
        self._draft_text = ""
        return partial


#: The method for each event kind (one table for every turn, rather than bound methods made per turn).
_HANDLERS: dict[str, Callable[[Turn, Any], Sequence[StreamEvent]]] = {
    "text": Turn._text,
    "reasoning": Turn._reasoning,
    "provider_tool": Turn._provider_tool,
    "tool_call": Turn._tool_call,
    "usage": Turn._usage_event,
    "final": Turn._final,
}


async def drive(turn: Turn, events: Sink | None) -> Reply:
    """Run ``turn``, sending each immutable event to ``events``; the accepted reply.

    A set ``cancel`` event stops the turn wherever it waits, even on a silent upstream.

    Raises:
        TurnCancelled: The turn's ``cancel`` event was set (with the text already shown).
    """
    call = turn.call
    if turn.cancel is not None and turn.cancel.is_set():
        cancelled = TurnCancelled()
        call.fail(cancelled)
        raise cancelled
    watcher = CancelWatcher(turn.cancel) if turn.cancel is not None else None
    try:
        async with aclosing(turn.events()) as outputs:
            async for event in outputs:
                await call_sink(events, event)
    except asyncio.CancelledError:
        if watcher is None or not watcher.fired:
            raise
        watcher.uncancel()
        raise TurnCancelled(partial_text=turn.partial_text, attempts=call.attempts) from None
    finally:
        if watcher is not None:
            watcher.close()
    assert turn.reply is not None
    return turn.reply
