"""The shortcuts of the non-streaming per-call path hold to the general code beside them."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

import turnout.call
from turnout.classify import ErrorFacts, classify, is_dead_key_error, provider_error
from turnout.config.schema import Profile
from turnout.errors import ProviderError, RefusalError
from turnout.keys import KeyPool
from turnout.policy import Position
from turnout.pricing import Rates, _Rate
from turnout.providers.base import AdapterSettings
from turnout.providers.http import HttpClient
from turnout.providers.openai_chat import OpenAIChatAdapter
from turnout.reliable import Entry, ReliableProvider
from turnout.report import error_detail
from turnout.state import MemoryStore
from turnout.types import ChatRequest, ChatResponse, Message, ToolCall, Usage, coerce_messages
from turnout.walk import refuse_empty

_tokens = st.integers(min_value=0, max_value=10**9)
_rate = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False)


def test_call_ids_are_the_prefix_and_the_counter_in_ten_hex_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call id is the prefix, leading zeros kept, then the counter in ten hex digits."""
    for prefix in ("000000000000", "00ab00000001", "ffffffffffff"):
        monkeypatch.setattr(turnout.call, "_CALL_PREFIX", prefix)
        for n in (1, 15, 16, 2**32, 16**10 - 1):
            monkeypatch.setattr(turnout.call, "_call_numbers", itertools.count(n))
            assert turnout.call.new_call_id() == prefix + format(n, "010x")


_think = st.sampled_from(["", " ", "\n", "<think>", "</think>", "<think>x</think>", "a", "hi there", "\t"])


@given(parts=st.lists(_think, max_size=5), calls=st.booleans())
def test_refuse_empty_agrees_with_the_emptiness_rule(parts: list[str], calls: bool) -> None:
    """An answer is refused exactly when the general rule says it is semantically empty."""
    response = ChatResponse(
        text="".join(parts), tool_calls=(ToolCall(id="c", name="f", arguments="{}"),) if calls else ()
    )
    try:
        refuse_empty(response)
        refused = False
    except ProviderError:
        refused = True
    assert refused == response.is_semantically_empty


@given(
    inp=_tokens,
    out=_tokens,
    rates=st.tuples(_rate, _rate, st.none() | _rate, st.none() | _rate),
)
def test_pricing_without_cache_tokens_matches_the_general_sum(
    inp: int, out: int, rates: tuple[float, float, float | None, float | None]
) -> None:
    """Usage without cache tokens costs exactly what the general (tiered) path computes for the same rates."""
    i, o, c, w = rates
    flat = Rates(
        input=_Rate(i),
        output=_Rate(o),
        cached_input=_Rate(c) if c is not None else None,
        cache_write=_Rate(w) if w is not None else None,
    )
    never = ((10**12, 99.0),)  # a tier no usage reaches: the same rates, through the general path
    tiered = Rates(
        input=_Rate(i, never),
        output=_Rate(o, never),
        cached_input=_Rate(c, never) if c is not None else None,
        cache_write=_Rate(w, never) if w is not None else None,
    )
    usage = Usage(input_tokens=inp, output_tokens=out)
    assert flat.cost(usage) == tiered.cost(usage)


class _Sub(ProviderError):
    """A provider error of a subclass none of the detail rules names: it takes the general path."""


@given(
    status=st.none() | st.sampled_from([400, 401, 403, 429, 500, 503]),
    etype=st.none() | st.sampled_from(["", "rate_limit_error", "server_error"]),
    auth=st.booleans(),
)
def test_the_detail_of_a_plain_provider_error_matches_the_general_rule(
    status: int | None, etype: str | None, auth: bool
) -> None:
    """A ``ProviderError`` gets the detail tag the general chain of checks gives an error of a plain subclass."""
    fields = {"status": status, "error_type": etype, "auth_failure": auth}
    assert error_detail(ProviderError("m", **fields)) == error_detail(_Sub("m", **fields))  # type: ignore[arg-type]


def test_a_failed_trys_position_is_the_named_tuple() -> None:
    """The position ``_settle`` builds with ``tuple.__new__`` is a ``Position`` with every field where it belongs."""
    made = tuple.__new__(Position, (1, True, False, True, False, True, False, True, False))
    assert made == Position(1, True, False, True, False, True, False, True, False)
    assert type(made) is Position and made.larger_entry_remains and not made.probing


def test_a_message_of_an_unknown_shape_is_named_by_its_index() -> None:
    """The error for a bad message names its position, after messages of every accepted form."""
    good: list[object] = [{"role": "user", "content": "a"}, Message(role="user", content="b"), {"role": "tool"}]
    with pytest.raises(TypeError, match=r"messages\[3\] must be a Message or a dict"):
        coerce_messages([*good, 7])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"messages\[1\]\.role"):
        coerce_messages([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])


def _adapter(name: str, *, merge: bool) -> OpenAIChatAdapter:
    profile = Profile(uri="http://127.0.0.1:9/v1", merge_system_into_user=merge)
    return OpenAIChatAdapter(AdapterSettings.from_profile(name, profile), HttpClient(), "sk-test-0000")


_message = st.builds(
    Message,
    role=st.sampled_from(["system", "user", "assistant"]),
    content=st.text(max_size=4),
)


_wire_dict = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=4)}),
    st.fixed_dictionaries({"role": st.sampled_from(["tool", "developer", "robot"]), "content": st.text(max_size=4)}),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.none() | st.integers()}),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.text(max_size=4), "name": st.just("n")}),
    st.fixed_dictionaries({"role": st.just("assistant")}),
    st.fixed_dictionaries({"role": st.just(["user"]), "content": st.text(max_size=4)}),
    st.fixed_dictionaries({"content": st.text(max_size=4), "name": st.just("n")}),
)


@given(dicts=st.lists(_wire_dict | _message | st.text(max_size=2), min_size=1, max_size=4))
def test_a_request_of_dicts_sends_the_messages_the_conversion_makes(dicts: list[dict[str, object]]) -> None:
    """``ChatRequest.of`` gives the conversion's messages, and the body sends them whatever the caller changes."""
    try:
        general: tuple[Message, ...] | None = coerce_messages(dicts)
    except TypeError:
        general = None
    if general is None:
        with pytest.raises(TypeError):
            ChatRequest.of(dicts)
        return
    request = ChatRequest.of(dicts)
    assert request.messages == general
    assert request == ChatRequest(messages=general)
    adapter = _adapter("openai.a", merge=False)
    expected = adapter._messages(general)
    assert adapter.build_body(request, "m", None, False)["messages"] == expected
    if type(dicts[0]) is dict:
        dicts[0]["content"] = "changed by the caller"
        assert adapter.build_body(request, "m", None, False)["messages"] == expected
    merged = _adapter("openai.b", merge=True)
    assert merged.build_body(request, "m", None, False)["messages"] == merged._messages(general)


class _OwnMessage(Message):
    """A message of a subclass: the conversion takes it as it is."""

    __slots__ = ()


@given(items=st.lists(_wire_dict | _message | _message.map(lambda m: _OwnMessage(role=m.role, content=m.content))))
def test_a_tuple_of_messages_is_coerced_as_the_general_conversion_coerces_it(items: list[object]) -> None:
    """A tuple (the gateway's messages) gives what the same list gives, or the same error."""
    try:
        general: tuple[Message, ...] | str = coerce_messages(items)  # type: ignore[arg-type]
    except TypeError as exc:
        general = str(exc)
    given_tuple = tuple(items)
    try:
        fast: tuple[Message, ...] | str = coerce_messages(given_tuple)  # type: ignore[arg-type]
    except TypeError as exc:
        fast = str(exc)
    assert fast == general


def test_a_zero_retry_hint_writes_no_cooldown_and_makes_no_coroutine() -> None:
    """``cool_down`` with a zero hint returns nothing to await; with a positive one, the store's write."""
    store = MemoryStore()
    pool = KeyPool("openai.a", [], store)
    entry = Entry(profile="openai.a", model="m", providers=(), keys=pool)
    walk = ReliableProvider([entry], store=store, clock=lambda: 100.0)
    assert walk.context.cool_down("openai.a", 0.0) is None
    assert store.cooldown_until("openai.a", 100.0) is None
    write = walk.context.cool_down("openai.a", 5.0)
    assert write is not None
    asyncio.run(write)  # type: ignore[arg-type]
    assert store.cooldown_until("openai.a", 100.0) == 105.0


@given(
    status=st.none() | st.sampled_from([400, 401, 403, 429, 500]),
    etype=st.none() | st.sampled_from(["requests", "content_filter", "authentication_error", "x"]),
    code=st.none() | st.sampled_from(["content_filter", "rate_limit_exceeded", "invalid_api_key", "1"]),
    message=st.sampled_from(["", "slow down", "blocked by a content filter", "try again in 2s"]),
    request_id=st.none() | st.just("req-1"),
)
def test_provider_error_builds_what_the_class_call_builds(
    status: int | None, etype: str | None, code: str | None, message: str, request_id: str | None
) -> None:
    """The classified error is what the class call makes of its fields: type, args, message, every attribute."""
    facts = ErrorFacts(status=status, error_type=etype, error_code=code, message=message)
    made = provider_error(facts, provider="openai.a", model="m", request_id=request_id, secrets=("sk-test-0000",))
    fields = {k: v for k, v in vars(made).items() if k != "message"}
    if isinstance(made, RefusalError):
        del fields["attempts"]
    called = type(made)(made.message, **fields)
    assert type(made) in (ProviderError, RefusalError)
    assert made.args == called.args == (made.message,) and str(made) == str(called)
    assert vars(made) == vars(called)


_facts = st.builds(
    ErrorFacts,
    status=st.none() | st.sampled_from([400, 401, 402, 403, 404, 408, 429, 500, 503]),
    error_type=st.none() | st.sampled_from(["", "Requests", "RATE_LIMIT_ERROR", "server_error", "UNAUTHENTICATED"]),
    error_code=st.none() | st.sampled_from(["", "Insufficient_Quota", "context_length_exceeded", "invalid_api_key"]),
    reason=st.none() | st.sampled_from(["", "API_KEY_INVALID", "content_filter"]),
    message=st.sampled_from(["", "Rate limit reached. Try again", "Request too large", "QUOTA", "flagged", "x"]),
    headers=st.sampled_from([{}, {"retry-after": "0"}, {"retry-after-ms": "20"}]),
)


@given(facts=_facts)
def test_provider_error_classifies_as_the_classifier_does(facts: ErrorFacts) -> None:
    """The error's class and key verdict are what ``classify`` and ``is_dead_key_error`` say of its facts."""
    made = provider_error(facts, provider="openai.a", model="m")
    assert made.error_class is classify(facts)
    assert made.auth_failure == is_dead_key_error(facts)
