"""
What the ``Retry`` and ``Repeat`` values share: frozen checked options and the policy they make,
compared, hashed, pickled and shown by those options; and how either wraps a function.
"""

# A staticmethod is callable, so mypy sees its overload of __call__ overlap the Callable ones;
# the staticmethod one comes first and is the one that applies (pyright agrees).
# mypy: disable-error-code="overload-overlap"

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final, ParamSpec, TypeVar, cast, overload

from effects._callables import callable_kind, describe_callable
from effects._effect import AsyncEffect, Effect
from effects.errors import RetryUsageError
from schedules._frozen import Immutable

if TYPE_CHECKING:
    from schedules import Schedule, ScheduleLike

__all__ = ["PolicyValue", "option_slots"]

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)
S = TypeVar("S")

# Typed loosely: narrowing to these generic classes would leave their type arguments unknown.
_STATIC: Final[type[Any]] = staticmethod
_CLASS: Final[type[Any]] = classmethod


class PolicyValue(Immutable):
    """
    Base of ``Retry`` and ``Repeat``: one slot per option (``_times``, ...; ``None`` where
    not given), derived from the options' TypedDict by ``option_slots``, and ``_policy`` (what
    the runners read), all set once by the subclass's ``__init__``.
    """

    __slots__ = ("_policy",)

    #: The function that builds this kind of value, as its ``repr`` shows it.
    _verb: ClassVar[str]
    #: The options its ``repr`` shows after the schedule, in order.
    _shown: ClassVar[tuple[str, ...]]

    _policy: Any
    #: The option slots of the subclass, in a fixed order: what ==, hash and pickling compare.
    _options: ClassVar[tuple[str, ...]]

    def _applied_to_effect(self, effect: Effect[Any, Any] | AsyncEffect[Any, Any]) -> object:
        raise NotImplementedError

    def _wrapped(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        raise NotImplementedError

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
        Apply the policy to *target*: an ``Effect``, an ``AsyncEffect``, or a function.

        Args:
            target: An effect (the same kind is returned: sync stays sync, async stays async)
                or a function (returned wrapped, with its signature and metadata kept; a
                ``staticmethod`` or ``classmethod`` stays one).

        Raises:
            RetryUsageError: If *target* is a generator or async generator function, neither
                an effect nor callable, or (for ``retry``) a function while ``on`` is missing.
        """
        if isinstance(target, Effect | AsyncEffect):
            return self._applied_to_effect(target)  # pyright: ignore[reportUnknownArgumentType]
        return _wrap_target(self._verb, target, self._wrapped)

    def _set(self, values: dict[str, Any], policy: object) -> None:
        for name in self._options:
            object.__setattr__(self, f"_{name}", values[name])
        object.__setattr__(self, "_policy", policy)

    def _option(self, name: str) -> Any:
        """The option *name*'s value, or ``None`` if it was not given."""
        return getattr(self, f"_{name}")

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f"_{name}") for name in self._options)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PolicyValue) or type(other) is not type(self):
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash((type(self), self._compared()))

    def __reduce__(self) -> tuple[Any, ...]:
        options = {
            name: self._option(name)
            for name in self._options
            if name != "schedule" and self._option(name) is not None
        }
        return (_rebuild, (type(self), self._option("schedule"), options))

    def __repr__(self) -> str:
        schedule = self._option("schedule")
        parts = [] if schedule is None else [repr(schedule)]
        for name in self._shown:
            value = self._option(name)
            if value is None:
                continue
            if name == "on":
                types: tuple[type, ...] = value
                shown = types[0].__qualname__ if len(types) == 1 else repr(value)
            else:
                shown = repr(value)
            parts.append(f"{name}={shown}")
        return f"{self._verb}({', '.join(parts)})"

    @property
    def schedule(self) -> ScheduleLike[Any, Any] | None:
        """The schedule given, or ``None``."""
        return cast("ScheduleLike[Any, Any] | None", self._option("schedule"))

    @property
    def times(self) -> int | None:
        """At most this many retries or repetitions, or ``None``."""
        return cast("int | None", self._option("times"))

    @property
    def while_(self) -> Callable[[Any], bool] | None:
        """Go on only while this is true of the input (error or result), or ``None``."""
        return cast("Callable[[Any], bool] | None", self._option("while_"))

    @property
    def until(self) -> Callable[[Any], bool] | None:
        """Stop once this is true of the input (error or result), or ``None``."""
        return cast("Callable[[Any], bool] | None", self._option("until"))

    @property
    def name(self) -> str | None:
        """The name events give the work, or ``None`` (the target's own name)."""
        return cast("str | None", self._option("name"))

    @property
    def composed(self) -> Schedule[Any, Any]:
        """The schedule driving the runs: ``schedule``, then ``while_``, ``until``, ``times``."""
        schedule: Schedule[Any, Any] = self._policy.schedule
        return schedule


def option_slots(options: frozenset[str]) -> tuple[str, ...]:
    """The slots of a policy value whose options are *options* (a TypedDict's keys)."""
    return tuple(f"_{name}" for name in sorted({*options, "schedule"}))


def _rebuild(
    kind: Callable[..., PolicyValue], schedule: object, options: Mapping[str, object]
) -> PolicyValue:
    return kind(schedule, **options)


def _wrap_target(
    verb: str, target: object, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> object:
    """
    Apply *wrap* to the function *target*, keeping a ``staticmethod`` or ``classmethod`` one.

    Raises:
        RetryUsageError: If *target* is not callable, or is a generator or async generator
            function (its body would run after the call returned: nothing to retry or repeat).
    """
    if isinstance(target, _STATIC):
        return staticmethod(_wrap_target(verb, target.__func__, wrap))  # type: ignore[arg-type]
    if isinstance(target, _CLASS):
        return classmethod(_wrap_target(verb, target.__func__, wrap))  # type: ignore[arg-type]
    if not callable(target):
        msg = f"{verb}(...) applies to an Effect, an AsyncEffect or a function, got {target!r}"
        raise RetryUsageError(msg)
    kind = callable_kind(target)
    if kind in {"generator", "async_generator"}:
        msg = (
            f"{verb}(...) cannot wrap {describe_callable(target)}: it is an "
            f"{kind.replace('_', ' ')} function, whose body runs only when the result is "
            f"iterated, after the call has returned; {verb} the code that iterates it"
        )
        raise RetryUsageError(msg)
    return wrap(target)
