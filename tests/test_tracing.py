"""OpenTelemetry spans: one per call, one child per attempt, GenAI names, content only on opt-in, never a key."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from fakes import Fleet, err
from turnout import Client, Environment, Message, ToolCall
from turnout.config import key_id
from turnout.core.errors import AllProvidersFailed
from turnout.core.types import ChatResponse, Final, TextDelta, Usage, UsageEvent
from turnout.observability import tracing
from turnout.observability.tracing import Tracing

CONFIG = """
default_provider = "anthropic.prod"
[ledger]
enabled = false
[reliability]
provider_retries = 1
[providers.models.anthropic.prod]
api_key = "sk-ant-PLANTED-SECRET-1"
model = "claude-sonnet-4-5"
fallback = ["openai.backup"]
pricing = { input = 3.0, output = 15.0 }
[providers.models.openai.backup]
api_key = "sk-openai-PLANTED-SECRET-2"
model = "gpt-4.1"
pricing = { input = 2.0, output = 8.0 }
"""
KEYS = ("sk-ant-PLANTED-SECRET-1", "sk-openai-PLANTED-SECRET-2")
PROMPT = "PROMPT-SENTINEL what is the weather"
ANSWER = "ANSWER-SENTINEL sunny"


async def instant(seconds: float) -> None:
    """Backoffs take no time (the walk's clock stays the real one, so spans nest in real time)."""
    await asyncio.sleep(0)


def client(fleet: Fleet, provider: TracerProvider, text: str = CONFIG) -> Client:
    return Client.from_toml(text, adapter_builder=fleet, env=Environment(sleep=instant), tracer_provider=provider)


def tree(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The one call span and its children in start order (every span of the test belongs to it)."""
    finished = exporter.get_finished_spans()
    (call,) = [s for s in finished if s.name.startswith("turnout.")]
    children = sorted((s for s in finished if s is not call), key=lambda s: s.start_time or 0)
    assert all(s.parent is not None and s.parent.span_id == call.context.span_id for s in children)
    assert all(s.context.trace_id == call.context.trace_id for s in children)
    return call, children


def everything(exporter: InMemorySpanExporter) -> str:
    """Every name, attribute, event and status text of every span, as one string to search."""
    out: list[Any] = []
    for s in exporter.get_finished_spans():
        out += [s.name, dict(s.attributes or {}), s.status.description]
        out += [(e.name, dict(e.attributes or {})) for e in s.events]
    return repr(out)


async def test_a_fallback_call_is_one_span_with_one_child_per_attempt(spans: Any) -> None:
    """Two failed tries on the first entry then the fallback's answer: a call span and three attempt spans."""
    provider, exporter = spans
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=[ANSWER])
    async with client(fleet, provider) as c:
        reply = await c.chat(PROMPT)
    call, attempts = tree(exporter)
    assert call.name == "turnout.chat" and call.kind is SpanKind.INTERNAL
    assert call.status.status_code is StatusCode.UNSET
    attrs = dict(call.attributes or {})
    assert attrs == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.response.model": "gpt-4.1",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "turnout.profile": "anthropic.prod",
        "turnout.served.profile": "openai.backup",
        "turnout.served.model": "gpt-4.1",
        "turnout.outcome": "ok",
        "turnout.fallback": True,
        "turnout.attempts": 3,
        "turnout.cost_usd": pytest.approx(reply.cost_usd),
        "turnout.call_id": reply.call_id,
        "turnout.surface": "library",
    }
    assert [s.name for s in attempts] == ["chat claude-sonnet-4-5", "chat claude-sonnet-4-5", "chat gpt-4.1"]
    assert all(s.kind is SpanKind.CLIENT for s in attempts)
    first, second, served = (dict(s.attributes or {}) for s in attempts)
    assert first == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "turnout.profile": "anthropic.prod",
        "turnout.outcome": "retryable",
        "turnout.entry": 0,
        "turnout.try": 1,
        "turnout.key_id": key_id(KEYS[0]),
        "http.response.status_code": 500,
        "turnout.detail": first["turnout.detail"],
        "error.type": "retryable",
    }
    assert second["turnout.try"] == 2 and second["error.type"] == "retryable"
    assert [s.status.status_code for s in attempts] == [StatusCode.ERROR, StatusCode.ERROR, StatusCode.UNSET]
    assert served["turnout.outcome"] == "ok" and "error.type" not in served
    assert served["turnout.key_id"] == key_id(KEYS[1]) and served["turnout.entry"] == 1
    assert served["gen_ai.response.model"] == "gpt-4.1"
    assert (served["gen_ai.usage.input_tokens"], served["gen_ai.usage.output_tokens"]) == (10, 5)
    assert served["turnout.cost_usd"] == pytest.approx(reply.attempts[2].cost_usd)
    for span, attempt in zip(attempts, reply.attempts, strict=True):  # the recorded times, after the fact
        assert span.start_time == int(attempt.started_at * 1e9)
        assert call.start_time is not None and call.end_time is not None
        assert call.start_time <= span.start_time and (span.end_time or 0) <= call.end_time


async def test_a_failed_call_has_an_error_status_and_its_error_type(spans: Any) -> None:
    """Every entry fails: the call span is ERROR with the exception's type; each attempt is ERROR with its class."""
    provider, exporter = spans
    fleet = Fleet(anthropic__prod=[err(503)], openai__backup=[err(400, "bad request")])
    async with client(fleet, provider) as c:
        with pytest.raises(AllProvidersFailed):
            await c.chat(PROMPT)
    call, attempts = tree(exporter)
    assert call.status.status_code is StatusCode.ERROR and call.status.description == "all_failed"
    attrs = dict(call.attributes or {})
    assert attrs["error.type"] == "AllProvidersFailed" and attrs["turnout.outcome"] == "all_failed"
    assert attrs["gen_ai.provider.name"] == "anthropic" and attrs["turnout.fallback"] is False
    assert "gen_ai.response.model" not in attrs and "gen_ai.usage.input_tokens" not in attrs
    assert [dict(s.attributes or {})["error.type"] for s in attempts] == ["retryable", "retryable", "non_retryable"]
    assert all(s.status.status_code is StatusCode.ERROR for s in attempts)


async def test_a_stream_marks_its_first_token_and_its_recovery(spans: Any) -> None:
    """A stream that fails before output, recovered on the fallback: a stream span, the failed stream, the answer."""
    provider, exporter = spans
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=[ANSWER])
    async with client(fleet, provider, CONFIG.replace("provider_retries = 1", "provider_retries = 0")) as c:
        stream = c.stream(PROMPT)
        async with stream:
            async for _ in stream:
                pass
    call, attempts = tree(exporter)
    assert call.name == "turnout.stream"
    assert dict(call.attributes or {})["gen_ai.request.stream"] is True
    assert [(dict(s.attributes or {})["turnout.outcome"], s.name) for s in attempts] == [
        ("retryable", "chat claude-sonnet-4-5"),
        ("ok", "chat gpt-4.1"),
    ]
    assert dict(attempts[0].attributes or {})["gen_ai.request.stream"] is True
    assert "gen_ai.request.stream" not in dict(attempts[1].attributes or {})  # the recovery does not stream


async def test_a_streamed_answer_carries_its_time_to_first_token(spans: Any) -> None:
    """The streamed attempt has the first-token event and time_to_first_chunk; the call span the event too."""
    provider, exporter = spans
    chunks = [TextDelta(text=ANSWER), UsageEvent(usage=Usage(input_tokens=7, output_tokens=3)), Final()]
    async with client(Fleet(anthropic__prod=[chunks]), provider) as c:
        stream = c.stream(PROMPT)
        async with stream:
            async for _ in stream:
                pass
    call, (attempt,) = tree(exporter)
    attrs = dict(attempt.attributes or {})
    assert attrs["gen_ai.request.stream"] is True and attrs["gen_ai.response.time_to_first_chunk"] >= 0
    (event,) = attempt.events
    assert event.name == "turnout.first_token"
    assert event.timestamp == (attempt.start_time or 0) + int(attrs["gen_ai.response.time_to_first_chunk"] * 1e9)
    (call_event,) = call.events
    assert call_event.name == "turnout.first_token" and call_event.timestamp == event.timestamp
    assert dict(call.attributes or {})["gen_ai.usage.output_tokens"] == 3


async def test_a_turn_is_a_turn_span(spans: Any) -> None:
    """``Client.turn`` makes a ``turnout.turn`` span over its attempts."""
    provider, exporter = spans
    async with client(Fleet(anthropic__prod=[ANSWER]), provider) as c:
        reply = await c.turn(PROMPT, draft=lambda text: None)
    call, (attempt,) = tree(exporter)
    assert call.name == "turnout.turn" and reply.text == ANSWER
    assert dict(call.attributes or {})["turnout.call_id"] == reply.call_id
    assert dict(attempt.attributes or {})["turnout.outcome"] == "ok"


async def test_content_is_left_out_unless_opted_in(spans: Any) -> None:
    """By default no prompt or answer text reaches a span; ``capture_content`` records both."""
    provider, exporter = spans
    async with client(Fleet(anthropic__prod=[ANSWER]), provider) as c:
        await c.chat(PROMPT)
    text = everything(exporter)
    assert "SENTINEL" not in text and "gen_ai.input.messages" not in text
    exporter.clear()
    opted = CONFIG + "[telemetry]\ncapture_content = true\n"
    async with client(Fleet(anthropic__prod=[ANSWER]), provider, opted) as c:
        await c.chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": PROMPT}])
    call, _ = tree(exporter)
    attrs = dict(call.attributes or {})
    assert orjson.loads(str(attrs["gen_ai.input.messages"])) == [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]},
    ]
    assert orjson.loads(str(attrs["gen_ai.output.messages"])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": ANSWER}], "finish_reason": "stop"}
    ]


async def test_captured_content_is_bounded_and_keeps_its_shape(spans: Any) -> None:
    """Each captured text is cut at ``max_content_chars``; tool calls and results keep the conventions' parts."""
    provider, exporter = spans
    opted = CONFIG + "[telemetry]\ncapture_content = true\nmax_content_chars = 20\n"
    history = [
        Message(role="user", content="x" * 100),
        Message(role="assistant", tool_calls=(ToolCall(id="c1", name="get_weather", arguments='{"city":"Paris"}'),)),
        Message(role="tool", content="rainy", tool_call_id="c1"),
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    ]
    answer = ChatResponse(text="y" * 100, tool_calls=(ToolCall(id="c2", name="f", arguments="not json"),))
    async with client(Fleet(anthropic__prod=[answer]), provider, opted) as c:
        await c.chat(history)
    call, _ = tree(exporter)
    attrs = dict(call.attributes or {})
    assert orjson.loads(str(attrs["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "x" * 20 + "…"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "rainy"}]},
        {"role": "user", "parts": [{"type": "image", "modality": "image", "mime_type": "image/png"}]},
    ]
    (output,) = orjson.loads(str(attrs["gen_ai.output.messages"]))
    assert output["parts"] == [
        {"type": "text", "content": "y" * 20 + "…"},
        {"type": "tool_call", "id": "c2", "name": "f", "arguments": "not json"},
    ]


async def test_no_key_reaches_any_span_even_with_content_captured(spans: Any) -> None:
    """Keys (also one echoed in a provider's error) never appear: attempts name keys by key id only."""
    provider, exporter = spans
    opted = CONFIG + "[telemetry]\ncapture_content = true\n"
    fleet = Fleet(
        anthropic__prod=[err(401, f"invalid key {KEYS[0]}")],
        openai__backup=[ANSWER, err(500, f"upstream saw {KEYS[1]}")],
    )
    async with client(fleet, provider, opted) as c:
        await c.chat(PROMPT)
        with pytest.raises(AllProvidersFailed):
            await c.chat(PROMPT)
    text = everything(exporter)
    assert "SENTINEL" in text  # content was captured, so the search below looked at everything
    assert key_id(KEYS[0]) in text and key_id(KEYS[1]) in text
    for key in KEYS:
        assert key not in text and "PLANTED" not in text


async def test_a_tracing_failure_never_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    """A tracer that raises costs the spans (with a warning), never the caller's answer."""

    class Broken(TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("exporter set-up failed")

    caplog.set_level(logging.WARNING, logger="turnout.tracing")
    async with client(Fleet(anthropic__prod=[ANSWER]), Broken()) as c:
        reply = await c.chat(PROMPT)
    assert reply.text == ANSWER
    assert any("were not recorded" in r.getMessage() for r in caplog.records)


async def test_a_call_span_continues_the_current_trace(spans: Any) -> None:
    """A call made inside the application's own span is a child of it (the current context is the parent)."""
    provider, exporter = spans
    async with client(Fleet(anthropic__prod=[ANSWER]), provider) as c:
        with provider.get_tracer("app").start_as_current_span("handle request") as outer:
            await c.chat(PROMPT)
    (call,) = [s for s in exporter.get_finished_spans() if s.name == "turnout.chat"]
    assert call.parent is not None and call.parent.span_id == outer.get_span_context().span_id
    assert call.context.trace_id == outer.get_span_context().trace_id


async def test_closing_waits_for_a_stuck_exporter_only_so_long(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``aclose`` returns after ``SHUTDOWN_S`` even when the exporter hangs, and says spans may be lost."""
    release = threading.Event()
    monkeypatch.setattr(tracing, "SHUTDOWN_S", 0.05)
    stuck = Tracing(lambda: (TracerProvider(), lambda: release.wait(30)))
    stuck.tracer()  # the provider is made on first use, so there is one to shut down
    try:
        await stuck.aclose()
    finally:
        release.set()
    assert any("did not finish" in r.getMessage() for r in caplog.records)


async def test_a_skipped_entry_is_an_internal_span_without_error(spans: Any) -> None:
    """An entry cooling down sent nothing: its attempt span is INTERNAL, try 0, status unset, with the hint."""
    provider, exporter = spans
    fleet = Fleet(anthropic__prod=[err(429, headers={"retry-after": "30"})], openai__backup=[ANSWER])
    async with client(fleet, provider, CONFIG.replace("provider_retries = 1", "provider_retries = 0")) as c:
        await c.chat(PROMPT)  # the 429 cools the profile down
        exporter.clear()
        await c.chat(PROMPT)
    _, (skipped, served) = tree(exporter)
    attrs = dict(skipped.attributes or {})
    assert skipped.kind is SpanKind.INTERNAL and skipped.status.status_code is StatusCode.UNSET
    assert attrs["turnout.outcome"] == "cooldown_skip" and attrs["turnout.try"] == 0
    assert 0 < float(attrs["turnout.retry_after_s"]) <= 30 and "error.type" not in attrs
    assert skipped.start_time == skipped.end_time
    assert served.kind is SpanKind.CLIENT
