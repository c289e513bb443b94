"""Anthropic Messages (``POST /v1/messages``), streaming and non-streaming.

The wire shape (``protocols.md`` section 4): ``x-api-key`` and ``anthropic-version`` headers; the system
prompt is a top-level string; ``messages`` alternate ``user``/``assistant`` with content blocks (tool calls
are ``tool_use`` blocks, tool results ``tool_result`` blocks inside a user message). A stream is a sequence
of named events and is complete only at ``message_stop``: a ``message_delta`` carrying a stop reason and
then end of body is a truncated stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from turnout.core.classify import ErrorFacts
from turnout.core.errors import ProtocolError, ProviderError, RefusalError, StreamTruncated, TurnoutError
from turnout.core.model_ids import cloud_of, wire_model
from turnout.core.tools import anthropic_tools, prompt_guided_tools
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    ImagePart,
    Message,
    ProviderToolEvent,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallEvent,
    ToolsPayload,
    ToolSpec,
    Usage,
    UsageEvent,
    provider_count,
)
from turnout.providers import structured
from turnout.providers.base import MALFORMED, AdapterSettings, HTTPAdapter, SSEEventDecoder, StreamDecoder, loads
from turnout.providers.http import HttpClient
from turnout.providers.signatures import SIGNER_KEY, mine, replayable_thinking, signer_of

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
COMPLETION_SIGNAL = "message_stop"

#: Anthropic ``stop_reason`` → unified finish reason (``refusal`` raises instead).
FINISH_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}
_TOOL_CHOICE: Mapping[str, dict[str, str]] = {
    "auto": {"type": "auto"},
    "required": {"type": "any"},
    "any": {"type": "any"},
    "none": {"type": "none"},
}
# Blocks whose input streams as ``input_json_delta``: client tools, and tools the provider runs itself.
_CLIENT_TOOL = "tool_use"
_SERVER_TOOLS = frozenset({"server_tool_use", "mcp_tool_use"})
#: ``ToolCall.extra`` key holding the thinking blocks that preceded a turn's first tool call. With extended
#: thinking on, Anthropic requires them (signature included) back in front of that ``tool_use`` next turn.
THINKING_KEY = "anthropic_thinking"


def finish_reason(stop_reason: str | None, has_calls: bool) -> str:
    """The unified finish reason for an Anthropic ``stop_reason``."""
    mapped = FINISH_REASONS.get(stop_reason or "")
    if mapped is not None:
        return mapped
    return "tool_calls" if has_calls else "stop"


#: The counts of an Anthropic ``usage`` that :func:`normalise_usage` reads.
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def normalise_usage(raw: Mapping[str, Any]) -> Usage:
    """Anthropic ``usage`` → :class:`Usage`: its ``input_tokens`` excludes cache reads and writes."""
    cache_read, bad_read = provider_count(raw.get("cache_read_input_tokens"))
    cache_write, bad_write = provider_count(raw.get("cache_creation_input_tokens"))
    plain, bad_input = provider_count(raw.get("input_tokens"))
    output, bad_output = provider_count(raw.get("output_tokens"))
    return Usage(
        input_tokens=plain + cache_read + cache_write,
        output_tokens=output,
        cached_input_tokens=cache_read,
        cache_write_tokens=cache_write,
        clamped=bad_read or bad_write or bad_input or bad_output,
    )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def _refusal_message(stop_details: Any) -> str:
    if isinstance(stop_details, Mapping) and isinstance(stop_details.get("explanation"), str):
        return f"the model refused to answer: {stop_details['explanation']}"
    return "the model refused to answer"


class AnthropicAdapter(HTTPAdapter):
    """The Anthropic Messages API."""

    protocol = "anthropic"
    default_capabilities = Capabilities(
        native_tools=True,
        vision=True,
        streaming=True,
        streaming_tool_events=True,
        prompt_caching=True,
        extended_thinking=True,
        structured_output=True,
    )

    def __init__(self, settings: AdapterSettings, http: HttpClient, api_key: str | None = None) -> None:
        super().__init__(settings, http, api_key)
        base = self.settings.base_url
        self._url = f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"
        self._cloud = cloud_of(settings.family.name, self.protocol)
        self._signer = signer_of(settings.profile)

    # --- hooks ------------------------------------------------------------------------------

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """``x-api-key`` and ``anthropic-version`` (unless the profile's extra headers pin another version)."""
        headers = super().auth_headers(api_key)
        if not any(k.lower() == "anthropic-version" for k in self.settings.extra_headers):
            headers["anthropic-version"] = API_VERSION
        return headers

    def url(self, model: str, stream: bool) -> str:
        """``{base_url}/v1/messages`` (``/messages`` when the base already ends with ``/v1``)."""
        return self._url

    def convert_tools(self, tools: Sequence[ToolSpec]) -> ToolsPayload:
        """Anthropic ``tools`` (prompt-guided instructions when the profile turns native tools off)."""
        return anthropic_tools(tools) if self._caps.native_tools else prompt_guided_tools(tools)

    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """The Messages request body (a pass-through Messages request keeps the client's own body)."""
        native = request.native
        if native is not None and self.passes_through(request):
            wire = wire_model(self._cloud, model)
            own = native_body(native.body, wire, self.temperature(temperature), stream, signer=self._signer)
            return self.with_merged_extras(own)
        system: list[str] = []
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            if m.role == "system":
                if m.text:
                    system.append(m.text)
                continue
            role = "assistant" if m.role == "assistant" else "user"
            blocks = _assistant_blocks(m, self._signer) if role == "assistant" else _user_blocks(m)
            if not blocks:
                continue
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": role, "content": blocks})
        if system and self.settings.merge_system_into_user:
            _merge_system(messages, "\n\n".join(system))
            system = []
        for msg in messages:
            content = msg["content"]
            if len(content) == 1 and content[0]["type"] == "text":
                msg["content"] = content[0]["text"]
        body: dict[str, Any] = {
            "model": wire_model(self._cloud, model),
            "max_tokens": self.max_tokens(request, DEFAULT_MAX_TOKENS),
        }
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = messages
        if request.tools and self._caps.native_tools:
            body["tools"] = list(anthropic_tools(request.tools).tools)
            if request.tool_choice:
                body["tool_choice"] = _TOOL_CHOICE.get(request.tool_choice) or {
                    "type": "tool",
                    "name": request.tool_choice,
                }
        t = self.temperature(temperature)
        if t is not None:
            body["temperature"] = t
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        if request.response_format is not None:
            structured.anthropic(body, request.response_format)
        if stream:
            body["stream"] = True
        return self.with_merged_extras(body)

    def parse_response(self, data: Any, model: str) -> ChatResponse:
        """A ``message`` object → the answer; ``stop_reason: "refusal"`` raises :class:`RefusalError`."""
        if data.get("type") == "error":
            raise self.in_band_error(_error_facts(data), model)
        served = data.get("model") or model
        stop = data.get("stop_reason")
        if stop == "refusal":
            raise RefusalError(_refusal_message(data.get("stop_details")), provider=self.profile, model=served)
        text: list[str] = []
        reasoning: list[str] = []
        thinking: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        for block in data.get("content") or ():
            kind = block.get("type")
            if kind == "text":
                text.append(_str(block.get("text", "")))
            elif kind == "thinking":
                reasoning.append(_str(block.get("thinking", "")))
                thinking.append(_thinking_block(reasoning[-1], block.get("signature")))
            elif kind == "redacted_thinking":
                thinking.append({"type": "redacted_thinking", "data": block.get("data")})
            elif kind == _CLIENT_TOOL:
                args = _json_text(block.get("input") or {})
                extra = _extra(thinking, self._signer)
                calls.append(ToolCall(id=_str(block["id"]), name=_str(block["name"]), arguments=args, extra=extra))
                thinking = []
        usage = data.get("usage")
        return ChatResponse(
            text="".join(text),
            tool_calls=tuple(calls),
            usage=normalise_usage(usage) if isinstance(usage, Mapping) else None,
            reasoning="".join(reasoning) or None,
            finish_reason=finish_reason(stop, bool(calls)),
            model=served,
        )

    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """``{"type": "error", "error": {"type", "message"}, "request_id"}``; other bodies → an excerpt."""
        data = orjson.loads(body)
        facts = _error_facts(data)
        request_id = data.get("request_id")
        if isinstance(request_id, str) and "request-id" not in headers:
            headers = {**{k.lower(): v for k, v in headers.items()}, "request-id": request_id}
        return ErrorFacts(
            status=status,
            error_type=facts.error_type,
            error_code=facts.error_code,
            message=facts.message,
            headers=headers,
        )

    def decoder(self, model: str) -> StreamDecoder:
        """A Messages event-stream decoder."""
        return AnthropicDecoder(self, model)

    counts_tokens = True

    async def count_tokens(self, request: ChatRequest, model: str) -> int:
        """Anthropic's own count of the request's input tokens (``POST /v1/messages/count_tokens``).

        Raises:
            ProviderError: The upstream refused or failed (classified like a chat call's error).
            InvalidRequest: The request cannot be built or encoded (nothing was sent).
        """
        try:
            body = self.count_body(request, model)
        except Exception as exc:
            raise self._unbuildable(exc) from exc
        return await self.post_count(self.count_url(model), self.request_headers(request), body, model, "input_tokens")

    def count_url(self, model: str) -> str:
        """Where the count is asked."""
        return self._url + "/count_tokens"

    def count_body(self, request: ChatRequest, model: str) -> dict[str, Any]:
        """The chat body's fields ``count_tokens`` accepts."""
        built = self.build_body(request, model, None, False)
        return {k: v for k, v in built.items() if k in _COUNTED}


#: The fields ``count_tokens`` accepts (a chat body's others, like ``max_tokens``, it refuses).
_COUNTED = frozenset(("model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"))


def native_body(
    body: Mapping[str, Any], model: str, temperature: float | None, stream: bool, *, signer: str = "anthropic"
) -> dict[str, Any]:
    """A client's own Messages body, for this upstream: its model and stream flag, system messages folded.

    Thinking blocks the gateway stamped as issued by another family than ``signer`` are left out (see
    :func:`turnout.providers.signatures.replayable_thinking`); those of ``signer`` go back as issued.

    Everything else passes through unchanged (document blocks, Anthropic-defined and server tools,
    ``mcp_servers``, ``cache_control``, signed thinking blocks; unsigned ones, which only another protocol's
    answer has, are left out). ``role: "system"`` messages between turns are
    folded, in order, into the top-level ``system`` (which keeps its own blocks and their ``cache_control``),
    and the turns they separated are joined, as the Messages API needs alternating roles.
    """
    out = dict(body)
    out["model"] = model
    if stream:
        out["stream"] = True
    else:
        out.pop("stream", None)
    if temperature is not None and "temperature" not in out:
        out["temperature"] = temperature
    messages = out.get("messages")
    if isinstance(messages, list) and any(_unsigned_thinking(m) for m in messages):
        # a thinking block with an empty signature came from another protocol's answer: Anthropic would refuse
        # it, so it is left out (as a translated request leaves out every thinking block)
        out["messages"] = messages = [_without_unsigned_thinking(m) for m in messages]
    replayable = replayable_thinking(messages, signer) if isinstance(messages, list) else None
    if replayable is not None:
        out["messages"] = messages = replayable
    if isinstance(messages, list) and any(isinstance(m, dict) and m.get("role") == "system" for m in messages):
        system = _system_blocks(out.get("system"))
        turns: list[dict[str, Any]] = []
        for m in messages:
            if not isinstance(m, dict):
                continue
            if m.get("role") == "system":
                system.extend(_system_blocks(m.get("content")))
            elif turns and turns[-1].get("role") == m.get("role"):
                turns[-1] = {**turns[-1], "content": _blocks(turns[-1].get("content")) + _blocks(m.get("content"))}
            else:
                turns.append(m)
        out["messages"] = turns
        if system:
            out["system"] = system
    return out


def _unsigned(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "thinking" and not block.get("signature")


def _unsigned_thinking(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(_unsigned(b) for b in content)


def _without_unsigned_thinking(message: Any) -> Any:
    if not _unsigned_thinking(message):
        return message
    return {**message, "content": [b for b in message["content"] if not _unsigned(b)]}


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def _system_blocks(content: Any) -> list[Any]:
    return [b for b in _blocks(content) if isinstance(b, dict) and b.get("type") == "text"]


def _thinking_block(text: str, signature: Any) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": signature if isinstance(signature, str) else ""}


def _extra(thinking: list[dict[str, Any]], signer: str) -> Mapping[str, Any] | None:
    return {THINKING_KEY: tuple(thinking), SIGNER_KEY: signer} if thinking else None


def _error_facts(data: Any) -> ErrorFacts:
    """Type and message of an ``error`` object (nested as Anthropic sends it, or flat)."""
    err = data.get("error")
    if isinstance(err, Mapping):
        etype, message = err.get("type"), err.get("message")
    else:
        etype, message = None, err if isinstance(err, str) else data.get("message")
    return ErrorFacts(
        error_type=etype if isinstance(etype, str) else None,
        message=message if isinstance(message, str) else "",
    )


def _image_block(img: ImagePart) -> dict[str, Any]:
    if img.is_data_url:
        return {"type": "image", "source": {"type": "base64", "media_type": img.media_type, "data": img.data}}
    return {"type": "image", "source": {"type": "url", "url": img.url}}


def _user_blocks(m: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in m.parts:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append(_image_block(part))
    if m.role != "tool":
        return blocks
    # A tool result: its text (and images) become the content of one ``tool_result`` block.
    content: str | list[dict[str, Any]] = m.text if all(b["type"] == "text" for b in blocks) else blocks
    return [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": content}]


def _assistant_blocks(m: Message, signer: str) -> list[dict[str, Any]]:
    # Thinking blocks kept from the turn that made these calls go first, as Anthropic requires; only to the
    # family that signed them (another one refuses the signature, and every later turn with it)
    blocks: list[dict[str, Any]] = [
        dict(b) for c in m.tool_calls if c.extra and mine(c.extra, signer) for b in c.extra.get(THINKING_KEY, ())
    ]
    if m.text:
        blocks.append({"type": "text", "text": m.text})
    for call in m.tool_calls:
        try:
            args = orjson.loads(call.arguments or "{}")
        except orjson.JSONDecodeError:
            args = {}
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": args if isinstance(args, dict) else {}}
        )
    return blocks


def _merge_system(messages: list[dict[str, Any]], system: str) -> None:
    """``merge_system_into_user``: the system text leads the first user message."""
    block = {"type": "text", "text": system}
    for msg in messages:
        if msg["role"] == "user":
            msg["content"].insert(0, block)
            return
    messages.insert(0, {"role": "user", "content": [block]})


class _Block:
    """An open content block of a stream."""

    __slots__ = ("block", "held", "id", "input", "kind", "name", "parts", "signature")

    def __init__(self, kind: str, block: Mapping[str, Any]) -> None:
        self.kind = kind
        self.block = block
        self.id = block.get("id") or ""
        self.name = block.get("name") or ""
        self.input = block.get("input")
        self.signature = block.get("signature") or ""
        self.parts: list[str] = []  # input JSON fragments, or thinking text
        self.held = ""  # a thinking block's latest text, sent when the next arrives or, signed, at the block's end

    def arguments(self) -> str:
        """The assembled input as JSON text (``{}`` when every fragment was empty)."""
        raw = "".join(self.parts)
        if raw.strip():
            # A finished block holds valid JSON (invalid raises → ProtocolError); re-serialised compactly so
            # the stream and the non-stream answer carry the same text.
            return _json_text(orjson.loads(raw))
        return _json_text(self.input) if self.input else "{}"


def _think(block: _Block, text: str, out: list[StreamEvent]) -> None:
    """Thinking text: the piece held before it goes out; this one waits (the last is sent with the signature)."""
    block.parts.append(text)
    if block.held:
        out.append(ReasoningDelta(text=block.held))
    block.held = text


class AnthropicDecoder(SSEEventDecoder):
    """Decodes a Messages event stream; ``message_stop`` is the only completion signal.

    Events are dispatched on the payload's ``type`` (the ``event:`` line is optional), so a stream relayed
    without event names decodes the same.
    """

    def __init__(self, adapter: HTTPAdapter, model: str) -> None:
        self._adapter = adapter
        super().__init__(adapter.max_line)
        self.model = model
        self._blocks: dict[Any, _Block] = {}
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self._calls = 0
        self._thinking: list[dict[str, Any]] = []  # finished thinking blocks not yet attached to a call
        self._signer = signer_of(adapter.profile)
        self.done = False

    def _protocol_error(self, what: str) -> ProtocolError:
        return ProtocolError(f"malformed stream event: {what}", provider=self._adapter.profile, model=self.model)

    def truncated(self) -> TurnoutError:
        """End of body before ``message_stop`` (a bare ``message_delta.stop_reason`` is not enough)."""
        return StreamTruncated(COMPLETION_SIGNAL, provider=self._adapter.profile, model=self.model)

    def raise_stray_error(self) -> None:
        """A raw JSON error body appended to the stream by a proxy is that error, not a truncation."""
        for line in self._sse.stray:
            if not line.startswith(b"{"):
                continue
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(data, dict) and (data.get("type") == "error" or "error" in data):
                raise self._adapter.in_band_error(_error_facts(data), self.model)

    def dispatch(self, name: str, data: bytes, out: list[StreamEvent]) -> None:
        """Decode one Anthropic event (``message_start`` … ``message_stop``, ``ping``, ``error``)."""
        if self.done:  # nothing after message_stop counts
            return
        obj = loads(data, provider=self._adapter.profile, model=self.model, what="stream event")
        if not isinstance(obj, dict):
            raise self._protocol_error("not a JSON object")
        try:
            self._handle(obj.get("type") or name, obj, out)
        except ProviderError:
            raise
        except MALFORMED as exc:
            raise self._protocol_error(type(exc).__name__) from exc

    def _handle(self, kind: Any, obj: dict[str, Any], out: list[StreamEvent]) -> None:
        if kind == "content_block_delta":
            self._delta(obj, out)
        elif kind == "content_block_start":
            self._start(obj, out)
        elif kind == "content_block_stop":
            self._stop_block(obj, out)
        elif kind == "message_start":
            msg = obj["message"]
            if isinstance(msg.get("model"), str) and msg["model"]:
                self.model = msg["model"]
            self._take_usage(msg.get("usage"))
        elif kind == "message_delta":
            delta = obj.get("delta") or {}
            stop = delta.get("stop_reason")
            if stop is not None:
                self._stop = _str(stop)
            self._take_usage(obj.get("usage"))
            if stop == "refusal":
                raise RefusalError(
                    _refusal_message(delta.get("stop_details")), provider=self._adapter.profile, model=self.model
                )
        elif kind == "message_stop":
            self.done = True
            out.append(UsageEvent(usage=normalise_usage(self._usage)))
            out.append(Final(finish_reason=finish_reason(self._stop, self._calls > 0), model=self.model))
        elif kind == "error":
            raise self._adapter.in_band_error(_error_facts(obj), self.model)
        # ping and unknown event types are ignored

    def _take_usage(self, usage: Any) -> None:
        # message_delta usage is cumulative and may repeat the input/cache counters: the latest value wins. Only
        # the counts normalise_usage reads are kept, so a usage of many other keys grows nothing.
        if isinstance(usage, Mapping):
            for key in _USAGE_KEYS:
                value = usage.get(key)
                if value is not None:
                    self._usage[key] = value

    def _start(self, obj: dict[str, Any], out: list[StreamEvent]) -> None:
        block = obj["content_block"]
        kind = _str(block["type"])
        self._blocks[obj.get("index")] = _Block(kind, block)
        if kind == "text":
            text = _str(block.get("text") or "")
            if text:
                out.append(TextDelta(text=text))
        elif kind == "thinking":
            text = _str(block.get("thinking") or "")
            if text:
                _think(self._blocks[obj.get("index")], text, out)
        elif kind.endswith("_tool_result"):
            # Results of provider-executed tools (web search, code execution) arrive whole.
            out.append(
                ProviderToolEvent(
                    name=kind.removesuffix("_tool_result"), phase="result", payload=_json_text(block.get("content"))
                )
            )

    def _delta(self, obj: dict[str, Any], out: list[StreamEvent]) -> None:
        delta = obj["delta"]
        dtype = delta.get("type")
        if dtype == "text_delta":
            text = _str(delta["text"])
            if text:
                out.append(TextDelta(text=text))
        elif dtype == "input_json_delta":
            block = self._blocks.get(obj.get("index"))
            if block is not None:
                block.parts.append(_str(delta.get("partial_json") or ""))
        elif dtype == "thinking_delta":
            text = _str(delta["thinking"])
            if text:
                block = self._blocks.get(obj.get("index"))
                if block is not None:
                    _think(block, text, out)
                else:
                    out.append(ReasoningDelta(text=text))
        elif dtype == "signature_delta":
            block = self._blocks.get(obj.get("index"))
            if block is not None:
                block.signature += _str(delta["signature"])
        # citations_delta carries nothing the unified answer keeps

    def _stop_block(self, obj: dict[str, Any], out: list[StreamEvent]) -> None:
        # Only a finished block's input is parsed: a tool_use cut by max_tokens never gets here.
        block = self._blocks.pop(obj.get("index"), None)
        if block is None:
            return
        if block.kind == _CLIENT_TOOL:
            args = block.arguments()
            extra = _extra(self._thinking, self._signer)
            call = ToolCall(id=_str(block.id), name=_str(block.name), arguments=args, extra=extra)
            self._thinking = []
            self._calls += 1
            out.append(ToolCallEvent(call=call))
        elif block.kind == "thinking":
            if block.held:  # the block's last piece carries its signature
                signature = block.signature or None
                out.append(ReasoningDelta(text=block.held, signature=signature, signer=signature and self._signer))
            self._thinking.append(_thinking_block("".join(block.parts), block.signature))
        elif block.kind == "redacted_thinking":
            self._thinking.append({"type": "redacted_thinking", "data": block.block.get("data")})
        elif block.kind in _SERVER_TOOLS:
            out.append(ProviderToolEvent(name=_str(block.name), phase="call", payload=block.arguments()))
