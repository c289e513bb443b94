"""Google Vertex AI: Claude through the Anthropic publisher, Gemini through the Google publisher.

Both speak their own family's wire, reused as it is: Claude's ``rawPredict`` / ``streamRawPredict`` take a
Messages body (:mod:`turnout.providers.anthropic`) with ``anthropic_version: "vertex-2023-10-16"`` and the model
in the URL instead of the body; Gemini's ``generateContent`` / ``streamGenerateContent?alt=sse`` take the Gemini
body (:mod:`turnout.providers.gemini`); its embedding models answer ``:predict``
(:class:`~turnout.providers.embedding.VertexEmbeddings`). What Vertex adds is the URL
(``{host}/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/{model}:{method}``, the host
``{region}-aiplatform.googleapis.com``, or ``aiplatform.googleapis.com`` for ``global``) and the credential: a
Google access token (:mod:`turnout.providers.google_auth`), looked up before each call from its cache and sent
as ``Authorization: Bearer``. A 401 renews the token once and makes the call again.

Token counts: Claude's at ``…/publishers/anthropic/models/count-tokens:rawPredict`` (the Messages fields, the
model's Vertex id in the body), Gemini's at ``…/models/{model}:countTokens`` (``totalTokens``).
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import AsyncGenerator, Mapping
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import quote

import orjson

from turnout.core.classify import ErrorFacts
from turnout.core.embeddings import Embeddings, EmbedRequest
from turnout.core.errors import ErrorClass, ProviderError
from turnout.core.model_ids import wire_model
from turnout.core.types import ChatRequest, ChatResponse, StreamEvent
from turnout.providers.anthropic import AnthropicAdapter
from turnout.providers.base import AdapterSettings, HTTPAdapter
from turnout.providers.betas import accepted_betas
from turnout.providers.embedding import VERTEX_GEMINI_LIMITS, VERTEX_LIMITS, EmbeddingWire, VertexEmbeddings
from turnout.providers.gemini import GeminiAdapter, error_facts_of
from turnout.providers.google_auth import TokenSource
from turnout.providers.http import HttpClient

#: The ``anthropic_version`` a Claude body on Vertex carries (in the body: Vertex takes no version header).
ANTHROPIC_VERSION = "vertex-2023-10-16"
#: What a Vertex model id may not contain: each could end its URL path segment or climb out of it.
_PATH_UNSAFE = ("/", "?", "#", "\\", "..", ":", "%")
#: The embedding models Vertex serves one instance a request (Google's text embedding API limits).
_ONE_INSTANCE_MODELS = frozenset({"gemini-embedding-001"})
#: The quota metric a Vertex 429 names in its message (``Quota exceeded for aiplatform.googleapis.com/…``).
_QUOTA_METRIC = re.compile(r"Quota exceeded for (aiplatform\.googleapis\.com/[A-Za-z0-9_]{1,120})")


def model_path_problem(model: str) -> str | None:
    """Why ``model`` cannot be a Vertex model id in a URL path (None: it can; ``@`` versions are fine)."""
    if not model:
        return "the model name is empty"
    unsafe = next((s for s in _PATH_UNSAFE if s in model), None)
    if unsafe is not None:
        return f"a Vertex model name cannot contain {unsafe!r}"
    if not model.isprintable():
        return "a Vertex model name cannot contain control characters"
    return None


class _Vertex(HTTPAdapter):
    """What both Vertex publishers share: the model URL, the bearer token and the one retry after a 401."""

    publisher: ClassVar[str]

    def __init__(self, settings: AdapterSettings, http: HttpClient, api_key: str | None = None) -> None:
        super().__init__(settings, http, api_key)
        self.tokens = TokenSource(settings.profile, settings.credentials_file)
        self._plain = {"Content-Type": "application/json", **settings.extra_headers}
        self._token: str | None = None
        region = settings.region or "global"
        self._prefix = (
            f"{settings.base_url}/v1/projects/{quote(settings.project or '', safe='')}/locations/"
            f"{quote(region, safe='')}/publishers/{self.publisher}/models/"
        )
        self._paths: dict[str, str] = {}

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """None fixed: the bearer token is set per token (:meth:`_use`)."""
        return {}

    @classmethod
    def model_problem(cls, model: str) -> str | None:
        """The model is part of the URL path: a name that could leave its segment is refused."""
        return model_path_problem(model)

    def model_path(self, model: str) -> str:
        """``{prefix}/publishers/{publisher}/models/{wire id}`` (built once per model).

        Raises:
            ProviderError: The model name cannot be sent (see :meth:`model_problem`); nothing is sent.
        """
        path = self._paths.get(model)
        if path is None:
            wire = wire_model("vertex", model)
            problem = self.model_problem(wire)
            if problem is not None:
                raise ProviderError(
                    problem,
                    error_class=ErrorClass.NON_RETRYABLE,
                    provider=self.settings.profile,
                    model=model,
                    error_type="invalid_model",
                )
            if len(self._paths) >= 64:  # an unpinned profile sees many names; keep only a few
                self._paths.clear()
            path = self._paths[model] = self._prefix + quote(wire, safe="@")
        return path

    def google_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts | None:
        """What an error in Google's shape says (None: the publisher's model answered in its own shape).

        Vertex's front end answers quota and credential errors so, whichever the publisher. A quota error names
        its metric only in the message: it is kept as the quota id, so a per-minute quota is a rate limit, not an
        exhausted budget.
        """
        data = orjson.loads(body)
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
        error = data.get("error") if isinstance(data, dict) else None
        if not (isinstance(error, Mapping) and "status" in error and "type" not in error):
            return None
        facts = error_facts_of(error, status=status, headers=headers)
        metric = _QUOTA_METRIC.search(facts.message)
        return replace(facts, quota_ids=(*facts.quota_ids, metric.group(1))) if metric else facts

    def _use(self, token: str) -> None:
        """Send ``token`` from now on (and scrub it from any error text).

        Its headers become a credential of their own, sent as a session's defaults as an API key's are: one more
        session on the shared pool per token (about one an hour), none per call.
        """
        self._headers = self.http.credential({**self._plain, "Authorization": f"Bearer {token}"})
        self._secrets = tuple(s for s in (token, *self.settings.extra_headers.values()) if s and len(s) >= 4)
        self._callees = {}
        self._token = token

    async def _authorise(self) -> str:
        token = self.tokens.cached() or await self.tokens.token()
        if token != self._token:
            self._use(token)
        return token

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        """One call with the current token; a 401 renews it and makes the call once more."""
        token = await self._authorise()
        try:
            return await super().chat(request, model, temperature)
        except ProviderError as exc:
            if exc.status != 401:
                raise
        self._use(await self.tokens.renew(token))
        return await super().chat(request, model, temperature)

    async def embed(self, request: EmbedRequest, model: str) -> Embeddings:
        """One embedding call with the current token; a 401 renews it and makes the call once more."""
        token = await self._authorise()
        try:
            return await super().embed(request, model)
        except ProviderError as exc:
            if exc.status != 401:
                raise
        self._use(await self.tokens.renew(token))
        return await super().embed(request, model)

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """One stream with the current token; a 401 (before any event) renews it and opens the stream once more."""
        token = await self._authorise()
        stream = super().stream_batches(request, model, temperature)
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return
        except ProviderError as exc:
            await stream.aclose()
            if exc.status != 401:
                raise
            self._use(await self.tokens.renew(token))
            stream = super().stream_batches(request, model, temperature)
            try:
                first = await anext(stream)
            except StopAsyncIteration:
                return
        try:
            yield first
            async for batch in stream:
                yield batch
        finally:
            await stream.aclose()

    async def count_tokens(self, request: ChatRequest, model: str) -> int:
        """The publisher's count of the request's input tokens, with the current token; a 401 renews it once."""
        token = await self._authorise()
        try:
            return await self._count(request, model)
        except ProviderError as exc:
            if exc.status != 401:
                raise
        self._use(await self.tokens.renew(token))
        return await self._count(request, model)

    @abstractmethod
    async def _count(self, request: ChatRequest, model: str) -> int:
        """One count with the current token (the publisher's own endpoint)."""


class VertexAnthropicAdapter(_Vertex, AnthropicAdapter):
    """Claude on Vertex AI (``publishers/anthropic``): the Messages wire, the model in the URL."""

    publisher = "anthropic"

    def url(self, model: str, stream: bool) -> str:
        """``…/models/{model}:streamRawPredict`` or ``:rawPredict``."""
        return self.model_path(model) + (":streamRawPredict" if stream else ":rawPredict")

    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """The Messages body without ``model`` and with Vertex's ``anthropic_version``."""
        body = super().build_body(request, model, temperature, stream)
        body.pop("model", None)
        body["anthropic_version"] = ANTHROPIC_VERSION
        return body

    def request_headers(self, request: ChatRequest) -> Mapping[str, str]:
        """The call's headers: a pass-through request's ``anthropic-beta`` keeps only the betas Vertex accepts."""
        native = request.native
        if native is None or not native.headers or native.protocol != self.protocol:
            return self._headers
        headers = {**self._headers, **{k: v for k, v in native.headers.items() if k.lower() != "anthropic-beta"}}
        beta = native.headers.get("anthropic-beta")
        kept = accepted_betas("vertex", beta) if beta else None
        if kept:
            headers["anthropic-beta"] = kept
        return headers

    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """Google's shape from Vertex's front end, else Anthropic's from the model."""
        return self.google_facts(status, headers, body) or super().error_facts(status, headers, body)

    def count_url(self, model: str) -> str:
        """``…/publishers/anthropic/models/count-tokens:rawPredict`` (the model goes in the body)."""
        self.model_path(model)  # a name that cannot be sent is refused here too
        return self._prefix + "count-tokens:rawPredict"

    def count_body(self, request: ChatRequest, model: str) -> dict[str, Any]:
        """The Messages fields counted, with the model's Vertex id and ``anthropic_version`` in the body."""
        return {
            **super().count_body(request, model),
            "model": wire_model("vertex", model),
            "anthropic_version": ANTHROPIC_VERSION,
        }

    async def _count(self, request: ChatRequest, model: str) -> int:
        return await AnthropicAdapter.count_tokens(self, request, model)


class VertexGeminiAdapter(_Vertex, GeminiAdapter):
    """Gemini on Vertex AI (``publishers/google``): the Gemini wire."""

    publisher = "google"

    def url(self, model: str, stream: bool) -> str:
        """``…/models/{model}:streamGenerateContent?alt=sse`` or ``:generateContent``."""
        return self.model_path(model) + (":streamGenerateContent?alt=sse" if stream else ":generateContent")

    def embedding_wire(self) -> EmbeddingWire:
        """``…/models/{model}:predict`` (Vertex's text embedding models: 250 instances a request)."""
        return VertexEmbeddings(self.model_path, VERTEX_LIMITS)

    def embedding_wire_for(self, model: str) -> EmbeddingWire | None:
        """``:predict``; ``gemini-embedding-001`` takes one instance a request, the others 250."""
        if model.partition("@")[0] in _ONE_INSTANCE_MODELS:
            return VertexEmbeddings(self.model_path, VERTEX_GEMINI_LIMITS)
        return self._embedding

    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """Google's error shape, with a quota error's metric kept as its quota id."""
        return self.google_facts(status, headers, body) or super().error_facts(status, headers, body)

    counts_tokens = True

    async def _count(self, request: ChatRequest, model: str) -> int:
        """``…/models/{model}:countTokens`` with the chat body's ``contents``, ``systemInstruction`` and ``tools``."""
        url = self.model_path(model) + ":countTokens"
        try:
            built = self.build_body(request, model, None, False)
        except Exception as exc:
            raise self._unbuildable(exc) from exc
        body = {k: v for k, v in built.items() if k in _GEMINI_COUNTED}
        return await self.post_count(url, self.request_headers(request), body, model, "totalTokens")


#: The fields of a Gemini body Vertex's ``countTokens`` takes.
_GEMINI_COUNTED = frozenset(("contents", "systemInstruction", "tools"))
