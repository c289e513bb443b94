"""The sections of bench/results.md: one replaced in place, and a full run keeping what other benchmarks wrote."""

from __future__ import annotations

from pathlib import Path

from bench import sections

DOC = "# T\n\nintro\n\n## A\n\na1\n\n## B\n\nb1\n\n## Plot\n\nimg\n"


def test_a_section_is_replaced_where_it_is() -> None:
    """The section under the same heading is replaced, the others are left as they were."""
    assert sections.replace(DOC, "## A\n\nnew a\n") == "# T\n\nintro\n\n## A\n\nnew a\n\n## B\n\nb1\n\n## Plot\n\nimg\n"
    assert sections.replace(DOC, "## Plot\n\nx") == "# T\n\nintro\n\n## A\n\na1\n\n## B\n\nb1\n\n## Plot\n\nx\n"


def test_a_new_section_goes_before_the_plot_or_last() -> None:
    """A heading the document lacks is added before ``## Plot``; without a plot, at the end."""
    assert (
        sections.replace(DOC, "## C\n\nc\n")
        == "# T\n\nintro\n\n## A\n\na1\n\n## B\n\nb1\n\n## C\n\nc\n\n## Plot\n\nimg\n"
    )
    assert sections.replace("# T\n", "## C\n\nc") == "# T\n\n## C\n\nc\n"


def test_a_heading_is_matched_whole() -> None:
    """``## A`` is not the section ``## AB``, nor text that mentions it."""
    doc = "# T\n\n## AB\n\nab\n\nsee ## A\n"
    assert sections.replace(doc, "## A\n\na\n") == doc + "\n## A\n\na\n"


def test_a_full_run_keeps_what_other_benchmarks_wrote() -> None:
    """The separate sections of the old results are kept; the run's own sections are its own."""
    old = "# old\n\n## Embeddings\n\ne\n\n## Gateway\n\ng-old\n\n## Affinity\n\naff\n"
    new = "# new\n\n## Gateway\n\ng-new\n\n## Plot\n\np\n"
    assert (
        sections.kept(old, new)
        == "# new\n\n## Gateway\n\ng-new\n\n## Embeddings\n\ne\n\n## Affinity\n\naff\n\n## Plot\n\np\n"
    )
    assert sections.kept("", new) == new


def test_write_puts_a_section_into_the_file(tmp_path: Path) -> None:
    """``write`` replaces the section in the file, or starts one."""
    path = tmp_path / "results.md"
    sections.write("## Embeddings\n\nfirst\n", path)
    sections.write("## Embeddings\n\nsecond\n", path)
    assert path.read_text() == "# Turnout benchmark results\n\n## Embeddings\n\nsecond\n"
