"""How deeply a caller's JSON may nest: arrays and objects count, brackets inside strings do not."""

from __future__ import annotations

import orjson
import pytest

from turnout.core.arguments import MAX_JSON_DEPTH, check_json, too_deep
from turnout.core.errors import InvalidRequest


def _nested(levels: int) -> bytes:
    """Arrays and objects alternating, ``levels`` deep, with scalars beside each."""
    text = b"1"
    for i in range(levels):
        text = b'[0, "]", ' + text + b"]" if i % 2 else b'{"a": null, "b": ' + text + b"}"
    return text


@pytest.mark.parametrize("levels", [0, 1, 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH])
def test_nesting_up_to_the_bound_is_accepted(levels: int) -> None:
    """A text nested at most the bound is not too deep, nor is its value."""
    assert not too_deep(_nested(levels))
    check_json(orjson.loads(_nested(levels)), "x")


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH + 1, 300])
def test_nesting_past_the_bound_is_too_deep(levels: int) -> None:
    """One level past the bound is too deep, and check_json names the path."""
    assert too_deep(_nested(levels))
    with pytest.raises(InvalidRequest, match=f"nested deeper than {MAX_JSON_DEPTH} levels") as error:
        check_json(orjson.loads(_nested(levels)), "tools[0].parameters")
    assert error.value.path == "tools[0].parameters"


def test_the_deepest_branch_counts() -> None:
    """Many shallow siblings and one deep branch: the deep branch decides, wherever it is."""
    shallow = b"[" + b", ".join([b"[[1]]"] * 200) + b"]"
    assert not too_deep(shallow)
    deep = b"[" + b", ".join([b"[[1]]"] * 100 + [_nested(MAX_JSON_DEPTH)] + [b"{}"] * 100) + b"]"
    assert too_deep(deep)
    assert not too_deep(deep, limit=MAX_JSON_DEPTH + 1)


def test_brackets_inside_strings_are_text() -> None:
    """Strings full of brackets, escaped quotes and backslashes add no depth."""
    text = orjson.dumps({"content": '[[{"\\"' * 400, "key [{": ["\\", "}}]]"]})
    assert not too_deep(text)


def test_a_limit_of_zero_allows_only_scalars() -> None:
    """The bound counts arrays and objects, not scalars."""
    assert not too_deep(b'"[{"', limit=0)
    assert too_deep(b"[]", limit=0)
    assert not too_deep(b"[]", limit=1)
