"""Failure words: detail tags, reasons, diagnostics, and the bounded aggregate message."""

from __future__ import annotations

from typing import get_args

import pytest

from fakes import err
from turnout.core.attribution import Attempt, Outcome
from turnout.core.describe import (
    ENDPOINT_NOT_FOUND,
    KEY_REJECTED,
    KEYS_COOLING,
    MAX_AGGREGATE_BYTES,
    MAX_RETAINED_EVENTS,
    NO_LIVE_KEY,
    PROBE_TAKEN,
    aggregate_message,
    diagnostic,
    error_detail,
    failure_reason,
    outcome_of,
)
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

HEADER = "All model providers/models failed after {n} failure event(s). Events:"


def attempt(outcome: Outcome, *, status: int | None = None, detail: str | None = None, try_number: int = 1) -> Attempt:
    return Attempt(provider="openai.p", model="m", outcome=outcome, status=status, detail=detail, try_number=try_number)


# --- outcome_of ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(ErrorClass))
def test_outcome_of_every_class_is_a_ledger_outcome_of_the_same_name(cls: ErrorClass) -> None:
    """Each error class maps to the ledger outcome of the same name, which the Outcome type allows."""
    assert outcome_of(cls) == cls.value
    assert outcome_of(cls) in get_args(Outcome)


# --- error_detail ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "tag"),
    [
        (ProviderTimeout("slow", phase="first_token", seconds=60), "timeout:first_token"),
        (ProviderTimeout("slow", phase="connect"), "timeout:connect"),
        (StreamTruncated("message_stop", status=200), "stream_truncated"),
        (ProtocolError("bad json {secret}", status=200), "protocol_error"),
        (ProviderConnectionError("reset by 10.0.0.1"), "connection"),
        (RefusalError("I will not", status=400), "refusal"),
        (EmptyCompletion(), "empty_response"),
        (err(401, "invalid key sk-live-123"), KEY_REJECTED),
        (err(403, "Permission denied"), KEY_REJECTED),
        (err(403, "Your input was flagged by moderation"), "http_403"),
        (err(500, "internal error at /v1/chat"), "http_500"),
        (err(404, "model gpt-9 not found"), "http_404"),
        (err(404, "Not Found"), ENDPOINT_NOT_FOUND),
        (err(404, "nothing here", error_type="not_found_error"), "http_404"),
        (ProviderConnectionError("refused", failure="refused", address="127.0.0.1:9"), "connection:refused"),
        (ProviderConnectionError("no such host", failure="dns", address="x.invalid:443"), "connection:dns"),
        (ProviderError("in-band", error_type="overloaded_error"), "overloaded_error"),
        (ProviderError("no facts at all"), "provider_error"),
        (ValueError("some text"), "ValueError"),
        (TimeoutError(), "TimeoutError"),
    ],
)
def test_error_detail_tags(exc: BaseException, tag: str) -> None:
    """Each failure kind gets its tag, without any of the exception's message text."""
    assert error_detail(exc) == tag


def test_error_detail_prefers_the_rejected_key_over_the_status() -> None:
    """An auth failure is tagged key_rejected even when the status alone would say http_400."""
    gemini_bad_key = ProviderError("API key not valid", status=400, auth_failure=True)
    assert error_detail(gemini_bad_key) == KEY_REJECTED


# --- diagnostic ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "kind", "phase"),
    [
        (attempt("cooldown_skip", try_number=0), "rate_limited", "cooldown"),
        (attempt("cooldown_skip", detail=KEYS_COOLING, try_number=0), "rate_limited", "cooldown"),
        (attempt("breaker_skip", try_number=0), "breaker_open", "breaker"),
        (attempt("breaker_skip", detail=PROBE_TAKEN, try_number=0), "breaker_open", "breaker"),
        (attempt("rate_limited", status=429), "rate_limited", "http_response"),
        (attempt("rate_limited_non_retryable", status=429), "quota", "http_response"),
        (attempt("context_window", status=400), "context_window", "request_validation"),
        (attempt("refusal"), "refusal", "response"),
        (attempt("empty"), "empty_response", "response"),
        (attempt("timeout", detail="timeout:connect"), "connect_timeout", "tls_or_connect"),
        (attempt("timeout", detail="timeout:first_token"), "timeout", "first_token"),
        (attempt("timeout", detail="timeout:idle"), "timeout", "idle"),
        (attempt("timeout", detail="TimeoutError"), "timeout", "total"),
        (attempt("timeout"), "timeout", "total"),
        (attempt("non_retryable", status=401, detail=KEY_REJECTED), "auth", "http_response"),
        (attempt("non_retryable", status=403, detail=KEY_REJECTED), "auth", "http_response"),
        (attempt("non_retryable", detail=NO_LIVE_KEY, try_number=0), "auth", "http_response"),
        (attempt("non_retryable", status=404, detail="http_404"), "model_not_found", "http_response"),
        (attempt("non_retryable", status=403, detail="http_403"), "client_error", "http_response"),
        (attempt("non_retryable", status=400, detail="http_400"), "client_error", "http_response"),
        (attempt("retryable", status=500, detail="http_500"), "provider_server", "http_response"),
        (attempt("retryable", status=529, detail="http_529"), "provider_server", "http_response"),
        (attempt("retryable", detail="connection"), "connect", "connect"),
        (attempt("retryable", detail="connection:refused"), "connect_refused", "connect"),
        (attempt("retryable", detail="connection:dns"), "dns", "connect"),
        (attempt("retryable", detail="connection:tls"), "tls", "tls_or_connect"),
        (attempt("retryable", detail="connection:reset"), "connection_reset", "connect"),
        (attempt("non_retryable", status=404, detail=ENDPOINT_NOT_FOUND), "endpoint_not_found", "http_response"),
        (attempt("retryable", status=200, detail="stream_truncated"), "stream_truncated", "response"),
        (attempt("retryable", status=200, detail="protocol_error"), "protocol_error", "response"),
        (attempt("retryable", detail="overloaded_error"), "provider_error", "unknown"),
        (attempt("stream_interrupted"), "provider_error", "unknown"),
    ],
)
def test_diagnostic_kinds(a: Attempt, kind: str, phase: str) -> None:
    """Each failed attempt gets its (kind, phase) and a non-empty hint."""
    got_kind, got_phase, hint = diagnostic(a)
    assert (got_kind, got_phase) == (kind, phase)
    assert hint


def test_a_403_that_is_not_an_auth_failure_is_a_client_error() -> None:
    """A moderation 403 is described as the provider rejecting the request, not as bad credentials."""
    moderated = err(403, "Your input was flagged by moderation")
    assert not moderated.auth_failure
    kind, _, hint = diagnostic(attempt("non_retryable", status=403, detail=error_detail(moderated)))
    assert kind == "client_error" and "credentials" not in hint
    denied = err(403, "Permission denied")
    assert diagnostic(attempt("non_retryable", status=403, detail=error_detail(denied)))[0] == "auth"


def test_a_404_that_is_no_model_error_suggests_checking_the_uri() -> None:
    """A bare 404 (a uri missing /v1) points at the profile's uri, not at the model id."""
    kind, _, hint = diagnostic(
        attempt("non_retryable", status=404, detail=error_detail(err(404, "404 page not found")))
    )
    assert kind == "endpoint_not_found" and "uri" in hint and "/v1" in hint
    _, _, model_hint = diagnostic(
        attempt("non_retryable", status=404, detail=error_detail(err(404, "model x not found")))
    )
    assert "model id" in model_hint


# --- failure_reason ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (err(400, "Unsupported parameter: temperature"), "Unsupported parameter: temperature"),
        (err(422, "bad\nrequest\x1b[31m  here"), "bad request [31m here"),
        (err(400, "key sk-proj-abcdefghijklmnopqrstuvwx1234 is odd"), "key [REDACTED] is odd"),
        (err(429, "Rate limit reached for requests in organization org-x"), None),
        (err(401, "Incorrect API key provided: sk-abc***xyz"), None),
        (err(403, "Permission denied"), None),
        (err(500, "internal error"), None),
        (ProviderConnectionError("x", failure="refused", address="127.0.0.1:9"), "connection refused by 127.0.0.1:9"),
        (
            ProviderConnectionError("x", failure="dns", address="api.x.invalid:443"),
            "DNS lookup failed for api.x.invalid:443",
        ),
        (ProviderConnectionError("x", failure="tls", address="h:443"), "TLS handshake failed with h:443"),
        (ProviderConnectionError("x", address="h:80"), "could not connect to h:80"),
        (ProviderConnectionError("reset after headers"), None),
        (ProviderTimeout("slow", phase="connect", address="10.0.0.1:443"), "timed out connecting to 10.0.0.1:443"),
        (ProviderTimeout("slow", phase="total"), None),
        (ValueError("text"), None),
    ],
)
def test_failure_reason_is_what_a_person_can_act_on(exc: BaseException, reason: str | None) -> None:
    """A 4xx keeps the provider's own reason (scrubbed, one line); a connect failure its kind and host:port."""
    assert failure_reason(exc) == reason


def test_a_provider_reason_is_bounded() -> None:
    """However long the provider's message, the reason is at most 200 characters."""
    reason = failure_reason(err(400, "x" * 5000))
    assert reason is not None and len(reason) == 200 and reason.endswith("…")


# --- aggregate_message ---------------------------------------------------------------------------------


def test_aggregate_message_carries_a_rejected_requests_reason() -> None:
    """A 4xx event quotes the provider's reason (double quotes made single); other events have none."""
    attempts = [
        Attempt(provider="openai.a", model="gpt-x", outcome="non_retryable", status=400, reason='Unsupported "temp"'),
        Attempt(provider="openai.b", model="gpt-y", outcome="retryable", status=500, try_number=2),
    ]
    assert aggregate_message(attempts, 3).split("\n")[1:] == [
        "event 1 (openai.a/gpt-x, try 1/3): non_retryable; kind=client_error; phase=http_response; "
        "reason=\"Unsupported 'temp'\"; hint=provider rejected the request; check config, model, or request",
        "event 2 (openai.b/gpt-y, try 2/3): retryable; kind=provider_server; phase=http_response; "
        "hint=provider returned a server error; retry or switch provider",
    ]


def test_aggregate_message_shape() -> None:
    """One line per failure: profile/model, try n/max, outcome, kind, phase, hint; ok attempts are not events."""
    attempts = [
        attempt("rate_limited", status=429),
        attempt("cooldown_skip", try_number=0),
        attempt("empty", try_number=2),
        attempt("ok", try_number=3),
    ]
    assert aggregate_message(attempts, 3).split("\n") == [
        HEADER.format(n=3),
        "event 1 (openai.p/m, try 1/3): rate_limited; kind=rate_limited; phase=http_response; "
        "hint=wait, change key/quota, or switch provider",
        "event 2 (openai.p/m, skipped): rate_limit_cooldown; kind=rate_limited; phase=cooldown; "
        "hint=wait for provider cooldown or switch provider",
        "event 3 (openai.p/m, try 2/3): empty_response; kind=empty_response; phase=response; "
        "hint=provider returned no text and no tool calls",
    ]


def test_aggregate_message_names_a_breaker_skip_and_its_probe() -> None:
    """A breaker skip is its own event: the reason says the circuit breaker is open, the hint when it is probed."""
    attempts = [attempt("breaker_skip", try_number=0), attempt("breaker_skip", detail=PROBE_TAKEN, try_number=0)]
    assert aggregate_message(attempts, 3).split("\n") == [
        HEADER.format(n=2),
        "event 1 (openai.p/m, skipped): circuit_breaker_open; kind=breaker_open; phase=breaker; "
        "hint=the entry kept failing; one call probes it after the open interval",
        "event 2 (openai.p/m, skipped): circuit_breaker_open; kind=breaker_open; phase=breaker; "
        "hint=another call is probing this entry; wait for it or switch provider",
    ]


def test_aggregate_message_without_failures_has_no_events() -> None:
    """No failure events: only the header, and no omission marker."""
    assert aggregate_message([], 1) == HEADER.format(n=0)


def test_aggregate_message_keeps_exactly_eight_events_without_a_marker() -> None:
    """Eight failures all fit: no omission marker."""
    msg = aggregate_message([attempt("retryable", status=500)] * MAX_RETAINED_EVENTS, 1)
    assert msg.count("\nevent ") == 8
    assert "omitted" not in msg


def test_aggregate_message_names_the_first_eight_events_and_counts_the_rest() -> None:
    """Beyond eight failures the rest are counted as omitted (the marker is the last line)."""
    attempts = [attempt("retryable", status=500) for _ in range(29)] + [attempt("timeout", detail="timeout:idle")]
    msg = aggregate_message(attempts, 1)
    lines = msg.split("\n")
    assert lines[0] == HEADER.format(n=30)
    assert [line.split(" (")[0] for line in lines[1:9]] == [f"event {n}" for n in range(1, 9)]
    assert lines[9:] == ["[22 additional failure event(s) omitted]"]
    assert len(msg.encode()) <= MAX_AGGREGATE_BYTES


def test_aggregate_message_is_bounded_in_bytes_with_the_marker_counting_what_did_not_fit() -> None:
    """When long events exceed 2 KiB (counted in bytes, not characters) fewer are kept and the rest counted."""
    long_phase = "timeout:" + "é" * 300  # 600 bytes, 300 characters
    attempts = [attempt("timeout", detail=long_phase) for _ in range(5)]
    msg = aggregate_message(attempts, 1)
    assert len(msg.encode()) <= MAX_AGGREGATE_BYTES
    kept = msg.count("\nevent ")
    assert 0 < kept < 5
    assert msg.endswith(f"\n[{5 - kept} additional failure event(s) omitted]")
    one_more = msg.rsplit("\n", 1)[0] + "\n" + msg.split("\n")[1].replace("event 1 ", f"event {kept + 1} ")
    assert len(one_more) <= MAX_AGGREGATE_BYTES < len(one_more.encode())  # fits in characters, not in bytes


def test_aggregate_message_when_not_even_one_event_fits() -> None:
    """An event longer than the budget is counted as omitted; the message stays within 2 KiB."""
    msg = aggregate_message([attempt("timeout", detail="timeout:" + "x" * 3000)] * 2, 1)
    assert msg == HEADER.format(n=2) + "\n[2 additional failure event(s) omitted]"
