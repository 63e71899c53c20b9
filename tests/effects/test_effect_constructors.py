"""Effect and AsyncEffect: constructors, combinators, runners, laziness, defects, timeouts."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
from returns.result import Failure, Result, Success

from effects import AsyncEffect, Effect, EffectTimeoutError


class BoomError(Exception):
    """A typed failure for these tests."""


class OtherError(Exception):
    """An exception outside the ``catch`` types: a defect."""


def test_succeed_and_fail_run_to_results() -> None:
    """succeed gives Success(value); fail gives Failure(error), the same error object."""
    error = BoomError("x")
    assert Success(1) == Effect.succeed(1).run()
    assert error is Effect.fail(error).run().failure()


def test_nothing_runs_until_run_and_each_run_reruns() -> None:
    """Effects are lazy and re-runnable: building runs nothing, each run runs the thunk again."""
    calls: list[int] = []

    def thunk() -> int:
        calls.append(1)
        return len(calls)

    effect = Effect.sync(thunk).map(lambda n: n * 10)
    assert [] == calls
    assert [Success(10), Success(20)] == [effect.run(), effect.run()]


def test_effects_are_frozen() -> None:
    """An Effect is an immutable value."""
    effect = Effect.succeed(1)
    with pytest.raises(AttributeError, match="frozen"):
        effect._thunk = lambda: Success(2)  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]


def test_attempt_catches_only_the_catch_types() -> None:
    """attempt turns catch types into typed failures; other exceptions propagate as defects."""

    def boom() -> int:
        raise BoomError("b")

    def other() -> int:
        raise OtherError("o")

    result = Effect.attempt(boom, catch=(BoomError, KeyError)).run()
    assert isinstance(result.failure(), BoomError)
    with pytest.raises(OtherError):
        Effect.attempt(other, catch=BoomError).run()


def test_sync_exceptions_are_defects() -> None:
    """Effect.sync has no typed error: whatever the thunk raises propagates from run()."""

    def bad() -> int:
        raise BoomError("defect")

    with pytest.raises(BoomError):
        Effect.sync(bad).run()


@pytest.mark.parametrize("bad", [KeyboardInterrupt, BaseException, SystemExit, 3, ()])
def test_catch_must_name_exception_subclasses(bad: object) -> None:
    """catch= refuses non-Exception BaseException types and non-types, naming the argument."""
    with pytest.raises(TypeError, match="catch"):
        Effect.attempt(lambda: 1, catch=bad)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def test_base_exceptions_are_never_caught() -> None:
    """A KeyboardInterrupt raised by the thunk escapes even catch=Exception."""

    def interrupt() -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Effect.attempt(interrupt, catch=Exception).run()


def test_from_result_uses_the_returned_result() -> None:
    """from_result runs a thunk that returns a returns Result and adopts it."""

    def thunk() -> Result[int, BoomError]:
        return Failure(BoomError("r"))

    assert Success(3) == Effect.from_result(lambda: Success(3)).run()
    assert isinstance(Effect.from_result(thunk).run().failure(), BoomError)


def test_map_map_error_flat_map_tap_catch() -> None:
    """Combinators transform success and failure as documented and skip the other side."""
    seen: list[int] = []
    ok = (
        Effect.succeed(2)
        .map(lambda n: n + 1)
        .tap(seen.append)
        .flat_map(lambda n: Effect.succeed(n * 2))
    )
    assert Success(6) == ok.run()
    assert [3] == seen
    failed = Effect.fail(BoomError("x")).map(lambda n: n + 1).tap(seen.append)
    assert "x" == str(failed.run().failure())
    assert [3] == seen
    assert "X!" == str(failed.map_error(lambda e: OtherError(f"{str(e).upper()}!")).run().failure())
    assert Success("recovered x") == failed.catch(lambda e: Effect.succeed(f"recovered {e}")).run()
    assert Success(2) == Effect.succeed(2).map_error(lambda e: OtherError()).run()
    assert Success(2) == Effect.succeed(2).catch(lambda e: Effect.succeed(0)).run()


def test_flat_map_failure_short_circuits() -> None:
    """flat_map after a failure never calls its function; a failing continuation fails."""
    calls: list[int] = []
    failed = Effect.fail(BoomError("first")).flat_map(
        lambda n: Effect.sync(lambda: calls.append(n))
    )
    assert "first" == str(failed.run().failure())
    assert [] == calls
    second = Effect.succeed(1).flat_map(lambda n: Effect.fail(OtherError(str(n))))
    assert "1" == str(second.run().failure())


def test_function_raising_in_combinator_is_a_defect() -> None:
    """An exception raised by a map function propagates, even if it is a catch type."""

    def bad(_: int) -> int:
        raise BoomError("in map")

    with pytest.raises(BoomError):
        Effect.attempt(lambda: 1, catch=BoomError).map(bad).run()


def test_run_or_raise() -> None:
    """run_or_raise returns the value or raises the typed error itself."""
    error = BoomError("e")
    assert 5 == Effect.succeed(5).run_or_raise()
    with pytest.raises(BoomError) as info:
        Effect.fail(error).run_or_raise()
    assert error is info.value


def test_pipe_applies_functions_left_to_right() -> None:
    """eff.pipe(f, g) is g(f(eff))."""
    double = lambda e: e.map(lambda n: n * 2)  # noqa: E731
    plus_one = lambda e: e.map(lambda n: n + 1)  # noqa: E731
    assert Success(7) == Effect.succeed(3).pipe(double, plus_one).run()
    assert Success(8) == Effect.succeed(3).pipe(plus_one, double).run()
    assert 3 == Effect.succeed(3).pipe(lambda e: e.run_or_raise())


def test_sync_timeout_fails_without_waiting_for_the_work() -> None:
    """A sync timeout returns EffectTimeoutError after the limit; the work is abandoned."""
    release = threading.Event()
    effect = Effect.sync(lambda: release.wait(10)).timeout(0.02)
    started = time.monotonic()
    result = effect.run()
    elapsed = time.monotonic() - started
    release.set()
    error = result.failure()
    assert isinstance(error, EffectTimeoutError)
    assert isinstance(error, TimeoutError)
    assert 0.02 == error.seconds
    # Far below the 10 s the work would take; room for a machine slowed down tenfold.
    assert elapsed < 3.0


def test_sync_timeout_passes_results_and_defects_through() -> None:
    """Within the limit, the outcome is the work's own: value, typed failure, or defect."""

    def defect() -> int:
        raise OtherError("d")

    assert Success(4) == Effect.succeed(4).timeout("1s").run()
    assert "f" == str(Effect.fail(BoomError("f")).timeout(1).run().failure())
    with pytest.raises(OtherError):
        Effect.sync(defect).timeout(1).run()


def test_timeout_rejects_bad_durations() -> None:
    """timeout(d) validates d at construction, naming the argument."""
    with pytest.raises(ValueError, match="duration"):
        Effect.succeed(1).timeout(-1)
    with pytest.raises(ValueError, match="duration"):
        AsyncEffect.succeed(1).timeout("soon")


@pytest.mark.anyio
async def test_async_constructors_and_combinators() -> None:
    """AsyncEffect mirrors Effect with async thunks, under asyncio and trio."""

    async def two() -> int:
        return 2

    async def boom() -> int:
        raise BoomError("b")

    async def result() -> Result[int, BoomError]:
        return Success(9)

    async def value() -> str:
        return "v"

    effect = (
        AsyncEffect.attempt(two, catch=BoomError)
        .map(lambda n: n + 1)
        .flat_map(lambda n: AsyncEffect.succeed(n * 10))
        .flat_map(lambda n: Effect.succeed(n + 1))
    )
    assert Success(31) == await effect.run()
    assert 31 == await effect.run_or_raise()
    failed = AsyncEffect.attempt(boom, catch=BoomError)
    assert "b" == str((await failed.run()).failure())
    assert "B" == str(
        (await failed.map_error(lambda e: OtherError(str(e).upper())).run()).failure()
    )
    assert Success(0) == await failed.catch(lambda e: Effect.succeed(0)).run()
    assert Success(1) == await failed.catch(lambda e: AsyncEffect.succeed(1)).run()
    assert Success(9) == await AsyncEffect.from_result(result).run()
    assert Success("v") == await AsyncEffect.sync(value).run()
    assert "f" == str((await AsyncEffect.fail(BoomError("f")).run()).failure())
    with pytest.raises(BoomError):
        await failed.run_or_raise()
    seen: list[int] = []
    assert Success(2) == await AsyncEffect.succeed(2).tap(seen.append).run()
    assert [2] == seen


@pytest.mark.anyio
async def test_async_defects_propagate() -> None:
    """Exceptions outside catch, and any exception of AsyncEffect.sync, are defects."""

    async def other() -> int:
        raise OtherError("o")

    with pytest.raises(OtherError):
        await AsyncEffect.attempt(other, catch=BoomError).run()
    with pytest.raises(OtherError):
        await AsyncEffect.sync(other).run()


@pytest.mark.anyio
async def test_async_effect_is_lazy_and_rerunnable() -> None:
    """Building an AsyncEffect runs nothing; each run awaits the thunk again."""
    calls: list[int] = []

    async def thunk() -> int:
        calls.append(1)
        return len(calls)

    effect = AsyncEffect.sync(thunk)
    assert [] == calls
    assert [Success(1), Success(2)] == [await effect.run(), await effect.run()]


@pytest.mark.anyio
async def test_async_timeout_cancels_the_attempt(anyio_backend: str) -> None:
    """AsyncEffect.timeout really cancels the work (it never finishes) and fails typed."""
    finished: list[bool] = []

    async def slow() -> int:
        await _sleep(anyio_backend, 10)
        finished.append(True)
        return 1

    started = time.monotonic()
    result = await AsyncEffect.sync(slow).timeout(0.02).run()
    assert isinstance(result.failure(), EffectTimeoutError)
    assert time.monotonic() - started < 3.0  # far below the 10 s the work would take
    await _sleep(anyio_backend, 0.03)
    assert [] == finished


@pytest.mark.anyio
async def test_async_timeout_passes_fast_work_and_own_timeouts_through() -> None:
    """Work within the limit keeps its outcome; a TimeoutError raised by it stays a defect."""

    async def own_timeout() -> int:
        raise TimeoutError("mine")

    assert Success(3) == await AsyncEffect.succeed(3).timeout(1).run()
    with pytest.raises(TimeoutError, match="mine"):
        await AsyncEffect.sync(own_timeout).timeout(1).run()


async def _sleep(backend: str, seconds: float) -> None:
    if backend == "trio":
        import trio

        await trio.sleep(seconds)
    else:
        import asyncio

        await asyncio.sleep(seconds)


@pytest.mark.parametrize(
    "duration", ["1000000 weeks", 1e300, 10**300, datetime.timedelta.max, "9" * 300 + "h"]
)
def test_sync_timeout_accepts_every_duration(duration: object) -> None:
    """Any duration to_seconds accepts works, however long: no OverflowError from the wait."""
    assert Success(1) == Effect.succeed(1).timeout(duration).run()  # type: ignore[arg-type]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "duration", ["1000000 weeks", 1e300, 10**300, datetime.timedelta.max, "9" * 300 + "h"]
)
async def test_async_timeout_accepts_every_duration(duration: object, anyio_backend: str) -> None:
    """AsyncEffect.timeout takes the same durations under asyncio and trio."""
    assert Success(1) == await AsyncEffect.succeed(1).timeout(duration).run()  # type: ignore[arg-type]
