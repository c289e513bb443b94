"""Anthropic Messages adapter: request body, event-stream decoding, completion guard, refusals and errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_kit import (
    RecordingServer,
    Reply,
    bytewise,
    ends_in_final_or_turnout_error,
    fixture_path,
    make_adapter,
    random_splits,
    split_at,
    sse_from_chunks_file,
    two_way_splits,
)

from turnout.core.errors import ErrorClass, ProtocolError, ProviderError, RefusalError, StreamTruncated, TurnoutError
from turnout.core.streams import acollect, collect
from turnout.core.types import (
    ChatRequest,
    ChatResponse,
    Final,
    ImagePart,
    Message,
    ProviderToolEvent,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
    UsageEvent,
)
from turnout.providers import HttpClient
from turnout.providers.anthropic import THINKING_KEY, AnthropicAdapter
from turnout.providers.signatures import SIGNER_KEY

KEY = "sk-ant-test-key-0123456789"
JSON = {"Content-Type": "application/json"}
SSE = {"Content-Type": "text/event-stream"}


def _adapter(uri: str = "http://127.0.0.1:9", http: HttpClient | None = None, **profile: Any) -> AnthropicAdapter:
    adapter = make_adapter(http or HttpClient(), "anthropic", uri, api_key=KEY, **profile)
    assert isinstance(adapter, AnthropicAdapter)
    return adapter


ADAPTER = _adapter()


def decode(pieces: Iterable[bytes]) -> list[StreamEvent]:
    """Run the real decoder over ``pieces`` and return every event (``finish`` included)."""
    decoder = ADAPTER.decoder("claude-test")
    events: list[StreamEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    events.extend(decoder.finish())
    return events


def decode_until_error(data: bytes) -> tuple[list[StreamEvent], BaseException]:
    """Feed ``data`` event by event; return the events before the error and the error."""
    decoder = ADAPTER.decoder("claude-test")
    events: list[StreamEvent] = []
    try:
        for piece in data.split(b"\n\n"):
            events.extend(decoder.feed(piece + b"\n\n"))
        events.extend(decoder.finish())
    except TurnoutError as exc:
        return events, exc
    raise AssertionError("no error raised")


def ev(payload: dict[str, Any], *, named: bool = True) -> bytes:
    """One SSE event (``event:`` line from the payload's type, as Anthropic sends it)."""
    head = b"event: " + payload["type"].encode() + b"\n" if named else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def message_start(model: str = "claude-test-model", **usage: int) -> bytes:
    """A ``message_start`` event."""
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": model}
    return ev({"type": "message_start", "message": {**msg, "usage": {"input_tokens": 5, "output_tokens": 1, **usage}}})


def text_block(index: int, *pieces: str) -> bytes:
    """A text block with its deltas."""
    out = ev({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
    for p in pieces:
        out += ev({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}})
    return out + ev({"type": "content_block_stop", "index": index})


def tool_block(index: int, call_id: str, name: str, *fragments: str, stop: bool = True) -> bytes:
    """A tool_use block with its ``input_json_delta`` fragments."""
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    out = ev({"type": "content_block_start", "index": index, "content_block": block})
    for f in fragments:
        out += ev(
            {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": f}}
        )
    return out + (ev({"type": "content_block_stop", "index": index}) if stop else b"")


def message_end(stop_reason: str, output_tokens: int = 9, **extra: Any) -> bytes:
    """``message_delta`` with the stop reason, then ``message_stop``."""
    delta = {"stop_reason": stop_reason, "stop_sequence": None, **extra}
    usage = {"output_tokens": output_tokens}
    return ev({"type": "message_delta", "delta": delta, "usage": usage}) + ev({"type": "message_stop"})


# --- recorded fixtures ------------------------------------------------------------------------

BASIC = ChatResponse(
    text="Hello there!",
    usage=Usage(input_tokens=11, output_tokens=6),
    finish_reason="stop",
    model="claude-3-opus-latest",
)
TOOL_USE = ChatResponse(
    text="I'll check the current weather in Paris for you.",
    tool_calls=(ToolCall(id="toolu_01NRLabsLyVHZPKxbKvkfSMn", name="get_weather", arguments='{"location":"Paris"}'),),
    usage=Usage(input_tokens=377, output_tokens=65),
    finish_reason="tool_calls",
    model="claude-sonnet-4-20250514",
)
THINKING = ChatResponse(
    text="925 ÷ 5 = 185",
    reasoning="The previous result was 925. Now I need to divide that by 5.\n\n925 ÷ 5 = 185",
    usage=Usage(input_tokens=69, output_tokens=53),
    finish_reason="stop",
    model="claude-sonnet-4-5-20250929",
)
NO_ARGS = ChatResponse(
    text="I'll update the issue list for you.",
    tool_calls=(ToolCall(id="toolu_01QE1WLsSVp5hy5Q3GmGTmjP", name="updateIssueList", arguments="{}"),),
    usage=Usage(input_tokens=565, output_tokens=48),
    finish_reason="tool_calls",
    model="claude-sonnet-4-5-20250929",
)

CASES: dict[str, tuple[bytes, ChatResponse]] = {
    "stream_basic.sse": (fixture_path("anthropic/stream_basic.sse").read_bytes(), BASIC),
    "stream_tool_use.sse": (fixture_path("anthropic/stream_tool_use.sse").read_bytes(), TOOL_USE),
    "thinking+events": (sse_from_chunks_file("anthropic/stream_thinking_signature.ndjson", events=True), THINKING),
    "thinking": (sse_from_chunks_file("anthropic/stream_thinking_signature.ndjson"), THINKING),
    "no_args+events": (sse_from_chunks_file("anthropic/stream_tool_no_args.ndjson", events=True), NO_ARGS),
    "no_args": (sse_from_chunks_file("anthropic/stream_tool_no_args.ndjson"), NO_ARGS),
}
CASE_IDS = list(CASES)


def crlf(data: bytes) -> bytes:
    """The same stream with CRLF line endings."""
    return data.replace(b"\n", b"\r\n")


@pytest.mark.parametrize("case", CASE_IDS)
def test_fixture_decodes_at_every_two_waysplit_at(case: str) -> None:
    """Each recorded stream decodes to the exact answer however the body is split in two."""
    data, expected = CASES[case]
    for pieces in two_way_splits(data):
        assert collect(decode(pieces)) == expected


@pytest.mark.parametrize("case", ["stream_basic.sse", "stream_tool_use.sse", "thinking", "no_args+events"])
def test_fixture_with_crlf_decodes_at_every_two_waysplit_at(case: str) -> None:
    """CRLF line endings (split anywhere, even inside a CRLF pair) decode to the same answer."""
    data, expected = CASES[case]
    for pieces in two_way_splits(crlf(data), max_points=1500):
        assert collect(decode(pieces)) == expected


@pytest.mark.parametrize("case", CASE_IDS)
def test_fixture_decodes_random_splits_and_bytewise(case: str) -> None:
    """Many-way random splits and one byte per read decode to the same answer."""
    data, expected = CASES[case]
    for pieces in random_splits(data):
        assert collect(decode(pieces)) == expected
    assert collect(decode(bytewise(data))) == expected
    assert collect(decode(bytewise(crlf(data)))) == expected


def test_event_order_tool_call_at_block_stop_then_usage_then_final() -> None:
    """The tool call is emitted once, at its block's stop; usage comes just before the one Final."""
    events = decode([CASES["stream_tool_use.sse"][0]])
    kinds = [type(e) for e in events]
    assert kinds == [TextDelta, TextDelta, ToolCallEvent, UsageEvent, Final]
    assert all(e.text for e in events if isinstance(e, TextDelta))


def test_thinking_deltas_are_reasoning_and_empty_deltas_are_dropped() -> None:
    """thinking_delta → ReasoningDelta (the closing empty one is dropped); signature_delta is not text."""
    events = decode([CASES["thinking+events"][0]])
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    assert len(reasoning) == 9
    assert all(e.text for e in reasoning)
    assert not any("EvQB" in e.text for e in events if isinstance(e, TextDelta | ReasoningDelta))


def test_last_thinking_piece_carries_the_block_signature() -> None:
    """The last ReasoningDelta of a thinking block carries its signature (whole or byte by byte); no other does."""
    data = CASES["thinking+events"][0]
    for pieces in ([data], [data[i : i + 1] for i in range(len(data))]):
        reasoning = [e for e in decode(pieces) if isinstance(e, ReasoningDelta)]
        signed = [e.signature for e in reasoning if e.signature]
        assert len(signed) == 1 and signed[0].startswith("EvQB")
        assert reasoning[-1].signature == signed[0]


@pytest.mark.parametrize("case", CASE_IDS)
def test_truncation_anywhere_before_message_stop_raises(case: str) -> None:
    """A body cut at any byte before message_stop's payload is complete raises StreamTruncated."""
    data, _ = CASES[case]
    end = data.rindex(b"}") + 1  # the end of message_stop's JSON
    for cut in range(end):
        with pytest.raises(StreamTruncated) as info:
            decode([data[:cut]])
        assert info.value.missing_signal == "message_stop"
    assert collect(decode([data[:end]])).finish_reason is not None  # no trailing line break needed


def test_message_delta_with_stop_reason_then_eof_is_truncated() -> None:
    """A stop_reason without message_stop is not a completion."""
    body = (
        message_start()
        + text_block(0, "Hi")
        + ev({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}})
    )
    with pytest.raises(StreamTruncated, match="message_stop"):
        decode([body])


def test_empty_body_is_truncated() -> None:
    """No bytes at all is a truncated stream, not an empty answer."""
    with pytest.raises(StreamTruncated):
        decode([])


def test_pings_comments_and_unknown_events_are_ignored() -> None:
    """Ping events, comment lines and unknown event types change nothing."""
    body = (
        b": keep-alive\n\n"
        + message_start()
        + ev({"type": "ping"})
        + ev({"type": "brand_new_event", "x": 1})
        + text_block(0, "ok")
        + b": another comment\n"
        + message_end("end_turn", 3)
    )
    assert collect(decode([body])) == ChatResponse(
        text="ok", usage=Usage(input_tokens=5, output_tokens=3), finish_reason="stop", model="claude-test-model"
    )


def test_nothing_after_message_stop_counts() -> None:
    """After message_stop the decoder is done; later bytes (even garbage) are not read."""
    decoder = ADAPTER.decoder("m")
    events = decoder.feed(message_start() + text_block(0, "a") + message_end("end_turn") + b"data: {garbage\n\n")
    assert decoder.done
    assert isinstance(events[-1], Final)
    assert decoder.finish() == []


# --- wire samples: errors, refusals, max_tokens, server tools -----------------------------------

OVERLOADED = ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
API_ERROR = b'event: error\ndata: {"type": "error", "error": {"type": "api_error", "message": "Overloaded"}}\n\n'


@pytest.mark.parametrize("error", [OVERLOADED, API_ERROR], ids=["overloaded_error", "api_error"])
def test_midstream_error_event_is_a_retryable_in_band_error(error: bytes) -> None:
    """event: error (overloaded_error / api_error) after output raises a retryable error with its type."""
    events, exc = decode_until_error(message_start() + text_block(0, "Partial") + error)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Partial"]
    assert isinstance(exc, ProviderError) and not isinstance(exc, ProtocolError)
    assert exc.error_class is ErrorClass.RETRYABLE
    assert exc.error_type in ("overloaded_error", "api_error")
    assert exc.status is None
    assert exc.message == "Overloaded"


def test_error_event_without_event_line_is_still_an_error() -> None:
    """The payload's type alone identifies an error event."""
    body = message_start() + ev({"type": "error", "error": {"type": "overloaded_error", "message": "x"}}, named=False)
    with pytest.raises(ProviderError) as info:
        decode([body])
    assert info.value.error_type == "overloaded_error"


def test_raw_json_error_tail_is_that_error_not_a_truncation() -> None:
    """A proxy's raw JSON error body appended to the stream raises that error at end of body."""
    body = message_start() + b'{"type":"error","error":{"type":"api_error","message":"Internal server error"}}'
    with pytest.raises(ProviderError) as info:
        decode([body])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_type == "api_error"


REFUSAL_STREAM = (
    message_start()
    + text_block(0, "I")
    + message_end(
        "refusal", 4, stop_details={"type": "refusal", "category": "cyber", "explanation": "policy violation"}
    )
)


def test_refusal_stop_reason_raises_refusal_error() -> None:
    """stop_reason "refusal" raises RefusalError as soon as message_delta says so."""
    with pytest.raises(RefusalError) as info:
        decode([REFUSAL_STREAM])
    assert info.value.error_class is ErrorClass.REFUSAL
    assert info.value.provider == "anthropic.test"
    assert info.value.model == "claude-test-model"
    assert "policy violation" in info.value.message


MAX_TOKENS_TOOL = (
    message_start()
    + text_block(0, "Let me look that up.")
    + tool_block(1, "toolu_cut", "get_weather", "", '{"city": "Par', stop=False)
    + message_end("max_tokens", 20)
)


def test_max_tokens_with_unfinished_tool_block_is_a_length_finish_without_the_call() -> None:
    """A tool_use cut by max_tokens is never parsed nor emitted; the answer completes with "length"."""
    for pieces in two_way_splits(MAX_TOKENS_TOOL):
        answer = collect(decode(pieces))
        assert answer.text == "Let me look that up."
        assert answer.tool_calls == ()
        assert answer.finish_reason == "length"


def test_model_context_window_exceeded_is_length() -> None:
    """stop_reason model_context_window_exceeded maps to "length"."""
    answer = collect(decode([message_start() + text_block(0, "x") + message_end("model_context_window_exceeded")]))
    assert answer.finish_reason == "length"


@pytest.mark.parametrize(("stop", "finish"), [("stop_sequence", "stop"), ("pause_turn", "stop"), ("end_turn", "stop")])
def test_stop_reasons_map_to_stop(stop: str, finish: str) -> None:
    """end_turn, stop_sequence and pause_turn are ordinary stops."""
    assert collect(decode([message_start() + text_block(0, "x") + message_end(stop)])).finish_reason == finish


SERVER_TOOLS = (
    message_start()
    + ev(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        }
    )
    + ev({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}})
    + ev(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "paris weather"}'},
        }
    )
    + ev({"type": "content_block_stop", "index": 0})
    + ev(
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [{"type": "web_search_result", "title": "Paris", "url": "https://example.org/paris"}],
            },
        }
    )
    + ev({"type": "content_block_stop", "index": 1})
    + text_block(2, "Sunny, ", "22°C.")
    + ev(
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "citations_delta", "citation": {"type": "web_search_result_location"}},
        }
    )
    + message_end("end_turn", 30)
)


def test_server_tool_blocks_are_provider_tool_events_never_tool_calls() -> None:
    """server_tool_use / web_search_tool_result → ProviderToolEvent call/result; no client tool call."""
    events = decode([SERVER_TOOLS])
    tools = [e for e in events if isinstance(e, ProviderToolEvent)]
    assert [(t.name, t.phase) for t in tools] == [("web_search", "call"), ("web_search", "result")]
    assert orjson.loads(tools[0].payload) == {"query": "paris weather"}
    assert orjson.loads(tools[1].payload)[0]["url"] == "https://example.org/paris"
    answer = collect(events)
    assert answer.tool_calls == ()
    assert answer.text == "Sunny, 22°C."
    assert answer.finish_reason == "stop"


def test_usage_counts_cache_reads_and_writes_and_takes_latest_values() -> None:
    """Input counts cache reads and writes; message_delta's repeated counters replace the earlier ones."""
    body = (
        message_start(input_tokens=3, cache_read_input_tokens=100, cache_creation_input_tokens=0)
        + text_block(0, "hi")
        + ev(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {
                    "input_tokens": 4,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 50,
                    "output_tokens": 12,
                },
            }
        )
        + ev({"type": "message_stop"})
    )
    assert collect(decode([body])).usage == Usage(
        input_tokens=154, output_tokens=12, cached_input_tokens=100, cache_write_tokens=50
    )


@pytest.mark.parametrize(
    "bad",
    [
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_de\n\n',
        b"data: [1, 2]\n\n",
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":7}}\n\n',
        b'data: {"type":"content_block_start","index":0}\n\n',
    ],
    ids=["cut_json", "not_an_object", "text_not_a_string", "missing_block"],
)
def test_malformed_event_is_a_retryable_protocol_error(bad: bytes) -> None:
    """Invalid JSON or a payload of the wrong shape raises ProtocolError, never skipped silently."""
    with pytest.raises(ProtocolError) as info:
        decode([message_start() + text_block(0, "x") + bad + message_end("end_turn")])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_class is ErrorClass.RETRYABLE


def test_finished_tool_block_with_invalid_json_is_a_protocol_error() -> None:
    """A tool_use block that was closed must hold valid JSON input."""
    with pytest.raises(ProtocolError):
        decode([message_start() + tool_block(0, "toolu_x", "f", '{"a": ') + message_end("tool_use")])


# --- property: no input makes the decoder hang or raise anything but a TurnoutError ------------

VALID_EVENTS = [
    message_start(),
    text_block(0, "a", "b"),
    tool_block(1, "toolu_1", "f", "", '{"x":', "1}"),
    ev({"type": "ping"}),
    OVERLOADED,
    message_end("end_turn"),
    b": comment\n\n",
]
GARBAGE = [
    b"data: {\n\n",
    b"event: x\n",
    b"\r\n",
    b"data: null\n\n",
    b'data: {"type":"content_block_delta"}\n\n',
    b"\xff",
]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=600), cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_random_bytes_only_raise_turnout_errors(data: bytes, cuts: list[int]) -> None:
    """Random bytes split anywhere never crash the decoder with a non-Turnout exception."""
    ends_in_final_or_turnout_error(decode, split_at(data, cuts))


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.sampled_from(VALID_EVENTS + GARBAGE) | st.binary(max_size=40), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
)
def test_valid_events_mixed_with_garbage_only_raise_turnout_errors(parts: list[bytes], cuts: list[int]) -> None:
    """Real events interleaved with garbage, split anywhere, end in events or a TurnoutError."""
    ends_in_final_or_turnout_error(decode, split_at(b"".join(parts), cuts))


# --- request building ---------------------------------------------------------------------------

PNG = "iVBORw0KGgo="
TOOLS = (
    ToolSpec(
        name="get_weather",
        description="Weather for a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
)
HISTORY = (
    Message.system("You are terse."),
    Message.system("Answer in French."),
    Message.user([TextPart(text="What is in this picture?"), ImagePart(url=f"data:image/png;base64,{PNG}")]),
    Message.assistant(
        "Let me check the weather.",
        tool_calls=[ToolCall(id="toolu_1", name="get_weather", arguments='{"city": "Paris"}')],
    ),
    Message.assistant(tool_calls=[ToolCall(id="toolu_2", name="get_weather", arguments="not json")]),
    Message.tool("toolu_1", "22°C and sunny"),
    Message.tool("toolu_2", "error: bad arguments"),
    Message.user([TextPart(text="And this one?"), ImagePart(url="https://example.org/cat.jpg")]),
)
EXPECTED_MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check the weather."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22°C and sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "error: bad arguments"},
            {"type": "text", "text": "And this one?"},
            {"type": "image", "source": {"type": "url", "url": "https://example.org/cat.jpg"}},
        ],
    },
]
MESSAGE_JSON = orjson.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-model",
        "content": [{"type": "text", "text": "Il fait beau."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 40, "output_tokens": 5},
    }
)


async def test_request_body_path_and_headers(server: RecordingServer, http: HttpClient) -> None:
    """System joined, roles merged, images, tool_use/tool_result, tools, choice, temperature, stops, headers."""
    server.reply(Reply(pieces=[MESSAGE_JSON]))
    adapter = _adapter(server.url, http)
    request = ChatRequest(messages=HISTORY, tools=TOOLS, max_tokens=321, tool_choice="get_weather", stop=("END",))
    await adapter.chat(request, "claude-test-model", temperature=0.2)
    seen = server.requests[0]
    assert seen.method == "POST"
    assert seen.path == "/v1/messages"
    assert seen.query == {}
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["content-type"] == "application/json"
    assert "authorization" not in seen.headers
    assert seen.body == {
        "model": "claude-test-model",
        "max_tokens": 321,
        "system": "You are terse.\n\nAnswer in French.",
        "messages": EXPECTED_MESSAGES,
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }
        ],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "temperature": 0.2,
        "stop_sequences": ["END"],
    }


async def test_minimal_stream_request_defaults(server: RecordingServer, http: HttpClient) -> None:
    """No temperature key when none is given, max_tokens 4096 by default, stream: true, base ending in /v1."""
    server.reply(Reply(headers=SSE, pieces=[CASES["stream_basic.sse"][0]]))
    adapter = _adapter(server.url + "/v1", http)
    await acollect(adapter.stream(ChatRequest.of("Hi"), "claude-test-model"))
    seen = server.requests[0]
    assert seen.path == "/v1/messages"
    assert seen.body == {
        "model": "claude-test-model",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
    }


@pytest.mark.parametrize(
    ("choice", "wire"),
    [("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"})],
)
def test_tool_choice_mapping(choice: str, wire: dict[str, str]) -> None:
    """auto/required/none map to Anthropic's tool_choice objects."""
    body = ADAPTER.build_body(ChatRequest(messages=HISTORY, tools=TOOLS, tool_choice=choice), "m", None, False)
    assert body["tool_choice"] == wire


def test_profile_defaults_prefill_and_extras() -> None:
    """Profile temperature/max_tokens apply; a trailing assistant message is sent as is; provider_extra merges."""
    adapter = _adapter(temperature=0.7, max_tokens=99, provider_extra={"thinking": {"type": "enabled"}})
    request = ChatRequest(messages=(Message.user("Say hi"), Message.assistant("Bonjour, ")))
    body = adapter.build_body(request, "m", None, False)
    assert body["temperature"] == 0.7
    assert body["max_tokens"] == 99
    assert body["messages"][-1] == {"role": "assistant", "content": "Bonjour, "}
    assert body["thinking"] == {"type": "enabled"}
    assert "tools" not in body


# --- real HTTP: answers, errors, refusals ---------------------------------------------------------


async def test_non_stream_answer_from_recorded_message(server: RecordingServer, http: HttpClient) -> None:
    """The recorded Message decodes to its text, usage, finish reason, model and request id."""
    body = fixture_path("anthropic/message_text.json").read_bytes()
    server.reply(Reply(headers={**JSON, "request-id": "req_abc"}, pieces=[body]))
    answer = await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-sonnet-4-5")
    assert answer == ChatResponse(
        text="Hello! I'm doing well, thanks for asking. How are you doing today? "
        "Is there anything I can help you with?",
        usage=Usage(input_tokens=12, output_tokens=29),
        finish_reason="stop",
        model="claude-sonnet-4-5-20250929",
        request_id="req_abc",
    )


async def test_stream_answer_served_in_pieces(server: RecordingServer, http: HttpClient) -> None:
    """A recorded tool-use stream served in small pieces assembles to the expected answer."""
    data, expected = CASES["stream_tool_use.sse"]
    server.reply(Reply(headers=SSE, pieces=[data[i : i + 37] for i in range(0, len(data), 37)]))
    answer = await acollect(_adapter(server.url, http).stream(ChatRequest.of("Weather?"), "claude-sonnet-4"))
    assert answer == expected


async def test_truncated_stream_over_http_raises(server: RecordingServer, http: HttpClient) -> None:
    """A body that ends before message_stop raises StreamTruncated after the text already streamed."""
    data = CASES["stream_basic.sse"][0]
    server.reply(Reply(headers=SSE, pieces=[data[: data.index(b"event: message_delta")]]))
    seen: list[StreamEvent] = []

    async def drain(stream: AsyncIterator[StreamEvent]) -> None:
        async for event in stream:
            seen.append(event)

    with pytest.raises(StreamTruncated):
        await drain(_adapter(server.url, http).stream(ChatRequest.of("Hi"), "claude-3-opus"))
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "Hello there!"


def _error_body(etype: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": etype, "message": message}, "request_id": "req_err"})


async def test_429_with_retry_after_is_rate_limited(server: RecordingServer, http: HttpClient) -> None:
    """429 rate_limit_error + retry-after → rate_limited with the hint, type and request id."""
    body = _error_body("rate_limit_error", "This request would exceed the rate limit for your organization")
    server.reply(Reply(status=429, headers={**JSON, "retry-after": "7", "request-id": "req_hdr"}, pieces=[body]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-test-model")
    exc = info.value
    assert exc.error_class is ErrorClass.RATE_LIMITED
    assert exc.retry_after == 7.0
    assert exc.status == 429
    assert exc.error_type == "rate_limit_error"
    assert exc.request_id == "req_hdr"


async def test_401_is_non_retryable_auth_failure_without_the_key(server: RecordingServer, http: HttpClient) -> None:
    """401 authentication_error → non_retryable, auth_failure; the key never appears in the error."""
    server.reply(Reply(status=401, pieces=[_error_body("authentication_error", f"invalid x-api-key {KEY}")]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-test-model")
    assert info.value.error_class is ErrorClass.NON_RETRYABLE
    assert info.value.auth_failure
    assert info.value.request_id == "req_err"  # from the body when the header is missing
    assert KEY not in str(info.value)


async def test_400_prompt_too_long_is_context_window(server: RecordingServer, http: HttpClient) -> None:
    """The recorded "prompt is too long" 400 is classified context_window, its message kept."""
    body = fixture_path("anthropic/error_400_prompt_too_long.json").read_bytes()
    server.reply(Reply(status=400, pieces=[body]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-test-model")
    assert info.value.error_class is ErrorClass.CONTEXT_WINDOW
    assert info.value.message == "prompt is too long: 205429 tokens > 200000 maximum"
    assert info.value.request_id == "req_011CV5Jab6gR3ZNs9Sj6apiD"


async def test_credit_balance_too_low_is_never_retried(server: RecordingServer, http: HttpClient) -> None:
    """The 400 billing message moves on at once (it is non_retryable)."""
    message = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing."
    server.reply(Reply(status=400, pieces=[_error_body("invalid_request_error", message)]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-test-model")
    assert info.value.error_class in (ErrorClass.NON_RETRYABLE, ErrorClass.RATE_LIMITED_NON_RETRYABLE)
    assert info.value.message == message


@pytest.mark.parametrize("status", [500, 529])
async def test_5xx_json_errors_are_retryable(server: RecordingServer, http: HttpClient, status: int) -> None:
    """500 api_error and 529 overloaded_error are retryable."""
    etype = "api_error" if status == 500 else "overloaded_error"
    server.reply(Reply(status=status, pieces=[_error_body(etype, "Overloaded")]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-test-model")
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert info.value.error_type == etype


async def test_502_html_page_is_retryable_with_short_excerpt(server: RecordingServer, http: HttpClient) -> None:
    """A Cloudflare HTML 502 page becomes a retryable error with a short, tag-free excerpt."""
    page = b"<html><head><title>502 Bad Gateway</title></head><body><center>cloudflare</center></body></html>"
    server.reply(Reply(status=502, headers={"Content-Type": "text/html"}, pieces=[page]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-test-model")
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert "502 Bad Gateway" in info.value.message
    assert "<" not in info.value.message
    assert len(info.value.message) <= 200


async def test_non_stream_refusal_raises(server: RecordingServer, http: HttpClient) -> None:
    """A 200 Message with stop_reason "refusal" raises RefusalError instead of an empty success."""
    body = orjson.dumps({"type": "message", "model": "claude-x", "content": [], "stop_reason": "refusal", "usage": {}})
    server.reply(Reply(pieces=[body]))
    with pytest.raises(RefusalError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "claude-test-model")
    assert info.value.provider == "anthropic.test"


async def test_stream_refusal_over_http_raises(server: RecordingServer, http: HttpClient) -> None:
    """A streamed refusal raises RefusalError through the real stream path."""
    server.reply(Reply(headers=SSE, pieces=[REFUSAL_STREAM]))
    with pytest.raises(RefusalError):
        await acollect(_adapter(server.url, http).stream(ChatRequest.of("Hi"), "claude-test-model"))


# --- streaming and non-streaming agree ------------------------------------------------------------

AGREE_MESSAGE = {
    "id": "msg_2",
    "type": "message",
    "role": "assistant",
    "model": "claude-agree",
    "content": [
        {"type": "thinking", "thinking": "Paris, then Lima.", "signature": "c2ln"},
        {"type": "text", "text": "Checking both cities."},
        {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {}},
    ],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 7, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 3, "output_tokens": 44},
}
AGREE_STREAM = (
    message_start("claude-agree", input_tokens=7, cache_read_input_tokens=20, cache_creation_input_tokens=3)
    + ev(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        }
    )
    + ev({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Paris, "}})
    + ev({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "then Lima."}})
    + ev({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}})
    + ev({"type": "content_block_stop", "index": 0})
    + text_block(1, "Checking ", "both cities.")
    + tool_block(2, "toolu_a", "get_weather", "", '{"city"', ': "Paris"}')
    + tool_block(3, "toolu_b", "get_weather", "")
    + message_end("tool_use", 44)
)


async def test_stream_and_non_stream_agree(server: RecordingServer, http: HttpClient) -> None:
    """The same answer read as a Message and as a stream gives the same ChatResponse."""
    server.reply(Reply(pieces=[orjson.dumps(AGREE_MESSAGE)]), Reply(headers=SSE, pieces=[AGREE_STREAM]))
    adapter = _adapter(server.url, http)
    whole = await adapter.chat(ChatRequest.of("Weather?"), "claude-agree")
    streamed = await acollect(adapter.stream(ChatRequest.of("Weather?"), "claude-agree"))
    assert whole == streamed
    assert whole.usage == Usage(input_tokens=30, output_tokens=44, cached_input_tokens=20, cache_write_tokens=3)
    assert whole.reasoning == "Paris, then Lima."
    assert [c.parsed_arguments() for c in whole.tool_calls] == [{"city": "Paris"}, {}]
    assert whole.finish_reason == "tool_calls"


def test_thinking_blocks_round_trip_in_front_of_tool_use() -> None:
    """Thinking (with its signature) before a tool call is kept on the call and sent back first next turn."""
    answer = collect(decode([AGREE_STREAM]))
    first, second = answer.tool_calls
    assert first.extra == {
        THINKING_KEY: ({"type": "thinking", "thinking": "Paris, then Lima.", "signature": "c2ln"},),
        SIGNER_KEY: "anthropic",
    }
    assert second.extra is None
    history = (
        Message.user("Weather?"),
        Message.assistant(answer.text, tool_calls=answer.tool_calls),
        Message.tool("toolu_a", "sunny"),
        Message.tool("toolu_b", "rainy"),
    )
    body = ADAPTER.build_body(ChatRequest(messages=history), "m", None, False)
    assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert body["messages"][1]["content"][0]["signature"] == "c2ln"
