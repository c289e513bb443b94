"""Prometheus metrics of the gateway, in a registry per application (so tests and apps never collide).

Attempt-level metrics come from the attempts of each call (``Reply.attempts`` or the error's
``.attempts``): no extra work happens on the upstream path. Label children are cached, and the number of
distinct ``(provider, model)`` label pairs is bounded, because an unpinned profile forwards whatever model
a caller names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from turnout.attribution import Attempt

#: Distinct (provider, model) label pairs kept before further models are counted as ``other``.
MAX_MODEL_LABELS = 500

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    """The gateway's metrics.

    Metric names: ``turnout_gateway_requests_total{surface,status}``,
    ``turnout_gateway_request_duration_seconds{surface}``, ``turnout_gateway_in_flight_requests``,
    ``turnout_upstream_attempts_total{provider,model,outcome}``,
    ``turnout_fallbacks_total{requested_provider,served_provider}``, ``turnout_retries_total{provider,model}``,
    ``turnout_cooldowns_active``, ``turnout_upstream_latency_seconds{provider,model}``,
    ``turnout_upstream_ttft_seconds{provider,model}``, ``turnout_gateway_overhead_seconds{surface}``, and
    ``turnout_headroom_requests{profile,key_id}`` / ``turnout_headroom_tokens{profile,key_id}`` (what each
    configured profile and key last announced it has left; labelled with configuration only, never a client
    string).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter(
            "turnout_gateway_requests",
            "Gateway requests by surface and HTTP status.",
            ["surface", "status"],
            registry=r,
        )
        self.duration = Histogram(
            "turnout_gateway_request_duration_seconds",
            "Wall time of a gateway request, first byte in to last byte out.",
            ["surface"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("turnout_gateway_in_flight_requests", "Requests being served now.", registry=r)
        self.attempts = Counter(
            "turnout_upstream_attempts",
            "Upstream attempts (and cooldown skips) by profile, model and outcome.",
            ["provider", "model", "outcome"],
            registry=r,
        )
        self.fallbacks = Counter(
            "turnout_fallbacks",
            "Answers served by another entry than the one requested.",
            ["requested_provider", "served_provider"],
            registry=r,
        )
        self.retries = Counter(
            "turnout_retries", "Attempts beyond the first try on an entry.", ["provider", "model"], registry=r
        )
        self.cooldowns = Gauge("turnout_cooldowns_active", "Profiles and keys cooling down now.", registry=r)
        self.latency = Histogram(
            "turnout_upstream_latency_seconds",
            "Duration of one upstream attempt.",
            ["provider", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "turnout_upstream_ttft_seconds",
            "Time to the first streamed token of an upstream attempt.",
            ["provider", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "turnout_gateway_overhead_seconds",
            "Time a request spent in the gateway outside upstream attempts (parsing, routing, encoding, backoff).",
            ["surface"],
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )
        self.headroom_requests = Gauge(
            "turnout_headroom_requests",
            "Requests the upstream last said are left in its rate-limit window, per profile and key.",
            ["profile", "key_id"],
            registry=r,
        )
        self.headroom_tokens = Gauge(
            "turnout_headroom_tokens",
            "Tokens the upstream last said are left in its rate-limit window, per profile and key.",
            ["profile", "key_id"],
            registry=r,
        )
        self._children: dict[tuple[Any, ...], Any] = {}
        self._models: set[tuple[str, str]] = set()

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = metric.labels(*labels)
            self._children[key] = child
        return child

    def _model(self, provider: str, model: str) -> str:
        pair = (provider, model)
        if pair in self._models:
            return model
        if len(self._models) >= MAX_MODEL_LABELS:
            return "other"
        self._models.add(pair)
        return model

    def request(self, surface: str, status: int, seconds: float) -> None:
        """Count one finished request."""
        self._child(self.requests, surface, str(status)).inc()
        self._child(self.duration, surface).observe(seconds)

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
        for a in attempts:
            model = self._model(a.provider, a.model)
            self._child(self.attempts, a.provider, model, a.outcome).inc()
            if a.outcome == "cooldown_skip":
                continue
            if a.try_number > 1:
                self._child(self.retries, a.provider, model).inc()
            upstream += a.duration_ms
            self._child(self.latency, a.provider, model).observe(a.duration_ms / 1000.0)
            if a.ttft_ms is not None:
                self._child(self.ttft, a.provider, model).observe(a.ttft_ms / 1000.0)
        if fallback is not None:
            self._child(self.fallbacks, *fallback).inc()
        if seconds is not None:
            self._child(self.overhead, surface).observe(max(0.0, seconds - upstream / 1000.0))

    def render(self, cooldowns_active: int, headroom: Iterable[Mapping[str, Any]] = ()) -> bytes:
        """The exposition text (the cooldown and headroom gauges are read at scrape time).

        ``headroom``: the rows of ``Client.status()["headroom"]``; a key's gauge appears once it announced
        that budget.
        """
        self.cooldowns.set(cooldowns_active)
        for row in headroom:
            kid = row["key_id"] or ""
            for gauge, left in ((self.headroom_requests, row["requests"]), (self.headroom_tokens, row["tokens"])):
                if left is not None:
                    self._child(gauge, row["profile"], kid).set(left)
        return bytes(generate_latest(self.registry))
