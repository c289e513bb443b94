"""The event-stream frame reader: its string-header fast path decodes exactly what botocore's decoder does."""

from __future__ import annotations

import struct
import zlib

from botocore import eventstream
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_kit import fixture_path

from turnout.errors import ProtocolError
from turnout.providers.aws import FrameReader, string_frame


def _botocore(raw: bytes) -> tuple[dict[str, object], bytes] | str:
    """Botocore's reading of one frame (its error's name when it refuses it)."""
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(raw)
    try:
        message = next(buffer)
    except (eventstream.ParserError, StopIteration, struct.error, ValueError, UnicodeDecodeError) as exc:
        return type(exc).__name__
    return dict(message.headers), message.payload


def _frame(headers: list[tuple[str, int, bytes]], payload: bytes) -> bytes:
    raw = b"".join(bytes([len(n.encode())]) + n.encode() + bytes([t]) + v for n, t, v in headers)
    prelude = struct.pack(">II", 16 + len(raw) + len(payload), len(raw))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + raw + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _string(value: str) -> tuple[int, bytes]:
    data = value.encode()
    return 7, struct.pack(">H", len(data)) + data


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda n: len(n.encode()) < 256
)
_header = st.one_of(
    st.tuples(_names, st.text(max_size=30).map(_string)),
    st.tuples(_names, st.booleans().map(lambda b: (0 if b else 1, b""))),
    st.tuples(_names, st.integers(0, 255).map(lambda i: (2, bytes([i])))),
    st.tuples(_names, st.integers(-(2**31), 2**31 - 1).map(lambda i: (4, struct.pack(">i", i)))),
    st.tuples(_names, st.binary(max_size=20).map(lambda b: (6, struct.pack(">H", len(b)) + b))),
)


@settings(max_examples=300, deadline=None)
@given(
    headers=st.lists(_header, max_size=5),
    payload=st.binary(max_size=64),
    flip=st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_fast_path_agrees_with_botocore(
    headers: list[tuple[str, tuple[int, bytes]]], payload: bytes, flip: int | None
) -> None:
    """Every frame, corrupted or not, with any header types: the reader gives botocore's answer or its refusal."""
    raw = bytearray(_frame([(n, t, v) for n, (t, v) in headers], payload))
    if flip is not None:
        raw[flip % len(raw)] ^= 0x5A
    expected = _botocore(bytes(raw))
    fast = string_frame(bytes(raw))
    if fast is not None:  # the fast path only ever answers for a frame botocore accepts, and answers the same
        assert (dict(fast.headers), fast.payload) == expected
    reader = FrameReader("bedrock.test", None)
    frames: list[object] = []
    try:
        reader.feed(bytes(raw), frames)  # type: ignore[arg-type]
    except ProtocolError:
        assert isinstance(expected, str)
        return
    if frames:
        (frame,) = frames
        assert (dict(frame.headers), frame.payload) == expected  # type: ignore[attr-defined]


def test_recorded_frames_take_the_fast_path() -> None:
    """Every recorded Bedrock frame has string headers only, so the fast path reads each, as botocore does."""
    for path in sorted(fixture_path("bedrock").glob("*.eventstream")):
        data = path.read_bytes()
        pos = 0
        while pos < len(data):
            total = struct.unpack_from(">I", data, pos)[0]
            raw = data[pos : pos + total]
            fast = string_frame(raw)
            assert fast is not None, path.name
            assert (dict(fast.headers), fast.payload) == _botocore(raw)
            pos += total
