"""The README's five-minute tour runs as written, against the simulator on loopback as the README says to.

The tour's code blocks are read from README.md: its TOML is the configuration (with the ``uri`` lines and key
variables the README tells a reader without accounts to add), its ``$ turnout ...`` lines are run and the
output it shows is compared, its Python runs in one namespace as one script would, and the OpenAI SDK block
talks to a ``turnout serve`` started as the tour starts it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servers import free_port, threaded_simulator, turnout_command
from turnout.cli.main import app
from turnout.client import Client
from turnout.sim import Simulator

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TOUR = README[README.index("## A five-minute tour") : README.index("## Documentation")]
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", TOUR, flags=re.DOTALL)
#: The simulator's address as the README writes it (the test's simulator listens on a free port instead).
README_SIM = "http://127.0.0.1:8900"


def blocks(language: str) -> list[str]:
    """The tour's code blocks in ``language``, in order."""
    return [body for lang, body in BLOCKS if lang == language]


def on_simulator(toml: str, sim_url: str) -> str:
    """``toml`` with the line the README says to add under each profile table, pointed at ``sim_url``."""
    anthropic, other = re.findall(r'`uri = "([^"]+)"`', TOUR[: TOUR.index("### 1.")])
    out = []
    for line in toml.splitlines():
        out.append(line)
        header = re.match(r"\[providers\.models\.([A-Za-z0-9_-]+)\.[A-Za-z0-9_-]+\]", line)
        if header:
            uri = anthropic if header.group(1) == "anthropic" else other
            out.append(f'uri = "{uri.replace(README_SIM, sim_url)}"')
    return "\n".join(out) + "\n"


def readme_env() -> dict[str, str]:
    """The key variables the README tells a reader without accounts to export."""
    (exports,) = re.findall(r"`export ([^`]+)`", TOUR[: TOUR.index("### 1.")])
    return dict(pair.split("=", 1) for pair in exports.split())


def commands(block: str) -> list[tuple[list[str], list[str]]]:
    """The ``$ turnout ...`` lines of a shell block, each with the output the README shows after it."""
    out: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append((shlex.split(line[2:]), []))
        elif out:
            out[-1][1].append(line)
    return out


@pytest.fixture
def tour_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Simulator]]:
    """A directory holding the tour's turnout.toml, the README's variables set, and the simulator serving."""
    for name, value in readme_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    with threaded_simulator() as sim:
        yield tmp_path, sim


def test_the_readme_tells_how_to_run_the_tour_on_the_simulator() -> None:
    """The tour's opening says which uri to add per family and which variables to set, and has its blocks."""
    assert set(readme_env()) == {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_API_KEY_2", "DEEPSEEK_API_KEY"}
    assert len(blocks("toml")) == 2 and len(blocks("python")) == 4
    assert blocks("toml")[0].startswith("# turnout.toml")


def test_the_readme_tour_runs_as_written(tour_dir: tuple[Path, Simulator], capsys: pytest.CaptureFixture[str]) -> None:
    """Configure, check (the output shown), ask, stream, chat and ledger, serve and call it with the OpenAI SDK."""
    directory, sim = tour_dir
    config, pool = blocks("toml")
    ask, structured, stream, sdk = blocks("python")
    shell = blocks("sh")
    runner = CliRunner()
    env = {"COLUMNS": "120"}

    # 1. configure; `turnout check` prints what the README shows
    (directory / "turnout.toml").write_text(on_simulator(config, sim.url))
    ((argv, shown),) = commands(shell[0])
    assert argv == ["turnout", "check"]
    result = runner.invoke(app, argv[1:], env=env)
    assert result.exit_code == 0, result.output
    assert [line.rstrip() for line in result.output.strip().splitlines()] == [line.rstrip() for line in shown]

    # the pool block adds to the same file, and the file still checks
    (directory / "turnout.toml").write_text(on_simulator(config + "\n" + pool, sim.url))
    result = runner.invoke(app, ["check"], env=env)
    assert result.exit_code == 0, result.output
    assert "pool gpt: latency" in result.output and "hint:gpt -> gpt (pool, latency)" in result.output

    # 2. ask, 3. stream: one script
    capsys.readouterr()
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(ask, "README.md (ask)", "exec"), namespace)
    asked = capsys.readouterr().out.splitlines()
    assert asked[0] == "Hello from the Turnout simulator."
    assert "RouteRef(provider='anthropic.prod', model='claude-sonnet-4-5')" in asked[1]
    assert any(line.startswith("anthropic.prod claude-sonnet-4-5 ok") for line in asked[2:]), asked
    exec(compile(structured, "README.md (structured output)", "exec"), namespace)
    answers, decoder, at = capsys.readouterr().out, json.JSONDecoder(), 0
    for _ in range(2):  # two answers that fit the schema (the simulator answers a schema with a fitting object)
        answer, at = decoder.raw_decode(answers, at)
        assert isinstance(answer.get("city"), str), answers
        at += len(answers[at:]) - len(answers[at:].lstrip())
    assert at == len(answers)
    exec(compile(stream, "README.md (stream)", "exec"), namespace)
    streamed = capsys.readouterr().out.splitlines()
    assert streamed[0] == "Hello from the Turnout simulator."
    assert streamed[1] == "RouteRef(provider='deepseek.reasoner', model='deepseek-reasoner')"

    # 4. what it cost
    chat, ledger = commands(next(b for b in shell if "turnout chat" in b))
    result = runner.invoke(app, chat[0][1:], env=env)
    assert result.exit_code == 0, result.output
    assert "served by anthropic.prod/claude-sonnet-4-5" in result.output
    result = runner.invoke(app, ledger[0][1:], env=env)
    assert result.exit_code == 0, result.output
    calls = 1 + 2 + 1 + 1  # ask, the two structured answers, the stream, `turnout chat`
    assert result.output.startswith(f"{calls} calls (0 failed, 0 served by a fallback), {calls} attempts")

    # 5. serve other languages
    serve = shlex.split(next(b for b in shell if "turnout serve" in b).strip())
    port = free_port()
    argv = [*turnout_command(), *serve[1:]]
    argv[argv.index("--port") + 1] = str(port)
    with _serving(argv, directory) as url:
        capsys.readouterr()
        exec(compile(sdk.replace("http://127.0.0.1:8787", url), "README.md (sdk)", "exec"), {})
        assert capsys.readouterr().out.strip() == "deepseek-reasoner Hello from the Turnout simulator."


def test_an_unknown_hint_is_served_by_the_library_and_refused_by_the_gateway(
    tour_dir: tuple[Path, Simulator], caplog: pytest.LogCaptureFixture
) -> None:
    """What the README and docs/gateway.md write side by side: the library's default route and warning, the 404."""
    directory, sim = tour_dir
    (directory / "turnout.toml").write_text(on_simulator(blocks("toml")[0], sim.url))
    rule = _unknown_hint_table(README)
    assert rule == _unknown_hint_table((ROOT / "docs" / "gateway.md").read_text(encoding="utf-8"))
    assert (
        "404 model_not_found" in rule and "the default route serves it" in rule and "unknown route hint 'nope'" in rule
    )

    async def ask() -> tuple[str, str, str]:
        async with Client.from_file("turnout.toml") as client:
            reply = await client.chat([{"role": "user", "content": "hi"}], model="hint:nope")
        return reply.served.provider, reply.served.model, reply.text

    with caplog.at_level(logging.WARNING, logger="turnout.router"):
        served, model, text = asyncio.run(ask())
    assert (served, model) == ("anthropic.prod", "claude-sonnet-4-5") and text  # the default route's pin
    assert [r.getMessage() for r in caplog.records if r.name == "turnout.router"] == [
        "unknown route hint 'nope'; staying on the default target"
    ]

    request = {"model": "hint:nope", "messages": [{"role": "user", "content": "hi"}]}
    with _serving([*turnout_command(), "serve", "--port", str(free_port())], directory) as url:
        status, body = _post(f"{url}/v1/chat/completions", request)
    assert status == 404 and body["error"]["code"] == "model_not_found"

    (directory / "turnout.toml").write_text(
        on_simulator(blocks("toml")[0] + "\n[gateway]\nallow_any_model = true\n", sim.url)
    )
    with _serving([*turnout_command(), "serve", "--port", str(free_port())], directory) as url:
        status, body = _post(f"{url}/v1/chat/completions", request)
    assert (status, body["model"]) == (200, "claude-sonnet-4-5")  # allow_any_model: as the library does


def _unknown_hint_table(text: str) -> str:
    """The table of a document whose first row is about ``hint:nope``, with markdown's emphasis removed."""
    start = text.index('| `model="hint:nope"`')
    end = text.index("\n\n", start)
    return text[start:end].replace("`", "")


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json", "authorization": "Bearer any"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class _Serving:
    """``turnout serve`` in a subprocess; entering waits until it says it listens (killed after a bound)."""

    def __init__(self, argv: list[str], directory: Path) -> None:
        self.proc = subprocess.Popen(argv, cwd=directory, stderr=subprocess.PIPE, text=True)
        self.watchdog = threading.Timer(60, self.proc.kill)
        self.drain = threading.Thread(target=self._drain, daemon=True)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        self.proc.stderr.read()

    def __enter__(self) -> str:
        self.watchdog.start()
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:  # the rest of its log is read (and dropped) so that a full pipe never stalls it
                self.drain.start()
                return found.group(1)
        raise AssertionError(f"turnout serve exited with {self.proc.wait()} before it listened")

    def __exit__(self, *exc: object) -> None:
        self.watchdog.cancel()
        self.proc.terminate()
        self.proc.wait(timeout=30)
        if self.drain.is_alive():
            self.drain.join(timeout=30)  # at the end of the pipe: the process has exited
        assert self.proc.stderr is not None
        self.proc.stderr.close()


def _serving(argv: list[str], directory: Path) -> _Serving:
    return _Serving(argv, directory)
