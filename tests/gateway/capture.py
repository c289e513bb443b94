"""A loopback upstream that records each request (path, headers, JSON body) and answers a fixed reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from servers import loopback_app

CAPTURED_TEXT = "captured answer"


@dataclass
class Seen:
    """One request the capture upstream received."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Capture:
    """What reached the upstream, in order."""

    url: str = ""
    seen: list[Seen] = field(default_factory=list)

    @property
    def last(self) -> Seen:
        return self.seen[-1]


def _message(body: Any) -> dict[str, Any]:
    return {
        "id": "msg_cap",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": [{"type": "text", "text": CAPTURED_TEXT}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 2},
    }


def _completion(body: Any) -> dict[str, Any]:
    n = body.get("n") or 1
    return {
        "id": "chatcmpl-cap",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": f"{CAPTURED_TEXT} {i}"},
                "finish_reason": "stop",
            }
            for i in range(n)
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
    }


@asynccontextmanager
async def capture_upstream() -> AsyncIterator[Capture]:
    """A started capture upstream on a free loopback port (Anthropic Messages and OpenAI chat, not streaming)."""
    cap = Capture()

    async def handle(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        cap.seen.append(Seen(request.path, dict(request.headers), body))
        if request.path.endswith("/count_tokens"):
            return web.json_response({"input_tokens": 42})
        if request.path.endswith("/messages"):
            return web.json_response(_message(body))
        return web.json_response(_completion(body))

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    async with loopback_app(app) as cap.url:
        yield cap
