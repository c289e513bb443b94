"""Google Vertex AI: Claude (the Anthropic publisher) and Gemini (the Google publisher).

Claude (``rawPredict`` / ``streamRawPredict``) is the Messages protocol with the model in the URL: a body
naming ``model``, or without ``anthropic_version: "vertex-2023-10-16"``, is a 400, as on Vertex. Its rate
limits and credential errors come from Google's front end, in Google's error shape (``RESOURCE_EXHAUSTED``,
``UNAUTHENTICATED``); the model's own errors (overload, a bad request) in Anthropic's. Its thinking blocks
carry a signature of their own, and a block signed by another of the simulator's clouds is refused. Gemini on
Vertex (``generateContent`` / ``streamGenerateContent``) is the Gemini protocol as is.
"""

from __future__ import annotations

from typing import Any

from turnout.sim.behaviour import ErrorKind, ErrorSpec
from turnout.sim.wire.anthropic import VERTEX_SIGNATURE, AnthropicMessages
from turnout.sim.wire.base import Parsed, dumps
from turnout.sim.wire.gemini import Gemini, gemini_error

ANTHROPIC_VERSION = "vertex-2023-10-16"
#: Error kinds Vertex's front end answers (Google's shape) rather than the model (Anthropic's).
_GOOGLE_KINDS = frozenset({ErrorKind.RATE_LIMIT, ErrorKind.QUOTA, ErrorKind.AUTH, ErrorKind.FORBIDDEN})


class VertexAnthropic(AnthropicMessages):
    """Claude through Vertex AI's Anthropic publisher."""

    protocol = "vertex-anthropic"
    request_id_header = "x-request-id"
    signature = VERTEX_SIGNATURE

    def default_status(self, kind: ErrorKind) -> int:
        """Quota is a 429 and a bad token a 401 on Vertex; the model's own errors keep Anthropic's statuses."""
        if kind in (ErrorKind.QUOTA, ErrorKind.RATE_LIMIT):
            return 429
        if kind is ErrorKind.AUTH:
            return 401
        return super().default_status(kind)

    def parse(self, payload: dict[str, Any], path_model: str | None) -> Parsed:
        """The model comes from the URL."""
        parsed = super().parse(payload, path_model)
        parsed.model = path_model or ""
        return parsed

    def forged(self, signature: object) -> bool:
        """Any signature but this cloud's own (an empty one included) is refused, as Vertex refuses it."""
        return signature != self.signature

    def refuse(self, payload: dict[str, Any]) -> str | None:
        """``model`` in the body, a missing ``anthropic_version``, or a foreign thinking signature: a 400."""
        if "model" in payload:
            return "model: Extra inputs are not permitted (the model is named in the URL)"
        if payload.get("anthropic_version") != ANTHROPIC_VERSION:
            return f'anthropic_version: must be "{ANTHROPIC_VERSION}"'
        return super().refuse(payload)

    def error_body(self, req: Parsed, spec: ErrorSpec, status: int, request_id: str) -> bytes:
        """Google's ``{"error": {...}}`` for the front end's errors, else Anthropic's body."""
        if spec.kind in _GOOGLE_KINDS:
            return dumps({"error": gemini_error(spec, status, req.model)})
        return super().error_body(req, spec, status, request_id)


class VertexGemini(Gemini):
    """Gemini through Vertex AI's Google publisher (a bad token is a 401 there, not a 400)."""

    protocol = "vertex-gemini"

    def default_status(self, kind: ErrorKind) -> int:
        """A bad token is 401 on Vertex."""
        return 401 if kind is ErrorKind.AUTH else super().default_status(kind)
