"""A streamed turn yields the same events and reply with or without sinks and a cancel event (its plain-text relay)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import FULL, FakeClock
from turnout import Client
from turnout.provider import Provider
from turnout.types import (
    Capabilities,
    ChatRequest,
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

CONFIG = """
default_provider = "openai.primary"
[providers.models.openai.primary]
api_key = "sk-primary"
model = "gpt-4.1"
"""

_pieces = st.sampled_from(["", "hi ", "<", "<th", "ink>", "<think>", "</think>", "</", "think", "a<b", " done"])
_texts = st.lists(_pieces, min_size=1, max_size=4).map("".join)
_events = st.one_of(
    _texts.map(lambda t: TextDelta(text=t)),
    _texts.map(lambda t: ReasoningDelta(text=t)),
    st.just(UsageEvent(usage=Usage(input_tokens=3, output_tokens=2))),
    st.just(ToolCallEvent(call=ToolCall(id="call_1", name="f", arguments="{}"))),
)


class Batches(Provider):
    """Streams the given event batches, then a final event."""

    def __init__(self, batches: list[list[StreamEvent]]) -> None:
        self.batches = batches

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        return ChatResponse(text="recovered", model=model)  # a semantically empty stream is recovered

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        for batch in self.batches:
            yield list(batch)
        yield [Final(finish_reason="stop", model=model)]

    def capabilities(self, model: str | None = None) -> Capabilities:
        return FULL


def _client(batches: list[list[StreamEvent]]) -> Client:
    clock = FakeClock()
    return Client.from_toml(
        CONFIG, adapter_builder=lambda *_: Batches(batches), clock=clock, sleep=clock.sleep, ledger=False
    )


def _seen(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.type, getattr(e, "text", "")) for e in events]


async def _both(batches: list[list[StreamEvent]]) -> tuple[Any, Any]:
    async with _client(batches) as c:
        stream = c.stream("hi")  # no cancel event, no draft
        plain = [e async for e in stream]
        reply_plain = stream.response
        general: list[Any] = []
        reply_general = await c.turn("hi", events=general.append, cancel=asyncio.Event())
    return (_seen(plain), reply_plain), (_seen(general), reply_general)


def _assert_same(batches: list[list[StreamEvent]]) -> None:
    """The plain stream and the handlers' turn yield the same events and reply the same."""
    (plain, reply_a), (general, reply_b) = asyncio.run(_both(batches))
    assert plain == general
    assert (reply_a.text, reply_a.reasoning, reply_a.tool_calls, reply_a.usage) == (
        reply_b.text,
        reply_b.reasoning,
        reply_b.tool_calls,
        reply_b.usage,
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_events, min_size=1, max_size=4), min_size=1, max_size=6))
def test_a_plain_stream_yields_what_a_turn_with_sinks_yields(batches: list[list[StreamEvent]]) -> None:
    """Any mix of text (with think tags split anywhere), reasoning, usage and tool calls: same events, same reply."""
    _assert_same(batches)


def test_a_batch_shows_exactly_what_was_yielded() -> None:
    """Inside one batch of text the shown text grows with each event yielded; stopping there keeps exactly that."""
    texts = ["a", "b", "c", "d", "e"]

    async def run() -> None:
        async with _client([[TextDelta(text=t) for t in texts]]) as c:
            stream = c.stream("hi")
            seen: list[str] = []
            async for event in stream:
                assert isinstance(event, TextDelta)
                seen.append(event.text)
                assert stream.partial_text == "".join(seen)
                if len(seen) == 3:
                    break
            await stream.aclose()
            assert stream.partial_text == "abc"

    asyncio.run(run())
