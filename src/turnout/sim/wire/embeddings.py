"""The embedding endpoints, seen from the server side: OpenAI (and Azure), Gemini, Ollama, Bedrock and Vertex AI.

Each codec reads its protocol's embedding request and answers with deterministic vectors: the vector of a text
is seeded from a hash of (model, text), so two models never agree and the same model always does, and tests can
tell vector spaces apart. ``dimensions`` (Gemini ``outputDimensionality``) is honoured up to the model's own
size (:data:`NATIVE_DIMENSIONS`, else 64); a larger one is a 400, as the real endpoints answer. Errors, delays
and faults come from the model's script like a chat's: the error bodies are the protocol's own (the chat
codec's), and every answer is whole (embeddings are not streamed).

Bedrock's InvokeModel takes each model family's own body: Titan Text Embeddings (one ``inputText``; V2 makes 256,
512 or 1024 dimensions) and Cohere Embed v3 (up to 96 ``texts``, always 1024 dimensions, ``input_type``
required); a field the model does not know is a 400 (``ValidationException``), as Bedrock answers. Both report
the input tokens in ``X-Amzn-Bedrock-Input-Token-Count``. Vertex AI's ``:predict`` takes ``instances`` (250, or
one for ``gemini-embedding-001``) and reports each input's ``token_count``.
"""

from __future__ import annotations

import hashlib
import math
import random
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, SimUsage
from turnout.sim.wire.base import Codec, ErrorReply, Parsed, StreamEncoder, dumps, new_id
from turnout.sim.wire.bedrock import BedrockConverse
from turnout.sim.wire.gemini import Gemini
from turnout.sim.wire.ollama import Ollama
from turnout.sim.wire.openai_chat import OpenAIChat
from turnout.sim.wire.vertex import VertexGemini

#: The vector size of well-known embedding models (any other model's is 64).
NATIVE_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "text-embedding-004": 768,
    "gemini-embedding-001": 3072,
    "nomic-embed-text": 768,
    "mxbai-embed-large": 1024,
    "amazon.titan-embed-text-v2": 1024,
    "amazon.titan-embed-text-v1": 1536,
    "cohere.embed-english-v3": 1024,
    "cohere.embed-multilingual-v3": 1024,
    "text-embedding-005": 768,
    "text-multilingual-embedding-002": 768,
}
#: What Titan Text Embeddings V2 makes.
TITAN_SIZES = (256, 512, 1024)
#: Vertex AI's models that take one instance a request.
_ONE_INSTANCE = frozenset({"gemini-embedding-001"})
DEFAULT_DIMENSIONS = 64
_MAX_INPUTS = 100_000
_KEPT_VECTORS = 50_000  # vectors kept for repeated texts (the benchmarks send the same ones again)


class BadEmbeddingRequest(ValueError):
    """The body is not a valid embedding request of the protocol (answered with a 400)."""


@dataclass(slots=True, kw_only=True)
class EmbedParsed(Parsed):
    """An embedding request: its inputs (texts, or token arrays as text) and the size asked for."""

    inputs: list[str] = field(default_factory=list)
    dimensions: int | None = None


def native_dimensions(model: str) -> int:
    """The size of ``model``'s vectors when no ``dimensions`` is asked for."""
    name = model.removeprefix("models/").partition(":")[0].partition("@")[0]
    return NATIVE_DIMENSIONS.get(name, DEFAULT_DIMENSIONS)


_kept: dict[tuple[str, str, int], list[float]] = {}


def sim_vector(model: str, text: str, dimensions: int) -> list[float]:
    """The unit vector ``model`` gives ``text`` at ``dimensions`` (seeded from a hash of model and text).

    A shorter size is a prefix of the full vector, renormalised, as OpenAI's ``dimensions`` behaves.
    """
    key = (model, text, dimensions)
    kept = _kept.get(key)
    if kept is not None:
        return kept
    seed = int.from_bytes(hashlib.blake2b(f"{model}\0{text}".encode(), digest_size=8).digest(), "big")
    rng = random.Random(seed)
    values = [rng.uniform(-1.0, 1.0) for _ in range(dimensions)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    vector = [round(v / norm, 7) for v in values]
    if len(_kept) >= _KEPT_VECTORS:
        _kept.clear()
    _kept[key] = vector
    return vector


def _dimensions(value: Any, model: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 < value <= native_dimensions(model):
        raise BadEmbeddingRequest(f"dimensions must be an integer from 1 to {native_dimensions(model)}")
    return value


def _words(inputs: list[str]) -> int:
    return sum(max(1, len(text.split())) for text in inputs)


def vectors_of(req: EmbedParsed) -> list[list[float]]:
    """The request's vectors, in input order."""
    size = req.dimensions or native_dimensions(req.model)
    return [sim_vector(req.model, text, size) for text in req.inputs]


class _EmbeddingCodec(Codec):
    """What every embedding codec shares: no streams; the protocol's own error bodies (its chat codec's)."""

    errors: ClassVar[Codec]

    def parse(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """:meth:`read`, any body it cannot read raising :class:`BadEmbeddingRequest`."""
        try:
            return self.read(payload, path_model)
        except (KeyError, TypeError, AttributeError) as exc:
            raise BadEmbeddingRequest(f"malformed embedding request ({type(exc).__name__})") from exc

    @abstractmethod
    def read(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """The protocol's request (may raise ``KeyError``, ``TypeError``, ``AttributeError`` when malformed)."""

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """Embeddings are never streamed (every request is parsed as whole)."""
        raise TypeError("embedding answers are not streamed")

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """The protocol's error body (its chat codec's)."""
        return self.errors.error_body(req, spec, status, request_id)

    def error(self, req: Parsed, spec: ErrorSpec) -> ErrorReply:
        """The protocol's whole error reply (its chat codec's: status, headers and body)."""
        return self.errors.error(req, spec)

    def default_status(self, kind: ErrorKind) -> int:
        """The protocol's status for an error kind (its chat codec's)."""
        return self.errors.default_status(kind)


class OpenAIEmbeddingsCodec(_EmbeddingCodec):
    """OpenAI's ``POST /v1/embeddings`` (and Azure's, whose deployment is the model)."""

    protocol = "openai"
    errors = OpenAIChat()

    def read(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """``model`` (Azure: the deployment), ``input`` (a text, texts, or token arrays), ``dimensions``."""
        model = path_model if path_model is not None else payload.get("model")
        if not isinstance(model, str) or not model:
            raise BadEmbeddingRequest("you must provide a model parameter")
        raw = payload.get("input")
        items = [raw] if isinstance(raw, str) or (isinstance(raw, list) and raw and type(raw[0]) is int) else raw
        if not isinstance(items, list) or not items or len(items) > 2048:
            raise BadEmbeddingRequest("input must be a string or an array of 1 to 2048 items")
        inputs: list[str] = []
        for item in items:
            if isinstance(item, str):
                inputs.append(item)
            elif isinstance(item, list) and item and all(type(t) is int for t in item):
                inputs.append(" ".join(map(str, item)))
            else:
                raise BadEmbeddingRequest("each input must be a string or an array of token ids")
        if payload.get("encoding_format", "float") not in ("float", "base64"):
            raise BadEmbeddingRequest("encoding_format must be float or base64")
        return EmbedParsed(
            model=model,
            stream=False,
            inputs=inputs,
            input_words=_words(inputs),
            dimensions=_dimensions(payload.get("dimensions"), model),
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """``{"object": "list", "data": [...], "model", "usage"}``."""
        assert isinstance(req, EmbedParsed)
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors_of(req))]
        tokens = usage.input
        return dumps(
            {
                "object": "list",
                "data": data,
                "model": req.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )


class GeminiEmbeddingsCodec(_EmbeddingCodec):
    """Gemini's ``:embedContent`` (one ``content``) and ``:batchEmbedContents`` (``requests[]``, at most 100)."""

    protocol = "gemini"
    retry_headers = False
    errors = Gemini()

    def read(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """The texts of each ``content.parts``; ``outputDimensionality`` (one value for the whole batch)."""
        model = path_model or ""
        single = "requests" not in payload
        requests = [payload] if single else payload["requests"]
        if not isinstance(requests, list) or not requests or len(requests) > 100:
            raise BadEmbeddingRequest("requests must hold 1 to 100 items")
        inputs: list[str] = []
        sizes: set[Any] = set()
        for item in requests:
            if not isinstance(item, dict):
                raise BadEmbeddingRequest("each request must be an object")
            if not single and item.get("model") != f"models/{model}":
                raise BadEmbeddingRequest("each request's model must be the model of the URL")
            parts = (item.get("content") or {}).get("parts")
            if not isinstance(parts, list) or not parts:
                raise BadEmbeddingRequest("content.parts must not be empty")
            inputs.append(" ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)))
            sizes.add(item.get("outputDimensionality"))
        if len(sizes) > 1:
            raise BadEmbeddingRequest("outputDimensionality differs between requests")
        return EmbedParsed(
            model=model,
            stream=False,
            inputs=inputs,
            input_words=_words(inputs),
            dimensions=_dimensions(sizes.pop(), model),
            include_usage=single,  # here: whether it was ``embedContent`` (one answer, not a list)
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """``{"embedding": {"values"}}`` or ``{"embeddings": [{"values"}]}`` (Gemini reports no usage)."""
        assert isinstance(req, EmbedParsed)
        vectors = vectors_of(req)
        if req.include_usage:
            return dumps({"embedding": {"values": vectors[0]}})
        return dumps({"embeddings": [{"values": v} for v in vectors]})


class OllamaEmbeddingsCodec(_EmbeddingCodec):
    """Ollama's ``POST /api/embed``."""

    protocol = "ollama"
    errors = Ollama()

    def read(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """``model``, ``input`` (a text or texts), ``dimensions``."""
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            raise BadEmbeddingRequest("model is required")
        raw = payload.get("input")
        inputs = [raw] if isinstance(raw, str) else raw
        if not isinstance(inputs, list) or not inputs or len(inputs) > _MAX_INPUTS:
            raise BadEmbeddingRequest("input must be a string or a non-empty array of strings")
        if not all(isinstance(i, str) for i in inputs):
            raise BadEmbeddingRequest("input must be a string or an array of strings")
        return EmbedParsed(
            model=model,
            stream=False,
            inputs=inputs,
            input_words=_words(inputs),
            dimensions=_dimensions(payload.get("dimensions"), model),
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """``{"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"}``."""
        assert isinstance(req, EmbedParsed)
        return dumps(
            {
                "model": req.model,
                "embeddings": vectors_of(req),
                "total_duration": 1_000_000,
                "load_duration": 100_000,
                "prompt_eval_count": usage.input,
            }
        )


def _known(payload: dict[str, Any], fields: frozenset[str], model: str) -> None:
    """Bedrock's answer to a body with a field the model does not take (its validation message)."""
    extra = sorted(set(payload) - fields)
    if extra:
        raise BadEmbeddingRequest(f"Malformed input request: extraneous key [{extra[0][:64]}] is not permitted")


class _InvokeModel(_EmbeddingCodec):
    """What Bedrock's InvokeModel codecs share: Bedrock's errors and the token-count header."""

    protocol = "bedrock"
    retry_headers = False
    request_id_header = "x-amzn-RequestId"
    errors = BedrockConverse()

    def answer_headers(self, req: Parsed, usage: SimUsage) -> dict[str, str]:
        """``X-Amzn-Bedrock-Input-Token-Count`` (and the output count, 0 for embeddings)."""
        return {
            "X-Amzn-Bedrock-Input-Token-Count": str(usage.input),
            "X-Amzn-Bedrock-Output-Token-Count": "0",
            self.request_id_header: f"req_sim{new_id()}",
        }


class TitanEmbeddingsCodec(_InvokeModel):
    """Amazon Titan Text Embeddings: ``{"inputText", "dimensions", "normalize", "embeddingTypes"}`` (V2)."""

    def read(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """One ``inputText``; V2's ``dimensions`` is 256, 512 or 1024 (G1 takes ``inputText`` alone)."""
        model = path_model or ""
        v2 = "v2" in model
        _known(
            payload,
            frozenset({"inputText", "dimensions", "normalize", "embeddingTypes"} if v2 else {"inputText"}),
            model,
        )
        text = payload["inputText"]
        if not isinstance(text, str) or not text:
            raise BadEmbeddingRequest("Malformed input request: inputText must be a non-empty string")
        size = payload.get("dimensions")
        if size is not None and size not in TITAN_SIZES:
            raise BadEmbeddingRequest("Malformed input request: dimensions must be one of 256, 512, 1024")
        return EmbedParsed(model=model, stream=False, inputs=[text], input_words=_words([text]), dimensions=size)

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """``{"embedding", "inputTextTokenCount", "embeddingsByType": {"float"}}``."""
        assert isinstance(req, EmbedParsed)
        (vector,) = vectors_of(req)
        return dumps({"embedding": vector, "inputTextTokenCount": usage.input, "embeddingsByType": {"float": vector}})


class CohereEmbeddingsCodec(_InvokeModel):
    """Cohere Embed v3 on Bedrock: ``{"texts", "input_type", "truncate", "embedding_types"}``."""

    def read(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """1 to 96 texts of at most 2,048 characters, a known ``input_type``; vectors of 1024 numbers."""
        model = path_model or ""
        _known(payload, frozenset({"texts", "images", "input_type", "truncate", "embedding_types"}), model)
        texts = payload["texts"]
        if not isinstance(texts, list) or not 0 < len(texts) <= 96:
            raise BadEmbeddingRequest("Malformed input request: texts must hold 1 to 96 items")
        if not all(isinstance(t, str) and len(t) <= 2048 for t in texts):
            raise BadEmbeddingRequest("Malformed input request: each text is a string of at most 2048 characters")
        if payload.get("input_type") not in ("search_document", "search_query", "classification", "clustering"):
            raise BadEmbeddingRequest("Malformed input request: input_type is required")
        if payload.get("truncate", "NONE") not in ("NONE", "START", "END"):
            raise BadEmbeddingRequest("Malformed input request: truncate must be NONE, START or END")
        types = payload.get("embedding_types")
        if types is not None and (
            not isinstance(types, list) or not set(types) <= {"float", "int8", "uint8", "binary", "ubinary"}
        ):
            raise BadEmbeddingRequest("Malformed input request: unknown embedding_types")
        return EmbedParsed(
            model=model,
            stream=False,
            inputs=texts,
            input_words=_words(texts),
            include_usage=types is not None,  # here: whether the answer is by type
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """``{"id", "texts", "embeddings", "response_type"}``: a list of vectors, or by type when types were asked."""
        assert isinstance(req, EmbedParsed)
        vectors = vectors_of(req)
        if req.include_usage:
            return dumps(
                {
                    "id": f"sim-{new_id()}",
                    "texts": req.inputs,
                    "embeddings": {"float": vectors},
                    "response_type": "embeddings_by_type",
                }
            )
        return dumps(
            {"id": f"sim-{new_id()}", "texts": req.inputs, "embeddings": vectors, "response_type": "embeddings_floats"}
        )


class VertexPredictCodec(_EmbeddingCodec):
    """Vertex AI's Google publisher ``:predict``: ``{"instances": [{"content"}], "parameters"}``."""

    protocol = "vertex-gemini"
    errors = VertexGemini()

    def read(self, payload: dict[str, Any], path_model: str | None) -> EmbedParsed:
        """``instances[].content`` (250 at most, one for ``gemini-embedding-001``); ``outputDimensionality``."""
        model = path_model or ""
        instances = payload["instances"]
        cap = 1 if model.partition("@")[0] in _ONE_INSTANCE else 250
        if not isinstance(instances, list) or not 0 < len(instances) <= cap:
            raise BadEmbeddingRequest(f"instances must hold 1 to {cap} items for {model}")
        inputs: list[str] = []
        for item in instances:
            text = item["content"]
            if not isinstance(text, str) or not text:
                raise BadEmbeddingRequest("each instance needs a non-empty content")
            inputs.append(text)
        parameters = payload.get("parameters") or {}
        if not isinstance(parameters, dict) or set(parameters) - {"outputDimensionality", "autoTruncate"}:
            raise BadEmbeddingRequest("parameters takes outputDimensionality and autoTruncate")
        return EmbedParsed(
            model=model,
            stream=False,
            inputs=inputs,
            input_words=_words(inputs),
            dimensions=_dimensions(parameters.get("outputDimensionality"), model),
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """``predictions[].embeddings`` with ``values`` and ``statistics`` (one token per word of the input)."""
        assert isinstance(req, EmbedParsed)
        predictions = [
            {"embeddings": {"values": v, "statistics": {"token_count": _words([t]), "truncated": False}}}
            for t, v in zip(req.inputs, vectors_of(req), strict=True)
        ]
        return dumps({"predictions": predictions, "metadata": {"billableCharacterCount": sum(map(len, req.inputs))}})


_TITAN = TitanEmbeddingsCodec()
_COHERE = CohereEmbeddingsCodec()


def invoke_codec(model: str) -> _EmbeddingCodec | None:
    """The InvokeModel codec of a Bedrock model id (None: the simulator has no InvokeModel body for it)."""
    name = model.lower()
    if "titan-embed-text" in name:
        return _TITAN
    if "cohere.embed-" in name:
        return _COHERE
    return None
