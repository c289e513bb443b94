"""``client.stream(...)``: the iterator form of a turn, in which every yielded event is immutable output."""

from __future__ import annotations

import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from types import TracebackType

from turnout.core.attribution import Attempt, FallbackNotice, RouteRef
from turnout.core.types import StreamEvent
from turnout.reply import Reply
from turnout.runtime.turn import Turn


class ReplyStream:
    """Iterate the events of one streamed turn; afterwards :attr:`response` is the accepted :class:`Reply`.

    ::

        stream = client.stream("hi")
        async for event in stream:
            if event.type == "text":
                print(event.text, end="")
        print(stream.response.served)

    Breaking out of the loop early closes the upstream connection (use ``async with client.stream(...)``
    to close it deterministically). A stream can be iterated once.
    """

    def __init__(self, turn: Turn) -> None:
        self._turn = turn
        self._started = False
        self._gen: weakref.ref[AsyncGenerator[StreamEvent, None]] | None = None
        self._held: AsyncGenerator[StreamEvent, None] | None = None
        self._hold = False

    @property
    def response(self) -> Reply:
        """The accepted reply (available once the iteration finished)."""
        if self._turn.reply is None:
            raise RuntimeError("the stream has not completed")
        return self._turn.reply

    @property
    def requested(self) -> RouteRef:
        """The profile and model the caller asked for."""
        return self._turn.call.requested

    @property
    def served(self) -> RouteRef | None:
        """The route producing the events, once a stream opened (provisional until the reply is accepted)."""
        return self._turn.served

    @property
    def fallback(self) -> FallbackNotice | None:
        """The fallback notice for :attr:`served`, by the same rule as the accepted reply's."""
        served = self._turn.served
        return self._turn.call.fallback(served, self._turn.entry) if served is not None else None

    @property
    def attempts(self) -> Sequence[Attempt]:
        """The attempts so far (a live view: attempts are added as they end)."""
        return self._turn.call.attempts

    @property
    def attempt_count(self) -> int:
        """The attempts so far, counting the stream still open."""
        return self._turn.attempt_count

    @property
    def call_id(self) -> str:
        """The id of the call in the ledger."""
        return self._turn.call.call_id

    @property
    def partial_text(self) -> str:
        """The text yielded so far."""
        return self._turn.partial_text

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        if self._started:
            raise RuntimeError("a stream can be iterated only once")
        self._started = True
        gen = self._turn.events()
        # Outside ``async with`` only a weak reference is kept, so a loop that breaks early drops the
        # generator and the event loop closes it (and the connection) at once.
        self._gen = weakref.ref(gen)
        if self._hold:
            self._held = gen
        return gen

    async def aclose(self) -> None:
        """Stop the stream and release its connection."""
        gen = self._held or (self._gen() if self._gen is not None else None)
        self._held = None
        if gen is not None:
            await gen.aclose()

    async def __aenter__(self) -> ReplyStream:
        self._hold = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
