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
        _Record("x")  # type: ignore[misc]  # keyword-only stays keyword-only


def test_fast_init_rejects_non_frozen_classes() -> None:
    @dataclass(slots=True)
    class Mutable:
        x: int

    with pytest.raises(TypeError):
        fast_init(Mutable)


def test_fast_new_builds_the_same_object() -> None:
    make = fast_new(Message)
    assert make("user", "hi") == Message(role="user", content="hi")
    assert text_delta("t") == TextDelta(text="t") and type(text_delta("t")) is TextDelta
    with pytest.raises(dataclasses.FrozenInstanceError):
        text_delta("t").text = "u"  # type: ignore[misc]
    with pytest.raises(TypeError):
        fast_new(_Record)  # it has a __post_init__


def test_records_on_the_hot_path_still_compare_and_hash() -> None:
    a = Attempt(provider="a.b", model="m", outcome="ok")
    assert a == Attempt(provider="a.b", model="m", outcome="ok", entry=0)
    assert hash(a) == hash(Attempt(provider="a.b", model="m", outcome="ok"))
