"""
The options of ``retry`` and ``repeat``, declared once.

``RetryOptions`` and ``RepeatOptions`` are the keyword arguments of ``retry``, ``Retry``,
``Effect.retry`` and ``AsyncEffect.retry`` (and of ``repeat``, ``Repeat``, ``Effect.repeat``,
``AsyncEffect.repeat``): each signature takes ``**options: Unpack[RetryOptions]``, and
``checked`` validates them against the same declaration. A new option is one line here and one
check below.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypedDict

from effects._budget import RetryBudget
from effects._driver import Policy
from effects._repeating import RepeatPolicy
from effects.errors import RetryUsageError
from schedules import ScheduleLike, as_schedule, forever

if TYPE_CHECKING:
    from effects._events import RepeatEvent, RetryEvent
    from schedules import Schedule

__all__ = [
    "RepeatOptions",
    "RetryOptions",
    "checked",
    "compose",
    "error_types",
    "repeat_values",
    "retry_values",
]

ErrorTypeArg = type[Exception] | tuple[type[Exception], ...]


class _Shared(TypedDict, total=False):
    """
    Keyword options that ``retry`` and ``repeat`` share. Beside them each takes *schedule*
    (first, positional or by name): when to go on and how long to wait, a ``schedules.Schedule``
    or anything with its step contract; default ``forever()``, no delay.
    """

    times: int | None
    """At most this many retries or repetitions (``times=4``: at most 5 runs in all)."""
    while_: Callable[[Any], bool] | None
    """Go on only while ``while_(input)`` is true: the error for ``retry``, the result for
    ``repeat``. Asked only when the schedule would go on."""
    until: Callable[[Any], bool] | None
    """Stop once ``until(input)`` is true; asked only when the schedule would go on."""
    name: str | None
    """What events and log lines call the retried or repeated work; default: the function's
    qualified name, the effect's name, or ``"attempts()"``."""


class RetryOptions(_Shared, total=False):
    """
    The options of ``retry`` (and ``Retry``, ``Effect.retry``, ``AsyncEffect.retry``).

    ``times``, ``while_``, ``until`` and ``name`` as in ``_Shared``; the schedule and the
    predicates see the error. Plus:
    """

    budget: RetryBudget | None
    """A ``RetryBudget`` shared with other calls; when it refuses, give up."""
    on: ErrorTypeArg | None
    """The exception types to retry. Required for functions and ``attempts()``; for effects it
    narrows which typed failures are retried (default: all)."""
    on_retry: Callable[[RetryEvent], object] | None
    """Called with every ``RetryEvent`` of this policy's calls."""


class RepeatOptions(_Shared, total=False):
    """
    The options of ``repeat`` (and ``Repeat``, ``Effect.repeat``, ``AsyncEffect.repeat``).

    ``times``, ``while_``, ``until`` and ``name`` as in ``_Shared``; the schedule and the
    predicates see each run's result. Plus:
    """

    on_repeat: Callable[[RepeatEvent], object] | None
    """Called with every ``RepeatEvent`` of this policy's calls."""


def error_types(value: ErrorTypeArg, name: str) -> tuple[type[Exception], ...]:
    """
    Normalise a ``catch=`` / ``on=`` argument to a non-empty tuple of ``Exception`` subclasses.

    ``BaseException`` subclasses that are not ``Exception`` (cancellation, ``KeyboardInterrupt``,
    ``SystemExit``) are refused: they are never caught.

    Raises:
        TypeError: Naming *name* and the bad value.
    """
    types = value if isinstance(value, tuple) else (value,)
    # Checked at run time too: the annotation is a promise callers may not keep.
    if not types or not all(_is_exception_type(t) for t in types):
        msg = (
            f"{name} must be an Exception subclass or a non-empty tuple of them, got {value!r}"
            " (BaseException that is not an Exception is never caught)"
        )
        raise TypeError(msg)
    return types


def _is_exception_type(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, Exception)


def _schedule(value: object) -> ScheduleLike[Any, Any]:
    if not isinstance(value, ScheduleLike):
        hint = (
            "; to retry an effect or function, call the policy: retry(...)(target)"
            if callable(value) or hasattr(value, "pipe")  # a function, or an Effect
            else ""
        )
        msg = (
            "schedule must be a schedules.Schedule (or have its initial() and step() methods)"
            f" or None, got {value!r}{hint}"
        )
        raise TypeError(msg)
    return value  # pyright: ignore[reportUnknownVariableType] # isinstance leaves Unknown


def _times(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"times must be an int or None, got {value!r}"
        raise TypeError(msg)
    if value < 0:
        msg = f"times must be >= 0, got {value!r}"
        raise ValueError(msg)
    return value


def _function(option: str) -> Callable[[object], object]:
    def check(value: object) -> object:
        if not callable(value):
            msg = f"{option} must be callable or None, got {value!r}"
            raise TypeError(msg)
        return value

    return check


def _name(value: object) -> object:
    if not isinstance(value, str):
        msg = f"name must be a str or None, got {value!r}"
        raise TypeError(msg)
    if not value.strip():
        msg = f"name must not be empty, got {value!r}"
        raise ValueError(msg)
    return value


def _budget(value: object) -> object:
    if not isinstance(value, RetryBudget):
        msg = f"budget must be a RetryBudget or None, got {value!r}"
        raise TypeError(msg)
    return value


def _on(value: object) -> object:
    return error_types(value, "on")  # type: ignore[arg-type]


# One check per option of the TypedDicts above (tests/effects/test_options.py compares them).
CHECKS: Final[Mapping[str, Callable[[object], object]]] = {
    "schedule": _schedule,
    "times": _times,
    "while_": _function("while_"),
    "until": _function("until"),
    "name": _name,
    "budget": _budget,
    "on": _on,
    "on_retry": _function("on_retry"),
    "on_repeat": _function("on_repeat"),
}


def checked(
    allowed: frozenset[str],
    caller: str,
    schedule: ScheduleLike[Any, Any] | None,
    options: Mapping[str, object],
) -> dict[str, Any]:
    """
    *schedule* and every option in *allowed*, validated (``None`` where not given; ``on`` as a
    tuple), by name.

    Raises:
        TypeError: For an option not in *allowed* (``RetryUsageError``) or a value of the
            wrong type.
        ValueError: For a value out of range (``times=-1``).
    """
    unknown = sorted(set(options) - allowed)
    if unknown:
        msg = f"{caller}() got unknown options {unknown}; its options are {sorted(allowed)}"
        raise RetryUsageError(msg)
    values: dict[str, Any] = dict.fromkeys(sorted({*allowed, "schedule"}))
    for option, value in {**options, "schedule": schedule}.items():
        values[option] = None if value is None else CHECKS[option](value)
    return values


def compose(values: Mapping[str, Any]) -> Schedule[Any, Any]:
    """Effect's composition: the schedule (``forever()`` if none), then while, until, times."""
    schedule: ScheduleLike[Any, Any] | None = values["schedule"]
    composed = forever() if schedule is None else as_schedule(schedule)
    if values["while_"] is not None:
        composed = composed.while_input(values["while_"])
    if values["until"] is not None:
        composed = composed.until_input(values["until"])
    if values["times"] is not None:
        composed = composed.times(values["times"])
    return composed


def _refuse_forever(values: Mapping[str, Any], caller: str, verb: str) -> None:
    """Refuse options with no way to stop: none of schedule, times, while_ and until."""
    if any(values[option] is not None for option in ("schedule", "times", "while_", "until")):
        return
    # Effect would go on forever here; tenacity and backoff do that by default and users get
    # bitten. Forever must be asked for by name.
    msg = (
        f"{caller}() needs a way to stop: give times=N, a schedule, while_= or until=; "
        f"with none of them it would {verb} forever with no delay "
        "(pass schedule=forever() if that is what you mean)"
    )
    raise ValueError(msg)


def retry_values(
    caller: str, schedule: ScheduleLike[Any, Any] | None, options: Mapping[str, object]
) -> tuple[dict[str, Any], Policy]:
    """The checked options and the ``Policy`` they make."""
    values = checked(RetryOptions.__optional_keys__, caller, schedule, options)
    _refuse_forever(values, caller, "retry")
    only_times = values["schedule"] is None and values["while_"] is None and values["until"] is None
    policy = Policy(
        compose(values),
        budget=values["budget"],
        on_retry=values["on_retry"],
        on=values["on"],
        name=values["name"],
        times_only=values["times"] if only_times else None,
    )
    return values, policy


def repeat_values(
    caller: str, schedule: ScheduleLike[Any, Any] | None, options: Mapping[str, object]
) -> tuple[dict[str, Any], RepeatPolicy]:
    """The checked options and the ``RepeatPolicy`` they make."""
    values = checked(RepeatOptions.__optional_keys__, caller, schedule, options)
    _refuse_forever(values, caller, "repeat")
    return values, RepeatPolicy(compose(values), values["on_repeat"], values["name"])
