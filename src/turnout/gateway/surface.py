"""The contract between the chat handler and a wire surface (OpenAI, Anthropic).

A surface parses its request body into a :class:`ChatCall` and renders replies, refusals, errors and
stream events in its own protocol. It never decides statuses (:mod:`turnout.gateway.failures`), routes
(:mod:`turnout.gateway.access`) or attribution (:mod:`turnout.gateway.bounds`), and it never sees HTTP objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnout.core.errors import RefusalError
from turnout.core.types import Message, NativeRequest, ResponseFormat, StreamEvent, ToolSpec, Usage
from turnout.gateway.failures import Failure
from turnout.reply import Reply


@dataclass(frozen=True, slots=True, kw_only=True)
class Kept:
    """A Responses request's conversation state (:mod:`turnout.gateway.conversations` keeps and resumes it).

    Attributes:
        previous_id: The ``previous_response_id`` it continues, if any.
        store: Whether its answer is kept for a later request to name (``store``, true unless the client said
            false).
        items: Its conversation as input items: once resumed, the kept conversation's items, then its own input.
        body: The request body (what a resumed request is parsed from again).
    """

    previous_id: str | None
    store: bool
    items: tuple[Mapping[str, Any], ...]
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatCall:
    """A parsed chat request, in Turnout's terms.

    Attributes:
        model: The request's ``model`` as sent (a hint, a profile, or a plain model).
        messages: The conversation.
        tools: Tools the model may call.
        tool_choice: ``auto``, ``none``, ``required`` or a tool name.
        temperature: Sampling temperature, when given.
        max_tokens: Upper bound on output tokens of one answer, when given (a limited key's call without one is
            given the bound its reservation priced, see :mod:`turnout.gateway.chat`).
        choices: How many answers the request asks for (OpenAI Chat's ``n``): a reservation prices each of them.
        stream: Whether the client asked for a stream.
        include_usage: OpenAI ``stream_options.include_usage``: end the stream with a usage chunk.
        thinking: Anthropic ``thinking`` enabled: reasoning is returned as ``thinking`` blocks.
        sender: The caller's end-user id (``user`` / ``metadata.user_id``), for ``[senders.<id>]``.
        show_reasoning: Whether the surface sends reasoning to this client (only what it sends counts as
            visible output for the replay boundary).
        response_format: Structured output asked for.
        native: The body in the surface's own protocol, passed through to entries that speak it.
        kept: A Responses request's conversation state (None: nothing to resume and nothing to keep).
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    choices: int = 1
    stream: bool = False
    include_usage: bool = False
    thinking: bool = False
    sender: str | None = None
    show_reasoning: bool = True
    response_format: ResponseFormat | None = None
    native: NativeRequest | None = None
    kept: Kept | None = None


class StreamEncoder(Protocol):
    """Encodes one streamed answer; each method returns the bytes to write (possibly empty)."""

    def start(self) -> bytes:
        """The stream's opening (before the first event)."""

    def event(self, event: StreamEvent) -> bytes:
        """One event of the answer (a ``Final`` closes the answer's content, not the stream)."""

    def finish(self, usage: Usage | None) -> bytes:
        """The stream's clean end, once the answer is accepted: the completion signal."""

    def refusal(self, exc: RefusalError, *, started: bool) -> bytes:
        """The rest of a stream that ends in the surface's refusal form (with its opening unless ``started``)."""

    def interrupted(self, failure: Failure) -> bytes:
        """The in-band error that ends a stream cut after output (no completion signal follows)."""


class Surface(Protocol):
    """One wire protocol the gateway speaks to clients."""

    name: str

    def parse(self, body: bytes, headers: Mapping[str, str] | None = None) -> ChatCall:
        """Validate a request body (``headers``: the request's, for protocol headers such as ``anthropic-beta``).

        Raises:
            RequestRejected: The body is invalid or asks for something the gateway does not support.
        """

    def reply_body(self, reply: Reply, call: ChatCall) -> bytes:
        """The JSON body of a complete answer."""

    def refusal_body(self, exc: RefusalError, model: str, call: ChatCall, call_id: str) -> bytes:
        """The JSON body of a refusal, as a normal answer in the surface's refusal form."""

    def error_body(self, failure: Failure) -> bytes:
        """The JSON body of an error, in the surface's error shape."""

    def stream_encoder(self, call: ChatCall, model: str, call_id: str) -> StreamEncoder:
        """An encoder for one streamed answer served by ``model``."""


def refusal_text(exc: RefusalError) -> str:
    """The refusal as the model put it, without the adapters' ``the model refused:`` prefix."""
    text = exc.message
    for prefix in ("the model refused: ", "the model refused to answer: "):
        if text.startswith(prefix):
            return text[len(prefix) :]
    return text
