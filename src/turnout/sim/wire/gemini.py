"""Google Gemini (``/v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``).

Streams are ``data: <GenerateContentResponse>`` events framed with CRLF (as Gemini's ``alt=sse`` is
reported to send), with cumulative ``usageMetadata`` on every chunk and no terminator: the stream is
complete after a chunk carrying ``finishReason``. Errors are ``{"error": {"code", "message", "status",
"details"?}}``; rate limits carry their hint as ``RetryInfo.retryDelay`` in the body, not in headers.
"""

from __future__ import annotations

from typing import Any

from turnout.sim.behaviour import Content, ErrorKind, ErrorSpec, Finish, SimUsage
from turnout.sim.schema import gemini_schema
from turnout.sim.wire.base import DEFAULT_STATUS, Codec, Parsed, StreamEncoder, Unit, broken, dumps, new_id, retry_delay

DEFAULT_CONTEXT_LIMIT = 1_048_576

_RPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

_QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. For more information on "
    "this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
)

_MESSAGES = {
    ErrorKind.FORBIDDEN: "The caller does not have permission",
    ErrorKind.CONTENT_FILTER: "The request was blocked because it violates the content policy.",
    ErrorKind.BAD_REQUEST: "Request contains an invalid argument.",
    ErrorKind.SERVER: (
        "An internal error has occurred. Please retry or report in "
        "https://developers.generativeai.google/guide/troubleshooting"
    ),
    ErrorKind.UNAVAILABLE: "The model is overloaded. Please try again later.",
    ErrorKind.OVERLOADED: "The model is overloaded. Please try again later.",
}

_SAFETY_CATEGORIES = (
    "HARM_CATEGORY_SEXUALLY_EXPLICIT",
    "HARM_CATEGORY_HATE_SPEECH",
    "HARM_CATEGORY_HARASSMENT",
    "HARM_CATEGORY_DANGEROUS_CONTENT",
)


def _ratings(blocked: bool) -> list[dict[str, Any]]:
    ratings: list[dict[str, Any]] = [{"category": c, "probability": "NEGLIGIBLE"} for c in _SAFETY_CATEGORIES]
    if blocked:
        ratings[-1] = {"category": _SAFETY_CATEGORIES[-1], "probability": "HIGH", "blocked": True}
    return ratings


def _quota_failure(model: str, per_day: bool) -> dict[str, Any]:
    period = "Day" if per_day else "Minute"
    return {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
            {
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": f"GenerateRequestsPer{period}PerProjectPerModel-FreeTier",
                "quotaDimensions": {"location": "global", "model": model},
                "quotaValue": "250" if per_day else "10",
            }
        ],
    }


_HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}


def gemini_error(spec: ErrorSpec, status: int, model: str) -> dict[str, Any]:
    """The ``error`` object for ``spec`` at HTTP ``status``."""
    kind = spec.kind or ErrorKind.UNAVAILABLE
    details: list[dict[str, Any]] | None = None
    rpc = _RPC_STATUS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    if kind in (ErrorKind.RATE_LIMIT, ErrorKind.QUOTA, ErrorKind.BILLING):
        message = _QUOTA_MESSAGE
        details = [_quota_failure(model, per_day=kind is not ErrorKind.RATE_LIMIT), _HELP]
    elif kind is ErrorKind.AUTH and status == 400:
        message = "API key not valid. Please pass a valid API key."
        details = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            },
            {"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": message},
        ]
    elif kind is ErrorKind.AUTH:
        message = (
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
            "other valid authentication credential. See "
            "https://developers.google.com/identity/sign-in/web/devconsole-project."
        )
    elif kind is ErrorKind.NOT_FOUND:
        message = (
            f"models/{model} is not found for API version v1beta, or is not supported for generateContent. "
            "Call ListModels to see the list of available models and their supported methods."
        )
    elif kind is ErrorKind.CONTEXT_LENGTH:
        limit = spec.limit or DEFAULT_CONTEXT_LIMIT
        message = (
            f"The input token count ({spec.tokens or limit + 1}) exceeds the maximum number of tokens "
            f"allowed ({limit})."
        )
    else:
        message = _MESSAGES.get(kind, _MESSAGES[ErrorKind.SERVER])
    delay = retry_delay(spec)
    if delay is not None:
        details = [*(details or []), {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]
    error: dict[str, Any] = {"code": status, "message": spec.message or message, "status": rpc}
    if details:
        error["details"] = details
    return error


def gemini_status(kind: ErrorKind) -> int:
    """The HTTP status Gemini uses for an error kind."""
    if kind in (ErrorKind.QUOTA, ErrorKind.BILLING):
        return 429
    if kind is ErrorKind.AUTH:
        return 400
    return DEFAULT_STATUS[kind]


def usage_metadata(usage: SimUsage, output: int | None = None) -> dict[str, Any]:
    """``usageMetadata``: candidates exclude thoughts; prompt includes cached content."""
    out = usage.output if output is None else output
    reasoning = min(usage.reasoning, out)
    meta: dict[str, Any] = {
        "promptTokenCount": usage.input,
        "candidatesTokenCount": out - reasoning,
        "totalTokenCount": usage.input + out,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": usage.input}],
    }
    if reasoning:
        meta["thoughtsTokenCount"] = reasoning
    if usage.cached_input:
        meta["cachedContentTokenCount"] = usage.cached_input
    return meta


def _finish(content: Content) -> str:
    return "MAX_TOKENS" if content.finish is Finish.LENGTH else "STOP"


def _call_part(call: Any) -> dict[str, Any]:
    return {"functionCall": {"name": call.name, "args": call.arguments}}


class Gemini(Codec):
    """The Gemini ``generateContent`` protocol."""

    protocol = "gemini"
    retry_headers = False
    request_id_header = "x-goog-request-id"
    inband_kind = ErrorKind.UNAVAILABLE

    def default_status(self, kind: ErrorKind) -> int:
        """Quota and billing are 429, a bad key is 400, overload is 503."""
        return gemini_status(kind)

    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """Input words (system instruction + contents) and prefill (last content from ``model``)."""
        n = 0
        system = payload.get("systemInstruction")
        if isinstance(system, dict):
            n += _parts_words(system.get("parts"))
        contents = payload.get("contents")
        if not isinstance(contents, list):
            contents = []
        for c in contents:
            if isinstance(c, dict):
                n += _parts_words(c.get("parts"))
        last = contents[-1] if contents else None
        return Parsed(
            model=path_model or "",
            stream=False,  # the endpoint decides; the server sets it
            input_words=n,
            prefill=isinstance(last, dict) and last.get("role") == "model",
            schema=gemini_schema(payload.get("generationConfig")),
        )

    def body(self, req: Parsed, content: Content, usage: SimUsage) -> bytes:
        """A ``GenerateContentResponse``."""
        rid = new_id()
        if content.finish is Finish.REFUSAL:
            return dumps(_refusal(req, content, usage, rid))
        parts: list[dict[str, Any]] = []
        if content.reasoning:
            parts.append({"text": content.reasoning_text, "thought": True})
        if content.text:
            parts.append({"text": content.full_text})
        parts.extend(_call_part(c) for c in content.tool_calls)
        candidate = {
            "content": {"parts": parts or [{"text": ""}], "role": "model"},
            "finishReason": _finish(content),
            "index": 0,
        }
        return dumps(
            {
                "candidates": [candidate],
                "usageMetadata": usage_metadata(usage),
                "modelVersion": req.model,
                "responseId": rid,
            }
        )

    def encoder(self, req: Parsed, content: Content, usage: SimUsage) -> StreamEncoder:
        """An ``alt=sse`` stream."""
        return GeminiStream(req, content, usage)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """``{"error": {"code", "message", "status", "details"?}}``."""
        return dumps({"error": gemini_error(spec, status, req.model)})


def _parts_words(parts: object) -> int:
    total = 0
    if isinstance(parts, list):
        for p in parts:
            if isinstance(p, dict):
                text = p.get("text")
                if isinstance(text, str):
                    total += len(text.split())
    return total


def _refusal(req: Parsed, content: Content, usage: SimUsage, rid: str) -> dict[str, Any]:
    if content.block == "prompt":
        return {
            "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": _ratings(True)},
            "usageMetadata": {"promptTokenCount": usage.input, "totalTokenCount": usage.input},
            "modelVersion": req.model,
            "responseId": rid,
        }
    return {
        "candidates": [{"finishReason": "SAFETY", "index": 0, "safetyRatings": _ratings(True)}],
        "usageMetadata": usage_metadata(usage),
        "modelVersion": req.model,
        "responseId": rid,
    }


def _frame(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\r\n\r\n"


class GeminiStream(StreamEncoder):
    """One chunk per unit; the last chunk carries ``finishReason``; no terminator."""

    def plan(self) -> list[Unit]:
        """Refusals carry no parts, only ``finishReason: SAFETY`` or ``promptFeedback``."""
        return [u for u in super().plan() if u.kind != "refusal"]

    def _chunk(self, parts: list[dict[str, Any]], usage: dict[str, Any], **candidate: Any) -> dict[str, Any]:
        return {
            "candidates": [{"content": {"parts": parts, "role": "model"}, **candidate, "index": 0}],
            "usageMetadata": usage,
            "modelVersion": self.req.model,
            "responseId": self.rid,
        }

    def unit(self, i: int) -> bytes:
        """A chunk with one part and the usage so far."""
        u = self.units[i]
        if u.kind == "reasoning":
            part: dict[str, Any] = {"text": u.value, "thought": True}
        elif u.kind == "tool":
            part = _call_part(u.value)
        else:
            part = {"text": u.value}
        so_far = usage_metadata(self.usage, min(i + 1, self.usage.output))
        return _frame(self._chunk([part], so_far))

    def tail(self) -> bytes:
        """The chunk with ``finishReason`` (or the SAFETY block) and the final usage."""
        if self.content.finish is Finish.REFUSAL:
            return _frame(_refusal(self.req, self.content, self.usage, self.rid))
        return _frame(self._chunk([{"text": ""}], usage_metadata(self.usage), finishReason=_finish(self.content)))

    def error(self, spec: ErrorSpec) -> bytes:
        """A ``{"error": ...}`` chunk (503 ``UNAVAILABLE`` unless the step names another error)."""
        status = spec.status or gemini_status(spec.kind or ErrorKind.UNAVAILABLE)
        return _frame({"error": gemini_error(spec, status, self.req.model)})

    def malformed(self) -> bytes:
        """A chunk cut in half."""
        return b"data: " + broken(self._chunk([{"text": " garbled"}], {})) + b"\r\n\r\n"
