"""Start-up: ``import turnout`` + a client from ``examples/turnout.toml``, against ``import litellm``.

Each measurement is a fresh interpreter (pinned to the client CPU, dummy keys in its environment, a temp
directory as its working directory). The child reports the time from just before its import to just after
the client is built, and its peak RSS (``VmHWM``: the whole process, interpreter included; not ``ru_maxrss``,
which Linux carries over from the parent across fork + exec, so a child of a large parent reports the
parent's size). A bare
interpreter is measured the same way, for reference. Runs alternate: bare, Turnout, LiteLLM, bare, …

Every child reads its modules' bytecode from a cache, as an installed package does (pip compiles it at install):
the children write and read it in a temporary ``PYTHONPYCACHEPREFIX``, filled by a warm-up run of each snippet,
whatever ``PYTHONDONTWRITEBYTECODE`` says here. Without it, an editable checkout under that setting compiles every
module of the package on each start, about 0.2 s of the time.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass

from bench import procs

EXAMPLE = procs.ROOT / "examples" / "turnout.toml"
DUMMY_KEYS = {
    name: "sk-dummy-startup"
    for name in (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_API_KEY_2",
        "DEEPSEEK_API_KEY",
        "GEMINI_API_KEY",
        "TURNOUT_GATEWAY_KEY",
    )
}

_REPORT = (
    "import json, resource\n"
    "try:\n"
    "    peak = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
    "except (OSError, StopIteration):\n"
    "    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "print(json.dumps({'import_s': t1 - t0, 'total_s': t2 - t0, 'maxrss_kib': peak}))\n"
)
SNIPPETS = {
    "python (bare interpreter)": "import time\nt0 = time.perf_counter()\nt1 = t2 = time.perf_counter()\n" + _REPORT,
    "turnout: import + Client.from_file": (
        "import time\nt0 = time.perf_counter()\nfrom turnout import Client\nt1 = time.perf_counter()\n"
        f"client = Client.from_file({str(EXAMPLE)!r})\nt2 = time.perf_counter()\n" + _REPORT
    ),
    "litellm: import litellm": (
        "import time\nt0 = time.perf_counter()\nimport litellm\nt1 = t2 = time.perf_counter()\n" + _REPORT
    ),
}
TURNOUT = "turnout: import + Client.from_file"
LITELLM = "litellm: import litellm"
BARE = "python (bare interpreter)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Startup:
    """Medians over the runs of one snippet."""

    name: str
    runs: int
    import_s: float
    total_s: float
    process_s: float
    maxrss_mib: float


def _env(pycache: str) -> dict[str, str]:
    """A child's environment: offline, dummy keys, and its bytecode written to and read from ``pycache``."""
    env = procs.offline_env({**DUMMY_KEYS, "PYTHONPYCACHEPREFIX": pycache})
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _once(code: str, cwd: str, env: dict[str, str]) -> tuple[dict[str, float], float]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [procs.PY, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=procs.pinned_to(procs.CLIENT_CPU),
        check=False,
    )
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"start-up snippet failed: {out.stderr.strip()[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


def measure(runs: int) -> list[Startup]:
    """Run every snippet ``runs`` times, alternating, and return the medians."""
    samples: dict[str, list[tuple[dict[str, float], float]]] = {name: [] for name in SNIPPETS}
    with tempfile.TemporaryDirectory(prefix="turnout-bench-startup-") as cwd:
        env = _env(os.path.join(cwd, "pycache"))
        for code in SNIPPETS.values():  # the bytecode cache and the OS file cache: the first import fills both
            _once(code, cwd, env)
        for _ in range(runs):
            for name, code in SNIPPETS.items():
                samples[name].append(_once(code, cwd, env))
    out = []
    for name, rows in samples.items():
        out.append(
            Startup(
                name=name,
                runs=len(rows),
                import_s=statistics.median(r["import_s"] for r, _ in rows),
                total_s=statistics.median(r["total_s"] for r, _ in rows),
                process_s=statistics.median(w for _, w in rows),
                maxrss_mib=statistics.median(r["maxrss_kib"] for r, _ in rows) / 1024,
            )
        )
    return out


def top_imports(limit: int = 8) -> list[tuple[str, float]]:
    """Top-level packages by cumulative import time under ``from turnout import Client`` (ms), largest first."""
    out = subprocess.run(
        [procs.PY, "-X", "importtime", "-c", "from turnout import Client"],
        env=procs.offline_env(DUMMY_KEYS),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    rows: list[tuple[str, float]] = []
    for line in out.stderr.splitlines():
        parts = line.partition(":")[2].split("|")
        if not line.startswith("import time:") or len(parts) != 3 or "cumulative" in line:
            continue
        name = parts[2].strip()
        if "." not in name and not name.startswith(("turnout", "_")):
            rows.append((name, int(parts[1]) / 1000))
    rows.sort(key=lambda r: -r[1])
    return rows[:limit]
