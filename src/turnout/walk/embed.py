"""The embedding walk: a route's entries of one vector space, each batch walked with the chat walk's own tries.

An embedding call (:func:`embed_through`) asks the route's first entry for its space
(:func:`turnout.core.embeddings.space_of`) and keeps only the entries of that space that serve embeddings and take
the request's parameters (:func:`space_entries`); an entry reaching another model is never tried, whatever the
fallback order says. The inputs are split to the smallest caps among those entries, and each batch is walked on
its own: the same order, admission (cooldowns, circuit breakers, the panic rule), tries, backoff, Retry-After,
key rotation and policy as a chat, through :meth:`turnout.walk.walk.Walk.tries`, so a failed batch is retried (and
fails over) alone while the batches already answered are kept. Batches go one after another, or, where every
eligible entry takes one input a request (:attr:`EmbeddingLimits.parallel`), several at once.

Every batch of a call must answer vectors of one length (:class:`Agreement`): the first batch answered sets it,
and a later batch whose vectors are of another length is a non-retryable provider error of that try, so the
batch's walk moves on to its next entry (an entry whose model answers another length would again). The batches
already answered are kept, not asked again: they were billed, and their length is the call's. A call whose
remaining entries all answer another length fails as any batch that no entry could serve.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from turnout.core.attribution import Attempt, DispatchScope, RouteRef, new_attempt
from turnout.core.describe import aggregate_message
from turnout.core.embeddings import (
    EmbeddingLimits,
    Embeddings,
    EmbedRequest,
    Space,
    batches,
    estimated_tokens,
    space_of,
)
from turnout.core.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    ErrorClass,
    ProtocolError,
    UnsupportedRequest,
)
from turnout.core.estimate import embedding_usage
from turnout.core.provider import Provider
from turnout.core.types import Usage
from turnout.ledger.pricing import Catalogue
from turnout.walk.entry import Candidate, Entry
from turnout.walk.keys import KeyChoice
from turnout.walk.reliable import ReliableProvider
from turnout.walk.walk import Admission, Walk


@dataclass(frozen=True, slots=True, kw_only=True)
class SpaceEntries:
    """The entries of a route that may serve an embedding request, and the caps its batches keep to.

    Attributes:
        space: The vector space of the route's first entry at the request's ``dimensions``.
        entries: The indices of the entries that produce that space and take the request.
        skipped: ``(index, reason)`` of every other entry (another space, no embeddings, a parameter it lacks).
        max_inputs: The smallest input cap among :attr:`entries`.
        max_tokens: The smallest token cap among them (None: none is known).
        parallel: How many batches the call keeps in flight: the smallest among them.
    """

    space: Space
    entries: frozenset[int]
    skipped: tuple[tuple[int, str], ...]
    max_inputs: int
    max_tokens: int | None
    parallel: int = 1


def space_entries(
    reliable: ReliableProvider, model: str, request: EmbedRequest, spaces: Mapping[str, str]
) -> SpaceEntries:
    """Which entries of ``reliable`` (a route) may serve ``request`` for ``model`` (see :class:`SpaceEntries`).

    Raises:
        UnsupportedRequest: The first entry serves no embeddings or does not take a parameter of the request
            (it is refused before any attempt, never dropped).
    """
    entries = reliable.entries
    first = entries[0]
    first_model = first.model_for(model)
    limits = _limits(first, first_model)
    if limits is None:
        raise UnsupportedRequest(f"{first.profile} serves no embeddings")
    refusal = limits.refusal(request)
    if refusal is not None:
        raise UnsupportedRequest(f"{first.profile} {refusal}")
    space = space_of(first_model, request.dimensions, spaces)
    chosen: list[int] = []
    skipped: list[tuple[int, str]] = []
    caps: list[EmbeddingLimits] = []
    for i, entry in enumerate(entries):
        sent = entry.model_for(model)
        own = _limits(entry, sent)
        if own is None:
            skipped.append((i, "serves no embeddings"))
        elif space_of(sent, request.dimensions, spaces) != space:
            skipped.append((i, f"another vector space ({sent})"))
        elif (why := own.refusal(request)) is not None:
            skipped.append((i, why))
        else:
            chosen.append(i)
            caps.append(own)
    token_caps = [c.max_tokens for c in caps if c.max_tokens is not None]
    return SpaceEntries(
        space=space,
        entries=frozenset(chosen),
        skipped=tuple(skipped),
        max_inputs=min(c.max_inputs for c in caps),
        max_tokens=min(token_caps) if token_caps else None,
        parallel=max(1, min(c.parallel for c in caps)),
    )


def _limits(entry: Entry, model: str) -> EmbeddingLimits | None:
    return entry.providers[0].embedding_limits(model)


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbedServed:
    """The answer of an embedding walk: the vectors in input order and who served them.

    Attributes:
        vectors: One vector per input, in input order.
        usage: The input tokens of the accepted batches (a batch without reported usage counts its estimate).
        route: The route that served; with several batches, that of the latest entry that served one.
        entry: That entry's index.
        batches: How many batches the inputs were split into.
    """

    vectors: tuple[list[float], ...]
    usage: Usage
    route: RouteRef
    entry: int
    batches: int


def embedding_cost(catalogue: Catalogue, entry: Entry, model: str, usage: Usage) -> float | None:
    """What ``usage`` costs on ``entry``: the profile's ``pricing``, else the catalogue's price per input token."""
    rates = entry.rates if entry.rates is not None else catalogue.embedding_rates(entry.family, model)
    return rates.cost(usage) if rates is not None else None


class Agreement:
    """The vector length every batch of one call answers: the first answered batch's (see the module docstring).

    The adapter has checked that a batch's vectors all have one length (``dimensions`` when it was asked); this
    holds the batches of one call to each other, which matters when no ``dimensions`` was asked.
    """

    __slots__ = ("size",)

    def __init__(self) -> None:
        self.size: int | None = None

    def check(self, answer: Embeddings) -> None:
        """Take the first answer's length; refuse a later answer of another (the ``check`` of :meth:`Walk.tries`).

        Raises:
            ProtocolError: The answer's vectors differ in length from the call's earlier batches (non-retryable:
                the walk moves on to the batch's next entry).
        """
        size = len(answer.vectors[0])  # a batch holds at least one input, and the adapter checked one vector each
        if self.size is None:
            self.size = size
        elif size != self.size:
            raise ProtocolError(
                f"the answer's vectors have {size} dimensions, the call's earlier batches {self.size}",
                error_class=ErrorClass.NON_RETRYABLE,
                error_type="embedding_length_mismatch",
            )


def _try_embed(
    provider: Provider, request: EmbedRequest, model: str, temperature: float | None
) -> Awaitable[Embeddings]:
    """One embedding try (the ``call`` of :meth:`Walk.tries`; embeddings have no temperature)."""
    return provider.embed(request, model)


async def embed_through(
    reliable: ReliableProvider,
    request: EmbedRequest,
    model: str,
    log: DispatchScope | None,
    spaces: Mapping[str, str],
) -> EmbedServed:
    """Embed ``request`` through the route of ``reliable``: split, walk each batch in one vector space, reassemble.

    Raises:
        UnsupportedRequest: The route's first entry cannot take the request (nothing is sent).
        AllProvidersFailed: A batch failed on every entry of the space (``.attempts`` holds the whole call's).
        ContextWindowExceeded: An input is too long for every entry of the space.
    """
    eligible = space_entries(reliable, model, request, spaces)
    count = len(request.inputs)
    sizes: Sequence[int] = ()
    if eligible.max_tokens is not None:
        sizes = [estimated_tokens(i) for i in request.inputs]
    ranges = batches(count, sizes, eligible.max_inputs, eligible.max_tokens)
    parts = [request] if len(ranges) == 1 else [_part(request, r) for r in ranges]
    answers: list[tuple[Embeddings, int, RouteRef] | None] = [None] * len(parts)
    agreement = Agreement() if len(parts) > 1 else None  # one batch agrees with itself (the adapter checked it)

    async def walk_batch(k: int) -> None:
        answers[k] = await _walk_batch(reliable, parts[k], model, log, eligible.entries, agreement)

    if eligible.parallel == 1 or len(parts) == 1:
        for k in range(len(parts)):
            await walk_batch(k)
    else:
        await _bounded(walk_batch, len(parts), eligible.parallel)
    vectors: list[list[float]] = []
    usage = Usage()
    route: RouteRef | None = None
    last = -1
    for part, done in zip(parts, answers, strict=True):
        assert done is not None  # every batch was answered (else its walk raised)
        answer, index, by = done
        vectors.extend(answer.vectors)
        usage = usage + _usage_of(answer, part)
        if index >= last:
            last, route = index, by
    assert route is not None  # there is at least one batch
    return EmbedServed(vectors=tuple(vectors), usage=usage, route=route, entry=last, batches=len(ranges))


async def _bounded(run: Callable[[int], Awaitable[None]], count: int, parallel: int) -> None:
    """``run(k)`` for every ``k`` below ``count``, at most ``parallel`` at once, each started in order.

    The first failure cancels the batches still in flight (none more is started) and is raised as it is.
    """
    todo = iter(range(count))

    async def worker() -> None:
        for k in todo:  # one iterator shared by the workers: each batch is taken once
            await run(k)

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(parallel, count))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _part(request: EmbedRequest, r: range) -> EmbedRequest:
    return EmbedRequest(inputs=request.inputs[r.start : r.stop], dimensions=request.dimensions, user=request.user)


def _usage_of(answer: Embeddings, request: EmbedRequest) -> Usage:
    """The batch's usage as reported, else its estimate (an answer is never billed as free), bounded by it."""
    return embedding_usage(answer.usage, sum(estimated_tokens(i) for i in request.inputs))


async def _walk_batch(
    owner: ReliableProvider,
    request: EmbedRequest,
    model: str,
    log: DispatchScope | None,
    eligible: frozenset[int],
    agreement: Agreement | None,
) -> tuple[Embeddings, int, RouteRef]:
    """One batch through the entries of its space, in the walk's order; the answer, its entry and route.

    An answer whose vectors differ in length from the call's earlier batches fails its try (``agreement``; None:
    the call is one batch).
    """
    check = agreement.check if agreement is not None else None
    walk = owner.new_walk(log, model)
    context = walk.context
    for i in walk.order:
        if i not in eligible:
            continue
        c = walk.candidate(i)
        limits = walk.limits
        if limits is not None and limits.too_small(c.entry, c.model, context.context_window(c.entry, c.model)):
            continue  # the same model already said the batch is too large
        admission = walk.availability(c, False)
        if admission is not Admission.TRY and (admission is Admission.SKIP or not await walk.probe(c)):
            continue
        tries = 1 if walk.probing else context.tries
        done = await walk.tries(c, tries, _try_embed, request, None, check=check)
        if done is not None:
            return await _accepted(walk, c, request, done)
    for i in walk.panic_order():  # every entry of the space was open or cooling down: all tried as if closed
        c = walk.candidate(i)
        done = await walk.tries(c, context.tries, _try_embed, request, None, check=check)
        if done is not None:
            return await _accepted(walk, c, request, done)
    failure = walk.take_failure()  # the walk lets go of it (see ReliableProvider.run)
    attempts: Sequence[Attempt] = log.attempts if log is not None else walk.attempts
    if walk.limits is not None:  # an input is too long for every entry of the space
        raise ContextWindowExceeded(limit=walk.limits.limit, attempts=attempts)
    raise AllProvidersFailed(
        aggregate_message(attempts, context.tries),
        attempts=list(attempts),
        last_error=failure[0] if failure is not None else None,
        retry_at=walk.usable_at(),
    )


async def _accepted(
    walk: Walk, c: Candidate, request: EmbedRequest, done: tuple[Embeddings, KeyChoice, float, float]
) -> tuple[Embeddings, int, RouteRef]:
    """``c`` answered the batch: its attempt recorded and priced, its breaker told."""
    answer, choice, started, t0 = done
    walk.take_failure()
    entry = c.entry
    usage = _usage_of(answer, request)
    walk.record(
        new_attempt(
            provider=entry.profile,
            model=c.model,
            outcome="ok",
            key_id=choice.key_id,
            usage=usage,
            cost_usd=embedding_cost(walk.context.catalogue, entry, c.model, usage),
            started_at=started,
            duration_ms=(time.perf_counter() - t0) * 1000.0,
            entry=c.index,
            try_number=walk.try_number,
        )
    )
    closing = walk.healthy(c)
    if closing is not None:
        await closing
    return answer, c.index, entry.route(c.model)
