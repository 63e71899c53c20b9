"""The ``Retry`` value: a retry policy applied to effects, functions and blocks of code."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from types import CoroutineType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from effects._callables import callable_kind, describe_callable
from effects._driver import Attempts, Policy, call_async, call_sync, resume_async
from effects._effect import AsyncEffect, Effect
from effects._exact_wrappers import exact_wrapper
from effects._options import RetryOptions, retry_values
from effects._policy_values import PolicyValue, option_slots
from effects.errors import RetryUsageError

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from effects._budget import RetryBudget
    from effects._events import RetryEvent
    from schedules import ScheduleLike

__all__ = ["Retry", "retry"]

P = ParamSpec("P")
R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)
S = TypeVar("S")


class Retry(PolicyValue):
    """
    An immutable retry policy. Build it with ``effects.retry(...)``; the arguments are the same.

    Apply it three ways:

    - to an effect: ``policy(effect)``, ``effect.pipe(policy)`` or ``effect.retry(...)``: the
      same kind of effect (sync or async), retried on its typed failures (only those of the
      ``on`` types when ``on`` is given);
    - as a decorator on a function (``on`` required): plain or ``async def``, a method,
      ``staticmethod`` or ``classmethod``, an object with an ``async def __call__``, a
      ``functools.partial``; retried when it raises one of the ``on`` types; when retries run
      out the last error is raised as it was. A plain function that returns a coroutine (a
      lambda around an ``async def``) is retried as async: the call returns a coroutine that
      awaits each attempt. Generator functions are refused (``RetryUsageError``): their body
      runs only when iterated, after the call has returned;
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

    # One slot per option, from the options' one declaration.
    __slots__ = option_slots(RetryOptions.__optional_keys__)
    _options = tuple(sorted({*RetryOptions.__optional_keys__, "schedule"}))

    _verb = "retry"
    _shown = ("times", "while_", "until", "budget", "on", "on_retry", "name")
    _policy: Policy

    def __init__(
        self, schedule: ScheduleLike[Any, Any] | None = None, **options: Unpack[RetryOptions]
    ) -> None:
        self._set(*retry_values("retry", schedule, options))

    @property
    def budget(self) -> RetryBudget | None:
        """The shared ``RetryBudget``, or ``None``."""
        return cast("RetryBudget | None", self._option("budget"))

    @property
    def on(self) -> tuple[type[Exception], ...] | None:
        """The exception types retried (a tuple), or ``None``."""
        return cast("tuple[type[Exception], ...] | None", self._option("on"))

    @property
    def on_retry(self) -> Callable[[RetryEvent], object] | None:
        """The listener of this policy's events, or ``None``."""
        return cast("Callable[[RetryEvent], object] | None", self._option("on_retry"))

    def _applied_to_effect(self, effect: Effect[Any, Any] | AsyncEffect[Any, Any]) -> object:
        return effect.retried(self._policy)

    def _wrapped(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return _wrap(self._policy, fn)

    def attempts(self) -> Attempts:
        """
        Attempts of a block of code: ``for attempt in policy.attempts(): with attempt: ...``.

        In async code write ``async for``: the waits are then awaited (asyncio or trio). An
        error of the ``on`` types leaving ``with attempt:`` is retried per the policy; when the
        policy gives up it propagates from the ``with`` block unchanged. Other errors, and every
        ``BaseException`` that is not an ``Exception``, propagate at once. Events name the
        block ``name=`` if given, else ``"attempts()"``.

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
        if self._policy.on is None:
            msg = "retry(...).attempts() needs on=: the exception types to retry"
            raise RetryUsageError(msg)
        return Attempts(self._policy.named("attempts()"))


def _wrap(policy: Policy, fn: Callable[..., Any]) -> Callable[..., Any]:
    if policy.on is None:
        msg = (
            f"retry(...) on the function {describe_callable(fn)} needs on=: the exception"
            " types to retry, e.g. retry(times=3, on=ConnectionError)"
        )
        raise RetryUsageError(msg)
    named = policy.named(describe_callable(fn))
    is_async = callable_kind(fn) == "async"
    exact = exact_wrapper(named, fn, is_async=is_async)
    if exact is not None:
        return exact
    if is_async:
        return _wrap_async(named, fn)
    return _wrap_sync(named, fn)


def _wrap_sync(policy: Policy, fn: Callable[P, R]) -> Callable[P, R]:
    on = policy.on
    assert on is not None  # checked by _wrap
    # The success path is one `try` around the call: nothing is read or built before a failure.
    if policy.budget is None:

        @functools.wraps(fn)
        def retried(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                result = fn(*args, **kwargs)
            except on as error:
                first = error
            else:
                # A plain function around an `async def` returns its coroutine: retry that.
                if type(result) is CoroutineType:
                    return resume_async(policy, fn, cast("Any", result), args, kwargs)  # type: ignore[return-value]
                return result
            # Outside the `except` block, so the error re-raised at the end keeps its context.
            try:
                return call_sync(policy, fn, first, args, kwargs)
            finally:
                # The error's traceback holds this frame: drop the frame's hold on the error.
                del first

        return retried

    @functools.wraps(fn)
    def retried_with_budget(*args: P.args, **kwargs: P.kwargs) -> R:
        policy.record_first_attempt()
        try:
            result = fn(*args, **kwargs)
        except on as error:
            first = error
        else:
            if type(result) is CoroutineType:
                return resume_async(policy, fn, cast("Any", result), args, kwargs)  # type: ignore[return-value]
            return result
        try:
            return call_sync(policy, fn, first, args, kwargs)
        finally:
            del first

    return retried_with_budget


def _wrap_async(
    policy: Policy, fn: Callable[P, Coroutine[Any, Any, R]]
) -> Callable[P, Coroutine[Any, Any, R]]:
    on = policy.on
    assert on is not None  # checked by _wrap
    if policy.budget is None:

        @functools.wraps(fn)
        async def retried(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await fn(*args, **kwargs)
            except on as error:
                first = error
            try:
                return await call_async(policy, fn, first, args, kwargs)
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
            return await call_async(policy, fn, first, args, kwargs)
        finally:
            # The error's traceback holds this frame: drop the frame's hold on the error.
            del first

    return retried_with_budget


def retry(schedule: ScheduleLike[Any, Any] | None = None, **options: Unpack[RetryOptions]) -> Retry:
    """
    A retry policy, as Effect's ``retry`` options compose it.

    Starts from *schedule* (``forever()``, no delay, when ``None``), then keeps going only
    ``while_`` the error satisfies it, stops once ``until`` does, and allows at most *times*
    retries. The schedule's input is the error; predicates are consulted only when the schedule
    would continue. The work always runs at least once, and a 0 s delay never sleeps.

    Never retried, whatever the options: ``FatalError``, any error whose ``retryable`` attribute
    is ``False``, exceptions outside the typed failures / ``on`` types, and every
    ``BaseException`` that is not an ``Exception`` (cancellation, ``KeyboardInterrupt``). An
    exception from a predicate, a hook or ``on_retry`` ends the call at once (never retried),
    with the error being retried as its ``__context__``. An error whose ``retryable`` property
    raises is not retried either, and the call gives up with that error itself (a note on it
    names the property's failure).

    Args:
        schedule: When to retry and how long to wait between attempts: a ``schedules.Schedule``,
            anything with its step contract (``schedules.ScheduleLike``), or ``None``.
        options: ``RetryOptions``:

            - ``times``: at most this many retries (``times=4``: at most 5 attempts), or ``None``.
            - ``while_``: retry only while ``while_(error)`` is true.
            - ``until``: stop retrying once ``until(error)`` is true.
            - ``budget``: a ``RetryBudget`` shared with other calls; when it refuses, give up.
            - ``on``: the exception types to retry. Required for functions and ``attempts()``;
              for effects it narrows which typed failures are retried (default: all).
            - ``on_retry``: called with every ``RetryEvent`` of this policy's calls (all kinds).
            - ``name``: what events and log lines call the retried work (default: the
              function's qualified name or the effect's name).

    Raises:
        ValueError: If *times* is negative, or if none of *schedule*, *times*, *while_* and
            *until* is given (that policy would retry forever; ask for ``forever()`` by name).
        TypeError: If an option is unknown (``RetryUsageError``) or has the wrong type (``on``
            holding a ``BaseException`` that is not an ``Exception``, a predicate that is not
            callable, ...).

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
    return Retry(schedule, **options)
