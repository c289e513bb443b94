"""The request log (key ids, prefill, usage, disconnects), timing behaviours and the lifecycle."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
from typing import Any

import aiohttp
import pytest

from turnout.core.secrets import key_id
from turnout.sim import Simulator

PATH = "/v1/chat/completions"


def chat(model: str, *, stream: bool = False, messages: list[Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages or [{"role": "user", "content": "hello there"}]}
    if stream:
        body["stream"] = True
    return body


async def test_key_ids_from_every_header(wire: Any, sim: Any) -> None:
    """Keys from Authorization Bearer, x-api-key, x-goog-api-key and api-key are logged by id; none is None."""
    for headers in (
        {"Authorization": "Bearer sk-one"},
        {"x-api-key": "sk-two"},
        {"x-goog-api-key": "sk-three"},
        {"api-key": "sk-four"},
        {},
    ):
        await wire.post(PATH, chat("gpt-4.1"), headers=headers)
    assert [e.key_id for e in sim.log] == [key_id(k) for k in ("sk-one", "sk-two", "sk-three", "sk-four")] + [None]
    assert all(e.key_id is None or len(e.key_id) == 8 for e in sim.log)


async def test_prefill_flag(wire: Any, sim: Any) -> None:
    """A last assistant message is logged as a prefill, in OpenAI, Anthropic and Ollama requests."""
    prefill = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure,"}]
    await wire.post(PATH, chat("gpt-4.1"))
    await wire.post(PATH, chat("gpt-4.1", messages=prefill))
    await wire.post("/v1/messages", {"model": "c", "max_tokens": 5, "messages": prefill})
    await wire.post("/api/chat", {"model": "l", "stream": False, "messages": prefill})
    assert [e.prefill for e in sim.log] == [False, True, True, True]


async def test_configured_usage_is_reported_and_logged(wire: Any, sim: Any) -> None:
    """Usage fixed by the script (cached input included) is reported exactly and logged."""
    sim.set_script(
        {"models": {"m": {"steps": [{"do": "ok", "usage": {"input": 120, "output": 7, "cached_input": 100}}]}}}
    )
    usage = (await wire.post(PATH, chat("m"))).json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (120, 7)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 100
    logged = sim.log[-1].usage
    assert (logged.input, logged.output, logged.cached_input) == (120, 7, 100)


async def test_default_usage_counts_words(wire: Any, sim: Any) -> None:
    """Default input usage is the word count of all messages; output is the number of generated units."""
    messages = [{"role": "system", "content": "be very brief"}, {"role": "user", "content": "one two"}]
    await wire.post(PATH, chat("sim-ok-t4", messages=messages))
    assert (sim.log[-1].usage.input, sim.log[-1].usage.output) == (5, 4)


async def test_errors_and_cuts_log_no_usage(wire: Any, sim: Any) -> None:
    """Answers that never carried final usage log usage None."""
    await wire.post(PATH, chat("sim-500"))
    await wire.post(PATH, chat("sim-cut-a1", stream=True))
    assert [e.usage for e in sim.log] == [None, None]
    assert [e.outcome for e in sim.log] == ["status:500", "cut"]


async def test_silence_until_the_client_goes(wire: Any, sim: Any) -> None:
    """A silent request stays pending until the client gives up, then logs client_disconnected."""
    task = asyncio.create_task(wire.post(PATH, chat("sim-silence")))
    held = await sim.wait_for_log(1, settled=False)
    assert held[0].outcome == "pending"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    entries = await sim.wait_for_log(1)
    assert (entries[0].behaviour, entries[0].outcome) == ("silence", "client_disconnected")


async def test_stall_after_units_until_the_client_goes(wire: Any, sim: Any) -> None:
    """A stall sends its units, then nothing; the client leaving is logged as client_disconnected."""
    async with wire.session.post(sim.url + PATH, json=chat("sim-stall-a2", stream=True)) as resp:
        seen = b""
        while seen.count(b"data: ") < 3:  # the role chunk and two content chunks
            seen += await resp.content.readany()
        assert b"[DONE]" not in seen
        assert b'"finish_reason":"stop"' not in seen
    entries = await sim.wait_for_log(1)
    assert (entries[0].behaviour, entries[0].outcome) == ("stall", "client_disconnected")


async def test_client_leaving_mid_stream_is_logged() -> None:
    """A client that leaves a paced stream early is logged as client_disconnected."""
    never = asyncio.Event()

    async def pace_forever(seconds: float) -> None:
        await never.wait()  # the stream pauses after its first chunk until the client goes

    async with Simulator(sleep=pace_forever) as sim, aiohttp.ClientSession() as session:
        async with session.post(sim.url + PATH, json=chat("sim-ok-tps10", stream=True)) as resp:
            assert b'"role":"assistant"' in await resp.content.readany()
        entries = await sim.wait_for_log(1)
    assert (entries[0].behaviour, entries[0].outcome, entries[0].usage) == ("ok", "client_disconnected", None)


async def test_closing_drops_held_requests() -> None:
    """Closing the simulator ends held (silent) requests at once and logs them server_closed."""
    sim = Simulator()
    await sim.start()
    async with aiohttp.ClientSession() as session:
        task = asyncio.create_task(session.post(sim.url + PATH, json=chat("sim-silence")))
        await sim.wait_for_log(1, settled=False)
        await sim.aclose()
        with pytest.raises(aiohttp.ClientError):
            await task
    assert sim.log[0].outcome == "server_closed"


async def test_reset_behaviour_drops_the_connection(wire: Any, sim: Any) -> None:
    """sim-reset closes the connection before any headers."""
    with pytest.raises((aiohttp.ClientOSError, aiohttp.ServerDisconnectedError)):
        await wire.post(PATH, chat("sim-reset"))
    assert (await sim.wait_for_log(1))[0].outcome == "reset"


async def test_slow_first_token_waits_before_answering(wire: Any, sim: Any, sleeps: Any) -> None:
    """sim-slow-d2 waits 2 s (through the injected sleep) before the answer or the first chunk."""
    assert (await wire.post(PATH, chat("sim-slow-d2"))).status == 200
    chunks = (await wire.post(PATH, chat("sim-slow-d2", stream=True))).data()
    assert chunks[-1] == "[DONE]"
    assert sleeps.calls == [2.0, 2.0]
    assert [e.outcome for e in sim.log] == ["ok", "ok"]


async def test_tokens_per_second_pacing(wire: Any, sleeps: Any) -> None:
    """sim-ok-tps5 sleeps 0.2 s before each of its five units."""
    await wire.post(PATH, chat("sim-ok-tps5", stream=True))
    assert sleeps.calls == [0.2] * 5


async def test_status_delay(wire: Any, sleeps: Any, sim: Any) -> None:
    """A script step can delay an error too."""
    sim.set_script({"models": {"m": {"steps": [{"do": "status", "status": 503, "delay": 1.5}]}}})
    assert (await wire.post(PATH, chat("m"))).status == 503
    assert sleeps.calls == [1.5]


async def test_control_routes(wire: Any, sim: Any) -> None:
    """GET /_sim/log lists entries as JSON, POST /_sim/reset clears it, GET /_sim/health answers ok."""
    await wire.post(PATH, chat("gpt-4.1"), headers={"Authorization": "Bearer sk-x"})
    entries = (await wire.get("/_sim/log")).json()
    assert entries[0]["model"] == "gpt-4.1"
    assert entries[0]["key_id"] == key_id("sk-x")
    assert entries[0]["usage"] == {"input": 2, "output": 5, "cached_input": 0, "cache_write": 0, "reasoning": 0}
    assert set(entries[0]) >= {"time", "protocol", "path", "attempt", "behaviour", "outcome", "stream", "prefill"}
    assert (await wire.post("/_sim/reset", b"")).json() == {"status": "ok"}
    assert (await wire.get("/_sim/log")).json() == []
    assert (await wire.get("/_sim/health")).json() == {"status": "ok"}


async def test_log_entries_are_frozen(wire: Any, sim: Any) -> None:
    """Log entries are frozen snapshots."""
    await wire.post(PATH, chat("gpt-4.1"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        sim.log[0].outcome = "changed"  # type: ignore[misc]


async def test_log_is_bounded() -> None:
    """The log keeps only the most recent max_log requests."""
    async with Simulator(max_log=2) as sim, aiohttp.ClientSession() as session:
        for model in ("a", "b", "c"):
            async with session.post(sim.url + PATH, json=chat(model)) as resp:
                await resp.read()
        assert [e.model for e in sim.log] == ["b", "c"]


async def test_base_urls(sim: Any) -> None:
    """base_url gives each protocol's client base URL."""
    root = sim.url
    assert root.startswith("http://127.0.0.1:")
    assert sim.base_url("openai") == f"{root}/v1"
    assert sim.base_url("anthropic") == root
    assert sim.base_url("gemini") == f"{root}/v1beta"
    assert sim.base_url("ollama") == root
    assert sim.base_url("azure", deployment="gpt4o") == f"{root}/openai/deployments/gpt4o"
    with pytest.raises(ValueError, match="unknown protocol"):
        sim.base_url("cohere")  # type: ignore[arg-type]


def test_cli_run_prints_urls_and_stops_on_interrupt() -> None:
    """turnout.sim.cli.run serves, prints the base URLs and exits cleanly on SIGINT."""
    code = "from turnout.sim.cli import run; run('127.0.0.1', 0, None)"
    with subprocess.Popen(
        [sys.executable, "-W", "error", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stderr is not None
            first = proc.stdout.readline()
            assert first.startswith("turnout sim listening on http://127.0.0.1:")
            lines = [proc.stdout.readline() for _ in range(6)]
            assert any("/v1beta" in line for line in lines)
            os.kill(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=10) == 0
            assert proc.stderr.read() == ""
        finally:
            if proc.poll() is None:
                proc.kill()
