"""retry(...) as a decorator on plain and async functions."""

from __future__ import annotations

import inspect
import traceback

import pytest

from effects import RetryBudget, RetryUsageError, retry
from effects.testing import VirtualClock
from schedules import exponential, spaced


class TransientError(Exception):
    """Retried by the policies in these tests."""


class DefectError(Exception):
    """Not in ``on``: never retried."""


def test_sync_function_is_retried_until_it_succeeds(virtual_clock: VirtualClock) -> None:
    """A decorated function runs again on the on= errors, waiting the schedule's delays."""
    calls: list[tuple[int, str]] = []

    @retry(exponential(1), times=5, on=TransientError)
    def fetch(n: int, *, label: str) -> str:
        calls.append((n, label))
        if len(calls) < 3:
            raise TransientError
        return f"{label}{n}"

    assert "x7" == fetch(7, label="x")
    assert [(7, "x")] * 3 == calls
    assert [1.0, 2.0] == virtual_clock.sleeps


def test_success_at_once_never_touches_the_clock(virtual_clock: VirtualClock) -> None:
    """A call that succeeds at once does not sleep or read the clock's time."""

    @retry(spaced(5), on=TransientError)
    def ok() -> int:
        return 1

    assert 1 == ok()
    assert [] == virtual_clock.sleeps


def test_last_error_is_raised_unchanged_with_its_traceback() -> None:
    """When retries run out, the last error object itself is raised, original frames kept."""
    raised: list[TransientError] = []

    @retry(times=2, on=TransientError)
    def always_fails() -> None:
        error = TransientError(len(raised))
        raised.append(error)
        raise error

    with pytest.raises(TransientError) as info:
        always_fails()
    assert 3 == len(raised)
    assert raised[-1] is info.value
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "always_fails" == frames[-1]
    assert info.value.__context__ is None


def test_errors_outside_on_propagate_at_once() -> None:
    """An exception not in on= is a defect: raised from the first attempt, never retried."""
    calls: list[int] = []

    @retry(times=5, on=TransientError)
    def broken() -> None:
        calls.append(1)
        raise DefectError

    with pytest.raises(DefectError):
        broken()
    assert [1] == calls


def test_on_is_required_for_functions() -> None:
    """Decorating a function without on= raises RetryUsageError (a TypeError) naming on=."""

    def f() -> None:
        return None

    with pytest.raises(RetryUsageError, match=r"on=") as info:
        retry(times=3)(f)
    assert isinstance(info.value, TypeError)
    assert "f" in str(info.value)


def test_non_callables_are_rejected() -> None:
    """A Retry applied to something neither effect nor callable raises RetryUsageError."""
    with pytest.raises(RetryUsageError, match="42"):
        retry(times=1, on=TransientError)(42)  # type: ignore[call-overload]


def test_signature_and_metadata_are_kept() -> None:
    """functools.wraps keeps name, docstring, signature and __wrapped__."""

    def original(a: int, b: str = "b", *args: int, key: bool = False) -> str:
        """Docs."""
        return b * a

    wrapped = retry(times=1, on=TransientError)(original)
    assert "original" == wrapped.__name__
    assert "Docs." == wrapped.__doc__
    assert inspect.signature(original) == inspect.signature(wrapped)
    assert original is wrapped.__wrapped__  # type: ignore[attr-defined]


def test_tuple_of_on_types(virtual_clock: VirtualClock) -> None:
    """on= accepts a tuple of exception types."""
    errors: list[Exception] = [KeyError("k"), TransientError()]

    @retry(times=3, on=(TransientError, KeyError))
    def f() -> str:
        if errors:
            raise errors.pop(0)
        return "done"

    assert "done" == f()


def test_budget_on_decorated_functions(virtual_clock: VirtualClock) -> None:
    """With a budget, each call records its first attempt and retries need a token."""
    budget = RetryBudget(ratio=1.0, min_per_second=0.0, window=10.0)
    calls: list[int] = []

    @retry(times=5, on=TransientError, budget=budget)
    def f() -> None:
        calls.append(1)
        raise TransientError

    with pytest.raises(TransientError):
        f()
    # One first attempt at ratio 1.0 buys one retry; the second retry is refused.
    assert 2 == len(calls)


@pytest.mark.anyio
async def test_async_function_is_retried(virtual_clock: VirtualClock) -> None:
    """An async def function is wrapped as a coroutine function and retried with async waits."""
    calls: list[int] = []

    @retry(exponential(0.25), times=4, on=TransientError)
    async def fetch(n: int) -> int:
        calls.append(n)
        if len(calls) < 4:
            raise TransientError
        return n * 2

    assert inspect.iscoroutinefunction(fetch)
    assert 10 == await fetch(5)
    assert [5, 5, 5, 5] == calls
    assert [0.25, 0.5, 1.0] == virtual_clock.sleeps


@pytest.mark.anyio
async def test_async_last_error_is_raised_unchanged(virtual_clock: VirtualClock) -> None:
    """The async wrapper raises the last error object itself."""
    raised: list[TransientError] = []

    @retry(times=1, on=TransientError)
    async def fails() -> None:
        raised.append(TransientError())
        raise raised[-1]

    with pytest.raises(TransientError) as info:
        await fails()
    assert 2 == len(raised)
    assert raised[-1] is info.value


@pytest.mark.anyio
async def test_async_defects_propagate_at_once() -> None:
    """An async function raising outside on= is not retried."""
    calls: list[int] = []

    @retry(times=3, on=TransientError)
    async def broken() -> None:
        calls.append(1)
        raise DefectError

    with pytest.raises(DefectError):
        await broken()
    assert [1] == calls


@pytest.mark.anyio
async def test_async_budget_variant(virtual_clock: VirtualClock) -> None:
    """The async wrapper with a budget records the first attempt and gives up when refused."""
    budget = RetryBudget(ratio=0.0, min_per_second=0.0, window=10.0)
    calls: list[int] = []

    @retry(times=3, on=TransientError, budget=budget)
    async def f() -> int:
        calls.append(1)
        raise TransientError

    with pytest.raises(TransientError):
        await f()
    assert [1] == calls
