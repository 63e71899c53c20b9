"""The ``Repeat`` value: Effect's ``repeat`` for effects and functions (polling loops)."""

# A staticmethod is callable, so mypy sees its overload of __call__ overlap the Callable ones;
# the staticmethod one comes first and is the one that applies (pyright agrees).
# mypy: disable-error-code="overload-overlap"

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar, cast, overload

from effects import _repeating
from effects._callables import callable_kind, describe_callable
from effects._effect import AsyncEffect, Effect
from effects._options import RepeatOptions, repeat_values
from effects._retry import shown_options, wrap_target

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from effects._events import RepeatEvent
    from effects._repeating import RepeatPolicy
    from schedules import Schedule, ScheduleLike

__all__ = ["Repeat", "repeat"]

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)
S = TypeVar("S")

_SHOWN = ("times", "while_", "until", "on_repeat", "name")


class Repeat:
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

    __slots__ = ("_policy", "_values")

    _values: dict[str, Any]
    _policy: RepeatPolicy

    def __init__(
        self, schedule: ScheduleLike[Any, Any] | None = None, **options: Unpack[RepeatOptions]
    ) -> None:
        values, policy = repeat_values("repeat", schedule, options)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_policy", policy)

    def __setattr__(self, name: str, value: object) -> NoReturn:
        msg = f"Repeat is frozen: cannot set {name!r}"
        raise AttributeError(msg)

    def __delattr__(self, name: str) -> NoReturn:
        msg = f"Repeat is frozen: cannot delete {name!r}"
        raise AttributeError(msg)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Repeat):
            return NotImplemented
        return self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values[name] for name in sorted(self._values)))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._values,))

    @property
    def schedule(self) -> ScheduleLike[Any, Any] | None:
        """The schedule given, or ``None``."""
        return cast("ScheduleLike[Any, Any] | None", self._values["schedule"])

    @property
    def times(self) -> int | None:
        """At most this many repetitions, or ``None``."""
        return cast("int | None", self._values["times"])

    @property
    def while_(self) -> Callable[[Any], bool] | None:
        """Repeat only while this is true of the result, or ``None``."""
        return cast("Callable[[Any], bool] | None", self._values["while_"])

    @property
    def until(self) -> Callable[[Any], bool] | None:
        """Stop once this is true of the result, or ``None``."""
        return cast("Callable[[Any], bool] | None", self._values["until"])

    @property
    def on_repeat(self) -> Callable[[RepeatEvent], object] | None:
        """The listener of this policy's events, or ``None``."""
        return cast("Callable[[RepeatEvent], object] | None", self._values["on_repeat"])

    @property
    def name(self) -> str | None:
        """The name events give the repeated work, or ``None`` (the target's own name)."""
        return cast("str | None", self._values["name"])

    @property
    def composed(self) -> Schedule[Any, Any]:
        """The schedule driving the runs: ``schedule``, then ``while_``, ``until``, ``times``."""
        return self._policy.schedule

    def __repr__(self) -> str:
        schedule = self._values["schedule"]
        parts = [] if schedule is None else [repr(schedule)]
        return f"repeat({', '.join(parts + shown_options(self._values, _SHOWN))})"

    @overload
    def __call__(self, target: Effect[A, E]) -> Effect[A, E]: ...
    @overload
    def __call__(self, target: AsyncEffect[A, E]) -> AsyncEffect[A, E]: ...
    @overload
    def __call__(self, target: staticmethod[P, R]) -> staticmethod[P, R]: ...
    @overload
    def __call__(self, target: classmethod[S, P, R]) -> classmethod[S, P, R]: ...
    @overload
    def __call__(
        self, target: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, target: Callable[P, R]) -> Callable[P, R]: ...
    def __call__(self, target: object) -> object:
        """
        Repeat *target*: an ``Effect``, an ``AsyncEffect`` or a function.

        A failed run ends the call at once: a function's exception propagates, an effect's
        ``Failure`` is returned. Otherwise the result is the last run's.

        Raises:
            RetryUsageError: If *target* is a generator or async generator function, or
                neither an effect nor callable.
        """
        policy = self._policy
        if isinstance(target, Effect):
            return target.repeated(policy)  # pyright: ignore[reportUnknownVariableType]
        if isinstance(target, AsyncEffect):
            return target.repeated(policy)  # pyright: ignore[reportUnknownVariableType]
        return wrap_target("repeat", target, lambda fn: _wrap(policy, fn))


def _rebuild(values: dict[str, Any]) -> Repeat:
    options = {name: value for name, value in values.items() if name != "schedule"}
    return Repeat(values["schedule"], **options)


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
