"""Every public constructor and method refuses bad arguments, naming the argument and the value."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from typing import Any

import pytest

from schedules import (
    decorrelated,
    exponential,
    fibonacci,
    fixed,
    from_delays,
    from_step_options,
    linear,
    recurs,
    simulate,
    spaced,
    to_seconds,
)

Build = Callable[[Any], object]

# Each duration argument of the public API: (how to call it with a value, the argument's name).
DURATION_ARGUMENTS: list[tuple[str, Build, str]] = [
    ("to_seconds", lambda v: to_seconds(v, name="timeout"), "timeout"),
    ("spaced", spaced, "interval"),
    ("fixed", fixed, "interval"),
    ("exponential", exponential, "base"),
    ("fibonacci", fibonacci, "one"),
    ("linear", linear, "base"),
    ("from_delays", lambda v: from_delays(1, v), "delays[1]"),
    ("decorrelated.base", lambda v: decorrelated(v, 10), "base"),
    ("decorrelated.cap", lambda v: decorrelated(0, v), "cap"),
    ("add_delay", lambda v: spaced(1).add_delay(v), "amount"),
    ("max_delay", lambda v: spaced(1).max_delay(v), "limit"),
    ("within", lambda v: spaced(1).within(v), "limit"),
    ("reset_after", lambda v: spaced(1).reset_after(v), "duration"),
]

BAD_DURATIONS: list[object] = [
    -1,
    -0.001,
    math.nan,
    math.inf,
    -math.inf,
    10**400,
    "-1s",
    "5",
    "5 parsecs",
    "",
    "1e400s",
    datetime.timedelta(seconds=-1),
    True,
]


@pytest.mark.parametrize("bad", BAD_DURATIONS, ids=repr)
@pytest.mark.parametrize(
    ("build", "name"),
    [(b, n) for _, b, n in DURATION_ARGUMENTS],
    ids=[i for i, _, _ in DURATION_ARGUMENTS],
)
def test_bad_durations_raise_value_error_naming_argument_and_value(
    build: Build, name: str, bad: object
) -> None:
    """Negative, NaN, infinite, overflowing, unitless or unknown durations: both named."""
    with pytest.raises(ValueError) as caught:  # noqa: PT011 - the message is checked below
        build(bad)
    message = str(caught.value)
    # A long value is cut short in the message: its first 60 characters are shown.
    assert (True, True) == (name in message, repr(bad)[:60] in message)


# Every other checked argument: (call, exception type, argument name, bad value).
OTHER_ARGUMENTS: list[tuple[str, Callable[[], object], type[Exception], str, object]] = [
    ("exponential.factor=0", lambda: exponential(1, 0), ValueError, "factor", 0),
    ("exponential.factor<0", lambda: exponential(1, -2.0), ValueError, "factor", -2.0),
    ("exponential.factor=nan", lambda: exponential(1, math.nan), ValueError, "factor", math.nan),
    ("exponential.factor=inf", lambda: exponential(1, math.inf), ValueError, "factor", math.inf),
    ("exponential.factor=huge", lambda: exponential(1, 10**400), ValueError, "factor", 10**400),
    ("exponential.factor=str", lambda: exponential(1, "2"), TypeError, "factor", "2"),  # type: ignore[arg-type]
    ("decorrelated.cap<base", lambda: decorrelated(2, 1), ValueError, "cap", 1),
    ("recurs(-1)", lambda: recurs(-1), ValueError, "n", -1),
    ("recurs(1.5)", lambda: recurs(1.5), TypeError, "n", 1.5),  # type: ignore[arg-type]
    ("recurs(True)", lambda: recurs(True), TypeError, "n", True),
    ("times(-1)", lambda: spaced(1).times(-1), ValueError, "n", -1),
    ("times('3')", lambda: spaced(1).times("3"), TypeError, "n", "3"),  # type: ignore[arg-type]
    ("jittered.min<0", lambda: spaced(1).jittered(min=-0.1), ValueError, "min", -0.1),
    ("jittered.max=inf", lambda: spaced(1).jittered(max=math.inf), ValueError, "max", math.inf),
    ("jittered.max=nan", lambda: spaced(1).jittered(max=math.nan), ValueError, "max", math.nan),
    ("jittered.min>max", lambda: spaced(1).jittered(min=1.5, max=1.2), ValueError, "min", 1.5),
    ("jittered.max=huge", lambda: spaced(1).jittered(max=10**400), ValueError, "max", 10**400),
    ("jittered.min=str", lambda: spaced(1).jittered(min="0.5"), TypeError, "min", "0.5"),  # type: ignore[arg-type]
    ("delays(-1)", lambda: spaced(1).delays(-1), ValueError, "n", -1),
    ("delays(2.0)", lambda: spaced(1).delays(2.0), TypeError, "n", 2.0),  # type: ignore[arg-type]
    (
        "simulate.start=nan",
        lambda: simulate(spaced(1), [1], start=math.nan),
        ValueError,
        "start",
        math.nan,
    ),
    ("simulate.start=str", lambda: simulate(spaced(1), [1], start="0"), TypeError, "start", "0"),  # type: ignore[arg-type]
    ("retries=0", lambda: from_step_options(retries=0), ValueError, "retries", 0),
    ("retries=-1", lambda: from_step_options(retries=-1), ValueError, "retries", -1),
    ("retries=2.0", lambda: from_step_options(retries=2.0), TypeError, "retries", 2.0),  # type: ignore[arg-type]
    ("backoff", lambda: from_step_options(backoff="linear"), ValueError, "backoff", "linear"),  # type: ignore[arg-type]
    ("backoff_ms<0", lambda: from_step_options(backoff_ms=-1), ValueError, "backoff_ms", -1),
    (
        "backoff_ms=nan",
        lambda: from_step_options(backoff_ms=math.nan),
        ValueError,
        "backoff_ms",
        math.nan,
    ),
    (
        "backoff_ms=huge",
        lambda: from_step_options(backoff_ms=10**400),
        ValueError,
        "backoff_ms",
        10**400,
    ),
    ("backoff_ms='5'", lambda: from_step_options(backoff_ms="5"), TypeError, "backoff_ms", "5"),  # type: ignore[arg-type]
    (
        "backoff_max_ms=inf",
        lambda: from_step_options(backoff_max_ms=math.inf),
        ValueError,
        "backoff_max_ms",
        math.inf,
    ),
    ("jitter='yes'", lambda: from_step_options(jitter="yes"), TypeError, "jitter", "yes"),  # type: ignore[arg-type]
    ("jitter=1", lambda: from_step_options(jitter=1), TypeError, "jitter", 1),  # type: ignore[arg-type]
    ("jitter=None", lambda: from_step_options(jitter=None), TypeError, "jitter", None),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(
    ("call", "error", "name", "bad"),
    [case[1:] for case in OTHER_ARGUMENTS],
    ids=[case[0] for case in OTHER_ARGUMENTS],
)
def test_bad_arguments_raise_naming_argument_and_value(
    call: Callable[[], object], error: type[Exception], name: str, bad: object
) -> None:
    """Counts, factors, bounds, options and flags: the right error, argument and value named."""
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    # A long value is cut short in the message: its first 60 characters are shown.
    assert (True, True) == (name in message, repr(bad)[:60] in message)


def test_backoff_error_lists_the_allowed_values() -> None:
    """An unknown backoff names the value and the two allowed ones."""
    with pytest.raises(ValueError, match=r"backoff must be 'fixed' or 'exp', got 'expo'"):
        from_step_options(backoff="expo")  # type: ignore[arg-type]


def test_wrong_duration_type_is_a_type_error_naming_the_argument() -> None:
    """A value of no duration type (a list, None) raises TypeError naming argument and value."""
    for bad in ([1], None):
        with pytest.raises(TypeError) as caught:
            spaced(1).max_delay(bad)  # type: ignore[arg-type]
        assert (True, True) == ("limit" in str(caught.value), repr(bad) in str(caught.value))
