"""Prometheus metrics of the gateway, in a registry per application (so tests and apps never collide).

Attempt-level metrics come from the attempts of each call (``Reply.attempts`` or the error's
``.attempts``): no extra work happens on the upstream path. Only the ``(provider, model)`` pairs the
configuration names get their own labels: a model a client chose (for a profile without a pinned model) is
counted as ``model="other"``, so no client string becomes a label.

Circuit breakers are read at scrape time: ``turnout_breaker_state{entry}`` (0 closed, 1 open, 2 half-open) for
every configured entry (``family.alias/model``) and ``turnout_breaker_transitions_total{entry,transition}`` from
the process's counts. An entry whose model the configuration does not name is labelled ``family.alias/other``
(its state is the highest among such entries of the profile).

Counting is on every request's path, so the gateway keeps its finished requests and hands them over in
batches (:meth:`Metrics.fold`, before anything reads the totals): a batch is counted mostly in C, a dict
update per counter label and a bucket update per histogram label (the event loop is the only writer, so no
lock); ``prometheus_client`` only formats the totals, when ``/metrics`` is scraped. What is formatted is a
:class:`~turnout.gateway.workers.Totals`: this process's own (:meth:`Metrics.export`), or with several workers
the whole server's (:func:`turnout.gateway.workers.merge`).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from functools import reduce
from itertools import accumulate, chain, compress, repeat
from operator import add, attrgetter, is_not, ne, not_, sub, truediv
from typing import Any, Protocol, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from turnout.attribution import SKIPS, Attempt
from turnout.breaker import BreakerRecord, Gate, entry_key, gate, split_entry_key
from turnout.gateway.wire import CLIENT_CLOSED
from turnout.gateway.workers import Totals
from turnout.health import Breakers
from turnout.hedge import HedgeTally
from turnout.pools import MemberLoad
from turnout.pricing import Rates

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST

#: ``turnout_breaker_state`` of each gate.
BREAKER_STATES = {Gate.CLOSED: 0, Gate.OPEN: 1, Gate.DUE: 2}

Labels = tuple[str, ...]
K = TypeVar("K", bound=Hashable)


class Finished(Protocol):
    """A finished request, as the metrics count it (the gateway's record of one request)."""

    @property
    def surface(self) -> str:
        """The endpoint family (``openai``, ``anthropic``, ``models`` ...)."""

    @property
    def status(self) -> int:
        """The HTTP status answered (:data:`~turnout.gateway.wire.CLIENT_CLOSED` when the client went away)."""

    @property
    def seconds(self) -> float:
        """The request's time in the gateway."""

    @property
    def attempts(self) -> Sequence[Attempt] | None:
        """The attempts of its call; None when it made none."""

    @property
    def fallback(self) -> tuple[str, str] | None:
        """(requested, served) profile when another entry than the one requested answered."""


_SURFACE = attrgetter("surface")
_STATUS = attrgetter("status")
_SECONDS = attrgetter("seconds")
_ATTEMPTS = attrgetter("attempts")
_FALLBACK = attrgetter("fallback")
_ATTEMPT_KEY = attrgetter("provider", "model", "outcome", "try_number")
_PROVIDER_MODEL = attrgetter("provider", "model")
_OUTCOME = attrgetter("outcome")
_DURATION = attrgetter("duration_ms")
_TTFT = attrgetter("ttft_ms")


def _grouped(keys: list[K], values: list[float]) -> Iterable[tuple[K, list[float]]]:
    """``values`` by their key, each key's in their order, keys in the order they first appear."""
    if not keys or keys.count(keys[0]) == len(keys):  # the usual batch: one key (counted in C)
        return [(keys[0], values)] if keys else []
    groups: dict[K, list[float]] = {}
    for key, value in zip(keys, values, strict=True):
        groups.setdefault(key, []).append(value)
    return groups.items()


def _upstream_ms(attempts: Sequence[Attempt]) -> float:
    """The time a call spent in upstream attempts (skips take none), summed in order."""
    upstream = 0.0
    for a in attempts:
        if a.outcome not in SKIPS:
            upstream += a.duration_ms
    return upstream


class _Counter:
    """A counter family: a total per label tuple."""

    __slots__ = ("doc", "labels", "name", "totals")

    def __init__(self, name: str, doc: str, labels: Labels) -> None:
        self.name, self.doc, self.labels = name, doc, labels
        self.totals: dict[Labels, float] = {}

    def add(self, key: Labels, n: float) -> None:
        """Count ``n`` more under ``key``."""
        totals = self.totals
        totals[key] = totals.get(key, 0.0) + n

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

    def observe(self, key: Labels, values: list[float]) -> None:
        """Observe each of ``values`` under ``key``, in order (the sum adds them one by one, as they came)."""
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0.0] * (len(self.bounds) + 2)  # buckets, +Inf, then the sum
        # each value counts in the first bucket whose bound is >= it (le)
        for bucket, n in Counter(map(bisect_left, repeat(self.bounds), values)).items():
            row[bucket] += n
        row[-1] = reduce(add, values, row[-1])

    def family(self, rows: Mapping[Labels, Sequence[float]]) -> Metric:
        out = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        edges = [*(repr(b) for b in self.bounds), "+Inf"]
        for key, row in rows.items():
            cumulative = list(accumulate(row[:-1]))
            out.add_metric(key, list(zip(edges, cumulative, strict=True)), row[-1])
        return out


def _cache_counters() -> tuple[_Counter, _Counter, _Counter, _Counter]:
    """Input tokens of answered attempts, the part read from and written to the prompt cache, and what it saved."""
    pm = ("provider", "model")
    return (
        _Counter("turnout_input_tokens", "Input tokens of answered attempts.", pm),
        _Counter("turnout_cached_input_tokens", "Input tokens of answered attempts read from the prompt cache.", pm),
        _Counter("turnout_cache_write_tokens", "Input tokens of answered attempts written to the prompt cache.", pm),
        _Counter(
            "turnout_cache_saved_usd",
            "USD the prompt cache saved: cached tokens at the input price minus at theirs.",
            pm,
        ),
    )


def _edge_counters() -> tuple[_Counter, _Counter]:
    """Status page sign-ins by outcome, and requests refused at the gateway's edge by reason."""
    return (
        _Counter(
            "turnout_gateway_logins",
            "Status page sign-ins by outcome: ok, wrong_key, or throttled (refused by the login rate limit).",
            ("outcome",),
        ),
        _Counter(
            "turnout_gateway_refused",
            "Requests refused before any work, by reason: host, cross_site or content_type.",
            ("reason",),
        ),
    )


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
        registry: The registry (default: a new one).
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
        self.ledger_errors = _Counter(
            "turnout_ledger_errors", "Failed ledger writes: batches or rows refused, failed opens, calls dropped.", ()
        )
        self.rejections = _Counter(
            "turnout_key_rejections",
            "Calls of a limited client key refused: daily_limit, reservation, max_call, unpriced, ledger_unavailable, "
            "spend_busy, rpm, tpm.",
            ("key", "reason"),
        )
        self.input_tokens, self.cached_tokens, self.cache_writes, self.cache_saved = _cache_counters()
        self._rates = rates
        self.logins, self.refusals = _edge_counters()
        self._labelled = frozenset(labelled)
        self._breakers = breakers
        self._clock = clock
        self._statuses: dict[int, str] = {}
        self.counters = (
            self.requests,
            self.attempts,
            self.fallbacks,
            self.retries,
            self.logins,
            self.refusals,
            self.ledger_errors,
            self.rejections,
            self.input_tokens,
            self.cached_tokens,
            self.cache_writes,
            self.cache_saved,
        )
        self.histograms = (self.duration, self.latency, self.ttft, self.overhead)
        self._view = Totals(worker="", at=0.0)  # what the next scrape formats: set by render
        self._spend: Mapping[str, float] = {}  # each limited key's spend today: set by render
        self.registry.register(_Collector(self))

    def _model(self, provider: str, model: str) -> str:
        return model if (provider, model) in self._labelled else "other"

    def _code(self, status: int) -> str:
        code = self._statuses.get(status)
        if code is None:
            code = self._statuses[status] = str(status)
        return code

    def fold(self, done: Sequence[Finished]) -> None:
        """Count finished requests, as one by one in their order.

        Each request: its status and duration. One that made a call (``attempts`` not None): its attempts (the
        upstream latency and time to first token of those that were not skips), retries, its fallback and,
        unless the client went away, the gateway's overhead (its time outside upstream attempts).

        A batch is read in columns (``attrgetter``), counted with ``Counter`` and its histogram values grouped by
        label, each label's in order: every count and every sum is what counting one request at a time gives
        (``tests/gateway/test_gateway_metrics.py`` holds the two together).
        """
        if not done:
            return
        surfaces = list(map(_SURFACE, done))
        for (surface, status), n in Counter(zip(surfaces, map(_STATUS, done), strict=True)).items():
            self.requests.add((surface, self._code(status)), n)
        for surface, values in _grouped(surfaces, list(map(_SECONDS, done))):
            self.duration.observe((surface,), values)
        calls = list(compress(done, map(is_not, map(_ATTEMPTS, done), repeat(None))))
        if not calls:
            return
        per_call: list[Sequence[Attempt]] = list(map(_ATTEMPTS, calls))
        attempts = list(chain.from_iterable(per_call))
        skipped = list(map(SKIPS.__contains__, map(_OUTCOME, attempts)))
        self._count(attempts, list(compress(attempts, map(not_, skipped))) if any(skipped) else attempts)
        for pair, n in Counter(filter(None, map(_FALLBACK, calls))).items():
            self.fallbacks.add(pair, n)
        if len(attempts) == len(per_call) and not any(skipped) and list(map(len, per_call)).count(1) == len(per_call):
            upstream = list(map(_DURATION, attempts))  # one attempt per call, none skipped: its own time
        else:
            upstream = list(map(_upstream_ms, per_call))
        kept = list(map(ne, map(_STATUS, calls), repeat(CLIENT_CLOSED)))  # the client waited for the answer
        upstream_s = map(truediv, compress(upstream, kept), repeat(1000.0))
        in_gateway = map(sub, compress(map(_SECONDS, calls), kept), upstream_s)
        overhead = list(map(max, repeat(0.0), in_gateway))
        for surface, values in _grouped(list(compress(map(_SURFACE, calls), kept)), overhead):
            self.overhead.observe((surface,), values)

    def _count(self, attempts: list[Attempt], live: list[Attempt]) -> None:
        """Count attempts and retries, and observe the latency and time to first token of the ``live`` ones."""
        labelled = self._labelled
        for (provider, model, outcome, try_number), n in Counter(map(_ATTEMPT_KEY, attempts)).items():
            label = model if (provider, model) in labelled else "other"
            self.attempts.add((provider, label, outcome), n)
            if try_number > 1 and outcome not in SKIPS:
                self.retries.add((provider, label), n)
        self._count_tokens(live)
        pairs = list(map(_PROVIDER_MODEL, live))
        labels = {pair: (pair[0], pair[1] if pair in labelled else "other") for pair in set(pairs)}
        keys = list(map(labels.__getitem__, pairs))
        for key, values in _grouped(keys, list(map(truediv, map(_DURATION, live), repeat(1000.0)))):
            self.latency.observe(key, values)
        timed = list(map(is_not, map(_TTFT, live), repeat(None)))
        if any(timed):
            ttfts = list(map(truediv, compress(map(_TTFT, live), timed), repeat(1000.0)))
            for key, values in _grouped(list(compress(keys, timed)), ttfts):
                self.ttft.observe(key, values)

    def _count_tokens(self, live: list[Attempt]) -> None:
        """Count the input, cached and cache-write tokens of answered attempts, and what the cache saved."""
        labelled = self._labelled
        for a in live:
            usage = a.usage
            if usage is None or a.outcome != "ok" or not usage.input_tokens:
                continue
            key = (a.provider, a.model if (a.provider, a.model) in labelled else "other")
            self.input_tokens.add(key, usage.input_tokens)
            if usage.cached_input_tokens:
                self.cached_tokens.add(key, usage.cached_input_tokens)
                rates = self._rates(a.provider, a.model) if self._rates is not None else None
                if rates is not None:
                    self.cache_saved.add(key, rates.cache_saving(usage))
            if usage.cache_write_tokens:
                self.cache_writes.add(key, usage.cache_write_tokens)

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
        for counter in (
            m.attempts,
            m.fallbacks,
            m.retries,
            m.ledger_errors,
            m.rejections,
            m.input_tokens,
            m.cached_tokens,
            m.cache_writes,
            m.cache_saved,
        ):
            yield counter.family(counters.get(counter.name, {}))
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
        for histogram in (m.latency, m.ttft, m.overhead):
            yield histogram.family(histograms.get(histogram.name, {}))
        yield from m.headroom_families(view.headroom)
        yield from m.breaker_families(view.breakers, view.transitions)
        yield from _pool_families(view.pools)
        yield from _hedge_families(view.hedging)
        for counter in (m.logins, m.refusals):
            yield counter.family(counters.get(counter.name, {}))
        yield CounterMetricFamily(
            "turnout_gateway_worker_restarts",
            "Dead workers the supervising process started again (turnout serve --workers N).",
            value=view.restarts,
        )


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
