"""A flaky chain behind breakers: learning across calls never costs a call the chain could serve, and never flaps."""

from __future__ import annotations

import pytest
from bench.flaky import NON_STREAMING_MARGIN, OVERALL_MARGIN, TRANSITIONS_PER_MIN, FlakyRun, draw, run

from fakes import FakeClock


async def flaky(seed: int, *, breakers: bool, stream: bool, calls: int) -> FlakyRun:
    clock = FakeClock()
    return await run(seed, breakers=breakers, stream=stream, calls=calls, concurrency=8, clock=clock, sleep=clock.sleep)


def test_the_draws_are_seeded_and_fail_about_a_third_of_attempts() -> None:
    """Each attempt's fault is fixed by its seed, call, profile and number; about 35 % fail, all three kinds occur."""
    faults = [draw(1, "openai.a", call, 1) for call in range(4000)]
    assert faults == [draw(1, "openai.a", call, 1) for call in range(4000)]
    assert 0.32 < sum(f is not None for f in faults) / len(faults) < 0.38
    assert {f for f in faults if f is not None} == {"5xx", "reset", "timeout"}


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
async def test_a_flaky_chain_serves_as_many_calls_with_breakers_as_without(stream: bool) -> None:
    """Three entries failing 35 % of attempts, same faults: breakers serve within the margin and never flap."""
    on = await flaky(3, breakers=True, stream=stream, calls=3000)
    off = await flaky(3, breakers=False, stream=stream, calls=3000)
    margin = NON_STREAMING_MARGIN if not stream else OVERALL_MARGIN
    assert off.share > 99.0  # the plain walk serves nearly every call: the chain could serve them
    assert on.share >= off.share - margin
    assert on.seconds > 60.0  # simulated time (the fake clock moves by the adapters' delays and the backoffs)
    assert on.most_per_minute <= TRANSITIONS_PER_MIN
