"""``turnout demo``: a guided tour of the reliable walk against the simulator, on loopback.

The simulator runs in process; the ledger lives in a temporary directory that is removed afterwards.
Each step scripts the simulator, makes one call through a real :class:`~turnout.Client` over HTTP, and
prints the attempts, the served route and the cost. Two steps (:class:`Tour`) make a series of calls: an
outage that the circuit breaker learns and forgets, and streams whose slow first tokens are hedged
(:mod:`turnout.cli.demo_hedge`).

``turnout demo --serve`` then starts a gateway on 127.0.0.1 over the same client and simulator (so its status
page shows the tour's cooldowns, breakers and ledger), with a client key made for the run, prints the page's
address and the key to sign in with, and serves until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from turnout.cli.demo_clouds import clouds_config, clouds_tour
from turnout.cli.demo_hedge import HEDGE, HEDGE_BURST, hedge_script, hedge_tour
from turnout.cli.terminal import Column, FittedTable, attempts_table, compact_attempts, shown, shown_lines
from turnout.client import Client
from turnout.core.errors import (
    ContextWindowExceeded,
    RefusalError,
    StreamInterruptedAfterOutput,
    TurnoutError,
    cannot_listen,
)
from turnout.core.money import usd
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.serve import can_listen
from turnout.ledger.pricing import profile_rates
from turnout.ledger.writer import summarize
from turnout.reply import Reply
from turnout.sim import Simulator

DEMO_CONFIG = """
default_provider = "anthropic.main"

[providers.models.anthropic.main]
uri = "{anthropic}"
api_key = "sk-ant-demo-key"
model = "claude-sonnet-4-5"
fallback_models = ["claude-haiku-4-5"]
fallback = ["openai.backup"]

[providers.models.openai.backup]
uri = "{openai}"
api_keys = ["sk-demo-key-one", "sk-demo-key-two"]
model = "gpt-4.1"

[providers.models.openai.solo]
uri = "{openai}"
api_key = "sk-demo-solo"
model = "gpt-4.1-mini"

[providers.models.deepseek.reasoner]
uri = "{openai}"
api_key = "sk-demo-deepseek"
model = "deepseek-reasoner"

[providers.models.anthropic.main.breaker]
open_secs = {open_secs}

[providers.models.openai.east]
uri = "{openai}"
api_key = "sk-demo-east"
model = "gpt-4o"

[providers.models.azure.west]
uri = "{azure_west}"
api_key = "sk-demo-west"
model = "gpt-4o"

[pools.gpt-4o]
members = ["openai.east", "azure.west"]
strategy = "latency"

[providers.models.openai.quick]
uri = "{openai}"
api_key = "sk-demo-quick"
model = "gpt-4.1-nano"
fallback = ["openai.spare"]
hedge = {{ enabled = true, after_ms = {hedge_after_ms}, burst = {hedge_burst} }}

[providers.models.openai.spare]
uri = "{openai}"
api_key = "sk-demo-spare"
model = "gpt-4o-mini"

[providers.models.openai.embed]
uri = "{openai}"
api_key = "sk-demo-embed"
model = "text-embedding-3-small"
fallback = ["openai.embed3l", "azure.embed"]

[providers.models.openai.embed3l]
uri = "{openai}"
api_key = "sk-demo-embed"
model = "text-embedding-3-large"

[providers.models.azure.embed]
uri = "{azure_embed}"
api_key = "sk-demo-embed-eu"
model = "text-embedding-3-small"

[[model_routes]]
hint = "reasoning"
model_provider = "deepseek.reasoner"
model = "deepseek-reasoner"

[[model_routes]]
hint = "pool"
model_provider = "gpt-4o"
model = "gpt-4o"

[reliability]
provider_retries = 1
provider_backoff_ms = 100
affinity = {{ enabled = false }}

[ledger]
path = "{ledger}"
"""

PROMPT = [{"role": "user", "content": "Summarise the release notes in one sentence."}]
#: The system prompt of the prompt-cache step (long enough for the cached part to show).
HOUSE_RULES = " ".join(
    ["You write release summaries for a small open-source project: plain words, no marketing, one sentence."] * 20
)
FOLLOW_UP = [{"role": "user", "content": "Now say it in French."}]

#: The primary of the outage tour, and the most calls the tour makes.
PRIMARY = "claude-sonnet-4-5"
MAX_TOUR_CALLS = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class OutageTiming:
    """The clock of the outage tour.

    Attributes:
        open_secs: The primary's breaker first opens for this long (``open_secs`` of its ``breaker`` table).
        outage_secs: The primary answers 503 for this long.
        pace_secs: The pause between two calls.
    """

    open_secs: float = 0.5
    outage_secs: float = 1.5
    pace_secs: float = 0.25


TIMING = OutageTiming()


@dataclass
class Step:
    """One stop of the tour: what it shows, the simulator script, the call to make, and what to show after it."""

    title: str
    explain: str
    script: dict[str, Any]
    run: Callable[[Client], Awaitable[Reply]]
    after: Callable[[Client], FittedTable] | None = None
    #: The simulator caches prompt prefixes for this long during the step (None: no prompt caching).
    cache_ttl: float | None = None


@dataclass
class Tour:
    """A stop of the tour that makes several calls and prints them itself; ``play`` says whether it went as told.

    ``seed`` seeds the simulator's draws of heavy-tailed delays (the same calls are slow on every run).
    """

    title: str
    explain: str
    script: dict[str, Any]
    play: Callable[[Console, Client, Simulator], Awaitable[bool]]
    seed: int | None = None


async def _chat(c: Client, **kw: Any) -> Reply:
    """One call of the tour's prompt."""
    return await c.chat(PROMPT, **kw)


async def _cut_stream(c: Client) -> Reply:
    """The tour's prompt streamed to its end (the simulator cuts it)."""
    stream = c.stream(PROMPT)
    shown = []
    async for event in stream:
        if event.type == "text":
            shown.append(event.text)
    return stream.response


async def _pool_calls(c: Client) -> Reply:
    """The pool stop's calls through ``hint:pool``; the last one's reply."""
    reply = await _chat(c, model="hint:pool")
    for _ in range(POOL_CALLS - 1):
        reply = await _chat(c, model="hint:pool")
    return reply


def _conversation_step() -> Step:
    """The prompt-cache stop: a conversation's two turns, and the table of what each read from the cache."""
    turns: list[Reply] = []

    async def conversation(c: Client) -> Reply:
        turns.clear()
        first = [{"role": "system", "content": HOUSE_RULES}, *PROMPT]
        turns.append(await c.chat(first))
        turns.append(await c.chat([*first, {"role": "assistant", "content": turns[0].text}, *FOLLOW_UP]))
        return turns[-1]

    return Step(
        "A conversation's second turn reads the prompt cache",
        "The simulator caches prompt prefixes per deployment for 5 minutes, as Anthropic does. Turn 1 writes "
        "the system prompt and question to the cache; turn 2 repeats them, so they are cached input, priced at "
        "the cache-read rate.",
        {},
        conversation,
        lambda c: cache_table(c, turns),
        cache_ttl=300,
    )


def _steps() -> list[Step | Tour]:
    """The tour's stops, in order."""
    return [*_first_steps(), *_later_steps()]


def _first_steps() -> list[Step | Tour]:
    """From a clean answer to one model on three clouds."""
    return [
        Step("A clean answer", "The primary profile answers on the first try.", {}, _chat),
        _conversation_step(),
        Step(
            "A 429 with Retry-After, then recovery",
            "A single-entry profile gets 429 with Retry-After: 1; the walk waits the hinted second and retries.",
            {"gpt-4.1-mini": {"steps": ["429-ra1", "ok"]}},
            lambda c: _chat(c, provider="openai.solo"),
        ),
        Step(
            "An empty answer is retried",
            "A 200 with no text is not an answer: it is retried with backoff, and its usage stays on that attempt.",
            {"claude-sonnet-4-5": {"steps": ["empty", "ok"]}},
            _chat,
        ),
        Step(
            "A hint route",
            "model='hint:reasoning' selects the deepseek.reasoner route, with its own reliability policy.",
            {"deepseek-reasoner": {"steps": ["ok-r12-t20"]}},
            lambda c: _chat(c, model="hint:reasoning"),
        ),
        Step(
            "A context-window overflow goes to a larger model",
            "claude-sonnet-4-5 (200k) rejects the prompt; claude-haiku-4-5 (also 200k) is skipped without a call; "
            "gpt-4.1 (1M) answers.",
            {"claude-sonnet-4-5": {"steps": ["context-lim200000"]}},
            _chat,
        ),
        Step(
            "A refusal is not routed around",
            "The model refuses; Turnout returns the refusal instead of shopping for another model.",
            {"claude-sonnet-4-5": {"steps": ["refusal"]}},
            _chat,
        ),
        Tour(
            "An outage is learned and forgotten (circuit breaker)",
            f"claude-sonnet-4-5 answers 503 for {TIMING.outage_secs:g} s; a call every {TIMING.pace_secs:g} s. "
            "After the third call that fails on it (a call's retries are one signal) its breaker opens: calls skip "
            "it at no cost (breaker_skip) and claude-haiku-4-5 serves. "
            f"After {TIMING.open_secs:g} s one call probes it; a failed probe reopens the breaker for twice as "
            "long; once the outage is over the next probe closes it and the primary serves again.",
            outage_script(TIMING),
            outage_tour,
        ),
        Tour(
            "One Claude model on three clouds",
            "hint:clouds walks anthropic.clouds → bedrock.clouds → vertex.clouds, each configured with the one name "
            "claude-sonnet-4-5 (Bedrock is sent its inference profile, Vertex its versioned id). Three calls: "
            "Anthropic answers; then Anthropic is overloaded and Bedrock answers; then Bedrock throttles too and "
            "Vertex AI answers, with a token from a service-account key exchanged at the simulator.",
            {},
            clouds_tour,
        ),
    ]


def _later_steps() -> list[Step | Tour]:
    """From a truncated stream to a hedged slow first token."""
    return [
        Step(
            "A truncated stream",
            "The stream ends after 8 words without message_stop. The user saw those words, so nothing is "
            "replayed: the caller gets exactly the text shown.",
            {"claude-sonnet-4-5": {"steps": ["cut-a8-t30"]}},
            _cut_stream,
        ),
        Step(
            "A rate-limited profile cools down; another family serves",
            "anthropic.main answers 429 (Retry-After 30): the profile cools down, its second model is skipped, and "
            "openai.backup serves with a notice.",
            {"claude-sonnet-4-5": {"steps": ["429-ra30"]}},
            _chat,
        ),
        Step(
            "While it cools down, the profile is skipped without a call",
            "The next call skips both anthropic.main entries (cooldown_skip) and goes straight to the fallback.",
            {"claude-sonnet-4-5": {"steps": ["429-ra30"]}},
            _chat,
        ),
        Step(
            "A latency pool picks the faster of two equivalent deployments",
            f"Pool gpt-4o holds openai.east (first token after 150 ms) and azure.west (30 ms). {POOL_CALLS} calls "
            "to hint:pool: each member is measured once, then the faster one takes the calls (a few still explore "
            "the other). No call is announced as a fallback: the members are interchangeable.",
            {
                "gpt-4o": {"steps": [{"do": "ok", "delay": 0.15}]},
                "gpt-4o-west": {"steps": [{"do": "ok", "delay": 0.03}]},
            },
            _pool_calls,
            lambda c: pool_table(c, "gpt-4o"),
        ),
        Tour(
            "An embedding call never leaves its vector space",
            "openai.embed (text-embedding-3-small) answers 503. Its first fallback serves text-embedding-3-large, "
            "whose vectors could not be compared with the caller's: it is skipped. The same model on Azure serves "
            "all 300 inputs, dimensions=32 included.",
            {"text-embedding-3-small": {"steps": [{"do": "status", "status": 503}]}},
            embed_tour,
        ),
        Tour(
            "A slow first token is hedged",
            f"openai.quick streams its first token after 30 ms, but after {HEDGE.tail_secs:g} s in 30 % of calls; "
            f'its profile hedges after {HEDGE.after_ms} ms (here fixed; after_ms = "auto" learns it from the '
            f"answers). {HEDGE.calls} streamed calls: a call without output by then sends the same request to "
            "openai.spare (60 ms) too, the first to show output is relayed and the other is cancelled (hedge_lost). "
            "Its budget here allows bursts of two hedges (the default is five), then 5 % of calls: the third slow "
            "call waits.",
            hedge_script(HEDGE),
            hedge_tour,
            seed=HEDGE.seed,
        ),
    ]


#: The Azure deployment of the embedding tour's same-model fallback (the simulator takes it as the model name).
EMBED_DEPLOYMENT = "embed-eu"


async def embed_tour(console: Console, client: Client, sim: Simulator) -> bool:
    """The embedding tour: the primary is down; the other model is skipped, the same model on Azure serves."""
    texts = [f"passage {i} about railway turnouts" for i in range(300)]
    reply = await client.embed(texts, provider="openai.embed", dimensions=32)
    console.print(
        f"{len(reply.vectors)} vectors of {reply.dimensions} numbers, in input order, served by "
        f"[bold]{reply.served.provider}/{reply.served.model}[/bold]"
    )
    if reply.notice:
        console.print(reply.notice, style="yellow")
    console.print(attempts_table(reply.attempts))
    other_model = any(a.model == "text-embedding-3-large" for a in reply.attempts)
    return reply.served.provider == "azure.embed" and not other_model


def cache_table(client: Client, turns: list[Reply]) -> FittedTable:
    """Each turn's input, the part read from and written to the prompt cache, its cost and what the cache saved."""
    table = FittedTable(
        [
            Column(name="turn", right=True, identifies=True),
            Column(name="input tokens", right=True),
            Column(name="cached", right=True),
            Column(name="written", right=True),
            Column(name="cost", right=True),
            Column(name="saved", right=True),
        ],
        title="prompt cache",
    )
    prices = profile_rates(client.config, client.factory.catalogue)
    for n, reply in enumerate(turns, 1):
        usage = reply.usage
        rates = prices.rates(reply.served.provider, reply.served.model)
        saved = usd(rates.cache_saving(usage)) if rates is not None and usage is not None else "-"
        if usage is None:
            table.add_row(str(n), "-", "-", "-", usd(reply.cost_usd), saved)
            continue
        cached, written = usage.cached_input_tokens, usage.cache_write_tokens
        table.add_row(str(n), str(usage.input_tokens), str(cached), str(written), usd(reply.cost_usd), saved)
    return table


#: How many calls the pool step makes.
POOL_CALLS = 12


def pool_table(client: Client, name: str) -> FittedTable:
    """A pool's members with the calls each took and its moving time to first token."""
    table = FittedTable(
        [
            Column(name="member", identifies=True),
            Column(name="calls", right=True),
            Column(name="share", right=True),
            Column(name="moving TTFT ms", right=True),
        ],
        title=f"pool {name}",
    )
    pool = next(p for p in client.status()["pools"] if p["name"] == name)
    for m in pool["members"]:
        share = f"{m['share']:.0%}" if m["share"] is not None else "-"
        ttft = f"{m['ttft_ms']:.0f}" if m["ttft_ms"] is not None else "-"
        table.add_row(shown(m["profile"]), str(m["calls"]), share, ttft)
    return table


#: How long ``turnout demo --serve`` waits for requests in flight when it is stopped.
SERVE_GRACE_S = 5.0


async def run_demo(console: Console | None = None, *, serve: bool = False, port: int = 0) -> int:
    """Run the tour; return 0 when every step behaved as described.

    Args:
        console: Where the tour is printed (default: the terminal).
        serve: Then serve a gateway over the tour's client until SIGINT or SIGTERM (:func:`serve_demo`).
        port: The gateway's port on 127.0.0.1 (0: a free one).

    Raises:
        ConfigError: With ``serve``, the port cannot be bound (checked before the tour; code ``listen_failed``).
    """
    if console is None:
        console = Console(highlight=False)
        if not console.is_terminal:
            console = Console(highlight=False, width=max(console.width, 120))
    if serve and port:
        can_listen("127.0.0.1", port)  # a busy port fails now, not after the tour
    started = time.perf_counter()
    as_told = True
    with tempfile.TemporaryDirectory(prefix="turnout-demo-") as tmp:
        ledger_path = Path(tmp) / "ledger.sqlite3"
        async with Simulator() as sim:
            config = demo_config(sim, ledger_path) + clouds_config(sim, Path(tmp))
            async with Client.from_toml(config) as client:
                console.print(
                    Panel.fit(
                        "Turnout demo: a simulator on loopback plays each provider; every call below is real HTTP.\n"
                        f"Simulator: {sim.url}   Ledger: a temporary SQLite file",
                        title="turnout demo",
                    )
                )
                for n, step in enumerate(_steps(), 1):
                    cache = {"cache": {"ttl": step.cache_ttl}} if isinstance(step, Step) and step.cache_ttl else {}
                    sim.set_script(
                        {"models": step.script, "seed": step.seed if isinstance(step, Tour) else None, **cache}
                    )
                    if isinstance(step, Tour):
                        console.rule(f"[bold]{n}. {step.title}")
                        console.print(step.explain, style="dim")
                        as_told = as_told and await step.play(console, client, sim)
                    else:
                        await _run_step(console, client, n, step)
                if client.ledger is not None:
                    await client.ledger.flush()
                _print_summary(console, ledger_path, started)
                if serve:
                    sim.set_script({})  # the upstreams answer again; the tour's cooldowns and breakers remain
                    await serve_demo(console, client, port)
                else:
                    console.print(
                        "See it on a status page: [bold]turnout demo --serve[/bold] runs the tour, then starts a "
                        "gateway over this simulator and prints its address and a key to sign in with."
                    )
    return 0 if as_told else 1


def demo_config(sim: Simulator, ledger: Path, open_secs: float = TIMING.open_secs) -> str:
    """The demo's configuration, pointed at ``sim`` (``open_secs``: the primary's breaker's open interval)."""
    return DEMO_CONFIG.format(
        anthropic=sim.base_url("anthropic"),
        openai=sim.base_url("openai"),
        azure_west=sim.base_url("azure", deployment="gpt-4o-west"),
        azure_embed=sim.base_url("azure", deployment=EMBED_DEPLOYMENT),
        ledger=ledger,
        open_secs=open_secs,
        hedge_after_ms=HEDGE.after_ms,
        hedge_burst=HEDGE_BURST,
    )


def _print_summary(console: Console, ledger_path: Path, started: float) -> None:
    """The ledger's totals of the tour."""
    summary = summarize(ledger_path)
    table = FittedTable(
        [
            Column(name="profile", identifies=True),
            Column(name="model", identifies=True),
            Column(name="attempts", right=True),
            Column(name="outcomes"),
            Column(name="cost", right=True, identifies=True),
        ],
        title="Ledger summary",
    )
    for r in summary.routes:
        outcomes = ", ".join(f"{k}={v}" for k, v in sorted(r.outcomes.items()))
        table.add_row(shown(r.provider), shown(r.model), str(r.attempts), shown(outcomes), usd(r.cost_usd))
    console.print(table)
    total = usd(summary.cost_usd)
    skips = ", ".join(f"{k}={v}" for k, v in sorted(summary.skips.items())) or "none"
    console.print(
        f"{summary.calls} calls, {summary.fallbacks} fallbacks, {summary.attempts} attempts (skipped without a "
        f"call: {skips}), total cost {total}; tour took {time.perf_counter() - started:.1f}s"
    )


async def serve_demo(
    console: Console,
    client: Client,
    port: int = 0,
    *,
    stop: asyncio.Event | None = None,
    key: str | None = None,
    listening: asyncio.Event | None = None,
) -> None:
    """Serve a gateway over ``client`` on 127.0.0.1 until ``stop`` is set (default: SIGINT or SIGTERM).

    The gateway's only client key is ``key`` (default: a new random one), printed with the status page's
    address; then ``listening`` is set. Stopping waits at most :data:`SERVE_GRACE_S` for requests in flight.
    """
    key = key if key is not None else demo_key()
    server = GatewayServer(Gateway(client, keys=[key]), "127.0.0.1", port)
    try:
        await server.start()
    except OSError as exc:
        raise cannot_listen("127.0.0.1", port, exc) from None
    on_signals = stop is None
    stop = _stop_on_signals() if stop is None else stop
    try:
        console.print(
            Panel.fit(
                f"Status page: {server.url}/\n"
                f"Client key:  {key}\n"
                f"API:         {server.url}/v1 (OpenAI) and {server.url}/v1/messages (Anthropic), with the same key\n"
                "Ctrl-C stops the gateway.",
                title="turnout demo --serve",
            ),
            markup=False,
        )
        if listening is not None:
            listening.set()
        await stop.wait()
    finally:
        await server.stop(SERVE_GRACE_S)
        if on_signals:
            _restore_signals()


def demo_key() -> str:
    """A client key for one run of ``turnout demo --serve``."""
    return f"demo-{secrets.token_urlsafe(18)}"


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    return stop


def _restore_signals() -> None:
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(s)


async def _run_step(console: Console, client: Client, n: int, step: Step) -> None:
    console.rule(f"[bold]{n}. {step.title}")
    console.print(step.explain, style="dim")
    try:
        reply = await step.run(client)
    except StreamInterruptedAfterOutput as exc:
        console.print(Text("User saw: ") + Text(exc.partial_text, style="cyan") + Text("  [stream interrupted]", "red"))
        console.print(f"StreamInterruptedAfterOutput: {len(exc.partial_text.split())} words kept, no replay.")
        console.print(attempts_table(exc.attempts))
        return
    except RefusalError as exc:
        console.print(Text("RefusalError: ") + shown_lines(exc.message, 2000))
        console.print(attempts_table(exc.attempts))
        return
    except ContextWindowExceeded as exc:
        console.print(Text("ContextWindowExceeded: ") + shown_lines(str(exc), 2000))
        console.print(attempts_table(exc.attempts))
        return
    except TurnoutError as exc:
        console.print(Text(type(exc).__name__, style="red") + Text(": ") + shown_lines(str(exc), 2000))
        console.print(attempts_table(getattr(exc, "attempts", ())))
        return
    console.print(Text("Answer: ") + Text(reply.text[:100], style="cyan"))
    served = Text(f"{reply.served.provider}/{reply.served.model}", style="bold")
    console.print(Text("Served by ") + served + Text(f"; call cost {usd(reply.cost_usd, 'unknown')}"))
    if reply.notice:
        console.print(Text(reply.notice, style="yellow"))
    console.print(attempts_table(reply.attempts))
    if step.after is not None:
        console.print(step.after(client))


def outage_script(timing: OutageTiming) -> dict[str, Any]:
    """The simulator's models for the outage tour: the primary is down for ``timing.outage_secs``."""
    return {PRIMARY: {"steps": [{"do": "flapping", "down": timing.outage_secs}]}}


async def outage_tour(
    console: Console,
    client: Client,
    sim: Simulator,
    timing: OutageTiming = TIMING,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> bool:
    """Calls through an outage of the primary; prints one row per call; True when the breaker did as described.

    As described: the breaker opened within the first three calls; from then on each call either skipped the
    primary or probed it with one try, probes at least one open interval apart; and the primary served again
    within one open interval of the outage's end.

    Args:
        console: Where the table goes.
        client: A client of the demo's configuration, the primary's ``breaker.open_secs`` as ``timing`` says.
        sim: The simulator, scripted with :func:`outage_script` just before.
        timing: The tour's clock.
        clock: Seconds (the tour's own time line).
        sleep: The pause between calls.
    """
    table = FittedTable(
        [
            Column(name="call", identifies=True),
            Column(name="at", right=True),
            Column(name="attempts (the last one served)", label="attempts"),
            Column(name="ms", right=True),
            Column(name="the primary's breaker after the call", label="breaker", identifies=True),
        ]
    )
    start, seen = clock(), len(sim.log)
    calls: list[tuple[float, Reply]] = []
    while len(calls) < MAX_TOUR_CALLS:
        at = clock() - start
        t0 = time.perf_counter()
        with _quiet("turnout.breaker"):  # the table says what the breaker's log lines would
            reply = await client.chat(PROMPT)
        calls.append((at, reply))
        breaker = _primary_breaker(client)
        table.add_row(
            str(len(calls)),
            f"{at:.2f}s",
            compact_attempts(reply.attempts),
            f"{(time.perf_counter() - t0) * 1000:.0f}",
            Text(breaker, style="green" if breaker == "closed" else "yellow"),
        )
        if at > timing.outage_secs and reply.served.model == PRIMARY and breaker == "closed":
            break
        await sleep(timing.pace_secs)
    console.print(table)
    hits = sum(1 for e in sim.log[seen:] if e.model == PRIMARY)
    console.print(f"The primary was sent {hits} requests in {len(calls)} calls.", markup=False)
    return outage_as_told(calls, timing)


def outage_as_told(calls: list[tuple[float, Reply]], timing: OutageTiming = TIMING) -> bool:
    """Whether the calls of :func:`_outage_tour` (time since the outage began, reply) show what it describes."""
    tried = [[a for a in reply.attempts if a.model == PRIMARY and a.outcome != "breaker_skip"] for _, reply in calls]
    if not tried or any(len(t) > 1 for t in tried[3:]):  # after the third call: a skip, or a probe of one try
        return False
    probes = [at for (at, _), t in zip(calls[3:], tried[3:], strict=True) if t]
    interval, last = timing.open_secs, None
    for at, t in zip(probes, (t for t in tried[3:] if t), strict=True):
        if last is not None and at - last < interval:
            return False
        if t[0].outcome != "ok":
            interval *= 2
        last = at
    back = next((at for at, reply in calls if at > timing.outage_secs and reply.served.model == PRIMARY), None)
    return back is not None and back - timing.outage_secs <= interval + timing.pace_secs


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Hold back the warnings of the logger ``name`` (and below) for the block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _primary_breaker(client: Client) -> str:
    row = next((b for b in client.status()["breakers"] if b["model"] == PRIMARY), None)
    if row is None:
        return "closed"
    if row["state"] == "open":
        return f"open, {row['remaining_seconds']:.2f}s left"
    return "half-open: the next call probes it"


def main(*, serve: bool = False, port: int = 0) -> int:
    """Run the demo in a fresh event loop (then serve its gateway, with ``serve``)."""
    return asyncio.run(run_demo(serve=serve, port=port))
