"""OpenAI Responses (``POST /responses``), streaming and non-streaming, including Azure OpenAI.

The wire shape (``protocols.md`` sections 2 and 3): the system prompt travels as ``instructions``, the
conversation as ``input`` items (messages with typed content parts, ``function_call`` and
``function_call_output`` items), tools are flat (``{"type": "function", "name", ...}``). A stream is a
sequence of typed events with no ``[DONE]``: it is complete only at ``response.completed`` or
``response.incomplete``; ``response.failed`` and ``error`` events are in-band errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import orjson

from turnout.core.classify import ErrorFacts
from turnout.core.errors import ProtocolError, ProviderError, RefusalError, StreamTruncated, TurnoutError
from turnout.core.tools import prompt_guided_tools
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    Message,
    NativeRequest,
    OpenAITools,
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
from turnout.providers.base import (
    AZURE_DEFAULT_API_VERSION,
    MALFORMED,
    AdapterSettings,
    HTTPAdapter,
    SSEEventDecoder,
    StreamDecoder,
    loads,
)
from turnout.providers.embedding import COMPATIBLE_LIMITS, OPENAI_LIMITS, EmbeddingWire, OpenAIEmbeddings
from turnout.providers.http import HttpClient

COMPLETION_SIGNAL = "response.completed or response.incomplete"
#: Azure's Responses API needs an api-version of 2025-03-01-preview or later; the profile default predates it.
AZURE_RESPONSES_API_VERSION = "2025-04-01-preview"

# Output items the provider executes itself: observability events, never client tool calls.
_PROVIDER_TOOL_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
    }
)
_TOOL_CHOICES = frozenset({"auto", "none", "required"})


def normalise_usage(raw: Mapping[str, Any]) -> Usage:
    """Responses ``usage`` → :class:`Usage` (``input_tokens`` already includes the cached part).

    ``input_tokens_details`` carries ``cached_tokens`` and, from some compatible servers, ``cache_write_tokens``;
    a server reporting more cached than input tokens counted them apart, so they are added.
    """
    details = raw.get("input_tokens_details")
    cached = written = 0
    bad_cached = bad_written = False
    if isinstance(details, Mapping):
        cached, bad_cached = provider_count(details.get("cached_tokens"))
        written, bad_written = provider_count(details.get("cache_write_tokens"))
    prompt, bad_input = provider_count(raw.get("input_tokens"))
    output, bad_output = provider_count(raw.get("output_tokens"))
    return Usage(
        input_tokens=prompt if cached + written <= prompt else prompt + cached + written,
        output_tokens=output,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        clamped=bad_cached or bad_written or bad_input or bad_output,
    )


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _arguments(raw: str) -> str:
    return raw if raw.strip() else "{}"


def tool_spec(t: ToolSpec) -> dict[str, Any]:
    """A flat Responses function tool. ``strict`` is off so any JSON Schema is accepted as written."""
    return {
        "type": "function",
        "name": t.name,
        "description": t.description,
        "parameters": dict(t.parameters),
        "strict": False,
    }


def _error_facts(err: Any, fallback: Mapping[str, Any] | None = None) -> ErrorFacts:
    """Type, code and message of an error object; ``fallback`` holds flat ``code``/``message`` fields."""
    err = err if isinstance(err, Mapping) else {}
    flat = fallback or {}
    etype = err.get("type")
    code = err.get("code", flat.get("code"))
    message = err.get("message") or flat.get("message") or ""
    return ErrorFacts(
        error_type=etype if isinstance(etype, str) else None,
        error_code=str(code) if code is not None and code != "" else None,
        message=message if isinstance(message, str) else str(message),
    )


class OpenAIResponsesAdapter(HTTPAdapter):
    """The OpenAI Responses API (and Azure OpenAI's, with ``api-key`` auth and ``api-version``)."""

    protocol = "openai-responses"
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
        s = self.settings
        self._azure = s.family.vendor == "azure"
        base = s.base_url
        if self._azure:
            # Azure's Responses endpoint is resource-scoped, not deployment-scoped: the deployment goes in
            # the body's ``model``.
            cut = base.find("/openai/deployments/")
            if cut >= 0:
                base = base[:cut] + "/openai"
            self._url = f"{base}/responses"
            if not base.endswith("/v1"):
                version = AZURE_RESPONSES_API_VERSION if s.api_version == AZURE_DEFAULT_API_VERSION else s.api_version
                self._url += f"?api-version={quote(version)}"
        else:
            self._url = f"{base}/responses"

    # --- hooks ------------------------------------------------------------------------------

    def url(self, model: str, stream: bool) -> str:
        """``{base_url}/responses`` (Azure: ``{resource}/openai/responses?api-version=...``)."""
        return self._url

    def embedding_wire(self) -> EmbeddingWire | None:
        """``{base_url}/embeddings``, as the Chat Completions adapter's (None for Azure, whose deployments differ)."""
        s = self.settings
        if s.family.vendor == "azure":
            return None
        limits = OPENAI_LIMITS if s.family.vendor is None and s.family.name == "openai" else COMPATIBLE_LIMITS
        return OpenAIEmbeddings(s.base_url, limits=limits)

    def convert_tools(self, tools: Sequence[ToolSpec]) -> ToolsPayload:
        """Flat Responses function tools (prompt-guided instructions when native tools are off)."""
        if not self._caps.native_tools:
            return prompt_guided_tools(tools)
        return OpenAITools(tools=tuple(tool_spec(t) for t in tools))

    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """The Responses request body (``store: false``: the conversation is sent whole every time).

        A pass-through Responses request keeps the client's own body (see :meth:`_pass_through_body`).
        """
        native = request.native
        if native is not None and self.passes_through(request):
            return self._pass_through_body(native, model, temperature, stream)
        system, items = _input_items(request.messages)
        if system and self.settings.merge_system_into_user:
            _merge_system(items, "\n\n".join(system))
            system = []
        body: dict[str, Any] = {"model": self.settings.deployment or model if self._azure else model}
        if system:
            body["instructions"] = "\n\n".join(system)
        body["input"] = items
        if request.tools and self._caps.native_tools:
            body["tools"] = [tool_spec(t) for t in request.tools]
            if request.tool_choice:
                choice = request.tool_choice
                body["tool_choice"] = choice if choice in _TOOL_CHOICES else {"type": "function", "name": choice}
        limit = self.max_tokens(request)
        if limit is not None:
            body["max_output_tokens"] = limit
        t = self.temperature(temperature)
        if t is not None:
            body["temperature"] = t
        if request.response_format is not None:
            structured.openai_responses(body, request.response_format)
        body["store"] = False
        if stream:
            body["stream"] = True
        return self.with_merged_extras(body)

    def _pass_through_body(
        self, native: NativeRequest, model: str, temperature: float | None, stream: bool
    ) -> dict[str, Any]:
        """A pass-through request: the client's own body, with this upstream's model and ``store: false``.

        The body keeps the items, tools and fields Turnout does not model; the stream flag follows ``stream``, and
        the temperature (the call's, else the profile's) is added where the body has none.
        """
        out = dict(native.body)
        out["model"] = self.settings.deployment or model if self._azure else model
        out["store"] = False
        if stream:
            out["stream"] = True
        else:
            out.pop("stream", None)
        t = self.temperature(temperature)
        if t is not None and "temperature" not in out:
            out["temperature"] = t
        return self.with_merged_extras(out)

    def parse_response(self, data: Any, model: str) -> ChatResponse:
        """A ``response`` object → the answer; refusals and content-filtered answers raise ``RefusalError``."""
        served = data.get("model") or model
        status = data.get("status")
        if status == "failed" or data.get("error"):
            raise self.in_band_error(_error_facts(data.get("error")), served)
        text: list[str] = []
        reasoning: list[str] = []
        refusal: list[str] = []
        calls: list[ToolCall] = []
        for item in data.get("output") or ():
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or ():
                    ptype = part.get("type")
                    if ptype == "output_text":
                        text.append(_str(part.get("text", "")))
                    elif ptype == "refusal":
                        refusal.append(_str(part.get("refusal", "")))
            elif kind == "function_call":
                args = _arguments(_str(item.get("arguments") or ""))
                calls.append(ToolCall(id=_str(item["call_id"]), name=_str(item["name"]), arguments=args))
            elif kind == "reasoning":
                reasoning.extend(_reasoning_texts(item))
        incomplete = _incomplete_reason(data)
        if refusal or incomplete == "content_filter":
            raise refusal_error(self, "".join(refusal), served)
        usage = data.get("usage")
        finish = "length" if status == "incomplete" else "tool_calls" if calls else "stop"
        return ChatResponse(
            text="".join(text),
            tool_calls=tuple(calls),
            usage=normalise_usage(usage) if isinstance(usage, Mapping) else None,
            reasoning="\n\n".join(reasoning) or None,
            finish_reason=finish,
            model=served,
        )

    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """``{"error": {"message", "type", "param", "code"}}`` (Azure: ``code`` may be ``"429"``)."""
        data = orjson.loads(body)
        err = data.get("error")
        if isinstance(err, str):
            facts = ErrorFacts(message=err)
        else:
            facts = _error_facts(err, data)
            if not facts.message and isinstance(data.get("detail"), str):
                facts = ErrorFacts(error_type=facts.error_type, error_code=facts.error_code, message=data["detail"])
        return ErrorFacts(
            status=status,
            error_type=facts.error_type,
            error_code=facts.error_code,
            message=facts.message,
            headers=headers,
        )

    def decoder(self, model: str) -> StreamDecoder:
        """A Responses event-stream decoder."""
        return ResponsesDecoder(self, model)


def refusal_error(adapter: HTTPAdapter, text: str, model: str | None) -> RefusalError:
    """The error for a refusal; the refusal text goes into the message, never into the answer."""
    message = f"the model refused to answer: {text}" if text else "the model refused to answer"
    return RefusalError(message, provider=adapter.profile, model=model)


def _input_items(messages: Sequence[Message]) -> tuple[list[str], list[dict[str, Any]]]:
    """The conversation as the system texts (for ``instructions``) and the ``input`` items of the rest."""
    system: list[str] = []
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            if m.text:
                system.append(m.text)
        elif m.role == "user":
            content = _user_content(m)
            if content:
                items.append({"type": "message", "role": "user", "content": content})
        elif m.role == "assistant":
            if m.text:
                items.append(
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": m.text}]}
                )
            items.extend(
                {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments or "{}"}
                for c in m.tool_calls
            )
        else:
            items.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.text})
    return system, items


def _user_content(m: Message) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for part in m.parts:
        if isinstance(part, TextPart):
            if part.text:
                content.append({"type": "input_text", "text": part.text})
        else:
            content.append({"type": "input_image", "image_url": part.url, "detail": part.detail or "auto"})
    return content


def _merge_system(items: list[dict[str, Any]], system: str) -> None:
    """``merge_system_into_user``: the system text leads the first user message."""
    part = {"type": "input_text", "text": system}
    for item in items:
        if item.get("role") == "user":
            item["content"].insert(0, part)
            return
    items.insert(0, {"type": "message", "role": "user", "content": [part]})


def _reasoning_texts(item: Mapping[str, Any]) -> list[str]:
    """A reasoning item's summary texts, then its raw reasoning texts (open-weight models send those)."""
    texts = [_str(s.get("text", "")) for s in item.get("summary") or ()]
    texts += [_str(c.get("text", "")) for c in item.get("content") or () if c.get("type") == "reasoning_text"]
    return [t for t in texts if t]


def _incomplete_reason(response: Mapping[str, Any]) -> str | None:
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, Mapping) else None
    return reason if isinstance(reason, str) else None


def _provider_tool_events(item: Mapping[str, Any]) -> list[StreamEvent]:
    """A finished provider-executed tool item: what it was asked (call) and what it produced (result)."""
    kind = _str(item["type"])
    name = kind.removesuffix("_call")
    if kind == "mcp_call":
        name = _str(item.get("name") or name)
    asked = next((item[k] for k in ("action", "queries", "code", "arguments", "prompt") if k in item), None)
    # (an image generation's ``result`` is a base64 image: its status is reported instead)
    produced = next((item[k] for k in ("results", "outputs", "output") if k in item), item.get("status"))
    return [
        ProviderToolEvent(name=name, phase="call", payload=_payload(asked)),
        ProviderToolEvent(name=name, phase="result", payload=_payload(produced)),
    ]


def _payload(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


class _Call:
    """A function call being streamed."""

    __slots__ = ("args", "call_id", "final_args", "name")

    def __init__(self, item: Mapping[str, Any]) -> None:
        self.call_id = item.get("call_id") or ""
        self.name = item.get("name") or ""
        self.args: list[str] = [_str(item.get("arguments") or "")]
        self.final_args: str | None = None

    def tool_call(self, item: Mapping[str, Any] | None = None) -> ToolCall:
        """The finished call; the ``done`` item's own fields are authoritative when present."""
        item = item or {}
        args = item.get("arguments") or self.final_args
        if args is None:
            args = "".join(self.args)
        return ToolCall(
            id=_str(item.get("call_id") or self.call_id),
            name=_str(item.get("name") or self.name),
            arguments=_arguments(_str(args)),
        )


class ResponsesDecoder(SSEEventDecoder):
    """Decodes a Responses event stream; complete at ``response.completed`` / ``response.incomplete``.

    Events are dispatched on the payload's ``type`` (the ``event:`` line is optional).
    """

    def __init__(self, adapter: OpenAIResponsesAdapter, model: str) -> None:
        self._adapter = adapter
        super().__init__(adapter.max_line)
        self.model = model
        self._calls: dict[Any, _Call] = {}
        self._emitted = 0
        self._refusal: list[str] = []
        self._reasoning_key: tuple[str, Any, Any] | None = None
        self.done = False

    def truncated(self) -> TurnoutError:
        """End of body before a terminal event; a refusal cut before its ``.done`` is still a refusal."""
        if self._refusal:
            return refusal_error(self._adapter, "".join(self._refusal), self.model)
        return StreamTruncated(COMPLETION_SIGNAL, provider=self._adapter.profile, model=self.model)

    def raise_stray_error(self) -> None:
        """A raw JSON error body appended by a proxy (``{"error": {...}}``) is that error."""
        for line in self._sse.stray:
            if not line.startswith(b"{"):
                continue
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(data, dict) and isinstance(data.get("error"), Mapping):
                raise self._adapter.in_band_error(_error_facts(data["error"]), self.model)

    def _protocol_error(self, what: str) -> ProtocolError:
        return ProtocolError(f"malformed stream event: {what}", provider=self._adapter.profile, model=self.model)

    def dispatch(self, name: str, data: bytes, out: list[StreamEvent]) -> None:
        """Decode one Responses event (``response.*`` and ``error``)."""
        if self.done:  # nothing after the terminal event counts
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
        if kind == "response.output_text.delta":
            text = _str(obj["delta"])
            if text:
                out.append(TextDelta(text=text))
        elif kind == "response.function_call_arguments.delta":
            call = self._call(obj)
            if call is not None:
                call.args.append(_str(obj["delta"]))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._reasoning(kind, obj, out)
        elif kind == "response.function_call_arguments.done":
            call = self._call(obj)
            if call is not None and isinstance(obj.get("arguments"), str):
                call.final_args = obj["arguments"]
        elif kind == "response.output_item.added":
            item = obj["item"]
            if item.get("type") == "function_call":
                key = item.get("id") or obj.get("output_index")
                self._calls[key] = self._calls[obj.get("output_index")] = _Call(item)
        elif kind == "response.output_item.done":
            self._item_done(obj, out)
        elif kind == "response.refusal.delta":
            self._refusal.append(_str(obj["delta"]))
        elif kind == "response.refusal.done":
            refusal = obj.get("refusal")
            raise refusal_error(
                self._adapter, refusal if isinstance(refusal, str) else "".join(self._refusal), self.model
            )
        elif kind in ("response.created", "response.in_progress", "response.queued"):
            self._take_model(obj.get("response"))
        elif kind in ("response.completed", "response.incomplete"):
            self._terminal(kind, obj["response"], out)
        elif kind == "response.failed":
            response = obj.get("response")
            err = response.get("error") if isinstance(response, Mapping) else None
            facts = _error_facts(err)
            if not facts.message:
                facts = ErrorFacts(error_code=facts.error_code, message="response failed")
            raise self._adapter.in_band_error(facts, self.model)
        elif kind == "error":
            raise self._adapter.in_band_error(_error_facts(obj.get("error"), obj), self.model)
        # every other event type (content_part.*, output_text.done, annotations, ...) is ignored

    def _take_model(self, response: Any) -> None:
        if isinstance(response, Mapping) and isinstance(response.get("model"), str) and response["model"]:
            self.model = response["model"]

    def _call(self, obj: Mapping[str, Any]) -> _Call | None:
        call = self._calls.get(obj.get("item_id"))
        return call if call is not None else self._calls.get(obj.get("output_index"))

    def _reasoning(self, kind: str, obj: Mapping[str, Any], out: list[StreamEvent]) -> None:
        text = _str(obj["delta"])
        if not text:
            return
        # Separate summary parts and reasoning items the way the non-stream answer joins them.
        key = (kind, obj.get("item_id"), obj.get("summary_index", obj.get("content_index")))
        if self._reasoning_key is not None and key != self._reasoning_key:
            out.append(ReasoningDelta(text="\n\n"))
        self._reasoning_key = key
        out.append(ReasoningDelta(text=text))

    def _item_done(self, obj: Mapping[str, Any], out: list[StreamEvent]) -> None:
        item = obj["item"]
        kind = item.get("type")
        if kind == "function_call":
            by_id = self._calls.pop(item.get("id"), None)
            by_index = self._calls.pop(obj.get("output_index"), None)
            call = by_id or by_index
            out.append(ToolCallEvent(call=(call or _Call(item)).tool_call(item)))
            self._emitted += 1
        elif kind in _PROVIDER_TOOL_ITEMS:
            out.extend(_provider_tool_events(item))
        elif kind == "message":
            refusal = [p.get("refusal") for p in item.get("content") or () if p.get("type") == "refusal"]
            if refusal:
                raise refusal_error(self._adapter, "".join(r for r in refusal if isinstance(r, str)), self.model)

    def _terminal(self, kind: str, response: Mapping[str, Any], out: list[StreamEvent]) -> None:
        self._take_model(response)
        reason = _incomplete_reason(response)
        if self._refusal or reason == "content_filter":
            raise refusal_error(self._adapter, "".join(self._refusal), self.model)
        if kind == "response.completed":
            # Calls still open at completion are finished (the response says so); an incomplete response's
            # open calls were cut and are dropped.
            for call in dict.fromkeys(self._calls.values()):
                out.append(ToolCallEvent(call=call.tool_call()))
                self._emitted += 1
            finish = "tool_calls" if self._emitted else "stop"
        else:
            finish = "length"
        self._calls.clear()
        self.done = True
        usage = response.get("usage")
        if isinstance(usage, Mapping):
            out.append(UsageEvent(usage=normalise_usage(usage)))
        out.append(Final(finish_reason=finish, model=self.model))
