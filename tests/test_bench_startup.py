"""The start-up benchmark's children read their bytecode from a cache, whatever the harness's environment says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bench import startup


def test_a_child_writes_and_reads_bytecode_under_the_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` set here, a child still caches a module it imports, under the prefix."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    prefix = tmp_path / "pycache"
    env = startup._env(str(prefix))
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(prefix)
    assert env["OPENAI_API_KEY"] == "sk-dummy-startup"

    (tmp_path / "startup_probe_module.py").write_text("VALUE = 1\n", encoding="utf-8")
    code = "import sys; sys.path.insert(0, '.'); import startup_probe_module; print(startup_probe_module.__cached__)"
    run = [sys.executable, "-c", code]
    out = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    cached = Path(out.stdout.strip())
    assert cached.is_relative_to(prefix)
    assert cached.exists()
