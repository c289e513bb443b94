"""The in-process scenarios: non-streaming calls, 100-chunk streams, and failover after a 429.

Each runs its contenders in alternation (:func:`bench.stats.alternate`) against the upstream of this run,
after checking once that every contender returns the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.contenders import (
    EXPECTED_CHAT,
    EXPECTED_STREAM,
    MESSAGES,
    LiteLLMRouter,
    OpenAISDK,
    Raw,
    TurnoutClient,
)
from bench.settings import Settings
from bench.stats import Lane, Summary, alternate, ratio_interval, summarize


@dataclass(slots=True, kw_only=True)
class ScenarioResult:
    """The summaries of one scenario, floor first."""

    key: str
    title: str
    summaries: list[Summary]
    seconds: float
    #: Per contender (not the floor): a 90 % interval of its median ratio to the floor, rounds resampled.
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Per contender: the floor's summary over the rounds that contender ran (all rounds for most).
    floors: dict[str, Summary] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def floor(self) -> Summary:
        return self.summaries[0]

    def get(self, name: str) -> Summary:
        return next(s for s in self.summaries if s.name == name)

    def floor_of(self, name: str) -> Summary:
        """The floor to compare ``name`` with: its calls in the rounds ``name`` ran too."""
        return self.floors.get(name, self.floor)

    def ratio(self, name: str) -> float:
        """``name``'s median over its floor's median."""
        return self.get(name).ratio(self.floor_of(name))

    @classmethod
    def of(cls, key: str, title: str, lanes: Sequence[Lane], seconds: float) -> ScenarioResult:
        """The summaries of alternated lanes (the floor first), with each contender's ratio interval."""
        floor = lanes[0]
        return cls(
            key=key,
            title=title,
            summaries=[summarize(lane.name, lane.samples) for lane in lanes],
            seconds=seconds,
            intervals={lane.name: ratio_interval(floor.by_round, lane.by_round) for lane in lanes[1:]},
            floors={
                lane.name: summarize(floor.name, [x for r in lane.by_round for x in floor.by_round.get(r, ())])
                for lane in lanes[1:]
                if lane.every != 1
            },
        )


def _slow_note(s: Settings) -> str:
    return (
        "The floor and Turnout run in every round; the openai SDK and LiteLLM, which no target judges, in one round "
        f"out of {s.slow_every} (their ratios and intervals pair their batches with the floor's of the same rounds)."
    )


def _judged(contender: Any) -> bool:
    """The floor and Turnout run in every round; the slower contenders every ``slow_every`` rounds."""
    return isinstance(contender, Raw | TurnoutClient)


async def _run(
    key: str, title: str, contenders: Sequence[Any], method: str, expected: str, rounds: int, batch: int, s: Settings
) -> ScenarioResult:
    try:
        for c in contenders:
            got = await getattr(c, method)()
            if got != expected:
                raise RuntimeError(f"{c.name} returned {got[:60]!r}, not the upstream's answer")
        lanes = [Lane(c.name, getattr(c, method), every=1 if _judged(c) else s.slow_every) for c in contenders]
        seconds = await alternate(lanes, rounds=rounds, batch=batch, warmup=s.warmup, budget_s=s.budget_s)
    finally:
        for c in contenders:
            await c.aclose()
    return ScenarioResult.of(key, title, lanes, seconds)


async def non_streaming(url: str, s: Settings, tmp: Path) -> ScenarioResult:
    """One complete answer per call: raw aiohttp, Turnout (ledger off and on), openai SDK, LiteLLM Router."""
    contenders: list[Any] = [
        Raw(url),
        TurnoutClient(url),
        TurnoutClient(url, name="turnout (ledger on)", ledger_path=tmp / "ledger-chat.sqlite3"),
        OpenAISDK(url),
        LiteLLMRouter(url),
    ]
    result = await _run("chat", "Non-streaming call", contenders, "chat", EXPECTED_CHAT, s.chat_rounds, s.chat_batch, s)
    result.notes.append(_slow_note(s))
    result.notes.append(
        "`turnout` runs with `ledger=False`; `turnout (ledger on)` writes every call to a SQLite ledger "
        "(background thread) and is shown for information, not judged."
    )
    return result


async def streaming(url: str, s: Settings) -> ScenarioResult:
    """A 100-chunk stream per call, consumed to its end."""
    contenders: list[Any] = [Raw(url), TurnoutClient(url), OpenAISDK(url), LiteLLMRouter(url)]
    result = await _run(
        "stream",
        "Streaming call (100 chunks)",
        contenders,
        "stream",
        EXPECTED_STREAM,
        s.stream_rounds,
        s.stream_batch,
        s,
    )
    result.notes.append(_slow_note(s))
    result.notes.append("`turnout` runs with `ledger=False`. Every contender asks for `stream_options.include_usage`.")
    return result


class _Failover:
    """Turnout whose primary always answers 429 with ``Retry-After: <seconds>``; checks what each call did."""

    def __init__(self, url: str, name: str, retry_after: int) -> None:
        self.name = name
        self.inner = TurnoutClient(url, name=name, primary_prefix=f"/rl-ra{retry_after}")

    async def outcomes(self) -> list[str]:
        reply = await self.inner.client.chat(MESSAGES)
        if reply.text != EXPECTED_CHAT or reply.served.provider != "openai.backup":
            raise RuntimeError(f"{self.name}: not served by the fallback ({reply.served})")
        return [a.outcome for a in reply.attempts]

    async def chat(self) -> str:
        return await self.inner.chat()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def failover(url: str, s: Settings) -> ScenarioResult:
    """A primary answering 429: the failover call, and a call while the primary cools down."""
    raw = Raw(url)
    ra0 = _Failover(url, "turnout: 429 Retry-After 0 → fallback", 0)
    cooling = _Failover(url, "turnout: call during cooldown", 60)
    contenders: list[Any] = [raw, ra0, cooling]
    try:
        first = await ra0.outcomes()
        again = await ra0.outcomes()
        await cooling.outcomes()  # opens the 60 s cooldown
        during = await cooling.outcomes()
        if first != ["rate_limited", "ok"] or during != ["cooldown_skip", "ok"]:
            raise RuntimeError(f"unexpected attempts: {first} / {during}")
        lanes = [Lane(c.name, c.chat) for c in contenders]
        seconds = await alternate(
            lanes, rounds=s.failover_rounds, batch=s.failover_batch, warmup=s.warmup, budget_s=min(s.budget_s, 45.0)
        )
        still = await cooling.outcomes()
    finally:
        for c in contenders:
            await c.aclose()
    result = ScenarioResult.of("failover", "Failover after a 429", lanes, seconds)
    result.notes.append(
        f"With `Retry-After: 0` the attempts of a call are {first}; the next call's are {again}: a zero hint "
        "opens a zero-length cooldown (the cooldown lasts the hint), so every call asks the primary "
        "again and each timed call is a full failover."
    )
    result.notes.append(
        "The cooldown row uses a primary that answers 429 with `Retry-After: 60`: one call opens the cooldown, "
        f"then every timed call's attempts are {during} (still {still} after the run)."
    )
    return result
