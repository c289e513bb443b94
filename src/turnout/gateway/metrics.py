"""Prometheus metrics of the gateway, in a registry per application (so tests and apps never collide).

Attempt-level metrics come from the attempts of each call (``Reply.attempts`` or the error's
``.attempts``): no extra work happens on the upstream path. Only the ``(provider, model)`` pairs the
configuration names get their own labels: a model a client chose (for a profile without a pinned model) is
counted as ``model="other"``, so no client string becomes a label.

Circuit breakers are read at scrape time: ``turnout_breaker_state{entry}`` (0 closed, 1 open, 2 half-open) for
every configured entry (``family.alias/model``) and ``turnout_breaker_transitions_total{entry,transition}`` from
the process's counts. An entry whose model the configuration does not name is labelled ``family.alias/other``
(its state is the highest among such entries of the profile).

Counting is on every request's path, so it is a dict update per counter and a bucket update per histogram
(the event loop is the only writer, so no lock); ``prometheus_client`` only formats the totals, when
``/metrics`` is scraped. What is formatted is a :class:`~turnout.gateway.workers.Totals`: this process's own
(:meth:`Metrics.export`), or with several workers the whole server's (:func:`turnout.gateway.workers.merge`).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from turnout.attribution import SKIPS, Attempt
from turnout.breaker import BreakerRecord, Gate, entry_key, gate, split_entry_key
from turnout.gateway.workers import Totals
from turnout.health import Breakers
from turnout.hedge import HedgeTally
from turnout.pools import MemberLoad

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: ``turnout_breaker_state`` of each gate.
BREAKER_STATES = {Gate.CLOSED: 0, Gate.OPEN: 1, Gate.DUE: 2}

Labels = tuple[str, ...]


class _Counter:
    """A counter family: a total per label tuple."""

    __slots__ = ("doc", "labels", "name", "totals")

    def __init__(self, name: str, doc: str, labels: Labels) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.totals: dict[Labels, float] = {}

    def inc(self, key: Labels) -> None:
        totals = self.totals
        totals[key] = totals.get(key, 0.0) + 1.0

    def family(self, totals: Mapping[Labels, float]) -> Metric:
        out = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        for key, value in totals.items():
            out.add_metric(key, value)
        return out


class _Histogram:
    """A histogram family: per label tuple, a count per bucket (the last one is +Inf) and the sum."""

    __slots__ = ("bounds", "doc", "labels", "name", "rows")

    def __init__(self, name: str, doc: str, labels: Labels, bounds: tuple[float, ...]) -> None:
        self.name, self.doc, self.labels, self.bounds = name, doc, labels, bounds
        self.rows: dict[Labels, list[float]] = {}

    def observe(self, key: Labels, value: float) -> None:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0.0] * (len(self.bounds) + 2)  # buckets, +Inf, then the sum
        row[bisect_left(self.bounds, value)] += 1.0  # the first bucket whose bound is >= value (le)
        row[-1] += value

    def family(self, rows: Mapping[Labels, Sequence[float]]) -> Metric:
        out = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        edges = [*(repr(b) for b in self.bounds), "+Inf"]
        for key, row in rows.items():
            cumulative = list(accumulate(row[:-1]))
            out.add_metric(key, list(zip(edges, cumulative, strict=True)), row[-1])
        return out


class Metrics:
    """The gateway's metrics.

    Metric names: ``turnout_gateway_requests_total{surface,status}``,
    ``turnout_gateway_request_duration_seconds{surface}``, ``turnout_gateway_in_flight_requests``,
    ``turnout_upstream_attempts_total{provider,model,outcome}``,
    ``turnout_fallbacks_total{requested_provider,served_provider}``, ``turnout_retries_total{provider,model}``,
    ``turnout_cooldowns_active``, ``turnout_upstream_latency_seconds{provider,model}``,
    ``turnout_upstream_ttft_seconds{provider,model}``, ``turnout_gateway_overhead_seconds{surface}``,
    ``turnout_headroom_requests{profile,key_id}`` / ``turnout_headroom_tokens{profile,key_id}`` (what each
    configured profile and key last announced it has left; labelled with configuration only),
    ``turnout_breaker_state{entry}`` and ``turnout_breaker_transitions_total{entry,transition}``, and per pool
    member (read when scraped) ``turnout_pool_member_in_flight{pool,member}``,
    ``turnout_pool_member_calls_total{pool,member}`` and ``turnout_pool_member_ttft_seconds{pool,member}`` (the
    moving average the ``latency`` strategy reads), and with hedging on ``turnout_hedge_calls_total`` (calls that
    could hedge), ``turnout_hedges_total`` (hedges sent), ``turnout_hedge_wins_total{side}`` (``hedge`` or
    ``original``: which side of a hedged call answered first) and ``turnout_hedge_budget_tokens`` (hedges the budget
    allows now; with several workers, the sum of their buckets).

    Args:
        labelled: The (profile, model) pairs labelled by name; any other model is labelled ``other``.
        registry: The registry (default: a new one).
        breakers: The client's circuit breakers (None: no breaker metrics).
        clock: Wall clock in seconds (whether an open breaker's interval is over).
    """

    def __init__(
        self,
        labelled: Collection[tuple[str, str]] = (),
        registry: CollectorRegistry | None = None,
        *,
        breakers: Breakers | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.requests = _Counter(
            "turnout_gateway_requests", "Gateway requests by surface and HTTP status.", ("surface", "status")
        )
        self.duration = _Histogram(
            "turnout_gateway_request_duration_seconds",
            "Wall time of a gateway request, first byte in to last byte out.",
            ("surface",),
            _LATENCY_BUCKETS,
        )
        self.attempts = _Counter(
            "turnout_upstream_attempts",
            "Upstream attempts (and cooldown skips) by profile, model and outcome.",
            ("provider", "model", "outcome"),
        )
        self.fallbacks = _Counter(
            "turnout_fallbacks",
            "Answers served by another entry than the one requested.",
            ("requested_provider", "served_provider"),
        )
        self.retries = _Counter("turnout_retries", "Attempts beyond the first try on an entry.", ("provider", "model"))
        self.latency = _Histogram(
            "turnout_upstream_latency_seconds",
            "Duration of one upstream attempt.",
            ("provider", "model"),
            _LATENCY_BUCKETS,
        )
        self.ttft = _Histogram(
            "turnout_upstream_ttft_seconds",
            "Time to the first streamed token of an upstream attempt.",
            ("provider", "model"),
            _LATENCY_BUCKETS,
        )
        self.overhead = _Histogram(
            "turnout_gateway_overhead_seconds",
            "Time a request spent in the gateway outside upstream attempts (parsing, routing, encoding, backoff).",
            ("surface",),
            _OVERHEAD_BUCKETS,
        )
        self._labelled = frozenset(labelled)
        self._breakers = breakers
        self._clock = clock
        self._statuses: dict[int, str] = {}
        self.counters = (self.requests, self.attempts, self.fallbacks, self.retries)
        self.histograms = (self.duration, self.latency, self.ttft, self.overhead)
        self._view = Totals(worker="", at=0.0)  # what the next scrape formats: set by render
        self.registry.register(_Collector(self))

    def _model(self, provider: str, model: str) -> str:
        return model if (provider, model) in self._labelled else "other"

    def request(self, surface: str, status: int, seconds: float) -> None:
        """Count one finished request."""
        code = self._statuses.get(status)
        if code is None:
            code = self._statuses[status] = str(status)
        self.requests.inc((surface, code))
        self.duration.observe((surface,), seconds)

    def call(
        self,
        surface: str,
        attempts: Iterable[Attempt],
        *,
        fallback: tuple[str, str] | None,
        seconds: float | None,
    ) -> None:
        """Record the attempts of one call, its fallback (requested, served profile) and the gateway overhead.

        ``seconds`` is the request's time in the gateway; None leaves the overhead unobserved (a call the
        client abandoned).
        """
        upstream = 0.0
        labelled = self._labelled
        for a in attempts:
            provider = a.provider
            model = a.model if (provider, a.model) in labelled else "other"
            self.attempts.inc((provider, model, a.outcome))
            if a.outcome in SKIPS:
                continue
            if a.try_number > 1:
                self.retries.inc((provider, model))
            upstream += a.duration_ms
            self.latency.observe((provider, model), a.duration_ms / 1000.0)
            if a.ttft_ms is not None:
                self.ttft.observe((provider, model), a.ttft_ms / 1000.0)
        if fallback is not None:
            self.fallbacks.inc(fallback)
        if seconds is not None:
            self.overhead.observe((surface,), max(0.0, seconds - upstream / 1000.0))

    def export(self) -> tuple[dict[str, dict[Labels, float]], dict[str, dict[Labels, list[float]]]]:
        """Copies of the counters' and histograms' totals, by metric name (what a worker's totals carry)."""
        return (
            {c.name: dict(c.totals) for c in self.counters},
            {h.name: {k: list(row) for k, row in h.rows.items()} for h in self.histograms},
        )

    def requests_finished(self) -> int:
        """Requests counted so far."""
        return int(sum(self.requests.totals.values()))

    def breaker_families(
        self, records: Mapping[str, BreakerRecord], moves_seen: Mapping[tuple[str, str], int]
    ) -> list[Metric]:
        """The breaker gauge and transition counter (labelled with configured entries only).

        Args:
            records: The open breakers (entry key → record).
            moves_seen: Transition counts per (entry key, transition).
        """
        state = GaugeMetricFamily(
            "turnout_breaker_state", "Circuit breaker per entry: 0 closed, 1 open, 2 half-open.", labels=("entry",)
        )
        moves = CounterMetricFamily(
            "turnout_breaker_transitions",
            "Circuit breaker transitions per entry: opened, probe, closed, reopened.",
            labels=("entry", "transition"),
        )
        if self._breakers is not None:
            now = self._clock()
            codes = {entry_key(p, m): 0 for p, m in sorted(self._labelled)}
            for key, record in records.items():
                label = self._entry(key)
                codes[label] = max(codes.get(label, 0), BREAKER_STATES[gate(record, now)])
            for label, code in codes.items():
                state.add_metric((label,), code)
            counts: Counter[tuple[str, str]] = Counter()
            for (key, transition), n in moves_seen.items():
                counts[(self._entry(key), transition)] += n
            for labels, n in sorted(counts.items()):
                moves.add_metric(labels, n)
        return [state, moves]

    def _entry(self, key: str) -> str:
        """The ``entry`` label of a breaker key: itself when configured, else ``family.alias/other``."""
        profile, model = split_entry_key(key)
        return key if (profile, model) in self._labelled else entry_key(profile, "other")

    def render(self, totals: Totals | None = None) -> bytes:
        """The exposition text of ``totals``: this process's, or the merged ones of every worker.

        The gauges are read from it too: requests in flight, active cooldowns, open breakers and the headroom rows
        (a key's gauge appears once it announced that budget). None: this object's counts, with empty gauges.
        """
        if totals is None:
            counters, histograms = self.export()
            totals = Totals(worker="", at=0.0, counters=counters, histograms=histograms)
        self._view = totals
        return bytes(generate_latest(self.registry))

    def headroom_families(self, rows: Iterable[Mapping[str, Any]]) -> Iterator[Metric]:
        """The headroom gauges of the rows of ``Client.status()["headroom"]``."""
        for name, field, doc in (
            ("turnout_headroom_requests", "requests", "Requests the upstream last said are left, per profile and key."),
            ("turnout_headroom_tokens", "tokens", "Tokens the upstream last said are left, per profile and key."),
        ):
            family = GaugeMetricFamily(name, doc, labels=("profile", "key_id"))
            for row in rows:
                if row[field] is not None:
                    family.add_metric((row["profile"], row["key_id"] or ""), float(row[field]))
            yield family


class _Collector:
    """Hands the totals to ``prometheus_client`` when the registry is scraped."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self.describe: Callable[[], list[Metric]] = list  # nothing to describe ahead of a scrape

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        view = m._view
        counters, histograms = view.counters, view.histograms
        yield m.requests.family(counters.get(m.requests.name, {}))
        yield m.duration.family(histograms.get(m.duration.name, {}))
        yield GaugeMetricFamily(
            "turnout_gateway_in_flight_requests", "Requests being served now.", value=view.in_flight
        )
        for counter in (m.attempts, m.fallbacks, m.retries):
            yield counter.family(counters.get(counter.name, {}))
        yield GaugeMetricFamily(
            "turnout_cooldowns_active", "Profiles and keys cooling down now.", value=len(view.cooldowns)
        )
        for histogram in (m.latency, m.ttft, m.overhead):
            yield histogram.family(histograms.get(histogram.name, {}))
        yield from m.headroom_families(view.headroom)
        yield from m.breaker_families(view.breakers, view.transitions)
        yield from _pool_families(view.pools)
        yield from _hedge_families(view.hedging)


def _pool_families(pools: Iterable[tuple[str, MemberLoad]]) -> Iterator[Metric]:
    """The pool members' gauges and counter (labels: pool and member names, both from the configuration)."""
    labels = ("pool", "member")
    busy = GaugeMetricFamily("turnout_pool_member_in_flight", "Tries in flight on a pool member.", labels=labels)
    calls = CounterMetricFamily("turnout_pool_member_calls", "Tries started on a pool member.", labels=labels)
    ttft = GaugeMetricFamily(
        "turnout_pool_member_ttft_seconds",
        "Moving average time to first token of a pool member (its most used model).",
        labels=labels,
    )
    for pool, load in pools:
        key = (pool, load.member)
        busy.add_metric(key, load.in_flight)
        calls.add_metric(key, load.calls)
        if load.ttft_ms is not None:
            ttft.add_metric(key, load.ttft_ms / 1000.0)
    yield busy
    yield calls
    yield ttft


def _hedge_families(tally: HedgeTally | None) -> Iterator[Metric]:
    """Hedging's counters and budget gauge (no samples while no profile hedges; labels: a fixed ``side``)."""
    calls = CounterMetricFamily("turnout_hedge_calls", "Calls that could hedge (their first entry had a hedge delay).")
    sent = CounterMetricFamily("turnout_hedges", "Hedges sent: extra upstream requests racing a slow first entry.")
    wins = CounterMetricFamily(
        "turnout_hedge_wins", "Hedged calls by the side that answered first: hedge or original.", labels=("side",)
    )
    budget = GaugeMetricFamily("turnout_hedge_budget_tokens", "Hedges the budget allows now (summed over workers).")
    if tally is not None:
        calls.add_metric((), tally.calls)
        sent.add_metric((), tally.hedged)
        wins.add_metric(("hedge",), tally.hedge_wins)
        wins.add_metric(("original",), tally.original_wins)
        budget.add_metric((), tally.budget)
    yield calls
    yield sent
    yield wins
    yield budget
