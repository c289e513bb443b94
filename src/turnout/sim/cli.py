"""``turnout sim``: run the simulator in the foreground until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from turnout.core.errors import cannot_listen
from turnout.sim.simulator import Simulator


def run(host: str, port: int, script: str | None, seed: int | None = None) -> None:
    """Serve on ``host:port`` with an optional script file, print the base URLs, run until Ctrl-C.

    ``seed`` seeds the draws of heavy-tailed delays (a script's own ``seed`` wins).

    Raises:
        ConfigError: The script is invalid, or ``host:port`` cannot be bound (code ``listen_failed``).
    """
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(host, port, script, seed))


async def _serve(host: str, port: int, script: str | None, seed: int | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    sim = Simulator(script, host=host, port=port, seed=seed)
    try:
        await sim.start()
    except OSError as exc:
        raise cannot_listen(host, port, exc) from None
    async with sim:
        print(f"turnout sim listening on {sim.url}" + (f" (script: {script})" if script else ""))
        print(f"  openai / openai-compatible  {sim.base_url('openai')}")
        print(f"  anthropic                   {sim.base_url('anthropic')}")
        print(f"  gemini                      {sim.base_url('gemini')}")
        print(f"  ollama                      {sim.base_url('ollama')}")
        print(f"  azure                       {sim.base_url('azure', deployment='<deployment>')}")
        print(f"  bedrock                     {sim.base_url('bedrock')}  (SigV4 with the simulator's keys, or Bearer)")
        print(f"  log: GET {sim.url}/_sim/log   reset: POST {sim.url}/_sim/reset   Ctrl-C to stop", flush=True)
        await stop.wait()
