"""Cancellation of a turn: a ``cancel`` event that stops the turn wherever it is waiting."""

from __future__ import annotations

import asyncio
from typing import Any


class CancelWatcher:
    """Turns a ``cancel`` event into a prompt stop of the current task, wherever it is waiting.

    The turn may be waiting for a silent upstream; setting the event cancels the task, and the turn turns
    that cancellation (and only that one) back into :class:`~turnout.core.errors.TurnCancelled`.
    """

    __slots__ = ("_task", "_waiter", "fired")

    def __init__(self, event: asyncio.Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self.fired = False
        self._waiter = asyncio.ensure_future(event.wait())
        self._waiter.add_done_callback(self._fire)

    def _fire(self, waiter: asyncio.Future[Any]) -> None:
        if not waiter.cancelled():
            self.fired = True
            self._task.cancel()

    def uncancel(self) -> None:
        """Undo the cancellation this watcher requested."""
        self._task.uncancel()

    def close(self) -> None:
        """Stop watching."""
        self._waiter.remove_done_callback(self._fire)
        self._waiter.cancel()
