"""The reliable stream: open one stream on the first eligible entry, and never switch after it started.

Streaming has a narrower contract than the walk (SPEC 7.1): the first entry that can stream (and stream
tool events when tools are requested), is not cooling down and has a usable key is opened once. Failures
are not retried here; the runtime decides whether a failed stream may be recovered (before any output
reached the user) through the non-streaming walk. Rate limits and dead keys seen by a stream still update
the shared cooldown and key state, so the recovery walk skips what just failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING

from turnout.attribution import DispatchScope, Outcome, RouteRef
from turnout.classify import error_class_of, is_dead_key_error
from turnout.errors import ErrorClass, ProviderError, StreamingUnsupported
from turnout.reliable import outcome_of
from turnout.types import ChatRequest, Final, StreamEvent, Usage, UsageEvent

if TYPE_CHECKING:
    from turnout.reliable import Entry, ReliableProvider


_OUTPUT_KINDS = frozenset(("text", "reasoning", "tool_call"))


def eligible_entry(owner: ReliableProvider, request: ChatRequest, model: str) -> int | None:
    """Index of the first entry that can stream this request now, or None."""
    now = owner.clock()
    images = owner.may_hold_images(request, model)
    for i, entry in enumerate(owner.entries):
        caps = entry.capabilities(model)
        if not caps.streaming or (request.tools and not caps.streaming_tool_events):
            continue
        if images and not caps.vision:
            continue
        if len(owner.entries) > 1 and owner.cooling_until(entry, now) is not None:
            continue
        if entry.keys.all_dead():
            continue
        return i
    return None


async def stream_first_eligible(
    owner: ReliableProvider,
    request: ChatRequest,
    model: str,
    temperature: float | None,
    scope: DispatchScope | None = None,
) -> AsyncGenerator[list[StreamEvent], None]:
    """Open the stream of the first eligible entry and relay its event batches, recording one attempt in ``scope``.

    Raises:
        StreamingUnsupported: No entry can stream this request.
        ProviderError: The stream failed (classified); the runtime decides about recovery.
    """
    index = eligible_entry(owner, request, model)
    if index is None:
        what = "streaming tool events" if request.tools else "streaming"
        raise StreamingUnsupported(f"No entry of this route supports {what} right now")
    entry = owner.entries[index]
    served = entry.served_model(model)
    choice = entry.keys.pick(owner.clock())
    if choice is None:  # the last key went away since eligibility was checked
        raise StreamingUnsupported("No entry of this route has a usable key right now")
    if scope is not None:
        scope.walk_entries = len(owner.entries)
        scope.served = RouteRef(provider=entry.profile, model=served)
        scope.served_entry = (owner.id, index)
    provider = entry.providers[choice.index]
    started = owner.clock()
    t0 = time.perf_counter()
    ttft: float | None = None
    usage: Usage | None = None
    outcome: Outcome = "cancelled"
    error: BaseException | None = None
    try:
        async with aclosing(provider.stream_batches(request, served, temperature)) as upstream:
            async for batch in upstream:
                if ttft is None and any(event.type in _OUTPUT_KINDS for event in batch):
                    ttft = (time.perf_counter() - t0) * 1000.0
                if UsageEvent in map(type, batch):  # a scan in C: most batches are text only
                    usage = next(e for e in reversed(batch) if type(e) is UsageEvent).usage
                if type(batch[-1]) is Final:  # Final is always the last event of a stream
                    outcome = "ok"
                yield batch
    except (asyncio.CancelledError, GeneratorExit):
        if outcome != "ok":  # a consumer that stops right after Final still got a complete answer
            outcome = "cancelled"
        raise
    except Exception as exc:
        error = exc
        cls = error_class_of(exc)
        outcome = outcome_of(cls)
        await _note_failure(owner, entry, choice.key_id, exc, cls)
        raise
    finally:
        attempt = owner._attempt(
            entry,
            index,
            served,
            outcome,
            try_number=1,
            choice=choice,
            started=started,
            elapsed=time.perf_counter() - t0,
            usage=usage,
            error=error,
            stream=True,
            ttft_ms=ttft,
        )
        if scope is not None:
            scope.add(attempt)


async def _note_failure(
    owner: ReliableProvider, entry: Entry, key_id: str | None, exc: BaseException, cls: ErrorClass
) -> None:
    hint = exc.retry_after if isinstance(exc, ProviderError) else None
    if cls is ErrorClass.RATE_LIMITED:
        if entry.keys.rotates and key_id is not None:
            await owner.cool_down(entry.keys.key_cooldown(key_id), hint)
        elif len(owner.entries) > 1:
            await owner.cool_down(entry.profile, hint)
    elif cls is ErrorClass.NON_RETRYABLE and key_id is not None and is_dead_key_error(exc):
        await entry.keys.report_auth_failure(key_id, witness=f"{id(exc)}@{owner.clock()}")
