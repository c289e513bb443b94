"""Assembling stream events into the :class:`~turnout.types.ChatResponse` they describe."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable

from turnout.types import (
    ChatResponse,
    Final,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
    UsageEvent,
)


class ResponseBuilder:
    """Collects events; :meth:`build` returns the answer they add up to.

    Text and reasoning deltas concatenate, tool calls append, the last usage event wins, and the
    :class:`~turnout.types.Final` event supplies the finish reason and model.
    """

    __slots__ = ("_reasoning", "_text", "finish_reason", "finished", "model", "tool_calls", "usage")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self.tool_calls: list[ToolCall] = []
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.finished = False

    def add(self, event: StreamEvent) -> None:
        """Take one event into account."""
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
        elif isinstance(event, ToolCallEvent):
            self.tool_calls.append(event.call)
        elif isinstance(event, UsageEvent):
            self.usage = event.usage
        elif isinstance(event, Final):
            self.finished = True
            self.finish_reason = event.finish_reason
            self.model = event.model or self.model

    @property
    def text(self) -> str:
        """The text so far."""
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        """The reasoning so far."""
        return "".join(self._reasoning)

    def build(self) -> ChatResponse:
        """The response the events so far describe."""
        return ChatResponse(
            text=self.text,
            tool_calls=tuple(self.tool_calls),
            usage=self.usage,
            reasoning=self.reasoning or None,
            finish_reason=self.finish_reason,
            model=self.model,
        )


def collect(events: Iterable[StreamEvent]) -> ChatResponse:
    """The response a sequence of events describes."""
    builder = ResponseBuilder()
    for event in events:
        builder.add(event)
    return builder.build()


async def acollect(events: AsyncIterable[StreamEvent]) -> ChatResponse:
    """The response an async stream of events describes (consumes the stream)."""
    builder = ResponseBuilder()
    async for event in events:
        builder.add(event)
    return builder.build()
