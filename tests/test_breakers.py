"""Circuit breakers in the walk: a known outage costs no call, one call probes it, and recovery is noticed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from fakes import E, FakeClock, Scripted, err, req, walk
from turnout.core.attribution import DispatchScope
from turnout.core.errors import AllProvidersFailed, ContextWindowExceeded, ProviderTimeout
from turnout.state import MemoryStore
from turnout.walk.breaker import BreakerSettings
from turnout.walk.breakers import MAX_STREAKS, Breakers
from turnout.walk.reliable import ReliableProvider


def outage(*steps: object) -> Scripted:
    return Scripted(*steps) if steps else Scripted(err(503))


def setup(
    primary: Scripted, backup: Scripted | None = None, **settings: float
) -> tuple[FakeClock, MemoryStore, Breakers]:
    clock = FakeClock()
    store = MemoryStore()
    return clock, store, Breakers(store, BreakerSettings(**settings))  # type: ignore[arg-type]


def pair(
    primary: Scripted, backup: Scripted, clock: FakeClock, store: MemoryStore, breakers: Breakers, retries: int = 2
) -> ReliableProvider:
    """``openai.a`` (primary) falling back to ``anthropic.b``."""
    return walk(
        E("openai.a", "m", [primary]),
        E("anthropic.b", "m", [backup]),
        retries=retries,
        clock=clock,
        store=store,
        breakers=breakers,
    )


async def calls(r, n: int) -> list[list[tuple[str, str]]]:  # type: ignore[no-untyped-def]
    """Run ``n`` calls; each call's attempts as (profile, outcome)."""
    out = []
    for _ in range(n):
        scope = DispatchScope()
        await r.run(req(), "m", None, scope)
        out.append([(a.provider, a.outcome) for a in scope.attempts])
    return out


async def test_an_outage_opens_the_breaker_and_later_calls_skip_the_entry_at_no_cost() -> None:
    """Three calls failing on the primary open its breaker (a call's retries are one signal); later calls skip it."""
    primary, backup = outage(), Scripted("ok")
    clock, store, breakers = setup(primary)
    r = walk(
        E("openai.a", "m", [primary]), E("anthropic.b", "m", [backup]), clock=clock, store=store, breakers=breakers
    )
    *opening, fourth, fifth = await calls(r, 5)
    assert opening == [[("openai.a", "retryable")] * 3 + [("anthropic.b", "ok")]] * 3
    assert fourth == fifth == [("openai.a", "breaker_skip"), ("anthropic.b", "ok")]
    assert len(primary.calls) == 9
    assert store.breaker("openai.a/m") is not None
    assert breakers.transitions[("openai.a/m", "opened")] == 1


async def test_after_the_open_interval_one_call_probes_and_a_failed_probe_doubles_the_interval() -> None:
    """The probe is one try; it fails, so the breaker reopens for 10 s; a success later closes it."""
    primary, backup = outage(*[err(503)] * 10, "back"), Scripted("ok")
    clock, store, breakers = setup(primary)
    r = walk(
        E("openai.a", "m", [primary]), E("anthropic.b", "m", [backup]), clock=clock, store=store, breakers=breakers
    )
    await calls(r, 3)
    clock.now += 5.0
    (probe,) = await calls(r, 1)
    assert probe == [("openai.a", "retryable"), ("anthropic.b", "ok")]  # one try, then the fallback
    record = store.breaker("openai.a/m")
    assert record is not None and record.interval == 10.0 and record.until == clock.now + 10.0
    clock.now += 9.9
    (skipped,) = await calls(r, 1)
    assert skipped[0] == ("openai.a", "breaker_skip")
    clock.now += 0.1
    (healed,) = await calls(r, 1)
    assert healed == [("openai.a", "ok")]
    assert store.breaker("openai.a/m") is None
    (after,) = await calls(r, 1)
    assert after == [("openai.a", "ok")]
    assert [breakers.transitions[("openai.a/m", t)] for t in ("opened", "probe", "reopened", "closed")] == [1, 2, 1, 1]


@pytest.mark.parametrize(
    "failure",
    [
        err(400),
        err(401),
        err(404),
        err(429),
        err(400, error_code="context_length_exceeded"),
        err(400, error_code="content_policy_violation"),
    ],
    ids=["bad-request", "auth", "not-found", "rate-limit", "context", "refusal"],
)
async def test_client_errors_rate_limits_context_and_refusals_never_open_it(failure: Exception) -> None:
    """Only health failures count: ten non-health failures in a row leave the breaker closed."""
    primary = Scripted(failure)
    backup = Scripted("ok")
    primary.caps = backup.caps
    clock, store, breakers = setup(primary)
    r = walk(
        E("openai.a", "m", [primary], refusal_fallback=True),
        E("anthropic.b", "m", [backup]),
        clock=clock,
        store=store,
        breakers=breakers,
    )
    for _ in range(10):
        with contextlib.suppress(AllProvidersFailed, ContextWindowExceeded):  # only the breaker matters here
            await r.run(req(), "m", None, DispatchScope())
        clock.now += 61.0  # past any cooldown
    assert store.breakers() == {}


async def test_timeouts_are_health_failures() -> None:
    """A silent entry (first-token timeout) opens its breaker after three calls: each is moved on from at once."""
    primary, backup = Scripted(ProviderTimeout("silent", phase="first_token")), Scripted("ok")
    clock, store, breakers = setup(primary)
    r = walk(
        E("openai.a", "m", [primary]), E("anthropic.b", "m", [backup]), clock=clock, store=store, breakers=breakers
    )
    outcomes = await calls(r, 4)
    assert outcomes[:3] == [[("openai.a", "timeout"), ("anthropic.b", "ok")]] * 3
    assert outcomes[3] == [("openai.a", "breaker_skip"), ("anthropic.b", "ok")]


async def test_a_high_failure_rate_opens_it_without_a_streak() -> None:
    """Alternating failed and served calls: once ten calls are counted, half of them failing opens it."""
    steps = [err(503), "ok"] * 6
    primary, backup = Scripted(*steps), Scripted("ok")
    clock, store, breakers = setup(primary, failures=100, min_calls=10, failure_rate=0.5)
    r = walk(
        E("openai.a", "m", [primary]),
        E("anthropic.b", "m", [backup]),
        retries=0,
        clock=clock,
        store=store,
        breakers=breakers,
    )
    for _ in range(10):
        await r.run(req(), "m", None, DispatchScope())
        clock.now += 1.0
    assert store.breaker("openai.a/m") is None  # ten tries, five failed, the last one a success
    await r.run(req(), "m", None, DispatchScope())
    assert store.breaker("openai.a/m") is not None  # six of eleven failed


async def test_one_call_probes_while_the_others_keep_skipping() -> None:
    """While a probe is in flight, other calls skip the half-open entry (recorded as breaker_skip)."""
    gate = asyncio.Event()
    entered = asyncio.Event()

    class SlowProbe(Scripted):
        async def chat(self, request, model, temperature=None):  # type: ignore[no-untyped-def]
            if len(self.calls) >= 9:  # the probe, after three calls of three tries opened the breaker
                self.calls.append(model)
                entered.set()
                await gate.wait()
                return await Scripted("healed").chat(request, model, temperature)
            return await super().chat(request, model, temperature)

    primary, backup = SlowProbe(err(503)), Scripted("ok")
    clock, store, breakers = setup(primary)
    r = walk(
        E("openai.a", "m", [primary]), E("anthropic.b", "m", [backup]), clock=clock, store=store, breakers=breakers
    )
    await calls(r, 3)
    clock.now += 5.0
    probing = asyncio.create_task(r.run(req(), "m", None, DispatchScope()))
    await entered.wait()
    others = await calls(r, 3)
    gate.set()
    served = await probing
    assert others == [[("openai.a", "breaker_skip"), ("anthropic.b", "ok")]] * 3
    assert served.response.text == "healed" and len(primary.calls) == 10
    assert store.breaker("openai.a/m") is None


async def test_when_every_entry_is_unavailable_the_walk_tries_them_all_as_if_closed() -> None:
    """Both breakers open: the walk tries both entries in order with their normal retries (the panic rule)."""
    a, b = Scripted(err(503)), Scripted(err(503))
    clock, store, breakers = setup(a, open_secs=60.0)  # open longer than the walks' backoffs take
    r = walk(
        E("openai.a", "m", [a]), E("anthropic.b", "m", [b]), retries=2, clock=clock, store=store, breakers=breakers
    )
    for _ in range(3):  # three failed calls on each entry open both breakers
        with pytest.raises(AllProvidersFailed):
            await r.run(req(), "m", None, DispatchScope())
    assert set(store.breakers()) == {"openai.a/m", "anthropic.b/m"}
    clock.now += 1.0
    scope = DispatchScope()
    with pytest.raises(AllProvidersFailed) as info:
        await r.run(req(), "m", None, scope)
    assert [(x.provider, x.outcome) for x in scope.attempts] == [
        ("openai.a", "breaker_skip"),
        ("anthropic.b", "breaker_skip"),
        *[("openai.a", "retryable")] * 3,
        *[("anthropic.b", "retryable")] * 3,
    ]
    assert (len(a.calls), len(b.calls)) == (12, 12)
    assert info.value.retry_at == min(record.until for record in store.breakers().values())


async def test_a_panic_walk_is_served_by_an_entry_behind_an_open_breaker_and_closes_it() -> None:
    """Every entry open, the primary answers again: the panic walk is served by it and its breaker closes."""
    a, b = Scripted(*[err(503)] * 9, "back"), Scripted(err(503))
    clock, store, breakers = setup(a)
    r = walk(
        E("openai.a", "m", [a]), E("anthropic.b", "m", [b]), retries=2, clock=clock, store=store, breakers=breakers
    )
    for _ in range(3):
        with pytest.raises(AllProvidersFailed):
            await r.run(req(), "m", None, DispatchScope())
    served = await r.run(req(), "m", None, DispatchScope())
    assert served.response.text == "back"
    assert set(store.breakers()) == {"anthropic.b/m"}
    assert breakers.transitions[("openai.a/m", "closed")] == 1


async def test_a_disabled_breaker_never_opens() -> None:
    """Enabled = false: an outage is rediscovered by every call, as without breakers."""
    primary, backup = outage(), Scripted("ok")
    clock, store, breakers = setup(primary, enabled=False)  # type: ignore[arg-type]
    r = walk(
        E("openai.a", "m", [primary]), E("anthropic.b", "m", [backup]), clock=clock, store=store, breakers=breakers
    )
    await calls(r, 3)
    assert len(primary.calls) == 9 and store.breakers() == {}


async def test_streams_skip_an_open_entry_and_probe_a_half_open_one() -> None:
    """A stream opens the fallback while the primary's breaker is open, and probes the primary when due."""
    primary, backup = Scripted(*[err(503)] * 9, "streamed"), Scripted("backup")
    clock, store, breakers = setup(primary)
    r = walk(
        E("openai.a", "m", [primary]), E("anthropic.b", "m", [backup]), clock=clock, store=store, breakers=breakers
    )
    await calls(r, 3)
    scope = DispatchScope()
    stream = await r.open_stream(req(), "m", None, scope)
    assert stream.route.provider == "anthropic.b"
    assert [(a.provider, a.outcome) for a in scope.attempts] == [("openai.a", "breaker_skip")]
    clock.now += 5.0
    probe = await r.open_stream(req(), "m", None, DispatchScope())
    assert probe.route.provider == "openai.a"
    events = [e async for batch in probe.batches() for e in batch]
    assert [e.text for e in events if e.type == "text"] == ["streamed"]
    assert store.breaker("openai.a/m") is None


async def test_streaks_are_bounded_when_callers_name_many_models() -> None:
    """Entries named by callers cannot grow the streaks without bound: past the cap the oldest is forgotten."""
    store = MemoryStore()
    breakers = Breakers(store, BreakerSettings())
    for i in range(MAX_STREAKS + 10):
        await breakers.failed("openai.a", f"openai.a/model-{i}", 0.0, probing=False)
    assert len(breakers.streaks) == MAX_STREAKS
    assert "openai.a/model-0" not in breakers.streaks and f"openai.a/model-{MAX_STREAKS + 9}" in breakers.streaks
    assert store.breakers() == {}  # one failure each opens nothing


async def test_a_flapping_breaker_logs_one_line_per_kind_of_transition_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Twenty opens and closes in a minute: one line each for opening and closing; /metrics counts all twenty."""
    store = MemoryStore()
    breakers = Breakers(store, BreakerSettings(min_calls=1, failure_rate=0.01))  # every failed call opens it
    with caplog.at_level("WARNING", logger="turnout.breaker"):
        for n in range(20):
            now = 1000.0 + n * 2.0
            await breakers.failed("openai.a", "openai.a/m", now, probing=False)
            await breakers.succeeded("openai.a/m", now + 1.0, probing=True)
        await breakers.failed("openai.a", "openai.a/m", 1070.0, probing=False)
    lines = [r.getMessage() for r in caplog.records]
    assert breakers.transitions[("openai.a/m", "opened")] == 21 and breakers.transitions[("openai.a/m", "closed")] == 20
    assert len(lines) == 3  # the first opening, the first closing, and the opening a minute later
    assert "opened" in lines[0] and "closed" in lines[1]
    assert "19 more like it" in lines[2]
