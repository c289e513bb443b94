"""Attribution (SPEC 8): attempt records, requested vs served routes, fallback notices, the dispatch scope."""

from __future__ import annotations

import asyncio

import pytest

from turnout.core.attribution import (
    Attempt,
    DispatchScope,
    RouteRef,
    current_scope,
    dispatch_scope,
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
    """The notice is the seed's sentence with requested and served model and full family.alias."""
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


def test_no_scope_outside_a_call() -> None:
    """Outside any dispatch scope there is no current scope."""
    assert current_scope() is None


def test_scope_collects_attempts_in_order_and_is_restored() -> None:
    """A scope is current inside the block, keeps attempts in order, and is gone afterwards."""
    first = Attempt(provider="a.b", model="m", outcome="retryable")
    second = Attempt(provider="a.b", model="m", outcome="ok", try_number=2)
    with dispatch_scope() as scope:
        assert current_scope() is scope
        scope.add(first)
        current_scope().add(second)  # type: ignore[union-attr]
    assert scope.attempts == [first, second]
    assert current_scope() is None


def test_nested_scopes_restore_the_outer_one() -> None:
    """A nested scope (a given one is used as is) is current only inside; the outer one comes back."""
    mine = DispatchScope()
    with dispatch_scope() as outer:
        with dispatch_scope(mine) as inner:
            assert inner is mine and current_scope() is mine
        assert current_scope() is outer
    assert current_scope() is None


def test_scope_is_restored_when_the_call_fails() -> None:
    """An exception inside the block still restores the previous scope."""
    with dispatch_scope() as outer:
        with pytest.raises(RuntimeError), dispatch_scope():
            raise RuntimeError("boom")
        assert current_scope() is outer
    assert current_scope() is None


async def test_concurrent_calls_never_mix_their_attempts() -> None:
    """Two tasks recording in turn, with both scopes open, each keep only their own attempts."""
    opened = {"x.a": asyncio.Event(), "x.b": asyncio.Event()}
    first = {"x.a": asyncio.Event(), "x.b": asyncio.Event()}

    async def call(name: str, other: str) -> list[Attempt]:
        with dispatch_scope() as scope:
            opened[name].set()
            await opened[other].wait()  # both scopes are open now
            current_scope().add(Attempt(provider=name, model="m", outcome="retryable"))  # type: ignore[union-attr]
            first[name].set()
            await first[other].wait()  # the other task recorded in between
            current_scope().add(Attempt(provider=name, model="m", outcome="ok"))  # type: ignore[union-attr]
            return scope.attempts

    a, b = await asyncio.gather(call("x.a", "x.b"), call("x.b", "x.a"))
    assert [(x.provider, x.outcome) for x in a] == [("x.a", "retryable"), ("x.a", "ok")]
    assert [(x.provider, x.outcome) for x in b] == [("x.b", "retryable"), ("x.b", "ok")]
    assert current_scope() is None


async def test_a_task_started_in_a_scope_records_into_it_and_its_own_scope_stays_its_own() -> None:
    """A child task records into its parent's scope; a scope the child opens never becomes the parent's."""
    child_open, parent_checked = asyncio.Event(), asyncio.Event()

    async def child() -> None:
        current_scope().add(Attempt(provider="c.parent", model="m", outcome="ok"))  # type: ignore[union-attr]
        with dispatch_scope() as own:
            own.add(Attempt(provider="c.own", model="m", outcome="ok"))
            child_open.set()
            await parent_checked.wait()

    with dispatch_scope() as parent:
        task = asyncio.create_task(child())
        await child_open.wait()
        assert current_scope() is parent  # the child's open scope is not visible here
        parent_checked.set()
        await task
    assert [a.provider for a in parent.attempts] == ["c.parent"]
