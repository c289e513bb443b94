"""Client-supplied text on the terminal: `turnout ledger` and the attempt tables show it, never obey it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import orjson
from rich.console import Console
from typer.testing import CliRunner

from fakes import call_record
from turnout.cli.main import app
from turnout.cli.terminal import attempts_table, shown
from turnout.core.attribution import Attempt
from turnout.ledger.writer import Ledger

#: A model name as a hostile client could send it: an OSC title, an ANSI colour, rich markup, a forged row.
HOSTILE = "m\x1b]0;pwned\x07\x1b[31mred[bold]loud[/bold]\nforged-row\u202eevil"


def _assert_inert(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output and "\u202e" not in output
    assert not any(line.lstrip().startswith("forged-row") for line in output.splitlines())
    assert "[bold]loud[/bold]" in output  # markup shown as text, not applied


def test_shown_makes_control_characters_and_markup_visible() -> None:
    """Control characters become visible escapes, markup stays literal, and long text is cut."""
    text = shown(HOSTILE)
    assert text.plain == "m\\x1b]0;pwned\\x07\\x1b[31mred[bold]loud[/bold]\\nforged-row\\u202eevil"
    assert text.spans == []
    assert shown("x" * 1000).plain == "x" * 400 + "…"


def test_ledger_command_escapes_client_text(tmp_path: Path) -> None:
    """`turnout ledger` prints a hostile model name escaped, on one row, with its markup literal."""
    db = tmp_path / "ledger.sqlite3"

    async def write() -> None:
        ledger = Ledger(db, batch_delay=0)
        ledger.record(call_record("c1", model=HOSTILE))
        await ledger.aclose()

    asyncio.run(write())
    result = CliRunner().invoke(app, ["ledger", "--path", str(db)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    _assert_inert(result.output)
    assert "\\x1b]0;pwned\\x07" in result.output


def test_ledger_command_shows_breaker_skips_apart_from_failure_classes(tmp_path: Path) -> None:
    """`turnout ledger` lists breaker skips as skips (text and JSON), never as a failure class of the provider."""
    db = tmp_path / "ledger.sqlite3"
    record = call_record("c1")
    skip = Attempt(provider="openai.main", model="m", outcome="breaker_skip", started_at=record.ts)
    failure = Attempt(provider="openai.main", model="m", outcome="retryable", status=503, started_at=record.ts)

    async def write() -> None:
        ledger = Ledger(db, batch_delay=0)
        ledger.record(replace(record, attempts=(skip, failure, *record.attempts), accepted_index=2))
        await ledger.aclose()

    asyncio.run(write())
    text = CliRunner().invoke(app, ["ledger", "--path", str(db)], env={"COLUMNS": "400"})
    assert text.exit_code == 0, text.output
    assert "failure classes: retryable=1\n" in text.output
    assert "skipped without a call: breaker_skip=1" in text.output
    body = orjson.loads(CliRunner().invoke(app, ["ledger", "--path", str(db), "--json"]).output)
    assert (body["failure_classes"], body["skips"]) == ({"retryable": 1}, {"breaker_skip": 1})


def test_attempts_table_escapes_client_text() -> None:
    """The attempts table of `turnout chat` and the demo shows a hostile model escaped."""
    console = Console(record=True, width=400, force_terminal=False)
    console.print(attempts_table([Attempt(provider="openai.main", model=HOSTILE, outcome="ok", detail=HOSTILE)]))
    _assert_inert(console.export_text())


def test_status_on_the_memory_backend_says_where_the_same_view_is(tmp_path: Path) -> None:
    """`turnout status` without Redis names client.status(), a gateway's --gateway and the Redis backend."""
    config = tmp_path / "turnout.toml"
    config.write_text('[providers.models.openai.main]\napi_key = "sk-test-status"\nmodel = "gpt-4.1"\n')
    result = CliRunner().invoke(app, ["status", "--config", str(config)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("state backend: memory\n")
    text = " ".join(result.output.split())
    assert "client.status()" in text
    assert "turnout status --gateway http://127.0.0.1:8787" in text
    assert '[state] backend = "redis"' in text
