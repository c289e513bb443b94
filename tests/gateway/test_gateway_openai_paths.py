"""The OpenAI surface's plain-request reader holds to its general path (pydantic, split, translate)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.gateway.openai_surface import OpenAISurface, _chat_call, _plain_call
from turnout.gateway.surface import ChatCall
from turnout.gateway.wire import MAX_FIELD_CHARS, MAX_MODEL_CHARS, RequestRejected

_DROP = object()
_ODD = [None, 0, 1, -1, 1.5, True, False, "1", [], {}]

_valid_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant"]), "content": st.sampled_from(["", "hi"])},
    optional={"name": st.sampled_from(["ann", ""]), "extra": st.just("ignored")},
)
#: Bodies the plain reader reads: each is then changed in up to two places (see ``_changes``).
_valid_body = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["", "openai.primary", "hint:fast", "x" * MAX_MODEL_CHARS]),
        "messages": st.lists(_valid_message, min_size=1, max_size=3),
    },
    optional={
        "stream": st.sampled_from([True, False, None]),
        "temperature": st.sampled_from([0, 2, 0.7, 1, None]),
        "max_tokens": st.sampled_from([1, 100, 2**40, None]),
        "max_completion_tokens": st.sampled_from([1, 50, None]),
        "user": st.sampled_from(["u-1", "u" * MAX_FIELD_CHARS, None]),
        "top_p": st.just(0.9),
        "seed": st.just(7),
    },
)
#: Values each top-level field may be changed to: out of range, of another type, or only the general path's.
_top_changes: dict[str, list[Any]] = {
    "model": ["x" * (MAX_MODEL_CHARS + 1), _DROP, *_ODD],
    "messages": [[], _DROP, *_ODD],
    "stream": ["yes", *_ODD],
    "temperature": [2.5, -0.1, 3, *_ODD],
    "max_tokens": [0, -5, *_ODD],
    "max_completion_tokens": [0, -1, *_ODD],
    "user": ["u" * (MAX_FIELD_CHARS + 1), *_ODD],
    "n": [1, 2, None],
    "tools": [[{"type": "function", "function": {"name": "f"}}], [{"type": "custom", "custom": {"name": "c"}}]],
    "tool_choice": ["auto", "none", "bogus", {"type": "function", "function": {"name": "f"}}],
    "response_format": [{"type": "text"}, {"type": "json_object"}, None],
    "stream_options": [{"include_usage": True}, None],
    "audio": [{"voice": "alloy"}, None],
    "modalities": [["text"], None],
}
#: Values each message field may be changed to (``None`` as the field: the whole message).
_message_changes: dict[str | None, list[Any]] = {
    None: [5, "text", None, []],
    "role": ["tool", "function", "robot", _DROP, *_ODD],
    "content": [
        None,
        _DROP,
        5,
        [{"type": "text", "text": "a"}],
        [{"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}],
        [{"type": "file", "file": {"file_id": "f"}}],
    ],
    "name": [5, None, []],
    "tool_call_id": ["call_1", None],
    "tool_calls": [[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}], None],
    "reasoning_content": ["why", None],
}
_change = st.one_of(
    st.sampled_from([("top", k, v) for k, vs in _top_changes.items() for v in vs]),
    st.tuples(
        st.just("message"),
        st.sampled_from([(k, v) for k, vs in _message_changes.items() for v in vs]),
        st.integers(0, 2),
    ),
)


def _changed(body: dict[str, Any], changes: list[tuple[Any, ...]]) -> dict[str, Any]:
    out = {**body, "messages": [dict(m) for m in body["messages"]]}
    for change in changes:
        if change[0] == "top":
            _, key, value = change
            if value is _DROP:
                out.pop(key, None)
            else:
                out[key] = value
            continue
        _, (key, value), index = change
        messages = out.get("messages")
        if not isinstance(messages, list) or not messages:
            continue
        i = index % len(messages)
        if key is None:
            messages[i] = value
        elif isinstance(messages[i], dict):
            if value is _DROP:
                messages[i].pop(key, None)
            else:
                messages[i][key] = value
    return out


_body = st.builds(_changed, _valid_body, st.lists(_change, max_size=2))


#: Bodies as clients commonly send them: the plain reader must read each of these.
PLAIN = [
    {"model": "openai.primary", "messages": [{"role": "user", "content": "hi"}]},
    {
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "developer", "content": "Answer in English.", "name": "ops"},
            {"role": "user", "content": "hi", "name": "ann"},
            {"role": "assistant", "content": "hello", "name": "bot"},
            {"role": "user", "content": ""},
        ],
        "stream": True,
        "temperature": 1,
        "max_tokens": 64,
        "max_completion_tokens": 32,
        "user": "u-1",
        "top_p": 0.5,
        "seed": 3,
    },
    {"model": "", "messages": [{"role": "user", "content": "hi"}], "stream": None, "temperature": 0.2, "user": None},
]


def _general(raw: dict[str, Any]) -> ChatCall | str:
    try:
        return _chat_call(raw)
    except RequestRejected as exc:
        return f"rejected: {exc.failure.message}"


@settings(max_examples=1000, deadline=None)
@given(_body)
def test_the_plain_reader_reads_only_what_the_general_path_reads_the_same(raw: dict[str, Any]) -> None:
    """Whenever the plain reader reads a body, the general path accepts it and makes the very same call."""
    plain = _plain_call(raw)
    if plain is not None:
        assert _general(raw) == plain


@pytest.mark.parametrize("raw", PLAIN)
def test_plain_requests_are_read_plainly_into_the_general_paths_call(raw: dict[str, Any]) -> None:
    """Text messages with the common scalar options are read plainly, into the general path's call."""
    plain = _plain_call(raw)
    assert plain is not None
    assert plain == _chat_call(raw)


def test_parse_gives_the_general_paths_call_for_a_plain_body() -> None:
    """The surface's parse returns the same call for a plain body as the general path does."""
    raw = PLAIN[1]
    assert OpenAISurface().parse(orjson.dumps(raw)) == _chat_call(raw)


_EACH_CHANGE = [("top", k, v) for k, vs in _top_changes.items() for v in vs] + [
    ("message", (k, v), i) for k, vs in _message_changes.items() for v in vs for i in (0, 1)
]


@pytest.mark.parametrize("change", _EACH_CHANGE, ids=repr)
@pytest.mark.parametrize("raw", PLAIN[:2])
def test_every_single_change_of_a_plain_body_is_read_as_the_general_path_reads_it(
    raw: dict[str, Any], change: tuple[Any, ...]
) -> None:
    """Each value out of range, of another type or only for the general path, alone: the same call, or none."""
    body = _changed(raw, [change])
    plain = _plain_call(body)
    if plain is not None:
        assert _general(body) == plain
