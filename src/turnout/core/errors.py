"""Every error Turnout raises, in one tree.

::

    TurnoutError
    ├── ConfigError                      bad configuration; .path names the key, e.g. providers.models.x.y.fallback[1]
    ├── InvalidRequest                   the caller's request cannot be built or encoded; .path names the argument,
    │                                      e.g. tools[0].function.parameters (raised before any attempt)
    ├── ProviderError                    one provider call failed; .error_class says what it means
    │   │                                  (.provider .model .status .error_type .error_code .retry_after .request_id)
    │   ├── ProviderTimeout              connect / first_token / idle / total bound exceeded (.phase)
    │   ├── ProviderConnectionError      the connection failed or was reset before an answer
    │   ├── ProtocolError                a malformed or oversized response or stream event
    │   │   ├── ResponseTooLarge         a body or stream event over its bound once decoded; not replayed on the entry
    │   │   └── StreamTruncated          the body ended before the protocol's completion signal (.missing_signal)
    │   ├── RefusalError                 the model refused (never retried, not routed around unless opted in)
    │   └── EmptyCompletion              a 200 with no text and no tool calls (not an answer)
    ├── ContextWindowExceeded            the request is too large for every model that could take it (.limit, .attempts)
    ├── AllProvidersFailed               the reliable walk ran out of entries (.attempts); content-free message
    ├── StreamingUnsupported             no entry can stream the request
    ├── UnsupportedRequest               no entry of the route can take the request at all (images, no vision)
    ├── StreamInterruptedAfterOutput     a stream failed after the user saw output (.partial_text, .usage, .attempts)
    └── TurnCancelled                    the caller cancelled the turn (.partial_text, kept when output was shown)

Messages never contain API keys. Provider errors may carry the provider's own (scrubbed) message;
:class:`AllProvidersFailed` carries only the bounded, scrubbed reason a provider gave for rejecting the request
(a 4xx), never a prompt or a response.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnout.core.attribution import Attempt  # type: ignore[import-not-found, unused-ignore]
    from turnout.core.types import Usage


class ErrorClass(StrEnum):
    """What a failure means for the reliable walk."""

    RETRYABLE = "retryable"
    RATE_LIMITED = "rate_limited"
    RATE_LIMITED_NON_RETRYABLE = "rate_limited_non_retryable"
    NON_RETRYABLE = "non_retryable"
    CONTEXT_WINDOW = "context_window"
    REFUSAL = "refusal"
    TIMEOUT = "timeout"
    EMPTY = "empty"


class TurnoutError(Exception):
    """Root of every error Turnout raises."""


class ConfigError(TurnoutError):
    """The configuration is invalid.

    Attributes:
        path: The key path of the offending value, e.g. ``providers.models.openai.main.fallback[1]``.
        code: A stable machine-readable code, e.g. ``unknown_key`` or ``missing_credential``.
    """

    def __init__(self, message: str, *, path: str | None = None, code: str = "invalid_config") -> None:
        self.path = path
        self.code = code
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


def cannot_listen(host: str, port: int, exc: OSError, *, path: str | None = None) -> ConfigError:
    """The error of a command that cannot listen on ``host:port``: one line, what happened and what to do.

    Its code is ``listen_failed`` (the command line exits with status 2 for it).
    """
    if exc.errno == errno.EADDRINUSE:
        why = "the port is already in use; stop what listens there, or choose another port with --port (0: a free one)"
    elif exc.errno == errno.EACCES:
        why = "permission denied (ports below 1024 need privileges); choose another port with --port"
    elif exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        why = f"{host!r} is not an address of this host; choose another with --host (127.0.0.1: this host only)"
    else:
        why = exc.strerror or type(exc).__name__
    return ConfigError(f"cannot listen on {host}:{port}: {why}", path=path, code="listen_failed")


class InvalidRequest(TurnoutError):
    """The caller's request cannot be sent as given.

    An argument of the wrong type or shape, or a body the encoder refuses (JSON nested too deep, an integer
    beyond 64 bits). Raised before any attempt, or by the adapter's request builder before anything is sent: it is never
    retried, never routed around, and never changes shared state (cooldowns, breakers, keys).

    Attributes:
        path: The argument at fault, e.g. ``tools[0].function.parameters`` or ``max_tokens`` (None: the
            whole request).
        reason: What is wrong with it (never the value itself).
    """

    def __init__(self, reason: str, *, path: str | None = None) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"invalid request: {path}: {reason}" if path else f"invalid request: {reason}")


class ProviderError(TurnoutError):
    """One provider call failed.

    Attributes:
        error_class: What the failure means (decided by :mod:`turnout.core.classify`).
        provider: The profile (``family.alias``) or family that failed, when known.
        model: The model that was asked for, when known.
        status: The HTTP status, when the provider answered.
        error_type: The provider's error ``type`` (or Gemini ``status``), when given.
        error_code: The provider's error ``code``, when given.
        retry_after: A retry hint in seconds, from headers or the body, when given.
        request_id: The provider's request id, when given.
        auth_failure: The credential itself was rejected (the key is dead for this process).
    """

    default_class: ErrorClass = ErrorClass.RETRYABLE

    message: str
    auth_failure: bool
    error_class: ErrorClass
    provider: str | None
    model: str | None
    status: int | None
    error_type: str | None
    error_code: str | None
    retry_after: float | None
    request_id: str | None

    def __init__(
        self,
        message: str,
        *,
        error_class: ErrorClass | None = None,
        provider: str | None = None,
        model: str | None = None,
        status: int | None = None,
        error_type: str | None = None,
        error_code: str | None = None,
        retry_after: float | None = None,
        request_id: str | None = None,
        auth_failure: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.auth_failure = auth_failure
        self.error_class = error_class if error_class is not None else self.default_class
        self.provider = provider
        self.model = model
        self.status = status
        self.error_type = error_type
        self.error_code = error_code
        self.retry_after = retry_after
        self.request_id = request_id

    def __str__(self) -> str:
        where = " ".join(x for x in (self.provider, self.model) if x)
        status = f" (HTTP {self.status})" if self.status is not None else ""
        prefix = f"{where}{status}: " if where or status else ""
        return f"{prefix}{self.message}"


class ProviderTimeout(ProviderError):
    """A time bound of one attempt was exceeded.

    Attributes:
        phase: ``"connect"``, ``"first_token"``, ``"idle"`` or ``"total"``.
        seconds: The bound that was exceeded.
        address: The endpoint's ``host:port``, for a connect timeout.
    """

    default_class = ErrorClass.TIMEOUT
    address: str | None = None

    def __init__(
        self, message: str, *, phase: str, seconds: float | None = None, address: str | None = None, **kw: object
    ) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.phase = phase
        self.seconds = seconds
        self.address = address


class ProviderConnectionError(ProviderError):
    """The connection could not be opened, or was reset before a complete answer.

    Attributes:
        failure: What failed, when the transport said: ``refused``, ``dns``, ``tls`` or ``reset`` (None: another
            failure, or one after the answer began).
        address: The endpoint's ``host:port``, when known.
    """

    default_class = ErrorClass.RETRYABLE
    failure: str | None = None
    address: str | None = None

    def __init__(self, message: str, *, failure: str | None = None, address: str | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        if failure is not None or address is not None:  # else the class's None: the plain error's attributes
            self.failure = failure
            self.address = address


class ProtocolError(ProviderError):
    """The provider sent something the protocol does not allow (invalid JSON, oversized body or line)."""

    default_class = ErrorClass.RETRYABLE


class ResponseTooLarge(ProtocolError):
    """A response body, a stream or one of its events is larger than its bound (counted after decompression).

    A health failure like any protocol error, but the walk does not try the same entry again for the call: the next
    try would fetch the same answer (see docs/reliability.md).
    """


class StreamTruncated(ProtocolError):
    """The stream ended before the protocol's completion signal.

    Attributes:
        missing_signal: The signal that never came, e.g. ``message_stop`` or ``[DONE] or finish_reason``.
    """

    def __init__(self, missing_signal: str, **kw: object) -> None:
        super().__init__(
            f"stream ended before {missing_signal}: response truncated",
            **kw,  # type: ignore[arg-type]
        )
        self.missing_signal = missing_signal


class RefusalError(ProviderError):
    """The model refused to answer (Anthropic ``refusal``, OpenAI ``refusal``, Gemini ``SAFETY``, Azure filter).

    Attributes:
        attempts: The attempts of the walk, when raised by the reliable provider.
    """

    default_class = ErrorClass.REFUSAL

    def __init__(self, message: str = "the model refused to answer", **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.attempts: tuple[Attempt, ...] = ()

    @property
    def request_rejected(self) -> bool:
        """The provider rejected the request with an error status (a 400 ``content_policy_violation``).

        False for a model's in-band refusal inside a normal answer (Anthropic ``stop_reason: "refusal"``,
        OpenAI ``message.refusal``, a content filter finishing an answer).
        """
        return self.status is not None and self.status >= 400


class EmptyCompletion(ProviderError):
    """The provider answered with no text (after removing ``<think>`` spans) and no tool calls.

    Attributes:
        usage: What the empty answer reported using (it stays on the rejected attempt).
    """

    default_class = ErrorClass.EMPTY

    def __init__(
        self,
        message: str = "provider completed without final text or tool calls",
        *,
        usage: Usage | None = None,
        **kw: object,
    ) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.usage = usage


class ContextWindowExceeded(TurnoutError):
    """The request is too large for the model, and no larger-context entry remains.

    Attributes:
        limit: The context window in tokens, when known.
        attempts: The attempts of the walk.
    """

    def __init__(self, *, limit: int | None = None, attempts: Sequence[Attempt] = ()) -> None:
        self.limit = limit
        self.attempts = tuple(attempts)
        known = f" of {limit} tokens" if limit else ""
        super().__init__(
            f"The request is too large for the model's context window{known}, and no entry with a larger "
            "context window remains. Shorten the conversation or route to a larger-context model."
        )


class AllProvidersFailed(TurnoutError):
    """Every entry of the walk failed.

    The message is bounded and names each failure event's profile, model and try (``try 1/3``); of provider
    text it holds only a 4xx's own reason, scrubbed of keys and cut short (never a prompt, response or key).

    Attributes:
        attempts: Every attempt of the walk, in order.
        last_error: The exception of the last failed try, when one was raised (its message is the
            provider's, scrubbed of keys; never part of this error's own message).
        retry_at: When no entry of the walk is usable now (each cooling down or behind an open circuit breaker):
            the earliest moment one is (Unix seconds); None when one is usable now.
    """

    def __init__(
        self,
        message: str,
        *,
        attempts: Sequence[Attempt] = (),
        last_error: BaseException | None = None,
        retry_at: float | None = None,
    ) -> None:
        super().__init__(message)
        self.attempts = tuple(attempts)
        self.last_error = last_error
        self.retry_at = retry_at

    @property
    def retry_after(self) -> float | None:
        """When every attempt was rate limited: seconds until the soonest retry hint, else None."""
        hints = [a.retry_after for a in self.attempts if a.retry_after is not None]
        limited = all(a.outcome in ("rate_limited", "cooldown_skip") for a in self.attempts)
        return min(hints) if limited and hints else None


class StreamingUnsupported(TurnoutError):
    """No entry of the walk can stream this request (or stream tool events when tools are given)."""


class UnsupportedRequest(TurnoutError):
    """No entry of the route can take this request (for example it has images and no entry has vision)."""


class StreamInterruptedAfterOutput(TurnoutError):
    """A stream failed after output reached the caller; it is not replayed.

    Attributes:
        partial_text: Exactly the text that was forwarded to the caller.
        usage: Usage reported before the failure, when any.
        attempts: The attempts of the turn.
    """

    def __init__(
        self,
        message: str,
        *,
        partial_text: str,
        usage: Usage | None = None,
        attempts: Sequence[Attempt] = (),
        cause_class: ErrorClass | None = None,
    ) -> None:
        super().__init__(message)
        self.partial_text = partial_text
        self.usage = usage
        self.attempts = tuple(attempts)
        self.cause_class = cause_class


class TurnCancelled(TurnoutError):
    """The caller cancelled the turn. Never retried.

    Attributes:
        partial_text: Text already forwarded to the caller ("" when none was).
        usage: Usage reported before cancellation, when any.
        attempts: The attempts of the turn.
    """

    def __init__(self, *, partial_text: str = "", usage: Usage | None = None, attempts: Sequence[Attempt] = ()) -> None:
        after = " after streamed output" if partial_text else ""
        super().__init__(f"turn cancelled{after}")
        self.partial_text = partial_text
        self.usage = usage
        self.attempts = tuple(attempts)
