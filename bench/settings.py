"""How many calls each scenario makes: the full run (``make bench``) and the smoke run (``--quick``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Counts and time bounds of one benchmark run."""

    name: str
    warmup: int
    chat_rounds: int
    chat_batch: int
    stream_rounds: int
    stream_batch: int
    failover_rounds: int
    failover_batch: int
    #: The contenders no target judges (the openai SDK, LiteLLM) run in every this-many-th round only.
    slow_every: int
    #: An in-process scenario stops after the round that crosses this many seconds.
    budget_s: float
    streams: int
    stream_waves: int
    startup_runs: int
    gateway_seconds: float
    gateway_rate: int
    #: At least this many requests per fixed-rate latency run.
    gateway_requests: int
    gateway_connections: int
    #: Turnout and the pass-through proxy are saturated in this many alternating rounds (medians reported).
    gateway_rounds: int
    #: The hedging scenario's seeded runs with hedging on, and how many of those seeds also run without it.
    hedge_seeds: int
    hedge_off_seeds: int
    #: The flaky chain: calls per run (each seed runs them four times: breakers on and off, streamed and not).
    flaky_calls: int
    flaky_seeds: int


FULL = Settings(
    name="full",
    warmup=50,
    chat_rounds=120,
    chat_batch=50,
    stream_rounds=90,
    stream_batch=20,
    failover_rounds=120,
    failover_batch=50,
    slow_every=3,
    budget_s=120.0,
    streams=1000,
    stream_waves=3,
    startup_runs=5,
    gateway_seconds=8.0,
    gateway_rate=200,
    gateway_requests=300,
    gateway_connections=32,
    gateway_rounds=5,
    hedge_seeds=10,
    hedge_off_seeds=3,
    flaky_calls=20000,
    flaky_seeds=2,
)

QUICK = Settings(
    name="quick",
    warmup=10,
    chat_rounds=8,
    chat_batch=25,
    stream_rounds=6,
    stream_batch=10,
    failover_rounds=8,
    failover_batch=25,
    slow_every=2,
    budget_s=15.0,
    streams=1000,
    stream_waves=1,
    startup_runs=1,
    gateway_seconds=3.0,
    gateway_rate=200,
    gateway_requests=60,
    gateway_connections=32,
    gateway_rounds=2,
    hedge_seeds=2,
    hedge_off_seeds=1,
    flaky_calls=2000,
    flaky_seeds=1,
)
