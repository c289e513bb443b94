"""Prompt-cache affinity: do a conversation's turns land where its prompt is cached, for each pool strategy?

Usage: ``python -m bench.affinity [--quick] [--write]`` (about a minute; ``--quick`` runs one seed).

The setup (in process): three deployments that cache prompt prefixes as OpenAI does, each a fake adapter over the
simulator's own prompt cache (:mod:`turnout.sim.caching`: a prefix answered in the last :data:`TTL_S` seconds is
reported as cached input, OpenAI's ``cached_tokens``), its first token after 20, 30 or 40 ms. Three profiles on
them make one pool. 12 conversations of 8 turns go through one :class:`~turnout.Client` at concurrency 6 (each
conversation sends its turns in order; a turn carries the whole conversation so far, its answers included; each
conversation has its own system prompt, so a cached part of a prompt is that conversation's). For each strategy of
:mod:`turnout.walk.pools`, with ``[reliability.affinity]`` off (the behaviour before affinity) and on, over
:data:`SEEDS` seeds of the pool's draws:

- *cached*: the share of turns 2–8 that landed where their prefix was cached: their cached input covers the whole
  prompt of the conversation's turn before (a turn on a member that served an earlier turn but not the last one
  finds only part of its prefix there, and is not counted);
- *max share*: the most conversations one member served the first turn of, over the conversations;
- *after a failure*: the run again, where the member holding the most conversations starts failing (every call
  answered 500) once 40 % of the calls are done. Its conversations move; of their turns after the one that moved
  them, the share cached on their new member.

The *lookup* is what affinity adds to a call, timed on its own: the conversation's key of an 8-turn request, its
pin's lookup, the pool order arranged for it, and the pin recorded after the answer (the minimum of several rounds
of 2,000), against the client-side CPU time of one whole call through the same pool on an instant in-process
adapter (the lowest of several rounds of alternating batches; no network, so a real call's overhead is larger and
the share smaller).

``--write`` replaces the ``## Affinity`` section of ``bench/results.md`` with this run's (the section is this
module's own: ``python -m bench.run`` does not write it).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import itertools
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench import procs, sections
from turnout import Client
from turnout.core.classify import ErrorFacts, provider_error
from turnout.core.provider import Provider
from turnout.core.types import (
    Capabilities,
    ChatRequest,
    ChatResponse,
    Final,
    StreamEvent,
    TextDelta,
    Usage,
    UsageEvent,
)
from turnout.sim.caching import PromptCache, blocks
from turnout.walk.affinity import conversation_key
from turnout.walk.pools import Pool

STRATEGIES = ("weighted", "ordered", "least_busy", "latency")
MEMBERS = ("openai.east", "openai.west", "openai.north")
DELAYS_S = {"openai.east": 0.020, "openai.west": 0.030, "openai.north": 0.040}
CONVERSATIONS, TURNS, CONCURRENCY = 12, 8, 6
TTL_S = 300.0
#: The share of a run's calls done when the failing member starts failing.
FAIL_AT = 0.4
SEEDS = (1, 2, 3)
TARGET_CACHED, TARGET_SHARE, TARGET_MOVED = 0.90, 0.60, 0.80
_CAPS = Capabilities(streaming=True, native_tools=True, streaming_tool_events=True, vision=True)


class Deployment(Provider):
    """One deployment: answers after its delay, caching the prompt prefixes it answered (per deployment).

    Args:
        name: The deployment (its profile's name).
        delay: Seconds before the answer (0: at once, the cache skipped: the lookup's instant adapter).
    """

    def __init__(self, name: str, delay: float) -> None:
        self.name = name
        self.delay = delay
        self.failing = False
        self.cache = PromptCache()

    def _answer(self, request: ChatRequest, model: str) -> ChatResponse:
        if self.failing:
            raise provider_error(ErrorFacts(status=500, message="deployment failing"), provider=self.name, model=model)
        if not self.delay:
            return ChatResponse(text="ok", model=model, usage=Usage(input_tokens=10, output_tokens=1))
        payload = {"messages": [{"role": m.role, "content": m.content} for m in request.messages]}
        prompt = blocks(payload)
        cached, _ = self.cache.observe(self.name, prompt, TTL_S)
        total = prompt[-1][1] if prompt else 0
        usage = Usage(input_tokens=total, output_tokens=4, cached_input_tokens=cached)
        return ChatResponse(text=f"answer {len(request.messages)} from {self.name}", model=model, usage=usage)

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._answer(request, model)

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        response = await self.chat(request, model, temperature)
        yield TextDelta(text=response.text)
        if response.usage is not None:
            yield UsageEvent(usage=response.usage)
        yield Final(finish_reason="stop", model=model)

    def capabilities(self, model: str | None = None) -> Capabilities:
        return _CAPS


def pool_config(strategy: str, *, affinity: bool) -> dict[str, Any]:
    """The pool of the three deployments with ``strategy`` (retries and backoff short: failures move quickly)."""
    return {
        "default_provider": "trio",
        "reliability": {"provider_retries": 1, "provider_backoff_ms": 50, "affinity": {"enabled": affinity}},
        "providers": {
            "models": {"openai": {m.split(".")[1]: {"api_key": f"sk-{m}", "model": "gpt-4.1"} for m in MEMBERS}}
        },
        "pools": {"trio": {"members": list(MEMBERS), "strategy": strategy}},
    }


def fleet(delays: dict[str, float]) -> tuple[dict[str, Deployment], Callable[..., Deployment]]:
    """The deployments, and the adapter builder that hands them to a client (one per profile, whatever the key)."""
    built = {name: Deployment(name, delay) for name, delay in delays.items()}
    return built, lambda name, *_: built[name]


@dataclass(slots=True)
class TurnResult:
    """Where one turn landed and whether its prompt was cached there."""

    conversation: int
    turn: int
    member: str
    cached: bool
    after_failure: bool = False


@dataclass(slots=True)
class Run:
    """One run of the conversations: its turns, and the failing member (None: none failed)."""

    turns: list[TurnResult] = field(default_factory=list)
    failed: str | None = None

    def cached_share(self) -> float:
        """The share of turns 2..TURNS whose prompt was cached where they landed."""
        later = [t for t in self.turns if t.turn > 1]
        return sum(t.cached for t in later) / len(later)

    def max_share(self) -> float:
        """The most conversations one member served the first turn of, over the conversations."""
        firsts = [t.member for t in self.turns if t.turn == 1]
        return max(firsts.count(m) for m in set(firsts)) / len(firsts)

    def moved(self) -> tuple[int, int, int]:
        """``(conversations moved off the failed member, their later turns, those cached on their new member)``.

        A conversation moved at the first turn after the failure began that another member served while its turn
        before was the failed member's; its later turns are those after that one.
        """
        by_conversation: dict[int, list[TurnResult]] = {}
        for t in sorted(self.turns, key=lambda t: (t.conversation, t.turn)):
            by_conversation.setdefault(t.conversation, []).append(t)
        moved = later = cached = 0
        for turns in by_conversation.values():
            for before, turn in itertools.pairwise(turns):
                if turn.after_failure and before.member == self.failed and turn.member != self.failed:
                    moved += 1
                    rest = [t for t in turns if t.turn > turn.turn]
                    later += len(rest)
                    cached += sum(t.cached and t.member == turn.member for t in rest)
                    break
        return moved, later, cached


def _messages(conversation: int, history: list[tuple[str, str]]) -> list[dict[str, str]]:
    system = f"You plan trips for traveller {conversation}. Be brief, list options, ask one question at a time."
    out = [{"role": "system", "content": system}]
    for question, answer in history:
        out.append({"role": "user", "content": question})
        if answer:
            out.append({"role": "assistant", "content": answer})
    return out


async def conversations(
    strategy: str, seed: int, *, affinity: bool, failing: bool = False, count: int = CONVERSATIONS, turns: int = TURNS
) -> Run:
    """``count`` conversations of ``turns`` turns through one client at :data:`CONCURRENCY`."""
    deployments, builder = fleet(DELAYS_S)
    run = Run()
    done = 0
    fail_after = int(count * turns * FAIL_AT) if failing else None
    gate = asyncio.Semaphore(CONCURRENCY)
    draws = random.Random(seed)
    async with Client.from_dict(
        pool_config(strategy, affinity=affinity), adapter_builder=builder, ledger=False, chance=draws.random
    ) as client:

        async def one(conversation: int) -> None:
            nonlocal done
            history: list[tuple[str, str]] = []
            before = 0  # the input tokens of the conversation's turn before
            for turn in range(1, turns + 1):
                history.append((f"Turn {turn}: what about day {turn}?", ""))
                async with gate:
                    late = run.failed is not None
                    reply = await client.chat(_messages(conversation, history))
                history[-1] = (history[-1][0], reply.text)
                usage = reply.usage
                cached = usage is not None and 0 < before <= usage.cached_input_tokens
                before = usage.input_tokens if usage is not None else 0
                run.turns.append(TurnResult(conversation, turn, reply.served.provider, cached, late))
                done += 1
                if fail_after is not None and done >= fail_after and run.failed is None:
                    run.failed = _busiest(run)
                    deployments[run.failed].failing = True

        await asyncio.gather(*(one(n) for n in range(count)))
    return run


def _busiest(run: Run) -> str:
    """The member that served the last turn of the most conversations so far."""
    last: dict[int, TurnResult] = {}
    for t in run.turns:
        if t.conversation not in last or t.turn > last[t.conversation].turn:
            last[t.conversation] = t
    members = [t.member for t in last.values()]
    return max(sorted(set(members)), key=members.count)


@dataclass(slots=True, kw_only=True)
class StrategyResult:
    """One strategy's runs over the seeds: without affinity, with it, and with it while a member fails."""

    strategy: str
    off: list[Run]
    on: list[Run]
    failover: list[Run]

    def failover_share(self) -> tuple[int, int, int]:
        """Summed over the seeds: conversations moved, their later turns, those cached on the new member."""
        totals = [r.moved() for r in self.failover]
        return sum(t[0] for t in totals), sum(t[1] for t in totals), sum(t[2] for t in totals)


async def strategies(seeds: tuple[int, ...] = SEEDS) -> list[StrategyResult]:
    """Every strategy, each over ``seeds``."""
    out = []
    for strategy in STRATEGIES:
        off = [await conversations(strategy, s, affinity=False) for s in seeds]
        on = [await conversations(strategy, s, affinity=True) for s in seeds]
        failover = [await conversations(strategy, s, affinity=True, failing=True) for s in seeds]
        out.append(StrategyResult(strategy=strategy, off=off, on=on, failover=failover))
    return out


@dataclass(slots=True, kw_only=True)
class Lookup:
    """What affinity adds to a call: its own work timed alone, and a whole call's instructions with it on and off.

    Attributes:
        affinity_s: Seconds per call of the affinity's work alone (key, pin lookup, order, pin recorded).
        call_s: Client CPU seconds of a whole call (affinity on).
        on: Instructions per whole call with affinity on (None: valgrind is not installed).
        off: The same with ``[reliability.affinity] enabled = false``.
        agent_on: ``on`` for a coding agent's call (its 14 KB system prompt and 20 tools).
        agent_off: ``off`` for that call.
    """

    affinity_s: float
    call_s: float
    on: float | None = None
    off: float | None = None
    agent_on: float | None = None
    agent_off: float | None = None

    @property
    def share(self) -> float:
        """The affinity's work over a whole call's CPU time."""
        return self.affinity_s / self.call_s

    @property
    def added(self) -> float | None:
        """Instructions affinity adds to a call, over the call's instructions without it."""
        return (self.on - self.off) / self.off if self.on is not None and self.off is not None else None


def _turns(n: int) -> list[dict[str, str]]:
    history = [(f"Turn {t}: what about day {t}?", f"answer {t}") for t in range(1, n)] + [(f"Turn {n}?", "")]
    return _messages(0, history)


#: A coding agent's request: a 14 KB system prompt, a 2 KB first message and 20 tools with their schemas.
AGENT_SYSTEM = "You are a coding agent working in a repository. Read before you edit; run the tests. " * 170
AGENT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Does one thing with the files of the repository and reports what it did. " * 3,
            "parameters": {
                "type": "object",
                "properties": {
                    f"arg_{j}": {"type": "string", "description": "What the tool reads. " * 4} for j in range(6)
                },
                "required": ["arg_0"],
            },
        },
    }
    for i in range(20)
]


def _agent_turns() -> list[dict[str, str]]:
    messages = _turns(TURNS)
    messages[0] = {"role": "system", "content": AGENT_SYSTEM}
    messages[1] = {"role": "user", "content": "Fix the failing test in the parser and explain the cause. " * 32}
    return messages


def _instant(affinity: bool) -> Client:
    """A client of the pool over instant in-process adapters (no network, no cache: the client's own work)."""
    _, builder = fleet(dict.fromkeys(MEMBERS, 0.0))
    return Client.from_dict(pool_config("weighted", affinity=affinity), adapter_builder=builder, ledger=False)


async def lookup(rounds: int = 7, calls: int = 2000) -> Lookup:
    """Time the affinity's work per call and a whole call (see the module's docstring)."""
    async with _instant(True) as c:
        affinity = c.factory.affinity
        assert affinity is not None
        messages = _turns(TURNS)
        request = ChatRequest.of(messages)
        pool = Pool("bench", "ordered", keys=dict.fromkeys(MEMBERS))  # no draws: the strategy's work is not affinity's

        def work() -> None:  # what a call of a pinned conversation does: its key, the turn, the order, the answer
            key = conversation_key(request)
            assert key is not None
            pin = affinity.pin_for(key)
            affinity.arrange(list(MEMBERS), pin, None, pool, None)
            affinity.served(key, MEMBERS[0], 0, pin)

        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                work()
            best = min(best, (time.perf_counter() - t0) / calls)
        call = float("inf")
        for _ in range(rounds):
            t0 = time.thread_time()
            for _ in range(calls // 4):
                await c.chat(messages)
            call = min(call, (time.thread_time() - t0) / (calls // 4))
    cost = Lookup(affinity_s=best, call_s=call)
    if shutil.which("valgrind") is not None:
        cost.on, cost.off = instructions(True), instructions(False)
        cost.agent_on, cost.agent_off = instructions(True, agent=True), instructions(False, agent=True)
    return cost


def _child(affinity: bool, calls: int, agent: bool) -> None:
    """Run under callgrind: warm up, then make ``calls`` calls inside ``sorted`` (the collection toggle)."""
    loop = asyncio.new_event_loop()
    messages = _agent_turns() if agent else _turns(TURNS)
    tools = AGENT_TOOLS if agent else None
    random.seed(0)  # the pool's draws alike in every run

    async def build() -> Client:
        return _instant(affinity)

    client = loop.run_until_complete(build())

    async def run(n: int) -> int:
        for _ in range(n):
            await client.chat(messages, tools=tools)
        return n

    loop.run_until_complete(run(100))
    gc.collect()
    sorted([0], key=lambda _: loop.run_until_complete(run(calls)))
    loop.run_until_complete(client.aclose())


def _instructions_of(affinity: bool, calls: int, agent: bool) -> int:
    return procs.callgrind_instructions("bench.affinity", f"{int(affinity)} {calls} {int(agent)}")


def instructions(affinity: bool, *, agent: bool = False) -> float:
    """Instructions per call (callgrind): the difference of two runs of different lengths (start-up costs cancel).

    ``agent``: the call is a coding agent's (:data:`AGENT_SYSTEM`, :data:`AGENT_TOOLS`), not the benchmark's turn.
    """
    short, long_ = 50, 200
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda n: _instructions_of(affinity, n, agent), (short, long_))
    return (b - a) / (long_ - short)


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _range(values: list[float]) -> str:
    return f"{_pct(statistics.median(values))} ({_pct(min(values))}–{_pct(max(values))})"


def section(results: list[StrategyResult], cost: Lookup, seeds: int, when: str) -> str:
    """The ``## Affinity`` section of ``bench/results.md``."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "## Affinity",
        "",
        f"Generated by `python -m bench.affinity --write` on {when} (load average {load:.1f} on "
        f"{os.cpu_count()} cores: the machine was shared). In process: three deployments caching prompt prefixes "
        f"as OpenAI does ({TTL_S:.0f} s TTL, the simulator's prompt cache), first token after 20, 30 and 40 ms; "
        f"{CONVERSATIONS} conversations × {TURNS} turns through one client at concurrency {CONCURRENCY}; {seeds} "
        "seeds of the pool's draws per row (median, then the range). *Cached*: turns 2–8 that landed where their "
        "prefix was cached (their cached input covers the whole prompt of the turn before). *Max share*: the most "
        "conversations one member served the first turn of. *After a "
        f"failure*: the member holding the most conversations answers 500 from {FAIL_AT:.0%} of the calls on; of "
        "the turns after the one that moved its conversations, the share cached on their new member.",
        "",
        "| strategy | cached, affinity off | cached, on | target ≥ 90 % | max share, off | max share, on "
        "| target ≤ 60 % | after a failure: moved, later turns cached | target ≥ 80 % |",
        "|---|---:|---:|---|---:|---:|---|---:|---|",
    ]
    for r in results:
        on = [x.cached_share() for x in r.on]
        share = [x.max_share() for x in r.on]
        moved, later, cached = r.failover_share()
        moved_share = cached / later if later else float("nan")
        lines.append(
            f"| `{r.strategy}` | {_range([x.cached_share() for x in r.off])} | {_range(on)} | "
            f"{_met(min(on) >= TARGET_CACHED)} | {_range([x.max_share() for x in r.off])} | {_range(share)} | "
            f"{_met(max(share) <= TARGET_SHARE)} | "
            f"{moved} moved, {cached}/{later} = {_pct(moved_share)} | "
            f"{_met(later > 0 and moved_share >= TARGET_MOVED)} |"
        )
    lines += [
        "",
        "What affinity costs a call, a later turn of a pinned conversation (8 turns) through the pool on instant "
        "in-process adapters (no network: a real call costs more, so the shares are upper bounds):",
        "",
    ]
    added = cost.added
    if added is not None and cost.on is not None and cost.off is not None:
        lines.append(
            f"- instructions per whole call (callgrind, repeatable to about 0.1 %): {cost.on:,.0f} with affinity on, "
            f"{cost.off:,.0f} with `enabled = false`: {added:+.2%} (target < 2 %: {_met(added < 0.02)});"
        )
    else:
        lines.append("- instructions per call: not measured (valgrind is not installed);")
    if cost.agent_on is not None and cost.agent_off is not None:
        agent = (cost.agent_on - cost.agent_off) / cost.agent_off
        lines.append(
            f"- the same for a coding agent's call (a {len(AGENT_SYSTEM) // 1000} KB system prompt, a 2 KB first "
            f"message, {len(AGENT_TOOLS)} tools with their schemas; a long part of the prefix is hashed by its two "
            f"ends and its length): {cost.agent_on:,.0f} with affinity on, {cost.agent_off:,.0f} off: {agent:+.2%} "
            f"(target < 2 %: {_met(agent < 0.02)});"
        )
    lines += [
        f"- its own work timed alone (the key, the pin's lookup, the order, the pin recorded; the machine's load "
        f"moves it): {cost.affinity_s * 1e6:.1f} µs, against {cost.call_s * 1e6:.0f} µs of client CPU for the whole "
        f"call: {cost.share:.1%}.",
        "",
    ]
    return "\n".join(lines)


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one seed, fewer lookup rounds")
    parser.add_argument("--write", action="store_true", help="write the section into bench/results.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        on, calls, agent = args.child.split()
        _child(on == "1", int(calls), agent == "1")
        return 0
    seeds = SEEDS[:1] if args.quick else SEEDS

    async def run() -> tuple[list[StrategyResult], Lookup]:
        results = await strategies(seeds)
        return results, await lookup(rounds=3 if args.quick else 7)

    results, cost = asyncio.run(run())
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = section(results, cost, len(seeds), when)
    sys.stdout.write(text + "\n")
    if args.write:
        sections.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
