"""The script's step schema (validated with pydantic) and its conversion to runtime behaviours.

Each ``do`` value has its own model, joined in the discriminated union :data:`Step`; unknown keys are
errors. :func:`to_behaviour` turns a validated step into the frozen
:class:`~turnout.sim.behaviour.Behaviour` the server runs, precomputing its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from turnout.sim.behaviour import (
    DEFAULT_REASONING,
    DEFAULT_REFUSAL,
    DEFAULT_TEXT,
    Behaviour,
    Content,
    ErrorKind,
    ErrorSpec,
    Finish,
    Kind,
    ToolCall,
    generated_units,
    kind_for_status,
    split_units,
)
from turnout.sim.grammar import GrammarError, parse_step_string
from turnout.sim.headroom import HeadroomSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCallSpec(_Strict):
    """A tool call an ok answer makes."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class UsageSpec(_Strict):
    """Usage to report instead of the computed default."""

    input: int | None = Field(default=None, ge=0)
    output: int | None = Field(default=None, ge=0)
    cached_input: int = Field(default=0, ge=0)
    cache_write: int = Field(default=0, ge=0)


class _Timed(_Strict):
    delay: float = Field(default=0.0, ge=0)
    #: A heavy tail: with probability ``tail_p`` the delay is ``tail`` seconds instead (the simulator's seeded draw).
    tail: float | None = Field(default=None, ge=0)
    tail_p: float = Field(default=0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _tail_pair(self) -> _Timed:
        if (self.tail is None) != (self.tail_p == 0):
            raise ValueError("give tail (seconds) and tail_p (its probability, above 0) together")
        return self


class _Answer(_Timed):
    text: str | None = None
    tokens: int | None = Field(default=None, ge=0)
    reasoning: str | None = None
    reasoning_tokens: int | None = Field(default=None, ge=0)
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    usage: UsageSpec | None = None
    finish: Literal["stop", "length"] = "stop"
    tps: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_text_source(self) -> _Answer:
        if self.text is not None and self.tokens is not None:
            raise ValueError("give either text or tokens, not both")
        if self.reasoning is not None and self.reasoning_tokens is not None:
            raise ValueError("give either reasoning or reasoning_tokens, not both")
        return self


class OkStep(_Answer):
    """Answer normally."""

    do: Literal["ok"]


class SlowStep(_Answer):
    """Answer after ``delay`` seconds (before the headers, or before the first stream chunk)."""

    do: Literal["slow"]
    delay: float = Field(default=1.0, ge=0)


class _After(_Answer):
    after: int = Field(default=2, ge=0)


class StallStep(_After):
    """Stream ``after`` units, then keep the connection open and send nothing more."""

    do: Literal["stall"]


class CutStep(_After):
    """Stream ``after`` units, then end the body without the protocol's completion signal."""

    do: Literal["cut"]
    hard: bool = False


class MalformedStep(_After):
    """Stream ``after`` units, then a chunk that is not valid JSON, then the rest of the answer."""

    do: Literal["malformed"]


class MissingDoneStep(_Answer):
    """Stream the whole answer but leave out the separate terminator (OpenAI ``[DONE]``)."""

    do: Literal["missing_done"]


class InbandErrorStep(_After):
    """Stream ``after`` units, then the protocol's in-band error event, then end the body."""

    do: Literal["inband_error"]
    error: ErrorKind | None = None
    style: Literal["native", "openrouter"] = "native"
    message: str | None = None


class EmptyStep(_Timed):
    """Answer 200 with no text and no tool calls."""

    do: Literal["empty"]
    usage: UsageSpec | None = None


class RefusalStep(_Timed):
    """Refuse in the protocol's own way."""

    do: Literal["refusal"]
    text: str | None = None
    block: Literal["output", "prompt"] = "output"
    usage: UsageSpec | None = None


class ThinkOnlyStep(_Timed):
    """Answer with ``<think>…</think>`` and nothing else."""

    do: Literal["think_only"]
    reasoning: str | None = None
    usage: UsageSpec | None = None


class StatusStep(_Timed):
    """Answer with an HTTP error in the protocol's real shape."""

    do: Literal["status"]
    status: int | None = Field(default=None, ge=400, le=599)
    error: ErrorKind | None = None
    retry_after: float | None = Field(default=None, ge=0)
    retry_after_ms: int | None = Field(default=None, ge=0)
    ratelimit_reset: str | None = None
    limit: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    message: str | None = None

    @model_validator(mode="after")
    def _status_or_error(self) -> StatusStep:
        if self.status is None and self.error is None:
            raise ValueError("a status step needs `status`, `error` or both")
        return self


class ResetStep(_Timed):
    """Close the connection before sending any headers."""

    do: Literal["reset"]


class SilenceStep(_Strict):
    """Accept the request and never answer, until the client goes away."""

    do: Literal["silence"]


class FlappingStep(_Answer):
    """An outage that starts and ends: answer for ``after`` s after start or reset, fail for ``down`` s, answer again.

    While down, ``mode = "status"`` answers ``status`` (503); ``mode = "silence"`` accepts the request and never
    answers (until the client goes away), as a hung upstream does.
    """

    do: Literal["flapping"]
    down: float = Field(ge=0)
    after: float = Field(default=0.0, ge=0)
    status: int = Field(default=503, ge=400, le=599)
    mode: Literal["status", "silence"] = "status"


Step = Annotated[
    OkStep
    | SlowStep
    | StallStep
    | CutStep
    | MalformedStep
    | MissingDoneStep
    | InbandErrorStep
    | EmptyStep
    | RefusalStep
    | ThinkOnlyStep
    | StatusStep
    | ResetStep
    | SilenceStep
    | FlappingStep,
    Field(discriminator="do"),
]

STEP_TAGS = frozenset(k.value for k in Kind if k is not Kind.INVALID)


def _expand_short_steps(value: Any) -> Any:
    """Turn short-form string steps (``"429-ra2"``) into tables; the grammar owns that form."""
    if not isinstance(value, list):
        return value
    out = []
    for i, item in enumerate(value):
        try:
            out.append(parse_step_string(item) if isinstance(item, str) else item)
        except GrammarError as exc:
            raise ValueError(f"step {i}: {exc}") from exc
    return out


class ModelScript(_Strict):
    """The steps for one model name, and its rate-limit budgets (:mod:`turnout.sim.headroom`)."""

    steps: list[Step] = Field(min_length=1)
    after_last: Literal["repeat", "cycle"] = "repeat"
    headroom: HeadroomSpec | None = None

    @field_validator("steps", mode="before")
    @classmethod
    def _short_steps(cls, value: Any) -> Any:
        return _expand_short_steps(value)


class CacheSpec(_Strict):
    """``[cache]``: prompt caching per deployment (:mod:`turnout.sim.caching`)."""

    ttl: float = Field(gt=0, le=86_400)


class ScriptModel(_Strict):
    """The whole script file."""

    attempts_per: Literal["model", "model_key"] = "model"
    seed: int | None = None
    cache: CacheSpec | None = None
    models: dict[str, ModelScript] = Field(default_factory=dict)


def _tool_calls(specs: Sequence[ToolCallSpec], prefix: str) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(
            index=i,
            id=spec.id or f"{prefix}{i:04d}",
            name=spec.name,
            arguments=dict(spec.arguments),
            arguments_json=orjson.dumps(spec.arguments).decode(),
        )
        for i, spec in enumerate(specs)
    )


def _usage_fields(usage: UsageSpec | None) -> dict[str, Any]:
    if usage is None:
        return {}
    return {
        "usage_input": usage.input,
        "usage_output": usage.output,
        "usage_cached": usage.cached_input,
        "usage_cache_write": usage.cache_write,
    }


def _answer_content(step: _Answer) -> Content:
    if step.tokens is not None:
        text = generated_units(step.tokens)
    else:
        text = split_units(DEFAULT_TEXT if step.text is None else step.text)
    if step.reasoning_tokens is not None:
        reasoning = generated_units(step.reasoning_tokens)
    else:
        reasoning = split_units(step.reasoning or "")
    return Content(
        reasoning=reasoning,
        text=text,
        tool_calls=_tool_calls(step.tool_calls, "call_sim"),
        finish=Finish(step.finish),
        **_usage_fields(step.usage),
    )


def to_behaviour(step: Any) -> Behaviour:
    """The runtime :class:`Behaviour` of a validated step."""
    behaviour = _behaviour(step)
    tail = getattr(step, "tail", None)
    if tail is not None:
        return replace(behaviour, tail=tail, tail_p=step.tail_p)
    return behaviour


def _behaviour(step: Any) -> Behaviour:
    kind = Kind(step.do)
    delay = getattr(step, "delay", 0.0)
    if isinstance(step, StatusStep):
        spec = ErrorSpec(
            kind=step.error or _kind_for(step.status),
            status=step.status,
            retry_after=step.retry_after,
            retry_after_ms=step.retry_after_ms,
            ratelimit_reset=step.ratelimit_reset,
            limit=step.limit,
            tokens=step.tokens,
            message=step.message,
        )
        return Behaviour(kind=kind, error=spec, delay=delay)
    if isinstance(step, ResetStep | SilenceStep):
        return Behaviour(kind=kind, delay=delay)
    if isinstance(step, EmptyStep):
        return Behaviour(kind=kind, content=Content(**_usage_fields(step.usage)), delay=delay)
    if isinstance(step, RefusalStep):
        content = Content(
            refusal=split_units(step.text or DEFAULT_REFUSAL),
            finish=Finish.REFUSAL,
            block=step.block,
            **_usage_fields(step.usage),
        )
        return Behaviour(kind=kind, content=content, delay=delay)
    if isinstance(step, ThinkOnlyStep):
        text = f"<think>{step.reasoning or DEFAULT_REASONING}</think>"
        content = Content(text=split_units(text), **_usage_fields(step.usage))
        return Behaviour(kind=kind, content=content, delay=delay)
    assert isinstance(step, _Answer)
    content = _answer_content(step)
    error = None
    outage: dict[str, Any] = {}
    if isinstance(step, InbandErrorStep):
        error = ErrorSpec(kind=step.error, style=step.style, message=step.message)
    elif isinstance(step, FlappingStep):
        error = ErrorSpec(kind=_kind_for(step.status), status=step.status)
        outage = {"down": step.down, "down_from": step.after, "silent": step.mode == "silence"}
    return Behaviour(
        kind=kind,
        content=content,
        error=error,
        delay=delay,
        tps=step.tps,
        after=step.after if isinstance(step, _After) else 0,
        hard=getattr(step, "hard", False),
        **outage,
    )


def _kind_for(status: int | None) -> ErrorKind:
    return kind_for_status(status or 500)
