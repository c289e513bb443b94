"""The reliable walk, with fake providers and a fake clock: no real sleeping."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from fakes import E, FakeClock, Scripted, err, req, walk
from turnout.core.attribution import DispatchScope
from turnout.core.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    EmptyCompletion,
    ProviderError,
    ProviderTimeout,
    RefusalError,
)
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, ImagePart, Message, ToolCall, ToolSpec, Usage
from turnout.state import MemoryStore
from turnout.walk.reliable import ReliableProvider, Resume

# --- basics -----------------------------------------------------------------------------------


async def test_succeeds_without_retry() -> None:
    """One healthy entry answers with one call."""
    p = Scripted("ok")
    assert (await walk(E("openai.a", "m", [p])).run(req(), "m")).response.text == "ok"
    assert p.calls == ["m"]


async def test_retries_then_recovers() -> None:
    """A retryable failure is retried on the same entry, which then answers."""
    p = Scripted(err(503), "recovered")
    clock = FakeClock()
    assert (await walk(E("openai.a", "m", [p]), clock=clock).run(req(), "m")).response.text == "recovered"
    assert len(p.calls) == 2
    assert clock.sleeps == [0.5]


async def test_falls_back_after_retries_exhausted() -> None:
    """After provider_retries + 1 failures the next entry serves."""
    primary, backup = Scripted(err(500)), Scripted("from fallback")
    r = walk(E("openai.a", "m", [primary]), E("anthropic.b", "c", [backup]), retries=1)
    assert (await r.run(req(), "m")).response.text == "from fallback"
    assert (len(primary.calls), len(backup.calls)) == (2, 1)


async def test_no_sleep_after_last_try_on_an_entry() -> None:
    """Backoff sleeps happen between tries of one entry, never after its last try."""
    clock = FakeClock()
    r = walk(E("openai.a", "m", [Scripted(err(500))]), E("openai.b", "m", [Scripted("ok")]), clock=clock)
    await r.run(req(), "m")
    assert clock.sleeps == [0.5, 1.0]


async def test_backoff_doubles_and_caps_at_ten_seconds() -> None:
    """The backoff doubles after each sleep and is capped at 10 s."""
    clock = FakeClock()
    r = walk(E("openai.a", "m", [Scripted(err(500))]), retries=5, backoff_ms=3000, clock=clock)
    with pytest.raises(AllProvidersFailed):
        await r.run(req(), "m")
    assert clock.sleeps == [3.0, 6.0, 10.0, 10.0, 10.0]


async def test_backoff_is_floored_at_50ms() -> None:
    """provider_backoff_ms below 50 is raised to 50 ms."""
    clock = FakeClock()
    await walk(E("openai.a", "m", [Scripted(err(500), "ok")]), backoff_ms=0, clock=clock).run(req(), "m")
    assert clock.sleeps == [0.05]


async def test_jitter_keeps_at_least_half_the_backoff() -> None:
    """With jitter the sleep lies between half the backoff and the backoff."""
    clock = FakeClock()
    await walk(E("openai.a", "m", [Scripted(err(500), "ok")]), clock=clock, jitter=0.0).run(req(), "m")
    assert clock.sleeps == [0.25]


def test_backoff_sleep_uses_retry_after_and_caps_it() -> None:
    """Retry-After raises the sleep to max(backoff, min(hint, 30 s))."""
    r = walk(E("openai.a", "m", [Scripted()]))
    assert r.context.backoff_sleep(0.5, 3.0) == 3.0
    assert r.context.backoff_sleep(0.5, 120.0) == 30.0
    assert r.context.backoff_sleep(0.5, None) == 0.5
    assert r.context.backoff_sleep(5.0, 1.0) == 5.0


# --- non-retryable, refusals, timeouts --------------------------------------------------------


async def test_non_retryable_moves_on_at_once() -> None:
    """A 401 is not retried: the next entry serves and the primary was called once."""
    primary, backup = Scripted(err(401, "invalid api key")), Scripted("ok")
    r = walk(E("openai.a", "m", [primary]), E("anthropic.b", "c", [backup]), retries=3)
    assert (await r.run(req(), "m")).response.text == "ok"
    assert len(primary.calls) == 1


async def test_non_retryable_skips_retries_for_401() -> None:
    """With retries=5 a 401 on a single entry fails after one call."""
    p = Scripted(err(401))
    with pytest.raises(AllProvidersFailed):
        await walk(E("openai.a", "m", [p]), retries=5).run(req(), "m")
    assert len(p.calls) == 1


async def test_aggregated_error_marks_model_not_found_with_the_providers_reason() -> None:
    """A 404 model mismatch is one non-retryable event naming its entry, with the provider's own reason."""
    p = Scripted(err(404, "unsupported model: glm-4.7"))
    with pytest.raises(AllProvidersFailed) as info:
        await walk(E("zai.a", "glm-4.7", [p]), retries=3).run(req(), "glm-4.7")
    msg = str(info.value)
    assert "after 1 failure event(s)" in msg
    assert "event 1 (zai.a/glm-4.7, try 1/4): non_retryable; kind=model_not_found" in msg
    assert 'reason="unsupported model: glm-4.7"' in msg
    assert "hello" not in msg  # the prompt never


async def test_refusal_is_never_retried_nor_routed_around() -> None:
    """A refusal raises RefusalError at once; the fallback is never called."""
    primary, backup = Scripted(RefusalError()), Scripted("ok")
    r = walk(E("anthropic.a", "c", [primary]), E("openai.b", "m", [backup]))
    with pytest.raises(RefusalError) as info:
        await r.run(req(), "c")
    assert (len(primary.calls), len(backup.calls)) == (1, 0)
    assert [a.outcome for a in info.value.attempts] == ["refusal"]


async def test_refusal_fallback_opt_in_routes_to_next_entry() -> None:
    """With refusal_fallback the next entry answers a refused request."""
    primary, backup = Scripted(RefusalError()), Scripted("ok")
    r = walk(E("anthropic.a", "c", [primary], refusal_fallback=True), E("openai.b", "m", [backup]))
    assert (await r.run(req(), "c")).response.text == "ok"
    assert len(primary.calls) == 1


async def test_content_policy_error_is_a_refusal() -> None:
    """A 400 content_filter error is classified as a refusal and not retried."""
    p = Scripted(err(400, "filtered", error_code="content_filter"))
    with pytest.raises(RefusalError):
        await walk(E("azure.a", "m", [p]), E("openai.b", "m", [Scripted("ok")])).run(req(), "m")
    assert len(p.calls) == 1


async def test_timeout_moves_on_when_other_entries_exist() -> None:
    """A timed-out entry is not retried while another entry exists."""
    slow, backup = Scripted(ProviderTimeout("t", phase="first_token")), Scripted("ok")
    clock = FakeClock()
    r = walk(E("openai.a", "m", [slow]), E("openai.b", "m", [backup]), clock=clock)
    assert (await r.run(req(), "m")).response.text == "ok"
    assert len(slow.calls) == 1
    assert clock.sleeps == []


async def test_timeout_is_retried_on_the_last_entry() -> None:
    """The last entry retries a timeout with backoff."""
    p = Scripted(ProviderTimeout("t", phase="idle"), "ok")
    assert (await walk(E("openai.a", "m", [p])).run(req(), "m")).response.text == "ok"
    assert len(p.calls) == 2


async def test_unexpected_exception_is_classified_not_crashing() -> None:
    """An arbitrary exception from a custom provider is recorded as retryable, and the walk goes on."""
    p = Scripted(ValueError("bug"), "ok")
    scope = DispatchScope()
    assert (await walk(E("custom.a", "m", [p])).run(req(), "m", log=scope)).response.text == "ok"
    assert [a.outcome for a in scope.attempts] == ["retryable", "ok"]
    assert scope.attempts[0].detail == "ValueError"


# --- empty completions ------------------------------------------------------------------------


async def test_empty_completion_is_retried_then_succeeds() -> None:
    """An empty answer is retried with backoff, never returned."""
    p = Scripted(ChatResponse(text=""), "recovered")
    clock = FakeClock()
    assert (await walk(E("openai.a", "m", [p]), clock=clock).run(req(), "m")).response.text == "recovered"
    assert len(p.calls) == 2
    assert clock.sleeps == [0.5]


async def test_think_only_text_counts_as_empty() -> None:
    """A <think>-only answer is empty; with retries=0 the next entry serves."""
    primary, backup = Scripted(ChatResponse(text="<think>plan</think>")), Scripted("answer")
    r = walk(E("openai.a", "m", [primary]), E("openai.b", "m", [backup]), retries=0)
    assert (await r.run(req(), "m")).response.text == "answer"
    assert (len(primary.calls), len(backup.calls)) == (1, 1)


async def test_persistent_empty_returns_aggregated_error() -> None:
    """An always-empty entry fails after all tries with empty_response events."""
    p = Scripted(ChatResponse(text=" "))
    with pytest.raises(AllProvidersFailed) as info:
        await walk(E("openai.a", "m", [p])).run(req(), "m")
    assert len(p.calls) == 3
    assert "All model providers/models failed" in str(info.value)
    assert str(info.value).count("): empty_response") == 3


async def test_tool_calls_without_text_are_not_empty() -> None:
    """An answer with only tool calls is an answer."""
    p = Scripted(ChatResponse(text="", tool_calls=(ToolCall(id="1", name="f"),)))
    assert (await walk(E("openai.a", "m", [p])).run(req(), "m")).response.tool_calls
    assert len(p.calls) == 1


async def test_empty_completion_exception_is_retried() -> None:
    """An EmptyCompletion raised by a nested provider is treated as empty and retried."""
    p = Scripted(EmptyCompletion(), "ok")
    assert (await walk(E("openai.a", "m", [p])).run(req(), "m")).response.text == "ok"


async def test_rejected_usage_stays_on_the_rejected_attempt() -> None:
    """Usage of an empty answer is recorded on that attempt and never added to the accepted reply."""
    empty = ChatResponse(text="", usage=Usage(input_tokens=10, output_tokens=5))
    good = ChatResponse(text="ok", usage=Usage(input_tokens=10, output_tokens=5))
    p = Scripted(empty, good)
    scope = DispatchScope()
    reply = (await walk(E("openai.a", "m", [p], price=(1.0, 2.0))).run(req(), "m", log=scope)).response
    assert reply.usage == Usage(input_tokens=10, output_tokens=5)
    rejected, accepted = scope.attempts
    assert (rejected.outcome, rejected.usage, accepted.outcome) == (
        "empty",
        Usage(input_tokens=10, output_tokens=5),
        "ok",
    )
    assert rejected.cost_usd == pytest.approx((10 * 1.0 + 5 * 2.0) / 1e6)


async def test_failover_keeps_rejected_and_accepted_routes_distinct() -> None:
    """The rejected attempt names its own profile/model; the served route names the other."""
    a = Scripted(ChatResponse(text="", usage=Usage(input_tokens=3, output_tokens=1)))
    b = Scripted("ok")
    r = walk(E("openai.primary", "model-a", [a]), E("anthropic.backup", "model-b", [b]), retries=0)
    scope = DispatchScope()
    served = await r.run(req(), "model-a", None, scope)
    assert [(x.provider, x.model, x.outcome) for x in scope.attempts] == [
        ("openai.primary", "model-a", "empty"),
        ("anthropic.backup", "model-b", "ok"),
    ]
    assert (served.route.provider, served.route.model, served.entry) == ("anthropic.backup", "model-b", 1)


async def test_attempts_hold_no_content() -> None:
    """Attempt records carry no prompt, response or provider error text."""
    p = Scripted(err(500, "SECRET-ERROR-TEXT"), ChatResponse(text="RESPONSE-SENTINEL"))
    scope = DispatchScope()
    await walk(E("openai.a", "m", [p])).run(req("PROMPT-SENTINEL"), "m", log=scope)
    dump = repr(scope.attempts)
    for sentinel in ("SECRET-ERROR-TEXT", "RESPONSE-SENTINEL", "PROMPT-SENTINEL"):
        assert sentinel not in dump


async def test_concurrent_scopes_stay_task_local() -> None:
    """Two concurrent calls in their own scopes each see only their own attempts."""
    r1 = walk(E("openai.a", "m", [Scripted(err(500), "one")]))
    r2 = walk(E("openai.b", "m", [Scripted("two")]))

    async def run(r: ReliableProvider, text: str) -> list[str]:
        scope = DispatchScope()
        await r.run(req(), "m", log=scope)
        await asyncio.sleep(0)
        return [a.provider for a in scope.attempts]

    one, two = await asyncio.gather(run(r1, "one"), run(r2, "two"))
    assert one == ["openai.a", "openai.a"] and two == ["openai.b"]


async def test_attempts_survive_a_failed_walk() -> None:
    """AllProvidersFailed carries every attempt, including rejected usage."""
    a = Scripted(ChatResponse(text="", usage=Usage(input_tokens=10, output_tokens=5)))
    b = Scripted(err(502))
    with pytest.raises(AllProvidersFailed) as info:
        await walk(E("openai.a", "m", [a]), E("openai.b", "m", [b]), retries=0).run(req(), "m")
    assert [(x.outcome, x.usage) for x in info.value.attempts] == [
        ("empty", Usage(input_tokens=10, output_tokens=5)),
        ("retryable", None),
    ]


# --- the aggregate error ----------------------------------------------------------------------


async def test_aggregated_error_when_all_fail() -> None:
    """Two failing entries give two numbered events naming their entries, without a server error's text."""
    r = walk(
        E("openai.p1", "m", [Scripted(err(500, "p1 error"))]),
        E("openai.p2", "m", [Scripted(err(500, "p2 error"))]),
        retries=0,
    )
    with pytest.raises(AllProvidersFailed) as info:
        await r.run(req(), "m")
    msg = str(info.value)
    assert msg.startswith("All model providers/models failed after 2 failure event(s). Events:")
    assert "event 1 (openai.p1/m, try 1/1): retryable" in msg and "event 2 (openai.p2/m, try 1/1): retryable" in msg
    assert "p1 error" not in msg and "p2 error" not in msg


async def test_excessive_failure_events_are_bounded() -> None:
    """64 failing entries: at most 2 KiB, the first 8 events, and an omission marker."""
    entries = [E(f"openai.p{i}", f"secret-model-{i}", [Scripted(err(500, "sk-live-secret"))]) for i in range(64)]
    with pytest.raises(AllProvidersFailed) as info:
        await walk(*entries, retries=0).run(req(), "m")
    msg = str(info.value)
    assert len(msg.encode()) <= 2048
    assert "after 64 failure event(s)" in msg
    assert "event 8 " in msg and "event 9 " not in msg
    assert "[56 additional failure event(s) omitted]" in msg
    assert "sk-live" not in msg  # a server error's text is never quoted
    assert "(openai.p7/secret-model-7, try 1/1)" in msg and "openai.p8" not in msg
    assert len(info.value.attempts) == 64


# --- rate limits, cooldowns, Retry-After -------------------------------------------------------


async def test_rate_limit_cools_down_profile_and_uses_fallback() -> None:
    """A 429 with Retry-After cools the profile down and the next entry serves; one primary call."""
    clock = FakeClock()
    primary, backup = Scripted(err(429, headers={"Retry-After": "30"})), Scripted("ok")
    r = walk(E("openai.a", "m", [primary]), E("anthropic.b", "c", [backup]), retries=5, clock=clock)
    assert (await r.run(req(), "m")).response.text == "ok"
    assert len(primary.calls) == 1
    assert r.context.store.cooldown_until("openai.a", clock.now) == clock.now + 30


async def test_cooldown_is_capped_at_60s_and_defaults_to_10s() -> None:
    """The cooldown is the hint capped at 60 s, or 10 s without a hint."""
    clock = FakeClock()
    store = MemoryStore()
    r = walk(
        E("openai.a", "m", [Scripted(err(429, headers={"Retry-After": "600"}))]),
        E("openai.b", "m", [Scripted(err(429))]),
        E("openai.c", "m", [Scripted("ok")]),
        clock=clock,
        store=store,
    )
    await r.run(req(), "m")
    assert store.cooldowns(clock.now) == {"openai.a": clock.now + 60, "openai.b": clock.now + 10}


async def test_cooling_profile_skips_all_its_entries() -> None:
    """A 429 on a profile's primary skips its fallback models too, with cooldown_skip attempts."""
    p1, p2, other = Scripted(err(429)), Scripted("never"), Scripted("ok")
    r = walk(E("openai.work", "m1", [p1]), E("openai.work", "m2", [p2]), E("anthropic.work", "c", [other]))
    scope = DispatchScope()
    assert (await r.run(req(), "m1", log=scope)).response.text == "ok"
    assert (len(p1.calls), len(p2.calls)) == (1, 0)
    assert [a.outcome for a in scope.attempts] == ["rate_limited", "cooldown_skip", "ok"]


async def test_next_call_during_cooldown_skips_without_calling() -> None:
    """While a profile cools down, later calls skip it without an upstream call."""
    clock = FakeClock()
    primary, backup = Scripted(err(429, headers={"Retry-After": "5"}), "back"), Scripted("ok")
    r = walk(E("openai.a", "m", [primary]), E("openai.b", "m", [backup]), clock=clock)
    await r.run(req(), "m")
    scope = DispatchScope()
    await r.run(req(), "m", log=scope)
    assert len(primary.calls) == 1
    assert scope.attempts[0].outcome == "cooldown_skip"
    assert scope.attempts[0].retry_after == pytest.approx(5)
    clock.now += 5.01
    assert (await r.run(req(), "m")).response.text == "back"


async def test_cooldown_skip_summary_is_content_free() -> None:
    """A pre-set cooldown yields a 'rate_limit_cooldown' event, skipped, with kind/phase, naming its entry."""
    store = MemoryStore()
    clock = FakeClock()
    await store.set_cooldown("openai.primary", clock.now + 100)
    primary = Scripted("never")
    r = walk(
        E("openai.primary", "m", [primary]),
        E("openai.backup", "m", [Scripted(err(500))]),
        retries=0,
        store=store,
        clock=clock,
    )
    with pytest.raises(AllProvidersFailed) as info:
        await r.run(req(), "m")
    msg = str(info.value)
    assert primary.calls == []
    assert "event 1 (openai.primary/m, skipped): rate_limit_cooldown; kind=rate_limited; phase=cooldown" in msg
    assert "event 2 (openai.backup/m, try 1/1): retryable" in msg
    assert "reason=" not in msg  # neither a cooldown nor a 5xx has one


async def test_expired_cooldown_cleans_itself() -> None:
    """A Retry-After of 0 gives a cooldown that is already over."""
    clock = FakeClock()
    r = walk(
        E("openai.a", "m", [Scripted(err(429, headers={"Retry-After": "0"}))]),
        E("openai.b", "m", [Scripted("ok")]),
        clock=clock,
    )
    await r.run(req(), "m")
    assert r.context.store.cooldown_until("openai.a", clock.now) is None
    assert r.context.store.cooldowns(clock.now) == {}


class _RecordingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[str, float]] = []

    async def set_cooldown(self, key: str, until: float) -> None:
        self.writes.append((key, until))
        await super().set_cooldown(key, until)


@pytest.mark.parametrize(("retry_after", "writes"), [("0", 0), ("0.5", 1), (None, 1)])
async def test_zero_length_cooldown_is_not_written(retry_after: str | None, writes: int) -> None:
    """A zero hint cools nothing down, so nothing goes to the store (a shared one would pay a write for it)."""
    clock, store = FakeClock(), _RecordingStore()
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    r = walk(
        E("openai.a", "m", [Scripted(err(429, headers=headers))]),
        E("openai.b", "m", [Scripted("ok")]),
        clock=clock,
        store=store,
    )
    scope = DispatchScope()
    assert (await r.run(req(), "m", log=scope)).response.text == "ok"
    assert [a.outcome for a in scope.attempts] == ["rate_limited", "ok"]
    assert [key for key, _ in store.writes] == ["openai.a"] * writes


async def test_single_entry_429_is_retried_with_retry_after() -> None:
    """With a single entry a 429 is retried after max(backoff, Retry-After)."""
    clock = FakeClock()
    p = Scripted(err(429, headers={"Retry-After": "2"}), "ok")
    assert (await walk(E("openai.a", "m", [p]), clock=clock).run(req(), "m")).response.text == "ok"
    assert clock.sleeps == [2.0]


async def test_retry_after_is_capped_at_30s_for_sleeps() -> None:
    """A huge Retry-After on a single entry sleeps at most 30 s."""
    clock = FakeClock()
    p = Scripted(err(429, headers={"Retry-After": "3600"}), "ok")
    await walk(E("openai.a", "m", [p]), clock=clock).run(req(), "m")
    assert clock.sleeps == [30.0]


async def test_quota_exhaustion_moves_on_without_retry() -> None:
    """insufficient_quota (a 429) is not retried and does not cool the profile down."""
    clock = FakeClock()
    p = Scripted(err(429, "You exceeded your current quota", error_code="insufficient_quota"))
    r = walk(E("openai.a", "m", [p]), E("openai.b", "m", [Scripted("ok")]), retries=5, clock=clock)
    assert (await r.run(req(), "m")).response.text == "ok"
    assert len(p.calls) == 1
    assert clock.sleeps == []


async def test_plan_restricted_429_fails_after_one_call() -> None:
    """A business 429 on a single entry is not retried."""
    p = Scripted(err(429, "plan does not include glm-5", error_code="1311"))
    with pytest.raises(AllProvidersFailed) as info:
        await walk(E("zai.a", "m", [p]), retries=5).run(req(), "m")
    assert len(p.calls) == 1
    assert "rate_limited_non_retryable" in str(info.value)


# --- key rotation ------------------------------------------------------------------------------


async def test_429_retry_uses_the_next_key_and_cools_only_that_key() -> None:
    """In a key pool the retry after a 429 uses another key at once; the profile stays available."""
    clock = FakeClock()
    key_a, key_b = Scripted(err(429, headers={"Retry-After": "20"})), Scripted("ok")
    r = walk(
        E("openai.a", "m", [key_a, key_b], keys=["sk-a", "sk-b"]), E("openai.b", "m", [Scripted("no")]), clock=clock
    )
    scope = DispatchScope()
    assert (await r.run(req(), "m", log=scope)).response.text == "ok"
    first, second = scope.attempts
    assert first.key_id != second.key_id and None not in (first.key_id, second.key_id)
    assert clock.sleeps == []
    pool = r.entries[0].keys
    assert r.context.store.cooldown_until(pool.key_cooldown(first.key_id), clock.now) == clock.now + 20  # type: ignore[arg-type]
    assert r.context.store.cooldown_until("openai.a", clock.now) is None


async def test_rotation_is_round_robin_and_skips_cooling_keys() -> None:
    """Calls rotate over the pool; a cooling key is skipped until its cooldown ends."""
    clock = FakeClock()
    a, b, c = Scripted("a", err(429, headers={"Retry-After": "5"}), "a"), Scripted("b"), Scripted("c")
    r = walk(E("openai.p", "m", [a, b, c], keys=["k1", "k2", "k3"]), clock=clock)
    texts = [(await r.run(req(), "m")).response.text for _ in range(4)]
    assert texts == ["a", "b", "c", "b"]  # the 4th call's 429 on k1 retried on k2
    assert (await r.run(req(), "m")).response.text == "c"
    clock.now += 6
    assert (await r.run(req(), "m")).response.text == "a"


async def test_rejected_key_is_left_for_the_next_key() -> None:
    """A key rejected with 401 is not retried: the same call moves on to the pool's next key."""
    bad, good = Scripted(err(401)), Scripted("ok")
    r = walk(E("openai.a", "m", [bad, good], keys=["sk-bad", "sk-good"]), retries=3)
    assert (await r.run(req(), "m")).response.text == "ok"
    assert (len(bad.calls), len(good.calls)) == (1, 1)


async def test_a_moderation_403_leaves_the_key_alive() -> None:
    """A 403 moderation block is not an auth failure: the walk moves on and reports no key."""
    moderated, other = Scripted(err(403, "Your input was flagged by moderation")), Scripted("ok")
    store = MemoryStore()
    r = walk(
        E("openrouter.a", "m", [moderated, Scripted("no")], keys=["k1", "k2"]), E("openai.b", "m", [other]), store=store
    )
    assert (await r.run(req(), "m")).response.text == "ok"
    assert len(moderated.calls) == 1
    assert store.key_records() == []  # not even suspected


async def test_all_keys_cooling_skips_the_profile() -> None:
    """When every key of a pool cools down the profile's entries are skipped."""
    clock = FakeClock()
    k1, k2, other = Scripted(err(429)), Scripted(err(429)), Scripted("ok")
    r = walk(E("openai.a", "m", [k1, k2], keys=["k1", "k2"]), E("anthropic.b", "c", [other]), clock=clock)
    assert (await r.run(req(), "m")).response.text == "ok"
    scope = DispatchScope()
    assert (await r.run(req(), "m", log=scope)).response.text == "ok"
    assert scope.attempts[0].outcome == "cooldown_skip"
    assert (len(k1.calls), len(k2.calls)) == (1, 1)


# --- context window --------------------------------------------------------------------------


async def test_context_window_skips_to_a_larger_entry() -> None:
    """A context overflow is never retried; smaller entries are skipped; a larger one serves."""
    small, same_size, large = Scripted(err(400, "prompt is too long")), Scripted("no"), Scripted("big answer")
    r = walk(
        E("anthropic.a", "small", [small], context_window=100_000),
        E("openai.b", "same", [same_size], context_window=100_000),
        E("gemini.c", "large", [large], context_window=1_000_000),
        retries=4,
    )
    assert (await r.run(req(), "small")).response.text == "big answer"
    assert (len(small.calls), len(same_size.calls), len(large.calls)) == (1, 0, 1)


async def test_context_window_unknown_size_is_tried() -> None:
    """An entry whose window is unknown is not known to be too small, so it is tried."""
    small, unknown = Scripted(err(400, "maximum context length exceeded")), Scripted("ok")
    r = walk(E("openai.a", "s", [small], context_window=8000), E("openai.b", "u", [unknown]))
    assert (await r.run(req(), "s")).response.text == "ok"


async def test_context_window_exceeded_when_no_larger_entry() -> None:
    """With no larger entry the walk fails at once with ContextWindowExceeded naming the limit."""
    a, b = Scripted(err(None, "ctx", error_code="context_length_exceeded")), Scripted("never")
    r = walk(
        E("openai.a", "m", [a], context_window=128_000), E("openai.b", "mini", [b], context_window=64_000), retries=4
    )
    with pytest.raises(ContextWindowExceeded) as info:
        await r.run(req(), "m")
    assert info.value.limit == 128_000
    assert "128000" in str(info.value)
    assert (len(a.calls), len(b.calls)) == (1, 0)
    assert [x.outcome for x in info.value.attempts] == ["context_window"]


async def test_context_window_same_model_is_never_retried() -> None:
    """Another entry with the same model is skipped after an overflow, window unknown or not."""
    a, b = Scripted(err(400, "prompt is too long")), Scripted("never")
    r = walk(E("anthropic.a", "claude", [a]), E("anthropic.b", "claude", [b]))
    with pytest.raises(ContextWindowExceeded):
        await r.run(req(), "claude")
    assert len(b.calls) == 0


# --- capabilities, images, tools --------------------------------------------------------------


async def test_images_skip_entries_without_vision() -> None:
    """A request with an image is not sent to an entry that cannot see images."""
    text_only, vision = Scripted("blind", caps=Capabilities(native_tools=True)), Scripted("seen")
    r = walk(E("ollama.a", "l", [text_only]), E("openai.b", "m", [vision]))
    msg = Message.user([ImagePart(url="data:image/png;base64,AAAA")])
    from turnout.core.types import ChatRequest

    assert (await r.run(ChatRequest(messages=(msg,)), "l")).response.text == "seen"
    assert text_only.calls == []


async def test_image_requests_are_routed_alike_before_and_after_text_requests() -> None:
    """What the walk learns about its entries' vision per model does not leak from one request to the next."""
    from turnout.core.types import ChatRequest

    text_only = Scripted("blind", "blind", caps=Capabilities(native_tools=True))
    vision = Scripted("seen", "seen")
    r = walk(E("ollama.a", "l", [text_only]), E("openai.b", "m", [vision]))
    image = ChatRequest(messages=(Message.user([ImagePart(url="data:image/png;base64,AAAA")]),))
    assert (await r.run(req(), "l")).response.text == "blind"
    assert (await r.run(image, "l")).response.text == "seen"
    assert (await r.run(req(), "l")).response.text == "blind"
    assert (await r.run(image, "l")).response.text == "seen"
    seeing = walk(E("openai.a", "m", [Scripted("first")]), E("openai.b", "m", [Scripted("second")]))
    assert (await seeing.run(image, "m")).response.text == "first"


async def test_images_without_any_vision_entry_are_unsupported() -> None:
    """A request with an image and no entry that can see images is a typed UnsupportedRequest."""
    from turnout.core.errors import UnsupportedRequest
    from turnout.core.types import ChatRequest

    r = walk(E("ollama.a", "l", [Scripted("blind", caps=Capabilities(native_tools=True))]))
    msg = Message.user([ImagePart(url="data:image/png;base64,AAAA")])
    with pytest.raises(UnsupportedRequest):
        await r.run(ChatRequest(messages=(msg,)), "l")


async def test_tools_are_prompt_guided_for_non_native_entries() -> None:
    """An entry without native tools gets the tools as instructions and its <tool_call> blocks parsed."""
    from turnout.core.types import ChatRequest

    p = Scripted('<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>', caps=Capabilities())
    r = walk(E("custom.a", "m", [p]))
    resp = (await r.run(ChatRequest.of("hi", tools=[ToolSpec(name="f")]), "m")).response
    assert [c.name for c in resp.tool_calls] == ["f"]
    assert p.requests[0].tools == ()


# --- pinning, served route, recovery, cancellation -------------------------------------------


async def test_pinned_entries_send_their_pin() -> None:
    """A pinned entry rewrites the model; an unpinned one forwards the caller's."""
    pinned, unpinned = Scripted(err(500)), Scripted("ok")
    r = walk(E("openai.a", "pin", [pinned]), E("openai.b", None, [unpinned]), retries=0)
    served = await r.run(req(), "requested")
    assert pinned.calls == ["pin"] and unpinned.calls == ["requested"]
    assert served.route.model == "requested"


async def test_model_failover_tries_fallback_model() -> None:
    """Two pinned models of one profile are tried in order."""
    p = Scripted(err(500, "model unavailable"), "ok")
    r = walk(E("anthropic.a", "claude-opus", [p]), E("anthropic.a", "claude-sonnet", [p]), retries=0)
    await r.run(req(), "claude-opus")
    assert p.calls == ["claude-opus", "claude-sonnet"]


async def test_recovery_skips_exactly_the_failed_entry() -> None:
    """A recovery walk skips only the entry whose stream failed, keeping earlier entries."""
    first, failed, later = Scripted(err(401)), Scripted("never"), Scripted("backup")
    r = walk(E("openai.a", "m", [first]), E("openai.b", "m", [failed]), E("openai.b", "m", [later]))
    served = await r.run(req(), "m", resume=Resume(entry=1, tries=0))
    assert served.response.text == "backup"
    assert (len(first.calls), len(failed.calls), len(later.calls)) == (1, 0, 1)


async def test_single_entry_recovery_gets_one_attempt() -> None:
    """A recovery with tries=1 makes exactly one attempt on the failed entry."""
    p = Scripted(err(500))
    r = walk(E("openai.a", "m", [p]), retries=3)
    with pytest.raises(AllProvidersFailed):
        await r.run(req(), "m", resume=Resume(entry=0, tries=1))
    assert len(p.calls) == 1


async def test_cancellation_is_recorded_and_propagates() -> None:
    """A cancelled call records a cancelled attempt and is not retried."""
    started = asyncio.Event()

    class Hang(Scripted):
        async def chat(self, request, model, temperature=None):  # type: ignore[no-untyped-def]
            self.calls.append(model)
            started.set()
            await asyncio.Event().wait()
            raise AssertionError

    p = Hang()
    r = walk(E("openai.a", "m", [p]), E("openai.b", "m", [Scripted("ok")]))
    scope = DispatchScope()
    task = asyncio.create_task(r.run(req(), "m", log=scope))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [a.outcome for a in scope.attempts] == ["cancelled"]
    assert len(p.calls) == 1


# --- failures freed, witnesses ----------------------------------------------------------------


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


class Refusing(RateLimited):
    """Raises a new content-policy refusal on every call, as an adapter does."""

    def _error(self) -> ProviderError:
        error = err(400, "no", error_code="content_policy_violation")
        self.raised.append(weakref.ref(error))
        return error


async def test_a_served_failover_leaves_nothing_for_the_garbage_collector() -> None:
    """A call served after a failed try frees that failure by reference counting: no cycle waits for the collector."""
    primary = RateLimited()
    route = walk(E("openai.a", "m", [primary]), E("openai.b", "m", [Scripted("ok")]))
    gc.disable()
    try:
        scope = DispatchScope()
        assert (await route.run(req(), "m", log=scope)).response.text == "ok"
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
            await route.run(req(), "m")
        except AllProvidersFailed as exc:
            caught.append(exc.last_error is not None)
        assert caught == [True] and len(first.raised) >= 1 and len(second.raised) >= 1
        assert [r() for r in first.raised + second.raised] == [None] * len(first.raised + second.raised)
    finally:
        gc.enable()


async def test_a_call_the_policy_stopped_leaves_nothing_for_the_garbage_collector() -> None:
    """A refusal that stopped the walk is freed by reference counting once the caller lets go of it."""
    refusing = Refusing()
    route = walk(E("openai.a", "m", [refusing]), E("openai.b", "m", [Scripted("ok")]))
    gc.disable()
    try:
        with pytest.raises(RefusalError):
            await route.run(req(), "m")
        assert len(refusing.raised) == 1 and refusing.raised[0]() is None
    finally:
        gc.enable()


def test_a_walk_s_witness_is_its_call_s_or_its_own_shared_with_its_side() -> None:
    """A logged walk's witness is its call id; unlogged walks get distinct ones; a hedge's side walk shares it."""
    route = walk(E("openai.a", "m", [Scripted("ok")]))
    logged = route.new_walk(DispatchScope([], "call-1"), "m")
    assert logged.witness == "call-1" and logged.side().witness == "call-1"
    first, second = route.new_walk(None, "m"), route.new_walk(None, "m")
    assert first.witness != second.witness and first.witness == first.witness
    assert second.side().witness == second.witness
