"""
A failing hook, predicate or delay function ends the call: never a retry, error kept.

(A failing ``retryable`` property gives up with the error itself: test_broken_retryable.py.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from effects import AsyncEffect, Effect, RetryEvent, add_hook, retry
from effects.testing import VirtualClock
from schedules import spaced


class TransientError(Exception):
    """The error being retried."""


class HookBugError(Exception):
    """What a broken listener or predicate raises."""


def chain(error: BaseException) -> list[BaseException]:
    """*error* and its ``__context__`` chain."""
    found = [error]
    while found[-1].__context__ is not None and len(found) < 20:
        found.append(found[-1].__context__)  # type: ignore[arg-type]
    return found


def raise_hook_bug(_: object) -> bool:
    """A listener or predicate with a bug."""
    raise HookBugError("bug")


def attempt_counter(error: Exception) -> tuple[list[Exception], Callable[[], None]]:
    """A function that records and raises *error* on every call."""
    raised: list[Exception] = []

    def attempt() -> None:
        raised.append(error)
        raise error

    return raised, attempt


Case = tuple[dict[str, Any], type[BaseException], Exception]
FAILURES: dict[str, Case] = {
    "on_retry": ({"on_retry": raise_hook_bug}, HookBugError, TransientError("t")),
    "while_": ({"while_": raise_hook_bug}, HookBugError, TransientError("t")),
    "until": ({"until": raise_hook_bug}, HookBugError, TransientError("t")),
    "delay function": (
        {"schedule": spaced(1).modify_delay(raise_hook_bug)},
        HookBugError,
        TransientError("t"),
    ),
}
cases = pytest.mark.parametrize("case", list(FAILURES.values()), ids=list(FAILURES))


@cases
def test_a_failure_between_attempts_is_never_retried(
    case: Case, virtual_clock: VirtualClock
) -> None:
    """The failure propagates after one attempt, the retried error as its __context__."""
    options, raised, error = case
    calls, attempt = attempt_counter(error)
    wrapped = retry(times=5, on=TransientError, **options)(attempt)
    with pytest.raises(raised) as caught:
        wrapped()
    assert 1 == len(calls)
    assert error in chain(caught.value)


@cases
def test_the_same_holds_for_effects_and_blocks(case: Case, virtual_clock: VirtualClock) -> None:
    """Effects and attempts() blocks stop at the failure too, keeping the retried error."""
    options, raised, error = case
    policy = retry(times=5, on=TransientError, **options)
    calls, attempt = attempt_counter(error)
    with pytest.raises(raised) as caught:
        Effect.attempt(attempt, catch=TransientError).pipe(policy).run()
    assert (1, True) == (len(calls), error in chain(caught.value))
    calls, attempt = attempt_counter(error)

    def block() -> None:
        for each in policy.attempts():
            with each:
                attempt()

    with pytest.raises(raised) as caught:
        block()
    assert (1, True) == (len(calls), error in chain(caught.value))


@pytest.mark.anyio
@cases
async def test_the_same_holds_in_async_code(
    case: Case, anyio_backend: str, virtual_clock: VirtualClock
) -> None:
    """Async functions and AsyncEffects stop at the failure, under asyncio and trio."""
    options, raised, error = case
    calls: list[int] = []

    async def attempt() -> None:
        calls.append(1)
        raise error

    policy = retry(times=5, on=TransientError, **options)
    with pytest.raises(raised) as caught:
        await policy(attempt)()
    assert (1, True) == (len(calls), error in chain(caught.value))
    with pytest.raises(raised):
        await AsyncEffect.attempt(attempt, catch=TransientError).pipe(policy).run()
    assert 2 == len(calls)


def test_a_failing_global_hook_keeps_the_retried_error(virtual_clock: VirtualClock) -> None:
    """A process-wide hook that raises stops the call; the retried error is its context."""
    calls, attempt = attempt_counter(TransientError("t"))
    remove = add_hook(raise_hook_bug)
    try:
        with pytest.raises(HookBugError) as caught:
            retry(times=5, on=TransientError)(attempt)()
    finally:
        remove()
    assert 1 == len(calls)
    assert isinstance(caught.value.__context__, TransientError)


def test_a_failing_attempt_event_keeps_the_previous_error(virtual_clock: VirtualClock) -> None:
    """on_retry raising on the "attempt" event (after the wait) keeps the previous error too."""
    calls, attempt = attempt_counter(TransientError("t"))

    def fail_on_attempt(event: RetryEvent) -> None:
        if event.kind == "attempt":
            raise HookBugError(event.attempt)

    with pytest.raises(HookBugError) as caught:
        retry(spaced(1), times=5, on=TransientError, on_retry=fail_on_attempt)(attempt)()
    assert 1 == len(calls)
    assert [1.0] == virtual_clock.sleeps
    assert calls[0] is caught.value.__context__


def test_a_hook_failure_raised_while_handling_keeps_its_own_context() -> None:
    """A hook that fails inside its own except keeps that context; the retried error follows."""
    calls, attempt = attempt_counter(TransientError("t"))

    def nested(event: RetryEvent) -> None:
        try:
            raise KeyError("inner")
        except KeyError:
            raise HookBugError("outer") from None

    def chained(event: RetryEvent) -> None:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise HookBugError("outer") from inner

    for hook in (nested, chained):
        with pytest.raises(HookBugError) as caught:
            retry(times=5, on=TransientError, on_retry=hook)(attempt)()
        assert any(isinstance(link, TransientError) for link in chain(caught.value))
    assert 2 == len(calls)


def test_a_retryable_attribute_set_on_the_instance_still_counts() -> None:
    """retryable = False set in __init__ (no class attribute) still stops the retries."""
    error = TransientError("t")
    error.retryable = False  # type: ignore[attr-defined]
    calls, attempt = attempt_counter(error)
    with pytest.raises(TransientError):
        retry(times=5, on=TransientError)(attempt)()
    assert 1 == len(calls)
