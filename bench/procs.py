"""Child processes, CPU pinning and machine facts.

Layout on a 2-core machine: the upstream is pinned to CPU 0 and the load generator (this process) to CPU 1,
so the upstream never shares an event loop or a core with what is measured. With one core nothing is
pinned (and the results say so).
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

#: Keeps every client of every contender on loopback: LiteLLM reads its price map from the package instead of
#: fetching it, telemetry is off, and anything that honours proxy variables (httpx, requests) would hit a dead
#: local port instead of the network.
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def offline_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for child processes: this one plus :data:`OFFLINE_ENV` (and ``extra``)."""
    env = {**os.environ, **OFFLINE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def peak_rss() -> int:
    """This process's peak RSS in bytes: ``VmHWM`` (``ru_maxrss`` where there is no ``/proc``).

    Not ``ru_maxrss`` on Linux: it survives fork + exec, so a child started by a large parent would report
    the parent's size.
    """
    with contextlib.suppress(OSError, StopIteration, ValueError):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


#: The CPUs this process was allowed when the harness started (before it pinned itself anywhere).
ALLOWED_CPUS: tuple[int, ...] = (
    tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else tuple(range(os.cpu_count() or 1))
)


def can_pin() -> bool:
    """Whether the upstream and the load generator can each have a CPU of their own."""
    return hasattr(os, "sched_setaffinity") and len(ALLOWED_CPUS) > 1


#: CPU of the upstream (and, in the gateway scenario, of the load generator).
UPSTREAM_CPU = ALLOWED_CPUS[0]
#: CPU of the clients being measured (and of the gateway under test).
CLIENT_CPU = ALLOWED_CPUS[1] if len(ALLOWED_CPUS) > 1 else ALLOWED_CPUS[0]


def pin(cpu: int) -> None:
    """Pin this process to one CPU (no-op where pinning is impossible)."""
    if can_pin():
        os.sched_setaffinity(0, {cpu})


def pinned_to(cpu: int | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` pinning a child (and every thread it starts) to ``cpu``."""
    if cpu is None or not can_pin():
        return None

    def _pin() -> None:
        os.sched_setaffinity(0, {cpu})

    return _pin


def stop(child: subprocess.Popen[str], timeout: float = 10.0) -> None:
    """SIGTERM a child we started, then SIGKILL it if it does not leave in time."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()


@contextlib.contextmanager
def upstream(cpu: int | None = UPSTREAM_CPU) -> Iterator[str]:
    """Start :mod:`bench.upstream` in a child process and yield its base URL (``http://127.0.0.1:PORT``)."""
    args = [PY, "-m", "bench.upstream"]
    child = subprocess.Popen(
        args, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=offline_env(), preexec_fn=pinned_to(cpu)
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line.strip():
            raise RuntimeError("the upstream did not start")
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        stop(child)


async def wait_http(url: str, within: float, proc: subprocess.Popen[str] | None = None) -> None:
    """Wait until ``GET url`` answers (any status below 500), at most ``within`` seconds."""
    import asyncio

    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while True:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the process exited with code {proc.returncode} before answering {url}")
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                    if resp.status < 500:
                        return
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer within {within:g} s")
            await asyncio.sleep(0.2)


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """Facts about the machine and the software measured."""

    cpu_model: str
    cores: int
    pinned: bool
    python: str
    platform: str
    versions: dict[str, str]


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def version(name: str) -> str:
    """The installed version of a distribution, or ``not installed``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine(
    packages: Sequence[str] = ("turnout", "aiohttp", "orjson", "litellm", "openai", "httpx", "uvloop"),
) -> Machine:
    """The machine facts for ``results.md``."""
    return Machine(
        cpu_model=_cpu_model(),
        cores=len(ALLOWED_CPUS),
        pinned=can_pin(),
        python=platform.python_version(),
        platform=platform.platform(),
        versions={p: version(p) for p in packages},
    )


def wrk_path() -> str | None:
    """The ``wrk`` binary, if installed."""
    from shutil import which

    return which("wrk")


def callgrind_instructions(module: str, child_args: str) -> int:
    """Instructions ``python -m <module> --child <child_args>`` counts while ``sorted`` runs (callgrind's toggle).

    The child makes its measured calls inside a ``sorted`` key function, so only they are counted.
    """
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--collect-atstart=no",
        "--toggle-collect=builtin_sorted",
        sys.executable,
        "-m",
        module,
        "--child",
        child_args,
    ]
    # One string hash seed: dicts and sets probe alike in every run (a random seed moves a count by about 1 %).
    env = offline_env({"PYTHONHASHSEED": "0"})
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stderr
    line = next(line for line in out.splitlines() if "Collected :" in line)
    return int(line.split(":")[-1].replace(",", "").strip())
