"""The ``Repeat`` value: Effect's ``repeat`` for effects and functions (polling loops)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from effects import _repeating
from effects._callables import callable_kind, describe_callable
from effects._effect import AsyncEffect, Effect
from effects._options import RepeatOptions, repeat_values
from effects._policy_values import PolicyValue, option_slots

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from effects._events import RepeatEvent
    from effects._repeating import RepeatPolicy
    from schedules import ScheduleLike

__all__ = ["Repeat", "repeat"]

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)
S = TypeVar("S")


class Repeat(PolicyValue):
    """
    An immutable repeat policy. Build it with ``effects.repeat(...)``; the arguments are the
    same. Apply it to an effect (``policy(effect)``, ``effect.pipe(policy)``,
    ``effect.repeat(...)``) or as a decorator on a function (plain or ``async def``, a method,
    ``staticmethod`` or ``classmethod``).

    Example:
        >>> from effects import repeat, use_clock
        >>> from effects.testing import VirtualClock
        >>> from schedules import spaced
        >>> states = iter(["queued", "running", "done"])
        >>> @repeat(spaced("1s"), until=lambda state: state == "done", times=60)
        ... def job_state() -> str:
        ...     return next(states)
        >>> with use_clock(VirtualClock()) as clock:
        ...     job_state()
        'done'
        >>> clock.sleeps
        [1.0, 1.0]
    """

    # One slot per option, from the options' one declaration.
    __slots__ = option_slots(RepeatOptions.__optional_keys__)
    _options = tuple(sorted({*RepeatOptions.__optional_keys__, "schedule"}))

    _verb = "repeat"
    _shown = ("times", "while_", "until", "on_repeat", "name")
    _policy: RepeatPolicy

    def __init__(
        self, schedule: ScheduleLike[Any, Any] | None = None, **options: Unpack[RepeatOptions]
    ) -> None:
        self._set(*repeat_values("repeat", schedule, options))

    @property
    def on_repeat(self) -> Callable[[RepeatEvent], object] | None:
        """The listener of this policy's events, or ``None``."""
        return cast("Callable[[RepeatEvent], object] | None", self._option("on_repeat"))

    def _applied_to_effect(self, effect: Effect[Any, Any] | AsyncEffect[Any, Any]) -> object:
        return effect.repeated(self._policy)

    def _wrapped(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return _wrap(self._policy, fn)


def _wrap(policy: RepeatPolicy, fn: Callable[..., Any]) -> Callable[..., Any]:
    named = policy.named(describe_callable(fn))
    if callable_kind(fn) == "async":

        @functools.wraps(fn)
        async def repeated_async(*args: Any, **kwargs: Any) -> Any:
            return await _repeating.call_async(named, fn, args, kwargs)

        return repeated_async

    @functools.wraps(fn)
    def repeated(*args: Any, **kwargs: Any) -> Any:
        return _repeating.call_sync(named, fn, args, kwargs)

    return repeated


def repeat(
    schedule: ScheduleLike[Any, Any] | None = None, **options: Unpack[RepeatOptions]
) -> Repeat:
    """
    A repeat policy, as Effect's ``repeat`` options compose it: run again on *success*.

    For polling loops: ``repeat(spaced("1s"), until=lambda r: r.done, times=60)`` runs the work,
    then again one second after each result that is not done, at most 60 more times, and
    returns the last result. Composed as ``retry``'s options are: *schedule* (``forever()``, no
    delay, when ``None``), then ``while_``, then ``until``, then *times*; the schedule and the
    predicates see each run's result, the first step comes at the end of the first run, and
    the last success is given to the schedule too. Predicates are asked only when the schedule
    would go on. A failed run stops at once and propagates (the schedule never sees it); a 0
    delay never sleeps. Waits use the active clock (``use_clock``), under asyncio or trio in
    async code.

    Two differences from Effect, on purpose: the result is always the *last success value*
    (Effect's schedule form returns the schedule's output), and ``times=0`` means a single run
    (Effect ignores ``times: 0``).

    Args:
        schedule: When to run again and how long to wait: a ``schedules.Schedule`` (or anything
            with its step contract), or ``None``.
        options: ``RepeatOptions``:

            - ``times``: at most this many repetitions (``times=60``: at most 61 runs).
            - ``while_``: repeat only while ``while_(result)`` is true.
            - ``until``: stop once ``until(result)`` is true.
            - ``on_repeat``: called with every ``RepeatEvent`` of this policy's calls.
            - ``name``: what events call the repeated work (default: the function's qualified
              name or the effect's name).

    Raises:
        ValueError: If *times* is negative, or none of *schedule*, *times*, *while_* and
            *until* is given (it would repeat forever; ask for ``forever()`` by name).
        TypeError: If an option is unknown (``RetryUsageError``) or has the wrong type.

    Example:
        >>> from effects import Effect, use_clock
        >>> from effects.testing import VirtualClock
        >>> from schedules import spaced
        >>> polls = iter([3, 2, 1, 0])
        >>> remaining = Effect.sync(lambda: next(polls))
        >>> with use_clock(VirtualClock()) as clock:
        ...     remaining.pipe(repeat(spaced("500ms"), while_=lambda left: left > 0)).run()
        <Success: 0>
        >>> clock.sleeps
        [0.5, 0.5, 0.5]
    """
    return Repeat(schedule, **options)
