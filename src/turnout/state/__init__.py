"""Cooldown and key state: where the walk records which profiles and keys must rest.

:class:`StateStore` is the small interface the reliable walk needs. Reads are synchronous (they run on
every walk and must not cost a round trip); writes are async. :class:`MemoryStore` is the default.
"""

from turnout.state.base import StateStore
from turnout.state.memory import MemoryStore

__all__ = ["MemoryStore", "StateStore"]
