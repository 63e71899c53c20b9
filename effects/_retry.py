"""The ``Retry`` value: a retry policy applied to effects, functions and blocks of code."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ParamSpec, TypeGuard, TypeVar, overload

import attrs

from effects._driver import (
    Attempts,
    ErrorTypes,
    Policy,
    call_async,
    call_sync,
    effect_async,
    effect_sync,
)
from effects._effect import AsyncEffect, Effect, error_types
from effects.errors import RetryUsageError
from schedules import Schedule, forever

if TYPE_CHECKING:
    from effects._budget import RetryBudget
    from effects._events import RetryEvent

__all__ = ["Retry", "retry"]

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)

ErrorTypeArg = type[Exception] | tuple[type[Exception], ...]


def _check_times(_: object, __: object, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):  # pyright: ignore[reportUnnecessaryIsInstance]
        msg = f"times must be an int or None, got {value!r}"
        raise TypeError(msg)
    if value < 0:
        msg = f"times must be >= 0, got {value!r}"
        raise ValueError(msg)


def _check_callable(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        msg = f"{attribute.name} must be callable or None, got {value!r}"
        raise TypeError(msg)


def _check_schedule(_: object, __: object, schedule: Schedule[Any, Any] | None) -> None:
    value: object = schedule
    if value is not None and not _is_schedule(value):
        hint = (
            "; to retry an effect or function, call the Retry value: retry(...)(target)"
            if isinstance(value, Effect | AsyncEffect) or callable(value)
            else ""
        )
        msg = f"schedule must be a schedules.Schedule or None, got {value!r}{hint}"
        raise TypeError(msg)


def _is_schedule(value: object) -> bool:
    return isinstance(value, Schedule)


def _check_on(_: object, __: object, value: ErrorTypeArg | None) -> None:
    if value is not None:
        error_types(value, "on")


@attrs.frozen(repr=False)
class Retry:
    """
    An immutable retry policy. Build it with ``effects.retry(...)``; the arguments are the same.

    Apply it three ways:

    - to an effect: ``policy(effect)``, ``effect.pipe(policy)`` or ``effect.retry(...)``: the
      same kind of effect (sync or async), retried on its typed failures (only those of the
      ``on`` types when ``on`` is given);
    - as a decorator on a plain or ``async def`` function (``on`` required): retried when it
      raises one of the ``on`` types; when retries run out the last error is raised as it was;
    - to a block of code: ``for attempt in policy.attempts(): with attempt: ...`` (or
      ``async for`` in async code; ``on`` required).

    The composed schedule is built once, here, so applying a policy costs nothing per call.
    ``Retry`` values are frozen and compare equal when built from equal arguments.

    Example:
        >>> from effects import retry, use_clock
        >>> from effects.testing import VirtualClock
        >>> from schedules import exponential
        >>> attempts = []
        >>> @retry(exponential("100ms"), times=3, on=ConnectionError)
        ... def connect(host: str) -> str:
        ...     attempts.append(host)
        ...     if len(attempts) < 3:
        ...         raise ConnectionError(host)
        ...     return f"connected to {host}"
        >>> with use_clock(VirtualClock()) as clock:
        ...     connect("db")
        'connected to db'
        >>> (len(attempts), clock.sleeps)
        (3, [0.1, 0.2])
    """

    schedule: Schedule[Any, Any] | None = attrs.field(default=None, validator=_check_schedule)
    times: int | None = attrs.field(default=None, kw_only=True, validator=_check_times)
    while_: Callable[[Any], bool] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable
    )
    until: Callable[[Any], bool] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable
    )
    budget: RetryBudget | None = attrs.field(default=None, kw_only=True)
    on: ErrorTypeArg | None = attrs.field(default=None, kw_only=True, validator=_check_on)
    on_retry: Callable[[RetryEvent], object] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable
    )
    _policy: Policy = attrs.field(init=False, eq=False)
    _on: ErrorTypes | None = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        if (
            self.schedule is None
            and self.times is None
            and self.while_ is None
            and self.until is None
        ):
            # Effect would retry forever here; tenacity and backoff do that by default and users
            # get bitten. Forever must be asked for by name.
            msg = (
                "retry() needs a way to stop: give times=N, a schedule, while_= or until=; "
                "with none of them it would retry forever with no delay "
                "(pass schedule=forever() if that is what you mean)"
            )
            raise ValueError(msg)
        composed: Schedule[Any, Any] = forever() if self.schedule is None else self.schedule
        if self.while_ is not None:
            composed = composed.while_input(self.while_)
        if self.until is not None:
            composed = composed.until_input(self.until)
        if self.times is not None:
            composed = composed.times(self.times)
        # attrs frozen classes allow this spelling for derived fields set once at construction.
        times_only = (
            self.times
            if self.schedule is None and self.while_ is None and self.until is None
            else None
        )
        policy = Policy(composed, self.budget, self.on_retry, times_only)
        object.__setattr__(self, "_policy", policy)
        object.__setattr__(self, "_on", None if self.on is None else error_types(self.on, "on"))

    @property
    def composed(self) -> Schedule[Any, Any]:
        """The schedule driving the retries: ``schedule``, then ``while_``, ``until``, ``times``."""
        return self._policy.schedule

    def __repr__(self) -> str:
        parts = [] if self.schedule is None else [repr(self.schedule)]
        for name in ("times", "while_", "until", "budget", "on", "on_retry"):
            value = getattr(self, name)
            if value is not None:
                shown = value.__qualname__ if isinstance(value, type) else repr(value)
                parts.append(f"{name}={shown}")
        return f"retry({', '.join(parts)})"

    @overload
    def __call__(self, target: Effect[A, E]) -> Effect[A, E]: ...
    @overload
    def __call__(self, target: AsyncEffect[A, E]) -> AsyncEffect[A, E]: ...
    @overload
    def __call__(
        self, target: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, target: Callable[P, R]) -> Callable[P, R]: ...
    def __call__(self, target: object) -> object:
        """
        Retry *target*: an ``Effect``, an ``AsyncEffect``, or a plain or ``async def`` function.

        Args:
            target: An effect (the same kind is returned: sync stays sync, async stays async)
                or a function (returned wrapped, with its signature and metadata kept).

        Raises:
            RetryUsageError: If *target* is a function and ``on`` was not given, or if *target*
                is neither an effect nor callable.
        """
        policy, on = self._policy, self._on
        if _is_effect(target):
            return Effect(lambda: effect_sync(policy, on, target.run))
        if _is_async_effect(target):
            return AsyncEffect(lambda: effect_async(policy, on, target.run))
        if not callable(target):
            msg = f"retry(...) applies to an Effect, an AsyncEffect or a function, got {target!r}"
            raise RetryUsageError(msg)
        if on is None:
            msg = (
                f"retry(...) on the function {_qualname(target)} needs on=: the exception"
                " types to retry, e.g. retry(times=3, on=ConnectionError)"
            )
            raise RetryUsageError(msg)
        if inspect.iscoroutinefunction(target):
            return _wrap_async(policy, on, target)
        return _wrap_sync(policy, on, target)

    def attempts(self) -> Attempts:
        """
        Attempts of a block of code: ``for attempt in policy.attempts(): with attempt: ...``.

        In async code write ``async for``: the waits are then awaited (asyncio or trio). An
        error of the ``on`` types leaving ``with attempt:`` is retried per the policy; when the
        policy gives up it propagates from the ``with`` block unchanged. Other errors, and every
        ``BaseException`` that is not an ``Exception``, propagate at once.

        Raises:
            RetryUsageError: If ``on`` was not given.

        Example:
            >>> from effects import retry
            >>> calls = []
            >>> for attempt in retry(times=2, on=KeyError).attempts():
            ...     with attempt:
            ...         calls.append(attempt.number)
            ...         if len(calls) < 3:
            ...             raise KeyError("not yet")
            >>> calls
            [1, 2, 3]
        """
        if self._on is None:
            msg = "retry(...).attempts() needs on=: the exception types to retry"
            raise RetryUsageError(msg)
        return Attempts(self._policy, self._on)


def _is_effect(target: object) -> TypeGuard[Effect[Any, Any]]:
    return isinstance(target, Effect)


def _is_async_effect(target: object) -> TypeGuard[AsyncEffect[Any, Any]]:
    return isinstance(target, AsyncEffect)


def _qualname(f: object) -> str:
    return str(getattr(f, "__qualname__", None) or repr(f))


def _wrap_sync(policy: Policy, on: ErrorTypes, fn: Callable[P, R]) -> Callable[P, R]:
    # The success path is one `try` around the call: nothing is read or built before a failure.
    if policy.budget is None:

        @functools.wraps(fn)
        def retried(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except on as error:
                first = error
            # Outside the `except` block, so the error re-raised at the end keeps its context.
            try:
                return call_sync(policy, on, fn, first, args, kwargs)
            finally:
                # The error's traceback holds this frame: drop the frame's hold on the error.
                del first

        return retried

    @functools.wraps(fn)
    def retried_with_budget(*args: P.args, **kwargs: P.kwargs) -> R:
        policy.record_first_attempt()
        try:
            return fn(*args, **kwargs)
        except on as error:
            first = error
        try:
            return call_sync(policy, on, fn, first, args, kwargs)
        finally:
            # The error's traceback holds this frame: drop the frame's hold on the error.
            del first

    return retried_with_budget


def _wrap_async(
    policy: Policy, on: ErrorTypes, fn: Callable[P, Coroutine[Any, Any, R]]
) -> Callable[P, Coroutine[Any, Any, R]]:
    if policy.budget is None:

        @functools.wraps(fn)
        async def retried(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await fn(*args, **kwargs)
            except on as error:
                first = error
            try:
                return await call_async(policy, on, fn, first, args, kwargs)
            finally:
                # The error's traceback holds this frame: drop the frame's hold on the error.
                del first

        return retried

    @functools.wraps(fn)
    async def retried_with_budget(*args: P.args, **kwargs: P.kwargs) -> R:
        policy.record_first_attempt()
        try:
            return await fn(*args, **kwargs)
        except on as error:
            first = error
        try:
            return await call_async(policy, on, fn, first, args, kwargs)
        finally:
            # The error's traceback holds this frame: drop the frame's hold on the error.
            del first

    return retried_with_budget


def retry(
    schedule: Schedule[Any, Any] | None = None,
    *,
    times: int | None = None,
    while_: Callable[[Any], bool] | None = None,
    until: Callable[[Any], bool] | None = None,
    budget: RetryBudget | None = None,
    on: ErrorTypeArg | None = None,
    on_retry: Callable[[RetryEvent], object] | None = None,
) -> Retry:
    """
    A retry policy, as Effect's ``retry`` options compose it.

    Starts from *schedule* (``forever()``, no delay, when ``None``), then keeps going only
    ``while_`` the error satisfies it, stops once ``until`` does, and allows at most *times*
    retries. The schedule's input is the error; predicates are consulted only when the schedule
    would continue. The work always runs at least once, and a 0 s delay never sleeps.

    Never retried, whatever the options: ``FatalError``, any error whose ``retryable`` attribute
    is ``False``, exceptions outside the typed failures / ``on`` types, and every
    ``BaseException`` that is not an ``Exception`` (cancellation, ``KeyboardInterrupt``).

    Args:
        schedule: When to retry and how long to wait between attempts, or ``None``.
        times: At most this many retries (``times=4``: at most 5 attempts), or ``None``.
        while_: Retry only while ``while_(error)`` is true.
        until: Stop retrying once ``until(error)`` is true.
        budget: A ``RetryBudget`` shared with other calls; when it refuses, give up.
        on: The exception types to retry. Required for functions and ``attempts()``; for
            effects it narrows which typed failures are retried (default: all).
        on_retry: Called with every ``RetryEvent`` of this policy's calls (all kinds).

    Raises:
        ValueError: If *times* is negative, or if none of *schedule*, *times*, *while_* and
            *until* is given (that policy would retry forever; ask for ``forever()`` by name).
        TypeError: If an argument has the wrong type (``on`` holding a ``BaseException`` that
            is not an ``Exception``, a predicate that is not callable, ...).

    Example:
        >>> from effects import Effect
        >>> from effects.testing import VirtualClock
        >>> from effects import use_clock
        >>> from schedules import exponential
        >>> calls = []
        >>> def flaky() -> str:
        ...     calls.append(1)
        ...     if len(calls) < 3:
        ...         raise ConnectionError("down")
        ...     return "up"
        >>> with use_clock(VirtualClock()) as clock:
        ...     Effect.attempt(flaky, catch=ConnectionError).pipe(
        ...         retry(exponential(0.5), times=4)
        ...     ).run()
        <Success: up>
        >>> clock.sleeps
        [0.5, 1.0]
    """
    return Retry(
        schedule,
        times=times,
        while_=while_,
        until=until,
        budget=budget,
        on=on,
        on_retry=on_retry,
    )
