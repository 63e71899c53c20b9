"""Jittered delays stay below max*d even where float rounding would reach it."""

from __future__ import annotations

import math

import pytest

from schedules import MAX_DELAY, spaced
from tests.schedules._support import ConstantRandom


@pytest.mark.parametrize(
    ("low", "high", "r", "d"),
    [
        (0.0, 5e-324, 0.75, 1.0),  # subnormal max: 0.75 * 5e-324 rounds up to 5e-324
        (0.8, 1.2, math.nextafter(1.0, 0.0), 1.0),  # r just below 1 rounds to max
        (0.8, 1.2, math.nextafter(1.0, 0.0), 3.0),
        (0.5, 0.5 + 2**-52, 0.9, 7.0),  # bounds one ulp apart
    ],
)
def test_jittered_delay_is_below_the_open_upper_bound(
    low: float, high: float, r: float, d: float
) -> None:
    """A jittered delay lies in [min*d, max*d): never equal to max*d when min*d < max*d."""
    schedule = spaced(d).jittered(min=low, max=high)
    _, _, delay = schedule.step(0.0, None, schedule.initial(), ConstantRandom(r))
    assert delay is not None
    assert low * d <= delay < high * d


def test_equal_bounds_scale_by_exactly_that_factor() -> None:
    """With min == max the interval is a point, and the delay is exactly min*d."""
    schedule = spaced(3).jittered(min=0.5, max=0.5)
    _, _, delay = schedule.step(0.0, None, schedule.initial(), ConstantRandom(0.999))
    assert 1.5 == delay


def test_jittered_delay_near_max_delay_is_clamped() -> None:
    """A jittered delay beyond MAX_DELAY is clamped to it."""
    schedule = spaced(MAX_DELAY).jittered(min=1.0, max=2.0)
    _, _, delay = schedule.step(0.0, None, schedule.initial(), ConstantRandom(0.5))
    assert MAX_DELAY == delay
