"""OpenAI Responses adapter (and Azure's): request body, event decoding, completion guard, refusals, errors."""

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

from turnout.core.errors import ErrorClass, ProtocolError, ProviderError, RefusalError, StreamTruncated
from turnout.core.streams import acollect, collect
from turnout.core.types import (
    ChatRequest,
    ChatResponse,
    Final,
    ImagePart,
    Message,
    OpenAITools,
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
from turnout.providers.openai_responses import OpenAIResponsesAdapter

KEY = "sk-proj-test-key-0123456789"
JSON = {"Content-Type": "application/json"}
SSE = {"Content-Type": "text/event-stream"}
SIGNAL = "response.completed or response.incomplete"


def _adapter(
    uri: str = "http://127.0.0.1:9/v1", http: HttpClient | None = None, family: str = "openai", **profile: Any
) -> OpenAIResponsesAdapter:
    adapter = make_adapter(http or HttpClient(), family, uri, api_key=KEY, wire_api="responses", **profile)
    assert isinstance(adapter, OpenAIResponsesAdapter)
    return adapter


ADAPTER = _adapter()


def decode(pieces: Iterable[bytes]) -> list[StreamEvent]:
    """Run the real decoder over ``pieces`` and return every event (``finish`` included)."""
    decoder = ADAPTER.decoder("gpt-test")
    events: list[StreamEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    events.extend(decoder.finish())
    return events


def ev(etype: str, *, named: bool = True, **fields: Any) -> bytes:
    """One Responses SSE event (``event:`` line plus ``data:`` with the same type)."""
    head = b"event: " + etype.encode() + b"\n" if named else b""
    return head + b"data: " + orjson.dumps({"type": etype, **fields}) + b"\n\n"


def response(status: str = "in_progress", **fields: Any) -> dict[str, Any]:
    """A ``response`` object."""
    return {"id": "resp_1", "object": "response", "status": status, "model": "gpt-test-model", **fields}


USAGE = {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 12}, "output_tokens": 9}
CREATED = ev("response.created", response=response())


def message_events(*deltas: str, index: int = 0) -> bytes:
    """A message output item with its text deltas."""
    item = {"id": "msg_1", "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
    common = {"item_id": "msg_1", "output_index": index, "content_index": 0}
    out = ev("response.output_item.added", output_index=index, item=item)
    for d in deltas:
        out += ev("response.output_text.delta", delta=d, **common)
    text = "".join(deltas)
    done = {**item, "status": "completed", "content": [{"type": "output_text", "text": text}]}
    return (
        out
        + ev("response.output_text.done", text=text, **common)
        + ev("response.output_item.done", output_index=index, item=done)
    )


def call_events(index: int, item_id: str, call_id: str, name: str, *deltas: str) -> bytes:
    """A function_call output item with its argument deltas."""
    item = {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "", "call_id": call_id}
    item["name"] = name
    out = ev("response.output_item.added", output_index=index, item=item)
    for d in deltas:
        out += ev("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=d)
    args = "".join(deltas)
    out += ev("response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=args)
    return out + ev(
        "response.output_item.done", output_index=index, item={**item, "status": "completed", "arguments": args}
    )


# --- recorded fixtures ------------------------------------------------------------------------

TEXT = ChatResponse(
    text="Why did the scarecrow win an award?\n\nBecause he was outstanding in his field!",
    usage=Usage(input_tokens=11, output_tokens=18),
    finish_reason="stop",
    model="gpt-4o-mini-2024-07-18",
)
CALL = ChatResponse(
    tool_calls=(
        ToolCall(id="call_H5DxLSFnsGhiROnUiDHmgyc8", name="weather", arguments='{"location":"San Francisco"}'),
    ),
    usage=Usage(input_tokens=45, output_tokens=24),
    finish_reason="tool_calls",
    model="gpt-5.1",
)
CASES: dict[str, tuple[bytes, ChatResponse]] = {
    "responses_stream_text.sse": (fixture_path("openai/responses_stream_text.sse").read_bytes(), TEXT),
    "azure_call+events": (sse_from_chunks_file("azure/responses_stream_function_call.ndjson", events=True), CALL),
    "azure_call": (sse_from_chunks_file("azure/responses_stream_function_call.ndjson"), CALL),
}
CASE_IDS = list(CASES)
QUOTA_CASES = {
    "events": sse_from_chunks_file("openai/responses_stream_error_insufficient_quota.ndjson", events=True),
    "no_events": sse_from_chunks_file("openai/responses_stream_error_insufficient_quota.ndjson"),
}


def crlf(data: bytes) -> bytes:
    """The same stream with CRLF line endings."""
    return data.replace(b"\n", b"\r\n")


@pytest.mark.parametrize("case", CASE_IDS)
def test_fixture_decodes_at_every_two_waysplit_at(case: str) -> None:
    """Each recorded stream decodes to the exact answer however the body is split in two."""
    data, expected = CASES[case]
    for pieces in two_way_splits(data, max_points=2500):
        assert collect(decode(pieces)) == expected


@pytest.mark.parametrize("case", ["responses_stream_text.sse", "azure_call"])
def test_fixture_with_crlf_decodes_at_every_two_waysplit_at(case: str) -> None:
    """CRLF line endings (split anywhere, even inside a CRLF pair) decode to the same answer."""
    data, expected = CASES[case]
    for pieces in two_way_splits(crlf(data), max_points=2500):
        assert collect(decode(pieces)) == expected


@pytest.mark.parametrize("case", CASE_IDS)
def test_fixture_decodes_random_splits_and_bytewise(case: str) -> None:
    """Many-way random splits and one byte per read decode to the same answer."""
    data, expected = CASES[case]
    for pieces in random_splits(data):
        assert collect(decode(pieces)) == expected
    assert collect(decode(bytewise(data))) == expected
    assert collect(decode(bytewise(crlf(data)))) == expected


def test_function_call_is_emitted_once_at_output_item_done() -> None:
    """The recorded call is one ToolCallEvent (at output_item.done), then usage, then the one Final."""
    events = decode([CASES["azure_call+events"][0]])
    assert [type(e) for e in events] == [ToolCallEvent, UsageEvent, Final]


@pytest.mark.parametrize("case", CASE_IDS)
def test_truncation_before_the_terminal_event_raises(case: str) -> None:
    """A body cut anywhere before the terminal event's JSON is complete raises StreamTruncated."""
    data, _ = CASES[case]
    end = data.rindex(b"}") + 1
    boundaries = {i + 2 for i in range(len(data)) if data.startswith(b"\n\n", i) and i + 2 < end}
    for cut in sorted({0, *boundaries, *range(0, end, 7), end - 1}):
        with pytest.raises(StreamTruncated) as info:
            decode([data[:cut]])
        assert info.value.missing_signal == SIGNAL
    assert collect(decode([data[:end]])) == CASES[case][1]


@pytest.mark.parametrize("case", list(QUOTA_CASES))
def test_recorded_insufficient_quota_error_event(case: str) -> None:
    """The recorded error event (nested shape) is rate_limited_non_retryable at every split."""
    data = QUOTA_CASES[case]
    for pieces in two_way_splits(data, max_points=600):
        with pytest.raises(ProviderError) as info:
            decode(pieces)
        exc = info.value
        assert not isinstance(exc, ProtocolError)
        assert exc.error_class is ErrorClass.RATE_LIMITED_NON_RETRYABLE
        assert exc.error_code == "insufficient_quota"
        assert exc.error_type == "insufficient_quota"
        assert exc.message.startswith("You exceeded your current quota")


# --- wire samples -----------------------------------------------------------------------------

INCOMPLETE = (
    CREATED
    + message_events("Once upon", " a time")
    + ev(
        "response.incomplete",
        response=response("incomplete", incomplete_details={"reason": "max_output_tokens"}, usage=USAGE),
    )
)


def test_incomplete_max_output_tokens_completes_with_length() -> None:
    """response.incomplete (max_output_tokens) is a complete answer with finish_reason "length"."""
    for pieces in two_way_splits(INCOMPLETE):
        assert collect(decode(pieces)) == ChatResponse(
            text="Once upon a time",
            usage=Usage(input_tokens=30, output_tokens=9, cached_input_tokens=12),
            finish_reason="length",
            model="gpt-test-model",
        )


def test_incomplete_drops_an_unfinished_function_call() -> None:
    """A function call still open when the response is cut by max_output_tokens is not emitted."""
    item = {"id": "fc_1", "type": "function_call", "arguments": "", "call_id": "call_1", "name": "f"}
    body = (
        CREATED
        + ev("response.output_item.added", output_index=0, item=item)
        + ev("response.function_call_arguments.delta", item_id="fc_1", output_index=0, delta='{"a": ')
        + ev("response.incomplete", response=response("incomplete", incomplete_details={"reason": "max_output_tokens"}))
    )
    answer = collect(decode([body]))
    assert answer.tool_calls == ()
    assert answer.finish_reason == "length"


def test_incomplete_content_filter_is_a_refusal() -> None:
    """response.incomplete with reason content_filter raises RefusalError."""
    body = (
        CREATED
        + message_events("Sure")
        + ev("response.incomplete", response=response("incomplete", incomplete_details={"reason": "content_filter"}))
    )
    with pytest.raises(RefusalError):
        decode([body])


REFUSAL_ITEM = {"id": "msg_r", "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
REFUSAL = (
    CREATED
    + ev("response.output_item.added", output_index=0, item=REFUSAL_ITEM)
    + ev("response.content_part.added", item_id="msg_r", output_index=0, content_index=0, part={"type": "refusal"})
    + ev("response.refusal.delta", item_id="msg_r", output_index=0, content_index=0, delta="I'm sorry, ")
    + ev("response.refusal.delta", item_id="msg_r", output_index=0, content_index=0, delta="I can't help.")
    + ev("response.refusal.done", item_id="msg_r", output_index=0, content_index=0, refusal="I'm sorry, I can't help.")
    + ev("response.completed", response=response("completed", usage=USAGE))
)


def test_refusal_raises_and_is_never_text() -> None:
    """refusal.delta fragments raise RefusalError with the refusal text; no TextDelta is emitted."""
    decoder = ADAPTER.decoder("gpt-test")
    seen: list[StreamEvent] = []

    def feed_all() -> None:
        for piece in REFUSAL.split(b"\n\n"):
            seen.extend(decoder.feed(piece + b"\n\n"))

    with pytest.raises(RefusalError) as info:
        feed_all()
    assert "I'm sorry, I can't help." in info.value.message
    assert info.value.error_class is ErrorClass.REFUSAL
    assert not any(isinstance(e, TextDelta) for e in seen)


def test_refusal_cut_before_done_is_still_a_refusal() -> None:
    """A stream that ended after refusal deltas is a refusal, not a retryable truncation."""
    with pytest.raises(RefusalError):
        decode([REFUSAL[: REFUSAL.index(b"event: response.refusal.done")]])


FAILED = CREATED + ev(
    "response.failed",
    response=response(
        "failed",
        error={"code": "server_error", "message": "The server had an error while processing your request."},
    ),
)


def test_response_failed_server_error_is_retryable() -> None:
    """response.failed with server_error is a retryable in-band error carrying the code."""
    with pytest.raises(ProviderError) as info:
        decode([FAILED])
    assert not isinstance(info.value, ProtocolError)
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert info.value.error_code == "server_error"
    assert info.value.status is None


def test_flat_error_event_shape() -> None:
    """The SDK's flat error event ({type:error, code, message}) is parsed too."""
    body = CREATED + ev(
        "error", code="rate_limit_exceeded", message="Rate limit reached for gpt-4.1 on tokens per min", param=None
    )
    with pytest.raises(ProviderError) as info:
        decode([body])
    assert info.value.error_class is ErrorClass.RATE_LIMITED
    assert info.value.error_code == "rate_limit_exceeded"


def test_raw_json_error_tail_is_that_error() -> None:
    """A proxy's raw JSON error body after the events raises that error, not a truncation."""
    body = CREATED + b'{"error":{"message":"upstream failed","type":"server_error","code":null}}'
    with pytest.raises(ProviderError) as info:
        decode([body])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_type == "server_error"


def test_events_without_event_lines_decode_from_type() -> None:
    """Payloads without ``event:`` lines decode from their ``type`` alone; comments are skipped."""
    body = (
        b": keep-alive\n\n"
        + ev("response.created", named=False, response=response())
        + ev("response.output_text.delta", named=False, delta="hi", item_id="m", output_index=0, content_index=0)
        + ev("response.unknown_future_event", named=False, x=1)
        + ev("response.completed", named=False, response=response("completed", usage=USAGE))
    )
    assert collect(decode([body])) == ChatResponse(
        text="hi",
        usage=Usage(input_tokens=30, output_tokens=9, cached_input_tokens=12),
        finish_reason="stop",
        model="gpt-test-model",
    )


def test_nothing_after_the_terminal_event_counts() -> None:
    """After response.completed the decoder is done; later garbage is not read."""
    decoder = ADAPTER.decoder("m")
    events = decoder.feed(CREATED + ev("response.completed", response=response("completed")) + b"data: {x\n\n")
    assert decoder.done
    assert isinstance(events[-1], Final)
    assert decoder.finish() == []


def test_provider_executed_tools_are_provider_tool_events() -> None:
    """web_search_call / code_interpreter_call items → ProviderToolEvent call + result, never tool calls."""
    search = {"id": "ws_1", "type": "web_search_call", "status": "completed"}
    search["action"] = {"type": "search", "query": "paris weather"}
    code = {
        "id": "ci_1",
        "type": "code_interpreter_call",
        "code": "print(1)",
        "outputs": [{"type": "logs", "logs": "1"}],
    }
    body = (
        CREATED
        + ev("response.output_item.added", output_index=0, item={**search, "status": "in_progress"})
        + ev("response.web_search_call.completed", output_index=0, item_id="ws_1")
        + ev("response.output_item.done", output_index=0, item=search)
        + ev("response.output_item.done", output_index=1, item=code)
        + message_events("Sunny.", index=2)
        + ev("response.completed", response=response("completed"))
    )
    events = decode([body])
    tools = [e for e in events if isinstance(e, ProviderToolEvent)]
    assert [(t.name, t.phase) for t in tools] == [
        ("web_search", "call"),
        ("web_search", "result"),
        ("code_interpreter", "call"),
        ("code_interpreter", "result"),
    ]
    assert orjson.loads(tools[0].payload)["query"] == "paris weather"
    assert tools[2].payload == "print(1)"
    answer = collect(events)
    assert answer.tool_calls == ()
    assert answer.finish_reason == "stop"
    assert answer.text == "Sunny."


@pytest.mark.parametrize(
    "bad",
    [
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"gar\n\n',
        b"data: 42\n\n",
        b'data: {"type":"response.output_text.delta","delta":null}\n\n',
        b'data: {"type":"response.output_item.added"}\n\n',
    ],
    ids=["cut_json", "not_an_object", "delta_not_a_string", "missing_item"],
)
def test_malformed_event_is_a_retryable_protocol_error(bad: bytes) -> None:
    """Invalid JSON or a payload of the wrong shape raises ProtocolError, never skipped silently."""
    with pytest.raises(ProtocolError) as info:
        decode([CREATED + bad + ev("response.completed", response=response("completed"))])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_class is ErrorClass.RETRYABLE


def test_empty_body_is_truncated() -> None:
    """No bytes at all is a truncated stream."""
    with pytest.raises(StreamTruncated):
        decode([])


# --- property: no input makes the decoder hang or raise anything but a TurnoutError ------------

VALID_EVENTS = [
    CREATED,
    message_events("a", "b"),
    call_events(1, "fc_1", "call_1", "f", '{"x":', "1}"),
    ev("response.reasoning_summary_text.delta", item_id="rs", summary_index=0, delta="hm"),
    ev("response.refusal.delta", delta="no"),
    ev("response.completed", response=response("completed", usage=USAGE)),
    ev("error", error={"type": "server_error", "message": "x"}),
    b": comment\n\n",
]
GARBAGE = [b"data: {\n\n", b"event: x\n", b"\r\n", b"data: null\n\n", b'data: {"type":"response.completed"}\n\n']


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

PNG_URL = "data:image/png;base64,iVBORw0KGgo="
TOOLS = (
    ToolSpec(
        name="get_weather",
        description="Weather for a city",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
)
FLAT_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": False,
}
HISTORY = (
    Message.system("You are terse."),
    Message.system("Answer in French."),
    Message.user([TextPart(text="What is in this picture?"), ImagePart(url=PNG_URL)]),
    Message.assistant(
        "Let me check the weather.",
        tool_calls=[ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')],
    ),
    Message.tool("call_1", "22°C and sunny"),
    Message.user([TextPart(text="And this one?"), ImagePart(url="https://example.org/cat.jpg", detail="low")]),
)
EXPECTED_INPUT = [
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": PNG_URL, "detail": "auto"},
        ],
    },
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check the weather."}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "22°C and sunny"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "And this one?"},
            {"type": "input_image", "image_url": "https://example.org/cat.jpg", "detail": "low"},
        ],
    },
]
RESPONSE_JSON = orjson.dumps(
    response(
        "completed",
        output=[
            {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Il fait beau.", "annotations": []}],
            }
        ],
        usage=USAGE,
    )
)


async def test_request_body_path_and_headers(server: RecordingServer, http: HttpClient) -> None:
    """instructions, input items, images, function_call(+output), flat tools, choice, limits and Bearer auth."""
    server.reply(Reply(pieces=[RESPONSE_JSON]))
    adapter = _adapter(server.url + "/v1", http)
    request = ChatRequest(messages=HISTORY, tools=TOOLS, max_tokens=321, tool_choice="get_weather")
    await adapter.chat(request, "gpt-test-model", temperature=0.2)
    seen = server.requests[0]
    assert seen.method == "POST"
    assert seen.path == "/v1/responses"
    assert seen.query == {}
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body == {
        "model": "gpt-test-model",
        "instructions": "You are terse.\n\nAnswer in French.",
        "input": EXPECTED_INPUT,
        "tools": [FLAT_TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 321,
        "temperature": 0.2,
        "store": False,
    }


async def test_minimal_stream_request(server: RecordingServer, http: HttpClient) -> None:
    """No temperature or max_output_tokens when none is given; stream: true; store: false."""
    server.reply(Reply(headers=SSE, pieces=[CASES["responses_stream_text.sse"][0]]))
    await acollect(_adapter(server.url + "/v1", http).stream(ChatRequest.of("Hi"), "gpt-test-model"))
    assert server.requests[0].body == {
        "model": "gpt-test-model",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "store": False,
        "stream": True,
    }


@pytest.mark.parametrize("path", ["/openai", "/openai/deployments/my-deploy"])
async def test_azure_request_uses_api_key_api_version_and_deployment(
    server: RecordingServer, http: HttpClient, path: str
) -> None:
    """Azure: api-key header, resource-scoped /openai/responses with api-version, deployment as model."""
    server.reply(Reply(pieces=[RESPONSE_JSON]))
    adapter = _adapter(server.url + path, http, family="azure", deployment="my-deploy")
    await adapter.chat(ChatRequest.of("Hi"), "gpt-4o")
    seen = server.requests[0]
    assert seen.path == "/openai/responses"
    assert seen.query == {"api-version": "2025-04-01-preview"}
    assert seen.headers["api-key"] == KEY
    assert "authorization" not in seen.headers
    assert seen.body["model"] == "my-deploy"


def test_azure_explicit_api_version_is_kept() -> None:
    """A profile's own api_version is used as given."""
    adapter = _adapter("https://r.openai.azure.com/openai", family="azure", api_version="2025-05-01-preview")
    assert adapter.url("m", False) == "https://r.openai.azure.com/openai/responses?api-version=2025-05-01-preview"


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
def test_tool_choice_strings_pass_through(choice: str) -> None:
    """auto/required/none are sent as strings."""
    body = ADAPTER.build_body(ChatRequest(messages=HISTORY, tools=TOOLS, tool_choice=choice), "m", None, False)
    assert body["tool_choice"] == choice


def test_profile_defaults_extras_and_tool_conversion() -> None:
    """Profile temperature/max_tokens apply, provider_extra merges, convert_tools gives flat tools."""
    adapter = _adapter(temperature=0.7, max_tokens=99, provider_extra={"reasoning": {"effort": "low"}})
    body = adapter.build_body(ChatRequest.of("Hi"), "m", None, False)
    assert (body["temperature"], body["max_output_tokens"], body["reasoning"]) == (0.7, 99, {"effort": "low"})
    assert adapter.convert_tools(TOOLS) == OpenAITools(tools=(FLAT_TOOL,))


# --- real HTTP: answers, errors, refusals ---------------------------------------------------------


async def test_stream_answer_served_in_pieces(server: RecordingServer, http: HttpClient) -> None:
    """The recorded text stream served in small pieces assembles to the expected answer."""
    data, expected = CASES["responses_stream_text.sse"]
    server.reply(Reply(headers=SSE, pieces=[data[i : i + 101] for i in range(0, len(data), 101)]))
    assert await acollect(_adapter(server.url, http).stream(ChatRequest.of("Joke"), "gpt-4o-mini")) == expected


async def test_truncated_stream_over_http_raises(server: RecordingServer, http: HttpClient) -> None:
    """A body that ends before response.completed raises StreamTruncated after the text streamed."""
    data = CASES["responses_stream_text.sse"][0]
    server.reply(Reply(headers=SSE, pieces=[data[: data.index(b"event: response.completed")]]))
    seen: list[StreamEvent] = []

    async def drain(stream: AsyncIterator[StreamEvent]) -> None:
        async for event in stream:
            seen.append(event)

    with pytest.raises(StreamTruncated):
        await drain(_adapter(server.url, http).stream(ChatRequest.of("Joke"), "gpt-4o-mini"))
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == TEXT.text


async def test_in_band_error_over_http(server: RecordingServer, http: HttpClient) -> None:
    """The recorded insufficient_quota stream raises through the real stream path."""
    server.reply(Reply(headers=SSE, pieces=[QUOTA_CASES["events"]]))
    with pytest.raises(ProviderError) as info:
        await acollect(_adapter(server.url, http).stream(ChatRequest.of("Hi"), "gpt-5-nano"))
    assert info.value.error_class is ErrorClass.RATE_LIMITED_NON_RETRYABLE


def _error_body(message: str, etype: str | None, code: Any) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": etype, "param": None, "code": code}})


async def test_429_with_retry_after_is_rate_limited(server: RecordingServer, http: HttpClient) -> None:
    """429 rate_limit_exceeded + Retry-After → rate_limited with the hint and the request id."""
    body = _error_body("Rate limit reached for gpt-4.1 on tokens per min (TPM)", "tokens", "rate_limit_exceeded")
    server.reply(Reply(status=429, headers={**JSON, "retry-after": "3", "x-request-id": "req_1"}, pieces=[body]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "gpt-test-model")
    exc = info.value
    assert exc.error_class is ErrorClass.RATE_LIMITED
    assert exc.retry_after == 3.0
    assert exc.error_code == "rate_limit_exceeded"
    assert exc.request_id == "req_1"


async def test_429_insufficient_quota_is_not_retried(server: RecordingServer, http: HttpClient) -> None:
    """429 insufficient_quota is rate_limited_non_retryable."""
    body = _error_body("You exceeded your current quota", "insufficient_quota", "insufficient_quota")
    server.reply(Reply(status=429, pieces=[body]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "gpt-test-model")
    assert info.value.error_class is ErrorClass.RATE_LIMITED_NON_RETRYABLE


async def test_azure_429_with_string_code(server: RecordingServer, http: HttpClient) -> None:
    """Azure's 429 body (string code "429") is a rate limit; its retry phrase gives the hint."""
    message = "Requests to the Responses Operation have exceeded token rate limit. Please retry after 5 seconds."
    server.reply(Reply(status=429, pieces=[orjson.dumps({"error": {"code": "429", "message": message}})]))
    adapter = _adapter(server.url + "/openai", http, family="azure", deployment="d")
    with pytest.raises(ProviderError) as info:
        await adapter.chat(ChatRequest.of("Hi"), "gpt-4o")
    assert info.value.error_class is ErrorClass.RATE_LIMITED
    assert info.value.error_code == "429"
    assert info.value.retry_after == 5.0


async def test_401_is_non_retryable_auth_failure_without_the_key(server: RecordingServer, http: HttpClient) -> None:
    """401 invalid_api_key → non_retryable, auth_failure; the key never appears in the error."""
    body = _error_body(f"Incorrect API key provided: {KEY}.", "invalid_request_error", "invalid_api_key")
    server.reply(Reply(status=401, pieces=[body]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "gpt-test-model")
    assert info.value.error_class is ErrorClass.NON_RETRYABLE
    assert info.value.auth_failure
    assert KEY not in str(info.value)


async def test_400_context_length_is_context_window(server: RecordingServer, http: HttpClient) -> None:
    """The recorded context_length_exceeded 400 is classified context_window."""
    body = fixture_path("openai/error_400_context_length_exceeded.json").read_bytes()
    server.reply(Reply(status=400, pieces=[body]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "gpt-test-model")
    assert info.value.error_class is ErrorClass.CONTEXT_WINDOW
    assert info.value.error_code == "context_length_exceeded"


async def test_502_html_page_is_retryable_with_short_excerpt(server: RecordingServer, http: HttpClient) -> None:
    """A Cloudflare HTML 502 page becomes a retryable error with a short, tag-free excerpt."""
    page = b"<html><head><title>api.openai.com | 502: Bad gateway</title></head><body>cloudflare</body></html>"
    server.reply(Reply(status=502, headers={"Content-Type": "text/html"}, pieces=[page]))
    with pytest.raises(ProviderError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "gpt-test-model")
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert "502: Bad gateway" in info.value.message
    assert "<" not in info.value.message


async def test_non_stream_refusal_raises(server: RecordingServer, http: HttpClient) -> None:
    """A refusal content part raises RefusalError instead of an empty success."""
    item = {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help."}]}
    server.reply(Reply(pieces=[orjson.dumps(response("completed", output=[item]))]))
    with pytest.raises(RefusalError) as info:
        await _adapter(server.url, http).chat(ChatRequest.of("Hi"), "gpt-test-model")
    assert "I can't help." in info.value.message


async def test_azure_content_filter_400_is_a_refusal(server: RecordingServer, http: HttpClient) -> None:
    """Azure's content_filter 400 (ResponsibleAIPolicyViolation) raises RefusalError."""
    body = {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management "
            "policy. Please modify your prompt and retry.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {"code": "ResponsibleAIPolicyViolation"},
        }
    }
    server.reply(Reply(status=400, pieces=[orjson.dumps(body)]))
    with pytest.raises(RefusalError):
        await _adapter(server.url + "/openai", http, family="azure", deployment="d").chat(ChatRequest.of("Hi"), "m")


async def test_non_stream_failed_and_incomplete(server: RecordingServer, http: HttpClient) -> None:
    """A 200 with status failed raises its error; incomplete/max_output_tokens is a "length" answer."""
    failed = response("failed", error={"code": "server_error", "message": "boom"})
    incomplete = response(
        "incomplete",
        incomplete_details={"reason": "max_output_tokens"},
        output=[{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Once"}]}],
    )
    server.reply(Reply(pieces=[orjson.dumps(failed)]), Reply(pieces=[orjson.dumps(incomplete)]))
    adapter = _adapter(server.url, http)
    with pytest.raises(ProviderError) as info:
        await adapter.chat(ChatRequest.of("Hi"), "gpt-test-model")
    assert info.value.error_class is ErrorClass.RETRYABLE
    answer = await adapter.chat(ChatRequest.of("Hi"), "gpt-test-model")
    assert (answer.text, answer.finish_reason) == ("Once", "length")


# --- streaming and non-streaming agree ------------------------------------------------------------

AGREE_OUTPUT = [
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Two cities."}, {"type": "summary_text", "text": "Ask both."}],
    },
    {
        "id": "msg_1",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Checking both.", "annotations": []}],
    },
    {
        "id": "fc_a",
        "type": "function_call",
        "call_id": "call_a",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    },
    {"id": "fc_b", "type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": ""},
]
AGREE_RESPONSE = response("completed", output=AGREE_OUTPUT, usage=USAGE)
AGREE_STREAM = (
    CREATED
    + ev("response.output_item.added", output_index=0, item={"id": "rs_1", "type": "reasoning", "summary": []})
    + ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0, delta="Two ")
    + ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=0, delta="cities.")
    + ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0, summary_index=1, delta="Ask both.")
    + ev("response.output_item.done", output_index=0, item=AGREE_OUTPUT[0])
    + message_events("Checking ", "both.", index=1)
    + call_events(2, "fc_a", "call_a", "get_weather", '{"city"', ':"Paris"}')
    + call_events(3, "fc_b", "call_b", "get_weather")
    + ev("response.completed", response=AGREE_RESPONSE)
)


async def test_stream_and_non_stream_agree(server: RecordingServer, http: HttpClient) -> None:
    """The same answer read as a response object and as a stream gives the same ChatResponse."""
    server.reply(Reply(pieces=[orjson.dumps(AGREE_RESPONSE)]), Reply(headers=SSE, pieces=[AGREE_STREAM]))
    adapter = _adapter(server.url, http)
    whole = await adapter.chat(ChatRequest.of("Weather?"), "gpt-test-model")
    streamed = await acollect(adapter.stream(ChatRequest.of("Weather?"), "gpt-test-model"))
    assert whole == streamed
    assert whole.reasoning == "Two cities.\n\nAsk both."
    assert whole.text == "Checking both."
    assert [(c.id, c.arguments) for c in whole.tool_calls] == [("call_a", '{"city":"Paris"}'), ("call_b", "{}")]
    assert whole.finish_reason == "tool_calls"
    assert whole.usage == Usage(input_tokens=30, output_tokens=9, cached_input_tokens=12)
    assert any(isinstance(e, ReasoningDelta) for e in decode([AGREE_STREAM]))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"input_tokens": 2006, "input_tokens_details": {"cached_tokens": 1920}, "output_tokens": 3},
            Usage(input_tokens=2006, cached_input_tokens=1920, output_tokens=3),
        ),
        (
            {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 60}},
            Usage(input_tokens=100, cached_input_tokens=20, cache_write_tokens=60),
        ),
        (
            {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 1},
            Usage(input_tokens=45, cached_input_tokens=40, output_tokens=1),
        ),
        (
            {"input_tokens": -4, "input_tokens_details": {"cached_tokens": "9"}, "output_tokens": True},
            Usage(clamped=True),
        ),
    ],
    ids=["openai", "cache-write", "cached-apart", "garbage"],
)
def test_responses_usage_reads_cached_and_written_input(raw: dict[str, Any], expected: Usage) -> None:
    """input_tokens_details' cached_tokens and cache_write_tokens are read, bounded, and counted inside input."""
    from turnout.providers.openai_responses import normalise_usage

    assert normalise_usage(raw) == expected
