"""Assembling streams, and splitting inline <think> spans from streamed text at any split point."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.core.streams import ThinkSplitter, collect, split_think, without_think
from turnout.core.types import (
    ChatResponse,
    Final,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    Usage,
    UsageEvent,
)


def run(pieces: list[str]) -> tuple[str, str]:
    splitter = ThinkSplitter()
    out = [p for piece in pieces for p in splitter.feed(piece)] + splitter.finish()
    return "".join(t for r, t in out if not r), "".join(t for r, t in out if r)


def test_collect_assembles_a_response() -> None:
    """Text and reasoning concatenate, tool calls append, the last usage wins, Final gives the finish."""
    call = ToolCall(id="1", name="f")
    resp = collect(
        [
            TextDelta(text="a"),
            ReasoningDelta(text="r"),
            TextDelta(text="b"),
            ToolCallEvent(call=call),
            UsageEvent(usage=Usage(input_tokens=1)),
            UsageEvent(usage=Usage(input_tokens=2)),
            Final(finish_reason="stop", model="m"),
        ]
    )
    assert resp == ChatResponse(
        text="ab", reasoning="r", tool_calls=(call,), usage=Usage(input_tokens=2), finish_reason="stop", model="m"
    )


def test_think_spans_become_reasoning() -> None:
    """A <think> span split across pieces is reasoning; the rest is answer text."""
    assert run(["<thi", "nk>plan", "</th", "ink>ans", "wer"]) == ("answer", "plan")
    assert run(["x <", "y"]) == ("x <y", "")
    assert run(["<think>never closed"]) == ("", "never closed")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["<think>", "</think>", "<", ">", "think", "a", "b ", "<th", "k>"]), max_size=12),
    st.data(),
)
def test_splitting_never_depends_on_where_the_text_was_cut(parts: list[str], data: st.DataObject) -> None:
    """Any cut of the same text gives the same answer and reasoning as feeding it whole."""
    text = "".join(parts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    pieces, prev = [], 0
    for c in cuts:
        pieces.append(text[prev:c])
        prev = c
    pieces.append(text[prev:])
    assert run(pieces) == run([text])


def test_without_think_moves_spans_to_reasoning() -> None:
    """A complete response keeps its answer text; inline think spans join its reasoning."""
    resp = without_think(ChatResponse(text="<think>why</think> Because.", reasoning="earlier"))
    assert (resp.text, resp.reasoning) == ("Because.", "earlier\nwhy")
    assert split_think("plain") == ("plain", "")
