"""Shared test helpers: fixture paths and small builders."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = (ROOT.parent / "shared" / "fixtures").resolve()


@pytest.fixture
def fixtures() -> Path:
    """The recorded provider payloads shipped beside the repository."""
    assert FIXTURES.is_dir(), f"recorded fixtures not found at {FIXTURES}"
    return FIXTURES

import sys  # noqa: E402

# Test helpers (tests/fakes.py) are importable from every test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))
