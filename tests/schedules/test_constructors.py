"""Each constructor's delays and outputs, against hand-computed sequences."""

from __future__ import annotations

import pytest

from schedules import (
    decorrelated,
    elapsed,
    exponential,
    fibonacci,
    forever,
    from_delays,
    linear,
    once,
    recurs,
    simulate,
    spaced,
    stop,
)
from tests.schedules._support import SequenceRandom, delays_of, outputs, run


def test_forever_never_stops_with_no_delay_counting_from_zero() -> None:
    """forever() waits 0 every time and outputs 0, 1, 2, ..."""
    assert [0.0] * 5 == forever().delays(5)
    assert [0, 1, 2, 3, 4] == outputs(forever(), 5)


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_recurs_gives_exactly_n_recurrences(n: int) -> None:
    """recurs(n) continues exactly n times, with no delay, then stops."""
    assert [0.0] * n == recurs(n).delays()


def test_recurs_outputs_count_including_the_stopping_step() -> None:
    """recurs(3) outputs 0, 1, 2 and then 3 on the step that stops it."""
    assert [0, 1, 2, 3] == outputs(recurs(3), 10)


def test_recurs_zero_stops_at_once() -> None:
    """recurs(0) stops on its first step."""
    assert [(0, None, 0.0)] == run(recurs(0), 5, None)


def test_once_and_stop_are_recurs_one_and_zero() -> None:
    """once() is recurs(1) and stop() is recurs(0), equal values."""
    assert (recurs(1), recurs(0)) == (once(), stop())
    assert ([0.0], []) == (once().delays(), stop().delays())


def test_spaced_waits_the_same_each_time() -> None:
    """spaced(d) waits d every time and counts its steps."""
    assert [1.5, 1.5, 1.5] == spaced("1.5s").delays(3)
    assert [0, 1, 2] == outputs(spaced(1.5), 3)


def test_exponential_grows_by_factor_and_outputs_the_delay() -> None:
    """exponential(1, 3) waits 1, 3, 9, 27 and outputs each delay."""
    assert [1.0, 3.0, 9.0, 27.0] == exponential(1, 3).delays(4)
    assert [1.0, 3.0, 9.0, 27.0] == outputs(exponential(1, 3), 4)


def test_exponential_seed_policy_example() -> None:
    """exponential('250ms') with the default factor 2 waits 0.25, 0.5, 1 and 2 seconds."""
    assert [0.25, 0.5, 1.0, 2.0] == exponential("250ms").delays(4)


def test_exponential_with_factor_below_one_shrinks() -> None:
    """A factor below 1 makes the delays shrink toward 0."""
    assert [8.0, 4.0, 2.0, 1.0] == exponential(8, 0.5).delays(4)


def test_fibonacci_delays() -> None:
    """fibonacci(one) waits one, one, 2, 3, 5, 8, 13 times one and outputs each delay."""
    assert [2.0, 2.0, 4.0, 6.0, 10.0, 16.0, 26.0] == fibonacci(2).delays(7)
    assert [2.0, 2.0, 4.0] == outputs(fibonacci(2), 3)


def test_linear_delays() -> None:
    """linear(base) waits base, 2*base, 3*base, ..."""
    assert [0.5, 1.0, 1.5, 2.0] == linear("500ms").delays(4)
    assert [0.5, 1.0] == outputs(linear(0.5), 2)


def test_from_delays_gives_exactly_those_then_stops() -> None:
    """from_delays(1, 2, 3) waits 1, 2, 3, then stops with output 0.0."""
    assert [1.0, 2.0, 3.0] == from_delays(1, "2s", 3).delays()
    assert [1.0, 2.0, 3.0, 0.0] == outputs(from_delays(1, 2, 3), 10)


def test_from_delays_of_nothing_stops_at_once() -> None:
    """from_delays() with no delays never recurs."""
    assert [] == from_delays().delays()


def test_decorrelated_follows_the_aws_formula() -> None:
    """Each delay is min(cap, base + r * (3 * previous - base)), the first previous being base."""
    steps = run(decorrelated(1, 4), 5, SequenceRandom(0.5))
    # 1 + .5 * (3 - 1) = 2; 1 + .5 * (6 - 1) = 3.5; 1 + .5 * (10.5 - 1) = 5.75 -> cap 4; then 4.
    assert [2.0, 3.5, 4.0, 4.0, 4.0] == delays_of(steps)
    assert [2.0, 3.5, 4.0, 4.0, 4.0] == [output for output, _, _ in steps]


def test_decorrelated_at_r_zero_waits_base() -> None:
    """With r = 0 every delay is base."""
    assert [0.1, 0.1, 0.1] == delays_of(run(decorrelated(0.1, 10), 3, SequenceRandom(0.0)))


def test_elapsed_outputs_seconds_since_the_first_step() -> None:
    """elapsed() never waits and outputs the time since its first step, whatever the start."""
    steps = run(elapsed(), 4, None, durations=[0.5, 1.0, 2.0, 4.0], start=100.0)
    assert [0.0, 1.0, 3.0, 7.0] == [output for output, _, _ in steps]
    assert [0.0, 0.0, 0.0, 0.0] == delays_of(steps)


def test_elapsed_with_spaced_counts_the_waits() -> None:
    """Combined with spaced(2), elapsed outputs 0, 2, 4."""
    got = [step.output for step in simulate(elapsed() & spaced(2), [None] * 3)]
    assert [(0.0, 0), (2.0, 1), (4.0, 2)] == got
