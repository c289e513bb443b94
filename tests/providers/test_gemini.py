"""Google Gemini adapter: request body, SSE decoding, completion guard, refusals and error mapping."""

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

from turnout.core.errors import (
    ErrorClass,
    ProtocolError,
    ProviderError,
    RefusalError,
    StreamTruncated,
)
from turnout.core.streams import acollect, collect
from turnout.core.types import (
    MAX_PROVIDER_COUNT,
    ChatRequest,
    ChatResponse,
    Final,
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
from turnout.providers.gemini import GeminiAdapter
from turnout.providers.signatures import SIGNER_KEY

KEY = "AIzaSyTEST-gemini-key-0123456789"
JSON = {"Content-Type": "application/json"}
SSE = {"Content-Type": "text/event-stream"}


def _adapter(uri: str = "http://127.0.0.1:9/v1beta", http: HttpClient | None = None, **profile: Any) -> GeminiAdapter:
    adapter = make_adapter(http or HttpClient(), "gemini", uri, api_key=KEY, **profile)
    assert isinstance(adapter, GeminiAdapter)
    return adapter


ADAPTER = _adapter()


def decode(pieces: Iterable[bytes], adapter: GeminiAdapter = ADAPTER) -> list[StreamEvent]:
    """Run the real decoder over ``pieces`` and return every event (``finish`` included)."""
    decoder = adapter.decoder("gemini-test")
    events: list[StreamEvent] = []
    for piece in pieces:
        events.extend(decoder.feed(piece))
    events.extend(decoder.finish())
    return events


async def drain(stream: AsyncIterator[StreamEvent], seen: list[StreamEvent]) -> None:
    """Consume ``stream`` into ``seen`` (so events before an exception stay visible)."""
    async for event in stream:
        seen.append(event)


def sse(*payloads: Any, crlf: bool = False) -> bytes:
    """Payload objects (or raw bytes) as SSE ``data:`` events."""
    out = b""
    for p in payloads:
        raw = p if isinstance(p, bytes) else orjson.dumps(p)
        out += b"data: " + raw + b"\n\n"
    return out.replace(b"\n", b"\r\n") if crlf else out


def crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def first_line(rel: str) -> Any:
    return orjson.loads(fixture_path(rel).read_bytes().splitlines()[0])


# --- fixture expectations (read from the recorded files) -----------------------------------------

CALL_WIRE = sse_from_chunks_file("google/stream_function_call.ndjson")
TEXT_WIRE = sse_from_chunks_file("google/stream_text_thought_signature.ndjson")
CALL_SIGNATURE = first_line("google/stream_function_call.ndjson")["candidates"][0]["content"]["parts"][0][
    "thoughtSignature"
]
TEXT = 'There are **3** "r"s in strawberry.\n\nst**r**awbe**rr**y'


def check_call_stream(resp: ChatResponse) -> None:
    assert resp.text == ""
    assert resp.reasoning is None
    assert len(resp.tool_calls) == 1
    call = resp.tool_calls[0]
    assert call.name == "weather"
    assert call.id.startswith("call_") and len(call.id) > 10
    assert call.parsed_arguments() == {"location": "San Francisco"}
    assert call.extra == {"thought_signature": CALL_SIGNATURE, SIGNER_KEY: "gemini"}  # the signature stays with Gemini
    assert resp.usage == Usage(input_tokens=29, output_tokens=15 + 45)
    assert resp.finish_reason == "tool_calls"
    assert resp.model == "gemini-3-pro-preview"


def check_text_stream(resp: ChatResponse) -> None:
    assert resp.text == TEXT
    assert resp.reasoning is None
    assert resp.tool_calls == ()
    assert resp.usage == Usage(input_tokens=9, output_tokens=23 + 185)
    assert resp.finish_reason == "stop"
    assert resp.model == "gemini-3-pro-preview"


CASES = [
    pytest.param(CALL_WIRE, check_call_stream, id="function_call"),
    pytest.param(crlf(CALL_WIRE), check_call_stream, id="function_call-crlf"),
    pytest.param(TEXT_WIRE, check_text_stream, id="text"),
    pytest.param(crlf(TEXT_WIRE), check_text_stream, id="text-crlf"),
]


@pytest.mark.parametrize(("wire", "check"), CASES)
def test_fixture_every_two_waysplit_at(wire: bytes, check: Any) -> None:
    """Recorded streams decode to the same answer whatever the split point, LF or CRLF."""
    for pieces in two_way_splits(wire):
        check(collect(decode(pieces)))


@pytest.mark.parametrize(("wire", "check"), CASES)
def test_fixture_random_and_bytewise_splits(wire: bytes, check: Any) -> None:
    """Recorded streams decode identically under random multi-way splits and one byte at a time."""
    for pieces in random_splits(wire):
        check(collect(decode(pieces)))
    check(collect(decode(bytewise(wire))))


def test_stream_event_order_ends_with_usage_then_final() -> None:
    """Text deltas come first, cumulative usage before Final, and no empty text is emitted."""
    events = decode([TEXT_WIRE])
    assert isinstance(events[-1], Final)
    assert isinstance(events[-2], UsageEvent)
    assert all(e.text for e in events if isinstance(e, TextDelta))
    assert [e.text for e in events if isinstance(e, TextDelta)] == [
        "There are **3**",
        ' "r"s in strawberry.\n\nst**r**awbe**rr**y',
    ]


def test_non_stream_fixture() -> None:
    """The recorded generateContent body parses to a tool call with its thought signature and usage."""
    data = orjson.loads(fixture_path("google/generate_content_function_call.json").read_bytes())
    resp = ADAPTER.parse_response(data, "gemini-test")
    assert resp.text == ""
    (call,) = resp.tool_calls
    assert call.name == "weather"
    assert call.parsed_arguments() == {"location": "San Francisco"}
    assert call.extra is not None and str(call.extra["thought_signature"]).startswith("EskgCsYgAb4+9vtF")
    assert resp.usage == Usage(input_tokens=29, output_tokens=15 + 893)
    assert resp.finish_reason == "tool_calls"
    assert resp.model == "gemini-3-pro-preview"
    assert resp.request_id == "m36LaZGyCLz1xs0PtNSB-QU"


# --- samples --------------------------------------------------------------------------------------


def chunk(
    parts: list[dict[str, Any]], finish: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [cand], "modelVersion": "gemini-2.5-flash"}
    if usage:
        out["usageMetadata"] = usage
    return out


def test_thought_parts_become_reasoning_and_cached_tokens_are_normalised() -> None:
    """``thought: true`` parts are reasoning; cached content tokens stay inside input tokens."""
    usage = {"promptTokenCount": 100, "cachedContentTokenCount": 60, "candidatesTokenCount": 7, "thoughtsTokenCount": 5}
    wire = sse(
        chunk([{"text": "Counting letters.", "thought": True}]),
        chunk([{"text": "Three."}], "STOP", usage),
        crlf=True,
    )
    resp = collect(decode([wire]))
    assert resp.reasoning == "Counting letters."
    assert resp.text == "Three."
    assert resp.usage == Usage(input_tokens=100, cached_input_tokens=60, output_tokens=12)
    assert resp.model == "gemini-2.5-flash"


def test_max_tokens_is_a_complete_length_answer() -> None:
    """``MAX_TOKENS`` completes normally with finish reason ``length``, streaming or not."""
    last = chunk([{"text": " and then"}], "MAX_TOKENS", {"promptTokenCount": 4, "candidatesTokenCount": 16})
    resp = collect(decode([sse(chunk([{"text": "Once upon a time"}]), last)]))
    assert resp.text == "Once upon a time and then"
    assert resp.finish_reason == "length"
    assert ADAPTER.parse_response(last, "m").finish_reason == "length"


def test_function_call_with_provider_id_round_trips() -> None:
    """A provider-given call id is kept and echoed in the replayed call and its functionResponse."""
    wire = sse(chunk([{"functionCall": {"name": "now", "id": "fc-7"}}], "STOP"))
    (call,) = collect(decode([wire])).tool_calls
    assert call.id == "fc-7"
    assert call.arguments == "{}"
    assert call.extra == {"function_call_id": "fc-7"}
    request = ChatRequest(
        messages=(Message.user("t?"), Message.assistant(tool_calls=[call]), Message.tool("fc-7", "9"))
    )
    contents = ADAPTER.build_body(request, "m", None, False)["contents"]
    assert contents[1]["parts"] == [{"functionCall": {"name": "now", "args": {}, "id": "fc-7"}}]
    assert contents[2]["parts"] == [{"functionResponse": {"name": "now", "response": {"content": "9"}, "id": "fc-7"}}]


def test_generated_call_ids_are_unique() -> None:
    """Parallel calls without ids get distinct generated ids."""
    parts = [{"functionCall": {"name": "a", "args": {}}}, {"functionCall": {"name": "b", "args": {"x": 1}}}]
    calls = collect(decode([sse(chunk(parts, "STOP"))])).tool_calls
    assert [c.name for c in calls] == ["a", "b"]
    assert calls[0].id != calls[1].id


SAFETY_END = {
    "candidates": [
        {
            "finishReason": "SAFETY",
            "index": 0,
            "safetyRatings": [
                {"category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "probability": "HIGH", "blocked": True},
            ],
        }
    ],
    "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 30, "totalTokenCount": 42},
}
PROMPT_BLOCKED = {
    "promptFeedback": {
        "blockReason": "SAFETY",
        "safetyRatings": [
            {"category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "probability": "NEGLIGIBLE"},
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"},
        ],
    }
}
RECITATION = {
    "candidates": [
        {
            "finishReason": "RECITATION",
            "content": {"role": "model", "parts": [{"text": "verbatim copyrighted text"}]},
            "citationMetadata": {"citationSources": [{"startIndex": 0, "endIndex": 25, "uri": "https://x.test"}]},
        }
    ]
}


def test_safety_finish_mid_stream_is_a_refusal() -> None:
    """A ``SAFETY`` finish after streamed text raises RefusalError; earlier text was delivered."""
    decoder = ADAPTER.decoder("gemini-test")
    first = decoder.feed(sse(chunk([{"text": "Sure, here"}])))
    assert first == [TextDelta(text="Sure, here")]
    assert decoder.feed(sse(SAFETY_END)) == []
    assert decoder.done
    with pytest.raises(RefusalError) as info:
        decoder.finish()
    assert "SAFETY" in str(info.value)
    assert info.value.error_class is ErrorClass.REFUSAL
    assert info.value.provider == "gemini.test"


@pytest.mark.parametrize("body", [PROMPT_BLOCKED, SAFETY_END, RECITATION], ids=["blockReason", "SAFETY", "RECITATION"])
def test_blocked_responses_are_refusals(body: dict[str, Any]) -> None:
    """Blocked prompts and outputs raise RefusalError in both modes, and blocked text is never emitted."""
    with pytest.raises(RefusalError):
        ADAPTER.parse_response(body, "gemini-test")
    with pytest.raises(RefusalError):
        decode([sse(body)])


@pytest.mark.parametrize("reason", ["BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"])
def test_other_blocking_finishes_are_refusals(reason: str) -> None:
    """Every content-blocking finish reason is a refusal."""
    with pytest.raises(RefusalError):
        ADAPTER.parse_response(chunk([], reason), "gemini-test")


def test_malformed_function_call_is_retryable_provider_error() -> None:
    """``MALFORMED_FUNCTION_CALL`` is a retryable provider error, not a refusal or an answer."""
    body = chunk([], "MALFORMED_FUNCTION_CALL")
    body["candidates"][0]["finishMessage"] = "Malformed function call: print(default_api.weather(location=))"
    with pytest.raises(ProviderError) as info:
        decode([sse(body)])
    assert not isinstance(info.value, RefusalError)
    assert info.value.error_class is ErrorClass.RETRYABLE
    assert info.value.error_type == "MALFORMED_FUNCTION_CALL"


def test_unknown_finish_reason_completes_as_stop() -> None:
    """Finish reasons with no unified meaning (``OTHER``) still complete the stream."""
    resp = collect(decode([sse(chunk([{"text": "hm"}], "OTHER"))]))
    assert resp.finish_reason == "stop"
    assert resp.text == "hm"


# --- in-band errors and truncation ---------------------------------------------------------------

UNAVAILABLE = {
    "error": {
        "code": 503,
        "message": "This model is currently experiencing high demand. Spikes in demand are usually temporary. "
        "Please try again later.",
        "status": "UNAVAILABLE",
    }
}
EXHAUSTED_IN_BAND = {
    "error": {
        "code": 429,
        "message": "Resource has been exhausted (e.g. check quota).",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.847655010s"}],
    }
}


def test_mid_stream_error_chunk_raises_classified_error() -> None:
    """A ``data: {"error": ...}`` chunk after text delivers the text, then raises the classified error."""
    wire = sse(chunk([{"text": "Partial"}]), UNAVAILABLE)
    decoder = ADAPTER.decoder("gemini-test")
    assert decoder.feed(wire) == [TextDelta(text="Partial")]
    assert decoder.done
    with pytest.raises(ProviderError) as info:
        decoder.finish()
    err = info.value
    assert err.error_class is ErrorClass.RETRYABLE
    assert err.error_type == "UNAVAILABLE"
    assert err.status is None
    assert "high demand" in err.message


def test_mid_stream_rate_limit_chunk_keeps_retry_hint() -> None:
    """An in-band RESOURCE_EXHAUSTED chunk is a rate limit carrying its RetryInfo delay."""
    with pytest.raises(ProviderError) as info:
        decode([sse(chunk([{"text": "x"}]), EXHAUSTED_IN_BAND)])
    assert info.value.error_class is ErrorClass.RATE_LIMITED
    assert info.value.retry_after == pytest.approx(0.847655010)


def test_vertex_list_wrapped_error_chunk() -> None:
    """A Vertex ``[{"error": ...}]`` chunk is an in-band error too."""
    with pytest.raises(ProviderError) as info:
        decode([sse([UNAVAILABLE])])
    assert info.value.error_type == "UNAVAILABLE"


@pytest.mark.parametrize(
    "tail",
    [
        orjson.dumps(UNAVAILABLE),
        orjson.dumps(UNAVAILABLE) + b"\n",
        orjson.dumps(UNAVAILABLE, option=orjson.OPT_INDENT_2),
        crlf(orjson.dumps(UNAVAILABLE, option=orjson.OPT_INDENT_2) + b"\n"),
        orjson.dumps([UNAVAILABLE], option=orjson.OPT_INDENT_2),
    ],
    ids=["bare", "newline", "pretty", "pretty-crlf", "vertex-list"],
)
def test_raw_json_error_tail_at_eof(tail: bytes) -> None:
    """A raw non-``data:`` JSON error body appended to a 200 stream raises it at EOF, at any split."""
    wire = sse(chunk([{"text": "Partial"}]), crlf=True) + tail
    for pieces in two_way_splits(wire):
        with pytest.raises(ProviderError) as info:
            decode(pieces)
        assert info.value.error_class is ErrorClass.RETRYABLE
        assert info.value.error_type == "UNAVAILABLE"


def test_raw_json_tail_after_finish_reason_still_raises() -> None:
    """An error tail after a finish chunk is still an error, never a silent success."""
    wire = sse(chunk([{"text": "done"}], "STOP")) + orjson.dumps(UNAVAILABLE)
    with pytest.raises(ProviderError):
        decode([wire])


def test_non_error_stray_lines_are_ignored() -> None:
    """Stray non-field lines that are not a JSON error do not break a complete stream."""
    wire = b"garbage line\n" + sse(chunk([{"text": "ok"}], "STOP")) + b"{not json\n"
    assert collect(decode([wire])).text == "ok"


@pytest.mark.parametrize("wire", [CALL_WIRE, TEXT_WIRE, crlf(TEXT_WIRE)], ids=["call", "text", "text-crlf"])
def test_truncation_before_finish_reason_at_every_byte(wire: bytes) -> None:
    """EOF anywhere before the finishReason chunk's line is complete raises StreamTruncated."""
    last_line_end = wire.rindex(b"data: ")
    last_line_end = wire.index(b"\n", last_line_end)
    for cut in range(last_line_end):
        with pytest.raises(StreamTruncated) as info:
            decode([wire[:cut]])
        assert info.value.missing_signal == "finishReason"
        assert info.value.error_class is ErrorClass.RETRYABLE


def test_truncation_at_event_boundaries_keeps_partial_events() -> None:
    """A stream cut at an event boundary delivered the earlier events, then raises StreamTruncated."""
    decoder = ADAPTER.decoder("gemini-test")
    events = decoder.feed(TEXT_WIRE[: TEXT_WIRE.index(b"\n\n") + 2])
    assert events[0] == TextDelta(text="There are **3**")
    with pytest.raises(StreamTruncated):
        decoder.finish()


def test_empty_body_is_truncated() -> None:
    """An empty 200 body is a truncated stream, not an empty answer."""
    with pytest.raises(StreamTruncated):
        decode([])


def test_comments_and_blank_data_are_tolerated() -> None:
    """SSE comments and keep-alive blank lines between events are normal."""
    wire = (
        b": keep-alive\r\n\r\n"
        + sse(chunk([{"text": "a"}]), crlf=True)
        + b":\n\n"
        + sse(chunk([{"text": "b"}], "STOP"))
    )
    assert collect(decode(bytewise(wire))).text == "ab"


@pytest.mark.parametrize("bad", [b"{not json", b'{"candidates": [', b'{"candidates": 5}', b"[1, 2]", b'"text"'])
def test_malformed_event_is_a_protocol_error(bad: bytes) -> None:
    """Invalid JSON or a wrongly shaped event raises a retryable ProtocolError (never skipped)."""
    with pytest.raises(ProtocolError) as info:
        decode([sse(chunk([{"text": "a"}]), bad, chunk([], "STOP"))])
    assert not isinstance(info.value, StreamTruncated)
    assert info.value.error_class is ErrorClass.RETRYABLE


VALID_EVENTS = [
    sse(chunk([{"text": "hello"}])),
    sse(chunk([{"text": "why", "thought": True}])),
    sse(chunk([{"functionCall": {"name": "f", "args": {"a": [1]}}}])),
    sse(chunk([], "STOP", {"promptTokenCount": 1, "candidatesTokenCount": 2})),
    sse(UNAVAILABLE),
    sse(PROMPT_BLOCKED),
    b": ping\n\n",
    b"\r\n",
    orjson.dumps(UNAVAILABLE),
]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.lists(st.integers(min_value=0, max_value=600), max_size=20))
def test_random_bytes_never_crash(data: bytes, cuts: list[int]) -> None:
    """Random bytes at random splits end in events or a TurnoutError, never another exception."""
    ends_in_final_or_turnout_error(decode, split_at(data, cuts))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.sampled_from(VALID_EVENTS), st.binary(max_size=40)), max_size=12),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=20),
)
def test_valid_events_with_garbage_never_crash(items: list[bytes], cuts: list[int]) -> None:
    """Valid events interleaved with garbage, split anywhere, end in events or a TurnoutError."""
    ends_in_final_or_turnout_error(decode, split_at(b"".join(items), cuts))


# --- request building ----------------------------------------------------------------------------

WEATHER = ToolSpec(
    name="weather",
    description="Current weather",
    parameters={
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
        "additionalProperties": False,
    },
)
NOW = ToolSpec(name="now", description="Current time")


def full_request(**kw: Any) -> ChatRequest:
    return ChatRequest(
        messages=(
            Message.system("Be brief."),
            Message.user(
                [
                    TextPart(text="What is the weather here?"),
                    ImagePart(url="data:image/png;base64,iVBORw0KGgo="),
                    ImagePart(url="https://example.com/street.jpg"),
                ]
            ),
            Message.assistant(
                "Checking.",
                tool_calls=[
                    ToolCall(
                        id="call_1",
                        name="weather",
                        arguments='{"location":"Paris"}',
                        extra={"thought_signature": "sig-1"},
                    ),
                    ToolCall(id="call_2", name="now", arguments=""),
                ],
            ),
            Message.tool("call_1", '{"temp_c": 21}'),
            Message.tool("call_2", "12:00", name="now"),
            Message.user("And tomorrow?"),
        ),
        tools=(WEATHER, NOW),
        **kw,
    )


EXPECTED_CONTENTS = [
    {
        "role": "user",
        "parts": [
            {"text": "What is the weather here?"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
            {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/street.jpg"}},
        ],
    },
    {
        "role": "model",
        "parts": [
            {"text": "Checking."},
            {"functionCall": {"name": "weather", "args": {"location": "Paris"}}, "thoughtSignature": "sig-1"},
            {"functionCall": {"name": "now", "args": {}}},
        ],
    },
    {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "weather", "response": {"content": {"temp_c": 21}}}},
            {"functionResponse": {"name": "now", "response": {"content": "12:00"}}},
            {"text": "And tomorrow?"},
        ],
    },
]
EXPECTED_TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "weather",
                "description": "Current weather",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}},
                    "required": ["location"],
                },
            },
            {"name": "now", "description": "Current time"},
        ]
    }
]


async def test_request_body_path_and_auth_header(server: RecordingServer, http: HttpClient) -> None:
    """A full non-stream request: exact body, model path, and the key only in ``x-goog-api-key``."""
    server.reply(Reply(pieces=[orjson.dumps(chunk([{"text": "Sunny."}], "STOP"))]))
    adapter = _adapter(server.url + "/v1beta", http)
    resp = await adapter.chat(
        full_request(max_tokens=256, stop=("END",), tool_choice="weather"), "gemini-2.5-flash", 0.3
    )
    assert resp.text == "Sunny."
    (req,) = server.requests
    assert req.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert req.query == {}
    assert req.headers["x-goog-api-key"] == KEY
    assert "authorization" not in req.headers
    assert req.body == {
        "contents": EXPECTED_CONTENTS,
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"temperature": 0.3, "maxOutputTokens": 256, "stopSequences": ["END"]},
        "tools": EXPECTED_TOOLS,
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["weather"]}},
    }


async def test_stream_request_uses_alt_sse_and_omits_unset_options(server: RecordingServer, http: HttpClient) -> None:
    """A stream request goes to ``:streamGenerateContent?alt=sse``; no temperature or limits unless set."""
    server.reply(Reply(headers=SSE, pieces=[sse(chunk([{"text": "Hi"}], "STOP"))]))
    adapter = _adapter(server.url + "/v1beta", http)
    request = ChatRequest(messages=(Message.user("Hello"), Message.user("again")))
    resp = await acollect(adapter.stream(request, "models/gemini-2.5-flash"))
    assert resp.text == "Hi"
    (req,) = server.requests
    assert req.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert req.query == {"alt": "sse"}
    assert "key" not in req.query
    assert req.headers["x-goog-api-key"] == KEY
    assert req.body == {"contents": [{"role": "user", "parts": [{"text": "Hello"}, {"text": "again"}]}]}


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("required", {"mode": "ANY"}),
        ("none", {"mode": "NONE"}),
        ("now", {"mode": "ANY", "allowedFunctionNames": ["now"]}),
    ],
)
def test_tool_choice_maps_to_function_calling_mode(choice: str, config: dict[str, Any]) -> None:
    """tool_choice auto/required/none/name map to AUTO/ANY/NONE/ANY+allowedFunctionNames."""
    request = ChatRequest(messages=(Message.user("t"),), tools=(NOW,), tool_choice=choice)
    body = ADAPTER.build_body(request, "m", None, False)
    assert body["toolConfig"] == {"functionCallingConfig": config}


def test_profile_defaults_and_extras_apply() -> None:
    """Profile temperature/max_tokens fill in for the caller; provider_extra merges into the body."""
    adapter = _adapter(temperature=0.7, max_tokens=99, provider_extra={"safetySettings": []})
    body = adapter.build_body(ChatRequest(messages=(Message.user("t"),)), "m", None, False)
    assert body["generationConfig"] == {"temperature": 0.7, "maxOutputTokens": 99}
    assert body["safetySettings"] == []
    assert "toolConfig" not in body and "tools" not in body


def test_merge_system_into_user() -> None:
    """With ``merge_system_into_user`` the system prompt leads the first user turn instead."""
    adapter = _adapter(merge_system_into_user=True)
    request = ChatRequest(messages=(Message.system("Rules."), Message.user("Q")))
    body = adapter.build_body(request, "m", None, False)
    assert "systemInstruction" not in body
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Rules."}, {"text": "Q"}]}]


def test_assistant_thought_signature_round_trips() -> None:
    """A call decoded from a stream replays its thought signature on the next request."""
    (call,) = collect(decode([CALL_WIRE])).tool_calls
    request = ChatRequest(
        messages=(Message.user("w?"), Message.assistant(tool_calls=[call]), Message.tool(call.id, "20C"))
    )
    contents = ADAPTER.build_body(request, "m", None, False)["contents"]
    assert contents[1]["parts"][0]["thoughtSignature"] == CALL_SIGNATURE
    assert contents[2]["parts"][0]["functionResponse"]["name"] == "weather"


# --- real HTTP -----------------------------------------------------------------------------------


async def test_stream_served_in_pieces_matches_non_stream(server: RecordingServer, http: HttpClient) -> None:
    """The same answer streamed in small CRLF pieces and sent whole agree."""
    wire = crlf(TEXT_WIRE)
    pieces = [wire[i : i + 37] for i in range(0, len(wire), 37)]
    whole = first_line("google/stream_text_thought_signature.ndjson")
    whole["candidates"][0]["content"]["parts"][0]["text"] = TEXT
    whole["candidates"][0]["finishReason"] = "STOP"
    whole["usageMetadata"]["candidatesTokenCount"] = 23
    server.reply(Reply(headers=SSE, pieces=pieces), Reply(pieces=[orjson.dumps(whole)]))
    adapter = _adapter(server.url + "/v1beta", http)
    request = ChatRequest(messages=(Message.user("How many r in strawberry?"),))
    streamed = await acollect(adapter.stream(request, "gemini-3-pro-preview"))
    plain = await adapter.chat(request, "gemini-3-pro-preview")
    check_text_stream(streamed)
    check_text_stream(plain)
    assert plain.request_id == "bH6LaZW8Fp_3nsEPqtaSwQ4"


async def test_tool_call_stream_and_non_stream_agree(server: RecordingServer, http: HttpClient) -> None:
    """The recorded tool call decodes the same through both paths (names, arguments, usage, finish)."""
    body = fixture_path("google/generate_content_function_call.json").read_bytes()
    server.reply(Reply(headers=SSE, pieces=[CALL_WIRE]), Reply(pieces=[body]))
    adapter = _adapter(server.url + "/v1beta", http)
    request = ChatRequest(messages=(Message.user("weather in SF?"),), tools=(WEATHER,))
    streamed = await acollect(adapter.stream(request, "gemini-3-pro-preview"))
    plain = await adapter.chat(request, "gemini-3-pro-preview")
    for resp in (streamed, plain):
        assert [(c.name, c.parsed_arguments()) for c in resp.tool_calls] == [("weather", {"location": "San Francisco"})]
        assert resp.finish_reason == "tool_calls"
        assert resp.usage is not None and resp.usage.input_tokens == 29


QUOTA_429 = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
                        "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier",
                        "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                        "quotaValue": "250000",
                    }
                ],
            },
            {
                "@type": "type.googleapis.com/google.rpc.Help",
                "links": [{"description": "Learn more", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"},
        ],
    }
}
KEY_INVALID_400 = {
    "error": {
        "code": 400,
        "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            },
            {
                "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                "locale": "en-US",
                "message": "API key not valid. Please pass a valid API key.",
            },
        ],
    }
}
VERTEX_429 = [
    {
        "error": {
            "code": 429,
            "message": "Resource exhausted. Please try again later. Please refer to "
            "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
            "status": "RESOURCE_EXHAUSTED",
        }
    }
]
TOO_LONG_400 = {
    "error": {
        "code": 400,
        "message": "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
        "status": "INVALID_ARGUMENT",
    }
}
PERMISSION_403 = {
    "error": {
        "code": 403,
        "message": "Method doesn't allow unregistered callers (callers without established identity). Please use "
        "API Key or other form of API consumer identity to call this API.",
        "status": "PERMISSION_DENIED",
    }
}
NOT_FOUND_404 = {
    "error": {
        "code": 404,
        "message": "models/gemini-pro is not found for API version v1beta, or is not supported for generateContent. "
        "Call ListModels to see the list of available models and their supported methods.",
        "status": "NOT_FOUND",
    }
}
HTML_502 = (
    b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center>"
    b"<hr><center>nginx</center></body></html>"
)


@pytest.mark.parametrize(
    ("status", "headers", "body", "cls", "retry_after", "auth"),
    [
        (429, {}, QUOTA_429, ErrorClass.RATE_LIMITED, 26.0, False),
        (429, {"Retry-After": "12"}, VERTEX_429, ErrorClass.RATE_LIMITED, 12.0, False),
        (429, {}, VERTEX_429, ErrorClass.RATE_LIMITED, None, False),
        (400, {}, KEY_INVALID_400, ErrorClass.NON_RETRYABLE, None, True),
        (403, {}, PERMISSION_403, ErrorClass.NON_RETRYABLE, None, True),
        (400, {}, TOO_LONG_400, ErrorClass.CONTEXT_WINDOW, None, False),
        (404, {}, NOT_FOUND_404, ErrorClass.NON_RETRYABLE, None, False),
        (503, {}, UNAVAILABLE, ErrorClass.RETRYABLE, None, False),
    ],
    ids=["quota-retryinfo", "vertex-retry-after", "vertex-bare", "key-invalid", "403", "too-long", "404", "503"],
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
    """Real Gemini error bodies map to the right class, retry hint and auth flag, with no key in the text."""
    server.reply(Reply(status=status, headers={**JSON, **headers}, pieces=[orjson.dumps(body)]))
    adapter = _adapter(server.url + "/v1beta", http)
    request = ChatRequest(messages=(Message.user("hi"),))
    call = (
        acollect(adapter.stream(request, "gemini-2.5-flash"))
        if streaming
        else adapter.chat(request, "gemini-2.5-flash")
    )
    with pytest.raises(ProviderError) as info:
        await call
    err = info.value
    assert err.status == status
    assert err.error_class is cls
    assert err.retry_after == retry_after
    assert err.auth_failure is auth
    assert err.error_type is not None
    assert KEY not in str(err)


async def test_quota_failure_ids_and_reason_are_extracted() -> None:
    """QuotaFailure quota ids, RetryInfo delay and ErrorInfo reason reach the error facts."""
    facts = ADAPTER.error_facts(429, {}, orjson.dumps(QUOTA_429))
    assert facts.quota_ids == ("GenerateContentInputTokensPerModelPerMinute-FreeTier",)
    assert facts.retry_delay == "26s"
    assert facts.error_type == "RESOURCE_EXHAUSTED"
    assert ADAPTER.error_facts(400, {}, orjson.dumps(KEY_INVALID_400)).reason == "API_KEY_INVALID"


async def test_html_gateway_page_is_retryable_with_short_excerpt(server: RecordingServer, http: HttpClient) -> None:
    """A 502 HTML page is retryable and carries a short tag-free excerpt."""
    server.reply(Reply(status=502, headers={"Content-Type": "text/html"}, pieces=[HTML_502]))
    adapter = _adapter(server.url + "/v1beta", http)
    with pytest.raises(ProviderError) as info:
        await adapter.chat(ChatRequest(messages=(Message.user("hi"),)), "gemini-2.5-flash")
    err = info.value
    assert err.error_class is ErrorClass.RETRYABLE
    assert "502 Bad Gateway" in err.message
    assert "<" not in err.message and len(err.message) <= 200


async def test_refusals_over_http(server: RecordingServer, http: HttpClient) -> None:
    """A blocked prompt (non-stream) and a SAFETY stream both raise RefusalError over HTTP."""
    server.reply(
        Reply(pieces=[orjson.dumps(PROMPT_BLOCKED)]),
        Reply(headers=SSE, pieces=[sse(chunk([{"text": "Sure"}]), SAFETY_END, crlf=True)]),
    )
    adapter = _adapter(server.url + "/v1beta", http)
    request = ChatRequest(messages=(Message.user("something bad"),))
    with pytest.raises(RefusalError):
        await adapter.chat(request, "gemini-2.5-flash")
    seen: list[StreamEvent] = []
    with pytest.raises(RefusalError):
        await drain(adapter.stream(request, "gemini-2.5-flash"), seen)
    assert seen == [TextDelta(text="Sure")]


async def test_truncated_stream_over_http(server: RecordingServer, http: HttpClient) -> None:
    """A stream whose body ends before the finishReason chunk raises StreamTruncated through the adapter."""
    server.reply(Reply(headers=SSE, pieces=[sse(chunk([{"text": "Half"}]))]))
    adapter = _adapter(server.url + "/v1beta", http)
    seen: list[StreamEvent] = []
    with pytest.raises(StreamTruncated):
        await drain(adapter.stream(ChatRequest(messages=(Message.user("hi"),)), "gemini-2.5-flash"), seen)
    assert seen == [TextDelta(text="Half")]


def test_capabilities_and_tool_conversion() -> None:
    """Gemini declares native tools, vision, streaming and thinking, and converts tools to declarations."""
    caps = ADAPTER.capabilities("gemini-2.5-flash")
    assert caps.native_tools and caps.vision and caps.streaming and caps.streaming_tool_events
    payload = ADAPTER.convert_tools([NOW])
    assert payload.function_declarations == ({"name": "now", "description": "Current time"},)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"promptTokenCount": "12", "cachedContentTokenCount": True, "candidatesTokenCount": -3}, Usage(clamped=True)),
        ({"promptTokenCount": 10, "cachedContentTokenCount": 40, "candidatesTokenCount": 2}, None),
        (
            {"promptTokenCount": 1.5e300, "candidatesTokenCount": 2},
            Usage(input_tokens=MAX_PROVIDER_COUNT, output_tokens=2, clamped=True),
        ),
    ],
    ids=["garbage", "cached-beyond-prompt", "float"],
)
def test_malformed_usage_counts_are_bounded_where_parsed(meta: dict[str, Any], expected: Usage | None) -> None:
    """Non-integer, negative or boolean counts are clamped and marked; cached input never exceeds the prompt."""
    resp = collect(decode([sse(chunk([{"text": "Hi."}], "STOP", meta))]))
    if expected is None:
        expected = Usage(input_tokens=10, cached_input_tokens=10, output_tokens=2)
    assert resp.usage == expected
