"""The gateway's own cost per request: server-side instructions (callgrind) or CPU time, Turnout against the floor.

Wall requests/s on a shared 2-core machine drifts by more than most single changes are worth; what a change
to the gateway's request path alters is the work the server does per request, which this measures from
outside the server process, the real command lines of ``bench/gateway.py``:

* ``--instructions`` (default): each server runs under ``valgrind --tool=callgrind``; after a warm-up its
  counters are zeroed (``callgrind_control -z``), a fixed number of requests is sent over 32 keep-alive
  connections, and its counters are dumped (``callgrind_control -d``). The garbage collector's runs are not
  counted (whether a full collection falls inside a round or not depends on the run). The first round runs
  about 2 % above the later ones, which repeat to about 0.1 % within a run; separate runs of the same code
  differ by up to about 2 %: compare the same round, over more than one run.
* ``--cpu``: each server runs natively on the measured CPU; its user + system CPU time (``/proc/PID/stat``)
  is read around a fixed number of requests, in alternating rounds, and the median per request reported.

Run: ``python -m bench.gateway_cost [--cpu] [--requests N] [--rounds R] [--only turnout,passthrough]``.
Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

from bench import loadgen, procs
from bench.contenders import PRIMARY_MODEL
from bench.gateway import GATEWAY_KEY, _free_port, _turnout_config

CONNECTIONS = 32


def _command(name: str, url: str, port: int, tmp: Path) -> tuple[list[str], str]:
    if name == "passthrough":
        return [procs.PY, "-m", "bench.passthrough", "--upstream", url, "--port", str(port)], PRIMARY_MODEL
    config = tmp / "gateway.toml"
    config.write_text(_turnout_config(url, port))
    return [procs.PY, "-m", "turnout", "serve", "--config", str(config), "--port", str(port)], "openai.primary"


async def _load(target: str, body: bytes, count: int) -> None:
    """``count`` requests over :data:`CONNECTIONS` keep-alive connections; every one must succeed."""
    headers = {"Authorization": f"Bearer {GATEWAY_KEY}", "Content-Type": "application/json"}
    left = [count]

    async def worker(session: aiohttp.ClientSession) -> None:
        while left[0] > 0:
            left[0] -= 1
            async with session.post(target, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}")

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONNECTIONS)) as session:
        await asyncio.gather(*(worker(session) for _ in range(CONNECTIONS)))


class _Server:
    def __init__(self, name: str, url: str, tmp: Path, *, callgrind: bool) -> None:
        self.name = name
        port = _free_port()
        args, model = _command(name, url, port, tmp)
        self.out = tmp / f"{name}.cg"
        if callgrind:
            # the collector's runs are left out: whether one lands inside a round depends on the run, and it is
            # cheap at ``turnout serve``'s thresholds (``--cpu`` counts it)
            args = [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={self.out}",
                "--toggle-collect=gc_collect_main",
                "--collect-atstart=yes",  # after the toggle, which would turn it off
                *args,
            ]
        self.log = (tmp / f"{name}.log").open("w")
        self.child = subprocess.Popen(
            args,
            cwd=tmp,
            env=procs.offline_env(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=procs.pinned_to(procs.CLIENT_CPU),
        )
        self.base = f"http://127.0.0.1:{port}"
        self.target = f"{self.base}/v1/chat/completions"
        self.body = loadgen.chat_body(model)

    async def ready(self, warm: int) -> None:
        await procs.wait_http(f"{self.base}/health", 300, self.child)
        await _load(self.target, self.body, warm)

    def _control(self, flag: str) -> None:
        subprocess.run(["callgrind_control", flag, str(self.child.pid)], check=True, capture_output=True)

    async def instructions(self, count: int) -> float:
        """Instructions per request over ``count`` requests."""
        self._control("-z")
        await _load(self.target, self.body, count)
        before = set(self.out.parent.glob(f"{self.out.name}*"))
        self._control("-d")
        dumps = set(self.out.parent.glob(f"{self.out.name}*")) - before
        total = 0
        for dump in dumps:
            for line in dump.read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    total = max(total, int(line.split()[1]))
            dump.unlink()
        return total / count

    def _cpu(self) -> float:
        fields = Path(f"/proc/{self.child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def cpu_us(self, count: int) -> float:
        """CPU microseconds per request over ``count`` requests."""
        before = self._cpu()
        await _load(self.target, self.body, count)
        return (self._cpu() - before) * 1e6 / count

    def stop(self) -> None:
        procs.stop(self.child, timeout=60)
        self.log.close()


async def measure(url: str, names: list[str], *, callgrind: bool, count: int, rounds: int) -> dict[str, list[float]]:
    """Per-request figures of each server, in ``rounds`` alternating rounds."""
    procs.pin(procs.UPSTREAM_CPU)
    results: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="turnout-gateway-cost-") as tmpdir:
        servers = [_Server(n, url, Path(tmpdir), callgrind=callgrind) for n in names]
        try:
            for s in servers:
                await s.ready(1000 if callgrind else 2000)
            for _ in range(rounds):
                for s in servers:
                    figure = await (s.instructions(count) if callgrind else s.cpu_us(count))
                    results[s.name].append(figure)
        finally:
            for s in servers:
                s.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cpu", action="store_true", help="CPU time per request instead of instructions")
    parser.add_argument("--requests", type=int, default=None, help="requests per round (default 1000, --cpu 20000)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 2, --cpu 5)")
    parser.add_argument("--only", default="turnout,passthrough")
    args = parser.parse_args()
    count = args.requests or (20_000 if args.cpu else 1000)
    rounds = args.rounds or (5 if args.cpu else 2)
    names = args.only.split(",")
    t0 = time.perf_counter()
    with procs.upstream() as url:
        results = asyncio.run(measure(url, names, callgrind=not args.cpu, count=count, rounds=rounds))
    unit = "us CPU" if args.cpu else "instructions"
    for name, figures in results.items():
        shown = ", ".join(f"{f:,.1f}" if args.cpu else f"{f:,.0f}" for f in figures)
        print(f"{name:12s} median {statistics.median(figures):,.1f} {unit} per request  ({shown})")
    if len(results) == 2 and all(results.values()):
        a, b = (statistics.median(f) for f in results.values())
        print(f"ratio {names[0]}/{names[1]}: {a / b:.3f}   ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
