"""A tiny, fast OpenAI-shaped upstream for the benchmarks.

A bare :class:`asyncio.Protocol` HTTP/1.1 server (keep-alive, ``Content-Length`` and chunked request
bodies) that answers ``POST …/v1/chat/completions`` with precomputed bytes, so it costs far less per
request than any client it serves (about 40 µs of its own CPU per call, syscalls included): the floor
measures the client, not the server. It is not the simulator (``turnout.sim``), which does about 9k
requests/s on one core, i.e. ~110 µs per request: enough for tests, but it would add a third to the raw
round trip and flatter every ratio.

The path prefix before ``/v1`` picks the behaviour, so the model names stay real (``gpt-4.1-mini``):

=================  ===========================================================================
prefix             answer
=================  ===========================================================================
(none)             200: a chat completion, or a stream of 100 one-word chunks (``"stream": true``)
``/rl-ra<N>``      429 ``rate_limit_exceeded`` with ``Retry-After: <N>``
``/paced``         like (none), but a stream is sent in 10 bursts of 10 chunks, 100 ms apart
``/down503``       503 ``server_error`` (an outage)
``/silent``        nothing: the request is read and never answered (a hung upstream)
=================  ===========================================================================

Streams honour ``stream_options.include_usage``. ``GET /health`` answers 200.

Run: ``python -m bench.upstream [--cpu N] [--port P]``; it prints its port on stdout and serves until
SIGTERM/SIGINT. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

import orjson

STREAM_CHUNKS = 100
PACED_BURSTS = 10
PACED_INTERVAL_S = 0.1
REPLY_TEXT = (
    "Hello from the benchmark upstream: a short, fixed answer of about twenty words, so every client decodes the same."
)
STREAM_TEXT = "".join(f"w{i} " for i in range(STREAM_CHUNKS))
_CREATED = 1_700_000_000


def completion_body(model: str) -> bytes:
    """A non-streaming ``chat.completion`` answer."""
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": _CREATED,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY_TEXT, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32},
            "system_fingerprint": None,
        }
    )


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def stream_events(model: str, include_usage: bool) -> list[bytes]:
    """The SSE events of a 100-chunk answer, each framed as one HTTP/1.1 chunk."""
    objs: list[dict[str, Any]] = [_chunk(model, {"role": "assistant", "content": ""}, None)]
    objs += [_chunk(model, {"content": f"w{i} "}, None) for i in range(STREAM_CHUNKS)]
    objs.append(_chunk(model, {}, "stop"))
    if include_usage:
        usage = {"prompt_tokens": 12, "completion_tokens": STREAM_CHUNKS, "total_tokens": 12 + STREAM_CHUNKS}
        objs.append({**_chunk(model, {}, None), "choices": [], "usage": usage})
    events = [b"data: " + orjson.dumps(o) + b"\n\n" for o in objs]
    events.append(b"data: [DONE]\n\n")
    return [b"%x\r\n%b\r\n" % (len(e), e) for e in events]


def _head(status: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers), "", ""]
    return "\r\n".join(lines).encode()


def _whole(status: str, body: bytes, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    headers = [("content-type", "application/json"), ("content-length", str(len(body))), *extra]
    headers.append(("x-request-id", "req-bench"))
    return _head(status, headers) + body


_STREAM_HEAD = _head("200 OK", [("content-type", "text/event-stream"), ("transfer-encoding", "chunked")])
_END = b"0\r\n\r\n"
_RATE_LIMIT_BODY = orjson.dumps(
    {
        "error": {
            "message": "Rate limit reached for requests per minute. Please try again later.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
)
_UNAVAILABLE = _whole(
    "503 Service Unavailable",
    b'{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,'
    b'"code":null}}',
)
_NOT_FOUND = _whole("404 Not Found", b'{"error":{"message":"not found","type":"invalid_request_error"}}')
_HEALTH = _whole("200 OK", b'{"ok":true}')


class Answers:
    """Precomputed answers, built once per (model, kind) and reused."""

    def __init__(self) -> None:
        self._whole: dict[str, bytes] = {}
        self._stream: dict[tuple[str, bool], list[bytes]] = {}
        self._limited: dict[str, bytes] = {}

    def whole(self, model: str) -> bytes:
        out = self._whole.get(model)
        if out is None:
            out = self._whole[model] = _whole("200 OK", completion_body(model))
        return out

    def stream(self, model: str, include_usage: bool) -> list[bytes]:
        key = (model, include_usage)
        out = self._stream.get(key)
        if out is None:
            out = self._stream[key] = stream_events(model, include_usage)
        return out

    def limited(self, retry_after: str) -> bytes:
        out = self._limited.get(retry_after)
        if out is None:
            out = self._limited[retry_after] = _whole(
                "429 Too Many Requests", _RATE_LIMIT_BODY, (("retry-after", retry_after),)
            )
        return out


class UpstreamProtocol(asyncio.Protocol):
    """One keep-alive connection: parse requests, write precomputed answers."""

    __slots__ = ("_answers", "_buf", "_closing", "_loop", "_transport")

    def __init__(self, answers: Answers, loop: asyncio.AbstractEventLoop) -> None:
        self._answers = answers
        self._loop = loop
        self._buf = b""
        self._transport: asyncio.Transport | None = None
        self._closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while self._transport is not None and not self._closing:
            request = self._take_request()
            if request is None:
                return
            self._answer(*request)

    def _take_request(self) -> tuple[str, str, bytes, bool] | None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = buf[:end].decode("latin-1").split("\r\n")
        method, path, _ = head[0].split(" ", 2)
        length = 0
        chunked = False
        close = False
        for line in head[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        start = end + 4
        if chunked:
            parsed = _dechunk(buf, start)
            if parsed is None:
                return None
            body, consumed = parsed
        else:
            if len(buf) - start < length:
                return None
            body, consumed = buf[start : start + length], start + length
        self._buf = buf[consumed:]
        return method, path, body, close

    def _answer(self, method: str, path: str, body: bytes, close: bool) -> None:
        transport = self._transport
        assert transport is not None
        if method == "GET" and path.startswith("/health"):
            transport.write(_HEALTH)
        elif method == "POST" and path.endswith("/chat/completions"):
            self._chat(transport, path, body)
        else:
            transport.write(_NOT_FOUND)
        if close:
            self._closing = True
            transport.close()

    def _chat(self, transport: asyncio.Transport, path: str, body: bytes) -> None:
        prefix = path[: path.find("/v1/")] if "/v1/" in path else ""
        if prefix.startswith("/rl-ra"):
            transport.write(self._answers.limited(prefix[len("/rl-ra") :]))
            return
        if prefix == "/down503":
            transport.write(_UNAVAILABLE)
            return
        if prefix == "/silent":  # held until the client gives up and closes the connection
            return
        request = orjson.loads(body)
        model = str(request.get("model") or "gpt-bench")
        if not request.get("stream"):
            transport.write(self._answers.whole(model))
            return
        options = request.get("stream_options") or {}
        events = self._answers.stream(model, bool(options.get("include_usage")))
        if prefix == "/paced":
            self._paced(transport, events, 0)
            return
        transport.write(b"".join((_STREAM_HEAD, *events, _END)))

    def _paced(self, transport: asyncio.Transport, events: list[bytes], burst: int) -> None:
        if transport.is_closing():
            return
        per = -(-len(events) // PACED_BURSTS)
        part = events[burst * per : (burst + 1) * per]
        head = _STREAM_HEAD if burst == 0 else b""
        last = (burst + 1) * per >= len(events)
        transport.write(b"".join((head, *part, _END if last else b"")))
        if not last:
            self._loop.call_later(PACED_INTERVAL_S, self._paced, transport, events, burst + 1)


def _dechunk(buf: bytes, pos: int) -> tuple[bytes, int] | None:
    """Decode a chunked request body starting at ``pos``: (body, end offset), or None if incomplete."""
    parts: list[bytes] = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(buf[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            trailer_end = buf.find(b"\r\n", pos)
            if trailer_end < 0:
                return None
            return b"".join(parts), trailer_end + 2
        if len(buf) < pos + size + 2:
            return None
        parts.append(buf[pos : pos + size])
        pos += size + 2


async def serve(port: int = 0) -> None:
    """Serve on 127.0.0.1 until SIGTERM or SIGINT; print the bound port first."""
    loop = asyncio.get_running_loop()
    answers = Answers()
    server = await loop.create_server(
        lambda: UpstreamProtocol(answers, loop), "127.0.0.1", port, backlog=4096, reuse_address=True
    )
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="The benchmarks' tiny OpenAI-shaped upstream.")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
