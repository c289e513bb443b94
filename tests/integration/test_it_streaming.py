"""Streaming through real HTTP: the reliable stream, the replay boundary, sinks, cancellation,
semantic-empty recovery and sessions, for the OpenAI, Anthropic, Gemini and Ollama protocols.

``words(n)`` is exactly the text the simulator streams for ``t<N>`` answers, one unit per event, so the
tests can say which text reached the user before a fault.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from it_support import FAMILIES, client, config, profile, trail, upstream

from turnout import Client
from turnout.core.errors import ErrorClass, RefusalError, StreamInterruptedAfterOutput, TurnCancelled
from turnout.core.types import Message
from turnout.sim import Simulator
from turnout.sim.behaviour import generated_units

each_family = pytest.mark.parametrize("family", FAMILIES)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def words(n: int) -> str:
    """The first ``n`` generated words, as the simulator streams them."""
    return "".join(generated_units(n))


def pair(sim: Simulator, family: str, model: str, spare_model: str = "sim-ok-t5", **main: Any) -> dict[str, Any]:
    """``<family>.main`` (``model``) falling back to ``<family>.spare`` (``spare_model``)."""
    return config(
        {
            f"{family}.main": profile(sim, family, model, fallback=[f"{family}.spare"], **main),
            f"{family}.spare": profile(sim, family, spare_model),
        },
        retries=1,
    )


def texts(events: list[Any]) -> list[str]:
    return [e.text for e in events if e.type == "text"]


def stream_trail(attempts: Any) -> list[tuple[str, str, str, bool, str | None]]:
    """``(provider, model, outcome, stream, detail)`` per attempt."""
    return [(a.provider, a.model, a.outcome, a.stream, a.detail) for a in attempts]


# --- failures after output: never replayed -------------------------------------------------------------------


@each_family
async def test_cut_after_40_tokens_raises_with_exactly_that_text(sim: Simulator, family: str) -> None:
    """A stream cut after 40 shown tokens raises StreamInterruptedAfterOutput with those 40 tokens; no replay."""
    events: list[Any] = []
    async with client(pair(sim, family, "sim-cut-a40-t60")) as c:
        with pytest.raises(StreamInterruptedAfterOutput) as caught:
            await c.turn("tell me a story", events=events.append)
    assert caught.value.partial_text == words(40)
    assert texts(events) == list(generated_units(40))  # each token once, nothing after the cut
    assert [e.type for e in events] == ["text"] * 40
    assert caught.value.cause_class is ErrorClass.RETRYABLE
    assert stream_trail(caught.value.attempts) == [
        (f"{family}.main", "sim-cut-a40-t60", "stream_interrupted", True, "stream_truncated")
    ]
    assert caught.value.attempts[0].ttft_ms is not None
    assert await upstream(sim, 1) == [("sim-cut-a40-t60", "cut")]  # the fallback is never asked


@each_family
async def test_draft_only_consumer_gets_the_fallback_answer_after_a_cut(sim: Simulator, family: str) -> None:
    """With only a draft sink nothing is immutable: a cut stream is replaced by the fallback's complete answer."""
    drafts: list[str] = []
    async with client(pair(sim, family, "sim-cut-a40-t60")) as c:
        reply = await c.turn("tell me a story", draft=drafts.append)
    assert drafts[:40] == [words(n) for n in range(1, 41)]
    assert drafts[40:] == [words(5)]  # the draft is replaced by the recovered answer
    assert reply.text == words(5)
    assert (reply.served.provider, reply.served.model) == (f"{family}.spare", "sim-ok-t5")
    assert reply.fallback is not None
    assert stream_trail(reply.attempts) == [
        (f"{family}.main", "sim-cut-a40-t60", "retryable", True, "stream_truncated"),
        (f"{family}.spare", "sim-ok-t5", "ok", False, None),
    ]
    log = await sim.wait_for_log(2)
    assert [(e.model, e.outcome, e.stream) for e in log] == [
        ("sim-cut-a40-t60", "cut", True),
        ("sim-ok-t5", "ok", False),
    ]


@each_family
async def test_stall_after_output_is_caught_by_the_idle_timeout(sim: Simulator, family: str) -> None:
    """A stream that goes silent after 3 tokens ends after idle_timeout_secs, interrupted, connection released."""
    events: list[Any] = []
    async with client(pair(sim, family, "sim-stall-a3-t10", idle_timeout_secs=0.3)) as c:
        started = time.perf_counter()
        with pytest.raises(StreamInterruptedAfterOutput) as caught:
            await c.turn("hi", events=events.append)
        elapsed = time.perf_counter() - started
    assert 0.3 <= elapsed < 1.0
    assert caught.value.partial_text == words(3) == "".join(texts(events))
    assert caught.value.cause_class is ErrorClass.TIMEOUT
    assert stream_trail(caught.value.attempts) == [
        (f"{family}.main", "sim-stall-a3-t10", "stream_interrupted", True, "timeout:idle")
    ]
    assert await upstream(sim, 1) == [("sim-stall-a3-t10", "client_disconnected")]


@each_family
async def test_stall_before_output_fails_over(sim: Simulator, family: str) -> None:
    """A stream that opens and then says nothing times out before output and is recovered by the fallback."""
    events: list[Any] = []
    cfg = pair(sim, family, "sim-stall-a0", idle_timeout_secs=0.3, first_token_timeout_secs=0.3)
    async with client(cfg) as c:
        started = time.perf_counter()
        reply = await c.turn("hi", events=events.append)
        elapsed = time.perf_counter() - started
    assert elapsed < 1.0
    assert reply.text == "".join(texts(events)) == words(5)
    assert [(a.provider, a.outcome, a.stream) for a in reply.attempts] == [
        (f"{family}.main", "timeout", True),
        (f"{family}.spare", "ok", False),
    ]
    assert reply.attempts[0].detail in ("timeout:idle", "timeout:first_token")
    assert await upstream(sim, 2) == [("sim-stall-a0", "client_disconnected"), ("sim-ok-t5", "ok")]


@each_family
async def test_slow_first_token_fails_over_before_output(sim: Simulator, family: str) -> None:
    """A first token slower than first_token_timeout_secs moves to the fallback before anything is shown."""
    events: list[Any] = []
    async with client(pair(sim, family, "sim-slow-d2", first_token_timeout_secs=0.3)) as c:
        started = time.perf_counter()
        reply = await c.turn("hi", events=events.append)
        elapsed = time.perf_counter() - started
    assert 0.3 <= elapsed < 1.0
    assert stream_trail(reply.attempts) == [
        (f"{family}.main", "sim-slow-d2", "timeout", True, "timeout:first_token"),
        (f"{family}.spare", "sim-ok-t5", "ok", False, None),
    ]
    assert texts(events) == [words(5)] and reply.text == words(5)
    assert [e.type for e in events] == ["text", "usage", "final"]
    assert await upstream(sim, 2) == [("sim-slow-d2", "client_disconnected"), ("sim-ok-t5", "ok")]


@each_family
async def test_malformed_chunk_before_output_is_recovered(sim: Simulator, family: str) -> None:
    """Invalid JSON before any token is a retryable protocol error: retried on its entry, then the fallback answers."""
    events: list[Any] = []
    async with client(pair(sim, family, "sim-malformed-a0")) as c:
        reply = await c.turn("hi", events=events.append)
    assert stream_trail(reply.attempts) == [
        (f"{family}.main", "sim-malformed-a0", "retryable", True, "protocol_error"),
        (f"{family}.main", "sim-malformed-a0", "retryable", True, "protocol_error"),
        (f"{family}.spare", "sim-ok-t5", "ok", False, None),
    ]
    assert texts(events) == [words(5)]
    assert await upstream(sim, 3) == [
        ("sim-malformed-a0", "malformed"),
        ("sim-malformed-a0", "malformed"),
        ("sim-ok-t5", "ok"),
    ]


@each_family
async def test_malformed_chunk_after_output_interrupts(sim: Simulator, family: str) -> None:
    """Invalid JSON after shown tokens is never skipped silently: the turn is interrupted with the shown text."""
    events: list[Any] = []
    async with client(pair(sim, family, "sim-malformed-a3-t10")) as c:
        with pytest.raises(StreamInterruptedAfterOutput) as caught:
            await c.turn("hi", events=events.append)
    assert caught.value.partial_text == words(3) == "".join(texts(events))
    assert stream_trail(caught.value.attempts) == [
        (f"{family}.main", "sim-malformed-a3-t10", "stream_interrupted", True, "protocol_error")
    ]
    assert await upstream(sim, 1) == [("sim-malformed-a3-t10", "malformed")]


#: The ``missing_done`` stream per protocol: OpenAI's finish_reason chunk then a clean end is
#: complete without ``[DONE]``; Anthropic without ``message_stop`` is truncated; Gemini and Ollama have no
#: separate terminator, so the stream is whole.
COMPLETE_WITHOUT_TERMINATOR = {"openai": True, "anthropic": False, "gemini": True, "ollama": True}


@each_family
async def test_missing_terminator_after_the_finish(sim: Simulator, family: str) -> None:
    """A stream without its separate terminator is complete only where the protocol's finish signal suffices."""
    events: list[Any] = []
    full = "Hello from the Turnout simulator."
    async with client(pair(sim, family, "sim-nodone")) as c:
        if COMPLETE_WITHOUT_TERMINATOR[family]:
            reply = await c.turn("hi", events=events.append)
            assert reply.text == full and reply.finish_reason == "stop"
            assert stream_trail(reply.attempts) == [(f"{family}.main", "sim-nodone", "ok", True, None)]
            assert [e.type for e in events][-2:] == ["usage", "final"]
        else:
            with pytest.raises(StreamInterruptedAfterOutput) as caught:
                await c.turn("hi", events=events.append)
            assert caught.value.partial_text == full
            assert caught.value.attempts[0].detail == "stream_truncated"
    assert "".join(texts(events)) == full
    assert await upstream(sim, 1) == [("sim-nodone", "missing_done")]


# --- cancellation ----------------------------------------------------------------------------------------------


@each_family
async def test_cancel_before_output_aborts_without_retry(sim: Simulator, family: str) -> None:
    """A turn cancelled before it starts raises TurnCancelled; nothing is sent, shown or retried."""
    events: list[Any] = []
    cancel = asyncio.Event()
    cancel.set()
    async with client(pair(sim, family, "sim-ok-t10")) as c:
        with pytest.raises(TurnCancelled) as caught:
            await c.turn("hi", events=events.append, cancel=cancel)
    assert caught.value.partial_text == ""
    assert events == []
    assert caught.value.attempts == ()
    assert sim.log == []  # not even the primary is asked


@each_family
async def test_cancel_after_output_keeps_the_shown_text(sim: Simulator, family: str) -> None:
    """Cancelling after 5 shown tokens raises TurnCancelled with exactly them; the upstream is released."""
    events: list[Any] = []
    cancel = asyncio.Event()

    def sink(event: Any) -> None:
        events.append(event)
        if len(texts(events)) == 5:
            cancel.set()

    async with client(pair(sim, family, "sim-ok-t40-tps50")) as c:
        with pytest.raises(TurnCancelled) as caught:
            await c.turn("hi", events=sink, cancel=cancel)
    assert caught.value.partial_text == words(5) == "".join(texts(events))
    assert len(events) == 5
    assert stream_trail(caught.value.attempts) == [(f"{family}.main", "sim-ok-t40-tps50", "cancelled", True, None)]
    assert await upstream(sim, 1) == [("sim-ok-t40-tps50", "client_disconnected")]


async def test_cancel_event_stops_a_turn_waiting_for_its_first_token(sim: Simulator) -> None:
    """Setting ``cancel`` while the upstream has not answered yet ends the turn promptly."""
    async with client(pair(sim, "openai", "sim-slow-d1")) as c:
        cancel = asyncio.Event()
        task = asyncio.create_task(c.turn("hi", events=lambda e: None, cancel=cancel))
        await sim.wait_for_log(1, settled=False)
        cancel.set()
        with pytest.raises(TurnCancelled):
            await asyncio.wait_for(task, timeout=0.5)


@each_family
async def test_task_cancellation_before_output_releases_the_upstream(sim: Simulator, family: str) -> None:
    """Cancelling the task of a turn waiting for its first token closes the connection and retries nothing."""
    async with client(pair(sim, family, "sim-slow-d3")) as c:
        task = asyncio.create_task(c.turn("hi", events=lambda e: None))
        await sim.wait_for_log(1, settled=False)
        started = time.perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await upstream(sim, 1) == [("sim-slow-d3", "client_disconnected")]
        assert time.perf_counter() - started < 1.0


# --- semantic empty, reasoning, tools ------------------------------------------------------------------------


@each_family
async def test_single_entry_empty_stream_gets_one_recovery(sim: Simulator, family: str) -> None:
    """A complete but empty stream on the only entry gets one non-streaming recovery on that same entry."""
    events: list[Any] = []
    cfg = config({f"{family}.main": profile(sim, family, "sim-empty-then-ok-t3")}, retries=1)
    async with client(cfg) as c:
        reply = await c.turn("hi", events=events.append)
    assert reply.text == words(3) == "".join(texts(events))
    assert reply.fallback is None
    assert stream_trail(reply.attempts) == [
        (f"{family}.main", "sim-empty-then-ok-t3", "empty", True, None),
        (f"{family}.main", "sim-empty-then-ok-t3", "ok", False, None),
    ]
    log = await sim.wait_for_log(2)
    assert [(e.outcome, e.stream) for e in log] == [("empty", True), ("ok", False)]


@each_family
async def test_empty_stream_recovery_is_used_once_then_the_walk_moves_on(sim: Simulator, family: str) -> None:
    """The semantic-empty allowance is one try on the exact entry; after it the remaining entries are walked."""
    async with client(pair(sim, family, "sim-empty")) as c:
        reply = await c.turn("hi", events=lambda e: None)
    assert stream_trail(reply.attempts) == [
        (f"{family}.main", "sim-empty", "empty", True, None),
        (f"{family}.main", "sim-empty", "empty", False, "empty_response"),
        (f"{family}.spare", "sim-ok-t5", "ok", False, None),
    ]
    assert reply.text == words(5)
    log = await sim.wait_for_log(3)
    assert [(e.model, e.stream) for e in log] == [("sim-empty", True), ("sim-empty", False), ("sim-ok-t5", False)]


REASONING_THEN_NOTHING = {
    "models": {
        "thinker": {
            "steps": [
                {"do": "ok", "text": "", "reasoning": "first thoughts here"},
                {"do": "ok", "text": "final answer", "reasoning": "second thoughts"},
            ]
        }
    }
}


@each_family
async def test_reasoning_is_shown_once_across_a_recovery(sim: Simulator, family: str) -> None:
    """Reasoning streamed before a semantically empty end is not shown again by the recovery."""
    sim.set_script(REASONING_THEN_NOTHING)
    events: list[Any] = []
    cfg = config({f"{family}.main": profile(sim, family, "thinker")}, retries=1)
    async with client(cfg) as c:
        reply = await c.turn("hi", events=events.append)
    assert [(e.type, e.text) for e in events if e.type in ("text", "reasoning")] == [
        ("reasoning", "first"),
        ("reasoning", " thoughts"),
        ("reasoning", " here"),
        ("text", "final answer"),
    ]
    assert reply.text == "final answer"
    assert [e.type for e in events][-2:] == ["usage", "final"]
    assert [(a.outcome, a.stream) for a in reply.attempts] == [("empty", True), ("ok", False)]


async def test_think_only_stream_never_shows_the_think_span_as_answer_text(sim: Simulator) -> None:
    """A ``<think>``-only stream is empty: its span is not shown as answer text, and the recovery's text is."""
    events: list[Any] = []
    cfg = config({"openai.main": profile(sim, "openai", "sim-thinkonly-then-ok")}, retries=1)
    async with client(cfg) as c:
        reply = await c.turn("hi", events=events.append)
    assert [(a.outcome, a.stream) for a in reply.attempts] == [("empty", True), ("ok", False)]
    assert "".join(texts(events)) == reply.text == "Hello from the Turnout simulator."


@each_family
async def test_tool_calls_stream_after_the_text_and_match_chat(sim: Simulator, family: str) -> None:
    """Streamed tool calls are assembled per protocol and sent once the stream completed, as chat returns them."""
    events: list[Any] = []
    cfg = config({f"{family}.main": profile(sim, family, "sim-ok-tc2-t3")})
    async with client(cfg) as c:
        streamed = await c.turn("weather in Paris and Tokyo?", events=events.append, tools=[WEATHER_TOOL])
        chatted = await c.chat("weather in Paris and Tokyo?", tools=[WEATHER_TOOL])
    assert [e.type for e in events] == ["text"] * 3 + ["tool_call", "tool_call", "usage", "final"]
    calls = [(e.call.name, e.call.arguments) for e in events if e.type == "tool_call"]
    assert calls == [("get_weather", '{"city":"Paris"}'), ("get_weather", '{"city":"Tokyo","unit":"celsius"}')]
    assert [(t.name, t.arguments) for t in streamed.tool_calls] == calls
    assert [(t.name, t.arguments) for t in chatted.tool_calls] == calls
    assert streamed.text == chatted.text == words(3)
    assert streamed.finish_reason == chatted.finish_reason
    assert streamed.usage == chatted.usage


@pytest.mark.parametrize("family", ["openai", "anthropic", "gemini"])
async def test_refusal_in_a_stream_is_raised_not_routed(sim: Simulator, family: str) -> None:
    """A streamed refusal raises RefusalError; neither retried nor sent to the fallback."""
    async with client(pair(sim, family, "sim-refusal")) as c:
        with pytest.raises(RefusalError) as caught:
            await c.turn("hi", events=lambda e: None)
    assert [(a.outcome, a.stream) for a in caught.value.attempts] == [("refusal", True)]
    assert await upstream(sim, 1) == [("sim-refusal", "refusal")]


# --- client.stream ------------------------------------------------------------------------------------------------


@each_family
async def test_stream_response_has_the_shape_of_a_chat_reply(sim: Simulator, family: str) -> None:
    """After the loop, ``stream.response`` carries text, usage, requested/served and attempts (with ttft) like chat."""
    cfg = config({f"{family}.main": profile(sim, family, "sim-ok-t6-r2", pricing={"input": 1.0, "output": 2.0})})
    async with client(cfg) as c:
        stream = c.stream("one two three")
        events = [event async for event in stream]
        streamed = stream.response
        chatted = await c.chat("one two three")
    assert "".join(texts(events)) == streamed.text == chatted.text == words(6)
    assert streamed.reasoning == chatted.reasoning == words(2)
    assert type(streamed) is type(chatted)
    for name in ("usage", "finish_reason", "requested", "served", "fallback"):
        assert getattr(streamed, name) == getattr(chatted, name), name
    assert streamed.usage is not None and (streamed.usage.input_tokens, streamed.usage.output_tokens) == (3, 8)
    (s_attempt,) = streamed.attempts
    (c_attempt,) = chatted.attempts
    assert (s_attempt.provider, s_attempt.model, s_attempt.outcome, s_attempt.usage, s_attempt.cost_usd) == (
        c_attempt.provider,
        c_attempt.model,
        c_attempt.outcome,
        c_attempt.usage,
        c_attempt.cost_usd,
    )
    assert s_attempt.stream and s_attempt.ttft_ms is not None and 0 < s_attempt.ttft_ms <= s_attempt.duration_ms
    assert s_attempt.cost_usd == pytest.approx((3 * 1.0 + 8 * 2.0) / 1e6)
    assert streamed.call_id != chatted.call_id


async def test_stream_response_after_a_fallback_names_both_routes(sim: Simulator) -> None:
    """A stream recovered by another family before output carries the same notice as chat would."""
    cfg = config(
        {
            "anthropic.main": profile(sim, "anthropic", "sim-overloaded", fallback=["gemini.spare"]),
            "gemini.spare": profile(sim, "gemini", "sim-ok-t4"),
        },
        retries=1,
    )
    async with client(cfg) as c:
        stream = c.stream("hi")
        events = [event async for event in stream]
        chatted = await c.chat("hi")
    reply = stream.response
    assert "".join(texts(events)) == reply.text == words(4)
    assert (reply.requested, reply.served) == (chatted.requested, chatted.served)
    notice = "⚡ sim-overloaded (anthropic.main) was unavailable; this reply was served by sim-ok-t4 (gemini.spare)."
    assert reply.notice == chatted.notice == notice
    assert [(a.provider, a.outcome, a.status, a.stream) for a in reply.attempts] == [
        ("anthropic.main", "retryable", 529, True),
        ("anthropic.main", "retryable", 529, True),
        ("gemini.spare", "ok", None, False),
    ]
    assert trail(chatted.attempts) == [
        ("anthropic.main", "sim-overloaded", "retryable", 529),
        ("anthropic.main", "sim-overloaded", "retryable", 529),
        ("gemini.spare", "sim-ok-t4", "ok", None),
    ]


@each_family
async def test_breaking_out_of_a_stream_releases_the_connection(sim: Simulator, family: str) -> None:
    """``break`` after the first token closes the upstream at once: the simulator sees the client go."""
    cfg = config({f"{family}.main": profile(sim, family, "sim-ok-t100-tps50")})
    async with client(cfg) as c:
        started = time.perf_counter()
        async for event in c.stream("hi"):
            if event.type == "text":
                break
        assert await upstream(sim, 1) == [("sim-ok-t100-tps50", "client_disconnected")]
        assert time.perf_counter() - started < 1.0  # the whole answer would take 2 s


@each_family
async def test_closing_a_stream_context_releases_the_connection(sim: Simulator, family: str) -> None:
    """Leaving ``async with client.stream(...)`` early closes the upstream deterministically."""
    cfg = config({f"{family}.main": profile(sim, family, "sim-ok-t100-tps50")})
    async with client(cfg) as c:
        async with c.stream("hi") as stream:
            async for event in stream:
                if event.type == "text":
                    break
        assert stream.partial_text == words(1)
        assert await upstream(sim, 1) == [("sim-ok-t100-tps50", "client_disconnected")]


@each_family
async def test_stream_cut_after_output_raises_from_the_iterator(sim: Simulator, family: str) -> None:
    """The iterator form raises StreamInterruptedAfterOutput with exactly the text it yielded."""
    seen: list[str] = []
    async with client(pair(sim, family, "sim-cut-a40-t60")) as c:
        stream = c.stream("hi")

        async def consume() -> None:
            async for event in stream:
                if event.type == "text":
                    seen.append(event.text)

        with pytest.raises(StreamInterruptedAfterOutput) as caught:
            await consume()
    assert "".join(seen) == caught.value.partial_text == stream.partial_text == words(40)
    assert await upstream(sim, 1) == [("sim-cut-a40-t60", "cut")]


# --- sessions ---------------------------------------------------------------------------------------------------


@each_family
async def test_session_keeps_interrupted_partial_text(sim: Simulator, family: str) -> None:
    """After an interrupted stream the session history holds exactly the shown text, marked interrupted."""
    async with client(pair(sim, family, "sim-cut-a7-t20")) as c:
        session = c.session()
        with pytest.raises(StreamInterruptedAfterOutput):
            await session.send("tell me", stream=True)
    assert session.history == [Message.user("tell me"), Message.assistant(f"{words(7)}\n\n[stream interrupted]")]


@each_family
async def test_session_keeps_text_shown_before_a_cancellation(sim: Simulator, family: str) -> None:
    """Cancelling the task after 5 shown tokens keeps them in the history, marked as interrupted by the user."""
    shown: list[str] = []
    async with client(pair(sim, family, "sim-ok-t40-tps50")) as c:
        session = c.session()

        def sink(event: Any) -> None:
            if event.type == "text":
                shown.append(event.text)
                if len(shown) == 5:
                    task.cancel()

        task = asyncio.create_task(session.send("tell me", events=sink))
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(shown) >= 5
    assert session.history == [
        Message.user("tell me"),
        Message.assistant(f"{''.join(shown)}\n\n[interrupted by user]"),
    ]
    assert "".join(shown) == words(len(shown))


@each_family
async def test_session_keeps_nothing_for_reasoning_only_output(sim: Simulator, family: str) -> None:
    """A cancellation while only reasoning was shown leaves no partial assistant message."""
    reasoning: list[str] = []
    async with client(pair(sim, family, "sim-ok-r30-t5-tps50")) as c:
        session = c.session()

        def sink(event: Any) -> None:
            if event.type == "reasoning":
                reasoning.append(event.text)
                if len(reasoning) == 3:
                    task.cancel()

        task = asyncio.create_task(session.send("tell me", events=sink))
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(reasoning) >= 3
    assert session.history == [Message.user("tell me")]


async def test_session_completes_and_continues_after_a_recovered_stream(sim: Simulator) -> None:
    """A session's streamed turn recovered before output keeps the recovered answer and sends the history on."""
    async with client(pair(sim, "ollama", "sim-503-then-503-then-ok-t2")) as c:
        session = c.session(system="be brief")
        first = await session.send("one", stream=True)
        second = await session.send("two", stream=True)
    assert first.served.provider == "ollama.spare" and first.text == words(5)
    assert second.served.provider == "ollama.main" and second.text == words(2)
    assert session.history == [
        Message.system("be brief"),
        Message.user("one"),
        Message.assistant(words(5)),
        Message.user("two"),
        Message.assistant(words(2)),
    ]
    log = await sim.wait_for_log(4)
    # two stream tries on the main entry, the recovery on the spare; the second request carried the whole
    # history: 2 + 1 + 5 + 1 words
    assert [(e.model, e.outcome, e.usage.input if e.usage else None) for e in log] == [
        ("sim-503-then-503-then-ok-t2", "status:503", None),
        ("sim-503-then-503-then-ok-t2", "status:503", None),
        ("sim-ok-t5", "ok", 3),
        ("sim-503-then-503-then-ok-t2", "ok", 9),
    ]


# --- the ledger for streams -----------------------------------------------------------------------------------


async def test_stream_ledger_records_ttft_interruptions_and_cancellations(sim: Simulator, tmp_path: Path) -> None:
    """Streamed attempts reach the ledger with ttft, and outcomes stream_interrupted and cancelled."""
    db = tmp_path / "ledger.sqlite3"
    cfg = pair(sim, "openai", "sim-cut-a4-t10")
    cfg["ledger"] = {"path": str(db)}
    cfg["providers"]["models"]["openai"]["slow"] = profile(sim, "openai", "sim-ok-t40-tps50")
    async with Client.from_dict(cfg) as c:
        with pytest.raises(StreamInterruptedAfterOutput):
            await c.turn("hi", events=lambda e: None)
        cancel = asyncio.Event()

        def sink(event: Any) -> None:
            if event.type == "text":
                cancel.set()

        with pytest.raises(TurnCancelled):
            await c.turn("hi", events=sink, cancel=cancel, provider="openai.slow")
        ok = await c.turn("hi", events=lambda e: None, provider="openai.spare")
    con = sqlite3.connect(db)
    try:
        calls = con.execute(
            "SELECT stream, requested_provider, served_provider, outcome FROM calls ORDER BY ts"
        ).fetchall()
        attempts = con.execute(
            "SELECT provider, outcome, stream, ttft_ms IS NOT NULL, accepted FROM attempts ORDER BY ts"
        ).fetchall()
    finally:
        con.close()
    assert calls == [
        (1, "openai.main", None, "stream_interrupted"),
        (1, "openai.slow", None, "cancelled"),
        (1, "openai.spare", "openai.spare", "ok"),
    ]
    assert attempts == [
        ("openai.main", "stream_interrupted", 1, 1, 0),
        ("openai.slow", "cancelled", 1, 1, 0),
        ("openai.spare", "ok", 1, 1, 1),
    ]
    assert ok.attempts[0].ttft_ms is not None
