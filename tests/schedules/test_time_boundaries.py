"""within and reset_after decide in whole milliseconds: exact at the boundary on any clock."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import Schedule, forever, from_delays, simulate, spaced

# Clock readings a driver may hand over: 0, and values like time.monotonic() after long uptimes.
STARTS = [0.0, 12_345.678, 1_000_000.123, 987_654_321.5, time.monotonic()]
#: Their test ids: the process's own monotonic reading differs by process (pytest-xdist's workers).
START_IDS = ["0", "12345.678", "1000000.123", "987654321.5", "monotonic-now"]


def waits(schedule: Schedule[object, object], start: float, n: int = 12) -> list[float | None]:
    """The delays of *n* attempts taking no time, the first step at *start*."""
    return [step.delay for step in simulate(schedule, [None] * n, start=start)]


@pytest.mark.parametrize("start", STARTS, ids=START_IDS)
def test_a_wait_ending_exactly_at_the_limit_is_allowed(start: float) -> None:
    """spaced(0.1).within(0.3) waits three times, though 0.1 + 0.1 + 0.1 > 0.3 in floats."""
    assert [0.1, 0.1, 0.1, None] == waits(spaced(0.1).within(0.3), start)


@pytest.mark.parametrize("start", STARTS, ids=START_IDS)
def test_a_wait_ending_a_millisecond_late_is_refused(start: float) -> None:
    """A wait ending 1 ms past the limit is never started."""
    assert [0.1, 0.1, None] == waits(spaced(0.1).within(0.299), start)


@pytest.mark.parametrize("start", STARTS, ids=START_IDS)
def test_reset_after_resets_exactly_at_its_duration(start: float) -> None:
    """Eight steps of spaced(0.1) reach reset_after(0.8): the ninth step starts a new run."""
    schedule = (forever() & spaced(0.1)).reset_after(0.8)
    outputs = [step.output for step in simulate(schedule, [None] * 11, start=start)]
    assert [(n, n) for n in range(8)] + [(0, 0), (1, 1), (2, 2)] == outputs


@pytest.mark.parametrize("start", STARTS, ids=START_IDS)
def test_attempt_time_counts_toward_the_limit_exactly(start: float) -> None:
    """Attempts of 0.1 s and waits of 0.1 s fill within(0.5) to the millisecond."""
    steps = simulate(spaced(0.1).within(0.5), [None] * 6, start=start, attempt_time=0.1)
    # Counted from the end of attempt 1, the waits end at 0.1, 0.3 and exactly 0.5.
    assert [0.1, 0.1, 0.1, None] == [step.delay for step in steps]


milliseconds = st.integers(0, 5_000)
ms_lists = st.lists(milliseconds, min_size=1, max_size=12)


@settings(max_examples=200)
@given(
    delays=ms_lists,
    took=ms_lists,
    limit=milliseconds,
    reset=st.integers(1, 5_000),
    start=st.sampled_from(STARTS[1:]) | st.floats(1e3, 1e9),
)
def test_decisions_do_not_depend_on_where_the_clock_starts(
    delays: list[int], took: list[int], limit: int, reset: int, start: float
) -> None:
    """On a whole-millisecond timeline, a clock starting at 0 and one at a large value agree."""
    schedule = from_delays(*(d / 1000 for d in delays)).within(limit / 1000)
    cycle = (forever() & spaced(0.1)).reset_after(reset / 1000)
    times = itertools.cycle(t / 1000 for t in took)
    attempt_times = [next(times) for _ in range(20)]

    def timeline(s: Schedule[object, object], at: float) -> list[tuple[object, float | None]]:
        steps = simulate(s, [None] * 20, start=at, attempt_time=lambda k: attempt_times[k - 1])
        return [(step.output, step.delay) for step in steps]

    assert timeline(schedule, 0.0) == timeline(schedule, start)
    assert timeline(cycle, 0.0) == timeline(cycle, start)


@pytest.mark.parametrize("jump", [3600.0, 1e12, 1e300])
def test_a_clock_that_jumps_ahead_stops_within_and_never_raises(jump: float) -> None:
    """An attempt that ends absurdly late ends within(d) and restarts reset_after(d)."""
    took = [0.0, jump, 0.0]
    attempt_time = lambda attempt: took[attempt - 1] if attempt <= len(took) else 0.0  # noqa: E731
    bounded = simulate(spaced(1).within(10), [None] * 3, attempt_time=attempt_time)
    assert [1.0, None] == [step.delay for step in bounded]
    cycling = simulate(
        (forever() & spaced(1)).reset_after(10), [None] * 3, attempt_time=attempt_time
    )
    assert [(0, 0), (0, 0), (1, 1)] == [step.output for step in cycling]


def test_a_clock_that_jumps_back_does_not_reset_or_refuse() -> None:
    """Readings that go backwards count as no time passed: nothing resets, nothing stops."""
    steps = []
    schedule = (forever() & spaced(1)).reset_after(2).within(2)
    state = schedule.initial()
    for now in (100.0, 50.0, 10.0):
        state, output, delay = schedule.step(now, None, state, None)  # type: ignore[arg-type]
        steps.append((output, delay))
    assert [((0, 0), 1.0), ((1, 1), 1.0), ((2, 2), 1.0)] == steps
