"""Scripted rate-limit headroom: budgets announced in OpenAI and Anthropic style, counting down and refilling."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from conftest import FakeClock, Wire
from turnout.core.classify import parse_duration
from turnout.core.errors import ConfigError
from turnout.providers.headroom import read_headroom
from turnout.sim import Script, Simulator
from turnout.sim.headroom import go_duration, rfc3339

MESSAGES = [{"role": "user", "content": "hello there"}]  # two words of input
OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"


def budgeted(model: str, *, attempts_per: str = "model", **headroom: Any) -> Script:
    """A script giving ``model`` an ok answer of three words and the ``headroom`` budgets."""
    return Script.from_dict(
        {
            "attempts_per": attempts_per,
            "models": {model: {"steps": [{"do": "ok", "text": "one two three"}], "headroom": headroom}},
        }
    )


def chat(model: str, *, stream: bool = False) -> dict[str, Any]:
    """An OpenAI chat body."""
    return {"model": model, "messages": MESSAGES, "stream": stream}


async def test_openai_style_requests_count_down_then_refuse_until_the_window_refills(
    sim: Simulator, wire: Wire, clock: FakeClock
) -> None:
    """Each answer says what is left and when it refills; over budget a 429 says when to come back; then it refills."""
    sim.set_script(budgeted("m", requests=3, window=30))
    seen = []
    for _ in range(3):
        reply = await wire.post(OPENAI, chat("m"))
        assert reply.status == 200
        h = reply.headers
        seen.append((h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]))
        assert parse_duration(h["x-ratelimit-reset-requests"]) == 30.0
        assert "x-ratelimit-remaining-tokens" not in h  # no token budget scripted
    assert seen == [("3", "2"), ("3", "1"), ("3", "0")]
    clock.advance(10)
    refused = await wire.post(OPENAI, chat("m"))
    assert refused.status == 429 and refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.headers["Retry-After"] == "20"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"] == "20s"
    clock.advance(20)
    refilled = await wire.post(OPENAI, chat("m"))
    assert refilled.status == 200 and refilled.headers["x-ratelimit-remaining-requests"] == "2"
    assert [e.outcome for e in sim.log] == ["ok", "ok", "ok", "status:429", "ok"]


async def test_tokens_are_spent_by_each_answers_usage(sim: Simulator, wire: Wire) -> None:
    """The token budget goes down by input plus output tokens of each answer (2 + 3 here)."""
    sim.set_script(budgeted("m", tokens=12, window=60))
    lefts = [(await wire.post(OPENAI, chat("m"))).headers["x-ratelimit-remaining-tokens"] for _ in range(3)]
    assert lefts == ["7", "2", "0"]
    assert (await wire.post(OPENAI, chat("m"))).status == 429


async def test_anthropic_style_gives_absolute_resets_and_the_parser_reads_them(sim: Simulator, wire: Wire) -> None:
    """On the Anthropic route the budgets come as anthropic-ratelimit-* with RFC 3339 resets, rounded up."""
    sim.set_script(budgeted("claude", requests=2, tokens=1000, window=30))
    before = time.time()
    reply = await wire.post(
        ANTHROPIC, {"model": "claude", "max_tokens": 50, "messages": MESSAGES}, {"x-api-key": "sk-ant"}
    )
    h = reply.headers
    assert (h["anthropic-ratelimit-requests-limit"], h["anthropic-ratelimit-requests-remaining"]) == ("2", "1")
    assert h["anthropic-ratelimit-tokens-remaining"] == "995"
    reset = datetime.fromisoformat(h["anthropic-ratelimit-requests-reset"].replace("Z", "+00:00")).timestamp()
    assert before + 30 <= reset <= time.time() + 31
    assert not any(name.lower().startswith("x-ratelimit") for name in h)
    room = read_headroom(h, time.time())
    assert room is not None and (room.requests, room.request_limit, room.tokens) == (1, 2, 995)


@pytest.mark.parametrize("style", ["openai", "anthropic"])
async def test_a_style_can_be_forced_on_any_route(sim: Simulator, wire: Wire, style: str) -> None:
    """``style`` overrides the route's own (an Anthropic-style budget on the OpenAI route, and the reverse)."""
    sim.set_script(budgeted("m", requests=5, style=style))
    h = (await wire.post(OPENAI, chat("m"))).headers
    name = "x-ratelimit-remaining-requests" if style == "openai" else "anthropic-ratelimit-requests-remaining"
    assert h[name] == "4"


async def test_streams_announce_their_headroom_in_the_response_headers(sim: Simulator, wire: Wire) -> None:
    """A streamed answer carries the headers before its first byte, and spends its tokens like a whole one."""
    sim.set_script(budgeted("m", requests=2, tokens=100))
    reply = await wire.post(OPENAI, chat("m", stream=True))
    assert reply.status == 200 and reply.data()[-1] == "[DONE]"
    assert reply.headers["x-ratelimit-remaining-requests"] == "1"
    assert reply.headers["x-ratelimit-remaining-tokens"] == "95"


async def test_budgets_are_counted_per_key_with_attempts_per_model_key(sim: Simulator, wire: Wire) -> None:
    """Like attempts, budgets follow ``attempts_per``: each key has its own when it is ``model_key``."""
    sim.set_script(budgeted("m", attempts_per="model_key", requests=1))
    a = await wire.post(OPENAI, chat("m"), {"Authorization": "Bearer sk-a"})
    b = await wire.post(OPENAI, chat("m"), {"Authorization": "Bearer sk-b"})
    again = await wire.post(OPENAI, chat("m"), {"Authorization": "Bearer sk-a"})
    assert [r.status for r in (a, b, again)] == [200, 200, 429]


async def test_without_enforce_the_budget_only_announces(sim: Simulator, wire: Wire) -> None:
    """``enforce = false``: over budget the model still answers, announcing nothing left."""
    sim.set_script(budgeted("m", requests=1, enforce=False))
    replies = [await wire.post(OPENAI, chat("m")) for _ in range(3)]
    assert [r.status for r in replies] == [200, 200, 200]
    assert [r.headers["x-ratelimit-remaining-requests"] for r in replies] == ["0", "0", "0"]


async def test_reset_starts_every_budget_afresh(sim: Simulator, wire: Wire) -> None:
    """``POST /_sim/reset`` refills the budgets with the attempt counters."""
    sim.set_script(budgeted("m", requests=1))
    await wire.post(OPENAI, chat("m"))
    assert (await wire.post(OPENAI, chat("m"))).status == 429
    await wire.post("/_sim/reset", b"")
    assert (await wire.post(OPENAI, chat("m"))).status == 200


async def test_models_without_budgets_announce_nothing(sim: Simulator, wire: Wire) -> None:
    """Only scripted budgets are announced: other models' answers carry no rate-limit headers."""
    sim.set_script(budgeted("m", requests=1))
    reply = await wire.post(OPENAI, chat("other"))
    assert reply.status == 200 and not any("ratelimit" in name.lower() for name in reply.headers)


@pytest.mark.parametrize(
    ("headroom", "path"),
    [({"window": 5}, 'models."m".headroom'), ({"requests": 0}, 'models."m".headroom.requests')],
)
def test_a_bad_headroom_table_names_its_path(headroom: dict[str, Any], path: str) -> None:
    """A budget table without a budget, or with a zero budget, is a script error naming the key."""
    with pytest.raises(ConfigError) as caught:
        Script.from_dict({"models": {"m": {"steps": ["ok"], "headroom": headroom}}})
    assert caught.value.path == path


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0ms"), (0.1204, "121ms"), (8.5, "8.5s"), (30.0, "30s"), (360.0, "6m0s"), (3723.25, "1h2m3.25s")],
)
def test_go_durations_round_up_and_parse_back(seconds: float, text: str) -> None:
    """Resets are written as OpenAI does, never earlier than the real refill, and Turnout's parser reads them."""
    assert go_duration(seconds) == text
    parsed = parse_duration(text)
    assert parsed is not None and seconds <= parsed < seconds + 0.001 + 1e-9


def test_rfc3339_resets_round_up_to_the_second() -> None:
    """Anthropic-style resets are whole seconds, rounded up so a client never comes back early."""
    assert rfc3339(1_800_000_000.2) == "2027-01-15T08:00:01Z"


async def test_an_error_step_spends_a_request_and_announces_what_is_left(sim: Simulator, wire: Wire) -> None:
    """A scripted HTTP error counts against the request budget, as a provider's own errors do, and says so."""
    sim.set_script(
        Script.from_dict({"models": {"m": {"steps": ["500", "ok"], "headroom": {"requests": 3, "tokens": 100}}}})
    )
    failed = await wire.post(OPENAI, chat("m"))
    served = await wire.post(OPENAI, chat("m"))
    assert (failed.status, failed.headers["x-ratelimit-remaining-requests"]) == (500, "2")
    assert failed.headers["x-ratelimit-remaining-tokens"] == "100"  # an error spends no tokens
    assert (served.status, served.headers["x-ratelimit-remaining-requests"]) == (200, "1")
