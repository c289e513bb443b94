"""Flaky but serving entries: calls served with circuit breakers on, against a plain walk on the same drawn faults.

Three profiles in a chain (``openai.a`` → ``openai.b`` → ``openai.c``), none down, each failing :data:`RATE` of
its attempts at random: a 503, a connection reset or a first-token timeout, a third each. The draw of every
attempt is fixed by the seed, the call's number, the profile and the attempt's number on that profile in that
call, so a run with breakers and a run without (``[reliability.breaker] enabled = false``, the plain walk) meet
the same faults wherever they make the same attempt. Calls go through the whole client (:class:`turnout.Client`,
its walks, breakers and streamed turns) with in-process adapters that answer after a short delay; streamed calls
go through ``client.stream`` and its recovery before output. :data:`CONCURRENCY` calls are in flight at once.

Measured per run: calls served, and each entry's breaker transitions (opened, probe, closed, reopened) per
minute of the run. Targets (:func:`targets`): with breakers, at least the plain walk's share less 0.5 point for
non-streaming calls and less 1 point over all calls; a flaky-but-serving entry's breaker makes at most
:data:`TRANSITIONS_PER_MIN` transitions a minute.

Run alone: ``python -m bench.flaky [--calls N] [--seeds K]`` prints the section of ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from turnout import Client, Environment
from turnout.core.classify import ErrorFacts, provider_error
from turnout.core.errors import ProviderConnectionError, ProviderTimeout, TurnoutError
from turnout.core.provider import Provider
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, Final, StreamEvent, TextDelta, Usage, UsageEvent

#: The share of each profile's attempts that fail, and how (one third each).
RATE = 0.35
FAULTS = ("5xx", "reset", "timeout")
PROFILES = ("openai.a", "openai.b", "openai.c")
CONCURRENCY = 50
CALLS = 20000
SEEDS = 2
#: How long an attempt takes (seconds): an answer, each fault (a timeout waits out the first-token bound).
LATENCY = {None: 0.004, "5xx": 0.002, "reset": 0.001, "timeout": 0.05}
BACKOFF_MS = 50
#: Targets: served calls with breakers at least the plain walk's less these points; transitions a minute at most.
NON_STREAMING_MARGIN = 0.5
OVERALL_MARGIN = 1.0
TRANSITIONS_PER_MIN = 6.0

#: The number of the call an attempt belongs to (set by the caller of each call).
CALL: ContextVar[int] = ContextVar("flaky_call", default=0)


def draw(seed: int, profile: str, call: int, attempt: int) -> str | None:
    """The fault of one attempt (None: it answers): fixed by its seed, call, profile and attempt number."""
    x = random.Random(f"{seed}/{profile}/{call}/{attempt}").random()
    return FAULTS[min(int(x / RATE * len(FAULTS)), len(FAULTS) - 1)] if x < RATE else None


class FlakyProvider(Provider):
    """An adapter failing its attempts as :func:`draw` says, after the delays of :data:`LATENCY`.

    Args:
        profile: The profile it stands for.
        seed: The run's seed.
        sleep: How it waits (a fake clock's sleep in tests).
    """

    def __init__(self, profile: str, seed: int, sleep: Callable[[float], Awaitable[None]]) -> None:
        self.profile = profile
        self.seed = seed
        self.sleep = sleep
        self.tries: dict[int, int] = {}
        self.attempts = 0

    def capabilities(self, model: str | None = None) -> Capabilities:
        """Streams, tools and all."""
        return Capabilities(native_tools=True, vision=True, streaming=True, streaming_tool_events=True)

    async def _attempt(self, model: str) -> None:
        call = CALL.get()
        number = self.tries[call] = self.tries.get(call, 0) + 1
        self.attempts += 1
        fault = draw(self.seed, self.profile, call, number)
        await self.sleep(LATENCY[fault])
        if fault == "5xx":
            raise provider_error(
                ErrorFacts(status=503, message="service unavailable"), provider=self.profile, model=model
            )
        if fault == "reset":
            raise ProviderConnectionError("connection reset by peer", provider=self.profile, model=model)
        if fault == "timeout":
            raise ProviderTimeout(
                "no first token in time", phase="first_token", seconds=LATENCY["timeout"], provider=self.profile,
                model=model,
            )  # fmt: skip

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        """One answer, or the drawn fault."""
        await self._attempt(model)
        return ChatResponse(text="ok", model=model, usage=Usage(input_tokens=5, output_tokens=1))

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """One streamed answer, or the drawn fault before its first event."""
        await self._attempt(model)
        yield TextDelta(text="ok")
        yield UsageEvent(usage=Usage(input_tokens=5, output_tokens=1))
        yield Final()


def config(breakers: bool, retries: int = 2) -> dict[str, Any]:
    """The chain, with breakers at their defaults or off (the plain walk), and ``retries`` per entry."""
    models: dict[str, Any] = {}
    for n, name in enumerate(PROFILES):
        alias = name.split(".")[1]
        models[alias] = {"api_key": "sk-bench-0000", "model": "m"}
        if n == 0:
            models[alias]["fallback"] = list(PROFILES[1:])
    return {
        "default_provider": PROFILES[0],
        "providers": {"models": {"openai": models}},
        "reliability": {
            "provider_retries": retries,
            "provider_backoff_ms": BACKOFF_MS,
            "breaker": {"enabled": breakers},
        },
        "ledger": {"enabled": False},
    }


@dataclass(slots=True, kw_only=True)
class FlakyRun:
    """One run: a seed, breakers on or off, streamed or not.

    Attributes:
        seed: The seed of the draws.
        breakers: Whether the entries had breakers.
        stream: Whether the calls streamed.
        retries: Retries per entry.
        calls: Calls made.
        served: Calls that got an answer.
        attempts: Requests that reached the profiles.
        seconds: How long the run took (the clock the walk was given).
        transitions: Each entry's breaker transitions, by entry and transition.
    """

    seed: int
    breakers: bool
    stream: bool
    retries: int = 2
    calls: int = 0
    served: int = 0
    attempts: int = 0
    seconds: float = 0.0
    transitions: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def share(self) -> float:
        """Served calls, in percent."""
        return 100.0 * self.served / self.calls if self.calls else 0.0

    @property
    def most_per_minute(self) -> float:
        """The most transitions one entry's breaker made, per minute of the run."""
        most = max((sum(moves.values()) for moves in self.transitions.values()), default=0)
        return most * 60.0 / self.seconds if self.seconds > 0 else 0.0


async def run(
    seed: int,
    *,
    breakers: bool,
    stream: bool,
    retries: int = 2,
    calls: int = CALLS,
    concurrency: int = CONCURRENCY,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> FlakyRun:
    """``calls`` calls through the chain, ``concurrency`` at once; what they were served."""
    out = FlakyRun(seed=seed, breakers=breakers, stream=stream, retries=retries, calls=calls)
    adapters: dict[str, FlakyProvider] = {}

    def build(name: str, profile: object, key: str | None) -> Provider:
        adapters[name] = FlakyProvider(name, seed, sleep)
        return adapters[name]

    numbers = iter(range(calls))
    client = Client.from_dict(
        config(breakers, retries), ledger=False, adapter_builder=build, env=Environment(clock=clock, sleep=sleep)
    )

    async def one(number: int) -> bool:
        CALL.set(number)
        try:
            if stream:
                text = "".join([e.text async for e in client.stream("hi") if isinstance(e, TextDelta)])
            else:
                text = (await client.chat("hi")).text
        except TurnoutError:
            return False
        return text == "ok"

    async def worker() -> None:
        for number in numbers:
            served = await asyncio.create_task(one(number))  # a task per call: its own context
            out.served += served

    started = clock()
    async with client:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        out.seconds = clock() - started
        registry = client.factory.breakers
        if registry is not None:
            for (entry, move), n in registry.transitions.items():
                out.transitions.setdefault(entry, {})[move] = n
    out.attempts = sum(a.attempts for a in adapters.values())
    return out


@dataclass(slots=True, kw_only=True)
class FlakyScenario:
    """Every run, breakers on and off, streamed and not, per seed."""

    runs: list[FlakyRun] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    def share(self, *, breakers: bool, stream: bool | None = None) -> float | None:
        """Served calls in percent over the matching runs at the default retries (None: none ran)."""
        runs = [
            r for r in self.runs if r.retries == 2 and r.breakers == breakers and (stream is None or r.stream == stream)
        ]
        calls = sum(r.calls for r in runs)
        return 100.0 * sum(r.served for r in runs) / calls if calls else None


async def measure(calls: int = CALLS, seeds: int = SEEDS) -> FlakyScenario:
    """For each seed: non-streaming and streamed calls, with breakers and without, on the same draws.

    Then, for information (no target), the first seed with no retries (``provider_retries = 0``).
    """
    out = FlakyScenario()
    try:
        for seed in range(1, seeds + 1):
            for stream in (False, True):
                for breakers in (True, False):
                    out.runs.append(await run(seed, breakers=breakers, stream=stream, calls=calls))
        for breakers in (True, False):
            out.runs.append(await run(1, breakers=breakers, stream=False, retries=0, calls=calls))
    except Exception as exc:  # reported in results.md
        out.failures["flaky"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def targets(f: FlakyScenario | None) -> list[tuple[str, str, str, bool | None]]:
    """``(target, measured, limit, met)`` of the flaky-chain targets (met None: not measured)."""
    names = (
        "Flaky chain, non-streaming: served with breakers (plain walk on the same faults)",
        "Flaky chain, all calls: served with breakers (plain walk on the same faults)",
        "Flaky chain: breaker transitions of one serving entry per minute (the most in a run)",
    )
    if f is None or not f.runs:
        return [
            (names[0], "–", f"≥ plain − {NON_STREAMING_MARGIN:g} point", None),
            (names[1], "–", f"≥ plain − {OVERALL_MARGIN:g} point", None),
            (names[2], "–", f"≤ {TRANSITIONS_PER_MIN:g}", None),
        ]
    out = []
    for name, stream, margin in ((names[0], False, NON_STREAMING_MARGIN), (names[1], None, OVERALL_MARGIN)):
        on, off = f.share(breakers=True, stream=stream), f.share(breakers=False, stream=stream)
        if on is None or off is None:
            out.append((name, "–", f"≥ plain − {margin:g} point", None))
            continue
        out.append((name, f"{on:.2f} % ({off:.2f} %)", f"≥ {off - margin:.2f} %", on >= off - margin))
    flaps = max(r.most_per_minute for r in f.runs if r.breakers and r.retries == 2)
    out.append((names[2], f"{flaps:.1f}", f"≤ {TRANSITIONS_PER_MIN:g}", flaps <= TRANSITIONS_PER_MIN))
    return out


def section(f: FlakyScenario | None, failure: str | None, measured: str) -> list[str]:
    """The report's section on the flaky chain."""
    out = [
        "## A flaky chain behind circuit breakers",
        "",
        f"Three profiles in a chain, none down, each failing {RATE:.0%} of its attempts at random (a 503, a reset or "
        f"a first-token timeout, a third each; `bench/flaky.py`, in-process adapters answering in "
        f"{LATENCY[None] * 1000:g} ms, a timeout after {LATENCY['timeout'] * 1000:g} ms), {CONCURRENCY} calls in "
        f"flight, default retries (2) with `provider_backoff_ms = {BACKOFF_MS}`, breakers at their defaults against "
        "the plain walk (`enabled = false`) on the same drawn faults (each attempt's fault is fixed by the seed, "
        "the call, the profile and the attempt's number there). Transitions: an entry's breaker opened, probed, "
        "closed or reopened, per minute of the run.",
        "",
        measured,
        "",
    ]
    if f is None or failure is not None or not f.runs:
        return [*out, f"Not measured: {failure or (f.failures if f else 'skipped')}", ""]
    out += [
        "| seed | retries | calls | streamed | served, breakers | served, plain walk | requests, breakers "
        "| requests, plain | seconds (breakers) | transitions (breakers) | most per entry per minute |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for on in (r for r in f.runs if r.breakers):
        off = next(
            r
            for r in f.runs
            if not r.breakers and r.seed == on.seed and r.stream == on.stream and r.retries == on.retries
        )
        moves = sum(sum(m.values()) for m in on.transitions.values())
        out.append(
            f"| {on.seed} | {on.retries} | {on.calls} | {'yes' if on.stream else 'no'} | {on.share:.2f} % | "
            f"{off.share:.2f} % | {on.attempts} | {off.attempts} | {on.seconds:.1f} | {moves} | "
            f"{on.most_per_minute:.1f} |"
        )
    out += [
        "",
        "The targets are judged on the runs with the default retries (2); the run without retries is shown for "
        "information.",
        "",
        "| target | measured | limit | met |",
        "|---|---|---|---|",
    ]
    for target, measured_value, limit, met in targets(f):
        out.append(f"| {target} | {measured_value} | {limit} | {'yes' if met else ('–' if met is None else 'no')} |")
    return [*out, ""]


def main(argv: list[str] | None = None) -> int:
    """Run the scenario alone and print its section."""
    parser = argparse.ArgumentParser(description="Calls served by a flaky chain, breakers on and off.")
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--seeds", type=int, default=SEEDS)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    scenario = asyncio.run(measure(args.calls, args.seeds))
    took = time.perf_counter() - t0
    when = f"Run alone: `python -m bench.flaky --calls {args.calls} --seeds {args.seeds}` ({took:.0f} s)."
    print("\n".join(section(scenario, scenario.failures.get("flaky"), when)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
