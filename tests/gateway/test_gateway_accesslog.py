"""The access log under `turnout serve`: whole lines, in writes a pipe keeps apart, flushed soon and at close."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from turnout.gateway import accesslog
from turnout.gateway.accesslog import WRITE_BYTES, BatchedLines, direct_sink, use_batched_lines


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
