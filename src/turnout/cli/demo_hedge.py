"""The demo's hedging stop: streams whose slow first tokens are raced against a spare, within the hedge budget.

``openai.quick`` streams its first token after 30 ms, or after ``tail_secs`` in a share of its attempts (the
simulator's seeded draws); its profile hedges after ``after_ms``, so a slow call also sends the request to
``openai.spare``, and whichever answers first is kept, until the hedge budget is spent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from turnout.cli.terminal import Column, FittedTable, compact_attempts, shown
from turnout.client import Client
from turnout.reply import Reply
from turnout.sim import Simulator

#: What each streamed call of the stop asks.
STREAM_PROMPT = [{"role": "user", "content": "Summarise the release notes in one sentence."}]


@dataclass(frozen=True, slots=True, kw_only=True)
class HedgeTiming:
    """The hedging tour: its calls, the delays of the two entries, the hedge delay and the seed of the draws.

    Attributes:
        calls: Streamed calls to ``openai.quick``.
        primary_secs: Its usual time to first token.
        tail_secs: Its time to first token in the tail.
        tail_p: The share of its attempts in the tail.
        spare_secs: ``openai.spare``'s time to first token.
        after_ms: The hedge delay of ``openai.quick``.
        seed: The simulator's seed (it makes calls 3, 5 and 7 slow).
    """

    calls: int = 8
    primary_secs: float = 0.03
    tail_secs: float = 0.8
    tail_p: float = 0.3
    spare_secs: float = 0.06
    after_ms: int = 150
    seed: int = 24


HEDGE = HedgeTiming()
#: The models of the hedged profile (openai.quick) and of its fallback (openai.spare).
QUICK, SPARE = "gpt-4.1-nano", "gpt-4o-mini"
#: The hedges a full budget allows in a row (``burst`` of ``openai.quick``, smaller than the default so that the
#: tour shows the budget at work).
HEDGE_BURST = 2


def hedge_script(timing: HedgeTiming) -> dict[str, Any]:
    """The simulator's models for the hedging tour: a heavy-tailed primary and a steady spare."""
    primary = {"do": "ok", "delay": timing.primary_secs, "tail": timing.tail_secs, "tail_p": timing.tail_p}
    return {QUICK: {"steps": [primary]}, SPARE: {"steps": [{"do": "ok", "delay": timing.spare_secs}]}}


async def hedge_tour(console: Console, client: Client, sim: Simulator, timing: HedgeTiming = HEDGE) -> bool:
    """Streamed calls to the hedged profile, one row each; True when the calls went as :func:`hedge_as_told` says.

    Args:
        console: Where the table goes.
        client: A client of the demo's configuration (``openai.quick`` hedges after ``timing.after_ms``).
        sim: The simulator, scripted with :func:`hedge_script` and seeded with ``timing.seed`` just before.
        timing: The tour's delays.
    """
    table = FittedTable(
        [
            Column(name="call", identifies=True),
            Column(name="openai.quick drew", label="drew"),
            Column(name="first text ms", right=True),
            Column(name="attempts"),
            Column(name="hedged", identifies=True),
            Column(name="answered by", identifies=True),
        ]
    )
    calls: list[tuple[bool, Reply]] = []
    for n in range(1, timing.calls + 1):
        seen = len(sim.log)
        t0, first = time.perf_counter(), None
        stream = client.stream(STREAM_PROMPT, provider="openai.quick")
        async for event in stream:
            if first is None and event.type == "text":
                first = time.perf_counter() - t0
        reply = stream.response
        slow = any(e.model == QUICK and e.delay >= timing.tail_secs for e in sim.log[seen:])
        hedged = _hedged(reply)
        calls.append((slow, reply))
        table.add_row(
            str(n),
            Text(f"{timing.tail_secs:g} s (tail)", style="yellow") if slow else f"{timing.primary_secs * 1000:g} ms",
            f"{first * 1000:.0f}" if first is not None else "-",
            compact_attempts(reply.attempts),
            Text("yes", style="magenta") if hedged else "no",
            shown(reply.served.provider),
        )
    console.print(table)
    h = client.status()["hedging"]
    console.print(
        f"Hedges sent: {h['hedged']} of {h['calls']} calls ({h['rate']:.0%}); answered first: the hedge "
        f"{h['hedge_wins']}, the first entry {h['original_wins']}; budget left {h['budget_left']:g}.",
        markup=False,
    )
    return hedge_as_told(calls)


def hedge_as_told(calls: list[tuple[bool, Reply]]) -> bool:
    """Whether the calls of :func:`hedge_tour` (the primary drew the tail, reply) show what it describes.

    The first :data:`HEDGE_BURST` slow calls were hedged and the hedge served them; every other call was served by
    its first entry without a hedge (a quick one did not need one; a later slow one found the budget spent).
    """
    slow_seen = 0
    for slow, reply in calls:
        hedged = _hedged(reply)
        if slow and slow_seen < HEDGE_BURST:
            ok = hedged and reply.served.provider == "openai.spare"
        else:
            ok = not hedged and reply.served.provider == "openai.quick"
        slow_seen += slow
        if not ok:
            return False
    return slow_seen > HEDGE_BURST


def _hedged(reply: Reply) -> bool:
    """Whether the call was hedged (one side lost the race)."""
    return any(a.outcome == "hedge_lost" for a in reply.attempts)
