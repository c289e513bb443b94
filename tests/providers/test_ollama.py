"""Ollama adapter: request body, NDJSON decoding, the ``done`` completion guard and error mapping."""

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
    two_way_splits,
)

from turnout.core.errors import (
    ErrorClass,
    ProtocolError,
    ProviderError,
    StreamTruncated,
)
from turnout.core.streams import acollect, collect
from turnout.core.types import (
    ChatRequest,
    ChatResponse,
    ImagePart,
    Message,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCall,
    ToolSpec,
    Usage,
    UsageEvent,
)
from turnout.providers import HttpClient
from turnout.providers.ollama import OllamaAdapter

NDJSON = {"Content-Type": "application/x-ndjson"}
JSON = {"Content-Type": "application/json"}


def _adapter(
    uri: str = "http://127.0.0.1:9", http: HttpClient | None = None, api_key: str | None = None, **profile: Any
) -> OllamaAdapter:
    adapter = make_adapter(http or HttpClient(), "ollama", uri, api_key=api_key, **profile)
    assert isinstance(adapter, OllamaAdapter)
    return adapter


ADAPTER = _adapter()


def decode(pieces: Iterable[bytes], adapter: OllamaAdapter = ADAPTER) -> list[StreamEvent]:
    """Run the real decoder over ``pieces`` and return every event (``finish`` included)."""
    decoder = adapter.decoder("llama-test")
    events: list[StreamEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    events.extend(decoder.finish())
    return events


def ndjson(*objs: Any) -> bytes:
    return b"".join(orjson.dumps(o) + b"\n" for o in objs)


async def drain(stream: AsyncIterator[StreamEvent], seen: list[StreamEvent]) -> None:
    """Consume ``stream`` into ``seen`` (so events before an exception stay visible)."""
    async for event in stream:
        seen.append(event)


def line(content: str = "", *, done: bool = False, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    message.update(extra.pop("message", {}))
    return {"model": "llama3.2", "created_at": "2025-07-07T20:22:19Z", "message": message, "done": done, **extra}


DONE = line(done=True, done_reason="stop", prompt_eval_count=26, eval_count=3)

# --- fixtures ------------------------------------------------------------------------------------

CHAT_WIRE = fixture_path("ollama/chat_stream_tool_call.ndjson").read_bytes()
GENERATE_WIRE = fixture_path("ollama/generate_stream_done_reason.ndjson").read_bytes()


def check_chat(resp: ChatResponse) -> None:
    assert resp.text == ""
    assert resp.reasoning is None
    (call,) = resp.tool_calls
    assert call.name == "get_weather"
    assert call.parsed_arguments() == {"city": "Tokyo"}
    assert call.id.startswith("call_")
    assert resp.usage == Usage(input_tokens=169, output_tokens=15)
    assert resp.finish_reason == "tool_calls"
    assert resp.model == "llama3.2"


def check_generate(resp: ChatResponse) -> None:
    assert resp.text == "That's a fantastic question!"
    assert resp.tool_calls == ()
    assert resp.usage is None
    assert resp.finish_reason == "stop"
    assert resp.model == "gemma4"


CASES = [
    pytest.param(CHAT_WIRE, check_chat, id="chat-tool-call"),
    pytest.param(CHAT_WIRE.replace(b"\n", b"\r\n"), check_chat, id="chat-tool-call-crlf"),
    pytest.param(GENERATE_WIRE, check_generate, id="generate"),
]


@pytest.mark.parametrize(("wire", "check"), CASES)
def test_fixture_every_two_waysplit_at(wire: bytes, check: Any) -> None:
    """Recorded NDJSON decodes to the same answer whatever the split point."""
    for pieces in two_way_splits(wire):
        check(collect(decode(pieces)))


@pytest.mark.parametrize(("wire", "check"), CASES)
def test_fixture_random_and_bytewise_splits(wire: bytes, check: Any) -> None:
    """Recorded NDJSON decodes identically under random multi-way splits and one byte at a time."""
    for pieces in random_splits(wire):
        check(collect(decode(pieces)))
    check(collect(decode(bytewise(wire))))


def test_event_order_usage_then_final() -> None:
    """The tool call comes first, usage right before Final."""
    events = decode([CHAT_WIRE])
    assert [type(e).__name__ for e in events] == ["ToolCallEvent", "UsageEvent", "Final"]


def test_text_and_thinking_stream() -> None:
    """``message.content`` is text, ``message.thinking`` is reasoning, no empty deltas are emitted."""
    wire = ndjson(
        line(message={"thinking": "The user greets. "}),
        line(message={"thinking": "Reply kindly."}),
        line("Hel"),
        line(""),
        line("lo!"),
        DONE,
    )
    events = decode([wire])
    assert all(e.text for e in events if isinstance(e, TextDelta))
    resp = collect(events)
    assert resp.reasoning == "The user greets. Reply kindly."
    assert resp.text == "Hello!"
    assert resp.usage == Usage(input_tokens=26, output_tokens=3)
    assert resp.finish_reason == "stop"


def test_length_finish_is_complete() -> None:
    """``done_reason: "length"`` completes normally with finish reason ``length``."""
    wire = ndjson(line("Once upon"), line(done=True, done_reason="length", prompt_eval_count=5, eval_count=2))
    resp = collect(decode([wire]))
    assert resp.finish_reason == "length"
    assert resp.text == "Once upon"


@pytest.mark.parametrize("reason", ["load", "unload"])
def test_load_and_unload_are_empty_stops(reason: str) -> None:
    """A ``load``/``unload`` done line with no content is an empty answer finishing ``stop``, not an error."""
    resp = collect(decode([ndjson(line(done=True, done_reason=reason))]))
    assert resp.text == ""
    assert resp.finish_reason == "stop"
    assert resp.usage is None


def test_done_line_without_trailing_newline_completes() -> None:
    """A complete final object with no line break is still the done line."""
    wire = ndjson(line("Hi")) + orjson.dumps(DONE)
    assert collect(decode([wire])).text == "Hi"


def test_multiple_tool_calls_get_distinct_ids() -> None:
    """Whole tool calls without ids get distinct generated ids; missing arguments are ``{}``."""
    calls = [{"function": {"name": "a", "arguments": {"x": 1}}}, {"function": {"name": "b"}}]
    resp = collect(decode([ndjson(line(message={"tool_calls": calls}), DONE)]))
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [("a", '{"x":1}'), ("b", "{}")]
    assert resp.tool_calls[0].id != resp.tool_calls[1].id
    assert resp.finish_reason == "tool_calls"


# --- truncation, in-band errors, malformed lines ---------------------------------------------------


@pytest.mark.parametrize(
    "wire", [CHAT_WIRE, GENERATE_WIRE, ndjson(line("a"), line("b"), DONE)], ids=["chat", "generate", "text"]
)
def test_truncation_at_every_byte_before_done(wire: bytes) -> None:
    """EOF anywhere before the done line is complete raises StreamTruncated("done"), never a JSON error."""
    end = len(wire.rstrip())
    for cut in range(end):
        with pytest.raises(StreamTruncated) as info:
            decode([wire[:cut]])
        assert info.value.missing_signal == "done"
        assert info.value.error_class is ErrorClass.RETRYABLE


def test_cut_stream_keeps_earlier_events() -> None:
    """A stream cut mid-line delivered its complete lines, then raises StreamTruncated."""
    wire = ndjson(line("Hello"), line(" world")) + b'{"model":"llama3.2","message":{"role":"assis'
    decoder = ADAPTER.decoder("llama-test")
    assert decoder.feed(wire) == [TextDelta(text="Hello"), TextDelta(text=" world")]
    with pytest.raises(StreamTruncated):
        decoder.finish()


def test_mid_stream_error_line() -> None:
    """An ``{"error": ...}`` line after text delivers the text, then raises a retryable error."""
    wire = ndjson(line("The answer"), {"error": "an error was encountered while running the model"})
    decoder = ADAPTER.decoder("llama-test")
    assert decoder.feed(wire) == [TextDelta(text="The answer")]
    assert decoder.done
    with pytest.raises(ProviderError) as info:
        decoder.finish()
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert info.value.status is None
    assert "running the model" in info.value.message


def test_in_band_model_not_found_is_non_retryable() -> None:
    """An in-band "model not found" error is non-retryable."""
    with pytest.raises(ProviderError) as info:
        decode([ndjson({"error": "model 'llama9' not found"})])
    assert info.value.error_class is ErrorClass.NON_RETRYABLE


def test_error_line_without_newline_at_eof() -> None:
    """An unterminated final error object is the error, not a truncation."""
    with pytest.raises(ProviderError) as info:
        decode([ndjson(line("x")) + b'{"error":"an error was encountered while running the model"}'])
    assert not isinstance(info.value, StreamTruncated)


@pytest.mark.parametrize(
    "bad",
    [b"{not json}", b"[1, 2]", b'{"message": "text", "done": false}', b'{"message": {"tool_calls": [{}]}}'],
)
def test_malformed_line_is_a_protocol_error(bad: bytes) -> None:
    """A complete line that is not a valid Ollama object raises a retryable ProtocolError (never skipped)."""
    with pytest.raises(ProtocolError) as info:
        decode([ndjson(line("a")) + bad + b"\n" + ndjson(DONE)])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_class is ErrorClass.RETRYABLE


def test_lines_after_done_are_ignored() -> None:
    """Nothing after the done line is decoded."""
    resp = collect(decode([ndjson(line("ok"), DONE, line("late"))]))
    assert resp.text == "ok"


VALID_LINES = [
    ndjson(line("hello")),
    ndjson(line(message={"thinking": "hm"})),
    ndjson(line(message={"tool_calls": [{"function": {"name": "f", "arguments": {"a": [1]}}}]})),
    ndjson(DONE),
    ndjson({"error": "boom"}),
    b"\n",
    b"\r\n",
]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(min_value=0, max_value=600), max_size=20))
def test_random_bytes_never_crash(data: bytes, cuts: list[int]) -> None:
    """Random bytes at random splits end in events or a TurnoutError, never another exception."""
    ends_in_final_or_turnout_error(decode, split_at(data, cuts))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(VALID_LINES), st.binary(max_size=40)), max_size=12),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=20),
)
def test_valid_lines_with_garbage_never_crash(items: list[bytes], cuts: list[int]) -> None:
    """Valid lines interleaved with garbage, split anywhere, end in events or a TurnoutError."""
    ends_in_final_or_turnout_error(decode, split_at(b"".join(items), cuts))


# --- request building ----------------------------------------------------------------------------

WEATHER = ToolSpec(
    name="weather",
    description="Current weather",
    parameters={"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
)


def full_request(**kw: Any) -> ChatRequest:
    return ChatRequest(
        messages=(
            Message.system("Be brief."),
            Message.user(
                [TextPart(text="What is in this picture?"), ImagePart(url="data:image/png;base64,iVBORw0KGgo=")]
            ),
            Message.assistant(
                "Checking.",
                tool_calls=[ToolCall(id="call_1", name="weather", arguments='{"location":"Paris"}')],
            ),
            Message.tool("call_1", '{"temp_c": 21}'),
            Message.tool("call_x", "12:00", name="clock"),
            Message.user("And tomorrow?"),
        ),
        tools=(WEATHER,),
        **kw,
    )


EXPECTED_MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is in this picture?", "images": ["iVBORw0KGgo="]},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [{"function": {"name": "weather", "arguments": {"location": "Paris"}}}],
    },
    {"role": "tool", "content": '{"temp_c": 21}', "tool_name": "weather"},
    {"role": "tool", "content": "12:00", "tool_name": "clock"},
    {"role": "user", "content": "And tomorrow?"},
]
EXPECTED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Current weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
        },
    }
]


async def test_request_body_path_and_no_auth(server: RecordingServer, http: HttpClient) -> None:
    """A full non-stream request: exact body with explicit ``stream: false``, ``/api/chat``, no auth header."""
    server.reply(Reply(pieces=[orjson.dumps(line("Sunny.", done=True, done_reason="stop"))]))
    adapter = _adapter(server.url, http, num_ctx=8192, think=True)
    resp = await adapter.chat(full_request(max_tokens=256, stop=("END",)), "llama3.2", 0.3)
    assert resp.text == "Sunny."
    (req,) = server.requests
    assert req.path == "/api/chat"
    assert req.query == {}
    assert "authorization" not in req.headers
    assert req.body == {
        "model": "llama3.2",
        "messages": EXPECTED_MESSAGES,
        "stream": False,
        "tools": EXPECTED_TOOLS,
        "options": {"temperature": 0.3, "num_ctx": 8192, "num_predict": 256, "stop": ["END"]},
        "think": True,
    }


@pytest.mark.parametrize("suffix", ["", "/", "/api", "/api/", "/v1"])
async def test_stream_request_with_key_and_minimal_body(server: RecordingServer, http: HttpClient, suffix: str) -> None:
    """A stream request sends ``stream: true``, a Bearer key when given, and tolerates ``/api``/``/v1`` uris."""
    server.reply(Reply(headers=NDJSON, pieces=[ndjson(line("Hi"), DONE)]))
    adapter = _adapter(server.url + suffix, http, api_key="ollama-cloud-key-123")
    resp = await acollect(adapter.stream(ChatRequest(messages=(Message.user("Hello"),)), "gpt-oss:120b"))
    assert resp.text == "Hi"
    (req,) = server.requests
    assert req.path == "/api/chat"
    assert req.headers["authorization"] == "Bearer ollama-cloud-key-123"
    assert req.body == {"model": "gpt-oss:120b", "messages": [{"role": "user", "content": "Hello"}], "stream": True}


def test_num_predict_falls_back_to_profile_settings() -> None:
    """Without a caller max, ``num_predict`` comes from the profile; the profile temperature fills in."""
    adapter = _adapter(num_predict=512, temperature=0.2, provider_extra={"keep_alive": "5m"})
    body = adapter.build_body(ChatRequest(messages=(Message.user("x"),)), "m", None, True)
    assert body["options"] == {"temperature": 0.2, "num_predict": 512}
    assert body["keep_alive"] == "5m"
    assert "think" not in body


def test_tool_choice_none_sends_no_tools() -> None:
    """Ollama has no tool_choice: ``none`` leaves the tools out, other choices send them."""
    request = ChatRequest(messages=(Message.user("x"),), tools=(WEATHER,), tool_choice="none")
    assert "tools" not in ADAPTER.build_body(request, "m", None, False)
    request = ChatRequest(messages=(Message.user("x"),), tools=(WEATHER,), tool_choice="required")
    assert ADAPTER.build_body(request, "m", None, False)["tools"] == EXPECTED_TOOLS


def test_remote_image_url_is_a_clear_non_retryable_error() -> None:
    """A remote image URL cannot be sent to Ollama: a non-retryable error says so before any request."""
    request = ChatRequest(messages=(Message.user([ImagePart(url="https://example.com/cat.png")]),))
    with pytest.raises(ProviderError) as info:
        ADAPTER.build_body(request, "llava", None, False)
    assert info.value.error_class is ErrorClass.NON_RETRYABLE
    assert "data URL" in info.value.message


def test_merge_system_into_user() -> None:
    """With ``merge_system_into_user`` the system prompt is prepended to the first user message."""
    adapter = _adapter(merge_system_into_user=True)
    request = ChatRequest(messages=(Message.system("Rules."), Message.user("Q")))
    assert adapter.build_body(request, "m", None, False)["messages"] == [{"role": "user", "content": "Rules.\n\nQ"}]


# --- real HTTP -----------------------------------------------------------------------------------


async def test_stream_in_pieces_and_non_stream_agree(server: RecordingServer, http: HttpClient) -> None:
    """The recorded tool call streamed in small pieces and sent whole decode to the same answer."""
    pieces = [CHAT_WIRE[i : i + 23] for i in range(0, len(CHAT_WIRE), 23)]
    whole = orjson.loads(CHAT_WIRE.splitlines()[1])
    whole["message"] = orjson.loads(CHAT_WIRE.splitlines()[0])["message"]
    server.reply(Reply(headers=NDJSON, pieces=pieces), Reply(pieces=[orjson.dumps(whole)]))
    adapter = _adapter(server.url, http)
    request = ChatRequest(messages=(Message.user("Weather in Tokyo?"),), tools=(WEATHER,))
    streamed = await acollect(adapter.stream(request, "llama3.2"))
    plain = await adapter.chat(request, "llama3.2")
    check_chat(streamed)
    check_chat(plain)


async def test_mid_stream_error_over_http(server: RecordingServer, http: HttpClient) -> None:
    """An error line inside a 200 stream raises after the text before it was delivered."""
    wire = ndjson(line("Partial"), {"error": "an error was encountered while running the model"})
    server.reply(Reply(headers=NDJSON, pieces=[wire]))
    adapter = _adapter(server.url, http)
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError) as info:
        await drain(adapter.stream(ChatRequest(messages=(Message.user("hi"),)), "llama3.2"), seen)
    assert seen == [TextDelta(text="Partial")]
    assert info.value.error_class is ErrorClass.RETRYABLE


async def test_cut_stream_over_http(server: RecordingServer, http: HttpClient) -> None:
    """A body that ends mid-line raises StreamTruncated through the adapter."""
    server.reply(Reply(headers=NDJSON, pieces=[ndjson(line("Half")), b'{"model":"llama3.2","mess']))
    adapter = _adapter(server.url, http)
    seen: list[StreamEvent] = []
    with pytest.raises(StreamTruncated):
        await drain(adapter.stream(ChatRequest(messages=(Message.user("hi"),)), "llama3.2"), seen)
    assert seen == [TextDelta(text="Half")]


CONTEXT_400 = {
    "error": '{"error":{"code":400,"message":"request (8889 tokens) exceeds the available context size '
    '(4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":8889,"n_ctx":4096}}'
}


@pytest.mark.parametrize(
    ("status", "headers", "body", "cls", "retry_after", "auth"),
    [
        (404, {}, {"error": "model 'llama9' not found"}, ErrorClass.NON_RETRYABLE, None, False),
        (404, {}, {"error": 'model "llama9" not found, try pulling it first'}, ErrorClass.NON_RETRYABLE, None, False),
        (429, {"Retry-After": "7"}, {"error": "too many requests"}, ErrorClass.RATE_LIMITED, 7.0, False),
        (401, {}, {"error": "unauthorized"}, ErrorClass.NON_RETRYABLE, None, True),
        (400, {}, CONTEXT_400, ErrorClass.CONTEXT_WINDOW, None, False),
        (
            400,
            {},
            {"error": "the prompt is longer than the context length currently available to the model"},
            ErrorClass.CONTEXT_WINDOW,
            None,
            False,
        ),
        (400, {}, {"error": "invalid options: foo"}, ErrorClass.NON_RETRYABLE, None, False),
        (500, {}, {"error": "llama runner process has terminated: exit status 2"}, ErrorClass.RETRYABLE, None, False),
        (502, {}, {"error": "upstream unavailable"}, ErrorClass.RETRYABLE, None, False),
    ],
    ids=["404", "404-pull", "429", "401", "400-context-size", "400-context-length", "400", "500", "502"],
)
@pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
async def test_error_statuses(
    server: RecordingServer,
    http: HttpClient,
    status: int,
    headers: dict[str, str],
    body: Any,
    cls: ErrorClass,
    retry_after: float | None,
    auth: bool,
    streaming: bool,
) -> None:
    """Ollama's ``{"error": "..."}`` bodies map to the right class, retry hint and auth flag."""
    server.reply(Reply(status=status, headers={**JSON, **headers}, pieces=[orjson.dumps(body)]))
    adapter = _adapter(server.url, http)
    request = ChatRequest(messages=(Message.user("hi"),))
    call = acollect(adapter.stream(request, "llama3.2")) if streaming else adapter.chat(request, "llama3.2")
    with pytest.raises(ProviderError) as info:
        await call
    err = info.value
    assert err.status == status
    assert err.error_class is cls
    assert err.retry_after == retry_after
    assert err.auth_failure is auth
    assert "{" not in err.message


async def test_html_gateway_page_is_retryable(server: RecordingServer, http: HttpClient) -> None:
    """A proxy's 502 HTML page is retryable with a short, tag-free excerpt."""
    page = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
    server.reply(Reply(status=502, headers={"Content-Type": "text/html"}, pieces=[page]))
    adapter = _adapter(server.url, http)
    with pytest.raises(ProviderError) as info:
        await adapter.chat(ChatRequest(messages=(Message.user("hi"),)), "llama3.2")
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert "502 Bad Gateway" in info.value.message and "<" not in info.value.message


def test_usage_event_precedes_final_in_non_stream_parse() -> None:
    """A non-stream body parses with usage and finish like the stream's last line."""
    resp = ADAPTER.parse_response(line("Hi", done=True, done_reason="stop", prompt_eval_count=4, eval_count=1), "m")
    assert resp.text == "Hi"
    assert resp.usage == Usage(input_tokens=4, output_tokens=1)
    assert resp.finish_reason == "stop"
    assert isinstance(decode([ndjson(line("Hi"), DONE)])[-2], UsageEvent)
