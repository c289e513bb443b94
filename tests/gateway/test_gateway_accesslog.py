"""The access log under `turnout serve`: a line per request, written by a thread of its own, all of it at shutdown."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
import time
from collections.abc import Iterator

import orjson
import pytest
from gateway_support import TWO_PROFILES, post
from hypothesis import example, given
from hypothesis import strategies as st
from yarl import URL

from fakes import Fleet
from turnout import Client
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.accesslog import access_log, logged_path, start_writer, stop_writer, use_queue

CHAT = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
FIELDS = {
    "ts",
    "method",
    "path",
    "status",
    "duration_ms",
    "surface",
    "stream",
    "provider",
    "model",
    "attempts",
    "fallback",
    "interrupted",
    "closed_by",
    "caller",
    "call_id",
}


class Recorded(io.StringIO):
    """A stream that notes which thread wrote to it."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def write(self, s: str) -> int:
        self.threads.add(threading.current_thread().name)
        return super().write(s)


@pytest.fixture
def serve_logging() -> Iterator[None]:
    """The access logger as the test found it, afterwards (``use_queue`` changes it as ``turnout serve`` does)."""
    saved = (list(access_log.handlers), access_log.propagate, access_log.level)
    access_log.handlers.clear()
    try:
        yield
    finally:
        access_log.handlers[:] = saved[0]
        access_log.propagate = saved[1]
        access_log.setLevel(saved[2])


async def test_a_served_gateway_writes_a_json_line_per_request_before_it_stops(serve_logging: None) -> None:
    """Under serve's logging each request's line, every field, is written off the event loop by the time it stops."""
    out = Recorded()
    use_queue(out)
    client = Client.from_toml(TWO_PROFILES, adapter_builder=Fleet(), ledger=False)
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        for _ in range(20):
            assert (await post(server, "/v1/chat/completions", CHAT)).status == 200
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 20
    assert all(set(line) == FIELDS for line in lines)
    assert {line["path"] for line in lines} == {"/v1/chat/completions"}
    assert all(line["status"] == 200 and line["call_id"] for line in lines)
    assert len({line["call_id"] for line in lines}) == 20
    assert threading.current_thread().name not in out.threads  # the event loop's thread never wrote


async def test_stopping_the_writer_writes_every_queued_line_in_order(serve_logging: None) -> None:
    """Lines queued before the stop are all written, in the order they were logged."""
    out = io.StringIO()
    use_queue(out)
    writer = start_writer()
    assert writer is not None
    for i in range(1000):
        access_log.info('{"n":%d}', i)
    await stop_writer(writer)
    assert out.getvalue().splitlines() == [f'{{"n":{i}}}' for i in range(1000)]


async def test_a_stuck_stream_does_not_hold_the_shutdown(serve_logging: None) -> None:
    """A stream whose writes block (a pipe nobody reads) keeps the stop waiting no longer than its timeout."""
    release = threading.Event()

    class Stuck(io.StringIO):
        def write(self, s: str) -> int:
            release.wait(10)
            return super().write(s)

    use_queue(Stuck())
    writer = start_writer()
    assert writer is not None
    access_log.info("a line")
    started = time.monotonic()
    await stop_writer(writer, within=0.2)
    assert time.monotonic() - started < 2.0
    release.set()
    await asyncio.sleep(0)


def test_only_serve_logging_has_a_writer_to_start(serve_logging: None) -> None:
    """A gateway in your own process has no writer of its own: its lines are ordinary records."""
    access_log.addHandler(logging.NullHandler())
    assert start_writer() is None


_path_chars = st.sampled_from([*"/abc-_.~:@!$&'()*+,;=", "%2F", "%2f", "%25", "%41", "%e2%9a%a1", "%", "%zz", "é", " "])


@given(st.lists(_path_chars, max_size=12).map(lambda parts: "/" + "".join(parts)))
@example("/v1/chat/completions")
@example("/v1/models/a%2Fb")
@example("/v1/models/100%25")
def test_logged_path_is_the_decoded_path(raw: str) -> None:
    """The access line's path is the request's decoded path, however the client encoded it."""
    url = URL.build(path=raw, encoded=True)
    assert logged_path(url) == url.path
