"""times(n) is exactly intersection with recurs(n), in every composition, as Effect counts."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import Schedule, recurs, simulate, spaced
from schedules.testing import schedules

AnySchedule = Schedule[Any, Any]
STEPS = 25
attempt_times = st.lists(st.floats(0.0, 30.0), max_size=STEPS)
inputs = st.lists(st.sampled_from(["go", "stop"]), min_size=STEPS, max_size=STEPS)


def is_go(value: object) -> bool:
    """Continue on "go", stop on anything else."""
    return value == "go"


def delays(schedule: AnySchedule, seed: int, took: list[float], given: list[str]) -> list[Any]:
    """Every delay of *schedule* over the inputs *given*, attempt *k* taking ``took[k - 1]``."""
    steps = simulate(
        schedule,
        given,
        seed=seed,
        attempt_time=lambda k: took[k - 1] if k <= len(took) else 0.0,
    )
    return [step.delay for step in steps]


def compositions(bounded: AnySchedule, other: AnySchedule) -> list[AnySchedule]:
    """*bounded* alone and inside each combinator, beside *other*."""
    return [
        bounded,
        bounded | other,
        other | bounded,
        bounded & other,
        bounded.and_then(other),
        other.and_then(bounded),
        (bounded | other).times(7),
        bounded.jittered().max_delay(10),
        bounded.within(40),
        bounded.reset_after(15),
    ]


@settings(max_examples=150, deadline=None)
@given(
    schedules(max_leaves=4),
    schedules(max_leaves=4),
    st.integers(0, 6),
    st.integers(0, 2**32 - 1),
    st.tuples(attempt_times, inputs),
)
def test_times_is_intersection_with_recurs_everywhere(
    a: AnySchedule, b: AnySchedule, n: int, seed: int, timeline: tuple[list[float], list[str]]
) -> None:
    """In every composition, a.times(n) gives the delays of a & recurs(n)."""
    took, given = timeline
    a = a.while_input(is_go) if seed % 2 else a
    times = compositions(a.times(n), b)
    intersections = compositions(a & recurs(n), b)
    for bounded, recurring in zip(times, intersections, strict=True):
        assert delays(recurring, seed, took, given) == delays(bounded, seed, took, given)


def test_a_step_where_the_inner_schedule_stops_still_counts() -> None:
    """Inside a union that goes on, the step where the inner schedule stopped counts for times."""
    bounded = spaced(1).while_input(is_go).times(2) | spaced(5)
    given = ["go", "stop", "go", "go", "go"]
    # As Effect: step 2 stops the inner schedule (5 s from the right side), step 3 is the third
    # step, past times(2), so only the right side goes on.
    assert [1.0, 5.0, 5.0, 5.0, 5.0] == delays(bounded, 0, [], given)


def test_a_stopped_recurs_keeps_counting_its_output() -> None:
    """recurs(n) stepped after it stopped outputs n, n + 1, ... (Effect's count), never stuck."""
    steps = simulate(recurs(1) | spaced(1), [None] * 4)
    assert [(0, 0), (1, 1), (2, 2), (3, 3)] == [step.output for step in steps]
    assert [0.0, 1.0, 1.0, 1.0] == [step.delay for step in steps]


def test_times_state_counts_every_step() -> None:
    """The state of times(n) counts steps, the stopping ones included, and survives JSON."""
    policy = spaced(1).times(1)
    rng = random.Random(0)
    state = policy.initial()
    decided = []
    for now in (0.0, 1.0, 2.0):
        state, _, delay = policy.step(now, None, state, rng)
        decided.append((state, delay))
    assert [((1, 1), 1.0), ((2, 2), None), ((3, 3), None)] == decided
