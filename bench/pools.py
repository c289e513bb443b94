"""The pools scenario: a ``latency`` pool finds its fast member and follows a slow-down; no pool costs nothing.

*Learning* (in process, against the simulator with real delays): a ``latency`` pool of two OpenAI members whose
first token comes after 200 ms (listed first) and 50 ms. 100 sequential streamed calls; then the fast member
slows to 400 ms and 80 more calls follow. Measured: the share of calls the 50 ms member serves (calls 1–50
and 51–100), and after the slow-down the number of calls until the pool *moved*: the calls before the first
one served by the other member from which on at least 18 of every 20 calls (the rest is exploration) go to it.
The simulator and the pool's randomness are seeded.

*Overhead when not configured*: the non-streaming call of the chat scenario (a primary and one fallback, no
pool) in child processes pinned to the client CPU, one importing this tree's ``turnout``, one the tree as it
was before pools existed (the parent of the commit that added ``src/turnout/walk/pools.py``, exported with
``git archive``) and one a copy of this tree, driven in alternating batches. The ratio of the first two is the
cost of pools for a user who has none; the copy's ratio to this tree is how far two processes running the same
code differ by themselves.
For information, two in-process clients with a two-member ``ordered`` and ``latency`` pool (both members on
the same upstream) run in alternation with one without a pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import orjson

from bench import procs
from bench.contenders import EXPECTED_CHAT, MESSAGES, TurnoutClient, turnout_config
from bench.settings import Settings
from bench.stats import Lane, Summary, alternate, ratio_interval, summarize

SEED = 19
SLOW_MS, FAST_MS, SLOWED_MS = 200, 50, 400
LEARN_CALLS, AFTER_CALLS, WINDOW, WINDOW_MIN = 100, 80, 20, 18
SLOW, FAST = "openai.slow", "openai.fast"
_MODELS = {SLOW: "member-200ms", FAST: "member-50ms"}
_CACHES = shutil.ignore_patterns("__pycache__")


@dataclass(slots=True, kw_only=True)
class Learning:
    """Which member served each call, before and after the fast member slowed down."""

    before: list[str]
    after: list[str]
    ttft_ms: list[float]
    seconds: float

    def fast_share(self, start: int, stop: int) -> float:
        """The share of calls ``start``..``stop`` (1-based, inclusive) served by the fast member."""
        part = self.before[start - 1 : stop]
        return part.count(FAST) / len(part)

    @property
    def moved_after(self) -> int | None:
        """Calls after the slow-down before the pool moved (None: it did not).

        It moved at the first call the other member served from which on at least WINDOW_MIN of every WINDOW
        calls go to that member (the rest is exploration); the calls before it are counted.
        """
        after = self.after
        last = len(after) - WINDOW
        for n in range(last + 1):
            if after[n] == SLOW and all(after[i : i + WINDOW].count(SLOW) >= WINDOW_MIN for i in range(n, last + 1)):
                return n
        return None


@dataclass(slots=True, kw_only=True)
class Overhead:
    """Per-call times of this tree, of the tree before pools and of a copy of this tree; in-process pool clients.

    The copy runs the same code as ``now`` in its own process: its ratio to ``now`` is how far two processes
    differ by themselves (the noise the ``now / before`` ratio is read against).
    """

    now: Summary
    before: Summary
    same: Summary
    interval: tuple[float, float]
    same_interval: tuple[float, float]
    base: str
    pools: list[Summary] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ratio(self) -> float:
        """Median now over median before."""
        return self.now.ratio(self.before)

    @property
    def noise(self) -> float:
        """Median of the copy over median now: two processes with the same code."""
        return self.same.ratio(self.now)


@dataclass(slots=True, kw_only=True)
class PoolScenario:
    """The pool scenario's two parts (either may have failed: its error is kept)."""

    learning: Learning | None = None
    overhead: Overhead | None = None
    failures: dict[str, str] = field(default_factory=dict)


async def measure(url: str, s: Settings) -> PoolScenario:
    """Both parts; a part that cannot run is reported in ``failures``."""
    out = PoolScenario()
    try:
        out.learning = await learning()
    except Exception as exc:  # reported in results.md; the other part still runs
        out.failures["learning"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    try:
        out.overhead = await overhead(url, s)
    except Exception as exc:
        out.failures["overhead"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


# --- learning ---------------------------------------------------------------------------------------------


def _script(fast_ms: int) -> dict[str, Any]:
    return {
        "seed": SEED,
        "models": {
            _MODELS[SLOW]: {"steps": [{"do": "ok", "delay": SLOW_MS / 1000}]},
            _MODELS[FAST]: {"steps": [{"do": "ok", "delay": fast_ms / 1000}]},
        },
    }


async def learning() -> Learning:
    """The latency pool over the simulator: 100 calls, the fast member slows down, 80 calls."""
    from turnout import Client
    from turnout.sim import Simulator

    started = time.perf_counter()
    async with Simulator(seed=SEED) as sim:
        sim.set_script(_script(FAST_MS))
        profiles = {
            alias: {"uri": sim.base_url("openai"), "api_key": "sk-bench-pool", "model": _MODELS[f"openai.{alias}"]}
            for alias in ("slow", "fast")
        }
        config = {
            "default_provider": "gpt",
            "providers": {"models": {"openai": profiles}},
            "pools": {"gpt": {"members": [SLOW, FAST], "strategy": "latency"}},
            # Every call sends the same prompt: affinity would keep it on the member that served it first (and then
            # hold new conversations to their share). This measures the strategy; bench/affinity.py measures that.
            "reliability": {"affinity": {"enabled": False}},
            "ledger": {"enabled": False},
        }
        ttft: list[float] = []
        async with Client.from_dict(config, ledger=False, chance=random.Random(SEED).random) as client:
            before = [await _streamed(client, ttft) for _ in range(LEARN_CALLS)]
            sim.set_script(_script(SLOWED_MS))
            after = [await _streamed(client, ttft) for _ in range(AFTER_CALLS)]
    return Learning(before=before, after=after, ttft_ms=ttft, seconds=time.perf_counter() - started)


async def _streamed(client: Any, ttft: list[float]) -> str:
    stream = client.stream(MESSAGES)
    async for _ in stream:
        pass
    reply = stream.response
    ok = [a for a in reply.attempts if a.outcome == "ok"]
    if not ok or ok[-1].ttft_ms is None:
        raise RuntimeError(f"no time to first token in {[a.outcome for a in reply.attempts]}")
    ttft.append(ok[-1].ttft_ms)
    return str(reply.served.provider)


# --- overhead when no pool is configured ------------------------------------------------------------------


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=procs.ROOT, check=True, capture_output=True, timeout=60).stdout


def export_before_pools(into: Path) -> str:
    """Export ``src/turnout`` as it was before pools existed into ``into``; return that commit's short hash."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", "src/turnout/walk/pools.py").split()
    if not added:
        raise RuntimeError("no commit adds src/turnout/walk/pools.py: nothing to compare with")
    base = _git("rev-parse", "--short", f"{added[-1].decode()}^").decode().strip()
    archive = _git("archive", "--format=tar", base, "src/turnout")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return base


class _Child:
    """A :mod:`bench.walkchild` process timing batches with one ``turnout`` source tree."""

    def __init__(self, url: str, src: Path, name: str) -> None:
        self.name = name
        env = procs.offline_env({"PYTHONPATH": f"{src}:{procs.ROOT}"})
        self.proc = subprocess.Popen(
            [procs.PY, "-m", "bench.walkchild", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=procs.ROOT,
            env=env,
            preexec_fn=procs.pinned_to(procs.CLIENT_CPU),
        )
        ready = self._line()
        expected = str(src / "turnout")
        if not ready.startswith("ready ") or not ready.split(" ", 1)[1].startswith(expected):
            raise RuntimeError(f"{name}: the child imported {ready!r}, not the turnout under {expected}")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the child exited")
        return line.strip()

    def batch(self, n: int) -> list[float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        timings: list[float] = orjson.loads(self._line())
        return timings

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):  # then stop() ends it
                self.proc.wait(timeout=10)
        procs.stop(self.proc)


async def overhead(url: str, s: Settings) -> Overhead:
    """This tree and the tree before pools, alternating batches in two pinned children; then pools in process."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="turnout-before-pools-") as tmp:
        base = export_before_pools(Path(tmp) / "before")
        shutil.copytree(procs.ROOT / "src" / "turnout", Path(tmp) / "same" / "src" / "turnout", ignore=_CACHES)
        children: list[_Child] = []
        try:
            children.append(_Child(url, procs.ROOT / "src", "now (no pool configured)"))
            children.append(_Child(url, Path(tmp) / "before" / "src", f"before pools ({base})"))
            children.append(_Child(url, Path(tmp) / "same" / "src", "now, another process"))
            runs: dict[str, dict[int, list[float]]] = {c.name: {} for c in children}
            for child in children:
                child.batch(s.warmup)
            for r in range(s.chat_rounds):
                for child in children[r % 3 :] + children[: r % 3]:  # each child goes first in turn
                    runs[child.name][r] = child.batch(s.chat_batch)
                if time.perf_counter() - started > s.budget_s:
                    break
        finally:
            for child in children:
                child.close()
    now, before, same = (runs[c.name] for c in children)
    result = Overhead(
        now=summarize(children[0].name, [x for xs in now.values() for x in xs]),
        before=summarize(children[1].name, [x for xs in before.values() for x in xs]),
        same=summarize(children[2].name, [x for xs in same.values() for x in xs]),
        interval=ratio_interval(before, now),
        same_interval=ratio_interval(now, same),
        base=base,
    )
    result.pools = await _pools_in_process(url, s)
    result.seconds = time.perf_counter() - started
    return result


class _PoolClient:
    """Turnout whose default is a two-member pool (both members on the bench upstream)."""

    def __init__(self, url: str, strategy: str) -> None:
        from turnout import Client

        self.name = f"turnout, {strategy} pool of 2"
        config = turnout_config(url)
        config["providers"]["models"]["openai"]["primary"].pop("fallback")
        config["pools"] = {"two": {"members": ["openai.primary", "openai.backup"], "strategy": strategy}}
        config["default_provider"] = "two"
        self.client = Client.from_dict(config, ledger=False)

    async def chat(self) -> str:
        reply = await self.client.chat(MESSAGES)
        return reply.text

    async def aclose(self) -> None:
        await self.client.aclose()


async def _pools_in_process(url: str, s: Settings) -> list[Summary]:
    contenders: Sequence[Any] = [TurnoutClient(url), _PoolClient(url, "ordered"), _PoolClient(url, "latency")]
    try:
        for c in contenders:
            if await c.chat() != EXPECTED_CHAT:
                raise RuntimeError(f"{c.name} did not return the upstream's answer")
        lanes = [Lane(c.name, c.chat) for c in contenders]
        await alternate(lanes, rounds=max(4, s.chat_rounds // 4), batch=s.chat_batch, warmup=s.warmup, budget_s=30.0)
    finally:
        for c in contenders:
            await c.aclose()
    return [summarize(lane.name, lane.samples) for lane in lanes]


def main() -> int:
    """``python -m bench.pools``: the learning part alone, printed (no upstream needed)."""
    result = asyncio.run(learning())
    print(f"calls 1-50 to the fast member: {result.fast_share(1, 50):.0%}")
    print(f"calls 51-100 to the fast member: {result.fast_share(51, 100):.0%}")
    print(f"moved after the slow-down within {result.moved_after} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
