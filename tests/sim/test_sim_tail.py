"""Heavy-tailed delays in the simulator: the grammar, the script, seeded draws, and where the delay goes."""

from __future__ import annotations

from collections import Counter

import aiohttp
import pytest

from conftest import Sleeps, Wire
from turnout.core.errors import ConfigError
from turnout.sim import Script, Simulator
from turnout.sim.grammar import parse_step_string

HEAVY = "sim-ok-d0.05-tail2-tp0.25"
BODY = {"messages": [{"role": "user", "content": "hi"}]}


def test_the_grammar_reads_a_tail_and_its_probability() -> None:
    """``tail<seconds>`` and ``tp<probability>`` are step parameters like ``d``."""
    assert parse_step_string("ok-d0.05-tail2-tp0.04") == {"do": "ok", "delay": 0.05, "tail": 2.0, "tail_p": 0.04}
    assert parse_step_string("500-tail1.5-tp0.5") == {"do": "status", "status": 500, "tail": 1.5, "tail_p": 0.5}


@pytest.mark.parametrize(
    ("step", "path"),
    [
        ({"do": "ok", "delay": 0.05, "tail": 2.0}, 'models."m".steps[0]'),
        ({"do": "ok", "tail_p": 0.1}, 'models."m".steps[0]'),
        ({"do": "ok", "tail": 2.0, "tail_p": 1.5}, 'models."m".steps[0].tail_p'),
        ({"do": "ok", "tail": -1.0, "tail_p": 0.1}, 'models."m".steps[0].tail'),
        ({"do": "silence", "tail": 1.0, "tail_p": 0.1}, 'models."m".steps[0].tail'),
    ],
)
def test_a_tail_needs_its_probability_and_sane_values(step: dict[str, object], path: str) -> None:
    """A tail without its probability (or the reverse), out of range, or on a step that never answers: an error."""
    with pytest.raises(ConfigError) as info:
        Script.from_dict({"models": {"m": {"steps": [step]}}})
    assert info.value.path == path


async def _delays(sim: Simulator, wire: Wire, n: int, *, stream: bool = False) -> list[float]:
    for _ in range(n):
        reply = await wire.post("/v1/chat/completions", {**BODY, "model": HEAVY, "stream": stream})
        assert reply.status == 200
    return [e.delay for e in sim.log[-n:]]


async def test_seeded_draws_give_the_tail_its_share_and_repeat_after_a_reset(sleeps: Sleeps) -> None:
    """With a seed, about tail_p of the attempts wait the tail; a reset replays the same draws."""
    async with Simulator(sleep=sleeps, seed=42) as sim, aiohttp.ClientSession() as session:
        wire = Wire(sim, session)
        first = await _delays(sim, wire, 200)
        assert set(first) == {0.05, 2.0}
        assert Counter(first)[2.0] / 200 == pytest.approx(0.25, abs=0.08)
        assert sleeps.calls == first  # non-streaming: each attempt slept its drawn delay before the headers
        sim.reset()
        assert await _delays(sim, wire, 200) == first


async def test_two_simulators_with_one_seed_draw_alike_and_a_scripts_seed_wins(sleeps: Sleeps) -> None:
    """The same seed gives the same sequence in another simulator; a script's own seed replaces the simulator's."""
    async with Simulator(sleep=sleeps, seed=42) as one, aiohttp.ClientSession() as session:
        reference = await _delays(one, Wire(one, session), 40)
    async with Simulator(sleep=sleeps, seed=42) as two, aiohttp.ClientSession() as session:
        assert await _delays(two, Wire(two, session), 40) == reference
    async with Simulator(sleep=sleeps, seed=7) as three, aiohttp.ClientSession() as session:
        three.set_script({"seed": 42})
        assert await _delays(three, Wire(three, session), 40) == reference
        three.set_script({"seed": 8})
        assert await _delays(three, Wire(three, session), 40) != reference


async def test_a_streamed_answer_waits_its_drawn_delay_before_the_first_chunk(sim: Simulator, wire: Wire) -> None:
    """In a stream the drawn delay comes after the headers, before the first chunk (a slow first token)."""
    sim.set_script({"seed": 3, "models": {HEAVY: {"steps": [{"do": "ok", "delay": 0.01, "tail": 3.0, "tail_p": 1.0}]}}})
    reply = await wire.post("/v1/chat/completions", {**BODY, "model": HEAVY, "stream": True})
    assert reply.status == 200 and reply.data()[-1] == "[DONE]"
    assert sim.log[-1].delay == 3.0
    assert sim.log[-1].to_json()["delay"] == 3.0


async def test_a_step_without_a_tail_draws_nothing(sim: Simulator, wire: Wire, sleeps: Sleeps) -> None:
    """Plain delays are unchanged: no draw, the step's delay every time."""
    for _ in range(3):
        await wire.post("/v1/chat/completions", {**BODY, "model": "sim-slow-d0.5"})
    assert sleeps.calls == [0.5, 0.5, 0.5]
    assert [e.delay for e in sim.log] == [0.5, 0.5, 0.5]
