"""Tables and messages fit the terminal: at 80 and 120 columns no profile, model, outcome or cost is cut."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from fakes import FakeClock, call_record
from servers import threaded_simulator
from turnout.cli.demo import TIMING, _print_summary, demo_config, outage_script, outage_tour
from turnout.cli.main import app
from turnout.cli.terminal import Column, FittedTable, attempts_table
from turnout.client import Client
from turnout.core.attribution import Attempt
from turnout.core.environment import Environment
from turnout.core.money import usd
from turnout.core.types import Usage
from turnout.ledger.writer import Ledger
from turnout.sim import Simulator

WIDTHS = [80, 120]

#: Names long enough that a table of them is wider than 80 columns (and, for the attempts, than 120).
PRIMARY, PRIMARY_MODEL = "openai.primary-eu-west-1", "sim-overloaded"
BACKUP, BACKUP_MODEL = "openai.secondary-us-east-2", "gpt-4.1-mini-2025-04-14-batch"
#: USD per million tokens: three tokens each way cost a few billionths of a dollar.
PRICE_IN, PRICE_OUT = 0.001, 0.002


def _config(sim: Simulator, tmp_path: Path, primary_model: str = PRIMARY_MODEL) -> Path:
    path = tmp_path / "turnout.toml"
    path.write_text(
        f"""
default_provider = "{PRIMARY}"

[providers.models.openai.primary-eu-west-1]
api_key = "sk-test-primary"
uri = "{sim.base_url("openai")}"
model = "{primary_model}"
fallback = ["{BACKUP}"]

[providers.models.openai.secondary-us-east-2]
api_key = "sk-test-secondary"
uri = "{sim.base_url("openai")}"
model = "{BACKUP_MODEL}"
pricing = {{ input = {PRICE_IN}, output = {PRICE_OUT} }}

[reliability]
provider_retries = 1
provider_backoff_ms = 50

[ledger]
path = "{tmp_path / "ledger.sqlite3"}"
"""
    )
    return path


@pytest.fixture
def sim() -> Iterator[Simulator]:
    """The simulator, serving beside the commands' own event loops."""
    with threaded_simulator() as simulator:
        yield simulator


def _assert_whole(output: str, *values: str) -> None:
    assert "…" not in output, output
    for value in values:
        assert value in output, f"{value!r} is not whole in:\n{output}"


@pytest.mark.parametrize("width", WIDTHS)
def test_chat_and_ledger_show_every_profile_model_outcome_and_cost_whole(
    sim: Simulator, tmp_path: Path, width: int
) -> None:
    """`turnout chat` and `turnout ledger` print every identifying value whole, a tiny cost with its digits."""
    config = _config(sim, tmp_path)
    env = {"COLUMNS": str(width)}
    result = CliRunner().invoke(app, ["chat", "one two three", "--config", str(config)], env=env)
    assert result.exit_code == 0, result.output
    cost = usd((3 * PRICE_IN + 5 * PRICE_OUT) / 1e6)  # the simulator's answer: 3 tokens in, 5 out
    assert cost == "$0.000000013"
    _assert_whole(result.stdout, PRIMARY, PRIMARY_MODEL, BACKUP, BACKUP_MODEL, "retryable", " ok", "3/5", cost)

    result = CliRunner().invoke(app, ["ledger", "--config", str(config)], env=env)
    assert result.exit_code == 0, result.output
    _assert_whole(result.stdout, PRIMARY, PRIMARY_MODEL, BACKUP, BACKUP_MODEL, "retryable=2", "ok=1", cost)

    result = CliRunner().invoke(app, ["check", "--config", str(config)], env=env)
    assert result.exit_code == 0, result.output
    _assert_whole(result.stdout, f"{PRIMARY}/{PRIMARY_MODEL}", f"{BACKUP}/{BACKUP_MODEL}")


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_demo_outage_tour_keeps_its_models_and_breaker_states_whole(tmp_path: Path, width: int) -> None:
    """The demo's outage table (on a fake clock) prints every model and breaker state whole at 80 and 120."""
    clock = FakeClock()
    console = Console(record=True, width=width, force_terminal=False)
    async with Simulator(clock=clock, sleep=clock.sleep) as sim:
        sim.set_script({"models": outage_script(TIMING)})
        config = demo_config(sim, tmp_path / "ledger.sqlite3")
        async with Client.from_toml(
            config, ledger=False, env=Environment(clock=clock, sleep=clock.sleep, jitter=lambda: 0.0)
        ) as c:
            assert await outage_tour(console, c, sim, TIMING, clock=clock, sleep=clock.sleep)
    text = console.export_text()
    _assert_whole(text, "claude-sonnet-4-5 503 503 → claude-haiku-4-5 ok", "breaker_skip", "closed", "open, ")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_failed_chat_prints_its_message_on_real_lines(sim: Simulator, tmp_path: Path, width: int) -> None:
    """A failed `turnout chat` prints the error's events on lines of their own, never a literal backslash-n."""
    config = _config(sim, tmp_path)
    config.write_text(config.read_text().replace(f'model = "{BACKUP_MODEL}"', 'model = "sim-overloaded"'))
    result = CliRunner().invoke(app, ["chat", "one two three", "--config", str(config)], env={"COLUMNS": str(width)})
    assert result.exit_code == 1
    assert "\\n" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: AllProvidersFailed: All model providers/models failed"), result.stderr
    assert any(line.startswith("  event 1") for line in lines), result.stderr
    _assert_whole(result.stderr, PRIMARY, BACKUP, "sim-overloaded", "retryable")


@pytest.mark.parametrize("width", WIDTHS)
def test_attempts_table_keeps_identifying_values_whole(width: int) -> None:
    """The attempts table of `turnout chat` and the demo shows profile, model, outcome and cost whole."""
    attempts = [
        Attempt(provider=PRIMARY, model="a-model-name-that-is-rather-long-2025", outcome="rate_limited", status=429),
        Attempt(
            provider=BACKUP,
            model=BACKUP_MODEL,
            outcome="ok",
            usage=Usage(input_tokens=7, output_tokens=5),
            cost_usd=4.2e-8,
            key_id="bb04f1fa",
        ),
    ]
    console = Console(record=True, width=width, force_terminal=False)
    console.print(attempts_table(attempts))
    text = console.export_text()
    _assert_whole(
        text,
        PRIMARY,
        BACKUP,
        BACKUP_MODEL,
        "a-model-name-that-is-rather-long-2025",
        "rate_limited",
        "ok",
        "$0.000000042",
        "bb04f1fa",
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_demo_summary_keeps_identifying_values_whole(tmp_path: Path, width: int) -> None:
    """The demo's ledger summary prints its names and costs whole."""
    db = tmp_path / "ledger.sqlite3"
    model = "a-deployment-name-long-enough-to-crowd-a-summary-2025-04-14"

    async def write() -> None:
        ledger = Ledger(db, batch_delay=0)
        ledger.record(call_record("c1", model=model, cost=1.23e-7))
        await ledger.aclose()

    asyncio.run(write())
    console = Console(record=True, width=width, force_terminal=False)
    _print_summary(console, db, 0.0)
    _assert_whole(console.export_text(), "openai.main", model, "$0.00000012")


def test_a_table_that_fits_prints_as_a_table_and_one_that_does_not_prints_stacked() -> None:
    """A fitting table keeps its header row; a wider one prints each row as a block, its values whole."""
    table = FittedTable([Column(name="profile", identifies=True), Column(name="note")])
    table.add_row("openai.main", "x" * 60)
    wide = Console(record=True, width=120, force_terminal=False)
    wide.print(table)
    assert wide.export_text().splitlines()[0].split() == ["profile", "note"]
    narrow = Console(record=True, width=50, force_terminal=False)
    narrow.print(table)
    text = narrow.export_text()
    assert [line.rstrip() for line in text.splitlines()[:2]] == ["profile", "openai.main"]
    assert "x" * 40 in text


def test_usd_keeps_the_digits_of_a_tiny_cost() -> None:
    """A cost below a millionth of a dollar keeps two significant digits; others show six decimals."""
    assert usd(float("nan")) == usd(float("inf")) == "-"
    assert [usd(v) for v in (0.000011, 1.5, 0.0, 4e-7, 9e-9, None)] == [
        "$0.000011",
        "$1.500000",
        "$0.000000",
        "$0.00000040",
        "$0.0000000090",
        "-",
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_help_shows_section_names_and_no_type_brackets(width: int) -> None:
    """`--help` prints "[gateway] host", "[ledger]" and "[state]" literally and no "<bool>" for flags."""
    runner = CliRunner()
    env = {"COLUMNS": str(width)}
    serve = runner.invoke(app, ["serve", "--help"], env=env).output
    assert "[gateway] host" in serve and "[gateway] port" in serve
    assert "[ledger] path" in runner.invoke(app, ["ledger", "--help"], env=env).output
    assert "[state]" in " ".join(runner.invoke(app, ["status", "--help"], env=env).output.split())
    for command in ("chat", "check", "ledger", "status", "sim", "serve", "demo", "init"):
        text = runner.invoke(app, [command, "--help"], env=env).output
        assert "<bool>" not in text and "<int" not in text and "<str>" not in text.split("Options:")[1], text
