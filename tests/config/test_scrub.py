"""``scrub``: configured secrets and every common key shape are redacted, whatever text carries them."""

from __future__ import annotations

import pytest

from turnout.core.secrets import scrub


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
        "tk-Q2hvb3NlIGEgZ29vZCBrZXk_x-1234567890abcd",
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
    assert scrub(text, ("sk-unrelated-000",)) == text
    assert scrub("tk-short and task-list", ()) == "tk-short and task-list"  # not a client key's shape
