"""Error bodies of any shape an OpenAI-compatible vendor might send give well-formed facts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.providers.openai_chat import OpenAIChatAdapter
from turnout.providers.openai_compat import error_facts, facts_from_object

_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=700),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "rate_limit_exceeded", "429", "Rate limit reached", "0"]),
    st.text(max_size=8),
    st.lists(st.sampled_from([{"loc": ["body"], "msg": "bad"}, "x", 1]), max_size=2),
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


@settings(max_examples=300, deadline=None)
@given(data=_body)
def test_any_error_body_gives_well_formed_facts(data: dict[str, Any]) -> None:
    """Whatever its fields hold, a body gives text where text is due, alone, in a list or read by the adapter."""
    body = orjson.dumps(data)
    facts = error_facts(429, {}, body)
    assert facts.status == 429 and isinstance(facts.message, str)
    assert facts.error_type is None or isinstance(facts.error_type, str)
    for code in (facts.error_code, facts.reason):
        assert code is None or (isinstance(code, str) and code)
    assert error_facts(429, {}, b"[" + body + b"]") == facts
    assert OpenAIChatAdapter.error_facts(429, {}, body) == facts


@pytest.mark.parametrize(
    ("error", "message", "code"),
    [
        ({"message": "Rate limited", "code": 429}, "Rate limited", "429"),
        ({"message": "bad", "code": True}, "bad", None),
        ({"message": "bad", "code": ""}, "bad", None),
        ({"message": "", "detail": "Unauthorized", "code": None}, "Unauthorized", None),
        ({"message": [{"loc": ["body"], "msg": "bad"}]}, '[{"loc":["body"],"msg":"bad"}]', None),
    ],
)
def test_message_and_code_are_read_as_text(error: dict[str, Any], message: str, code: str | None) -> None:
    """Integer codes become text, empty or boolean ones none; an empty message yields to ``detail``; a list is JSON."""
    facts = facts_from_object({"error": error}, status=400, headers={})
    assert (facts.message, facts.error_code) == (message, code)
