"""A clock that reads NaN or infinity is a clear error, never a NaN delay or elapsed time."""

from __future__ import annotations

import math

import pytest

from effects import Effect, RetryBudget, repeat, retry, use_clock
from effects.testing import VirtualClock
from schedules import spaced


class TransientError(Exception):
    """Retried."""


class BrokenClock(VirtualClock):
    """A VirtualClock whose now() returns a fixed, broken reading."""

    def __init__(self, reading: object) -> None:
        super().__init__()
        self.reading = reading

    def now(self) -> float:
        """The broken reading."""
        return self.reading  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"BrokenClock({self.reading!r})"


def always_failing() -> None:
    """An attempt that always fails."""
    raise TransientError("down")


BROKEN = [math.nan, math.inf, -math.inf, "12:00", None]


@pytest.mark.parametrize("reading", BROKEN, ids=repr)
def test_a_broken_reading_fails_the_call_naming_the_clock(reading: object) -> None:
    """The first decision refuses the reading with ValueError; the retried error is its context."""
    clock = BrokenClock(reading)
    with use_clock(clock), pytest.raises(ValueError, match=r"BrokenClock.*now") as caught:
        retry(spaced(1), times=3, on=TransientError)(always_failing)()
    assert isinstance(caught.value.__context__, TransientError)
    assert [] == clock.sleeps


@pytest.mark.parametrize("reading", BROKEN, ids=repr)
def test_effects_blocks_budgets_and_repeats_refuse_it_too(reading: object) -> None:
    """Every runner that reads the clock refuses a broken reading the same way."""
    with use_clock(BrokenClock(reading)):
        with pytest.raises(ValueError, match="must return finite seconds"):
            Effect.attempt(always_failing, catch=TransientError).retry(spaced(1), times=2).run()
        with pytest.raises(ValueError, match="must return finite seconds"):
            Effect.sync(lambda: 1).repeat(spaced(1), times=2).run()
        budget = retry(times=2, on=TransientError, budget=RetryBudget())
        with pytest.raises(ValueError, match="must return finite seconds"):
            budget(always_failing)()


def test_the_counting_shortcut_never_reads_the_clock() -> None:
    """A times-only policy decides without the clock, so a broken one does not matter to it."""
    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        raise TransientError

    with use_clock(BrokenClock(math.nan)), pytest.raises(TransientError):
        retry(times=2, on=TransientError)(failing)()
    assert 3 == len(calls)


@pytest.mark.parametrize("start", [math.nan, math.inf, "0", True])
def test_a_virtual_clock_must_start_at_a_finite_time(start: object) -> None:
    """VirtualClock(start=nan) is refused at once, naming start."""
    with pytest.raises(ValueError, match="start must be a finite number"):
        VirtualClock(start=start)  # type: ignore[arg-type]


def test_a_large_virtual_start_keeps_exact_boundaries() -> None:
    """A VirtualClock started at a monotonic-like value: within(0.3) still waits 3 x 0.1 s."""
    clock = VirtualClock(start=1_234_567.891)
    with use_clock(clock), pytest.raises(TransientError):
        retry(spaced(0.1).within(0.3), on=TransientError)(always_failing)()
    assert [0.1, 0.1, 0.1] == clock.sleeps


def test_repeat_reads_the_clock_after_each_run() -> None:
    """repeat under a clock started at a large value waits exactly as under one at 0."""
    for start in (0.0, 987_654.321):
        clock = VirtualClock(start=start)
        values = iter(range(10))
        with use_clock(clock):
            assert 3 == repeat(spaced(0.1).within(0.3))(values.__next__)()
        assert [0.1, 0.1, 0.1] == clock.sleeps
