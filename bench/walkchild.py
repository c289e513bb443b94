"""A child process that times batches of non-streaming Turnout calls on request (``bench/pools.py`` drives it).

``python -m bench.walkchild URL``: builds :class:`bench.contenders.TurnoutClient` (whichever ``turnout`` the
``PYTHONPATH`` finds first: the working tree's or an exported older commit's), prints ``ready <turnout file>``,
then for each line ``N`` on stdin makes N timed calls and prints their durations (seconds) as one JSON list;
``quit`` (or end of input) ends it. Timing happens here, so the pipe costs the measurement nothing.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time

import orjson

from bench.contenders import EXPECTED_CHAT, TurnoutClient


async def _batch(client: TurnoutClient, n: int) -> list[float]:
    perf = time.perf_counter
    out = []
    for _ in range(n):
        t0 = perf()
        text = await client.chat()
        out.append(perf() - t0)
        if text != EXPECTED_CHAT:
            raise RuntimeError(f"unexpected answer {text[:60]!r}")
    return out


def main(url: str) -> int:
    """Serve batch requests from stdin until ``quit``."""
    import turnout

    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(_make(url))
    print(f"ready {turnout.__file__}", flush=True)
    try:
        for line in sys.stdin:
            command = line.strip()
            if command == "quit":
                break
            timings = loop.run_until_complete(_batch(client, int(command)))
            gc.collect()
            print(orjson.dumps(timings).decode(), flush=True)
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    return 0


async def _make(url: str) -> TurnoutClient:
    return TurnoutClient(url)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
