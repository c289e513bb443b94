"""AWS Bedrock's Converse API (``POST /model/{modelId}/converse`` and ``/converse-stream``); InvokeModel for embeddings.

One wire for every model family Bedrock hosts (Claude, Llama, Mistral, Nova, ...). The model id goes in the
path, escaped as botocore escapes it (``anthropic.claude-3-5-sonnet-20240620-v1:0`` → ``...v1%3A0``), and the
request is signed with SigV4 over that path (:mod:`turnout.providers.aws`); a Bedrock API key (``api_key``,
else ``AWS_BEARER_TOKEN_BEDROCK``) is sent as ``Authorization: Bearer`` instead. The body is built by
:mod:`turnout.providers.converse`. An embedding model is called through InvokeModel (``/model/{modelId}/invoke``),
signed the same way, with the body its model family takes (:mod:`turnout.providers.embedding`).

A stream is ``application/vnd.amazon.eventstream``: binary frames, each CRC-checked. Event frames carry
``messageStart``, ``contentBlockStart`` / ``contentBlockDelta`` / ``contentBlockStop``, ``messageStop`` (the
stop reason) and ``metadata`` (usage). A stream is complete once ``messageStop`` arrived: ``metadata`` ends it
when it follows, else the end of the body. An exception frame (``:message-type: exception``) is the classified
error it names; a frame that does not decode is a :class:`~turnout.core.errors.ProtocolError`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any
from urllib.parse import quote

import orjson
from yarl import URL

from turnout.core.classify import ErrorFacts
from turnout.core.embeddings import Embeddings, EmbedRequest
from turnout.core.errors import ErrorClass, InvalidRequest, ProtocolError, ProviderError, RefusalError, StreamTruncated
from turnout.core.model_ids import wire_model
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
    UsageEvent,
    provider_count,
)
from turnout.providers.aws import SIGNING_NAME, AwsCredentials, Frame, FrameReader
from turnout.providers.base import MALFORMED, AdapterSettings, HTTPAdapter, StreamDecoder
from turnout.providers.converse import REASONING_KEY, Untranslatable, converse_body, from_anthropic
from turnout.providers.embedding import CohereEmbeddings, EmbeddingWire, TitanEmbeddings
from turnout.providers.http import HttpClient
from turnout.providers.sigv4 import Signer

#: The variable holding a Bedrock API key when the profile gives none.
BEARER_ENV = "AWS_BEARER_TOKEN_BEDROCK"
COMPLETION_SIGNAL = "messageStop"
#: Converse ``stopReason`` → unified finish reason (refusals and malformed output raise instead).
FINISH_REASONS: Mapping[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}
REFUSAL_STOPS = frozenset({"guardrail_intervened", "content_filtered"})
MALFORMED_STOPS = frozenset({"malformed_model_output", "malformed_tool_use"})
#: The HTTP status of each exception a ConverseStream frame can carry (botocore's ``bedrock-runtime`` model): an
#: exception inside a 200 is the same failure as the status it would have had before the stream.
EXCEPTION_STATUS: Mapping[str, int] = {
    "throttlingexception": 429,
    "validationexception": 400,
    "internalserverexception": 500,
    "serviceunavailableexception": 503,
    "modelstreamerrorexception": 424,
}
#: What a 403 says when the signing credentials have expired (then they are resolved anew, once).
_EXPIRED_TYPES = frozenset({"expiredtokenexception", "expiredtoken"})
_EXPIRED_TEXT = "security token included in the request is expired"


def normalise_usage(raw: Mapping[str, Any]) -> Usage:
    """Converse ``usage`` → :class:`Usage`: ``inputTokens`` leaves out cache reads and writes, as Anthropic's does.

    Each count is bounded by :func:`~turnout.core.types.provider_count` (a whole number written ``12.0`` is 12), and the
    usage is marked ``clamped`` when one was out of range or not a number.
    """
    read, bad_read = provider_count(raw.get("cacheReadInputTokens"))
    write, bad_write = provider_count(raw.get("cacheWriteInputTokens"))
    plain, bad_input = provider_count(raw.get("inputTokens"))
    output, bad_output = provider_count(raw.get("outputTokens"))
    return Usage(
        input_tokens=plain + read + write,
        output_tokens=output,
        cached_input_tokens=read,
        cache_write_tokens=write,
        clamped=bad_read or bad_write or bad_input or bad_output,
    )


def _embedding_wire(model: str, invoke_url: Callable[[str], URL]) -> EmbeddingWire | None:
    """The InvokeModel body a Bedrock model id (lower-cased; a foundation model or an inference profile) takes."""
    if "titan-embed-text-v2" in model:
        return TitanEmbeddings(invoke_url, v2=True)
    if "titan-embed-text-v1" in model or "titan-embed-g1-text" in model:
        return TitanEmbeddings(invoke_url, v2=False)
    if "cohere.embed-english-v3" in model or "cohere.embed-multilingual-v3" in model:
        return CohereEmbeddings(invoke_url)
    return None


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _error_type(raw: str | None) -> str | None:
    """``ThrottlingException:http://internal.amazon.com/...`` or ``com.amazon...#ThrottlingException`` → the name."""
    if not raw:
        return None
    return raw.partition(":")[0].rpartition("#")[2][:100] or None


class BedrockAdapter(HTTPAdapter):
    """AWS Bedrock Converse and ConverseStream."""

    protocol = "bedrock"
    default_capabilities = Capabilities(
        native_tools=True,
        vision=True,
        streaming=True,
        streaming_tool_events=True,
        prompt_caching=True,
        extended_thinking=True,
        structured_output=False,
        documents=True,  # an Anthropic body's documents become Converse document blocks (turnout.providers.converse)
    )

    def __init__(self, settings: AdapterSettings, http: HttpClient, api_key: str | None = None) -> None:
        token = api_key or os.environ.get(BEARER_ENV) or None
        super().__init__(settings, http, token)
        region = settings.region or "us-east-1"
        self.region = region
        self._base = settings.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        self._urls: dict[str, tuple[URL, URL, URL]] = {}
        self._wires: dict[str, EmbeddingWire | None] = {}
        #: The AWS credential chain (None: a Bedrock API key is sent instead, and nothing is signed).
        self.aws: AwsCredentials | None = None
        self._signer: Signer | None = None
        if token is None:
            self.aws = AwsCredentials(settings.profile, settings.aws_profile)
            self._signer = Signer(region, SIGNING_NAME)
            self.signs_requests = True

    def with_key(self, api_key: str | None) -> BedrockAdapter:
        """The same adapter bound to another Bedrock API key (or, with None, to the AWS chain)."""
        return type(self)(self.settings, self.http, api_key)

    # --- hooks ------------------------------------------------------------------------------

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """A Bedrock API key as ``Authorization: Bearer``; nothing for SigV4, which signs each request."""
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @classmethod
    def model_problem(cls, model: str) -> str | None:
        """The model id is a path segment: empty, dot-only, control characters or very long ids are refused."""
        if not model or model in (".", ".."):
            return "a Bedrock model id cannot be empty, '.' or '..'"
        if not model.isprintable():
            return "a Bedrock model id cannot contain control characters"
        if len(model) > 2048:
            return "a Bedrock model id is at most 2048 characters"
        return None

    def url(self, model: str, stream: bool) -> URL:
        """``{base}/model/{modelId}/converse`` (or ``/converse-stream``), the id escaped as botocore does.

        Raises:
            ProviderError: The id cannot be sent (see :meth:`model_problem`); nothing is sent.
        """
        return self._model_urls(model)[stream]

    def invoke_url(self, model: str) -> URL:
        """``{base}/model/{modelId}/invoke`` (InvokeModel, which the embedding models take), escaped as :meth:`url`.

        Raises:
            ProviderError: The id cannot be sent (see :meth:`model_problem`); nothing is sent.
        """
        return self._model_urls(model)[2]

    def _model_urls(self, model: str) -> tuple[URL, URL, URL]:
        urls = self._urls.get(model)
        if urls is None:
            problem = self.model_problem(model)
            if problem is not None:
                raise ProviderError(
                    problem,
                    error_class=ErrorClass.NON_RETRYABLE,
                    provider=self.profile,
                    model=model,
                    error_type="invalid_model",
                )
            # a canonical name goes as the region's inference profile (turnout.core.model_ids); every character but
            # the unreserved ones escaped: ':' → %3A, '/' (in ARNs) → %2F; encoded: sent with its escapes as signed
            # (from a plain string, yarl would turn ``%3A`` back into ``:``)
            wire = wire_model("bedrock", model, self.settings.region)
            path = f"{self._base}/model/{quote(wire, safe='')}"
            urls = (
                URL(path + "/converse", encoded=True),
                URL(path + "/converse-stream", encoded=True),
                URL(path + "/invoke", encoded=True),
            )
            if len(self._urls) >= 64:  # an unpinned profile sees many names; keep only a few
                self._urls.clear()
            self._urls[model] = urls
        return urls

    def embedding_wire_for(self, model: str) -> EmbeddingWire | None:
        """The InvokeModel wire of ``model``: Titan Text Embeddings (G1, V2) or Cohere Embed v3 (None: another model).

        Bedrock has no one embedding protocol: each model family has a body of its own.
        """
        wire = self._wires.get(model)
        if wire is None and model not in self._wires:
            wire = _embedding_wire(model.lower(), self.invoke_url)
            if len(self._wires) >= 64:
                self._wires.clear()
            self._wires[model] = wire
        return wire

    async def signed(self, url: str | URL, headers: Mapping[str, str], body: bytes) -> Mapping[str, str]:
        """``headers`` with the SigV4 headers of this request (credentials resolved off the event loop)."""
        assert self.aws is not None and self._signer is not None
        credentials = await self.aws.get()
        signed = self._signer.sign(credentials.access_key, credentials.secret_key, credentials.token, str(url), body)
        return {**headers, **signed}

    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """The Converse body: from the caller's Anthropic body when there is one, else from the request.

        Raises:
            InvalidRequest: Something in the request has no Converse form (the caller's, before any request).
        """
        native = request.native
        try:
            if native is not None and native.protocol == "anthropic":
                body = from_anthropic(
                    native.body, max_tokens=self.max_tokens(request), temperature=self.temperature(temperature)
                )
            else:
                body = converse_body(
                    request,
                    max_tokens=self.max_tokens(request),
                    temperature=self.temperature(temperature),
                    merge_system_into_user=self.settings.merge_system_into_user,
                    native_tools=self._caps.native_tools,
                )
        except Untranslatable as exc:
            raise InvalidRequest(str(exc)) from exc
        if self.settings.provider_extra:
            body.update(self.settings.provider_extra)
        return body

    def parse_response(self, data: Any, model: str) -> ChatResponse:
        """A ``ConverseResponse`` → the answer (a guardrail or content-filter stop raises :class:`RefusalError`)."""
        stop = data.get("stopReason")
        if stop in REFUSAL_STOPS:
            raise RefusalError(f"the model refused to answer ({stop})", provider=self.profile, model=model)
        if stop in MALFORMED_STOPS:
            raise self._malformed_output(stop, model)
        text: list[str] = []
        reasoning: list[str] = []
        held: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        for block in data["output"]["message"]["content"]:
            if "text" in block:
                text.append(_str(block["text"]))
            elif "toolUse" in block:
                use = block["toolUse"]
                calls.append(
                    ToolCall(
                        id=_str(use["toolUseId"]),
                        name=_str(use["name"]),
                        arguments=orjson.dumps(use.get("input") or {}).decode(),
                        extra={REASONING_KEY: tuple(held)} if held else None,
                    )
                )
                held = []
            elif "reasoningContent" in block:
                content = block["reasoningContent"]
                if "reasoningText" in content:
                    reasoning.append(_str(content["reasoningText"].get("text", "")))
                held.append({"reasoningContent": content})
        usage = data.get("usage")
        return ChatResponse(
            text="".join(text),
            tool_calls=tuple(calls),
            usage=normalise_usage(usage) if isinstance(usage, Mapping) else None,
            reasoning="".join(reasoning) or None,
            finish_reason=FINISH_REASONS.get(stop or "", "tool_calls" if calls else "stop"),
            model=model,
        )

    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """``x-amzn-ErrorType`` names the error (else the body's ``__type``); the body's ``message`` says it."""
        data = orjson.loads(body) if body.strip() else {}
        if not isinstance(data, dict):
            data = {}
        etype = _error_type(headers.get("x-amzn-errortype")) or _error_type(data.get("__type"))
        message = data.get("message") or data.get("Message")
        request_id = headers.get("x-amzn-requestid")
        if request_id is not None and "request-id" not in headers:
            headers = {**{k.lower(): v for k, v in headers.items()}, "request-id": request_id}
        return ErrorFacts(
            status=status,
            error_type=etype,
            message=message if isinstance(message, str) else "",
            headers=headers,
        )

    def decoder(self, model: str) -> StreamDecoder:
        """A ConverseStream event-stream decoder."""
        return BedrockDecoder(self, model)

    def _malformed_output(self, stop: str, model: str) -> ProviderError:
        return ProviderError(
            f"the model's output was malformed ({stop})",
            error_class=ErrorClass.RETRYABLE,
            provider=self.profile,
            model=model,
            error_type=stop,
        )

    def _expired(self, exc: ProviderError) -> bool:
        """The upstream refused the signature because the credentials expired (they can be resolved anew)."""
        if self.aws is None or exc.status != 403:
            return False
        return (exc.error_type or "").lower() in _EXPIRED_TYPES or _EXPIRED_TEXT in exc.message.lower()

    # --- the request cycle, with one fresh try on expired credentials ------------------------

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        """One Converse call; credentials the upstream says expired are resolved anew and the call made again."""
        try:
            return await super().chat(request, model, temperature)
        except ProviderError as exc:
            if not self._expired(exc):
                raise
            assert self.aws is not None
            self.aws.invalidate()
        return await super().chat(request, model, temperature)

    async def embed(self, request: EmbedRequest, model: str) -> Embeddings:
        """One InvokeModel embedding call; credentials the upstream says expired are resolved anew, once."""
        try:
            return await super().embed(request, model)
        except ProviderError as exc:
            if not self._expired(exc):
                raise
            assert self.aws is not None
            self.aws.invalidate()
        return await super().embed(request, model)

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """One ConverseStream call (made again once, before any event, when the credentials expired)."""
        sent = False
        first = super().stream_batches(request, model, temperature)
        try:
            async for batch in first:
                sent = True
                yield batch
            return
        except ProviderError as exc:
            if sent or not self._expired(exc):
                raise
            assert self.aws is not None
            self.aws.invalidate()
        finally:
            await first.aclose()  # a consumer that stops early releases the connection now, not at collection
        again = super().stream_batches(request, model, temperature)
        try:
            async for batch in again:
                yield batch
        finally:
            await again.aclose()


class _Block:
    """An open content block of a stream: a tool call's input fragments, or reasoning text and its signature."""

    __slots__ = ("id", "kind", "name", "parts", "redacted", "signature")

    def __init__(self, kind: str, tool_id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = tool_id
        self.name = name
        self.parts: list[str] = []
        self.signature = ""
        self.redacted = ""


class BedrockDecoder(StreamDecoder):
    """Decodes a ConverseStream body; complete once ``messageStop`` arrived (``metadata`` then ends it)."""

    def __init__(self, adapter: BedrockAdapter, model: str) -> None:
        self._adapter = adapter
        self.model = model
        self._frames = FrameReader(adapter.profile, model, adapter.settings.max_response_bytes)
        self._blocks: dict[Any, _Block] = {}
        self._held: list[dict[str, Any]] = []  # finished reasoning blocks not yet attached to a call
        self._stop: str | None = None
        self._usage: Usage | None = None
        self._calls = 0
        self.done = False

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Consume body bytes; return the events of the frames they completed (an error comes after them)."""
        out: list[StreamEvent] = []
        frames: list[Frame] = []
        broken: ProviderError | None = None
        try:
            self._frames.feed(chunk, frames)
        except ProviderError as exc:
            broken = exc  # raised after the frames before it
        try:
            for frame in frames:
                self._frame(frame, out)
                if self.done:
                    return out
        except ProviderError as exc:
            return self.defer(exc, out)
        except MALFORMED as exc:
            return self.defer(self._bad(type(exc).__name__), out)
        return out if broken is None else self.defer(broken, out)

    def finish(self) -> list[StreamEvent]:
        """End of body: ``Final`` when ``messageStop`` came; else a truncated stream."""
        self.raise_deferred()
        if self.done:
            return []
        if self._stop is None or self._frames.pending:
            raise StreamTruncated(COMPLETION_SIGNAL, provider=self._adapter.profile, model=self.model)
        return self._final()

    def _bad(self, what: str) -> ProtocolError:
        return ProtocolError(f"malformed stream event: {what}", provider=self._adapter.profile, model=self.model)

    def _final(self) -> list[StreamEvent]:
        self.done = True
        out: list[StreamEvent] = []
        if self._usage is not None:
            out.append(UsageEvent(usage=self._usage))
        finish = FINISH_REASONS.get(self._stop or "", "tool_calls" if self._calls else "stop")
        out.append(Final(finish_reason=finish, model=self.model))
        return out

    def _frame(self, frame: Frame, out: list[StreamEvent]) -> None:
        headers = frame.headers
        kind = headers.get(":message-type")
        if kind == "exception":
            raise self._adapter.in_band_error(self._exception(frame), self.model)
        if kind == "error":
            code, message = headers.get(":error-code"), headers.get(":error-message")
            facts = ErrorFacts(
                error_type=_error_type(code) if isinstance(code, str) else None,
                message=message[:2000] if isinstance(message, str) else "",
            )
            raise self._adapter.in_band_error(facts, self.model)
        if kind != "event":
            raise self._bad(f"message type {str(kind)[:40]!r}")
        if self._stop is not None and headers.get(":event-type") != "metadata":
            return  # nothing after messageStop but its metadata counts
        data = orjson.loads(frame.payload)
        if not isinstance(data, dict):
            raise self._bad("not a JSON object")
        self._event(headers.get(":event-type"), data, out)

    def _exception(self, frame: Frame) -> ErrorFacts:
        etype = frame.headers.get(":exception-type")
        try:
            data = orjson.loads(frame.payload) if frame.payload else {}
        except orjson.JSONDecodeError:
            data = {}
        message = data.get("message") if isinstance(data, dict) else None
        name = _error_type(etype) if isinstance(etype, str) else None
        return ErrorFacts(
            status=EXCEPTION_STATUS.get(name.lower()) if name else None,
            error_type=name,
            message=message if isinstance(message, str) else "",
        )

    def _event(self, kind: Any, data: dict[str, Any], out: list[StreamEvent]) -> None:
        if kind == "contentBlockDelta":
            self._delta(data, out)
        elif kind == "contentBlockStart":
            start = data["start"]
            if "toolUse" in start:
                use = start["toolUse"]
                self._blocks[data.get("contentBlockIndex")] = _Block("tool", _str(use["toolUseId"]), _str(use["name"]))
        elif kind == "contentBlockStop":
            self._stop_block(data.get("contentBlockIndex"), out)
        elif kind == "messageStop":
            stop = _str(data["stopReason"])
            if stop in REFUSAL_STOPS:
                raise RefusalError(
                    f"the model refused to answer ({stop})", provider=self._adapter.profile, model=self.model
                )
            if stop in MALFORMED_STOPS:
                raise self._adapter._malformed_output(stop, self.model)
            for index in list(self._blocks):  # a block left open (a tool call cut short) is finished here
                self._stop_block(index, out)
            self._stop = stop
        elif kind == "metadata":
            usage = data.get("usage")
            if isinstance(usage, Mapping):
                self._usage = normalise_usage(usage)
            if self._stop is not None:
                out.extend(self._final())
        # messageStart and unknown events carry nothing the answer keeps

    def _delta(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        delta = data["delta"]
        index = data.get("contentBlockIndex")
        if "text" in delta:
            text = _str(delta["text"])
            if text:
                out.append(TextDelta(text=text))
        elif "toolUse" in delta:
            block = self._blocks.get(index)
            if block is None or block.kind != "tool":
                raise self._bad("tool input for a block that is not a tool call")
            block.parts.append(_str(delta["toolUse"].get("input") or ""))
        elif "reasoningContent" in delta:
            content = delta["reasoningContent"]
            block = self._blocks.get(index)
            if block is None:
                block = self._blocks[index] = _Block("reasoning")
            if "text" in content:
                text = _str(content["text"])
                if text:
                    block.parts.append(text)
                    out.append(ReasoningDelta(text=text))
            if "signature" in content:
                block.signature += _str(content["signature"])
            if "redactedContent" in content:
                block.redacted += _str(content["redactedContent"])
        # citations and other deltas carry nothing the unified answer keeps

    def _stop_block(self, index: Any, out: list[StreamEvent]) -> None:
        block = self._blocks.pop(index, None)
        if block is None:
            return
        if block.kind == "tool":
            raw = "".join(block.parts)
            # re-serialised compactly, so the stream and the non-stream answer carry the same text
            arguments = orjson.dumps(orjson.loads(raw)).decode() if raw.strip() else "{}"
            extra = {REASONING_KEY: tuple(self._held)} if self._held else None
            self._held = []
            self._calls += 1
            out.append(ToolCallEvent(call=ToolCall(id=block.id, name=block.name, arguments=arguments, extra=extra)))
        elif block.redacted:
            self._held.append({"reasoningContent": {"redactedContent": block.redacted}})
        else:
            text: dict[str, Any] = {"text": "".join(block.parts)}
            if block.signature:
                text["signature"] = block.signature
            self._held.append({"reasoningContent": {"reasoningText": text}})


__all__ = ["BedrockAdapter", "BedrockDecoder", "normalise_usage"]
