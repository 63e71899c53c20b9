"""What is never retried: FatalError, retryable=False, defects and non-Exception BaseExceptions."""

from __future__ import annotations

import pytest

from effects import AsyncEffect, Effect, EffectsError, FatalError, retry


class NotRetryableError(Exception):
    """An ordinary error that opts out of retries."""

    retryable = False


class RetryableError(Exception):
    """``retryable`` set to something other than False: retried as usual."""

    retryable = None


def test_fatal_error_keeps_message_and_code() -> None:
    """FatalError(message, code) is an EffectsError with .code and retryable False."""
    error = FatalError("card declined", code="declined")
    assert ("card declined", "declined", False) == (str(error), error.code, error.retryable)
    assert isinstance(error, EffectsError)
    assert None is FatalError("x").code


@pytest.mark.parametrize("error", [FatalError("no", "code"), NotRetryableError("no")])
def test_never_retried_errors_end_the_call_and_skip_predicates(error: Exception) -> None:
    """FatalError and retryable=False errors stop at once, unseen by while_ and the schedule."""
    calls: list[int] = []
    seen: list[object] = []

    def thunk() -> int:
        calls.append(1)
        raise error

    effect = Effect.attempt(thunk, catch=Exception)
    result = effect.pipe(retry(times=5, while_=lambda e: seen.append(e) is None)).run()
    assert error is result.failure()
    assert [1] == calls
    assert [] == seen


def test_retryable_must_be_exactly_false() -> None:
    """Only retryable is False opts out; other values (None) are retried."""
    calls: list[int] = []

    def thunk() -> int:
        calls.append(1)
        raise RetryableError

    Effect.attempt(thunk, catch=RetryableError).pipe(retry(times=2)).run()
    assert 3 == len(calls)


def test_decorated_function_re_raises_fatal_error_at_once() -> None:
    """A decorated function that raises FatalError (an on= type) is not retried."""
    calls: list[int] = []

    @retry(times=5, on=Exception)
    def f() -> None:
        calls.append(1)
        raise FatalError("stop", "c")

    with pytest.raises(FatalError) as info:
        f()
    assert "c" == info.value.code
    assert [1] == calls


@pytest.mark.parametrize("base", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_base_exceptions_escape_decorated_functions(base: type[BaseException]) -> None:
    """A BaseException that is not an Exception passes through at once, never predicated."""
    calls: list[int] = []
    seen: list[object] = []

    @retry(times=5, on=Exception, while_=lambda e: seen.append(e) is None)
    def f() -> None:
        calls.append(1)
        raise base

    with pytest.raises(base):
        f()
    assert [1] == calls
    assert [] == seen


def test_base_exception_escapes_a_retried_effect_mid_retry() -> None:
    """A KeyboardInterrupt on a later attempt ends the retried effect at once."""
    outcomes: list[BaseException] = [ValueError("a"), KeyboardInterrupt()]

    def thunk() -> int:
        raise outcomes.pop(0)

    with pytest.raises(KeyboardInterrupt):
        Effect.attempt(thunk, catch=ValueError).pipe(retry(times=5)).run()
    assert [] == outcomes


def test_defects_in_effects_are_not_retried() -> None:
    """An exception outside the effect's catch types propagates from run() at once."""
    calls: list[int] = []

    def thunk() -> int:
        calls.append(1)
        raise KeyError

    with pytest.raises(KeyError):
        Effect.attempt(thunk, catch=ValueError).pipe(retry(times=5)).run()
    assert [1] == calls


@pytest.mark.anyio
async def test_async_fatal_and_defects_are_not_retried() -> None:
    """The async runners follow the same rules."""
    calls: list[int] = []

    async def fatal() -> int:
        calls.append(1)
        raise FatalError("no")

    async def defect() -> int:
        calls.append(1)
        raise KeyError

    result = await AsyncEffect.attempt(fatal, catch=FatalError).retry(times=3).run()
    assert isinstance(result.failure(), FatalError)
    with pytest.raises(KeyError):
        await AsyncEffect.attempt(defect, catch=ValueError).retry(times=3).run()
    assert [1, 1] == calls
