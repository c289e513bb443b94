"""``client.stream(...)``: the iterator form of a turn, in which every yielded event is immutable output."""

from __future__ import annotations

import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Any

from turnout.reply import Reply
from turnout.runtime.turn import TurnState, turn_outputs
from turnout.types import ChatRequest, StreamEvent


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

    def __init__(
        self, call: Any, request: ChatRequest, temperature: float | None, *, show_reasoning: bool = True
    ) -> None:
        self._call = call
        self._show_reasoning = show_reasoning
        self._request = request
        self._temperature = temperature
        self._state = TurnState()
        self._started = False
        self._gen: weakref.ref[AsyncGenerator[StreamEvent, None]] | None = None
        self._held: AsyncGenerator[StreamEvent, None] | None = None
        self._hold = False

    @property
    def response(self) -> Reply:
        """The accepted reply (available once the iteration finished)."""
        if self._call.reply is None:
            raise RuntimeError("the stream has not completed")
        reply: Reply = self._call.reply
        return reply

    @property
    def call(self) -> Any:
        """The call in flight (a :class:`turnout.client.Call`): its ``requested`` route and dispatch ``scope``.

        While events flow, ``call.scope.served`` names the entry producing them (provisional until the reply
        is accepted); the gateway reads it to send attribution headers with the first event.
        """
        return self._call

    @property
    def partial_text(self) -> str:
        """The text yielded so far."""
        return self._state.partial_text

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        if self._started:
            raise RuntimeError("a stream can be iterated only once")
        self._started = True
        gen = turn_outputs(
            self._call, self._request, self._temperature, self._state, show_reasoning=self._show_reasoning
        )
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
