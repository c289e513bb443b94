"""What every HTTP adapter shares: settings from the profile, the request cycle, error translation.

An adapter subclasses :class:`HTTPAdapter` and supplies its protocol: the URL, auth headers, the request
body, the response parser, the error-body parser and a :class:`StreamDecoder`. The request cycle,
timeouts, size bounds, error classification and stream completion checks live here once.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Self
from urllib.parse import quote

import orjson
from multidict import CIMultiDictProxy
from yarl import URL

from turnout.config.schema import Profile
from turnout.core.classify import ErrorFacts, provider_error
from turnout.core.embeddings import EmbeddingLimits, Embeddings, EmbedRequest
from turnout.core.errors import (
    ErrorClass,
    InvalidRequest,
    ProtocolError,
    ProviderError,
    TurnoutError,
    UnsupportedRequest,
)
from turnout.core.provider import Provider, flatten
from turnout.core.registry import Family, family_for
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, Final, StreamEvent, provider_count
from turnout.providers.embedding import EmbeddingWire, header_tokens
from turnout.providers.framing import DEFAULT_MAX_LINE, SSEParser, unterminated_data_payloads
from turnout.providers.headroom import HeadroomWatch
from turnout.providers.http import Callee, HttpClient, Timeouts

AZURE_DEFAULT_API_VERSION = "2024-10-21"

_AUTH_BY_PROTOCOL = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}


#: The bound on an embedding answer: 2,048 vectors of 3,072 numbers are about 130 MB of JSON, beyond a chat's bound.
EMBEDDING_MAX_RESPONSE_BYTES = 256 * 1024 * 1024

#: Parse failures that mean "the provider sent something malformed", never a crash.
MALFORMED = (KeyError, TypeError, ValueError, IndexError, AttributeError, orjson.JSONDecodeError)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterSettings:
    """Everything an adapter needs from its profile, resolved once at construction."""

    profile: str
    family: Family
    base_url: str
    timeouts: Timeouts = field(default_factory=Timeouts)
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    max_response_bytes: int = 32 * 1024 * 1024
    temperature: float | None = None
    max_tokens: int | None = None
    provider_extra: Mapping[str, Any] = field(default_factory=dict)
    chat_template_kwargs: Mapping[str, Any] | None = None
    merge_system_into_user: bool = False
    ssl_ca: str | None = None
    native_tools: bool | None = None
    vision: bool | None = None
    structured_output: bool | None = None
    streaming: bool | None = None
    api_version: str = AZURE_DEFAULT_API_VERSION
    deployment: str | None = None
    think: bool | None = None
    num_ctx: int | None = None
    num_predict: int | None = None
    # AWS Bedrock and Google Vertex AI
    region: str | None = None
    aws_profile: str | None = None
    project: str | None = None
    credentials_file: str | None = None

    @classmethod
    def from_profile(cls, name: str, profile: Profile) -> AdapterSettings:
        """Resolve a profile's endpoint, timeouts and options."""
        fam_name = name.partition(".")[0]
        family = family_for(fam_name, profile.kind)
        base = profile.uri or family.base_url
        if family.vendor == "azure" and not profile.uri:
            deployment = quote(profile.deployment or "", safe="")
            base = f"https://{profile.resource}.openai.azure.com/openai/deployments/{deployment}"
        if family.protocol == "vertex" and not profile.uri and profile.region not in (None, "global"):
            base = f"https://{profile.region}-aiplatform.googleapis.com"  # a regional endpoint (global: the default)
        return cls(
            profile=name,
            family=family,
            base_url=base.rstrip("/"),
            timeouts=Timeouts(
                connect=profile.connect_timeout_secs,
                first_token=profile.first_token_timeout_secs,
                idle=profile.idle_timeout_secs,
                total=profile.timeout_secs,
            ),
            extra_headers={k: v.reveal() for k, v in profile.extra_headers.items()},
            max_response_bytes=profile.max_response_bytes,
            temperature=profile.temperature,
            max_tokens=profile.max_tokens,
            provider_extra=dict(profile.provider_extra),
            chat_template_kwargs=profile.chat_template_kwargs,
            merge_system_into_user=profile.merge_system_into_user,
            ssl_ca=profile.tls_ca_cert_path,
            native_tools=profile.native_tools,
            vision=profile.vision,
            structured_output=profile.structured_output,
            streaming=profile.streaming,
            api_version=profile.api_version or AZURE_DEFAULT_API_VERSION,
            deployment=profile.deployment,
            think=profile.think,
            num_ctx=profile.num_ctx,
            num_predict=profile.num_predict,
            region=profile.region,
            aws_profile=profile.aws_profile,
            project=profile.project,
            credentials_file=profile.credentials_file,
        )


class StreamDecoder(ABC):
    """Turns one protocol's stream body into events and owns its completion signal.

    An in-band error becomes a classified :class:`~turnout.core.errors.ProviderError` and a malformed event a
    :class:`~turnout.core.errors.ProtocolError`; either is raised only after the events decoded before it were
    returned (:meth:`defer`), so what reaches the user never depends on how the bytes were split.
    :meth:`finish` runs at end of body and raises :class:`~turnout.core.errors.StreamTruncated` when the
    completion signal was never seen.
    """

    #: Set when the protocol's terminal marker was read (or an error is pending); the adapter stops reading.
    done: bool = False
    _deferred: TurnoutError | None = None

    def defer(self, exc: TurnoutError, out: list[StreamEvent]) -> list[StreamEvent]:
        """Deliver the events decoded before an error, and raise the error at :meth:`finish`.

        So what the user sees before an in-band error never depends on how the bytes were split.
        """
        if not out:
            raise exc
        self._deferred = exc
        self.done = True
        return out

    def raise_deferred(self) -> None:
        """Raise an error that :meth:`defer` held back."""
        if self._deferred is not None:
            raise self._deferred

    @abstractmethod
    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Consume body bytes; return the events they completed."""

    @abstractmethod
    def finish(self) -> list[StreamEvent]:
        """End of body: the remaining events (ending with ``Final``), or ``StreamTruncated``."""


class SSEEventDecoder(StreamDecoder):
    """A decoder for SSE protocols whose events are handled one at a time (Anthropic, OpenAI Responses).

    Subclasses implement :meth:`dispatch` (append the events one SSE event makes, set ``done`` on the
    terminal one), :meth:`raise_stray_error` (a raw JSON error body a proxy appended after the events) and
    :meth:`truncated` (the error for an end of body before the completion signal).
    """

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        self._sse = SSEParser(max_line)

    @abstractmethod
    def dispatch(self, name: str, data: bytes, out: list[StreamEvent]) -> None:
        """Decode one SSE event into ``out``."""

    def raise_stray_error(self) -> None:
        """Raise the error carried by non-SSE lines left at the end of the body, if any."""

    @abstractmethod
    def truncated(self) -> TurnoutError:
        """The error for a body that ended before the completion signal."""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Consume body bytes; return the events they completed (an error comes after them)."""
        out: list[StreamEvent] = []
        try:
            for name, data in self._sse.feed(chunk):
                self.dispatch(name, data, out)
        except TurnoutError as exc:
            return self.defer(exc, out)
        return out

    def finish(self) -> list[StreamEvent]:
        """End of body: the last events when the terminal one came; otherwise the stray error or truncation."""
        self.raise_deferred()
        out: list[StreamEvent] = []
        if self.done:
            return out
        seen = len(self._sse.stray)
        for name, data in self._sse.finish():
            self.dispatch(name, data, out)
        for payload in unterminated_data_payloads(self._sse.stray[seen:]):
            self.dispatch("", payload, out)  # a complete last line that only lacked its line break
        if out and isinstance(out[-1], Final):
            return out
        self.raise_stray_error()
        raise self.truncated()


_TAG = re.compile(rb"<[^>]*>")
_SPACE = re.compile(rb"\s+")


def body_excerpt(body: bytes, limit: int = 200) -> str:
    """A short, readable excerpt of a non-JSON error body (HTML tags and runs of space removed)."""
    text = _SPACE.sub(b" ", _TAG.sub(b" ", body[:4096])).strip()
    return text[:limit].decode("utf-8", "replace")


def loads(body: bytes, *, provider: str, model: str | None, what: str = "response") -> Any:
    """Decode JSON or raise a retryable :class:`ProtocolError` naming what was malformed."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"malformed {what}: invalid JSON", provider=provider, model=model) from exc


class HTTPAdapter(Provider):
    """Base of every wire-protocol adapter. One instance is bound to one credential.

    Subclasses set :attr:`protocol` and implement the hooks below; :meth:`with_key` makes a sibling bound to
    another key of the same profile (sharing the session), so a key pool costs nothing per call.

    Attributes:
        headroom: Reads the rate-limit headroom of every successful answer (attached by the factory, which
            binds it to this adapter's key and pool; None: headroom is not read).
    """

    protocol: ClassVar[str]
    #: Whether each request's headers depend on its URL and body (AWS SigV4): :meth:`signed` makes them.
    signs_requests: bool = False
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        native_tools=True, vision=True, streaming=True, streaming_tool_events=True, structured_output=True
    )

    def __init__(self, settings: AdapterSettings, http: HttpClient, api_key: str | None = None) -> None:
        self.settings = settings
        self.http = http
        self.api_key = api_key or None
        secrets = [api_key, *settings.extra_headers.values()]
        self._secrets = tuple(s for s in secrets if s and len(s) >= 4)
        self._headers = http.credential(
            {"Content-Type": "application/json", **settings.extra_headers, **self.auth_headers(self.api_key)}
        )
        self._ssl = http.ssl_context(settings.ssl_ca)
        self._caps = self._capabilities()
        self._callees: dict[str | None, Callee] = {}
        self.headroom: HeadroomWatch | None = None
        self._embedding = self.embedding_wire()

    def with_key(self, api_key: str | None) -> Self:
        """The same adapter bound to another credential."""
        return type(self)(self.settings, self.http, api_key)

    @property
    def profile(self) -> str:
        """The profile this adapter serves (``family.alias``)."""
        return self.settings.profile

    # --- hooks ------------------------------------------------------------------------------

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """Headers carrying the credential (empty without one), in the protocol's style.

        ``Authorization: Bearer`` for OpenAI-style protocols and Ollama, ``x-api-key`` for Anthropic,
        ``x-goog-api-key`` for Gemini (never a ``?key=`` query), ``api-key`` for Azure OpenAI.
        """
        if not api_key:
            return {}
        style = "api-key" if self.settings.family.vendor == "azure" else _AUTH_BY_PROTOCOL.get(self.protocol, "bearer")
        if style == "bearer":
            return {"Authorization": f"Bearer {api_key}"}
        return {style: api_key}

    async def signed(self, url: str | URL, headers: Mapping[str, str], body: bytes) -> Mapping[str, str]:
        """The headers of one request to ``url`` with ``body``, signed (only when :attr:`signs_requests`)."""
        return headers

    @abstractmethod
    def url(self, model: str, stream: bool) -> str | URL:
        """The endpoint for a call (a model that is part of the path is escaped, see :meth:`model_problem`).

        A ``yarl.URL`` built with ``encoded=True`` is sent with its escapes as they are (a signed path).
        """

    @classmethod
    def model_problem(cls, model: str) -> str | None:
        """Why this protocol cannot send ``model`` (None: it can).

        Protocols that carry the model in the JSON body send any name (OpenRouter's ``openai/gpt-4o``
        included); one that puts it in the URL path refuses names that would leave their path segment.
        """
        return None

    @abstractmethod
    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """The request body."""

    @abstractmethod
    def parse_response(self, data: Any, model: str) -> ChatResponse:
        """A decoded non-streaming response body → the answer (may raise ``RefusalError``)."""

    @abstractmethod
    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """What an error response says (status, type, code, message, retry hints)."""

    @abstractmethod
    def decoder(self, model: str) -> StreamDecoder:
        """A fresh decoder for one stream."""

    #: Whether :meth:`count_tokens` asks the upstream (the gateway's ``count_tokens`` estimates otherwise).
    counts_tokens: ClassVar[bool] = False

    async def count_tokens(self, request: ChatRequest, model: str) -> int:
        """The upstream's own count of the request's input tokens (only where :attr:`counts_tokens`).

        Raises:
            ProviderError: Always here (non-retryable): this family has no count; the caller estimates.
        """
        raise ProviderError(
            f"{self.protocol} profiles offer no token count",
            error_class=ErrorClass.NON_RETRYABLE,
            provider=self.settings.profile,
            model=model,
            error_type="unsupported",
        )

    async def post_count(
        self, url: str, headers: Mapping[str, str], built: Mapping[str, Any], model: str, field: str
    ) -> int:
        """POST a token-count body and read the count in the answer's ``field``.

        Raises:
            ProviderError: The upstream refused or failed (classified like a chat call's error).
            ProtocolError: The answer holds no count (or one out of bounds: the caller is handed no guess).
            InvalidRequest: The body cannot be encoded (nothing was sent).
        """
        try:
            body = orjson.dumps(built)
        except Exception as exc:
            raise self._unbuildable(exc) from exc
        resp = await self.http.post(
            url,
            headers=headers,
            body=body,
            timeouts=self.settings.timeouts,
            callee=self.callee(model),
            max_bytes=1024 * 1024,
            ssl_context=self._ssl,
        )
        if resp.status >= 400:
            raise self.error(resp.status, resp.headers, resp.body, model)
        data = loads(resp.body, provider=self.settings.profile, model=model)
        count = data.get(field) if isinstance(data, dict) else None
        counted, clamped = provider_count(count)
        if clamped or count is None:
            raise ProtocolError("malformed token count response", provider=self.settings.profile, model=model)
        return counted

    def embedding_wire(self) -> EmbeddingWire | None:
        """This family's embedding protocol, built from the adapter's settings (None: it serves no embeddings)."""
        return None

    def embedding_wire_for(self, model: str) -> EmbeddingWire | None:
        """The embedding protocol for ``model``: the family's one wire.

        A family whose models each speak their own (Bedrock's) chooses by the model.
        """
        return self._embedding

    # --- shared -----------------------------------------------------------------------------

    def _capabilities(self) -> Capabilities:
        base = self.default_capabilities
        s = self.settings
        streaming = base.streaming if s.streaming is None else s.streaming
        native = base.native_tools if s.native_tools is None else s.native_tools
        return replace(
            base,
            native_tools=native,
            vision=base.vision if s.vision is None else s.vision,
            streaming=streaming,
            streaming_tool_events=base.streaming_tool_events and streaming and native,
            structured_output=base.structured_output if s.structured_output is None else s.structured_output,
            # a caller's own body passes through only where it would reach the upstream as sent
            protocol=self.protocol if native and not s.merge_system_into_user else "",
        )

    def capabilities(self, model: str | None = None) -> Capabilities:
        """Protocol defaults with the profile's ``native_tools``/``vision``/``streaming`` overrides."""
        return self._caps

    def passes_through(self, request: ChatRequest) -> bool:
        """Whether ``request`` carries a caller's own body in this adapter's protocol, to be sent as it came."""
        native = request.native
        return native is not None and native.protocol == self._caps.protocol

    def request_headers(self, request: ChatRequest) -> Mapping[str, str]:
        """The headers of a call: the credential's, plus what a pass-through request forwards in this protocol."""
        native = request.native
        if native is None or not native.headers or native.protocol != self.protocol:
            return self._headers
        return {**self._headers, **native.headers}

    @property
    def max_line(self) -> int:
        """The bound on one stream line or event: the profile's ``max_response_bytes``, at most 8 MiB."""
        return min(self.settings.max_response_bytes, DEFAULT_MAX_LINE)

    def callee(self, model: str | None) -> Callee:
        """Identity and secrets for errors raised while calling ``model`` (built once per model)."""
        callee = self._callees.get(model)
        if callee is None:
            if len(self._callees) > 64:
                self._callees.clear()
            callee = self._callees[model] = Callee(profile=self.settings.profile, model=model, secrets=self._secrets)
        return callee

    def temperature(self, temperature: float | None) -> float | None:
        """The caller's temperature, else the profile's default (None: left out of the request)."""
        return temperature if temperature is not None else self.settings.temperature

    def max_tokens(self, request: ChatRequest, default: int | None = None) -> int | None:
        """The caller's max tokens, else the profile's, else ``default``."""
        return request.max_tokens or self.settings.max_tokens or default

    def error(self, status: int, headers: Mapping[str, str], body: bytes, model: str | None) -> ProviderError:
        """A classified error for an HTTP error response."""
        # aiohttp's headers are case-insensitive already; anything else gets lowercased names
        lowered = headers if isinstance(headers, CIMultiDictProxy) else {k.lower(): v for k, v in headers.items()}
        try:
            facts = self.error_facts(status, lowered, body)
        except MALFORMED:
            facts = ErrorFacts(status=status, headers=lowered, message=body_excerpt(body))
        if not facts.message:
            facts = replace(facts, message=body_excerpt(body) or f"HTTP {status}")
        return provider_error(facts, provider=self.settings.profile, model=model, secrets=self._secrets)

    def in_band_error(self, facts: ErrorFacts, model: str | None) -> ProviderError:
        """A classified error for an error event inside a 200 stream."""
        return provider_error(
            replace(facts, in_band=True), provider=self.settings.profile, model=model, secrets=self._secrets
        )

    def with_merged_extras(self, body: dict[str, Any]) -> dict[str, Any]:
        """``provider_extra`` and ``chat_template_kwargs`` merged into a body."""
        if self.settings.provider_extra:
            body.update(self.settings.provider_extra)
        if self.settings.chat_template_kwargs is not None:
            body["chat_template_kwargs"] = dict(self.settings.chat_template_kwargs)
        return body

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        """One non-streaming call."""
        settings = self.settings
        url, headers, body = await self._prepared(request, model, temperature, False)
        resp = await self.http.post(
            url,
            headers=headers,
            body=body,
            timeouts=settings.timeouts,
            callee=self._callees.get(model) or self.callee(model),  # no call once the model's is made
            max_bytes=settings.max_response_bytes,
            ssl_context=self._ssl,
        )
        if resp.status >= 400:
            raise self.error(resp.status, resp.headers, resp.body, model)
        watch = self.headroom
        if watch is not None and (cooling := watch.seen(resp.headers)) is not None:
            await cooling
        try:
            data = orjson.loads(resp.body)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError("malformed response: invalid JSON", provider=settings.profile, model=model) from exc
        try:
            parsed = self.parse_response(data, model)
        except MALFORMED as exc:
            raise ProtocolError(
                f"malformed response: {type(exc).__name__}", provider=self.settings.profile, model=model
            ) from exc
        native = data if request.native is not None and self.passes_through(request) else None
        request_id = parsed.request_id
        if request_id is None:
            headers = resp.headers
            request_id = (
                headers.get("x-request-id") or headers.get("request-id") or headers.get("x-amzn-requestid") or None
            )
        if native is None and request_id == parsed.request_id:
            return parsed
        return replace(parsed, native=native if native is not None else parsed.native, request_id=request_id)

    def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """One streaming call; ends with ``Final`` only when the protocol's completion signal arrived."""
        return flatten(self.stream_batches(request, model, temperature))

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """One streaming call, as the events each network read completed (see :meth:`stream`)."""
        url, headers, body = await self._prepared(request, model, temperature, True)
        decoder = self.decoder(model)
        feed = decoder.feed
        async with self.http.stream(
            url,
            headers=headers,
            body=body,
            timeouts=self.settings.timeouts,
            callee=self._callees.get(model) or self.callee(model),  # no call once the model's is made
            ssl_context=self._ssl,
            max_bytes=self.settings.max_response_bytes,
        ) as resp:
            if resp.status >= 400:
                raw = await resp.read_body(min(self.settings.max_response_bytes, 1024 * 1024))
                raise self.error(resp.status, resp.headers, raw, model)
            watch = self.headroom
            if watch is not None and (cooling := watch.seen(resp.headers)) is not None:
                await cooling
            read = resp.read_chunk
            while chunk := await read():
                try:
                    events = feed(chunk)
                except MALFORMED as exc:
                    raise self._malformed_event(exc, model) from exc
                if events:
                    yield events
                if decoder.done:
                    break
            try:
                tail = decoder.finish()
            except MALFORMED as exc:
                raise self._malformed_event(exc, model) from exc
            if tail:
                yield tail

    def embedding_limits(self, model: str | None = None) -> EmbeddingLimits | None:
        """What this adapter's embedding endpoint takes for ``model`` (None: it serves no embeddings)."""
        wire = self._embedding if model is None else self.embedding_wire_for(model)
        return wire.limits if wire is not None else None

    async def embed(self, request: EmbedRequest, model: str) -> Embeddings:
        """One embedding request (one batch): the request cycle of :meth:`chat` around the family's wire.

        Raises:
            UnsupportedRequest: The family serves no embeddings.
            ProviderError: The call failed, or the answer does not hold one vector per input (of the asked size).
        """
        wire = self.embedding_wire_for(model)
        if wire is None:
            raise UnsupportedRequest(f"{self.settings.profile} serves no embeddings for {model[:100]}")
        settings = self.settings
        problem = self.model_problem(model)
        if problem is not None:
            raise ProviderError(problem, error_class=ErrorClass.NON_RETRYABLE, provider=settings.profile, model=model)
        count = len(request.inputs)
        try:
            body = orjson.dumps(wire.body(request, model))
        except Exception as exc:
            raise self._unbuildable(exc) from exc
        url = wire.url(model, count)
        headers: Mapping[str, str] = self._headers
        if self.signs_requests:
            headers = await self.signed(url, headers, body)
        resp = await self.http.post(
            url,
            headers=headers,
            body=body,
            timeouts=settings.timeouts,
            callee=self.callee(model),
            max_bytes=max(settings.max_response_bytes, EMBEDDING_MAX_RESPONSE_BYTES),
            ssl_context=self._ssl,
        )
        if resp.status >= 400:
            raise self.error(resp.status, resp.headers, resp.body, model)
        watch = self.headroom
        if watch is not None and (cooling := watch.seen(resp.headers)) is not None:
            await cooling
        data = loads(resp.body, provider=settings.profile, model=model)
        try:
            answer = wire.parse(data, count)
        except MALFORMED as exc:
            raise ProtocolError(
                f"malformed embedding answer: {type(exc).__name__}", provider=settings.profile, model=model
            ) from exc
        if answer.usage is None and wire.tokens_header is not None:
            answer = replace(answer, usage=header_tokens(resp.headers.get(wire.tokens_header)))
        size = request.dimensions if request.dimensions is not None else len(answer.vectors[0])
        if any(len(v) != size for v in answer.vectors):
            raise ProtocolError(
                "malformed embedding answer: its vectors are not all of the asked size",
                provider=settings.profile,
                model=model,
            )
        return answer

    async def _prepared(
        self, request: ChatRequest, model: str, temperature: float | None, stream: bool
    ) -> tuple[str | URL, Mapping[str, str], bytes]:
        """The URL, headers and encoded body of one call (signed when the family signs its requests).

        Raises:
            InvalidRequest: The body could not be built or encoded (see :meth:`_unbuildable`).
        """
        try:
            body = orjson.dumps(self.build_body(request, model, temperature, stream))
        except Exception as exc:
            raise self._unbuildable(exc) from exc
        url = self.url(model, stream)
        headers = self._headers if request.native is None else self.request_headers(request)
        if self.signs_requests:
            headers = await self.signed(url, headers, body)
        return url, headers, body

    def _unbuildable(self, exc: Exception) -> InvalidRequest:
        """The caller's error for a request this adapter could not build or encode, whatever raised it.

        Nothing was sent, so the provider said nothing: a failure here is never a provider failure (never retried,
        never routed around, no cooldown, no breaker). The reason names the exception's type, not its text, which
        could quote the request.
        """
        if isinstance(exc, InvalidRequest):
            return exc
        if isinstance(exc, orjson.JSONEncodeError):
            reason = f"the request body cannot be encoded as JSON ({str(exc)[:120]})"
        else:
            reason = f"{self.settings.profile} could not build the request body ({type(exc).__name__})"
        return InvalidRequest(reason)

    def _malformed_event(self, exc: BaseException, model: str) -> ProtocolError:
        return ProtocolError(
            f"malformed stream event: {type(exc).__name__}", provider=self.settings.profile, model=model
        )
