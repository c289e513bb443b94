"""Ollama's native chat (``POST /api/chat``), NDJSON.

``stream`` defaults to true, as in Ollama. Each line is a ``{"model", "created_at", "message",
"done": false}`` object; tool calls arrive whole (arguments as an object, no ids); reasoning arrives in
``message.thinking``; the final line has ``"done": true``, ``done_reason`` and the counts
(``prompt_eval_count``, ``eval_count``). Errors are ``{"error": "<text>"}``, in-band too. Ollama has
no refusal signal, so a refusal is plain answer text.
"""

from __future__ import annotations

import time
from typing import Any

from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, Finish, SimUsage, ToolCall
from turnout.sim.schema import ollama_schema
from turnout.sim.wire.base import NDJSON, Codec, Parsed, StreamEncoder, broken, dumps, part_words

DEFAULT_CONTEXT_LIMIT = 4096
INBAND_MESSAGE = "an error was encountered while running the model"

_MESSAGES = {
    ErrorKind.RATE_LIMIT: "too many requests, please retry later",
    ErrorKind.QUOTA: "you've reached your usage limit, please upgrade to continue",
    ErrorKind.BILLING: "you've reached your usage limit, please upgrade to continue",
    ErrorKind.AUTH: "unauthorized",
    ErrorKind.FORBIDDEN: "forbidden",
    ErrorKind.CONTENT_FILTER: "the request was blocked by a content filter",
    ErrorKind.BAD_REQUEST: "invalid request",
    ErrorKind.SERVER: "llama runner process has terminated: exit status 2",
    ErrorKind.UNAVAILABLE: "server busy, please try again.  maximum pending requests exceeded",
    ErrorKind.OVERLOADED: "server busy, please try again.  maximum pending requests exceeded",
}


def ollama_error(spec: ErrorSpec, model: str) -> str:
    """The error text for ``spec``."""
    kind = spec.kind or ErrorKind.SERVER
    if spec.message:
        return spec.message
    if kind is ErrorKind.NOT_FOUND:
        return f"model '{model}' not found"
    if kind is ErrorKind.CONTEXT_LENGTH:
        limit = spec.limit or DEFAULT_CONTEXT_LIMIT
        return f"the input length ({spec.tokens or limit + 1} tokens) exceeds the context length ({limit} tokens)"
    return _MESSAGES.get(kind, _MESSAGES[ErrorKind.SERVER])


def created_at() -> str:
    """An RFC 3339 UTC timestamp like Ollama's."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def _call(call: ToolCall) -> dict[str, Any]:
    return {"function": {"name": call.name, "arguments": call.arguments}}


def _final(model: str, content: Content, usage: SimUsage, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": model,
        "created_at": created_at(),
        "message": message,
        "done_reason": "length" if content.finish is Finish.LENGTH else "stop",
        "done": True,
        "total_duration": 1_000_000 * (usage.output + 1) + 500_000,
        "load_duration": 500_000,
        "prompt_eval_count": usage.input,
        "prompt_eval_duration": 100_000 * max(usage.input, 1),
        "eval_count": usage.output,
        "eval_duration": 1_000_000 * max(usage.output, 1),
    }


class Ollama(Codec):
    """The Ollama ``/api/chat`` protocol."""

    protocol = "ollama"
    stream_content_type = NDJSON

    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """Model, stream flag (default true), input words and prefill."""
        messages = payload.get("messages")
        if not isinstance(messages, list):
            messages = []
        n = sum(part_words(m.get("content"), "text") for m in messages if isinstance(m, dict))
        model = payload.get("model")
        return Parsed(
            model=model if isinstance(model, str) else "",
            stream=payload.get("stream", True) is not False,
            input_words=n,
            prefill=bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant",
            schema=ollama_schema(payload.get("format")),
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """The final (``done: true``) object with the whole message."""
        message: dict[str, Any] = {"role": "assistant", "content": content.full_text or content.refusal_text}
        if content.reasoning:
            message["thinking"] = content.reasoning_text
        if content.tool_calls:
            message["tool_calls"] = [_call(c) for c in content.tool_calls]
        return dumps(_final(req.model, content, usage, message))

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """An NDJSON stream."""
        return OllamaStream(req, content, usage)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """``{"error": "<text>"}``."""
        return dumps({"error": ollama_error(spec, req.model)})


class OllamaStream(StreamEncoder):
    """One JSON object per line; ``"done": true`` ends the stream."""

    def _line(self, message: dict[str, Any]) -> bytes:
        obj = {"model": self.req.model, "created_at": created_at(), "message": message, "done": False}
        return dumps(obj) + b"\n"

    def unit(self, i: int) -> bytes:
        """A content, thinking or whole tool-call line."""
        u = self.units[i]
        if u.kind == "reasoning":
            return self._line({"role": "assistant", "content": "", "thinking": u.value})
        if u.kind == "tool":
            return self._line({"role": "assistant", "content": "", "tool_calls": [_call(u.value)]})
        return self._line({"role": "assistant", "content": u.value})

    def tail(self) -> bytes:
        """The ``done: true`` line with the counts."""
        message = {"role": "assistant", "content": ""}
        return dumps(_final(self.req.model, self.content, self.usage, message)) + b"\n"

    def error(self, spec: ErrorSpec) -> bytes:
        """``{"error": "..."}`` in place of the final line."""
        text = spec.message or (INBAND_MESSAGE if spec.kind in (None, ErrorKind.SERVER) else ollama_error(spec, ""))
        return dumps({"error": text}) + b"\n"

    def malformed(self) -> bytes:
        """A content line cut in half."""
        return broken({"model": self.req.model, "message": {"role": "assistant", "content": " garbled"}}) + b"\n"
