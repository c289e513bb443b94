"""The ``turnout`` command line.

Exit codes: 0 success (warnings included), 1 a configuration or run-time failure (the message names
the key path where there is one), 2 a usage error.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from turnout.config import (
    Config,
    ConfigWarning,
    Plan,
    Route,
    build_plan,
    collect_warnings,
    find_config_path,
    load_config_file,
)
from turnout.errors import ConfigError

app = typer.Typer(
    name="turnout",
    help="One reliable front over many LLM providers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOption = Annotated[
    str | None,
    typer.Option("--config", "-c", help="Config file (default: $TURNOUT_CONFIG, then ./turnout.toml)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


@app.callback()
def _root() -> None:
    """One reliable front over many LLM providers."""


def _out() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _err() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(exc: ConfigError, as_json: bool) -> typer.Exit:
    if as_json:
        body = {"ok": False, "error": {"code": exc.code, "path": exc.path, "message": exc.message}}
        sys.stdout.write(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _err().print(f"error: {exc}", markup=False)
    return typer.Exit(1)


def load(config: str | None) -> Config:
    """Load the config named on the command line, else from the environment, else ./turnout.toml."""
    return load_config_file(find_config_path(config))


@app.command()
def check(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Validate the config: print every warning and the materialised attempt order."""
    try:
        cfg = load(config)
        warnings = collect_warnings(cfg)
        plan = build_plan(cfg)
    except ConfigError as exc:
        raise _fail(exc, as_json) from None
    if as_json:
        sys.stdout.write(orjson.dumps(plan_json(plan, warnings), option=orjson.OPT_INDENT_2).decode() + "\n")
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
    for line in plan_lines(plan):
        out.print(line, markup=False)


def _route_title(route: Route) -> str:
    if route.hint is None:
        return f"default: {route.profile}"
    return f"hint:{route.hint} -> {route.profile} (route model {route.model})"


def plan_lines(plan: Plan) -> list[str]:
    """The attempt order of the default target and every route, as printed by ``turnout check``."""
    lines: list[str] = []
    for route in (plan.default, *plan.routes):
        lines.append(_route_title(route))
        for i, entry in enumerate(route.entries, 1):
            model = entry.model if entry.model is not None else "<requested model>"
            kind = "pinned" if entry.pinned else "unpinned"
            tries = plan.tries_per_entry
            lines.append(f"  {i}. {entry.profile}/{model}  {kind}  {tries} tr{'ies' if tries != 1 else 'y'}")
        lines.append("")
    return lines[:-1]


def plan_json(plan: Plan, warnings: list[ConfigWarning]) -> dict[str, Any]:
    """``turnout check --json`` output."""

    def route(r: Route) -> dict[str, Any]:
        return {
            "hint": r.hint,
            "profile": r.profile,
            "model": r.model,
            "entries": [
                {"profile": e.profile, "model": e.model, "pinned": e.pinned, "tries": plan.tries_per_entry}
                for e in r.entries
            ],
        }

    return {
        "ok": True,
        "warnings": [{"code": w.code, "path": w.path, "message": w.message} for w in warnings],
        "default": route(plan.default),
        "routes": [route(r) for r in plan.routes],
    }


def main() -> None:
    """Console-script entry point."""
    app()
