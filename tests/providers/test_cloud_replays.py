"""Recorded and documented payloads of both clouds replayed split at every byte boundary, and checked by botocore.

Non-streaming answers and error bodies go through the real HTTP path, their body sent in two chunks at every
split point; streams (Bedrock event-stream frames, Vertex SSE) are fed to the decoders at every split point.
The event-stream fixtures are read by botocore's own ``EventStream`` with the ``ConverseStream`` output shape of
its ``bedrock-runtime`` model, so they are what botocore's client would read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from botocore.eventstream import EventStream
from botocore.exceptions import EventStreamError
from botocore.model import ListShape, Shape, StructureShape
from botocore.parsers import EventStreamJSONParser
from botocore.session import Session
from provider_kit import RecordingServer, Reply, fixture_path, make_adapter, two_way_splits
from test_vertex import FakeTokens

from turnout.config import load_config_dict
from turnout.core.errors import ErrorClass, ProviderError, TurnoutError
from turnout.core.streams import collect
from turnout.core.types import ChatRequest, ChatResponse, Message, StreamEvent
from turnout.providers import HttpClient, build_adapter
from turnout.providers.base import HTTPAdapter

BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CLAUDE = "claude-sonnet-4-5"
GEMINI = "gemini-2.5-flash"


def request() -> ChatRequest:
    return ChatRequest(messages=(Message.user("hi"),))


def bedrock(http: HttpClient, url: str) -> HTTPAdapter:
    return make_adapter(http, "bedrock", url, region="us-east-1", api_key="bedrock-api-key-0001")


def vertex(http: HttpClient, url: str, model: str) -> HTTPAdapter:
    fields = {"uri": url, "project": "sim-project", "model": model}
    cfg = load_config_dict({"providers": {"models": {"vertex": {"test": fields}}}}, env={})
    adapter = build_adapter("vertex.test", cfg.profiles()["vertex.test"], http, None)
    adapter.tokens = FakeTokens()  # type: ignore[attr-defined]
    return adapter


def summary(answer: ChatResponse) -> tuple[Any, ...]:
    return (answer.text, answer.reasoning, answer.tool_calls, answer.usage, answer.finish_reason)


async def outcome(adapter: HTTPAdapter, model: str) -> tuple[Any, ...]:
    """What one call gives: the answer's parts, or the error's class, type, status and message."""
    try:
        return summary(await adapter.chat(request(), model))
    except ProviderError as exc:
        return (type(exc).__name__, exc.error_class, exc.error_type, exc.status, exc.message)


async def every_split(
    server: RecordingServer, adapter: HTTPAdapter, model: str, reply: Reply
) -> Iterator[tuple[Any, ...]]:
    """The call's outcome with the reply's body sent whole, then in two chunks at every split point."""
    body = b"".join(reply.pieces)
    server.reply(Reply(status=reply.status, headers=reply.headers, pieces=(body,)))
    whole = await outcome(adapter, model)
    seen = []
    for pieces in two_way_splits(body):
        server.reply(Reply(status=reply.status, headers=reply.headers, pieces=[p for p in pieces if p]))
        seen.append(await outcome(adapter, model))
    return iter([whole, *seen])


BEDROCK_ERROR = {"Content-Type": "application/json", "x-amzn-ErrorType": "ValidationException:http://internal"}


@pytest.mark.parametrize(
    ("name", "status", "headers"),
    [
        ("converse_text.json", 200, None),
        ("converse_reasoning.json", 200, None),
        ("converse_tool_call.json", 200, None),
        ("error_400_validation.json", 400, BEDROCK_ERROR),
    ],
)
async def test_bedrock_answers_and_errors_at_every_split(
    http: HttpClient, server: RecordingServer, name: str, status: int, headers: dict[str, str] | None
) -> None:
    """A Converse answer or error body gives one outcome however its bytes arrive."""
    reply = Reply(status=status, pieces=(fixture_path(f"bedrock/{name}").read_bytes(),))
    if headers is not None:
        reply.headers = headers
    outcomes = list(await every_split(server, bedrock(http, server.url), BEDROCK_MODEL, reply))
    whole = outcomes[0]
    assert all(o == whole for o in outcomes), next(o for o in outcomes if o != whole)
    if status == 200:
        assert whole[0] or whole[2]  # an answer: text or tool calls
    else:
        assert whole[:4] == ("ProviderError", ErrorClass.NON_RETRYABLE, "ValidationException", 400)


VERTEX_ERRORS = [
    ("error_401_unauthenticated.json", 401),
    ("error_429_resource_exhausted.json", 429),
    ("error_404_publisher_model.json", 404),
    ("error_529_overloaded.json", 529),
    ("error_400_invalid_beta.json", 400),
]


@pytest.mark.parametrize(
    ("name", "status", "model"),
    [
        ("claude_message.json", 200, CLAUDE),
        ("gemini_generate_content.json", 200, GEMINI),
        *[(name, status, CLAUDE) for name, status in VERTEX_ERRORS],
    ],
)
async def test_vertex_answers_and_errors_at_every_split(
    http: HttpClient, server: RecordingServer, name: str, status: int, model: str
) -> None:
    """A rawPredict / generateContent answer or a Vertex error body gives one outcome however its bytes arrive."""
    if status == 401:  # a 401 renews the token and asks again: the same body both times
        body = fixture_path(f"vertex/{name}").read_bytes()
        adapter = vertex(http, server.url, model)
        firsts = []
        for pieces in [[body], *two_way_splits(body)]:
            server.reply(*(Reply(status=401, pieces=[p for p in pieces if p]) for _ in range(2)))
            firsts.append(await outcome(adapter, model))
        assert all(o == firsts[0] for o in firsts) and firsts[0][3] == 401
        return
    reply = Reply(status=status, pieces=(fixture_path(f"vertex/{name}").read_bytes(),))
    outcomes = list(await every_split(server, vertex(http, server.url, model), model, reply))
    whole = outcomes[0]
    assert all(o == whole for o in outcomes), next(o for o in outcomes if o != whole)
    if status == 200:
        assert whole[0]
    else:
        assert whole[3] == status


def decode_all(adapter: HTTPAdapter, model: str, pieces: list[bytes]) -> tuple[list[StreamEvent], str | None]:
    decoder = adapter.decoder(model)
    events: list[StreamEvent] = []
    try:
        for piece in pieces:
            events += decoder.feed(piece)
            if decoder.done:
                break
        events += decoder.finish()
    except TurnoutError as exc:
        return events, f"{type(exc).__name__}:{getattr(exc, 'error_class', None)}"
    return events, None


def test_a_vertex_stream_error_event_at_every_split(http: HttpClient) -> None:
    """An ``overloaded_error`` event in a streamRawPredict 200 is a retryable failure after its text, at every split."""
    adapter = vertex(http, "http://127.0.0.1:9", CLAUDE)
    wire = fixture_path("vertex/claude_stream_overloaded.sse").read_bytes()
    events, error = decode_all(adapter, CLAUDE, [wire])
    assert collect(events).text == "Paris is" and error == f"ProviderError:{ErrorClass.RETRYABLE}"
    for pieces in two_way_splits(wire):
        split_events, split_error = decode_all(adapter, CLAUDE, pieces)
        assert (collect(split_events).text, split_error) == ("Paris is", error)


# --- the fixtures as botocore reads them ------------------------------------------------------------------------


class _Raw:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self) -> Iterator[bytes]:
        yield self._data

    def close(self) -> None:
        pass


def stream_shape() -> StructureShape:
    shape = Session().get_service_model("bedrock-runtime").operation_model("ConverseStream").output_shape
    assert shape is not None
    member = shape.members["stream"]
    assert isinstance(member, StructureShape)
    return member


def modelled(value: Any, shape: Shape) -> Any:
    """``value`` with only the members ``shape`` knows (what botocore's parser keeps)."""
    if isinstance(shape, StructureShape) and isinstance(value, dict) and not shape.is_document_type:
        return {k: modelled(v, shape.members[k]) for k, v in value.items() if k in shape.members}
    if isinstance(shape, ListShape) and isinstance(value, list):
        return [modelled(v, shape.member) for v in value]
    return value


def botocore_events(data: bytes) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
    """The events botocore's client reads from a ConverseStream body, and the exception it raises (if any)."""
    stream = EventStream(_Raw(data), stream_shape(), EventStreamJSONParser(), "ConverseStream")
    events: list[dict[str, Any]] = []
    try:
        events.extend(stream)
    except EventStreamError as exc:
        return events, exc.response["Error"]
    return events, None


@pytest.mark.parametrize("name", ["text", "tool_call", "reasoning"])
def test_event_stream_fixtures_are_what_botocore_reads(name: str) -> None:
    """Every frame decodes in botocore to the recorded event it was made from, member for member of the model."""
    source = {"text": "bedrock-text", "tool_call": "bedrock-tool-call.1", "reasoning": "bedrock-reasoning"}[name]
    lines = fixture_path(f"bedrock/source/{source}.chunks.txt").read_text().splitlines()
    recorded = [orjson.loads(line) for line in lines if line.strip()]
    events, error = botocore_events(fixture_path(f"bedrock/stream_{name}.eventstream").read_bytes())
    # a recording may hold members newer than the installed model (usage.serverToolUsage): botocore drops those
    assert error is None and events == [modelled(event, stream_shape()) for event in recorded]
    assert len(events) == len(recorded) and all(event for event in events)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("throttling", "throttlingException"),
        ("internalServer", "internalServerException"),
        ("serviceUnavailable", "serviceUnavailableException"),
        ("validation", "validationException"),
        ("model_stream_error", "modelStreamErrorException"),
    ],
)
def test_exception_fixtures_are_botocore_exceptions(name: str, code: str) -> None:
    """Each exception stream raises, in botocore, the ConverseStream exception of its name, with a message."""
    _, error = botocore_events(fixture_path(f"bedrock/stream_{name}.eventstream").read_bytes())
    assert error is not None and error["Code"] == code and error["Message"]
