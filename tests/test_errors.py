"""The error tree: one root, drawn in the module docstring, content-free aggregate."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import turnout.core.errors as errors
from turnout.core.errors import (
    EmptyCompletion,
    ErrorClass,
    ProtocolError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RefusalError,
    StreamTruncated,
    TurnoutError,
)


def test_every_error_descends_from_the_root() -> None:
    """Every exception class in the module is a TurnoutError."""
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, BaseException)]
    assert classes
    assert all(issubclass(c, TurnoutError) for c in classes)


def test_docstring_draws_every_error() -> None:
    """The module docstring's tree names every error class."""
    doc = errors.__doc__ or ""
    for name, c in inspect.getmembers(errors, inspect.isclass):
        if issubclass(c, BaseException):
            assert name in doc, name


def test_default_classes() -> None:
    """Each provider error subclass carries its default error class."""
    assert ProviderTimeout("t", phase="idle").error_class is ErrorClass.TIMEOUT
    assert RefusalError().error_class is ErrorClass.REFUSAL
    assert StreamTruncated("message_stop").error_class is ErrorClass.RETRYABLE
    assert "message_stop" in str(StreamTruncated("message_stop"))


def test_provider_error_str_names_where() -> None:
    """A provider error says which provider, model and status failed."""
    e = ProviderError("boom", provider="openai.main", model="gpt-4.1", status=500)
    assert str(e) == "openai.main gpt-4.1 (HTTP 500): boom"


class _Plain(TurnoutError):
    """``ProviderError.__init__`` written plainly: ``super().__init__`` and one store per attribute."""

    def __init__(self, message: str, default_class: ErrorClass, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.auth_failure = fields.get("auth_failure", False)
        self.error_class = fields.get("error_class") or default_class
        for name in ("provider", "model", "status", "error_type", "error_code", "retry_after", "request_id"):
            setattr(self, name, fields.get(name))


_fields = st.fixed_dictionaries(
    {},
    optional={
        "error_class": st.none() | st.sampled_from(list(ErrorClass)),
        "provider": st.none() | st.text(max_size=4),
        "model": st.none() | st.text(max_size=4),
        "status": st.none() | st.integers(100, 599),
        "error_type": st.none() | st.text(max_size=4),
        "error_code": st.none() | st.text(max_size=4),
        "retry_after": st.none() | st.floats(0, 100),
        "request_id": st.none() | st.text(max_size=4),
        "auth_failure": st.booleans(),
    },
)


@given(
    message=st.text(max_size=8),
    fields=_fields,
    kind=st.sampled_from([ProviderError, ProviderConnectionError, ProtocolError]),
)
def test_a_provider_error_holds_what_the_plain_constructor_gives(
    message: str, fields: dict[str, Any], kind: type[ProviderError]
) -> None:
    """Any arguments: the same ``args``, attributes, text, and the same again after a pickle round trip."""
    made = kind(message, **fields)
    plain = _Plain(message, kind.default_class, **fields)
    assert made.args == plain.args == (message,)
    assert vars(made) == vars(plain)
    assert str(made) == ProviderError.__str__(plain)  # type: ignore[arg-type]
    again = pickle.loads(pickle.dumps(made))
    assert type(again) is kind and again.args == made.args and vars(again) == vars(made)


@given(fields=_fields)
def test_subclasses_keep_their_own_message_and_attributes(fields: dict[str, Any]) -> None:
    """A subclass that makes its own message has it as its ``args``; its own attributes come on top."""
    truncated = StreamTruncated("message_stop", **fields)
    assert truncated.args == (truncated.message,) and "message_stop" in truncated.message
    assert truncated.missing_signal == "message_stop"
    timeout = ProviderTimeout("slow", phase="idle", seconds=3.0, **fields)
    assert (timeout.args, timeout.phase, timeout.seconds) == (("slow",), "idle", 3.0)
    refusal = RefusalError(**fields)
    assert refusal.args == ("the model refused to answer",) and refusal.attempts == ()
    empty = EmptyCompletion(**fields)
    assert empty.usage is None and empty.status == fields.get("status")


def test_a_subclass_keeps_what_it_set_before_the_base_init() -> None:
    """``ProviderError.__init__`` adds its attributes to the error's own; it does not replace them."""

    class Tagged(ProviderError):
        def __init__(self, message: str) -> None:
            self.tag = "early"
            super().__init__(message, provider="openai.x")

    error = Tagged("boom")
    assert (error.tag, error.provider, error.message, error.args) == ("early", "openai.x", "boom", ("boom",))
