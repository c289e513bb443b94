"""Hedged requests: a slow first entry is raced by the next one; the first answer wins, the other is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import replace

import pytest

from fakes import E, FakeClock, Scripted, err, req, walk
from turnout import Client
from turnout.core.attribution import DispatchScope
from turnout.core.errors import AllProvidersFailed
from turnout.core.types import ChatRequest, ChatResponse, Final, StreamEvent, TextDelta, Usage, UsageEvent
from turnout.state import MemoryStore
from turnout.state.base import BreakerRecord
from turnout.walk.breakers import Breakers
from turnout.walk.hedge import HedgeSettings, Hedging
from turnout.walk.reliable import ReliableProvider
from turnout.walk.stats import EntryStats, Stats


class Slow(Scripted):
    """Answers after ``delay`` seconds of real time (or never, with None)."""

    def __init__(self, text: str = "slow", delay: float | None = None) -> None:
        super().__init__(text)
        self.delay = delay
        self.cancelled = 0

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.calls.append(model)
        try:
            if self.delay is None:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay or 0)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return ChatResponse(text=self.steps[0], model=model, usage=Usage(input_tokens=1, output_tokens=1))


def hedged(
    *specs: E, after_ms: float = 20, store: MemoryStore | None = None, **settings: object
) -> tuple[ReliableProvider, Hedging]:
    """A walk with hedging after ``after_ms`` (real time: the race is on the event loop's own timers)."""
    hedging = Hedging(HedgeSettings(enabled=True, after_ms=after_ms, **settings))  # type: ignore[arg-type]
    store = store if store is not None else MemoryStore()
    r = walk(*specs, clock=FakeClock(), store=store, breakers=Breakers(store))
    r.context = replace(r.context, hedging=hedging, stats=Stats())
    return r, hedging


def trail(scope: DispatchScope) -> list[tuple[str, str]]:
    return [(a.provider, a.outcome) for a in scope.attempts]


async def test_a_slow_first_entry_is_raced_and_the_first_answer_wins() -> None:
    """No answer within after_ms: the next entry gets the request too; it answers first, the first is cancelled."""
    slow, fast = Slow(), Scripted("fast")
    r, hedging = hedged(E("openai.a", "m", [slow]), E("anthropic.b", "m", [fast]))
    scope = DispatchScope()
    served = await r.run(req(), "m", None, scope)
    assert served.response.text == "fast" and served.route.provider == "anthropic.b" and served.entry == 1
    assert sorted(trail(scope)) == [("anthropic.b", "ok"), ("openai.a", "hedge_lost")]
    assert slow.cancelled == 1
    assert (hedging.hedged, hedging.won) == (1, 1)


async def test_an_answer_before_after_ms_is_never_hedged() -> None:
    """The first entry answers in time: nothing else is sent."""
    quick, other = Slow("quick", delay=0.001), Scripted("never")
    r, hedging = hedged(E("openai.a", "m", [quick]), E("anthropic.b", "m", [other]), after_ms=200)
    served = await r.run(req(), "m", None, DispatchScope())
    assert served.response.text == "quick" and other.calls == [] and hedging.hedged == 0


async def test_the_first_entry_can_still_win_after_the_hedge_started() -> None:
    """The hedge is slower still: the first entry's answer wins and the hedge is recorded as lost."""
    first, slower = Slow("first", delay=0.05), Slow("hedge")
    r, hedging = hedged(E("openai.a", "m", [first]), E("anthropic.b", "m", [slower]))
    scope = DispatchScope()
    served = await r.run(req(), "m", None, scope)
    assert served.response.text == "first" and served.entry == 0
    assert sorted(trail(scope)) == [("anthropic.b", "hedge_lost"), ("openai.a", "ok")]
    assert (hedging.hedged, hedging.won, hedging.kept, slower.cancelled) == (1, 0, 1, 1)


async def test_the_budget_caps_the_extra_requests() -> None:
    """With a burst of one and no refill, only the first slow call hedges; the next one waits for its entry."""
    slow, fast = Slow("slow", delay=0.06), Scripted("fast")
    r, hedging = hedged(E("openai.a", "m", [slow]), E("anthropic.b", "m", [fast]), budget=0.0, burst=1.0)
    first = await r.run(req(), "m", None, DispatchScope())
    second = await r.run(req(), "m", None, DispatchScope())
    assert (first.response.text, second.response.text) == ("fast", "slow")
    assert hedging.describe() == {
        "enabled": True,
        "calls": 2,
        "hedged": 1,
        "rate": 0.5,
        "hedge_wins": 1,
        "original_wins": 0,
        "budget_left": 0.0,
    }


async def test_no_hedge_to_an_entry_whose_breaker_is_open_or_that_cools_down() -> None:
    """An unavailable next entry is no hedge target: the call waits for the first entry."""
    for prepare in ("breaker", "cooldown"):
        store = MemoryStore()
        slow, other = Slow("slow", delay=0.05), Scripted("never")
        r, hedging = hedged(E("openai.a", "m", [slow]), E("anthropic.b", "m", [other]), store=store)
        now = r.context.env.clock()
        if prepare == "breaker":
            await store.open_breaker("anthropic.b/m", BreakerRecord(opened_at=now, until=now + 60, interval=5))
        else:
            await store.set_cooldown("anthropic.b", now + 60)
        served = await r.run(req(), "m", None, DispatchScope())
        assert served.response.text == "slow" and other.calls == [] and hedging.hedged == 0, prepare


async def test_when_both_sides_fail_the_walk_goes_on_without_trying_the_hedge_again() -> None:
    """The first entry fails after the hedge started, the hedge fails too: the third entry answers."""

    class LateFailure(Slow):
        async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
            self.calls.append(model)
            await asyncio.sleep(0.05)
            raise err(500)

    first, hedge, third = LateFailure(), Scripted(err(500)), Scripted("third")
    r, _ = hedged(E("openai.a", "m", [first]), E("anthropic.b", "m", [hedge]), E("gemini.c", "m", [third]))
    r.context = replace(r.context, tries=1)
    scope = DispatchScope()
    served = await r.run(req(), "m", None, scope)
    assert served.response.text == "third"
    assert len(hedge.calls) == 1  # tried once, as the hedge
    assert sorted(trail(scope)) == [("anthropic.b", "retryable"), ("gemini.c", "ok"), ("openai.a", "retryable")]


async def test_other_keys_hedges_on_another_key_of_the_same_entry() -> None:
    """A single entry with a key pool: the hedge goes to its other key."""
    slow, fast = Slow(), Scripted("other key")
    r, hedging = hedged(E("openai.a", "m", [slow, fast], keys=["sk-one", "sk-two"]), other_keys=True)
    scope = DispatchScope()
    served = await r.run(req(), "m", None, scope)
    assert served.response.text == "other key" and hedging.won == 1
    keys = {a.outcome: a.key_id for a in scope.attempts}
    assert keys["ok"] != keys["hedge_lost"]


async def test_all_fail_still_raises_with_every_attempt() -> None:
    """A hedged walk that fails everywhere raises AllProvidersFailed with both sides' attempts."""
    r, _ = hedged(E("openai.a", "m", [Scripted(err(500))]), E("anthropic.b", "m", [Scripted(err(500))]))
    r.context = replace(r.context, tries=1)
    with pytest.raises(AllProvidersFailed) as info:
        await r.run(req(), "m", None, DispatchScope())
    assert sorted(a.provider for a in info.value.attempts) == ["anthropic.b", "openai.a"]


def test_auto_waits_for_the_tail_not_for_calls_a_little_over_the_median() -> None:
    """after_ms = "auto": twice the median for steady answers; nothing until 20 answers are seen."""
    settings = HedgeSettings(enabled=True, after_ms="auto")
    stats = EntryStats()
    assert settings.delay(stats) is None
    for i in range(100):
        stats.first_token(2.0 if i % 25 == 0 else 0.05)  # 4 % of answers take 2 s
    assert settings.delay(stats) == pytest.approx(0.1)
    assert HedgeSettings(after_ms="auto").delay(stats) is None  # off by default
    assert HedgeSettings(enabled=True, after_ms=250).delay(None) == 0.25


def test_auto_still_hedges_a_tail_heavier_than_five_percent() -> None:
    """A tail of 10 % of the answers (beyond a 95th percentile) does not move the delay into the tail itself."""
    stats = EntryStats()
    for i in range(100):
        stats.first_token(2.0 if i % 10 == 0 else 0.05 + 0.001 * (i % 7))
    delay = HedgeSettings(enabled=True, after_ms="auto").delay(stats)
    assert delay == pytest.approx(0.106)  # twice the median of 53 ms, far below the 2 s tail


def test_the_default_budget_hedges_a_cluster_of_five_then_one_call_in_twenty() -> None:
    """A tail rarely spreads evenly: a full default bucket allows 5 hedges in a row, then 5 % of calls refill it."""
    settings = HedgeSettings(enabled=True)
    hedging = Hedging(settings)

    def slow_calls(n: int) -> list[bool]:
        out = []
        for _ in range(n):
            hedging.credit(settings)
            out.append(hedging.take())
        return out

    assert slow_calls(6) == [True] * 5 + [False]
    assert sum(slow_calls(40)) == 2  # the 6 calls left 0.25 of a hedge; 40 more earn 2


def test_auto_waits_longer_for_an_entry_whose_ordinary_answers_vary_widely() -> None:
    """Answers spread from 1 to 4 s (median 2 s, absolute deviation 1 s): the median plus three deviations, 5 s."""
    stats = EntryStats()
    for i in range(20):
        stats.first_token(1.0 + i // 5)
    assert HedgeSettings(enabled=True, after_ms="auto").delay(stats) == pytest.approx(5.0)


class SlowStream(Scripted):
    """Streams ``text`` after ``delay`` seconds of real time (None: never), optionally after a quiet first batch."""

    def __init__(self, text: str, delay: float | None = None, *, early_usage: bool = False) -> None:
        super().__init__(text)
        self.delay = delay
        self.early_usage = early_usage
        self.closed = 0

    async def stream_batches(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        self.stream_calls.append(model)
        try:
            if self.early_usage:  # a first batch with no output: it opens the stream but shows nothing
                yield [UsageEvent(usage=Usage(input_tokens=2, output_tokens=0))]
            if self.delay is None:
                await asyncio.Event().wait()
            await asyncio.sleep(self.delay or 0)
            yield [TextDelta(text=self.steps[0])]
            yield [Final(finish_reason="stop", model=model)]
        finally:
            self.closed += 1


async def streamed(r: ReliableProvider, scope: DispatchScope) -> tuple[str, str]:
    """Open and read a whole stream: (its text, the route it came from)."""
    stream = await r.open_stream(req(), "m", None, scope)
    text = "".join(e.text for batch in [b async for b in stream.batches()] for e in batch if e.type == "text")
    return text, stream.route.provider


async def test_a_stream_without_output_after_after_ms_is_raced_and_the_first_output_wins() -> None:
    """A stream that opened but shows nothing is hedged; the hedge's output is relayed, the first is closed."""
    slow, fast = SlowStream("slow", early_usage=True), SlowStream("fast", delay=0)
    r, hedging = hedged(E("openai.a", "m", [slow]), E("anthropic.b", "m", [fast]))
    scope = DispatchScope()
    assert await streamed(r, scope) == ("fast", "anthropic.b")
    assert sorted(trail(scope)) == [("anthropic.b", "ok"), ("openai.a", "hedge_lost")]
    assert slow.closed == 1 and (hedging.hedged, hedging.won, hedging.kept) == (1, 1, 0)


async def test_the_first_stream_still_wins_when_its_output_comes_first() -> None:
    """The hedge is slower: the first stream's output wins and the hedge is closed as lost."""
    first, hedge = SlowStream("first", delay=0.05), SlowStream("hedge")
    r, hedging = hedged(E("openai.a", "m", [first]), E("anthropic.b", "m", [hedge]))
    scope = DispatchScope()
    assert await streamed(r, scope) == ("first", "openai.a")
    assert sorted(trail(scope)) == [("anthropic.b", "hedge_lost"), ("openai.a", "ok")]
    assert hedge.closed == 1 and (hedging.won, hedging.kept) == (0, 1)


async def test_a_hedged_turn_reports_the_winner_and_its_fallback_notice() -> None:
    """Through the client: the reply names the hedge's route, with the cross-family notice."""
    slow, fast = SlowStream("slow"), SlowStream("fast answer", delay=0)
    fleet = {"openai.primary": slow, "anthropic.backup": fast}
    toml = """
default_provider = "openai.primary"
[providers.models.openai.primary]
api_key = "sk-p"
model = "gpt-4.1"
fallback = ["anthropic.backup"]
[providers.models.anthropic.backup]
api_key = "sk-b"
model = "claude"
[reliability.hedge]
enabled = true
after_ms = 20
"""
    async with Client.from_toml(toml, adapter_builder=lambda name, *_: fleet[name], ledger=False) as c:
        stream = c.stream("hi")
        texts = [e.text async for e in stream if e.type == "text"]
    reply = stream.response
    assert texts == ["fast answer"] and reply.served.provider == "anthropic.backup"
    assert reply.notice is not None and "anthropic.backup" in reply.notice
    assert sorted(a.outcome for a in reply.attempts) == ["hedge_lost", "ok"]


async def test_a_hedged_chat_through_the_client_is_counted_in_its_status() -> None:
    """Through Client.chat: the backup's answer is served, and client.status()["hedging"] counts the hedge it won."""
    slow, fast = Slow("slow"), Slow("fast answer", delay=0)
    fleet = {"openai.primary": slow, "openai.backup": fast}
    toml = """
default_provider = "openai.primary"
[providers.models.openai.primary]
api_key = "sk-p"
model = "gpt-4.1"
fallback = ["openai.backup"]
[providers.models.openai.backup]
api_key = "sk-b"
model = "gpt-4.1-mini"
[reliability.hedge]
enabled = true
after_ms = 20
"""
    async with Client.from_toml(toml, adapter_builder=lambda name, *_: fleet[name], ledger=False) as c:
        reply = await c.chat("hi")
        status = c.status()["hedging"]
    assert reply.text == "fast answer" and reply.served.provider == "openai.backup"
    assert sorted(a.outcome for a in reply.attempts) == ["hedge_lost", "ok"] and slow.cancelled == 1
    assert status == {
        "enabled": True,
        "calls": 1,
        "hedged": 1,
        "rate": 1.0,
        "hedge_wins": 1,
        "original_wins": 0,
        "budget_left": 4.0,  # the default burst of 5, less the hedge
    }
    off = toml.split("[reliability.hedge]")[0]
    async with Client.from_toml(off, adapter_builder=lambda name, *_: fleet[name], ledger=False) as c:
        assert c.status()["hedging"]["enabled"] is False
