"""Faster ``__init__`` for frozen, slotted dataclasses.

A frozen dataclass sets each field with ``object.__setattr__(self, name, value)``, which looks the name up
on the type every time. :func:`fast_init` replaces that ``__init__`` with one that calls each slot's own
descriptor directly: the same signature, defaults, default factories, ``__post_init__`` and immutability,
in about half the time. Turnout builds several such records on every call (messages, attempts, replies,
stream events), so this is on the hottest path.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_MISSING = object()


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` that sets slots through their descriptors."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"_MISSING": _MISSING}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for i, f in enumerate(fields):
        namespace[f"_set{i}"] = vars(cls)[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default{i}"] = f.default
            param = f"{f.name}=_default{i}"
            value = f.name
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory{i}"] = f.default_factory
            param = f"{f.name}=_MISSING"
            value = f"_factory{i}() if {f.name} is _MISSING else {f.name}"
        else:
            param = f.name
            value = f.name
        (keyword if f.kw_only else positional).append(param)
        body.append(f"    _set{i}(self, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    params_src = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    src = f"def __init__({params_src}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(src, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
