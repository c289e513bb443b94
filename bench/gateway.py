"""Gateway: ``turnout serve`` against a bare aiohttp pass-through proxy and LiteLLM's proxy, same upstream and load.

Layout (2 cores): the gateway under test alone on the client CPU; the upstream and the load generator on
the other. Turnout and LiteLLM get a primary and one fallback, a client key, one worker, no ledger/database;
the pass-through proxy (``bench/passthrough.py``) forwards each body as is, the floor a gateway is judged by.

For each gateway: start it, wait for its health route, saturate it (``wrk`` when installed, else aiohttp)
for a fixed time, then send a fixed moderate rate (open loop) and compare the latencies with the same rate
sent straight to the upstream, just before: added p50 / p99 = through-the-gateway − direct.
"""

from __future__ import annotations

import statistics
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """One saturation run: requests per second, and the gateway's CPU time per answered request."""

    rps: float
    cpu_us: float | None


@dataclass(slots=True, kw_only=True)
class GatewayResult:
    """One gateway's figures (or why it could not run)."""

    name: str
    command: str
    #: The median of :attr:`rounds` (one round for LiteLLM's proxy).
    rps: float | None = None
    #: The median CPU time (user + system) the gateway process spent per answered request.
    cpu_us: float | None = None
    rounds: list[Round] = field(default_factory=list)
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


PASSTHROUGH = "aiohttp pass-through"
TURNOUT = "turnout serve"
LITELLM = "litellm proxy"


def _specs(url: str, tmp: Path) -> list[_Spec]:
    bindir = Path(procs.PY).parent
    tport, lport, pport = _free_port(), _free_port(), _free_port()
    return [
        _Spec(
            name=PASSTHROUGH,
            args=[procs.PY, "-m", "bench.passthrough", "--upstream", url, "--port", str(pport)],
            base=f"http://127.0.0.1:{pport}",
            health=f"http://127.0.0.1:{pport}/health",
            model=PRIMARY_MODEL,
            config_name="passthrough.txt",
            config_text="",
            start_within=60,
        ),
        _Spec(
            name=TURNOUT,
            args=[procs.PY, "-m", "turnout", "serve", "--config", str(tmp / "gateway.toml"), "--port", str(tport)],
            base=f"http://127.0.0.1:{tport}",
            health=f"http://127.0.0.1:{tport}/health",
            model="openai.primary",
            config_name="gateway.toml",
            config_text=_turnout_config(url, tport),
            start_within=60,
        ),
        _Spec(
            name=LITELLM,
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


class _Running:
    """A started gateway process and its result."""

    def __init__(self, spec: _Spec, tmp: Path) -> None:
        self.spec = spec
        self.result = GatewayResult(
            name=spec.name, command=" ".join("python" if a == procs.PY else a for a in spec.args)
        )
        (tmp / spec.config_name).write_text(spec.config_text)
        self.log_path = tmp / f"{spec.config_name}.log"
        self._log = self.log_path.open("w")
        self.t0 = time.perf_counter()
        self.child = subprocess.Popen(
            spec.args,
            cwd=tmp,
            env=procs.offline_env(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=procs.pinned_to(procs.CLIENT_CPU),
        )
        self.target = f"{spec.base}/v1/chat/completions"
        self.body = loadgen.chat_body(spec.model)

    def failed(self, exc: BaseException) -> None:
        self._log.flush()
        tail = self.log_path.read_text()[-1500:].strip()
        self.result.failure = f"{exc}" + (f"; its output ends with: {tail}" if tail else "")

    def stop(self) -> None:
        self.result.rss_mib = self.result.rss_mib or _rss_mib(self.child.pid)
        procs.stop(self.child, timeout=40)
        self._log.close()

    async def ready(self) -> None:
        """Wait for its health route, then send a few requests that must all succeed."""
        await procs.wait_http(self.spec.health, self.spec.start_within, self.child)
        self.result.start_s = time.perf_counter() - self.t0
        _, errors = await loadgen.fixed_rate(self.target, self.body, GATEWAY_KEY, rate=50, count=20, name="warm-up")
        if errors:
            raise RuntimeError(f"{errors} of 20 warm-up requests failed")

    async def saturate(self, s: Settings, *, warm: bool) -> None:
        """One saturation round: its requests per second and the process's CPU time per request."""
        before = _cpu_seconds(self.child.pid)
        sat = await _saturate(self.target, self.body, s, warm=warm)
        after = _cpu_seconds(self.child.pid)
        cpu = (
            (after - before) * 1e6 / sat.requests if before is not None and after is not None and sat.requests else None
        )
        r = self.result
        r.rounds.append(Round(rps=sat.rps, cpu_us=cpu))
        r.errors += sat.errors
        r.tool = sat.tool
        r.rps = statistics.median(x.rps for x in r.rounds)
        cpus = [x.cpu_us for x in r.rounds if x.cpu_us is not None]
        r.cpu_us = statistics.median(cpus) if cpus else None

    async def latencies(self, url: str, s: Settings, rates: list[float]) -> None:
        """An open loop at each rate, each beside the same straight to the upstream just before."""
        direct_body = loadgen.chat_body(PRIMARY_MODEL)
        direct_url = f"{url}/v1/chat/completions"
        name = self.spec.name
        for rate in rates:
            count = max(s.gateway_requests, int(rate * s.gateway_seconds))
            direct, _ = await loadgen.fixed_rate(
                direct_url, direct_body, API_KEY, rate=rate, count=count, name="direct"
            )
            latency, errors = await loadgen.fixed_rate(
                self.target, self.body, GATEWAY_KEY, rate=rate, count=count, name=name
            )
            self.result.latencies.append(RateLatency(rate=rate, latency=latency, direct=direct, errors=errors))
        self.result.rss_mib = _rss_mib(self.child.pid)


_FAILURES = (RuntimeError, TimeoutError, OSError)


async def _alone(spec: _Spec, url: str, s: Settings, tmp: Path, rates: Callable[[float], list[float]]) -> GatewayResult:
    """Start one gateway, saturate it once, then measure latency at the rates ``rates(saturation)`` returns."""
    running = _Running(spec, tmp)
    try:
        await running.ready()
        await running.saturate(s, warm=True)
        assert running.result.rps is not None
        await _sequential([running], url, s)
        await running.latencies(url, s, rates(running.result.rps))
    except _FAILURES as exc:
        running.failed(exc)
    finally:
        running.stop()
    return running.result


async def _paired(specs: list[_Spec], url: str, s: Settings, tmp: Path, rates: list[float]) -> list[GatewayResult]:
    """Start every gateway, saturate them in alternating rounds (A B A B …), then measure each one's latency.

    On a shared machine the load of other processes drifts; alternating short rounds gives each gateway the
    same share of that drift, and the CPU time per request hardly depends on it at all.
    """
    running = [_Running(spec, tmp) for spec in specs]
    try:
        for r in running:
            try:
                await r.ready()
            except _FAILURES as exc:
                r.failed(exc)
        live = [r for r in running if r.result.failure is None]
        for i in range(s.gateway_rounds):
            for r in live:
                await r.saturate(s, warm=i == 0)
        await _sequential(live, url, s)
        for r in live:
            await r.latencies(url, s, rates)
    except _FAILURES as exc:
        for r in running:
            if r.result.failure is None:
                r.failed(exc)
    finally:
        for r in running:
            r.stop()
    return [r.result for r in running]


async def _sequential(running: list[_Running], url: str, s: Settings) -> None:
    """Back-to-back requests to each gateway and straight to the upstream, in alternating batches."""
    targets = [(f"{url}/v1/chat/completions", loadgen.chat_body(PRIMARY_MODEL), API_KEY, "direct")]
    targets += [(r.target, r.body, GATEWAY_KEY, r.spec.name) for r in running]
    direct, *through = await loadgen.sequential_rounds(targets, count=s.gateway_requests)
    for r, latency in zip(running, through, strict=True):
        r.result.sequential = RateLatency(rate=0, latency=latency, direct=direct, errors=0)


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process and its children so far (None where it cannot be read)."""
    try:
        import psutil

        p = psutil.Process(pid)
        return float(sum(sum(c.cpu_times()[:2]) for c in [p, *p.children(recursive=True)]))
    except Exception:  # psutil missing or the process gone: the figure is optional
        return None


async def _saturate(target: str, body: bytes, s: Settings, *, warm: bool = True) -> loadgen.Saturation:
    n = s.gateway_connections
    if procs.wrk_path() is not None:
        if warm:  # a short unmeasured run first: connections, lazy imports, caches
            loadgen.saturate_wrk(target, body, GATEWAY_KEY, seconds=1, connections=n, cpu=procs.UPSTREAM_CPU)
        return loadgen.saturate_wrk(
            target, body, GATEWAY_KEY, seconds=s.gateway_seconds, connections=n, cpu=procs.UPSTREAM_CPU
        )
    if warm:
        await loadgen.saturate_aiohttp(target, body, GATEWAY_KEY, seconds=1, connections=n)
    return await loadgen.saturate_aiohttp(target, body, GATEWAY_KEY, seconds=s.gateway_seconds, connections=n)


async def measure(url: str, s: Settings) -> GatewayScenario:
    """Every gateway against the upstream at ``url``; this process moves to the upstream's CPU meanwhile.

    LiteLLM's proxy runs first: the *common* rate, at which all are measured, is a quarter of its
    saturation (at most ``gateway_rate``), so it is moderate for all. Turnout and the pass-through proxy
    then run side by side (both started, on the same CPU, loaded in turn): ``gateway_rounds`` alternating
    saturation rounds each, then latency, also at ``gateway_rate`` (the rate Turnout's target is judged at).
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

        with tempfile.TemporaryDirectory(prefix="turnout-bench-gateway-") as tmpdir:
            tmp = Path(tmpdir)
            passthrough_spec, turnout_spec, litellm_spec = _specs(url, tmp)
            litellm = await _alone(litellm_spec, url, s, tmp, litellm_rates)
            rates = sorted({scenario.common_rate, scenario.turnout_rate})
            turnout, passthrough = await _paired([turnout_spec, passthrough_spec], url, s, tmp, rates)
            scenario.results = [turnout, passthrough, litellm]
    finally:
        procs.pin(procs.CLIENT_CPU)
    return scenario
