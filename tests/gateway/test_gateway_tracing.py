"""The gateway's calls continue the caller's trace (W3C traceparent); without one they start their own."""

from __future__ import annotations

import pytest
from gateway_support import fake_gateway, post
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fakes import Fleet, err

CONFIG = """
default_provider = "anthropic.prod"
[gateway]
api_keys = ["gw-test-key-1"]
[reliability]
provider_retries = 0
[providers.models.anthropic.prod]
api_key = "sk-ant-PLANTED"
model = "claude-sonnet-4-5"
fallback = ["openai.backup"]
[providers.models.openai.backup]
api_key = "sk-openai-PLANTED"
model = "gpt-4.1"
"""
CHAT = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def call_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("turnout.")]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_call_continues_the_incoming_traceparent(
    spans: tuple[TracerProvider, InMemorySpanExporter], stream: bool
) -> None:
    """The call span has the caller's trace id and its span as parent; the attempts are the call's children."""
    provider, exporter = spans
    fleet = Fleet(anthropic__prod=[err(500)], openai__backup=["from backup"])
    async with fake_gateway(CONFIG, fleet, tracer_provider=provider) as (server, _):
        resp = await post(
            server, "/v1/chat/completions", {**CHAT, "stream": stream}, headers={"traceparent": TRACEPARENT}
        )
    assert resp.status == 200
    (call,) = call_spans(exporter)
    assert call.name == ("turnout.stream" if stream else "turnout.chat")
    assert call.context.trace_id == int(TRACE_ID, 16)
    assert call.parent is not None and call.parent.span_id == int(PARENT_ID, 16) and call.parent.is_remote
    attempts = [s for s in exporter.get_finished_spans() if s is not call]
    assert len(attempts) == 2
    assert all(s.parent is not None and s.parent.span_id == call.context.span_id for s in attempts)
    assert dict(call.attributes or {})["turnout.surface"] == "gateway"
    assert dict(call.attributes or {})["turnout.call_id"] == resp.headers["x-request-id"]


async def test_without_a_traceparent_each_request_starts_its_own_trace(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Requests without (or with a malformed) traceparent get root call spans in separate traces."""
    provider, exporter = spans
    async with fake_gateway(CONFIG, Fleet(), tracer_provider=provider) as (server, _):
        await post(server, "/v1/chat/completions", CHAT)
        await post(server, "/v1/chat/completions", CHAT, headers={"traceparent": "00-zz-not-a-trace-" + "x" * 500})
    first, second = call_spans(exporter)
    assert first.parent is None and second.parent is None
    assert first.context.trace_id != second.context.trace_id
