"""Words for failures: an attempt's detail tag, its reason, its diagnostic, and the aggregate message.

A failed walk is described by its attempts: each event names its profile, model and try, its outcome, status
and tags, and what a person can act on (:func:`failure_reason`): the address a connection failed to reach, or
the reason a provider gave for rejecting the request (a 4xx, scrubbed of keys and cut short). Nothing here
holds a prompt, a response or a key.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnout.core.attribution import Attempt, Outcome
from turnout.core.classify import endpoint_missing
from turnout.core.errors import (
    EmptyCompletion,
    ErrorClass,
    ProtocolError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RefusalError,
    StreamTruncated,
)
from turnout.core.secrets import scrub

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
#: The detail tag of a 404 that is no answer about a model: the profile's ``uri`` names no endpoint.
ENDPOINT_NOT_FOUND = "endpoint_not_found"
#: The longest reason an attempt keeps, in characters.
MAX_REASON_CHARS = 200
#: The longest profile or model an event names, in characters.
MAX_NAME_CHARS = 120


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
        return f"connection:{exc.failure}" if exc.failure else "connection"
    if isinstance(exc, RefusalError):
        return "refusal"
    if isinstance(exc, EmptyCompletion):
        return "empty_response"
    if isinstance(exc, ProviderError):
        return provider_detail(exc)
    return type(exc).__name__


def provider_detail(exc: ProviderError) -> str:
    """The tag of a provider error that is none of the subclasses :func:`error_detail` names (a plain HTTP error)."""
    if exc.auth_failure:
        return KEY_REJECTED
    status = exc.status
    if status is None:
        return exc.error_type or "provider_error"
    if status == 404 and endpoint_missing(exc):
        return ENDPOINT_NOT_FOUND
    return f"http_{status}"


#: 4xx statuses whose text is not quoted: an auth failure's may quote the key, a rate limit's names the account (its
#: kind, hint and retry hint say what to do).
_NO_REASON = frozenset((401, 403, 429))

_CONNECT_WORDS = {
    "refused": "connection refused by {}",
    "dns": "DNS lookup failed for {}",
    "tls": "TLS handshake failed with {}",
    "reset": "connection reset by {}",
}


def failure_reason(exc: BaseException) -> str | None:
    """What a person can act on in a failed try, for its attempt's ``reason`` (None: nothing beyond its tags).

    A connection failure's kind and ``host:port``; a connect timeout's ``host:port``; the provider's own reason
    for rejecting the request (a 4xx other than 401/403, whose text may quote a key, and 429, which names the
    account): its message, scrubbed of anything shaped like a key, on one line, at most
    :data:`MAX_REASON_CHARS` characters.
    """
    if type(exc) is ProviderError or isinstance(exc, RefusalError):  # the usual failed try first
        status = exc.status
        if status is None or not 400 <= status < 500 or status in _NO_REASON or not exc.message:
            return None
        return _one_line(scrub(exc.message[: MAX_REASON_CHARS * 4], ()))
    if isinstance(exc, ProviderConnectionError) and exc.address:
        return _CONNECT_WORDS.get(exc.failure or "", "could not connect to {}").format(exc.address)
    if isinstance(exc, ProviderTimeout) and exc.phase == "connect" and exc.address:
        return f"timed out connecting to {exc.address}"
    return None


def _one_line(text: str) -> str:
    """``text`` on one printable line (control characters and runs of space made one space), cut short."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 1] + "…"


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
    if a.detail == ENDPOINT_NOT_FOUND:
        return (
            "endpoint_not_found",
            "http_response",
            "the provider has no such endpoint: check the profile's uri (a missing /v1?)",
        )
    if a.status == 404:
        return "model_not_found", "http_response", "check the configured model id for this provider"
    if a.status is not None and a.status >= 500:
        return "provider_server", "http_response", "provider returned a server error; retry or switch provider"
    if a.status is not None and 400 <= a.status < 500:
        return "client_error", "http_response", "provider rejected the request; check config, model, or request"
    if a.detail is not None and a.detail.startswith("connection"):
        return _CONNECT_DIAGNOSTICS.get(a.detail, _CONNECT_DIAGNOSTICS["connection"])
    if a.detail in ("stream_truncated", "protocol_error"):
        return a.detail, "response", "provider response was incomplete or malformed; retry or switch provider"
    return "provider_error", "unknown", "inspect provider error or switch provider"


_CONNECT_DIAGNOSTICS = {
    "connection": ("connect", "connect", "could not reach the provider; check network or switch provider"),
    "connection:refused": (
        "connect_refused",
        "connect",
        "nothing accepts connections there; check the profile's uri (host and port)",
    ),
    "connection:dns": ("dns", "connect", "the host name does not resolve; check the profile's uri"),
    "connection:tls": (
        "tls",
        "tls_or_connect",
        "check the uri's scheme (https or http), the server's certificate or tls_ca_cert_path",
    ),
    "connection:reset": ("connection_reset", "connect", "the provider closed the connection; retry or switch provider"),
}

_REASONS = {"empty": "empty_response", "cooldown_skip": "rate_limit_cooldown", "breaker_skip": "circuit_breaker_open"}


def _which(a: Attempt, max_tries: int) -> str:
    """``openai.main/gpt-4.1, try 1/3`` (``skipped`` for an entry that was not tried)."""
    where = f"{a.provider[:MAX_NAME_CHARS]}/{_one_line(a.model)[:MAX_NAME_CHARS]}"
    return f"{where}, try {a.try_number}/{max(max_tries, a.try_number)}" if a.try_number else f"{where}, skipped"


def aggregate_message(attempts: Sequence[Attempt], max_tries: int) -> str:
    """The bounded summary of a failed walk (first 8 events, at most 2 KiB), one line per failure event.

    ``All model providers/models failed after N failure event(s). Events:`` followed by
    ``event {n} ({profile}/{model}, try {try}/{max}): {outcome}; kind=…; phase=…; reason="…"; hint=…``: the
    reason (see :func:`failure_reason`) only when the attempt has one, ``skipped`` for an entry not tried.
    """
    failures = [a for a in attempts if a.outcome != "ok"]
    total = len(failures)
    out = f"All model providers/models failed after {total} failure event(s). Events:"
    kept = 0
    for n, a in enumerate(failures[:MAX_RETAINED_EVENTS], 1):
        kind, phase, hint = diagnostic(a)
        outcome = _REASONS.get(a.outcome, a.outcome)
        said = f' reason="{a.reason.replace(chr(34), chr(39))}";' if a.reason else ""
        line = f"event {n} ({_which(a, max_tries)}): {outcome}; kind={kind}; phase={phase};{said} hint={hint}"
        omitted_after = total - kept - 1
        marker = f"\n[{omitted_after} additional failure event(s) omitted]" if omitted_after else ""
        if len((out + "\n" + line + marker).encode()) > MAX_AGGREGATE_BYTES:
            break
        out += "\n" + line
        kept += 1
    if kept < total:
        out += f"\n[{total - kept} additional failure event(s) omitted]"
    return out
