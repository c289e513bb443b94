"""The embedding wire of each family: the endpoint, the request body, the answer, and what the endpoint takes.

An :class:`EmbeddingWire` is the one seam a family fills to serve embeddings. Its adapter builds one (from its
own settings: endpoint, API version, the model's path) in :meth:`~turnout.providers.base.HTTPAdapter.embedding_wire`,
and :meth:`~turnout.providers.base.HTTPAdapter.embed` runs the request cycle around it: send, classify an error
answer with the adapter's own error parser, read headroom, decode, check one vector per input. A wire only says
what the protocol looks like:

- OpenAI and OpenAI-compatible vendors, Azure OpenAI: ``POST {base}/embeddings`` (:class:`OpenAIEmbeddings`);
- Gemini: ``:embedContent`` for one input, ``:batchEmbedContents`` for more (:class:`GeminiEmbeddings`);
- Ollama: ``POST /api/embed`` (:class:`OllamaEmbeddings`);
- Bedrock's InvokeModel (``POST /model/{modelId}/invoke``), whose body is the model's own: Amazon Titan Text
  Embeddings, one input a request (:class:`TitanEmbeddings`), and Cohere Embed v3, 96 (:class:`CohereEmbeddings`);
- Vertex AI's Google publisher: ``:predict`` with ``instances`` (:class:`VertexEmbeddings`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from yarl import URL

from turnout.core.embeddings import EmbeddingLimits, Embeddings, EmbedRequest
from turnout.core.types import Usage, provider_count

#: OpenAI's caps per request: 2,048 inputs and 300,000 tokens summed over them.
OPENAI_LIMITS = EmbeddingLimits(max_inputs=2048, max_tokens=300_000, dimensions=True, token_arrays=True, user=True)
#: Other OpenAI-compatible vendors: OpenAI's caps, ``dimensions`` (a vendor that ignores it is caught by the vector
#: length check), but no token arrays or ``user``, which few of them take.
COMPATIBLE_LIMITS = EmbeddingLimits(max_inputs=2048, max_tokens=300_000, dimensions=True)
#: Google's ``batchEmbedContents`` takes at most 100 requests.
GEMINI_LIMITS = EmbeddingLimits(max_inputs=100, dimensions=True)
#: Ollama documents no cap; 512 inputs keep one request's work (and its time bound) moderate on a local server.
OLLAMA_LIMITS = EmbeddingLimits(max_inputs=512, dimensions=True)
#: Amazon Titan Text Embeddings V2: one ``inputText`` a request (sent 8 at once), 256, 512 or 1024 dimensions.
TITAN_V2_LIMITS = EmbeddingLimits(max_inputs=1, dimensions=True, sizes=(256, 512, 1024), parallel=8)
#: Titan Text Embeddings G1 (``amazon.titan-embed-text-v1``): one ``inputText``, its own 1,536 dimensions only.
TITAN_V1_LIMITS = EmbeddingLimits(max_inputs=1, dimensions=True, sizes=(1536,), parallel=8)
#: Cohere Embed v3 on Bedrock: 96 ``texts`` a request, always 1,024 dimensions (not a parameter it takes).
COHERE_LIMITS = EmbeddingLimits(max_inputs=96, dimensions=True, sizes=(1024,))
#: Vertex AI's text embedding models (``text-embedding-005``, ``text-multilingual-embedding-002``, gecko):
#: 250 instances and 20,000 tokens a request.
VERTEX_LIMITS = EmbeddingLimits(max_inputs=250, max_tokens=20_000, dimensions=True)
#: ``gemini-embedding-001`` on Vertex AI takes one instance a request (sent 8 at once).
VERTEX_GEMINI_LIMITS = EmbeddingLimits(max_inputs=1, dimensions=True, parallel=8)
#: The largest norm a vector may have: every component then fits a float32 (3.4e38), as the ``base64`` encoding
#: needs; any real embedding is far below it (unit vectors, or norms in the hundreds).
MAX_NORM = 3.4028234663852886e38
#: The response header in which Bedrock reports an InvokeModel call's input tokens.
BEDROCK_TOKENS_HEADER = "X-Amzn-Bedrock-Input-Token-Count"


class EmbeddingWire(ABC):
    """One family's embedding protocol (see the module docstring); values, no I/O.

    Attributes:
        limits: What the endpoint takes.
        tokens_header: The response header carrying the input tokens, read when the body reports none.
    """

    limits: EmbeddingLimits
    tokens_header: str | None = None

    @abstractmethod
    def url(self, model: str, count: int) -> str | URL:
        """The endpoint for a request of ``count`` inputs to ``model`` (a model in the path is escaped)."""

    @abstractmethod
    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """The request body (every parameter of ``request`` is sent or was refused by :attr:`limits`)."""

    @abstractmethod
    def parse(self, data: Any, count: int) -> Embeddings:
        """A decoded answer to a request of ``count`` inputs (may raise ``KeyError``/``TypeError``/...: malformed)."""


def _vector(value: Any) -> list[float]:
    """A vector as decoded, checked to be a non-empty list of finite numbers that fit a float32.

    The check is ``math.hypot(*value)``, the vector's norm, computed in C: it raises ``TypeError`` on anything but
    numbers (a string, a null, a nested list), is infinite or NaN when a component is, and is at most
    :data:`MAX_NORM` only when every component fits a float32 (the gateway's ``base64`` is float32: a larger one
    would become ``inf`` there). A Python loop over every component of a large call would cost more than the rest
    of the call's own work; ``hypot`` costs what ``sum`` does (about 25 µs for 3,072 numbers), a fraction of
    building an ``array`` of them (``bench/embeddings.py``).

    Raises:
        TypeError: Not a non-empty list of numbers.
        ValueError: A component is infinite or NaN, or the vector is beyond the float32 range.
    """
    if type(value) is not list or not value:
        raise TypeError("a vector is not a non-empty list")
    try:
        norm = math.hypot(*value)
    except OverflowError:  # an integer too large for a float
        raise ValueError("a vector's component is out of range") from None
    if not norm <= MAX_NORM:  # NaN compares false
        raise ValueError("a vector's component is not a finite float32")
    return value


def _tokens(value: Any) -> int | None:
    """A provider's token count, bounded where it is parsed (:func:`provider_count`).

    None when absent or not believable: the batch's estimate is billed instead.
    """
    if isinstance(value, float) and value.is_integer():  # a protobuf number (Vertex's ``token_count``)
        value = int(value)
    count, clamped = provider_count(value)
    return None if value is None or clamped else count


def header_tokens(value: str | None) -> Usage | None:
    """The input tokens a response header reports (None: absent or not a whole number in range)."""
    if value is None or not (0 < len(value) <= 19 and value.isascii() and value.isdigit()):
        return None
    tokens = _tokens(int(value))
    return Usage(input_tokens=tokens) if tokens is not None else None


class OpenAIEmbeddings(EmbeddingWire):
    """OpenAI's ``/embeddings`` (and every OpenAI-compatible vendor's, Azure's with its ``api-version``).

    Args:
        base_url: The profile's endpoint (for Azure, its deployment's URL, with or without a query).
        api_version: Azure's ``api-version`` (None: not Azure).
        limits: What the vendor's endpoint takes.
    """

    def __init__(self, base_url: str, *, api_version: str | None = None, limits: EmbeddingLimits = OPENAI_LIMITS):
        base, _, query = base_url.partition("?")
        base = base.rstrip("/").removesuffix("/chat/completions")
        if api_version is not None and "api-version=" not in query:
            query = f"{query}&api-version={api_version}" if query else f"api-version={api_version}"
        self._url = f"{base}/embeddings?{query}" if query else f"{base}/embeddings"
        self.limits = limits

    def url(self, model: str, count: int) -> str:
        """``{base}/embeddings`` (Azure: with ``?api-version=``)."""
        return self._url

    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """``model``, ``input`` (texts, or token arrays), ``encoding_format: float``, ``dimensions``, ``user``."""
        body: dict[str, Any] = {
            "model": model,
            "input": [i if type(i) is str else list(i) for i in request.inputs],
            "encoding_format": "float",  # base64 is the gateway's to write: vectors are read as numbers here
        }
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        if request.user is not None:
            body["user"] = request.user
        return body

    def parse(self, data: Any, count: int) -> Embeddings:
        """``data[]`` by ``index`` (an answer may list them in any order), ``usage.prompt_tokens``, ``model``."""
        items = data["data"]
        if type(items) is not list or len(items) != count:
            raise ValueError("the answer does not hold one vector per input")
        vectors: list[list[float] | None] = [None] * count
        for item in items:
            index = item["index"]
            if type(index) is not int or not 0 <= index < count or vectors[index] is not None:
                raise ValueError("a vector's index is out of range or repeated")
            vectors[index] = _vector(item["embedding"])
        usage = data.get("usage")
        tokens = _tokens(usage.get("prompt_tokens")) if isinstance(usage, Mapping) else None
        model = data.get("model")
        return Embeddings(
            vectors=vectors,  # type: ignore[arg-type]  # every index was filled: the count matched, none repeated
            usage=Usage(input_tokens=tokens) if tokens is not None else None,
            model=model if type(model) is str else None,
        )


class GeminiEmbeddings(EmbeddingWire):
    """Gemini's ``:embedContent`` (one input) and ``:batchEmbedContents`` (more).

    ``dimensions`` is sent as ``outputDimensionality``.

    Args:
        model_path: The adapter's checked, escaped ``{base}/models/{model}`` for a model.
    """

    limits = GEMINI_LIMITS

    def __init__(self, model_path: Callable[[str], str]) -> None:
        self._path = model_path

    def url(self, model: str, count: int) -> str:
        """``{base}/models/{model}:embedContent`` or ``:batchEmbedContents``."""
        return self._path(model) + (":embedContent" if count == 1 else ":batchEmbedContents")

    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """One ``content`` (``embedContent``), or ``requests[]`` of them each naming the model."""
        name = model if model.startswith("models/") else f"models/{model}"
        items: list[dict[str, Any]] = []
        for text in request.inputs:
            item: dict[str, Any] = {"model": name, "content": {"parts": [{"text": text}]}}
            if request.dimensions is not None:
                item["outputDimensionality"] = request.dimensions
            items.append(item)
        if len(items) == 1:
            return items[0]
        return {"requests": items}

    def parse(self, data: Any, count: int) -> Embeddings:
        """``embedding.values`` or ``embeddings[].values``; usage when ``usageMetadata`` says it."""
        if count == 1 and "embedding" in data:
            vectors = [_vector(data["embedding"]["values"])]
        else:
            items = data["embeddings"]
            if type(items) is not list or len(items) != count:
                raise ValueError("the answer does not hold one vector per input")
            vectors = [_vector(item["values"]) for item in items]
        meta = data.get("usageMetadata")
        tokens = _tokens(meta.get("promptTokenCount")) if isinstance(meta, Mapping) else None
        return Embeddings(vectors=vectors, usage=Usage(input_tokens=tokens) if tokens is not None else None)


class OllamaEmbeddings(EmbeddingWire):
    """Ollama's ``/api/embed`` (``dimensions`` as is; ``prompt_eval_count`` is the usage).

    Args:
        root: The server root (``http://127.0.0.1:11434``).
    """

    limits = OLLAMA_LIMITS

    def __init__(self, root: str) -> None:
        self._url = f"{root}/api/embed"

    def url(self, model: str, count: int) -> str:
        """``{root}/api/embed``."""
        return self._url

    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """``model``, ``input`` and ``dimensions``."""
        body: dict[str, Any] = {"model": model, "input": list(request.inputs)}
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        return body

    def parse(self, data: Any, count: int) -> Embeddings:
        """``embeddings[]``, ``prompt_eval_count``, ``model``."""
        items = data["embeddings"]
        if type(items) is not list or len(items) != count:
            raise ValueError("the answer does not hold one vector per input")
        vectors: Sequence[list[float]] = [_vector(v) for v in items]
        tokens = _tokens(data.get("prompt_eval_count"))
        model = data.get("model")
        return Embeddings(
            vectors=vectors,
            usage=Usage(input_tokens=tokens) if tokens is not None else None,
            model=model if type(model) is str else None,
        )


def _texts(request: EmbedRequest) -> list[str]:
    """The request's inputs as texts (a wire that takes no token arrays refused them in its limits)."""
    return [i if type(i) is str else " ".join(map(str, i)) for i in request.inputs]


class TitanEmbeddings(EmbeddingWire):
    """Amazon Titan Text Embeddings on Bedrock's InvokeModel: ``{"inputText", "dimensions", "normalize"}``.

    One input a request (the walk sends several at once); the answer is ``{"embedding", "inputTextTokenCount"}``.
    G1 (``amazon.titan-embed-text-v1``) takes ``inputText`` alone.

    Args:
        invoke_url: The adapter's checked, escaped ``{base}/model/{modelId}/invoke`` for a model.
        v2: Whether the model is V2 (which takes ``dimensions`` and ``normalize``).
    """

    tokens_header = BEDROCK_TOKENS_HEADER

    def __init__(self, invoke_url: Callable[[str], URL], *, v2: bool) -> None:
        self._url = invoke_url
        self._v2 = v2
        self.limits = TITAN_V2_LIMITS if v2 else TITAN_V1_LIMITS

    def url(self, model: str, count: int) -> URL:
        """``{base}/model/{modelId}/invoke``."""
        return self._url(model)

    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """``inputText``; for V2 ``normalize: true`` (unit vectors, as the other providers') and ``dimensions``."""
        (text,) = _texts(request)
        if not self._v2:
            return {"inputText": text}
        body: dict[str, Any] = {"inputText": text, "normalize": True}
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        return body

    def parse(self, data: Any, count: int) -> Embeddings:
        """``embedding`` (else ``embeddingsByType.float``) and ``inputTextTokenCount``."""
        if count != 1:
            raise ValueError("a Titan answer holds one vector")
        raw = data.get("embedding")
        if raw is None:
            raw = data["embeddingsByType"]["float"]
        tokens = _tokens(data.get("inputTextTokenCount"))
        return Embeddings(vectors=[_vector(raw)], usage=Usage(input_tokens=tokens) if tokens is not None else None)


class CohereEmbeddings(EmbeddingWire):
    """Cohere Embed v3 on Bedrock's InvokeModel: ``{"texts", "input_type", "truncate", "embedding_types"}``.

    Texts are embedded as ``search_document`` (Cohere's type for what is stored and searched, and one type for
    every call, so a call's vectors are comparable with those of any other); ``truncate: NONE`` makes a text over
    the model's limit an error rather than a vector of its beginning. The answer's vectors are ``embeddings``, a
    list (``embeddings_floats``) or by type (``embeddings_by_type``); the usage is Bedrock's token header.

    Args:
        invoke_url: The adapter's checked, escaped ``{base}/model/{modelId}/invoke`` for a model.
    """

    limits = COHERE_LIMITS
    tokens_header = BEDROCK_TOKENS_HEADER

    def __init__(self, invoke_url: Callable[[str], URL]) -> None:
        self._url = invoke_url

    def url(self, model: str, count: int) -> URL:
        """``{base}/model/{modelId}/invoke``."""
        return self._url(model)

    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """The texts, ``search_document``, ``truncate: NONE`` and float vectors (``dimensions`` is never sent)."""
        return {
            "texts": _texts(request),
            "input_type": "search_document",
            "truncate": "NONE",
            "embedding_types": ["float"],
        }

    def parse(self, data: Any, count: int) -> Embeddings:
        """``embeddings`` as a list of vectors, or ``embeddings.float``."""
        items = data["embeddings"]
        if isinstance(items, Mapping):
            items = items["float"]
        if type(items) is not list or len(items) != count:
            raise ValueError("the answer does not hold one vector per input")
        return Embeddings(vectors=[_vector(v) for v in items])


class VertexEmbeddings(EmbeddingWire):
    """Vertex AI's Google publisher ``:predict``: ``{"instances": [{"content"}], "parameters"}``.

    ``dimensions`` is sent as ``parameters.outputDimensionality``. The answer is ``predictions[].embeddings``:
    ``values`` and ``statistics.token_count``, summed into the batch's usage.

    Args:
        model_path: The adapter's checked, escaped ``…/publishers/google/models/{model}`` for a model.
        limits: What the model takes (250 instances, or one for ``gemini-embedding-001``).
    """

    def __init__(self, model_path: Callable[[str], str], limits: EmbeddingLimits) -> None:
        self._path = model_path
        self.limits = limits

    def url(self, model: str, count: int) -> str:
        """``…/models/{model}:predict``."""
        return self._path(model) + ":predict"

    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """One instance per input; ``parameters`` only when there is one to send."""
        body: dict[str, Any] = {"instances": [{"content": text} for text in _texts(request)]}
        if request.dimensions is not None:
            body["parameters"] = {"outputDimensionality": request.dimensions}
        return body

    def parse(self, data: Any, count: int) -> Embeddings:
        """``predictions[i].embeddings.values``; the token counts summed when every prediction has one."""
        items = data["predictions"]
        if type(items) is not list or len(items) != count:
            raise ValueError("the answer does not hold one vector per input")
        vectors: list[list[float]] = []
        total: int | None = 0
        for item in items:
            embedding = item["embeddings"]
            vectors.append(_vector(embedding["values"]))
            statistics = embedding.get("statistics")
            tokens = _tokens(statistics.get("token_count")) if isinstance(statistics, Mapping) else None
            total = None if tokens is None or total is None else total + tokens
        tokens = _tokens(total)
        return Embeddings(vectors=vectors, usage=Usage(input_tokens=tokens) if tokens is not None else None)
