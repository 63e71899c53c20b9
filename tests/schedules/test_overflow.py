"""No overflow anywhere: growing schedules saturate at MAX_DELAY, fast."""

from __future__ import annotations

import time

import pytest

from schedules import (
    MAX_DELAY,
    decorrelated,
    elapsed,
    exponential,
    fibonacci,
    from_delays,
    from_step_options,
    linear,
    spaced,
)


def test_max_delay_value() -> None:
    """MAX_DELAY is 2**31 - 1 milliseconds, in seconds."""
    assert 2147483.647 == MAX_DELAY


def test_exponential_5000_ends_at_max_delay_quickly() -> None:
    """exponential(0.1).delays(5000) ends at MAX_DELAY with no OverflowError, in well under 1 s."""
    started = time.perf_counter()
    delays = exponential(0.1).delays(5000)
    assert MAX_DELAY == delays[-1]
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    "schedule",
    [
        exponential(0.1).jittered(),
        exponential(0.1).jittered(min=1.5, max=3),
        exponential(1e-300, 1.0001),
        exponential(5e-324, 10),
        exponential(0, 10),
        exponential(1, 1e300),
        fibonacci(1e-300),
        fibonacci(1000),
        linear(1e300),
        spaced(1e300).jittered(max=1e300),
        exponential(1).add_delay(1e300),
        from_step_options(retries=10_001, backoff="exp", backoff_ms=1e-300, jitter=True),
        from_step_options(retries=10_001, backoff="exp", backoff_ms=1e308, backoff_max_ms=1e308),
        from_step_options(retries=10_001, backoff_ms=1.7e308, jitter=True),
        fibonacci(1e308).jittered(max=1e300),
        linear(1e308).jittered(min=0, max=1e308),
        decorrelated(1e300, 1e308).jittered(min=2, max=1e300),
        decorrelated(5e-324, 1e308),
        from_delays(1e308, 0, 5e-324).jittered(max=1e308),
        exponential(1).modify_delay(lambda info: info.delay * 1e308).jittered(max=1e308),
        exponential(1).add_delay(lambda info: 10**400).add_delay(1e308),
        elapsed().add_delay(lambda info: info.elapsed * 1e300),
        (fibonacci(1) | linear(1e300)).jittered(max=1e300) & exponential(2, 1e300),
    ],
    ids=repr,
)
def test_growing_schedules_stay_in_range(schedule: object) -> None:
    """Extreme arguments never overflow: every delay of 10,000 stays in [0, MAX_DELAY]."""
    delays = schedule.delays(10_000, seed=1)  # type: ignore[attr-defined]
    assert all(0.0 <= d <= MAX_DELAY for d in delays)


def test_exponential_of_zero_base_stays_zero() -> None:
    """A zero base stays zero however large the attempt number."""
    assert {0.0} == set(exponential(0, 10).delays(2000))


def test_exponential_factor_bounds() -> None:
    """factor <= 0 (and NaN) raises ValueError naming factor and the value."""
    for bad in (0, -2.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"factor.*{bad!r}"):
            exponential(1, bad)


def test_fibonacci_saturates_at_max_delay_and_stays() -> None:
    """fibonacci grows to MAX_DELAY and stays there, its state never overflowing to inf."""
    schedule = fibonacci(1)
    state = schedule.initial()
    for _ in range(5000):
        state, _, delay = schedule.step(0.0, None, state, None)  # type: ignore[arg-type]
    assert (MAX_DELAY, [MAX_DELAY, MAX_DELAY]) == (delay, list(state))


def test_attempt_ten_thousand_of_every_growing_schedule_is_max_delay() -> None:
    """The 10,000th delay of exponential(1 ms), fibonacci(1 ms) and linear(1000 s) is MAX_DELAY."""
    last = [s.delays(10_000)[-1] for s in (exponential(1e-3), fibonacci(1e-3), linear(1e3))]
    assert [MAX_DELAY] * 3 == last
