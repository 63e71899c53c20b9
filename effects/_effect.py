"""``Effect`` and ``AsyncEffect``: lazy, re-runnable descriptions of work with a typed error."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, Never, Self, TypeVar, overload

import attrs
from returns.result import Failure, Result, Success

from effects._services import running_under_trio
from effects.errors import EffectTimeoutError
from schedules import DurationLike, to_seconds

if TYPE_CHECKING:
    from effects._budget import RetryBudget
    from effects._events import RetryEvent
    from schedules import Schedule

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


def error_types(
    value: type[Exception] | tuple[type[Exception], ...], name: str
) -> tuple[type[Exception], ...]:
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


def _name(f: object) -> str:
    return str(getattr(f, "__qualname__", None) or repr(f))


class _Pipe:
    """``pipe``, shared by ``Effect`` and ``AsyncEffect``."""

    __slots__ = ()

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


@attrs.frozen(eq=False, repr=False)
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

    _thunk: Callable[[], Result[A_co, E_co]]

    def __repr__(self) -> str:
        return f"<Effect {_name(self._thunk)}>"

    # --- constructors ------------------------------------------------------------------------

    @staticmethod
    def succeed(value: T) -> Effect[T, Never]:
        """
        An effect that succeeds with *value* on every run.

        Example:
            >>> Effect.succeed(3).run()
            <Success: 3>
        """
        result: Result[T, Never] = Success(value)
        return Effect(lambda: result)

    @staticmethod
    def fail(error: X) -> Effect[Never, X]:
        """
        An effect that fails with *error* on every run: the same object, returned, not raised.

        Example:
            >>> Effect.fail(KeyError("id")).run()
            <Failure: 'id'>
        """
        result: Result[Never, X] = Failure(error)
        return Effect(lambda: result)

    @staticmethod
    def sync(thunk: Callable[[], T]) -> Effect[T, Never]:
        """
        An effect that succeeds with ``thunk()``; anything *thunk* raises is a defect.

        Use ``attempt`` when some of those exceptions are expected failures.

        Example:
            >>> Effect.sync(lambda: 2 + 2).run()
            <Success: 4>
        """

        def run() -> Result[T, Never]:
            return Success(thunk())

        return Effect(run)

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
                ``KeyboardInterrupt`` and ``SystemExit`` are never caught).

        Example:
            >>> Effect.attempt(lambda: int("12"), catch=ValueError).run()
            <Success: 12>
            >>> Effect.attempt(lambda: int("x"), catch=ValueError).run_or_raise()
            Traceback (most recent call last):
            ...
            ValueError: invalid literal for int() with base 10: 'x'
        """
        types = error_types(catch, "catch")

        def run() -> Result[T, Exception]:
            try:
                return Success(thunk())
            except types as error:
                return Failure(error)

        return Effect(run)

    @staticmethod
    def from_result(thunk: Callable[[], Result[T, X]]) -> Effect[T, X]:
        """
        An effect whose outcome is the ``returns`` ``Result`` that ``thunk()`` returns.

        Example:
            >>> from returns.result import Failure
            >>> Effect.from_result(lambda: Failure(ValueError("bad row"))).run()
            <Failure: bad row>
        """
        return Effect(thunk)

    # --- combinators -------------------------------------------------------------------------

    def map(self, f: Callable[[A_co], B]) -> Effect[B, E_co]:
        """
        Transform the success value with *f*; a failure passes unchanged.

        Example:
            >>> Effect.succeed(2).map(lambda n: n * 10).run()
            <Success: 20>
        """
        inner = self._thunk

        def run() -> Result[B, E_co]:
            result = inner()
            if isinstance(result, Failure):
                return result
            return Success(f(result.unwrap()))

        return Effect(run)

    def map_error(self, f: Callable[[E_co], X]) -> Effect[A_co, X]:
        """
        Transform the typed error with *f*; a success passes unchanged.

        Example:
            >>> Effect.fail(KeyError("id")).map_error(lambda e: LookupError(f"no {e}")).run()
            <Failure: no 'id'>
        """
        inner = self._thunk

        def run() -> Result[A_co, X]:
            result = inner()
            if isinstance(result, Success):
                return result
            return Failure(f(result.failure()))

        return Effect(run)

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
        inner = self._thunk

        def run() -> Result[B, E_co | X]:
            result = inner()
            if isinstance(result, Failure):
                return result
            return f(result.unwrap()).run()

        return Effect(run)

    def tap(self, f: Callable[[A_co], object]) -> Effect[A_co, E_co]:
        """
        Call *f* with the success value for its side effect; the value passes unchanged.

        Example:
            >>> Effect.succeed(1).tap(print).run()
            1
            <Success: 1>
        """
        inner = self._thunk

        def run() -> Result[A_co, E_co]:
            result = inner()
            if not isinstance(result, Failure):
                f(result.unwrap())
            return result

        return Effect(run)

    def catch(self, f: Callable[[E_co], Effect[B, X]]) -> Effect[A_co | B, X]:
        """
        Recover from a typed failure with the effect ``f(error)``; defects pass through.

        Example:
            >>> Effect.fail(KeyError("id")).catch(lambda e: Effect.succeed("default")).run()
            <Success: default>
        """
        inner = self._thunk

        def run() -> Result[A_co | B, X]:
            result = inner()
            if isinstance(result, Success):
                return result
            return f(result.failure()).run()

        return Effect(run)

    def timeout(self, duration: DurationLike) -> Effect[A_co, E_co | EffectTimeoutError]:
        """
        Fail with ``EffectTimeoutError`` when a run takes longer than *duration* (real time).

        Python cannot interrupt a running thread, so each run executes in a daemon worker thread
        (in a copy of the caller's context) and the caller stops waiting after *duration*: the
        work is **abandoned, not cancelled**. It keeps running in the background and its outcome
        is dropped. Use it only for work that is safe to abandon; ``AsyncEffect.timeout`` really
        cancels.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"2s"``.

        Raises:
            ValueError: If *duration* is negative, NaN, infinite or unparseable.

        Example:
            >>> Effect.sync(lambda: "fast").timeout("2s").run()
            <Success: fast>
        """
        seconds = to_seconds(duration, name="duration")
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
            if not done.wait(seconds):
                return Failure(EffectTimeoutError(seconds))
            value = outcome[0]
            if isinstance(value, BaseException):
                raise value
            return value

        return Effect(run)

    def retry(
        self,
        schedule: Schedule[Any, Any] | None = None,
        *,
        times: int | None = None,
        while_: Callable[[Any], bool] | None = None,
        until: Callable[[Any], bool] | None = None,
        budget: RetryBudget | None = None,
        on: type[Exception] | tuple[type[Exception], ...] | None = None,
        on_retry: Callable[[RetryEvent], object] | None = None,
    ) -> Effect[A_co, E_co]:
        """
        ``effects.retry(...)(self)``: the same effect, retried on its typed failures.

        The arguments are those of ``effects.retry``; *on* narrows which typed failures are
        retried (default: all). Each run of the result starts a fresh retry run.

        Raises:
            ValueError: If *times* is negative, or none of *schedule*, *times*, *while_* and
                *until* is given.
            TypeError: If an argument has the wrong type.

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
        # _retry builds on this module, so it is imported when first needed.
        from effects._retry import Retry  # noqa: PLC0415

        policy = Retry(
            schedule,
            times=times,
            while_=while_,
            until=until,
            budget=budget,
            on=on,
            on_retry=on_retry,
        )
        return policy(self)

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
        result = self._thunk()
        if isinstance(result, Failure):
            raise result.failure()
        return result.unwrap()


@attrs.frozen(eq=False, repr=False)
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

    _thunk: Callable[[], Coroutine[Any, Any, Result[A_co, E_co]]]

    def __repr__(self) -> str:
        return f"<AsyncEffect {_name(self._thunk)}>"

    # --- constructors ------------------------------------------------------------------------

    @staticmethod
    def succeed(value: T) -> AsyncEffect[T, Never]:
        """An effect that succeeds with *value* on every run."""
        result: Result[T, Never] = Success(value)

        async def run() -> Result[T, Never]:
            return result

        return AsyncEffect(run)

    @staticmethod
    def fail(error: X) -> AsyncEffect[Never, X]:
        """An effect that fails with *error* on every run: the same object, returned, not raised."""
        result: Result[Never, X] = Failure(error)

        async def run() -> Result[Never, X]:
            return result

        return AsyncEffect(run)

    @staticmethod
    def sync(thunk: Callable[[], Awaitable[T]]) -> AsyncEffect[T, Never]:
        """An effect that succeeds with ``await thunk()``; anything it raises is a defect."""

        async def run() -> Result[T, Never]:
            return Success(await thunk())

        return AsyncEffect(run)

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
        types = error_types(catch, "catch")

        async def run() -> Result[T, Exception]:
            try:
                return Success(await thunk())
            except types as error:
                return Failure(error)

        return AsyncEffect(run)

    @staticmethod
    def from_result(thunk: Callable[[], Awaitable[Result[T, X]]]) -> AsyncEffect[T, X]:
        """An effect whose outcome is the ``Result`` that ``await thunk()`` returns."""

        async def run() -> Result[T, X]:
            return await thunk()

        return AsyncEffect(run)

    # --- combinators -------------------------------------------------------------------------

    def map(self, f: Callable[[A_co], B]) -> AsyncEffect[B, E_co]:
        """Transform the success value with *f* (a plain function)."""
        inner = self._thunk

        async def run() -> Result[B, E_co]:
            result = await inner()
            if isinstance(result, Failure):
                return result
            return Success(f(result.unwrap()))

        return AsyncEffect(run)

    def map_error(self, f: Callable[[E_co], X]) -> AsyncEffect[A_co, X]:
        """Transform the typed error with *f* (a plain function)."""
        inner = self._thunk

        async def run() -> Result[A_co, X]:
            result = await inner()
            if isinstance(result, Success):
                return result
            return Failure(f(result.failure()))

        return AsyncEffect(run)

    def flat_map(
        self, f: Callable[[A_co], AsyncEffect[B, X] | Effect[B, X]]
    ) -> AsyncEffect[B, E_co | X]:
        """Continue with the effect ``f(value)`` (async or sync) after a success."""
        inner = self._thunk

        async def run() -> Result[B, E_co | X]:
            result = await inner()
            if isinstance(result, Failure):
                return result
            return await _run_either(f(result.unwrap()))

        return AsyncEffect(run)

    def tap(self, f: Callable[[A_co], object]) -> AsyncEffect[A_co, E_co]:
        """Call *f* (a plain function) with the success value; the value passes unchanged."""
        inner = self._thunk

        async def run() -> Result[A_co, E_co]:
            result = await inner()
            if not isinstance(result, Failure):
                f(result.unwrap())
            return result

        return AsyncEffect(run)

    def catch(
        self, f: Callable[[E_co], AsyncEffect[B, X] | Effect[B, X]]
    ) -> AsyncEffect[A_co | B, X]:
        """Recover from a typed failure with the effect ``f(error)``; defects pass through."""
        inner = self._thunk

        async def run() -> Result[A_co | B, X]:
            result = await inner()
            if isinstance(result, Success):
                return result
            return await _run_either(f(result.failure()))

        return AsyncEffect(run)

    def timeout(self, duration: DurationLike) -> AsyncEffect[A_co, E_co | EffectTimeoutError]:
        """
        Cancel a run that takes longer than *duration* and fail with ``EffectTimeoutError``.

        The attempt is really cancelled: ``asyncio.timeout`` under asyncio, a
        ``trio.move_on_after`` cancel scope under trio. The deadline is the event loop's (real)
        time, not the ``use_clock`` clock.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"2s"``.

        Raises:
            ValueError: If *duration* is negative, NaN, infinite or unparseable.
        """
        seconds = to_seconds(duration, name="duration")
        inner = self._thunk

        async def run() -> Result[A_co, E_co | EffectTimeoutError]:
            if running_under_trio():
                with sys.modules["trio"].move_on_after(seconds):
                    return await inner()
                return Failure(EffectTimeoutError(seconds))
            scope = asyncio.timeout(seconds)
            try:
                async with scope:
                    return await inner()
            except TimeoutError:
                if not scope.expired():
                    raise
            return Failure(EffectTimeoutError(seconds))

        return AsyncEffect(run)

    def retry(
        self,
        schedule: Schedule[Any, Any] | None = None,
        *,
        times: int | None = None,
        while_: Callable[[Any], bool] | None = None,
        until: Callable[[Any], bool] | None = None,
        budget: RetryBudget | None = None,
        on: type[Exception] | tuple[type[Exception], ...] | None = None,
        on_retry: Callable[[RetryEvent], object] | None = None,
    ) -> AsyncEffect[A_co, E_co]:
        """
        ``effects.retry(...)(self)``: the same effect, retried on its typed failures.

        Waits with the clock's ``sleep_async`` (``trio.sleep`` under trio, else
        ``asyncio.sleep``), so cancelling the caller cancels the wait at once. The arguments
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
        # _retry builds on this module, so it is imported when first needed.
        from effects._retry import Retry  # noqa: PLC0415

        policy = Retry(
            schedule,
            times=times,
            while_=while_,
            until=until,
            budget=budget,
            on=on,
            on_retry=on_retry,
        )
        return policy(self)

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
        result = await self._thunk()
        if isinstance(result, Failure):
            raise result.failure()
        return result.unwrap()


async def _run_either(effect: AsyncEffect[T, X] | Effect[T, X]) -> Result[T, X]:
    if isinstance(effect, Effect):
        return effect.run()
    return await effect.run()
