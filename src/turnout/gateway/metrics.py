"""Prometheus metrics of the gateway, in registries per application (so tests and apps never collide).

Attempt-level metrics come from the attempts of each call (``Reply.attempts`` or the error's
``.attempts``): no extra work happens on the upstream path. Only the ``(provider, model)`` pairs the
configuration names get their own labels: a model a client chose (for a profile without a pinned model) is
counted as ``model="other"``, so no client string becomes a label.

Circuit breakers are read at scrape time: ``turnout_breaker_state{entry}`` (0 closed, 1 open, 2 half-open) for
every configured entry (``family.alias/model``) and ``turnout_breaker_transitions_total{entry,transition}`` from
the process's counts. An entry whose model the configuration does not name is labelled ``family.alias/other``
(its state is the highest among such entries of the profile).

What the gateway counts itself (requests, attempts, fallbacks, tokens, sign-ins, refusals) is counted with
``prometheus_client``'s :class:`~prometheus_client.Counter` and :class:`~prometheus_client.Histogram` in a
registry of this process's own (:attr:`Metrics.counted`); the finished requests are handed over in batches
(:meth:`Metrics.fold`, before anything reads the totals). ``/metrics`` shows the whole server, though: a
:class:`~turnout.gateway.workers.Totals` that is this process's own counts (:meth:`Metrics.export`), or with
several workers every worker's merged (:func:`turnout.gateway.workers.merge`). So the exposition registry
(:attr:`Metrics.registry`) holds one collector that reads those totals, and the upstream state they carry, at
scrape time.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol, TypeVar, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from turnout.core.attribution import SKIPS, Attempt
from turnout.gateway.failures import CLIENT_CLOSED
from turnout.gateway.workers import Totals
from turnout.ledger.pricing import Rates
from turnout.state.base import BreakerRecord
from turnout.walk.breaker import Gate, entry_key, gate, split_entry_key
from turnout.walk.breakers import Breakers
from turnout.walk.hedge import HedgeTally
from turnout.walk.pools import MemberLoad

#: A labelled metric (what :meth:`Metrics._child` keeps the series of).
_M = TypeVar("_M", Counter, Histogram)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: ``turnout_breaker_state`` of each gate.
BREAKER_STATES = {Gate.CLOSED: 0, Gate.OPEN: 1, Gate.DUE: 2}

Labels = tuple[str, ...]


class Finished(Protocol):
    """A finished request, as the metrics count it (the gateway's record of one request)."""

    @property
    def surface(self) -> str:
        """The endpoint family (``openai``, ``anthropic``, ``models`` ...)."""

    @property
    def status(self) -> int:
        """The HTTP status answered (:data:`~turnout.gateway.failures.CLIENT_CLOSED` when the client went away)."""

    @property
    def seconds(self) -> float:
        """The request's time in the gateway."""

    @property
    def attempts(self) -> Sequence[Attempt] | None:
        """The attempts of its call; None when it made none."""

    @property
    def fallback(self) -> tuple[str, str] | None:
        """(requested, served) profile when another entry than the one requested answered."""


@dataclass(frozen=True, slots=True)
class Family:
    """A counter or histogram of the totals: how it is named, described and labelled in the exposition.

    Attributes:
        name: The name (a counter's samples add ``_total``), also its key in the totals.
        doc: The help text.
        labels: The label names, in the order of the totals' label tuples.
        buckets: A histogram's upper bounds (+Inf is added); None for a counter.
    """

    name: str
    doc: str
    labels: Labels = ()
    buckets: tuple[float, ...] | None = None


_PM = ("provider", "model")
REQUESTS = Family("turnout_gateway_requests", "Gateway requests by surface and HTTP status.", ("surface", "status"))
DURATION = Family(
    "turnout_gateway_request_duration_seconds",
    "Wall time of a gateway request, first byte in to last byte out.",
    ("surface",),
    _LATENCY_BUCKETS,
)
ATTEMPTS = Family(
    "turnout_upstream_attempts",
    "Upstream attempts (and cooldown skips) by profile, model and outcome.",
    ("provider", "model", "outcome"),
)
FALLBACKS = Family(
    "turnout_fallbacks",
    "Answers served by another entry than the one requested.",
    ("requested_provider", "served_provider"),
)
RETRIES = Family("turnout_retries", "Attempts beyond the first try on an entry.", _PM)
LATENCY = Family("turnout_upstream_latency_seconds", "Duration of one upstream attempt.", _PM, _LATENCY_BUCKETS)
TTFT = Family(
    "turnout_upstream_ttft_seconds",
    "Time to the first streamed token of an upstream attempt.",
    _PM,
    _LATENCY_BUCKETS,
)
OVERHEAD = Family(
    "turnout_gateway_overhead_seconds",
    "Time a request spent in the gateway outside upstream attempts (parsing, routing, encoding, backoff).",
    ("surface",),
    _OVERHEAD_BUCKETS,
)
LEDGER_ERRORS = Family(
    "turnout_ledger_errors", "Failed ledger writes: batches or rows refused, failed opens, calls dropped."
)
REJECTIONS = Family(
    "turnout_key_rejections",
    "Calls of a limited client key refused: daily_limit, reservation, max_call, unpriced, ledger_unavailable, "
    "spend_busy, rpm, tpm.",
    ("key", "reason"),
)
INPUT_TOKENS = Family("turnout_input_tokens", "Input tokens of answered attempts.", _PM)
CACHED_TOKENS = Family(
    "turnout_cached_input_tokens", "Input tokens of answered attempts read from the prompt cache.", _PM
)
CACHE_WRITES = Family(
    "turnout_cache_write_tokens", "Input tokens of answered attempts written to the prompt cache.", _PM
)
CACHE_SAVED = Family(
    "turnout_cache_saved_usd", "USD the prompt cache saved: cached tokens at the input price minus at theirs.", _PM
)
LOGINS = Family(
    "turnout_gateway_logins",
    "Status page sign-ins by outcome: ok, wrong_key, or throttled (refused by the login rate limit).",
    ("outcome",),
)
REFUSALS = Family(
    "turnout_gateway_refused",
    "Requests refused before any work, by reason: host, cross_site or content_type.",
    ("reason",),
)

#: The counters of the totals, in the order ``/metrics`` shows them. The ledger's errors and the limited keys'
#: rejections are counted elsewhere (by the ledger and the access rules) and read when the totals are taken.
COUNTERS = (
    REQUESTS,
    ATTEMPTS,
    FALLBACKS,
    RETRIES,
    LEDGER_ERRORS,
    REJECTIONS,
    INPUT_TOKENS,
    CACHED_TOKENS,
    CACHE_WRITES,
    CACHE_SAVED,
    LOGINS,
    REFUSALS,
)
#: The histograms of the totals, in the order ``/metrics`` shows them.
HISTOGRAMS = (DURATION, LATENCY, TTFT, OVERHEAD)


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
    ``turnout_input_tokens_total{provider,model}``, ``turnout_cached_input_tokens_total{provider,model}``,
    ``turnout_cache_write_tokens_total{provider,model}`` and ``turnout_cache_saved_usd_total{provider,model}``
    (input tokens of answered attempts, the part read from and written to the provider's prompt cache, and
    what the cached part saved: its tokens at the input price minus at the cached price),
    ``turnout_breaker_state{entry}`` and ``turnout_breaker_transitions_total{entry,transition}``, and per pool
    member (read when scraped) ``turnout_pool_member_in_flight{pool,member}``,
    ``turnout_pool_member_calls_total{pool,member}`` and ``turnout_pool_member_ttft_seconds{pool,member}`` (the
    moving average the ``latency`` strategy reads), and with hedging on ``turnout_hedge_calls_total`` (calls that
    could hedge), ``turnout_hedges_total`` (hedges sent), ``turnout_hedge_wins_total{side}`` (``hedge`` or
    ``original``: which side of a hedged call answered first) and ``turnout_hedge_budget_tokens`` (hedges the budget
    allows now; with several workers, the sum of their buckets); ``turnout_gateway_logins_total{outcome}`` (status
    page sign-ins: ``ok``, ``wrong_key``, ``throttled``), ``turnout_gateway_refused_total{reason}`` (requests refused
    at the edge: ``host``, ``cross_site``, ``content_type``) and ``turnout_gateway_worker_restarts_total`` (dead
    workers started again).

    Args:
        labelled: The (profile, model) pairs labelled by name; any other model is labelled ``other``.
        registry: The exposition registry (default: a new one).
        breakers: The client's circuit breakers (None: no breaker metrics).
        clock: Wall clock in seconds (whether an open breaker's interval is over).
        rates: The rates of a profile's model (prices what cached input saved; None: nothing counts as saved).
    """

    def __init__(
        self,
        labelled: Collection[tuple[str, str]] = (),
        registry: CollectorRegistry | None = None,
        *,
        breakers: Breakers | None = None,
        clock: Callable[[], float] = time.time,
        rates: Callable[[str, str], Rates | None] | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        #: What this process counts (never exposed as it is: :meth:`export` reads it into the totals).
        self.counted = CollectorRegistry()
        self.requests = self._counter(REQUESTS)
        self.duration = self._histogram(DURATION)
        self.attempts = self._counter(ATTEMPTS)
        self.fallbacks = self._counter(FALLBACKS)
        self.retries = self._counter(RETRIES)
        self.latency = self._histogram(LATENCY)
        self.ttft = self._histogram(TTFT)
        self.overhead = self._histogram(OVERHEAD)
        self.input_tokens = self._counter(INPUT_TOKENS)
        self.cached_tokens = self._counter(CACHED_TOKENS)
        self.cache_writes = self._counter(CACHE_WRITES)
        self.cache_saved = self._counter(CACHE_SAVED)
        self.logins = self._counter(LOGINS)
        self.refusals = self._counter(REFUSALS)
        self._rates = rates
        self._labelled = frozenset(labelled)
        self._breakers = breakers
        self._clock = clock
        self._view = Totals(worker="", at=0.0)  # what the next scrape shows: set by render
        self._spend: Mapping[str, float] = {}  # each limited key's spend today: set by render
        #: The labelled series counted so far, by metric and label values (as many as the registry holds).
        self._children: dict[tuple[int, tuple[str, ...]], Counter | Histogram] = {}
        self.registry.register(_Collector(self))

    def _counter(self, family: Family) -> Counter:
        return Counter(family.name, family.doc, family.labels, registry=self.counted)

    def _histogram(self, family: Family) -> Histogram:
        assert family.buckets is not None
        return Histogram(family.name, family.doc, family.labels, registry=self.counted, buckets=family.buckets)

    def _child(self, metric: _M, *values: str) -> _M:
        """``metric.labels(*values)``, kept: a request counts a dozen labelled series, most of them seen before."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return cast(_M, child)

    def _model(self, provider: str, model: str) -> str:
        return model if (provider, model) in self._labelled else "other"

    def fold(self, done: Iterable[Finished]) -> None:
        """Count finished requests, one by one in their order.

        Each request: its status and duration. One that made a call (``attempts`` not None): its attempts (the
        upstream latency and time to first token of those that were not skips), retries, its fallback and,
        unless the client went away, the gateway's overhead (its time outside upstream attempts).
        """
        for ex in done:
            self._child(self.requests, ex.surface, str(ex.status)).inc()
            self._child(self.duration, ex.surface).observe(ex.seconds)
            if ex.attempts is None:
                continue
            upstream_ms = self._count(ex.attempts)
            if ex.fallback is not None:
                self._child(self.fallbacks, *ex.fallback).inc()
            if ex.status != CLIENT_CLOSED:  # the client waited for the answer
                self._child(self.overhead, ex.surface).observe(max(0.0, ex.seconds - upstream_ms / 1000.0))

    def _count(self, attempts: Iterable[Attempt]) -> float:
        """Count a call's attempts and retries, and the latency, time to first token and tokens of those not skipped.

        Returns:
            The time the call spent in upstream attempts (skips take none), in milliseconds.
        """
        upstream_ms = 0.0
        for a in attempts:
            model = self._model(a.provider, a.model)
            self._child(self.attempts, a.provider, model, a.outcome).inc()
            if a.outcome in SKIPS:
                continue
            if a.try_number > 1:
                self._child(self.retries, a.provider, model).inc()
            upstream_ms += a.duration_ms
            self._child(self.latency, a.provider, model).observe(a.duration_ms / 1000.0)
            if a.ttft_ms is not None:
                self._child(self.ttft, a.provider, model).observe(a.ttft_ms / 1000.0)
            if a.outcome == "ok":
                self._count_tokens(a, model)
        return upstream_ms

    def _count_tokens(self, a: Attempt, model: str) -> None:
        """Count the input, cached and cache-write tokens of an answered attempt, and what the cache saved."""
        usage = a.usage
        if usage is None or not usage.input_tokens:
            return
        self._child(self.input_tokens, a.provider, model).inc(usage.input_tokens)
        if usage.cached_input_tokens:
            self._child(self.cached_tokens, a.provider, model).inc(usage.cached_input_tokens)
            rates = self._rates(a.provider, a.model) if self._rates is not None else None
            saved = rates.cache_saving(usage) if rates is not None else 0.0
            if saved > 0:  # a counter only grows (a cached price above the input price saves nothing)
                self._child(self.cache_saved, a.provider, model).inc(saved)
        if usage.cache_write_tokens:
            self._child(self.cache_writes, a.provider, model).inc(usage.cache_write_tokens)

    def export(
        self, *, ledger_errors: float | None = None, rejections: Mapping[tuple[str, str], float] | None = None
    ) -> tuple[dict[str, dict[Labels, float]], dict[str, dict[Labels, list[float]]]]:
        """This process's counters' and histograms' totals, by family name (what a worker's totals carry).

        A histogram's row per label tuple is its count per bucket (+Inf last), then its sum.

        Args:
            ledger_errors: The ledger's failed writes so far (:data:`LEDGER_ERRORS`; None: no ledger).
            rejections: The limited keys' refused calls so far, per (key, reason) (:data:`REJECTIONS`).
        """
        counters: dict[str, dict[Labels, float]] = {f.name: {} for f in COUNTERS}
        counters.update(_counter_totals(self.counted.collect()))
        if ledger_errors is not None:
            counters[LEDGER_ERRORS.name] = {(): float(ledger_errors)}
        counters[REJECTIONS.name] = {labels: float(n) for labels, n in (rejections or {}).items()}
        return counters, _histogram_rows(self.counted.collect())

    def requests_finished(self) -> int:
        """Requests counted so far."""
        return int(sum(_counter_totals(self.requests.collect()).get(REQUESTS.name, {}).values()))

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
            counts: Tally[tuple[str, str]] = Tally()
            for (key, transition), n in moves_seen.items():
                counts[(self._entry(key), transition)] += n
            for labels, n in sorted(counts.items()):
                moves.add_metric(labels, n)
        return [state, moves]

    def _entry(self, key: str) -> str:
        """The ``entry`` label of a breaker key: itself when configured, else ``family.alias/other``."""
        profile, model = split_entry_key(key)
        return key if (profile, model) in self._labelled else entry_key(profile, "other")

    def render(self, totals: Totals | None = None, key_spend: Mapping[str, float] | None = None) -> bytes:
        """The exposition text of ``totals``: this process's, or the merged ones of every worker.

        The gauges are read from it too: requests in flight, active cooldowns, open breakers and the headroom rows
        (a key's gauge appears once it announced that budget). None: this object's counts, with empty gauges.
        ``key_spend`` is each limited client key's spend today (``turnout_key_spend_usd{key}``): what the whole
        limit counts, so it is not summed over workers.
        """
        self._spend = key_spend or {}
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
    """Hands the totals of the last :meth:`Metrics.render` to ``prometheus_client`` when the registry is scraped."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        view = m._view
        for family in COUNTERS:
            yield _counter_family(family, view.counters.get(family.name, {}))
        for family in HISTOGRAMS:
            yield _histogram_family(family, view.histograms.get(family.name, {}))
        yield GaugeMetricFamily(
            "turnout_gateway_in_flight_requests", "Requests being served now.", value=view.in_flight
        )
        spend = GaugeMetricFamily(
            "turnout_key_spend_usd",
            "Each limited client key's spend today (UTC, from the ledger), reservations not included.",
            labels=("key",),
        )
        for key, usd in m._spend.items():
            spend.add_metric((key,), usd)
        yield spend
        yield GaugeMetricFamily(
            "turnout_cooldowns_active", "Profiles and keys cooling down now.", value=len(view.cooldowns)
        )
        yield from m.headroom_families(view.headroom)
        yield from m.breaker_families(view.breakers, view.transitions)
        yield from _pool_families(view.pools)
        yield from _hedge_families(view.hedging)
        yield CounterMetricFamily(
            "turnout_gateway_worker_restarts",
            "Dead workers the supervising process started again (turnout serve --workers N).",
            value=view.restarts,
        )


_FAMILIES = {f.name: f for f in (*COUNTERS, *HISTOGRAMS)}


def _key(family: Family, labels: Mapping[str, str]) -> Labels:
    return tuple(labels[name] for name in family.labels)


def _counter_totals(metrics: Iterable[Metric]) -> dict[str, dict[Labels, float]]:
    """The counters among ``metrics`` (as a registry collects them): name → total per label tuple."""
    out: dict[str, dict[Labels, float]] = {}
    for metric in metrics:
        if metric.type == "counter":
            family = _FAMILIES[metric.name]
            total = f"{metric.name}_total"
            out[metric.name] = {_key(family, s.labels): s.value for s in metric.samples if s.name == total}
    return out


def _histogram_rows(metrics: Iterable[Metric]) -> dict[str, dict[Labels, list[float]]]:
    """The histograms among ``metrics``: name → per label tuple, the count per bucket (+Inf last), then the sum."""
    out: dict[str, dict[Labels, list[float]]] = {}
    for metric in metrics:
        if metric.type != "histogram":
            continue
        family = _FAMILIES[metric.name]
        cumulative: dict[Labels, list[float]] = {}
        sums: dict[Labels, float] = {}
        for s in metric.samples:
            if s.name == f"{metric.name}_bucket":
                cumulative.setdefault(_key(family, s.labels), []).append(s.value)
            elif s.name == f"{metric.name}_sum":
                sums[_key(family, s.labels)] = s.value
        out[metric.name] = {
            key: [b - a for a, b in zip([0.0, *counts], counts, strict=False)] + [sums[key]]
            for key, counts in cumulative.items()
        }
    return out


def _counter_family(family: Family, totals: Mapping[Labels, float]) -> Metric:
    out = CounterMetricFamily(family.name, family.doc, labels=family.labels)
    for key, value in totals.items():
        out.add_metric(key, value)
    return out


def _histogram_family(family: Family, rows: Mapping[Labels, Sequence[float]]) -> Metric:
    assert family.buckets is not None
    out = HistogramMetricFamily(family.name, family.doc, labels=family.labels)
    edges = [*(repr(b) for b in family.buckets), "+Inf"]
    for key, row in rows.items():
        out.add_metric(key, list(zip(edges, accumulate(row[:-1]), strict=True)), row[-1])
    return out


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


def cache_by_profile(counters: Mapping[str, Mapping[Labels, float]]) -> dict[str, dict[str, float | None]]:
    """Prompt-cache totals per profile from the counters: input and cached tokens, hit rate and USD saved.

    The hit rate is cached input tokens over input tokens (None before any input was counted).
    """
    sums: dict[str, list[float]] = {}
    for column, name in enumerate(
        ("turnout_input_tokens", "turnout_cached_input_tokens", "turnout_cache_write_tokens", "turnout_cache_saved_usd")
    ):
        for labels, value in counters.get(name, {}).items():
            sums.setdefault(labels[0], [0.0, 0.0, 0.0, 0.0])[column] += value
    return {
        profile: {
            "input_tokens": int(tin),
            "cached_input_tokens": int(cached),
            "cache_write_tokens": int(written),
            "hit_rate": round(cached / tin, 4) if tin else None,
            "saved_usd": round(saved, 6),
        }
        for profile, (tin, cached, written, saved) in sorted(sums.items())
    }
