"""Property: every runner attempts at exactly the times ``schedules.simulate`` predicts, with
attempts that take time on a clock that may start far from 0."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effects import AsyncEffect, Effect, retry, use_clock, use_random
from effects.testing import VirtualClock
from schedules import Schedule, simulate
from schedules.testing import schedules

MAX_TRIES = 12


class FailedError(Exception):
    """The error of attempt ``n`` (its only argument)."""


Runner = Callable[[Schedule[object, object], list[FailedError], VirtualClock], list[float]]


def _raiser(
    errors: list[FailedError], clock: VirtualClock, starts: list[float]
) -> Callable[[], None]:
    def attempt() -> None:
        starts.append(clock.now())
        _take_time(clock, len(starts))
        raise errors[len(starts) - 1]

    return attempt


def _took(attempt: int) -> float:
    """How long attempt *attempt* takes: uneven, so time-based schedules see real gaps."""
    return (attempt * 0.37) % 1.3


def _take_time(clock: VirtualClock, attempt: int) -> None:
    clock.advance(_took(attempt))


def run_effect(
    schedule: Schedule[object, object], errors: list[FailedError], clock: VirtualClock
) -> list[float]:
    starts: list[float] = []
    attempt = _raiser(errors, clock, starts)
    Effect.attempt(attempt, catch=FailedError).pipe(retry(schedule, times=MAX_TRIES - 1)).run()
    return starts


def run_function(
    schedule: Schedule[object, object], errors: list[FailedError], clock: VirtualClock
) -> list[float]:
    starts: list[float] = []
    wrapped = retry(schedule, times=MAX_TRIES - 1, on=FailedError)(_raiser(errors, clock, starts))
    with pytest.raises(FailedError):
        wrapped()
    return starts


def run_attempts(
    schedule: Schedule[object, object], errors: list[FailedError], clock: VirtualClock
) -> list[float]:
    starts: list[float] = []
    attempt_once = _raiser(errors, clock, starts)

    def block() -> None:
        for attempt in retry(schedule, times=MAX_TRIES - 1, on=FailedError).attempts():
            with attempt:
                attempt_once()

    with pytest.raises(FailedError):
        block()
    return starts


def run_asyncio_effect(
    schedule: Schedule[object, object], errors: list[FailedError], clock: VirtualClock
) -> list[float]:
    starts: list[float] = []

    async def attempt() -> None:
        starts.append(clock.now())
        _take_time(clock, len(starts))
        raise errors[len(starts) - 1]

    effect = AsyncEffect.attempt(attempt, catch=FailedError).retry(schedule, times=MAX_TRIES - 1)
    asyncio.run(effect.run())
    return starts


def run_trio_function(
    schedule: Schedule[object, object], errors: list[FailedError], clock: VirtualClock
) -> list[float]:
    starts: list[float] = []

    @retry(schedule, times=MAX_TRIES - 1, on=FailedError)
    async def attempt() -> None:
        starts.append(clock.now())
        _take_time(clock, len(starts))
        raise errors[len(starts) - 1]

    async def main() -> None:
        with pytest.raises(FailedError):
            await attempt()

    trio.run(main)
    return starts


@pytest.mark.parametrize(
    "runner",
    [run_effect, run_function, run_attempts, run_asyncio_effect, run_trio_function],
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=schedules(max_delay=30.0),
    seed=st.integers(0, 2**32 - 1),
    start=st.floats(0.0, 1000.0) | st.floats(1e5, 1e9),
)
def test_attempt_times_match_the_simulation(
    runner: Runner, schedule: Schedule[object, object], seed: int, start: float
) -> None:
    """Under a VirtualClock and the same seed, attempts start exactly when simulate says."""
    errors = [FailedError(n) for n in range(1, MAX_TRIES + 1)]
    composed = retry(schedule, times=MAX_TRIES - 1).composed
    steps = simulate(composed, errors, seed=seed, start=start, attempt_time=_took)
    expected = [s.started for s in steps]
    clock = VirtualClock(start=start)
    with use_clock(clock), use_random(random.Random(seed)):
        assert expected == runner(schedule, errors, clock)
    assert [s.delay for s in steps if s.delay] == clock.sleeps
