"""The walk's shortcuts on the per-call path hold to its general path."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fakes import FULL, E, FakeClock, Scripted, err, req, walk
from turnout.attribution import Attempt, DispatchScope, RouteRef, _notice, _notices, dispatch_scope, fallback_notice
from turnout.breaker import BreakerRecord, entry_key
from turnout.call import Call, CallPlan
from turnout.classify import error_class_of, is_dead_key_error
from turnout.entry import Entry, Served, new_served
from turnout.errors import (
    AllProvidersFailed,
    EmptyCompletion,
    ErrorClass,
    ProtocolError,
    ProviderError,
    ProviderTimeout,
    RefusalError,
    TurnoutError,
)
from turnout.health import Breakers
from turnout.keys import KeyChoice
from turnout.policy import Position, Step, decide
from turnout.reliable import ReliableProvider
from turnout.report import outcome_of
from turnout.state import MemoryStore
from turnout.types import Capabilities, ChatRequest, ChatResponse, NativeRequest, ResponseFormat, Usage
from turnout.walk import Admission, Walk, asks_capabilities
from turnout.walk_context import cooldown_seconds

NOW = 1_000_000.0
#: ``(profile, keys)`` of the route's entries, in order (a rotating pool, a one-key pool, a keyless profile).
PROFILES = (("openai.a", ("sk-a-one", "sk-a-two")), ("openai.b", ("sk-b-one",)), ("openai.c", ()))


class LongWay(MemoryStore):
    """A memory store that never says it is calm: every walk takes the general path."""

    def calm(self) -> bool:
        return False


class Counting(MemoryStore):
    """A memory store that counts the walk's lookups of its entries (a key pool's own reads are not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.lookups = 0

    def cooldown_until(self, key: str, now: float) -> float | None:
        self.lookups += "#" not in key
        return super().cooldown_until(key, now)

    def breaker(self, key: str) -> BreakerRecord | None:
        self.lookups += 1
        return super().breaker(key)


#: A deadline relative to now: None (nothing), in the past (expired, not yet pruned) or in the future.
_deadline = st.one_of(st.none(), st.sampled_from([-5.0, -0.001, 0.0, 0.001, 3.0, 60.0]))


@dataclass(frozen=True)
class State:
    """What the store holds when the call starts."""

    profile_cooldowns: tuple[float | None, ...]
    key_cooldowns: tuple[float | None, ...]
    breakers: tuple[float | None, ...]
    rejections: int


_states = st.builds(
    State,
    profile_cooldowns=st.tuples(_deadline, _deadline, _deadline),
    key_cooldowns=st.tuples(_deadline, _deadline),
    breakers=st.tuples(_deadline, _deadline, _deadline),
    rejections=st.integers(0, 2),
)


def _route(store: MemoryStore) -> ReliableProvider:
    clock = FakeClock(now=NOW)
    specs = [E(profile, "m", [Scripted("ok") for _ in keys or ("",)], keys=list(keys)) for profile, keys in PROFILES]
    return walk(*specs, clock=clock, store=store, breakers=Breakers(store))


async def _fill(store: MemoryStore, route: ReliableProvider, state: State) -> None:
    for (profile, _), delta in zip(PROFILES, state.profile_cooldowns, strict=True):
        if delta is not None:
            await store.set_cooldown(profile, NOW + delta, since=NOW - 1)
    pool = route.entries[0].keys
    for kid, delta in zip(pool.ids, state.key_cooldowns, strict=True):
        if delta is not None:
            await store.set_cooldown(pool.key_cooldown(kid), NOW + delta)
    for (profile, _), delta in zip(PROFILES, state.breakers, strict=True):
        if delta is not None:
            await store.open_breaker(
                entry_key(profile, "m"), BreakerRecord(opened_at=NOW - 2, until=NOW + delta, interval=5)
            )
    for n in range(state.rejections):  # one rejection: suspected; a second call's: dead
        await store.report_auth_failure(pool.ids[0], witness=f"call-{n}", now=NOW - 1)


async def _admissions(store: MemoryStore, state: State) -> tuple[list[Admission], list[Attempt], str, list[Attempt]]:
    """Each entry's admission by one walk and the skips it recorded; the outcome and attempts of a call on a twin."""
    route = _route(store)
    await _fill(store, route, state)
    w = route.new_walk(None, "m")
    request = req()
    admissions = [w.admits(i, e, "m", request, False, stream=False) for i, e in enumerate(route.entries)]
    twin_store = type(store)()
    twin = _route(twin_store)
    await _fill(twin_store, twin, state)
    with dispatch_scope() as scope:
        try:
            outcome = (await twin.chat(request, "m")).text
        except TurnoutError as exc:  # every key dead or cooling, say: the same failure on both paths
            outcome = type(exc).__name__
    return admissions, w.attempts, outcome, [replace(a, duration_ms=0.0) for a in scope.attempts]  # timings differ


@settings(max_examples=300, deadline=None)
@given(_states)
def test_a_calm_store_admits_what_the_general_path_admits(state: State) -> None:
    """Any mix of cooldowns (profile, key, expired), breakers (open, half-open) and rejected keys: same walk."""
    fast = asyncio.run(_admissions(MemoryStore(), state))
    general = asyncio.run(_admissions(LongWay(), state))
    assert fast == general


async def test_a_calm_store_is_asked_nothing_per_entry() -> None:
    """With nothing cooling down and no breaker open, a walk admits every entry without one lookup."""
    store = Counting()
    route = _route(store)
    with dispatch_scope() as scope:
        assert (await route.chat(req(), "m")).text == "ok"
    assert [a.outcome for a in scope.attempts] == ["ok"] and store.lookups == 0
    await store.set_cooldown("openai.a", NOW + 5)
    assert not store.calm()
    with dispatch_scope() as scope:
        assert (await route.chat(req(), "m")).text == "ok"
    assert [a.outcome for a in scope.attempts] == ["cooldown_skip", "ok"] and store.lookups > 0


_routes = st.sampled_from(
    [
        RouteRef(provider="openai.a", model="m"),
        RouteRef(provider="openai.a", model="n"),
        RouteRef(provider="anthropic.b", model="m"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(_routes, st.integers(0, 3), st.sets(st.integers(0, 3), max_size=2), st.booleans(), st.booleans())
def test_accept_gives_the_notice_the_fallback_rule_gives(
    served: RouteRef, entry: int, peers: set[int], same_object: bool, intra_family: bool
) -> None:
    """Whatever answered (the requested route itself, an equal copy, another route; any entry): the rule's notice."""
    requested = RouteRef(provider="openai.a", model="m")
    if same_object and served == requested:
        served = requested
    call = Call(CallPlan(requested=requested, operation="chat", peers=frozenset(peers), intra_family=intra_family))
    reply = call.accept(ChatResponse(text="ok"), served, entry)
    assert reply.fallback == call.fallback(served, entry)


@pytest.mark.parametrize("keys", [(), ("sk-one",), ("sk-one", "sk-two")])
@pytest.mark.parametrize("price", [None, (1.0, 2.0)])
@pytest.mark.parametrize("failures", [0, 1])
async def test_the_ok_record_is_what_attempt_makes_of_a_success(
    keys: tuple[str, ...], price: tuple[float, float] | None, failures: int
) -> None:
    """A success is recorded as ``WalkContext.attempt`` records it (key, price, try number, entry)."""
    provider = Scripted(*[err(503)] * failures, "ok")  # one script, whichever key a try uses
    providers = [provider for _ in keys or ("",)]
    route = walk(E("openai.x", "m", [Scripted(err(400))]), E("openai.a", "m", providers, keys=list(keys), price=price))
    with dispatch_scope() as scope:
        await route.chat(req(), "m")
    ok = scope.attempts[-1]
    entry = route.entries[ok.entry]
    index = entry.keys.ids.index(ok.key_id) if ok.key_id is not None else 0
    general = route.context.attempt(
        entry,
        ok.entry,
        ok.model,
        "ok",
        try_number=ok.try_number,
        choice=KeyChoice(index, ok.key_id),
        started=ok.started_at,
        elapsed=ok.duration_ms / 1000.0,
        usage=ok.usage,
    )
    assert replace(general, duration_ms=ok.duration_ms) == ok
    assert ok.try_number == failures + 1 and ok.entry == 1 and (ok.cost_usd is not None) == (price is not None)


_failures = st.one_of(
    st.builds(
        ProviderError,
        st.just("failed"),
        error_class=st.sampled_from([c for c in ErrorClass if c is not ErrorClass.REFUSAL]),
        status=st.one_of(st.none(), st.integers(100, 599), st.integers(600, 999)),
        error_type=st.one_of(st.none(), st.just(""), st.just("server_error")),
        retry_after=st.one_of(st.none(), st.floats(0, 120)),
        auth_failure=st.booleans(),
    ),
    st.builds(ProviderTimeout, st.just("slow"), phase=st.sampled_from(["connect", "first_token", "total"])),
    st.builds(ProtocolError, st.just("bad json"), status=st.one_of(st.none(), st.just(200))),
    st.builds(EmptyCompletion, usage=st.one_of(st.none(), st.just(Usage(input_tokens=3, output_tokens=0)))),
    st.builds(RefusalError, status=st.one_of(st.none(), st.just(400))),
    st.builds(ValueError, st.just("not a provider error")),
)


@settings(max_examples=300, deadline=None)
@given(failure=_failures, keys=st.sampled_from([(), ("sk-one",), ("sk-one", "sk-two")]), price=st.booleans())
def test_a_failed_try_is_recorded_as_attempt_records_it(failure: Exception, keys: tuple[str, ...], price: bool) -> None:
    """Any failure of a try (a plain HTTP error, a subclass, another exception) is the record ``attempt`` makes."""

    async def fail() -> tuple[ReliableProvider, list[Attempt]]:
        providers = [Scripted(failure) for _ in keys or ("",)]
        route = walk(
            E("openai.a", "m", providers, keys=list(keys), price=(1.0, 2.0) if price else None),
            E("openai.b", "m", [Scripted("ok")]),
            retries=0,
        )
        with dispatch_scope() as scope, contextlib.suppress(TurnoutError):
            await route.chat(req(), "m")
        return route, scope.attempts

    route, attempts = asyncio.run(fail())
    failed = attempts[0]
    entry = route.entries[0]
    index = entry.keys.ids.index(failed.key_id) if failed.key_id is not None else 0
    general = route.context.attempt(
        entry,
        0,
        "m",
        outcome_of(error_class_of(failure)),
        try_number=1,
        choice=KeyChoice(index, failed.key_id),
        started=failed.started_at,
        elapsed=failed.duration_ms / 1000.0,
        usage=failure.usage if isinstance(failure, EmptyCompletion) else None,
        error=failure,
    )
    assert replace(general, duration_ms=failed.duration_ms) == failed


def test_new_served_is_the_named_tuple_the_class_makes() -> None:
    """The walk's answer built without the class call is ``Served(...)``: same type, same fields."""
    response, route = ChatResponse(text="ok"), RouteRef(provider="openai.a", model="m")
    made = new_served(response, route, 1)
    assert type(made) is Served and made == Served(response, route, 1)
    assert (made.response, made.route, made.entry) == (response, route, 1)


_names = st.sampled_from(["openai.a", "openai.b", "anthropic.a", "gemini.x"])


@settings(max_examples=300, deadline=None)
@given(_names, st.text(max_size=3), _names, st.text(max_size=3), st.booleans())
def test_a_kept_notice_is_the_notice_the_rule_makes(
    requested_profile: str, requested_model: str, served_profile: str, served_model: str, intra_family: bool
) -> None:
    """Any route pair and setting: the notice kept from an earlier call is the one made for this call."""
    requested = RouteRef(provider=requested_profile, model=requested_model)
    served = RouteRef(provider=served_profile, model=served_model)
    assert fallback_notice(requested, served, intra_family=intra_family) == _notice(requested, served, intra_family)
    assert len(_notices) <= 256


@settings(max_examples=200, deadline=None)
@given(_states)
def test_a_skip_is_recorded_as_attempt_records_it(state: State) -> None:
    """Every cooldown or breaker skip is the record ``WalkContext.attempt`` makes of that skip."""

    async def skips() -> tuple[ReliableProvider, list[Attempt]]:
        store = LongWay()
        route = _route(store)
        await _fill(store, route, state)
        w = route.new_walk(None, "m")
        for i, e in enumerate(route.entries):
            w.admits(i, e, "m", req(), False, stream=False)
        return route, w.attempts

    route, attempts = asyncio.run(skips())
    for a in attempts:
        general = route.context.attempt(
            route.entries[a.entry],
            a.entry,
            a.model,
            a.outcome,
            try_number=0,
            started=a.started_at,
            retry_after=a.retry_after,
            stream=a.stream,
            detail=a.detail,
        )
        assert general == a and a.outcome in ("cooldown_skip", "breaker_skip")


@settings(max_examples=200, deadline=None)
@given(_states)
def test_an_entry_is_skipped_as_cooling_exactly_when_cooling_until_says_so(state: State) -> None:
    """The walk's own profile-then-keys lookup skips an entry as ``cooling_until`` does, until the same deadline."""

    async def go() -> None:
        store = LongWay()
        route = _route(store)
        await _fill(store, route, state)
        for i, entry in enumerate(route.entries):
            until = route.context.cooling_until(entry, NOW)
            w = route.new_walk(None, "m")
            w.admits(i, entry, "m", req(), False, stream=False)
            skips = [a for a in w.attempts if a.outcome == "cooldown_skip"]
            if until is None:
                assert skips == []
            else:
                assert [a.retry_after for a in skips] == [until - NOW]

    asyncio.run(go())


_hints = st.sampled_from([None, 0.0, -1.0, 0.5, 90.0])


def _settling(
    store: MemoryStore, index: int, *, probing: bool, with_breakers: bool
) -> tuple[ReliableProvider, Walk, Entry, KeyChoice]:
    """A route on ``store``, a walk on it, its entry ``index`` and that entry's key: what ``settle`` is given."""
    route = _route(store)
    if not with_breakers:
        route.context = replace(route.context, breakers=None)
    w = route.new_walk(None, "m")
    w.probing = probing
    entry = route.entries[index]
    choice = entry.keys.pick(NOW)
    assert choice is not None
    return route, w, entry, choice


def _snapshot(store: MemoryStore, breakers: Breakers | None, w: Walk) -> object:
    """What settling a failure may change: cooldowns, breakers, key records, failure streaks, the walk's probe."""
    streaks = {k: (s.failures, list(s._tries)) for k, s in breakers.streaks.items()} if breakers is not None else {}
    return store.cooldowns(NOW), store.breakers(), store.key_records(), streaks, w.probing


@settings(max_examples=300, deadline=None)
@given(
    cls=st.sampled_from(list(ErrorClass)),
    hint=_hints,
    index=st.integers(0, 2),
    tries_left=st.integers(0, 2),
    probing=st.booleans(),
    auth=st.booleans(),
    with_breakers=st.booleans(),
)
def test_a_failure_settled_without_updates_has_none_to_make(
    cls: ErrorClass, hint: float | None, index: int, tries_left: int, probing: bool, auth: bool, with_breakers: bool
) -> None:
    """When ``settle`` gives nothing to await, applying its action anyway changes no cooldown, breaker or key."""

    async def go() -> None:
        store = MemoryStore()
        route, w, entry, choice = _settling(store, index, probing=probing, with_breakers=with_breakers)
        exc = ProviderError("failed", error_class=cls, status=429, retry_after=hint, auth_failure=auth)
        action, updates = w.decide_failure(index, entry, "m", choice, exc, cls, tries_left)
        before = _snapshot(store, route.context.breakers, w)
        if updates is None:
            await w.apply(entry, "m", choice.key_id, action, hint)
            assert _snapshot(store, route.context.breakers, w) == before
        else:
            await updates

    asyncio.run(go())


class RateLimited(Scripted):
    """Raises a new 429 on every call, as an adapter does (no local holds it), keeping weak references to them."""

    def __init__(self) -> None:
        super().__init__()
        self.raised: list[weakref.ref[ProviderError]] = []

    def _error(self) -> ProviderError:
        error = err(429, "slow down", headers={"retry-after": "0"})
        self.raised.append(weakref.ref(error))
        return error

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        raise self._error()


async def test_a_served_failover_leaves_nothing_for_the_garbage_collector() -> None:
    """A call served after a failed try frees that failure by reference counting: no cycle waits for the collector."""
    primary = RateLimited()
    route = walk(E("openai.a", "m", [primary]), E("openai.b", "m", [Scripted("ok")]))
    gc.disable()
    try:
        with dispatch_scope() as scope:
            assert (await route.chat(req(), "m")).text == "ok"
        assert [a.outcome for a in scope.attempts] == ["rate_limited", "ok"]
        assert len(primary.raised) == 1 and primary.raised[0]() is None
    finally:
        gc.enable()


async def test_a_call_that_every_entry_failed_leaves_nothing_for_the_garbage_collector() -> None:
    """Once the caller lets go of ``AllProvidersFailed``, its failures are freed by reference counting."""
    first, second = RateLimited(), RateLimited()
    route = walk(E("openai.a", "m", [first]), E("openai.b", "m", [second]))
    gc.disable()
    try:
        caught: list[bool] = []
        try:
            await route.chat(req(), "m")
        except AllProvidersFailed as exc:
            caught.append(exc.last_error is not None)
        assert caught == [True] and len(first.raised) >= 1 and len(second.raised) >= 1
        assert [r() for r in first.raised + second.raised] == [None] * len(first.raised + second.raised)
    finally:
        gc.enable()


class Refusing(RateLimited):
    """Raises a new content-policy refusal on every call, as an adapter does."""

    def _error(self) -> ProviderError:
        error = err(400, "no", error_code="content_policy_violation")
        self.raised.append(weakref.ref(error))
        return error


async def test_a_call_the_policy_stopped_leaves_nothing_for_the_garbage_collector() -> None:
    """A refusal that stopped the walk is freed by reference counting once the caller lets go of it."""
    refusing = Refusing()
    route = walk(E("openai.a", "m", [refusing]), E("openai.b", "m", [Scripted("ok")]))
    gc.disable()
    try:
        with pytest.raises(RefusalError):
            await route.chat(req(), "m")
        assert len(refusing.raised) == 1 and refusing.raised[0]() is None
    finally:
        gc.enable()


#: Any failure, and HTTP errors of every class with hints at the edges of a cooldown (none, zero, negative).
_settled = st.one_of(
    _failures,
    st.builds(
        ProviderError,
        st.just("failed"),
        error_class=st.sampled_from(list(ErrorClass)),
        status=st.just(429),
        retry_after=_hints,
        auth_failure=st.booleans(),
    ),
)


_ZERO_HINT = ProviderError("failed", error_class=ErrorClass.RATE_LIMITED, status=429, retry_after=0.0)


@settings(max_examples=400, deadline=None)
@example(failure=_ZERO_HINT, index=1, tries_left=1, probing=False, with_breakers=False)
@example(
    failure=ProviderError("failed", error_class=ErrorClass.RATE_LIMITED, retry_after=-1.0),
    index=0,
    tries_left=1,
    probing=False,
    with_breakers=False,
)
@given(
    failure=_settled,
    index=st.integers(0, 2),
    tries_left=st.integers(0, 2),
    probing=st.booleans(),
    with_breakers=st.booleans(),
)
def test_settle_decides_by_the_rule_and_has_updates_exactly_when_some_are_due(
    failure: Exception, index: int, tries_left: int, probing: bool, with_breakers: bool
) -> None:
    """Any failure: ``settle`` acts as ``decide`` with ``is_dead_key_error``, with updates iff a cooldown is due."""
    store = MemoryStore()
    route, w, entry, choice = _settling(store, index, probing=probing, with_breakers=with_breakers)
    cls = error_class_of(failure)
    action, updates = w.decide_failure(index, entry, "m", choice, failure, cls, tries_left)
    pool = entry.keys
    position = Position(
        tries_left,
        index == w.order[-1],
        route.context.single,
        pool.rotates,
        pool.rotates and pool.other_usable(choice.index, NOW),
        pool.rotates and pool.other_live(choice.index, NOW),
        entry.refusal_fallback,
        cls is ErrorClass.CONTEXT_WINDOW and w.larger_entry_remains(index),
        probing,
    )
    assert action == decide(cls, position, auth_failure=is_dead_key_error(failure))
    hint = failure.retry_after if isinstance(failure, ProviderError) else None
    kid = choice.key_id
    due = (
        # a health failure is the call's one signal when the walk leaves the entry (its retries are not counted)
        (route.context.breakers is not None and ((action.health and action.step is Step.NEXT_ENTRY) or probing))
        or (action.report_key and kid is not None)
        or ((action.cool_profile or (action.cool_key and kid is not None)) and cooldown_seconds(hint) > 0)
    )
    assert (updates is not None) == due
    if updates is not None:
        asyncio.run(_awaited(updates))


async def _awaited(updates: Awaitable[None]) -> None:
    await updates


#: Request kinds: plain, a response format, a native body carrying a field only its protocol has, and one that does not.
_kinds = st.sampled_from(
    [
        req(),
        ChatRequest.of("hi", response_format=ResponseFormat(kind="json_object")),
        ChatRequest.of("hi", native=NativeRequest(protocol="anthropic", body={}, only=("messages[0] (document)",))),
        ChatRequest.of("hi", native=NativeRequest(protocol="anthropic", body={})),
    ]
)
_caps = st.sampled_from(
    [FULL, replace(FULL, vision=False), replace(FULL, structured_output=True, protocol="anthropic")]
)


@settings(max_examples=300, deadline=None)
@given(_states, _kinds, st.booleans(), st.tuples(_caps, _caps, _caps), st.booleans(), st.booleans())
def test_a_request_asking_no_capabilities_is_admitted_by_availability_alone(
    state: State, request: ChatRequest, images: bool, caps: tuple[Capabilities, ...], single: bool, long_way: bool
) -> None:
    """Whatever the entries can do and the store holds: ``availability`` alone answers as ``admits`` does."""

    async def go() -> None:
        store = LongWay() if long_way else MemoryStore()  # a store never calm, or one that may be
        clock = FakeClock(now=NOW)
        specs = [
            E(profile, "m", [Scripted("ok", caps=c) for _ in keys or ("",)], keys=list(keys))
            for (profile, keys), c in zip(PROFILES, caps, strict=True)
        ]
        route = walk(*(specs[:1] if single else specs), clock=clock, store=store, breakers=Breakers(store))
        await _fill(store, route, state)
        for i, entry in enumerate(route.entries):
            general, shortcut = route.new_walk(None, "m"), route.new_walk(None, "m")
            admitted = general.admits(i, entry, "m", request, images, stream=False)
            if asks_capabilities(request, images):
                continue
            assert general.capable(entry, "m", request, images, stream=False)
            short = shortcut.availability(i, entry, "m", False)
            assert short is admitted and shortcut.attempts == general.attempts
            assert shortcut.unavailable == general.unavailable

    asyncio.run(go())


_served_routes = st.sampled_from(
    [
        RouteRef(provider="openai.a", model="m"),
        RouteRef(provider="openai.b", model="m"),
        RouteRef(provider="anthropic.c", model="m"),
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(_served_routes, st.integers(0, 3), st.booleans()), min_size=1, max_size=8),
    st.sets(st.integers(0, 3), max_size=2),
    st.booleans(),
)
def test_a_notice_kept_on_the_plan_is_the_rule_s_notice_for_every_later_call(
    answers: list[tuple[RouteRef, int, bool]], peers: set[int], intra_family: bool
) -> None:
    """Calls of one plan, each served by any route object (kept or an equal copy) and entry: the rule's notice."""
    requested = RouteRef(provider="openai.a", model="m")
    plan = CallPlan(requested=requested, operation="chat", peers=frozenset(peers), intra_family=intra_family)
    for served, entry, copy in answers:
        answered = replace(served) if copy else served
        call = Call(plan)
        reply = call.accept(ChatResponse(text="ok"), answered, entry)
        assert reply.fallback == call.fallback(answered, entry)
        assert len(plan.notices) <= 4
    assert replace(plan, intra_family=not intra_family).notices == {}  # another plan keeps notices of its own


@settings(max_examples=300, deadline=None)
@given(_states)
def test_the_panic_order_is_every_unavailable_entry_in_the_walk_s_order(state: State) -> None:
    """Any mix of skips and no try: the walk then tries every entry it skipped as unavailable, in its order, once."""

    async def go() -> None:
        store = LongWay()
        route = _route(store)
        await _fill(store, route, state)
        w = route.new_walk(None, "m")
        skipped = []
        for i, entry in enumerate(route.entries):
            before = len(w.attempts)
            w.admits(i, entry, "m", req(), False, stream=False)
            if any(a.outcome in ("breaker_skip", "cooldown_skip") for a in w.attempts[before:]):
                skipped.append(i)
        assert w.panic_order() == skipped
        assert w.panic == bool(skipped)

    asyncio.run(go())


def test_a_walk_s_witness_made_when_asked_is_its_call_s_or_its_own_shared_with_its_side() -> None:
    """A logged walk's witness is its call id; unlogged walks get distinct ones; a hedge's side walk shares it."""
    route = _route(MemoryStore())
    logged = route.new_walk(DispatchScope([], "call-1"), "m")
    assert logged.witness == "call-1" and logged.side().witness == "call-1"
    first, second = route.new_walk(None, "m"), route.new_walk(None, "m")
    assert first.witness != second.witness and first.witness == first.witness
    side = second.side()
    assert side.witness == second.witness
