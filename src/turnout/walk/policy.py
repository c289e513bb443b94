"""What the walk does after a failed try: one pure decision, shared by the walk and the stream open.

:func:`decide` takes what the classifier said about a failure and where the try stands, and returns an
:class:`Action`: the next step, and the state to update on the way (cool a key or the profile down, report
a rejected key). It reads no clock and touches no store, so the whole policy is one table, tested on its
own; :mod:`turnout.walk.reliable` applies the action.

==========================  ===========================================================================
class                       step (and state updated)
==========================  ===========================================================================
retryable                   retry the same entry after a backoff (raised to the Retry-After hint)
rate_limited                key pool: cool that key down; retry at once with another usable key, else
                            cool the profile down and move on; no pool and other entries: cool the
                            profile down and move on; a single entry: retry after the backoff
rate_limited_non_retryable  move on at once
non_retryable               move on at once; a rejected key is reported (the key store decides when it is
                            dead) and the next live key of the pool is tried
context_window              move on to a larger entry; none left: stop (``ContextWindowExceeded``)
refusal                     stop (``RefusalError``), unless the profile routes refusals: move on
timeout                     move on; retried only on the last entry
empty                       retry after the backoff, then move on
==========================  ===========================================================================

A retry or a key switch with no try left on the entry, on a try that probes a half-open circuit breaker, or
after a failure that would repeat on the same entry (a response over its size bound: the next try would fetch the
same answer), becomes a move to the next entry. A ``retryable`` or ``timeout`` failure is also a *health* failure:
it counts towards the entry's circuit breaker (:mod:`turnout.walk.breaker`), once per call; no other class does.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from turnout.core.errors import ErrorClass


class Step(StrEnum):
    """What the walk does next."""

    RETRY = "retry"
    """Try the same entry again, after the backoff (raised to the retry hint)."""
    NEXT_KEY = "next_key"
    """Try the same entry again at once, with another key of its pool."""
    NEXT_ENTRY = "next_entry"
    """Leave this entry; the walk goes on with the next one."""
    STOP = "stop"
    """End the walk with this failure (a refusal, or no larger context window left)."""


class Position(NamedTuple):
    """Where a failed try stands, as far as the policy needs to know (a named tuple: one per failed try).

    Attributes:
        tries_left: Tries the entry has after this one.
        last_entry: No entry follows this one.
        single_entry: The walk has only this entry.
        rotates: The entry's profile has a key pool.
        other_key_usable: Another key of the pool is neither dead nor cooling down.
        other_key_live: Another key of the pool is not dead.
        refusal_fallback: The profile routes refusals to the next entry.
        larger_entry_remains: A later entry is not known to be too small for the request.
        probing: The try probes the entry's half-open circuit breaker (it gets no second try).
    """

    tries_left: int
    last_entry: bool
    single_entry: bool
    rotates: bool = False
    other_key_usable: bool = False
    other_key_live: bool = False
    refusal_fallback: bool = False
    larger_entry_remains: bool = False
    probing: bool = False


class Action(NamedTuple):
    """The policy's answer to one failure (a named tuple: one per failed try).

    Attributes:
        step: What the walk does next.
        cool_key: Cool the key of the failed try down (for the retry hint, else the default).
        cool_profile: Cool the whole profile down.
        report_key: The provider rejected the key: report it to the key store.
        health: The failure says the entry is unhealthy: count it towards its circuit breaker.
    """

    step: Step
    cool_key: bool = False
    cool_profile: bool = False
    report_key: bool = False
    health: bool = False


# Every action the policy can take, made once.
_RETRY_UNHEALTHY = Action(step=Step.RETRY, health=True)
_MOVE_ON_UNHEALTHY = Action(step=Step.NEXT_ENTRY, health=True)
_RETRY = Action(step=Step.RETRY)
_NEXT_ENTRY = Action(step=Step.NEXT_ENTRY)
_STOP = Action(step=Step.STOP)
_SWITCH_KEY_COOLING_IT = Action(step=Step.NEXT_KEY, cool_key=True)
_MOVE_ON_COOLING_KEY_AND_PROFILE = Action(step=Step.NEXT_ENTRY, cool_key=True, cool_profile=True)
_MOVE_ON_COOLING_PROFILE = Action(step=Step.NEXT_ENTRY, cool_profile=True)
_SWITCH_KEY_REPORTING_IT = Action(step=Step.NEXT_KEY, report_key=True)
_MOVE_ON_REPORTING_KEY = Action(step=Step.NEXT_ENTRY, report_key=True)


def decide(error_class: ErrorClass, at: Position, *, auth_failure: bool = False, replay: bool = True) -> Action:
    """The action after a try failed with ``error_class`` at ``at``.

    Args:
        error_class: What the failure means (from :mod:`turnout.core.classify`).
        at: Where the try stands.
        auth_failure: The provider rejected the credential itself (a typed fact of the error).
        replay: Whether trying the same entry again may answer differently (False: a response over its bound).
    """
    # The usual class first.
    cls = error_class
    if cls is ErrorClass.RATE_LIMITED:
        if at.rotates:
            action = _SWITCH_KEY_COOLING_IT if at.other_key_usable else _MOVE_ON_COOLING_KEY_AND_PROFILE
        elif at.single_entry:
            action = _RETRY
        else:
            return _MOVE_ON_COOLING_PROFILE
    elif cls is ErrorClass.RETRYABLE:
        action = _RETRY_UNHEALTHY
    elif cls is ErrorClass.EMPTY:
        action = _RETRY
    elif cls is ErrorClass.RATE_LIMITED_NON_RETRYABLE:
        return _NEXT_ENTRY
    elif cls is ErrorClass.NON_RETRYABLE:
        if not auth_failure:
            return _NEXT_ENTRY
        action = _SWITCH_KEY_REPORTING_IT if at.rotates and at.other_key_live else _MOVE_ON_REPORTING_KEY
    elif cls is ErrorClass.CONTEXT_WINDOW:
        return _NEXT_ENTRY if at.larger_entry_remains else _STOP
    elif cls is ErrorClass.REFUSAL:
        return _NEXT_ENTRY if at.refusal_fallback else _STOP
    elif cls is ErrorClass.TIMEOUT:
        action = _RETRY_UNHEALTHY if at.last_entry else _MOVE_ON_UNHEALTHY
    else:  # pragma: no cover - ErrorClass is closed
        raise AssertionError(f"unhandled error class {cls!r}")
    # A retry or a key switch with no try left, or on a probe, becomes a move on (its state updates kept).
    if (at.tries_left <= 0 or at.probing or not replay) and (action.step is Step.RETRY or action.step is Step.NEXT_KEY):
        return action._replace(step=Step.NEXT_ENTRY)
    return action
