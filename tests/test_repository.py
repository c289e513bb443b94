"""The repository is self-contained: a clone with nothing beside it has everything the suite reads."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

# A path that climbs out of the checkout to a sibling folder: ``../shared``, ``ROOT.parent / "shared"``,
# ``parents[2].parent``.
_OUTSIDE = re.compile(r"\.\./shared|\.parent\s*/\s*[\"']|parents\[\d\]\.parent")


def _tracked(*dirs: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *dirs], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_fixtures_live_inside_the_checkout() -> None:
    """The recorded payloads the tests replay are kept in the repository, with their sources."""
    assert FIXTURES.resolve().is_relative_to(ROOT.resolve())
    assert (FIXTURES / "SOURCES.md").is_file()
    assert any(FIXTURES.rglob("*.sse"))


def test_no_code_reads_outside_the_checkout() -> None:
    """No source, test, benchmark or script file builds a path that leaves the checkout."""
    offenders = []
    for path in _tracked("src", "tests", "bench", "scripts", "Makefile", ".ci"):
        if path.suffix not in (".py", "") or not path.is_file() or path.name == Path(__file__).name:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


# A section number of a specification the repository does not hold: ``SPEC 6.7``, ``SPEC section 5``.
_SPEC_CITATION = re.compile(r"\bSPEC (?:section )?\d")


def test_no_file_cites_a_specification_the_repository_does_not_hold() -> None:
    """Code, tests and docs stand alone: none cites a specification's section numbers (bench/results.md is a record)."""
    offenders = []
    for path in _tracked("src", "tests", "bench", "scripts", "docs", "examples", "README.md"):
        if path.suffix not in (".py", ".md") or not path.is_file() or path.name in (Path(__file__).name, "results.md"):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _SPEC_CITATION.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert offenders == []
    assert _SPEC_CITATION.search("the panic rule (SPEC 6.7)") and _SPEC_CITATION.search("SPEC section 5 says")
