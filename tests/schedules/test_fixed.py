"""fixed(d): a grid counted from the first step, Effect's rule for overruns, no 0 on the grid."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import MAX_DELAY, fixed
from tests.schedules._support import run


def attempt_starts(interval: float, took: float, n: int) -> list[float]:
    """Start times of *n* + 1 attempts that each take *took* seconds under fixed(interval)."""
    steps = run(fixed(interval), n, None, durations=[took] * n)
    return [0.0] + [round(now + delay, 9) for _, delay, now in steps if delay is not None]


def test_short_attempts_start_on_the_grid() -> None:
    """0.3 s attempts under fixed(1) start at 0, 1.3, 2.3, 3.3."""
    assert [0.0, 1.3, 2.3, 3.3] == attempt_starts(1.0, 0.3, 3)


def test_overrunning_attempts_follow_at_once() -> None:
    """1.5 s attempts under fixed(1) start at 0, 2.5, 4.0, 5.5."""
    assert [0.0, 2.5, 4.0, 5.5] == attempt_starts(1.0, 1.5, 3)


def test_grid_restarts_after_an_overrun() -> None:
    """After an overrun the next attempt runs at once and the grid restarts at that moment."""
    steps = run(fixed(1), 4, None, durations=[0.0, 1.5, 0.25, 0.25])
    # Steps at 0 (wait 1), 2.5 (overran: 0), 2.75 (grid from 2.5: wait .75), 3.75 (wait .75).
    assert [1.0, 0.0, 0.75, 0.75] == [delay for _, delay, _ in steps]


def test_first_wait_is_a_whole_interval_and_outputs_count() -> None:
    """The first step waits the whole interval; outputs count 0, 1, 2."""
    steps = run(fixed(2), 3, None)
    assert [(0, 2.0), (1, 2.0), (2, 2.0)] == [(output, delay) for output, delay, _ in steps]


def test_fixed_zero_never_waits() -> None:
    """fixed(0) recurs with no delay."""
    assert [0.0, 0.0, 0.0] == fixed(0).delays(3)


def test_huge_interval_is_clamped() -> None:
    """A grid wider than MAX_DELAY waits MAX_DELAY."""
    assert [MAX_DELAY] == fixed("100 weeks").delays(1)


@settings(max_examples=150)
@given(
    interval=st.floats(min_value=1e-3, max_value=1e4),
    start=st.floats(min_value=0.0, max_value=1e7),
    n=st.integers(min_value=1, max_value=60),
)
def test_float_error_never_gives_a_zero_delay_on_the_grid(
    interval: float, start: float, n: int
) -> None:
    """Attempts that take no time land on grid points; each wait is then a whole interval."""
    for _, delay, _ in run(fixed(interval), n, None, start=start):
        assert delay is not None
        assert abs(interval - delay) <= interval * 1e-6


@settings(max_examples=150)
@given(
    interval=st.floats(min_value=1e-2, max_value=100.0),
    took=st.lists(st.floats(min_value=0.0, max_value=300.0), min_size=1, max_size=30),
)
def test_zero_delay_only_after_an_overrun(interval: float, took: list[float]) -> None:
    """A wait is 0 only when the attempt overran its slot, and never longer than the interval."""
    steps = run(fixed(interval), len(took), None, durations=took)
    for k, (_, delay, _) in enumerate(steps):
        assert delay is not None
        assert 0.0 <= delay <= interval
        if delay == 0.0:
            assert k > 0
            assert took[k] > interval
