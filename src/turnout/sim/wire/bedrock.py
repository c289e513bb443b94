"""AWS Bedrock Converse (``POST /model/{modelId}/converse``) and ConverseStream (``/converse-stream``).

The shapes are botocore's ``bedrock-runtime`` model. A stream is binary event-stream frames
(:mod:`turnout.sim.aws`): ``messageStart``; per text or reasoning block ``contentBlockDelta``s then
``contentBlockStop`` (a reasoning block's last delta carries its signature); per tool call
``contentBlockStart`` with its id and name, two ``toolUse`` input fragments and ``contentBlockStop``; then
``messageStop`` with the stop reason and ``metadata`` with the usage. Errors before a stream are a status with
``x-amzn-ErrorType`` and ``{"message"}``; inside one, an exception frame.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from turnout.sim.aws import event, exception
from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, Finish, SimUsage, ToolCall
from turnout.sim.wire.base import JSON, Codec, ErrorReply, Parsed, StreamEncoder, Unit, dumps, new_id, part_words

EVENT_STREAM = "application/vnd.amazon.eventstream"
SIGNATURE = "c2ltLWJlZHJvY2stc2lnbmF0dXJl"  # opaque, as real reasoning signatures are
DEFAULT_CONTEXT_LIMIT = 200_000
#: ``DocumentFormat`` in botocore's ``bedrock-runtime`` model.
DOCUMENT_FORMATS = frozenset(("pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md"))
#: A document name Bedrock takes: letters, digits, single whitespace, hyphens, parentheses, square brackets.
_DOCUMENT_NAME = re.compile(r"(?!.*\s\s)[A-Za-z0-9\s()\[\]-]{1,200}")

#: What Bedrock names each error, and says.
_ERRORS: dict[ErrorKind, tuple[str, str]] = {
    ErrorKind.RATE_LIMIT: ("ThrottlingException", "Too many requests, please wait before trying again."),
    ErrorKind.QUOTA: ("ServiceQuotaExceededException", "You have exceeded the service quota for this model."),
    ErrorKind.AUTH: ("UnrecognizedClientException", "The security token included in the request is invalid."),
    ErrorKind.FORBIDDEN: ("AccessDeniedException", "You don't have access to the model with the specified model ID."),
    ErrorKind.NOT_FOUND: ("ResourceNotFoundException", "The provided model identifier is invalid."),
    ErrorKind.CONTENT_FILTER: ("ValidationException", "The request was blocked by a content filter."),
    ErrorKind.BAD_REQUEST: ("ValidationException", "Malformed input request, please reformat your input."),
    ErrorKind.SERVER: ("InternalServerException", "The server encountered an internal error."),
    ErrorKind.UNAVAILABLE: ("ServiceUnavailableException", "Bedrock is unable to process your request."),
    ErrorKind.OVERLOADED: ("ServiceUnavailableException", "Bedrock is unable to process your request."),
    ErrorKind.BAD_GATEWAY: ("InternalServerException", "The server encountered an internal error."),
}
_ERRORS[ErrorKind.BILLING] = _ERRORS[ErrorKind.QUOTA]
#: The exception frame each error becomes inside a stream (the event names are camel-cased).
_STREAM_EXCEPTIONS = {
    "ThrottlingException": "throttlingException",
    "ValidationException": "validationException",
    "InternalServerException": "internalServerException",
    "ServiceUnavailableException": "serviceUnavailableException",
}


def bedrock_error(spec: ErrorSpec) -> tuple[str, str]:
    """The AWS error name and message for ``spec``."""
    kind = spec.kind or ErrorKind.SERVER
    if kind is ErrorKind.CONTEXT_LENGTH:
        return "ValidationException", spec.message or "Input is too long for requested model."
    name, message = _ERRORS.get(kind, _ERRORS[ErrorKind.SERVER])
    return name, spec.message or message


def bedrock_usage(usage: SimUsage) -> dict[str, int]:
    """Converse ``usage``: ``inputTokens`` leaves out cache reads, reported apart."""
    return {
        "inputTokens": usage.input - usage.cached_input,
        "outputTokens": usage.output,
        "totalTokens": usage.input + usage.output,
        "cacheReadInputTokens": usage.cached_input,
        "cacheWriteInputTokens": 0,
    }


def stop_reason(content: Content) -> str:
    """The Converse stop reason of a complete answer."""
    if content.finish is Finish.REFUSAL:
        return "content_filtered"
    if content.finish is Finish.LENGTH:
        return "max_tokens"
    return "tool_use" if content.tool_calls else "end_turn"


def tool_id(call: ToolCall) -> str:
    """Bedrock-style ids for generated calls (``tooluse_…``); explicit ids are kept."""
    return "tooluse_" + call.id[8:] if call.id.startswith("call_sim") else call.id


class BedrockConverse(Codec):
    """The Converse protocol (the model is in the URL; the route says whether it streams)."""

    protocol = "bedrock"
    stream_content_type = EVENT_STREAM
    retry_headers = False  # Bedrock sends no retry hints
    request_id_header = "x-amzn-RequestId"
    inband_kind = ErrorKind.SERVER

    def default_status(self, kind: ErrorKind) -> int:
        """Bedrock refuses credentials with 403 and quota with 400; overload is 503."""
        if kind is ErrorKind.AUTH:
            return 403
        if kind in (ErrorKind.QUOTA, ErrorKind.BILLING):
            return 400
        return super().default_status(kind)

    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """Input words of the system blocks and the messages' text and tool results; prefill."""
        messages = payload.get("messages")
        if not isinstance(messages, list):
            messages = []
        n = part_words(payload.get("system"), "text")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("content"), list):
                continue
            n += part_words(m["content"], "text")
            for block in m["content"]:
                result = block.get("toolResult") if isinstance(block, dict) else None
                if isinstance(result, dict):
                    n += part_words(result.get("content"), "text")
                n += _document_words(block.get("document") if isinstance(block, dict) else None)
        return Parsed(
            model=path_model or "",
            stream=False,
            input_words=n,
            prefill=bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant",
        )

    def refuse(self, payload: dict[str, Any]) -> str | None:
        """A ``document`` block Bedrock would refuse (its format, name or bytes; a name used twice) is a 400."""
        names: set[str] = set()
        for m in payload.get("messages") or ():
            content = m.get("content") if isinstance(m, dict) else None
            for block in content if isinstance(content, list) else ():
                doc = block.get("document") if isinstance(block, dict) else None
                if doc is None:
                    continue
                problem = _document_problem(doc, names)
                if problem is not None:
                    return problem
        return None

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """A ``ConverseResponse``."""
        blocks: list[dict[str, Any]] = []
        if content.reasoning:
            blocks.append(
                {"reasoningContent": {"reasoningText": {"text": content.reasoning_text, "signature": SIGNATURE}}}
            )
        if content.text:
            blocks.append({"text": content.full_text})
        blocks += [
            {"toolUse": {"toolUseId": tool_id(c), "name": c.name, "input": c.arguments}} for c in content.tool_calls
        ]
        return dumps(
            {
                "output": {"message": {"role": "assistant", "content": blocks}},
                "stopReason": stop_reason(content),
                "usage": bedrock_usage(usage),
                "metrics": {"latencyMs": 1},
            }
        )

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """A ConverseStream event stream."""
        return BedrockStream(req, content, usage)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """``{"message": ...}`` (the error's name is in ``x-amzn-ErrorType``)."""
        return dumps({"message": bedrock_error(spec)[1]})

    def error(self, req: Parsed, spec: ErrorSpec) -> ErrorReply:
        """The error reply, its name in ``x-amzn-ErrorType`` as Bedrock sends it (an HTML page stays one)."""
        reply = super().error(req, spec)
        if reply.content_type == JSON:
            name = bedrock_error(self.resolve(spec))[0]
            reply.headers["x-amzn-ErrorType"] = f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        return reply

    def refused(self, name: str, message: str) -> ErrorReply:
        """A 403 for credentials the simulator refuses (see :func:`turnout.sim.aws.verify`)."""
        headers = {
            "x-amzn-ErrorType": f"{name}:http://internal.amazon.com/coral/com.amazon.coral.service/",
            self.request_id_header: f"req_sim{new_id()}",
        }
        return ErrorReply(403, dumps({"message": message}), JSON, headers)


def _document_bytes(doc: dict[str, Any]) -> bytes | None:
    source = doc.get("source")
    data = source.get("bytes") if isinstance(source, dict) else None
    if not isinstance(data, str) or not data:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _document_problem(doc: object, names: set[str]) -> str | None:
    """Why Bedrock refuses a ``DocumentBlock`` (None: it takes it), as its ValidationException says."""
    if not isinstance(doc, dict):
        return "Malformed input request: document must be an object"
    name = doc.get("name")
    if not isinstance(name, str) or not _DOCUMENT_NAME.fullmatch(name):
        return (
            "The document file name can only contain alphanumeric characters, whitespace characters, hyphens, "
            "parentheses, and square brackets. The name can't contain more than one consecutive whitespace character."
        )
    if name in names:
        return "A conversation must not have multiple documents with the same name."
    names.add(name)
    if doc.get("format") not in DOCUMENT_FORMATS:
        return f"Malformed input request: document format {str(doc.get('format'))[:20]!r} is not supported"
    if _document_bytes(doc) is None:
        return "Malformed input request: document source bytes must be non-empty base64"
    return None


def _document_words(doc: object) -> int:
    """Words of a ``txt``, ``md``, ``csv`` or ``html`` document's bytes (a binary format counts none)."""
    if not isinstance(doc, dict) or doc.get("format") not in ("txt", "md", "csv", "html"):
        return 0
    data = _document_bytes(doc)
    return len(data.decode("utf-8", "replace").split()) if data is not None else 0


class BedrockStream(StreamEncoder):
    """Event-stream frames; ``messageStop`` then ``metadata`` end the answer."""

    def __init__(self, req: Parsed, content: Content, usage: SimUsage) -> None:
        super().__init__(req, content, usage)
        self.blocks: dict[str, int] = {}
        for u in self.units:
            key = f"tool{u.value.index}" if u.kind == "tool" else u.kind
            self.blocks.setdefault(key, len(self.blocks))

    def plan(self) -> list[Unit]:
        """A refusal carries no content blocks, only ``stopReason: "content_filtered"``."""
        return [u for u in super().plan() if u.kind != "refusal"]

    def head(self) -> bytes:
        """``messageStart``."""
        return event("messageStart", dumps({"role": "assistant", "p": "abcd"}))

    def unit(self, i: int) -> bytes:
        """A delta (a tool call whole: start, two input fragments, stop); a block's last unit closes it."""
        u = self.units[i]
        if u.kind == "tool":
            call: ToolCall = u.value
            index = self.blocks[f"tool{call.index}"]
            start = {"toolUse": {"toolUseId": tool_id(call), "name": call.name}}
            out = event("contentBlockStart", dumps({"start": start, "contentBlockIndex": index}))
            args = call.arguments_json
            mid = len(args) // 2
            for piece in (args[:mid], args[mid:]):
                fragment = {"toolUse": {"input": piece}}
                out += event("contentBlockDelta", dumps({"delta": fragment, "contentBlockIndex": index}))
            return out + event("contentBlockStop", dumps({"contentBlockIndex": index}))
        index = self.blocks[u.kind]
        if u.kind == "reasoning":
            delta: dict[str, Any] = {"reasoningContent": {"text": u.value}}
        else:
            delta = {"text": u.value}
        out = event("contentBlockDelta", dumps({"delta": delta, "contentBlockIndex": index}))
        if u.last:
            if u.kind == "reasoning":
                sig = {"reasoningContent": {"signature": SIGNATURE}}
                out += event("contentBlockDelta", dumps({"delta": sig, "contentBlockIndex": index}))
            out += event("contentBlockStop", dumps({"contentBlockIndex": index}))
        return out

    def tail(self) -> bytes:
        """``messageStop`` with the stop reason."""
        return event("messageStop", dumps({"stopReason": stop_reason(self.content)}))

    def done(self) -> bytes:
        """``metadata`` with the usage and metrics."""
        return event("metadata", dumps({"usage": bedrock_usage(self.usage), "metrics": {"latencyMs": 1}}))

    def error(self, spec: ErrorSpec) -> bytes:
        """An exception frame (``internalServerException`` unless the step names another error)."""
        name, message = bedrock_error(spec)
        return exception(_STREAM_EXCEPTIONS.get(name, "internalServerException"), dumps({"message": message}))

    def malformed(self) -> bytes:
        """A ``contentBlockDelta`` frame whose message CRC does not match its bytes."""
        good = event("contentBlockDelta", dumps({"delta": {"text": " garbled"}, "contentBlockIndex": 0}))
        return good[:-4] + bytes(b ^ 0xFF for b in good[-4:])
