"""Gateway: ``turnout serve`` against LiteLLM's proxy, with the same upstream and the same load.

Layout (2 cores): the gateway under test alone on the client CPU; the upstream and the load generator on
the other. Each gateway gets a primary and one fallback, a client key, one worker, no ledger/database.

For each gateway: start it, wait for its health route, saturate it (``wrk`` when installed, else aiohttp)
for a fixed time, then send a fixed moderate rate (open loop) and compare the latencies with the same rate
sent straight to the upstream, just before: added p50 / p99 = through-the-gateway − direct.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import loadgen, procs
from bench.contenders import API_KEY, BACKUP_MODEL, PRIMARY_MODEL
from bench.settings import Settings
from bench.stats import Summary

GATEWAY_KEY = "sk-gateway-bench"


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLatency:
    """Latencies at one fixed rate through a gateway, and straight to the upstream just before."""

    rate: float
    latency: Summary
    direct: Summary
    errors: int

    @property
    def added_p50_ms(self) -> float:
        return (self.latency.median_us - self.direct.median_us) / 1000

    @property
    def added_p99_ms(self) -> float:
        return (self.latency.p99_us - self.direct.p99_us) / 1000


@dataclass(slots=True, kw_only=True)
class GatewayResult:
    """One gateway's figures (or why it could not run)."""

    name: str
    command: str
    rps: float | None = None
    errors: int = 0
    tool: str = ""
    latencies: list[RateLatency] = field(default_factory=list)
    #: Back-to-back requests on one connection (``direct`` is the same straight to the upstream).
    sequential: RateLatency | None = None
    rss_mib: float | None = None
    start_s: float | None = None
    failure: str | None = None

    def at(self, rate: float) -> RateLatency | None:
        """The latencies measured at ``rate``."""
        return next((r for r in self.latencies if r.rate == rate), None)


@dataclass(slots=True, kw_only=True)
class GatewayScenario:
    """Both gateways, the upstream's own capacity, and the rates used for latency."""

    upstream_rps: float | None
    common_rate: float
    turnout_rate: float
    results: list[GatewayResult] = field(default_factory=list)

    def get(self, name: str) -> GatewayResult | None:
        return next((r for r in self.results if r.name == name), None)


def _turnout_config(url: str, port: int) -> str:
    return f"""default_provider = "openai.primary"

[providers.models.openai.primary]
uri = "{url}/v1"
api_key = "{API_KEY}"
model = "{PRIMARY_MODEL}"
fallback = ["openai.backup"]

[providers.models.openai.backup]
uri = "{url}/v1"
api_key = "{API_KEY}"
model = "{BACKUP_MODEL}"

[ledger]
enabled = false

[gateway]
api_keys = ["{GATEWAY_KEY}"]
host = "127.0.0.1"
port = {port}
"""


def _litellm_config(url: str) -> str:
    return f"""model_list:
  - model_name: primary
    litellm_params:
      model: openai/{PRIMARY_MODEL}
      api_base: {url}/v1
      api_key: {API_KEY}
  - model_name: backup
    litellm_params:
      model: openai/{BACKUP_MODEL}
      api_base: {url}/v1
      api_key: {API_KEY}
router_settings:
  fallbacks: [{{"primary": ["backup"]}}]
litellm_settings:
  telemetry: false
  set_verbose: false
general_settings:
  master_key: {GATEWAY_KEY}
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float | None:
    try:
        import psutil

        p = psutil.Process(pid)
        rss: int = sum(c.memory_info().rss for c in [p, *p.children(recursive=True)])
        return rss / (1024 * 1024)
    except Exception:  # psutil missing or the process gone: the figure is optional
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Spec:
    name: str
    args: list[str]
    base: str
    health: str
    model: str
    config_name: str
    config_text: str
    start_within: float


def _specs(url: str, tmp: Path) -> list[_Spec]:
    bindir = Path(procs.PY).parent
    tport, lport = _free_port(), _free_port()
    return [
        _Spec(
            name="turnout serve",
            args=[procs.PY, "-m", "turnout", "serve", "--config", str(tmp / "gateway.toml"), "--port", str(tport)],
            base=f"http://127.0.0.1:{tport}",
            health=f"http://127.0.0.1:{tport}/health",
            model="openai.primary",
            config_name="gateway.toml",
            config_text=_turnout_config(url, tport),
            start_within=60,
        ),
        _Spec(
            name="litellm proxy",
            args=[
                str(bindir / "litellm"),
                "--config",
                str(tmp / "litellm.yaml"),
                "--host",
                "127.0.0.1",
                "--port",
                str(lport),
                "--num_workers",
                "1",
            ],
            base=f"http://127.0.0.1:{lport}",
            health=f"http://127.0.0.1:{lport}/health/liveliness",
            model="primary",
            config_name="litellm.yaml",
            config_text=_litellm_config(url),
            start_within=180,
        ),
    ]


async def _one(spec: _Spec, url: str, s: Settings, tmp: Path, rates: Callable[[float], list[float]]) -> GatewayResult:
    """Start one gateway, saturate it, then measure latency at the rates ``rates(saturation)`` returns."""
    result = GatewayResult(name=spec.name, command=" ".join("python" if a == procs.PY else a for a in spec.args))
    (tmp / spec.config_name).write_text(spec.config_text)
    log_path = tmp / f"{spec.config_name}.log"
    t0 = time.perf_counter()
    with log_path.open("w") as log:
        child = subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is measured
            spec.args,
            cwd=tmp,
            env=procs.offline_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=procs.pinned_to(procs.CLIENT_CPU),
        )
        try:
            await _drive(spec, child, result, url, s, rates, t0)
        except (RuntimeError, TimeoutError, OSError) as exc:
            log.flush()
            tail = log_path.read_text()[-1500:].strip()
            result.failure = f"{exc}" + (f"; its output ends with: {tail}" if tail else "")
        finally:
            procs.stop(child, timeout=40)
    return result


async def _drive(
    spec: _Spec,
    child: subprocess.Popen[str],
    result: GatewayResult,
    url: str,
    s: Settings,
    rates: Callable[[float], list[float]],
    t0: float,
) -> None:
    await procs.wait_http(spec.health, spec.start_within, child)
    result.start_s = time.perf_counter() - t0
    target = f"{spec.base}/v1/chat/completions"
    body = loadgen.chat_body(spec.model)
    _, errors = await loadgen.fixed_rate(target, body, GATEWAY_KEY, rate=50, count=20, name="warm-up")
    if errors:
        raise RuntimeError(f"{errors} of 20 warm-up requests failed")
    sat = await _saturate(target, body, s)
    result.rps, result.errors, result.tool = sat.rps, sat.errors, sat.tool
    direct_body = loadgen.chat_body(PRIMARY_MODEL)
    direct_url = f"{url}/v1/chat/completions"
    n = s.gateway_requests
    result.sequential = RateLatency(
        rate=0,
        direct=await loadgen.sequential(direct_url, direct_body, API_KEY, count=n, name="direct"),
        latency=await loadgen.sequential(target, body, GATEWAY_KEY, count=n, name=spec.name),
        errors=0,
    )
    for rate in rates(sat.rps):
        count = max(s.gateway_requests, int(rate * s.gateway_seconds))
        direct, _ = await loadgen.fixed_rate(direct_url, direct_body, API_KEY, rate=rate, count=count, name="direct")
        latency, errors = await loadgen.fixed_rate(target, body, GATEWAY_KEY, rate=rate, count=count, name=spec.name)
        result.latencies.append(RateLatency(rate=rate, latency=latency, direct=direct, errors=errors))
    result.rss_mib = _rss_mib(child.pid)


async def _saturate(target: str, body: bytes, s: Settings) -> loadgen.Saturation:
    n = s.gateway_connections
    if procs.wrk_path() is not None:
        # A short unmeasured run first: connections, lazy imports, caches.
        loadgen.saturate_wrk(target, body, GATEWAY_KEY, seconds=1, connections=n, cpu=procs.UPSTREAM_CPU)
        return loadgen.saturate_wrk(
            target, body, GATEWAY_KEY, seconds=s.gateway_seconds, connections=n, cpu=procs.UPSTREAM_CPU
        )
    await loadgen.saturate_aiohttp(target, body, GATEWAY_KEY, seconds=1, connections=n)
    return await loadgen.saturate_aiohttp(target, body, GATEWAY_KEY, seconds=s.gateway_seconds, connections=n)


async def measure(url: str, s: Settings) -> GatewayScenario:
    """Both gateways against the upstream at ``url``; this process moves to the upstream's CPU meanwhile.

    LiteLLM's proxy runs first: the *common* rate, at which both are measured, is a quarter of its
    saturation (at most ``gateway_rate``), so it is moderate for both. Turnout is also measured at
    ``gateway_rate`` (the rate its target is judged at).
    """
    procs.pin(procs.UPSTREAM_CPU)
    try:
        upstream = await _saturate(f"{url}/v1/chat/completions", loadgen.chat_body(PRIMARY_MODEL), s)
        scenario = GatewayScenario(
            upstream_rps=upstream.rps, common_rate=float(s.gateway_rate), turnout_rate=float(s.gateway_rate)
        )

        def litellm_rates(rps: float) -> list[float]:
            scenario.common_rate = float(min(s.gateway_rate, max(5, round(rps / 4))))
            return [scenario.common_rate]

        def turnout_rates(rps: float) -> list[float]:
            return sorted({scenario.common_rate, scenario.turnout_rate})

        with tempfile.TemporaryDirectory(prefix="turnout-bench-gateway-") as tmpdir:
            tmp = Path(tmpdir)
            turnout_spec, litellm_spec = _specs(url, tmp)
            scenario.results.append(await _one(litellm_spec, url, s, tmp, litellm_rates))
            scenario.results.insert(0, await _one(turnout_spec, url, s, tmp, turnout_rates))
    finally:
        procs.pin(procs.CLIENT_CPU)
    return scenario
