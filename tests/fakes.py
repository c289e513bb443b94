"""Fakes for unit tests: scripted providers, a fake clock, and walk builders."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.core.attribution import Attempt, RouteRef
from turnout.core.classify import ErrorFacts, provider_error
from turnout.core.environment import Environment
from turnout.core.errors import ErrorClass, ProviderError
from turnout.core.provider import Provider
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    StreamEvent,
    TextDelta,
    ToolSpec,
    Usage,
    UsageEvent,
)
from turnout.ledger.pricing import Catalogue, Rates, _Rate
from turnout.ledger.rows import CallRecord
from turnout.state import MemoryStore, StateStore
from turnout.walk.breakers import Breakers
from turnout.walk.keys import KeyPool
from turnout.walk.reliable import Entry, ReliableProvider

FULL = Capabilities(native_tools=True, vision=True, streaming=True, streaming_tool_events=True)

# Short names for the error classes, for tables of cases.
R = ErrorClass.RETRYABLE
RL = ErrorClass.RATE_LIMITED
RNR = ErrorClass.RATE_LIMITED_NON_RETRYABLE
NR = ErrorClass.NON_RETRYABLE
CW = ErrorClass.CONTEXT_WINDOW
REF = ErrorClass.REFUSAL
TO = ErrorClass.TIMEOUT
EMPTY = ErrorClass.EMPTY

#: A tool with a one-property object schema (``additionalProperties`` included, which Gemini rejects).
WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)

Step = Any  # a ChatResponse, a str (answer text), an exception, or a list of stream events


class Scripted(Provider):
    """Answers call N with step N (the last step repeats). Records the model of every call."""

    def __init__(self, *steps: Step, caps: Capabilities = FULL, name: str = "") -> None:
        self.steps = list(steps) or ["ok"]
        self.calls: list[str] = []
        self.requests: list[ChatRequest] = []
        self.stream_calls: list[str] = []
        self.caps = caps
        self.name = name
        self.closed_streams = 0

    def _next(self) -> Step:
        return self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.calls.append(model)
        self.requests.append(request)
        step = self._next()
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, str):
            return ChatResponse(text=step, model=model, usage=Usage(input_tokens=10, output_tokens=5))
        if isinstance(step, list):
            raise AssertionError("a stream step was used for chat")
        assert isinstance(step, ChatResponse)
        return step

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        self.stream_calls.append(model)
        step = self._next()
        try:
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, str):
                step = [TextDelta(text=step), UsageEvent(usage=Usage(input_tokens=10, output_tokens=5)), Final()]
            for item in step:
                if isinstance(item, BaseException):
                    raise item
                yield item
        except GeneratorExit:
            self.closed_streams += 1
            raise

    def capabilities(self, model: str | None = None) -> Capabilities:
        return self.caps


def err(status: int | None = 500, message: str = "upstream failure", **facts: Any) -> ProviderError:
    """A classified provider error as an adapter would raise it."""
    headers = {k.lower(): str(v) for k, v in facts.pop("headers", {}).items()}
    return provider_error(
        ErrorFacts(status=status, message=message, headers=headers, **facts), provider="x.y", model="m"
    )


@dataclass
class FakeClock:
    """A wall clock that only moves when someone sleeps (or when told)."""

    now: float = 1_000_000.0
    sleeps: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    @property
    def env(self) -> Environment:
        """This clock and its sleep as a client's or a walk's environment (the jitter stays random)."""
        return Environment(clock=self, sleep=self.sleep)


class NoCatalogue(Catalogue):
    """A catalogue that knows nothing (tests set windows and prices explicitly)."""

    def rates(self, family: str, model: str) -> Rates | None:
        return None

    def context_window(self, family: str, model: str) -> int | None:
        return None


@dataclass
class E:
    """An entry spec for :func:`walk`: profile, pinned model, providers (one per key), options."""

    profile: str
    model: str | None
    providers: Sequence[Provider]
    keys: Sequence[str] = ()
    refusal_fallback: bool = False
    context_window: int | None = None
    price: tuple[float, float] | None = None


def walk(
    *specs: E,
    retries: int = 2,
    backoff_ms: int = 500,
    clock: FakeClock | None = None,
    store: StateStore | None = None,
    jitter: float = 1.0,
    breakers: Breakers | None = None,
) -> ReliableProvider:
    """A reliable provider over the given entries; entries of one profile share one key pool."""
    store = store if store is not None else MemoryStore()
    clock = clock if clock is not None else FakeClock()
    pools: dict[str, KeyPool] = {}
    entries = []
    for s in specs:
        pool = pools.setdefault(s.profile, KeyPool(s.profile, list(s.keys), store, clock))
        rates = Rates(input=_Rate(s.price[0]), output=_Rate(s.price[1])) if s.price else None
        entries.append(
            Entry(
                profile=s.profile,
                model=s.model,
                providers=tuple(s.providers),
                keys=pool,
                refusal_fallback=s.refusal_fallback,
                context_window=s.context_window,
                rates=rates,
            )
        )
    return ReliableProvider(
        entries,
        provider_retries=retries,
        provider_backoff_ms=backoff_ms,
        store=store,
        catalogue=NoCatalogue(),
        env=Environment(clock=clock, sleep=clock.sleep, jitter=lambda: jitter),
        breakers=breakers,
    )


def req(text: str = "hello") -> ChatRequest:
    """A one-message request."""
    return ChatRequest.of(text)


class Fleet:
    """An adapter builder handing out one :class:`Scripted` per (profile, key), scripted by profile."""

    def __init__(self, **scripts: Sequence[Step]) -> None:
        self.scripts = {name.replace("__", "."): list(steps) for name, steps in scripts.items()}
        self.built: dict[tuple[str, str | None], Scripted] = {}

    def __call__(self, name: str, profile: Any, key: str | None) -> Scripted:
        provider = Scripted(*self.scripts.get(name, ["ok from " + name]), name=name)
        self.built[(name, key)] = provider
        return provider

    def calls(self, name: str) -> list[str]:
        """Every model sent to profile ``name`` (all keys)."""
        return [m for (n, _), p in self.built.items() if n == name for m in p.calls]


def call_record(
    call_id: str, *, ts: float = 1.0e9, model: str = "m", cost: float | None = None, caller: str | None = None
) -> CallRecord:
    """A ledger record of one successful gateway call with one attempt on ``openai.main``."""
    route = RouteRef(provider="openai.main", model=model)
    attempt = Attempt(provider="openai.main", model=model, outcome="ok", cost_usd=cost, started_at=ts)
    return CallRecord(
        call_id=call_id,
        ts=ts,
        surface="gateway",
        stream=False,
        requested=route,
        served=route,
        fallback=False,
        outcome="ok",
        attempts=(attempt,),
        accepted_index=0,
        caller=caller,
    )


class Alternate:
    """Chance draws (low, high, high, low, ...) so least_busy's random tie-break flips between two members."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> float:
        self.n += 1
        return 0.1 if self.n % 4 in (0, 1) else 0.9
