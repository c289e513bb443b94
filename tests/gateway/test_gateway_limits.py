"""Spend limits that hold: reserve before sending, settle after, fail closed while the ledger cannot record."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gateway_support import GATEWAY_KEY, get, post, sample
from typer.testing import CliRunner

import turnout.ledger.rows as rows_module
from fakes import FakeClock
from turnout import Client
from turnout.cli.main import app
from turnout.core.embeddings import EmbeddingLimits, Embeddings, EmbedRequest
from turnout.core.provider import Provider
from turnout.core.types import Capabilities, ChatRequest, ChatResponse, Final, StreamEvent, TextDelta, Usage, UsageEvent
from turnout.gateway import Gateway, GatewayServer
from turnout.gateway.spend import seconds_to_midnight

TEAM_KEY = "gw-team-key-9"
PROMPT = "x" * 4000  # about 1,000 input tokens by the estimate, which the upstream reports too
CHAT: dict[str, Any] = {"model": "gpt-4.1", "max_tokens": 1000, "messages": [{"role": "user", "content": PROMPT}]}
CALL_USD = 0.002  # 1,000 in and 1,000 out at $1/M each


class Upstream(Provider):
    """A fake upstream that holds every call until its gate opens, and counts what it bills."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.arrived = 0
        self.billed_usd = 0.0
        self.on_arrival: Callable[[], None] = lambda: None

    async def chat(self, request: ChatRequest, model: str, temperature: float | None = None) -> ChatResponse:
        self.arrived += 1
        self.on_arrival()
        await self.gate.wait()
        self.billed_usd += CALL_USD
        return ChatResponse(text="ok", model=model, usage=Usage(input_tokens=1000, output_tokens=1000))

    async def stream(
        self, request: ChatRequest, model: str, temperature: float | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        self.arrived += 1
        for _ in range(100_000):  # until the consumer goes away; each token is billed as it is generated
            self.billed_usd += 1e-6
            yield TextDelta(text="tok ")
            await asyncio.sleep(0)
        yield UsageEvent(usage=Usage(input_tokens=1000, output_tokens=100_000))
        yield Final()

    def capabilities(self, model: str | None = None) -> Capabilities:
        return Capabilities(streaming=True)


def config(ledger: Path, *, limit: float = 0.01, extra: str = "", key: str = "") -> str:
    return (
        'default_provider = "openai.main"\n'
        f'[ledger]\npath = "{ledger}"\n'
        "[reliability]\nprovider_retries = 0\n"
        f'[gateway]\napi_keys = ["{GATEWAY_KEY}"]\n{extra}'
        f'[gateway.keys.team]\nkey = "{TEAM_KEY}"\ndaily_limit_usd = {limit}\n{key}'
        '[providers.models.openai.main]\napi_key = "sk-up"\nmodel = "gpt-4.1"\n'
        "pricing = { input = 1.0, output = 1.0 }\n"
    )


@asynccontextmanager
async def served(text: str, upstream: Upstream) -> AsyncIterator[GatewayServer]:
    clock = FakeClock()
    client = Client.from_toml(text, adapter_builder=lambda *_: upstream, env=clock.env, surface="gateway")
    async with GatewayServer(Gateway(client, owns_client=True)) as server:
        yield server


async def test_two_hundred_concurrent_calls_stay_within_the_limit_and_one_call(tmp_path: Path) -> None:
    """$0.01 limit, $1/M prices, 200 concurrent calls: what the upstream bills stays within the limit plus one
    call's worst case; the others are refused with 429 and Retry-After before anything is sent.
    """
    upstream = Upstream()
    async with served(config(tmp_path / "l.sqlite3"), upstream) as server:
        settled = asyncio.Event()  # every call reached the upstream or was refused
        refused: list[aiohttp.ClientResponse] = []
        results: list[int] = []

        def check() -> None:
            if len(refused) + upstream.arrived >= 200:
                settled.set()

        upstream.on_arrival = check

        async def one(session: aiohttp.ClientSession) -> None:
            headers = {"Authorization": f"Bearer {TEAM_KEY}"}
            async with session.post(server.url + "/v1/chat/completions", json=CHAT, headers=headers) as resp:
                await resp.read()
                results.append(resp.status)
                if resp.status == 429:
                    refused.append(resp)
                    check()

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(one(session)) for _ in range(200)]
            await settled.wait()
            during = {k["key"]: k for k in (await get(server, "/status")).json()["keys"]}
            upstream.gate.set()
            await asyncio.gather(*tasks)
        after = await get(server, "/status")
        metrics = (await get(server, "/metrics")).body.decode()
    worst = 0.0021  # 1,004 estimated input tokens and 1,000 output tokens, at $1/M
    assert upstream.billed_usd <= 0.01 + worst
    assert results.count(200) == upstream.arrived >= 4
    assert results.count(429) == 200 - upstream.arrived
    assert all(abs(int(r.headers["Retry-After"]) - seconds_to_midnight()) <= 2 for r in refused)  # 00:00 UTC
    assert during["team"]["in_flight"] == upstream.arrived  # the calls held upstream, each with its reservation
    assert during["team"]["reserved_usd"] == pytest.approx(upstream.arrived * 0.002004)  # 1,004 in, 1,000 out
    keys = {k["key"]: k for k in after.json()["keys"]}
    assert keys["team"]["reserved_usd"] == 0 and keys["team"]["in_flight"] == 0
    assert keys["team"]["spent_usd"] == pytest.approx(upstream.billed_usd)
    assert sample(metrics, "turnout_key_rejections_total", key="team", reason="reservation") == 200 - upstream.arrived
    assert sample(metrics, "turnout_key_spend_usd", key="team") == pytest.approx(upstream.billed_usd)


async def test_a_call_above_the_key_s_max_call_usd_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    """A request whose worst case exceeds the key's ``max_call_usd`` is a 400 naming max_tokens; nothing is sent."""
    upstream = Upstream()
    upstream.gate.set()
    text = config(tmp_path / "l.sqlite3", limit=1.0, key="max_call_usd = 0.001\n")
    async with served(text, upstream) as server:
        big = await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)
        small = await post(server, "/v1/chat/completions", {**CHAT, "max_tokens": 1, "messages": [
            {"role": "user", "content": "hi"}]}, key=TEAM_KEY)  # fmt: skip
    assert big.status == 400
    error = big.json()["error"]
    assert error["code"] == "max_call_exceeded" and error["param"] == "max_tokens"
    assert small.status == 200
    assert upstream.arrived == 1


class Disk:
    """An injected full disk: while ``full``, the ledger's inserts fail as SQLite's do."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        real = rows_module._insert

        def insert(db: sqlite3.Connection, *rows: Any) -> None:
            if self.full:
                raise sqlite3.OperationalError("database or disk is full")
            real(db, *rows)

        monkeypatch.setattr(rows_module, "_insert", insert)


@pytest.mark.parametrize("rule", ["closed", "open"])
async def test_a_full_disk_refuses_limited_keys_or_keeps_counting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    """With the ledger unable to write: ``closed`` refuses limited keys with 503 ``ledger_unavailable`` (after at
    most the call that found out), ``open`` serves them while every unwritten call still counts toward the limit;
    unlimited keys are served either way; /status and /metrics show the trouble.
    """
    disk = Disk(monkeypatch)
    upstream = Upstream()
    upstream.gate.set()
    text = config(tmp_path / "l.sqlite3", extra=f'on_ledger_failure = "{rule}"\n')
    async with served(text, upstream) as server:
        assert (await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status == 200
        disk.full = True
        statuses = []
        for _ in range(12):
            statuses.append((await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status)
            ledger = server.gateway.client.ledger
            assert ledger is not None
            await ledger.flush()
        unlimited = await post(server, "/v1/chat/completions", CHAT)
        status = (await get(server, "/status")).json()
        metrics = (await get(server, "/metrics")).body.decode()
        disk.full = False
        await ledger.flush()
        healed = (await get(server, "/status")).json()
    assert unlimited.status == 200
    assert status["ledger"]["ok"] is False and "disk is full" in status["ledger"]["problem"]
    assert status["ledger"]["pending_calls"] >= 1
    assert (sample(metrics, "turnout_ledger_errors_total") or 0) >= 1
    assert healed["ledger"]["ok"] is True and healed["ledger"]["pending_calls"] == 0
    if rule == "closed":
        assert statuses[0] == 200 and set(statuses[1:]) == {503}
    else:
        assert statuses.count(200) == 4 and set(statuses[4:]) == {429}  # 5 calls of $0.002: the limit holds
    assert upstream.billed_usd <= 0.01 + 0.0021


async def test_an_abandoned_stream_is_billed_and_counts_toward_the_limit(tmp_path: Path) -> None:
    """A client that reads a few events of a stream and hangs up is billed for what was delivered (estimated);
    the limit counts it, so hanging up is not free.
    """
    upstream = Upstream()
    path = tmp_path / "l.sqlite3"
    async with served(config(path, limit=0.005), upstream) as server:
        statuses = []
        for _ in range(30):
            async with aiohttp.ClientSession() as session:
                body = {**CHAT, "stream": True, "max_tokens": 200}
                headers = {"Authorization": f"Bearer {TEAM_KEY}"}
                async with session.post(server.url + "/v1/chat/completions", json=body, headers=headers) as resp:
                    statuses.append(resp.status)
                    if resp.status == 200:
                        await resp.content.read(2000)  # some tokens, then the client goes away
            ledger = server.gateway.client.ledger
            assert ledger is not None
            await ledger.flush()
    assert 200 in statuses and 429 in statuses
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT outcome, usage_note, cost_usd, output_tokens FROM attempts").fetchall()
    finally:
        db.close()
    assert rows and all(outcome == "cancelled" and note == "estimated" for outcome, note, _, _ in rows)
    assert all(cost is not None and cost > 0 and out > 0 for _, _, cost, out in rows)


async def test_status_page_and_the_command_line_show_each_key_s_spend_and_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status page and ``turnout status --gateway`` show the ledger's health and each limited key's spend and
    limits, as ``/status`` does.
    """
    upstream = Upstream()
    upstream.gate.set()
    monkeypatch.setenv("TURNOUT_GATEWAY_KEY", GATEWAY_KEY)
    async with served(config(tmp_path / "l.sqlite3", key="max_call_usd = 0.5\n"), upstream) as server:
        assert (await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status == 200
        page = (await get(server, "/")).body.decode()
        text = await asyncio.to_thread(CliRunner().invoke, app, ["status", "--gateway", server.url])
    assert 'id="spend"' in page and "recording" in page and "team" in page and "$0.002000" in page
    assert text.exit_code == 0, text.output
    assert re.search(r"^  ledger   recording; 0 failed writes", text.output, re.MULTILINE), text.output
    key = r"^  key      team  spent \$0\.002  reserved \$0 \(0 in flight\)  limit \$0\.01/day, \$0\.5/call$"
    assert re.search(key, text.output, re.MULTILINE), text.output


@pytest.mark.parametrize("how", ["moved", "deleted"])
async def test_a_ledger_moved_or_deleted_while_running_keeps_the_day_s_spend(tmp_path: Path, how: str) -> None:
    """Rotating the ledger away mid-day (moved, or deleted) does not give a limited key a fresh day: the new file
    at the configured path is written, and what the old file held still counts toward the limit.
    """
    upstream = Upstream()
    upstream.gate.set()
    path = tmp_path / "l.sqlite3"
    async with served(config(path), upstream) as server:
        before = [(await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status for _ in range(3)]
        ledger = server.gateway.client.ledger
        assert ledger is not None
        await ledger.flush()
        for suffix in ("", "-wal", "-shm"):
            old = path.with_name(path.name + suffix)
            if old.exists():
                if how == "moved":
                    old.rename(tmp_path / f"rotated.sqlite3{suffix}")
                else:
                    old.unlink()
        after = []
        for _ in range(6):
            after.append((await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY)).status)
            await ledger.flush()
            assert server.gateway.spend is not None
            await server.gateway.spend.refresh()  # what the book reads from the ledger once a second
    assert before == [200, 200, 200]
    assert after.count(200) <= 2 and after[-1] == 429  # $0.004 left of $0.01: two calls at most
    assert upstream.billed_usd <= 0.01 + 0.0021
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT COUNT(*) FROM calls").fetchone() == (after.count(200),)
    finally:
        db.close()


async def test_two_gateways_sharing_one_ledger_file_share_one_limit(tmp_path: Path) -> None:
    """Two gateways (each its own client and ledger writer) on one ledger file, 20 concurrent calls each, $0.05
    limit: what the upstream bills stays within the limit plus one call's worst case.
    """
    upstream = Upstream()
    text = config(tmp_path / "shared.sqlite3", limit=0.05)
    refused: list[int] = []
    settled = asyncio.Event()

    def check() -> None:
        if len(refused) + upstream.arrived >= 40:
            settled.set()

    upstream.on_arrival = check
    async with served(text, upstream) as one, served(text, upstream) as two:
        statuses: list[int] = []

        async def call(session: aiohttp.ClientSession, server: GatewayServer) -> None:
            headers = {"Authorization": f"Bearer {TEAM_KEY}"}
            async with session.post(server.url + "/v1/chat/completions", json=CHAT, headers=headers) as resp:
                await resp.read()
                statuses.append(resp.status)
                if resp.status == 429:
                    refused.append(resp.status)
                    check()

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(call(session, s)) for s in (one, two) for _ in range(20)]
            await settled.wait()
            upstream.gate.set()
            await asyncio.gather(*tasks)
    assert upstream.billed_usd <= 0.05 + 0.0021
    assert statuses.count(200) == upstream.arrived >= 20
    assert statuses.count(429) == 40 - upstream.arrived


def ledger_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


async def test_a_whole_call_the_client_gave_up_on_is_billed_and_counts_toward_the_limit(tmp_path: Path) -> None:
    """A non-streaming call whose client times out while the upstream works keeps its reservation while the upstream
    works on ($0.005 limit, three abandoned calls, then 429); an upstream that never ends is cut when the gateway
    stops, and recorded cancelled with its input and max_tokens estimated and priced.
    """
    upstream = Upstream()  # never opens its gate: every call hangs upstream until the client gives up
    path = tmp_path / "l.sqlite3"
    async with served(config(path, limit=0.005), upstream) as server:
        server.gateway.client.abandoned_wait_s = 0.0  # the upstream never answers: cut it at once when stopping
        statuses: list[int | str] = []
        for _ in range(4):
            arrived = asyncio.Event()
            upstream.on_arrival = arrived.set
            async with aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {TEAM_KEY}"}
                call = session.post(server.url + "/v1/chat/completions", json=CHAT, headers=headers)
                task = asyncio.ensure_future(call)
                waiting = asyncio.ensure_future(arrived.wait())  # the call is with the upstream now
                await asyncio.wait((task, waiting), return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                if task.done():
                    resp = await task
                    statuses.append(resp.status)
                    resp.release()
                    continue
                task.cancel()  # the client's timeout
                statuses.append("gave up")
            ledger = server.gateway.client.ledger
            assert ledger is not None
            for _ in range(100):  # the gateway sees the hang-up, ends the call and records it
                if server.gateway.in_flight == 0:
                    break
                await asyncio.sleep(0.01)
            await ledger.flush()
        keys = {k["key"]: k for k in (await get(server, "/status")).json()["keys"]}
    assert statuses == ["gave up"] * 3 + [429]
    rows = ledger_rows(path, "SELECT outcome, input_tokens, output_tokens, usage_note, cost_usd FROM attempts")
    assert [(o, out, note) for o, _, out, note, _ in rows] == [("cancelled", 1000, "estimated")] * 3
    assert all(cost == pytest.approx((tin + 1000) / 1e6) for _, tin, _, _, cost in rows)
    assert keys["team"]["in_flight"] == 3 and keys["team"]["reserved_usd"] == pytest.approx(3 * 0.002004)


async def test_a_stream_cut_by_the_gateway_s_shutdown_is_billed(tmp_path: Path) -> None:
    """A limited key's stream still open when the drain ends is cut by the gateway; the tokens it delivered are
    recorded (estimated) and priced under the key, so the next start counts them toward the limit.
    """
    upstream = Upstream()
    path = tmp_path / "l.sqlite3"
    text = config(path, extra="drain_secs = 0.2\n")
    async with served(text, upstream) as server, aiohttp.ClientSession() as session:
        body = {**CHAT, "stream": True, "max_tokens": 200}
        headers = {"Authorization": f"Bearer {TEAM_KEY}"}
        async with session.post(server.url + "/v1/chat/completions", json=body, headers=headers) as resp:
            assert resp.status == 200
            await resp.content.read(2000)  # some tokens; the client keeps reading slowly
            stopping = asyncio.create_task(server.stop())
            rest = await resp.read()
            assert not await stopping  # the drain ran out: the stream was cut
    assert b"shutting_down" in rest
    [(outcome, out, note, cost)] = ledger_rows(
        path, "SELECT outcome, output_tokens, usage_note, cost_usd FROM attempts"
    )
    assert (outcome, note) == ("cancelled", "estimated") and out > 0 and cost > 0
    assert ledger_rows(path, "SELECT caller, cost_usd FROM calls") == [("team", pytest.approx(cost))]


@pytest.mark.parametrize(("bound", "shown"), [("rpm = 2", "2 requests/min"), ("tpm = 3000", "3000 tokens/min")])
async def test_a_key_s_rpm_or_tpm_refuses_with_429_and_retry_after_and_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str, shown: str
) -> None:
    """A key's requests (or tokens) per minute: once this minute's are used, the next call is a 429
    ``rate_limit_exceeded`` with a Retry-After within the minute, nothing sent; /status, the status page and
    ``turnout status --gateway`` show the bound.
    """
    upstream = Upstream()
    upstream.gate.set()
    monkeypatch.setenv("TURNOUT_GATEWAY_KEY", GATEWAY_KEY)
    async with served(config(tmp_path / "l.sqlite3", limit=1.0, key=bound + "\n"), upstream) as server:
        answers = [await post(server, "/v1/chat/completions", CHAT, key=TEAM_KEY) for _ in range(3)]
        status = (await get(server, "/status")).json()
        page = (await get(server, "/")).body.decode()
        text = await asyncio.to_thread(CliRunner().invoke, app, ["status", "--gateway", server.url])
    assert [a.status for a in answers] == [200, 200, 429]  # 2 requests, or 4,000 tokens of a 3,000 budget
    refused = answers[-1]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert upstream.arrived == 2
    [key] = status["keys"]
    name, value = bound.split(" = ")
    assert key[name] == int(value)
    assert f"<td>{value}</td>" in page
    assert text.exit_code == 0 and shown in text.output, text.output


async def test_a_responses_call_reserves_for_the_kept_conversation_it_continues(tmp_path: Path) -> None:
    """A ``previous_response_id`` puts the kept conversation in front of the input: the worst case reserved (and
    held to ``max_call_usd``) counts it, so a long kept history cannot ride on a short new input.
    """
    upstream = Upstream()
    upstream.gate.set()
    text = config(tmp_path / "l.sqlite3", limit=1.0, key="max_call_usd = 0.0009\n")
    half = {"model": "gpt-4.1", "max_output_tokens": 100, "input": PROMPT[:2000]}  # about 600 tokens at worst
    async with served(text, upstream) as server:
        first = await post(server, "/v1/responses", half, key=TEAM_KEY)
        body = {**half, "previous_response_id": first.json()["id"]}
        second = await post(server, "/v1/responses", body, key=TEAM_KEY)  # about 1,100 with the kept input
        alone = await post(server, "/v1/responses", half, key=TEAM_KEY)
    assert first.status == 200 and alone.status == 200
    assert second.status == 400 and second.json()["error"]["code"] == "max_call_exceeded"
    assert upstream.arrived == 2


class Embedder(Upstream):
    """The fake upstream serving embeddings too: each call held until the gate opens, 1,000 input tokens billed."""

    def embedding_limits(self, model: str | None = None) -> EmbeddingLimits | None:
        return EmbeddingLimits(max_inputs=2048)

    async def embed(self, request: EmbedRequest, model: str) -> Embeddings:
        self.arrived += 1
        self.on_arrival()
        await self.gate.wait()
        self.billed_usd += 0.001
        return Embeddings(vectors=[[0.5, 0.5]] * len(request.inputs), usage=Usage(input_tokens=1000))


async def test_concurrent_embedding_calls_stay_within_the_limit_and_one_call(tmp_path: Path) -> None:
    """A limited key's embedding calls reserve their worst case too: $0.01 limit, 50 concurrent calls of about
    1,000 input tokens ($0.001 each at $1/M): the upstream bills at most the limit and one call.
    """
    upstream = Embedder()
    settled = asyncio.Event()
    statuses: list[int] = []

    def check() -> None:
        if len(statuses) + upstream.arrived >= 50:
            settled.set()

    upstream.on_arrival = check
    async with served(config(tmp_path / "l.sqlite3"), upstream) as server:

        async def one(session: aiohttp.ClientSession) -> None:
            headers = {"Authorization": f"Bearer {TEAM_KEY}"}
            body = {"model": "gpt-4.1", "input": PROMPT}
            async with session.post(server.url + "/v1/embeddings", json=body, headers=headers) as resp:
                await resp.read()
                if resp.status == 429:
                    statuses.append(resp.status)
                    check()

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            tasks = [asyncio.create_task(one(session)) for _ in range(50)]
            await settled.wait()
            upstream.gate.set()
            await asyncio.gather(*tasks)
        keys = {k["key"]: k for k in (await get(server, "/status")).json()["keys"]}
    assert upstream.billed_usd <= 0.01 + 0.001
    assert upstream.arrived >= 10 and len(statuses) == 50 - upstream.arrived
    assert keys["team"]["reserved_usd"] == 0 and keys["team"]["spent_usd"] == pytest.approx(upstream.billed_usd)
