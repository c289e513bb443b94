"""The ``turnout`` command line.

Exit codes: 0 success (warnings included), 1 a configuration or run-time failure (the message names
the key path where there is one), 2 a usage error (also an address a command cannot listen on: a busy port).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.text import Text

from turnout.cli.keys import key_app
from turnout.cli.plans import embedding_lines, plan_json, plan_lines, wire_ids
from turnout.cli.terminal import Column, FittedTable, attempts_table, shown, shown_lines
from turnout.config import (
    Config,
    build_plan,
    collect_warnings,
    find_config_path,
    load_config_file,
)
from turnout.core.attribution import Attempt
from turnout.core.errors import ConfigError, TurnoutError
from turnout.core.money import usd
from turnout.core.types import Usage

if TYPE_CHECKING:
    from turnout.client import Client
    from turnout.ledger.cache import CacheSummary
    from turnout.ledger.pricing import ProfileRates
    from turnout.ledger.summary import LedgerSummary
    from turnout.reply import Reply

app = typer.Typer(
    name="turnout",
    help="One reliable front over many LLM providers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # help is plain text: rich markup would read "[gateway] host" as a tag and drop it
    rich_markup_mode=None,
)

ConfigOption = Annotated[
    str | None,
    typer.Option("--config", "-c", metavar="PATH", help="Config file (default: $TURNOUT_CONFIG, then ./turnout.toml)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("turnout")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown"
        _out().print(f"turnout {number}", markup=False)
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """One reliable front over many LLM providers."""


def _out() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(exc: ConfigError, as_json: bool) -> typer.Exit:
    """Print a configuration error; exit status 1, or 2 for an address a command cannot listen on (a usage error)."""
    if as_json:
        body = {"ok": False, "error": {"code": exc.code, "path": exc.path, "message": exc.message}}
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _err().print(f"error: {exc}", markup=False)
    return typer.Exit(2 if exc.code == "listen_failed" else 1)


def load(config: str | None) -> Config:
    """Load the config named on the command line, else from the environment, else ./turnout.toml."""
    return load_config_file(find_config_path(config))


@app.command()
def check(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Validate the config: print every warning and the materialised attempt order."""
    from turnout.gateway.access import Access

    try:
        cfg = load(config)
        warnings = collect_warnings(cfg)
        plan = build_plan(cfg)
        # a key with a spend limit that reaches a model without a price, on the routes its calls would take
        warnings += Access(cfg).check(_router(cfg))
    except ConfigError as exc:
        raise _fail(exc, as_json) from None
    if as_json:
        body = plan_json(plan, warnings, wire_ids(cfg))
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    out = _out()
    if warnings:
        out.print(f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}:", markup=False)
        for w in warnings:
            out.print(f"  {w.code}  {w.path}\n      {w.message}", markup=False)
        out.print()
    else:
        out.print("No warnings.", markup=False)
        out.print()
    for line in plan_lines(plan, wire_ids(cfg)):
        out.print(line, markup=False)
    for line in embedding_lines(cfg, plan):
        out.print(line, markup=False)


def _router(cfg: Config) -> Client | None:
    """A client over ``cfg`` to route with, built as ``turnout serve`` builds one; None when it cannot be built.

    Building it opens nothing, sends nothing and resolves no cloud credential (adapters do that on their first
    call); there is no ledger and the state is in memory, so it touches no file and no Redis.
    """
    from turnout.client import Client
    from turnout.state import MemoryStore

    try:
        return Client(cfg, ledger=False, store=MemoryStore())
    except ConfigError:  # e.g. a [telemetry] it cannot set up: the warnings that need no route still come
        return None


def _since(value: str | None) -> float | None:
    if not value:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[-1] in units and value[:-1].replace(".", "", 1).isdigit():
        return time.time() - float(value[:-1]) * units[value[-1]]
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise typer.BadParameter("use a duration such as 30m, 6h, 7d, or an ISO date") from None


@app.command()
def chat(
    prompt: Annotated[str, typer.Argument(metavar="PROMPT", help="The question.")],
    config: ConfigOption = None,
    model: Annotated[str | None, typer.Option(metavar="MODEL", help="hint:<name> or a plain model.")] = None,
    provider: Annotated[
        str | None, typer.Option(metavar="PROFILE", help="Profile to make active (family.alias).")
    ] = None,
    system: Annotated[str | None, typer.Option(metavar="TEXT", help="A system prompt.")] = None,
    stream: Annotated[bool, typer.Option("--stream", help="Stream the answer.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Ask one question; print the answer, then who served it, every attempt and the cost."""
    try:
        cfg = load(config)
    except ConfigError as exc:
        raise _fail(exc, as_json) from None
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    code = asyncio.run(_chat(cfg, messages, model, provider, stream, as_json))
    raise typer.Exit(code)


async def _chat(
    cfg: Config, messages: list[dict[str, str]], model: str | None, provider: str | None, stream: bool, as_json: bool
) -> int:
    """Ask through a client of ``cfg``; print the answer (or the error) and its attempts. Returns the exit status."""
    from turnout.client import Client

    out = _out()
    try:
        client = Client(cfg, surface="cli")
    except ConfigError as exc:
        _fail(exc, as_json)
        return 1
    async with client:
        try:
            reply = await _ask(client, out, messages, model, provider, stream, as_json)
        except TurnoutError as exc:
            _print_chat_error(exc, as_json)
            return 1
    if as_json:
        sys.stdout.write(orjson.dumps(_reply_json(reply), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if not stream:
        out.print(reply.text, markup=False)
    out.print()
    cost = usd(reply.cost_usd, "unknown")
    out.print(Text("served by ") + shown(f"{reply.served.provider}/{reply.served.model}") + Text(f"; cost {cost}"))
    if reply.notice:
        out.print(shown(reply.notice), style="yellow")
    out.print(attempts_table(reply.attempts))
    return 0


async def _ask(
    client: Client,
    out: Console,
    messages: list[dict[str, str]],
    model: str | None,
    provider: str | None,
    stream: bool,
    as_json: bool,
) -> Reply:
    """The reply to ``messages``; a streamed answer's text is printed as it comes (not under ``--json``)."""
    if not stream:
        return await client.chat(messages, model=model, provider=provider)
    s = client.stream(messages, model=model, provider=provider)
    async for event in s:
        if event.type == "text" and not as_json:
            out.print(event.text, end="", markup=False)
    if not as_json:
        out.print()
    return s.response


def _print_chat_error(exc: TurnoutError, as_json: bool) -> None:
    """A failed call: its error and the attempts it made, as JSON on stdout or as text on stderr."""
    attempts = getattr(exc, "attempts", ())
    if as_json:
        sys.stdout.write(
            orjson.dumps(
                {
                    "ok": False,
                    "error": type(exc).__name__,
                    "message": str(exc),
                    "attempts": [_attempt_json(a) for a in attempts],
                },
                option=orjson.OPT_INDENT_2,
            ).decode()
            + "\n"
        )
        return
    err = _err()
    err.print(Text(f"error: {type(exc).__name__}: ") + shown_lines(str(exc), limit=2000))
    if attempts:
        err.print(attempts_table(attempts))


def _reply_json(reply: Reply) -> dict[str, Any]:
    """``turnout chat --json``'s body for an answered call."""
    return {
        "ok": True,
        "text": reply.text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
        "finish_reason": reply.finish_reason,
        "requested": {"provider": reply.requested.provider, "model": reply.requested.model},
        "served": {"provider": reply.served.provider, "model": reply.served.model},
        "fallback": reply.fallback.text if reply.fallback else None,
        "usage": _usage_json(reply.usage),
        "cost_usd": reply.cost_usd,
        "attempts": [_attempt_json(a) for a in reply.attempts],
    }


def _usage_json(u: Usage | None) -> dict[str, int] | None:
    if u is None:
        return None
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "cache_write_tokens": u.cache_write_tokens,
    }


def _attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "provider": a.provider,
        "model": a.model,
        "outcome": a.outcome,
        "status": a.status,
        "key_id": a.key_id,
        "usage": _usage_json(a.usage),
        "cost_usd": a.cost_usd,
        "duration_ms": round(a.duration_ms, 3),
        "ttft_ms": a.ttft_ms,
        "stream": a.stream,
        "detail": a.detail,
    }


@app.command()
def ledger(
    config: ConfigOption = None,
    since: Annotated[
        str | None, typer.Option(metavar="WHEN", help="Only since: a duration (30m, 6h, 7d) or an ISO date.")
    ] = None,
    path: Annotated[
        str | None, typer.Option(metavar="PATH", help="Ledger file (default: [ledger] path of the config).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Summarise the ledger: attempts, fallbacks, failure classes and cost per profile and model."""
    from turnout.ledger.cache import cache_summary
    from turnout.ledger.writer import summarize

    path, rates = _ledger_source(config, path, as_json)
    if not os.path.isfile(path):  # reading it would create an empty ledger and report 0 calls
        raise _fail(ConfigError(f"no ledger file at {shown(path).plain}", code="no_ledger"), as_json)
    summary = summarize(path, since=_since(since))
    caching = cache_summary(path, rates.rates, since=_since(since))
    if as_json:
        body = _ledger_json(summary, caching)
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    out = _out()
    _print_ledger_totals(out, summary)
    out.print(_ledger_routes_table(summary))
    cached = [c for c in caching if c.cached_input_tokens or c.cache_write_tokens]
    if cached:
        out.print("prompt cache:", markup=False)
        out.print(_ledger_cache_table(cached))


def _ledger_source(config: str | None, path: str | None, as_json: bool) -> tuple[str, ProfileRates]:
    """The ledger file to read (``path``, else the config's) and the rates that price its cache savings."""
    from turnout.ledger.pricing import ProfileRates, profile_rates

    rates = ProfileRates({})  # with only a ledger file: no profile is known, so no saving is priced
    if path is None:
        try:
            cfg = load(config)
        except ConfigError as exc:
            raise _fail(exc, as_json) from None
        return cfg.ledger.path, profile_rates(cfg)
    if config is not None:
        try:
            rates = profile_rates(load(config))
        except ConfigError as exc:
            raise _fail(exc, as_json) from None
    return path, rates


def _ledger_json(summary: LedgerSummary, caching: list[CacheSummary]) -> dict[str, Any]:
    """``turnout ledger --json``: the totals, each route's and each route's prompt caching."""
    return {
        "calls": summary.calls,
        "failed_calls": summary.failed_calls,
        "fallbacks": summary.fallbacks,
        "attempts": summary.attempts,
        "failure_classes": summary.failure_classes,
        "skips": summary.skips,
        "cost_usd": summary.cost_usd,
        "usage_notes": {note: {"attempts": n, "cost_usd": cost} for note, (n, cost) in summary.usage_notes.items()},
        "routes": [
            {
                "provider": r.provider,
                "model": r.model,
                "attempts": r.attempts,
                "outcomes": r.outcomes,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "cost_usd": r.cost_usd,
                "avg_duration_ms": r.avg_duration_ms,
            }
            for r in summary.routes
        ],
        "cache": [
            {
                "provider": c.provider,
                "model": c.model,
                "input_tokens": c.input_tokens,
                "cached_input_tokens": c.cached_input_tokens,
                "cache_write_tokens": c.cache_write_tokens,
                "hit_rate": c.hit_rate,
                "saved_usd": c.saved_usd,
            }
            for c in caching
        ],
    }


def _print_ledger_totals(out: Console, summary: LedgerSummary) -> None:
    """The ledger's totals line, then its failure classes, skips and usage notes, where there are any."""
    total = usd(summary.cost_usd, "unknown")
    out.print(
        f"{summary.calls} calls ({summary.failed_calls} failed, {summary.fallbacks} served by a fallback), "
        f"{summary.attempts} attempts, cost {total}",
        markup=False,
    )
    if summary.failure_classes:
        out.print(shown("failure classes: " + ", ".join(f"{k}={v}" for k, v in summary.failure_classes.items())))
    if summary.skips:
        out.print(shown("skipped without a call: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.skips.items()))))
    if summary.usage_notes:
        notes = (f"{k}={n} (${c or 0.0:.6f})" for k, (n, c) in summary.usage_notes.items())
        out.print(shown("usage not reported by the provider: " + ", ".join(notes)))


def _ledger_routes_table(summary: LedgerSummary) -> FittedTable:
    """One row per profile and model: attempts, outcomes, tokens, cost and average duration."""
    table = FittedTable(
        [
            Column(name="profile", identifies=True),
            Column(name="model", identifies=True),
            Column(name="attempts", right=True),
            Column(name="outcomes"),
            Column(name="tokens in/out", right=True, label="tokens"),
            Column(name="cost", right=True, identifies=True),
            Column(name="avg ms", right=True),
        ]
    )
    for r in summary.routes:
        table.add_row(
            shown(r.provider),
            shown(r.model),
            str(r.attempts),
            shown(", ".join(f"{k}={v}" for k, v in sorted(r.outcomes.items()))),
            f"{r.input_tokens}/{r.output_tokens}",
            usd(r.cost_usd),
            f"{r.avg_duration_ms:.0f}" if r.avg_duration_ms is not None else "-",
        )
    return table


def _ledger_cache_table(cached: list[CacheSummary]) -> FittedTable:
    """One row per profile and model that read or wrote the prompt cache: tokens, hit rate and what it saved."""
    caches = FittedTable(
        [
            Column(name="profile", identifies=True),
            Column(name="model", identifies=True),
            Column(name="input tokens", right=True),
            Column(name="cached", right=True),
            Column(name="written", right=True),
            Column(name="hit rate", right=True),
            Column(name="saved", right=True),
        ]
    )
    for c in cached:
        caches.add_row(
            shown(c.provider),
            shown(c.model),
            str(c.input_tokens),
            str(c.cached_input_tokens),
            str(c.cache_write_tokens),
            f"{c.hit_rate:.0%}" if c.hit_rate is not None else "-",
            usd(c.saved_usd),
        )
    return caches


GatewayOption = Annotated[
    str | None,
    typer.Option(
        "--gateway",
        metavar="URL",
        help="Read a running gateway's GET /status instead (e.g. http://127.0.0.1:8787; key: $TURNOUT_GATEWAY_KEY).",
    ),
]


@app.command()
def status(config: ConfigOption = None, as_json: JsonOption = False, gateway: GatewayOption = None) -> None:
    """Show shared cooldowns, dead keys and breakers (from Redis when [state] backend = "redis"), or a gateway's."""
    if gateway is not None:
        _gateway_status(gateway, as_json)
        return
    try:
        cfg = load(config)
    except ConfigError as exc:
        raise _fail(exc, as_json) from None
    body = asyncio.run(_status(cfg))
    if as_json:
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    out = _out()
    out.print(f"state backend: {body['backend']}", markup=False)
    if body["backend"] == "memory":
        for line in MEMORY_STATUS_HINT:
            out.print(line, markup=False)
    for key, secs in body["cooldowns"].items():
        out.print(Text("  cooling  ") + shown(key) + Text(f"  {secs:.1f}s left"))
    for dead in body["dead_keys"]:
        out.print(Text("  dead key ") + shown(_dead_key_line(dead)))
    for row in body["breakers"]:
        out.print(Text("  breaker  ") + shown(_breaker_line(row)))


#: What ``turnout status`` says on the memory backend, where it has nothing to read: where the same view is.
MEMORY_STATUS_HINT = (
    "With the memory backend, cooldowns, dead keys and breakers live inside each process that runs a client;",
    "this command cannot read them. The same view:",
    "  in the application:  client.status()  (cooldowns, dead_keys, breakers, headroom, pools, hedging)",
    "  from a gateway:      turnout status --gateway http://127.0.0.1:8787  (its GET /status)",
    '  shared:              [state] backend = "redis" and url; then this command reads them from Redis',
)


def _gateway_status(url: str, as_json: bool) -> None:
    """``turnout status --gateway URL``: the gateway's cooldowns, dead keys, breakers, headroom, pools and hedging."""
    from turnout.gateway.reader import (
        GatewayUnreadable,
        headroom_line,
        hedging_line,
        key_spend_line,
        ledger_line,
        pool_lines,
        printable,
        read_status,
        rows,
    )

    try:
        body = asyncio.run(read_status(url, os.environ.get("TURNOUT_GATEWAY_KEY")))
    except GatewayUnreadable as exc:
        raise _fail(ConfigError(str(exc), code="gateway_unreadable"), as_json) from None
    if as_json:
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    out = _out()
    out.print(f"gateway: {printable(url)}  status: {printable(body.get('status'))}", markup=False)
    for c in rows(body, "cooldowns"):
        secs = c.get("remaining_seconds")
        left = f"{secs:.1f}" if isinstance(secs, int | float) else printable(secs)
        out.print(f"  cooling  {printable(c.get('key'))}  {left}s left", markup=False)
    for dead in rows(body, "dead_keys"):
        try:
            line = _dead_key_line(dead)
        except (KeyError, TypeError, ValueError):  # not the shape this version prints: shown as it came
            line = str(dead)
        out.print(f"  dead key {printable(line, 200)}", markup=False)
    for row in rows(body, "breakers"):
        try:
            line = _breaker_line(row)
        except (KeyError, TypeError, ValueError, AttributeError):
            line = str(row)
        out.print(f"  breaker  {printable(line, 200)}", markup=False)
    for row in rows(body, "headroom"):
        out.print(f"  headroom {headroom_line(row)}", markup=False)
    for row in rows(body, "pools"):
        head, *members = pool_lines(row)
        out.print(f"  pool     {head}", markup=False)
        for member in members:
            out.print(f"           {member}", markup=False)
    hedging = body.get("hedging")
    hedged = hedging_line(hedging) if isinstance(hedging, dict) else None
    if hedged is not None:
        out.print(f"  hedging  {hedged}", markup=False)
    ledger = body.get("ledger")
    if isinstance(ledger, dict):
        out.print(f"  ledger   {ledger_line(ledger)}", markup=False)
    for row in rows(body, "keys"):
        out.print(f"  key      {key_spend_line(row)}", markup=False)


def _dead_key_line(dead: dict[str, Any]) -> str:
    """One dead key for the terminal: its id, where it stands, and when one request probes it."""
    line = f"{dead['key_id']}  {dead['state']}  strikes={dead['strikes']}"
    if dead["state"] == "dead":
        return f"{line}  probed in {dead['remaining_seconds']:.0f}s"
    if dead["state"] == "probing":
        return f"{line}  one request is probing it"
    return f"{line}  the next request probes it"


def _breaker_line(row: dict[str, Any]) -> str:
    """One breaker that is not closed, as ``/status`` and :meth:`turnout.walk.breakers.Breakers.describe` give it."""
    line = f"{row['entry']}  {row['state'].replace('_', '-')}"
    opened = f"(opened for {row['interval']:g}s)"
    if row["state"] == "open":
        return f"{line}  {row['remaining_seconds']:.1f}s left {opened}, then one call probes it"
    return f"{line}  the next call probes it {opened}"


async def _status(cfg: Config) -> dict[str, Any]:
    if cfg.state.backend != "redis":
        return {"backend": "memory", "cooldowns": {}, "dead_keys": [], "breakers": []}
    from turnout.state.redis import RedisStore
    from turnout.walk.breakers import describe_breakers

    assert cfg.state.url is not None
    store = RedisStore(cfg.state.url, prefix=cfg.state.key_prefix)
    try:
        await store.start()
        now = time.time()
        return {
            "backend": "redis",
            "connected": store.connected,
            "cooldowns": {k: round(v - now, 3) for k, v in sorted(store.cooldowns(now).items())},
            "dead_keys": store.dead_keys(now),
            "breakers": describe_breakers(store.breakers(), now),
        }
    finally:
        await store.aclose()


@app.command()
def sim(
    host: Annotated[str, typer.Option(metavar="HOST", help="Listen address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, metavar="PORT", help="Listen port (0: a free one).")] = 8900,
    script: Annotated[
        str | None, typer.Option(metavar="PATH", help="A TOML/JSON script mapping models to behaviours.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(metavar="N", help="Seed the draws of heavy-tailed delays (tail, tail_p).")
    ] = None,
) -> None:
    """Run the fault-injecting provider simulator until Ctrl-C."""
    from turnout.sim.cli import run

    try:
        run(host, port, script, seed)
    except ConfigError as exc:
        raise _fail(exc, False) from None


@app.command()
def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(metavar="HOST", help="Listen address (default: [gateway] host).")] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, metavar="PORT", help="Listen port (default: [gateway] port).")
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, metavar="N", help="Worker processes sharing the port (SO_REUSEPORT).")
    ] = 1,
) -> None:
    """Run the OpenAI- and Anthropic-compatible gateway."""
    from turnout.gateway.serve import run

    try:
        run(config, host, port, workers)
    except ConfigError as exc:
        raise _fail(exc, False) from None


@app.command()
def init(
    client: Annotated[str, typer.Option("--for", metavar="CLIENT", help="The client to set up: claude-code or codex.")],
    path: Annotated[str, typer.Option(metavar="PATH", help="Where to write the config.")] = "turnout.toml",
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """Write a gateway config that works for a coding agent in one step, and say how to start both."""
    from pathlib import Path

    from turnout.config.presets import preset

    try:
        chosen = preset(client)
    except ConfigError as exc:
        raise _fail(exc, False) from None
    target = Path(path)
    if target.exists() and not force:
        _err().print(f"error: {shown(str(target))} exists; pass --force to overwrite it", markup=False)
        raise typer.Exit(1)
    target.write_text(chosen.toml)
    out = _out()
    out.print(Text("wrote ") + shown(str(target)) + Text(f" for {chosen.name}; next:"))
    for step in chosen.steps:
        out.print(f"  {step}", markup=False)


@app.command()
def demo(
    serve: Annotated[
        bool, typer.Option("--serve", help="Then serve a gateway over the demo on 127.0.0.1 until Ctrl-C.")
    ] = False,
    port: Annotated[
        int, typer.Option(min=0, max=65535, metavar="PORT", help="The --serve gateway's port (0: a free one).")
    ] = 0,
) -> None:
    """A guided tour against the in-process simulator (writes nothing outside a temp dir)."""
    from turnout.cli.demo import main as demo_main

    try:
        code = demo_main(serve=serve, port=port)
    except ConfigError as exc:
        raise _fail(exc, False) from None
    raise typer.Exit(code)


app.add_typer(key_app)


def main() -> None:
    """Console-script entry point."""
    app()
