"""A dead primary behind its circuit breaker: what a call costs, how often the primary is probed, how soon it is back.

Three parts, one healthy fallback throughout:

* **Timing** (the benchmark upstream, :mod:`bench.upstream`): sequential calls through a route whose primary is
  dead (``/down503``: every answer a 503; ``/silent``: requests are read and never answered) once its breaker is
  open, alternated with calls through a route that goes straight to the fallback (the floor). The breaker is
  opened by the first calls and, with a one-hour ``open_secs``, stays open while the calls are timed.
* **Probes and recovery** (the simulator, in this process, real time): the primary is down for
  :data:`OUTAGE_S` (503, or silent) and healthy after, ``open_secs`` is short; calls follow each other back to back.
  Measured: after which call the breaker was open, every request that still reached the primary (each must be the
  one probe of an interval that was over), and how long after the outage's end the primary served again, against
  the open interval in force then.
* **Healthy-path bookkeeping**: instructions per call (``python -m bench.hotpath --instructions --only chat``) with
  breakers on and with ``[reliability.breaker] enabled = false``; needs valgrind.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from bench import hotpath
from bench.calls import ScenarioResult
from bench.contenders import EXPECTED_CHAT, MESSAGES, TurnoutClient, turnout_config
from bench.settings import Settings
from bench.stats import Lane, alternate

#: How long the simulated outage lasts, and the breaker of the probe part: first open interval and its cap.
OUTAGE_S = 8.0
OPEN_S = 0.25
MAX_OPEN_S = 2.0
#: The first-token timeout of a silent primary: in the timing part (opening only) and in the probe part.
SILENT_TIMEOUT_S = 0.5
PROBE_TIMEOUT_S = 0.2

FLOOR = "turnout, straight to the fallback"
HEALTHY = "turnout, primary healthy"
DEAD = {"503": "turnout, dead primary (503), breaker open", "silent": "turnout, dead primary (silent), breaker open"}
PREFIX = {"503": "/down503", "silent": "/silent"}


@dataclass(slots=True, kw_only=True)
class OutageRun:
    """The probe part for one kind of outage.

    Attributes:
        mode: ``503`` or ``silent``.
        calls: Calls made, from the outage's start until the primary served again (and a few after).
        opened_after: The number of the call after which the breaker was open.
        probes: Requests that reached the primary once it was open and before it served again.
        early_probes: Of those, the ones made before the open interval in force was over, or two in one interval.
        probe_lateness_ms: The most any probe came after its interval was over (calls are sequential).
        intervals: The open intervals, in order (seconds).
        recovered_after_s: From the outage's end to the first call the primary served (None: it never did).
        interval_at_recovery_s: The open interval in force when the outage ended.
    """

    mode: str
    calls: int = 0
    opened_after: int | None = None
    probes: int = 0
    early_probes: int = 0
    probe_lateness_ms: float = 0.0
    intervals: list[float] = field(default_factory=list)
    recovered_after_s: float | None = None
    interval_at_recovery_s: float | None = None

    @property
    def back_in_time(self) -> bool:
        """Whether the primary served again within the open interval in force when the outage ended."""
        return (
            self.recovered_after_s is not None
            and self.interval_at_recovery_s is not None
            and self.recovered_after_s <= self.interval_at_recovery_s
        )


@dataclass(slots=True, kw_only=True)
class BreakerScenario:
    """Everything the breaker scenario measured."""

    timing: ScenarioResult
    outages: list[OutageRun]
    #: Instructions per call: Turnout with breakers on, and with ``enabled = false`` (None: not measured).
    instructions_on: float | None = None
    instructions_off: float | None = None
    notes: list[str] = field(default_factory=list)


def _dead_config(url: str, mode: str) -> dict[str, Any]:
    config = turnout_config(url, primary_prefix=PREFIX[mode])
    primary = config["providers"]["models"]["openai"]["primary"]
    primary["first_token_timeout_secs"] = SILENT_TIMEOUT_S
    config["reliability"] = {"breaker": {"open_secs": 3600.0, "max_open_secs": 3600.0}}
    return config


def _straight_config(url: str) -> dict[str, Any]:
    config = turnout_config(url)
    config["default_provider"] = "openai.backup"
    return config


class _Dead:
    """A client whose primary is dead; its breaker is opened before the timed calls and must stay open."""

    def __init__(self, url: str, mode: str) -> None:
        self.name = DEAD[mode]
        self.inner = TurnoutClient(url, name=self.name, config=_dead_config(url, mode))
        self.client = self.inner.client

    async def open(self) -> list[list[str]]:
        """Calls until the breaker is open; each call's outcomes."""
        seen = []
        for _ in range(3):
            reply = await self.client.chat(MESSAGES)
            seen.append([a.outcome for a in reply.attempts])
            if self.client.status()["breakers"]:
                break
        return seen

    async def outcomes(self) -> list[str]:
        reply = await self.client.chat(MESSAGES)
        if reply.text != EXPECTED_CHAT or reply.served.provider != "openai.backup":
            raise RuntimeError(f"{self.name}: not served by the fallback ({reply.served})")
        return [a.outcome for a in reply.attempts]

    def probes(self) -> int:
        return sum(n for (_, move), n in self.client.factory.breakers.transitions.items() if move == "probe")

    async def chat(self) -> str:
        return await self.inner.chat()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def timing(url: str, s: Settings) -> tuple[ScenarioResult, list[str]]:
    """Calls once the breaker is open, alternated with calls straight to the fallback and with a healthy primary."""
    straight = TurnoutClient(url, name=FLOOR, config=_straight_config(url))
    healthy = TurnoutClient(url, name=HEALTHY)
    dead = [_Dead(url, mode) for mode in DEAD]
    contenders: list[Any] = [straight, healthy, *dead]
    notes = []
    try:
        for d in dead:
            opening = await d.open()
            during = await d.outcomes()
            if during != ["breaker_skip", "ok"]:
                raise RuntimeError(f"{d.name}: the breaker did not open ({opening} then {during})")
            notes.append(
                f"{d.name}: the calls that opened the breaker made the attempts {opening}; every timed call's are "
                f"{during}."
            )
        lanes = [Lane(c.name, c.chat) for c in contenders]
        seconds = await alternate(
            lanes, rounds=s.failover_rounds, batch=s.failover_batch, warmup=s.warmup, budget_s=min(s.budget_s, 45.0)
        )
        for d in dead:
            still = await d.outcomes()
            if still != ["breaker_skip", "ok"] or d.probes():
                raise RuntimeError(f"{d.name}: the breaker did not stay open while timed ({still})")
    finally:
        for c in contenders:
            await c.aclose()
    notes.append(
        f"The floor is `{FLOOR}`: a route whose only entry is the fallback profile. `{HEALTHY}` is the two-entry "
        "route with a primary that answers, shown for information. The dead primaries' breakers have "
        "`open_secs = 3600`, so no probe falls in the timed calls (the probe part below measures probes)."
    )
    return ScenarioResult.of("breaker", "A dead primary behind its open breaker", lanes, seconds), notes


async def outage(mode: str) -> OutageRun:
    """The probe part for one kind of outage (``503`` or ``silent``), against the simulator in this process."""
    from turnout import Client
    from turnout.sim import Simulator

    run = OutageRun(mode=mode)
    primary, key = "primary-model", "openai.primary/primary-model"
    step = {"do": "flapping", "down": OUTAGE_S, "mode": "silence" if mode == "silent" else "status"}
    async with Simulator(script={"models": {primary: {"steps": [step]}}}) as sim:
        config = {
            "default_provider": "openai.primary",
            "providers": {
                "models": {
                    "openai": {
                        "primary": {
                            "uri": sim.base_url("openai"),
                            "api_key": "sk-bench-0000",
                            "model": primary,
                            "fallback": ["openai.backup"],
                            "first_token_timeout_secs": PROBE_TIMEOUT_S,
                        },
                        "backup": {"uri": sim.base_url("openai"), "api_key": "sk-bench-0000", "model": "backup"},
                    }
                }
            },
            "reliability": {"breaker": {"open_secs": OPEN_S, "max_open_secs": MAX_OPEN_S}},
            "ledger": {"enabled": False},
        }
        async with Client.from_dict(config, ledger=False) as client:
            store = client.factory.store
            sim.reset()  # the outage starts now
            down_until = time.time() + OUTAGE_S
            deadline = down_until + 2 * MAX_OPEN_S + 2.0
            record = None
            back_at: float | None = None
            while time.time() < deadline and (back_at is None or time.time() < back_at + 0.2):
                before = len(sim.log)
                started = time.time()
                reply = await client.chat(MESSAGES)
                reached = [e.time for e in sim.log[before:] if e.model == primary]  # when each request arrived
                hits = len(reached)
                run.calls += 1
                if record is not None and back_at is None and hits:
                    run.probes += 1
                    # judged by when the probe reached the primary: a call that began just before the interval
                    # ended may rightly probe once its walk gets there, after it
                    late = reached[0] - record.until
                    if late < 0 or hits > 1:
                        run.early_probes += 1
                    run.probe_lateness_ms = max(run.probe_lateness_ms, late * 1000.0)
                if back_at is None and reply.served.provider == "openai.primary" and started > down_until:
                    back_at = started
                    run.recovered_after_s = started - down_until
                    run.interval_at_recovery_s = record.interval if record is not None else None
                now = store.breaker(key)
                if now is not None and run.opened_after is None:
                    run.opened_after = run.calls
                if now is not None and (record is None or now.opened_at != record.opened_at):
                    run.intervals.append(now.interval)
                if now is not None:
                    record = now
    return run


def instructions(url: str) -> tuple[float | None, float | None]:
    """Instructions per healthy call with breakers on and off (:mod:`bench.hotpath`); None without valgrind."""
    if shutil.which("valgrind") is None:
        return None, None
    return hotpath.instructions(url, "chat", "turnout"), hotpath.instructions(url, "chat", "turnout-breaker-off")


async def measure(url: str, s: Settings) -> BreakerScenario:
    """All three parts."""
    result, notes = await timing(url, s)
    outages = [await outage("503"), await outage("silent")]
    on, off = await asyncio.to_thread(instructions, url)
    return BreakerScenario(timing=result, outages=outages, instructions_on=on, instructions_off=off, notes=notes)
