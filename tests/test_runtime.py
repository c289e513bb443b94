"""The streaming runtime's replay boundary, with fake streaming providers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from fakes import FakeClock, Fleet, Scripted, err
from turnout import Client
from turnout.core.errors import (
    AllProvidersFailed,
    EmptyCompletion,
    ProviderTimeout,
    RefusalError,
    StreamingUnsupported,
    StreamInterruptedAfterOutput,
    StreamTruncated,
    TurnCancelled,
)
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    ProviderToolEvent,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
    UsageEvent,
)

TWO = """
default_provider = "openai.primary"
[providers.models.openai.primary]
api_key = "sk-p"
model = "gpt-4.1"
fallback = ["anthropic.backup"]
[providers.models.anthropic.backup]
api_key = "sk-b"
model = "claude"
[reliability]
provider_retries = 1
"""

ONE = """
default_provider = "openai.primary"
[providers.models.openai.primary]
api_key = "sk-p"
model = "gpt-4.1"
[reliability]
provider_retries = 1
"""


def client(fleet: Fleet, text: str = TWO) -> Client:
    clock = FakeClock()
    return Client.from_toml(text, adapter_builder=fleet, env=clock.env, ledger=False)


def text(t: str) -> TextDelta:
    return TextDelta(text=t)


USAGE = UsageEvent(usage=Usage(input_tokens=10, output_tokens=5))


class Sinks:
    """Records what a turn sent to its draft and event sinks."""

    def __init__(self) -> None:
        self.drafts: list[str] = []
        self.events: list[Any] = []

    def draft(self, value: str) -> None:
        self.drafts.append(value)

    async def event(self, value: Any) -> None:
        self.events.append(value)

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TextDelta))


async def test_complete_stream_is_accepted_with_attribution() -> None:
    """A complete stream yields its events; .response is a Reply like chat's."""
    fleet = Fleet(openai__primary=[[text("Hel"), text("lo"), USAGE, Final(finish_reason="stop")]])
    async with client(fleet) as c:
        stream = c.stream("hi")
        events = [e async for e in stream]
    assert [e.type for e in events] == ["text", "text", "usage", "final"]
    reply = stream.response
    assert reply.text == "Hello"
    assert reply.usage == Usage(input_tokens=10, output_tokens=5)
    assert reply.served.provider == "openai.primary" and reply.fallback is None
    (attempt,) = reply.attempts
    assert attempt.outcome == "ok" and attempt.stream and attempt.ttft_ms is not None


async def test_failure_before_output_recovers_through_the_walk_skipping_the_failed_entry() -> None:
    """A stream that fails before output is retried on its entry, then recovered once, non-streaming, on the next."""
    fleet = Fleet(openai__primary=[err(503)], anthropic__backup=["from backup"])
    async with client(fleet) as c:
        sinks = Sinks()
        reply = await c.turn("hi", draft=sinks.draft, events=sinks.event)
    assert reply.text == "from backup"
    assert fleet.calls("openai.primary") == []  # the failed entry is skipped in the recovery walk
    assert sinks.text == "from backup"
    assert reply.fallback is not None and reply.served.provider == "anthropic.backup"
    assert [(a.provider, a.outcome, a.stream, a.try_number) for a in reply.attempts] == [
        ("openai.primary", "retryable", True, 1),
        ("openai.primary", "retryable", True, 2),
        ("anthropic.backup", "ok", False, 1),
    ]


async def test_stream_open_failure_is_retried_on_the_same_entry_like_chat() -> None:
    """A 5xx at stream open gets chat's retries and backoff on the same entry: the primary still answers."""
    clock = FakeClock()
    fleet = Fleet(openai__primary=[err(500), "streamed"], anthropic__backup=["never"])
    async with Client.from_toml(TWO, adapter_builder=fleet, env=clock.env, ledger=False) as c:
        stream = c.stream("hi")
        events = [e async for e in stream]
    reply = stream.response
    assert [e.text for e in events if e.type == "text"] == ["streamed"]
    assert reply.served.provider == "openai.primary" and reply.fallback is None
    assert [(a.outcome, a.stream, a.try_number) for a in reply.attempts] == [("retryable", True, 1), ("ok", True, 2)]
    assert len(clock.sleeps) == 1 and 0.25 <= clock.sleeps[0] <= 0.5  # the jittered first backoff of 500 ms
    assert fleet.calls("anthropic.backup") == [] and fleet.calls("openai.primary") == []


async def test_stream_open_rate_limit_on_a_single_entry_waits_the_retry_hint() -> None:
    """A 429 with Retry-After at stream open on the only entry waits the hint and retries the stream."""
    clock = FakeClock()
    fleet = Fleet(openai__primary=[err(429, headers={"Retry-After": "3"}), "streamed"])
    async with Client.from_toml(ONE, adapter_builder=fleet, env=clock.env, ledger=False) as c:
        reply = await c.turn("hi", events=Sinks().event)
    assert reply.text == "streamed" and [a.outcome for a in reply.attempts] == ["rate_limited", "ok"]
    assert clock.sleeps == [3.0]


async def test_single_entry_failure_gets_one_recovery_attempt() -> None:
    """With one entry, a stream that failed after it opened gets one non-streaming recovery on it."""
    usage = UsageEvent(usage=Usage(input_tokens=1, output_tokens=0))
    fleet = Fleet(openai__primary=[[usage, err(503)], "recovered"])
    async with client(fleet, ONE) as c:
        reply = await c.turn("hi", events=Sinks().event)
    assert reply.text == "recovered"
    assert fleet.calls("openai.primary") == ["gpt-4.1"]


async def test_failure_after_output_is_not_replayed() -> None:
    """Once text reached the event sink, a failure raises with exactly that text; nothing is replayed."""
    fleet = Fleet(openai__primary=[[text("one "), text("two "), StreamTruncated("[DONE]")]], anthropic__backup=["no"])
    sinks = Sinks()
    async with client(fleet) as c:
        with pytest.raises(StreamInterruptedAfterOutput) as info:
            await c.turn("hi", draft=sinks.draft, events=sinks.event)
    assert info.value.partial_text == "one two "
    assert sinks.text == "one two "
    assert fleet.calls("anthropic.backup") == []
    assert [a.outcome for a in info.value.attempts] == ["stream_interrupted"]


async def test_draft_only_consumer_gets_the_fallback_answer_after_a_cut() -> None:
    """Text sent only to the draft is replaceable: a cut stream is recovered and the draft replaced."""
    fleet = Fleet(openai__primary=[[text("partial answ"), StreamTruncated("[DONE]")]], anthropic__backup=["full"])
    sinks = Sinks()
    async with client(fleet) as c:
        reply = await c.turn("hi", draft=sinks.draft)
    assert reply.text == "full"
    assert sinks.drafts == ["partial answ", "full"]


async def test_iterator_events_are_immutable_output() -> None:
    """client.stream: a failure after yielding text raises StreamInterruptedAfterOutput."""
    fleet = Fleet(openai__primary=[[text("seen"), ProviderTimeout("idle", phase="idle")]])
    async with client(fleet) as c:
        stream = c.stream("hi")
        got: list[Any] = []

        async def consume() -> None:
            async for event in stream:
                got.append(event)

        with pytest.raises(StreamInterruptedAfterOutput) as info:
            await consume()
    assert [e.text for e in got] == ["seen"]
    assert info.value.partial_text == "seen"


async def test_iterator_pre_output_failure_is_recovered() -> None:
    """client.stream: a failure before the first yielded event is recovered."""
    fleet = Fleet(openai__primary=[[USAGE, err(500)]], anthropic__backup=["recovered"])
    async with client(fleet) as c:
        stream = c.stream("hi")
        events = [e async for e in stream]
    assert "".join(e.text for e in events if e.type == "text") == "recovered"
    assert stream.response.served.provider == "anthropic.backup"


async def test_completed_empty_stream_uses_one_non_streaming_recovery_on_the_same_entry() -> None:
    """A semantically empty stream gets exactly one non-streaming call on the exact entry."""
    fleet = Fleet(openai__primary=[[USAGE, Final()], "fallback response"])
    async with client(fleet) as c:
        reply = await c.turn("hi", events=Sinks().event)
    assert reply.text == "fallback response"
    assert fleet.calls("openai.primary") == ["gpt-4.1"]
    assert fleet.calls("anthropic.backup") == []
    empty, ok = reply.attempts
    assert (empty.outcome, empty.usage, ok.outcome) == ("empty", Usage(input_tokens=10, output_tokens=5), "ok")
    assert reply.usage != empty.usage or ok.usage == empty.usage


async def test_failed_semantic_empty_recovery_moves_on_to_remaining_entries() -> None:
    """The one recovery on the empty entry failing moves on to the remaining entries."""
    fleet = Fleet(openai__primary=[[Final()], err(500)], anthropic__backup=["backup"])
    async with client(fleet) as c:
        reply = await c.turn("hi", events=Sinks().event)
    assert reply.text == "backup"
    assert fleet.calls("openai.primary") == ["gpt-4.1"]


async def test_semantic_empty_with_zero_retries_skips_the_entry() -> None:
    """With provider_retries = 0 the empty stream's entry stays skipped."""
    fleet = Fleet(openai__primary=[[Final()]], anthropic__backup=["backup"])
    async with client(fleet, TWO.replace("provider_retries = 1", "provider_retries = 0")) as c:
        reply = await c.turn("hi", events=Sinks().event)
    assert reply.text == "backup"
    assert fleet.calls("openai.primary") == []


async def test_single_entry_semantic_empty_recovery() -> None:
    """A single entry whose stream was empty gets its one recovery."""
    fleet = Fleet(openai__primary=[[Final()], "second time lucky"])
    async with client(fleet, ONE) as c:
        assert (await c.turn("hi", events=Sinks().event)).text == "second time lucky"


async def test_provider_executed_tools_without_answer_are_never_replayed() -> None:
    """Provider-executed tools then an empty end: a typed error and no non-streaming call."""
    fleet = Fleet(
        openai__primary=[
            [
                ProviderToolEvent(name="web_search", phase="call"),
                ProviderToolEvent(name="web_search", phase="result"),
                Final(),
            ]
        ]
    )
    async with client(fleet) as c:
        with pytest.raises(EmptyCompletion, match="provider-executed tools"):
            await c.turn("hi", events=Sinks().event)
    assert fleet.calls("openai.primary") == [] and fleet.calls("anthropic.backup") == []


async def test_reasoning_is_shown_once() -> None:
    """Reasoning shown before an empty end is not shown again by the recovery."""
    fleet = Fleet(
        openai__primary=[[ReasoningDelta(text="thinking"), Final()], ChatResponse(text="answer", reasoning="thinking")]
    )
    sinks = Sinks()
    async with client(fleet) as c:
        await c.turn("hi", draft=sinks.draft, events=sinks.event)
    assert [e.text for e in sinks.events if isinstance(e, ReasoningDelta)] == ["thinking"]
    assert "thinking" not in sinks.drafts


async def test_hidden_reasoning_does_not_make_a_failure_unrecoverable() -> None:
    """With show_reasoning=False reasoning is not yielded, so a failure after it is still recovered."""
    fleet = Fleet(openai__primary=[[ReasoningDelta(text="hmm"), err(500)]], anthropic__backup=["ok"])
    async with client(fleet) as c:
        stream = c.stream("hi", show_reasoning=False)
        events = [e async for e in stream]
    assert [e.type for e in events if e.type in ("text", "reasoning")] == ["text"]
    assert stream.response.text == "ok"


async def test_text_after_a_native_tool_call_is_forwarded() -> None:
    """Text after a tool call event still streams; tool calls are sent once the stream completes."""
    call = ToolCall(id="c1", name="shell", arguments='{"command":"date"}')
    fleet = Fleet(openai__primary=[[ToolCallEvent(call=call), text("after"), Final(finish_reason="tool_calls")]])
    sinks = Sinks()
    async with client(fleet) as c:
        reply = await c.turn("hi", events=sinks.event)
    kinds = [e.type for e in sinks.events]
    assert kinds == ["text", "tool_call", "final"]
    assert reply.tool_calls == (call,)


async def test_empty_text_deltas_do_not_count_as_output() -> None:
    """An empty delta is not output: a failure after it is still recovered."""
    fleet = Fleet(openai__primary=[[text(""), err(500)]], anthropic__backup=["ok"])
    async with client(fleet) as c:
        assert (await c.turn("hi", events=Sinks().event)).text == "ok"


class OneRead(Scripted):
    """Streams its scripted events as one batch, as one network read that decoded them all."""

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        yield [event async for event in self.stream(request, model, temperature)]


def one_read(*steps: Any) -> Client:
    clock = FakeClock()
    provider = OneRead(*steps)
    return Client.from_toml(ONE, adapter_builder=lambda *_: provider, env=clock.env, ledger=False)


async def test_a_batch_shows_exactly_what_was_yielded() -> None:
    """Inside one batch of text the shown text grows with each event yielded; stopping there keeps exactly that."""
    async with one_read([text(t) for t in "abcde"] + [Final()]) as c:
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


@pytest.mark.parametrize("batched", [False, True])
async def test_think_tags_split_across_text_events_become_reasoning(batched: bool) -> None:
    """A ``<think>`` span split anywhere across text events is shown as reasoning, never as answer text or draft."""
    pieces = ["Hi <th", "ink>pl", "an</thi", "nk> a<b", "", " done"]
    script = [[text(p) for p in pieces] + [USAGE, Final()]]
    sinks = Sinks()
    async with one_read(*script) if batched else client(Fleet(openai__primary=script), ONE) as c:
        reply = await c.turn("hi", draft=sinks.draft, events=sinks.event, cancel=asyncio.Event())
    reasoning = "".join(e.text for e in sinks.events if isinstance(e, ReasoningDelta))
    assert (sinks.text, reasoning) == ("Hi  a<b done", "plan")
    assert (reply.text, reply.reasoning, reply.usage) == ("Hi  a<b done", "plan", USAGE.usage)
    assert sinks.drafts[-1] == "Hi  a<b done" and not any("plan" in d for d in sinks.drafts)
    assert [e.type for e in sinks.events][-2:] == ["usage", "final"]


async def test_cancellation_before_output_aborts_without_retry() -> None:
    """Cancelling before any text aborts the turn; nothing is retried."""
    gate = asyncio.Event()

    class Hanging(Fleet):
        def __call__(self, name, profile, key):  # type: ignore[no-untyped-def]
            p = super().__call__(name, profile, key)

            async def stream(request, model, temperature=None):  # type: ignore[no-untyped-def]
                p.stream_calls.append(model)
                gate.set()
                await asyncio.Event().wait()
                yield text("never")

            p.stream = stream  # type: ignore[method-assign]
            return p

    fleet = Hanging()
    async with client(fleet) as c:
        task = asyncio.create_task(c.turn("hi", events=Sinks().event))
        await gate.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert fleet.calls("openai.primary") == [] and fleet.calls("anthropic.backup") == []


async def test_cancel_event_after_output_keeps_partial_text() -> None:
    """Setting the cancel event after text raises TurnCancelled with exactly the text shown."""
    cancel = asyncio.Event()
    sinks = Sinks()

    async def events(e: Any) -> None:
        sinks.events.append(e)
        cancel.set()

    fleet = Fleet(openai__primary=[[text("visible"), text(" more"), Final()]])
    async with client(fleet) as c:
        with pytest.raises(TurnCancelled) as info:
            await c.turn("hi", events=events, cancel=cancel)
    assert info.value.partial_text == "visible"
    assert fleet.calls("anthropic.backup") == []


async def test_refusal_in_stream_is_not_routed_around() -> None:
    """A refusal before output raises RefusalError; the fallback is not called."""
    fleet = Fleet(openai__primary=[[RefusalError()]], anthropic__backup=["no"])
    async with client(fleet) as c:
        with pytest.raises(RefusalError):
            await c.turn("hi", events=Sinks().event)
    assert fleet.calls("anthropic.backup") == []


async def test_no_streaming_entry_falls_back_to_the_walk() -> None:
    """When no entry can stream the turn runs the non-streaming walk."""

    class NoStream(Fleet):
        def __call__(self, name, profile, key):  # type: ignore[no-untyped-def]
            p = super().__call__(name, profile, key)
            p.caps = Capabilities(native_tools=True)
            return p

    fleet = NoStream(openai__primary=["plain"])
    async with client(fleet) as c:
        reply = await c.turn("hi", events=Sinks().event)
        assert reply.text == "plain"
        with pytest.raises(StreamingUnsupported):
            await c.factory.router().default.open_stream(__import__("fakes").req(), "m")


async def test_early_break_closes_the_upstream_stream() -> None:
    """Breaking out of client.stream closes the provider's stream."""
    fleet = Fleet(openai__primary=[[text("a"), text("b"), text("c"), Final()]])
    async with client(fleet) as c:
        stream = c.stream("hi")
        async for _ in stream:
            break
        # The abandoned generator is closed by the event loop's async-generator finalizer.
        for _ in range(3):
            await asyncio.sleep(0)
        assert fleet.built[("openai.primary", "sk-p")].closed_streams == 1
        deterministic = c.stream("hi")
        async with deterministic:
            async for _ in deterministic:
                break
        assert fleet.built[("openai.primary", "sk-p")].closed_streams == 2


async def test_all_failed_recovery_raises_all_providers_failed() -> None:
    """If the recovery walk fails too, the caller gets AllProvidersFailed with every attempt."""
    fleet = Fleet(openai__primary=[err(500)], anthropic__backup=[err(500)])
    async with client(fleet) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.turn("hi", events=Sinks().event)
    assert [a.stream for a in info.value.attempts] == [True, True, False, False]


async def test_a_failed_turns_message_counts_every_attempt_its_error_carries() -> None:
    """The message of a failed turn counts the stream's tries with the recovery's: as many events as attempts."""
    fleet = Fleet(openai__primary=[err(500)], anthropic__backup=[err(500)])
    async with client(fleet) as c:
        with pytest.raises(AllProvidersFailed) as info:
            await c.turn("hi", events=Sinks().event)
    lines = str(info.value).split("\n")
    assert lines[0] == f"All model providers/models failed after {len(info.value.attempts)} failure event(s). Events:"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "event 1 (openai.primary/gpt-4.1, try 1/2)",
        "event 2 (openai.primary/gpt-4.1, try 2/2)",
        "event 3 (anthropic.backup/claude, try 1/2)",
        "event 4 (anthropic.backup/claude, try 2/2)",
    ]


async def test_session_keeps_history_and_partial_text() -> None:
    """A session appends answers; an interrupted stream keeps only the text shown, marked."""
    fleet = Fleet(openai__primary=["first answer", [text("half"), StreamTruncated("[DONE]")]])
    async with client(fleet) as c:
        s = c.session(system="sys")
        await s.send("q1")
        with pytest.raises(StreamInterruptedAfterOutput):
            await s.send("q2", stream=True)
    assert [(m.role, m.text) for m in s.history] == [
        ("system", "sys"),
        ("user", "q1"),
        ("assistant", "first answer"),
        ("user", "q2"),
        ("assistant", "half\n\n[stream interrupted]"),
    ]


async def test_session_switch_model_and_reasoning_only_not_persisted() -> None:
    """switch_model changes later turns; reasoning-only output is not persisted as partial text."""
    fleet = Fleet(openai__primary=[[ReasoningDelta(text="hmm"), StreamTruncated("[DONE]")]])
    async with client(fleet) as c:
        s = c.session()
        with pytest.raises(StreamInterruptedAfterOutput):
            await s.send("q", stream=True)
        assert [m.role for m in s.history] == ["user"]
        s.switch_model(provider="anthropic.backup")
        reply = await s.send("again")
    assert reply.served.provider == "anthropic.backup"
