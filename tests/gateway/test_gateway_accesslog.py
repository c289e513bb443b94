"""The access log under `turnout serve`: whole lines, in writes a pipe keeps apart, flushed soon and at close."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from yarl import URL

from turnout.gateway import accesslog
from turnout.gateway.accesslog import WRITE_BYTES, BatchedLines, direct_sink, logged_path, round_ms, use_batched_lines


def read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


async def test_lines_are_written_whole_in_writes_of_at_most_4_kib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many lines leave in few writes, none over 4 KiB and none cutting a line; the rest on flush."""
    writes: list[bytes] = []
    real_write = os.write

    def recording_write(fd: int, data: bytes | memoryview) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(accesslog.os, "write", recording_write)
    read_fd, write_fd = os.pipe()
    handler = BatchedLines(write_fd)
    lines = [b'{"n":%d,"pad":"%s"}' % (i, b"x" * (i % 300)) for i in range(200)]
    for line in lines:
        handler.write(line)
    handler.flush()
    data = read_all(read_fd)
    os.close(read_fd)
    os.close(write_fd)
    assert data.split(b"\n")[:-1] == lines
    assert 1 < len(writes) < len(lines) / 5
    assert all(len(w) <= WRITE_BYTES and w.endswith(b"\n") for w in writes)


async def test_a_quiet_gateway_flushes_its_lines_within_the_interval() -> None:
    """A lone line is written by the timer (at most FLUSH_EVERY_S later), without another line to push it."""
    read_fd, write_fd = os.pipe()
    handler = BatchedLines(write_fd)
    handler.write(b'{"status":200}')
    assert read_all(read_fd) == b""
    readable = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(read_fd, readable.set)
    try:
        async with asyncio.timeout(5):
            await readable.wait()
    finally:
        loop.remove_reader(read_fd)
    data = read_all(read_fd)
    os.close(read_fd)
    os.close(write_fd)
    assert data == b'{"status":200}\n'


def test_serve_gives_lines_to_the_batched_handler_directly() -> None:
    """With the batched handler alone on the access logger, the gateway may skip log records; not otherwise."""
    logger = logging.getLogger("turnout.gateway.access")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    try:
        logger.handlers.clear()
        assert direct_sink() is None
        handler = use_batched_lines(os.open(os.devnull, os.O_WRONLY))
        assert direct_sink() is handler
        logger.addHandler(logging.NullHandler())  # someone else listens too: records again
        assert direct_sink() is None
    finally:
        logger.handlers[:] = saved[0]
        logger.propagate = saved[1]
        logger.setLevel(saved[2])


@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(min_value=0, max_value=4e9),
        st.floats(min_value=0, max_value=100),
        st.integers(0, 2**40).map(lambda n: n / 2048),  # exact ties and near-ties of a half millisecond
        st.integers(0, 2**40).map(lambda n: n / 1000 + 0.0005),
    )
)
@example(1.0625)
@example(1764596000.1235)
@example(0.0)
@example(-0.0)
@example(-0.0001)
@example(9512151119924608.0)
@example(5e-324)
def test_round_ms_is_round_to_three_places(x: float) -> None:
    """The access line's timestamp and duration are ``round(x, 3)`` exactly, sign of zero included."""
    fast = round_ms(x)
    assert fast == round(x, 3)
    assert str(fast) == str(round(x, 3))


_path_chars = st.sampled_from([*"/abc-_.~:@!$&'()*+,;=", "%2F", "%2f", "%25", "%41", "%e2%9a%a1", "%", "%zz", "é", " "])


@given(st.lists(_path_chars, max_size=12).map(lambda parts: "/" + "".join(parts)))
@example("/v1/chat/completions")
@example("/v1/models/a%2Fb")
@example("/v1/models/100%25")
def test_logged_path_is_the_decoded_path(raw: str) -> None:
    """The access line's path is the request's decoded path, however the client encoded it."""
    url = URL.build(path=raw, encoded=True)
    assert logged_path(url) == url.path
