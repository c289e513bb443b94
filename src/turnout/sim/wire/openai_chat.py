"""OpenAI Chat Completions (``POST /v1/chat/completions``), also every OpenAI-compatible vendor.

Shapes follow the recorded payloads in ``tests/fixtures/openai/``: a role chunk first, one chunk
per delta, ``finish_reason`` in its own chunk with an empty delta, the ``include_usage`` chunk with
``choices: []``, then ``data: [DONE]``. Reasoning uses the OpenAI-compatible ``reasoning_content``
(DeepSeek, xAI, Moonshot); refusals use ``refusal`` / ``delta.refusal``.
"""

from __future__ import annotations

from typing import Any

from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, Finish, SimUsage, ToolCall
from turnout.sim.schema import chat_schema
from turnout.sim.wire.base import (
    Codec,
    Parsed,
    StreamEncoder,
    broken,
    dumps,
    new_id,
    now,
    part_words,
    sse,
    tool_halves,
)

DONE = b"data: [DONE]\n\n"
FINGERPRINT = "fp_sim"
DEFAULT_CONTEXT_LIMIT = 128_000

#: A 500's ``type``, ``code`` and message, also sent for every kind :data:`_FIXED_ERRORS` does not list.
_SERVER_ERROR = ("server_error", None, "The server had an error while processing your request. Sorry about that!")
_OVERLOADED_ERROR = (
    "server_error",
    None,
    "That model is currently overloaded with other requests. You can retry your request, or "
    "contact us through our help center at help.openai.com if the error persists.",
)
#: The ``type``, ``code`` and message of the errors whose text does not depend on the request (others: a 500's).
_FIXED_ERRORS: dict[ErrorKind, tuple[str, str | None, str]] = {
    ErrorKind.QUOTA: (
        "insufficient_quota",
        "insufficient_quota",
        "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, read the docs: "
        "https://platform.openai.com/docs/guides/error-codes/api-errors.",
    ),
    ErrorKind.BILLING: ("unknown_error", "invalid_request_error", "Insufficient Balance"),  # DeepSeek's 402 body
    ErrorKind.AUTH: (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided: sk-sim***********. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
    ),
    ErrorKind.FORBIDDEN: (
        "request_forbidden",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported",
    ),
    ErrorKind.CONTENT_FILTER: (
        "invalid_request_error",
        "content_policy_violation",
        "Your request was rejected as a result of our safety system. Your prompt may contain text "
        "that is not allowed by our safety system.",
    ),
    ErrorKind.BAD_REQUEST: ("invalid_request_error", None, "Invalid request."),
    ErrorKind.UNAVAILABLE: _OVERLOADED_ERROR,
    ErrorKind.OVERLOADED: _OVERLOADED_ERROR,
}


def openai_error(spec: ErrorSpec, model: str) -> dict[str, Any]:
    """The ``error`` object OpenAI sends for ``spec.kind`` (shared by Chat, Responses and Azure)."""
    kind = spec.kind or ErrorKind.SERVER
    code: str | None
    param: str | None = None
    if kind is ErrorKind.RATE_LIMIT:
        etype, code = "requests", "rate_limit_exceeded"
        hint = f" Please try again in {spec.retry_after:g}s." if spec.retry_after is not None else ""
        message = (
            f"Rate limit reached for {model} in organization org-sim on requests per min (RPM): "
            f"Limit 3, Used 3, Requested 1.{hint} Visit https://platform.openai.com/account/rate-limits "
            "to learn more."
        )
    elif kind is ErrorKind.NOT_FOUND:
        etype, code = "invalid_request_error", "model_not_found"
        message = f"The model `{model}` does not exist or you do not have access to it."
    elif kind is ErrorKind.CONTEXT_LENGTH:
        etype, code, param = "invalid_request_error", "context_length_exceeded", "messages"
        limit = spec.limit or DEFAULT_CONTEXT_LIMIT
        tokens = spec.tokens or limit + 1
        message = (
            f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{tokens} tokens. Please reduce the length of the messages."
        )
    else:
        etype, code, message = _FIXED_ERRORS.get(kind, _SERVER_ERROR)
    return {"message": spec.message or message, "type": etype, "param": param, "code": code}


def chat_usage(usage: SimUsage) -> dict[str, Any]:
    """OpenAI chat ``usage`` (prompt tokens include cached ones)."""
    return {
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": usage.reasoning,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def finish_reason(content: Content) -> str:
    """The chat finish reason for a complete answer."""
    if content.finish is Finish.LENGTH:
        return "length"
    return "tool_calls" if content.tool_calls else "stop"


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments_json},
    }


class OpenAIChat(Codec):
    """The OpenAI Chat Completions protocol."""

    protocol = "openai"

    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """Model, stream flags, input words and prefill from a chat request."""
        messages = payload.get("messages")
        if not isinstance(messages, list):
            messages = []
        n = 0
        for m in messages:
            if isinstance(m, dict):
                n += part_words(m.get("content"), "text")
        options = payload.get("stream_options")
        model = path_model if path_model is not None else payload.get("model")
        return Parsed(
            model=model if isinstance(model, str) else "",
            stream=payload.get("stream") is True,
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
            input_words=n,
            prefill=bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant",
            schema=chat_schema(payload.get("response_format")),
        )

    def message(self, content: Content) -> dict[str, Any]:
        """The assistant ``message`` of a non-stream answer."""
        has_text = bool(content.text)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content.full_text if has_text or not (content.tool_calls or content.refusal) else None,
            "refusal": content.refusal_text or None,
            "annotations": [],
        }
        if content.reasoning:
            message["reasoning_content"] = content.reasoning_text
        if content.tool_calls:
            message["tool_calls"] = [_tool_call(c) for c in content.tool_calls]
        return message

    def choice_extra(self) -> dict[str, Any]:
        """Extra fields of each choice (Azure adds content filter results)."""
        return {}

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """A ``chat.completion`` object."""
        choice = {
            "index": 0,
            "message": self.message(content),
            "logprobs": None,
            "finish_reason": self.finish(content),
            **self.choice_extra(),
        }
        return dumps(
            {
                "id": f"chatcmpl-sim{new_id()}",
                "object": "chat.completion",
                "created": now(),
                "model": req.model,
                "choices": [choice],
                "usage": chat_usage(usage),
                "service_tier": "default",
                "system_fingerprint": FINGERPRINT,
            }
        )

    def finish(self, content: Content) -> str:
        """The finish reason (Azure reports refusals as ``content_filter``)."""
        return finish_reason(content)

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """A chat-completion-chunk stream."""
        return ChatStream(req, content, usage, self)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return dumps({"error": openai_error(spec, req.model)})


class ChatStream(StreamEncoder):
    """``data: {chat.completion.chunk}`` events, then ``data: [DONE]``."""

    def __init__(self, req: Parsed, content: Content, usage: SimUsage, codec: OpenAIChat) -> None:
        super().__init__(req, content, usage)
        self.codec = codec
        self.chunk_id = f"chatcmpl-sim{self.rid}"

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        """One chunk object with a single choice."""
        obj: dict[str, Any] = {
            "id": self.chunk_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.req.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **self.codec.choice_extra()}
            ],
            **extra,
        }
        if self.req.include_usage:
            obj["usage"] = None
        return obj

    def head(self) -> bytes:
        """The role chunk (``content: null`` when only tool calls or a refusal follow)."""
        kinds = {u.kind for u in self.units}
        no_text = "text" not in kinds and bool(kinds & {"tool", "refusal"})
        delta = {
            "role": "assistant",
            "content": None if no_text else "",
            "refusal": "" if "refusal" in kinds else None,
        }
        return sse(self.chunk(delta))

    def unit(self, i: int) -> bytes:
        """A content, reasoning or refusal delta, or a tool call in three fragments."""
        kind, value, _first, _last, _pos = self.units[i]
        if kind == "text":
            return sse(self.chunk({"content": value}))
        if kind == "reasoning":
            return sse(self.chunk({"content": None, "reasoning_content": value}))
        if kind == "refusal":
            return sse(self.chunk({"refusal": value}))
        call: ToolCall = value
        first_half, second_half = tool_halves(call)
        start = {
            "index": call.index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        return (
            sse(self.chunk({"tool_calls": [start]}))
            + sse(self.chunk({"tool_calls": [{"index": call.index, "function": {"arguments": first_half}}]}))
            + sse(self.chunk({"tool_calls": [{"index": call.index, "function": {"arguments": second_half}}]}))
        )

    def tail(self) -> bytes:
        """The finish chunk, and the usage chunk when ``include_usage`` was asked for."""
        out = sse(self.chunk({}, self.codec.finish(self.content)))
        if self.req.include_usage:
            usage_chunk = self.chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = chat_usage(self.usage)
            out += sse(usage_chunk)
        return out

    def done(self) -> bytes:
        """``data: [DONE]``."""
        return DONE

    def error(self, spec: ErrorSpec) -> bytes:
        """``data: {"error": ...}``, or OpenRouter's chunk with ``error`` and ``finish_reason: "error"``."""
        if spec.style == "openrouter":
            return sse(
                self.chunk(
                    {"content": ""},
                    "error",
                    provider="openai",
                    error={"code": "server_error", "message": spec.message or "Provider disconnected unexpectedly"},
                )
            )
        return sse({"error": openai_error(spec, self.req.model)})

    def malformed(self) -> bytes:
        """A content chunk cut in half."""
        return b"data: " + broken(self.chunk({"content": " garbled"})) + b"\n\n"
