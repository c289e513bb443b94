"""One logical call: when an answer is a fallback, the accepted reply, and what the ledger gets."""

from __future__ import annotations

import asyncio
import itertools

import pytest

import turnout.call
from turnout.call import Call, CallPlan, call_outcome, new_call_id
from turnout.core.attribution import Attempt, Outcome, RouteRef
from turnout.core.errors import (
    AllProvidersFailed,
    ContextWindowExceeded,
    RefusalError,
    StreamInterruptedAfterOutput,
    TurnCancelled,
    UnsupportedRequest,
)
from turnout.core.types import ChatResponse, ToolCall, Usage
from turnout.ledger.rows import CallRecord
from turnout.ledger.writer import Ledger

SONNET = RouteRef(provider="anthropic.prod", model="claude-sonnet-4-5")
HAIKU = RouteRef(provider="anthropic.prod", model="claude-haiku-4-5")
GPT = RouteRef(provider="openai.backup", model="gpt-4.1")


class RecordingLedger(Ledger):
    """A ledger that keeps the records it is given (no file, no thread)."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    def record(self, call: CallRecord) -> None:
        self.records.append(call)


def attempt(
    outcome: Outcome, *, provider: str = "anthropic.prod", model: str = "claude-sonnet-4-5", entry: int = 0
) -> Attempt:
    return Attempt(provider=provider, model=model, outcome=outcome, entry=entry)


# --- fallback ------------------------------------------------------------------------------------


def test_a_pure_retry_of_the_first_entry_is_no_fallback() -> None:
    """The requested route answering from entry 0 (after any number of retries) has no notice."""
    call = Call(CallPlan(requested=SONNET, operation="chat"))
    call.add(attempt("retryable"))
    assert call.fallback(SONNET, 0) is None


def test_another_model_of_the_first_entry_is_a_fallback() -> None:
    """Entry 0 serving another model than the requested one is a fallback."""
    notice = Call(CallPlan(requested=SONNET, operation="chat")).fallback(HAIKU, 0)
    assert notice is not None and notice.served == HAIKU and notice.requested == SONNET


def test_a_later_entry_is_a_fallback_even_with_the_requested_route() -> None:
    """An answer from a later entry is a fallback, whatever it serves."""
    assert Call(CallPlan(requested=SONNET, operation="chat")).fallback(SONNET, 1) is not None
    assert Call(CallPlan(requested=SONNET, operation="chat")).fallback(HAIKU, 1) is not None


def test_the_notice_follows_the_calls_intra_family_setting() -> None:
    """A same-family notice is shown only when the call was opened with intra_family; cross-family always."""
    hidden = Call(CallPlan(requested=SONNET, operation="chat")).fallback(HAIKU, 1)
    shown = Call(CallPlan(requested=SONNET, operation="chat", intra_family=True)).fallback(HAIKU, 1)
    cross = Call(CallPlan(requested=SONNET, operation="chat")).fallback(GPT, 2)
    assert hidden is not None and not hidden.shown
    assert shown is not None and shown.shown
    assert cross is not None and cross.shown and cross.cross_family


# --- accept ---------------------------------------------------------------------------------------


def test_accept_builds_the_reply_from_the_response_and_exactly_the_calls_attempts() -> None:
    """The reply carries the response's fields, both routes, the notice, the call id and the call's attempts."""
    ledger = RecordingLedger()
    call = Call(CallPlan(requested=SONNET, operation="chat", ledger=ledger))
    attempts = [attempt("retryable"), attempt("retryable", model="claude-haiku-4-5", entry=1)]
    attempts.append(attempt("ok", provider="openai.backup", model="gpt-4.1", entry=2))
    for a in attempts:
        call.add(a)
    tool = ToolCall(id="c1", name="lookup", arguments='{"q": 1}')
    usage = Usage(input_tokens=7, output_tokens=3)
    response = ChatResponse(text="answer", tool_calls=(tool,), usage=usage, finish_reason="tool_calls", reasoning="r")
    reply = call.accept(response, GPT, 2)
    assert (reply.text, reply.tool_calls, reply.usage, reply.finish_reason, reply.reasoning) == (
        "answer",
        (tool,),
        usage,
        "tool_calls",
        "r",
    )
    assert (reply.requested, reply.served, reply.call_id) == (SONNET, GPT, call.call_id)
    assert reply.attempts == tuple(attempts)
    assert reply.fallback == call.fallback(GPT, 2) and reply.notice is not None


def test_accept_writes_one_ledger_record_with_the_accepted_index() -> None:
    """One record: outcome ok, both routes, fallback flag, the attempts, and the index of the ok attempt."""
    ledger = RecordingLedger()
    call = Call(CallPlan(requested=GPT, operation="stream", ledger=ledger, surface="gateway"))
    for a in (attempt("cooldown_skip"), attempt("empty", provider="openai.backup", model="gpt-4.1", entry=1)):
        call.add(a)
    call.add(attempt("ok", provider="openai.backup", model="gpt-4.1", entry=1))
    call.accept(ChatResponse(text="hi"), GPT, 1)
    (record,) = ledger.records
    assert record == CallRecord(
        call_id=call.call_id,
        ts=call.started,
        surface="gateway",
        stream=True,
        requested=GPT,
        served=GPT,
        fallback=True,  # entry 1 is a later entry
        outcome="ok",
        attempts=tuple(call.attempts),
        accepted_index=2,
    )


def test_accept_of_a_direct_answer_records_no_fallback() -> None:
    """A first-entry answer of the requested route is recorded with fallback false and no notice."""
    ledger = RecordingLedger()
    call = Call(CallPlan(requested=SONNET, operation="chat", ledger=ledger))
    call.add(attempt("retryable"))
    call.add(attempt("ok"))
    reply = call.accept(ChatResponse(text="hi"), SONNET, 0)
    assert reply.fallback is None
    assert [(r.fallback, r.accepted_index) for r in ledger.records] == [(False, 1)]


def test_accept_moves_think_spans_into_the_reasoning() -> None:
    """An answer with inline <think> keeps only the answer as text, the thought as reasoning."""
    reply = Call(CallPlan(requested=SONNET, operation="chat")).accept(
        ChatResponse(text="<think>plan</think>done"), SONNET, 0
    )
    assert (reply.text, reply.reasoning) == ("done", "plan")


def test_accept_without_a_ledger_records_nothing_and_still_replies() -> None:
    """A call without a ledger gives its reply (no accepted index is needed)."""
    reply = Call(CallPlan(requested=SONNET, operation="chat")).accept(ChatResponse(text="ok"), SONNET, 0)
    assert reply.text == "ok" and reply.attempts == ()


# --- fail ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (AllProvidersFailed("x"), "all_failed"),
        (RefusalError(), "refusal"),
        (ContextWindowExceeded(limit=8000), "context_window"),
        (StreamInterruptedAfterOutput("x", partial_text="He"), "stream_interrupted"),
        (TurnCancelled(), "cancelled"),
        (asyncio.CancelledError(), "cancelled"),
        (UnsupportedRequest("images"), "UnsupportedRequest"),
        (ValueError("some text"), "ValueError"),
    ],
)
def test_fail_records_the_outcome_name_of_call_outcome(exc: BaseException, outcome: str) -> None:
    """A failed call is one record with the ledger's outcome name, nothing served, and its attempts."""
    assert call_outcome(exc) == outcome
    ledger = RecordingLedger()
    call = Call(CallPlan(requested=SONNET, operation="chat", ledger=ledger, surface="cli"))
    call.add(attempt("retryable"))
    call.fail(exc)
    (record,) = ledger.records
    assert (record.outcome, record.served, record.fallback, record.accepted_index) == (outcome, None, False, None)
    assert (record.call_id, record.requested, record.surface, record.stream) == (call.call_id, SONNET, "cli", False)
    assert record.attempts == tuple(call.attempts)


def test_fail_without_a_ledger_does_nothing() -> None:
    """Failing a call that has no ledger is a no-op (no error)."""
    Call(CallPlan(requested=SONNET, operation="chat")).fail(AllProvidersFailed("x"))


# --- ids -----------------------------------------------------------------------------------------


def test_call_ids_are_unique_and_of_one_shape() -> None:
    """Every call id differs, ids are hex of one length, and each call gets a fresh one."""
    ids = [new_call_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert {len(i) for i in ids} == {22}
    assert all(int(i, 16) >= 0 for i in ids)
    assert (
        Call(CallPlan(requested=SONNET, operation="chat")).call_id
        != Call(CallPlan(requested=SONNET, operation="chat")).call_id
    )


def test_call_ids_are_the_prefix_and_the_counter_in_ten_hex_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call id is the prefix, leading zeros kept, then the counter in ten hex digits."""
    for prefix in ("000000000000", "00ab00000001", "ffffffffffff"):
        monkeypatch.setattr(turnout.call, "_CALL_PREFIX", prefix)
        for n in (1, 15, 16, 2**32, 16**10 - 1):
            monkeypatch.setattr(turnout.call, "_call_numbers", itertools.count(n))
            assert turnout.call.new_call_id() == prefix + format(n, "010x")
