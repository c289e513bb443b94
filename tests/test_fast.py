"""The generated constructor of the hot records builds exactly what the frozen dataclass would."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from turnout._fast import fast_init, fast_new
from turnout.attribution import Attempt
from turnout.reply import Reply
from turnout.types import ChatRequest, ChatResponse, Final, Message, ReasoningDelta, TextDelta, Usage, UsageEvent


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class _Record:
    name: str
    count: int = 3
    tags: list[str] = field(default_factory=list)
    seen: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "seen", True)


def test_fast_init_keeps_defaults_factories_post_init_and_immutability() -> None:
    a = _Record(name="x")
    assert (a.name, a.count, a.tags, a.seen) == ("x", 3, [], True)
    assert _Record(name="x").tags is not a.tags  # a fresh default each time
    assert _Record(name="y", count=5, tags=["t"]) == _Record(name="y", count=5, tags=["t"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.name = "z"  # type: ignore[misc]
    with pytest.raises(TypeError):
        _Record()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Record("x")  # type: ignore[call-arg]  # keyword-only stays keyword-only


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class _Cached:
    name: str
    memo: list[str] | None = field(default=None, init=False, compare=False)
    seen: list[str] = field(default_factory=list, init=False)


def test_fields_outside_init_get_their_defaults() -> None:
    """A field that is not a parameter is set to its default (or a fresh factory value) by both constructors."""
    built = [_Cached(name="x"), fast_new(_Cached)(name="x")]
    for one in built:
        assert (one.name, one.memo, one.seen) == ("x", None, [])
    assert built[0].seen is not built[1].seen
    with pytest.raises(TypeError):
        _Cached(name="x", memo=[])  # type: ignore[call-arg]


def test_fast_new_takes_fields_outside_init_only_when_asked() -> None:
    """``also`` makes a non-parameter field a parameter of the constructor (its default when left out), and no other."""
    make = fast_new(_Cached, also=("memo",))
    memo = ["kept"]
    given = make(name="x", memo=memo)  # type: ignore[call-arg]
    assert given == _Cached(name="x") and given.memo is memo and given.seen == [] and type(given) is _Cached
    assert make(name="x").memo is None
    with pytest.raises(TypeError):
        fast_new(_Cached)(name="x", memo=memo)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="outside its parameters"):
        fast_new(_Cached, also=("name",))
    with pytest.raises(TypeError, match="no plain default"):
        fast_new(_Cached, also=("seen",))


def test_fast_init_rejects_non_frozen_classes() -> None:
    @dataclass(slots=True)
    class Mutable:
        x: int

    with pytest.raises(TypeError):
        fast_init(Mutable)


def test_records_on_the_hot_path_still_compare_and_hash() -> None:
    a = Attempt(provider="a.b", model="m", outcome="ok")
    assert a == Attempt(provider="a.b", model="m", outcome="ok", entry=0)
    assert hash(a) == hash(Attempt(provider="a.b", model="m", outcome="ok"))


@fast_init
@dataclass(frozen=True, slots=True, weakref_slot=True, kw_only=True)
class _WithWeakref:
    name: str
    count: int = 1


def test_records_built_through_the_twin_are_the_frozen_class() -> None:
    """Built through the plain twin, a record is of its own class again: frozen, comparable, copyable."""
    import copy
    import pickle

    made = Attempt(provider="a.b", model="m", outcome="ok", entry=2)
    assert type(made) is Attempt and type(Message(role="user", content="x")) is Message
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.entry = 3  # type: ignore[misc]
    assert copy.copy(made) == made and pickle.loads(pickle.dumps(made)) == made
    assert dataclasses.replace(made, entry=3).entry == 3 and made.entry == 2


def test_a_class_that_cannot_change_class_keeps_the_descriptor_path() -> None:
    """A weakref slot (or a base class) rules the twin out; construction still works the same way."""
    import weakref

    made = _WithWeakref(name="x")
    assert (made.name, made.count) == ("x", 1) and weakref.ref(made)() is made
    assert _WithWeakref(name="y", count=2) == _WithWeakref(name="y", count=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "z"  # type: ignore[misc]


def test_a_plain_subclass_keeps_its_class() -> None:
    """A subclass that inherits the generated ``__init__`` is built as itself, not as the twin's class."""

    class Tagged(_WithWeakref):
        pass

    class Noted(Attempt):
        __slots__ = ("note",)

    made = Noted(provider="a.b", model="m", outcome="ok")
    assert type(made) is Noted and made.provider == "a.b" and type(Tagged(name="x")) is Tagged
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.provider = "c.d"  # type: ignore[misc]


def _plain_twin(cls: type) -> type:
    """The same dataclass without the generated constructor (the general path)."""
    spec = [
        (f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory, init=f.init))
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        else (f.name, f.type, dataclasses.field(init=f.init))
        for f in dataclasses.fields(cls)
    ]
    return dataclasses.make_dataclass(f"Plain{cls.__name__}", spec, frozen=True, slots=True, kw_only=True)


HOT = {
    Message: {"role": "user", "content": "hi"},
    Usage: {"input_tokens": 3, "output_tokens": 4},
    ChatRequest: {"messages": (Message(role="user", content="hi"),), "max_tokens": 5},
    ChatResponse: {"text": "t", "usage": Usage(input_tokens=1, output_tokens=2)},
    TextDelta: {"text": "t"},
    ReasoningDelta: {"text": "r"},
    UsageEvent: {"usage": Usage(input_tokens=1, output_tokens=2)},
    Final: {"finish_reason": "stop"},
    Attempt: {"provider": "a.b", "model": "m", "outcome": "ok", "entry": 2},
}


@pytest.mark.parametrize("cls", list(HOT), ids=lambda c: c.__name__)
def test_each_hot_record_holds_the_same_fields_as_its_plain_dataclass(cls: type) -> None:
    """Every record built by the generated constructor has the fields the plain dataclass would give it."""
    plain = _plain_twin(cls)(**HOT[cls])
    fast = cls(**HOT[cls])
    assert type(fast) is cls
    assert dataclasses.asdict(fast) == dataclasses.asdict(plain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, dataclasses.fields(cls)[0].name, None)


def test_the_reply_is_built_like_a_plain_dataclass() -> None:
    """The reply, which holds other records, keeps every field as given."""
    route = Attempt(provider="a.b", model="m", outcome="ok")
    reply = Reply(
        text="t",
        tool_calls=(),
        usage=None,
        finish_reason="stop",
        reasoning=None,
        requested=None,  # type: ignore[arg-type]
        served=None,  # type: ignore[arg-type]
        fallback=None,
        attempts=(route,),
        call_id="c",
    )
    assert (reply.text, reply.attempts, reply.call_id) == ("t", (route,), "c")
