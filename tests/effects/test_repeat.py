"""effects.repeat: Effect's repeat on success, to the millisecond, for effects and functions.

The literal timelines below were checked against Effect 3.22.4 (``Effect.repeat`` with the same
options under its TestClock; ``benchmarks/effect3_timelines.py`` reruns the comparison).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from effects import (
    AsyncEffect,
    Effect,
    Repeat,
    RepeatEvent,
    RetryUsageError,
    repeat,
    use_clock,
    use_random,
)
from effects.testing import VirtualClock
from schedules import Schedule, fixed, forever, recurs, simulate, spaced
from schedules.testing import schedules


class BoomError(Exception):
    """A failed run."""


class Counter:
    """Run *n* returns *n*; each run takes *took* seconds of the clock; run *fail_at* fails."""

    def __init__(self, clock: VirtualClock, took: float = 0.0, fail_at: int | None = None) -> None:
        self.clock = clock
        self.took = took
        self.fail_at = fail_at
        self.starts: list[float] = []

    def __call__(self) -> int:
        """One run: record its start, take its time, return its number (or fail)."""
        self.starts.append(self.clock.now())
        if self.took:
            self.clock.advance(self.took)
        number = len(self.starts)
        if number == self.fail_at:
            raise BoomError(number)
        return number


def asked(log: list[int], predicate: Callable[[int], bool]) -> Callable[[int], bool]:
    """*predicate*, recording every value it is asked about."""

    def recorded(value: int) -> bool:
        log.append(value)
        return predicate(value)

    return recorded


def test_polling_until_done_waits_after_each_run(virtual_clock: VirtualClock) -> None:
    """until=3 with spaced(1s), runs of 0.3 s: runs start at 0, 1.3, 2.6 (Effect: same)."""
    counter = Counter(virtual_clock, took=0.3)
    questions: list[int] = []
    policy = repeat(spaced("1s"), until=asked(questions, lambda n: n >= 3), times=60)
    assert 3 == policy(counter)()
    assert [0.0, 1.3, 2.6] == [round(start, 9) for start in counter.starts]
    assert [1, 2, 3] == questions


def test_times_counts_repetitions(virtual_clock: VirtualClock) -> None:
    """times=2 with no schedule: three runs back to back, no sleep (a 0 delay never sleeps)."""
    counter = Counter(virtual_clock)
    assert 3 == repeat(times=2)(counter)()
    assert ([0.0, 0.0, 0.0], []) == (counter.starts, virtual_clock.sleeps)


def test_predicates_are_asked_only_while_the_schedule_goes_on(
    virtual_clock: VirtualClock,
) -> None:
    """recurs(1) stops after one repetition; until is asked after run 1 only (Effect: same)."""
    questions: list[int] = []
    policy = repeat(recurs(1), until=asked(questions, lambda n: n > 10))
    assert 2 == policy(Counter(virtual_clock))()
    assert [1] == questions


def test_every_step_counts_for_times(virtual_clock: VirtualClock) -> None:
    """times=2 with while_: the predicate sees runs 1 to 3, and times stops at the third."""
    questions: list[int] = []
    policy = repeat(spaced(1), while_=asked(questions, lambda n: True), times=2)
    counter = Counter(virtual_clock)
    assert 3 == policy(counter)()
    assert ([1, 2, 3], [0.0, 1.0, 2.0]) == (questions, counter.starts)


def test_a_failed_run_stops_at_once_and_propagates(virtual_clock: VirtualClock) -> None:
    """Run 3 fails: its error propagates, the schedule never sees it, no wait follows it."""
    seen: list[object] = []
    counter = Counter(virtual_clock, took=0.1, fail_at=3)
    policy = repeat(spaced(1).tap_input(seen.append), times=10)
    with pytest.raises(BoomError, match="3"):
        policy(counter)()
    assert ([0.0, 1.1, 2.2], [1, 2]) == ([round(s, 9) for s in counter.starts], seen)
    assert [1.0, 1.0] == virtual_clock.sleeps


def test_the_last_success_is_given_to_the_schedule(virtual_clock: VirtualClock) -> None:
    """Every success, the last one too, is a step of the schedule."""
    seen: list[object] = []
    assert 3 == repeat(recurs(2).tap_input(seen.append))(Counter(virtual_clock))()
    assert [1, 2, 3] == seen


def test_fixed_keeps_its_grid_under_slow_runs(virtual_clock: VirtualClock) -> None:
    """fixed(1s) with runs of 0.3 s: runs start at 0, 1.3, 2.3, 3.3 (Effect: same)."""
    counter = Counter(virtual_clock, took=0.3)
    assert 4 == repeat(fixed("1s"), times=3)(counter)()
    assert [0.0, 1.3, 2.3, 3.3] == [round(start, 9) for start in counter.starts]


def test_times_zero_is_a_single_run(virtual_clock: VirtualClock) -> None:
    """times=0 means one run (a deviation: Effect ignores times: 0 and goes on until=)."""
    assert 1 == repeat(times=0, until=lambda n: n >= 5)(Counter(virtual_clock))()


def test_the_result_is_the_last_value_not_the_schedules_output(
    virtual_clock: VirtualClock,
) -> None:
    """repeat returns the last success (a deviation: Effect's schedule form returns its output)."""
    assert "c" == repeat(recurs(2))(iter("abc").__next__)()


def test_a_repeat_with_no_way_to_stop_is_refused() -> None:
    """repeat() with no schedule, times, while_ or until raises ValueError, as retry() does."""
    with pytest.raises(ValueError, match="needs a way to stop"):
        repeat()
    assert 5 == repeat(forever(), until=lambda n: n == 5)(iter(range(10)).__next__)()


def test_effects_return_the_last_success_or_the_first_failure(
    virtual_clock: VirtualClock,
) -> None:
    """An Effect repeats on Success; a Failure is returned at once, never repeated."""
    counter = Counter(virtual_clock)
    effect = Effect.attempt(counter, catch=BoomError)
    assert Success(3) == effect.repeat(spaced(2), times=2).run()
    assert Success(6) == effect.pipe(repeat(spaced(2), times=2)).run()
    failing = Counter(virtual_clock, fail_at=2)
    result = Effect.attempt(failing, catch=BoomError).repeat(spaced(1), times=5).run()
    assert isinstance(result, Failure)
    assert 2 == len(failing.starts)


@pytest.mark.anyio
async def test_async_functions_and_effects_repeat_under_asyncio_and_trio(
    anyio_backend: str, virtual_clock: VirtualClock
) -> None:
    """async def functions and AsyncEffects wait with sleep_async and repeat the same way."""
    counter = Counter(virtual_clock, took=0.5)

    @repeat(spaced(1), until=lambda n: n >= 3)
    async def poll() -> int:
        return counter()

    assert 3 == await poll()

    async def again() -> int:
        return counter()

    assert Success(5) == await AsyncEffect.attempt(again, catch=BoomError).repeat(times=1).run()
    assert [1.0, 1.0] == virtual_clock.sleeps


@pytest.mark.anyio
async def test_a_lambda_returning_a_coroutine_repeats_async(
    anyio_backend: str, virtual_clock: VirtualClock
) -> None:
    """A callable returning a coroutine is awaited: the schedule sees values, never coroutines."""
    seen: list[object] = []

    async def value(n: int) -> int:
        return n

    numbers = iter(range(1, 10))
    wrapped = repeat(recurs(2).tap_input(seen.append))(lambda: value(next(numbers)))
    assert 3 == await wrapped()
    assert [1, 2, 3] == seen


def test_events_name_the_work_and_follow_each_run(virtual_clock: VirtualClock) -> None:
    """on_repeat sees repeat / attempt per run and done at the end, with values and times."""
    events: list[RepeatEvent] = []

    def poll_status() -> int:
        virtual_clock.advance(0.5)
        return len(events)

    repeat(spaced(1), times=2, on_repeat=events.append)(poll_status)()
    assert [
        ("repeat", 1, 1.0, 0, 0.0),
        ("attempt", 2, None, 0, 1.0),
        ("repeat", 2, 1.0, 2, 1.5),
        ("attempt", 3, None, 2, 2.5),
        ("done", 3, None, 4, 3.0),
    ] == [(e.kind, e.attempt, e.delay, e.value, e.elapsed) for e in events]
    assert {"test_events_name_the_work_and_follow_each_run.<locals>.poll_status"} == {
        e.name for e in events
    }


def test_repeat_values_read_like_the_call() -> None:
    """A Repeat's repr shows its options; equal options make equal values."""
    policy = repeat(spaced(1), times=60, name="poll")
    assert "repeat(spaced(1), times=60, name='poll')" == repr(policy)
    assert policy == Repeat(spaced(1), times=60, name="poll")
    assert "spaced(1).times(60)" == repr(policy.composed)


@pytest.mark.parametrize("bad", [3, "spaced(1)", object()])
def test_repeat_of_a_non_callable_is_refused(bad: object) -> None:
    """repeat(...)(x) with x neither an effect nor callable is a RetryUsageError."""
    with pytest.raises(RetryUsageError, match="applies to"):
        repeat(times=1)(bad)  # type: ignore[call-overload]


@settings(max_examples=60)
@given(
    schedules(max_delay=30.0),
    st.integers(0, 2**32 - 1),
    st.lists(st.floats(0.0, 5.0), min_size=12, max_size=12),
    st.floats(0.0, 1e6),
)
def test_runs_start_exactly_when_simulate_says(
    schedule: Schedule[object, object], seed: int, took: list[float], start: float
) -> None:
    """With runs taking time and any start, repeat's runs start where simulate predicts."""
    policy = repeat(schedule, times=10)
    steps = simulate(
        policy.composed,
        range(1, 12),
        seed=seed,
        start=start,
        attempt_time=lambda attempt: took[attempt - 1],
    )
    clock = VirtualClock(start=start)
    starts: list[float] = []

    def run() -> int:
        starts.append(clock.now())
        clock.advance(took[len(starts) - 1])
        return len(starts)

    with use_clock(clock), use_random(random.Random(seed)):
        result = policy(run)()
    assert [step.started for step in steps] == starts
    assert len(steps) == result
    assert [s.delay for s in steps if s.delay] == clock.sleeps


def test_repeat_takes_any_input_typed_schedule(virtual_clock: VirtualClock) -> None:
    """A schedule whose predicates read the result narrows nothing at run time: values flow in."""
    seen: list[Any] = []
    schedule = spaced(1).while_input(lambda state: state != "done").tap_input(seen.append)
    states = iter(["queued", "running", "done"])
    assert "done" == repeat(schedule)(states.__next__)()
    assert ["queued", "running", "done"] == seen


@pytest.mark.anyio
async def test_cancelling_a_repeat_stops_it_mid_wait(anyio_backend: str) -> None:
    """A cancel scope around a repeat waiting 1 hour (real clock) ends it at once."""
    import anyio

    runs: list[int] = []

    @repeat(spaced("1h"), times=5)
    async def poll() -> int:
        runs.append(1)
        return len(runs)

    with anyio.move_on_after(0.05) as scope:
        await poll()
    assert scope.cancelled_caught
    assert [1] == runs


def test_keyboard_interrupt_in_a_run_propagates_untouched(virtual_clock: VirtualClock) -> None:
    """A BaseException from a run is never caught: it ends the repeat as it is."""
    runs = iter([1, 2])

    def run() -> int:
        value = next(runs, None)
        if value is None:
            raise KeyboardInterrupt
        return value

    with pytest.raises(KeyboardInterrupt):
        repeat(spaced(1), times=5)(run)()
    assert [1.0, 1.0] == virtual_clock.sleeps
