"""Schedules are values: a repr that reads like the expression, structural equality, hashing."""

from __future__ import annotations

import datetime

import pytest

import schedules
from schedules import (
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


def is_transient(error: object) -> bool:
    """A named predicate for repr tests."""
    return True


@pytest.mark.parametrize(
    ("schedule", "text"),
    [
        (
            exponential("250ms").jittered(min=0.8, max=1.2).times(4),
            "exponential(0.25).jittered(min=0.8, max=1.2).times(4)",
        ),
        (exponential(1, 3).max_delay("4s"), "exponential(1, factor=3).max_delay(4)"),
        (forever() | recurs(3), "forever().union(recurs(3))"),
        (spaced(1) & fixed(0.5), "spaced(1).intersect(fixed(0.5))"),
        (recurs(2).and_then(linear(1)), "recurs(2).and_then(linear(1))"),
        (fibonacci(datetime.timedelta(milliseconds=100)), "fibonacci(0.1)"),
        (from_delays(1, 2.5), "from_delays(1, 2.5)"),
        (decorrelated(0.1, 10), "decorrelated(0.1, 10)"),
        (elapsed().within("1 minute").reset_after(30), "elapsed().within(60).reset_after(30)"),
        (spaced(1).add_delay(0.5), "spaced(1).add_delay(0.5)"),
        (forever().while_input(is_transient), "forever().while_input(is_transient)"),
        (
            from_step_options(retries=4, backoff="exp", backoff_ms=200, jitter=True),
            "from_step_options(retries=4, backoff='exp', backoff_ms=200, jitter=True)",
        ),
        (from_step_options(), "from_step_options(retries=1)"),
    ],
)
def test_repr_reads_like_the_expression(schedule: object, text: str) -> None:
    """The repr is the expression that built the schedule, durations in seconds."""
    assert text == repr(schedule)


def test_repr_evaluates_back_to_an_equal_schedule() -> None:
    """Pasting a repr back into code builds an equal schedule."""
    original = (exponential("250ms").jittered().max_delay("4s") | spaced(2)).times(5).within(60)
    namespace = {name: getattr(schedules, name) for name in schedules.__all__}
    assert original == eval(repr(original), namespace)


def test_equality_is_structural() -> None:
    """Schedules built the same way are equal and hash alike; different arguments differ."""
    assert exponential(1).times(3) == exponential(1.0).times(3)
    assert hash(exponential(1).times(3)) == hash(exponential(1.0).times(3))
    assert exponential(1).times(3) != exponential(1).times(4)
    assert exponential(1) != linear(1)


def test_callables_compare_by_identity() -> None:
    """Two wrappers of the same function are equal; of different functions, not."""
    assert forever().while_input(is_transient) == forever().while_input(is_transient)
    assert forever().while_input(is_transient) != forever().while_input(lambda e: True)


def test_schedules_are_frozen() -> None:
    """A schedule cannot be changed after construction."""
    schedule = exponential(1)
    with pytest.raises(AttributeError, match="frozen"):
        schedule.base = 2  # type: ignore[attr-defined]
