"""Ollama's native chat API, ``POST /api/chat`` (protocols.md section 6).

A local server needs no key; with one (ollama.com cloud) it goes in ``Authorization: Bearer``. The stream
is NDJSON, one object per line; tool calls arrive whole, with arguments as a JSON object and no id. The
stream is complete only on the line carrying ``"done": true``; an ``{"error": "..."}`` line is an in-band
error. ``/api/generate`` lines (``response`` instead of ``message``) decode too.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import orjson

from turnout.core.classify import ErrorFacts
from turnout.core.errors import ErrorClass, ProtocolError, ProviderError, StreamTruncated, TurnoutError
from turnout.core.streams import collect
from turnout.core.tools import openai_tools
from turnout.core.types import (
    FINISH_LENGTH,
    FINISH_STOP,
    FINISH_TOOL_CALLS,
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    ImagePart,
    Message,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolsPayload,
    ToolSpec,
    Usage,
    UsageEvent,
    provider_count,
)
from turnout.providers import structured
from turnout.providers.base import MALFORMED, AdapterSettings, HTTPAdapter, StreamDecoder, loads
from turnout.providers.embedding import EmbeddingWire, OllamaEmbeddings
from turnout.providers.framing import NDJSONParser
from turnout.providers.http import HttpClient


def server_root(base_url: str) -> str:
    """The server root of a configured endpoint (a trailing ``/api`` or ``/v1`` is tolerated)."""
    root = base_url.rstrip("/")
    for suffix in ("/api", "/v1"):
        if root.endswith(suffix):
            return root[: -len(suffix)]
    return root


def error_facts_of(error: Any, *, status: int | None, headers: Mapping[str, str]) -> ErrorFacts:
    """:class:`ErrorFacts` from an Ollama ``error`` value.

    The value is a string, which may itself hold the llama.cpp runner's JSON error
    (``{"error": {"message", "type"}}``) when the prompt exceeds the context size.
    """
    if isinstance(error, Mapping):
        inner: Any = error
    elif isinstance(error, str) and error[:1] == "{":
        try:
            inner = orjson.loads(error)
        except orjson.JSONDecodeError:
            inner = None
        if isinstance(inner, Mapping) and isinstance(inner.get("error"), Mapping):
            inner = inner["error"]
    else:
        inner = None
    if isinstance(inner, Mapping) and inner.get("message"):
        kind = inner.get("type")
        return ErrorFacts(
            status=status, headers=headers, message=str(inner["message"]), error_type=str(kind) if kind else None
        )
    return ErrorFacts(status=status, headers=headers, message=str(error))


def _object_args(arguments: str) -> Any:
    """Tool-call arguments as the JSON object Ollama wants (text that is not an object is wrapped)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


class _Assembler:
    """Turns chat (or generate) objects into events; shared by the stream and the plain call."""

    __slots__ = ("_adapter", "_model", "calls", "done", "done_reason", "model_name", "usage")

    def __init__(self, adapter: OllamaAdapter, model: str) -> None:
        self._adapter = adapter
        self._model = model
        self.calls = 0
        self.done = False
        self.done_reason: str | None = None
        self.model_name: str | None = None
        self.usage: Usage | None = None

    def line(self, data: Any) -> list[StreamEvent]:
        """Events of one object; raises the classified error for an ``{"error": ...}`` object."""
        if not isinstance(data, Mapping):
            raise TypeError("an Ollama line is a JSON object")
        if "error" in data:
            facts = error_facts_of(data["error"], status=None, headers={})
            raise self._adapter.in_band_error(facts, self._model)
        out: list[StreamEvent] = []
        message = data.get("message")
        if message:
            thinking = message.get("thinking")
            if thinking:
                out.append(ReasoningDelta(text=str(thinking)))
            content = message.get("content")
            if content:
                out.append(TextDelta(text=str(content)))
            for call in message.get("tool_calls") or ():
                out.append(ToolCallEvent(call=self._call(call["function"])))
        else:  # /api/generate
            thinking = data.get("thinking")
            if thinking:
                out.append(ReasoningDelta(text=str(thinking)))
            response = data.get("response")
            if response:
                out.append(TextDelta(text=str(response)))
        if data.get("done") is True:
            self.done = True
            self.done_reason = data.get("done_reason")
            self.model_name = data.get("model") or None
            prompt, generated = data.get("prompt_eval_count"), data.get("eval_count")
            if prompt is not None or generated is not None:
                (input_tokens, bad_input), (output, bad_output) = provider_count(prompt), provider_count(generated)
                self.usage = Usage(input_tokens=input_tokens, output_tokens=output, clamped=bad_input or bad_output)
        return out

    def _call(self, fn: Mapping[str, Any]) -> ToolCall:
        self.calls += 1
        args = fn.get("arguments")
        if args is None:
            arguments = "{}"
        elif isinstance(args, str):
            arguments = args or "{}"
        else:
            arguments = orjson.dumps(args).decode()
        return ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", name=str(fn["name"]), arguments=arguments)

    def closing(self) -> list[StreamEvent]:
        """Usage (when reported) and ``Final``; ``load``/``unload`` finishes are an empty ``stop``."""
        out: list[StreamEvent] = []
        if self.usage is not None:
            out.append(UsageEvent(usage=self.usage))
        reason = FINISH_TOOL_CALLS if self.calls else FINISH_STOP
        if self.done_reason == "length":
            reason = FINISH_LENGTH
        out.append(Final(finish_reason=reason, model=self.model_name or self._model))
        return out


class OllamaStreamDecoder(StreamDecoder):
    """NDJSON lines; complete on the ``"done": true`` line."""

    def __init__(self, adapter: OllamaAdapter, model: str) -> None:
        self._asm = _Assembler(adapter, model)
        self._lines = NDJSONParser(adapter.max_line)
        self._error: TurnoutError | None = None
        self._model = model
        self._profile = adapter.profile

    def _line(self, raw: bytes) -> list[StreamEvent]:
        data = loads(raw, provider=self._profile, model=self._model, what="stream line")
        try:
            events = self._asm.line(data)
        except MALFORMED as exc:
            raise ProtocolError(
                f"malformed stream line: {type(exc).__name__}", provider=self._profile, model=self._model
            ) from exc
        self.done = self._asm.done
        return events

    def _lines_to_events(self, lines: list[bytes]) -> list[StreamEvent]:
        """Decode lines; an error stops decoding after the events before it (raised on the next call)."""
        out: list[StreamEvent] = []
        try:
            for raw in lines:
                if self.done:
                    break
                out.extend(self._line(raw))
        except TurnoutError as exc:
            self._error = exc
            self.done = True
        return out

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Consume body bytes; return the events of the lines they completed.

        An ``{"error": ...}`` line or a malformed line is raised after the events decoded before it were
        returned: it sets :attr:`done`, and the next :meth:`feed` or :meth:`finish` raises it.
        """
        if self._error is not None:
            raise self._error
        return self._lines_to_events(self._lines.feed(chunk))

    def finish(self) -> list[StreamEvent]:
        """End of body: ``Final`` after a ``done`` line, else ``StreamTruncated``.

        An unterminated last line that is a complete object is taken as a line; one cut mid-way is a
        truncation, not malformed JSON.
        """
        if self._error is not None:
            raise self._error
        out: list[StreamEvent] = []
        tail = self._lines.finish()
        if tail and not self.done:
            try:
                orjson.loads(tail)
            except orjson.JSONDecodeError:
                tail = b""
            if tail:
                out.extend(self._line(tail))
        if not self.done:
            raise StreamTruncated("done", provider=self._profile, model=self._model)
        out.extend(self._asm.closing())
        return out


class OllamaAdapter(HTTPAdapter):
    """Ollama's native ``/api/chat`` (local, or ollama.com with a key)."""

    protocol: ClassVar[str] = "ollama"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        native_tools=True,
        vision=True,
        streaming=True,
        streaming_tool_events=True,
        extended_thinking=True,
        structured_output=True,
    )

    def __init__(self, settings: AdapterSettings, http: HttpClient, api_key: str | None = None) -> None:
        super().__init__(settings, http, api_key)
        self._url = f"{server_root(settings.base_url)}/api/chat"

    def url(self, model: str, stream: bool) -> str:
        """``{root}/api/chat`` for both modes."""
        return self._url

    def embedding_wire(self) -> EmbeddingWire:
        """``{root}/api/embed``."""
        return OllamaEmbeddings(server_root(self.settings.base_url))

    def convert_tools(self, tools: Sequence[ToolSpec]) -> ToolsPayload:
        """OpenAI-shaped ``tools``."""
        return openai_tools(tools)

    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """``model``, ``messages``, ``tools``, ``stream`` (always explicit), ``options`` and ``think``."""
        messages: list[dict[str, Any]] = []
        names: dict[str, str] = {}
        system: list[str] = []
        merge = self.settings.merge_system_into_user
        for msg in request.messages:
            if msg.role == "system" and merge:
                if msg.text:
                    system.append(msg.text)
                continue
            messages.append(self._message(msg, names, model))
        if system:
            first_user = next((m for m in messages if m["role"] == "user"), None)
            joined = "\n\n".join(system)
            if first_user is None:
                messages.insert(0, {"role": "user", "content": joined})
            else:
                first_user["content"] = f"{joined}\n\n{first_user['content']}" if first_user["content"] else joined
        body: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
        if request.tools and request.tool_choice != "none":
            body["tools"] = list(openai_tools(request.tools).tools)
        options: dict[str, Any] = {}
        temp = self.temperature(temperature)
        if temp is not None:
            options["temperature"] = temp
        if self.settings.num_ctx is not None:
            options["num_ctx"] = self.settings.num_ctx
        num_predict = self.max_tokens(request, self.settings.num_predict)
        if num_predict is not None:
            options["num_predict"] = num_predict
        if request.stop:
            options["stop"] = list(request.stop)
        if options:
            body["options"] = options
        if self.settings.think is not None:
            body["think"] = self.settings.think
        if request.response_format is not None:
            structured.ollama(body, request.response_format)
        return self.with_merged_extras(body)

    def _message(self, msg: Message, names: dict[str, str], model: str) -> dict[str, Any]:
        out: dict[str, Any] = {"role": msg.role, "content": msg.text}
        if msg.role == "tool":
            name = msg.name or names.get(msg.tool_call_id or "")
            if name:
                out["tool_name"] = name
            return out
        if msg.role == "assistant" and msg.tool_calls:
            calls = []
            for call in msg.tool_calls:
                names[call.id] = call.name
                calls.append({"function": {"name": call.name, "arguments": _object_args(call.arguments)}})
            out["tool_calls"] = calls
        images = msg.images
        if images:
            out["images"] = [self._image(img, model) for img in images]
        return out

    def _image(self, image: ImagePart, model: str) -> str:
        if not image.is_data_url:
            raise ProviderError(
                "Ollama accepts only inline images (data: URLs with base64 data); remote image URLs are not "
                "supported: download the image and pass it as a data URL",
                error_class=ErrorClass.NON_RETRYABLE,
                provider=self.profile,
                model=model,
            )
        return image.data or ""

    def parse_response(self, data: Any, model: str) -> ChatResponse:
        """One ``{"message": ..., "done": true}`` object → the answer."""
        asm = _Assembler(self, model)
        events = asm.line(data)
        return collect([*events, *asm.closing()])

    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """``{"error": "<message>"}``."""
        return error_facts_of(orjson.loads(body)["error"], status=status, headers=headers)

    def decoder(self, model: str) -> StreamDecoder:
        """A fresh NDJSON decoder."""
        return OllamaStreamDecoder(self, model)
