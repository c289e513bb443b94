"""The sections of ``bench/results.md``: replacing one, and the ones a full run keeps.

``bench.run`` writes the file anew. The sections that benchmarks of their own write (``bench.embeddings``,
``bench.affinity``, ``bench.clouds`` with ``--write``), or that are written from one's output (``bench.spend``, the
before-and-after of a change), are kept as they were: the run did not measure them.
"""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).with_name("results.md")
#: The headings of the sections a full run keeps.
SEPARATE = (
    "## Spend limits",
    "## Stream memory",
    "## Embeddings",
    "## Affinity",
    "## Bedrock and Vertex AI against Anthropic",
    "## Before and after: the plain core",
    "## The plain path: holds",
)


def _span(doc: str, heading: str) -> tuple[int, int] | None:
    """Where the section under ``heading`` starts and ends in ``doc`` (None: it has none)."""
    if doc.startswith(heading + "\n"):
        start = 0
    else:
        found = doc.find(f"\n{heading}\n")
        if found < 0:
            return None
        start = found + 1
    end = doc.find("\n## ", start + len(heading))
    return start, (end + 1 if end >= 0 else len(doc))


def replace(doc: str, text: str) -> str:
    """``doc`` with ``text``, a section, in place of the one under its heading (before ``## Plot`` if it had none)."""
    section = text.rstrip("\n") + "\n"
    span = _span(doc, text.split("\n", 1)[0])
    if span is None:
        plot = _span(doc, "## Plot")
        if plot is None:
            return doc.rstrip("\n") + "\n\n" + section
        return doc[: plot[0]] + section + "\n" + doc[plot[0] :]
    start, end = span
    return doc[:start] + section + ("\n" + doc[end:] if end < len(doc) else "")


def write(text: str, path: Path = RESULTS) -> None:
    """Put ``text``, a section, into ``path`` (see :func:`replace`)."""
    doc = path.read_text(encoding="utf-8") if path.exists() else "# Turnout benchmark results\n"
    path.write_text(replace(doc, text), encoding="utf-8")


def kept(old: str, new: str) -> str:
    """``new`` with the :data:`SEPARATE` sections of ``old`` in it, as they were in ``old``."""
    for heading in SEPARATE:
        span = _span(old, heading)
        if span is not None:
            new = replace(new, old[span[0] : span[1]])
    return new
