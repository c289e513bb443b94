"""Generated constructors for frozen, slotted dataclasses build exactly what the dataclass would."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from turnout._fast import fast_init, fast_new
from turnout.attribution import Attempt
from turnout.types import Message, TextDelta, text_delta


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


def test_fast_init_rejects_non_frozen_classes() -> None:
    @dataclass(slots=True)
    class Mutable:
        x: int

    with pytest.raises(TypeError):
        fast_init(Mutable)


def test_fast_new_builds_the_same_object() -> None:
    make = fast_new(Message)
    assert make(role="user", content="hi") == Message(role="user", content="hi")
    assert text_delta("t") == TextDelta(text="t") and type(text_delta("t")) is TextDelta
    with pytest.raises(dataclasses.FrozenInstanceError):
        text_delta("t").text = "u"  # type: ignore[misc]
    with pytest.raises(TypeError):
        fast_new(_Record)  # it has a __post_init__


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
    assert fast_new(_WithWeakref)(name="y", count=2) == _WithWeakref(name="y", count=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "z"  # type: ignore[misc]


def test_fast_new_takes_the_class_keywords() -> None:
    """The hot-path constructors take the class's own keywords (and its defaults)."""
    make = fast_new(Attempt)
    assert make(provider="a.b", model="m", outcome="ok", key_id="k") == Attempt(
        provider="a.b", model="m", outcome="ok", key_id="k"
    )
    with pytest.raises(TypeError):
        make(provider="a.b", model="m", outcome="ok", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        fast_new(text_delta)  # not a class


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
