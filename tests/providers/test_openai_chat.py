"""OpenAI Chat Completions: recorded streams at every split, completion guard, errors, request bodies, HTTP."""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from provider_kit import Reply, bytewise, decoded, fixture_path, make_adapter, random_splits, two_way_splits

from turnout.core.errors import ErrorClass, ProtocolError, ProviderError, RefusalError, StreamTruncated, TurnoutError
from turnout.core.streams import acollect, collect
from turnout.core.types import (
    ChatRequest,
    ChatResponse,
    Final,
    ImagePart,
    Message,
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
from turnout.providers.base import HTTPAdapter

MODEL = "gpt-4o"
KEY = "sk-test-key-123"
TEXT_SSE = "openai/chat_stream_text_include_usage.sse"
LENGTH_SSE = "openai/chat_stream_finish_length.sse"
TOOLS_SSE = "openai/chat_stream_parallel_tool_calls.sse"
REFUSAL_SSE = "openai/chat_stream_refusal.sse"

WEATHER_TEXT = (
    "I'm unable to provide real-time weather updates. To get the current weather in San Francisco, I recommend "
    "checking a reliable weather website or a weather app."
)

# Expected answers, read from the recordings.
EXPECTED: dict[str, ChatResponse] = {
    TEXT_SSE: ChatResponse(
        text=WEATHER_TEXT,
        usage=Usage(input_tokens=14, output_tokens=30),
        finish_reason="stop",
        model="gpt-4o-2024-08-06",
    ),
    LENGTH_SSE: ChatResponse(
        text='{"', usage=Usage(input_tokens=79, output_tokens=1), finish_reason="length", model="gpt-4o-2024-08-06"
    ),
    TOOLS_SSE: ChatResponse(
        tool_calls=(
            ToolCall(
                id="call_JMW1whyEaYG438VE1OIflxA2",
                name="GetWeatherArgs",
                arguments='{"city": "Edinburgh", "country": "GB", "units": "c"}',
            ),
            ToolCall(
                id="call_DNYTawLBoN8fj3KN6qU9N1Ou",
                name="get_stock_price",
                arguments='{"ticker": "AAPL", "exchange": "NASDAQ"}',
            ),
        ),
        usage=Usage(input_tokens=149, output_tokens=60),
        finish_reason="tool_calls",
        model="gpt-4o-2024-08-06",
    ),
}


def adapter(family: str = "openai", uri: str = "http://127.0.0.1:9/v1", **profile: Any) -> HTTPAdapter:
    """An adapter for decoding and body building (no connection is opened)."""
    return make_adapter(HttpClient(), family, uri, **profile)


@functools.cache
def _decoding_adapter(family: str) -> HTTPAdapter:
    return adapter(family)


def decode(
    pieces: list[bytes], *, family: str = "openai", model: str = MODEL, seen: list[StreamEvent] | None = None
) -> list[StreamEvent]:
    """Feed ``pieces`` to a fresh decoder the way the adapter does, and finish it.

    ``seen`` receives the events decoded so far, also when decoding raises.
    """
    decoder = _decoding_adapter(family).decoder(model)
    events: list[StreamEvent] = [] if seen is None else seen
    for piece in pieces:
        events += decoder.feed(piece)
        if decoder.done:
            break
    events += decoder.finish()
    return events


def event_ends(body: bytes) -> list[int]:
    """Offsets just after each SSE event's blank line."""
    ends, pos = [], body.find(b"\n\n")
    while pos >= 0:
        ends.append(pos + 2)
        pos = body.find(b"\n\n", pos + 2)
    return ends


def crlf(body: bytes) -> bytes:
    """The same SSE body with CRLF line endings."""
    return body.replace(b"\n", b"\r\n")


def assert_well_formed(events: list[StreamEvent]) -> None:
    """No empty text, usage right before the single Final, Final last."""
    assert isinstance(events[-1], Final)
    assert sum(isinstance(e, Final) for e in events) == 1
    assert all(e.text for e in events if isinstance(e, TextDelta))
    usages = [i for i, e in enumerate(events) if isinstance(e, UsageEvent)]
    assert usages in ([], [len(events) - 2])


# --- recorded streams ---------------------------------------------------------------------------


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_recorded_stream_at_every_split(rel: str) -> None:
    """Each recording decodes to its exact answer however the body is split (two-way, random, bytewise)."""
    body = fixture_path(rel).read_bytes()
    expected = EXPECTED[rel]
    whole = decode([body])
    assert_well_formed(whole)
    assert collect(whole) == expected
    for pieces in two_way_splits(body):
        assert collect(decode(pieces)) == expected
    for pieces in random_splits(body, runs=20):
        assert collect(decode(pieces)) == expected
    assert collect(decode(bytewise(body))) == expected


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_recorded_stream_with_crlf(rel: str) -> None:
    """CRLF line endings decode the same, also with a CRLF split across reads."""
    body = crlf(fixture_path(rel).read_bytes())
    for pieces in [[body], *two_way_splits(body, max_points=800)]:
        assert collect(decode(pieces)) == EXPECTED[rel]


def test_parallel_tool_calls_arguments_parse() -> None:
    """Interleaved index-keyed fragments assemble into two calls with valid JSON arguments."""
    calls = [e.call for e in decode([fixture_path(TOOLS_SSE).read_bytes()]) if isinstance(e, ToolCallEvent)]
    assert [c.parsed_arguments() for c in calls] == [
        {"city": "Edinburgh", "country": "GB", "units": "c"},
        {"ticker": "AAPL", "exchange": "NASDAQ"},
    ]


def test_tool_calls_are_emitted_when_the_choice_finishes() -> None:
    """Tool-call events come out with the finish chunk, before the usage chunk and [DONE]."""
    body = fixture_path(TOOLS_SSE).read_bytes()
    finish_end = body.index(b'"finish_reason":"tool_calls"')
    finish_end = body.index(b"\n\n", finish_end) + 2
    decoder = adapter().decoder(MODEL)
    events = decoder.feed(body[:finish_end])
    assert [type(e) for e in events] == [ToolCallEvent, ToolCallEvent]
    assert [type(e) for e in decoder.feed(body[finish_end:])] == [UsageEvent, Final]
    assert decoder.done


@pytest.mark.parametrize("use_crlf", [False, True])
def test_refusal_stream_raises_refusal(use_crlf: bool) -> None:
    """Refusal deltas never become text; the finished refusal raises RefusalError at every split."""
    body = fixture_path(REFUSAL_SSE).read_bytes()
    if use_crlf:
        body = crlf(body)
    for pieces in [[body], *two_way_splits(body, max_points=600), bytewise(body)]:
        seen: list[StreamEvent] = []
        with pytest.raises(RefusalError) as info:
            decode(pieces, seen=seen)
        assert not any(isinstance(e, TextDelta) for e in seen)
    assert "I'm sorry, I can't assist with that request." in str(info.value)
    assert info.value.error_class is ErrorClass.REFUSAL
    assert info.value.provider == "openai.test"
    assert info.value.model == MODEL


# --- the completion guard -----------------------------------------------------------------------


@pytest.mark.parametrize("rel", [*sorted(EXPECTED), REFUSAL_SSE])
def test_truncation_at_every_event_boundary(rel: str) -> None:
    """EOF before the finish chunk raises StreamTruncated; EOF after it (no [DONE]) completes."""
    body = fixture_path(rel).read_bytes()
    finish_at = next(i for i in event_ends(body) if i > body.index(b'"finish_reason":"'))
    for cut in [0, 3, *event_ends(body)]:
        pieces = [body[:cut]]
        if cut < finish_at:
            with pytest.raises(StreamTruncated) as info:
                decode(pieces)
            assert info.value.missing_signal == "[DONE] or finish_reason"
            assert info.value.error_class is ErrorClass.RETRYABLE
        elif rel == REFUSAL_SSE:
            with pytest.raises(RefusalError):
                decode(pieces)
        else:
            answer = collect(decode(pieces))
            expected = EXPECTED[rel]
            assert answer.text == expected.text and answer.tool_calls == expected.tool_calls
            assert answer.finish_reason == expected.finish_reason


def test_cut_inside_an_event_is_truncated() -> None:
    """A body cut in the middle of a data line (no finish chunk seen) is truncated."""
    body = fixture_path(TEXT_SSE).read_bytes()
    for cut in range(1, event_ends(body)[3], 37):
        with pytest.raises(StreamTruncated):
            decode([body[:cut]])


def test_done_without_final_line_break_completes() -> None:
    """``data: [DONE]`` at the very end of the body without its line break still completes."""
    body = fixture_path(TEXT_SSE).read_bytes().rstrip(b"\n")
    assert body.endswith(b"data: [DONE]")
    assert collect(decode([body])) == EXPECTED[TEXT_SSE]


def test_done_without_finish_reason_completes() -> None:
    """``[DONE]`` alone is a completion signal."""
    body = b'data: {"model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
    answer = collect(decode([body]))
    assert (answer.text, answer.finish_reason, answer.model) == ("hi", "stop", "m")


def test_done_stops_reading() -> None:
    """After ``[DONE]`` the decoder is done and ignores anything that follows."""
    decoder = adapter().decoder(MODEL)
    events = decoder.feed(b"data: [DONE]\n\ndata: {not json}\n\n")
    assert decoder.done and isinstance(events[-1], Final)
    assert decoder.feed(b"data: garbage\n\n") == [] and decoder.finish() == []


def test_comments_pings_and_blank_data_are_ignored() -> None:
    """Keep-alive comments, ``ping`` events and empty data lines between chunks change nothing."""
    body = fixture_path(TEXT_SSE).read_bytes()
    noisy = body.replace(b"\n\ndata: ", b"\n\n: OPENROUTER PROCESSING\n\nevent: ping\ndata: {}\n\ndata:\n\ndata: ")
    assert collect(decode([noisy])) == EXPECTED[TEXT_SSE]


def test_only_choice_zero_isdecoded() -> None:
    """With n>1, deltas and finish reasons of other choices are ignored."""
    body = (
        b'data: {"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"mine"}}]}\n\n'
        b'data: {"choices":[{"index":1,"delta":{},"finish_reason":"length"}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    )
    answer = collect(decode([body]))
    assert (answer.text, answer.finish_reason) == ("mine", "stop")
    with pytest.raises(StreamTruncated):
        decode([body.rsplit(b"data: ", 1)[0]])


def test_tool_indexes_may_start_above_zero_and_interleave() -> None:
    """Tool calls keyed by sparse indexes, interleaved, assemble in order of appearance."""
    chunks = [
        {"index": 3, "id": "call_a", "type": "function", "function": {"name": "first", "arguments": ""}},
        {"index": 7, "id": "call_b", "type": "function", "function": {"name": "second", "arguments": '{"b"'}},
        {"index": 3, "function": {"arguments": '{"a": 1'}},
        {"index": 7, "function": {"arguments": ": 2}"}},
        {"index": 3, "function": {"arguments": "}"}},
    ]
    body = b"".join(
        b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [c]}}]}) + b"\n\n" for c in chunks
    )
    body += b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
    answer = collect(decode([body]))
    assert [(c.id, c.name, c.parsed_arguments()) for c in answer.tool_calls] == [
        ("call_a", "first", {"a": 1}),
        ("call_b", "second", {"b": 2}),
    ]


def test_tool_call_without_arguments_gets_empty_object() -> None:
    """A call whose arguments never arrive is emitted with ``{}``; a missing id is generated."""
    body = (
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"ping"}}]}}]}\n\n'
        b"data: [DONE]\n\n"
    )
    (call,) = collect(decode([body])).tool_calls
    assert call.name == "ping" and call.arguments == "{}" and call.id.startswith("call_")


def test_tool_call_fragment_without_name_is_malformed() -> None:
    """Arguments for a call that never got a name are a protocol error, not a nameless call."""
    body = (
        b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
    )
    with pytest.raises(ProtocolError):
        decode([body])


# --- in-band errors and malformed events --------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "cls"),
    [
        ({"message": "The server had an error while processing your request.", "type": "server_error"}, "retryable"),
        (
            {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"},
            "rate_limited_non_retryable",
        ),
        ({"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}, "context_window"),
        ({"message": "Rate limit reached for gpt-4o", "type": "tokens", "code": "rate_limit_exceeded"}, "rate_limited"),
    ],
)
def test_in_band_error_after_output(error: dict[str, Any], cls: str) -> None:
    """``data: {"error": ...}`` after some text raises the classified provider error."""
    head = fixture_path(TEXT_SSE).read_bytes()[:800]
    head = head[: head.rindex(b"\n\n") + 2]
    decoder = adapter().decoder(MODEL)
    events = decoder.feed(head)
    assert any(isinstance(e, TextDelta) for e in events)
    with pytest.raises(ProviderError) as info:
        decoder.feed(b"data: " + orjson.dumps({"error": error}) + b"\n\n")
    assert info.value.error_class == cls
    assert info.value.message == error["message"]
    assert info.value.status is None


def test_event_named_error_is_an_error() -> None:
    """An ``event: error`` whose data is the bare error object raises too."""
    with pytest.raises(ProviderError) as info:
        decode([b'event: error\ndata: {"message": "overloaded", "type": "server_error"}\n\n'])
    assert info.value.error_class is ErrorClass.RETRYABLE


def test_raw_json_error_tail_is_an_error() -> None:
    """A proxy's raw JSON error body inside the 200 stream is surfaced at EOF, not reported as a cut."""
    body = b'{\n  "error": {\n    "message": "upstream quota",\n    "code": "insufficient_quota"\n  }\n}\n'
    with pytest.raises(ProviderError) as info:
        decode([body])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_class is ErrorClass.RATE_LIMITED_NON_RETRYABLE


def test_server_ignoring_stream_flag_gives_its_whole_answer() -> None:
    """A 200 whose body is a finished ``chat.completion`` object (stream flag ignored) is that answer."""
    body = fixture_path("openai/chat_completion_text.json").read_bytes()
    expected = _decoding_adapter("openai").parse_response(orjson.loads(body), MODEL)
    events = decode([body])
    assert_well_formed(events)
    assert collect(events) == replace(expected, request_id=None)
    unfinished = orjson.loads(body)
    unfinished["choices"][0]["finish_reason"] = None
    with pytest.raises(StreamTruncated):
        decode([orjson.dumps(unfinished)])


@pytest.mark.parametrize(
    "data",
    [
        b'{"choices": [',
        b"{not json}",
        b"42",
        b'"text"',
        b'{"choices": {"0": 1}}',
        b'{"choices": [{"delta": "x"}]}',
        b'{"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]}',
    ],
)
def test_malformed_event_is_a_protocol_error(data: bytes) -> None:
    """Invalid JSON or a chunk of the wrong shape is a retryable ProtocolError, never skipped."""
    with pytest.raises(ProtocolError) as info:
        decode([b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\ndata: ' + data + b"\n\n"])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_class is ErrorClass.RETRYABLE


_VALID_EVENTS = [fixture_path(TEXT_SSE).read_bytes().split(b"\n\n")[i] + b"\n\n" for i in (0, 1, 2, 31, 32, 33)]


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.one_of(st.sampled_from(_VALID_EVENTS), st.binary(max_size=40)), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_random_bytes_only_raise_turnout_errors(parts: list[bytes], cuts: list[int]) -> None:
    """Valid events mixed with garbage, split anywhere: the decoder ends or raises a TurnoutError."""
    body = b"".join(parts)
    marks = sorted(c % (len(body) + 1) for c in cuts)
    pieces = [body[a:b] for a, b in zip([0, *marks], [*marks, len(body)], strict=True)]
    try:
        events = decode(pieces)
    except TurnoutError:
        return
    assert isinstance(events[-1], Final)


# --- request building ---------------------------------------------------------------------------

IMAGE = "data:image/png;base64,iVBORw0KGgo="
LOOKUP = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
REQUEST = ChatRequest(
    messages=(
        Message.system("Be brief."),
        Message.user((TextPart(text="What is this?"), ImagePart(url=IMAGE, detail="low"))),
        Message(
            role="assistant",
            content="",
            reasoning="private chain of thought",
            tool_calls=(ToolCall(id="call_1", name="lookup", arguments='{"q":"cat"}'),),
        ),
        Message.tool("call_1", "a small feline", name="lookup"),
        Message(role="assistant", content="A cat.", reasoning="not replayed"),
        Message.user("Thanks!"),
    ),
    tools=(LOOKUP,),
    max_tokens=256,
    tool_choice="lookup",
    stop=("END",),
)
EXPECTED_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q":"cat"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "a small feline"},
    {"role": "assistant", "content": "A cat."},
    {"role": "user", "content": "Thanks!"},
]
EXPECTED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]


def sse_reply(body: bytes, pieces: int = 1) -> Reply:
    """A 200 event-stream reply sending ``body`` in ``pieces`` writes."""
    size = max(1, len(body) // pieces + 1)
    return Reply(
        headers={"Content-Type": "text/event-stream"},
        pieces=[body[i : i + size] for i in range(0, len(body), size)],
    )


def json_reply(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A JSON reply."""
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return Reply(status=status, headers={"Content-Type": "application/json", **(headers or {})}, pieces=[raw])


async def test_stream_request_body_path_and_headers(server: Any, http: HttpClient) -> None:
    """A streamed request sends the exact body, path and bearer header."""
    server.reply(sse_reply(fixture_path(TEXT_SSE).read_bytes(), pieces=7))
    a = make_adapter(http, "openai", server.url + "/v1")
    answer = await acollect(a.stream(REQUEST, MODEL, temperature=0.3))
    assert answer == EXPECTED[TEXT_SSE]
    (req,) = server.requests
    assert (req.method, req.path, req.query) == ("POST", "/v1/chat/completions", {})
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.headers["content-type"] == "application/json"
    assert req.body == {
        "model": MODEL,
        "messages": EXPECTED_MESSAGES,
        "tools": EXPECTED_TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "temperature": 0.3,
        "max_completion_tokens": 256,
        "stop": ["END"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_plain_request_leaves_optional_fields_out(server: Any, http: HttpClient) -> None:
    """Without temperature, max tokens, tools or stop those keys are absent; no key means no auth header."""
    server.reply(json_reply(orjson.loads(fixture_path("openai/chat_completion_text.json").read_bytes())))
    a = make_adapter(http, "openai", server.url + "/v1/chat/completions", api_key=None)
    await a.chat(ChatRequest.of("Hi"), MODEL)
    (req,) = server.requests
    assert req.path == "/v1/chat/completions"
    assert "authorization" not in req.headers
    assert req.body == {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_tool_choice_keywords_pass_through(choice: str) -> None:
    """``auto``/``none``/``required`` are sent as strings."""
    body = adapter().build_body(replace(REQUEST, tool_choice=choice), MODEL, None, False)
    assert body["tool_choice"] == choice
    assert "stream" not in body and "temperature" not in body


def test_profile_defaults_and_extras() -> None:
    """Profile temperature / max_tokens apply when the call gives none; provider_extra is merged last."""
    a = adapter(temperature=0.5, max_tokens=99, provider_extra={"seed": 7, "parallel_tool_calls": False})
    body = a.build_body(ChatRequest.of("Hi"), MODEL, None, False)
    assert body["temperature"] == 0.5 and body["max_completion_tokens"] == 99
    assert body["seed"] == 7 and body["parallel_tool_calls"] is False
    assert a.build_body(ChatRequest.of("Hi", max_tokens=5), MODEL, 0.0, False)["temperature"] == 0.0


def test_merge_system_into_user() -> None:
    """``merge_system_into_user`` prepends the system text to the first user message."""
    a = adapter(merge_system_into_user=True)
    msgs = a.build_body(REQUEST, MODEL, None, False)["messages"]
    assert msgs[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "Be brief."}, *EXPECTED_MESSAGES[1]["content"]],
    }
    assert all(m["role"] != "system" for m in msgs)
    plain = a.build_body(ChatRequest.of([Message.system("S"), Message.user("U")]), MODEL, None, False)
    assert plain["messages"] == [{"role": "user", "content": "S\n\nU"}]


def test_text_only_parts_become_a_string() -> None:
    """A user message of text parts only is sent as one string."""
    body = adapter().build_body(
        ChatRequest.of([Message.user([TextPart(text="a"), TextPart(text="b")])]), MODEL, None, False
    )
    assert body["messages"] == [{"role": "user", "content": "ab"}]


def test_capabilities() -> None:
    """Chat Completions declares native tools, vision, streaming and streaming tool events; profiles override."""
    caps = adapter().capabilities(MODEL)
    assert caps.native_tools and caps.vision and caps.streaming and caps.streaming_tool_events
    limited = adapter(vision=False, native_tools=False).capabilities(MODEL)
    assert not limited.vision and not limited.native_tools and not limited.streaming_tool_events


# --- through HTTP -------------------------------------------------------------------------------


async def test_non_stream_answer(server: Any, http: HttpClient) -> None:
    """The recorded chat.completion parses into text, usage, finish reason, model and id."""
    raw = orjson.loads(fixture_path("openai/chat_completion_text.json").read_bytes())
    server.reply(json_reply(raw))
    answer = await make_adapter(http, "openai", server.url + "/v1").chat(REQUEST, MODEL)
    assert answer.text == raw["choices"][0]["message"]["content"]
    assert answer.text.startswith("**Holiday Name:** Galaxy Day")
    assert answer.usage == Usage(input_tokens=16, output_tokens=363, cached_input_tokens=0)
    assert (answer.finish_reason, answer.model) == ("stop", "gpt-4.1-nano-2025-04-14")
    assert answer.request_id == "chatcmpl-D8Z5f52zQqikDBEKQMQoYcWMcWPeU"
    assert server.requests[0].body["max_completion_tokens"] == 256 and "stream" not in server.requests[0].body


def _non_stream_tools_body() -> dict[str, Any]:
    calls = EXPECTED[TOOLS_SSE].tool_calls
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": None,
                    "tool_calls": [
                        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in calls
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 149, "completion_tokens": 60, "total_tokens": 209},
    }


async def test_stream_and_non_stream_agree(server: Any, http: HttpClient) -> None:
    """The same answer streamed (in pieces) and non-streamed gives the same ChatResponse."""
    server.reply(json_reply(_non_stream_tools_body()), sse_reply(fixture_path(TOOLS_SSE).read_bytes(), pieces=5))
    a = make_adapter(http, "openai", server.url + "/v1")
    whole = await a.chat(REQUEST, MODEL)
    streamed = await acollect(a.stream(REQUEST, MODEL))
    assert replace(whole, request_id=None) == streamed == EXPECTED[TOOLS_SSE]


async def test_truncated_stream_over_http(server: Any, http: HttpClient) -> None:
    """A stream whose connection closes before the finish chunk raises StreamTruncated after the text."""
    body = fixture_path(TEXT_SSE).read_bytes()
    server.reply(sse_reply(body[: event_ends(body)[10]], pieces=3))
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async for event in make_adapter(http, "openai", server.url + "/v1").stream(REQUEST, MODEL):
            seen.append(event)

    with pytest.raises(StreamTruncated):
        await consume()
    assert seen and all(isinstance(e, TextDelta) for e in seen)


async def test_stream_in_band_error_over_http(server: Any, http: HttpClient) -> None:
    """A mid-stream ``{"error": ...}`` event ends the stream with a retryable provider error."""
    body = fixture_path(TEXT_SSE).read_bytes()
    body = body[: event_ends(body)[4]] + (
        b'data: {"error": {"message": "The server had an error while processing your request. Sorry about that!", '
        b'"type": "server_error"}}\n\n'
    )
    server.reply(sse_reply(body, pieces=2))
    with pytest.raises(ProviderError) as info:
        await acollect(make_adapter(http, "openai", server.url + "/v1").stream(REQUEST, MODEL))
    assert info.value.error_class is ErrorClass.RETRYABLE and "Sorry about that" in info.value.message


RATE_LIMIT = {
    "error": {
        "message": "Rate limit reached for gpt-4.1 in organization org-x on tokens per min (TPM): Limit 30000, "
        "Used 28039, Requested 3906. Please try again in 3.89s.",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


@pytest.mark.parametrize("stream", [False, True])
async def test_http_error_statuses(server: Any, http: HttpClient, stream: bool) -> None:
    """Error responses are classified from their real bodies, for chat and stream alike."""
    html = (
        b"<html><head><title>api.openai.com | 502: Bad gateway</title></head>"
        b"<body><center>cloudflare</center></body></html>"
    )
    auth = {
        "error": {
            "message": f"Incorrect API key provided: {KEY}. You can find your API key at https://platform.openai.com.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    server.reply(
        json_reply(RATE_LIMIT, 429, {"Retry-After": "7", "x-request-id": "req_abc"}),
        json_reply(auth, 401),
        json_reply(fixture_path("openai/error_400_context_length_exceeded.json").read_bytes(), 400),
        json_reply(fixture_path("openai/error_400_unsupported_parameter.json").read_bytes(), 400),
        Reply(status=502, headers={"Content-Type": "text/html"}, pieces=[html]),
    )
    a = make_adapter(http, "openai", server.url + "/v1")

    async def once() -> ChatResponse:
        return await acollect(a.stream(REQUEST, MODEL)) if stream else await a.chat(REQUEST, MODEL)

    async def call() -> ProviderError:
        with pytest.raises(ProviderError) as info:
            await once()
        return info.value

    limited = await call()
    assert (limited.error_class, limited.status, limited.retry_after) == (ErrorClass.RATE_LIMITED, 429, 7.0)
    assert limited.error_code == "rate_limit_exceeded" and limited.request_id == "req_abc"
    dead = await call()
    assert dead.error_class is ErrorClass.NON_RETRYABLE and dead.auth_failure and dead.status == 401
    assert KEY not in str(dead) and KEY not in dead.message
    context = await call()
    assert context.error_class is ErrorClass.CONTEXT_WINDOW and context.error_code == "context_length_exceeded"
    unsupported = await call()
    assert unsupported.error_class is ErrorClass.NON_RETRYABLE and unsupported.error_code == "unsupported_parameter"
    assert "max_completion_tokens" in unsupported.message
    gateway = await call()
    assert gateway.error_class is ErrorClass.RETRYABLE and gateway.status == 502
    assert "502: Bad gateway" in gateway.message and "<" not in gateway.message and len(gateway.message) <= 200


async def test_non_stream_refusal(server: Any, http: HttpClient) -> None:
    """``message.refusal`` in a non-stream answer raises RefusalError instead of an empty success."""
    body = _non_stream_tools_body()
    body["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "I'm sorry, I can't help."}
    body["choices"][0]["finish_reason"] = "stop"
    server.reply(json_reply(body), sse_reply(fixture_path(REFUSAL_SSE).read_bytes(), pieces=4))
    a = make_adapter(http, "openai", server.url + "/v1")
    with pytest.raises(RefusalError, match=r"I'm sorry, I can't help\."):
        await a.chat(REQUEST, MODEL)
    with pytest.raises(RefusalError, match="can't assist"):
        await acollect(a.stream(REQUEST, MODEL))


async def test_non_stream_malformed_body(server: Any, http: HttpClient) -> None:
    """A 200 that is not JSON, or has no choices, is a ProtocolError; a 200 error body is classified."""
    server.reply(
        Reply(pieces=[b"<html>oops</html>"]),
        json_reply({"object": "chat.completion", "choices": []}),
        json_reply({"error": {"message": "The server had an error", "type": "server_error"}}),
    )
    a = make_adapter(http, "openai", server.url + "/v1")
    for _ in range(2):
        with pytest.raises(ProtocolError):
            await a.chat(REQUEST, MODEL)
    with pytest.raises(ProviderError) as info:
        await a.chat(REQUEST, MODEL)
    assert info.value.error_class is ErrorClass.RETRYABLE and not isinstance(info.value, ProtocolError)


# --- the inline path for plain text chunks decodes what the general path decodes ---------------------------

_VALUES = [None, "", "hi", "<b>", 0, "0", [], {}, [{"type": "text", "text": "p"}]]
_GONE = "<gone>"  # a change that deletes the key


def _perturbed(plain: dict[str, Any], changes: list[tuple[str, str, Any]]) -> Any:
    """``plain`` with each ``(where, key, value)`` applied to it, its first choice, or that choice's delta/message.

    A change whose place is gone (an earlier change removed or replaced it) is skipped.
    """
    obj: Any = orjson.loads(orjson.dumps(plain))
    for where, key, value in changes:
        target = obj
        if where not in ("chunk", "answer"):
            choices = obj.get("choices") if isinstance(obj, dict) else None
            target = choices[0] if isinstance(choices, list) and choices else None
            if where != "choice":
                target = target.get(where) if isinstance(target, dict) else None
        if not isinstance(target, dict):
            continue
        if value == _GONE:
            target.pop(key, None)
        else:
            target[key] = orjson.loads(orjson.dumps(value))  # a copy: the sampled values are shared
    return obj


_CHANGES = st.lists(
    st.one_of(
        st.tuples(
            st.just("chunk"),
            st.sampled_from(["choices", "model", "usage", "x_groq", "error", "object", "obfuscation"]),
            st.sampled_from(
                [*_VALUES, _GONE, "m-2", {"message": "boom"}, "chat.completion.done", {"usage": {"prompt_tokens": 3}}]
            ),
        ),
        st.tuples(
            st.just("choice"),
            st.sampled_from(["index", "delta", "finish_reason"]),
            st.sampled_from([*_VALUES, _GONE, 1, "stop", "length"]),
        ),
        st.tuples(
            st.just("delta"),
            st.sampled_from(["content", "role", "refusal", "reasoning_content", "tool_calls"]),
            st.sampled_from([*_VALUES, _GONE, "assistant"]),
        ),
    ),
    max_size=2,
)
_CHUNKS = st.one_of(
    st.builds(
        _perturbed,
        st.builds(
            lambda text, model: {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
            },
            st.sampled_from(["", "hi", "a <b>"]),
            st.sampled_from(["m-1", "m-2"]),
        ),
        _CHANGES,
    ),
    st.sampled_from(_VALUES),
    # payloads that are not JSON objects as they stand: the end, blanks, padded or broken JSON
    st.sampled_from([b"[DONE]", b"", b"  ", b' {"choices": []}', b'{"choices": [', b"[DONE] x"]),
)


def _payload(chunk: Any) -> bytes:
    return chunk if isinstance(chunk, bytes) else orjson.dumps(chunk)


def _by_object(chunks: list[Any], events: list[StreamEvent]) -> None:
    """The general path's events for ``chunks`` (each parsed already, or raw bytes), then ``[DONE]``."""
    decoder: Any = adapter().decoder(MODEL)
    for chunk in chunks:
        if decoder._event("", chunk if isinstance(chunk, bytes) else orjson.dumps(chunk), events):
            return
    decoder._event("", b"[DONE]", events)


def _plain(**changes: Any) -> dict[str, Any]:
    chunk = {"model": "m-1", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
    return {**chunk, **changes}


@settings(max_examples=400, deadline=None)
@given(st.lists(_CHUNKS, max_size=6), st.booleans())
@example([_plain(object="chat.completion.done")], False)
@example([_plain(model=None), _plain(model=None), _plain(model="m-2")], True)
@example([_plain(usage=None), _plain(usage=None), _plain(usage={"prompt_tokens": 3})], True)
@example([_plain(object="chat.completion.chunk"), _plain(object="chat.completion.done")], True)
@example([_plain(), _plain(x_groq={"usage": {"prompt_tokens": 3}}), _plain(error={"message": "boom"})], True)
@example([_plain(model=[]), _plain(model=[]), _plain(object={})], True)
@example([_plain(), b"", b"[DONE]", _plain(model="m-2")], True)
@example([_plain(x_groq={"usage": {"prompt_tokens": 3, "completion_tokens": 1}})], False)
@example([_plain(usage={"prompt_tokens": 3, "completion_tokens": 1})], False)
@example([_plain(model="m-1"), _plain(model="m-2")], False)
@example([_plain(choices=[{"index": 0, "delta": {"content": "hi"}, "finish_reason": "length"}])], False)
@example([_plain(choices=[{"index": 0, "delta": {"content": [{"type": "text", "text": "p"}]}}])], False)
@example([_plain(choices=[{"index": 1, "delta": {"content": "hi"}}])], False)
@example([_plain(choices=[{"index": 0, "delta": {"role": "assistant", "content": "hi", "refusal": "no"}}])], False)
@example([_plain(choices=[{"index": 0, "delta": {"role": "assistant", "content": "hi", "tool_calls": []}}])], False)
def test_fed_chunks_decode_as_each_chunk_does(chunks: list[Any], whole: bool) -> None:
    """Every chunk shape fed as SSE gives the events ``_object`` gives it, one read per event or all in one."""
    events_wire = [b"data: " + _payload(chunk) + b"\n\n" for chunk in chunks] + [b"data: [DONE]\n\n"]

    def by_feed(events: list[StreamEvent]) -> None:
        decoder: Any = adapter().decoder(MODEL)
        for read in [b"".join(events_wire)] if whole else events_wire:
            events += decoder.feed(read)
        events += decoder.finish()

    assert decoded(by_feed) == decoded(functools.partial(_by_object, chunks))


@settings(max_examples=300, deadline=None)
@given(st.lists(_CHUNKS, max_size=10), st.lists(st.integers(min_value=0, max_value=11), max_size=4))
def test_chunks_read_in_any_grouping_decode_as_the_general_path_does(chunks: list[Any], cuts: list[int]) -> None:
    """Events grouped into reads anyhow give ``_object``'s events."""
    wire = [b"data: " + _payload(chunk) + b"\n\n" for chunk in chunks] + [b"data: [DONE]\n\n"]
    bounds = sorted({0, len(wire), *(min(c, len(wire)) for c in cuts)})

    def by_feed(events: list[StreamEvent]) -> None:
        decoder: Any = adapter().decoder(MODEL)
        for start, end in itertools.pairwise(bounds):
            events += decoder.feed(b"".join(wire[start:end]))
        events += decoder.finish()

    assert decoded(by_feed) == decoded(functools.partial(_by_object, chunks))
