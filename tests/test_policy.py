"""The failure policy: one table of (error class, position) → action."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from fakes import CW, EMPTY, NR, REF, RL, RNR, TO, R
from turnout.core.errors import ErrorClass
from turnout.walk.policy import Action, Position, Step, decide

RETRY, NEXT_KEY, NEXT_ENTRY, STOP = Step.RETRY, Step.NEXT_KEY, Step.NEXT_ENTRY, Step.STOP


def at(**facts: Any) -> Position:
    """A position: by default the first of several entries, with tries left and no key pool."""
    base: dict[str, Any] = {"tries_left": 2, "last_entry": False, "single_entry": False}
    return Position(**(base | facts))


MIDDLE = at()
MIDDLE_NO_TRIES = at(tries_left=0)
LAST = at(last_entry=True)
LAST_NO_TRIES = at(last_entry=True, tries_left=0)
SINGLE = at(last_entry=True, single_entry=True)
SINGLE_NO_TRIES = at(last_entry=True, single_entry=True, tries_left=0)
POOL_USABLE = at(rotates=True, other_key_usable=True, other_key_live=True)
POOL_USABLE_NO_TRIES = at(rotates=True, other_key_usable=True, other_key_live=True, tries_left=0)
POOL_COOLING = at(rotates=True, other_key_live=True)  # the other keys live, but cool down
POOL_DEAD = at(rotates=True)  # every other key is dead
POOL_SINGLE_USABLE = at(last_entry=True, single_entry=True, rotates=True, other_key_usable=True, other_key_live=True)


def act(
    step: Step, *, cool_key: bool = False, cool_profile: bool = False, report_key: bool = False, health: bool = False
) -> Action:
    return Action(step=step, cool_key=cool_key, cool_profile=cool_profile, report_key=report_key, health=health)


# (class, position, auth_failure, expected action), from policy.py's table.
TABLE = [
    # retryable: retry the same entry with backoff; with no try left, next entry.
    pytest.param(R, MIDDLE, False, act(RETRY, health=True), id="retryable-retries"),
    pytest.param(R, SINGLE, False, act(RETRY, health=True), id="retryable-single-retries"),
    pytest.param(R, MIDDLE_NO_TRIES, False, act(NEXT_ENTRY, health=True), id="retryable-exhausted-moves-on"),
    pytest.param(R, SINGLE_NO_TRIES, False, act(NEXT_ENTRY, health=True), id="retryable-single-exhausted-moves-on"),
    pytest.param(R, POOL_USABLE, False, act(RETRY, health=True), id="retryable-with-pool-keeps-the-key"),
    # empty: retry with backoff, then move on.
    pytest.param(EMPTY, MIDDLE, False, act(RETRY), id="empty-retries"),
    pytest.param(EMPTY, LAST, False, act(RETRY), id="empty-last-retries"),
    pytest.param(EMPTY, MIDDLE_NO_TRIES, False, act(NEXT_ENTRY), id="empty-exhausted-moves-on"),
    # rate_limited without a pool: cool the profile down and move on when another entry exists ...
    pytest.param(RL, MIDDLE, False, act(NEXT_ENTRY, cool_profile=True), id="rate-limit-moves-on"),
    pytest.param(RL, LAST, False, act(NEXT_ENTRY, cool_profile=True), id="rate-limit-last-of-several-moves-on"),
    pytest.param(RL, MIDDLE_NO_TRIES, False, act(NEXT_ENTRY, cool_profile=True), id="rate-limit-exhausted"),
    # ... and retry with backoff on a single entry, without a cooldown (nothing else could serve meanwhile).
    pytest.param(RL, SINGLE, False, act(RETRY), id="rate-limit-single-retries"),
    pytest.param(RL, SINGLE_NO_TRIES, False, act(NEXT_ENTRY), id="rate-limit-single-exhausted"),
    # rate_limited with a pool: cool that key down, retry at once with another usable key ...
    pytest.param(RL, POOL_USABLE, False, act(NEXT_KEY, cool_key=True), id="rate-limit-next-key"),
    pytest.param(RL, POOL_SINGLE_USABLE, False, act(NEXT_KEY, cool_key=True), id="rate-limit-single-next-key"),
    pytest.param(
        RL, POOL_USABLE_NO_TRIES, False, act(NEXT_ENTRY, cool_key=True), id="rate-limit-next-key-without-tries"
    ),
    # ... and with no usable key left (others cooling or dead) on a walk of several entries: cool the profile.
    pytest.param(RL, POOL_COOLING, False, act(NEXT_ENTRY, cool_key=True, cool_profile=True), id="rate-limit-keys-cool"),
    pytest.param(RL, POOL_DEAD, False, act(NEXT_ENTRY, cool_key=True, cool_profile=True), id="rate-limit-keys-dead"),
    # rate_limited_non_retryable: move on at once, no retry, no cooldown.
    pytest.param(RNR, MIDDLE, False, act(NEXT_ENTRY), id="quota-moves-on"),
    pytest.param(RNR, SINGLE, False, act(NEXT_ENTRY), id="quota-single-moves-on"),
    pytest.param(RNR, POOL_USABLE, False, act(NEXT_ENTRY), id="quota-with-pool-moves-on"),
    # non_retryable: move on at once ...
    pytest.param(NR, MIDDLE, False, act(NEXT_ENTRY), id="client-error-moves-on"),
    pytest.param(NR, SINGLE, False, act(NEXT_ENTRY), id="client-error-single-moves-on"),
    pytest.param(NR, POOL_USABLE, False, act(NEXT_ENTRY), id="client-error-with-pool-keeps-the-key"),
    # ... a rejected key is reported, and another live key of the pool is tried first.
    pytest.param(NR, MIDDLE, True, act(NEXT_ENTRY, report_key=True), id="auth-no-pool-reports-and-moves-on"),
    pytest.param(NR, POOL_USABLE, True, act(NEXT_KEY, report_key=True), id="auth-pool-next-live-key"),
    pytest.param(NR, POOL_COOLING, True, act(NEXT_KEY, report_key=True), id="auth-pool-next-live-cooling-key"),
    pytest.param(NR, POOL_DEAD, True, act(NEXT_ENTRY, report_key=True), id="auth-pool-no-live-key"),
    pytest.param(
        NR, POOL_USABLE_NO_TRIES, True, act(NEXT_ENTRY, report_key=True), id="auth-pool-next-key-without-tries"
    ),
    pytest.param(NR, SINGLE, True, act(NEXT_ENTRY, report_key=True), id="auth-single-reports-and-ends"),
    # context_window: never retry that model; a larger entry: move on; none: stop.
    pytest.param(CW, at(larger_entry_remains=True), False, act(NEXT_ENTRY), id="context-larger-remains"),
    pytest.param(CW, MIDDLE, False, act(STOP), id="context-none-larger-stops"),
    pytest.param(CW, SINGLE, False, act(STOP), id="context-single-stops-with-tries-left"),
    # refusal: stop, never retried nor routed around, unless the profile routes refusals.
    pytest.param(REF, MIDDLE, False, act(STOP), id="refusal-stops"),
    pytest.param(REF, SINGLE, False, act(STOP), id="refusal-single-stops"),
    pytest.param(REF, at(refusal_fallback=True), False, act(NEXT_ENTRY), id="refusal-fallback-moves-on"),
    pytest.param(REF, at(refusal_fallback=True, last_entry=True), False, act(NEXT_ENTRY), id="refusal-fallback-last"),
    # a try that probes a half-open breaker gets no second try, whatever the class.
    pytest.param(R, at(probing=True), False, act(NEXT_ENTRY, health=True), id="retryable-probe-moves-on"),
    pytest.param(TO, at(last_entry=True, probing=True), False, act(NEXT_ENTRY, health=True), id="timeout-probe"),
    pytest.param(RL, at(single_entry=True, last_entry=True, probing=True), False, act(NEXT_ENTRY), id="rl-probe"),
    # timeout: move on; retried only on the last entry.
    pytest.param(TO, MIDDLE, False, act(NEXT_ENTRY, health=True), id="timeout-moves-on"),
    pytest.param(TO, POOL_USABLE, False, act(NEXT_ENTRY, health=True), id="timeout-with-pool-moves-on"),
    pytest.param(TO, LAST, False, act(RETRY, health=True), id="timeout-last-of-several-retries"),
    pytest.param(TO, SINGLE, False, act(RETRY, health=True), id="timeout-single-retries"),
    pytest.param(TO, LAST_NO_TRIES, False, act(NEXT_ENTRY, health=True), id="timeout-last-exhausted"),
]


@pytest.mark.parametrize(("error_class", "position", "auth_failure", "expected"), TABLE)
def test_decide_table(error_class: ErrorClass, position: Position, auth_failure: bool, expected: Action) -> None:
    """Each (error class, position) gets exactly the step and state updates of policy.py's table."""
    assert decide(error_class, position, auth_failure=auth_failure) == expected


def test_table_covers_every_error_class() -> None:
    """No error class is left out of the table (a new class needs its own rows)."""
    covered = {p.values[0] for p in TABLE}
    assert covered == set(ErrorClass)


@pytest.mark.parametrize("error_class", [c for c in ErrorClass if c is not NR])
def test_auth_failure_is_only_acted_on_for_non_retryable(error_class: ErrorClass) -> None:
    """Only a non_retryable failure reports its key; the flag changes nothing for other classes."""
    for position in (MIDDLE, SINGLE, POOL_USABLE, POOL_DEAD):
        assert decide(error_class, position, auth_failure=True) == decide(error_class, position)


def test_no_try_left_turns_retry_and_key_switch_into_a_move_keeping_state_updates() -> None:
    """With no try left a retry or key switch becomes next_entry; its cooldown, report and health flags stay."""
    for cls, position, auth in [(R, MIDDLE, False), (RL, POOL_USABLE, False), (NR, POOL_USABLE, True)]:
        with_tries = decide(cls, position, auth_failure=auth)
        exhausted = decide(cls, position._replace(tries_left=0), auth_failure=auth)
        assert with_tries.step in (RETRY, NEXT_KEY)
        assert exhausted == act(
            NEXT_ENTRY,
            cool_key=with_tries.cool_key,
            cool_profile=with_tries.cool_profile,
            report_key=with_tries.report_key,
            health=with_tries.health,
        )
        assert decide(cls, position._replace(tries_left=-1), auth_failure=auth) == exhausted


def test_rate_limit_on_a_single_entry_whose_pool_has_no_usable_key_diverges_from_spec() -> None:
    """Pins today's behaviour, which the reliability rules describe otherwise (reported for review).

    The rules say a rate limit on a single entry is retried with backoff, and cool the profile down only
    when another entry exists; policy.py moves on (ending the walk) and cools the profile down whenever a
    key pool has no other usable key, also on a single-entry walk.
    """
    single_pool_cooling = at(last_entry=True, single_entry=True, rotates=True, other_key_live=True)
    assert decide(RL, single_pool_cooling) == act(NEXT_ENTRY, cool_key=True, cool_profile=True)


def test_no_try_left_or_a_probe_moves_on_from_what_tries_left_would_do_for_every_input() -> None:
    """Every class and position: a retry or key switch with no try left or on a probe moves on; nothing else changes."""
    flags = (False, True)
    for cls, tries_left, auth in itertools.product(ErrorClass, (-1, 0, 1, 2), flags):
        for facts in itertools.product(flags, repeat=8):
            last, single, rotates, usable, live, refusal, larger, probing = facts
            position = Position(tries_left, last, single, rotates, usable, live, refusal, larger, probing)
            action = decide(cls, position, auth_failure=auth)
            free = decide(cls, position._replace(tries_left=2, probing=False), auth_failure=auth)
            if tries_left > 0 and not probing:
                assert action == free
            elif free.step in (RETRY, NEXT_KEY):
                assert action == free._replace(step=NEXT_ENTRY)
            else:
                assert action == free
