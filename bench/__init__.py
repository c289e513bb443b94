"""Turnout's benchmark harness: Turnout against raw aiohttp, the openai SDK and LiteLLM on one loopback upstream.

``make bench`` (or ``python -m bench.run [--quick]``) runs every benchmark scenario in one run and writes
``bench/results.md`` and ``bench/results.png``. See ``docs/benchmarks.md`` for how to read them.

Modules:
    upstream: the tiny OpenAI-shaped HTTP server every contender talks to (its own process, its own core).
    procs: child processes, CPU pinning, machine facts.
    stats: samples, medians, p99, and the alternating runner.
    contenders: one small class per contender (raw aiohttp, Turnout, openai SDK, LiteLLM).
    calls: the in-process scenarios (non-streaming, streaming, failover).
    concurrency: 1,000 concurrent streams in a dedicated child process (throughput and RSS).
    startup: import and client construction in fresh interpreters.
    gateway: ``turnout serve`` against LiteLLM's proxy.
    report: ``results.md`` and the plot.
    run: the command line.
"""
