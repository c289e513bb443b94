"""The public surface: one sorted __all__, every name importable and documented."""

from __future__ import annotations

import turnout


def test_all_is_sorted_and_unique() -> None:
    """__all__ is sorted and has no duplicates."""
    assert turnout.__all__ == sorted(set(turnout.__all__))


def test_every_public_name_exists_and_has_a_docstring() -> None:
    """Each exported name resolves and carries a docstring (type aliases excepted)."""
    for name in turnout.__all__:
        obj = getattr(turnout, name)
        if isinstance(obj, type) or callable(obj):
            assert (obj.__doc__ or "").strip(), name


def test_embeddings_are_public() -> None:
    """The embedding call and its values are exported, and the client and every provider can embed."""
    for name in ("EmbedReply", "EmbedRequest", "Embeddings", "EmbeddingLimits"):
        assert name in turnout.__all__
    assert callable(turnout.Client.embed)
    assert callable(turnout.Provider.embed) and callable(turnout.Provider.embedding_limits)
