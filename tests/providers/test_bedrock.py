"""Bedrock Converse: recorded answers and event streams replayed through the real parser, errors, the body."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import orjson
import pytest
from provider_kit import fixture_path, make_adapter, two_way_splits

from turnout.core.errors import ErrorClass, InvalidRequest, ProtocolError, ProviderError, RefusalError, StreamTruncated
from turnout.core.types import (
    ChatRequest,
    Final,
    ImagePart,
    Message,
    NativeRequest,
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
from turnout.providers.bedrock import BedrockAdapter, BedrockDecoder

MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"


@pytest.fixture
def adapter(http: HttpClient) -> BedrockAdapter:
    """A Bedrock adapter with a Bedrock API key (nothing to resolve)."""
    made = make_adapter(http, "bedrock", "http://127.0.0.1:9", region="us-east-1", api_key="bedrock-api-key-0001")
    assert isinstance(made, BedrockAdapter)
    return made


def _stream(name: str) -> bytes:
    return fixture_path(f"bedrock/{name}.eventstream").read_bytes()


def _decode(adapter: BedrockAdapter, pieces: list[bytes]) -> list[StreamEvent]:
    decoder = adapter.decoder(MODEL)
    events: list[StreamEvent] = []
    for piece in pieces:
        events += decoder.feed(piece)
        if decoder.done:
            break
    return events + decoder.finish()


def _decode_until_error(adapter: BedrockAdapter, pieces: list[bytes]) -> tuple[list[StreamEvent], Exception]:
    events: list[StreamEvent] = []
    decoder = adapter.decoder(MODEL)
    try:
        for piece in pieces:
            events += decoder.feed(piece)
        events += decoder.finish()
    except (ProviderError, ProtocolError) as exc:
        return events, exc
    raise AssertionError("the stream did not fail")


def _text(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _frame(headers: dict[str, str], payload: bytes) -> bytes:
    raw = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + struct.pack(">H", len(v)) + v.encode() for k, v in headers.items()
    )
    prelude = struct.pack(">II", 16 + len(raw) + len(payload), len(raw))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + raw + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    return _frame(
        {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}, orjson.dumps(payload)
    )


# --- non-streaming ----------------------------------------------------------------------------------------------


def test_text_answer_and_usage(adapter: BedrockAdapter) -> None:
    """A recorded Converse answer gives its text, finish reason and usage."""
    data = orjson.loads(fixture_path("bedrock/converse_text.json").read_bytes())
    answer = adapter.parse_response(data, MODEL)
    assert answer.text.startswith('Let me count the "r"s')
    assert answer.finish_reason == "stop"
    assert answer.usage == Usage(input_tokens=22, output_tokens=57)


def test_reasoning_answer_keeps_its_reasoning(adapter: BedrockAdapter) -> None:
    """A recorded answer with a reasoning block gives the reasoning text apart from the answer."""
    data = orjson.loads(fixture_path("bedrock/converse_reasoning.json").read_bytes())
    answer = adapter.parse_response(data, MODEL)
    assert answer.reasoning is not None and answer.reasoning.startswith("Let me count the r's")
    assert answer.text.startswith("There are **3** r's")


def test_tool_call_answer(adapter: BedrockAdapter) -> None:
    """A recorded toolUse answer is a tool call with its arguments as JSON text, finishing with tool_calls."""
    data = orjson.loads(fixture_path("bedrock/converse_tool_call.json").read_bytes())
    answer = adapter.parse_response(data, MODEL)
    assert answer.tool_calls == (ToolCall(id="tool-use-id", name="bash", arguments='{"command":"ls -l"}'),)
    assert answer.finish_reason == "tool_calls"


def test_cache_tokens_count_as_input() -> None:
    """Converse's inputTokens leaves out cache reads and writes: the unified input adds them back."""
    from turnout.providers.bedrock import normalise_usage

    usage = normalise_usage(
        {"inputTokens": 10, "outputTokens": 3, "cacheReadInputTokens": 100, "cacheWriteInputTokens": 7}
    )
    assert usage == Usage(input_tokens=117, output_tokens=3, cached_input_tokens=100, cache_write_tokens=7)


def test_usage_values_are_bounded() -> None:
    """A negative or boolean token count is 0 and marked clamped (the attempt's record then estimates it); a large
    whole count is kept as reported (the record bounds it by what the request allowed).
    """
    from turnout.providers.bedrock import normalise_usage

    usage = normalise_usage({"inputTokens": -5, "outputTokens": True, "cacheReadInputTokens": 10**12})
    assert usage == Usage(input_tokens=10**12, cached_input_tokens=10**12, clamped=True)


@pytest.mark.parametrize(
    ("stop", "error"), [("guardrail_intervened", RefusalError), ("content_filtered", RefusalError)]
)
def test_refusal_stops_raise(adapter: BedrockAdapter, stop: str, error: type[Exception]) -> None:
    """A guardrail or content-filter stop is a refusal, never an answer."""
    data = {"output": {"message": {"role": "assistant", "content": [{"text": "blocked"}]}}, "stopReason": stop}
    with pytest.raises(error):
        adapter.parse_response(data, MODEL)


def test_malformed_tool_use_is_retryable(adapter: BedrockAdapter) -> None:
    """``malformed_tool_use`` is the model's own failure: retryable, not an answer."""
    data = {"output": {"message": {"role": "assistant", "content": []}}, "stopReason": "malformed_tool_use"}
    with pytest.raises(ProviderError) as info:
        adapter.parse_response(data, MODEL)
    assert info.value.error_class is ErrorClass.RETRYABLE


# --- errors before a stream ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "body", "expected"),
    [
        (
            429,
            "ThrottlingException",
            b'{"message":"Too many tokens, please wait before trying again."}',
            ErrorClass.RATE_LIMITED,
        ),
        (
            400,
            "ValidationException",
            fixture_path("bedrock/error_400_validation.json").read_bytes(),
            ErrorClass.NON_RETRYABLE,
        ),
        (
            400,
            "ValidationException",
            b'{"message":"Input is too long for requested model."}',
            ErrorClass.CONTEXT_WINDOW,
        ),
        (
            500,
            "InternalServerException",
            b'{"message":"The system encountered an unexpected error."}',
            ErrorClass.RETRYABLE,
        ),
        (
            503,
            "ServiceUnavailableException",
            b'{"message":"Bedrock is unable to process your request."}',
            ErrorClass.RETRYABLE,
        ),
        (424, "ModelErrorException", b'{"message":"The model failed."}', ErrorClass.RETRYABLE),
        (424, "ModelStreamErrorException", b'{"message":"Model Stream Error"}', ErrorClass.RETRYABLE),
        (408, "ModelTimeoutException", b'{"message":"Model timed out."}', ErrorClass.RETRYABLE),
        (403, "AccessDeniedException", b'{"Message":"You don\'t have access to the model."}', ErrorClass.NON_RETRYABLE),
        (404, "ResourceNotFoundException", b'{"message":"Model not found."}', ErrorClass.NON_RETRYABLE),
    ],
)
def test_error_types_are_classified(
    adapter: BedrockAdapter, status: int, error_type: str, body: bytes, expected: ErrorClass
) -> None:
    """``x-amzn-ErrorType`` and the body's message decide the class: throttling waits, validation is the caller's."""
    headers = {
        "x-amzn-errortype": f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/",
        "x-amzn-requestid": "0d7a-request",
    }
    error = adapter.error(status, headers, body, MODEL)
    assert error.error_class is expected
    assert error.error_type == error_type
    assert error.request_id == "0d7a-request"
    assert error.message


def test_on_demand_throughput_error_is_not_retried(adapter: BedrockAdapter) -> None:
    """An on-demand id that needs an inference profile is a validation error: not worth the same call again."""
    body = (
        b'{"message":"Invocation of model ID anthropic.claude-sonnet-4-5-20250929-v1:0 with on-demand throughput '
        b'isn\xe2\x80\x99t supported. Retry your request with the ID or ARN of an inference profile."}'
    )
    error = adapter.error(400, {"x-amzn-errortype": "ValidationException"}, body, MODEL)
    assert error.error_class is ErrorClass.NON_RETRYABLE


def test_error_type_from_the_body_when_no_header(adapter: BedrockAdapter) -> None:
    """Without the header, the body's ``__type`` names the error."""
    body = b'{"__type":"com.amazon.coral.service#ThrottlingException","message":"Rate exceeded"}'
    error = adapter.error(429, {}, body, MODEL)
    assert error.error_type == "ThrottlingException"
    assert error.error_class is ErrorClass.RATE_LIMITED


# --- streams ----------------------------------------------------------------------------------------------------


def test_text_stream_at_every_split(adapter: BedrockAdapter) -> None:
    """A recorded text stream decodes to the same events however its bytes are split."""
    data = _stream("stream_text")
    whole = _decode(adapter, [data])
    assert _text(whole).startswith('Let me count the "r"s in "strawberry":')
    assert _text(whole).endswith('There are **3** r\'s in "strawberry."')
    assert whole[-2:] == [
        UsageEvent(usage=Usage(input_tokens=22, output_tokens=55)),
        Final(finish_reason="stop", model=MODEL),
    ]
    for pieces in two_way_splits(data):
        assert _decode(adapter, pieces) == whole


def test_reasoning_stream_at_every_split(adapter: BedrockAdapter) -> None:
    """Reasoning deltas come out as reasoning, apart from the answer text, at every split."""
    data = _stream("stream_reasoning")
    whole = _decode(adapter, [data])
    reasoning = "".join(e.text for e in whole if isinstance(e, ReasoningDelta))
    assert reasoning.startswith("Let me count the r's") and reasoning.endswith("are 3 r's.")
    assert _text(whole).startswith("There are **3** r's")
    for pieces in two_way_splits(data):
        assert _decode(adapter, pieces) == whole


def test_tool_stream_at_every_split(adapter: BedrockAdapter) -> None:
    """Tool input fragments join into one call; metadata before messageStop still gives the usage."""
    data = _stream("stream_tool_call")
    whole = _decode(adapter, [data])
    assert whole == [
        ToolCallEvent(call=ToolCall(id="tool-use-id", name="test-tool", arguments='{"value":"Sparkle Day"}')),
        UsageEvent(usage=Usage(input_tokens=125, output_tokens=45)),
        Final(finish_reason="tool_calls", model=MODEL),
    ]
    for pieces in two_way_splits(data):
        assert _decode(adapter, pieces) == whole


@pytest.mark.parametrize(
    ("name", "error_type", "expected", "status"),
    [
        ("stream_throttling", "throttlingException", ErrorClass.RATE_LIMITED, 429),
        ("stream_internalServer", "internalServerException", ErrorClass.RETRYABLE, 500),
        ("stream_serviceUnavailable", "serviceUnavailableException", ErrorClass.RETRYABLE, 503),
        ("stream_validation", "validationException", ErrorClass.CONTEXT_WINDOW, 400),
        ("stream_model_stream_error", "modelStreamErrorException", ErrorClass.RETRYABLE, 424),
    ],
)
def test_exception_frames_are_classified_at_every_split(
    adapter: BedrockAdapter, name: str, error_type: str, expected: ErrorClass, status: int
) -> None:
    """An exception inside a 200 is the failure it names, raised after the text before it, at every split."""
    data = _stream(name)
    events, error = _decode_until_error(adapter, [data])
    assert isinstance(error, ProviderError) and not isinstance(error, ProtocolError)
    assert (error.error_type, error.error_class, error.status) == (error_type, expected, status)
    for pieces in two_way_splits(data):
        split_events, split_error = _decode_until_error(adapter, pieces)
        assert _text(split_events) == _text(events)
        assert type(split_error) is type(error) and split_error.error_class is expected


def test_validation_exception_frame_is_the_callers() -> None:
    """A plain validationException frame is non-retryable: the same request would fail again."""
    frame = _frame(
        {":exception-type": "validationException", ":content-type": "application/json", ":message-type": "exception"},
        b'{"message":"messages: text content blocks must be non-empty"}',
    )
    events, error = _decode_until_error(_adapter_for_tests(), [frame])
    assert events == [] and isinstance(error, ProviderError)
    assert error.error_class is ErrorClass.NON_RETRYABLE


def _adapter_for_tests() -> BedrockAdapter:
    made = make_adapter(
        HttpClient(), "bedrock", "http://127.0.0.1:9", region="us-east-1", api_key="bedrock-api-key-0001"
    )
    assert isinstance(made, BedrockAdapter)
    return made


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00" * 12,  # a zero-length frame
        b"\x00\x00\x00\x0f\x00\x00\x00\x00" + b"\x00" * 8,  # shorter than the smallest frame
        b"\x00\x00\x00\x20\x00\x00\x00\x40" + b"\x00" * 24,  # headers longer than the frame
        b"\x7f\xff\xff\xff\x00\x00\x00\x00" + b"\x00" * 8,  # two gigabytes announced
    ],
)
def test_impossible_frames_fail_at_once(adapter: BedrockAdapter, garbage: bytes) -> None:
    """A zero-length, short or oversized frame is a protocol error on the spot: never a wait or a spin."""
    decoder = adapter.decoder(MODEL)
    with pytest.raises(ProtocolError):
        decoder.feed(garbage)


def test_a_frame_with_a_bad_crc_is_a_protocol_error(adapter: BedrockAdapter) -> None:
    """A frame whose message CRC does not match its bytes is refused (botocore's checksum)."""
    good = _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}})
    bad = good[:-1] + bytes([good[-1] ^ 1])
    with pytest.raises(ProtocolError):
        adapter.decoder(MODEL).feed(bad)
    corrupt_prelude = good[:9] + bytes([good[9] ^ 1]) + good[10:]
    with pytest.raises(ProtocolError):
        adapter.decoder(MODEL).feed(corrupt_prelude)


def test_text_before_a_bad_frame_is_delivered_first(adapter: BedrockAdapter) -> None:
    """Events decoded before a malformed frame reach the caller; the error follows at the end."""
    good = _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}})
    decoder = adapter.decoder(MODEL)
    assert decoder.feed(good + b"\x00" * 12) == [TextDelta(text="hi")]
    with pytest.raises(ProtocolError):
        decoder.finish()


def test_end_before_message_stop_is_truncated(adapter: BedrockAdapter) -> None:
    """A body that ends before messageStop is a truncated stream, however far it got."""
    data = _stream("stream_text")
    frames_before_stop = data[: data.index(b"messageStop") - 30]
    decoder = adapter.decoder(MODEL)
    decoder.feed(frames_before_stop)
    with pytest.raises(StreamTruncated):
        decoder.finish()


def test_message_stop_without_metadata_completes(adapter: BedrockAdapter) -> None:
    """MessageStop then the end of the body completes the answer (without usage, none having come)."""
    body = _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hi"}}) + _event(
        "messageStop", {"stopReason": "max_tokens"}
    )
    assert _decode(adapter, [body]) == [TextDelta(text="hi"), Final(finish_reason="length", model=MODEL)]


def test_guardrail_stop_in_a_stream_is_a_refusal(adapter: BedrockAdapter) -> None:
    """A stream stopped by a guardrail raises a refusal, never a normal end."""
    body = _event("messageStop", {"stopReason": "guardrail_intervened"})
    with pytest.raises(RefusalError):
        _decode(adapter, [body])


def test_streamed_reasoning_rides_with_the_next_tool_call(adapter: BedrockAdapter) -> None:
    """Reasoning text and its signature before a tool call are kept on the call, to be sent back to Bedrock."""
    body = b"".join(
        (
            _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "think"}}}),
            _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "c2ln"}}}),
            _event("contentBlockStop", {"contentBlockIndex": 0}),
            _event(
                "contentBlockStart", {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}
            ),
            _event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": ""}}}),
            _event("contentBlockStop", {"contentBlockIndex": 1}),
            _event("messageStop", {"stopReason": "tool_use"}),
        )
    )
    events = _decode(adapter, [body])
    call = next(e.call for e in events if isinstance(e, ToolCallEvent))
    assert call.arguments == "{}"
    assert call.extra == {
        "bedrock_reasoning": ({"reasoningContent": {"reasoningText": {"text": "think", "signature": "c2ln"}}},)
    }
    request = ChatRequest.of([Message.user("q"), Message.assistant("", tool_calls=[call]), Message.tool("t1", "42")])
    sent = adapter.build_body(request, MODEL, None, False)["messages"][1]["content"]
    assert sent[0] == {"reasoningContent": {"reasoningText": {"text": "think", "signature": "c2ln"}}}
    assert sent[1] == {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}


def test_decoder_is_the_bedrock_one(adapter: BedrockAdapter) -> None:
    """The adapter's stream decoder reads event-stream frames (not SSE)."""
    assert isinstance(adapter.decoder(MODEL), BedrockDecoder)


# --- the request ------------------------------------------------------------------------------------------------


def test_body_from_a_neutral_request(adapter: BedrockAdapter) -> None:
    """System, turns, images, tools, tool results, stop sequences and limits in Converse's shape."""
    png = "data:image/png;base64,iVBORw0KGgo="
    request = ChatRequest.of(
        [
            Message.system("be brief"),
            Message.user([TextPart(text="what is this?"), ImagePart(url=png)]),
            Message.assistant("", tool_calls=[ToolCall(id="t1", name="look", arguments='{"x":1}')]),
            Message.tool("t1", "a cat"),
            Message.tool("t2", "   "),
        ],
        tools=[ToolSpec(name="look", description="Look closer", parameters={"type": "object"})],
        tool_choice="required",
        max_tokens=256,
        stop=["END"],
    )
    body = adapter.build_body(request, MODEL, 0.2, False)
    assert body["system"] == [{"text": "be brief"}]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"text": "what is this?"}, {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}],
        },
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "look", "input": {"x": 1}}}]},
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": "t1", "content": [{"text": "a cat"}]}},
                {"toolResult": {"toolUseId": "t2", "content": [{"text": "   "}]}},
            ],
        },
    ]
    assert body["inferenceConfig"] == {"maxTokens": 256, "temperature": 0.2, "stopSequences": ["END"]}
    assert body["toolConfig"] == {
        "tools": [
            {"toolSpec": {"name": "look", "inputSchema": {"json": {"type": "object"}}, "description": "Look closer"}}
        ],
        "toolChoice": {"any": {}},
    }
    assert "model" not in body


def test_remote_image_is_refused_before_sending(adapter: BedrockAdapter) -> None:
    """Converse takes image bytes only: an image URL is the caller's error, raised before any request."""
    request = ChatRequest.of([Message.user([ImagePart(url="https://example.com/cat.png")])])
    with pytest.raises(InvalidRequest) as info:
        adapter.build_body(request, MODEL, None, False)
    assert "inline images" in info.value.reason


def test_anthropic_body_keeps_its_meaning(adapter: BedrockAdapter) -> None:
    """cache_control becomes cachePoint, documents and tool results carry over, thinking becomes a model field."""
    native = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "tools": [
            {
                "name": "get",
                "description": "Get it",
                "input_schema": {"type": "object"},
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "tool_choice": {"type": "tool", "name": "get"},
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "title": "Q3 report.pdf",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
                    },
                    {"type": "text", "text": "Summarise.", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "anthropic-signed"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": 1}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom", "is_error": True}],
            },
        ],
    }
    request = ChatRequest.of("Summarise.", native=NativeRequest(protocol="anthropic", body=native))
    body = adapter.build_body(request, MODEL, None, True)
    assert body["system"] == [{"text": "You are terse."}, {"cachePoint": {"type": "default"}}]
    assert body["additionalModelRequestFields"] == {"thinking": {"type": "enabled", "budget_tokens": 2048}}
    assert body["inferenceConfig"] == {"maxTokens": 1024}
    assert body["toolConfig"] == {
        "tools": [
            {"toolSpec": {"name": "get", "inputSchema": {"json": {"type": "object"}}, "description": "Get it"}},
            {"cachePoint": {"type": "default"}},
        ],
        "toolChoice": {"tool": {"name": "get"}},
    }
    user, assistant, result = body["messages"]
    assert user["content"] == [
        {"document": {"name": "Q3 report pdf", "format": "pdf", "source": {"bytes": "JVBERi0="}}},
        {"text": "Summarise."},
        {"cachePoint": {"type": "default"}},
    ]
    # the thinking block was signed by Anthropic: Bedrock would refuse it, so it is left out
    assert assistant["content"] == [{"toolUse": {"toolUseId": "toolu_1", "name": "get", "input": {"q": 1}}}]
    assert result["content"] == [
        {"toolResult": {"toolUseId": "toolu_1", "content": [{"text": "boom"}], "status": "error"}}
    ]


# --- the URL ----------------------------------------------------------------------------------------------------


def test_model_id_is_escaped_in_the_path(adapter: BedrockAdapter) -> None:
    """``:`` and ``/`` (ARNs) are escaped as botocore escapes them, and stay escaped on the way out."""
    assert adapter.url(MODEL, False).raw_path == "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert adapter.url(arn, True).raw_path == (
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F"
        "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    )


@pytest.mark.parametrize("model", ["", ".", "..", "bad\nid"])
def test_unsendable_model_ids_are_refused(adapter: BedrockAdapter, model: str) -> None:
    """An id that would leave its path segment is refused before anything is sent."""
    assert BedrockAdapter.model_problem(model) is not None
    with pytest.raises(ProviderError):
        adapter.url(model, False)


def test_default_endpoint_follows_the_region(http: HttpClient) -> None:
    """Without a uri, the endpoint is the region's bedrock-runtime host."""
    from turnout.config import load_config_dict
    from turnout.providers import build_adapter

    cfg = load_config_dict(
        {"providers": {"models": {"bedrock": {"eu": {"region": "eu-central-1", "api_key": "k-0001"}}}}}, env={}
    )
    made = build_adapter("bedrock.eu", cfg.profiles()["bedrock.eu"], http, "k-0001")
    assert str(made.url("amazon.nova-pro-v1:0", False)) == (
        "https://bedrock-runtime.eu-central-1.amazonaws.com/model/amazon.nova-pro-v1%3A0/converse"
    )


def test_anthropic_signed_thinking_is_never_sent_to_bedrock(adapter: BedrockAdapter) -> None:
    """Thinking blocks Anthropic signed, kept on a tool call, stay out of a Bedrock request."""
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "anthropic-signed"}
    call = ToolCall(id="toolu_1", name="get", arguments="{}", extra={"anthropic_thinking": (thinking,)})
    request = ChatRequest.of(
        [Message.user("q"), Message.assistant("", tool_calls=[call]), Message.tool("toolu_1", "1")]
    )
    sent = adapter.build_body(request, MODEL, None, False)["messages"][1]["content"]
    assert sent == [{"toolUse": {"toolUseId": "toolu_1", "name": "get", "input": {}}}]


async def test_a_refused_connection_names_the_endpoint(adapter: BedrockAdapter) -> None:
    """A connection that fails names the host and port it went to, from the escaped URL the adapter sends."""
    from turnout.core.errors import ProviderConnectionError

    with pytest.raises(ProviderConnectionError) as info:
        await adapter.chat(ChatRequest.of("hi"), MODEL)
    assert "127.0.0.1:9" in str(info.value)
