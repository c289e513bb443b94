"""The gateway's answers to failures: which HTTP status, kind and code each failure gets, on every surface.

A surface (OpenAI, Anthropic) decides only how a :class:`Failure` looks in its own protocol; which status a
failure gets (:func:`failure_for`: a rejected request, a walk's failures, a refusal, a routing error) is decided
here, once, so every surface always agrees.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from turnout.core.attribution import SKIPS, Attempt
from turnout.core.errors import (
    AllProvidersFailed,
    ConfigError,
    ContextWindowExceeded,
    ErrorClass,
    InvalidRequest,
    ProviderError,
    RefusalError,
    StreamInterruptedAfterOutput,
    UnsupportedRequest,
)
from turnout.core.secrets import scrub

#: What went wrong, independent of any surface's vocabulary (each surface maps a kind to its error type).
FailureKind: TypeAlias = Literal[
    "invalid_request",
    "authentication",
    "forbidden",
    "not_found",
    "too_large",
    "context_length",
    "rate_limited",
    "upstream_failed",
    "upstream_interrupted",
    "shutting_down",
    "unavailable",
    "internal",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """A failed request as the gateway answers it.

    Attributes:
        status: The HTTP status.
        kind: What went wrong (see :data:`FailureKind`).
        message: A content-free message (no prompt, response, provider text or key).
        param: The request field at fault, when one is.
        code: A stable machine-readable code (OpenAI's ``code``), when there is one.
        retry_after: Whole seconds for a ``Retry-After`` header, when the client should come back later.
        cause: For an interrupted stream: the error class of the failure that cut it.
        provider: The upstream profile whose own error this is (an upstream client error, a rejected request).
        model: The model of that upstream.
    """

    status: int
    kind: FailureKind
    message: str
    param: str | None = None
    code: str | None = None
    retry_after: int | None = None
    cause: ErrorClass | None = None
    provider: str | None = None
    model: str | None = None


#: The status logged for a request whose client went away before the answer was complete.
CLIENT_CLOSED = 499


class RequestRejected(Exception):
    """The request cannot be served as sent (raised by parsing and routing, answered by the surface)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def invalid(message: str, *, param: str | None = None, code: str | None = None) -> RequestRejected:
    """A 400 for a request the gateway will not forward."""
    return RequestRejected(Failure(status=400, kind="invalid_request", message=message, param=param, code=code))


_LIMITED = frozenset(("rate_limited", "cooldown_skip"))


def retry_after_seconds(exc: AllProvidersFailed, cooldowns: Mapping[str, float], now: float) -> int:
    """Seconds until the soonest cooldown ends (rounded up, at least 1) for an all-rate-limited walk.

    The walk's own hint comes first; else the soonest cooldown of a profile the walk tried; else 1.
    """
    hint = exc.retry_after
    if hint is None:
        tried = {a.provider for a in exc.attempts}
        ends = [until for key, until in cooldowns.items() if key.partition("#")[0] in tried]
        hint = min(ends) - now if ends else None
    return max(1, math.ceil(hint)) if hint is not None else 1


def unavailable_failure(exc: AllProvidersFailed, now: float) -> Failure | None:
    """The answer for a walk none of whose entries is usable now (each cooling down or behind an open breaker).

    429 when an entry was rate limited (a ``rate_limited`` try or a cooldown skip), else 503; either way with
    ``Retry-After``: the seconds until the earliest moment an entry is usable (the walk's ``retry_at``), rounded up,
    at least 1. None when an entry is usable now (the walk's failures are then the providers' answer).
    """
    if exc.retry_at is None:
        return None
    retry_after = max(1, math.ceil(exc.retry_at - now))
    if any(a.outcome in _LIMITED for a in exc.attempts):
        return Failure(
            status=429, kind="rate_limited", message=str(exc), code="rate_limit_exceeded", retry_after=retry_after
        )
    return Failure(
        status=503, kind="upstream_failed", message=str(exc), code="providers_unavailable", retry_after=retry_after
    )


def all_rate_limited(attempts: Iterable[Attempt]) -> bool:
    """Every attempt was rate limited or skipped for a cooldown (and there was at least one)."""
    outcomes = [a.outcome for a in attempts]
    return bool(outcomes) and all(o in _LIMITED for o in outcomes)


#: Upstream statuses that say the request itself is wrong: the client gets the same class of answer.
CLIENT_STATUSES: Mapping[int, FailureKind] = {
    400: "invalid_request",
    404: "not_found",
    413: "too_large",
    422: "invalid_request",
}
_MAX_UPSTREAM_MESSAGE = 1000
_CODE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def upstream_client_error(exc: AllProvidersFailed) -> ProviderError | None:
    """The upstream client error (400/404/413/422) that decided a failed walk, if every failure was one.

    A walk whose failures mix client errors with server errors, timeouts or rate limits stays a 502 (or 429):
    only when every entry that was tried rejected the request itself is the request the client's to fix.
    """
    last = exc.last_error
    if not isinstance(last, ProviderError) or last.status not in CLIENT_STATUSES:
        return None
    tried = [a for a in exc.attempts if a.outcome not in SKIPS]
    if tried and all(a.outcome == "non_retryable" and a.status in CLIENT_STATUSES for a in tried):
        return last
    return None


def upstream_message(err: ProviderError) -> str:
    """The provider's own message for the client, bounded and scrubbed of key shapes.

    The adapter already removed its own credentials from it; the profile that said it leads.
    """
    text = scrub(err.message[:_MAX_UPSTREAM_MESSAGE], ())
    status = f" (HTTP {err.status})" if err.status is not None else ""
    return f"upstream {err.provider or 'provider'}{status}: {text}"


def _upstream_code(err: ProviderError, default: str) -> str:
    code = err.error_code or err.error_type
    if code and len(code) <= 64 and set(code) <= _CODE_CHARS:
        return code
    return default


def failure_for(exc: BaseException, cooldowns: Mapping[str, float], now: float) -> Failure:
    """How the gateway answers an exception raised by the client before any output was sent."""
    if isinstance(exc, RequestRejected):
        return exc.failure
    if isinstance(exc, RefusalError) and exc.request_rejected:
        return Failure(
            status=400,
            kind="invalid_request",
            message=upstream_message(exc),
            code="content_policy_violation",
            provider=exc.provider,
            model=exc.model,
        )
    if isinstance(exc, ContextWindowExceeded):
        return Failure(
            status=400, kind="context_length", message=str(exc), param="messages", code="context_length_exceeded"
        )
    if isinstance(exc, AllProvidersFailed):
        client_error = upstream_client_error(exc)
        if client_error is not None:
            assert client_error.status is not None
            return Failure(
                status=client_error.status,
                kind=CLIENT_STATUSES[client_error.status],
                message=upstream_message(client_error),
                code=_upstream_code(client_error, "upstream_client_error"),
                provider=client_error.provider,
                model=client_error.model,
            )
        unavailable = unavailable_failure(exc, now)
        if unavailable is not None:
            return unavailable
        if all_rate_limited(exc.attempts):
            return Failure(
                status=429,
                kind="rate_limited",
                message=str(exc),
                code="rate_limit_exceeded",
                retry_after=retry_after_seconds(exc, cooldowns, now),
            )
        return Failure(status=502, kind="upstream_failed", message=str(exc), code="all_providers_failed")
    if isinstance(exc, ConfigError):
        return config_failure(exc)
    if isinstance(exc, InvalidRequest):
        return invalid_request(exc)
    if isinstance(exc, UnsupportedRequest):
        return Failure(status=400, kind="invalid_request", message=str(exc), code="unsupported_request")
    return Failure(
        status=502,
        kind="upstream_failed",
        message=f"the upstream call failed ({type(exc).__name__})",
        code="upstream_error",
    )


def invalid_request(exc: InvalidRequest) -> Failure:
    """The 400 for a request Turnout could not build or encode for the upstream (nothing was sent)."""
    return Failure(status=400, kind="invalid_request", message=str(exc), param=exc.path, code="invalid_request")


def config_failure(exc: ConfigError) -> Failure:
    """A routing error: an unknown profile or route target is 404, a missing model 400, anything else 500."""
    if exc.code in ("unknown_profile", "unknown_route_target"):
        return Failure(status=404, kind="not_found", message=exc.message, param="model", code="model_not_found")
    if exc.code == "missing_model":
        return Failure(
            status=400,
            kind="invalid_request",
            message=exc.message.replace("pass model=...", "name one as '<family.alias>/<model>'"),
            param="model",
            code="missing_model",
        )
    return Failure(status=500, kind="internal", message="the gateway's configuration cannot serve this request")


SHUTTING_DOWN = Failure(status=503, kind="shutting_down", message="the gateway is shutting down", code="shutting_down")
UNAUTHORIZED = Failure(
    status=401,
    kind="authentication",
    message="invalid or missing API key (send Authorization: Bearer <key> or x-api-key: <key>)",
    code="invalid_api_key",
)
INTERNAL = Failure(status=500, kind="internal", message="internal gateway error", code="internal_error")


def too_large(limit: int) -> Failure:
    """The 413 for a body over ``limit`` bytes."""
    return Failure(
        status=413, kind="too_large", message=f"the request body exceeds {limit} bytes", code="request_too_large"
    )


def interrupted(exc: StreamInterruptedAfterOutput) -> Failure:
    """The in-band error that ends a stream cut after output: never a clean end."""
    return Failure(
        status=200,
        kind="upstream_interrupted",
        message=str(exc),
        code="stream_interrupted",
        cause=exc.cause_class,
    )
