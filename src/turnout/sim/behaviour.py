"""What the simulator does for one request: the runtime form of a script step.

A script step (validated with pydantic in :mod:`turnout.sim.script`) becomes a frozen :class:`Behaviour`
once, when the script is loaded; everything a request needs (the answer's token units, the default
output count) is precomputed here so the request path only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """The behaviours a step can ask for (the ``do`` key of a script step)."""

    OK = "ok"
    STATUS = "status"
    RESET = "reset"
    SILENCE = "silence"
    SLOW = "slow"
    STALL = "stall"
    CUT = "cut"
    MALFORMED = "malformed"
    MISSING_DONE = "missing_done"
    INBAND_ERROR = "inband_error"
    EMPTY = "empty"
    REFUSAL = "refusal"
    THINK_ONLY = "think_only"
    FLAPPING = "flapping"
    INVALID = "invalid"  # a ``sim-`` model name the grammar cannot read; answered with a 400


class ErrorKind(StrEnum):
    """Which real provider error an HTTP error (or an in-band stream error) imitates."""

    RATE_LIMIT = "rate_limit"
    QUOTA = "quota"
    BILLING = "billing"
    AUTH = "auth"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONTEXT_LENGTH = "context_length"
    CONTENT_FILTER = "content_filter"
    BAD_REQUEST = "bad_request"
    SERVER = "server"
    BAD_GATEWAY = "bad_gateway"
    UNAVAILABLE = "unavailable"
    OVERLOADED = "overloaded"


class Finish(StrEnum):
    """How a complete answer ends, mapped to each protocol's own stop reason."""

    STOP = "stop"
    LENGTH = "length"
    REFUSAL = "refusal"


def kind_for_status(status: int) -> ErrorKind:
    """The error an HTTP status imitates when the step names none."""
    known = _STATUS_KINDS.get(status)
    if known is not None:
        return known
    return ErrorKind.SERVER if status >= 500 else ErrorKind.BAD_REQUEST


_STATUS_KINDS = {
    400: ErrorKind.BAD_REQUEST,
    401: ErrorKind.AUTH,
    402: ErrorKind.BILLING,
    403: ErrorKind.FORBIDDEN,
    404: ErrorKind.NOT_FOUND,
    429: ErrorKind.RATE_LIMIT,
    500: ErrorKind.SERVER,
    502: ErrorKind.BAD_GATEWAY,
    503: ErrorKind.UNAVAILABLE,
    504: ErrorKind.BAD_GATEWAY,
    529: ErrorKind.OVERLOADED,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SimUsage:
    """Token usage the simulator reports, normalised: ``input`` includes ``cached_input`` and ``cache_write``.

    Attributes:
        input: Input (prompt) tokens, cached ones included.
        output: Output tokens, reasoning included.
        cached_input: The part of ``input`` served from a prompt cache.
        cache_write: The part of ``input`` written to a prompt cache (reported by protocols that say so).
        reasoning: The part of ``output`` spent on reasoning.
    """

    input: int
    output: int
    cached_input: int = 0
    cache_write: int = 0
    reasoning: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool call of an answer.

    Attributes:
        index: Position among the answer's tool calls.
        id: The call id (protocols without ids ignore it).
        name: The function name.
        arguments: The arguments object.
        arguments_json: ``arguments`` serialised compactly, as OpenAI-style protocols send it.
    """

    index: int
    id: str
    name: str
    arguments: dict[str, Any]
    arguments_json: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Content:
    """The answer a step produces, split into stream units (one unit = one generated token).

    Attributes:
        reasoning: Reasoning units, each a word with its leading space.
        text: Answer text units.
        refusal: Refusal text units (only for the refusal behaviour).
        tool_calls: Tool calls; each counts as one unit and one output token.
        finish: How the answer ends.
        usage_input: A fixed input count, or None to count the request's words.
        usage_output: A fixed output count, or None for the number of units.
        usage_cached: Cached input tokens reported (part of the input).
        usage_cache_write: Input tokens reported as written to the cache (part of the input).
        block: Gemini refusal form: ``"output"`` (finishReason SAFETY) or ``"prompt"`` (blockReason).
    """

    reasoning: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    refusal: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    finish: Finish = Finish.STOP
    usage_input: int | None = None
    usage_output: int | None = None
    usage_cached: int = 0
    usage_cache_write: int = 0
    block: str = "output"
    reasoning_text: str = field(init=False)
    full_text: str = field(init=False)
    refusal_text: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reasoning_text", "".join(self.reasoning))
        object.__setattr__(self, "full_text", "".join(self.text))
        object.__setattr__(self, "refusal_text", "".join(self.refusal))

    @property
    def default_output(self) -> int:
        """Output tokens when the step fixes none: one per unit."""
        return len(self.reasoning) + len(self.text) + len(self.refusal) + len(self.tool_calls)

    def usage(self, input_words: int) -> SimUsage:
        """The exact usage reported for a request whose messages hold ``input_words`` words."""
        output = self.default_output if self.usage_output is None else self.usage_output
        inp = input_words if self.usage_input is None else self.usage_input
        return SimUsage(
            input=max(inp, self.usage_cached + self.usage_cache_write),
            output=output,
            cached_input=self.usage_cached,
            cache_write=self.usage_cache_write,
            reasoning=min(len(self.reasoning), output),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorSpec:
    """An HTTP error (or in-band stream error) to send.

    Attributes:
        kind: The real error it imitates; None for an in-band error means the protocol's usual one
            (OpenAI ``server_error``, Anthropic ``overloaded_error``, Gemini ``UNAVAILABLE``).
        status: The HTTP status, or None for the protocol's usual status for ``kind``.
        retry_after: Seconds for ``Retry-After`` (Gemini: ``RetryInfo.retryDelay``).
        retry_after_ms: Milliseconds for ``retry-after-ms`` (Gemini: ``retryDelay`` when no seconds).
        ratelimit_reset: A Go-style duration for OpenAI's ``x-ratelimit-reset-requests`` header.
        limit: The context window named by a context-length error.
        tokens: The prompt size named by a context-length error (default ``limit + 1``).
        message: Overrides the provider's message text.
        style: In-band error style on OpenAI chat: ``"native"`` or ``"openrouter"``.
    """

    kind: ErrorKind | None
    status: int | None = None
    retry_after: float | None = None
    retry_after_ms: int | None = None
    ratelimit_reset: str | None = None
    limit: int | None = None
    tokens: int | None = None
    message: str | None = None
    style: str = "native"


@dataclass(frozen=True, slots=True, kw_only=True)
class Behaviour:
    """One step: what to do for one attempt.

    Attributes:
        kind: The behaviour.
        content: The answer, for behaviours that answer (ok and every stream fault).
        error: The error, for ``status``, ``inband_error``, ``flapping`` (while down) and ``invalid``.
        delay: Seconds before the headers (non-stream) or the first chunk (stream).
        tps: Stream pacing in units per second, or None for no pacing.
        after: Units sent before a stall, cut, malformed chunk or in-band error.
        hard: For ``cut``: drop the connection instead of ending the body cleanly.
        down: For ``flapping``: how long the outage lasts, in seconds.
        down_from: For ``flapping``: seconds after start or reset before the outage begins.
        silent: For ``flapping``: during the outage, accept requests and never answer instead of sending the error.
        tail: A heavy tail's delay: with probability :attr:`tail_p` an attempt waits this instead of :attr:`delay`.
        tail_p: The probability of the tail (0: always :attr:`delay`).
    """

    kind: Kind
    content: Content | None = None
    error: ErrorSpec | None = None
    delay: float = 0.0
    tps: float | None = None
    after: int = 0
    hard: bool = False
    down: float = 0.0
    down_from: float = 0.0
    silent: bool = False
    tail: float = 0.0
    tail_p: float = 0.0

    def is_down(self, elapsed: float) -> bool:
        """Whether a ``flapping`` step's outage is on ``elapsed`` seconds after start or reset."""
        return self.down_from <= elapsed < self.down_from + self.down


# The words generated for ``tokens = N`` answers; cycled.
_VOCABULARY = (
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
)

DEFAULT_TEXT = "Hello from the Turnout simulator."
DEFAULT_REASONING = "Let me think about this step by step."
DEFAULT_REFUSAL = "I'm sorry, but I can't help with that."
DEFAULT_TOOL_ARGUMENTS: tuple[dict[str, Any], ...] = (
    {"city": "Paris"},
    {"city": "Tokyo", "unit": "celsius"},
    {"city": "Lima"},
)


def split_units(text: str) -> tuple[str, ...]:
    """Split text into units: words, each keeping the whitespace before it."""
    units: list[str] = []
    start = 0
    n = len(text)
    i = 0
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        while i < n and not text[i].isspace():
            i += 1
        if i > start:
            units.append(text[start:i])
        start = i
    return tuple(units)


def generated_units(count: int) -> tuple[str, ...]:
    """``count`` deterministic words, each a unit."""
    return tuple((" " if i else "") + _VOCABULARY[i % len(_VOCABULARY)] for i in range(count))
