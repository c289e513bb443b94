"""The OpenAI Chat Completions surface: ``POST /v1/chat/completions`` in OpenAI's own wire format.

Requests are decoded with orjson, validated with pydantic and translated. Answers, chunks and errors are
encoded with orjson; a stream's constant chunk pieces are encoded once per stream.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from turnout.core.errors import ErrorClass, RefusalError
from turnout.core.estimate import MAX_CHOICES
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
from turnout.gateway.passthrough import native, split_openai_chat
from turnout.gateway.surface import ChatCall, refusal_text
from turnout.reply import Reply

# --- request ------------------------------------------------------------------------------------


class _In(BaseModel):
    # strict: a string where a number or a boolean belongs is an error, never coerced ("10", "yes")
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _TextPart(_In):
    type: Literal["text"]
    text: str


class _ImageURL(_In):
    url: str = Field(min_length=1)
    detail: str | None = None


class _ImagePart(_In):
    type: Literal["image_url"]
    image_url: _ImageURL


class _RefusalPart(_In):
    type: Literal["refusal"]
    refusal: str


_Part = Annotated[_TextPart | _ImagePart | _RefusalPart, Field(discriminator="type")]


class _Function(_In):
    name: str = Field(min_length=1)
    arguments: str = "{}"


class _ToolCall(_In):
    id: str
    type: Literal["function"] = "function"
    function: _Function


class _Message(_In):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_Part] | None = None
    name: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class _FunctionDef(_In):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(_In):
    type: Literal["function"]
    function: _FunctionDef


class _NamedFunction(_In):
    name: str


class _ToolChoice(_In):
    type: Literal["function"]
    function: _NamedFunction


class _StreamOptions(_In):
    include_usage: bool | None = None


class _JsonSchema(_In):
    name: str = Field(default="response", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class _ResponseFormat(_In):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: _JsonSchema | None = None


class ChatCompletionRequest(_In):
    """The fields of an OpenAI chat completion request the gateway acts on (others are ignored)."""

    model: str = Field(max_length=MAX_MODEL_CHARS)
    messages: list[_Message] = Field(min_length=1)
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    tools: list[_Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | _ToolChoice | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    max_completion_tokens: int | None = Field(default=None, gt=0)
    n: int | None = Field(default=None, ge=1)  # above 1 it is split off first (see _chat_call)
    response_format: _ResponseFormat | None = None
    user: str | None = Field(default=None, max_length=MAX_FIELD_CHARS)


def _parts(content: str | list[_Part] | None) -> str | tuple[ContentPart, ...]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out: list[ContentPart] = []
    for p in content:
        if isinstance(p, _TextPart):
            out.append(TextPart(text=p.text))
        elif isinstance(p, _ImagePart):
            out.append(ImagePart(url=p.image_url.url, detail=p.image_url.detail))
        else:
            out.append(TextPart(text=p.refusal))
    return tuple(out)


def _text(content: str | list[_Part] | None) -> str:
    parts = _parts(content)
    return parts if isinstance(parts, str) else "".join(p.text for p in parts if isinstance(p, TextPart))


def _message(m: _Message, i: int) -> Message:
    if m.role in ("system", "developer"):
        return Message(role="system", content=_text(m.content))
    if m.role == "user":
        return Message(role="user", content=_parts(m.content), name=m.name)
    if m.role == "tool":
        if not m.tool_call_id:
            raise invalid("a tool message needs tool_call_id", param=f"messages[{i}].tool_call_id")
        return Message(role="tool", content=_text(m.content), tool_call_id=m.tool_call_id, name=m.name)
    calls = tuple(
        ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}") for c in m.tool_calls or ()
    )
    return Message(role="assistant", content=_text(m.content), tool_calls=calls, reasoning=m.reasoning_content)


def _response_format(fmt: _ResponseFormat | None) -> ResponseFormat | None:
    """``response_format`` as Turnout's structured output (``text`` asks for none)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(kind="json_object")
    spec = fmt.json_schema
    if spec is None:
        raise invalid("response_format of type json_schema needs json_schema", param="response_format.json_schema")
    return ResponseFormat(
        kind="json_schema",
        schema=spec.schema_ or {"type": "object"},
        name=spec.name,
        description=spec.description,
        strict=bool(spec.strict),
    )


def _chat_call(raw: dict[str, Any]) -> ChatCall:
    """The :class:`ChatCall` of a request body (validated with pydantic; see :meth:`OpenAISurface.parse`)."""
    modelled, only = split_openai_chat(raw)
    try:
        req = ChatCompletionRequest.model_validate(modelled)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise invalid(message, param=param) from None
    choices = raw["n"] if "n" in only else 1
    if choices > MAX_CHOICES:
        raise invalid(f"n must be at most {MAX_CHOICES}", param="n")
    if choices > 1 and req.stream:
        raise invalid("n > 1 is served without streaming only", param="n", code="unsupported_parameter")
    response_format = _response_format(req.response_format)
    choice = req.tool_choice
    return ChatCall(
        model=req.model,
        messages=tuple(_message(m, i) for i, m in enumerate(req.messages)),
        tools=tuple(
            ToolSpec(
                name=t.function.name,
                description=t.function.description or "",
                parameters=t.function.parameters or {"type": "object", "properties": {}},
            )
            for t in req.tools or ()
        ),
        tool_choice=choice.function.name if isinstance(choice, _ToolChoice) else choice,
        temperature=req.temperature,
        max_tokens=req.max_completion_tokens or req.max_tokens,
        choices=choices,
        stream=bool(req.stream),
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
        sender=req.user,
        response_format=response_format,
        native=native("openai-chat", raw, only),
    )


# --- responses ----------------------------------------------------------------------------------

_FINISH = {"stop": "stop", "tool_calls": "tool_calls", "length": "length", "content_filter": "content_filter"}


def _usage(u: Usage | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens},
    }


def _tool_call(c: ToolCall) -> dict[str, Any]:
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}


def completion_object(reply: Reply) -> dict[str, Any]:
    """The ``chat.completion`` object of ``reply`` (in Turnout's terms: any text, tool calls or reasoning)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [_tool_call(c) for c in reply.tool_calls]
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    body: dict[str, Any] = {
        "id": f"chatcmpl-{reply.call_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.served.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _FINISH.get(reply.finish_reason or "stop", "stop"),
            }
        ],
    }
    if reply.usage is not None:  # OpenAI's schema has usage optional but never null
        body["usage"] = _usage(reply.usage)
    return body


_ERROR_TYPES: dict[str, str] = {
    "invalid_request": "invalid_request_error",
    "forbidden": "invalid_request_error",
    "authentication": "invalid_request_error",
    "not_found": "invalid_request_error",
    "too_large": "invalid_request_error",
    "context_length": "invalid_request_error",
    "rate_limited": "rate_limit_error",
    "upstream_failed": "server_error",
    "upstream_interrupted": "server_error",
    "shutting_down": "server_error",
    "unavailable": "server_error",
    "internal": "server_error",
}


def error_json(failure: Failure) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": failure.message,
            "type": _ERROR_TYPES[failure.kind],
            "param": failure.param,
            "code": failure.code,
        }
    }


class OpenAISurface:
    """Chat Completions requests and answers (see :class:`turnout.gateway.surface.Surface`)."""

    name = "openai"

    def parse(self, body: bytes, headers: Mapping[str, str] | None = None) -> ChatCall:
        """Validate the body and translate it into a :class:`ChatCall`.

        What has no translation (``file`` parts, ``custom`` tools, ``role: "function"``, ``n > 1``) is kept
        for an OpenAI Chat upstream (see :mod:`turnout.gateway.passthrough`).
        """
        raw = parse_json(body)
        return _chat_call(raw)

    def reply_body(self, reply: Reply, call: ChatCall) -> bytes:
        """A ``chat.completion`` object (the upstream's own, when the request held what only it carries)."""
        native = call.native
        if native is not None and native.only and reply.native is not None:
            return orjson.dumps({**reply.native, "id": f"chatcmpl-{reply.call_id}", "model": reply.served.model})
        return orjson.dumps(completion_object(reply))

    def refusal_body(self, exc: RefusalError, model: str, call: ChatCall, call_id: str) -> bytes:
        """A completion whose message carries ``refusal`` and finishes with ``content_filter``."""
        return orjson.dumps(
            {
                "id": f"chatcmpl-{call_id}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": None, "refusal": refusal_text(exc)},
                        "logprobs": None,
                        "finish_reason": "content_filter",
                    }
                ],
            }
        )

    def error_body(self, failure: Failure) -> bytes:
        """OpenAI's error JSON."""
        return orjson.dumps(error_json(failure))

    def stream_encoder(self, call: ChatCall, model: str, call_id: str) -> OpenAIStreamEncoder:
        """Chunks of ``chat.completion.chunk`` objects, then ``data: [DONE]``."""
        return OpenAIStreamEncoder(model, call_id, include_usage=call.include_usage)


_DONE = b"data: [DONE]\n\n"
_CHOICE_END = b',"logprobs":null,"finish_reason":null}]}\n\n'


class OpenAIStreamEncoder:
    """One streamed completion as OpenAI SSE chunks (see :class:`turnout.gateway.surface.StreamEncoder`)."""

    __slots__ = ("_head", "_include_usage", "_prefix", "_tools")

    def __init__(self, model: str, call_id: str, *, include_usage: bool) -> None:
        head = orjson.dumps(
            {
                "id": f"chatcmpl-{call_id}",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
            }
        )
        self._head = b"data: " + head[:-1]  # the object without its closing brace
        self._prefix = self._head + b',"choices":[{"index":0,"delta":'
        self._include_usage = include_usage
        self._tools = 0

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._prefix + orjson.dumps(delta) + _CHOICE_END

    def start(self) -> bytes:
        """The first chunk: the assistant role."""
        return self._prefix + b'{"role":"assistant","content":""}' + _CHOICE_END

    def event(self, event: StreamEvent) -> bytes:
        """A content, reasoning or tool-call delta; a ``Final`` becomes the finish-reason chunk."""
        if isinstance(event, TextDelta):
            return self._delta({"content": event.text})
        if isinstance(event, ReasoningDelta):
            return self._delta({"reasoning_content": event.text})
        if isinstance(event, ToolCallEvent):
            index = self._tools
            self._tools += 1
            return self._delta({"tool_calls": [{"index": index, **_tool_call(event.call)}]})
        if isinstance(event, Final):
            finish = _FINISH.get(event.finish_reason or "stop", "stop")
            return self._prefix + b'{},"logprobs":null,"finish_reason":' + orjson.dumps(finish) + b"}]}\n\n"
        return b""

    def finish(self, usage: Usage | None) -> bytes:
        """The usage chunk (when asked for), then ``[DONE]``."""
        if not self._include_usage:
            return _DONE
        return self._head + b',"choices":[],"usage":' + orjson.dumps(_usage(usage)) + b"}\n\n" + _DONE

    def refusal(self, exc: RefusalError, *, started: bool) -> bytes:
        """(The role chunk,) a ``refusal`` delta, a ``content_filter`` finish, then ``[DONE]``."""
        return (
            (b"" if started else self.start())
            + self._delta({"refusal": refusal_text(exc)})
            + self._prefix
            + b'{},"logprobs":null,"finish_reason":"content_filter"}]}\n\n'
            + self.finish(None)
        )

    def interrupted(self, failure: Failure) -> bytes:
        """``data: {"error": {...}}`` (the SDKs raise on it), and no ``[DONE]``."""
        body = error_json(failure)
        if failure.cause is ErrorClass.RATE_LIMITED:
            body["error"]["type"] = "rate_limit_error"
        return b"data: " + orjson.dumps(body) + b"\n\n"
