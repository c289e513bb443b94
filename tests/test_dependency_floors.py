"""Declared dependency floors: every direct dependency has one, and the min lane pins exactly those."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _floors() -> dict[str, str]:
    out = {}
    for req in [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["dev"]]:
        m = re.match(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", req)
        assert m is not None, f"{req!r} declares no floor"
        out[m.group(1)] = m.group(2)
    return out


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_min_constraints_pin_every_direct_dependency_at_its_floor() -> None:
    """scripts/min-constraints turns each runtime and dev ``name>=X`` into ``name==X``, and nothing else."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "min-constraints")], capture_output=True, text=True, check=True
    ).stdout
    assert sorted(out.split()) == sorted(f"{name}=={floor}" for name, floor in _floors().items())


def test_aiohttp_floor_has_the_body_byte_counter() -> None:
    """The body bounds read ``StreamReader.total_raw_bytes``, which aiohttp has only since 3.13."""
    assert _version(_floors()["aiohttp"]) >= (3, 13)
    assert hasattr(aiohttp.StreamReader, "total_raw_bytes")


def test_aiohttp_floor_has_typed_request_keys() -> None:
    """The gateway keeps per-request state under ``web.RequestKey``, which aiohttp has only since 3.14."""
    assert _version(_floors()["aiohttp"]) >= (3, 14)
    assert hasattr(web, "RequestKey")


def test_botocore_floor_knows_converse() -> None:
    """The Bedrock tests hold our bodies and fixtures to botocore's own bedrock-runtime model: Converse (1.34.116),
    its documents, its reasoning deltas (1.37.0) and a document's ``context`` (1.39.0).
    """
    from botocore.session import Session

    assert _version(_floors()["botocore"]) >= (1, 39, 0)
    model = Session().get_service_model("bedrock-runtime")
    assert "Converse" in model.operation_names
    assert "document" in model.shape_for("ContentBlock").members
    assert "reasoningContent" in model.shape_for("ContentBlockDelta").members
    assert "context" in model.shape_for("DocumentBlock").members
