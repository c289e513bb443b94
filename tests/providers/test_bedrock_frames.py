"""The event-stream frame reader: frames with headers of every type, whole or corrupted."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.core.errors import ProtocolError
from turnout.providers.aws import Frame, FrameReader

#: One header as written: its name, its type byte, its encoded value, and the value as read back.
Header = tuple[str, int, bytes, object]


def _frame(headers: list[Header], payload: bytes) -> bytes:
    raw = b"".join(bytes([len(n.encode())]) + n.encode() + bytes([t]) + v for n, t, v, _ in headers)
    prelude = struct.pack(">II", 16 + len(raw) + len(payload), len(raw))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + raw + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _string(value: str) -> tuple[int, bytes, object]:
    data = value.encode()
    return 7, struct.pack(">H", len(data)) + data, value


def _bytes(value: bytes) -> tuple[int, bytes, object]:
    return 6, struct.pack(">H", len(value)) + value, value


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda n: len(n.encode()) < 256
)
_values = st.one_of(
    st.text(max_size=30).map(_string),
    st.booleans().map(lambda b: (0 if b else 1, b"", b)),
    st.integers(-(2**7), 2**7 - 1).map(lambda i: (2, struct.pack(">b", i), i)),
    st.integers(-(2**15), 2**15 - 1).map(lambda i: (3, struct.pack(">h", i), i)),
    st.integers(-(2**31), 2**31 - 1).map(lambda i: (4, struct.pack(">i", i), i)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: (5, struct.pack(">q", i), i)),
    st.binary(max_size=20).map(_bytes),
    st.integers(0, 2**63 - 1).map(lambda ms: (8, struct.pack(">q", ms), ms)),
    st.binary(min_size=16, max_size=16).map(lambda u: (9, u, u)),
)
_header = st.tuples(_names, _values).map(lambda h: (h[0], *h[1]))


@settings(max_examples=300, deadline=None)
@given(headers=st.lists(_header, max_size=5, unique_by=lambda h: h[0]), payload=st.binary(max_size=64))
def test_a_frame_reads_back_its_headers_of_every_type_and_its_payload(headers: list[Header], payload: bytes) -> None:
    """Boolean, integer (8 to 64 bits), bytes, string, timestamp and uuid headers read back as written."""
    reader = FrameReader("bedrock.test", None)
    frames: list[Frame] = []
    reader.feed(_frame(headers, payload), frames)
    (frame,) = frames
    assert dict(frame.headers) == {name: value for name, _, _, value in headers}
    assert [type(v) for v in frame.headers.values()] == [type(value) for _, _, _, value in headers]
    assert frame.payload == payload
    assert reader.pending == 0


@settings(max_examples=300, deadline=None)
@given(headers=st.lists(_header, max_size=5), payload=st.binary(max_size=64), flip=st.integers(0, 10_000))
def test_a_corrupted_frame_is_never_read(headers: list[Header], payload: bytes, flip: int) -> None:
    """A frame with any one byte changed is a protocol error, or (a longer length) waits for bytes: never a frame."""
    raw = bytearray(_frame(headers, payload))
    raw[flip % len(raw)] ^= 0x5A
    reader = FrameReader("bedrock.test", None)
    frames: list[Frame] = []
    try:
        reader.feed(bytes(raw), frames)
    except ProtocolError:
        return
    assert frames == []
    assert reader.pending == len(raw)


def test_a_repeated_header_name_is_a_protocol_error() -> None:
    """Two headers of one name in a frame: the frame is refused, not read with either value."""
    raw = _frame([("a", *_string("x")), ("a", *_string("y"))], b"{}")
    with pytest.raises(ProtocolError, match="DuplicateHeader"):
        FrameReader("bedrock.test", None).feed(raw, [])
