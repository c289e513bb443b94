"""The error tree: one root, drawn in the module docstring, content-free aggregate."""

from __future__ import annotations

import inspect

import turnout.errors as errors
from turnout.errors import (
    ErrorClass,
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
