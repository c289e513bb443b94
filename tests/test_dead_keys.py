"""Dead keys: only an authentication answer counts, another call must confirm it, and it is probed again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from fakes import E, FakeClock, Scripted, err, req, walk
from turnout.core.attribution import DispatchScope
from turnout.core.errors import ProviderError
from turnout.core.secrets import key_id
from turnout.core.types import ChatRequest, ChatResponse
from turnout.state import MemoryStore
from turnout.state.dead_keys import (
    CONFIRM_WINDOW_S,
    FORGET_AFTER_S,
    MAX_PROBE_INTERVAL_S,
    PROBE_INTERVAL_S,
    PROBE_LEASE_S,
    KeyHealth,
    decode,
    rejected,
    rest_seconds,
)
from turnout.walk.keys import KeyPool

BAD, GOOD = "sk-bad-key-0001", "sk-good-key-0002"
T0 = 1_000_000.0


# --- the policy ---------------------------------------------------------------------------------


def test_a_first_rejection_only_suspects_the_key() -> None:
    """One rejection leaves the key in use; the same call seeing it again confirms nothing."""
    first = rejected(None, "k", "call-1", T0)
    assert first.state(T0) == "suspected"
    assert rejected(first, "k", "call-1", T0 + 1) is first
    assert first.state(T0 + CONFIRM_WINDOW_S) == "healthy"  # never confirmed: forgotten


def test_another_call_confirms_and_the_key_rests_then_is_probed() -> None:
    """A rejection from another call kills the key for the probe interval; then one probe is due."""
    dead = rejected(rejected(None, "k", "call-1", T0), "k", "call-2", T0 + 5)
    assert (dead.state(T0 + 5), dead.strikes, dead.dead_until) == ("dead", 1, T0 + 5 + PROBE_INTERVAL_S)
    assert rejected(dead, "k", "call-3", T0 + 6) is dead  # a request that picked it before it died
    due = dead.dead_until
    assert dead.state(due) == "probe_due"
    probing = dead.probing(due)
    assert probing.state(due + 1) == "probing"
    assert probing.state(due + PROBE_LEASE_S) == "healthy"  # the probe was not rejected: the key is back
    assert dead.state(due + FORGET_AFTER_S) == "healthy"


def test_a_rejected_probe_doubles_the_rest_up_to_the_cap() -> None:
    """Each rejected probe doubles the rest (60 s, 120 s, 240 s, ...), capped at an hour."""
    health = rejected(rejected(None, "k", "a", T0), "k", "b", T0)
    now = T0
    rests = []
    for _ in range(8):
        rests.append(health.dead_until - now)
        now = health.dead_until
        health = rejected(health.probing(now), "k", "probe", now + 1)
        now += 1
    assert rests[:4] == [PROBE_INTERVAL_S, 2 * PROBE_INTERVAL_S, 4 * PROBE_INTERVAL_S, 8 * PROBE_INTERVAL_S]
    assert max(rests) == MAX_PROBE_INTERVAL_S == rest_seconds(99)


def test_records_survive_encoding_and_reject_garbage() -> None:
    """A record read back from a shared store is the one written; anything malformed is no record."""
    health = KeyHealth(key_id="3f23a310", since=T0, strikes=2, dead_until=T0 + 120, probe_until=0.0)
    assert decode(health.encode()) == health
    for raw in (
        b"",
        b"[]",
        b'{"key_id": "x"}',
        b'{"key_id": "\\u001b[31m", "since": 1, "witness": "", "strikes": 0, "dead_until": 0, "probe_until": 0}',
        None,
    ):
        assert decode(raw) is None


# --- the walk -------------------------------------------------------------------------------------


async def test_two_calls_kill_a_key_it_rests_then_one_request_probes_it(caplog: pytest.LogCaptureFixture) -> None:
    """401s from two calls kill the key; it is skipped for its rest, then probed once, and loudly logged."""
    caplog.set_level(logging.WARNING, logger="turnout.keys")
    clock = FakeClock(now=T0)
    store = MemoryStore()
    bad, good = Scripted(err(401)), Scripted("ok")
    r = walk(E("openai.a", "m", [bad, good], keys=[BAD, GOOD]), store=store, clock=clock)
    kid = key_id(BAD)
    scopes = [DispatchScope() for _ in range(4)]  # distinct calls

    await r.run(req(), "m", None, scopes[0])
    assert store.dead_keys(clock()) == []  # suspected only
    clock.now += 1
    await r.run(req(), "m", None, scopes[1])
    assert [d["key_id"] for d in store.dead_keys(clock())] == [kid]
    for scope in scopes[2:]:
        await r.run(req(), "m", None, scope)
    assert len(bad.calls) == 2  # not sent while dead

    clock.now += PROBE_INTERVAL_S
    probe = DispatchScope()
    await r.run(req(), "m", None, probe)
    assert [(a.outcome, a.key_id) for a in probe.attempts] == [("non_retryable", kid), ("ok", key_id(GOOD))]
    (dead,) = store.dead_keys(clock())
    assert (dead["state"], dead["strikes"], dead["remaining_seconds"]) == ("dead", 2, 2 * PROBE_INTERVAL_S)

    messages = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any(kid in m and "openai.a" in m and "is dead" in m for m in messages)
    assert any(kid in m and "probes it" in m for m in messages)
    assert not any(BAD in m for m in messages)


async def test_the_same_call_seeing_a_key_rejected_twice_does_not_kill_it() -> None:
    """One call that meets the key on two entries (primary and a fallback model) is one witness, not two."""
    bad, backup = Scripted(err(401)), Scripted("ok")
    store = MemoryStore()
    r = walk(
        E("openai.a", "m1", [bad], keys=[BAD]),
        E("openai.a", "m2", [bad], keys=[BAD]),
        E("b.b", "x", [backup]),
        store=store,
    )
    scope = DispatchScope()
    await r.run(req(), "m", None, scope)
    assert [a.outcome for a in scope.attempts] == ["non_retryable", "non_retryable", "ok"]
    assert store.dead_keys(r.context.env.clock()) == []


@pytest.mark.parametrize(
    "failure",
    [
        err(400, "The model `invalid api key` does not exist"),
        err(400, "Bad Request: invalid api key provided"),
        err(404, "model 'authentication failed' not found", error_code="model_not_found"),
    ],
)
async def test_text_echoing_client_input_never_kills_a_key(failure: Exception) -> None:
    """A 400 whose message says "invalid api key" (a client's model name quoted back) leaves the key alive."""
    clock = FakeClock(now=T0)
    store = MemoryStore()
    upstream = Scripted(failure, "ok")
    r = walk(E("openai.a", "m", [upstream], keys=[BAD]), E("b.b", "x", [Scripted("ok")]), store=store, clock=clock)
    for _ in range(3):
        await r.run(req(), "m", None, DispatchScope())
        clock.now += 1
    assert store.key_health(key_id(BAD)) is None
    assert len(upstream.calls) == 3  # still sent: nothing was learned about the key


async def dead_bad_key() -> tuple[FakeClock, MemoryStore]:
    """A fake clock at ``T0`` and a store where two calls have just rejected ``BAD``."""
    store = MemoryStore()
    await store.report_auth_failure(key_id(BAD), witness="a", now=T0)
    await store.report_auth_failure(key_id(BAD), witness="b", now=T0)
    return FakeClock(now=T0), store


class Gate(Scripted):
    """Answers 401 for the probe, after the test lets it go."""

    def __init__(self) -> None:
        super().__init__(err(401))
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.entered.set()
        await self.release.wait()
        return await super().chat(request, model, temperature)


async def test_a_recovered_key_is_probed_by_one_request_while_others_skip_it() -> None:
    """After the rest, one request probes the key; a concurrent request does not use it meanwhile."""
    clock, store = await dead_bad_key()
    kid = key_id(BAD)
    clock.now = T0 + PROBE_INTERVAL_S
    gate, good = Gate(), Scripted("ok")
    r = walk(E("openai.a", "m", [gate, good], keys=[BAD, GOOD]), store=store, clock=clock)
    probing, other = DispatchScope(), DispatchScope()
    probe = asyncio.ensure_future(r.run(req(), "m", None, probing))
    await gate.entered.wait()
    await r.run(req(), "m", None, other)
    assert [a.key_id for a in other.attempts] == [key_id(GOOD)]
    gate.release.set()
    await probe
    assert [(a.outcome, a.key_id) for a in probing.attempts] == [("non_retryable", kid), ("ok", key_id(GOOD))]
    assert len(gate.calls) == 1
    assert store.dead_keys(clock())[0]["strikes"] == 2


async def test_a_probe_that_is_not_rejected_gives_the_key_back() -> None:
    """A probe that succeeds returns the key to rotation once its lease has passed."""
    clock, store = await dead_bad_key()
    kid = key_id(BAD)
    pool = KeyPool("openai.a", [BAD], store, clock)
    assert pool.all_dead() and pool.pick(clock()) is None
    clock.now = T0 + PROBE_INTERVAL_S
    assert not pool.all_dead()
    choice = pool.pick(clock())
    assert choice is not None and choice.key_id == kid
    assert pool.pick(clock()) is None  # the probe is taken
    clock.now += PROBE_LEASE_S
    assert pool.pick(clock()) is not None and pool.pick(clock()) is not None
    assert store.dead_keys(clock()) == []


async def test_a_stream_rejected_in_two_calls_kills_the_key() -> None:
    """A stream's 401 is reported like a walk's: the first suspects the key, another call's confirms it."""
    clock = FakeClock(now=T0)
    store = MemoryStore()
    r = walk(E("openai.a", "m", [Scripted(err(401))], keys=[BAD]), store=store, clock=clock)
    for expected in ("suspected", "dead"):
        stream = await r.open_stream(req(), "m")  # the connection is made when the batches are read
        with pytest.raises(ProviderError):
            async for _ in stream.batches():
                pass
        health = store.key_health(key_id(BAD))
        assert health is not None and health.state(clock()) == expected
        clock.now += 1
