"""What a failure means: its error class and its retry hint.

The one owner of that decision. Adapters extract :class:`ErrorFacts` from their protocol (HTTP status,
the provider's error ``type``/``code``, Gemini details, headers) and call :func:`provider_error`; the
reliable walk reads the resulting :class:`~turnout.core.errors.ProviderError`'s ``error_class`` and
``retry_after``.

Typed facts decide first (status, error type and code, exception class). Message text is consulted only
as the last resort, with phrase lists, and never by scanning it for numbers: ZeroClaw's number scan reads
``:443`` in a URL as an HTTP 4xx.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from turnout.core.errors import ErrorClass, ProviderError, RefusalError
from turnout.core.secrets import scrub

# --- phrase lists (as ZeroClaw's reliable.rs has them), lowercased ------------------------------------

AUTH_HINTS = (
    "invalid api key",
    "incorrect api key",
    "missing api key",
    "api key not set",
    "authentication failed",
    "auth failed",
    "unauthorized",
    "forbidden",
    "permission denied",
    "access denied",
    "invalid token",
    "token expired",
)
MODEL_NOT_FOUND_WORDS = ("not found", "unknown", "unsupported", "does not exist", "invalid")
CONTEXT_WINDOW_HINTS = (
    "exceeds the context window",
    "exceeds the available context size",
    "context window of this model",
    "maximum context length",
    "context length exceeded",
    "too many tokens",
    "token limit exceeded",
    "prompt is too long",
    "input is too long",
    "prompt exceeds max length",
    "exceeds the maximum number of tokens",
    "input tokens exceed the configured limit",
    "exceeds the context length",
    "longer than the context length",
)
BUSINESS_RATE_LIMIT_HINTS = (
    "plan does not include",
    "doesn't include",
    "not include",
    "insufficient balance",
    "insufficient_balance",
    "insufficient quota",
    "insufficient_quota",
    "quota exhausted",
    "out of credits",
    "no available package",
    "package not active",
    "purchase package",
    "model not available for your plan",
    "credit balance is too low",
)
BUSINESS_ERROR_CODES = frozenset({"1113", "1311", "insufficient_quota", "insufficient_balance", "billing_error"})
TOOL_SCHEMA_HINTS = ("tool call validation failed", "was not in request", "not found in tool list", "invalid_tool_call")

REFUSAL_CODES = frozenset({"content_filter", "content_policy_violation", "responsibleaipolicyviolation"})
RETRYABLE_TYPES = frozenset(
    {
        "overloaded_error",
        "api_error",
        "server_error",
        "timeout_error",
        "internal_error",
        "unavailable",
        "internal",
        "deadline_exceeded",
        "aborted",
        "service_unavailable",
        "malformed_function_call",
        # AWS (Bedrock): exception frames and x-amzn-ErrorType names, lowercased
        "internalserverexception",
        "serviceunavailableexception",
        "modelstreamerrorexception",
        "modeltimeoutexception",
        "modelnotreadyexception",
    }
)
#: AWS errors that are worth another try although their status is a 4xx (Bedrock sends the model's own failures
#: as 424 ``ModelErrorException`` / ``ModelStreamErrorException``).
RETRYABLE_4XX_TYPES = frozenset({"modelerrorexception", "modelstreamerrorexception", "modelnotreadyexception"})
RATE_LIMIT_TYPES = frozenset(
    {"rate_limit_error", "rate_limit_exceeded", "resource_exhausted", "tokens", "requests", "throttlingexception"}
)
NON_RETRYABLE_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "invalid_argument",
        "permission_denied",
        "unauthenticated",
        "not_found",
        "failed_precondition",
        "request_too_large",
        # AWS (Bedrock): the caller's or the account's, not worth the same request again
        "validationexception",
        "accessdeniedexception",
        "resourcenotfoundexception",
    }
)
#: Error types and codes that say the credential is invalid, whatever the status (OpenAI ``invalid_api_key``,
#: Anthropic ``authentication_error``, Google ``UNAUTHENTICATED``). Permission errors are not here: they say
#: what a key may do, and arrive as a 403 when they concern the key.
KEY_INVALID_TYPES = frozenset(
    {"authentication_error", "invalid_api_key", "unauthenticated", "unrecognizedclientexception"}
)
#: Gemini ``ErrorInfo.reason`` values that say the key is invalid.
KEY_INVALID_REASONS = frozenset({"api_key_invalid", "api_key_expired"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorFacts:
    """What an adapter knows about one failure, before it is classified.

    Attributes:
        status: HTTP status (None for an in-band stream error or a transport failure).
        error_type: The provider's error ``type`` (Gemini: ``status`` such as ``RESOURCE_EXHAUSTED``).
        error_code: The provider's error ``code`` as text (``context_length_exceeded``, ``insufficient_quota``).
        message: The provider's message (scrubbed of secrets before it is kept).
        headers: Response headers: case-insensitive (aiohttp's), or a mapping with lowercased names.
        retry_delay: Gemini ``RetryInfo.retryDelay`` (``"37s"``).
        quota_ids: Gemini ``QuotaFailure`` quota ids (``...PerMinute...``, ``...PerDay...``).
        reason: Gemini ``ErrorInfo.reason`` (``API_KEY_INVALID``).
        in_band: The error arrived inside a 200 stream.
    """

    status: int | None = None
    error_type: str | None = None
    error_code: str | None = None
    message: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    retry_delay: str | None = None
    quota_ids: tuple[str, ...] = ()
    reason: str | None = None
    in_band: bool = False


def _low(s: str | None) -> str:
    return s.lower() if s else ""


def _has(text: str, phrases: tuple[str, ...]) -> bool:
    return any(phrase in text for phrase in phrases)


def _lowered(facts: ErrorFacts) -> tuple[str, str, str, str]:
    """``error_code``, ``error_type``, ``reason`` and ``message`` of ``facts``, lowercased (``""`` for None).

    The rules below all compare lowercased text.
    """
    return _low(facts.error_code), _low(facts.error_type), _low(facts.reason), _low(facts.message)


REFUSAL_HINTS = (
    "content filtering policy",
    "content management policy",
    "content_policy_violation",
    "content policy violation",
    "violates the content policy",
    "blocked by a content filter",
)
MODERATION_HINTS = ("moderation", "flagged")


def _refusal(status: int | None, code: str, reason: str, text: str) -> bool:
    """A refusal: its typed code or reason; else, for a 400 or an error without a status, its phrases."""
    if code in REFUSAL_CODES or reason in REFUSAL_CODES:
        return True
    return status in (None, 400) and _has(text, REFUSAL_HINTS)


def _context_window(status: int | None, code: str, text: str) -> bool:
    """Too large for the context window: its typed code; else its phrases (a 4xx but a 429, or no status)."""
    if code == "context_length_exceeded":
        return True
    if status == 429:
        return False
    if status is not None and not 400 <= status < 500:
        return False
    return _has(text, CONTEXT_WINDOW_HINTS)


def _has_retry_hint(facts: ErrorFacts) -> bool:
    """A retry hint is given, in any form (whether it parses is :func:`retry_after_seconds`' question)."""
    h = facts.headers
    return bool(facts.retry_delay) or "retry-after" in h or "retry-after-ms" in h


def _timed_quota(facts: ErrorFacts) -> bool:
    """A quota that refills by the minute or the day."""
    # Gemini's ids say ``PerMinute`` / ``PerDay``; Vertex AI's metrics ``per_minute``, and its online-prediction
    # quotas (``aiplatform.googleapis.com/online_prediction_requests_per_base_model``) are per minute too
    return any(
        "perminute" in q or "perday" in q or "per_minute" in q or "per_day" in q or "online_prediction" in q
        for q in (q.lower() for q in facts.quota_ids)
    )


def _key_rejected(facts: ErrorFacts) -> bool:
    """The rule of :func:`is_dead_key_error`, on the facts of one failure."""
    status = facts.status
    code, etype, reason, text = _lowered(facts)
    if status == 401:
        return True
    if status == 403:  # a moderation block (OpenRouter) says nothing about the key
        return not _has(text, MODERATION_HINTS)
    # Typed facts only: free text can quote the client's own input ("invalid api key" in a model name).
    return reason in KEY_INVALID_REASONS or etype in KEY_INVALID_TYPES or code in KEY_INVALID_TYPES


def classify(facts: ErrorFacts) -> ErrorClass:
    """The error class of a failure described by ``facts``.

    The rules are asked in this order: refusal, context window, 402, rate limits
    (business limits first), billing codes, the status, the type or code of an error without a status, and
    last the message's phrases.
    """
    status = facts.status
    code, etype, reason, text = _lowered(facts)
    if _refusal(status, code, reason, text):
        return ErrorClass.REFUSAL
    if _context_window(status, code, text):
        return ErrorClass.CONTEXT_WINDOW
    if status == 402:
        return ErrorClass.RATE_LIMITED_NON_RETRYABLE
    if status == 429 or etype in RATE_LIMIT_TYPES or code in ("rate_limit_exceeded", "resource_exhausted"):
        if code in BUSINESS_ERROR_CODES or etype in ("insufficient_quota", "billing_error"):
            return ErrorClass.RATE_LIMITED_NON_RETRYABLE
        if text.startswith("request too large"):
            return ErrorClass.RATE_LIMITED_NON_RETRYABLE
        if _has_retry_hint(facts) or _timed_quota(facts):
            return ErrorClass.RATE_LIMITED
        if _has(text, BUSINESS_RATE_LIMIT_HINTS) or "quota" in text:
            return ErrorClass.RATE_LIMITED_NON_RETRYABLE
        return ErrorClass.RATE_LIMITED
    if code in BUSINESS_ERROR_CODES or etype == "billing_error":
        return ErrorClass.RATE_LIMITED_NON_RETRYABLE
    if status is not None:
        if status >= 500 or status in (408, 409):
            return ErrorClass.RETRYABLE
        if 400 <= status < 500:
            if _has(text, TOOL_SCHEMA_HINTS) or etype in RETRYABLE_4XX_TYPES:
                return ErrorClass.RETRYABLE
            return ErrorClass.NON_RETRYABLE
        return ErrorClass.RETRYABLE
    # No status: an in-band stream error, or something else without HTTP facts.
    if etype in RETRYABLE_TYPES or code in RETRYABLE_TYPES:
        return ErrorClass.RETRYABLE
    if etype in NON_RETRYABLE_TYPES or code in NON_RETRYABLE_TYPES or code == "model_not_found":
        return ErrorClass.NON_RETRYABLE
    return _classify_lowered(text)


def classify_text(text: str) -> ErrorClass:
    """Last resort: classify a bare message by the phrase lists (never by numbers in it)."""
    return _classify_lowered(text.lower())


def _classify_lowered(low: str) -> ErrorClass:
    if _has(low, CONTEXT_WINDOW_HINTS):
        return ErrorClass.CONTEXT_WINDOW
    if _has(low, BUSINESS_RATE_LIMIT_HINTS):
        return ErrorClass.RATE_LIMITED_NON_RETRYABLE
    if "rate limit" in low or "too many requests" in low:
        return ErrorClass.RATE_LIMITED
    if _has(low, AUTH_HINTS):
        return ErrorClass.NON_RETRYABLE
    if "model" in low and _has(low, MODEL_NOT_FOUND_WORDS):
        return ErrorClass.NON_RETRYABLE
    return ErrorClass.RETRYABLE


# --- retry hints --------------------------------------------------------------------------------

_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_TEXT_HINTS = (
    re.compile(r"retry[-_]after[:\s]\s*(\d+(?:\.\d+)?)", re.IGNORECASE),
    re.compile(r"try again in (\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?)\b", re.IGNORECASE),
    re.compile(r"retry after (\d+(?:\.\d+)?) seconds?", re.IGNORECASE),
)
#: ``(x-ratelimit-reset-*, x-ratelimit-remaining-*)`` for tokens, then requests.
_RATELIMIT_HEADERS = tuple(
    (f"x-ratelimit-reset-{kind}", f"x-ratelimit-remaining-{kind}") for kind in ("tokens", "requests")
)


def parse_duration(text: str) -> float | None:
    """Seconds in a Go/protobuf duration (``"6m0s"``, ``"1h2m3s"``, ``"12ms"``, ``"37s"``, ``"0.84s"``)."""
    text = text.strip()
    if not text:
        return None
    total = 0.0
    pos = 0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        return None
    return total


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) and v >= 0 else None


def retry_after_seconds(facts: ErrorFacts, now: Callable[[], float] = time.time) -> float | None:
    """The provider's retry hint in seconds, or None.

    Read in order from: ``retry-after-ms``, ``Retry-After`` (seconds or HTTP date), Gemini
    ``RetryInfo.retryDelay``, OpenAI ``x-ratelimit-reset-*``, and finally phrases in the message
    (``retry-after: 5``, ``try again in 3.89s``).
    """
    h = facts.headers
    raw = h.get("retry-after-ms")
    if raw is not None:
        try:
            secs = _finite(float(raw) / 1000.0)
            if secs is not None:
                return secs
        except ValueError:
            pass
    raw = h.get("retry-after")
    if raw is not None:
        try:
            secs = _finite(float(raw))
            if secs is not None:
                return secs
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(raw)
                return max(0.0, when.timestamp() - now())
            except (TypeError, ValueError, IndexError):
                pass
    if facts.retry_delay:
        v = _finite(parse_duration(facts.retry_delay))
        if v is not None:
            return v
    resets = []
    for reset_header, remaining_header in _RATELIMIT_HEADERS:
        reset = h.get(reset_header)
        if reset is None:
            continue
        v = _finite(parse_duration(reset))
        if v is None:
            continue
        if h.get(remaining_header, "").strip() == "0":
            return v
        resets.append(v)
    if resets and facts.status == 429:
        return min(resets)
    if facts.message:
        for pattern in _TEXT_HINTS:
            m = pattern.search(facts.message)
            if m:
                scale = 1e-3 if (m.lastindex or 0) >= 2 and m.group(2).lower() == "ms" else 1.0
                return _finite(float(m.group(1)) * scale)
    return None


# --- building the typed error -------------------------------------------------------------------


def provider_error(
    facts: ErrorFacts,
    *,
    provider: str | None,
    model: str | None,
    request_id: str | None = None,
    secrets: Iterable[str] = (),
    fallback_message: str = "provider error",
) -> ProviderError:
    """A typed, classified error for ``facts``, its message scrubbed of every secret."""
    message = scrub((facts.message or fallback_message)[:2000], tuple(secrets))
    error_class = classify(facts)
    headers = facts.headers
    request_id = request_id or headers.get("x-request-id") or headers.get("request-id")
    kind = RefusalError if error_class is ErrorClass.REFUSAL else ProviderError
    return kind(
        message,
        error_class=error_class,
        provider=provider,
        model=model,
        status=facts.status,
        error_type=facts.error_type,
        error_code=facts.error_code,
        retry_after=retry_after_seconds(facts),
        request_id=request_id,
        auth_failure=_key_rejected(facts),
    )


def endpoint_missing(exc: ProviderError) -> bool:
    """A 404 that is not the provider's answer about a model: the URL names no endpoint (a ``uri`` missing ``/v1``).

    A provider's own "no such model" names the model in its code, type or message (OpenAI ``model_not_found``,
    Anthropic ``not_found_error`` "model: …", Gemini "models/… is not found", Ollama "model '…' not found"); a
    404 from a server or proxy with no such endpoint does not.
    """
    if exc.status != 404:
        return False
    words = f"{exc.error_code or ''} {exc.error_type or ''} {exc.message}".lower()
    return "model" not in words and "not_found_error" not in words


def error_class_of(exc: BaseException) -> ErrorClass:
    """The error class of any exception raised during an attempt."""
    if isinstance(exc, ProviderError):
        return exc.error_class
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return ErrorClass.TIMEOUT
    if isinstance(exc, ConnectionError | OSError):
        return ErrorClass.RETRYABLE
    return classify_text(str(exc))


def is_dead_key_error(failure: BaseException | ErrorFacts) -> bool:
    """The provider rejected the credential itself: the one rule that may kill a key.

    401; a 403 that is not a moderation block; or an error whose type, code or Gemini reason says the key
    is invalid (``invalid_api_key``, ``authentication_error``, ``UNAUTHENTICATED``, ``API_KEY_INVALID``).
    Never message text, which can echo the client's input. For an exception this is its ``auth_failure``,
    which :func:`provider_error` sets by the same rule.
    """
    if isinstance(failure, ErrorFacts):
        return _key_rejected(failure)
    return isinstance(failure, ProviderError) and failure.auth_failure
