"""The shared SSE / NDJSON framing: line endings, fields, limits, and split-anywhere equivalence."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_kit import bytewise, two_way_splits

from turnout.core.errors import ProtocolError
from turnout.providers.framing import NDJSONParser, SSEEvent, SSEParser

# A sample that exercises every SSE rule at once: comments, names, multi-line data, ids, retry, a field
# without a colon, stray lines, CRLF and CR endings, an event without data, and a last line left open.
SAMPLE = (
    b": keep-alive\n"
    b"event: message_start\n"
    b'data: {"a":1}\n'
    b"\n"
    b"data: first\r\n"
    b"data:  second\r\n"
    b"id: 7\r\n"
    b"retry: 100\r\n"
    b"\r\n"
    b"event: only-a-name\r\r"
    b"data\n\n"
    b'{"error": {"message": "raw tail"}}\n'
    b"data: last\n\n"
    b"data: unterminated"
)


def sse_all(pieces: list[bytes], *, max_line: int | None = None) -> tuple[list[SSEEvent], list[bytes]]:
    """Every event a parser dispatches for ``pieces`` (finish included), and its stray lines."""
    parser = SSEParser() if max_line is None else SSEParser(max_line)
    events: list[SSEEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return events, parser.stray


def ndjson_all(pieces: list[bytes], *, max_line: int | None = None) -> list[bytes]:
    """Every line an NDJSON parser returns for ``pieces``, the unterminated tail last (when any)."""
    parser = NDJSONParser() if max_line is None else NDJSONParser(max_line)
    lines: list[bytes] = []
    for piece in pieces:
        lines += parser.feed(piece)
    tail = parser.finish()
    return [*lines, tail] if tail else lines


# --- SSE ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_sse_line_endings_are_equivalent(eol: bytes) -> None:
    """LF, CRLF and CR all end lines, and a blank line ends the event."""
    body = b"event: e" + eol + b"data: x" + eol + eol + b"data: y" + eol + eol
    events, _ = sse_all([body])
    assert events == [("e", b"x"), ("", b"y")]


def test_sse_crlf_split_across_feeds_is_one_line_break() -> None:
    """A CRLF whose CR ends one read and whose LF starts the next is a single line break."""
    events, _ = sse_all([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert events == [("", b"a\nb")]


def test_sse_empty_read_between_cr_and_lf_keeps_the_pair() -> None:
    """An empty read between the CR and the LF of one CRLF does not turn it into two line breaks."""
    events, _ = sse_all([b"data: a\r", b"", b"\ndata: b\r\n\r\n"])
    assert events == [("", b"a\nb")]


def test_sse_lone_cr_then_crlf_is_two_line_breaks() -> None:
    """A CR at the end of one read followed by a CRLF is two line breaks: the event ends."""
    events, _ = sse_all([b"data: a\r", b"\r\n", b"data: b\n\n"])
    assert events == [("", b"a"), ("", b"b")]


def test_sse_comments_are_skipped_and_counted() -> None:
    """Lines starting with a colon are comments: never data, only counted."""
    parser = SSEParser()
    events = parser.feed(b": OPENROUTER PROCESSING\n\n:\ndata: x\n: between\n\n")
    assert events == [("", b"x")]
    assert parser.comments == 3


def test_sse_multi_line_data_joins_with_newline() -> None:
    """Several data lines in one event join with a line feed."""
    events, _ = sse_all([b'data: {\ndata: "a": 1\ndata: }\n\n'])
    assert events == [("", b'{\n"a": 1\n}')]


def test_sse_event_names_reset_after_each_event() -> None:
    """An event name applies to its own event only."""
    events, _ = sse_all([b"event: ping\ndata: {}\n\ndata: plain\n\n"])
    assert events == [("ping", b"{}"), ("", b"plain")]


def test_sse_event_without_data_is_not_dispatched() -> None:
    """An event with a name, id or retry but no data line dispatches nothing."""
    events, _ = sse_all([b"event: nothing\nid: 3\nretry: 10\n\ndata: x\n\n"])
    assert events == [("", b"x")]


def test_sse_field_without_colon_has_empty_value() -> None:
    """A bare ``data`` line is a data field with an empty value; a bare unknown name is kept as stray."""
    events, stray = sse_all([b"data\ndata\n\nbogus\n\n"])
    assert events == [("", b"\n")]
    assert stray == [b"bogus"]


def test_sse_only_one_leading_space_is_stripped() -> None:
    """One space after the colon is dropped, further spaces and a missing space are kept as they are."""
    events, _ = sse_all([b"data:   three\n\ndata:none\n\ndata: \n\n"])
    assert events == [("", b"  three"), ("", b"none"), ("", b"")]


def test_sse_unterminated_last_event_is_dispatched_at_finish() -> None:
    """Complete lines of an event that lacks its closing blank line dispatch at end of body."""
    parser = SSEParser()
    assert parser.feed(b"data: a\ndata: b\n") == []
    assert parser.finish() == [("", b"a\nb")]
    assert parser.stray == []


def test_sse_unfinished_last_line_is_kept_as_stray() -> None:
    """A last line without a line break is a cut: not dispatched, kept in ``stray``."""
    parser = SSEParser()
    assert parser.feed(b'data: complete\n\ndata: {"cut') == [("", b"complete")]
    assert parser.finish() == []
    assert parser.stray == [b'data: {"cut']


def test_sse_non_field_lines_are_kept_as_stray() -> None:
    """A raw JSON body inside the stream is kept in ``stray`` for the adapter to inspect."""
    _, stray = sse_all([b'{"error": {"message": "boom"}}\n'])
    assert stray == [b'{"error": {"message": "boom"}}']


def test_sse_sample_decodes_as_expected() -> None:
    """The combined sample yields exactly its events and stray lines."""
    events, stray = sse_all([SAMPLE])
    assert events == [
        ("message_start", b'{"a":1}'),
        ("", b"first\n second"),
        ("", b""),
        ("", b"last"),
    ]
    assert stray == [b'{"error": {"message": "raw tail"}}', b"data: unterminated"]


@pytest.mark.parametrize("body", [SAMPLE, SAMPLE.replace(b"\n", b"\r\n"), SAMPLE.replace(b"\n", b"\r")])
def test_sse_every_split_point_gives_the_same_events(body: bytes) -> None:
    """Splitting the body anywhere (two-way and byte by byte) changes nothing."""
    expected = sse_all([body])
    for pieces in two_way_splits(body):
        assert sse_all(pieces) == expected, pieces
    assert sse_all(bytewise(body)) == expected


def test_sse_line_longer_than_limit_raises_in_one_read() -> None:
    """A complete line longer than the limit is a protocol error even when it arrives in one read."""
    with pytest.raises(ProtocolError, match="longer than 16 bytes"):
        SSEParser(16).feed(b"data: " + b"x" * 20 + b"\n\n")


def test_sse_line_longer_than_limit_raises_while_unfinished() -> None:
    """An unfinished line that outgrows the limit fails before the rest of it arrives."""
    parser = SSEParser(16)
    parser.feed(b"data: 0123456789")
    with pytest.raises(ProtocolError):
        parser.feed(b"abcdef")


def test_sse_event_larger_than_limit_raises() -> None:
    """Many data lines adding up past the limit are a protocol error."""
    with pytest.raises(ProtocolError, match="larger than 32 bytes"):
        SSEParser(32).feed(b"data: 0123456789\n" * 4 + b"\n")


def test_sse_many_empty_data_lines_are_bounded_and_fast() -> None:
    """Empty data lines count toward the event bound, checked in constant time per line."""
    started = time.perf_counter()
    with pytest.raises(ProtocolError):
        SSEParser(100_000).feed(b"data\n" * 200_000)
    assert time.perf_counter() - started < 2.0


def test_sse_lines_within_limit_pass() -> None:
    """A line exactly at the limit is accepted."""
    events, _ = sse_all([b"data: " + b"x" * 10 + b"\n\n"], max_line=16)
    assert events == [("", b"x" * 10)]


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=400), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_sse_arbitrary_bytes_and_splits(body: bytes, cuts: list[int]) -> None:
    """Arbitrary bytes split anywhere (empty reads included) give the single-read events, or ProtocolError."""
    marks = sorted(c % (len(body) + 1) for c in cuts)
    pieces = [body[a:b] for a, b in zip([0, *marks], [*marks, len(body)], strict=True)]
    try:
        expected = sse_all([body], max_line=64)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            sse_all(pieces, max_line=64)
        return
    assert sse_all(pieces, max_line=64) == expected


_SSE_LINES = st.sampled_from(
    [b"data: x", b"data:y", b"data", b"event: e", b": c", b"id: 1", b"", b"{}", b"data: \xc3\xa9", b"retry"]
)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(_SSE_LINES, max_size=30),
    eols=st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=1, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=10),
)
def test_sse_valid_lines_with_mixed_endings(lines: list[bytes], eols: list[bytes], cuts: list[int]) -> None:
    """Field lines with mixed line endings decode the same however they are split."""
    body = b"".join(line + eols[i % len(eols)] for i, line in enumerate(lines))
    marks = sorted(c % (len(body) + 1) for c in cuts)
    pieces = [body[a:b] for a, b in zip([0, *marks], [*marks, len(body)], strict=True)]
    assert sse_all(pieces) == sse_all([body])


# --- NDJSON -------------------------------------------------------------------------------------


def test_ndjson_lines_blank_lines_and_crlf() -> None:
    """Lines end with LF (a CR before it is dropped); blank and whitespace-only lines are skipped."""
    assert ndjson_all([b'{"a":1}\r\n\n  \n{"b":2}\n']) == [b'{"a":1}', b'{"b":2}']


def test_ndjson_crlf_split_across_feeds() -> None:
    """A CRLF split between two reads still ends the line without a trailing CR."""
    assert ndjson_all([b'{"a":1}\r', b'\n{"b":2}\r\n']) == [b'{"a":1}', b'{"b":2}']


def test_ndjson_unterminated_last_line_is_returned_by_finish() -> None:
    """The last line without a line break comes back from ``finish``; none after a final break."""
    parser = NDJSONParser()
    assert parser.feed(b'{"a":1}\n{"done":tr') == [b'{"a":1}']
    assert parser.feed(b"ue}") == []
    assert parser.finish() == b'{"done":true}'
    assert parser.finish() == b""


def test_ndjson_every_split_point_gives_the_same_lines() -> None:
    """Splitting an NDJSON body anywhere changes nothing."""
    body = b'{"a":1}\n\r\n{"b":"\xc3\xa9"}\r\n  \n{"c":3}'
    expected = ndjson_all([body])
    assert expected == [b'{"a":1}', b'{"b":"\xc3\xa9"}', b'{"c":3}']
    for pieces in two_way_splits(body):
        assert ndjson_all(pieces) == expected
    assert ndjson_all(bytewise(body)) == expected


def test_ndjson_line_longer_than_limit_raises() -> None:
    """A line longer than the limit is a protocol error, whether it arrives whole or in pieces."""
    with pytest.raises(ProtocolError):
        NDJSONParser(8).feed(b"0123456789\n")
    parser = NDJSONParser(8)
    parser.feed(b"01234")
    with pytest.raises(ProtocolError):
        parser.feed(b"56789")


def test_ndjson_line_at_limit_with_crlf_split_before_lf() -> None:
    """A line exactly at the limit passes even when its CRLF is split and the CR waits in the buffer."""
    assert ndjson_all([b"0123456789\r", b"\n"], max_line=10) == [b"0123456789"]
    assert ndjson_all([b"0123456789\r\n"], max_line=10) == [b"0123456789"]


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=400), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_ndjson_arbitrary_bytes_and_splits(body: bytes, cuts: list[int]) -> None:
    """Arbitrary bytes split anywhere give the single-read lines, or ProtocolError in both cases."""
    marks = sorted(c % (len(body) + 1) for c in cuts)
    pieces = [body[a:b] for a, b in zip([0, *marks], [*marks, len(body)], strict=True)]
    try:
        expected = ndjson_all([body], max_line=64)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            ndjson_all(pieces, max_line=64)
        return
    assert ndjson_all(pieces, max_line=64) == expected
