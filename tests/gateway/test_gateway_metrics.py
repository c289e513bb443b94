"""What the metrics count of finished requests, the totals they export, and the exposition of those totals."""

from __future__ import annotations

import pytest
from gateway_support import TWO_PROFILES, Ended, get, post, sample
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from fakes import Fleet
from turnout import Client
from turnout.core.attribution import Attempt
from turnout.gateway import Gateway, GatewayServer, app
from turnout.gateway.failures import CLIENT_CLOSED
from turnout.gateway.metrics import Metrics
from turnout.gateway.status import BUCKET_S, RecentAttempts

_times = st.one_of(
    st.floats(min_value=0, max_value=200, allow_nan=False),
    st.integers(0, 2**20).map(lambda n: n / 2048),  # exact halves of a millisecond, and zero
    st.sampled_from([0.0, -0.0, 0.005, 0.0050001, 1000.0, 1e-9]),
)
_attempt = st.builds(
    Attempt,
    provider=st.sampled_from(["openai.main", "anthropic.prod", "openai.other"]),
    model=st.sampled_from(["gpt-4.1", "claude", "free-text"]),
    outcome=st.sampled_from(["ok", "retryable", "rate_limited", "cooldown_skip", "breaker_skip"]),
    duration_ms=_times.map(lambda t: t * 1000),
    ttft_ms=st.none() | _times.map(lambda t: t * 1000),
    try_number=st.integers(0, 3),
)
_ended = st.builds(
    Ended,
    surface=st.sampled_from(["openai", "anthropic", "models"]),
    status=st.sampled_from([200, 200, 400, 429, 502, CLIENT_CLOSED]),
    seconds=_times,
    attempts=st.none() | st.lists(_attempt, max_size=4).map(tuple),
    fallback=st.none() | st.sampled_from([("anthropic.prod", "openai.main"), ("openai.main", "openai.other")]),
    ended=st.floats(min_value=1.7e9, max_value=1.7e9 + 3 * BUCKET_S),
)
CHAT = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
_LABELLED = {("openai.main", "gpt-4.1"), ("anthropic.prod", "claude")}


def test_one_request_is_counted_by_label() -> None:
    """A single request's status, duration, attempts, retries, latency, fallback and overhead, by label."""
    attempts = (
        Attempt(provider="openai.main", model="gpt-4.1", outcome="retryable", duration_ms=100.0),
        Attempt(provider="openai.main", model="gpt-4.1", outcome="ok", duration_ms=200.0, try_number=2, ttft_ms=50.0),
        Attempt(provider="anthropic.prod", model="x", outcome="cooldown_skip", duration_ms=0.0, try_number=0),
    )
    metrics = Metrics(labelled=_LABELLED)
    metrics.fold([Ended(seconds=0.5, attempts=attempts, fallback=("anthropic.prod", "openai.main"))])
    counters, histograms = metrics.export()
    assert counters["turnout_gateway_requests"] == {("openai", "200"): 1.0}
    assert counters["turnout_upstream_attempts"] == {
        ("openai.main", "gpt-4.1", "retryable"): 1.0,
        ("openai.main", "gpt-4.1", "ok"): 1.0,
        ("anthropic.prod", "other", "cooldown_skip"): 1.0,
    }
    assert counters["turnout_retries"] == {("openai.main", "gpt-4.1"): 1.0}
    assert counters["turnout_fallbacks"] == {("anthropic.prod", "openai.main"): 1.0}
    assert histograms["turnout_upstream_latency_seconds"][("openai.main", "gpt-4.1")][-1] == 0.1 + 0.2
    assert histograms["turnout_upstream_ttft_seconds"][("openai.main", "gpt-4.1")][-1] == 0.05
    assert histograms["turnout_gateway_overhead_seconds"][("openai",)][-1] == 0.5 - 300.0 / 1000.0


def test_a_request_whose_client_went_away_has_no_overhead() -> None:
    """The overhead histogram leaves out a call the client abandoned; its attempts still count."""
    ok = Attempt(provider="openai.main", model="gpt-4.1", outcome="ok", duration_ms=5.0)
    metrics = Metrics(labelled=_LABELLED)
    metrics.fold([Ended(status=CLIENT_CLOSED, seconds=0.1, attempts=(ok,)), Ended(status=401, seconds=0.2)])
    counters, histograms = metrics.export()
    assert "turnout_gateway_overhead_seconds" in histograms
    assert histograms["turnout_gateway_overhead_seconds"] == {}
    assert counters["turnout_upstream_attempts"] == {("openai.main", "gpt-4.1", "ok"): 1.0}
    assert counters["turnout_gateway_requests"] == {("openai", "499"): 1.0, ("openai", "401"): 1.0}


@given(st.lists(_ended, max_size=30), st.lists(st.integers(1, 30), max_size=4))
def test_the_exposition_is_prometheus_text_that_counts_every_request(done: list[Ended], cuts: list[int]) -> None:
    """However the requests are handed over, /metrics parses and counts each request, attempt and observation once."""
    metrics = Metrics(labelled=_LABELLED)
    start = 0
    for stop in [*sorted(cuts), len(done)]:
        metrics.fold(done[start:stop])
        start = max(start, stop)
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}

    def total(name: str, suffix: str) -> float:
        return sum(s.value for s in families[name].samples if s.name == name + suffix)

    calls = [ex.attempts for ex in done if ex.attempts is not None]
    waited = [ex for ex in done if ex.attempts is not None and ex.status != CLIENT_CLOSED]
    assert total("turnout_gateway_requests", "_total") == len(done) == metrics.requests_finished()
    assert total("turnout_gateway_request_duration_seconds", "_count") == len(done)
    assert total("turnout_upstream_attempts", "_total") == sum(map(len, calls))
    assert total("turnout_gateway_overhead_seconds", "_count") == len(waited)
    assert total("turnout_fallbacks", "_total") == sum(1 for ex in done if ex.attempts is not None and ex.fallback)
    counters, histograms = metrics.export()
    assert sum(counters["turnout_gateway_requests"].values()) == len(done)
    assert sum(sum(row[:-1]) for row in histograms["turnout_gateway_request_duration_seconds"].values()) == len(done)


def test_the_totals_carry_the_ledger_errors_rejections_sign_ins_and_refusals() -> None:
    """What the ledger and the access rules counted is read with the totals; sign-ins and refusals as counted."""
    metrics = Metrics()
    metrics.logins.labels("wrong_key").inc()
    metrics.refusals.labels("host").inc()
    metrics.refusals.labels("host").inc()
    counters, _ = metrics.export(ledger_errors=2, rejections={("team", "rpm"): 3})
    assert counters["turnout_ledger_errors"] == {(): 2.0}
    assert counters["turnout_key_rejections"] == {("team", "rpm"): 3.0}
    assert counters["turnout_gateway_logins"] == {("wrong_key",): 1.0}
    assert counters["turnout_gateway_refused"] == {("host",): 2.0}
    assert metrics.export()[0]["turnout_ledger_errors"] == {}  # no ledger: no sample
    text = metrics.render().decode()
    assert sample(text, "turnout_gateway_refused_total", reason="host") == 2
    assert sample(text, "turnout_gateway_logins_total", outcome="wrong_key") == 1
    assert "# HELP turnout_ledger_errors_total Failed ledger writes" in text


@given(st.lists(_ended, max_size=30))
def test_recent_attempts_of_a_batch_are_those_of_one_call_at_a_time(done: list[Ended]) -> None:
    """Per-minute counts and the last attempts are the same whether calls are added one by one or folded."""
    calls = [ex for ex in done if ex.attempts is not None]
    one, batched = RecentAttempts(), RecentAttempts()
    for ex in calls:
        assert ex.attempts is not None
        one.add(ex.attempts, ex.ended)
    batched.fold([ex.attempts for ex in calls if ex.attempts is not None], [ex.ended for ex in calls])
    assert batched.buckets() == one.buckets()
    assert list(batched.last) == list(one.last)


async def test_every_finished_request_is_counted_when_the_totals_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests folded in batches and those since the last batch all show in /metrics and /status."""
    monkeypatch.setattr(app, "FOLD_EVERY", 3)
    client = Client.from_toml(TWO_PROFILES, adapter_builder=Fleet(), ledger=False)
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        for _ in range(7):
            assert (await post(server, "/v1/chat/completions", CHAT)).status == 200
        metrics = (await get(server, "/metrics")).body.decode()
        status = (await get(server, "/status")).json()
    assert sample(metrics, "turnout_gateway_requests_total", surface="openai", status="200") == 7
    labels = {"provider": "anthropic.prod", "model": "claude-sonnet-4-5", "outcome": "ok"}
    assert sample(metrics, "turnout_upstream_attempts_total", **labels) == 7
    assert status["recent_attempts"]["by_outcome"] == {"ok": 7}
