"""The ``now`` a schedule is stepped with: finite readings give good delays, others are refused."""

from __future__ import annotations

import decimal
import math
import random
from typing import Any, cast

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from schedules import (
    MAX_DELAY,
    Schedule,
    as_schedule,
    decorrelated,
    elapsed,
    exponential,
    fibonacci,
    fixed,
    forever,
    from_delays,
    from_step_options,
    linear,
    recurs,
    spaced,
)
from schedules.testing import schedules

NON_FINITE = [math.nan, math.inf, -math.inf]
SEEDS = st.integers(0, 2**32 - 1)
EXTREMES = [sign * size for sign in (1, -1) for size in (1.7976931348623157e308, 1e308, 5e-324)]
ANY_FINITE = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(EXTREMES)
# A monotonic clock: a start (monotonic or epoch seconds) and the time each attempt takes.
STARTS = st.floats(-1e12, 1e12)
TOOK = st.lists(st.floats(0.0, 1e6), max_size=12)


class _Counting:
    """A hand-written step contract that never reads ``now``."""

    def __repr__(self) -> str:
        # Test ids name it alike in every process (pytest-xdist compares them).
        return "_Counting()"

    def initial(self) -> int:
        return 0

    def step(self, now: float, input: object, state: int, rng: object) -> tuple[int, int, float]:  # noqa: A002
        return state + 1, state, 1.0


EVERY_KIND: list[Schedule[Any, Any]] = [
    forever(),
    recurs(3),
    spaced(1),
    fixed(1),
    exponential(1),
    fibonacci(1),
    linear(1),
    from_delays(1, 2),
    decorrelated(1, 10),
    elapsed(),
    from_step_options(retries=3, backoff="exp", backoff_ms=100, jitter=True),
    as_schedule(_Counting()),
    spaced(1).within(10),
    spaced(1).reset_after(5),
    spaced(1).modify_delay(lambda info: info.elapsed),
    spaced(1).add_delay(lambda info: info.now),
]


def steps(
    schedule: Schedule[Any, Any], nows: list[float], rng: random.Random
) -> tuple[Any, list[float | None]]:
    """Step *schedule* at each of *nows* until it stops; return the state and the delays."""
    state, delays = schedule.initial(), []
    for now in nows:
        state, _, delay = schedule.step(now, None, state, rng)
        delays.append(delay)
        if delay is None:
            break
    return state, delays


def good(delay: float | None) -> bool:
    """A delay the contract allows: ``None`` or finite seconds in ``[0, MAX_DELAY]``."""
    return delay is None or 0.0 <= delay <= MAX_DELAY


@settings(max_examples=300)
@given(schedules(), STARTS, TOOK, SEEDS)
def test_a_monotonic_clock_never_gives_a_bad_delay(
    schedule: Schedule[Any, Any], start: float, took: list[float], seed: int
) -> None:
    """Under a monotonic clock every delay is None or in [0, MAX_DELAY]: no NaN, inf or < 0."""
    nows = [start + sum(took[:index]) for index in range(len(took) + 1)]

    _, delays = steps(schedule, nows, random.Random(seed))

    assert [] == [delay for delay in delays if not good(delay)]


@settings(max_examples=300)
@given(schedules(), st.lists(ANY_FINITE, min_size=1, max_size=12), SEEDS)
@example(fixed(1), [1.7e308, -1.7e308], 0)
@example(fixed(1).within(10), [1e308, -1e308, 1e308], 0)
def test_any_finite_readings_never_give_a_bad_delay(
    schedule: Schedule[Any, Any], nows: list[float], seed: int
) -> None:
    """Finite readings in any order and size (a clock jumping by 1e308) give only good delays."""
    _, delays = steps(schedule, nows, random.Random(seed))

    assert [] == [delay for delay in delays if not good(delay)]


@settings(max_examples=300)
@given(schedules(), st.lists(ANY_FINITE, max_size=6), st.sampled_from(NON_FINITE), SEEDS)
def test_a_non_finite_now_is_refused_alike_by_every_schedule(
    schedule: Schedule[Any, Any], before: list[float], bad: float, seed: int
) -> None:
    """At any step, NaN or an infinite ``now`` raises the same ValueError naming ``now``."""
    rng = random.Random(seed)
    state, _ = steps(schedule, before, rng)

    with pytest.raises(ValueError) as caught:  # noqa: PT011 - the message is checked below
        schedule.step(bad, None, state, rng)

    assert f"now must be a finite number of seconds, got {bad!r}" == str(caught.value)


@pytest.mark.parametrize("schedule", EVERY_KIND, ids=repr)
@pytest.mark.parametrize("bad", NON_FINITE, ids=repr)
@pytest.mark.parametrize("first", [True, False], ids=["first-step", "later-step"])
def test_each_kind_refuses_a_non_finite_now(
    schedule: Schedule[Any, Any], bad: float, first: bool
) -> None:
    """Every constructor and every combinator that reads ``now`` refuses NaN and ±inf."""
    rng = random.Random(0)
    state, _ = steps(schedule, [] if first else [0.0, 1.0], rng)

    with pytest.raises(ValueError, match=r"^now must be a finite number of seconds, got "):
        schedule.step(bad, None, state, rng)


@pytest.mark.parametrize("schedule", EVERY_KIND, ids=repr)
def test_an_int_beyond_float_range_is_refused_as_infinite(schedule: Schedule[Any, Any]) -> None:
    """``now = 10**400`` (an int no float holds) is refused as an infinite reading is."""
    with pytest.raises(ValueError, match=r"^now must be a finite number of seconds, got 1000"):
        schedule.step(10**400, None, schedule.initial(), random.Random(0))


@pytest.mark.parametrize("schedule", EVERY_KIND, ids=repr)
@pytest.mark.parametrize("odd", [None, "5", b"5", [5.0], decimal.Decimal(5)], ids=repr)
def test_a_now_that_is_not_a_number_is_a_type_error(
    schedule: Schedule[Any, Any], odd: object
) -> None:
    """``now`` of another type (None, str, bytes, list, Decimal) is a TypeError naming it."""
    with pytest.raises(TypeError) as caught:
        schedule.step(cast("float", odd), None, schedule.initial(), random.Random(0))

    assert f"now must be a number of seconds (int or float), got {odd!r}" == str(caught.value)


@pytest.mark.parametrize("schedule", EVERY_KIND, ids=repr)
def test_finite_int_and_float_readings_are_accepted(schedule: Schedule[Any, Any]) -> None:
    """Ints, floats and negative readings (epoch or monotonic seconds) are all valid ``now``."""
    _, delays = steps(schedule, [-5, -4.5, 0, 2**53, 2.0**60], random.Random(0))

    assert all(good(delay) for delay in delays)
