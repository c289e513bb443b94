"""Anthropic Messages (``POST /v1/messages``).

Streams follow ``tests/fixtures/anthropic/``: ``message_start``, a ``ping``, per block
``content_block_start`` / ``content_block_delta``… / ``content_block_stop`` (thinking blocks end with a
``signature_delta``; tool input arrives as ``input_json_delta`` fragments, the first one ``""``), then
``message_delta`` with the stop reason and cumulative usage, then ``message_stop``. Errors are
``{"type": "error", "error": {"type", "message"}, "request_id"}``; in-band, ``event: error``.
"""

from __future__ import annotations

from typing import Any

from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, Finish, SimUsage, ToolCall
from turnout.sim.schema import anthropic_schema
from turnout.sim.wire.base import Codec, Parsed, StreamEncoder, Unit, broken, dumps, new_id, part_words, sse

SIGNATURE = "c2ltLXNpZ25hdHVyZQ=="  # opaque, as real thinking signatures are
#: The signature the simulator's Vertex AI Claude signs with: a signature is valid only where it was issued.
VERTEX_SIGNATURE = "c2ltLXZlcnRleC1zaWduYXR1cmU="
DEFAULT_CONTEXT_LIMIT = 200_000

_ERRORS: dict[ErrorKind, tuple[str, str]] = {
    ErrorKind.RATE_LIMIT: (
        "rate_limit_error",
        "This request would exceed the rate limit for your organization (sim-org) of 50 requests per "
        "minute. For details, refer to: https://docs.anthropic.com/en/api/rate-limits. You can see the "
        "response headers for current usage. Please reduce the prompt length or the maximum tokens "
        "requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales "
        "to discuss your options for a rate limit increase.",
    ),
    ErrorKind.QUOTA: (
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to "
        "upgrade or purchase credits.",
    ),
    ErrorKind.AUTH: ("authentication_error", "invalid x-api-key"),
    ErrorKind.FORBIDDEN: ("permission_error", "Your API key does not have permission to use the specified resource."),
    ErrorKind.CONTENT_FILTER: ("invalid_request_error", "Output blocked by content filtering policy"),
    ErrorKind.BAD_REQUEST: ("invalid_request_error", "Invalid request."),
    ErrorKind.SERVER: ("api_error", "Internal server error"),
    ErrorKind.UNAVAILABLE: ("api_error", "Service unavailable"),
    ErrorKind.OVERLOADED: ("overloaded_error", "Overloaded"),
}
_ERRORS[ErrorKind.BILLING] = _ERRORS[ErrorKind.QUOTA]


def anthropic_error(spec: ErrorSpec, model: str) -> dict[str, str]:
    """The ``error`` object for ``spec``."""
    kind = spec.kind or ErrorKind.OVERLOADED
    if kind is ErrorKind.NOT_FOUND:
        etype, message = "not_found_error", f"model: {model}"
    elif kind is ErrorKind.CONTEXT_LENGTH:
        limit = spec.limit or DEFAULT_CONTEXT_LIMIT
        etype, message = (
            "invalid_request_error",
            f"prompt is too long: {spec.tokens or limit + 1} tokens > {limit} maximum",
        )
    else:
        etype, message = _ERRORS.get(kind, _ERRORS[ErrorKind.SERVER])
    return {"type": etype, "message": spec.message or message}


#: The counters a ``message_delta`` repeats (cumulative), as Anthropic sends them.
_DELTA_USAGE = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")


def anthropic_usage(usage: SimUsage) -> dict[str, Any]:
    """Anthropic ``usage``: ``input_tokens`` excludes cache reads and writes, which are reported apart."""
    return {
        "input_tokens": usage.input - usage.cached_input - usage.cache_write,
        "cache_creation_input_tokens": usage.cache_write,
        "cache_read_input_tokens": usage.cached_input,
        "cache_creation": {"ephemeral_5m_input_tokens": usage.cache_write, "ephemeral_1h_input_tokens": 0},
        "output_tokens": usage.output,
        "service_tier": "standard",
    }


def stop_reason(content: Content) -> str:
    """The Anthropic stop reason of a complete answer."""
    if content.finish is Finish.REFUSAL:
        return "refusal"
    if content.finish is Finish.LENGTH:
        return "max_tokens"
    return "tool_use" if content.tool_calls else "end_turn"


def tool_id(call: ToolCall) -> str:
    """Anthropic-style ids for generated calls (``toolu_…``); explicit ids are kept."""
    return "toolu_" + call.id[5:] if call.id.startswith("call_sim") else call.id


class AnthropicMessages(Codec):
    """The Anthropic Messages protocol."""

    protocol = "anthropic"
    request_id_header = "request-id"
    inband_kind = ErrorKind.OVERLOADED
    #: The signature of this cloud's thinking blocks, and those of the simulator's other clouds it refuses.
    signature = SIGNATURE
    foreign_signatures: frozenset[str] = frozenset({VERTEX_SIGNATURE})

    def default_status(self, kind: ErrorKind) -> int:
        """Billing errors are 400 and overload is 529 on Anthropic."""
        if kind in (ErrorKind.QUOTA, ErrorKind.BILLING):
            return 400
        if kind is ErrorKind.OVERLOADED:
            return 529
        return super().default_status(kind)

    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """Model, stream flag, input words (system + messages) and prefill."""
        messages = payload.get("messages")
        if not isinstance(messages, list):
            messages = []
        n = part_words(payload.get("system"), "text")
        for m in messages:
            if isinstance(m, dict):
                n += part_words(m.get("content"), "text", "content")
        model = payload.get("model")
        return Parsed(
            model=model if isinstance(model, str) else "",
            stream=payload.get("stream") is True,
            input_words=n,
            prefill=bool(messages) and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant",
            schema=anthropic_schema(payload),
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """A ``message`` object."""
        blocks: list[dict[str, Any]] = []
        if content.reasoning:
            blocks.append({"type": "thinking", "thinking": content.reasoning_text, "signature": self.signature})
        if content.text:
            blocks.append({"type": "text", "text": content.full_text})
        blocks.extend(
            {"type": "tool_use", "id": tool_id(c), "name": c.name, "input": c.arguments} for c in content.tool_calls
        )
        return dumps(
            {
                "id": f"msg_sim{new_id()}",
                "type": "message",
                "role": "assistant",
                "model": req.model,
                "content": blocks,
                "stop_reason": stop_reason(content),
                "stop_sequence": None,
                "usage": anthropic_usage(usage),
            }
        )

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """A Messages event stream."""
        return AnthropicStream(req, content, usage, self.signature)

    def refuse(self, payload: dict[str, Any]) -> str | None:
        """A thinking block signed by another of the simulator's clouds is refused, as a real cloud refuses it."""
        for m in payload.get("messages") or ():
            content = m.get("content") if isinstance(m, dict) else None
            for block in content if isinstance(content, list) else ():
                signed = isinstance(block, dict) and block.get("type") == "thinking"
                if signed and self.forged(block.get("signature")):
                    return "messages: Invalid `signature` in `thinking` block"
        return None

    def forged(self, signature: object) -> bool:
        """A signature this cloud did not issue: another sim cloud's, or one with ``!`` (outside base64)."""
        return isinstance(signature, str) and (signature in self.foreign_signatures or "!" in signature)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """``{"type": "error", "error": {...}, "request_id": ...}``."""
        return dumps({"type": "error", "error": anthropic_error(spec, req.model), "request_id": request_id})


class AnthropicStream(StreamEncoder):
    """Named events; ``message_stop`` is the terminator."""

    def __init__(self, req: Parsed, content: Content, usage: SimUsage, signature: str = SIGNATURE) -> None:
        super().__init__(req, content, usage)
        self.signature = signature
        self.blocks: dict[str, int] = {}
        for u in self.units:
            key = f"tool{u.value.index}" if u.kind == "tool" else u.kind
            self.blocks.setdefault(key, len(self.blocks))

    def plan(self) -> list[Unit]:
        """Refusals carry no content blocks, only ``stop_reason: "refusal"``."""
        return [u for u in super().plan() if u.kind != "refusal"]

    def head(self) -> bytes:
        """``message_start`` (usage with ``output_tokens: 1``) and a ``ping``."""
        usage = anthropic_usage(self.usage)
        del usage["service_tier"], usage["cache_creation"]
        usage["output_tokens"] = 1
        message: dict[str, Any] = {
            "id": f"msg_sim{self.rid}",
            "type": "message",
            "role": "assistant",
            "model": self.req.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return sse({"type": "message_start", "message": message}, "message_start") + sse({"type": "ping"}, "ping")

    @staticmethod
    def _ev(etype: str, **fields: Any) -> bytes:
        return sse({"type": etype, **fields}, etype)

    def unit(self, i: int) -> bytes:
        """A delta, opening its block first and closing it after its last unit."""
        u = self.units[i]
        if u.kind == "tool":
            call: ToolCall = u.value
            index = self.blocks[f"tool{call.index}"]
            start = {"type": "tool_use", "id": tool_id(call), "name": call.name, "input": {}}
            out = self._ev("content_block_start", index=index, content_block=start)
            args = call.arguments_json
            mid = len(args) // 2
            for piece in ("", args[:mid], args[mid:]):
                out += self._ev(
                    "content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece}
                )
            return out + self._ev("content_block_stop", index=index)
        index = self.blocks[u.kind]
        thinking = u.kind == "reasoning"
        out = b""
        if u.first:
            block = {"type": "thinking", "thinking": "", "signature": ""} if thinking else {"type": "text", "text": ""}
            out += self._ev("content_block_start", index=index, content_block=block)
        delta = {"type": "thinking_delta", "thinking": u.value} if thinking else {"type": "text_delta", "text": u.value}
        out += self._ev("content_block_delta", index=index, delta=delta)
        if u.last:
            if thinking:
                out += self._ev(
                    "content_block_delta", index=index, delta={"type": "signature_delta", "signature": self.signature}
                )
            out += self._ev("content_block_stop", index=index)
        return out

    def tail(self) -> bytes:
        """``message_delta`` with the stop reason and cumulative usage."""
        u = self.usage
        full = anthropic_usage(u)
        usage = {key: full[key] for key in _DELTA_USAGE}
        return self._ev(
            "message_delta",
            delta={"stop_reason": stop_reason(self.content), "stop_sequence": None},
            usage=usage,
        )

    def done(self) -> bytes:
        """``message_stop``."""
        return self._ev("message_stop")

    def error(self, spec: ErrorSpec) -> bytes:
        """``event: error`` (``overloaded_error`` unless the step names another)."""
        return self._ev("error", error=anthropic_error(spec, self.req.model))

    def malformed(self) -> bytes:
        """A ``content_block_delta`` cut in half."""
        data = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " garbled"}}
        return b"event: content_block_delta\ndata: " + broken(data) + b"\n\n"
