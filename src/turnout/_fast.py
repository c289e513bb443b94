"""Faster construction of the frozen, slotted records built on every call and every streamed token.

A frozen dataclass sets each field with ``object.__setattr__(self, name, value)``: a call through the type's
slot wrapper that costs several hundred machine instructions per field. :func:`fast_init` replaces that
``__init__`` with one that fills the slots as a plain class would: for the time of the assignments the
instance belongs to a *twin*, a plain class with the very same slots (so the same memory layout), and then it
is handed back to the frozen class. Signature, defaults, default factories, ``__post_init__`` and
immutability are the dataclass's own (``tests/test_fast.py`` holds it to them).

It is used only where it is paid for: the records every call builds (messages, the request, the response, its
usage, each attempt, the reply) and the events every streamed token builds. Measured with
``python -m bench.hotpath --instructions``, the plain dataclass constructors add about 40k instructions to a
non-streaming call (about 9 % of a raw aiohttp round trip on loopback). Every other record is a plain frozen
dataclass.

A class whose instances cannot change class safely (it inherits from another class, or has a
``__dict__`` or ``__weakref__`` slot) keeps setting its fields through each slot's descriptor instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

_MISSING = object()


def _plan(cls: type[Any]) -> tuple[list[dataclasses.Field[Any]], dict[str, Any]]:
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in vars(cls):
        raise TypeError(f"{cls.__name__} is not a frozen, slotted dataclass")
    fields = [f for f in dataclasses.fields(cls) if f.init or _has_default(f)]
    namespace: dict[str, Any] = {
        "_MISSING": _MISSING,
        "_new": object.__new__,
        "_cls": cls,
        "_become": object.__setattr__,
        "_twin": _twin(cls),
    }
    return fields, namespace


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _twin(cls: type[Any]) -> type[Any] | None:
    """A plain class with exactly ``cls``'s slots (None when ``cls``'s instances must not change class)."""
    slots = tuple(vars(cls)["__slots__"])
    if cls.__bases__ != (object,) or "__dict__" in slots or "__weakref__" in slots:
        return None
    return type(f"_{cls.__name__}Twin", (), {"__slots__": slots, "__module__": cls.__module__})


def _setters(
    fields: list[dataclasses.Field[Any]],
    namespace: dict[str, Any],
    cls: type[Any],
    *,
    plain: bool,
    also: frozenset[str] = frozenset(),
) -> tuple[list[str], list[str], list[str]]:
    """``(positional params, keyword-only params, body lines)`` setting every field on ``self``.

    ``plain``: each field is a plain store (on the twin instance); otherwise a call to the slot's descriptor.
    ``also``: fields that are not parameters of the class (``init=False``) but are of this constructor.
    """
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    for i, f in enumerate(fields):
        if not f.init and f.name in also:  # a parameter here, defaulting to what the class would set
            if f.default is dataclasses.MISSING:
                raise TypeError(f"{cls.__name__}.{f.name} has no plain default")
            namespace[f"_default{i}"] = f.default
            param, value = f"{f.name}=_default{i}", f.name
        elif not f.init:  # not a parameter: always its default, as the dataclass's own __init__ sets it
            if f.default is not dataclasses.MISSING:
                namespace[f"_default{i}"] = f.default
                param, value = "", f"_default{i}"
            else:
                namespace[f"_factory{i}"] = f.default_factory
                param, value = "", f"_factory{i}()"
        elif f.default is not dataclasses.MISSING:
            namespace[f"_default{i}"] = f.default
            param, value = f"{f.name}=_default{i}", f.name
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory{i}"] = f.default_factory
            param, value = f"{f.name}=_MISSING", f"_factory{i}() if {f.name} is _MISSING else {f.name}"
        else:
            param, value = f.name, f.name
        if param:
            (keyword if f.kw_only else positional).append(param)
        if plain:
            body.append(f"    self.{f.name} = {value}")
        else:
            namespace[f"_set{i}"] = vars(cls)[f.name].__set__
            body.append(f"    _set{i}(self, {value})")
    return positional, keyword, body


def _compile(src: str, namespace: dict[str, Any], name: str) -> Any:
    exec(src, namespace)
    return namespace[name]


def fast_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass ``cls`` an ``__init__`` that fills its slots with plain stores."""
    fields, namespace = _plan(cls)
    positional, keyword, body = _setters(fields, namespace, cls, plain=False)
    if namespace["_twin"] is not None and body:
        # ``self`` is the twin while its slots are filled (the frozen class's __setattr__ refuses every store);
        # an instance of a subclass, which the twin does not mirror, is filled through the descriptors.
        through_descriptors = body
        _, _, body = _setters(fields, namespace, cls, plain=True)
        body = [
            "    if self.__class__ is _cls:",
            "        _become(self, '__class__', _twin)",
            *("    " + line for line in body),
            "        self.__class__ = _cls",
            "    else:",
            *("    " + line for line in through_descriptors),
        ]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    params = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    init = _compile(f"def __init__({params}):\n" + ("\n".join(body) or "    pass") + "\n", namespace, "__init__")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def fast_new(cls: Callable[P, T], *, also: tuple[str, ...] = ()) -> Callable[P, T]:
    """A constructor for ``cls`` without ``__init__``: it builds exactly what ``cls(...)`` builds, faster.

    It takes the same arguments, and also every field by position (in declaration order). Calling a class
    with keywords packs them into a dict for ``__init__``; calling this function does not, so it costs about
    a third. Only for classes without ``__post_init__``.

    ``also`` names fields that are no parameters of the class (``init=False``, with a plain default) that this
    constructor takes too, for the code that fills them as the record is made (the returned callable's type
    does not show them: the caller casts it).
    """
    if not isinstance(cls, type):
        raise TypeError(f"{cls!r} is not a class")
    fields, namespace = _plan(cls)
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__")
    extra = frozenset(also)
    if not extra <= {f.name for f in fields if not f.init}:
        raise TypeError(f"{cls.__name__} has no fields {sorted(extra)} outside its parameters")
    plain = namespace["_twin"] is not None
    positional, keyword, body = _setters(fields, namespace, cls, plain=plain, also=extra)
    params = ", ".join([*positional, *keyword])
    name = f"new_{cls.__name__}"
    if namespace["_twin"] is not None:
        head, tail = "    self = _new(_twin)\n", "\n    self.__class__ = _cls\n    return self\n"
    else:
        head, tail = "    self = _new(_cls)\n", "\n    return self\n"
    make: Callable[P, T] = _compile(f"def {name}({params}):\n{head}" + "\n".join(body) + tail, namespace, name)
    return make
