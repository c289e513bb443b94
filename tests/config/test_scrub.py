"""``scrub``: configured secrets and every common key shape are redacted, whatever text carries them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.core.secrets import _KEY_SHAPES, scrub


@pytest.mark.parametrize(
    "key",
    [
        "sk-proj-abcdefghijklmnop",
        "SK-ABCDEFGH1234",
        "xoxb-1234567890",
        "xoxp-abcdefghij",
        "ghp_abcdefghij12",
        "GHO_ABCDEFGH",
        "github_pat_11ABCDEFG",
        "AIzaSyA1234567890abcdef",
        "aizaSyA1234567890abcdef",
    ],
)
def test_every_key_shape_is_redacted(key: str) -> None:
    for text in (f"Incorrect API key provided: {key}.", f"{key}", f"clé invalide : {key}"):
        assert key not in scrub(text, ()), text


def test_bearer_tokens_and_configured_secrets_are_redacted() -> None:
    assert scrub("Authorization: Bearer abcdefgh12345678", ()) == "Authorization: Bearer [REDACTED]"
    assert scrub("header was BEARER abcdefgh12345678", ()) == "header was BEARER [REDACTED]"
    assert scrub("my key is plainsecret99 ok", ("plainsecret99",)) == "my key is [REDACTED] ok"


def test_text_without_any_key_is_returned_as_it_is() -> None:
    text = "Rate limit reached for requests per minute. Please try again later."
    assert scrub(text, ("sk-unrelated-000",)) is text


_KEY_STARTS = ["sk-", "SK-", "xoxb-", "xoxp-", "ghp_", "gho_", "ghu_", "github_pat_", "AIza", "aiza", "Bearer "]
_FILLERS = ["abcdefgh", "ABCDEFGHIJ", "1234567890", "_", "-", ".", "*", "=", " ", "é", "ß", "İ", ":", "\n"]
_PIECES = st.sampled_from([*_KEY_STARTS, "bearer ", *_FILLERS])


@settings(max_examples=500, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_scrub_redacts_what_the_full_pattern_redacts(text: str) -> None:
    """Whatever shortcut scrub takes, its result is that of the one pattern with every key shape."""
    assert scrub(text, ()) == _KEY_SHAPES.sub("[REDACTED]", text)
