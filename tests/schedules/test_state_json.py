"""State is plain data: it survives JSON mid-sequence and the run continues identically."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import (
    Schedule,
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
from tests.schedules._support import run

AnySchedule = Schedule[Any, Any]

BUILT_INS: list[AnySchedule] = [
    forever(),
    recurs(5),
    spaced(1),
    fixed(1.5),
    exponential(0.5),
    fibonacci(0.5),
    linear(1),
    from_delays(1, 2, 3),
    decorrelated(0.1, 5),
    elapsed(),
    from_step_options(retries=6, backoff="exp", backoff_ms=100, backoff_max_ms=900, jitter=True),
    exponential(1).jittered().max_delay(4).times(6).within(60).reset_after(30),
    (spaced(1) | exponential(0.1)).and_then(fixed(2) & recurs(3)),
    exponential(1).modify_delay(lambda info: info.delay + info.elapsed),
]


def resumed(
    schedule: AnySchedule, split: int, n: int, seed: int, took: list[float]
) -> tuple[list[tuple[Any, float | None, float]], list[tuple[Any, float | None, float]]]:
    """Run *n* steps straight, and again with the state sent through JSON after *split* steps."""
    straight = run(schedule, n, random.Random(seed), durations=took)
    rng = random.Random(seed)
    state = schedule.initial()
    now = 0.0
    steps: list[tuple[Any, float | None, float]] = []
    for k in range(n):
        now += took[k] if k < len(took) else 0.0
        if k == split:
            state = json.loads(json.dumps(state))
        state, output, delay = schedule.step(now, None, state, rng)
        steps.append((output, delay, now))
        if delay is None:
            break
        now += delay
    return straight, steps


def test_initial_states_are_json() -> None:
    """Every built-in schedule's initial state is JSON data."""
    for schedule in BUILT_INS:
        state = schedule.initial()
        assert json.loads(json.dumps(state)) == json.loads(
            json.dumps(json.loads(json.dumps(state)))
        )


@pytest.mark.parametrize("schedule", BUILT_INS, ids=repr)
def test_built_ins_continue_identically_after_json(schedule: AnySchedule) -> None:
    """For each built-in, a JSON round trip of the state at every step changes nothing."""
    took = [0.7, 0.0, 2.5, 0.1, 4.0, 0.3, 0.0, 1.0] * 3
    straight = run(schedule, 20, random.Random(3), durations=took)
    through_json = run(schedule, 20, random.Random(3), durations=took, json_state=True)
    assert straight == through_json


@settings(max_examples=150)
@given(
    schedules(),
    st.integers(0, 20),
    st.integers(0, 2**32 - 1),
    st.lists(st.floats(0.0, 20.0), max_size=25),
)
def test_drawn_schedules_resume_identically(
    schedule: AnySchedule, split: int, seed: int, took: list[float]
) -> None:
    """State saved to JSON mid-sequence continues exactly as the uninterrupted run."""
    straight, steps = resumed(schedule, split, 25, seed, took)
    assert straight == steps


def test_step_accepts_lists_for_tuples() -> None:
    """step takes the JSON-decoded form: lists where the state had tuples."""
    schedule = spaced(1).times(2) | exponential(1)
    state = schedule.initial()
    state, _, _ = schedule.step(0.0, None, state, random.Random(0))
    as_lists = json.loads(json.dumps(state))
    assert isinstance(as_lists, list)
    expected = schedule.step(1.0, None, state, random.Random(0))
    assert expected == schedule.step(1.0, None, as_lists, random.Random(0))
