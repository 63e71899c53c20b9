"""times, within and the input/output predicates: when a schedule stops."""

from __future__ import annotations

import pytest

from schedules import Schedule, exponential, forever, recurs, simulate, spaced
from tests.schedules._support import delays_of, outputs, run


@pytest.mark.parametrize("n", [0, 1, 3])
def test_times_limits_recurrences(n: int) -> None:
    """times(n) allows exactly n recurrences of an endless schedule."""
    assert [1.0] * n == spaced(1).times(n).delays()


def test_times_does_not_extend_a_shorter_schedule() -> None:
    """recurs(2).times(5) still stops after 2."""
    assert [0.0, 0.0] == recurs(2).times(5).delays()


def test_times_keeps_outputs() -> None:
    """times passes the wrapped schedule's outputs through, the stopping step's included."""
    assert [1.0, 2.0, 4.0] == outputs(exponential(1).times(2), 10)


def test_within_stops_before_a_wait_that_would_end_too_late() -> None:
    """exponential(1).within(10): waits end at 1, 3, 7; the next would end at 15, so it stops."""
    assert [1.0, 2.0, 4.0] == exponential(1).within(10).delays()


def test_within_counts_attempt_time_from_the_first_step() -> None:
    """Time spent in attempts counts: 1 s waits and 3 s attempts fit twice in 8 s."""
    steps = run(spaced(1).within(8), 10, None, durations=[5.0, 3.0, 3.0, 3.0], start=0.0)
    # First step at 5; waits end at 5+1=6 (1 s after), 9+1=10 (5 s), 13+1=14 (9 s > 8: stop).
    assert [1.0, 1.0, None] == delays_of(steps)


def test_within_allows_a_wait_ending_exactly_at_the_limit() -> None:
    """A wait that ends exactly at the limit is allowed."""
    assert [2.0, 2.0] == spaced(2).within(4).delays()


def test_while_input_stops_when_the_predicate_fails() -> None:
    """while_input(p) continues only while p(input) holds."""
    counted: Schedule[int, int] = forever()
    steps = simulate(counted.while_input(lambda n: n < 5), [1, 2, 3, 10, 4])
    assert [0.0, 0.0, 0.0, None] == [step.delay for step in steps]


def test_until_input_stops_when_the_predicate_holds() -> None:
    """until_input(p) stops at the first input where p holds."""
    steps = simulate(forever().until_input(lambda e: isinstance(e, KeyError)), [1, 2, KeyError()])
    assert [0.0, 0.0, None] == [step.delay for step in steps]


def test_while_output_and_until_output() -> None:
    """while_output/until_output look at the outputs: here the exponential delays."""
    assert [1.0, 2.0, 4.0] == exponential(1).while_output(lambda d: d < 5).delays()
    assert [1.0, 2.0] == exponential(1).until_output(lambda d: d >= 4).delays()


def test_predicates_are_checked_only_when_continuing() -> None:
    """A stopping schedule never calls the predicate."""
    calls: list[object] = []

    def record(value: object) -> bool:
        calls.append(value)
        return True

    recurs(1).while_input(record).delays(input="x")
    assert ["x"] == calls


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_times_refuses_bad_counts(bad: object) -> None:
    """times(-1) raises ValueError; a non-int raises TypeError; both name n."""
    with pytest.raises((ValueError, TypeError), match="n must be"):
        spaced(1).times(bad)  # type: ignore[arg-type]


def test_recurs_refuses_negative_counts() -> None:
    """recurs(-1) raises ValueError naming the value."""
    with pytest.raises(ValueError, match="-1"):
        recurs(-1)
