"""What every protocol encoder provides, and the framing helpers they share.

A :class:`Codec` reads a protocol's request and writes its answers: the non-stream body, the error
bodies, and a :class:`StreamEncoder` that emits a stream piece by piece so the server can stop after
any unit (cut, stall, malformed chunk, in-band error). A *unit* is one generated token: a reasoning
word, a text word, a refusal word or a whole tool call.
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, NamedTuple

import orjson

from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, SimUsage, ToolCall

JSON = "application/json"
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"

_ids = itertools.count(1)


def new_id() -> str:
    """A short unique id for responses, messages and tool calls."""
    return f"{next(_ids):020x}"


def now() -> int:
    """Wall-clock seconds, as ``created`` fields carry them."""
    return int(time.time())


def dumps(obj: Any) -> bytes:
    """Compact JSON."""
    return orjson.dumps(obj)


def sse(obj: Any, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line and one ``data:`` line."""
    data = orjson.dumps(obj)
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def broken(obj: Any) -> bytes:
    """The first half of ``obj``'s JSON: never valid, since a proper prefix of an object cannot be."""
    data = orjson.dumps(obj)
    return data[: max(1, len(data) // 2)]


def words(text: object) -> int:
    """Whitespace-separated words in ``text`` (0 when it is not a string)."""
    return len(text.split()) if isinstance(text, str) else 0


def part_words(content: object, *keys: str) -> int:
    """Words of a string, or of the given string fields of a list of parts."""
    if isinstance(content, str):
        return len(content.split())
    total = 0
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                for key in keys:
                    value = part.get(key)
                    if isinstance(value, str):
                        total += len(value.split())
                    elif isinstance(value, list):
                        total += part_words(value, *keys)
    return total


def html_page(status: int) -> bytes:
    """A Cloudflare-style HTML error page, as proxies send for 502 and 504."""
    title = {502: "502 Bad Gateway", 504: "504 Gateway Time-out"}.get(status, f"{status} Error")
    return (
        f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n"
        "<hr><center>cloudflare</center>\r\n</body>\r\n</html>\r\n"
    ).encode()


@dataclass(slots=True, kw_only=True)
class Parsed:
    """What the simulator needs from a request body.

    Attributes:
        model: The model asked for.
        stream: Whether a stream was asked for.
        include_usage: OpenAI chat ``stream_options.include_usage``.
        input_words: Whitespace-separated words in the system prompt and every message.
        prefill: Whether the last message is the assistant's.
        schema: The JSON Schema of a structured-output request (see :mod:`turnout.sim.schema`), else None.
        prompt: The prompt's prefixes (:func:`turnout.sim.caching.blocks`) when the script caches prompts.
    """

    model: str
    stream: bool
    include_usage: bool = False
    input_words: int = 0
    prefill: bool = False
    schema: Any = None
    prompt: list[tuple[bytes, int]] | None = None


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An HTTP error response, ready to send."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


class Unit(NamedTuple):
    """One stream unit and where it sits in its group (reasoning, text, refusal or tools)."""

    kind: str
    value: Any
    first: bool
    last: bool
    pos: int


def group(kind: str, values: tuple[Any, ...]) -> list[Unit]:
    """Units for one group of values."""
    n = len(values)
    return [Unit(kind, v, i == 0, i == n - 1, i) for i, v in enumerate(values)]


class StreamEncoder(ABC):
    """Emits one answer as a stream, in order: head, units, tail, done (or error after some units).

    Encoders are stateful (sequence numbers, open blocks) and serve exactly one response.
    """

    def __init__(self, req: Parsed, content: Content, usage: SimUsage) -> None:
        self.req = req
        self.content = content
        self.usage = usage
        self.rid = new_id()
        self.created = now()
        self.units = self.plan()

    def plan(self) -> list[Unit]:
        """The units in emission order: reasoning, text (or refusal), tool calls."""
        c = self.content
        units = group("reasoning", c.reasoning)
        units += group("refusal", c.refusal) if c.refusal else group("text", c.text)
        units += group("tool", c.tool_calls)
        return units

    def head(self) -> bytes:
        """Frames before the first unit."""
        return b""

    @abstractmethod
    def unit(self, i: int) -> bytes:
        """The frames for unit ``i`` (called in order)."""

    @abstractmethod
    def tail(self) -> bytes:
        """The frames that finish the answer (finish reason, usage)."""

    def done(self) -> bytes:
        """A separate terminator after the tail (OpenAI ``[DONE]``, Anthropic ``message_stop``)."""
        return b""

    @abstractmethod
    def error(self, spec: ErrorSpec) -> bytes:
        """The protocol's in-band error, sent instead of the rest of the stream."""

    @abstractmethod
    def malformed(self) -> bytes:
        """A frame whose JSON is invalid."""


class Codec(ABC):
    """One wire protocol, seen from the server side."""

    protocol: ClassVar[str]
    stream_content_type: ClassVar[str] = SSE
    # Gemini carries retry hints in the body only; the others send Retry-After headers.
    retry_headers: ClassVar[bool] = True
    request_id_header: ClassVar[str] = "x-request-id"
    # The error a protocol's streams usually fail with in-band.
    inband_kind: ClassVar[ErrorKind] = ErrorKind.SERVER

    @abstractmethod
    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """Read the request body (``path_model``: the model named by the URL, if any)."""

    def refuse(self, payload: dict[str, Any]) -> str | None:
        """Why this protocol refuses a body with a 400 whatever the script says (None: it does not)."""
        return None

    @abstractmethod
    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """The complete non-stream answer."""

    @abstractmethod
    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """A stream encoder for one answer."""

    @abstractmethod
    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """The JSON error body for ``spec`` at ``status`` (``request_id`` is also in the headers)."""

    def default_status(self, kind: ErrorKind) -> int:
        """The HTTP status this protocol uses for an error kind."""
        return DEFAULT_STATUS[kind]

    def answer_headers(self, req: Parsed, usage: SimUsage) -> dict[str, str] | None:
        """Headers of a complete non-stream answer beyond its content type (None: none)."""
        return None

    def resolve(self, spec: ErrorSpec) -> ErrorSpec:
        """``spec`` with its kind filled in (an in-band error without one gets :attr:`inband_kind`)."""
        return spec if spec.kind is not None else replace(spec, kind=self.inband_kind)

    def error(self, req: Parsed, spec: ErrorSpec) -> ErrorReply:
        """The full HTTP error reply: status, body and headers (retry hints, request id)."""
        spec = self.resolve(spec)
        assert spec.kind is not None
        status = spec.status or self.default_status(spec.kind)
        request_id = f"req_sim{new_id()}"
        headers = {self.request_id_header: request_id}
        if self.retry_headers:
            if spec.retry_after is not None:
                headers["retry-after"] = _seconds(spec.retry_after)
            if spec.retry_after_ms is not None:
                headers["retry-after-ms"] = str(spec.retry_after_ms)
            if spec.ratelimit_reset is not None:
                headers["x-ratelimit-reset-requests"] = spec.ratelimit_reset
        if spec.kind is ErrorKind.BAD_GATEWAY:
            return ErrorReply(status, html_page(status), "text/html", headers)
        return ErrorReply(status, self.error_body(req, spec, status, request_id), JSON, headers)


def _seconds(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def retry_delay(spec: ErrorSpec) -> str | None:
    """A protobuf Duration string (``"2s"``, ``"0.5s"``) for the spec's retry hint, if any."""
    if spec.retry_after is not None:
        return _seconds(spec.retry_after) + "s"
    if spec.retry_after_ms is not None:
        return _seconds(spec.retry_after_ms / 1000) + "s"
    return None


def tool_halves(call: ToolCall) -> tuple[str, str]:
    """A tool call's JSON arguments in two pieces, so clients must concatenate fragments."""
    args = call.arguments_json
    mid = len(args) // 2
    return args[:mid], args[mid:]


DEFAULT_STATUS = {
    ErrorKind.RATE_LIMIT: 429,
    ErrorKind.QUOTA: 429,
    ErrorKind.BILLING: 402,
    ErrorKind.AUTH: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONTEXT_LENGTH: 400,
    ErrorKind.CONTENT_FILTER: 400,
    ErrorKind.BAD_REQUEST: 400,
    ErrorKind.SERVER: 500,
    ErrorKind.BAD_GATEWAY: 502,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.OVERLOADED: 503,
}
