"""Core value types: messages, tools, usage, requests, responses and stream events.

Everything here is a slotted dataclass, never mutated after it is built (a provider's answer once the provider
hands it over), so it is safe to share between tasks. Most are frozen; the records built on every call or every
streamed token (messages, requests, answers, usage, text deltas) are not, as a frozen record costs about three
times as much to build: treat them as read-only all the same. Messages given as OpenAI-style dicts are accepted
wherever a message list is (see :func:`coerce_messages`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

import orjson

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
_ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))

#: Unified finish reasons. Providers' own values are mapped onto these by the adapters.
FINISH_STOP = "stop"
FINISH_TOOL_CALLS = "tool_calls"
FINISH_LENGTH = "length"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """A piece of text inside a message."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class ImagePart:
    """An image inside a user message: an ``https://`` URL or a ``data:<mime>;base64,...`` URL."""

    url: str
    detail: str | None = None
    type: Literal["image"] = "image"

    @property
    def is_data_url(self) -> bool:
        """True when the image is inlined as a ``data:`` URL."""
        return self.url.startswith("data:")

    @property
    def media_type(self) -> str | None:
        """The MIME type of an inlined image (``image/png``), None for a remote URL."""
        if not self.is_data_url:
            return None
        head = self.url[5:].split(",", 1)[0]
        return head.split(";", 1)[0] or None

    @property
    def data(self) -> str | None:
        """The base64 payload of an inlined image, None for a remote URL."""
        if not self.is_data_url:
            return None
        parts = self.url.split(",", 1)
        return parts[1] if len(parts) == 2 else ""


ContentPart: TypeAlias = TextPart | ImagePart


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A tool call requested by the model.

    Attributes:
        id: The provider's call id (generated when the protocol has none).
        name: The tool name.
        arguments: The arguments as JSON text (``"{}"`` when the tool takes none).
        extra: Opaque provider round-trip data, such as Gemini's ``thoughtSignature``.
    """

    id: str
    name: str
    arguments: str = "{}"
    extra: Mapping[str, Any] | None = None

    def parsed_arguments(self) -> Any:
        """Decode :attr:`arguments`; raises ``ValueError`` when they are not valid JSON."""
        return orjson.loads(self.arguments or "{}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One chat message.

    ``content`` is a string or a tuple of parts (text and images). An assistant message may carry
    ``tool_calls``; a ``tool`` message carries the result of one call in ``content`` with
    ``tool_call_id`` (and optionally the tool ``name``).
    """

    role: Role
    content: str | tuple[ContentPart, ...] = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None

    @property
    def text(self) -> str:
        """The message's text, its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        """The image parts of the message."""
        if isinstance(self.content, str):
            return ()
        return tuple(p for p in self.content if isinstance(p, ImagePart))

    @property
    def parts(self) -> tuple[ContentPart, ...]:
        """The content as parts (a string becomes one text part; an empty string none)."""
        if isinstance(self.content, str):
            return (TextPart(text=self.content),) if self.content else ()
        return self.content

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message."""
        return cls(role="system", content=text)

    @classmethod
    def user(cls, content: str | Sequence[ContentPart]) -> Message:
        """A user message with text or parts."""
        return cls(role="user", content=content if isinstance(content, str) else tuple(content))

    @classmethod
    def assistant(cls, text: str = "", *, tool_calls: Sequence[ToolCall] = ()) -> Message:
        """An assistant message, optionally with tool calls."""
        return cls(role="assistant", content=text, tool_calls=tuple(tool_calls))

    @classmethod
    def tool(cls, tool_call_id: str, content: str, *, name: str | None = None) -> Message:
        """The result of one tool call."""
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """A tool the model may call: a name, a description and a JSON Schema for its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


#: The largest count a provider may report (2**53: what a JSON number, a double, holds exactly).
MAX_PROVIDER_COUNT = 2**53


def provider_count(value: object) -> tuple[int, bool]:
    """A count a provider reported (tokens, mostly), bounded where it is parsed: ``(count, clamped)``.

    The one bound every adapter applies to the numbers of a provider's answer, so that no value a provider
    sends can overflow a record (SQLite's 64-bit integers), a sum or a price. A whole number in
    ``0..MAX_PROVIDER_COUNT`` is kept as it is, also written as a float (``12.0``, as some encoders write every
    number); a missing value (``None``) is 0. Anything else is clamped and ``clamped`` is True: a negative number
    becomes 0, a larger one :data:`MAX_PROVIDER_COUNT`, a fraction its whole part (bounded the same way), and
    NaN, an infinity, a boolean or a non-number 0. The caller marks what it builds from a clamped count
    (:attr:`Usage.clamped`). This bounds a count by what a record can hold, not by what a request allowed: the
    attempt's record bounds that (:func:`turnout.core.estimate.billed_usage`).
    """
    if type(value) is int:
        if 0 <= value <= MAX_PROVIDER_COUNT:
            return value, False
        return (0 if value < 0 else MAX_PROVIDER_COUNT), True
    if value is None:
        return 0, False
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        if value.is_integer() and 0 <= value <= MAX_PROVIDER_COUNT:
            return int(value), False
        return min(max(int(value), 0), MAX_PROVIDER_COUNT), True
    if isinstance(value, int) and not isinstance(value, bool):  # an int subclass
        return min(max(int(value), 0), MAX_PROVIDER_COUNT), True
    return 0, True


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token usage of one call.

    ``input_tokens`` is the whole prompt, cached part included; ``cached_input_tokens`` is the part
    read from the provider's prompt cache and ``cache_write_tokens`` the part written to it.

    ``clamped`` says a count the provider reported was out of range or not a whole number and was bounded
    by :func:`provider_count`, or was more than the request allowed (its output bound, the model's context
    window) and was bounded when the attempt was recorded; ``estimated`` says a count is Turnout's estimate, not
    the provider's (an abandoned call, or a completed answer whose usage was missing or unusable).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    clamped: bool = False
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            clamped=self.clamped or other.clamped,
            estimated=self.estimated or other.estimated,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseFormat:
    """Structured output: the answer's text must be one JSON value of a given shape.

    Attributes:
        kind: ``json_schema`` (the text matches :attr:`schema`) or ``json_object`` (any JSON object).
        schema: The JSON Schema, for ``json_schema``.
        name: The schema's name (OpenAI requires one; ``[A-Za-z0-9_-]``).
        description: What the answer is, when given.
        strict: Ask the provider to enforce the schema exactly where it can (OpenAI ``strict``).
    """

    kind: Literal["json_schema", "json_object"]
    schema: Mapping[str, Any] | None = None
    name: str = "response"
    description: str | None = None
    strict: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class NativeRequest:
    """The caller's request in its own wire protocol, for an entry that speaks that protocol.

    An entry whose adapter speaks :attr:`protocol` sends :attr:`body` as it came (its own model, stream flag
    and credentials set), so content blocks, tools and fields Turnout does not model pass through unchanged.
    Entries speaking another protocol are sent the translated request, unless :attr:`only` names something
    that has no translation: then they cannot serve it (see :func:`can_serve`).

    Attributes:
        protocol: ``anthropic``, ``openai-chat`` or ``openai-responses``.
        body: The request body as the caller sent it (decoded JSON).
        headers: Protocol headers to forward (``anthropic-beta``), already validated.
        only: Fields only this protocol can carry (``messages[1].content[0] (server_tool_use)``).
        documents: Document blocks an entry of another protocol with :attr:`Capabilities.documents` carries too
            (``messages[1].content[0] (document)``): it translates them from :attr:`body`.
    """

    protocol: str
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    only: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """What the caller asks for, independent of any provider's wire format.

    Attributes:
        messages: The conversation, oldest first.
        tools: Tools the model may call.
        max_tokens: Upper bound on output tokens (None: the profile's or the adapter's default).
        tool_choice: ``"auto"``, ``"none"``, ``"required"`` or a tool name; None leaves it to the provider.
        stop: Stop sequences.
        response_format: Structured output; entries that cannot honour it are skipped, never ignore it.
        native: The caller's own wire request, passed through to entries that speak its protocol.
        cache_key: The caller's own name for the conversation (``cache_key=``, a gateway client's session header):
            what pool affinity keys it by (:func:`turnout.walk.affinity.conversation_key`); never sent to a provider.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    tool_choice: str | None = None
    stop: tuple[str, ...] = ()
    response_format: ResponseFormat | None = None
    native: NativeRequest | None = None
    cache_key: str | None = None

    @classmethod
    def of(
        cls,
        messages: Iterable[Message | Mapping[str, Any]] | str,
        *,
        tools: Iterable[ToolSpec | Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        tool_choice: str | None = None,
        stop: Sequence[str] = (),
        response_format: ResponseFormat | None = None,
        native: NativeRequest | None = None,
        cache_key: str | None = None,
    ) -> ChatRequest:
        """Build a request from messages (or a single user prompt) and tools in any accepted form."""
        return cls(
            messages=coerce_messages(messages),
            tools=coerce_tools(tools) if tools else (),
            max_tokens=max_tokens,
            tool_choice=tool_choice,
            stop=tuple(stop) if stop else (),
            response_format=response_format,
            native=native,
            cache_key=cache_key,
        )

    @property
    def last_is_assistant_prefill(self) -> bool:
        """True when the last message is an assistant message the model should continue."""
        return bool(self.messages) and self.messages[-1].role == "assistant"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatResponse:
    """One provider's complete answer.

    Attributes:
        text: The answer text ("" when the model only called tools).
        tool_calls: Tool calls requested by the model.
        usage: Token usage, when the provider reported it.
        reasoning: Reasoning/thinking text, when the provider exposed it.
        finish_reason: Unified finish reason (``stop``, ``tool_calls``, ``length``, ``content_filter``).
        model: The model the provider says answered.
        request_id: The provider's request id, when given.
        native: The provider's own answer body, when the request was passed through in its protocol (see
            :class:`NativeRequest`): what Turnout does not model in it (more choices, citations, server tool
            results, thinking signatures) can be relayed to a caller of the same protocol.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    reasoning: str | None = None
    finish_reason: str | None = None
    model: str | None = None
    request_id: str | None = None
    native: Mapping[str, Any] | None = None

    @property
    def is_semantically_empty(self) -> bool:
        """No text once ``<think>`` spans are removed, and no tool calls: not an answer."""
        if self.tool_calls:
            return False
        text = self.text
        if "<think>" in text:
            return not strip_think_tags(text)
        return not text or text.isspace()


# --- stream events ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of answer text: ``TextDelta("...")`` or ``TextDelta(text="...")`` (the one record built by position)."""

    text: str
    type: ClassVar[Literal["text"]] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta:
    """A piece of reasoning/thinking text.

    ``signature`` is set on the last piece of an Anthropic thinking block: the block's signature, which a
    same-protocol caller must send back unchanged with the block, and only to ``signer``, the family that
    issued it (see :mod:`turnout.providers.signatures`).
    """

    text: str
    signature: str | None = None
    signer: str | None = None
    type: ClassVar[Literal["reasoning"]] = "reasoning"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallEvent:
    """A complete tool call, emitted once its arguments are assembled."""

    call: ToolCall
    type: ClassVar[Literal["tool_call"]] = "tool_call"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderToolEvent:
    """A tool the provider executed itself (web search, code interpreter): observability only.

    Attributes:
        name: The tool's name.
        phase: ``"call"`` or ``"result"``.
        payload: Arguments (for a call) or output (for a result), as text.
    """

    name: str
    phase: Literal["call", "result"]
    payload: str = ""
    type: ClassVar[Literal["provider_tool"]] = "provider_tool"


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageEvent:
    """Token usage for the whole stream so far (cumulative; the last one wins)."""

    usage: Usage
    type: ClassVar[Literal["usage"]] = "usage"


@dataclass(frozen=True, slots=True, kw_only=True)
class Final:
    """The stream completed: the protocol's completion signal was seen."""

    finish_reason: str | None = None
    model: str | None = None
    type: ClassVar[Literal["final"]] = "final"


StreamEvent: TypeAlias = TextDelta | ReasoningDelta | ToolCallEvent | ProviderToolEvent | UsageEvent | Final


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a provider can do for a given model."""

    native_tools: bool = False
    vision: bool = False
    streaming: bool = False
    streaming_tool_events: bool = False
    prompt_caching: bool = False
    extended_thinking: bool = False
    structured_output: bool = False
    protocol: str = ""
    documents: bool = False
    """Whether documents in a caller's own body (:attr:`NativeRequest.documents`) reach the model."""


def can_serve(caps: Capabilities, request: ChatRequest) -> bool:
    """Whether an entry with ``caps`` can honour what ``request`` asks beyond plain chat.

    Structured output needs ``structured_output``; a request carrying what only its own protocol can express
    (:attr:`NativeRequest.only`) needs an entry speaking that protocol, and one carrying documents an entry
    speaking it or taking documents (:attr:`Capabilities.documents`). The walk and the stream skip an entry
    that cannot, as they skip one without vision for images.
    """
    if request.response_format is not None and not caps.structured_output:
        return False
    native = request.native
    if native is None or caps.protocol == native.protocol:
        return True
    return not native.only and (caps.documents or not native.documents)


def unservable_reason(request: ChatRequest) -> str:
    """Fields at fault when no entry can serve ``request`` (:class:`~turnout.core.errors.UnsupportedRequest`)."""
    reasons = []
    if request.response_format is not None:
        reasons.append("response_format (structured output) needs an entry that can honour a schema")
    native = request.native
    if native is not None and native.only:
        fields = ", ".join(native.only[:4]) + (f" and {len(native.only) - 4} more" if len(native.only) > 4 else "")
        reasons.append(f"{fields} can only be carried by an upstream speaking the {native.protocol} protocol")
    elif native is not None and native.documents:
        docs = ", ".join(native.documents[:4]) + (
            f" and {len(native.documents) - 4} more" if len(native.documents) > 4 else ""
        )
        reasons.append(f"{docs} need an upstream that takes documents (the {native.protocol} protocol or Bedrock)")
    return "no entry of this route can serve the request: " + "; ".join(reasons)


# --- ToolsPayload: how a provider wants tools on the wire ---------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAITools:
    """OpenAI Chat Completions ``tools`` array."""

    tools: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnthropicTools:
    """Anthropic Messages ``tools`` array."""

    tools: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GeminiTools:
    """Gemini ``functionDeclarations``."""

    function_declarations: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptGuidedTools:
    """Instructions appended to the system prompt for models without native tool calling."""

    instructions: str


ToolsPayload: TypeAlias = OpenAITools | AnthropicTools | GeminiTools | PromptGuidedTools


# --- helpers ---------------------------------------------------------------------------------

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)


def strip_think_tags(text: str) -> str:
    """Remove ``<think>…</think>`` spans; an unclosed ``<think>`` hides the rest. Result is trimmed."""
    if "<think>" not in text:
        return text.strip()
    out = _THINK_RE.sub("", text)
    cut = out.find("<think>")
    if cut >= 0:
        out = out[:cut]
    return out.strip()


class ArgumentError(TypeError):
    """An argument the request types cannot take: :attr:`path` names it, :attr:`reason` says why (never its value).

    A ``TypeError`` for code that builds requests directly; the public API raises it as
    :class:`~turnout.core.errors.InvalidRequest` before any attempt (see :mod:`turnout.core.arguments`).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason


def coerce_messages(messages: Iterable[Message | Mapping[str, Any]] | str) -> tuple[Message, ...]:
    """Accept :class:`Message` objects, OpenAI-style dicts or a single prompt string.

    Raises:
        ArgumentError: A message has an unknown role or shape (a ``TypeError``).
    """
    if isinstance(messages, str):
        return (Message(role="user", content=messages),)
    if isinstance(messages, Mapping) or not isinstance(messages, Iterable):
        raise ArgumentError("messages", "must be a prompt string or a list of messages")
    out: list[Message] = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            out.append(m)
        elif isinstance(m, Mapping):
            out.append(_message_from_dict(m, i))
        else:
            raise ArgumentError(f"messages[{i}]", f"must be a Message or a dict, not {type(m).__name__}")
    return tuple(out)


def _optional_text(d: Mapping[str, Any], key: str, i: int) -> str | None:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise ArgumentError(f"messages[{i}].{key}", f"must be a string, not {type(value).__name__}")
    return value


def _message_from_dict(d: Mapping[str, Any], i: int) -> Message:
    role = d.get("role")
    if role == "developer":
        role = "system"
    if not isinstance(role, str) or role not in _ROLES:
        raise ArgumentError(f"messages[{i}].role", "must be one of system/user/assistant/tool (or developer)")
    raw = d.get("content")
    content: str | tuple[ContentPart, ...]
    if raw is None:
        content = ""
    elif isinstance(raw, str):
        content = raw
    elif isinstance(raw, list):
        content = tuple(_part_from_dict(p, i, j) for j, p in enumerate(raw))
    else:
        raise ArgumentError(f"messages[{i}].content", f"must be a string or a list of parts, not {type(raw).__name__}")
    raw_calls = d.get("tool_calls") or ()
    if isinstance(raw_calls, str | Mapping) or not isinstance(raw_calls, Iterable):
        raise ArgumentError(f"messages[{i}].tool_calls", "must be a list of tool calls")
    calls = tuple(_tool_call_from_dict(c, i, j) for j, c in enumerate(raw_calls))
    reasoning = _optional_text(d, "reasoning", i) or _optional_text(d, "reasoning_content", i)
    return Message(
        role=role,  # type: ignore[arg-type]  # one of _ROLES, checked above
        content=content,
        tool_calls=calls,
        tool_call_id=_optional_text(d, "tool_call_id", i),
        name=_optional_text(d, "name", i),
        reasoning=reasoning,
    )


def _part_from_dict(p: Any, i: int, j: int) -> ContentPart:
    if isinstance(p, str):
        return TextPart(text=p)
    if not isinstance(p, Mapping):
        raise ArgumentError(f"messages[{i}].content[{j}]", f"must be a dict, not {type(p).__name__}")
    kind = p.get("type")
    if kind in ("text", "input_text"):
        return TextPart(text=str(p.get("text", "")))
    if kind == "image_url":
        img = p.get("image_url")
        if isinstance(img, Mapping):
            return ImagePart(url=str(img.get("url", "")), detail=img.get("detail"))
        return ImagePart(url=str(img))
    if kind == "image":
        if "url" in p:
            return ImagePart(url=str(p["url"]), detail=p.get("detail"))
        src = p.get("source")
        if isinstance(src, Mapping) and src.get("type") == "base64":
            return ImagePart(url=f"data:{src.get('media_type')};base64,{src.get('data')}")
        if isinstance(src, Mapping) and src.get("type") == "url":
            return ImagePart(url=str(src.get("url")))
    raise ArgumentError(f"messages[{i}].content[{j}]", "has an unsupported part type (text, image_url or image)")


def _tool_call_from_dict(c: Any, i: int, j: int) -> ToolCall:
    if isinstance(c, ToolCall):
        return c
    if not isinstance(c, Mapping):
        raise ArgumentError(f"messages[{i}].tool_calls[{j}]", f"must be a dict, not {type(c).__name__}")
    fn = c.get("function") or {}
    if not isinstance(fn, Mapping):
        raise ArgumentError(f"messages[{i}].tool_calls[{j}].function", "must be a dict")
    args = fn.get("arguments", "{}")
    if not isinstance(args, str):
        try:
            args = orjson.dumps(args).decode()
        except orjson.JSONEncodeError:
            raise ArgumentError(
                f"messages[{i}].tool_calls[{j}].function.arguments", "cannot be encoded as JSON"
            ) from None
    return ToolCall(id=str(c.get("id", "")), name=str(fn.get("name", "")), arguments=args or "{}")


def coerce_tools(tools: Iterable[ToolSpec | Mapping[str, Any]]) -> tuple[ToolSpec, ...]:
    """Accept :class:`ToolSpec` objects or OpenAI-style tool dicts (``{"type": "function", ...}``).

    Raises:
        ArgumentError: ``tools`` is not a list, or a tool has no name or a schema that is not an object.
    """
    if isinstance(tools, str | Mapping | ToolSpec) or not isinstance(tools, Iterable):
        raise ArgumentError("tools", "must be a list of tools (ToolSpec objects or OpenAI-style dicts)")
    out: list[ToolSpec] = []
    for i, t in enumerate(tools):
        if isinstance(t, ToolSpec):
            _check_tool(t.name, t.description, t.parameters, f"tools[{i}]", f"tools[{i}].parameters")
            out.append(t)
            continue
        if not isinstance(t, Mapping):
            raise ArgumentError(f"tools[{i}]", f"must be a ToolSpec or a dict, not {type(t).__name__}")
        nested = "function" in t
        fn = t.get("function", t)
        where = f"tools[{i}].function" if nested else f"tools[{i}]"
        if not isinstance(fn, Mapping):
            raise ArgumentError(where, "must be a dict")
        key, params = "parameters", fn.get("parameters")
        if not params and fn.get("input_schema"):  # Anthropic's name for it
            key, params = "input_schema", fn["input_schema"]
        if params is None or (isinstance(params, Mapping) and not params):
            params = {"type": "object", "properties": {}}
        description = fn.get("description")
        if description is None:
            description = ""
        _check_tool(fn.get("name"), description, params, where, f"{where}.{key}")
        out.append(ToolSpec(name=fn["name"], description=description, parameters=params))
    return tuple(out)


def _check_tool(name: object, description: object, parameters: object, where: str, schema_path: str) -> None:
    """A tool's fields have the types a wire body needs (its schema's content is the encoder's question)."""
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"{where}.name", "must be a non-empty string")
    if not isinstance(description, str):
        raise ArgumentError(f"{where}.description", "must be a string")
    if not isinstance(parameters, Mapping):
        raise ArgumentError(schema_path, f"must be a JSON Schema object (a dict), not {type(parameters).__name__}")
