"""The classifier: what a failure means and its retry hint.

Scenarios expressed on typed :class:`ErrorFacts` (where a classifier could read numbers out of message text), plus
the classification table row by row with real provider error bodies.
"""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import CW, NR, REF, RL, RNR, R
from turnout.core.classify import (
    ErrorFacts,
    classify,
    classify_text,
    error_class_of,
    is_dead_key_error,
    parse_duration,
    provider_error,
    retry_after_seconds,
)
from turnout.core.errors import (
    EmptyCompletion,
    ErrorClass,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RefusalError,
    StreamTruncated,
)
from turnout.core.secrets import scrub


def hint(message: str = "", **kw: object) -> float | None:
    return retry_after_seconds(ErrorFacts(message=message, **kw))  # type: ignore[arg-type]


# --- ZeroClaw 39, 69-75, 80: typed statuses ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (400, "Bad Request", NR),
        (401, "Unauthorized", NR),
        (403, "Forbidden", NR),
        (404, "Not Found", NR),
        (429, "Too Many Requests", RL),
        (408, "Request Timeout", R),
        (409, "Conflict", R),
        (500, "Internal Server Error", R),
        (502, "Bad Gateway", R),
        (503, "Service Unavailable", R),
        (504, "Gateway Timeout", R),
        (401, "API error (401 Unauthorized): invalid api key", NR),
    ],
)
def test_typed_status_decides(status: int, message: str, expected: ErrorClass) -> None:
    """4xx (but 408/409/429) are non-retryable, 429 a rate limit, 408/409/5xx retryable (#39, #69-75, #80)."""
    assert classify(ErrorFacts(status=status, message=message)) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("invalid api key provided", NR),
        ("authentication failed", NR),
        ("model glm-4.7 not found", NR),
        ("unsupported model: glm-4.7", NR),
        ("timeout", R),
        ("connection reset", R),
        ("model overloaded, try again later", R),
        ("Codex error: exceeds the context window of this model", CW),
    ],
)
def test_text_patterns(text: str, expected: ErrorClass) -> None:
    """Status-less messages classify by the seed's phrase lists (#39)."""
    assert classify_text(text) is expected
    assert classify(ErrorFacts(message=text)) is expected


@pytest.mark.parametrize(
    "text",
    [
        "400 Bad Request",
        "API error with 404 Not Found",
        "error sending request for url (https://api.openai.com:443/v1/chat/completions): connection closed",
        "upstream connect error or disconnect/reset before headers. reset reason: connection termination :443",
    ],
)
def test_numbers_in_text_are_never_read_as_statuses(text: str) -> None:
    """Numbers in a message are not HTTP statuses: ``:443`` (or a quoted 4xx) does not make an error fatal."""
    assert classify_text(text) is R
    assert classify(ErrorFacts(message=text)) is R
    assert classify(ErrorFacts(status=503, message=text)) is R


# --- ZeroClaw 40: auth failures ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (ErrorFacts(status=401, message="Unauthorized"), True),
        (ErrorFacts(status=403, message="Forbidden"), True),
        (ErrorFacts(status=400, error_code="invalid_api_key", message="Incorrect API key provided"), True),
        (ErrorFacts(error_type="authentication_error", message="invalid x-api-key"), True),
        (ErrorFacts(status=400, error_type="INVALID_ARGUMENT", reason="API_KEY_INVALID"), True),
        (ErrorFacts(status=400, error_type="UNAUTHENTICATED"), True),
        # free text never kills a key: it can quote the client's own input back
        (ErrorFacts(message="invalid api key"), False),
        (ErrorFacts(message="authentication failed"), False),
        (ErrorFacts(message="token expired"), False),
        (ErrorFacts(status=400, message="Bad Request: invalid api key provided"), False),
        (ErrorFacts(status=400, message="The model `invalid api key` does not exist"), False),
        (ErrorFacts(status=404, error_code="model_not_found", message="invalid api key"), False),
        (ErrorFacts(status=400, message="Bad Request"), False),
        (ErrorFacts(status=429, message="Too Many Requests"), False),
        (ErrorFacts(message="timeout"), False),
        (ErrorFacts(message="connection reset"), False),
        (ErrorFacts(status=400, message="Invalid token count in request"), False),
    ],
)
def test_dead_key_detection(facts: ErrorFacts, expected: bool) -> None:
    """401, 403 and a typed invalid-key type/code/reason may kill a key; message text never does."""
    assert is_dead_key_error(facts) is expected
    err = provider_error(facts, provider="p.q", model="m")
    assert err.auth_failure is expected and is_dead_key_error(err) is expected


def test_token_expired_is_not_retried() -> None:
    """An expired token is an auth failure and non-retryable (retrying cannot fix it)."""
    assert classify_text("token expired") is NR


# --- ZeroClaw 59-68, 76-78: retry hints from text -----------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("429 Too Many Requests, Retry-After: 5", 5.0),
        ("Rate limited. retry_after: 2.5 seconds", 2.5),
        ("500 Internal Server Error", None),
        ("429 Retry-After: 3", 3.0),
        ("429 Retry-After: 120", 120.0),
        ("500 Server Error", None),
        ("429 Too Many Requests, Retry-After: 0", 0.0),
        ("429 rate limited, retry_after: 10", 10.0),
        ("Retry-After 7", 7.0),
    ],
)
def test_retry_after_from_text(message: str, expected: float | None) -> None:
    """The seed's text patterns give the hint in seconds; caps are the reliable walk's job (#59-61, #66-68, #76-78)."""
    assert hint(message) == expected


# --- ZeroClaw 62-65, 79, 81: rate limits ------------------------------------------------------


def test_rate_limit_detection() -> None:
    """429 and rate-limit phrases are rate limits; 401, 500 and "Connection refused" are not (#62, #79)."""
    assert classify(ErrorFacts(status=429, message="Too Many Requests")) is RL
    assert classify_text("HTTP 429 rate limit exceeded") is RL
    assert classify_text("429 Too Many Requests") is RL
    assert classify(ErrorFacts(status=401, message="Unauthorized")) is NR
    assert classify(ErrorFacts(status=500, message="Internal Server Error")) is R
    assert classify_text("Connection refused") is R


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("1311", "Your current plan does not include glm-5"),
        ("1113", "insufficient balance"),
    ],
)
def test_plan_and_balance_429s_are_not_retried(code: str, message: str) -> None:
    """A 429 for plan limits or insufficient balance is a non-retryable rate limit (#63, #64, #81)."""
    assert classify(ErrorFacts(status=429, error_code=code, message=message)) is RNR
    assert classify(ErrorFacts(status=429, message=message)) is RNR
    assert classify_text(message) is RNR


def test_generic_429_is_retryable_rate_limit() -> None:
    """A plain 429 is not flagged as a business limit (#65)."""
    assert classify(ErrorFacts(status=429, message="429 Too Many Requests")) is RL


# --- ZeroClaw 95-96: context window ------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "exceeds the context window",
        "maximum context length exceeded",
        "too many tokens in the request",
        "token limit exceeded",
        "request (8968 tokens) exceeds the available context size (8448 tokens), try increasing it",
    ],
)
def test_context_window_is_its_own_class(text: str) -> None:
    """Context-window errors are neither retryable nor plain non-retryable (#95, #96)."""
    assert classify_text(text) is CW
    assert classify(ErrorFacts(status=400, message=text)) is CW


# --- ZeroClaw 108-114: tool-schema errors -----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "tool call validation failed: attempted to call tool 'memory_recall' which was not in request",
        "tool 'search' was not in request",
        "function 'foo' not found in tool list",
        "invalid_tool_call: no matching function",
    ],
)
def test_tool_schema_400s_are_retryable(text: str) -> None:
    """A 400 caused by the model's malformed tool call is retryable: the next sample may be valid (#108-111, #113)."""
    assert classify(ErrorFacts(status=400, message=text)) is R


@pytest.mark.parametrize("text", ["invalid api key", "model not found", "Bad Request: invalid api key provided"])
def test_other_400s_stay_non_retryable(text: str) -> None:
    """400s that are not tool-schema errors stay non-retryable (#112, #114)."""
    assert classify(ErrorFacts(status=400, message=text)) is NR


# --- the classification table, row by row, with real bodies -------------------------------------------------

OPENAI_RATE = (
    "Rate limit reached for gpt-4.1 in organization org-abc on tokens per min (TPM): Limit 30000, Used 28039, "
    "Requested 3906. Please try again in 3.89s. Visit https://platform.openai.com/account/rate-limits to learn more."
)
OPENAI_QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more information on this "
    "error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."
)
OPENAI_TOO_LARGE = (
    "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 30601. "
    "The input or output tokens must be reduced in order to run successfully."
)
GEMINI_QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more information on this "
    "error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        # retryable
        (ErrorFacts(status=500, error_type="server_error", message="The server had an error"), R),
        (ErrorFacts(status=503, error_type="UNAVAILABLE", message="The model is overloaded."), R),
        (ErrorFacts(status=529, error_type="overloaded_error", message="Overloaded"), R),
        (ErrorFacts(status=500, error_type="api_error", message="Internal server error"), R),
        (ErrorFacts(status=408, message="Request Timeout"), R),
        (ErrorFacts(status=409, message="Conflict"), R),
        (ErrorFacts(error_type="overloaded_error", message="Overloaded", in_band=True), R),
        (ErrorFacts(error_type="api_error", message="Overloaded", in_band=True), R),
        (ErrorFacts(error_type="server_error", message="The server had an error", in_band=True), R),
        (ErrorFacts(error_type="UNAVAILABLE", message="high demand", in_band=True), R),
        (ErrorFacts(error_type="MALFORMED_FUNCTION_CALL", message="Malformed function call", in_band=True), R),
        # rate_limited
        (ErrorFacts(status=429, error_type="tokens", error_code="rate_limit_exceeded", message=OPENAI_RATE), RL),
        (
            ErrorFacts(
                status=429,
                error_type="tokens",
                error_code="rate_limit_exceeded",
                message=OPENAI_RATE,
                headers={"retry-after": "4", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "3.89s"},
            ),
            RL,
        ),
        (ErrorFacts(status=429, error_type="rate_limit_error", message="This request would exceed the rate limit"), RL),
        (ErrorFacts(status=429, error_type="RESOURCE_EXHAUSTED", message=GEMINI_QUOTA, retry_delay="26s"), RL),
        (
            ErrorFacts(
                status=429,
                error_type="RESOURCE_EXHAUSTED",
                message=GEMINI_QUOTA,
                quota_ids=("GenerateContentInputTokensPerModelPerMinute-FreeTier",),
            ),
            RL,
        ),
        (
            ErrorFacts(
                status=429,
                error_type="RESOURCE_EXHAUSTED",
                message=GEMINI_QUOTA,
                quota_ids=("GenerateRequestsPerDayPerProjectPerModel-FreeTier",),
            ),
            RL,
        ),
        (
            ErrorFacts(
                status=429,
                error_type="RESOURCE_EXHAUSTED",
                message="Resource exhausted. Please try again later. Please refer to "
                "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
            ),
            RL,
        ),
        (ErrorFacts(error_type="RESOURCE_EXHAUSTED", message="Resource has been exhausted", in_band=True), RL),
        # rate_limited_non_retryable
        (
            ErrorFacts(
                status=429, error_type="insufficient_quota", error_code="insufficient_quota", message=OPENAI_QUOTA
            ),
            RNR,
        ),
        (ErrorFacts(status=429, error_type="insufficient_quota", message=OPENAI_QUOTA), RNR),
        (ErrorFacts(status=429, error_type="tokens", error_code="rate_limit_exceeded", message=OPENAI_TOO_LARGE), RNR),
        (ErrorFacts(status=413, error_type="tokens", error_code="rate_limit_exceeded", message=OPENAI_TOO_LARGE), RNR),
        (ErrorFacts(status=402, message="Insufficient Balance"), RNR),
        (ErrorFacts(status=429, error_type="RESOURCE_EXHAUSTED", message=GEMINI_QUOTA), RNR),
        (ErrorFacts(status=429, message="quota exhausted for this month"), RNR),
        (ErrorFacts(error_type="insufficient_quota", error_code="insufficient_quota", message=OPENAI_QUOTA), RNR),
        # non_retryable
        (ErrorFacts(status=400, error_type="invalid_request_error", message="Unsupported parameter: 'max_tokens'"), NR),
        (ErrorFacts(status=404, error_type="invalid_request_error", error_code="model_not_found", message="nope"), NR),
        (ErrorFacts(status=401, error_type="invalid_request_error", error_code="invalid_api_key", message="bad"), NR),
        (ErrorFacts(status=403, error_type="permission_error", message="Permission denied"), NR),
        (
            ErrorFacts(
                status=400,
                error_type="INVALID_ARGUMENT",
                message="API key not valid. Please pass a valid API key.",
                reason="API_KEY_INVALID",
            ),
            NR,
        ),
        (
            ErrorFacts(
                status=400,
                error_type="invalid_request_error",
                message="Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
                "to upgrade or purchase credits.",
            ),
            NR,
        ),
        (ErrorFacts(status=400, error_type="FAILED_PRECONDITION", message="User location is not supported"), NR),
        # context_window
        (
            ErrorFacts(
                status=400,
                error_type="invalid_request_error",
                error_code="context_length_exceeded",
                message="This model's maximum context length is 128000 tokens. However, your messages resulted in "
                "202868 tokens (202767 in the messages, 101 in the functions).",
            ),
            CW,
        ),
        (
            ErrorFacts(
                status=400,
                error_type="invalid_request_error",
                error_code="context_length_exceeded",
                message="Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in "
                "3148588 tokens. Please reduce the length of the messages.",
            ),
            CW,
        ),
        (
            ErrorFacts(
                status=400,
                error_type="invalid_request_error",
                message="prompt is too long: 205429 tokens > 200000 maximum",
            ),
            CW,
        ),
        (
            ErrorFacts(
                status=400,
                error_type="INVALID_ARGUMENT",
                message="The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
            ),
            CW,
        ),
        (ErrorFacts(status=400, message="the input length exceeds the context length"), CW),
        # refusal
        (
            ErrorFacts(
                status=400,
                error_code="content_filter",
                message="The response was filtered due to the prompt triggering Azure OpenAI's content management "
                "policy.",
                reason="ResponsibleAIPolicyViolation",
            ),
            REF,
        ),
        (ErrorFacts(status=400, error_code="content_filter", message="The response was filtered"), REF),
        (ErrorFacts(status=400, reason="ResponsibleAIPolicyViolation", message="filtered"), REF),
        (
            ErrorFacts(
                status=400,
                error_type="invalid_request_error",
                error_code="content_policy_violation",
                message="Your request was rejected as a result of our safety system.",
            ),
            REF,
        ),
    ],
)
def test_spec_table(facts: ErrorFacts, expected: ErrorClass) -> None:
    """Each row of the classification table, with real provider bodies, gets its class."""
    assert classify(facts) is expected


def test_gemini_invalid_key_is_a_dead_key() -> None:
    """Gemini's 400 API_KEY_INVALID is a non-retryable auth failure that kills the key."""
    facts = ErrorFacts(
        status=400,
        error_type="INVALID_ARGUMENT",
        message="API key not valid. Please pass a valid API key.",
        reason="API_KEY_INVALID",
    )
    err = provider_error(facts, provider="gemini.main", model="gemini-2.5-flash")
    assert err.error_class is NR
    assert err.auth_failure is True
    assert is_dead_key_error(err)


def test_refusal_builds_refusal_error() -> None:
    """A refusal-class failure is raised as a RefusalError."""
    err = provider_error(
        ErrorFacts(status=400, error_code="content_filter", message="filtered"), provider="a", model="m"
    )
    assert isinstance(err, RefusalError)
    assert err.error_class is REF


def test_provider_error_carries_facts_and_scrubs_secrets() -> None:
    """The built error keeps status, type, code, hint and request id, and never a key."""
    key = "sk-proj-abcdefghijklmnop"
    facts = ErrorFacts(
        status=429,
        error_type="tokens",
        error_code="rate_limit_exceeded",
        message=f"Rate limit reached for key {key}. Please try again in 1.5s.",
        headers={"x-request-id": "req_123"},
    )
    err = provider_error(facts, provider="openai.main", model="gpt-4.1", secrets=(key,))
    assert key not in str(err)
    assert (err.status, err.error_type, err.error_code) == (429, "tokens", "rate_limit_exceeded")
    assert err.retry_after == 1.5
    assert err.request_id == "req_123"
    assert err.error_class is RL


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ProviderTimeout("t", phase="idle"), ErrorClass.TIMEOUT),
        (TimeoutError(), ErrorClass.TIMEOUT),
        (ConnectionResetError(), R),
        (ProviderConnectionError("reset"), R),
        (StreamTruncated("message_stop"), R),
        (EmptyCompletion(), ErrorClass.EMPTY),
        (RefusalError(), REF),
        (ProviderError("x", error_class=RL), RL),
        (ValueError("invalid api key"), NR),
    ],
)
def test_error_class_of_exceptions(exc: BaseException, expected: ErrorClass) -> None:
    """Timeouts, resets, truncation, empties and typed provider errors map to their classes."""
    assert error_class_of(exc) is expected


def test_dead_key_needs_an_auth_failure() -> None:
    """Only auth failures kill a key (401, a 403 that is not moderation); rate limits and other errors do not."""
    assert is_dead_key_error(provider_error(ErrorFacts(status=401, message="x"), provider="a.b", model="m"))
    assert is_dead_key_error(provider_error(ErrorFacts(status=403, message="Forbidden"), provider="a.b", model="m"))
    assert is_dead_key_error(ProviderError("x", status=400, auth_failure=True))
    assert not is_dead_key_error(ProviderError("x", status=429, error_class=RL))
    assert not is_dead_key_error(ValueError("invalid api key"))


# --- Retry-After sources, in order ------------------------------------------------------

NOW = 1_700_000_000.0


def test_retry_after_ms_comes_first() -> None:
    """``retry-after-ms`` wins over ``Retry-After`` and everything else."""
    headers = {"retry-after-ms": "1500", "retry-after": "10", "x-ratelimit-reset-tokens": "6m0s"}
    assert hint("Retry-After: 99", headers=headers, retry_delay="37s", status=429) == 1.5


@pytest.mark.parametrize(("value", "expected"), [("12", 12.0), ("2.5", 2.5), ("0", 0.0)])
def test_retry_after_seconds(value: str, expected: float) -> None:
    """``Retry-After`` in (possibly fractional) seconds, ahead of RetryInfo and text."""
    assert hint("Retry-After: 99", headers={"retry-after": value}, retry_delay="37s") == expected


def test_retry_after_http_date() -> None:
    """``Retry-After`` as an HTTP date is measured from now; a past date means now."""
    future = email.utils.format_datetime(datetime.fromtimestamp(NOW + 30, tz=UTC), usegmt=True)
    past = email.utils.format_datetime(datetime.fromtimestamp(NOW - 30, tz=UTC), usegmt=True)
    assert retry_after_seconds(ErrorFacts(headers={"retry-after": future}), now=lambda: NOW) == pytest.approx(30.0)
    assert retry_after_seconds(ErrorFacts(headers={"retry-after": past}), now=lambda: NOW) == 0.0


def test_unusable_headers_fall_through() -> None:
    """Garbage or negative header values are skipped, and the next source is read."""
    assert hint(headers={"retry-after-ms": "soon", "retry-after": "later"}, retry_delay="37s") == 37.0
    assert hint(headers={"retry-after": "-5"}, retry_delay="4s") == 4.0


@pytest.mark.parametrize(("delay", "expected"), [("37s", 37.0), ("0.847655010s", 0.847655010), ("34.4s", 34.4)])
def test_gemini_retry_info(delay: str, expected: float) -> None:
    """Gemini ``RetryInfo.retryDelay`` protobuf durations, ahead of reset headers and text."""
    got = hint("Please try again in 3s", retry_delay=delay, headers={"x-ratelimit-reset-tokens": "6m0s"}, status=429)
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("6m0s", 360.0), ("1h2m3s", 3723.0), ("12ms", 0.012), ("7.66s", 7.66), ("2m59.56s", 179.56), ("1s", 1.0)],
)
def test_go_durations(text: str, expected: float) -> None:
    """OpenAI/Groq reset durations parse as Go durations."""
    assert parse_duration(text) == pytest.approx(expected)
    assert hint(status=429, headers={"x-ratelimit-reset-requests": text}) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "soon", "6m0", "1x", "-5s"])
def test_bad_durations(text: str) -> None:
    """Anything that is not a complete duration is not a duration."""
    assert parse_duration(text) is None


def test_reset_with_zero_remaining_is_preferred() -> None:
    """Of the reset headers, the one whose remaining count is 0 is the binding limit."""
    headers = {
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    assert hint(OPENAI_RATE, status=429, headers=headers) == 360.0
    headers["x-ratelimit-remaining-tokens"] = "120"
    assert hint(status=429, headers=headers) == 1.0


def test_reset_headers_without_zero_remaining_need_a_429() -> None:
    """Reset headers on a success-like or non-429 error are not a retry hint by themselves."""
    headers = {"x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "6m0s"}
    assert hint(status=500, headers=headers) is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("retry-after: 5", 5.0),
        ("retry_after: 2.5", 2.5),
        ("Retry-After 7", 7.0),
        (OPENAI_RATE, 3.89),
        ("Please try again in 11.455s. Need more tokens?", 11.455),
        ("Please try again in 250ms.", 0.25),
        ("Please retry after 86400 seconds.", 86400.0),
        ("no hint here", None),
    ],
)
def test_text_hints_come_last(message: str, expected: float | None) -> None:
    """Message phrases are read only when no header or RetryInfo gave a hint."""
    assert hint(message) == pytest.approx(expected) if expected is not None else hint(message) is None
    assert hint(message, headers={"retry-after": "1"}) == 1.0


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        # a refusal is asked before the context window
        (ErrorFacts(status=400, error_code="context_length_exceeded", message="content filtering policy"), REF),
        (ErrorFacts(error_code="context_length_exceeded", message="blocked by a content filter"), REF),
        # a 429 is too large for the context window only by its typed code, and is never read for refusal phrases
        (ErrorFacts(status=429, error_code="context_length_exceeded", message="prompt is too long"), CW),
        (ErrorFacts(status=429, message="prompt is too long content filtering policy"), RL),
        # context-window phrases count on any other 4xx, and not on a 5xx
        (ErrorFacts(status=413, message="prompt is too long"), CW),
        (ErrorFacts(status=503, message="prompt is too long"), R),
    ],
)
def test_rules_are_asked_in_order(facts: ErrorFacts, expected: ErrorClass) -> None:
    """Refusal before context window, and each one's phrases only for the statuses the table gives them."""
    assert classify(facts) is expected


@pytest.mark.parametrize(
    "facts",
    [
        ErrorFacts(status=429, error_type="authentication_error"),
        ErrorFacts(status=401, message="Your input was flagged by moderation"),
        ErrorFacts(status=403, message="Forbidden", error_code="invalid_api_key"),
    ],
)
def test_typed_key_rejection_and_401_kill_a_key_whatever_else_they_say(facts: ErrorFacts) -> None:
    """A typed invalid-key fact kills a key whatever the status, and a 401 whatever its message."""
    assert is_dead_key_error(facts)
    assert provider_error(facts, provider="a.b", model="m").auth_failure


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-1"])
def test_headers_that_are_no_finite_wait_fall_through(value: str) -> None:
    """A header hint that is not a finite, non-negative number is skipped, in seconds or milliseconds."""
    assert hint(headers={"retry-after": value}, retry_delay="4s") == 4.0
    assert hint(headers={"retry-after-ms": value}, retry_delay="4s") == 4.0


def test_anthropic_content_filtering_block_is_a_refusal() -> None:
    """Anthropic's 400 'Output blocked by content filtering policy' is a refusal, not a plain 400."""
    from turnout.core.classify import ErrorFacts, classify
    from turnout.core.errors import ErrorClass

    facts = ErrorFacts(
        status=400, error_type="invalid_request_error", message="Output blocked by content filtering policy"
    )
    assert classify(facts) is ErrorClass.REFUSAL


def test_moderation_403_does_not_kill_the_key() -> None:
    """An OpenRouter 403 moderation block is non-retryable but leaves the key alive."""
    from turnout.core.classify import ErrorFacts, classify
    from turnout.core.errors import ErrorClass

    facts = ErrorFacts(status=403, message="Your input was flagged by moderation")
    assert classify(facts) is ErrorClass.NON_RETRYABLE
    assert not is_dead_key_error(facts)
    assert is_dead_key_error(ErrorFacts(status=403, message="Permission denied"))
    assert not is_dead_key_error(provider_error(facts, provider="openrouter.main", model="m"))


_facts = st.builds(
    ErrorFacts,
    status=st.one_of(st.none(), st.sampled_from([400, 401, 402, 403, 404, 408, 429, 500, 503])),
    error_type=st.one_of(st.none(), st.sampled_from(["requests", "rate_limit_error", "invalid_request_error", "X"])),
    error_code=st.one_of(
        st.none(), st.sampled_from(["rate_limit_exceeded", "content_filter", "invalid_api_key", "insufficient_quota"])
    ),
    message=st.one_of(st.text(max_size=40), st.sampled_from(["prompt is too long", "key sk-abcdefghijk leaked"])),
    headers=st.dictionaries(
        st.sampled_from(["retry-after", "retry-after-ms", "x-request-id", "request-id"]),
        st.sampled_from(["0", "2", "soon", "req-1"]),
    ),
    reason=st.one_of(st.none(), st.just("API_KEY_INVALID")),
)


@settings(max_examples=400, deadline=None)
@given(facts=_facts, request_id=st.one_of(st.none(), st.just("req-given")), secret=st.sampled_from(["", "leaked"]))
def test_provider_error_is_what_the_class_call_makes(facts: ErrorFacts, request_id: str | None, secret: str) -> None:
    """``provider_error`` makes the error its class makes of the classifier's facts: same type, args and attributes."""
    made = provider_error(facts, provider="openai.a", model="m", request_id=request_id, secrets=(secret,))
    error_class = classify(facts)
    kind = RefusalError if error_class is ErrorClass.REFUSAL else ProviderError
    expected = kind(
        scrub((facts.message or "provider error")[:2000], (secret,)),
        error_class=error_class,
        provider="openai.a",
        model="m",
        status=facts.status,
        error_type=facts.error_type,
        error_code=facts.error_code,
        retry_after=retry_after_seconds(facts),
        request_id=request_id or facts.headers.get("x-request-id") or facts.headers.get("request-id"),
        auth_failure=is_dead_key_error(facts),
    )
    assert type(made) is type(expected)
    assert made.args == expected.args and vars(made) == vars(expected) and str(made) == str(expected)
