"""
Hypothesis strategies for property-testing retry policies (needs the ``testing`` extra).

``schedules()`` draws arbitrary valid schedules: every constructor, nested in every combinator
(jitter, caps, added delays, ``times``, ``within``, ``reset_after``, predicates, taps, ``map``,
``|``, ``&``, ``and_then``). ``durations()`` draws every accepted duration form. Use them to check
the laws your own policy, wrapper or driver relies on. Drive schedules through ``delays()`` or
``simulate()`` (seeded), or step them yourself with ``initial()``/``step()`` to let attempts take
time.

Functions that drawn schedules carry (delay functions, predicates, taps) are module-level and
pure, so a failing example's ``repr`` names them and the example replays.

Example:
    A wrapper that must never wait more than 30 s nor retry more than 10 times, whatever it
    wraps:

    >>> from hypothesis import given, settings
    >>> from hypothesis import strategies as st
    >>> from schedules.testing import schedules
    >>> def my_policy(schedule):
    ...     return schedule.max_delay(30).times(10)
    >>> @settings(max_examples=25)
    ... @given(schedules(), st.integers(0, 2**32 - 1))
    ... def test_my_policy_is_bounded(schedule, seed):
    ...     delays = my_policy(schedule).delays(50, seed=seed)
    ...     assert len(delays) <= 10
    ...     assert all(0.0 <= d <= 30.0 for d in delays)
    >>> test_my_policy_is_bounded()
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st

# Modules, not names: only `durations` and `schedules` are this module's public API.
from schedules import _constructors as _make
from schedules import _step_options

if TYPE_CHECKING:
    from schedules._durations import DurationLike
    from schedules._schedule import Schedule, StepInfo

__all__ = ["durations", "schedules"]


def durations(
    *, min_value: float = 0.0, max_value: float = 60.0
) -> st.SearchStrategy[DurationLike]:
    """
    Draw valid durations between *min_value* and *max_value* seconds, in every accepted form.

    The forms are ``float`` and ``int`` seconds, ``datetime.timedelta``, and strings in
    milliseconds (``"250ms"``) or seconds (``"1.5s"``).

    Args:
        min_value: Smallest duration, in seconds (>= 0); default 0.0.
        max_value: Largest duration, in seconds (>= *min_value*); default 60.0.

    Example:
        >>> from hypothesis import find
        >>> from schedules import to_seconds
        >>> example = find(durations(max_value=5.0), lambda d: to_seconds(d) >= 2.5)
        >>> 2.5 <= to_seconds(example) <= 5.0
        True
    """
    seconds = st.floats(min_value=min_value, max_value=max_value, allow_nan=False)
    low, high = int(-(-min_value // 1)), int(max_value // 1)
    milliseconds = st.integers(int(-(-min_value * 1000 // 1)), int(max_value * 1000))
    forms: list[st.SearchStrategy[DurationLike]] = [
        seconds,
        milliseconds.map(lambda ms: f"{ms}ms"),
        milliseconds.map(lambda ms: f"{ms / 1000}s"),
        milliseconds.map(lambda ms: datetime.timedelta(milliseconds=ms)),
    ]
    if low <= high:
        forms.append(st.integers(low, high))
    return st.one_of(forms)


def _halve_delay(info: StepInfo[object, object]) -> float:
    """A delay function for drawn schedules: half the wrapped delay."""
    return info.delay / 2


def _attempt_seconds(info: StepInfo[object, object]) -> float:
    """A delay function for drawn schedules: the attempt number, in seconds."""
    return float(info.attempt)


def _never(value: object) -> bool:
    """A predicate for drawn schedules: always false."""
    return False


def _always(value: object) -> bool:
    """A predicate for drawn schedules: always true."""
    return True


def _ignore(value: object) -> None:
    """A tap for drawn schedules: does nothing."""


def _leaves(delay: st.SearchStrategy[float]) -> st.SearchStrategy[Schedule[Any, Any]]:
    counts = st.integers(0, 8)
    factors = st.floats(min_value=0.25, max_value=4.0)
    bounded: list[st.SearchStrategy[Schedule[Any, Any]]] = [
        st.builds(_make.forever),
        st.builds(_make.recurs, counts),
        st.builds(_make.spaced, delay),
        st.builds(_make.fixed, delay),
        st.builds(_make.exponential, delay, factors),
        st.builds(_make.fibonacci, delay),
        st.builds(_make.linear, delay),
        st.lists(delay, max_size=6).map(lambda ds: _make.from_delays(*ds)),
        st.tuples(delay, delay).map(lambda pair: _make.decorrelated(min(pair), max(pair))),
        st.builds(_make.elapsed),
        st.builds(
            _step_options.from_step_options,
            retries=st.integers(1, 8),
            backoff=st.sampled_from(["fixed", "exp"]),
            backoff_ms=st.integers(0, 10_000),
            backoff_max_ms=st.none() | st.integers(0, 60_000),
            jitter=st.booleans(),
        ),
    ]
    return st.one_of(bounded)


def _extend(
    children: st.SearchStrategy[Schedule[Any, Any]], delay: st.SearchStrategy[float]
) -> st.SearchStrategy[Schedule[Any, Any]]:
    bounds = st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 2.0)).map(sorted)
    pairs = st.tuples(children, children)
    wrapped: list[st.SearchStrategy[Schedule[Any, Any]]] = [
        st.tuples(children, bounds).map(lambda a: a[0].jittered(min=a[1][0], max=a[1][1])),
        st.tuples(children, delay).map(lambda a: a[0].max_delay(a[1])),
        st.tuples(children, delay).map(lambda a: a[0].add_delay(a[1])),
        st.tuples(children, st.integers(0, 8)).map(lambda a: a[0].times(a[1])),
        st.tuples(children, delay).map(lambda a: a[0].within(a[1] * 10)),
        st.tuples(children, delay).map(lambda a: a[0].reset_after(a[1] * 5)),
        children.map(lambda s: s.modify_delay(_halve_delay)),
        children.map(lambda s: s.add_delay(_attempt_seconds)),
        children.map(lambda s: s.while_input(_always)),
        children.map(lambda s: s.until_input(_never)),
        children.map(lambda s: s.while_output(_always)),
        children.map(lambda s: s.until_output(_never)),
        children.map(lambda s: s.tap_input(_ignore)),
        children.map(lambda s: s.tap_output(_ignore)),
        children.map(lambda s: s.map(repr)),
        pairs.map(lambda p: p[0] | p[1]),
        pairs.map(lambda p: p[0] & p[1]),
        pairs.map(lambda p: p[0].and_then(p[1])),
    ]
    return st.one_of(wrapped)


def schedules(
    *, max_leaves: int = 6, max_delay: float = 60.0, finite: bool = False
) -> st.SearchStrategy[Schedule[object, object]]:
    """
    Draw arbitrary valid schedules: every constructor, wrapped in nested combinators.

    Drawn schedules take any input (``object``); their outputs vary with their shape. Durations
    given to constructors lie in ``[0, max_delay]`` seconds, but combinators (``add_delay``,
    ``exponential``, ``fibonacci``) can grow delays up to ``MAX_DELAY``.

    Args:
        max_leaves: Most constructors in one drawn schedule; default 6.
        max_delay: Largest duration argument, in seconds; default 60.0.
        finite: If true, every drawn schedule stops within 20 recurrences (a ``times`` on top);
            default false: drawn schedules may recur forever, so pass ``n`` to ``delays``.

    Example:
        >>> from hypothesis import given, settings
        >>> from schedules import MAX_DELAY
        >>> @settings(max_examples=20)
        ... @given(schedules())
        ... def test_delays_are_bounded(schedule):
        ...     assert all(0.0 <= d <= MAX_DELAY for d in schedule.delays(10, seed=0))
        >>> test_delays_are_bounded()
    """
    delay = st.floats(min_value=0.0, max_value=max_delay, allow_nan=False)
    drawn = st.recursive(
        _leaves(delay), lambda children: _extend(children, delay), max_leaves=max_leaves
    )
    if finite:
        drawn = st.tuples(drawn, st.integers(0, 20)).map(lambda a: a[0].times(a[1]))
    return drawn
