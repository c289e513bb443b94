"""Scripts and the model-name grammar: validation, attempt counting, reset and flapping."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from turnout.core.errors import ConfigError
from turnout.sim import Script, Simulator
from turnout.sim.grammar import parse_step_string
from turnout.sim.script import parse_model_name

PATH = "/v1/chat/completions"

FLAKY = """
[models."flaky"]
steps = [
  { do = "status", status = 429, retry_after = 2 },
  { do = "ok", text = "hi there" },
]

[models."bouncy"]
steps = ["500", "ok"]
after_last = "cycle"
"""


def chat(model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}]}


async def test_script_sequence_counts_attempts_and_repeats_last(wire: Any, sim: Any) -> None:
    """Attempt 1 gets the first step, attempt 2 the second, later attempts repeat the last."""
    sim.set_script(Script.from_text(FLAKY))
    first = await wire.post(PATH, chat("flaky"))
    assert first.status == 429
    assert first.headers["Retry-After"] == "2"
    for _ in range(2):
        r = await wire.post(PATH, chat("flaky"))
        assert r.json()["choices"][0]["message"]["content"] == "hi there"
    assert [(e.attempt, e.outcome) for e in sim.log] == [(1, "status:429"), (2, "ok"), (3, "ok")]


async def test_cycle_and_per_model_counters(wire: Any, sim: Any) -> None:
    """after_last = "cycle" starts over; each model has its own attempt counter."""
    sim.set_script(Script.from_text(FLAKY))
    for model in ("bouncy", "flaky", "bouncy", "bouncy", "bouncy"):
        await wire.post(PATH, chat(model))
    assert [(e.model, e.attempt, e.outcome) for e in sim.log] == [
        ("bouncy", 1, "status:500"),
        ("flaky", 1, "status:429"),
        ("bouncy", 2, "ok"),
        ("bouncy", 3, "status:500"),
        ("bouncy", 4, "ok"),
    ]


async def test_attempts_per_model_and_key(wire: Any, sim: Any) -> None:
    """With attempts_per = "model_key" each API key has its own counter."""
    sim.set_script({"attempts_per": "model_key", "models": {"m": {"steps": ["429", "ok"]}}})
    for key in ("k1", "k2", "k1"):
        await wire.post(PATH, chat("m"), headers={"Authorization": f"Bearer {key}"})
    assert [(e.attempt, e.outcome) for e in sim.log] == [(1, "status:429"), (1, "status:429"), (2, "ok")]


async def test_grammar_sequence(wire: Any, sim: Any) -> None:
    """sim-500-then-429-then-ok walks its steps per attempt."""
    for _ in range(4):
        await wire.post(PATH, chat("sim-500-then-429-then-ok"))
    assert [e.outcome for e in sim.log] == ["status:500", "status:429", "ok", "ok"]


async def test_unscripted_models_answer_ok(wire: Any, sim: Any) -> None:
    """A model neither scripted nor sim- always answers ok, and its attempts are still counted."""
    sim.set_script(Script.from_text(FLAKY))
    for _ in range(2):
        assert (await wire.post(PATH, chat("gpt-4.1"))).status == 200
    assert [(e.attempt, e.behaviour) for e in sim.log] == [(1, "ok"), (2, "ok")]


async def test_reset_restarts_counters_and_clears_log(wire: Any, sim: Any) -> None:
    """reset() clears the log and restarts attempt counting from 1."""
    await wire.post(PATH, chat("sim-429-then-ok"))
    await wire.post(PATH, chat("sim-429-then-ok"))
    sim.reset()
    assert sim.log == []
    await wire.post(PATH, chat("sim-429-then-ok"))
    assert [(e.seq, e.attempt, e.outcome) for e in sim.log] == [(1, 1, "status:429")]


async def test_flapping_follows_the_clock_and_reset(wire: Any, sim: Any, clock: Any) -> None:
    """sim-flap-d5 answers 503 for 5 s after start, then ok; reset starts the 5 s again."""
    assert (await wire.post(PATH, chat("sim-flap-d5"))).status == 503
    clock.advance(4.9)
    assert (await wire.post(PATH, chat("sim-flap-d5"))).status == 503
    clock.advance(0.2)
    assert (await wire.post(PATH, chat("sim-flap-d5"))).status == 200
    sim.reset()
    assert (await wire.post(PATH, chat("sim-flap-d5"))).status == 503
    assert (await wire.post("/_sim/reset", b"")).status == 200
    clock.advance(6)
    assert (await wire.post(PATH, chat("sim-flap-d5"))).status == 200


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_outage_starts_after_its_healthy_seconds_and_ends_after_its_down_seconds(
    wire: Any, sim: Any, clock: Any, stream: bool
) -> None:
    """sim-flap-a2-d3 answers for 2 s, answers 503 for the next 3 s, then answers again (streamed or not)."""
    body = {**chat("sim-flap-a2-d3"), "stream": stream}
    statuses = []
    for step in (0.0, 1.9, 0.1, 2.9, 0.1, 10.0):
        clock.advance(step)
        statuses.append((await wire.post(PATH, body)).status)
    assert statuses == [200, 200, 503, 503, 200, 200]
    assert [e.outcome for e in sim.log] == ["ok", "ok", "status:503", "status:503", "ok", "ok"]


async def test_a_silent_outage_holds_requests_until_the_client_goes_then_ends(wire: Any, sim: Any, clock: Any) -> None:
    """A silent outage (scripted: after 1 s, down 2 s) accepts a request and never answers; afterwards it answers."""
    sim.set_script({"models": {"m": {"steps": [{"do": "flapping", "after": 1, "down": 2, "mode": "silence"}]}}})
    assert (await wire.post(PATH, chat("m"))).status == 200
    clock.advance(1.5)
    task = asyncio.create_task(wire.post(PATH, chat("m")))
    held = await sim.wait_for_log(2, settled=False)
    assert held[1].outcome == "pending"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clock.advance(1.5)
    assert (await wire.post(PATH, chat("m"))).status == 200
    entries = await sim.wait_for_log(3)
    assert [(e.behaviour, e.outcome) for e in entries] == [
        ("flapping", "ok"),
        ("flapping", "client_disconnected"),
        ("flapping", "ok"),
    ]


def test_outage_grammar_reads_healthy_seconds_down_seconds_status_and_silence() -> None:
    """In a flap step ``a`` is seconds healthy (a float), ``d`` seconds down, ``s`` the status, ``silent`` the mode."""
    assert parse_step_string("flap-a2.5-d3-s500") == {"do": "flapping", "after": 2.5, "down": 3.0, "status": 500}
    assert parse_step_string("flap-d3-silent") == {"do": "flapping", "down": 3.0, "mode": "silence"}
    (outage,) = parse_model_name("sim-flap-a1-d2-silent").steps
    assert (outage.down_from, outage.down, outage.silent) == (1.0, 2.0, True)
    (plain,) = parse_model_name("sim-flap-d5").steps
    assert (plain.down_from, plain.down, plain.silent) == (0.0, 5.0, False)


@pytest.mark.parametrize(
    ("step", "path"),
    [
        ({"do": "flapping", "down": 1, "mode": "hang"}, 'models."f".steps[0].mode'),
        ({"do": "flapping", "down": 1, "after": -1}, 'models."f".steps[0].after'),
        ({"do": "ok", "mode": "silence"}, 'models."f".steps[0].mode'),
    ],
    ids=["unknown-mode", "negative-after", "mode-on-another-step"],
)
def test_outage_fields_are_validated(step: dict[str, Any], path: str) -> None:
    """An outage's mode and start are checked when the script loads; other steps take no mode."""
    with pytest.raises(ConfigError) as info:
        Script.from_dict({"models": {"f": {"steps": [step]}}})
    assert info.value.path == path


async def test_script_endpoint_replaces_script(wire: Any, sim: Any) -> None:
    """POST /_sim/script with TOML or JSON puts a new script in force; a bad one is a 400 naming the key."""
    r = await wire.post("/_sim/script", b'[models."x"]\nsteps = ["404"]\n')
    assert r.json() == {"status": "ok", "models": ["x"]}
    assert (await wire.post(PATH, chat("x"))).status == 404
    r = await wire.post("/_sim/script", b'{"models": {"y": {"steps": ["401"]}}}')
    assert r.status == 200
    assert (await wire.post(PATH, chat("y"))).status == 401
    bad = await wire.post("/_sim/script", b'[models."z"]\nsteps = [{ do = "cut", after = -1 }]\n')
    assert bad.status == 400
    assert bad.json()["path"] == 'models."z".steps[0].after'
    assert (await wire.post(PATH, chat("y"))).status == 401  # the old script stays


async def test_script_file_and_simulator_argument(tmp_path: Path) -> None:
    """A TOML script file loads from a path, also as the Simulator's script argument."""
    path = tmp_path / "sim.toml"
    path.write_text(FLAKY)
    assert set(Script.from_file(path).models) == {"flaky", "bouncy"}
    async with Simulator(script=str(path)) as sim:
        assert set(sim.script.models) == {"flaky", "bouncy"}


@pytest.mark.parametrize(
    ("data", "path", "fragment"),
    [
        (
            {"models": {"f": {"steps": [{"do": "status", "status": 429, "retry_after": -1}]}}},
            'models."f".steps[0].retry_after',
            "greater than or equal to 0",
        ),
        ({"models": {"f": {"steps": [{"do": "explode"}]}}}, 'models."f".steps[0]', "explode"),
        ({"models": {"f": {"steps": [{"do": "ok", "colour": "red"}]}}}, 'models."f".steps[0].colour', "Extra inputs"),
        ({"models": {"f": {"steps": [{"do": "status"}]}}}, 'models."f".steps[0]', "needs `status`, `error`"),
        ({"models": {"f": {"steps": []}}}, 'models."f".steps', "at least 1"),
        ({"models": {"f": {"steps": ["nope-ra2"]}}}, 'models."f".steps', "step 0: 'nope-ra2': unknown behaviour"),
        ({"models": {"f": {"steps": ["ok"], "after_last": "loop"}}}, 'models."f".after_last', "repeat"),
        ({"modelz": {}}, "modelz", "Extra inputs"),
        (
            {"models": {"f": {"steps": [{"do": "ok", "text": "a", "tokens": 3}]}}},
            'models."f".steps[0]',
            "text or tokens",
        ),
    ],
)
def test_script_errors_name_the_key_path(data: dict[str, Any], path: str, fragment: str) -> None:
    """Invalid scripts raise ConfigError with the exact key path and a clear message."""
    with pytest.raises(ConfigError) as info:
        Script.from_dict(data)
    assert info.value.path == path
    assert fragment in str(info.value)


def test_unparseable_script_text() -> None:
    """TOML that does not parse is a ConfigError, not a raw parser exception."""
    with pytest.raises(ConfigError, match="does not parse"):
        Script.from_text("[models\nsteps = ")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("sim-ok-x3", "unknown parameter 'x'"), ("sim-ok-zzz", "unknown flag 'zzz'"), ("sim-cut-a1x", "not a number")],
)
def test_grammar_errors(name: str, fragment: str) -> None:
    """Bad sim- names raise ConfigError naming the model and the problem."""
    with pytest.raises(ConfigError, match=fragment) as info:
        parse_model_name(name)
    assert info.value.path == name


def test_grammar_rejects_parameters_a_behaviour_does_not_take() -> None:
    """A parameter the behaviour does not accept is reported with its step path."""
    with pytest.raises(ConfigError) as info:
        parse_model_name("sim-ok-a3")
    assert info.value.path == "sim-ok-a3: steps[0].after"
