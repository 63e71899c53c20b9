"""jittered, max_delay, add_delay and modify_delay: how they reshape delays."""

from __future__ import annotations

import math
from typing import Any

import pytest

from schedules import MAX_DELAY, StepInfo, exponential, recurs, simulate, spaced
from tests.schedules._support import ConstantRandom, SequenceRandom, delays_of, outputs, run


def test_jittered_scales_by_a_uniform_factor() -> None:
    """With r = 0, 0.5 and 0.75 the default jitter scales by 0.8, 1.0 and 1.1."""
    steps = run(spaced(10).jittered(), 3, SequenceRandom(0.0, 0.5, 0.75))
    assert [8.0, 10.0, 11.0] == pytest.approx(delays_of(steps))


def test_jittered_keeps_the_output() -> None:
    """Jitter changes delays, never outputs."""
    assert [1.0, 2.0, 4.0] == outputs(exponential(1).jittered(min=0.1, max=5), 3)


def test_jittered_bounds_are_used() -> None:
    """jittered(min=1, max=3) with r = 0.5 doubles the delay."""
    assert [4.0] == delays_of(run(spaced(2).jittered(min=1, max=3), 1, ConstantRandom(0.5)))


def test_jittered_at_max_delay_stays_clamped() -> None:
    """Jitter above 1 of a MAX_DELAY delay is still MAX_DELAY."""
    steps = run(spaced("100 weeks").jittered(min=1.5, max=2), 2, ConstantRandom(0.5))
    assert [MAX_DELAY, MAX_DELAY] == delays_of(steps)


@pytest.mark.parametrize(
    ("low", "high", "name"),
    [(1.5, 1.0, "min <= max"), (-0.1, 1.0, "min"), (0.5, math.inf, "max"), (math.nan, 1, "min")],
)
def test_jittered_refuses_bad_bounds(low: float, high: float, name: str) -> None:
    """Negative, infinite or NaN bounds, or min > max, raise ValueError naming them."""
    with pytest.raises(ValueError, match=name):
        spaced(1).jittered(min=low, max=high)


def test_max_delay_caps() -> None:
    """max_delay(3) caps 1, 2, 4, 8 to 1, 2, 3, 3."""
    assert [1.0, 2.0, 3.0, 3.0] == exponential(1).max_delay("3s").delays(4)


def test_add_delay_adds_a_duration() -> None:
    """add_delay('500ms') adds half a second to each delay."""
    assert [1.5, 2.5, 4.5] == exponential(1).add_delay("500ms").delays(3)


def test_add_delay_with_a_function_sees_the_attempt() -> None:
    """add_delay(f) adds f(info); info.attempt is 1-based."""
    assert [1.0, 2.0, 3.0] == spaced(0).add_delay(lambda info: info.attempt).delays(3)


def test_modify_delay_replaces_the_delay() -> None:
    """modify_delay(f) replaces each delay by f(info)."""
    assert [2.0, 4.0, 8.0] == exponential(1).modify_delay(lambda info: info.delay * 2).delays(3)


def test_modify_delay_info_fields() -> None:
    """StepInfo carries attempt, input, output, delay, elapsed since the first step, and now."""
    seen: list[StepInfo[object, float]] = []

    def record(info: StepInfo[object, float]) -> float:
        seen.append(info)
        return info.delay

    simulate(exponential(1).modify_delay(record), ["a", "b", "c"], start=10.0)
    assert [
        StepInfo(1, "a", 1.0, 1.0, 0.0, 10.0),
        StepInfo(2, "b", 2.0, 2.0, 1.0, 11.0),
        StepInfo(3, "c", 4.0, 4.0, 3.0, 13.0),
    ] == seen


def test_modify_delay_is_not_called_when_stopping() -> None:
    """The delay function runs only when the schedule would continue."""
    calls: list[int] = []

    def record(info: StepInfo[object, int]) -> float:
        calls.append(info.attempt)
        return 1.0

    recurs(2).modify_delay(record).delays()
    assert [1, 2] == calls


# What a user's delay function may return, and what becomes of it (decision: clamp what has a
# place on [0, MAX_DELAY], refuse NaN and non-numbers as the bugs they are).
CLAMPED_RESULTS: list[tuple[object, float]] = [
    (-5.0, 0.0),
    (-0.0, 0.0),
    (-math.inf, 0.0),
    (-(10**400), 0.0),
    (2.5, 2.5),
    (3, 3.0),
    (MAX_DELAY * 2, MAX_DELAY),
    (math.inf, MAX_DELAY),
    (10**400, MAX_DELAY),
]


@pytest.mark.parametrize(("result", "expected"), CLAMPED_RESULTS, ids=repr)
def test_modify_delay_results_are_clamped(result: object, expected: float) -> None:
    """modify_delay: negative results become 0, results above MAX_DELAY become MAX_DELAY."""
    delays = spaced(1).modify_delay(lambda info: result).delays(2)  # type: ignore[arg-type,return-value]
    assert [expected, expected] == delays
    assert all(type(d) is float and math.copysign(1.0, d) == 1.0 for d in delays)


@pytest.mark.parametrize(("result", "expected"), CLAMPED_RESULTS, ids=repr)
def test_add_delay_function_results_are_clamped_before_adding(
    result: object, expected: float
) -> None:
    """add_delay(f): f's result is clamped to [0, MAX_DELAY], then added; the sum is clamped too."""
    delays = spaced(1).add_delay(lambda info: result).delays(1)  # type: ignore[arg-type,return-value]
    assert [min(1.0 + expected, MAX_DELAY)] == delays


def broken(info: StepInfo[object, int]) -> float:
    """A delay function with a bug: 0 / 0 in floats."""
    return math.nan


@pytest.mark.parametrize(
    "wrap", [lambda s: s.modify_delay(broken), lambda s: s.add_delay(broken)], ids=["modify", "add"]
)
def test_nan_from_a_delay_function_is_an_error(wrap: Any) -> None:
    """A NaN delay from a user function raises ValueError naming the function and the value."""
    with pytest.raises(ValueError, match=r"broken returned nan"):
        wrap(spaced(1)).delays(1)


@pytest.mark.parametrize("result", ["1s", None, True, [1.0]], ids=repr)
@pytest.mark.parametrize("name", ["modify_delay", "add_delay"])
def test_non_numbers_from_a_delay_function_are_a_type_error(name: str, result: object) -> None:
    """A delay function must return int or float seconds; anything else names it and the value."""

    def sloppy(info: StepInfo[object, int]) -> float:
        return result  # type: ignore[return-value]

    with pytest.raises(TypeError) as caught:
        getattr(spaced(1), name)(sloppy).delays(1)
    assert (True, True) == ("sloppy" in str(caught.value), repr(result) in str(caught.value))


def test_delay_functions_are_not_called_for_a_stopping_step() -> None:
    """A stopping step never calls the function, so a broken function on it cannot raise."""
    assert [] == recurs(0).modify_delay(broken).delays()
