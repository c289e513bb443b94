"""The adapter table: every protocol a profile can select has an adapter, and each entry names a real one."""

from __future__ import annotations

import pytest

from turnout.core.registry import KINDS, PROTOCOLS
from turnout.providers import ADAPTERS, HTTPAdapter, adapter_class

#: The wire a Vertex AI adapter speaks: its publisher's own.
VERTEX_WIRES = {"vertex-anthropic": "anthropic", "vertex-google": "gemini"}


@pytest.mark.parametrize("protocol", sorted(ADAPTERS))
def test_each_entry_is_an_adapter_of_its_protocol(protocol: str) -> None:
    cls = adapter_class(protocol)
    assert issubclass(cls, HTTPAdapter) and cls.protocol == VERTEX_WIRES.get(protocol, protocol)


def test_every_protocol_a_profile_can_select_has_an_adapter() -> None:
    """Vertex selects its publisher's wire; every other protocol of the family table and of ``kind`` is its own."""
    selectable = {p for p in (*PROTOCOLS, *KINDS.values()) if p != "vertex"} | {"vertex-anthropic", "vertex-google"}
    assert selectable == set(ADAPTERS)


def test_an_unknown_protocol_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown protocol 'smoke-signals'"):
        adapter_class("smoke-signals")
