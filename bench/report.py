"""``bench/results.md`` and ``bench/results.png`` from one run's results, with every target judged."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import flaky, hedge, sections
from bench.breaker import DEAD, FLOOR, MAX_OPEN_S, OPEN_S, OUTAGE_S, PROBE_TIMEOUT_S, BreakerScenario
from bench.calls import ScenarioResult
from bench.concurrency import Concurrency
from bench.gateway import LITELLM as LITELLM_GATEWAY
from bench.gateway import PASSTHROUGH, GatewayResult, GatewayScenario, RateLatency
from bench.gateway import TURNOUT as TURNOUT_GATEWAY
from bench.pools import AFTER_CALLS, FAST_MS, LEARN_CALLS, SLOW_MS, SLOWED_MS, WINDOW, WINDOW_MIN, PoolScenario
from bench.procs import Machine
from bench.settings import Settings
from bench.startup import BARE, LITELLM, TURNOUT, Startup

TURNOUT_NAME = "turnout"


@dataclass(slots=True, kw_only=True)
class Results:
    """Everything one run measured (a scenario that failed has its error in ``failures``)."""

    settings: Settings
    machine: Machine
    started: dt.datetime
    seconds: float = 0.0
    commands: list[str] = field(default_factory=list)
    chat: ScenarioResult | None = None
    stream: ScenarioResult | None = None
    failover: ScenarioResult | None = None
    concurrency: list[Concurrency] = field(default_factory=list)
    startup: list[Startup] = field(default_factory=list)
    imports: list[tuple[str, float]] = field(default_factory=list)
    gateway: GatewayScenario | None = None
    breaker: BreakerScenario | None = None
    flaky: flaky.FlakyScenario | None = None
    pools: PoolScenario | None = None
    hedge: hedge.HedgeScenario | None = None
    failures: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """One target: what was measured, the limit, and whether it holds (None: not measured)."""

    target: str
    measured: str
    limit: str
    met: bool | None
    #: For a ratio: the 90 % interval of the ratio with the run's rounds resampled ("" otherwise).
    interval: str = ""


def _mark(met: bool | None) -> str:
    return "not measured" if met is None else ("**met**" if met else "**NOT met**")


#: A call's limit, Turnout / raw aiohttp: a failover makes two calls' round trips, a call during a cooldown one.
CALL_LIMIT = 1.5
#: A streamed call's limit, Turnout / raw aiohttp with its SSE parse.
STREAM_LIMIT = 1.6
#: RSS per held stream, at most (KiB).
STREAM_RSS_KIB = 128
#: Gateway requests/s at saturation over a bare aiohttp pass-through proxy's, at least.
GATEWAY_LIMIT = 0.5


def verdicts(r: Results) -> list[Verdict]:
    """Every performance target, judged on this run."""
    out = [
        ratio_target(r.chat, TURNOUT_NAME, "Non-streaming: Turnout / raw aiohttp (median per call)", CALL_LIMIT),
        ratio_target(r.stream, TURNOUT_NAME, "Streaming, 100 chunks: Turnout / raw aiohttp + SSE parse", STREAM_LIMIT),
        ratio_target(
            r.failover,
            _failover_name(r, "429"),
            "Failover after 429 `Retry-After: 0` / one raw round trip",
            2 * CALL_LIMIT,
        ),
        ratio_target(
            r.failover, _failover_name(r, "cooldown"), "A call during the cooldown / one raw round trip", CALL_LIMIT
        ),
    ]
    turnout_c = next((c for c in r.concurrency if c.contender == "turnout"), None)
    out.append(
        Verdict(
            target="1,000 concurrent streams: RSS per stream",
            measured=f"{turnout_c.per_stream_kib:.1f} KiB" if turnout_c else "–",
            limit=f"≤ {STREAM_RSS_KIB} KiB",
            met=turnout_c.per_stream_kib <= STREAM_RSS_KIB if turnout_c else None,
        )
    )
    start = next((s for s in r.startup if s.name == TURNOUT), None)
    out.append(
        Verdict(
            target="Start-up: import + client from `examples/turnout.toml`, time",
            measured=f"{start.total_s:.3f} s" if start else "–",
            limit="≤ 0.5 s",
            met=start.total_s <= 0.5 if start else None,
        )
    )
    out.append(
        Verdict(
            target="Start-up: peak RSS of that process",
            measured=f"{start.maxrss_mib:.1f} MiB" if start else "–",
            limit="≤ 60 MiB",
            met=start.maxrss_mib <= 60 if start else None,
        )
    )
    g = r.gateway
    t = g.get(TURNOUT_GATEWAY) if g else None
    lite = g.get(LITELLM_GATEWAY) if g else None
    bare = g.get(PASSTHROUGH) if g else None
    rps_ratio = paired_ratio(t, bare) if t and bare else None
    cpu_ratio = bare.cpu_us / t.cpu_us if t and bare and t.cpu_us and bare.cpu_us else None
    out.append(
        Verdict(
            target="Gateway: requests/s at saturation, Turnout / bare aiohttp pass-through proxy",
            measured=(
                f"{rps_ratio:.2f} ×" + (f" (CPU per request: {cpu_ratio:.2f} ×)" if cpu_ratio is not None else "")
                if rps_ratio is not None
                else "–"
            ),
            limit=f"≥ {GATEWAY_LIMIT} ×",
            met=rps_ratio >= GATEWAY_LIMIT if rps_ratio is not None else None,
        )
    )
    t_seq, bare_seq = (t.sequential if t else None), (bare.sequential if bare else None)
    added = t_seq.added_p50_ms / bare_seq.added_p50_ms if t_seq and bare_seq and bare_seq.added_p50_ms > 0 else None
    out.append(
        Verdict(
            target="Gateway: added p50 (sequential), Turnout / bare aiohttp pass-through proxy",
            measured=(
                f"{added:.2f} × ({t_seq.added_p50_ms:.2f} / {bare_seq.added_p50_ms:.2f} ms)"
                if added is not None and t_seq and bare_seq
                else "–"
            ),
            limit="≤ 1.5 ×",
            met=added <= 1.5 if added is not None else None,
        )
    )
    if t and lite and t.rps and lite.rps:
        ratio = t.rps / lite.rps
        out.append(
            Verdict(
                target="Gateway: requests/s at saturation, Turnout / LiteLLM proxy",
                measured=f"{ratio:.1f} ×",
                limit="≥ 5 ×",
                met=ratio >= 5,
            )
        )
    else:
        out.append(
            Verdict(
                target="Gateway: requests/s at saturation, Turnout / LiteLLM proxy",
                measured="–",
                limit="≥ 5 ×",
                met=None,
            )
        )
    at = t.at(g.turnout_rate) if t and g else None
    out.append(
        Verdict(
            target=f"Gateway: added p99 at {g.turnout_rate:.0f} req/s"
            if g
            else "Gateway: added p99 at a moderate rate",
            measured=f"{at.added_p99_ms:.2f} ms" if at else "–",
            limit="≤ 2 ms",
            met=at.added_p99_ms <= 2.0 if at else None,
        )
    )
    out += _breaker_verdicts(r.breaker)
    out += _pool_verdicts(r.pools)
    out += [Verdict(target=t, measured=m, limit=lim, met=met) for t, m, lim, met in flaky.targets(r.flaky)]
    out += [Verdict(target=t, measured=m, limit=lim, met=met) for t, m, lim, met in hedge.targets(r.hedge)]
    return out


#: A dead primary behind an open breaker: a call's time over a call straight to the fallback (median).
BREAKER_LIMIT = 1.05


def ratio_target(scenario: ScenarioResult | None, name: str, target: str, limit: float) -> Verdict:
    """The verdict on ``name``'s median ratio to its floor in ``scenario`` (not measured: None)."""
    if scenario is None:
        return Verdict(target=target, measured="–", limit=f"≤ {limit:.2f} ×", met=None)
    ratio = scenario.ratio(name)
    return Verdict(
        target=target,
        measured=_ratio_text(ratio, limit),
        limit=f"≤ {limit:.2f} ×",
        met=ratio <= limit,
        interval=_interval(scenario, name),
    )


def _breaker_verdicts(b: BreakerScenario | None) -> list[Verdict]:
    out = [
        ratio_target(
            b.timing if b is not None else None,
            name,
            f"Dead primary ({mode}), breaker open: per call / straight to the fallback (median)",
            BREAKER_LIMIT,
        )
        for mode, name in DEAD.items()
    ]
    runs = b.outages if b is not None else []

    def each(text: str) -> str:
        return " / ".join(f"{text.format(o=o)} ({o.mode})" for o in runs) or "–"

    out.append(
        Verdict(
            target="Dead primary: its breaker is open after call",
            measured=each("{o.opened_after}"),
            limit="≤ 3",
            met=all(o.opened_after is not None and o.opened_after <= 3 for o in runs) if runs else None,
        )
    )
    out.append(
        Verdict(
            target="Dead primary: requests to it while open beyond one probe per open interval",
            measured=each("{o.early_probes} of {o.probes} probes"),
            limit="0",
            met=all(o.early_probes == 0 and o.probes >= 1 for o in runs) if runs else None,
        )
    )
    out.append(
        Verdict(
            target="Recovered primary serves again within the open interval in force",
            measured=" / ".join(
                f"{o.recovered_after_s:.2f} s of {o.interval_at_recovery_s:g} s ({o.mode})"
                if o.recovered_after_s is not None and o.interval_at_recovery_s is not None
                else f"never ({o.mode})"
                for o in runs
            )
            or "–",
            limit="≤ 1 interval",
            met=all(o.back_in_time for o in runs) if runs else None,
        )
    )
    return out


#: No pool configured: this tree's median per call over the tree's before pools, at most.
POOL_OVERHEAD_LIMIT = 1.03


def _pool_verdicts(p: PoolScenario | None) -> list[Verdict]:
    learned = p.learning if p else None
    share = learned.fast_share(51, LEARN_CALLS) if learned else None
    moved = learned.moved_after if learned else None
    cost = p.overhead if p else None
    return [
        Verdict(
            target=f"Latency pool ({FAST_MS} and {SLOW_MS} ms members): calls 51–{LEARN_CALLS} sent to the fast one",
            measured=f"{share:.0%}" if share is not None else "–",
            limit="≥ 90 %",
            met=share >= 0.9 if share is not None else None,
        ),
        Verdict(
            target=f"Latency pool: calls until it moves after the fast member slows to {SLOWED_MS} ms",
            measured=(f"{moved}" if moved is not None else f"not within {AFTER_CALLS}") if learned else "–",
            limit="≤ 50",
            met=(moved is not None and moved <= 50) if learned else None,
        ),
        Verdict(
            target="No pool configured: non-streaming Turnout now / before pools (child processes, alternating)",
            measured=_ratio_text(cost.ratio, POOL_OVERHEAD_LIMIT) if cost else "–",
            limit=f"≤ {POOL_OVERHEAD_LIMIT:.2f} ×",
            met=cost.ratio <= POOL_OVERHEAD_LIMIT if cost else None,
            interval=f"{cost.interval[0]:.2f}–{cost.interval[1]:.2f}"
            if cost and not math.isnan(cost.interval[0])
            else "",
        ),
    ]


def paired_ratio(a: GatewayResult, b: GatewayResult) -> float | None:
    """The median, over the rounds they ran in turn, of ``a``'s requests/s over ``b``'s in the same round."""
    pairs = [x.rps / y.rps for x, y in zip(a.rounds, b.rounds, strict=False) if y.rps]
    return statistics.median(pairs) if pairs else None


def _ratio_text(ratio: float, limit: float) -> str:
    """The ratio with enough decimals that the verdict (on the unrounded ratio) can be read off it."""
    text = f"{ratio:.3f}"
    if float(text) == limit and ratio != limit:
        text = f"{ratio:.4f}"
    return f"{text} ×"


def _interval(s: ScenarioResult, name: str) -> str:
    low, high = s.intervals.get(name, (math.nan, math.nan))
    return "–" if math.isnan(low) else f"{low:.2f}–{high:.2f}"


def _failover_name(r: Results, which: str) -> str:
    names = [s.name for s in r.failover.summaries] if r.failover else []
    return next((n for n in names if which in n), which)


# --- markdown -----------------------------------------------------------------------------------------


def _us(v: float) -> str:
    if math.isnan(v):
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _calls_table(s: ScenarioResult) -> list[str]:
    floor = s.floor
    rows = [
        "| contender | calls | median µs | p99 µs | × floor (median) | 90 % interval | × floor (p99) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for x in s.summaries:
        interval = "" if x is floor else _interval(s, x.name)
        rows.append(
            f"| {x.name} | {x.n} | {_us(x.median_us)} | {_us(x.p99_us)} "
            f"| {x.ratio(s.floor_of(x.name)):.2f} | {interval} | {x.p99_ratio(s.floor_of(x.name)):.2f} |"
        )
    return rows


def _calls_section(title: str, s: ScenarioResult | None, failure: str | None, what: str) -> list[str]:
    out = [f"## {title}", "", what, ""]
    if s is None:
        return [*out, f"Not measured: {failure or 'skipped'}", ""]
    out += _calls_table(s)
    out += [
        "",
        f"Alternating batches, {s.seconds:.1f} s in all. The floor is the first row; the interval is the "
        "median ratio's, rounds resampled.",
        "",
    ]
    out += [f"- {n}" for n in s.notes]
    return [*out, ""]


def _concurrency_section(r: Results) -> list[str]:
    out = [
        "## 1,000 concurrent streams",
        "",
        "One client per child process (so the RSS is that client's alone), pinned to the client CPU. *Held*: "
        f"{r.settings.streams} concurrent streams that the upstream paces (10 bursts of 10 chunks, 100 ms apart), "
        "so all are open at once; RSS sampled every 5 ms; per stream = (peak − baseline after warm-up) / streams. "
        f"*Throughput*: {r.settings.stream_waves} wave(s) of {r.settings.streams} concurrent unpaced 100-chunk "
        "streams.",
        "",
    ]
    if not r.concurrency:
        return [*out, f"Not measured: {r.failures.get('concurrency', 'skipped')}", ""]
    out += [
        "| client | baseline RSS MiB | peak RSS MiB (held) | RSS per stream KiB | held wall s | streams/s | chunks/s "
        "| client CPU µs per stream | process peak RSS MiB (VmHWM) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in r.concurrency:
        out.append(
            f"| {c.contender} | {c.baseline_mib:.1f} | {c.peak_mib:.1f} | {c.per_stream_kib:.1f} | {c.held_s:.2f} | "
            f"{c.streams_per_s:,.0f} | {c.chunks_per_s:,.0f} | {c.cpu_us_per_stream:,.0f} | {c.maxrss_mib:.1f} |"
        )
    return [*out, ""]


def _startup_section(r: Results) -> list[str]:
    out = [
        "## Start-up",
        "",
        "A fresh interpreter per run (pinned, dummy keys in the environment, a temp working directory, its modules' "
        "bytecode read from a cache a warm-up run filled, as an installed package's is); time from "
        "just before the import to just after the client is built, in the child; peak RSS (`VmHWM`) of the "
        "whole process. *process* is the parent's wall time from spawn to exit (interpreter start included).",
        "",
    ]
    if not r.startup:
        return [*out, f"Not measured: {r.failures.get('startup', 'skipped')}", ""]
    out += [
        "| what | runs | import s | import + client s | process s | peak RSS MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in r.startup:
        imp = "–" if s.name == BARE else f"{s.import_s:.3f}"
        total = "–" if s.name in (BARE, LITELLM) else f"{s.total_s:.3f}"
        out.append(f"| {s.name} | {s.runs} | {imp} | {total} | {s.process_s:.3f} | {s.maxrss_mib:.1f} |")
    if r.imports:
        heavy = ", ".join(f"{name} {ms:.0f} ms" for name, ms in r.imports)
        out += [
            "",
            f"Largest third-party imports under `from turnout import Client` (cumulative, `-X importtime`): {heavy}.",
        ]
    return [*out, ""]


def _latency_row(name: str, label: str, x: RateLatency) -> str:
    return (
        f"| {name} | {label} | {x.latency.n} | {x.latency.median_us / 1000:.2f} | {x.latency.p99_us / 1000:.2f} | "
        f"{x.direct.median_us / 1000:.2f} | {x.direct.p99_us / 1000:.2f} | "
        f"{x.added_p50_ms:+.2f} | {x.added_p99_ms:+.2f} |"
    )


def _gateway_section(r: Results) -> list[str]:
    g = r.gateway
    out = [
        "## Gateway",
        "",
        "The gateway alone on the client CPU; the upstream and the load generator on the other. Turnout and "
        "LiteLLM: a primary and one fallback, one client key, one worker, no ledger or database; the bare aiohttp "
        "pass-through proxy (`bench/passthrough.py`) forwards each body unparsed, the floor. Saturation is a closed "
        f"loop for {r.settings.gateway_seconds:g} s; latency is an open loop at a fixed rate, compared with the "
        "same rate sent straight to the upstream just before (*added* = through the gateway − direct), and a "
        "closed loop of back-to-back requests on one connection (*sequential*).",
        "",
    ]
    if g is None:
        return [*out, f"Not measured: {r.failures.get('gateway', 'skipped')}", ""]
    if g.upstream_rps:
        out += [f"The upstream alone serves {g.upstream_rps:,.0f} requests/s under the same load generator.", ""]
    out += [
        "| gateway | requests/s at saturation (rounds) | CPU µs per request | non-200 | load | RSS after load MiB "
        "| start s |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for x in g.results:
        if x.failure or x.rps is None:
            out.append(f"| {x.name} | could not run | | | | | |")
            continue
        rss = f"{x.rss_mib:.0f}" if x.rss_mib else "–"
        rounds = f" ({', '.join(f'{r.rps:,.0f}' for r in x.rounds)})" if len(x.rounds) > 1 else ""
        cpu = f"{x.cpu_us:.0f}" if x.cpu_us is not None else "–"
        start = f"{x.start_s:.1f}" if x.start_s is not None else "–"
        out.append(f"| {x.name} | {x.rps:,.0f}{rounds} | {cpu} | {x.errors} | {x.tool} | {rss} | {start} |")
    out += [
        "",
        "| gateway | load | requests | p50 ms | p99 ms | direct p50 ms | direct p99 ms | added p50 ms | added p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for x in g.results:
        if x.sequential:
            out.append(_latency_row(x.name, "sequential", x.sequential))
        for lat in x.latencies:
            out.append(_latency_row(x.name, f"{lat.rate:.0f} req/s", lat))
    out += [
        "",
        f"The common rate ({g.common_rate:.0f} req/s) is a quarter of LiteLLM's saturation (at most "
        f"{g.turnout_rate:.0f}), so it is moderate for all; Turnout's target is judged at {g.turnout_rate:.0f} req/s. "
        "Turnout's speed is judged against the pass-through proxy: requests/s at saturation (the median of the "
        "ratios of rounds run in turn, A B A B …, so both get the same share of the machine's other load; the CPU "
        "time per request, which that load hardly changes, is shown beside it), and the added p50 of back-to-back "
        "requests (*sequential*).",
    ]
    for x in g.results:
        out.append(f"- `{x.command}`")
        if x.failure:
            out.append(f"  - could not run: {x.failure}")
    return [*out, ""]


def _breaker_section(r: Results) -> list[str]:
    b = r.breaker
    out = [
        "## A dead primary behind its circuit breaker",
        "",
        "One dead primary and a healthy fallback, sequential calls (`bench/breaker.py`). *Timing*: once the "
        "primary's breaker is open, each call skips it (`breaker_skip`) and the fallback answers; the floor is a "
        "route that goes straight to the fallback. *Probes and recovery*: the simulator in this process, the primary "
        f"down for {OUTAGE_S:g} s (503, or silent: accepts and never answers, first-token timeout "
        f"{PROBE_TIMEOUT_S:g} s), breaker `open_secs = {OPEN_S:g}` (doubling up to {MAX_OPEN_S:g}), calls back to "
        "back in real time.",
        "",
    ]
    if b is None:
        return [*out, f"Not measured: {r.failures.get('breaker', 'skipped')}", ""]
    out.append(f"Measured {r.started.strftime('%Y-%m-%d %H:%M UTC')} ({r.settings.name} settings).")
    out.append("")
    out += _calls_table(b.timing)
    out += ["", f"Alternating batches, {b.timing.seconds:.1f} s in all. The floor (`{FLOOR}`) is the first row.", ""]
    out += [f"- {n}" for n in b.notes]
    out += [
        "",
        "| outage | calls | breaker open after call | probes | probes early (or two in one interval) "
        "| latest probe after its interval | open intervals s | primary back after the outage ended "
        "| interval in force |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for o in b.outages:
        back = f"{o.recovered_after_s:.3f} s" if o.recovered_after_s is not None else "never"
        force = f"{o.interval_at_recovery_s:g} s" if o.interval_at_recovery_s is not None else "–"
        out.append(
            f"| {o.mode} | {o.calls} | {o.opened_after or '–'} | {o.probes} | {o.early_probes} "
            f"| {o.probe_lateness_ms:.1f} ms | {', '.join(f'{i:g}' for i in o.intervals)} | {back} | {force} |"
        )
    out += [
        "",
        "A probe is a request that reached the primary while its breaker was open or half-open; it is early when "
        "the interval in force was not over when it reached the primary (the simulator's arrival time). *Latest "
        "probe after its interval*: calls are sequential, so the probe is the first call after the interval ends.",
        "",
    ]
    if b.instructions_on and b.instructions_off:
        out.append(
            "Healthy path (`python -m bench.hotpath --instructions --only chat`, callgrind, the two-entry route with a "
            f"primary that answers): {b.instructions_on:,.0f} instructions per call with breakers, "
            f"{b.instructions_off:,.0f} with `[reliability.breaker] enabled = false` "
            f"({b.instructions_on - b.instructions_off:+,.0f}, {b.instructions_on / b.instructions_off:.4f} ×)."
        )
    else:
        out.append("Healthy path: not measured (valgrind is not installed).")
    return [*out, ""]


def _pair(interval: tuple[float, float]) -> str:
    return "–" if math.isnan(interval[0]) else f"{interval[0]:.2f}–{interval[1]:.2f}"


def _pools_section(r: Results) -> list[str]:
    p = r.pools
    out = [
        "## Pools",
        "",
        f"*Learning*: a `latency` pool of two OpenAI members on the simulator (in process, real delays): first "
        f"token after {SLOW_MS} ms (listed first) and {FAST_MS} ms; {LEARN_CALLS} sequential streamed calls, then "
        f"the fast member slows to {SLOWED_MS} ms and {AFTER_CALLS} more follow. The pool explores 5 % of calls "
        f"(the default); affinity is off, as every call sends the same prompt; the simulator and the pool's draws "
        f"are seeded. *Moved* counts the calls after the "
        f"slow-down before the first one the other member served from which on at least {WINDOW_MIN} of every "
        f"{WINDOW} calls go to it.",
        "",
    ]
    if p is None:
        return [*out, f"Not measured: {r.failures.get('pools', 'skipped')}", ""]
    learned = p.learning
    if learned is None:
        out += [f"Learning not measured: {p.failures.get('learning', 'skipped')}", ""]
    else:
        moved = learned.moved_after
        out += [
            "| calls | to the 50 ms member | median TTFT ms |",
            "|---|---:|---:|",
            f"| 1–50 | {learned.fast_share(1, 50):.0%} | {statistics.median(learned.ttft_ms[:50]):.0f} |",
            f"| 51–{LEARN_CALLS} | {learned.fast_share(51, LEARN_CALLS):.0%} | "
            f"{statistics.median(learned.ttft_ms[50:LEARN_CALLS]):.0f} |",
            f"| after the slow-down: {AFTER_CALLS} | {learned.after.count('openai.fast') / len(learned.after):.0%} | "
            f"{statistics.median(learned.ttft_ms[LEARN_CALLS:]):.0f} |",
            "",
            (f"After the slow-down the pool moved after {moved} call(s)" if moved is not None else "It did not move")
            + f"; {learned.seconds:.1f} s in all.",
            "",
        ]
    cost = p.overhead
    if cost is None:
        return [*out, f"Overhead not measured: {p.failures.get('overhead', 'skipped')}", ""]
    out += [
        "*Overhead when no pool is configured*: the non-streaming call of the chat scenario in three child processes "
        f"pinned to the client CPU: this tree's `turnout`, the tree before pools (`{cost.base}`, exported with "
        "`git archive`), and a copy of this tree, in alternating batches (each goes first in turn). The copy "
        "shows how far two processes running the same code differ by themselves: read the ratio against it. For "
        "information, in one process: the same client, and clients whose default is a two-member pool (both "
        "members on the bench upstream).",
        "",
        "| code | calls | median µs | p99 µs | ratio (median) | 90 % interval |",
        "|---|---:|---:|---:|---:|---:|",
        f"| {cost.before.name} | {cost.before.n} | {_us(cost.before.median_us)} | {_us(cost.before.p99_us)} | | |",
        f"| {cost.now.name} | {cost.now.n} | {_us(cost.now.median_us)} | {_us(cost.now.p99_us)} | "
        f"{cost.ratio:.3f} × before | {_pair(cost.interval)} |",
        f"| {cost.same.name} | {cost.same.n} | {_us(cost.same.median_us)} | {_us(cost.same.p99_us)} | "
        f"{cost.noise:.3f} × now | {_pair(cost.same_interval)} |",
        "",
    ]
    if cost.pools:
        floor = cost.pools[0]
        out += ["| in one process | calls | median µs | p99 µs | × no pool (median) |", "|---|---:|---:|---:|---:|"]
        out += [
            f"| {x.name} | {x.n} | {_us(x.median_us)} | {_us(x.p99_us)} | {x.ratio(floor):.2f} |" for x in cost.pools
        ]
    return [*out, "", f"{cost.seconds:.1f} s in all.", ""]


def markdown(r: Results) -> str:
    """The whole ``results.md``."""
    m = r.machine
    pinned = "upstream pinned to CPU 0, clients to CPU 1" if m.pinned else "not pinned (one CPU)"
    lines = [
        "# Turnout benchmark results",
        "",
        f"Generated by `{r.commands[0] if r.commands else 'python -m bench.run'}` on "
        f"{r.started.strftime('%Y-%m-%d %H:%M UTC')}, {r.settings.name} run, {r.seconds / 60:.1f} min. "
        "How to read it: [docs/benchmarks.md](../docs/benchmarks.md). Ratios, not absolute times, are what to "
        "compare between runs.",
        "",
        "## Machine",
        "",
        f"- CPU: {m.cpu_model}, {m.cores} cores ({pinned})",
        f"- Python {m.python} on {m.platform}",
        "- " + ", ".join(f"{k} {v}" for k, v in m.versions.items()),
        "",
        "## Targets",
        "",
        "| target | measured | 90 % interval | limit | |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [f"| {v.target} | {v.measured} | {v.interval} | {v.limit} | {_mark(v.met)} |" for v in verdicts(r)]
    lines += [
        "",
        "A ratio's *90 % interval* comes from resampling the run's rounds (each round keeps its floor batch and its "
        "contender batch together): it shows how much the verdict depends on which rounds this run happened to "
        "get, not the drift between whole runs, which on a shared machine can be larger.",
    ]
    if r.failures:
        lines += ["", "Scenarios that could not run:"] + [f"- {k}: {v}" for k, v in r.failures.items()]
    lines += ["", "## Commands", ""] + [f"- `{c}`" for c in r.commands] + [""]
    lines += _calls_section(
        "Non-streaming call",
        r.chat,
        r.failures.get("chat"),
        "One complete answer per call (`Client.chat` with a primary and one fallback profile; raw aiohttp POST + "
        "orjson decode as the floor).",
    )
    lines += _calls_section(
        "Streaming call (100 chunks)",
        r.stream,
        r.failures.get("stream"),
        "One 100-chunk stream per call, consumed to its end (the floor: aiohttp `iter_any` + a minimal SSE split + "
        "orjson per event).",
    )
    lines += _calls_section(
        "Failover after a 429",
        r.failover,
        r.failures.get("failover"),
        "The primary answers 429 `rate_limit_exceeded`; the fallback answers. The floor is one raw round trip.",
    )
    lines += _concurrency_section(r)
    lines += _startup_section(r)
    lines += _gateway_section(r)
    lines += _breaker_section(r)
    when = f"Measured {r.started.strftime('%Y-%m-%d %H:%M UTC')} ({r.settings.name} settings)."
    lines += flaky.section(r.flaky, r.failures.get("flaky"), when)
    lines += _pools_section(r)
    lines += hedge.section(r.hedge, r.failures.get("hedge"), when)
    lines += ["## Plot", "", "![per-call cost by contender](results.png)", ""]
    return "\n".join(lines)


# --- plot -------------------------------------------------------------------------------------------


def plot(r: Results, path: Path) -> bool:
    """Per-call median (bar) and p99 (tick) by contender, one panel per call scenario; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels: Sequence[ScenarioResult] = [s for s in (r.chat, r.stream, r.failover) if s is not None]
    if not panels:
        return False
    rows = sum(len(p.summaries) for p in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 0.8 * len(panels) + 0.45 * rows))
    if len(panels) == 1:
        axes = [axes]
    for ax, s in zip(axes, panels, strict=True):
        names = [x.name for x in s.summaries][::-1]
        med = [x.median_us for x in s.summaries][::-1]
        p99 = [x.p99_us for x in s.summaries][::-1]
        colors = [
            "#2b7bba" if n.startswith("turnout") else ("#777777" if n == s.floor.name else "#d9822b") for n in names
        ]
        ax.barh(names, med, color=colors)
        ax.scatter(p99, names, marker="|", s=200, color="black", label="p99")
        ax.set_xscale("log")
        ax.set_xlim(left=s.floor.median_us / 2)  # log bars need a common origin below the floor
        ax.set_title(f"{s.title}: per-call time, µs (bar: median, tick: p99; × floor)", fontsize=10)
        for y, name in enumerate(names):
            ax.text(med[y], y, f"  {s.ratio(name):.2f}×", va="center", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(r: Results, directory: Path) -> Path:
    """Write ``results.md`` and ``results.png`` into ``directory``; return the markdown path.

    The sections other benchmarks write are kept from the ``results.md`` it replaces (see :mod:`bench.sections`).
    """
    plot(r, directory / "results.png")
    path = directory / "results.md"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(sections.kept(old, markdown(r)), encoding="utf-8")
    return path
