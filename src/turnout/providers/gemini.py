"""Google Gemini ``generateContent`` / ``streamGenerateContent?alt=sse`` (protocols.md section 5).

The key travels in the ``x-goog-api-key`` header, never in the ``?key=`` query, so it cannot leak into
URLs or access logs. Requests and answers are ``GenerateContentResponse`` objects; a stream is a series
of them as SSE ``data:`` events (often CRLF-framed) with no terminal marker: it is complete when a chunk
carrying ``finishReason`` was read and the body then ended. Safety and recitation finishes, and a prompt
blocked with ``promptFeedback.blockReason``, raise :class:`~turnout.core.errors.RefusalError`.
"""

from __future__ import annotations

import mimetypes
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar
from urllib.parse import quote

import orjson

from turnout.core.classify import ErrorFacts
from turnout.core.errors import ErrorClass, ProtocolError, ProviderError, RefusalError, StreamTruncated, TurnoutError
from turnout.core.model_ids import wire_model
from turnout.core.streams import collect
from turnout.core.tools import gemini_tools
from turnout.core.types import (
    FINISH_LENGTH,
    FINISH_STOP,
    FINISH_TOOL_CALLS,
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    ImagePart,
    Message,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolsPayload,
    ToolSpec,
    Usage,
    UsageEvent,
    provider_count,
)
from turnout.providers import structured
from turnout.providers.base import MALFORMED, AdapterSettings, HTTPAdapter, StreamDecoder, loads
from turnout.providers.embedding import EmbeddingWire, GeminiEmbeddings
from turnout.providers.framing import SSEParser
from turnout.providers.http import HttpClient
from turnout.providers.signatures import SIGNER_KEY, mine, signer_of

#: Finish reasons that mean the output was blocked: a refusal, never an answer.
REFUSAL_FINISHES = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
_TOOL_MODES = {"auto": "AUTO", "required": "ANY", "any": "ANY", "none": "NONE"}
_RETRY_INFO = "google.rpc.RetryInfo"
_QUOTA_FAILURE = "google.rpc.QuotaFailure"
_ERROR_INFO = "google.rpc.ErrorInfo"


def _object_args(arguments: str) -> Any:
    """Tool-call arguments as the JSON object Gemini wants (text that is not an object is wrapped)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _tool_result(text: str) -> Any:
    """A tool result: the parsed object when the text is a JSON object, else the text itself."""
    if text[:1] == "{":
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        if isinstance(value, dict):
            return value
    return text


def _image_part(image: ImagePart) -> dict[str, Any]:
    if image.is_data_url:
        return {"inlineData": {"mimeType": image.media_type or "image/png", "data": image.data or ""}}
    guessed = mimetypes.guess_type(image.url.split("?", 1)[0])[0]
    return {"fileData": {"mimeType": guessed or "image/jpeg", "fileUri": image.url}}


def error_facts_of(error: Any, *, status: int | None, headers: Mapping[str, str]) -> ErrorFacts:
    """:class:`ErrorFacts` from a Gemini ``error`` object (``code``, ``message``, ``status``, ``details``)."""
    if not isinstance(error, Mapping):
        return ErrorFacts(status=status, headers=headers, message=str(error))
    retry_delay: str | None = None
    quota_ids: list[str] = []
    reason: str | None = None
    for detail in error.get("details") or ():
        if not isinstance(detail, Mapping):
            continue
        kind = str(detail.get("@type", ""))
        if kind.endswith(_RETRY_INFO):
            delay = detail.get("retryDelay")
            retry_delay = str(delay) if delay is not None else None
        elif kind.endswith(_QUOTA_FAILURE):
            for violation in detail.get("violations") or ():
                if isinstance(violation, Mapping) and violation.get("quotaId"):
                    quota_ids.append(str(violation["quotaId"]))
        elif kind.endswith(_ERROR_INFO) and detail.get("reason"):
            reason = str(detail["reason"])
    code = error.get("code")
    return ErrorFacts(
        status=status,
        error_type=str(error["status"]) if error.get("status") else None,
        error_code=str(code) if code is not None else None,
        message=str(error.get("message") or ""),
        headers=headers,
        retry_delay=retry_delay,
        quota_ids=tuple(quota_ids),
        reason=reason,
    )


def gemini_usage(meta: Mapping[str, Any]) -> Usage:
    """Gemini ``usageMetadata`` → :class:`Usage` (thinking tokens are billed as output)."""
    prompt, bad_prompt = provider_count(meta.get("promptTokenCount"))
    cached, bad_cached = provider_count(meta.get("cachedContentTokenCount"))
    output, bad_output = provider_count(meta.get("candidatesTokenCount"))
    thoughts, bad_thoughts = provider_count(meta.get("thoughtsTokenCount"))
    return Usage(
        input_tokens=prompt,
        cached_input_tokens=min(cached, prompt),  # the cached part is inside promptTokenCount: never more than it
        output_tokens=output + thoughts,
        clamped=bad_prompt or bad_cached or bad_output or bad_thoughts,
    )


def _unwrap(data: Any) -> Any:
    """Vertex wraps some bodies in a one-element list."""
    if isinstance(data, list) and len(data) == 1:
        return data[0]
    return data


class _Assembler:
    """Turns ``GenerateContentResponse`` objects into events; shared by the stream and the plain call."""

    __slots__ = ("_adapter", "_model", "_usage", "calls", "finish", "model_version", "response_id")

    def __init__(self, adapter: GeminiAdapter, model: str) -> None:
        self._adapter = adapter
        self._model = model
        self._usage: Usage | None = None
        self.calls = 0
        self.finish: str | None = None
        self.model_version: str | None = None
        self.response_id: str | None = None

    def chunk(self, data: Any) -> list[StreamEvent]:
        """Events of one response object; raises for in-band errors and refusals."""
        data = _unwrap(data)
        if not isinstance(data, Mapping):
            raise TypeError("a Gemini response is a JSON object")
        if "error" in data:
            facts = error_facts_of(data["error"], status=None, headers={})
            raise self._adapter.in_band_error(facts, self._model)
        self.model_version = data.get("modelVersion") or self.model_version
        self.response_id = data.get("responseId") or self.response_id
        out: list[StreamEvent] = []
        candidates = data.get("candidates")
        if not candidates:
            feedback = data.get("promptFeedback")
            if isinstance(feedback, Mapping) and feedback.get("blockReason"):
                raise self._refusal(f"Gemini blocked the prompt (blockReason {feedback['blockReason']})")
        else:
            self._candidate(candidates[0], out)
        meta = data.get("usageMetadata")
        if meta and isinstance(meta, Mapping):
            usage = gemini_usage(meta)
            if usage != self._usage:
                self._usage = usage
                out.append(UsageEvent(usage=usage))
        return out

    def _candidate(self, candidate: Mapping[str, Any], out: list[StreamEvent]) -> None:
        finish = candidate.get("finishReason")
        if finish in REFUSAL_FINISHES:
            raise self._refusal(f"Gemini blocked the response (finishReason {finish})")
        if finish == "MALFORMED_FUNCTION_CALL":
            facts = ErrorFacts(
                error_type="MALFORMED_FUNCTION_CALL",
                message=str(candidate.get("finishMessage") or "the model produced a malformed function call"),
            )
            raise self._adapter.in_band_error(facts, self._model)
        content = candidate.get("content")
        for part in (content.get("parts") or ()) if content else ():
            call = part.get("functionCall")
            if call is not None:
                out.append(ToolCallEvent(call=self._call(call, part.get("thoughtSignature"))))
                continue
            text = part.get("text")
            if text:
                out.append(ReasoningDelta(text=text) if part.get("thought") else TextDelta(text=text))
        if finish:
            self.finish = str(finish)

    def _call(self, call: Mapping[str, Any], signature: Any) -> ToolCall:
        self.calls += 1
        args = call.get("args")
        if args is None:
            arguments = "{}"
        elif isinstance(args, str):
            arguments = args or "{}"
        else:
            arguments = orjson.dumps(args).decode()
        extra: dict[str, Any] = {}
        if signature:
            extra["thought_signature"] = signature
            extra[SIGNER_KEY] = signer_of(self._adapter.profile)
        provider_id = call.get("id")
        if provider_id:
            extra["function_call_id"] = str(provider_id)
        return ToolCall(
            id=str(provider_id or f"call_{uuid.uuid4().hex[:24]}"),
            name=str(call["name"]),
            arguments=arguments,
            extra=extra or None,
        )

    def _refusal(self, message: str) -> RefusalError:
        return RefusalError(message, provider=self._adapter.profile, model=self._model)

    def final(self) -> Final:
        """The closing event, with the unified finish reason."""
        model = self.model_version or self._model
        if self.finish == "MAX_TOKENS":
            return Final(finish_reason=FINISH_LENGTH, model=model)
        return Final(finish_reason=FINISH_TOOL_CALLS if self.calls else FINISH_STOP, model=model)


class GeminiStreamDecoder(StreamDecoder):
    """SSE ``GenerateContentResponse`` chunks; complete on a ``finishReason`` chunk followed by end of body."""

    def __init__(self, adapter: GeminiAdapter, model: str) -> None:
        self._asm = _Assembler(adapter, model)
        self._sse = SSEParser(adapter.max_line)
        self._error: TurnoutError | None = None
        self._model = model
        self._profile = adapter.profile

    def _malformed(self, exc: Exception) -> ProtocolError:
        return ProtocolError(f"malformed stream event: {type(exc).__name__}", provider=self._profile, model=self._model)

    def _events(self, payloads: Sequence[bytes]) -> list[StreamEvent]:
        """Decode payloads; an error stops decoding after the events before it (raised on the next call)."""
        out: list[StreamEvent] = []
        try:
            for data in payloads:
                if not data or data.isspace():
                    continue
                parsed = loads(data, provider=self._profile, model=self._model, what="stream event")
                try:
                    out.extend(self._asm.chunk(parsed))
                except MALFORMED as exc:
                    raise self._malformed(exc) from exc
        except TurnoutError as exc:
            self._error = exc
            self.done = True
        return out

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """Consume body bytes; return the events they completed.

        An in-band error, refusal or malformed event is raised after the events decoded before it were
        returned: it sets :attr:`done`, and the next :meth:`feed` or :meth:`finish` raises it.
        """
        if self._error is not None:
            raise self._error
        return self._events([data for _, data in self._sse.feed(chunk)])

    def finish(self) -> list[StreamEvent]:
        """End of body: a raw JSON error tail raises it; no ``finishReason`` chunk raises ``StreamTruncated``."""
        if self._error is not None:
            raise self._error
        out = self._events([data for _, data in self._sse.finish()])
        if self._error is not None:
            raise self._error
        try:
            self._raise_error_tail()
        except MALFORMED as exc:
            raise self._malformed(exc) from exc
        if self._asm.finish is None:
            raise StreamTruncated("finishReason", provider=self._profile, model=self._model)
        out.append(self._asm.final())
        return out

    def _raise_error_tail(self) -> None:
        """A proxy or the API may end a 200 stream with a bare (possibly pretty-printed) JSON error body."""
        stray = self._sse.stray
        for start, line in enumerate(stray):
            if line[:1] not in (b"{", b"["):
                continue
            try:
                data = _unwrap(orjson.loads(b"\n".join(stray[start:])))
            except orjson.JSONDecodeError:
                continue
            if isinstance(data, Mapping) and "error" in data:
                self._asm.chunk(data)  # raises the classified in-band error
            return


#: What a Gemini model name may not contain: each could end its URL path segment or climb out of it (``%``
#: for upstreams that decode a path twice).
_PATH_UNSAFE = ("/", "?", "#", "\\", "..", ":", "%")


class GeminiAdapter(HTTPAdapter):
    """Google Gemini (Generative Language API, and Vertex endpoints given as ``uri``)."""

    protocol: ClassVar[str] = "gemini"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        native_tools=True,
        vision=True,
        streaming=True,
        streaming_tool_events=True,
        extended_thinking=True,
        structured_output=True,
    )

    def __init__(self, settings: AdapterSettings, http: HttpClient, api_key: str | None = None) -> None:
        super().__init__(settings, http, api_key)
        self._paths: dict[str, str] = {}
        self._signer = signer_of(settings.profile)

    @classmethod
    def model_problem(cls, model: str) -> str | None:
        """Gemini puts the model in the URL path: a name that could leave its path segment is refused."""
        name = model.removeprefix("models/")
        if not name:
            return "the model name is empty"
        unsafe = next((s for s in _PATH_UNSAFE if s in name), None)
        if unsafe is not None:
            return f"a Gemini model name cannot contain {unsafe!r}"
        if not name.isprintable():
            return "a Gemini model name cannot contain control characters"
        return None

    def url(self, model: str, stream: bool) -> str:
        """``{base}/models/{model}:generateContent`` or ``:streamGenerateContent?alt=sse``, the model escaped.

        Raises:
            ProviderError: The model name cannot be sent (see :meth:`model_problem`); nothing is sent.
        """
        return self.model_path(model) + (":streamGenerateContent?alt=sse" if stream else ":generateContent")

    def embedding_wire(self) -> EmbeddingWire:
        """``:embedContent`` / ``:batchEmbedContents`` on :meth:`model_path`."""
        return GeminiEmbeddings(self.model_path)

    def model_path(self, model: str) -> str:
        """``{base}/models/{model}``, the model escaped (kept for a few models).

        Raises:
            ProviderError: The model name cannot be sent (see :meth:`model_problem`); nothing is sent.
        """
        path = self._paths.get(model)
        if path is None:
            problem = self.model_problem(model)
            if problem is not None:
                raise ProviderError(
                    problem,
                    error_class=ErrorClass.NON_RETRYABLE,
                    provider=self.settings.profile,
                    model=model,
                    error_type="invalid_model",
                )
            wire = wire_model("gemini", model.removeprefix("models/"))
            path = f"{self.settings.base_url}/models/{quote(wire, safe='')}"
            if len(self._paths) >= 64:  # an unpinned profile sees many names; keep only a few
                self._paths.clear()
            self._paths[model] = path
        return path

    def convert_tools(self, tools: Sequence[ToolSpec]) -> ToolsPayload:
        """Gemini ``functionDeclarations``."""
        return gemini_tools(tools)

    def build_body(self, request: ChatRequest, model: str, temperature: float | None, stream: bool) -> dict[str, Any]:
        """``contents``, ``systemInstruction``, ``generationConfig``, ``tools`` and ``toolConfig``."""
        system: list[str] = []
        turns: list[dict[str, Any]] = []
        calls: dict[str, ToolCall] = {}
        for msg in request.messages:
            if msg.role == "system":
                if msg.text:
                    system.append(msg.text)
                continue
            role, parts = self._turn(msg, calls, self._signer)
            if not parts:
                continue
            if turns and turns[-1]["role"] == role:
                turns[-1]["parts"].extend(parts)
            else:
                turns.append({"role": role, "parts": parts})
        body: dict[str, Any] = {"contents": turns}
        if system and self.settings.merge_system_into_user:
            first_user = next((t for t in turns if t["role"] == "user"), None)
            if first_user is None:
                turns.insert(0, {"role": "user", "parts": [{"text": "\n\n".join(system)}]})
            else:
                first_user["parts"].insert(0, {"text": "\n\n".join(system)})
        elif system:
            body["systemInstruction"] = {"parts": [{"text": t} for t in system]}
        config: dict[str, Any] = {}
        temp = self.temperature(temperature)
        if temp is not None:
            config["temperature"] = temp
        max_tokens = self.max_tokens(request)
        if max_tokens:
            config["maxOutputTokens"] = max_tokens
        if request.stop:
            config["stopSequences"] = list(request.stop)
        if request.response_format is not None:
            structured.gemini(config, request.response_format)
        if config:
            body["generationConfig"] = config
        if request.tools:
            body["tools"] = [{"functionDeclarations": list(gemini_tools(request.tools).function_declarations)}]
            choice = request.tool_choice
            if choice:
                mode = _TOOL_MODES.get(choice)
                fcc: dict[str, Any] = {"mode": mode or "ANY"}
                if mode is None:
                    fcc["allowedFunctionNames"] = [choice]
                body["toolConfig"] = {"functionCallingConfig": fcc}
        return self.with_merged_extras(body)

    @staticmethod
    def _turn(msg: Message, calls: dict[str, ToolCall], signer: str) -> tuple[str, list[dict[str, Any]]]:
        """One message as a (role, parts) turn; ``calls`` maps earlier call ids to their calls.

        A call's ``thoughtSignature`` goes back only to the family that issued it (``signer``).
        """
        if msg.role == "tool":
            call = calls.get(msg.tool_call_id or "")
            name = msg.name or (call.name if call else None) or msg.tool_call_id or "tool"
            response: dict[str, Any] = {"name": name, "response": {"content": _tool_result(msg.text)}}
            call_id = (call.extra or {}).get("function_call_id") if call else None
            if call_id:
                response["id"] = call_id
            return "user", [{"functionResponse": response}]
        parts: list[dict[str, Any]] = []
        if msg.role == "assistant":
            if msg.text:
                parts.append({"text": msg.text})
            for tc in msg.tool_calls:
                calls[tc.id] = tc
                extra = tc.extra or {}
                fn: dict[str, Any] = {"name": tc.name, "args": _object_args(tc.arguments)}
                if extra.get("function_call_id"):
                    fn["id"] = extra["function_call_id"]
                part: dict[str, Any] = {"functionCall": fn}
                if extra.get("thought_signature") and mine(extra, signer):
                    part["thoughtSignature"] = extra["thought_signature"]
                parts.append(part)
            return "model", parts
        for p in msg.parts:
            if isinstance(p, ImagePart):
                parts.append(_image_part(p))
            elif p.text:
                parts.append({"text": p.text})
        return "user", parts

    def parse_response(self, data: Any, model: str) -> ChatResponse:
        """A ``GenerateContentResponse`` → the answer (``RefusalError`` when blocked)."""
        asm = _Assembler(self, model)
        events = asm.chunk(data)
        events.append(asm.final())
        response = collect(events)
        return replace(response, request_id=asm.response_id) if asm.response_id else response

    def error_facts(self, status: int, headers: Mapping[str, str], body: bytes) -> ErrorFacts:
        """``{"error": {"code", "message", "status", "details"}}`` (Vertex: wrapped in a list)."""
        data = _unwrap(orjson.loads(body))
        return error_facts_of(data["error"], status=status, headers=headers)

    def decoder(self, model: str) -> StreamDecoder:
        """A fresh SSE decoder."""
        return GeminiStreamDecoder(self, model)
