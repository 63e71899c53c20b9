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
    StepInfo,
    cron,
    decorrelated,
    elapsed,
    exponential,
    fibonacci,
    fixed,
    forever,
    from_delays,
    from_step_options,
    linear,
    once,
    recurs,
    spaced,
    stop,
)
from schedules.testing import schedules
from tests.schedules._support import run

AnySchedule = Schedule[Any, Any]


def _halved(info: StepInfo[object, object]) -> float:
    """A delay function for the table below."""
    return info.delay / 2 + info.elapsed


def _below_ten(value: object) -> bool:
    """A predicate for the table below."""
    return not isinstance(value, int | float) or value < 10


_seen: list[object] = []

# Stateful leaves, so each combinator wraps a state that changes with time and randomness.
_INNER = decorrelated(0.1, 5)
_TIMED = fixed(1.5)

# Every constructor, then every method wrapped around stateful leaves.
BUILT_INS: list[AnySchedule] = [
    forever(),
    recurs(5),
    once(),
    stop(),
    spaced(1),
    fixed(1.5),
    exponential(0.5),
    fibonacci(0.5),
    linear(1),
    from_delays(1, 2, 3),
    decorrelated(0.1, 5),
    elapsed(),
    cron("*/5 * * * *"),
    cron("30 2 * * *", tz="Europe/Berlin"),
    cron("0 0 29 2 *") | spaced(3600),
    from_step_options(retries=6, backoff="exp", backoff_ms=100, backoff_max_ms=900, jitter=True),
    from_step_options(retries=4, backoff_ms=50),
    _INNER.jittered(min=0.5, max=1.5),
    _INNER.modify_delay(_halved),
    _INNER.add_delay("250ms"),
    _TIMED.add_delay(_halved),
    _INNER.max_delay(1),
    _INNER.times(6),
    _TIMED.within(12),
    _INNER.while_input(_below_ten),
    _INNER.until_input(_below_ten),
    _INNER.while_output(_below_ten),
    exponential(1).until_output(lambda d: d > 50),
    elapsed() | _INNER,
    _TIMED & exponential(0.1),
    recurs(2).and_then(_TIMED | _INNER),
    _INNER.map(str),
    _TIMED.tap_input(_seen.append),
    _TIMED.tap_output(_seen.append),
    exponential(1).reset_after(3),
    exponential(1).jittered().max_delay(4).times(6).within(60).reset_after(30),
    (spaced(1) | exponential(0.1)).and_then(fixed(2) & recurs(3)),
    elapsed().modify_delay(_halved).and_then(linear(1).reset_after(2)).times(15),
]


class _JsonAt(Schedule[Any, Any]):
    """Wraps a schedule, sending its state through JSON before step number *split* (from 0)."""

    __slots__ = ("inner", "split")

    def __init__(self, inner: AnySchedule, split: int) -> None:
        self.inner = inner
        self.split = split

    def initial(self) -> Any:
        """A step counter beside the wrapped schedule's initial state."""
        return (0, self.inner.initial())

    def step(self, now: float, input: Any, state: Any, rng: Any) -> tuple[Any, Any, float | None]:  # noqa: A002
        """Step the wrapped schedule, its state decoded from JSON at step *split*."""
        k, inner = state
        if k == self.split:
            inner = json.loads(json.dumps(inner, allow_nan=False))
        inner, output, delay = self.inner.step(now, input, inner, rng)
        return (k + 1, inner), output, delay


def resumed(
    schedule: AnySchedule, split: int, n: int, seed: int, took: list[float]
) -> tuple[list[tuple[Any, float | None, float]], list[tuple[Any, float | None, float]]]:
    """Run *n* steps straight, and again with the state sent through JSON after *split* steps."""
    straight = run(schedule, n, random.Random(seed), durations=took)
    return straight, run(_JsonAt(schedule, split), n, random.Random(seed), durations=took)


def as_lists(value: object) -> object:
    """*value* with every tuple turned into a list, as JSON gives it back."""
    if isinstance(value, tuple | list):
        return [as_lists(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return value


@pytest.mark.parametrize("schedule", BUILT_INS, ids=repr)
def test_states_are_strict_json_at_every_step(schedule: AnySchedule) -> None:
    """Each state, initial and after every step, is plain JSON data (no NaN, no objects)."""
    rng = random.Random(5)
    state, now = schedule.initial(), 0.0
    for _ in range(20):
        assert as_lists(state) == json.loads(json.dumps(state, allow_nan=False))
        state, _, delay = schedule.step(now, 3, state, rng)
        if delay is None:
            break
        now += delay + 0.4


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
