"""Vertex AI adapters: URLs, bodies, recorded payloads at every split, error facts, and the bearer token's renewal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pytest
from provider_kit import RecordingServer, Reply, bytewise, fixture_path, random_splits, two_way_splits

from turnout.config import load_config_dict
from turnout.core.errors import ErrorClass, ProtocolError, ProviderError, StreamTruncated
from turnout.core.streams import collect
from turnout.core.types import (
    ChatRequest,
    Final,
    Message,
    NativeRequest,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    UsageEvent,
)
from turnout.providers import HttpClient, build_adapter
from turnout.providers.base import HTTPAdapter
from turnout.providers.vertex import ANTHROPIC_VERSION, VertexAnthropicAdapter, VertexGeminiAdapter

SSE_HEADERS = {"Content-Type": "text/event-stream"}


class FakeTokens:
    """A token source handing out ``tok-1``, ``tok-2``, …: a new one on every renewal."""

    def __init__(self) -> None:
        self.current = "tok-1"
        self.renewals: list[str] = []

    def cached(self) -> str | None:
        return self.current

    async def token(self) -> str:
        return self.current

    async def renew(self, rejected: str) -> str:
        self.renewals.append(rejected)
        self.current = f"tok-{len(self.renewals) + 1}"
        return self.current


def vertex(http: HttpClient, uri: str | None, model: str = "claude-sonnet-4-5", **profile: Any) -> HTTPAdapter:
    """A Vertex adapter for ``vertex.test`` (at ``uri``, else Google's endpoint) with a :class:`FakeTokens`."""
    fields: dict[str, Any] = {"project": "sim-project", "model": model, **profile}
    if uri is not None:
        fields["uri"] = uri
    cfg = load_config_dict({"providers": {"models": {"vertex": {"test": fields}}}}, env={})
    adapter = build_adapter("vertex.test", cfg.profiles()["vertex.test"], http, None)
    adapter.tokens = FakeTokens()  # type: ignore[attr-defined]
    return adapter


def request(text: str = "hi") -> ChatRequest:
    return ChatRequest(messages=(Message.user(text),))


# --- URLs and bodies ---------------------------------------------------------------------------------


async def test_claude_url_names_project_region_publisher_and_the_vertex_model_id(http: HttpClient) -> None:
    """A canonical Claude name becomes Vertex's versioned id in the URL, on the global or a regional host."""
    glob = vertex(http, None)
    assert glob.url("claude-sonnet-4-5", False) == (
        "https://aiplatform.googleapis.com/v1/projects/sim-project/locations/global/publishers/anthropic/models/"
        "claude-sonnet-4-5@20250929:rawPredict"
    )
    regional = vertex(http, None, region="us-east5")
    assert regional.url("claude-haiku-4-5", True) == (
        "https://us-east5-aiplatform.googleapis.com/v1/projects/sim-project/locations/us-east5/publishers/"
        "anthropic/models/claude-haiku-4-5@20251001:streamRawPredict"
    )
    assert regional.url("claude-opus-4-1@20250805", False).endswith("/models/claude-opus-4-1@20250805:rawPredict")


async def test_gemini_url_uses_the_google_publisher(http: HttpClient) -> None:
    """A Gemini model goes to the Google publisher's generateContent / streamGenerateContent?alt=sse."""
    adapter = vertex(http, None, model="gemini-2.5-flash", region="europe-west4")
    assert isinstance(adapter, VertexGeminiAdapter)
    assert adapter.url("gemini-2.5-flash", True) == (
        "https://europe-west4-aiplatform.googleapis.com/v1/projects/sim-project/locations/europe-west4/publishers/"
        "google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    )
    assert adapter.url("gemini-2.5-flash", False).endswith(":generateContent")


@pytest.mark.parametrize("bad", ["../x", "a/b", "m:rawPredict", "a%2fb", "a?b", "x\ny"])
async def test_model_names_that_leave_their_path_segment_are_refused(http: HttpClient, bad: str) -> None:
    """A model name that could escape its URL segment is a non-retryable error before anything is sent."""
    with pytest.raises(ProviderError) as info:
        vertex(http, None).url(bad, False)
    assert info.value.error_class is ErrorClass.NON_RETRYABLE


async def test_claude_body_has_vertex_version_and_no_model(http: HttpClient, server: RecordingServer) -> None:
    """The Messages body goes without ``model`` and with ``anthropic_version``, authorised by the bearer token."""
    server.reply(Reply(pieces=(fixture_path("vertex/claude_message.json").read_bytes(),)))
    adapter = vertex(http, server.url)
    reply = await adapter.chat(request(), "claude-sonnet-4-5")
    assert reply.text == "Hello! How can I help you today?"
    assert reply.usage is not None and reply.usage.cached_input_tokens == 4
    seen = server.requests[0]
    assert (
        seen.path
        == "/v1/projects/sim-project/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
    )
    assert "model" not in seen.body and seen.body["anthropic_version"] == ANTHROPIC_VERSION
    assert seen.body["messages"] == [{"role": "user", "content": "hi"}]
    assert seen.headers["authorization"] == "Bearer tok-1"
    assert "x-api-key" not in seen.headers and "anthropic-version" not in seen.headers


async def test_pass_through_body_keeps_client_blocks_and_only_vertex_betas(
    http: HttpClient, server: RecordingServer
) -> None:
    """A client's Messages body reaches Vertex as it came, minus ``model``; betas Vertex refuses are dropped."""
    server.reply(Reply(pieces=(fixture_path("vertex/claude_message.json").read_bytes(),)))
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
        ],
        "top_k": 5,
    }
    native = NativeRequest(
        protocol="anthropic",
        body=body,
        headers={"anthropic-beta": "prompt-caching-2024-07-31,interleaved-thinking-2025-05-14"},
    )
    req = ChatRequest(messages=(Message.user("hi"),), native=native)
    await vertex(http, server.url).chat(req, "claude-sonnet-4-5")
    seen = server.requests[0]
    assert seen.body["messages"] == body["messages"] and seen.body["top_k"] == 5
    assert "model" not in seen.body and seen.body["anthropic_version"] == ANTHROPIC_VERSION
    assert seen.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


async def test_pass_through_with_only_refused_betas_sends_no_beta_header(
    http: HttpClient, server: RecordingServer
) -> None:
    """When no requested beta is accepted on Vertex, the header is left out altogether."""
    server.reply(Reply(pieces=(fixture_path("vertex/claude_message.json").read_bytes(),)))
    native = NativeRequest(
        protocol="anthropic",
        body={"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
        headers={"anthropic-beta": "prompt-caching-2024-07-31"},
    )
    await vertex(http, server.url).chat(ChatRequest(messages=(Message.user("hi"),), native=native), "claude-sonnet-4-5")
    assert "anthropic-beta" not in server.requests[0].headers


# --- recorded payloads at every split ---------------------------------------------------------------------


def decode(adapter: HTTPAdapter, model: str, pieces: Iterable[bytes]) -> list[StreamEvent]:
    decoder = adapter.decoder(model)
    out: list[StreamEvent] = []
    for piece in pieces:
        out.extend(decoder.feed(piece))
        if decoder.done:
            break
    out.extend(decoder.finish())
    return out


def claude_stream() -> bytes:
    return fixture_path("vertex/claude_stream_thinking.sse").read_bytes()


def gemini_stream() -> bytes:
    return fixture_path("vertex/gemini_stream.sse").read_bytes()


def check_claude(events: list[StreamEvent]) -> None:
    reply = collect(events)
    assert reply.text == "17 × 3 = 51."
    assert reply.reasoning == "The user asks for 17 times 3. That is 51."
    signed = [e for e in events if isinstance(e, ReasoningDelta) and e.signature]
    assert len(signed) == 1 and signed[0].signature.startswith("EuYBCkQ")  # type: ignore[union-attr]
    assert reply.usage is not None and reply.usage.output_tokens == 38 and reply.usage.input_tokens == 14
    assert isinstance(events[-1], Final) and events[-1].finish_reason == "stop"


def check_gemini(events: list[StreamEvent]) -> None:
    reply = collect(events)
    assert reply.text == "Paris is the capital of France."
    assert reply.usage is not None and reply.usage.output_tokens == 28
    assert isinstance(events[-1], Final) and events[-1].model == "gemini-2.5-flash"


async def test_claude_stream_decodes_the_same_at_every_split(http: HttpClient) -> None:
    """The recorded streamRawPredict body gives one answer however it is split (every point, random, bytewise)."""
    adapter = vertex(http, None)
    wire = claude_stream()
    for pieces in [*two_way_splits(wire), *random_splits(wire), bytewise(wire)]:
        check_claude(decode(adapter, "claude-sonnet-4-5", pieces))


async def test_gemini_stream_decodes_the_same_at_every_split(http: HttpClient) -> None:
    """The recorded CRLF-framed streamGenerateContent body gives one answer however it is split."""
    adapter = vertex(http, None, model="gemini-2.5-flash")
    wire = gemini_stream()
    for pieces in [*two_way_splits(wire), *random_splits(wire), bytewise(wire)]:
        check_gemini(decode(adapter, "gemini-2.5-flash", pieces))


@pytest.mark.parametrize("which", ["claude", "gemini"])
async def test_streams_cut_anywhere_are_truncated(http: HttpClient, which: str) -> None:
    """A Vertex stream that ends before its completion signal is ``StreamTruncated`` at every cut point."""
    if which == "claude":
        adapter, model, wire = vertex(http, None), "claude-sonnet-4-5", claude_stream()
        cut = wire.index(b"event: message_stop")
    else:
        adapter, model, wire = vertex(http, None, model="gemini-2.5-flash"), "gemini-2.5-flash", gemini_stream()
        cut = wire.index(b'"finishReason"')
    for i in range(0, cut, 7):
        with pytest.raises(StreamTruncated):
            decode(adapter, model, [wire[:i]])


async def test_gemini_non_stream_fixture(http: HttpClient, server: RecordingServer) -> None:
    """The recorded generateContent answer parses to its text and usage."""
    server.reply(Reply(pieces=(fixture_path("vertex/gemini_generate_content.json").read_bytes(),)))
    reply = await vertex(http, server.url, model="gemini-2.5-flash").chat(request(), "gemini-2.5-flash")
    assert reply.text == "Paris is the capital of France." and reply.finish_reason == "stop"
    assert server.requests[0].body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


async def test_streamed_claude_over_http(http: HttpClient, server: RecordingServer) -> None:
    """The recorded stream, served in small pieces, arrives as the same answer through the HTTP path."""
    wire = claude_stream()
    server.reply(Reply(headers=SSE_HEADERS, pieces=[wire[i : i + 50] for i in range(0, len(wire), 50)]))
    check_claude([e async for e in vertex(http, server.url).stream(request(), "claude-sonnet-4-5")])
    assert server.requests[0].path.endswith("/claude-sonnet-4-5@20250929:streamRawPredict")
    assert server.requests[0].body["stream"] is True


# --- errors ------------------------------------------------------------------------------------------------

ERRORS = [
    ("error_401_unauthenticated.json", 401, ErrorClass.NON_RETRYABLE, "UNAUTHENTICATED"),
    ("error_429_resource_exhausted.json", 429, ErrorClass.RATE_LIMITED, "RESOURCE_EXHAUSTED"),
    ("error_404_publisher_model.json", 404, ErrorClass.NON_RETRYABLE, "NOT_FOUND"),
    ("error_529_overloaded.json", 529, ErrorClass.RETRYABLE, "overloaded_error"),
    ("error_400_invalid_beta.json", 400, ErrorClass.NON_RETRYABLE, "invalid_request_error"),
]


@pytest.mark.parametrize(("name", "status", "error_class", "error_type"), ERRORS)
async def test_recorded_errors_are_classified(
    http: HttpClient, name: str, status: int, error_class: ErrorClass, error_type: str
) -> None:
    """Google-shaped front-end errors and Anthropic-shaped model errors both give their class and type."""
    body = fixture_path(f"vertex/{name}").read_bytes()
    error = vertex(http, None).error(status, {}, body, "claude-sonnet-4-5")
    assert (error.status, error.error_class, error.error_type) == (status, error_class, error_type)
    assert error.provider == "vertex.test"


async def test_a_401_renews_the_token_once_and_retries(http: HttpClient, server: RecordingServer) -> None:
    """A rejected token is renewed once and the call made again with the new one."""
    server.reply(
        Reply(status=401, pieces=(fixture_path("vertex/error_401_unauthenticated.json").read_bytes(),)),
        Reply(pieces=(fixture_path("vertex/claude_message.json").read_bytes(),)),
    )
    adapter = vertex(http, server.url)
    reply = await adapter.chat(request(), "claude-sonnet-4-5")
    assert reply.text.startswith("Hello")
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer tok-1", "Bearer tok-2"]
    assert adapter.tokens.renewals == ["tok-1"]  # type: ignore[attr-defined]


async def test_a_second_401_is_the_answer(http: HttpClient, server: RecordingServer) -> None:
    """A renewed token that is rejected too raises the 401: one renewal per call, never a loop."""
    err = fixture_path("vertex/error_401_unauthenticated.json").read_bytes()
    server.reply(Reply(status=401, pieces=(err,)), Reply(status=401, pieces=(err,)))
    adapter = vertex(http, server.url)
    with pytest.raises(ProviderError) as info:
        await adapter.chat(request(), "claude-sonnet-4-5")
    assert info.value.status == 401 and len(server.requests) == 2
    assert adapter.tokens.renewals == ["tok-1"]  # type: ignore[attr-defined]


async def test_a_stream_401_renews_the_token_and_reopens(http: HttpClient, server: RecordingServer) -> None:
    """A stream refused with 401 is reopened once with a renewed token and delivers the whole answer."""
    server.reply(
        Reply(status=401, pieces=(fixture_path("vertex/error_401_unauthenticated.json").read_bytes(),)),
        Reply(headers=SSE_HEADERS, pieces=(gemini_stream(),)),
    )
    adapter = vertex(http, server.url, model="gemini-2.5-flash")
    events = [e async for e in adapter.stream(request(), "gemini-2.5-flash")]
    check_gemini(events)
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer tok-1", "Bearer tok-2"]
    assert server.requests[1].path.endswith("/publishers/google/models/gemini-2.5-flash:streamGenerateContent")
    assert any(isinstance(e, TextDelta) for e in events) and any(isinstance(e, UsageEvent) for e in events)


async def test_the_token_is_scrubbed_from_error_text(http: HttpClient, server: RecordingServer) -> None:
    """An upstream error that echoes the bearer token never shows it."""
    body = orjson.dumps(
        {"error": {"code": 403, "message": "token tok-1 lacks permission", "status": "PERMISSION_DENIED"}}
    )
    server.reply(Reply(status=403, pieces=(body,)))
    with pytest.raises(ProviderError) as info:
        await vertex(http, server.url).chat(request(), "claude-sonnet-4-5")
    assert "tok-1" not in str(info.value)


def test_adapter_classes_follow_the_publisher() -> None:
    """Claude models pick the Anthropic publisher's adapter, others the Google one; ``publisher`` overrides."""

    def built(**fields: Any) -> type:
        cfg = load_config_dict({"providers": {"models": {"vertex": {"x": {"project": "p", **fields}}}}}, env={})
        return type(build_adapter("vertex.x", cfg.profiles()["vertex.x"], HttpClient(), None))

    assert built(model="claude-sonnet-4-5@20250929") is VertexAnthropicAdapter
    assert built(model="gemini-2.5-pro") is VertexGeminiAdapter
    assert built(publisher="anthropic") is VertexAnthropicAdapter


async def test_claude_count_goes_to_count_tokens_with_the_model_in_the_body(
    http: HttpClient, server: RecordingServer
) -> None:
    """``count-tokens:rawPredict`` gets the counted Messages fields, the Vertex id and ``anthropic_version``."""
    err = fixture_path("vertex/error_401_unauthenticated.json").read_bytes()
    server.reply(Reply(status=401, pieces=(err,)), Reply(pieces=(b'{"input_tokens": 12}',)))
    adapter = vertex(http, server.url)
    counted = await adapter.count_tokens(request(), "claude-sonnet-4-5")
    assert counted == 12
    seen = server.requests[-1]
    assert seen.path == "/v1/projects/sim-project/locations/global/publishers/anthropic/models/count-tokens:rawPredict"
    assert seen.body == {
        "model": "claude-sonnet-4-5@20250929",
        "anthropic_version": ANTHROPIC_VERSION,
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer tok-1", "Bearer tok-2"]


async def test_gemini_count_goes_to_count_tokens(http: HttpClient, server: RecordingServer) -> None:
    """``{model}:countTokens`` gets ``contents`` (no generation settings) and answers ``totalTokens``."""
    server.reply(Reply(pieces=(b'{"totalTokens": 31, "totalBillableCharacters": 90}',)))
    adapter = vertex(http, server.url, model="gemini-2.5-pro", max_tokens=100)
    assert await adapter.count_tokens(request(), "gemini-2.5-pro") == 31
    seen = server.requests[0]
    assert seen.path.endswith("/publishers/google/models/gemini-2.5-pro:countTokens")
    assert set(seen.body) == {"contents"}


@pytest.mark.parametrize("answer", [b"{}", b'{"totalTokens": -1}', b'{"totalTokens": "many"}', b"[]"])
async def test_a_count_without_a_count_is_a_protocol_error(
    http: HttpClient, server: RecordingServer, answer: bytes
) -> None:
    server.reply(Reply(pieces=(answer,)))
    adapter = vertex(http, server.url, model="gemini-2.5-pro")
    with pytest.raises(ProtocolError):
        await adapter.count_tokens(request(), "gemini-2.5-pro")
