"""A schedule's repr parses back (through the CLI's safe parser) into the same schedule."""

from __future__ import annotations

import ast
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import (
    Schedule,
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
from schedules._expression import ExpressionError, parse_schedule
from schedules.testing import durations, schedules

AnySchedule = Schedule[Any, Any]

# Every accepted duration form (float, int, timedelta, "250ms", "1.5s"); the repr shows seconds.
duration = durations(max_value=100.0)
seconds = st.floats(min_value=0.0, max_value=100.0)
counts = st.integers(min_value=0, max_value=6)


def _from_delays(delays: list[float]) -> AnySchedule:
    return from_delays(*delays)


def _decorrelated(bounds: tuple[float, float]) -> AnySchedule:
    return decorrelated(min(bounds), max(bounds))


CRONS = ["0 3 * * *", "*/15 9-17 * * mon-fri", "0 0 29 2 *", "5,35 */2 1-15/3 jan,JUL *"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York"]

leaves: st.SearchStrategy[AnySchedule] = st.one_of(
    st.builds(cron, st.sampled_from(CRONS), tz=st.sampled_from(ZONES)),
    st.builds(forever),
    st.builds(recurs, counts),
    st.builds(once),
    st.builds(stop),
    st.builds(spaced, duration),
    st.builds(fixed, duration),
    st.builds(exponential, duration, st.floats(min_value=0.1, max_value=4.0)),
    st.builds(fibonacci, duration),
    st.builds(linear, duration),
    st.lists(seconds, max_size=4).map(_from_delays),
    st.tuples(seconds, seconds).map(_decorrelated),
    st.builds(elapsed),
    st.builds(
        from_step_options,
        retries=st.integers(min_value=1, max_value=6),
        backoff=st.sampled_from(["fixed", "exp"]),
        backoff_ms=st.integers(min_value=0, max_value=5000),
        backoff_max_ms=st.none() | st.integers(min_value=0, max_value=20_000),
        jitter=st.booleans(),
    ),
)


@st.composite
def _wrapped(draw: st.DrawFn, inner: st.SearchStrategy[AnySchedule]) -> AnySchedule:
    """One allowed method or operator applied to drawn schedules, with plain-value arguments."""
    schedule = draw(inner)
    match draw(st.sampled_from(sorted(["jittered", "max_delay", "add_delay", "times", "within",
                                        "reset_after", "|", "&", "and_then"]))):  # fmt: skip
        case "jittered":
            low = draw(st.floats(min_value=0.0, max_value=1.0))
            return schedule.jittered(min=low, max=draw(st.floats(min_value=low, max_value=2.0)))
        case "max_delay":
            return schedule.max_delay(draw(duration))
        case "add_delay":
            return schedule.add_delay(draw(duration))
        case "times":
            return schedule.times(draw(counts))
        case "within":
            return schedule.within(draw(duration))
        case "reset_after":
            return schedule.reset_after(draw(duration))
        case "|":
            return schedule | draw(inner)
        case "&":
            return schedule & draw(inner)
        case _:
            return schedule.and_then(draw(inner))


plain_schedules: st.SearchStrategy[AnySchedule] = st.recursive(leaves, _wrapped, max_leaves=6)


def _names_a_callable(text: str) -> bool:
    """True if a repr passes a function by name (a bare name that is not called)."""
    tree = ast.parse(text, mode="eval")
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return any(isinstance(node, ast.Name) and id(node) not in called for node in ast.walk(tree))


@settings(max_examples=150, deadline=None)
@given(schedule=plain_schedules, seed=st.integers(min_value=0, max_value=2**32))
def test_repr_parses_back_to_an_equal_schedule(schedule: AnySchedule, seed: int) -> None:
    """parse_schedule(repr(s)) has the same repr and the same seeded delays as s."""
    parsed = parse_schedule(repr(schedule))

    assert repr(schedule) == repr(parsed)
    assert schedule.delays(8, seed=seed) == parsed.delays(8, seed=seed)


@settings(max_examples=100, deadline=None)
@given(schedule=schedules(), seed=st.integers(min_value=0, max_value=2**32))
def test_library_strategy_reprs_parse_back_or_are_refused(schedule: AnySchedule, seed: int) -> None:
    """Any drawn schedule's repr round-trips, unless it names a callable, which is refused."""
    text = repr(schedule)

    if _names_a_callable(text):
        with pytest.raises(ExpressionError, match="is not allowed"):
            parse_schedule(text)
    else:
        parsed = parse_schedule(text)
        assert text == repr(parsed)
        assert schedule.delays(8, seed=seed) == parsed.delays(8, seed=seed)
