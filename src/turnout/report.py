"""Content-free words for failures: an attempt's detail tag, its diagnostic, and the aggregate message.

Nothing here holds prompt, response or provider error text, or a key: a failed walk is described only by
its attempts' outcomes, statuses and tags (SPEC 6.1).
"""

from __future__ import annotations

from collections.abc import Sequence

from turnout.attribution import Attempt, Outcome
from turnout.errors import (
    EmptyCompletion,
    ErrorClass,
    ProtocolError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RefusalError,
    StreamTruncated,
)

#: The aggregate message names at most this many failure events.
MAX_RETAINED_EVENTS = 8
#: ... and is at most this long, in bytes.
MAX_AGGREGATE_BYTES = 2048

#: The detail tag of an attempt whose credential the provider rejected.
KEY_REJECTED = "key_rejected"
#: The detail tag of a skip because every key of the pool is dead.
NO_LIVE_KEY = "no_live_key"
#: The detail tag of a skip because every live key of the pool is cooling down.
KEYS_COOLING = "keys_cooling"
#: The detail tag of a breaker skip because another call holds the probe of the half-open entry.
PROBE_TAKEN = "probe_taken"


def outcome_of(cls: ErrorClass) -> Outcome:
    """The ledger outcome of an error class (the same names)."""
    return cls._value_  # the stored value: ``value`` is a Python-level property on CPython 3.11


def error_detail(exc: BaseException) -> str:
    """A content-free tag for an exception (no message text)."""
    if type(exc) is ProviderError:  # the usual HTTP error: none of the subclasses below (one per failed try)
        return provider_detail(exc)
    if isinstance(exc, ProviderTimeout):
        return f"timeout:{exc.phase}"
    if isinstance(exc, StreamTruncated):
        return "stream_truncated"
    if isinstance(exc, ProtocolError):
        return "protocol_error"
    if isinstance(exc, ProviderConnectionError):
        return "connection"
    if isinstance(exc, RefusalError):
        return "refusal"
    if isinstance(exc, EmptyCompletion):
        return "empty_response"
    if isinstance(exc, ProviderError):
        return provider_detail(exc)
    return type(exc).__name__


#: The tag of each HTTP status, made once (formatting it costs about 0.8k instructions, once per failed try).
_HTTP_TAGS = {status: f"http_{status}" for status in range(100, 600)}


def provider_detail(exc: ProviderError) -> str:
    """The tag of a provider error that is none of the subclasses :func:`error_detail` names (a plain HTTP error)."""
    if exc.auth_failure:
        return KEY_REJECTED
    status = exc.status
    if status is None:
        return exc.error_type or "provider_error"
    return _HTTP_TAGS.get(status) or f"http_{status}"


def diagnostic(a: Attempt) -> tuple[str, str, str]:
    """Content-free ``(kind, phase, hint)`` for a failed attempt."""
    if a.outcome == "cooldown_skip":
        return "rate_limited", "cooldown", "wait for provider cooldown or switch provider"
    if a.outcome == "breaker_skip":
        if a.detail == PROBE_TAKEN:
            return "breaker_open", "breaker", "another call is probing this entry; wait for it or switch provider"
        return "breaker_open", "breaker", "the entry kept failing; one call probes it after the open interval"
    if a.outcome == "rate_limited":
        return "rate_limited", "http_response", "wait, change key/quota, or switch provider"
    if a.outcome == "rate_limited_non_retryable":
        return "quota", "http_response", "check the account's balance, quota or plan, or switch provider"
    if a.outcome == "context_window":
        return "context_window", "request_validation", "reduce context or use a larger-context model"
    if a.outcome == "refusal":
        return "refusal", "response", "the model declined to answer"
    if a.outcome == "empty":
        return "empty_response", "response", "provider returned no text and no tool calls"
    if a.outcome == "timeout":
        phase = (a.detail or "timeout:total").partition(":")[2] or "total"
        if phase == "connect":
            return "connect_timeout", "tls_or_connect", "check network, VPN, firewall, or switch provider"
        return "timeout", phase, "provider request timed out; retry or switch provider"
    if a.detail in (KEY_REJECTED, NO_LIVE_KEY):
        return "auth", "http_response", "check provider credentials"
    if a.status == 404:
        return "model_not_found", "http_response", "check the configured model id for this provider"
    if a.status is not None and a.status >= 500:
        return "provider_server", "http_response", "provider returned a server error; retry or switch provider"
    if a.status is not None and 400 <= a.status < 500:
        return "client_error", "http_response", "provider rejected the request; check config, model, or request"
    if a.detail == "connection":
        return "connect", "connect", "could not reach the provider; check network or switch provider"
    if a.detail in ("stream_truncated", "protocol_error"):
        return a.detail, "response", "provider response was incomplete or malformed; retry or switch provider"
    return "provider_error", "unknown", "inspect provider error or switch provider"


_REASONS = {"empty": "empty_response", "cooldown_skip": "rate_limit_cooldown", "breaker_skip": "circuit_breaker_open"}


def aggregate_message(attempts: Sequence[Attempt], max_tries: int) -> str:
    """The bounded, content-free summary of a failed walk (first 8 events, at most 2 KiB).

    ``All model providers/models failed after N failure event(s). Events:`` followed by one line per
    event: ``event {n} (retry {try}/{max}): {reason}; kind=…; phase=…; hint=…``.
    """
    failures = [a for a in attempts if a.outcome != "ok"]
    total = len(failures)
    out = f"All model providers/models failed after {total} failure event(s). Events:"
    kept = 0
    for n, a in enumerate(failures[:MAX_RETAINED_EVENTS], 1):
        kind, phase, hint = diagnostic(a)
        reason = _REASONS.get(a.outcome, a.outcome)
        line = f"event {n} (retry {a.try_number}/{max_tries}): {reason}; kind={kind}; phase={phase}; hint={hint}"
        omitted_after = total - kept - 1
        marker = f"\n[{omitted_after} additional failure event(s) omitted]" if omitted_after else ""
        if len((out + "\n" + line + marker).encode()) > MAX_AGGREGATE_BYTES:
            break
        out += "\n" + line
        kept += 1
    if kept < total:
        out += f"\n[{total - kept} additional failure event(s) omitted]"
    return out
