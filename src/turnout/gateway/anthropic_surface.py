"""The Anthropic Messages surface: ``POST /v1/messages`` in Anthropic's own wire format.

Content blocks become Turnout messages (``tool_result`` blocks become tool messages, ``tool_use`` blocks
assistant tool calls); answers become ``message`` objects and ``message_start`` … ``message_stop``
streams. Reasoning is returned as ``thinking`` blocks only when the request enabled ``thinking``, as the
real API does, so clients that do not expect such blocks never see one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnout.core.errors import ErrorClass, RefusalError
from turnout.core.estimate import estimate_tokens
from turnout.core.types import (
    ContentPart,
    Final,
    ImagePart,
    Message,
    ReasoningDelta,
    ResponseFormat,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
)
from turnout.gateway.bounds import MAX_FIELD_CHARS, MAX_MODEL_CHARS, parse_json, validation_message
from turnout.gateway.failures import Failure, invalid
from turnout.gateway.passthrough import anthropic_beta, native, split_anthropic
from turnout.gateway.surface import ChatCall
from turnout.providers.signatures import signer_of, stamp, stamped_content
from turnout.reply import Reply

# --- request ------------------------------------------------------------------------------------


class _In(BaseModel):
    # strict: a string where a number or a boolean belongs is an error, never coerced ("10", "yes")
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _Text(_In):
    type: Literal["text"]
    text: str


class _ImageSource(_In):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class _Image(_In):
    type: Literal["image"]
    source: _ImageSource


class _ToolUse(_In):
    type: Literal["tool_use"]
    id: str
    name: str
    input: Any = None


_ResultPart = Annotated[_Text | _Image, Field(discriminator="type")]


class _ToolResult(_In):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[_ResultPart] | None = None
    is_error: bool | None = None


class _Thinking(_In):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class _RedactedThinking(_In):
    type: Literal["redacted_thinking"]
    data: str = ""


_Block = Annotated[_Text | _Image | _ToolUse | _ToolResult | _Thinking | _RedactedThinking, Field(discriminator="type")]


class _Message(_In):
    role: Literal["user", "assistant", "system"]
    content: str | list[_Block]


class _Tool(_In):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None


class _ToolChoice(_In):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class _ThinkingConfig(_In):
    type: str


class _Metadata(_In):
    user_id: str | None = Field(default=None, max_length=MAX_FIELD_CHARS)


class _OutputFormat(_In):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class _OutputConfig(_In):
    format: _OutputFormat | None = None


class MessagesRequest(_In):
    """The fields of an Anthropic Messages request the gateway acts on (others are ignored)."""

    model: str = Field(max_length=MAX_MODEL_CHARS)
    messages: list[_Message] = Field(min_length=1)
    max_tokens: int = Field(gt=0)
    system: str | list[_Text] | None = None
    stream: bool | None = False
    tools: list[_Tool] | None = None
    tool_choice: _ToolChoice | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    thinking: _ThinkingConfig | None = None
    metadata: _Metadata | None = None
    output_format: _OutputFormat | None = None
    output_config: _OutputConfig | None = None


def _image(block: _Image) -> ImagePart:
    src = block.source
    if src.type == "base64":
        return ImagePart(url=f"data:{src.media_type or 'image/png'};base64,{src.data or ''}")
    return ImagePart(url=src.url or "")


def _result_text(content: str | list[_ResultPart] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, _Text))


def _block_text(content: str | list[_Block]) -> str:
    return content if isinstance(content, str) else "".join(b.text for b in content if isinstance(b, _Text))


def _messages(req: MessagesRequest) -> tuple[Message, ...]:
    out: list[Message] = []
    if req.system:
        text = req.system if isinstance(req.system, str) else "".join(b.text for b in req.system)
        out.append(Message(role="system", content=text))
    for m in req.messages:
        if m.role == "system":  # a system message between turns (Claude Code sends them)
            text = (
                m.content if isinstance(m.content, str) else "".join(b.text for b in m.content if isinstance(b, _Text))
            )
            out.append(Message(role="system", content=text))
        elif isinstance(m.content, str):
            out.append(Message(role=m.role, content=m.content))
        elif m.role == "user":
            parts: list[ContentPart] = []
            for b in m.content:
                if isinstance(b, _ToolResult):
                    out.append(Message(role="tool", content=_result_text(b.content), tool_call_id=b.tool_use_id))
                elif isinstance(b, _Text):
                    parts.append(TextPart(text=b.text))
                elif isinstance(b, _Image):
                    parts.append(_image(b))
            if parts:
                out.append(Message(role="user", content=tuple(parts)))
        else:
            text = "".join(b.text for b in m.content if isinstance(b, _Text))
            reasoning = "".join(b.thinking for b in m.content if isinstance(b, _Thinking)) or None
            calls = tuple(
                ToolCall(id=b.id, name=b.name, arguments=orjson.dumps(b.input if b.input is not None else {}).decode())
                for b in m.content
                if isinstance(b, _ToolUse)
            )
            out.append(Message(role="assistant", content=text, tool_calls=calls, reasoning=reasoning))
    return tuple(out)


def _tool_choice(choice: _ToolChoice | None) -> str | None:
    if choice is None:
        return None
    if choice.type == "tool":
        if not choice.name:
            raise invalid("tool_choice of type 'tool' needs a name", param="tool_choice.name")
        return choice.name
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


# --- responses ----------------------------------------------------------------------------------

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}


def usage_json(u: Usage | None) -> dict[str, int]:
    """Anthropic usage: ``input_tokens`` excludes the cache reads and writes that Turnout counts in input."""
    if u is None:
        return {"input_tokens": 0, "output_tokens": 0}
    return {
        "input_tokens": max(0, u.input_tokens - u.cached_input_tokens - u.cache_write_tokens),
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cached_input_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
    }


def _tool_input(c: ToolCall) -> Any:
    try:
        value = c.parsed_arguments()
    except ValueError:
        return {"_unparsed_arguments": c.arguments}
    return value if isinstance(value, dict) else {"value": value}


_ERROR_TYPES: dict[str, str] = {
    "invalid_request": "invalid_request_error",
    "forbidden": "permission_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    "too_large": "request_too_large",
    "context_length": "invalid_request_error",
    "rate_limited": "rate_limit_error",
    "upstream_failed": "api_error",
    "upstream_interrupted": "api_error",
    "shutting_down": "overloaded_error",
    "unavailable": "api_error",
    "internal": "api_error",
}


def _error_json(failure: Failure) -> dict[str, Any]:
    kind = _ERROR_TYPES[failure.kind]
    if failure.kind == "upstream_interrupted" and failure.cause in (ErrorClass.RATE_LIMITED, ErrorClass.RETRYABLE):
        kind = "overloaded_error"
    return {"type": "error", "error": {"type": kind, "message": failure.message}}


class AnthropicSurface:
    """Messages requests and answers (see :class:`turnout.gateway.surface.Surface`)."""

    name = "anthropic"

    def parse(self, body: bytes, headers: Mapping[str, str] | None = None) -> ChatCall:
        """Validate the body and translate it into a :class:`ChatCall` (see :meth:`parse_object`)."""
        return self.parse_object(parse_json(body), headers)

    def parse_object(self, raw: dict[str, Any], headers: Mapping[str, str] | None = None) -> ChatCall:
        """Validate a parsed body and translate it into a :class:`ChatCall`.

        What has no translation (Anthropic-defined and server tools, ``mcp_servers``) is kept for an Anthropic
        upstream (see :mod:`turnout.gateway.passthrough`); ``document`` blocks for an Anthropic upstream or a
        Bedrock one, which translates them.
        """
        modelled, only, documents = split_anthropic(raw)
        try:
            req = MessagesRequest.model_validate(modelled)
        except ValidationError as exc:
            message, param = validation_message(exc)
            raise invalid(message, param=param) from None
        tools = []
        for i, t in enumerate(req.tools or ()):
            if t.input_schema is None:
                raise invalid(f"tools[{i}]: a custom tool needs an input_schema", param=f"tools.{i}")
            tools.append(ToolSpec(name=t.name, description=t.description or "", parameters=t.input_schema))
        fmt = req.output_config.format if req.output_config is not None else None
        fmt = fmt or req.output_format
        return ChatCall(
            model=req.model,
            messages=_messages(req),
            tools=tuple(tools),
            tool_choice=_tool_choice(req.tool_choice),
            temperature=req.temperature,
            max_tokens=req.max_tokens,
            stream=bool(req.stream),
            thinking=req.thinking is not None and req.thinking.type != "disabled",
            show_reasoning=req.thinking is not None and req.thinking.type != "disabled",
            sender=req.metadata.user_id if req.metadata is not None else None,
            response_format=ResponseFormat(kind="json_schema", schema=fmt.schema_) if fmt is not None else None,
            native=native("anthropic", raw, only, anthropic_beta(headers), documents),
        )

    def reply_body(self, reply: Reply, call: ChatCall) -> bytes:
        """A ``message`` object: the Anthropic upstream's own when it holds what only it carries.

        That is when the request held untranslatable blocks or tools (citations, server tool results) or
        enabled thinking (the thinking blocks' signatures must go back unchanged next turn).
        """
        if (
            reply.native is not None
            and call.native is not None
            and (call.native.only or call.native.documents or call.thinking)
        ):
            # signatures go out stamped with their signer, so a replay after a failover reaches only that family
            signed = stamped_content(reply.native.get("content"), signer_of(reply.served.provider))
            body = {**reply.native, "id": f"msg_{reply.call_id}", "model": reply.served.model, "content": signed}
            return orjson.dumps(body)
        content: list[dict[str, Any]] = []
        if call.thinking and reply.reasoning:
            content.append({"type": "thinking", "thinking": reply.reasoning, "signature": ""})
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for c in reply.tool_calls:
            content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c)})
        return orjson.dumps(
            {
                "id": f"msg_{reply.call_id}",
                "type": "message",
                "role": "assistant",
                "model": reply.served.model,
                "content": content,
                "stop_reason": _STOP.get(reply.finish_reason or "stop", "end_turn"),
                "stop_sequence": None,
                "usage": usage_json(reply.usage),
            }
        )

    def refusal_body(self, exc: RefusalError, model: str, call: ChatCall, call_id: str) -> bytes:
        """A message with no content and ``stop_reason: "refusal"``."""
        return orjson.dumps(
            {
                "id": f"msg_{call_id}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": "refusal",
                "stop_sequence": None,
                "usage": usage_json(None),
            }
        )

    def error_body(self, failure: Failure) -> bytes:
        """Anthropic's error JSON: ``{"type": "error", "error": {"type", "message"}}``."""
        return orjson.dumps(_error_json(failure))

    def stream_encoder(self, call: ChatCall, model: str, call_id: str) -> AnthropicStreamEncoder:
        """``message_start``, content blocks, ``message_delta``, ``message_stop``."""
        return AnthropicStreamEncoder(
            model, call_id, thinking=call.thinking, input_tokens=estimate_tokens(call.messages, call.tools)
        )


def _sse(name: bytes, data: bytes) -> bytes:
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


_MESSAGE_STOP = _sse(b"message_stop", b'{"type":"message_stop"}')


class AnthropicStreamEncoder:
    """One streamed message as Anthropic SSE events (see :class:`turnout.gateway.surface.StreamEncoder`)."""

    __slots__ = ("_block", "_index", "_input", "_model", "_msg_id", "_signature", "_stop", "_thinking")

    def __init__(self, model: str, call_id: str, *, thinking: bool, input_tokens: int = 0) -> None:
        self._input = input_tokens
        self._signature = ""
        self._model = model
        self._msg_id = f"msg_{call_id}"
        self._thinking = thinking
        self._block: str | None = None  # the open content block's type
        self._index = -1
        self._stop = "end_turn"

    def start(self) -> bytes:
        """``message_start`` with an empty message and the prompt's estimated input tokens.

        The upstream's own count is not known until the answer ends; ``message_delta`` carries it.
        """
        message: dict[str, Any] = {
            "id": self._msg_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._input, "output_tokens": 0},
        }
        return _sse(b"message_start", orjson.dumps({"type": "message_start", "message": message}))

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        out = b""
        if self._block == "thinking":  # the upstream's signature when it gave one (an Anthropic upstream)
            out = self._delta({"type": "signature_delta", "signature": self._signature})
            self._signature = ""
        self._block = None
        return out + _sse(
            b"content_block_stop", b'{"type":"content_block_stop","index":' + str(self._index).encode() + b"}"
        )

    def _open(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self._index += 1
        self._block = block["type"]
        data = orjson.dumps({"type": "content_block_start", "index": self._index, "content_block": block})
        return out + _sse(b"content_block_start", data)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        data = orjson.dumps({"type": "content_block_delta", "index": self._index, "delta": delta})
        return _sse(b"content_block_delta", data)

    def event(self, event: StreamEvent) -> bytes:
        """Content blocks: ``text``, ``thinking`` (when enabled) and ``tool_use``; ``Final`` closes the last one."""
        if isinstance(event, TextDelta):
            head = self._open({"type": "text", "text": ""}) if self._block != "text" else b""
            return head + self._delta({"type": "text_delta", "text": event.text})
        if isinstance(event, ReasoningDelta):
            if not self._thinking:
                return b""
            head = (
                self._open({"type": "thinking", "thinking": "", "signature": ""}) if self._block != "thinking" else b""
            )
            if event.signature:
                self._signature = stamp(event.signer, event.signature) if event.signer else event.signature
            return head + self._delta({"type": "thinking_delta", "thinking": event.text})
        if isinstance(event, ToolCallEvent):
            c = event.call
            head = self._open({"type": "tool_use", "id": c.id, "name": c.name, "input": {}})
            args = orjson.dumps(_tool_input(c)).decode()
            return head + self._delta({"type": "input_json_delta", "partial_json": args}) + self._close()
        if isinstance(event, Final):
            self._stop = _STOP.get(event.finish_reason or "stop", "end_turn")
            return self._close()
        return b""

    def finish(self, usage: Usage | None) -> bytes:
        """``message_delta`` with the stop reason and usage, then ``message_stop``."""
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": self._stop, "stop_sequence": None},
            "usage": usage_json(usage),
        }
        return self._close() + _sse(b"message_delta", orjson.dumps(delta)) + _MESSAGE_STOP

    def refusal(self, exc: RefusalError, *, started: bool) -> bytes:
        """(``message_start``,) the end of the message with ``stop_reason: "refusal"``."""
        self._stop = "refusal"
        return (b"" if started else self.start()) + self.finish(None)

    def interrupted(self, failure: Failure) -> bytes:
        """``event: error`` (the SDK raises on it), and no ``message_stop``."""
        return _sse(b"error", orjson.dumps(_error_json(failure)))
