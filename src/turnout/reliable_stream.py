"""One stream of a walk: the entry it opens, its tries before the first batch, a hedge, and the relay.

:meth:`ReliableProvider.open_stream <turnout.reliable.ReliableProvider.open_stream>` picks the entry and makes
a :class:`ReliableStream`. Iterating its batches opens the stream: until the first batch arrives, a failure is
a failed try like a non-streaming one (SPEC 6.7, 7.1). With hedging, a stream without visible output after the
hedge delay is raced by the same request on the next eligible entry; nothing reaches the caller before one side
is chosen. Once batches flow, the stream never switches; its attempt is recorded when it ends, and
:meth:`ReliableStream.resume_after` says where a recovery continues when it gave no answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace

from turnout.attribution import Outcome
from turnout.classify import error_class_of
from turnout.entry import Entry, Resume
from turnout.errors import StreamingUnsupported
from turnout.policy import Step
from turnout.report import outcome_of
from turnout.types import ChatRequest, Final, StreamEvent, Usage, UsageEvent
from turnout.walk import Walk, opening

#: Event kinds that are output: the first batch holding one marks the time to first token.
OUTPUT_KINDS = frozenset(("text", "reasoning", "tool_call"))


class ReliableStream:
    """The stream of one entry of a walk; made by :meth:`ReliableProvider.open_stream`.

    Iterating :meth:`batches` opens the stream. Until its first batch arrives, a failure is a failed try
    like a non-streaming one: recorded, settled by the policy, and retried on this entry (with backoff,
    Retry-After and key rotation) while the policy says so. Once batches flow, the stream never switches;
    its attempt is recorded when it ends.

    Attributes:
        entry: The index of the entry in the walk.
        route: The profile and model it streams from.
    """

    __slots__ = (
        "_entry",
        "_opened",
        "_record",
        "_request",
        "_temperature",
        "_tries",
        "_verdict",
        "_walk",
        "entry",
        "route",
    )

    def __init__(
        self,
        walk: Walk,
        index: int,
        entry: Entry,
        served: str,
        request: ChatRequest,
        temperature: float | None,
        *,
        tries: int | None = None,
    ) -> None:
        self._walk = walk
        self._tries = tries if tries is not None else walk.owner.tries
        self._entry = entry
        self._request = request
        self._temperature = temperature
        self.entry = index
        self.route = entry.route(served)
        self._opened = False
        self._record: int | None = None  # index of the open stream's attempt in the walk's records
        self._verdict: Outcome | None = None  # the turn's verdict, when given before the attempt was recorded

    async def batches(self) -> AsyncGenerator[list[StreamEvent], None]:
        """The stream's event batches; its attempts go to the walk's log.

        Raises:
            ProviderError: The stream failed (classified); see :meth:`resume_after`.
            RefusalError / ContextWindowExceeded: The policy stopped the walk before the first batch.
        """
        walk, entry, index = self._walk, self._entry, self.entry
        owner = walk.owner
        served = self.route.model
        request, temperature = self._request, self._temperature
        opened = await walk.tries(index, entry, served, self._tries, opening, request, temperature, stream=True)
        if opened is None:
            failure = walk.last_failure
            if failure is None:  # no usable key: nothing was tried
                raise StreamingUnsupported("No entry of this route has a usable key right now")
            raise failure[0]
        (upstream, batch), choice, started, t0 = opened
        self._opened = True
        stats = owner.stats.of(entry.health_key(served)) if owner.stats is not None else None
        ttft: float | None = None
        usage: Usage | None = None
        outcome: Outcome = "cancelled"
        error: Exception | None = None
        try:
            async with aclosing(upstream):
                following = upstream.__anext__
                while True:
                    if ttft is None and any(event.type in OUTPUT_KINDS for event in batch):
                        ttft = (time.perf_counter() - t0) * 1000.0
                        if stats is not None:
                            stats.first_token(ttft / 1000.0)
                    if UsageEvent in map(type, batch):  # a scan in C: most batches are text only
                        usage = next(e for e in reversed(batch) if type(e) is UsageEvent).usage
                    if type(batch[-1]) is Final:  # Final is always the last event of a stream
                        outcome = "ok"
                        await walk.healthy(entry, served)
                    yield batch
                    try:
                        batch = await following()
                    except StopAsyncIteration:
                        break
        except (asyncio.CancelledError, GeneratorExit):
            if outcome != "ok":  # a consumer that stops right after Final still got a complete answer
                outcome = "cancelled"
            raise
        except Exception as exc:
            error = exc
            cls = error_class_of(exc)
            outcome = outcome_of(cls)
            walk.last_failure = (exc, await owner._settle(walk, index, entry, served, choice, exc, cls, 0))
            raise
        finally:
            if stats is not None:
                stats.finished()
            self._record = len(walk.attempts)
            walk.record(
                owner.attempt(
                    entry,
                    index,
                    served,
                    self._verdict or outcome,
                    try_number=walk.try_number,
                    choice=choice,
                    started=started,
                    elapsed=time.perf_counter() - t0,
                    usage=usage,
                    error=error,
                    stream=True,
                    ttft_ms=ttft,
                )
            )

    def settle(self, outcome: Outcome, usage: Usage | None = None) -> None:
        """The turn's verdict on this stream's attempt: ``cancelled``, ``stream_interrupted`` or ``empty``."""
        walk = self._walk
        if self._record is None:
            self._verdict = outcome
            return
        old = walk.attempts[self._record]
        new = replace(old, outcome=outcome, usage=usage if usage is not None else old.usage)
        walk.attempts[self._record] = new
        log = walk.log
        if log is not None:
            for n in range(len(log.attempts) - 1, -1, -1):
                if log.attempts[n] is old:
                    log.attempts[n] = new
                    break

    @property
    def in_flight(self) -> bool:
        """Whether the stream is open and its attempt not recorded yet (it records itself when it ends)."""
        return self._opened and self._record is None

    def resume_after(self, *, failed: bool) -> Resume | None:
        """Where a non-streaming recovery continues after this stream gave no answer; None: no recovery.

        ``failed``: the stream failed (False: it completed semantically empty). A failure the policy
        stopped on (a refusal the profile does not route, a request too large for every entry) is not
        recovered. Otherwise the recovery skips this entry, unless it is the walk's only one (one recovery
        attempt on it, SPEC 7.3); a semantically empty stream gets one recovery attempt on this entry when
        retries are allowed.
        """
        walk = self._walk
        single = len(walk.owner.entries) == 1
        if not failed:
            tries = 1 if walk.owner.retries > 0 or single else 0
        elif walk.last_failure is not None and walk.last_failure[1].step is Step.STOP:
            return None
        else:
            tries = 1 if single else 0
        return Resume(entry=self.entry, tries=tries, limits=walk.limits)
