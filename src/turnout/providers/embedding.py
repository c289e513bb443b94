"""The embedding wire of each family: the endpoint, the request body, the answer, and what the endpoint takes.

An :class:`EmbeddingWire` is the one seam a family fills to serve embeddings. Its adapter builds one (from its
own settings: endpoint, API version, the model's path) in :meth:`~turnout.providers.base.HTTPAdapter.embedding_wire`,
and :meth:`~turnout.providers.base.HTTPAdapter.embed` runs the request cycle around it: send, classify an error
answer with the adapter's own error parser, read headroom, decode, check one vector per input. A wire only says
what the protocol looks like:

- OpenAI and OpenAI-compatible vendors, Azure OpenAI: ``POST {base}/embeddings`` (:class:`OpenAIEmbeddings`);
- Gemini: ``:embedContent`` for one input, ``:batchEmbedContents`` for more (:class:`GeminiEmbeddings`);
- Ollama: ``POST /api/embed`` (:class:`OllamaEmbeddings`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from turnout.embeddings import EmbeddingLimits, Embeddings, EmbedRequest
from turnout.types import Usage

#: OpenAI's caps per request: 2,048 inputs and 300,000 tokens summed over them.
OPENAI_LIMITS = EmbeddingLimits(max_inputs=2048, max_tokens=300_000, dimensions=True, token_arrays=True, user=True)
#: Other OpenAI-compatible vendors: OpenAI's caps, ``dimensions`` (a vendor that ignores it is caught by the vector
#: length check), but no token arrays or ``user``, which few of them take.
COMPATIBLE_LIMITS = EmbeddingLimits(max_inputs=2048, max_tokens=300_000, dimensions=True)
#: Google's ``batchEmbedContents`` takes at most 100 requests.
GEMINI_LIMITS = EmbeddingLimits(max_inputs=100, dimensions=True)
#: Ollama documents no cap; 512 inputs keep one request's work (and its time bound) moderate on a local server.
OLLAMA_LIMITS = EmbeddingLimits(max_inputs=512, dimensions=True)

_MAX_TOKENS_REPORTED = 10**12  # a usage count above this is not believed


class EmbeddingWire(ABC):
    """One family's embedding protocol (see the module docstring); values, no I/O."""

    limits: EmbeddingLimits

    @abstractmethod
    def url(self, model: str, count: int) -> str:
        """The endpoint for a request of ``count`` inputs to ``model`` (a model in the path is escaped)."""

    @abstractmethod
    def body(self, request: EmbedRequest, model: str) -> dict[str, Any]:
        """The request body (every parameter of ``request`` is sent or was refused by :attr:`limits`)."""

    @abstractmethod
    def parse(self, data: Any, count: int) -> Embeddings:
        """A decoded answer to a request of ``count`` inputs (may raise ``KeyError``/``TypeError``/...: malformed)."""


def _vector(value: Any) -> list[float]:
    """A vector as decoded, checked to be a non-empty list of numbers.

    The check is ``sum(value)``, which raises ``TypeError`` on anything but numbers, in C (a string, a null, a
    nested list): a Python loop over every component of a large call would cost more than the rest of the call's
    own work, and ``sum`` costs a quarter of building an ``array`` of them (``bench/embeddings.py``).
    """
    if type(value) is not list or not value:
        raise TypeError("a vector is not a non-empty list")
    sum(value)
    return value


def _tokens(value: Any) -> int | None:
    """A provider's token count, bounded where it is parsed (None: absent or not believable)."""
    if type(value) is int and 0 <= value <= _MAX_TOKENS_REPORTED:
        return value
    return None


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
