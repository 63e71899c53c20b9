"""
Schedules: immutable, composable retry policies that you can see, simulate and test.

A ``Schedule`` decides, after each failed attempt, whether to try again and how long to wait. It
never sleeps and never reads a clock; the driver (``effects``) hands it the time and randomness.

Example:
    >>> from schedules import exponential
    >>> policy = exponential("250ms").jittered(min=0.8, max=1.2).max_delay("4s").times(4)
    >>> policy
    exponential(0.25).jittered(min=0.8, max=1.2).max_delay(4).times(4)
    >>> [round(d, 3) for d in policy.delays(seed=1)]
    [0.213, 0.569, 1.106, 1.804]
"""

from schedules._constructors import (
    decorrelated,
    elapsed,
    exponential,
    fibonacci,
    fixed,
    forever,
    from_delays,
    linear,
    once,
    recurs,
    spaced,
    stop,
)
from schedules._cron import cron
from schedules._durations import MAX_DELAY, DurationLike, to_seconds
from schedules._schedule import (
    RandomLike,
    Schedule,
    ScheduleLike,
    SimulatedStep,
    StepInfo,
    as_schedule,
    simulate,
)
from schedules._step_options import from_step_options

# Plain sorted() order, which tests/test_public_api.py checks (ruff would sort isort-style).
__all__ = [
    "DurationLike",
    "MAX_DELAY",
    "RandomLike",
    "Schedule",
    "ScheduleLike",
    "SimulatedStep",
    "StepInfo",
    "as_schedule",
    "cron",
    "decorrelated",
    "elapsed",
    "exponential",
    "fibonacci",
    "fixed",
    "forever",
    "from_delays",
    "from_step_options",
    "linear",
    "once",
    "recurs",
    "simulate",
    "spaced",
    "stop",
    "to_seconds",
]
