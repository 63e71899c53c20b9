"""delays() and simulate(): pure simulation, seeds, and the guard against endless schedules."""

from __future__ import annotations

import pytest

from schedules import SimulatedStep, exponential, forever, recurs, simulate, spaced


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
        SimulatedStep(1, 10.0, "a", 0, 2.0),
        SimulatedStep(2, 12.0, "b", 1, 2.0),
        SimulatedStep(3, 14.0, "c", 2, None),
    ]
    assert expected == simulate(spaced(2).times(2), ["a", "b", "c", "d"], start=10.0)


def test_simulate_stops_when_inputs_run_out() -> None:
    """simulate takes one step per input."""
    assert 2 == len(simulate(forever(), [1, 2]))


def test_simulate_takes_any_iterable() -> None:
    """Inputs can be a generator."""
    steps = simulate(recurs(5), (n * n for n in range(3)))
    assert [0, 1, 4] == [step.input for step in steps]
