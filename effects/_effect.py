"""
``Effect`` and ``AsyncEffect``: lazy, re-runnable descriptions of work with a typed error.

``returns``, ``asyncio`` and ``threading`` are imported where they are first needed (building or
timing out an effect), not at module level: ``import effects`` stays cheaper than importing
tenacity, and a program that only decorates functions never loads them.
"""

from __future__ import annotations

import contextvars
import math
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, Never, Self, TypeVar, overload

from effects import _repeating
from effects._callables import callable_kind, describe_callable
from effects._driver import effect_async, effect_sync
from effects._options import RepeatOptions, RetryOptions, error_types, repeat_values, retry_values
from effects._services import running_under_trio
from effects.errors import EffectTimeoutError
from schedules import DurationLike, ScheduleLike, to_seconds
from schedules._frozen import Immutable

if TYPE_CHECKING:
    from returns.result import Result
    from typing_extensions import Unpack

    from effects._driver import Policy
    from effects._repeating import RepeatPolicy

__all__ = ["AsyncEffect", "Effect", "error_types"]

A_co = TypeVar("A_co", covariant=True)
E_co = TypeVar("E_co", bound=Exception, covariant=True)
T = TypeVar("T")
B = TypeVar("B")
X = TypeVar("X", bound=Exception)
# Tuples of two or three catch types get their own overloads: mypy would otherwise join them
# (`catch=(KeyError, ValueError)` typed as Exception) where pyright keeps the union.
X2 = TypeVar("X2", bound=Exception)
X3 = TypeVar("X3", bound=Exception)
T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")


_MAX_WAIT = 2.0**52
"""Seconds (about 143 million years) past which a timeout is no limit at all."""


def _sync_thunk(thunk: object, constructor: str) -> None:
    """Refuse an ``async`` function where ``Effect`` needs a plain one: it would never run."""
    if callable_kind(thunk) != "sync":
        msg = (
            f"Effect.{constructor}() takes a plain function, got {describe_callable(thunk)}, "
            f"which is {callable_kind(thunk).replace('_', ' ')}: use AsyncEffect.{constructor}()"
        )
        raise TypeError(msg)


class _Pipe(Immutable):
    """What ``Effect`` and ``AsyncEffect`` share: immutability, a name, ``pipe``."""

    __slots__ = ("_name",)

    _name: str

    @property
    def name(self) -> str:
        """
        What this effect is called in retry and repeat events: the name of the function it was
        built from (kept through ``map``, ``timeout`` and the other combinators).

        Example:
            >>> def load_config() -> str:
            ...     return "{}"
            >>> Effect.sync(load_config).map(len).name
            'load_config'
        """
        return self._name

    @overload
    def pipe(self, f1: Callable[[Self], T1], /) -> T1: ...
    @overload
    def pipe(self, f1: Callable[[Self], T1], f2: Callable[[T1], T2], /) -> T2: ...
    @overload
    def pipe(
        self, f1: Callable[[Self], T1], f2: Callable[[T1], T2], f3: Callable[[T2], T3], /
    ) -> T3: ...
    @overload
    def pipe(
        self,
        f1: Callable[[Self], T1],
        f2: Callable[[T1], T2],
        f3: Callable[[T2], T3],
        f4: Callable[[T3], T4],
        /,
    ) -> T4: ...
    @overload
    def pipe(
        self,
        f1: Callable[[Self], T1],
        f2: Callable[[T1], T2],
        f3: Callable[[T2], T3],
        f4: Callable[[T3], T4],
        f5: Callable[[T4], T5],
        /,
    ) -> T5: ...
    def pipe(self, *fs: Callable[[Any], Any]) -> Any:
        """
        Apply functions left to right: ``eff.pipe(f, g)`` is ``g(f(eff))`` (up to five typed).

        This is how a retry strategy (a ``Retry`` or any effect-to-effect function) is applied.

        Example:
            >>> from effects import retry
            >>> Effect.succeed(2).pipe(retry(times=3), lambda e: e.map(str)).run()
            <Success: 2>
        """
        value: Any = self
        for f in fs:
            value = f(value)
        return value


class Effect(_Pipe, Generic[A_co, E_co]):
    """
    A lazy, re-runnable computation that succeeds with ``A`` or fails with the typed error ``E``.

    Nothing runs until ``run()``; running twice runs the work twice. Only errors chosen with
    ``catch=`` (or returned as a ``Failure``) are typed failures; any other exception raised by
    the work or by a function given to a combinator is a defect and propagates from ``run()``.

    Args:
        thunk: The work: a function of no arguments returning a ``returns`` ``Result``. Most
            code uses the constructors (``succeed``, ``fail``, ``sync``, ``attempt``,
            ``from_result``) instead.

    Example:
        >>> Effect.succeed(20).map(lambda n: n + 1).flat_map(lambda n: Effect.succeed(n * 2)).run()
        <Success: 42>
        >>> Effect.attempt(lambda: int("x"), catch=ValueError).run()
        <Failure: invalid literal for int() with base 10: 'x'>
    """

    __slots__ = ("_thunk",)

    _thunk: Callable[[], Result[A_co, E_co]]

    def __init__(self, thunk: Callable[[], Result[A_co, E_co]], name: str | None = None) -> None:
        object.__setattr__(self, "_thunk", thunk)
        object.__setattr__(self, "_name", describe_callable(thunk) if name is None else name)

    def __repr__(self) -> str:
        return f"<Effect {self._name}>"

    # --- constructors ------------------------------------------------------------------------

    @staticmethod
    def succeed(value: T) -> Effect[T, Never]:
        """
        An effect that succeeds with *value* on every run.

        Example:
            >>> Effect.succeed(3).run()
            <Success: 3>
        """
        from returns.result import Success  # noqa: PLC0415 - see the module docstring

        result: Result[T, Never] = Success(value)
        return Effect(lambda: result, "succeed")

    @staticmethod
    def fail(error: X) -> Effect[Never, X]:
        """
        An effect that fails with *error* on every run: the same object, returned, not raised.

        Example:
            >>> Effect.fail(KeyError("id")).run()
            <Failure: 'id'>
        """
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        result: Result[Never, X] = Failure(error)
        return Effect(lambda: result, "fail")

    @staticmethod
    def sync(thunk: Callable[[], T]) -> Effect[T, Never]:
        """
        An effect that succeeds with ``thunk()``; anything *thunk* raises is a defect.

        Use ``attempt`` when some of those exceptions are expected failures.

        Raises:
            TypeError: If *thunk* is an ``async`` or generator function (use ``AsyncEffect``).

        Example:
            >>> Effect.sync(lambda: 2 + 2).run()
            <Success: 4>
        """
        from returns.result import Success  # noqa: PLC0415 - see the module docstring

        _sync_thunk(thunk, "sync")

        def run() -> Result[T, Never]:
            return Success(thunk())

        return Effect(run, describe_callable(thunk))

    @overload
    @staticmethod
    def attempt(thunk: Callable[[], T], catch: tuple[type[X], type[X2]]) -> Effect[T, X | X2]: ...
    @overload
    @staticmethod
    def attempt(
        thunk: Callable[[], T], catch: tuple[type[X], type[X2], type[X3]]
    ) -> Effect[T, X | X2 | X3]: ...
    @overload
    @staticmethod
    def attempt(thunk: Callable[[], T], catch: type[X] | tuple[type[X], ...]) -> Effect[T, X]: ...
    @staticmethod
    def attempt(
        thunk: Callable[[], T], catch: type[Exception] | tuple[type[Exception], ...]
    ) -> Effect[T, Any]:
        """
        An effect that runs ``thunk()``; exceptions of the *catch* types become typed failures.

        Args:
            thunk: The work.
            catch: An ``Exception`` subclass or a tuple of them. Other exceptions are defects.

        Raises:
            TypeError: If *catch* holds anything but ``Exception`` subclasses (cancellation,
                ``KeyboardInterrupt`` and ``SystemExit`` are never caught), or *thunk* is an
                ``async`` or generator function (use ``AsyncEffect.attempt``).

        Example:
            >>> Effect.attempt(lambda: int("12"), catch=ValueError).run()
            <Success: 12>
            >>> Effect.attempt(lambda: int("x"), catch=ValueError).run_or_raise()
            Traceback (most recent call last):
            ...
            ValueError: invalid literal for int() with base 10: 'x'
        """
        from returns.result import Failure, Success  # noqa: PLC0415 - see the module docstring

        _sync_thunk(thunk, "attempt")
        types = error_types(catch, "catch")

        def run() -> Result[T, Exception]:
            try:
                return Success(thunk())
            except types as error:
                return Failure(error)

        return Effect(run, describe_callable(thunk))

    @staticmethod
    def from_result(thunk: Callable[[], Result[T, X]]) -> Effect[T, X]:
        """
        An effect whose outcome is the ``returns`` ``Result`` that ``thunk()`` returns.

        Raises:
            TypeError: If *thunk* is an ``async`` or generator function (use ``AsyncEffect``).

        Example:
            >>> from returns.result import Failure
            >>> Effect.from_result(lambda: Failure(ValueError("bad row"))).run()
            <Failure: bad row>
        """
        _sync_thunk(thunk, "from_result")
        return Effect(thunk, describe_callable(thunk))

    # --- combinators -------------------------------------------------------------------------

    def map(self, f: Callable[[A_co], B]) -> Effect[B, E_co]:
        """
        Transform the success value with *f*; a failure passes unchanged.

        Example:
            >>> Effect.succeed(2).map(lambda n: n * 10).run()
            <Success: 20>
        """
        from returns.result import Failure, Success  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        def run() -> Result[B, E_co]:
            result = inner()
            if isinstance(result, Failure):
                return result
            return Success(f(result.unwrap()))

        return Effect(run, self._name)

    def map_error(self, f: Callable[[E_co], X]) -> Effect[A_co, X]:
        """
        Transform the typed error with *f*; a success passes unchanged.

        Example:
            >>> Effect.fail(KeyError("id")).map_error(lambda e: LookupError(f"no {e}")).run()
            <Failure: no 'id'>
        """
        from returns.result import Failure, Success  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        def run() -> Result[A_co, X]:
            result = inner()
            if isinstance(result, Success):
                return result
            return Failure(f(result.failure()))

        return Effect(run, self._name)

    def flat_map(self, f: Callable[[A_co], Effect[B, X]]) -> Effect[B, E_co | X]:
        """
        Continue with the effect ``f(value)`` after a success; a failure ends the chain.

        Example:
            >>> def half(n: int) -> Effect[int, ValueError]:
            ...     return Effect.succeed(n // 2) if n % 2 == 0 else Effect.fail(ValueError(n))
            >>> Effect.succeed(8).flat_map(half).flat_map(half).run()
            <Success: 2>
            >>> Effect.succeed(6).flat_map(half).flat_map(half).run()
            <Failure: 3>
        """
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        def run() -> Result[B, E_co | X]:
            result = inner()
            if isinstance(result, Failure):
                return result
            return f(result.unwrap()).run()

        return Effect(run, self._name)

    def tap(self, f: Callable[[A_co], object]) -> Effect[A_co, E_co]:
        """
        Call *f* with the success value for its side effect; the value passes unchanged.

        Example:
            >>> Effect.succeed(1).tap(print).run()
            1
            <Success: 1>
        """
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        def run() -> Result[A_co, E_co]:
            result = inner()
            if not isinstance(result, Failure):
                f(result.unwrap())
            return result

        return Effect(run, self._name)

    def catch(self, f: Callable[[E_co], Effect[B, X]]) -> Effect[A_co | B, X]:
        """
        Recover from a typed failure with the effect ``f(error)``; defects pass through.

        Example:
            >>> Effect.fail(KeyError("id")).catch(lambda e: Effect.succeed("default")).run()
            <Success: default>
        """
        from returns.result import Success  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        def run() -> Result[A_co | B, X]:
            result = inner()
            if isinstance(result, Success):
                return result
            return f(result.failure()).run()

        return Effect(run, self._name)

    def timeout(self, duration: DurationLike) -> Effect[A_co, E_co | EffectTimeoutError]:
        """
        Fail with ``EffectTimeoutError`` when a run takes longer than *duration* (real time).

        Python cannot interrupt a running thread, so each run executes in a daemon worker thread
        (in a copy of the caller's context) and the caller stops waiting after *duration*: the
        work is **abandoned, not cancelled**. It keeps running in the background and its outcome
        is dropped. Use it only for work that is safe to abandon; ``AsyncEffect.timeout`` really
        cancels.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"2s"``: any duration
                ``to_seconds`` accepts. One longer than the platform can wait for
                (``threading.TIMEOUT_MAX``, about 292 years) waits without a limit.

        Raises:
            ValueError: If *duration* is negative, NaN, infinite or unparseable.

        Example:
            >>> Effect.sync(lambda: "fast").timeout("2s").run()
            <Success: fast>
        """
        import threading  # noqa: PLC0415 - see the module docstring

        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        seconds = to_seconds(duration, name="duration")
        wait = None if seconds >= threading.TIMEOUT_MAX else seconds
        inner = self._thunk

        def run() -> Result[A_co, E_co | EffectTimeoutError]:
            outcome: list[Result[A_co, E_co] | BaseException] = []
            done = threading.Event()
            context = contextvars.copy_context()

            def work() -> None:
                try:
                    outcome.append(context.run(inner))
                # Carried over to the caller's thread, which re-raises it as a defect.
                except BaseException as exc:  # noqa: BLE001
                    outcome.append(exc)
                finally:
                    done.set()

            threading.Thread(target=work, name="effects-timeout", daemon=True).start()
            if not done.wait(wait):
                return Failure(EffectTimeoutError(seconds))
            value = outcome[0]
            if isinstance(value, BaseException):
                raise value
            return value

        return Effect(run, self._name)

    def retry(
        self,
        schedule: ScheduleLike[Any, Any] | None = None,
        **options: Unpack[RetryOptions],
    ) -> Effect[A_co, E_co]:
        """
        ``effects.retry(...)(self)``: the same effect, retried on its typed failures.

        The options are those of ``effects.retry`` (``RetryOptions``); *on* narrows which typed
        failures are retried (default: all). Each run of the result starts a fresh retry run.

        Raises:
            ValueError: If *times* is negative, or none of *schedule*, *times*, *while_* and
                *until* is given.
            TypeError: If an option is unknown or has the wrong type.

        Example:
            >>> from effects import use_clock
            >>> from effects.testing import VirtualClock
            >>> from schedules import spaced
            >>> with use_clock(VirtualClock()) as clock:
            ...     Effect.fail(TimeoutError("slow")).retry(spaced("2s"), times=2).run()
            <Failure: slow>
            >>> clock.sleeps
            [2.0, 2.0]
        """
        return self.retried(retry_values("Effect.retry", schedule, options)[1])

    def repeat(
        self,
        schedule: ScheduleLike[Any, Any] | None = None,
        **options: Unpack[RepeatOptions],
    ) -> Effect[A_co, E_co]:
        """
        ``effects.repeat(...)(self)``: the same effect, run again after each success while the
        schedule and predicates (which see the value) say so.

        The result is the last run's: its ``Success``, or the first ``Failure`` (which stops at
        once). The options are those of ``effects.repeat`` (``RepeatOptions``).

        Raises:
            ValueError: If *times* is negative, or none of *schedule*, *times*, *while_* and
                *until* is given.
            TypeError: If an option is unknown or has the wrong type.

        Example:
            >>> from effects import use_clock
            >>> from effects.testing import VirtualClock
            >>> from schedules import spaced
            >>> polls = iter(["queued", "running", "done", "never read"])
            >>> status = Effect.sync(lambda: next(polls))
            >>> with use_clock(VirtualClock()) as clock:
            ...     status.repeat(spaced("1s"), until=lambda s: s == "done").run()
            <Success: done>
            >>> clock.sleeps
            [1.0, 1.0]
        """
        return self.repeated(repeat_values("Effect.repeat", schedule, options)[1])

    def retried(self, policy: Policy) -> Effect[A_co, E_co]:
        """This effect under the retry *policy* (what ``Retry`` and ``retry`` apply)."""
        named = policy.named(self._name)
        inner = self._thunk
        return Effect(lambda: effect_sync(named, inner), self._name)

    def repeated(self, policy: RepeatPolicy) -> Effect[A_co, E_co]:
        """This effect under the repeat *policy* (what ``Repeat`` and ``repeat`` apply)."""
        named = policy.named(self._name)
        inner = self._thunk
        return Effect(lambda: _repeating.effect_sync(named, inner), self._name)

    # --- runners -----------------------------------------------------------------------------

    def run(self) -> Result[A_co, E_co]:
        """
        Run the work: ``Success(value)`` or ``Failure(error)``.

        Raises:
            Exception: A defect (anything outside the typed failures) raised by the work or a
                combinator's function, unchanged; so is every ``BaseException``.
        """
        return self._thunk()

    def run_or_raise(self) -> A_co:
        """
        Run the work and return its value.

        Raises:
            E: The typed error of a failed run, unchanged; defects propagate as from ``run``.
        """
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        result = self._thunk()
        if isinstance(result, Failure):
            raise result.failure()
        return result.unwrap()


class AsyncEffect(_Pipe, Generic[A_co, E_co]):
    """
    ``Effect`` for ``async`` work, under asyncio or trio: the same constructors (taking async
    thunks), combinators and runners, with ``await effect.run()``.

    Args:
        thunk: An ``async`` function of no arguments returning a ``returns`` ``Result``.

    Example:
        >>> import asyncio
        >>> async def fetch() -> int:
        ...     return 41
        >>> asyncio.run(AsyncEffect.attempt(fetch, catch=OSError).map(lambda n: n + 1).run())
        <Success: 42>
    """

    __slots__ = ("_thunk",)

    _thunk: Callable[[], Coroutine[Any, Any, Result[A_co, E_co]]]

    def __init__(
        self,
        thunk: Callable[[], Coroutine[Any, Any, Result[A_co, E_co]]],
        name: str | None = None,
    ) -> None:
        object.__setattr__(self, "_thunk", thunk)
        object.__setattr__(self, "_name", describe_callable(thunk) if name is None else name)

    def __repr__(self) -> str:
        return f"<AsyncEffect {self._name}>"

    # --- constructors ------------------------------------------------------------------------

    @staticmethod
    def succeed(value: T) -> AsyncEffect[T, Never]:
        """An effect that succeeds with *value* on every run."""
        from returns.result import Success  # noqa: PLC0415 - see the module docstring

        result: Result[T, Never] = Success(value)

        async def run() -> Result[T, Never]:
            return result

        return AsyncEffect(run, "succeed")

    @staticmethod
    def fail(error: X) -> AsyncEffect[Never, X]:
        """An effect that fails with *error* on every run: the same object, returned, not raised."""
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        result: Result[Never, X] = Failure(error)

        async def run() -> Result[Never, X]:
            return result

        return AsyncEffect(run, "fail")

    @staticmethod
    def sync(thunk: Callable[[], Awaitable[T]]) -> AsyncEffect[T, Never]:
        """An effect that succeeds with ``await thunk()``; anything it raises is a defect."""
        from returns.result import Success  # noqa: PLC0415 - see the module docstring

        async def run() -> Result[T, Never]:
            return Success(await thunk())

        return AsyncEffect(run, describe_callable(thunk))

    @overload
    @staticmethod
    def attempt(
        thunk: Callable[[], Awaitable[T]], catch: tuple[type[X], type[X2]]
    ) -> AsyncEffect[T, X | X2]: ...
    @overload
    @staticmethod
    def attempt(
        thunk: Callable[[], Awaitable[T]], catch: tuple[type[X], type[X2], type[X3]]
    ) -> AsyncEffect[T, X | X2 | X3]: ...
    @overload
    @staticmethod
    def attempt(
        thunk: Callable[[], Awaitable[T]], catch: type[X] | tuple[type[X], ...]
    ) -> AsyncEffect[T, X]: ...
    @staticmethod
    def attempt(
        thunk: Callable[[], Awaitable[T]], catch: type[Exception] | tuple[type[Exception], ...]
    ) -> AsyncEffect[T, Any]:
        """
        An effect that awaits ``thunk()``; exceptions of the *catch* types become typed failures.

        Cancellation is a ``BaseException`` and can never be in *catch*: it always propagates.

        Args:
            thunk: An ``async`` function of no arguments: the work.
            catch: An ``Exception`` subclass or a tuple of them. Other exceptions are defects.

        Raises:
            TypeError: If *catch* holds anything but ``Exception`` subclasses.
        """
        from returns.result import Failure, Success  # noqa: PLC0415 - see the module docstring

        types = error_types(catch, "catch")

        async def run() -> Result[T, Exception]:
            try:
                return Success(await thunk())
            except types as error:
                return Failure(error)

        return AsyncEffect(run, describe_callable(thunk))

    @staticmethod
    def from_result(thunk: Callable[[], Awaitable[Result[T, X]]]) -> AsyncEffect[T, X]:
        """An effect whose outcome is the ``Result`` that ``await thunk()`` returns."""

        async def run() -> Result[T, X]:
            return await thunk()

        return AsyncEffect(run, describe_callable(thunk))

    # --- combinators -------------------------------------------------------------------------

    def map(self, f: Callable[[A_co], B]) -> AsyncEffect[B, E_co]:
        """Transform the success value with *f* (a plain function)."""
        from returns.result import Failure, Success  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        async def run() -> Result[B, E_co]:
            result = await inner()
            if isinstance(result, Failure):
                return result
            return Success(f(result.unwrap()))

        return AsyncEffect(run, self._name)

    def map_error(self, f: Callable[[E_co], X]) -> AsyncEffect[A_co, X]:
        """Transform the typed error with *f* (a plain function)."""
        from returns.result import Failure, Success  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        async def run() -> Result[A_co, X]:
            result = await inner()
            if isinstance(result, Success):
                return result
            return Failure(f(result.failure()))

        return AsyncEffect(run, self._name)

    def flat_map(
        self, f: Callable[[A_co], AsyncEffect[B, X] | Effect[B, X]]
    ) -> AsyncEffect[B, E_co | X]:
        """Continue with the effect ``f(value)`` (async or sync) after a success."""
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        async def run() -> Result[B, E_co | X]:
            result = await inner()
            if isinstance(result, Failure):
                return result
            return await _run_either(f(result.unwrap()))

        return AsyncEffect(run, self._name)

    def tap(self, f: Callable[[A_co], object]) -> AsyncEffect[A_co, E_co]:
        """Call *f* (a plain function) with the success value; the value passes unchanged."""
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        async def run() -> Result[A_co, E_co]:
            result = await inner()
            if not isinstance(result, Failure):
                f(result.unwrap())
            return result

        return AsyncEffect(run, self._name)

    def catch(
        self, f: Callable[[E_co], AsyncEffect[B, X] | Effect[B, X]]
    ) -> AsyncEffect[A_co | B, X]:
        """Recover from a typed failure with the effect ``f(error)``; defects pass through."""
        from returns.result import Success  # noqa: PLC0415 - see the module docstring

        inner = self._thunk

        async def run() -> Result[A_co | B, X]:
            result = await inner()
            if isinstance(result, Success):
                return result
            return await _run_either(f(result.failure()))

        return AsyncEffect(run, self._name)

    def timeout(self, duration: DurationLike) -> AsyncEffect[A_co, E_co | EffectTimeoutError]:
        """
        Cancel a run that takes longer than *duration* and fail with ``EffectTimeoutError``.

        The attempt is really cancelled: ``asyncio.timeout`` under asyncio, a
        ``trio.move_on_after`` cancel scope under trio. The deadline is the event loop's (real)
        time, not the ``use_clock`` clock.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"2s"``: any duration
                ``to_seconds`` accepts (one beyond ``MAX_WAIT`` waits without a limit).

        Raises:
            ValueError: If *duration* is negative, NaN, infinite or unparseable.
        """
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        seconds = to_seconds(duration, name="duration")
        # Event loops add the delay to their clock: beyond this it is as good as no limit.
        limit = None if seconds >= _MAX_WAIT else seconds
        inner = self._thunk

        async def run() -> Result[A_co, E_co | EffectTimeoutError]:
            if running_under_trio():
                with sys.modules["trio"].move_on_after(math.inf if limit is None else limit):
                    return await inner()
                return Failure(EffectTimeoutError(seconds))
            import asyncio  # noqa: PLC0415 - see the module docstring

            scope = asyncio.timeout(limit)
            try:
                async with scope:
                    return await inner()
            except TimeoutError:
                if not scope.expired():
                    raise
            return Failure(EffectTimeoutError(seconds))

        return AsyncEffect(run, self._name)

    def retry(
        self,
        schedule: ScheduleLike[Any, Any] | None = None,
        **options: Unpack[RetryOptions],
    ) -> AsyncEffect[A_co, E_co]:
        """
        ``effects.retry(...)(self)``: the same effect, retried on its typed failures.

        Waits with the clock's ``sleep_async`` (``trio.sleep`` under trio, else
        ``asyncio.sleep``), so cancelling the caller cancels the wait at once. The options
        and errors are those of ``Effect.retry``.

        Example:
            >>> import asyncio
            >>> from effects import use_clock
            >>> from effects.testing import VirtualClock
            >>> async def fetch() -> int:
            ...     raise ConnectionError("down")
            >>> with use_clock(VirtualClock()) as clock:
            ...     asyncio.run(AsyncEffect.attempt(fetch, catch=OSError).retry(times=2).run())
            <Failure: down>
        """
        return self.retried(retry_values("AsyncEffect.retry", schedule, options)[1])

    def repeat(
        self,
        schedule: ScheduleLike[Any, Any] | None = None,
        **options: Unpack[RepeatOptions],
    ) -> AsyncEffect[A_co, E_co]:
        """
        ``effects.repeat(...)(self)``: run again after each success while the schedule says so.

        Waits with the clock's ``sleep_async``. The options and errors are those of
        ``Effect.repeat``.
        """
        return self.repeated(repeat_values("AsyncEffect.repeat", schedule, options)[1])

    def retried(self, policy: Policy) -> AsyncEffect[A_co, E_co]:
        """This effect under the retry *policy* (what ``Retry`` and ``retry`` apply)."""
        named = policy.named(self._name)
        inner = self._thunk
        return AsyncEffect(lambda: effect_async(named, inner), self._name)

    def repeated(self, policy: RepeatPolicy) -> AsyncEffect[A_co, E_co]:
        """This effect under the repeat *policy* (what ``Repeat`` and ``repeat`` apply)."""
        named = policy.named(self._name)
        inner = self._thunk
        return AsyncEffect(lambda: _repeating.effect_async(named, inner), self._name)

    # --- runners -----------------------------------------------------------------------------

    async def run(self) -> Result[A_co, E_co]:
        """
        Run the work: ``Success(value)`` or ``Failure(error)``.

        Raises:
            Exception: A defect raised by the work or a combinator's function, unchanged; so is
                every ``BaseException`` (cancellation included).
        """
        return await self._thunk()

    async def run_or_raise(self) -> A_co:
        """
        Run the work and return its value.

        Raises:
            E: The typed error of a failed run, unchanged; defects propagate as from ``run``.
        """
        from returns.result import Failure  # noqa: PLC0415 - see the module docstring

        result = await self._thunk()
        if isinstance(result, Failure):
            raise result.failure()
        return result.unwrap()


async def _run_either(effect: AsyncEffect[T, X] | Effect[T, X]) -> Result[T, X]:
    if isinstance(effect, Effect):
        return effect.run()
    return await effect.run()
