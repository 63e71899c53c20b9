"""union, intersect, and_then, map, taps and reset_after, against hand-computed sequences."""

from __future__ import annotations

from schedules import exponential, from_delays, recurs, simulate, spaced
from tests.schedules._support import ConstantRandom, outputs


def test_union_takes_the_shorter_delay_while_either_continues() -> None:
    """exponential(1).times(3) | spaced(3).times(4): min(1,3), min(2,3), min(4,3), then 3 alone."""
    assert [1.0, 2.0, 3.0, 3.0] == (exponential(1).times(3) | spaced(3).times(4)).delays()


def test_union_outputs_pairs() -> None:
    """The union's output pairs both sides' outputs."""
    assert [(0, 1.0), (1, 2.0), (2, 4.0)] == outputs(recurs(2) | exponential(1), 3)


def test_intersect_takes_the_longer_delay_while_both_continue() -> None:
    """exponential(1) & spaced(3) & recurs(4): max(1,3,0), max(2,3,0), 4, 8, then stop."""
    assert [3.0, 3.0, 4.0, 8.0] == (exponential(1) & spaced(3) & recurs(4)).delays()


def test_union_and_intersect_methods_equal_the_operators() -> None:
    """a.union(b) == a | b and a.intersect(b) == a & b."""
    a, b = exponential(1), recurs(3)
    assert (a | b, a & b) == (a.union(b), a.intersect(b))


def test_union_and_intersect_step_both_sides_every_time() -> None:
    """Both sides see every input, even after one side is done."""
    left: list[object] = []
    right: list[object] = []
    schedule = recurs(1).tap_input(left.append) | recurs(3).tap_input(right.append)
    simulate(schedule, "abcdef")
    assert (["a", "b", "c", "d"], ["a", "b", "c", "d"]) == (left, right)
    left.clear()
    right.clear()
    simulate(recurs(1).tap_input(left.append) & recurs(3).tap_input(right.append), "abc")
    assert (["a", "b"], ["a", "b"]) == (left, right)


def test_and_then_hands_over_the_ending_step() -> None:
    """recurs(2).and_then(spaced(5).times(2)): the step that ends recurs is spaced's first."""
    assert [0.0, 0.0, 5.0, 5.0] == recurs(2).and_then(spaced(5).times(2)).delays()
    assert [0, 1, 0, 1, 2] == outputs(recurs(2).and_then(spaced(5).times(2)), 10)


def test_and_then_of_an_empty_first_starts_the_second_at_once() -> None:
    """stop-like first schedules hand their only step to the second."""
    assert [1.0, 2.0] == from_delays().and_then(from_delays(1, 2)).delays()


def test_map_changes_outputs_only() -> None:
    """map(f) applies f to each output; delays stay."""
    schedule = exponential(1).map(lambda d: d * 1000)
    assert ([1.0, 2.0], [1000.0, 2000.0]) == (schedule.delays(2), outputs(schedule, 2))


def test_tap_output_sees_every_output() -> None:
    """tap_output is called with each output, the stopping step's included."""
    seen: list[int] = []
    recurs(2).tap_output(seen.append).delays()
    assert [0, 1, 2] == seen


def test_reset_after_starts_over() -> None:
    """exponential(1).reset_after(5): at t=7 (7 s after the first step) it starts again from 1."""
    steps = simulate(exponential(1).reset_after(5), [None] * 6)
    # Steps at 0, 1, 3, 7 (reset: new first step), 8, 10.
    assert [0.0, 1.0, 3.0, 7.0, 8.0, 10.0] == [step.now for step in steps]
    assert [1.0, 2.0, 4.0, 1.0, 2.0, 4.0] == [step.delay for step in steps]


def test_reset_after_revives_a_finished_schedule() -> None:
    """A schedule that stopped runs again when a step comes after the reset time."""
    schedule = recurs(1).reset_after(10)
    state = schedule.initial()
    state, _, first = schedule.step(0.0, None, state, ConstantRandom(0.0))
    state, _, second = schedule.step(1.0, None, state, ConstantRandom(0.0))
    state, _, third = schedule.step(30.0, None, state, ConstantRandom(0.0))
    assert (0.0, None, 0.0) == (first, second, third)
