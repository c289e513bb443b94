"""A bare aiohttp pass-through proxy: the floor the gateway is compared with.

``POST /v1/chat/completions`` sends the body as it came to the upstream's ``/v1/chat/completions`` on one
shared session (the upstream key in ``Authorization``) and answers with the upstream's status, content
type and body; ``GET /health`` answers 200. No client key check, no parsing, no retry, no fallback: the
least an aiohttp proxy does, so what the gateway costs beyond it is what its features cost. It runs on the
same event loop as ``turnout serve`` (uvloop when installed) with aiohttp's access log off, as the gateway.

Run: ``python -m bench.passthrough --upstream URL --port P``; serves until SIGTERM/SIGINT, on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Callable

import aiohttp
from aiohttp import web

from bench.contenders import API_KEY


def application(upstream: str) -> web.Application:
    """The proxy's application, forwarding to ``upstream`` (``http://host:port``)."""
    target = f"{upstream}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    app = web.Application()
    session: list[aiohttp.ClientSession] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        async with session[0].post(target, data=body, headers=headers) as resp:
            data = await resp.read()
            return web.Response(status=resp.status, body=data, content_type=resp.content_type)

    async def health(request: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', content_type="application/json")

    async def open_session(app: web.Application) -> None:
        session.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)))

    async def close_session(app: web.Application) -> None:
        await session[0].close()

    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.on_startup.append(open_session)
    app.on_cleanup.append(close_session)
    return app


async def serve(upstream: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""
    runner = web.AppRunner(application(upstream), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A bare aiohttp pass-through proxy (the gateway benchmark's floor).")
    parser.add_argument("--upstream", required=True, help="the upstream's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(serve(args.upstream.rstrip("/"), args.port))


if __name__ == "__main__":
    main()
