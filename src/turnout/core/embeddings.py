"""Embeddings: the request, a provider's answer, the vector space a route serves, batches, and the reply.

An embedding call differs from a chat in one rule: its vectors are only useful next to vectors of the same
*space* (one model, one output size). So a route's embedding entries are those whose :class:`Space` equals the
space of the entry the caller asked for (the same model on another deployment, key, region or cloud, or a
model ``[embeddings.spaces]`` declares the same); an entry that reaches another model is never tried.

Large inputs are split into batches no larger than every eligible entry's caps (:func:`batches`), and the
answers are put back in input order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from turnout.core.attribution import Attempt, FallbackNotice, RouteRef, total_cost
from turnout.core.errors import InvalidRequest
from turnout.core.types import Usage

#: One input: a text, or a text already tokenized (a list of token ids, as OpenAI takes them).
EmbedInput: TypeAlias = str | tuple[int, ...]

#: The most inputs one call takes (each provider's batches are smaller; the call is split into them).
MAX_INPUTS = 100_000
#: The longest text one input may be, in characters (every provider's per-input limit is far below it).
MAX_INPUT_CHARS = 1_000_000
#: The largest ``dimensions`` a caller may ask for.
MAX_DIMENSIONS = 65_536


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbedRequest:
    """What to embed.

    Attributes:
        inputs: The texts (or token arrays), in order; never empty.
        dimensions: The output size asked for (None: the model's own).
        user: The caller's end-user id, for providers that take one (OpenAI's ``user``).
    """

    inputs: tuple[EmbedInput, ...]
    dimensions: int | None = None
    user: str | None = None

    @property
    def token_arrays(self) -> bool:
        """Whether some input is a token array rather than a text."""
        return any(type(i) is not str for i in self.inputs)


def embed_request(
    inputs: str | Iterable[str] | Iterable[Sequence[int]], *, dimensions: int | None = None, user: str | None = None
) -> EmbedRequest:
    """A checked :class:`EmbedRequest` from a caller's values.

    Raises:
        InvalidRequest: No input, too many, an empty text, an input that is neither a text nor a list of token
            ids, a ``dimensions`` that is not a positive integer, or a ``user`` that is no short string (``path``
            names the argument). Nothing is sent.
    """
    items: list[EmbedInput] = []
    values: Iterable[object] = [inputs] if isinstance(inputs, str) else inputs
    for value in values:
        if len(items) >= MAX_INPUTS:
            raise InvalidRequest(f"an embedding call takes at most {MAX_INPUTS} inputs", path="inputs")
        if isinstance(value, str):
            if not value:  # OpenAI refuses it, and no provider has a vector for nothing
                raise InvalidRequest("an empty text has no embedding", path=f"inputs[{len(items)}]")
            if len(value) > MAX_INPUT_CHARS:
                raise InvalidRequest(f"longer than {MAX_INPUT_CHARS} characters", path=f"inputs[{len(items)}]")
            items.append(value)
        elif isinstance(value, list | tuple) and value and all(type(t) is int and 0 <= t < 2**32 for t in value):
            items.append(tuple(value))
        else:
            raise InvalidRequest("neither a text nor a non-empty list of token ids", path=f"inputs[{len(items)}]")
    if not items:
        raise InvalidRequest("an embedding call needs at least one input", path="inputs")
    if dimensions is not None and (type(dimensions) is not int or not 0 < dimensions <= MAX_DIMENSIONS):
        raise InvalidRequest(f"must be an integer from 1 to {MAX_DIMENSIONS}", path="dimensions")
    if user is not None and (not isinstance(user, str) or len(user) > 256):
        raise InvalidRequest("must be a string of at most 256 characters", path="user")
    return EmbedRequest(inputs=tuple(items), dimensions=dimensions, user=user)


def estimated_tokens(item: EmbedInput) -> int:
    """A conservative token count of one input: a token array's length, else one token per 3 bytes of UTF-8.

    English runs about four characters a token and CJK about one character (3 bytes) a token, so this rarely
    counts low; it sizes batches against token caps and prices an answer that reported no usage.
    """
    if type(item) is not str:
        return len(item)
    size = len(item) if item.isascii() else len(item.encode("utf-8"))
    return max(1, math.ceil(size / 3))


@dataclass(frozen=True, slots=True, kw_only=True)
class Embeddings:
    """One provider's answer to one batch.

    Attributes:
        vectors: One vector per input of the batch, in input order (lists as decoded; never mutated).
        usage: The input tokens the provider counted (None: it reported none).
        model: The model the provider says answered, when it says.
    """

    vectors: Sequence[list[float]]
    usage: Usage | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddingLimits:
    """What one adapter's embedding endpoint takes.

    Attributes:
        max_inputs: The most inputs one request may carry (OpenAI 2,048, Google 100).
        max_tokens: The most tokens one request may carry, summed over its inputs (None: no known cap).
        dimensions: Whether it takes an output size (OpenAI ``dimensions``, Gemini ``outputDimensionality``).
        sizes: The only output sizes it makes, when it makes only some (Titan v2: 256, 512, 1024; a model of one
            fixed size, Cohere v3's 1024, lists that one and is not sent it); empty: any size up to the model's.
        token_arrays: Whether it takes inputs as token ids.
        user: Whether it takes the caller's end-user id.
        parallel: How many of its requests one call keeps in flight (an endpoint of one input a request is
            sent several at once; the others one after another).
    """

    max_inputs: int
    max_tokens: int | None = None
    dimensions: bool = True
    sizes: tuple[int, ...] = ()
    token_arrays: bool = False
    user: bool = False
    parallel: int = 1

    def refusal(self, request: EmbedRequest) -> str | None:
        """Why this endpoint cannot take ``request`` as asked (None: it can); a parameter is never dropped."""
        if request.dimensions is not None and not self.dimensions:
            return "does not take dimensions"
        if request.dimensions is not None and self.sizes and request.dimensions not in self.sizes:
            return f"makes vectors of {_sizes_text(self.sizes)} dimensions only, not {request.dimensions}"
        if request.user is not None and not self.user:
            return "does not take user"
        if not self.token_arrays and request.token_arrays:
            return "does not take token arrays as input"
        return None


def _sizes_text(sizes: tuple[int, ...]) -> str:
    """``1024``, ``256 or 512``, ``256, 512 or 1024``."""
    names = [str(n) for n in sizes]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@dataclass(frozen=True, slots=True)
class Space:
    """A vector space: the model that makes the vectors (its canonical name) and their size (None: the model's own)."""

    name: str
    dimensions: int | None


def canonical_model(model: str) -> str:
    """A model's name without the prefixes that do not change it (Gemini's ``models/``)."""
    return model.removeprefix("models/")


def space_of(model: str, dimensions: int | None, spaces: Mapping[str, str]) -> Space:
    """The space ``model`` produces at ``dimensions``: the space ``[embeddings.spaces]`` names for it, else its own."""
    name = canonical_model(model)
    return Space(spaces.get(name, name), dimensions)


def batches(count: int, sizes: Sequence[int], max_inputs: int, max_tokens: int | None) -> list[range]:
    """Consecutive index ranges over ``count`` inputs, each within ``max_inputs`` and (when known) ``max_tokens``.

    ``sizes`` are the inputs' estimated tokens (unread without ``max_tokens``). An input larger than ``max_tokens``
    alone gets a batch of its own (the provider judges it: the per-input limit is the model's).
    """
    out: list[range] = []
    start = 0
    tokens = 0
    if max_tokens is None:  # only the input cap: no sizes are needed
        return [range(start, min(start + max_inputs, count)) for start in range(0, count, max_inputs)]
    for i in range(count):
        size = sizes[i]
        full = i - start >= max_inputs or (i > start and tokens + size > max_tokens)
        if full:
            out.append(range(start, i))
            start, tokens = i, 0
        tokens += size
    if start < count:
        out.append(range(start, count))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbedReply:
    """An accepted embedding call with its attribution.

    Attributes:
        vectors: One vector per input, in input order.
        usage: The input tokens of the accepted batches (rejected attempts keep theirs in :attr:`attempts`);
            a batch whose provider reported no usage counts its estimate (:func:`estimated_tokens`).
        requested: The profile (``family.alias``) and model the caller asked for.
        served: The profile and model that served; with several batches, the latest entry that served one.
        fallback: The notice when another entry served some batch; None when the requested entry served all.
        attempts: Every attempt of the call, in order, over all batches.
        call_id: The id of this call in the ledger.
        batches: How many requests the inputs were split into.
    """

    vectors: tuple[list[float], ...]
    usage: Usage
    requested: RouteRef
    served: RouteRef
    fallback: FallbackNotice | None
    attempts: tuple[Attempt, ...]
    call_id: str
    batches: int = 1

    @property
    def cost_usd(self) -> float | None:
        """What the whole call cost: the sum over every attempt with a known price (None if none is known)."""
        return total_cost(self.attempts)

    @property
    def model(self) -> str:
        """The served model."""
        return self.served.model

    @property
    def dimensions(self) -> int:
        """The length of the vectors."""
        return len(self.vectors[0]) if self.vectors else 0

    @property
    def notice(self) -> str | None:
        """The fallback notice to show a user (as :attr:`turnout.reply.Reply.notice`)."""
        return self.fallback.text if self.fallback is not None and self.fallback.shown else None


def looks_like_embedding_model(model: str) -> bool:
    """Whether a model's name says it makes embeddings (``text-embedding-3-small``, ``nomic-embed-text``, ...)."""
    return "embed" in model.lower()


def space_notes(
    entries: Sequence[tuple[str, str | None]], requested: str, spaces: Mapping[str, str], *, protocols: Sequence[str]
) -> list[str]:
    """What an embedding call does with a route's entries, for ``turnout check``: one line per entry it skips.

    Args:
        entries: ``(profile, pinned model or None)`` of each entry, in order.
        requested: The model the route asks for (what an unpinned entry sends).
        spaces: ``[embeddings.spaces]`` as model name → space name.
        protocols: Each entry's wire protocol (``anthropic`` serves no embeddings).
    """
    served = [model if model is not None else requested for _, model in entries]
    space = space_of(served[0], None, spaces)
    notes: list[str] = []
    for i, ((profile, _), model, protocol) in enumerate(zip(entries, served, protocols, strict=True)):
        if i == 0:
            continue
        if protocol == "anthropic":
            notes.append(f"entry {i + 1} ({profile}/{model}) is skipped: it serves no embeddings")
        elif space_of(model, None, spaces) != space:
            notes.append(f"entry {i + 1} ({profile}/{model}) is skipped: another vector space than {space.name}")
    return notes
