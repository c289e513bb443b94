"""The SQLite ledger: writes on a background thread, batching, summaries, bounded close, no content."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import turnout.ledger.writer as ledger_module
from turnout.call import Call, CallPlan
from turnout.core.attribution import Attempt, Outcome, RouteRef
from turnout.core.errors import AllProvidersFailed, ConfigError
from turnout.core.secrets import key_id
from turnout.core.types import ChatResponse, ToolCall, Usage
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger, summarize

BOUND = 10.0  # seconds any flush or close may take in these tests (they take milliseconds)

OPENAI = RouteRef(provider="openai.main", model="gpt-4.1")
CLAUDE = RouteRef(provider="anthropic.prod", model="claude-sonnet-4-5")


def attempt(
    outcome: Outcome,
    route: RouteRef = OPENAI,
    *,
    ts: float = 1_000.0,
    cost: float | None = None,
    usage: Usage | None = None,
    duration_ms: float = 0.0,
    **more: Any,
) -> Attempt:
    return Attempt(
        provider=route.provider,
        model=route.model,
        outcome=outcome,
        started_at=ts,
        cost_usd=cost,
        usage=usage,
        duration_ms=duration_ms,
        **more,
    )


def call(
    call_id: str,
    attempts: Sequence[Attempt],
    *,
    ts: float = 1_000.0,
    outcome: str = "ok",
    served: RouteRef | None = OPENAI,
    fallback: bool = False,
    accepted_index: int | None = None,
) -> CallRecord:
    return CallRecord(
        call_id=call_id,
        ts=ts,
        surface="library",
        stream=False,
        requested=OPENAI,
        served=served,
        fallback=fallback,
        outcome=outcome,
        attempts=tuple(attempts),
        accepted_index=accepted_index,
    )


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.sqlite3"


@pytest.fixture
async def ledger(path: Path) -> Any:
    """A ledger without batch delay, closed (in bounded time) after the test."""
    led = Ledger(path, batch_delay=0)
    yield led
    await asyncio.wait_for(led.aclose(), BOUND)


# --- what is written -------------------------------------------------------------------------------


async def test_a_call_and_its_attempts_are_written_field_by_field(ledger: Ledger, path: Path) -> None:
    """Every field of the call and of each attempt lands in its column; the accepted attempt is flagged."""
    usage = Usage(input_tokens=100, output_tokens=20, cached_input_tokens=60, cache_write_tokens=10)
    failed = attempt(
        "rate_limited", CLAUDE, ts=5.0, status=429, key_id="0a1b2c3d", retry_after=30.0, duration_ms=12.5,
        detail="http_429",
    )  # fmt: skip
    served = attempt(
        "ok", ts=6.0, cost=0.25, usage=usage, duration_ms=40.0, ttft_ms=8.0, entry=1, try_number=2, stream=True
    )
    record = CallRecord(
        call_id="c-1",
        ts=4.0,
        surface="gateway",
        stream=True,
        requested=CLAUDE,
        served=OPENAI,
        fallback=True,
        outcome="ok",
        attempts=(failed, served),
        accepted_index=1,
    )
    ledger.record(record)
    await asyncio.wait_for(ledger.flush(), BOUND)
    assert rows(path, "SELECT * FROM calls") == [
        (
            "c-1",
            4.0,
            "gateway",
            1,
            "anthropic.prod",
            "claude-sonnet-4-5",
            "openai.main",
            "gpt-4.1",
            1,
            "ok",
            2,
            0.25,
            None,
            None,
        )
    ]
    assert rows(path, "SELECT * FROM attempts ORDER BY seq") == [
        (1, "c-1", 0, 5.0, "anthropic.prod", "claude-sonnet-4-5", "rate_limited", 429, "0a1b2c3d",
         None, None, None, None, None, 12.5, None, 30.0, 0, 1, 0, "http_429", 0, None),
        (2, "c-1", 1, 6.0, "openai.main", "gpt-4.1", "ok", None, None,
         100, 20, 60, 10, 0.25, 40.0, 8.0, None, 1, 2, 1, None, 1, None),
    ]  # fmt: skip


async def test_call_cost_sums_known_attempt_costs_and_is_null_when_none_is_known(ledger: Ledger, path: Path) -> None:
    """A call costs the sum of its priced attempts; with no priced attempt its cost is NULL, not 0."""
    ledger.record(call("priced", [attempt("retryable", cost=0.5), attempt("retryable"), attempt("ok", cost=0.25)]))
    ledger.record(call("unpriced", [attempt("ok")]))
    ledger.record(call("no-attempts", [], outcome="cancelled", served=None))
    await asyncio.wait_for(ledger.flush(), BOUND)
    assert rows(path, "SELECT call_id, attempts, cost_usd FROM calls ORDER BY call_id") == [
        ("no-attempts", 0, None),
        ("priced", 3, 0.75),
        ("unpriced", 1, None),
    ]


async def test_a_failed_call_has_no_served_route_and_no_accepted_attempt(ledger: Ledger, path: Path) -> None:
    """Without a served route its columns are NULL, and no attempt is flagged accepted."""
    ledger.record(call("f", [attempt("timeout"), attempt("timeout")], outcome="all_failed", served=None))
    await asyncio.wait_for(ledger.flush(), BOUND)
    assert rows(path, "SELECT served_provider, served_model, outcome FROM calls") == [(None, None, "all_failed")]
    assert rows(path, "SELECT SUM(accepted) FROM attempts") == [(0,)]


async def test_nothing_but_content_free_columns_exist(ledger: Ledger, path: Path) -> None:
    """The schema has no column that could hold a prompt, a response, provider error text or a key.

    ``caller`` is the gateway's name for a client key (its ``[gateway.keys]`` name or key id), never the key.
    """
    ledger.record(call("c", [attempt("ok")]))
    await asyncio.wait_for(ledger.flush(), BOUND)
    calls = [r[1] for r in rows(path, "PRAGMA table_info(calls)")]
    attempts = [r[1] for r in rows(path, "PRAGMA table_info(attempts)")]
    assert calls == [
        "call_id", "ts", "surface", "stream", "requested_provider", "requested_model", "served_provider",
        "served_model", "fallback", "outcome", "attempts", "cost_usd", "caller", "operation",
    ]  # fmt: skip
    assert attempts == [
        "id", "call_id", "seq", "ts", "provider", "model", "outcome", "status", "key_id", "input_tokens",
        "output_tokens", "cached_input_tokens", "cache_write_tokens", "cost_usd", "duration_ms", "ttft_ms",
        "retry_after", "entry", "try_number", "stream", "detail", "accepted", "usage_note",
    ]  # fmt: skip


async def test_no_prompt_response_error_text_or_key_reaches_the_file(path: Path) -> None:
    """Calls accepted and failed through Call leave no answer, reasoning, tool argument, error text or key."""
    led = Ledger(path, batch_delay=0)
    secret = "sk-PLANTED-KEY-123456"
    accepted = Call(CallPlan(requested=OPENAI, operation="chat", ledger=led))
    accepted.add(attempt("ok", key_id=key_id(secret), usage=Usage(input_tokens=5, output_tokens=5)))
    tool = ToolCall(id="t1", name="lookup", arguments='{"q": "PLANTED-ARGUMENT"}')
    response = ChatResponse(text="PLANTED-ANSWER", reasoning="PLANTED-THOUGHT", tool_calls=(tool,))
    accepted.accept(response, OPENAI, 0)
    failed = Call(CallPlan(requested=OPENAI, operation="chat", ledger=led))
    failed.add(attempt("retryable", status=500, detail="http_500"))
    failed.fail(AllProvidersFailed("PLANTED-ERROR-TEXT " + secret))
    await asyncio.wait_for(led.aclose(), BOUND)
    raw = b"".join(p.read_bytes() for p in path.parent.iterdir())
    assert rows(path, "SELECT COUNT(*) FROM attempts") == [(2,)]
    for planted in (b"PLANTED", secret.encode(), b"sk-"):
        assert planted not in raw
    assert key_id(secret).encode() in raw  # the key is named by its id only


# --- batching ----------------------------------------------------------------------------------------


class GatedTime:
    """Stands in for the ledger module's ``time``: the writer's batch wait blocks until the test opens it."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        assert self.gate.wait(BOUND), "the test never opened the gate"

    @staticmethod
    def time() -> float:
        return 0.0


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> GatedTime:
    """The writer's batch wait, held until the test opens the gate."""
    clock = GatedTime()
    monkeypatch.setattr(ledger_module, "time", clock)
    return clock


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every batch the writer commits."""
    sizes: list[int] = []
    real = ledger_module.write_rows

    def spy(db: sqlite3.Connection, calls: Sequence[CallRecord]) -> None:
        if calls:
            sizes.append(len(calls))
        real(db, calls)

    monkeypatch.setattr(ledger_module, "write_rows", spy)
    return sizes


async def test_calls_recorded_during_the_batch_delay_share_one_transaction(
    path: Path, writes: list[int], gated: GatedTime
) -> None:
    """The writer waits batch_delay after a first record; everything queued meanwhile is one commit."""
    led = Ledger(path, batch_delay=0.05)
    for i in range(5):
        led.record(call(f"c{i}", [attempt("ok")]))
    gated.gate.set()
    await asyncio.wait_for(led.aclose(), BOUND)
    assert writes == [5]
    assert gated.waits == [0.05]
    assert rows(path, "SELECT COUNT(*) FROM calls") == [(5,)]


async def test_without_batch_delay_the_writer_never_waits(path: Path, writes: list[int], gated: GatedTime) -> None:
    """batch_delay=0 writes each drained batch at once; records flushed apart are separate commits."""
    led = Ledger(path, batch_delay=0)
    led.record(call("a", [attempt("ok")]))
    await asyncio.wait_for(led.flush(), BOUND)
    led.record(call("b", [attempt("ok")]))
    await asyncio.wait_for(led.aclose(), BOUND)
    assert (writes, gated.waits) == ([1, 1], [])


# --- flush and close ---------------------------------------------------------------------------------


async def test_aclose_writes_everything_queued_in_bounded_time(path: Path) -> None:
    """Closing with a real batch delay still writes every queued call, and stops the writer thread."""
    led = Ledger(path)
    for i in range(200):
        led.record(call(f"c{i}", [attempt("retryable"), attempt("ok")]))
    thread = led._thread
    await asyncio.wait_for(led.aclose(), BOUND)
    assert thread is not None and not thread.is_alive()
    assert rows(path, "SELECT COUNT(*) FROM calls") == [(200,)]
    assert rows(path, "SELECT COUNT(*) FROM attempts") == [(400,)]


async def test_flush_and_aclose_without_records_return_at_once(path: Path) -> None:
    """A ledger that never recorded has no writer to wait for; closing twice is harmless."""
    led = Ledger(path)
    await asyncio.wait_for(led.flush(), BOUND)
    await asyncio.wait_for(led.aclose(), BOUND)
    await asyncio.wait_for(led.aclose(), BOUND)
    assert led._thread is None


async def test_recording_after_close_starts_a_new_writer(path: Path) -> None:
    """A record after aclose is still written (a new writer starts), and a second close stops it."""
    led = Ledger(path, batch_delay=0)
    led.record(call("before", [attempt("ok")]))
    await asyncio.wait_for(led.aclose(), BOUND)
    led.record(call("after", [attempt("ok")]))
    await asyncio.wait_for(led.aclose(), BOUND)
    assert rows(path, "SELECT call_id FROM calls ORDER BY call_id") == [("after",), ("before",)]


async def test_a_row_sqlite_refuses_is_kept_sanitised_and_counted(ledger: Ledger, path: Path) -> None:
    """A batch SQLite refuses is written row by row: the bad row sanitised and counted, the good ones as they are."""
    broken = CallRecord(
        call_id="bad", ts=1.0, surface=None, stream=False, requested=None, served=None,  # type: ignore[arg-type]
        fallback=False, outcome="ok", attempts=(),
    )  # fmt: skip
    ledger.record(call("before", [attempt("ok")]))
    ledger.record(broken)
    ledger.record(call("after", [attempt("ok")]))
    await asyncio.wait_for(ledger.flush(), BOUND)
    ledger.record(call("good", [attempt("ok")]))
    await asyncio.wait_for(ledger.flush(), BOUND)
    assert (ledger.errors, ledger.sanitised) == (1, 1)
    assert ledger.health.ok
    assert rows(path, "SELECT call_id, surface FROM calls ORDER BY call_id") == [
        ("after", "library"),
        ("bad", "invalid"),
        ("before", "library"),
        ("good", "library"),
    ]


# --- files -------------------------------------------------------------------------------------------


async def test_a_missing_directory_is_created(tmp_path: Path) -> None:
    """The ledger creates its file's directories."""
    nested = tmp_path / "a" / "b" / "ledger.sqlite3"
    led = Ledger(nested, batch_delay=0)
    led.record(call("c", [attempt("ok")]))
    await asyncio.wait_for(led.aclose(), BOUND)
    assert rows(nested, "SELECT call_id FROM calls") == [("c",)]


async def test_reopening_an_existing_file_keeps_its_calls(path: Path) -> None:
    """A second ledger on the same file (a restart) adds to what the first wrote."""
    first = Ledger(path, batch_delay=0)
    first.record(call("old", [attempt("ok")]))
    await asyncio.wait_for(first.aclose(), BOUND)
    second = Ledger(path, batch_delay=0)
    second.record(call("new", [attempt("retryable"), attempt("ok")]))
    await asyncio.wait_for(second.aclose(), BOUND)
    assert rows(path, "SELECT call_id FROM calls ORDER BY call_id") == [("new",), ("old",)]
    assert summarize(path).attempts == 3


async def test_two_ledgers_may_share_one_file(path: Path) -> None:
    """Two writers on one file (gateway workers) both get every call in."""
    a, b = Ledger(path), Ledger(path)
    for i in range(50):
        a.record(call(f"a{i}", [attempt("ok")]))
        b.record(call(f"b{i}", [attempt("ok")]))
    await asyncio.wait_for(asyncio.gather(a.aclose(), b.aclose()), BOUND)
    assert (a.errors, b.errors) == (0, 0)
    assert rows(path, "SELECT COUNT(*) FROM calls") == [(100,)]


@pytest.mark.parametrize("blocker", ["directory", "file_as_parent"])
def test_a_ledger_that_cannot_open_its_path_fails_clearly_when_built(tmp_path: Path, blocker: str) -> None:
    """A path that cannot hold a database is a ConfigError naming the path, raised at construction."""
    if blocker == "directory":
        target = tmp_path / "ledger.sqlite3"
        target.mkdir()
    else:
        (tmp_path / "plain-file").write_text("x")
        target = tmp_path / "plain-file" / "ledger.sqlite3"
    with pytest.raises(ConfigError) as info:
        Ledger(target)
    assert info.value.path == "ledger.path"
    assert str(target) in str(info.value)


async def test_a_path_lost_after_construction_keeps_calls_without_hanging(path: Path) -> None:
    """If the file cannot be opened when writing starts, failures are counted, calls kept, flush/close return."""
    led = Ledger(path, batch_delay=0)
    _replace_with_directory(path)
    led.record(call("lost", [attempt("ok")]))
    assert not await asyncio.wait_for(led.flush(), BOUND)
    led.record(call("lost-too", [attempt("ok")]))
    assert not await asyncio.wait_for(led.flush(), BOUND)
    health = led.health
    assert not health.ok and health.pending == 2 and health.errors >= 2
    assert health.problem is not None and "unable to open" in health.problem
    await asyncio.wait_for(led.aclose(), BOUND)


def _replace_with_directory(path: Path) -> None:
    """Remove the database (and its journal files) and put a directory in its place."""
    for leftover in path.parent.iterdir():
        leftover.unlink()
    path.mkdir()


# --- summaries ---------------------------------------------------------------------------------------


async def _three_calls(path: Path) -> None:
    led = Ledger(path, batch_delay=0)
    led.record(
        call("direct", [attempt("ok", cost=0.01, usage=Usage(input_tokens=10, output_tokens=5), duration_ms=100)])
    )
    led.record(
        call(
            "fallback",
            [
                attempt("retryable", duration_ms=50),
                attempt("rate_limited", duration_ms=30),
                attempt("ok", CLAUDE, cost=0.02, usage=Usage(input_tokens=20, output_tokens=7), duration_ms=200),
            ],
            served=CLAUDE,
            fallback=True,
        )
    )
    led.record(
        call(
            "failed",
            [attempt("cooldown_skip", duration_ms=0), attempt("retryable", CLAUDE, duration_ms=300)],
            outcome="all_failed",
            served=None,
        )
    )
    await asyncio.wait_for(led.aclose(), BOUND)


async def test_summary_totals_failure_classes_fallbacks_and_costs(path: Path) -> None:
    """Calls, failed calls, fallbacks, attempts, failure classes (most frequent first) and total cost."""
    await _three_calls(path)
    s = summarize(path)
    assert (s.calls, s.failed_calls, s.fallbacks, s.attempts) == (3, 1, 1, 6)
    assert s.failure_classes == {"retryable": 2, "rate_limited": 1}
    assert next(iter(s.failure_classes)) == "retryable"  # the most frequent class first
    assert s.skips == {"cooldown_skip": 1}
    assert s.cost_usd == pytest.approx(0.03)


async def test_summary_per_profile_and_model(path: Path) -> None:
    """Each route sums its attempts, outcomes, tokens and cost; cooldown skips do not count in the duration."""
    await _three_calls(path)
    claude, openai = summarize(path).routes  # ordered by profile, then model
    assert (claude.provider, claude.model, claude.attempts) == ("anthropic.prod", "claude-sonnet-4-5", 2)
    assert claude.outcomes == {"ok": 1, "retryable": 1}
    assert (claude.input_tokens, claude.output_tokens) == (20, 7)
    assert claude.cost_usd == pytest.approx(0.02)
    assert claude.avg_duration_ms == pytest.approx(250.0)
    assert (openai.provider, openai.model, openai.attempts) == ("openai.main", "gpt-4.1", 4)
    assert openai.outcomes == {"ok": 1, "retryable": 1, "rate_limited": 1, "cooldown_skip": 1}
    assert (openai.input_tokens, openai.output_tokens) == (10, 5)
    assert openai.cost_usd == pytest.approx(0.01)
    assert openai.avg_duration_ms == pytest.approx((100 + 50 + 30) / 3)


async def test_summary_counts_breaker_skips_as_skips_not_failures_and_not_in_the_duration(path: Path) -> None:
    """Breaker and cooldown skips are counted apart from failure classes and left out of the average duration."""
    led = Ledger(path, batch_delay=0)
    for n in range(3):
        led.record(
            call(
                f"c{n}",
                [
                    attempt("breaker_skip", duration_ms=0),
                    attempt("cooldown_skip", CLAUDE, duration_ms=0),
                    attempt("ok", CLAUDE, duration_ms=90),
                ],
                served=CLAUDE,
                fallback=True,
            )
        )
    led.record(call("c3", [attempt("timeout", duration_ms=500), attempt("ok", CLAUDE, duration_ms=90)], served=CLAUDE))
    await asyncio.wait_for(led.aclose(), BOUND)
    s = summarize(path)
    assert s.skips == {"breaker_skip": 3, "cooldown_skip": 3}
    assert s.failure_classes == {"timeout": 1}
    claude, openai = s.routes
    assert openai.outcomes == {"breaker_skip": 3, "timeout": 1}
    assert openai.avg_duration_ms == pytest.approx(500.0)
    assert claude.avg_duration_ms == pytest.approx(90.0)


async def test_summary_of_unpriced_routes_has_no_cost(path: Path) -> None:
    """Routes and totals without any priced attempt report cost None, not 0."""
    led = Ledger(path, batch_delay=0)
    led.record(call("c", [attempt("cooldown_skip", duration_ms=0)], outcome="all_failed", served=None))
    await asyncio.wait_for(led.aclose(), BOUND)
    s = summarize(path)
    assert s.cost_usd is None
    (route,) = s.routes
    assert (route.cost_usd, route.avg_duration_ms) == (None, None)


async def test_summary_since_counts_only_later_calls_and_attempts(path: Path) -> None:
    """``since`` keeps calls started and attempts made at or after it."""
    led = Ledger(path, batch_delay=0)
    led.record(call("old", [attempt("retryable", ts=100.0), attempt("ok", ts=101.0)], ts=100.0))
    led.record(call("new", [attempt("timeout", ts=200.0), attempt("ok", ts=201.0)], ts=200.0, fallback=True))
    await asyncio.wait_for(led.aclose(), BOUND)
    s = summarize(path, since=200.0)
    assert (s.calls, s.fallbacks, s.attempts, s.failure_classes) == (1, 1, 2, {"timeout": 1})
    assert summarize(path, since=300.0).calls == 0
    assert summarize(path).calls == 2


def test_summary_of_a_missing_file_is_empty_and_creates_nothing(tmp_path: Path) -> None:
    """Summarising a ledger that was never written gives zeros and does not create the file."""
    s = summarize(tmp_path / "none.sqlite3")
    assert (s.calls, s.failed_calls, s.fallbacks, s.attempts, s.failure_classes, s.cost_usd, s.routes, s.skips) == (
        0, 0, 0, 0, {}, None, [], {},
    )  # fmt: skip
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["ledger#1.sqlite3", "what?.sqlite3", "100%25.sqlite3", "with space.sqlite3"])
async def test_summary_reads_files_whose_names_look_like_uri_syntax(tmp_path: Path, name: str) -> None:
    """A ledger path with #, ?, % or spaces is summarised as the file it names; no other file is created."""
    path = tmp_path / name
    led = Ledger(path, batch_delay=0)
    led.record(call("c", [attempt("ok")]))
    await asyncio.wait_for(led.aclose(), BOUND)
    assert summarize(path).calls == 1
    assert {p.name for p in tmp_path.iterdir()} <= {name, name + "-wal", name + "-shm"}  # noqa: ASYNC240
