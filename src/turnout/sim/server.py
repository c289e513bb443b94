"""The simulator's aiohttp application: protocol routes, the control routes and the fault driver.

Every protocol route does the same thing: read the body, let the protocol's codec parse it, count
the attempt and pick the behaviour (:mod:`turnout.sim.scenarios`), log it, then carry the behaviour
out with the codec's encoders. A model with rate-limit budgets (:mod:`turnout.sim.headroom`) has its answers
announce them (headers added as the response is prepared), and a request over budget is refused with a 429.
Handler cancellation is on, so a client that goes away cancels the handler and the request is logged as
``client_disconnected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from turnout.core.errors import ConfigError
from turnout.core.secrets import key_id
from turnout.sim.aws import verify
from turnout.sim.behaviour import Behaviour, Content, ErrorKind, ErrorSpec, Kind, SimUsage
from turnout.sim.caching import blocks
from turnout.sim.google import GoogleTokens
from turnout.sim.headroom import Limits
from turnout.sim.log import CLIENT_DISCONNECTED, PENDING, SERVER_CLOSED, Record, SimLog
from turnout.sim.scenarios import Scenarios
from turnout.sim.schema import structured
from turnout.sim.script import Script
from turnout.sim.wire import (
    AnthropicMessages,
    AzureChat,
    BedrockConverse,
    Codec,
    Gemini,
    Ollama,
    OpenAIChat,
    OpenAIResponses,
)
from turnout.sim.wire.base import JSON, Parsed
from turnout.sim.wire.embeddings import (
    BadEmbeddingRequest,
    GeminiEmbeddingsCodec,
    OllamaEmbeddingsCodec,
    OpenAIEmbeddingsCodec,
    VertexPredictCodec,
    invoke_codec,
)
from turnout.sim.wire.vertex import VertexAnthropic, VertexGemini

Sleep = Callable[[float], Awaitable[Any]]

MAX_BODY = 64 * 1024 * 1024
_KEY_HEADERS = ("x-api-key", "x-goog-api-key", "api-key")
_SIGV4 = "AWS4-HMAC-SHA256 Credential="
_MAX_KEY_IDS = 1024
_REASONS = {529: "Site Overloaded"}
_LINGER_RESET = struct.pack("ii", 1, 0)

# Behaviours that send the whole answer; the others stop after ``after`` units.
_WHOLE = frozenset({Kind.OK, Kind.SLOW, Kind.FLAPPING, Kind.MISSING_DONE, Kind.EMPTY, Kind.REFUSAL, Kind.THINK_ONLY})
_OUTCOME = {Kind.SLOW: "ok", Kind.FLAPPING: "ok"}


class _Announce:
    """The budgets one answer announces: whose, in which protocol, and what it spends."""

    __slots__ = ("counter", "limits", "protocol", "request", "spends", "tokens")

    def __init__(self, request: web.BaseRequest, counter: object, limits: Limits, protocol: str, spends: bool) -> None:
        self.request = request  # held while announcing: its id() cannot name another request meanwhile
        self.counter = counter
        self.limits = limits
        self.protocol = protocol
        self.spends = spends  # False for the 429 of a request over budget
        self.tokens = 0


class SimServer:
    """Routes and handlers; the :class:`~turnout.sim.simulator.Simulator` owns its lifecycle."""

    def __init__(
        self,
        scenarios: Scenarios,
        log: SimLog,
        *,
        clock: Callable[[], float],
        sleep: Sleep,
    ) -> None:
        self.scenarios = scenarios
        self.log = log
        self.closing = asyncio.Event()
        self._clock = clock
        self._sleep = sleep
        self._key_ids: dict[str, str] = {}
        self._announcing: dict[int, _Announce] = {}  # by id() of the request, while it is served
        self._openai = OpenAIChat()
        self._responses = OpenAIResponses()
        self._anthropic = AnthropicMessages()
        self._gemini = Gemini()
        self._ollama = Ollama()
        self._azure = AzureChat()
        self._bedrock = BedrockConverse()
        self._vertex_anthropic = VertexAnthropic()
        self._vertex_gemini = VertexGemini()
        #: The bearer tokens of the Google token endpoint, which the Vertex AI routes check.
        self.google = GoogleTokens(clock)

    def app(self) -> web.Application:
        """A new aiohttp application with every route."""
        app = web.Application(client_max_size=MAX_BODY)
        add_post, add_get = app.router.add_post, app.router.add_get
        add_post("/v1/chat/completions", self._on_openai)
        add_post("/v1/responses", self._on_responses)
        add_post("/v1/messages", self._on_anthropic)
        add_post("/v1/messages/count_tokens", self._on_anthropic_count)
        add_post("/v1beta/models/{target}", self._on_gemini)
        add_post("/api/chat", self._on_ollama)
        add_post("/openai/deployments/{deployment}/chat/completions", self._on_azure)
        add_post("/v1/embeddings", self._on_openai_embeddings)
        add_post("/openai/deployments/{deployment}/embeddings", self._on_azure_embeddings)
        add_post("/api/embed", self._on_ollama_embeddings)
        add_post("/model/{model}/converse", self._on_bedrock)
        add_post("/model/{model}/converse-stream", self._on_bedrock_stream)
        add_post("/model/{model}/invoke", self._on_bedrock_invoke)
        vertex = "/v1/projects/{project}/locations/{location}/publishers"
        add_post(vertex + "/anthropic/models/{target}", self._on_vertex_anthropic)
        add_post(vertex + "/google/models/{target}", self._on_vertex_gemini)
        add_post("/_sim/google/token", self._on_google_token)
        add_post("/_sim/google/expire", self._on_google_expire)
        add_get("/_sim/log", self._on_log)
        add_post("/_sim/reset", self._on_reset)
        add_post("/_sim/script", self._on_script)
        add_get("/_sim/health", self._on_health)
        app.on_response_prepare.append(self._announce)
        return app

    # --- control ---------------------------------------------------------------------------------

    def reset(self) -> None:
        """Clear the log and the attempt counters; restart timed scenarios."""
        self.log.clear()
        self.scenarios.restart()

    async def _on_log(self, request: web.Request) -> web.Response:
        return _json([e.to_json() for e in self.log.entries()])

    async def _on_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return _json({"status": "ok"})

    async def _on_script(self, request: web.Request) -> web.Response:
        text = await request.text()
        try:
            script = Script.from_text(text)
        except ConfigError as exc:
            return _json({"error": str(exc), "path": exc.path}, status=400)
        self.scenarios.replace(script)
        return _json({"status": "ok", "models": sorted(script.models)})

    async def _on_health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok"})

    # --- protocol routes -------------------------------------------------------------------------

    async def _on_openai(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._openai)

    async def _on_responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._responses)

    async def _on_anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._anthropic)

    async def _on_anthropic_count(self, request: web.Request) -> web.StreamResponse:
        """Anthropic's ``count_tokens``: one token per word of the system prompt and messages."""
        try:
            payload = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict) or "max_tokens" in payload:
            spec = ErrorSpec(kind=ErrorKind.BAD_REQUEST, message="turnout-sim: not a count_tokens body")
            return _error_response(self._anthropic, Parsed(model="", stream=False), spec)
        return _json({"input_tokens": self._anthropic.parse(payload, None).input_words})

    async def _on_ollama(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._ollama)

    async def _on_azure(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._azure, path_model=request.match_info["deployment"])

    async def _on_bedrock(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_bedrock(request, stream=False)

    async def _on_bedrock_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_bedrock(request, stream=True)

    async def _on_bedrock_invoke(self, request: web.Request) -> web.StreamResponse:
        """InvokeModel, for the embedding models (each family's body); another model's is a 400."""
        model = request.match_info["model"]
        codec = invoke_codec(model)
        if codec is None:
            spec = ErrorSpec(kind=ErrorKind.BAD_REQUEST, message=f"turnout-sim: no InvokeModel body for {model[:100]}")
            return self._refused(request, self._bedrock, model, spec)
        return await self._serve_bedrock(request, stream=False, codec=codec)

    async def _serve_bedrock(
        self, request: web.Request, *, stream: bool, codec: Codec | None = None
    ) -> web.StreamResponse:
        """Converse or InvokeModel: the signature (or a Bedrock API key) is checked first, as Bedrock does."""
        body = await request.read()
        path, _, query = request.raw_path.partition("?")
        refusal = verify(request.method, path, query, request.headers, body, time.time())
        if refusal is not None:  # logged as an attempt on no model's steps: the upstream refused it at the door
            req = Parsed(model=request.match_info["model"], stream=stream)
            rec = self._record(request, self._bedrock, req, 0, Kind.INVALID, self._key_id(request))
            reply = self._bedrock.refused(refusal.error_type, refusal.message)
            rec.outcome, rec.duration = f"status:{reply.status}", 0.0
            self.log.changed()
            return web.Response(
                status=reply.status, body=reply.body, content_type=reply.content_type, headers=reply.headers
            )
        return await self._serve(
            request, codec or self._bedrock, path_model=request.match_info["model"], stream=None if codec else stream
        )

    async def _on_gemini(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].rpartition(":")
        if method == "generateContent":
            return await self._serve(request, self._gemini, path_model=model, stream=False)
        if method == "streamGenerateContent":
            return await self._serve(request, self._gemini, path_model=model, stream=True)
        if method in ("embedContent", "batchEmbedContents"):
            return await self._serve(request, _GEMINI_EMBEDDINGS, path_model=model)
        raise web.HTTPNotFound()

    async def _on_openai_embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, _OPENAI_EMBEDDINGS)

    async def _on_azure_embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, _OPENAI_EMBEDDINGS, path_model=request.match_info["deployment"])

    async def _on_ollama_embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, _OLLAMA_EMBEDDINGS)

    async def _on_vertex_anthropic(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].rpartition(":")
        if model == "count-tokens" and method == "rawPredict":
            return await self._vertex_count(request, self._vertex_anthropic, model)
        if method not in ("rawPredict", "streamRawPredict"):
            raise web.HTTPNotFound()
        return await self._vertex(request, self._vertex_anthropic, model, method == "streamRawPredict")

    async def _on_vertex_gemini(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["target"].rpartition(":")
        if method == "predict":
            return await self._vertex(request, _VERTEX_PREDICT, model, None)
        if method == "countTokens":
            return await self._vertex_count(request, self._vertex_gemini, model)
        if method not in ("generateContent", "streamGenerateContent"):
            raise web.HTTPNotFound()
        return await self._vertex(request, self._vertex_gemini, model, method == "streamGenerateContent")

    async def _vertex_count(self, request: web.Request, codec: Codec, model: str) -> web.StreamResponse:
        """Vertex's token counts: one token per word, as the chat routes count input.

        Claude's (``count-tokens:rawPredict``) wants the model and ``anthropic_version`` in the body and answers
        ``{"input_tokens"}``; Gemini's (``{model}:countTokens``) answers ``{"totalTokens", "totalBillableCharacters"}``.
        """
        if not self.google.valid(request.headers.get("Authorization")):
            return self._refused(request, codec, model, ErrorSpec(kind=ErrorKind.AUTH))
        try:
            payload = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            payload = None
        claude = codec is self._vertex_anthropic
        if not isinstance(payload, dict) or (
            claude
            and (
                not isinstance(payload.get("model"), str)
                or payload.get("anthropic_version") != "vertex-2023-10-16"
                or "max_tokens" in payload
            )
        ):
            spec = ErrorSpec(kind=ErrorKind.BAD_REQUEST, message="turnout-sim: not a count-tokens body")
            return _error_response(codec, Parsed(model=model, stream=False), spec)
        words = codec.parse(payload, model).input_words
        if claude:
            return _json({"input_tokens": words})
        return _json({"totalTokens": words, "totalBillableCharacters": len(orjson.dumps(payload.get("contents")))})

    async def _vertex(self, request: web.Request, codec: Codec, model: str, stream: bool | None) -> web.StreamResponse:
        """A Vertex AI route: a token the Google endpoint issued, not expired, or a 401 before anything else."""
        if not self.google.valid(request.headers.get("Authorization")):
            return self._refused(request, codec, model, ErrorSpec(kind=ErrorKind.AUTH))
        return await self._serve(request, codec, path_model=model, stream=stream)

    async def _on_google_token(self, request: web.Request) -> web.Response:
        form = await request.post()
        grant, assertion = form.get("grant_type"), form.get("assertion")
        status, body = self.google.grant(
            grant if isinstance(grant, str) else None, assertion if isinstance(assertion, str) else None
        )
        return _json(body, status=status)

    async def _on_google_expire(self, request: web.Request) -> web.Response:
        return _json({"status": "ok", "expired": self.google.expire()})

    def _refused(self, request: web.Request, codec: Codec, model: str, spec: ErrorSpec) -> web.Response:
        """An error answered before the script is consulted: logged, not counted as an attempt on the model."""
        req = Parsed(model=model, stream=False)
        rec = self._record(request, codec, req, 0, Kind.INVALID, self._key_id(request))
        refused = self._error(codec, req, spec, rec)
        rec.duration = 0.0
        self.log.changed()
        return refused

    # --- the driver --------------------------------------------------------------------------------

    def _key_id(self, request: web.Request) -> str | None:
        headers = request.headers
        key = headers.get("Authorization")
        if key is not None:
            if key[:7].lower() == "bearer ":
                key = key[7:]
            elif key.startswith(_SIGV4):  # a SigV4 signature: the access key id names the credential
                key = key[len(_SIGV4) :].partition("/")[0]
        else:
            for name in _KEY_HEADERS:
                key = headers.get(name)
                if key is not None:
                    break
            else:
                key = request.query.get("key") if request.query_string else None
        if not key:
            return None
        kid = self._key_ids.get(key)
        if kid is None:
            if len(self._key_ids) >= _MAX_KEY_IDS:
                self._key_ids.clear()
            kid = self._key_ids[key] = key_id(key)
        return kid

    async def _serve(
        self,
        request: web.Request,
        codec: Codec,
        *,
        path_model: str | None = None,
        stream: bool | None = None,
    ) -> web.StreamResponse:
        body = await request.read()
        try:
            payload = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            payload = None
        kid = self._key_id(request)
        if not isinstance(payload, dict):  # not an attempt on any model: logged, not counted
            req = Parsed(model=path_model or "", stream=False)
            rec = self._record(request, codec, req, 0, Kind.INVALID, kid)
            spec = ErrorSpec(kind=ErrorKind.BAD_REQUEST, message="turnout-sim: the body is not a JSON object")
            invalid = self._error(codec, req, spec, rec)
            rec.duration = 0.0
            self.log.changed()
            return invalid
        try:
            req = codec.parse(payload, path_model)
        except BadEmbeddingRequest as exc:  # an embedding body its codec cannot read: logged, not counted
            req = Parsed(model=path_model or "", stream=False)
            rec = self._record(request, codec, req, 0, Kind.INVALID, kid)
            invalid = self._error(codec, req, ErrorSpec(kind=ErrorKind.BAD_REQUEST, message=_bounded(exc)), rec)
            rec.duration = 0.0
            self.log.changed()
            return invalid
        reason = codec.refuse(payload)
        if reason is not None:
            return self._refused(
                request, codec, path_model or "", ErrorSpec(kind=ErrorKind.BAD_REQUEST, message=reason)
            )
        req = codec.parse(payload, path_model)
        if stream is not None:
            req.stream = stream
        if self.scenarios.script.cache_ttl is not None:
            req.prompt = blocks(payload)
        attempt, behaviour = self.scenarios.select(req.model, kid)
        limits = self.scenarios.limits(req.model)
        if limits is not None:
            behaviour = self._budget(request, codec, req, kid, limits, behaviour)
        rec = self._record(request, codec, req, attempt, behaviour.kind, kid)
        response: web.StreamResponse | None = None
        try:
            response = await self._run(request, codec, req, behaviour, rec)
            return response
        except asyncio.CancelledError:
            if rec.outcome == PENDING:
                rec.outcome = SERVER_CLOSED if self.closing.is_set() else CLIENT_DISCONNECTED
            raise
        finally:
            rec.duration = self._clock() - rec.started
            self.log.changed()
            if limits is not None and (response is None or response.prepared):  # else it is announced when prepared
                self._announcing.pop(id(request), None)

    def _budget(
        self, request: web.Request, codec: Codec, req: Parsed, kid: str | None, limits: Limits, behaviour: Behaviour
    ) -> Behaviour:
        """Have the answer announce the model's headroom; a request over an enforced budget gets a 429 instead."""
        counter = self.scenarios.counter(req.model, kid)
        wait = self.scenarios.windows.refused(counter, limits)
        self._announcing[id(request)] = _Announce(request, counter, limits, codec.protocol, spends=wait is None)
        if wait is None:
            return behaviour
        return Behaviour(kind=Kind.STATUS, error=ErrorSpec(kind=ErrorKind.RATE_LIMIT, retry_after=math.ceil(wait)))

    async def _announce(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """Spend the answer's request and tokens and add the headers saying what is left (as it is prepared)."""
        announce = self._announcing.pop(id(request), None)
        if announce is None or announce.request is not request:
            return
        windows = self.scenarios.windows
        if announce.spends:
            windows.spend(announce.counter, announce.limits, announce.tokens)
        response.headers.update(windows.headers(announce.counter, announce.limits, announce.protocol))

    def _record(
        self, request: web.Request, codec: Codec, req: Parsed, attempt: int, kind: Kind, kid: str | None
    ) -> Record:
        rec = Record(
            seq=self.log.next_seq(),
            time=time.time(),
            started=self._clock(),
            protocol=codec.protocol,
            path=request.path,
            model=req.model,
            attempt=attempt,
            behaviour=kind.value,
            stream=req.stream,
            key_id=kid,
            prefill=req.prefill,
        )
        self.log.add(rec)
        return rec

    async def _run(
        self, request: web.Request, codec: Codec, req: Parsed, b: Behaviour, rec: Record
    ) -> web.StreamResponse:
        kind = b.kind
        down = kind is Kind.FLAPPING and b.is_down(self.scenarios.elapsed())
        silent = kind is Kind.SILENCE or (down and b.silent)
        if silent or kind is Kind.RESET:
            self._announcing.pop(id(request), None)  # no answer: nothing announced, nothing spent
        if silent:
            await self.closing.wait()
            rec.outcome = SERVER_CLOSED
            _abort(request)
            return web.Response()
        failing = kind is Kind.STATUS or kind is Kind.INVALID or down
        # A delay comes before the headers, except for streamed answers: there it precedes the first chunk.
        delay = rec.delay = self.scenarios.delay(b) if b.tail_p else b.delay
        if delay and (failing or b.content is None or not req.stream):
            await self._sleep(delay)
        if failing:
            assert b.error is not None
            return self._error(codec, req, b.error, rec)
        if kind is Kind.RESET:
            rec.outcome = "reset"
            _abort(request)
            return web.Response()
        content = structured(b.content, req.schema) if b.content is not None else None
        assert content is not None
        usage = content.usage(req.input_words)
        ttl = self.scenarios.script.cache_ttl
        if req.prompt is not None and ttl is not None and not (content.usage_cached or content.usage_cache_write):
            cached, written = self.scenarios.prompts.observe((req.model, rec.key_id), req.prompt, ttl)
            cached = min(cached, usage.input)
            usage = replace(usage, cached_input=cached, cache_write=min(written, usage.input - cached))
        announce = self._announcing.get(id(request))
        if announce is not None:
            announce.tokens = usage.input + usage.output
        if req.stream:
            return await self._stream(request, codec, req, b, content, usage, rec)
        return await self._whole(request, codec, req, b, content, usage, rec)

    def _error(self, codec: Codec, req: Parsed, spec: ErrorSpec, rec: Record) -> web.Response:
        response = _error_response(codec, req, spec)
        rec.outcome = f"status:{response.status}"
        return response

    async def _whole(
        self,
        request: web.Request,
        codec: Codec,
        req: Parsed,
        b: Behaviour,
        content: Content,
        usage: SimUsage,
        rec: Record,
    ) -> web.StreamResponse:
        kind = b.kind
        if kind is Kind.INBAND_ERROR:  # no stream to break into: the same error as an HTTP status
            assert b.error is not None
            return self._error(codec, req, b.error, rec)
        body = codec.body(req, content, usage)
        if kind is Kind.CUT or kind is Kind.STALL:
            # Announce the whole body, send half of it, then drop the connection (or hold it).
            resp = web.StreamResponse(headers={"Content-Type": JSON})
            resp.content_length = len(body)
            await resp.prepare(request)
            try:
                await resp.write(body[: len(body) // 2])
            except ConnectionResetError:
                rec.outcome = CLIENT_DISCONNECTED
                return resp
            if kind is Kind.STALL:
                await self.closing.wait()
                rec.outcome = SERVER_CLOSED
            else:
                rec.outcome = "cut"
            _abort(request)
            return resp
        if kind is Kind.MALFORMED:
            rec.outcome = "malformed"
            return web.Response(body=body[: len(body) // 2], content_type=JSON)
        rec.outcome = _OUTCOME.get(kind, kind.value)
        rec.usage = usage
        return web.Response(body=body, content_type=JSON, headers=codec.answer_headers(req, usage))

    async def _stream(
        self,
        request: web.Request,
        codec: Codec,
        req: Parsed,
        b: Behaviour,
        content: Content,
        usage: SimUsage,
        rec: Record,
    ) -> web.StreamResponse:
        kind = b.kind
        resp = web.StreamResponse(headers={"Content-Type": codec.stream_content_type, "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            await self._emit(request, resp, codec, req, b, content, usage, rec)
        except ConnectionResetError:
            rec.outcome = CLIENT_DISCONNECTED
        else:
            if rec.outcome == PENDING:
                rec.outcome = _OUTCOME.get(kind, kind.value)
        return resp

    async def _emit(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        codec: Codec,
        req: Parsed,
        b: Behaviour,
        content: Content,
        usage: SimUsage,
        rec: Record,
    ) -> None:
        kind = b.kind
        if rec.delay:
            await self._sleep(rec.delay)
        enc = codec.encoder(req, content, usage)
        n = len(enc.units)
        upto = n if kind in _WHOLE else min(b.after, n)
        pause = 1.0 / b.tps if b.tps else 0.0
        out = enc.head()
        for i in range(upto):
            if pause:
                if out:
                    await resp.write(out)
                await self._sleep(pause)
                out = b""
            out += enc.unit(i)
        if kind is Kind.CUT or kind is Kind.STALL:
            if out:
                await resp.write(out)
            if kind is Kind.STALL:
                await self.closing.wait()
                rec.outcome = SERVER_CLOSED
                _abort(request)
            elif b.hard:
                rec.outcome = "cut"
                _abort(request)
            else:
                rec.outcome = "cut"
                await resp.write_eof()
            return
        if kind is Kind.INBAND_ERROR:
            assert b.error is not None
            await resp.write(out + enc.error(codec.resolve(b.error)))
            await resp.write_eof()
            return
        if kind is Kind.MALFORMED:
            out += enc.malformed()
            for i in range(upto, n):
                if pause:
                    await resp.write(out)
                    await self._sleep(pause)
                    out = b""
                out += enc.unit(i)
        out += enc.tail()
        if kind is not Kind.MISSING_DONE:
            out += enc.done()
        if kind is not Kind.MALFORMED:
            rec.usage = usage
        await resp.write(out)
        await resp.write_eof()


_OPENAI_EMBEDDINGS = OpenAIEmbeddingsCodec()
_GEMINI_EMBEDDINGS = GeminiEmbeddingsCodec()
_OLLAMA_EMBEDDINGS = OllamaEmbeddingsCodec()
_VERTEX_PREDICT = VertexPredictCodec()


def _bounded(exc: Exception) -> str:
    return f"turnout-sim: {str(exc)[:200]}"


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type=JSON)


def _error_response(codec: Codec, req: Parsed, spec: ErrorSpec) -> web.Response:
    reply = codec.error(req, spec)
    return web.Response(
        status=reply.status,
        reason=_REASONS.get(reply.status),
        body=reply.body,
        content_type=reply.content_type,
        headers=reply.headers,
    )


def _abort(request: web.Request) -> None:
    """Drop the connection with a TCP reset, before or in the middle of a response."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # the socket may already be gone
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    transport.abort()
