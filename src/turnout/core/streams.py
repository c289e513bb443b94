"""Assembling stream events into the :class:`~turnout.core.types.ChatResponse` they describe."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from dataclasses import replace

from turnout.core.types import (
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

#: Pieces of text or reasoning received since the last :meth:`ResponseBuilder.compact` that it joins into one.
COMPACT_PIECES = 256


class ResponseBuilder:
    """Collects events; :meth:`build` returns the answer they add up to.

    Text and reasoning deltas concatenate, tool calls append, the last usage event wins, and the
    :class:`~turnout.core.types.Final` event supplies the finish reason and model.

    A delta of a few characters costs a string object of some fifty bytes more than its text: a relay calls
    :meth:`compact` now and then (once per network read) so a long stream holds about its text, not an object per
    delta. How much a stream may bring in all is bounded where it is read (``max_response_bytes``).
    """

    __slots__ = (
        "_joined",
        "_reasoning",
        "_reasoning_joined",
        "finish_reason",
        "finished",
        "model",
        "text_parts",
        "tool_calls",
        "usage",
    )

    def __init__(self) -> None:
        #: The text deltas so far (a relay that knows an event is text may append to it directly).
        self.text_parts: list[str] = []
        self._joined = 0  # text_parts before this index are joined runs already
        self._reasoning: list[str] = []
        self._reasoning_joined = 0
        self.tool_calls: list[ToolCall] = []
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.finished = False

    def add(self, event: StreamEvent) -> None:
        """Take one event into account."""
        if isinstance(event, TextDelta):
            self.text_parts.append(event.text)
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

    def compact(self) -> None:
        """Join the text and reasoning pieces that arrived since the last call, once there are many of them.

        Each piece is copied once: the joined runs are not joined again, so a stream's compaction costs a copy of
        its text in all.
        """
        parts = self.text_parts
        if len(parts) - self._joined > COMPACT_PIECES:
            parts[self._joined :] = ("".join(parts[self._joined :]),)
            self._joined += 1
        reasoning = self._reasoning
        if len(reasoning) - self._reasoning_joined > COMPACT_PIECES:
            reasoning[self._reasoning_joined :] = ("".join(reasoning[self._reasoning_joined :]),)
            self._reasoning_joined += 1

    @property
    def text(self) -> str:
        """The text so far."""
        return "".join(self.text_parts)

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


_OPEN = "<think>"
_CLOSE = "</think>"


def _held_prefix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ThinkSplitter:
    """Splits streamed text into answer text and ``<think>…</think>`` reasoning, tags split anywhere.

    Some models (DeepSeek-R1 and others served through OpenAI-compatible or Ollama endpoints) put their
    reasoning inline in the content. :meth:`feed` returns ``(is_reasoning, text)`` pieces and holds back a
    possible partial tag until the next piece decides it; an unclosed ``<think>`` makes the rest reasoning.
    """

    __slots__ = ("_held", "inside")

    def __init__(self) -> None:
        self._held = ""
        self.inside = False

    @property
    def pending(self) -> bool:
        """Whether the splitter is inside a span or holds a possible partial tag."""
        return self.inside or bool(self._held)

    def feed(self, text: str) -> list[tuple[bool, str]]:
        """Split one piece of streamed text."""
        if not self._held and not self.inside and "<" not in text:
            return [(False, text)] if text else []
        s = self._held + text
        self._held = ""
        out: list[tuple[bool, str]] = []
        while s:
            tag = _CLOSE if self.inside else _OPEN
            i = s.find(tag)
            if i >= 0:
                if i:
                    out.append((self.inside, s[:i]))
                s = s[i + len(tag) :]
                self.inside = not self.inside
                continue
            hold = _held_prefix(s, tag)
            if len(s) > hold:
                out.append((self.inside, s[: len(s) - hold]))
            self._held = s[len(s) - hold :]
            break
        return out

    def finish(self) -> list[tuple[bool, str]]:
        """End of text: a held partial tag turns out to be plain text (or reasoning inside a span)."""
        held, self._held = self._held, ""
        return [(self.inside, held)] if held else []


def split_think(text: str) -> tuple[str, str]:
    """``(answer, reasoning)`` of a complete text with inline ``<think>`` spans."""
    if _OPEN not in text:
        return text, ""
    splitter = ThinkSplitter()
    pieces = splitter.feed(text) + splitter.finish()
    answer = "".join(t for r, t in pieces if not r)
    reasoning = "".join(t for r, t in pieces if r)
    return answer.strip() if reasoning else answer, reasoning


def without_think(response: ChatResponse) -> ChatResponse:
    """The response with inline ``<think>`` spans moved from its text to its reasoning."""
    if "<think>" not in response.text:
        return response
    answer, reasoning = split_think(response.text)
    merged = "\n".join(r for r in (response.reasoning, reasoning) if r) or None
    return replace(response, text=answer, reasoning=merged)
