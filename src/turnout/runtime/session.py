r"""Sessions: a conversation with its history and its profile/model overrides.

After an interrupted stream the partial text already shown is kept in the history as
``"{partial}\\n\\n[stream interrupted]"``; after a cancellation that followed visible text, as
``"{partial}\\n\\n[interrupted by user]"``. Reasoning-only or tool-only output is not kept as text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from turnout.core.arguments import messages_of
from turnout.core.errors import StreamInterruptedAfterOutput, TurnCancelled
from turnout.core.types import Message, ToolSpec
from turnout.reply import Reply
from turnout.runtime.turn import Sink, call_sink

INTERRUPTED = "[stream interrupted]"
CANCELLED = "[interrupted by user]"

_Tools = Iterable[ToolSpec | Mapping[str, Any]] | None


class Conversing(Protocol):
    """What a session needs of its client (:class:`turnout.client.Client` is one): routing, a call and a turn."""

    def route(self, *, model: str | None = None, provider: str | None = None) -> object:
        """Resolve the options to a target, raising ``ConfigError`` when they name nothing configured."""
        ...

    async def chat(
        self,
        messages: list[Message],
        *,
        model: str | None = None,
        provider: str | None = None,
        tools: _Tools = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Reply:
        """One complete answer to ``messages``."""
        ...

    async def turn(
        self,
        messages: list[Message],
        *,
        draft: Sink | None = None,
        events: Sink | None = None,
        model: str | None = None,
        provider: str | None = None,
        tools: _Tools = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Reply:
        """One streamed turn through ``draft`` and ``events``, returning the accepted reply."""
        ...


class Session:
    """A conversation bound to a client, with its own active profile and model.

    Args:
        client: The client that runs the turns.
        provider: The profile to make active (``family.alias``); None keeps the default.
        model: A hint or plain model; None keeps the profile's.
        system: An optional system prompt placed first in the history.
    """

    def __init__(
        self, client: Conversing, *, provider: str | None = None, model: str | None = None, system: str | None = None
    ) -> None:
        self.client = client
        self.provider = provider
        self.model = model
        self.history: list[Message] = [Message.system(system)] if system else []

    def switch_model(self, model: str | None = None, provider: str | None = None) -> None:
        """Change the active model and/or profile for the following turns (an in-turn switch)."""
        if provider is not None:
            self.provider = provider
        if model is not None:
            self.model = model
        self.client.route(model=self.model, provider=self.provider)  # validate now, not on the next turn

    def extend(self, messages: Iterable[Message | Mapping[str, Any]]) -> None:
        """Append messages (for example tool results) to the history.

        Raises:
            InvalidRequest: A message the types cannot take (``.path`` names it).
        """
        self.history.extend(messages_of(messages))

    async def send(
        self,
        text: str,
        *,
        stream: bool = False,
        draft: Sink | None = None,
        events: Sink | None = None,
        tools: _Tools = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Reply:
        """Add a user message, run one turn, and keep the answer (or what was shown of it) in the history.

        With ``stream=True`` (or any sink given) the turn streams through ``draft`` and ``events``.
        """
        self.history.append(Message.user(text))
        options: dict[str, Any] = {
            "model": self.model,
            "provider": self.provider,
            "tools": tools,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        if not (stream or draft is not None or events is not None):
            reply = await self.client.chat(list(self.history), **options)
        else:
            shown: list[str] = []

            async def capture(event: Any) -> None:
                if getattr(event, "type", None) == "text":
                    shown.append(event.text)
                await call_sink(events, event)

            try:
                reply = await self.client.turn(list(self.history), draft=draft, events=capture, **options)
            except StreamInterruptedAfterOutput as exc:
                if exc.partial_text:
                    self.history.append(Message.assistant(f"{exc.partial_text}\n\n{INTERRUPTED}"))
                raise
            except (asyncio.CancelledError, TurnCancelled):
                partial = "".join(shown)
                if partial:
                    self.history.append(Message.assistant(f"{partial}\n\n{CANCELLED}"))
                raise
        self.history.append(Message.assistant(reply.text, tool_calls=reply.tool_calls))
        return reply
