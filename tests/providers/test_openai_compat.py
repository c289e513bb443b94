"""OpenAI-compatible vendors on the Chat Completions adapter: DeepSeek, Groq, xAI, OpenRouter, Mistral, Azure,
Perplexity: recorded and hand-written wire samples, usage shapes, error bodies and request differences.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from provider_kit import (
    Reply,
    bytewise,
    fixture_path,
    make_adapter,
    random_splits,
    sse_from_chunks_file,
    two_way_splits,
)

from turnout.core.errors import ErrorClass, ProtocolError, ProviderError, RefusalError, StreamTruncated
from turnout.core.registry import FAMILIES
from turnout.core.streams import acollect, collect
from turnout.core.types import ChatRequest, ChatResponse, Final, Message, StreamEvent, ToolCall, ToolSpec, Usage
from turnout.providers import HttpClient
from turnout.providers.base import HTTPAdapter
from turnout.providers.openai_compat import error_facts, usage_from

DEEPSEEK = "openai_compatible/deepseek_stream_reasoning_tool_call.ndjson"
GROQ = "openai_compatible/groq_stream_tool_call.ndjson"
XAI = "openai_compatible/xai_stream_reasoning_usage.ndjson"
OPENROUTER_ERROR = "openrouter/chat_stream_midstream_error_docs_example.sse"

# Expected answers, read from the recordings (family, expected).
RECORDED: dict[str, tuple[str, ChatResponse]] = {
    DEEPSEEK: (
        "deepseek",
        ChatResponse(
            reasoning=(
                "The user is asking for the weather in San Francisco. I need to use the weather tool to get this "
                'information. Let me invoke the weather tool with the location parameter set to "San Francisco".'
            ),
            tool_calls=(
                ToolCall(
                    id="call_00_ioIn7yN9p1ZOMNpDLwd4MgAF", name="weather", arguments='{"location": "San Francisco"}'
                ),
            ),
            usage=Usage(input_tokens=339, output_tokens=83, cached_input_tokens=320),
            finish_reason="tool_calls",
            model="deepseek-reasoner",
        ),
    ),
    GROQ: (
        "groq",
        ChatResponse(
            tool_calls=(ToolCall(id="tk85n1k4m", name="weather", arguments="{}"),),
            usage=Usage(input_tokens=210, output_tokens=15),
            finish_reason="tool_calls",
            model="llama-3.3-70b-versatile",
        ),
    ),
    XAI: (
        "xai",
        ChatResponse(
            text="Hello",
            reasoning="First, the user said",
            # xAI leaves the 290 reasoning tokens out of completion_tokens; they are output all the same.
            usage=Usage(input_tokens=12, output_tokens=291, cached_input_tokens=11),
            finish_reason="stop",
            model="grok-3-mini",
        ),
    ),
}


@functools.cache
def adapter(family: str, **profile: Any) -> HTTPAdapter:
    """An adapter of ``family`` for decoding and body building (no connection is opened)."""
    if family == "azure":
        profile.setdefault("deployment", "gpt4o-prod")
    if family not in FAMILIES:
        profile.setdefault("kind", "openai-compatible")
    return make_adapter(HttpClient(), family, "http://127.0.0.1:9/v1", **profile)


def decode(family: str, pieces: list[bytes], model: str = "m") -> list[StreamEvent]:
    """Feed ``pieces`` to a fresh decoder of ``family`` and finish it."""
    decoder = adapter(family).decoder(model)
    events: list[StreamEvent] = []
    for piece in pieces:
        events += decoder.feed(piece)
        if decoder.done:
            break
    return events + decoder.finish()


def sse(*chunks: Any, done: bool = True) -> bytes:
    """SSE wire bytes for chunk objects (bytes are written as they are), ending with ``[DONE]``."""
    out = b"".join(c if isinstance(c, bytes) else b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


def event_ends(body: bytes) -> list[int]:
    """Offsets just after each SSE event's blank line."""
    ends, pos = [], body.find(b"\n\n")
    while pos >= 0:
        ends.append(pos + 2)
        pos = body.find(b"\n\n", pos + 2)
    return ends


# --- recorded vendor streams --------------------------------------------------------------------


@pytest.mark.parametrize("rel", sorted(RECORDED))
def test_recorded_vendor_stream_at_every_split(rel: str) -> None:
    """DeepSeek, Groq and xAI recordings decode exactly however they are split, LF or CRLF."""
    family, expected = RECORDED[rel]
    body = sse_from_chunks_file(rel, done=True)
    assert collect(decode(family, [body])) == expected
    for pieces in two_way_splits(body, max_points=2000):
        assert collect(decode(family, pieces)) == expected
    for pieces in random_splits(body, runs=20):
        assert collect(decode(family, pieces)) == expected
    assert collect(decode(family, bytewise(body))) == expected
    crlf = body.replace(b"\n", b"\r\n")
    for pieces in [[crlf], *two_way_splits(crlf, max_points=300)]:
        assert collect(decode(family, pieces)) == expected


@pytest.mark.parametrize("rel", sorted(RECORDED))
def test_recorded_vendor_stream_truncation(rel: str) -> None:
    """EOF at any event boundary before the finish chunk is StreamTruncated; after it the answer completes."""
    family, expected = RECORDED[rel]
    body = sse_from_chunks_file(rel, done=True)
    finish_at = next(i for i in event_ends(body) if i > body.index(b'"finish_reason":"'))
    for cut in event_ends(body)[:-1]:
        if cut < finish_at:
            with pytest.raises(StreamTruncated):
                decode(family, [body[:cut]])
        else:
            answer = collect(decode(family, [body[:cut]]))
            assert (answer.text, answer.tool_calls, answer.finish_reason) == (
                expected.text,
                expected.tool_calls,
                expected.finish_reason,
            )
    with pytest.raises(StreamTruncated):
        decode(family, [b""])


def test_deepseek_keep_alive_comments() -> None:
    """DeepSeek's ``: keep-alive`` comments while queued change nothing."""
    body = b": keep-alive\n\n: keep-alive\n\n" + sse_from_chunks_file(DEEPSEEK, done=True)
    assert collect(decode("deepseek", [body])) == RECORDED[DEEPSEEK][1]


def test_deepseek_insufficient_system_resource_is_a_retryable_error() -> None:
    """DeepSeek's ``insufficient_system_resource`` finish is a failure, not a short answer."""
    body = sse(
        {"choices": [{"index": 0, "delta": {"content": "partial"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "insufficient_system_resource"}]},
    )
    with pytest.raises(ProviderError) as info:
        decode("deepseek", [body])
    assert info.value.error_class is ErrorClass.RETRYABLE


def test_groq_usage_only_in_x_groq() -> None:
    """Groq's usage is read from ``x_groq.usage`` when the top-level ``usage`` is missing."""
    lines = sse_from_chunks_file(GROQ, done=True).split(b"\n\n")
    last = orjson.loads(lines[2][len(b"data: ") :])
    del last["usage"]
    body = b"\n\n".join([*lines[:2], b"data: " + orjson.dumps(last), *lines[3:]])
    assert collect(decode("groq", [body])).usage == Usage(input_tokens=210, output_tokens=15)


# --- usage normalisation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "usage"),
    [
        (
            {
                "prompt_tokens": 16,
                "completion_tokens": 363,
                "total_tokens": 379,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
            Usage(input_tokens=16, output_tokens=363),
        ),
        (
            {
                "prompt_tokens": 2006,
                "completion_tokens": 300,
                "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920},
                "completion_tokens_details": {"reasoning_tokens": 256},
            },
            Usage(input_tokens=2006, output_tokens=300, cached_input_tokens=1920),
        ),
        (
            {
                "prompt_tokens": 339,
                "completion_tokens": 83,
                "total_tokens": 422,
                "prompt_cache_hit_tokens": 320,
                "prompt_cache_miss_tokens": 19,
            },
            Usage(input_tokens=339, output_tokens=83, cached_input_tokens=320),
        ),
        (
            {
                "prompt_tokens": 12,
                "completion_tokens": 1,
                "total_tokens": 303,
                "prompt_tokens_details": {"cached_tokens": 11},
                "completion_tokens_details": {"reasoning_tokens": 290},
            },
            Usage(input_tokens=12, output_tokens=291, cached_input_tokens=11),
        ),
        (
            {"prompt_tokens": 5, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 40}},
            Usage(input_tokens=45, output_tokens=2, cached_input_tokens=40),
        ),
        (
            {
                "prompt_tokens": 100,
                "completion_tokens": 10,
                "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 60},
            },
            Usage(input_tokens=100, output_tokens=10, cached_input_tokens=20, cache_write_tokens=60),
        ),
        ({"prompt_tokens": None, "completion_tokens": "x", "prompt_tokens_details": None}, Usage(clamped=True)),
    ],
    ids=["openai", "openai-reasoning", "deepseek", "xai", "cached-apart", "cache-write", "garbage"],
)
def test_usage_normalisation(raw: dict[str, Any], usage: Usage) -> None:
    """Every vendor's usage becomes input (cached included), cached input, cache writes and output."""
    assert usage_from(raw) == usage


_count = st.one_of(st.none(), st.integers(-5, 10**6), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3))


@given(prompt=_count, completion=_count, total=_count)
def test_usage_without_details_is_read_as_with_empty_details(prompt: object, completion: object, total: object) -> None:
    """Usage that names no cache or reasoning counts reads as the general path reads it with empty details."""
    raw = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    general = {**raw, "prompt_tokens_details": {}, "completion_tokens_details": {}}
    assert usage_from(raw) == usage_from(general)


# --- OpenRouter ---------------------------------------------------------------------------------

TEXT_CHUNKS = [
    {"id": "gen-1", "model": "openai/gpt-4o", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"id": "gen-1", "model": "openai/gpt-4o", "choices": [{"index": 0, "delta": {"content": "Hello"}}]},
    {"id": "gen-1", "model": "openai/gpt-4o", "choices": [{"index": 0, "delta": {"content": " there"}}]},
]


def test_openrouter_processing_comments() -> None:
    """``: OPENROUTER PROCESSING`` comments before and between chunks are keep-alives."""
    comment = b": OPENROUTER PROCESSING\n\n"
    body = sse(
        comment,
        TEXT_CHUNKS[0],
        comment,
        *TEXT_CHUNKS[1:],
        comment,
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
        },
    )
    answer = collect(decode("openrouter", [body]))
    assert (answer.text, answer.model, answer.usage) == (
        "Hello there",
        "openai/gpt-4o",
        Usage(input_tokens=4, output_tokens=2),
    )


def test_openrouter_midstream_error_fixture() -> None:
    """The documented mid-stream error (top-level ``error``, ``finish_reason: "error"``) is a retryable error."""
    error_event = fixture_path(OPENROUTER_ERROR).read_bytes()
    body = sse(*TEXT_CHUNKS, done=False) + b": OPENROUTER PROCESSING\n\n" + error_event
    for pieces in [[body], *two_way_splits(body)]:
        with pytest.raises(ProviderError) as info:
            decode("openrouter", pieces)
        assert not isinstance(info.value, ProtocolError)
        assert info.value.error_class is ErrorClass.RETRYABLE
        assert info.value.error_code == "server_error"
        assert info.value.message == "Provider disconnected unexpectedly"


@pytest.mark.parametrize(
    ("chunk", "cls"),
    [
        (
            {
                "error": {"code": 502, "message": "Upstream error"},
                "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
            },
            ErrorClass.RETRYABLE,
        ),
        ({"error": {"code": 429, "message": "Rate limited upstream"}, "choices": []}, ErrorClass.RATE_LIMITED),
        ({"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]}, ErrorClass.RETRYABLE),
    ],
    ids=["int-502", "int-429", "bare-finish-error"],
)
def test_openrouter_in_band_error_shapes(chunk: dict[str, Any], cls: ErrorClass) -> None:
    """Integer in-band codes act as the upstream status; a bare ``finish_reason: "error"`` is an error too."""
    with pytest.raises(ProviderError) as info:
        decode("openrouter", [sse(TEXT_CHUNKS[1], chunk, done=False)])
    assert info.value.error_class is cls


# --- Mistral ------------------------------------------------------------------------------------

MISTRAL_TOOLS = sse(
    {
        "id": "b39",
        "object": "chat.completion.chunk",
        "model": "mistral-small-latest",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
    },
    {
        "id": "b39",
        "object": "chat.completion.chunk",
        "model": "mistral-small-latest",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "gSIMJiOkT",
                            "function": {"name": "weather", "arguments": '{"location": "San Francisco"}'},
                        },
                        {"id": "hX2kLq9Pz", "function": {"name": "clock", "arguments": {"tz": "PST"}}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 124, "total_tokens": 146, "completion_tokens": 22},
    },
)
MISTRAL_INCREMENTAL = sse(
    {
        "model": "zai-glm-5-2",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "index": 0,
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "chatcmpl-tool-9f1",
                            "type": "function",
                            "function": {"name": "webSearchTool", "arguments": ""},
                            "index": 0,
                        }
                    ],
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "model": "zai-glm-5-2",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "index": 0,
                    "content": "",
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {"name": "", "arguments": '{"query": "current Berlin weather"}'},
                            "index": 0,
                        }
                    ],
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "model": "zai-glm-5-2",
        "choices": [{"index": 0, "delta": {"index": 0, "content": ""}, "finish_reason": "tool_calls"}],
        "usage": {
            "prompt_tokens": 171,
            "total_tokens": 185,
            "completion_tokens": 14,
            "prompt_tokens_details": {"cached_tokens": 128},
        },
    },
    done=False,
)
MISTRAL_THINKING = sse(
    {
        "model": "magistral-medium-2507",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": [{"type": "text", "text": "The user is asking"}]}],
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "model": "magistral-medium-2507",
        "choices": [
            {
                "index": 0,
                "delta": {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": " for 2+2."}]}]},
                "finish_reason": None,
            }
        ],
    },
    {
        "model": "magistral-medium-2507",
        "choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "2 + 2 = 4"}]}, "finish_reason": None}],
    },
    {
        "model": "magistral-medium-2507",
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "total_tokens": 56, "completion_tokens": 46},
    },
)


def test_mistral_tool_calls_without_index_or_type() -> None:
    """Whole calls without ``index``/``type`` are keyed by their position; object arguments become JSON."""
    for pieces in [[MISTRAL_TOOLS], *two_way_splits(MISTRAL_TOOLS)]:
        answer = collect(decode("mistral", pieces))
        assert [(c.id, c.name, c.parsed_arguments()) for c in answer.tool_calls] == [
            ("gSIMJiOkT", "weather", {"location": "San Francisco"}),
            ("hX2kLq9Pz", "clock", {"tz": "PST"}),
        ]
        assert answer.finish_reason == "tool_calls"
        assert answer.usage == Usage(input_tokens=124, output_tokens=22)


def test_mistral_repeated_type_with_empty_name_keeps_the_name() -> None:
    """A later fragment re-sending ``type`` with an empty name does not clobber the call's name."""
    for pieces in [[MISTRAL_INCREMENTAL], *two_way_splits(MISTRAL_INCREMENTAL)]:
        answer = collect(decode("mistral", pieces))
        (call,) = answer.tool_calls
        assert (call.id, call.name, call.parsed_arguments()) == (
            "chatcmpl-tool-9f1",
            "webSearchTool",
            {"query": "current Berlin weather"},
        )
        assert answer.usage == Usage(input_tokens=171, output_tokens=14, cached_input_tokens=128)


def test_whole_calls_in_separate_chunks_without_index_stay_apart() -> None:
    """Two whole calls sent in separate chunks, both at position 0 with different ids, are two calls."""
    body = sse(
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]}}
            ]
        },
        {
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "{}"}}]}}
            ]
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )
    assert [(c.id, c.name) for c in collect(decode("mistral", [body])).tool_calls] == [("a", "f"), ("b", "g")]


def test_mistral_thinking_parts() -> None:
    """Magistral's array content splits into reasoning (thinking parts) and text (text parts)."""
    for pieces in [[MISTRAL_THINKING], *two_way_splits(MISTRAL_THINKING)]:
        answer = collect(decode("mistral", pieces))
        assert (answer.reasoning, answer.text) == ("The user is asking for 2+2.", "2 + 2 = 4")
        assert answer.usage == Usage(input_tokens=10, output_tokens=46)


def test_mistral_non_stream_array_content() -> None:
    """A non-stream Magistral message with array content gives the same reasoning and text."""
    data = {
        "id": "a4e",
        "object": "chat.completion",
        "model": "magistral-medium-2507",
        "usage": {"prompt_tokens": 10, "total_tokens": 56, "completion_tokens": 46},
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": [{"type": "text", "text": "The user is asking for 2+2."}]},
                        {"type": "text", "text": "2 + 2 = 4"},
                    ],
                },
            }
        ],
    }
    answer = adapter("mistral").parse_response(data, "m")
    streamed = collect(decode("mistral", [MISTRAL_THINKING]))
    assert answer.reasoning == streamed.reasoning and answer.text == streamed.text and answer.usage == streamed.usage


# --- Azure --------------------------------------------------------------------------------------

_SAFE = {"filtered": False, "severity": "safe"}
_FILTERS = {"hate": _SAFE, "self_harm": _SAFE, "sexual": _SAFE, "violence": _SAFE}
AZURE_HEAD = {
    "choices": [],
    "created": 0,
    "id": "",
    "model": "",
    "object": "",
    "prompt_filter_results": [
        {"prompt_index": 0, "content_filter_results": {**_FILTERS, "jailbreak": {"filtered": False, "detected": False}}}
    ],
}


def _azure_chunk(delta: dict[str, Any], finish: str | None = None, filters: Any = None) -> dict[str, Any]:
    return {
        "choices": [
            {
                "content_filter_results": filters if filters is not None else _FILTERS,
                "delta": delta,
                "finish_reason": finish,
                "index": 0,
                "logprobs": None,
            }
        ],
        "created": 1727346168,
        "id": "chatcmpl-AZ1",
        "model": "gpt-4o-2024-08-06",
        "object": "chat.completion.chunk",
        "system_fingerprint": "fp_67802d9a6d",
    }


AZURE_TEXT = sse(
    AZURE_HEAD,
    _azure_chunk({"content": "", "role": "assistant"}, filters={}),
    _azure_chunk({"content": "Hello"}),
    _azure_chunk({"content": " world"}),
    _azure_chunk({}, "stop", filters={}),
    {
        "choices": [],
        "created": 1727346168,
        "id": "chatcmpl-AZ1",
        "model": "gpt-4o-2024-08-06",
        "object": "chat.completion.chunk",
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 2,
            "total_tokens": 11,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    },
)
AZURE_FILTERED = sse(
    AZURE_HEAD,
    _azure_chunk({"content": "", "role": "assistant"}, filters={}),
    _azure_chunk({"content": "Here is how"}),
    _azure_chunk({}, "content_filter", filters={**_FILTERS, "violence": {"filtered": True, "severity": "medium"}}),
)
AZURE_FILTER_400 = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
        "Please modify your prompt and retry.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {**_FILTERS, "violence": {"filtered": True, "severity": "medium"}},
        },
    }
}


def test_azure_prompt_filter_chunk_then_text() -> None:
    """Azure's first ``choices: []`` chunk with ``prompt_filter_results`` is skipped; the text decodes."""
    for pieces in [[AZURE_TEXT], *two_way_splits(AZURE_TEXT)]:
        answer = collect(decode("azure", pieces))
        assert answer == ChatResponse(
            text="Hello world",
            usage=Usage(input_tokens=9, output_tokens=2),
            finish_reason="stop",
            model="gpt-4o-2024-08-06",
        )


def test_azure_content_filter_finish_is_a_refusal() -> None:
    """``finish_reason: "content_filter"`` raises RefusalError, never a short success."""
    for pieces in [[AZURE_FILTERED], *two_way_splits(AZURE_FILTERED)]:
        with pytest.raises(RefusalError) as info:
            decode("azure", pieces)
        assert info.value.error_class is ErrorClass.REFUSAL
        assert "content filter" in info.value.message


def test_azure_non_stream_content_filter_is_a_refusal() -> None:
    """A non-stream answer finished by the content filter raises RefusalError."""
    data = {
        "id": "x",
        "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "content_filter", "message": {"role": "assistant", "content": None}}],
    }
    with pytest.raises(RefusalError):
        adapter("azure").parse_response(data, "m")


async def test_azure_request_url_headers_and_body(server: Any, http: HttpClient) -> None:
    """Azure: deployment URL plus ``api-version``, ``api-key`` header, the deployment as model, max_tokens."""
    server.reply(Reply(headers={"Content-Type": "text/event-stream"}, pieces=[AZURE_TEXT[:300], AZURE_TEXT[300:]]))
    a = make_adapter(
        http,
        "azure",
        server.url + "/openai/deployments/gpt4o-prod",
        deployment="gpt4o-prod",
        api_version="2025-01-01-preview",
    )
    answer = await acollect(a.stream(ChatRequest.of("Hi", max_tokens=50), "gpt-4o", 0.2))
    assert answer.text == "Hello world"
    (req,) = server.requests
    assert req.path == "/openai/deployments/gpt4o-prod/chat/completions"
    assert req.query == {"api-version": "2025-01-01-preview"}
    assert req.headers["api-key"] == "sk-test-key-123" and "authorization" not in req.headers
    assert req.body == {
        "model": "gpt4o-prod",
        "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.2,
        "max_tokens": 50,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_azure_url_variants() -> None:
    """A full chat-completions URL is used as is; without a deployment the body has no model."""
    a = make_adapter(
        HttpClient(), "azure", "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-06-01"
    )
    assert a.url("m", True) == "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-06-01"
    assert "model" not in a.build_body(ChatRequest.of("Hi"), "gpt-4o", None, False)
    b = make_adapter(HttpClient(), "azure", "https://r.openai.azure.com/openai/deployments/d/")
    assert (
        b.url("m", False) == "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21"
    )


async def test_azure_error_bodies(server: Any, http: HttpClient) -> None:
    """Azure's content-filter 400 is a refusal (innererror as reason); its 429 and APIM 401 are classified."""
    rate = {
        "error": {
            "code": "429",
            "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI "
            "API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. "
            "Please retry after 5 seconds.",
        }
    }
    apim = {
        "statusCode": 401,
        "message": "Unauthorized. Access token is missing, invalid, audience is incorrect, or have expired.",
    }
    server.reply(
        Reply(status=400, pieces=[orjson.dumps(AZURE_FILTER_400)]),
        Reply(
            status=429, headers={"Content-Type": "application/json", "Retry-After": "5"}, pieces=[orjson.dumps(rate)]
        ),
        Reply(status=401, pieces=[orjson.dumps(apim)]),
    )
    a = make_adapter(http, "azure", server.url + "/openai/deployments/d")
    with pytest.raises(RefusalError) as refused:
        await a.chat(ChatRequest.of("Hi"), "gpt-4o")
    assert refused.value.error_code == "content_filter" and refused.value.status == 400
    with pytest.raises(ProviderError) as limited:
        await a.chat(ChatRequest.of("Hi"), "gpt-4o")
    assert (limited.value.error_class, limited.value.retry_after) == (ErrorClass.RATE_LIMITED, 5.0)
    with pytest.raises(ProviderError) as denied:
        await a.chat(ChatRequest.of("Hi"), "gpt-4o")
    assert denied.value.error_class is ErrorClass.NON_RETRYABLE and denied.value.auth_failure
    assert denied.value.message.startswith("Unauthorized. Access token is missing")


def test_azure_innererror_code_is_the_reason() -> None:
    """``innererror.code`` (ResponsibleAIPolicyViolation) is passed on as the reason."""
    facts = error_facts(400, {}, orjson.dumps(AZURE_FILTER_400))
    assert (facts.error_code, facts.reason) == ("content_filter", "ResponsibleAIPolicyViolation")


# --- Perplexity ---------------------------------------------------------------------------------

_CITES = ["https://example.org/a", "https://example.org/b"]
PERPLEXITY = sse(
    {
        "id": "a3d",
        "model": "sonar",
        "created": 1770768233,
        "usage": {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12},
        "citations": _CITES,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "**"}}],
    },
    {
        "id": "a3d",
        "model": "sonar",
        "created": 1770768233,
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        "citations": _CITES,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "EcoVista"}}],
    },
    {
        "id": "a3d",
        "model": "sonar",
        "created": 1770768237,
        "usage": {"prompt_tokens": 11, "completion_tokens": 434, "total_tokens": 445},
        "citations": _CITES,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "**[1]"}}],
    },
    {
        "id": "a3d",
        "model": "sonar",
        "created": 1770768237,
        "usage": {"prompt_tokens": 11, "completion_tokens": 434, "total_tokens": 445},
        "citations": _CITES,
        "object": "chat.completion.done",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
    },
    done=False,
)


def test_perplexity_done_object_completes() -> None:
    """Perplexity's usage on every chunk (last wins) and its ``chat.completion.done`` chunk complete the answer."""
    events = decode("perplexity", [PERPLEXITY])
    assert isinstance(events[-1], Final)
    answer = collect(events)
    assert answer == ChatResponse(
        text="**EcoVista**[1]", usage=Usage(input_tokens=11, output_tokens=434), finish_reason="stop", model="sonar"
    )
    with pytest.raises(StreamTruncated):
        decode("perplexity", [PERPLEXITY[: event_ends(PERPLEXITY)[-2]]])


# --- request differences ------------------------------------------------------------------------

TOOL = ToolSpec(name="weather", description="Weather.", parameters={"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("family", "profile", "max_key", "stream_options"),
    [
        ("openai", {}, "max_completion_tokens", True),
        ("deepseek", {}, "max_tokens", True),
        ("groq", {}, "max_tokens", True),
        ("xai", {}, "max_tokens", True),
        ("openrouter", {}, "max_tokens", True),
        ("together", {}, "max_tokens", True),
        ("mistral", {}, "max_tokens", False),
        ("vllm", {"kind": "openai-compatible"}, "max_tokens", True),
    ],
)
def test_vendor_body_differences(family: str, profile: dict[str, Any], max_key: str, stream_options: bool) -> None:
    """Official OpenAI uses max_completion_tokens, vendors max_tokens; Mistral gets no stream_options."""
    a = make_adapter(HttpClient(), family, "http://127.0.0.1:9/v1", **profile)
    body = a.build_body(ChatRequest.of("Hi", max_tokens=64, tools=[TOOL]), "m", None, True)
    assert body[max_key] == 64 and len([k for k in body if k.startswith("max_")]) == 1
    assert ("stream_options" in body) is stream_options
    assert body["stream"] is True and body["model"] == "m"


async def test_local_compatible_server_without_key(server: Any, http: HttpClient) -> None:
    """A keyless OpenAI-compatible profile sends no Authorization header but its extra headers."""
    server.reply(
        Reply(
            pieces=[
                orjson.dumps(
                    {
                        "id": "x",
                        "model": "qwen",
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": "ok", "reasoning_content": "think"},
                            }
                        ],
                    }
                )
            ]
        )
    )
    a = make_adapter(
        http,
        "vllm",
        server.url + "/v1",
        api_key=None,
        kind="openai-compatible",
        extra_headers={"X-Title": "turnout-tests"},
    )
    answer = await a.chat(ChatRequest.of([Message.system("S"), Message.user("U")]), "qwen")
    assert (answer.text, answer.reasoning, answer.usage) == ("ok", "think", None)
    (req,) = server.requests
    assert "authorization" not in req.headers and req.headers["x-title"] == "turnout-tests"


# --- vendor error bodies ------------------------------------------------------------------------

_RAW_GEMINI = orjson.dumps(
    {
        "error": {
            "code": 400,
            "message": "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
            "status": "INVALID_ARGUMENT",
        }
    }
).decode()
_MISTRAL_422 = {
    "object": "error",
    "message": {
        "detail": [
            {
                "type": "extra_forbidden",
                "loc": ["body", "stream_options"],
                "msg": "Extra inputs are not permitted",
                "input": True,
            }
        ]
    },
    "type": "invalid_request_error",
    "param": None,
    "code": None,
}


@pytest.mark.parametrize(
    ("family", "status", "headers", "body", "cls", "check"),
    [
        (
            "openrouter",
            402,
            {},
            {"error": {"code": 402, "message": "Insufficient credits. Add more credits."}},
            ErrorClass.RATE_LIMITED_NON_RETRYABLE,
            "Insufficient credits",
        ),
        (
            "openrouter",
            400,
            {},
            {
                "error": {
                    "message": "Provider returned error",
                    "code": 400,
                    "metadata": {"raw": _RAW_GEMINI, "provider_name": "Google AI Studio"},
                },
                "user_id": "user_1",
            },
            ErrorClass.CONTEXT_WINDOW,
            "Google AI Studio",
        ),
        (
            "openrouter",
            429,
            {"Retry-After": "3"},
            {"error": {"code": 429, "message": "Rate limit exceeded"}},
            ErrorClass.RATE_LIMITED,
            "Rate limit exceeded",
        ),
        (
            "deepseek",
            402,
            {},
            {
                "error": {
                    "message": "Insufficient Balance",
                    "type": "unknown_error",
                    "param": None,
                    "code": "invalid_request_error",
                }
            },
            ErrorClass.RATE_LIMITED_NON_RETRYABLE,
            "Insufficient Balance",
        ),
        ("mistral", 401, {}, {"detail": "Unauthorized"}, ErrorClass.NON_RETRYABLE, "Unauthorized"),
        (
            "mistral",
            401,
            {},
            {"message": "Unauthorized", "request_id": "9f0"},
            ErrorClass.NON_RETRYABLE,
            "Unauthorized",
        ),
        ("mistral", 422, {}, _MISTRAL_422, ErrorClass.NON_RETRYABLE, "extra_forbidden"),
        (
            "groq",
            413,
            {},
            {
                "error": {
                    "message": "Request too large for model `llama-3.3-70b-versatile`, please reduce your message size",
                    "type": "tokens",
                    "code": "rate_limit_exceeded",
                }
            },
            ErrorClass.RATE_LIMITED_NON_RETRYABLE,
            "Request too large",
        ),
        (
            "groq",
            503,
            {},
            b"<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>",
            ErrorClass.RETRYABLE,
            "503 Service Temporarily Unavailable",
        ),
    ],
    ids=[
        "or-402",
        "or-wrapped-context",
        "or-429",
        "deepseek-402",
        "mistral-detail",
        "mistral-message",
        "mistral-422",
        "groq-413",
        "html-503",
    ],
)
async def test_vendor_error_bodies(
    server: Any,
    http: HttpClient,
    family: str,
    status: int,
    headers: dict[str, str],
    body: Any,
    cls: ErrorClass,
    check: str,
) -> None:
    """Each vendor's real error body is classified and keeps a readable message."""
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    server.reply(Reply(status=status, headers={"Content-Type": "application/json", **headers}, pieces=[raw]))
    with pytest.raises(ProviderError) as info:
        await make_adapter(http, family, server.url + "/v1").chat(ChatRequest.of("Hi"), "m")
    assert info.value.error_class is cls and info.value.status == status
    assert check in info.value.message
    if "Retry-After" in headers:
        assert info.value.retry_after == float(headers["Retry-After"])


def test_wrapped_upstream_error_facts() -> None:
    """OpenRouter's ``metadata.raw`` upstream body contributes its message and type."""
    body = {
        "error": {
            "message": "Provider returned error",
            "code": 400,
            "metadata": {"raw": _RAW_GEMINI, "provider_name": "Google AI Studio"},
        }
    }
    facts = error_facts(400, {}, orjson.dumps(body))
    assert facts.error_type == "INVALID_ARGUMENT"
    assert facts.message.startswith("Provider returned error: The input token count (1200293)")
    assert facts.message.endswith("(upstream: Google AI Studio)")
