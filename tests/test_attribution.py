"""Attribution: attempt records, requested vs served routes, fallback notices, the dispatch scope."""

from __future__ import annotations

import pytest

from turnout.core.attribution import (
    Attempt,
    DispatchScope,
    RouteRef,
    fallback_notice,
)

SONNET = RouteRef(provider="anthropic.prod", model="claude-sonnet-4-5")
HAIKU = RouteRef(provider="anthropic.prod", model="claude-haiku-4-5")
OTHER_ALIAS = RouteRef(provider="anthropic.backup", model="claude-sonnet-4-5")
GPT = RouteRef(provider="openai.backup", model="gpt-4.1")


def test_families_are_the_part_before_the_first_dot() -> None:
    """RouteRef and Attempt name their family by the profile's family part (the whole name without a dot)."""
    assert SONNET.family == "anthropic" and GPT.family == "openai"
    assert RouteRef(provider="openai.eu.west", model="m").family == "openai"
    assert RouteRef(provider="ollama", model="m").family == "ollama"
    assert Attempt(provider="gemini.main", model="m", outcome="ok").family == "gemini"


def test_route_refs_compare_by_profile_and_model() -> None:
    """Two routes are equal exactly when profile and model are (the basis of 'is this a fallback')."""
    assert RouteRef(provider="anthropic.prod", model="claude-sonnet-4-5") == SONNET
    assert SONNET != HAIKU and SONNET != OTHER_ALIAS
    assert len({SONNET, RouteRef(provider="anthropic.prod", model="claude-sonnet-4-5")}) == 1


def test_attempt_defaults_and_hash() -> None:
    """An attempt defaults to the first try of entry 0, non-streaming, without usage, cost or tags; hashed by value."""
    a = Attempt(provider="openai.a", model="m", outcome="retryable")
    assert (a.status, a.key_id, a.usage, a.cost_usd, a.ttft_ms, a.retry_after, a.detail) == (None,) * 7
    assert (a.entry, a.try_number, a.stream, a.started_at, a.duration_ms) == (0, 1, False, 0.0, 0.0)
    assert hash(a) == hash(Attempt(provider="openai.a", model="m", outcome="retryable"))


# --- fallback notices -----------------------------------------------------------------------------


def test_notice_text_names_both_routes_in_the_seed_shape() -> None:
    """The notice is the documented sentence with requested and served model and full family.alias."""
    notice = fallback_notice(SONNET, GPT)
    assert notice.text == (
        "⚡ claude-sonnet-4-5 (anthropic.prod) was unavailable; this reply was served by gpt-4.1 (openai.backup)."
    )
    assert (notice.requested, notice.served) == (SONNET, GPT)


@pytest.mark.parametrize(
    ("requested", "served", "intra_family", "cross", "shown"),
    [
        (SONNET, GPT, False, True, True),  # across families: always shown
        (SONNET, GPT, True, True, True),
        (SONNET, HAIKU, False, False, False),  # same family, another model: shown only when opted in
        (SONNET, HAIKU, True, False, True),
        (SONNET, OTHER_ALIAS, False, False, False),  # another profile of the same family is still intra-family
        (SONNET, OTHER_ALIAS, True, False, True),
    ],
)
def test_notice_cross_family_and_shown_rules(
    requested: RouteRef, served: RouteRef, intra_family: bool, cross: bool, shown: bool
) -> None:
    """Cross-family notices are always shown; same-family ones only with [notices] intra_family."""
    notice = fallback_notice(requested, served, intra_family=intra_family)
    assert (notice.cross_family, notice.shown) == (cross, shown)


# --- the dispatch scope ---------------------------------------------------------------------------


def test_scope_collects_attempts_in_order() -> None:
    """A scope keeps its attempts in the order they were added."""
    first = Attempt(provider="a.b", model="m", outcome="retryable")
    second = Attempt(provider="a.b", model="m", outcome="ok", try_number=2)
    scope = DispatchScope()
    scope.add(first)
    scope.add(second)
    assert scope.attempts == [first, second]
