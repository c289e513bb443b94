"""OpenAI Chat Completions, for OpenAI, every OpenAI-compatible vendor and Azure OpenAI.

Request: ``POST {base_url}/chat/completions`` (Azure: the deployment URL plus ``?api-version=``), with
``Authorization: Bearer`` (Azure: ``api-key``). Stream: SSE ``data:`` chunks ending with ``data: [DONE]``.
A stream is complete on ``[DONE]``, or on a chunk with a non-null ``finish_reason`` followed by a clean end
of body; anything else is a :class:`~turnout.core.errors.StreamTruncated`. Vendor differences (usage shapes,
Mistral's content parts, error bodies) live in :mod:`turnout.providers.openai_compat`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from turnout.core.classify import ErrorFacts
from turnout.core.errors import ProtocolError, ProviderError, RefusalError, StreamTruncated, TurnoutError
from turnout.core.tools import openai_tools
from turnout.core.types import (
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
    UsageEvent,
)
from turnout.providers import structured
from turnout.providers.base import MALFORMED, AdapterSettings, HTTPAdapter, StreamDecoder
from turnout.providers.embedding import COMPATIBLE_LIMITS, OPENAI_LIMITS, EmbeddingWire, OpenAIEmbeddings
from turnout.providers.framing import SSEParser
from turnout.providers.http import HttpClient
from turnout.providers.openai_compat import (
    chunk_usage,
    content_parts,
    error_facts,
    facts_from_object,
    unified_finish,
    usage_from,
)

#: What a stream is missing when it ends too early.
MISSING_SIGNAL = "[DONE] or finish_reason"
_DONE = b"[DONE]"
_TOOL_CHOICES = frozenset(("auto", "none", "required"))
#: Perplexity's closing summary chunk, whose delta repeats the answer.
_SUMMARY = "chat.completion.done"
#: Vendors whose API rejects ``stream_options`` (Mistral answers 422 "Extra inputs are not permitted";
#: it reports usage on its last chunk anyway).
_NO_STREAM_OPTIONS = frozenset(("mistral",))


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _refusal(text: str, *, provider: str, model: str | None) -> RefusalError:
    message = f"the model refused: {text}" if text else "the model refused to answer"
    return RefusalError(message[:2000], provider=provider, model=model)


def _filtered(*, provider: str, model: str | None) -> RefusalError:
    return RefusalError(
        "the answer was blocked by the provider's content filter (finish_reason content_filter)",
        provider=provider,
        model=model,
    )


class OpenAIChatAdapter(HTTPAdapter):
    """The Chat Completions protocol for ``openai``, OpenAI-compatible vendors and ``azure``.

    The vendor (``settings.family.vendor``) selects the few request differences: Azure's URL, key header
    and deployment model; ``max_completion_tokens`` for official OpenAI and ``max_tokens`` elsewhere;
    no ``stream_options`` for Mistral.
    """

    protocol = "openai-chat"

    def __init__(self, settings: AdapterSettings, http: HttpClient, api_key: str | None = None) -> None:
        super().__init__(settings, http, api_key)
        s = self.settings
        vendor = s.family.vendor
        self._azure = vendor == "azure"
        official = vendor is None and s.family.name == "openai"
        self._max_key = "max_completion_tokens" if official else "max_tokens"
        #: The limit's other name, which a caller's own body may use (it is renamed to ``_max_key``).
        self._other_max_key = "max_tokens" if official else "max_completion_tokens"
        self._stream_options = vendor not in _NO_STREAM_OPTIONS
        self._url = self._endpoint()
        self._extras = bool(s.provider_extra) or s.chat_template_kwargs is not None

    def _endpoint(self) -> str:
        base, _, query = self.settings.base_url.partition("?")
        base = base.rstrip("/")
        if not base.endswith("/chat/completions"):
            base += "/chat/completions"
        if self._azure and "api-version=" not in query:
            version = f"api-version={self.settings.api_version}"
            query = f"{query}&{version}" if query else version
        return f"{base}?{query}" if query else base

    # --- request ----------------------------------------------------------------------------

    def url(self, model: str, stream: bool) -> str:
        """``{base_url}/chat/completions`` (Azure: with ``?api-version=``)."""
        return self._url

    def embedding_wire(self) -> EmbeddingWire:
        """``{base_url}/embeddings``: OpenAI and Azure take every parameter; other vendors no token arrays or user."""
        s = self.settings
        vendor = s.family.vendor
        azure = vendor == "azure"
        limits = OPENAI_LIMITS if azure or (vendor is None and s.family.name == "openai") else COMPATIBLE_LIMITS
        return OpenAIEmbeddings(s.base_url, api_version=s.api_version if azure else None, limits=limits)

    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """The Chat Completions body (reasoning from earlier turns is not replayed).

        A pass-through Chat Completions request keeps the client's own body (``file`` parts, ``custom`` tools,
        ``n``, ``role: "function"``, every field Turnout does not model), with this upstream's model and the
        stream flag.
        """
        native = request.native
        if native is not None and self.passes_through(request):
            return self._native_body(native.body, model, temperature, stream)
        messages = self._messages(request.messages)
        s = self.settings
        body: dict[str, Any]
        if not self._azure:
            body = {"model": model, "messages": messages}
        elif s.deployment:
            body = {"model": s.deployment, "messages": messages}
        else:
            body = {"messages": messages}
        if request.tools:
            body["tools"] = list(openai_tools(request.tools).tools)
            if request.tool_choice:
                choice = request.tool_choice
                body["tool_choice"] = (
                    choice if choice in _TOOL_CHOICES else {"type": "function", "function": {"name": choice}}
                )
        temp = temperature if temperature is not None else s.temperature
        if temp is not None:
            body["temperature"] = temp
        max_tokens = request.max_tokens or s.max_tokens
        if max_tokens:
            body[self._max_key] = max_tokens
        if request.stop:
            body["stop"] = list(request.stop)
        if request.response_format is not None:
            structured.openai_chat(body, request.response_format)
        if stream:
            body["stream"] = True
            if self._stream_options:
                body["stream_options"] = {"include_usage": True}
        return self.with_merged_extras(body) if self._extras else body

    def _native_body(
        self, native: Mapping[str, Any], model: str, temperature: float | None, stream: bool
    ) -> dict[str, Any]:
        body = dict(native)
        other = self._other_max_key
        if other in body and self._max_key not in body:  # the limit under the name this upstream reads
            body[self._max_key] = body.pop(other)
        if not self._azure:
            body["model"] = model
        elif self.settings.deployment:
            body["model"] = self.settings.deployment
        else:
            body.pop("model", None)
        temp = temperature if temperature is not None else self.settings.temperature
        if temp is not None and "temperature" not in body:
            body["temperature"] = temp
        if stream:
            body["stream"] = True
            if self._stream_options:
                body["stream_options"] = {**dict(body.get("stream_options") or {}), "include_usage": True}
            else:
                body.pop("stream_options", None)
        else:
            body.pop("stream", None)
            body.pop("stream_options", None)
        return self.with_merged_extras(body) if self._extras else body

    def _messages(self, messages: tuple[Message, ...]) -> list[dict[str, Any]]:
        merge = self.settings.merge_system_into_user
        system: list[str] = []
        out: list[dict[str, Any]] = []
        for m in messages:
            role = m.role
            if role == "system":
                if merge:
                    system.append(m.text)
                else:
                    out.append({"role": "system", "content": m.text})
            elif role == "user":
                content = m.content
                out.append({"role": "user", "content": content if type(content) is str else _user_content(m)})
            elif role == "assistant":
                msg: dict[str, Any] = {"role": "assistant", "content": m.text or None}
                if m.tool_calls:
                    msg["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments or "{}"},
                        }
                        for c in m.tool_calls
                    ]
                elif msg["content"] is None:
                    msg["content"] = ""
                out.append(msg)
            else:
                out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text})
        if merge and (text := "\n\n".join(t for t in system if t)):
            _prepend_system(out, text)
        return out

    # --- responses --------------------------------------------------------------------------

    def parse_response(self, data: Any, model: str) -> ChatResponse:
        """A ``chat.completion`` object → the answer; raises ``RefusalError`` for refusals and filters.

        Any shape: several choices (the one of index 0 answers), content parts, tool calls, reasoning, refusals.
        """
        if type(data) is not dict:
            raise TypeError("response is not a JSON object")
        choices = data.get("choices")
        if not choices:
            if data.get("error"):
                raise self.in_band_error(facts_from_object(data, status=None, headers={}), model)
            choices = data["choices"]  # missing: KeyError; empty: IndexError below (a malformed response)
        first = choices[0]
        choice = first if first.get("index", 0) == 0 else next((c for c in choices if c.get("index") == 0), first)
        message = choice.get("message") or {}
        refusal = message.get("refusal")
        if refusal and isinstance(refusal, str):
            raise _refusal(refusal, provider=self.settings.profile, model=model)
        raw_finish = choice.get("finish_reason")
        if raw_finish == "content_filter":
            raise _filtered(provider=self.settings.profile, model=model)
        if raw_finish == "error":
            raise self.in_band_error(ErrorFacts(message="the provider finished the answer with an error"), model)
        field = message.get("reasoning_content") or message.get("reasoning")
        reasoning = field if isinstance(field, str) and field else None
        content = message.get("content")
        if type(content) is str:
            text = content
        elif isinstance(content, list):
            texts: list[str] = []
            thoughts = [reasoning] if reasoning else []
            for is_reasoning, piece in content_parts(content):
                (thoughts if is_reasoning else texts).append(piece)
            text, reasoning = "".join(texts), "".join(thoughts) or None
        else:
            text = ""
        raw_calls = message.get("tool_calls")
        calls = tuple(_tool_call(c) for c in raw_calls) if raw_calls else ()
        usage = data.get("usage")
        reported = data.get("model")
        request_id = data.get("id")
        return ChatResponse(
            text=text,
            tool_calls=calls,
            usage=usage_from(usage) if isinstance(usage, dict) else None,
            reasoning=reasoning,
            finish_reason=unified_finish(raw_finish, bool(calls)),
            model=reported if isinstance(reported, str) and reported else model,
            request_id=request_id if isinstance(request_id, str) and request_id else None,
        )

    #: OpenAI, OpenRouter, Azure, Mistral and DeepSeek error bodies, or an excerpt of an HTML page: the vendors'
    #: shared reader (:func:`turnout.providers.openai_compat.error_facts`).
    error_facts = staticmethod(error_facts)

    def decoder(self, model: str) -> StreamDecoder:
        """A fresh chunk-stream decoder."""
        return ChatStreamDecoder(self, model)


def _user_content(m: Message) -> str | list[dict[str, Any]]:
    if isinstance(m.content, str):
        return m.content
    if not any(isinstance(p, ImagePart) for p in m.content):
        return m.text
    parts: list[dict[str, Any]] = []
    for p in m.content:
        if isinstance(p, ImagePart):
            image: dict[str, Any] = {"url": p.url}
            if p.detail:
                image["detail"] = p.detail
            parts.append({"type": "image_url", "image_url": image})
        elif p.text:
            parts.append({"type": "text", "text": p.text})
    return parts


def _prepend_system(out: list[dict[str, Any]], text: str) -> None:
    """``merge_system_into_user``: the system text opens the first user message (or becomes one)."""
    for msg in out:
        if msg["role"] != "user":
            continue
        content = msg["content"]
        if isinstance(content, list):
            msg["content"] = [{"type": "text", "text": text}, *content]
        else:
            msg["content"] = f"{text}\n\n{content}" if content else text
        return
    out.insert(0, {"role": "user", "content": text})


def _tool_call(raw: Mapping[str, Any]) -> ToolCall:
    fn = raw.get("function") or {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = orjson.dumps(args).decode() if args is not None else ""
    call_id = raw.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else _new_call_id(),
        name=str(fn["name"]),
        arguments=args or "{}",
    )


class _PendingCall:
    """A streamed tool call being assembled from its fragments."""

    __slots__ = ("args", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args: list[str] = []


class ChatStreamDecoder(StreamDecoder):
    """Decodes a Chat Completions chunk stream (choice 0) and guards its completion.

    Text, reasoning (``reasoning_content``/``reasoning``, Mistral thinking parts) and tool-call fragments
    are decoded as they come; tool calls are emitted when choice 0 finishes; usage (the last one reported
    wins) and ``Final`` are emitted on completion.
    """

    def __init__(self, adapter: OpenAIChatAdapter, model: str) -> None:
        self._adapter = adapter
        self._provider = adapter.settings.profile
        self._model = model
        self._reported: str | None = None
        self._sse = SSEParser(adapter.max_line)
        self._calls: dict[int, _PendingCall] = {}
        self._order: list[_PendingCall] = []
        self._any_calls = False
        self._refusal: list[str] = []
        self._usage: Mapping[str, Any] | None = None
        self._finish: str | None = None
        self._chunks = 0

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Consume body bytes; an in-band error, refusal or malformed chunk is raised after the events before it.

        Each SSE event is parsed with orjson and decoded by :meth:`_event`; what one network read holds comes
        back as one batch.
        """
        out: list[StreamEvent] = []
        if self.done:
            return out
        try:
            for name, data in self._sse.feed(chunk):
                if self._event(name, data, out):
                    break
        except TurnoutError as exc:
            return self.defer(exc, out)
        return out

    def finish(self) -> list[StreamEvent]:
        """End of body: complete after ``[DONE]`` or a finish chunk, else ``StreamTruncated``."""
        self.raise_deferred()
        out: list[StreamEvent] = []
        if self.done:
            return out
        for name, data in self._sse.finish():
            if self._event(name, data, out):
                return out
        stray = self._sse.stray
        if stray and stray[-1].strip() == b"data: " + _DONE:
            # The body ended right after "data: [DONE]" without its line break.
            self._event("", _DONE, out)
            return out
        if self._finish is not None:
            self._complete_into(out)
            return out
        body = self._stray_body()
        if body is not None:
            return self._whole_body(body)
        raise StreamTruncated(MISSING_SIGNAL, provider=self._provider, model=self._model)

    # --- events -----------------------------------------------------------------------------

    def _event(self, name: str, data: bytes, out: list[StreamEvent]) -> bool:
        """Decode one SSE event into ``out``; True once the stream is complete.

        Parsed first: what is not JSON is then a keep-alive, the ``[DONE]`` sentinel, or malformed. A chunk is
        read in this one method (its rarer parts in their own): it runs once per streamed token.
        """
        if name == "ping":
            return False
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return self._not_json(data, out, exc)
        if type(obj) is not dict:
            raise ProtocolError("malformed stream event: not a JSON object", provider=self._provider, model=self._model)
        if name == "error" and "error" not in obj:
            obj = {"error": obj}
        self._chunks += 1
        try:
            if obj.get("error"):
                raise self._error(obj)
            if self._reported is None and isinstance(reported := obj.get("model"), str) and reported:
                self._reported = reported  # the first model a chunk names
            if ("usage" in obj or "x_groq" in obj) and (usage := chunk_usage(obj)) is not None:
                self._usage = usage  # the last one reported wins
            choices = obj.get("choices")
            if not choices:
                return False
            summary = obj.get("object") == _SUMMARY
            for choice in choices:
                if choice.get("index") not in (0, None):
                    continue
                delta = choice.get("delta")
                if delta and not summary:
                    content = delta.get("content")
                    if len(delta) == 1 and type(content) is str:  # the common chunk: {"content": "..."} alone
                        if content:
                            out.append(TextDelta(content))
                    else:
                        self._delta(delta, out)
                reason = choice.get("finish_reason")
                if reason:
                    self._finish_choice(reason, out)
        except MALFORMED as exc:
            raise ProtocolError(
                f"malformed stream event: {type(exc).__name__}", provider=self._provider, model=self._model
            ) from exc
        return False

    def _not_json(self, data: bytes, out: list[StreamEvent], exc: orjson.JSONDecodeError) -> bool:
        """An event that is not JSON: a blank keep-alive, the ``[DONE]`` sentinel (True: complete), or malformed."""
        stripped = data.strip()
        if not stripped:
            return False
        if stripped != _DONE:
            raise ProtocolError(
                "malformed stream event: invalid JSON", provider=self._provider, model=self._model
            ) from exc
        if self._refusal:
            raise _refusal("".join(self._refusal), provider=self._provider, model=self._model)
        self._complete_into(out)
        return True

    def _delta(self, delta: dict[str, Any], out: list[StreamEvent]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(ReasoningDelta(text=reasoning))
        content = delta.get("content")
        if content:
            if isinstance(content, str):
                out.append(TextDelta(text=content))
            elif isinstance(content, list):
                for is_reasoning, piece in content_parts(content):
                    out.append(ReasoningDelta(text=piece) if is_reasoning else TextDelta(text=piece))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
        calls = delta.get("tool_calls")
        if calls:
            self._tool_fragments(calls)

    def _tool_fragments(self, fragments: list[Any]) -> None:
        for position, frag in enumerate(fragments):
            index = frag.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                index = position  # Mistral sends whole calls without an index
            call_id = frag.get("id")
            pending = self._calls.get(index)
            if pending is None or (call_id and pending.id and call_id != pending.id):
                # A new index, or a different call reusing one (vendors sending whole calls at index 0).
                pending = self._calls[index] = _PendingCall()
                self._order.append(pending)
                self._any_calls = True
            if call_id and not pending.id:
                pending.id = str(call_id)
            fn = frag.get("function")
            if not fn:
                continue
            name = fn.get("name")
            if name and not pending.name:  # a repeated "type" with an empty name must not clobber it
                pending.name = str(name)
            args = fn.get("arguments")
            if args:
                pending.args.append(args if isinstance(args, str) else orjson.dumps(args).decode())

    def _finish_choice(self, reason: str, out: list[StreamEvent]) -> None:
        if reason == "content_filter":
            raise _filtered(provider=self._provider, model=self._model)
        if reason == "error":
            raise self._adapter.in_band_error(
                ErrorFacts(message="the provider ended the stream with finish_reason 'error'"), self._model
            )
        if reason == "insufficient_system_resource":  # DeepSeek: the answer was cut by load, not complete
            raise self._adapter.in_band_error(
                ErrorFacts(error_type="server_error", message="the provider ran out of resources mid-answer"),
                self._model,
            )
        if self._refusal:
            raise _refusal("".join(self._refusal), provider=self._provider, model=self._model)
        if self._finish is None:
            self._finish = str(reason)
        self._flush_calls(out)

    def _flush_calls(self, out: list[StreamEvent]) -> None:
        for pending in self._order:
            if not pending.name:
                if pending.args:
                    raise ProtocolError(
                        "malformed stream: a tool call without a name", provider=self._provider, model=self._model
                    )
                continue
            call = ToolCall(id=pending.id or _new_call_id(), name=pending.name, arguments="".join(pending.args) or "{}")
            out.append(ToolCallEvent(call=call))
        self._order.clear()
        self._calls.clear()

    def _complete_into(self, out: list[StreamEvent]) -> None:
        self._flush_calls(out)
        if self._usage is not None:
            out.append(UsageEvent(usage=usage_from(self._usage)))
        out.append(
            Final(finish_reason=unified_finish(self._finish, self._any_calls), model=self._reported or self._model)
        )
        self.done = True

    # --- errors -----------------------------------------------------------------------------

    def _error(self, obj: Mapping[str, Any]) -> ProviderError:
        return self._adapter.in_band_error(facts_from_object(obj, status=None, headers={}), self._model)

    def _stray_body(self) -> dict[str, Any] | None:
        """A raw JSON object that made up the body instead of SSE events (no ``data:`` prefix), if any."""
        stray = self._sse.stray
        if not stray or not stray[0].lstrip().startswith((b"{", b"[")):
            return None
        try:
            obj = orjson.loads(b"\n".join(stray))
        except orjson.JSONDecodeError:
            return None
        if isinstance(obj, list) and obj:
            obj = obj[0]
        return obj if isinstance(obj, dict) else None

    def _whole_body(self, body: dict[str, Any]) -> list[StreamEvent]:
        """The body was one JSON object instead of SSE events.

        A proxy's JSON error raises that error; a finished ``chat.completion`` object (a server that ignored
        ``stream: true``) gives its answer. Anything else is a truncated stream.
        """
        if body.get("error"):
            raise self._error(body)
        try:
            finished = bool(body["choices"][0]["finish_reason"]) and not self._chunks
            answer = self._adapter.parse_response(body, self._model) if finished else None
        except MALFORMED:
            answer = None
        if answer is None:
            raise StreamTruncated(MISSING_SIGNAL, provider=self._provider, model=self._model)
        out: list[StreamEvent] = []
        if answer.reasoning:
            out.append(ReasoningDelta(text=answer.reasoning))
        if answer.text:
            out.append(TextDelta(text=answer.text))
        out.extend(ToolCallEvent(call=c) for c in answer.tool_calls)
        if answer.usage is not None:
            out.append(UsageEvent(usage=answer.usage))
        out.append(Final(finish_reason=answer.finish_reason, model=answer.model))
        self.done = True
        return out
