"""delays() and simulate(): pure simulation, seeds, and the guard against endless schedules."""

from __future__ import annotations

import pytest

from schedules import SimulatedStep, exponential, fixed, forever, recurs, simulate, spaced
from tests.schedules._support import ConstantRandom


def test_delays_stop_with_the_schedule() -> None:
    """delays() without n lists every delay of a finite schedule."""
    assert [1.0, 2.0, 4.0] == exponential(1).times(3).delays()


def test_delays_n_truncates() -> None:
    """delays(n) gives at most n delays."""
    assert [1.0, 2.0] == exponential(1).delays(2)
    assert [] == exponential(1).delays(0)


def test_delays_of_an_endless_schedule_without_n_is_an_error() -> None:
    """delays() of an endless schedule raises ValueError instead of looping forever."""
    with pytest.raises(ValueError, match="did not stop"):
        forever().delays()


def test_delays_refuses_negative_n() -> None:
    """delays(-1) raises ValueError naming n."""
    with pytest.raises(ValueError, match="n must be"):
        spaced(1).delays(-1)


def test_delays_input_reaches_the_schedule() -> None:
    """The input argument is given to every step."""
    assert [] == forever().while_input(lambda e: e == "retry").delays(3, input="fatal")
    assert [0.0] * 3 == forever().while_input(lambda e: e == "retry").delays(3, input="retry")


def test_seeded_delays_repeat_and_differ_by_seed() -> None:
    """The same seed gives the same jittered delays; another seed gives others."""
    policy = exponential("250ms").jittered().times(6)
    assert policy.delays(seed=42) == policy.delays(seed=42)
    assert policy.delays(seed=42) != policy.delays(seed=43)


def test_simulate_records_every_step() -> None:
    """simulate gives attempt, time, input, output and delay for each step, ending at None."""
    expected = [
        SimulatedStep(1, 10.0, "a", 0, 2.0, 10.0),
        SimulatedStep(2, 12.0, "b", 1, 2.0, 12.0),
        SimulatedStep(3, 14.0, "c", 2, None, 14.0),
    ]
    assert expected == simulate(spaced(2).times(2), ["a", "b", "c", "d"], start=10.0)


def test_simulate_stops_when_inputs_run_out() -> None:
    """simulate takes one step per input."""
    assert 2 == len(simulate(forever(), [1, 2]))


def test_simulate_takes_any_iterable() -> None:
    """Inputs can be a generator."""
    steps = simulate(recurs(5), (n * n for n in range(3)))
    assert [0, 1, 4] == [step.input for step in steps]


def test_attempts_take_the_given_time() -> None:
    """attempt_time moves each step past the attempt's start by that duration."""
    steps = simulate(spaced(2).times(2), "abc", start=10.0, attempt_time="500ms")
    expected = [(10.0, 10.5, 2.0), (12.5, 13.0, 2.0), (15.0, 15.5, None)]
    assert expected == [(s.started, s.now, s.delay) for s in steps]


def test_attempt_time_may_depend_on_the_attempt() -> None:
    """A function of the 1-based attempt number gives each attempt its own duration."""
    steps = simulate(spaced(1), [None] * 3, attempt_time=lambda attempt: attempt * 10)
    assert [(0.0, 10.0), (11.0, 31.0), (32.0, 62.0)] == [(s.started, s.now) for s in steps]


def test_fixed_grid_under_slow_attempts_is_the_designs() -> None:
    """fixed(1): attempts of 0.3 s start at 0, 1.3, 2.3, 3.3; of 1.5 s at 0, 2.5, 4.0, 5.5."""
    quick = simulate(fixed(1), [None] * 4, attempt_time=0.3)
    slow = simulate(fixed(1), [None] * 4, attempt_time=1.5)
    assert [0.0, 1.3, 2.3, 3.3] == [round(s.started, 9) for s in quick]
    assert [0.0, 2.5, 4.0, 5.5] == [round(s.started, 9) for s in slow]


def test_bad_attempt_times_are_named() -> None:
    """A negative attempt time, or a function returning one, raises ValueError naming it."""
    with pytest.raises(ValueError, match="attempt_time"):
        simulate(spaced(1), [None], attempt_time=-1)
    with pytest.raises(ValueError, match=r"attempt_time\(2\)"):
        simulate(spaced(1), [None] * 3, attempt_time=lambda attempt: 1 if attempt == 1 else "x")


def test_a_random_source_can_be_given() -> None:
    """rng= drives the jitter instead of a seed; giving both is refused."""
    steps = simulate(spaced(10).jittered(min=0, max=1), [None] * 2, rng=ConstantRandom(0.5))
    assert [5.0, 5.0] == [s.delay for s in steps]
    with pytest.raises(ValueError, match="seed or rng"):
        simulate(spaced(1), [None], seed=1, rng=ConstantRandom(0.5))


def test_delays_and_simulate_agree() -> None:
    """delays() is simulate's delays with attempts taking no time."""
    policy = exponential("250ms").jittered().times(6).within(5)
    assert policy.delays(seed=3) == [
        s.delay for s in simulate(policy, [None] * 10, seed=3) if s.delay is not None
    ]
