"""An OpenAI-compatible error body's usual fields, taken as they are, read as ``_text`` and ``_code`` read them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.classify import ErrorFacts
from turnout.providers.openai_chat import OpenAIChatAdapter
from turnout.providers.openai_compat import _code, _text, error_facts, facts_from_object


def _read(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with its error's message and code already read by ``_text`` and ``_code``, the rest as it is."""
    err = data.get("error")
    if isinstance(err, str):
        return data
    source: Mapping[str, Any] = err if isinstance(err, Mapping) else data
    read = {
        **source,
        "message": _text(source.get("message")) or _text(source.get("detail")),
        "code": _code(source.get("code")),
    }
    return {**data, "error": read} if source is err else read


def _reference(data: Mapping[str, Any], *, status: int | None, headers: Mapping[str, str]) -> ErrorFacts:
    """The facts of ``data`` as ``_text`` and ``_code`` read its message and code."""
    return facts_from_object(_read(data), status=status, headers=headers)


class _Str(str):
    """A string that is not exactly ``str`` (a mapping handed in by code, not decoded JSON)."""


_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=700),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "rate_limit_exceeded", "429", "Rate limit reached", "0"]),
    st.text(max_size=8),
    st.lists(st.sampled_from([{"loc": ["body"], "msg": "bad"}, "x", 1]), max_size=2),
    st.builds(_Str, st.sampled_from(["", "typed", "42"])),
)
_error = st.dictionaries(
    st.sampled_from(["message", "detail", "type", "code", "param", "innererror", "metadata", "status"]),
    _value,
    max_size=6,
).flatmap(
    lambda d: st.one_of(
        st.just(d),
        st.builds(lambda inner: {**d, "innererror": {"code": inner}}, _value),
        st.builds(lambda name: {**d, "metadata": {"provider_name": name, "raw": '{"error":{"code":7}}'}}, _value),
    )
)
_body = st.one_of(
    st.builds(lambda err: {"error": err}, _error),
    _error,
    st.builds(lambda err, etype: {"error": err, "type": etype}, st.text(max_size=6), _value),
    st.builds(lambda err: {"error": err}, _value),
)


@settings(max_examples=600, deadline=None)
@given(data=_body, status=st.one_of(st.none(), st.sampled_from([400, 429, 500])))
def test_facts_from_object_reads_fields_as_text_and_code_do(data: dict[str, Any], status: int | None) -> None:
    """Any error object gives the facts that reading its message and codes through ``_text``/``_code`` gives."""
    headers = {"retry-after": "0"}
    assert facts_from_object(data, status=status, headers=headers) == _reference(data, status=status, headers=headers)


@settings(max_examples=300, deadline=None)
@given(data=_body)
def test_error_bodies_read_as_their_objects(data: dict[str, Any]) -> None:
    """A JSON error body, alone or first in a list, gives the facts of its object; the adapter reads it so too."""
    body = orjson.dumps(data)
    expected = _reference(orjson.loads(body), status=429, headers={})
    assert error_facts(429, {}, body) == expected
    assert error_facts(429, {}, b"[" + body + b"]") == expected
    assert OpenAIChatAdapter.error_facts(429, {}, body) == expected
