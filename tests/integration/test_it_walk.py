"""The reliable walk through real HTTP: Client → adapters → simulator, for every protocol.

Each scenario runs against the OpenAI, Anthropic, Gemini and Ollama wire protocols; the simulator's log
proves what reached the upstream (how many hits, on which model, with which key).
"""

from __future__ import annotations

import time

import pytest
from it_support import FAMILIES, KEY, KID, client, config, profile, trail, upstream

from turnout.core.errors import AllProvidersFailed, ContextWindowExceeded, RefusalError
from turnout.core.secrets import key_id
from turnout.sim import Simulator

each_family = pytest.mark.parametrize("family", FAMILIES)


@each_family
async def test_retry_after_hint_sets_the_sleep_before_the_retry(sim: Simulator, family: str) -> None:
    """A single entry's 429 with Retry-After 0.3 s is retried after at least 0.3 s, not the 50 ms backoff."""
    cfg = config({f"{family}.main": profile(sim, family, "sim-429-ra0.3-then-ok")})
    async with client(cfg) as c:
        started = time.perf_counter()
        reply = await c.chat("hello there")
        elapsed = time.perf_counter() - started
    main = f"{family}.main"
    assert trail(reply.attempts) == [
        (main, "sim-429-ra0.3-then-ok", "rate_limited", 429),
        (main, "sim-429-ra0.3-then-ok", "ok", None),
    ]
    assert reply.attempts[0].retry_after == pytest.approx(0.3)
    assert reply.fallback is None
    first, second = await sim.wait_for_log(2)
    assert (first.outcome, second.outcome) == ("status:429", "ok")
    assert second.time - first.time >= 0.3
    assert 0.3 <= elapsed < 0.8


@each_family
async def test_retry_after_ms_hint_sets_the_sleep_before_the_retry(sim: Simulator, family: str) -> None:
    """``retry-after-ms: 300`` (Gemini: ``RetryInfo.retryDelay``) also raises the sleep to 0.3 s."""
    cfg = config({f"{family}.main": profile(sim, family, "sim-429-ms300-then-ok")})
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert [a.outcome for a in reply.attempts] == ["rate_limited", "ok"]
    assert reply.attempts[0].retry_after == pytest.approx(0.3)
    first, second = await sim.wait_for_log(2)
    assert second.time - first.time >= 0.3


@each_family
async def test_persistent_429_cools_down_skips_and_fails_with_retry_after(sim: Simulator, family: str) -> None:
    """A persistent 429 cools the profile down (its fallback model is skipped); the next call skips every cooling
    entry, then tries them all in order as if closed (the panic rule): the fallback model serves it.
    """
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config(
        {
            main: profile(sim, family, "sim-429-ra5", fallback_models=["sim-ok"], fallback=[spare]),
            spare: profile(sim, family, "sim-429-ra7"),
        }
    )
    async with client(cfg) as c:
        with pytest.raises(AllProvidersFailed) as first:
            await c.chat("hello there")
        assert trail(first.value.attempts) == [
            (main, "sim-429-ra5", "rate_limited", 429),
            (main, "sim-ok", "cooldown_skip", None),
            (spare, "sim-429-ra7", "rate_limited", 429),
        ]
        assert first.value.retry_after == pytest.approx(5.0, abs=0.5)
        message = str(first.value)
        assert message.startswith("All model providers/models failed after 3 failure event(s). Events:")
        assert "phase=cooldown" in message
        for secret in ("hello there", KEY, KID):
            assert secret not in message
        assert f"({main}/sim-429-ra5, try 1/" in message and f"({main}/sim-ok, skipped)" in message
        cooling = c.status()["cooldowns"]
        assert set(cooling) == {main, spare}
        assert 4.0 < cooling[main] <= 5.0 and 6.0 < cooling[spare] <= 7.0

        second = await c.chat("hello again")
        assert [(a.model, a.outcome) for a in second.attempts] == [
            ("sim-429-ra5", "cooldown_skip"),
            ("sim-ok", "cooldown_skip"),
            ("sim-429-ra7", "cooldown_skip"),
            ("sim-429-ra5", "rate_limited"),  # every entry unavailable: each is tried in order
            ("sim-ok", "ok"),
        ]
        assert second.served.model == "sim-ok"
    assert await upstream(sim, 4) == [
        ("sim-429-ra5", "status:429"),
        ("sim-429-ra7", "status:429"),
        ("sim-429-ra5", "status:429"),
        ("sim-ok", "ok"),
    ]


@each_family
async def test_server_error_once_is_retried_on_the_same_entry(sim: Simulator, family: str) -> None:
    """A 500 then an answer is a pure retry of the same entry: served as requested, no fallback notice."""
    main = f"{family}.main"
    cfg = config(
        {
            main: profile(sim, family, "sim-500-then-ok", fallback=[f"{family}.spare"]),
            f"{family}.spare": profile(sim, family, "sim-ok-t1"),
        }
    )
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert trail(reply.attempts) == [(main, "sim-500-then-ok", "retryable", 500), (main, "sim-500-then-ok", "ok", None)]
    assert reply.text == "Hello from the Turnout simulator."
    assert reply.served == reply.requested
    assert reply.fallback is None
    assert await upstream(sim, 2) == [("sim-500-then-ok", "status:500"), ("sim-500-then-ok", "ok")]


@each_family
async def test_persistent_503_exhausts_the_entry_then_falls_back(sim: Simulator, family: str) -> None:
    """A persistent 503 is tried provider_retries + 1 times, then the next profile serves."""
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config({main: profile(sim, family, "sim-503", fallback=[spare]), spare: profile(sim, family, "sim-ok-t4")})
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert trail(reply.attempts) == [(main, "sim-503", "retryable", 503)] * 3 + [(spare, "sim-ok-t4", "ok", None)]
    assert reply.text == "lorem ipsum dolor sit"
    assert (reply.served.provider, reply.served.model) == (spare, "sim-ok-t4")
    assert reply.fallback is not None and not reply.fallback.cross_family
    assert reply.notice is None  # same family: announced only with [notices] intra_family = true
    assert await upstream(sim, 4) == [("sim-503", "status:503")] * 3 + [("sim-ok-t4", "ok")]


@each_family
async def test_connection_reset_before_headers_is_retried(sim: Simulator, family: str) -> None:
    """A TCP reset before any header is a retryable connection failure, retried on the same entry."""
    main = f"{family}.main"
    cfg = config({main: profile(sim, family, "sim-reset-then-ok")})
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert trail(reply.attempts) == [
        (main, "sim-reset-then-ok", "retryable", None),
        (main, "sim-reset-then-ok", "ok", None),
    ]
    assert reply.attempts[0].detail == "connection"
    assert reply.fallback is None
    assert await upstream(sim, 2) == [("sim-reset-then-ok", "reset"), ("sim-reset-then-ok", "ok")]


@each_family
async def test_silent_upstream_times_out_once_then_falls_back(sim: Simulator, family: str) -> None:
    """A silent entry is left after one first-token timeout (not retried), within a bounded total time."""
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config(
        {
            main: profile(sim, family, "sim-silence", first_token_timeout_secs=0.3, fallback=[spare]),
            spare: profile(sim, family, "sim-ok-t2"),
        }
    )
    async with client(cfg) as c:
        started = time.perf_counter()
        reply = await c.chat("hello there")
        elapsed = time.perf_counter() - started
    assert trail(reply.attempts) == [(main, "sim-silence", "timeout", None), (spare, "sim-ok-t2", "ok", None)]
    assert reply.attempts[0].detail == "timeout:first_token"
    assert reply.text == "lorem ipsum"
    assert 0.3 <= elapsed < 1.0
    # the timed-out request was abandoned: the simulator sees the client go away
    assert await upstream(sim, 2) == [("sim-silence", "client_disconnected"), ("sim-ok-t2", "ok")]


@each_family
async def test_context_overflow_skips_to_a_larger_context_entry(sim: Simulator, family: str) -> None:
    """A context-length error is not retried; a smaller fallback is never sent the request; a larger one serves."""
    main, small, large = f"{family}.main", f"{family}.small", f"{family}.large"
    cfg = config(
        {
            main: profile(sim, family, "sim-context-lim8000", context_window=8000, fallback=[small, large]),
            small: profile(sim, family, "sim-ok-t1", context_window=4000),
            large: profile(sim, family, "sim-ok-t3", context_window=100000),
        }
    )
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert trail(reply.attempts) == [
        (main, "sim-context-lim8000", "context_window", 400),
        (large, "sim-ok-t3", "ok", None),
    ]
    assert (reply.served.provider, reply.text) == (large, "lorem ipsum dolor")
    assert await upstream(sim, 2) == [("sim-context-lim8000", "status:400"), ("sim-ok-t3", "ok")]


@each_family
async def test_context_overflow_without_a_larger_entry_is_typed(sim: Simulator, family: str) -> None:
    """With no larger-context entry left, ContextWindowExceeded names the limit; nothing else is sent."""
    main, small = f"{family}.main", f"{family}.small"
    cfg = config(
        {
            main: profile(sim, family, "sim-context-lim8000", context_window=8000, fallback=[small]),
            small: profile(sim, family, "sim-ok-t1", context_window=4000),
        }
    )
    async with client(cfg) as c:
        with pytest.raises(ContextWindowExceeded) as caught:
            await c.chat("hello there")
    assert caught.value.limit == 8000
    assert "8000 tokens" in str(caught.value)
    assert trail(caught.value.attempts) == [(main, "sim-context-lim8000", "context_window", 400)]
    assert await upstream(sim, 1) == [("sim-context-lim8000", "status:400")]


@each_family
async def test_content_policy_error_is_a_refusal_not_retried_nor_routed(sim: Simulator, family: str) -> None:
    """A content-policy 400 raises RefusalError after one hit; the fallback profile is never asked."""
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config({main: profile(sim, family, "sim-policy", fallback=[spare]), spare: profile(sim, family, "sim-ok")})
    async with client(cfg) as c:
        with pytest.raises(RefusalError) as caught:
            await c.chat("hello there")
    assert trail(caught.value.attempts) == [(main, "sim-policy", "refusal", 400)]
    assert await upstream(sim, 1) == [("sim-policy", "status:400")]


@each_family
async def test_content_policy_error_is_routed_when_the_profile_opts_in(sim: Simulator, family: str) -> None:
    """With ``refusal_fallback = true`` a refusal moves on to the next entry (still not retried)."""
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config(
        {
            main: profile(sim, family, "sim-policy", refusal_fallback=True, fallback=[spare]),
            spare: profile(sim, family, "sim-ok-t2"),
        }
    )
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    assert trail(reply.attempts) == [(main, "sim-policy", "refusal", 400), (spare, "sim-ok-t2", "ok", None)]
    assert reply.text == "lorem ipsum"
    assert await upstream(sim, 2) == [("sim-policy", "status:400"), ("sim-ok-t2", "ok")]


#: What each protocol's "quota exhausted" error means: OpenAI ``insufficient_quota`` is
#: billing-level; Anthropic's "credit balance is too low" is a plain 400; Gemini's per-day QuotaFailure id
#: and Ollama's bare 429 ("usage limit", no quota word) are rate limits, so the profile cools down.
QUOTA = {
    "openai": ("rate_limited_non_retryable", 429),
    "anthropic": ("non_retryable", 400),
    "gemini": ("rate_limited", 429),
    "ollama": ("rate_limited", 429),
}


@each_family
async def test_quota_exhausted_is_not_retried(sim: Simulator, family: str) -> None:
    """An exhausted quota moves on to the next profile after a single hit."""
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config({main: profile(sim, family, "sim-quota", fallback=[spare]), spare: profile(sim, family, "sim-ok-t1")})
    async with client(cfg) as c:
        reply = await c.chat("hello there")
    outcome, status = QUOTA[family]
    assert trail(reply.attempts) == [(main, "sim-quota", outcome, status), (spare, "sim-ok-t1", "ok", None)]
    assert await upstream(sim, 2) == [("sim-quota", f"status:{status}"), ("sim-ok-t1", "ok")]


@each_family
async def test_rejected_key_is_dead_once_another_call_confirms_it(sim: Simulator, family: str) -> None:
    """A rejected key (401) moves on at once; rejected again by another call it is dead and no longer sent."""
    main, spare = f"{family}.main", f"{family}.spare"
    spare_key = "sk-it-spare-key-0002"
    status = 400 if family == "gemini" else 401  # Gemini rejects a bad key with 400 API_KEY_INVALID
    cfg = config(
        {
            main: profile(sim, family, "sim-auth", fallback=[spare]),
            spare: profile(sim, family, "sim-ok-t1", key=spare_key),
        }
    )
    async with client(cfg) as c:
        first = await c.chat("hello there")
        assert trail(first.attempts) == [(main, "sim-auth", "non_retryable", status), (spare, "sim-ok-t1", "ok", None)]
        assert first.attempts[0].key_id == KID
        assert c.status()["dead_keys"] == []  # one call's word is not enough
        second = await c.chat("hello again")
        assert trail(second.attempts) == trail(first.attempts)
        (dead,) = c.status()["dead_keys"]
        assert (dead["key_id"], dead["state"], dead["strikes"]) == (KID, "dead", 1)
        third = await c.chat("and again")
    assert trail(third.attempts) == [(main, "sim-auth", "non_retryable", None), (spare, "sim-ok-t1", "ok", None)]
    assert third.attempts[0].detail == "no_live_key"
    log = await sim.wait_for_log(5)
    assert [(e.model, e.outcome, e.key_id) for e in log] == [
        ("sim-auth", f"status:{status}", KID),
        ("sim-ok-t1", "ok", key_id(spare_key)),
        ("sim-auth", f"status:{status}", KID),
        ("sim-ok-t1", "ok", key_id(spare_key)),
        ("sim-ok-t1", "ok", key_id(spare_key)),
    ]


@each_family
async def test_key_rotation_retries_a_429_with_the_other_key(sim: Simulator, family: str) -> None:
    """A 429 on key A is retried at once with key B (the simulator sees B), and later calls skip cooling A."""
    main = f"{family}.main"
    key_a, key_b = "sk-a", "sk-b"
    cfg = config({main: profile(sim, family, "sim-429-ra5-then-ok", key=None, api_keys=[key_a, key_b])})
    async with client(cfg) as c:
        started = time.perf_counter()
        first = await c.chat("hello there")
        assert time.perf_counter() - started < 1.0  # the 5 s hint cools key A; B is used without waiting
        assert [(a.outcome, a.status, a.key_id) for a in first.attempts] == [
            ("rate_limited", 429, key_id(key_a)),
            ("ok", None, key_id(key_b)),
        ]
        assert first.fallback is None
        assert set(c.status()["cooldowns"]) == {f"{main}#{key_id(key_a)}"}  # the key cools down, not the profile
        second = await c.chat("hello again")
        third = await c.chat("and again")
    assert [(a.outcome, a.key_id) for a in second.attempts] == [("ok", key_id(key_b))]
    assert [(a.outcome, a.key_id) for a in third.attempts] == [("ok", key_id(key_b))]
    log = await sim.wait_for_log(4)
    assert [(e.outcome, e.key_id) for e in log] == [
        ("status:429", key_id(key_a)),
        ("ok", key_id(key_b)),
        ("ok", key_id(key_b)),
        ("ok", key_id(key_b)),
    ]


@each_family
async def test_refusal_answer_is_raised_and_not_routed(sim: Simulator, family: str) -> None:
    """A 200 refusal (OpenAI ``refusal``, Anthropic ``stop_reason``, Gemini ``SAFETY``) raises RefusalError once."""
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config({main: profile(sim, family, "sim-refusal", fallback=[spare]), spare: profile(sim, family, "sim-ok")})
    async with client(cfg) as c:
        if family == "ollama":  # Ollama has no refusal signal: the refusal is ordinary text
            reply = await c.chat("hello there")
            assert reply.text == "I'm sorry, but I can't help with that."
            assert trail(reply.attempts) == [(main, "sim-refusal", "ok", None)]
        else:
            with pytest.raises(RefusalError) as caught:
                await c.chat("hello there")
            assert trail(caught.value.attempts) == [(main, "sim-refusal", "refusal", None)]
    assert await upstream(sim, 1) == [("sim-refusal", "refusal")]


@each_family
async def test_empty_answers_are_retried_then_the_walk_moves_on(sim: Simulator, family: str) -> None:
    """An empty 200 and a ``<think>``-only 200 are never answers: retried with backoff, then the next entry."""
    main, spare = f"{family}.main", f"{family}.spare"
    cfg = config(
        {
            main: profile(sim, family, "sim-empty-then-thinkonly", fallback=[spare]),
            spare: profile(sim, family, "sim-ok-t2"),
        },
        retries=1,
    )
    async with client(cfg) as c:
        reply = await c.chat("one two three")
    assert trail(reply.attempts) == [
        (main, "sim-empty-then-thinkonly", "empty", None),
        (main, "sim-empty-then-thinkonly", "empty", None),
        (spare, "sim-ok-t2", "ok", None),
    ]
    empty, think_only, _ = reply.attempts
    assert empty.usage is not None and empty.usage.input_tokens == 3  # rejected usage stays on its attempt
    assert think_only.usage is not None and think_only.usage.output_tokens > 0
    assert reply.usage is not None and (reply.usage.input_tokens, reply.usage.output_tokens) == (3, 2)
    assert await upstream(sim, 3) == [
        ("sim-empty-then-thinkonly", "empty"),
        ("sim-empty-then-thinkonly", "think_only"),
        ("sim-ok-t2", "ok"),
    ]


async def test_timeout_on_the_last_entry_is_retried(sim: Simulator) -> None:
    """A timed-out entry is retried when it is the last one left (nowhere else to go)."""
    cfg = config({"openai.main": profile(sim, "openai", "sim-silence-then-ok", first_token_timeout_secs=0.3)})
    async with client(cfg) as c:
        started = time.perf_counter()
        reply = await c.chat("hello there")
        elapsed = time.perf_counter() - started
    assert [(a.outcome, a.detail) for a in reply.attempts] == [("timeout", "timeout:first_token"), ("ok", None)]
    assert 0.3 <= elapsed < 1.0
    assert await upstream(sim, 2) == [("sim-silence-then-ok", "client_disconnected"), ("sim-silence-then-ok", "ok")]


async def test_aggregate_error_keeps_the_first_eight_events_only(sim: Simulator) -> None:
    """Twelve failures: the message lists the first 8 (by entry and try), says 4 were omitted, and stays under 2 KiB."""
    names = [f"openai.p{i}" for i in range(4)]
    profiles = {
        name: profile(sim, "openai", f"sim-50{i}", fallback=names[i + 1 : i + 2]) for i, name in enumerate(names)
    }
    async with client(config(profiles, retries=2)) as c:
        with pytest.raises(AllProvidersFailed) as caught:
            await c.chat("a secret prompt")
    assert [(a.provider, a.status) for a in caught.value.attempts] == [
        (name, 500 + i) for i, name in enumerate(names) for _ in range(3)
    ]
    message = str(caught.value)
    lines = message.splitlines()
    assert lines[0] == "All model providers/models failed after 12 failure event(s). Events:"
    assert [line.split(":")[0] for line in lines[1:9]] == [
        f"event {n} (openai.p{(n - 1) // 3}/sim-50{(n - 1) // 3}, try {t}/3)"
        for n, t in zip(range(1, 9), [1, 2, 3] * 3, strict=False)
    ]
    assert lines[9:] == ["[4 additional failure event(s) omitted]"]
    assert len(message.encode()) <= 2048
    for leaked in ("secret prompt", KEY, KID):
        assert leaked not in message
    assert caught.value.retry_after is None  # not every attempt was a rate limit
