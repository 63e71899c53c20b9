"""jittered, max_delay, add_delay and modify_delay: how they reshape delays."""

from __future__ import annotations

import math

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


def test_modify_delay_results_are_clamped() -> None:
    """Negative results become 0 and results above MAX_DELAY become MAX_DELAY."""
    assert [0.0] == spaced(1).modify_delay(lambda info: -5.0).delays(1)
    assert [MAX_DELAY] == spaced(1).modify_delay(lambda info: math.inf).delays(1)


def test_modify_delay_nan_is_an_error() -> None:
    """A NaN delay from a user function raises ValueError naming the function."""

    def broken(info: StepInfo[object, int]) -> float:
        return math.nan

    with pytest.raises(ValueError, match="broken"):
        spaced(1).modify_delay(broken).delays(1)
