"""Blocks of code retried with ``for attempt in policy.attempts(): with attempt: ...``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from effects import FatalError, Retry, RetryBudget, RetryUsageError, retry
from effects.testing import VirtualClock
from schedules import exponential


class TransientError(Exception):
    """Retried by the policies in these tests."""


def run_block(policy: Retry, body: Callable[[int], None]) -> None:
    """Run *body(attempt.number)* in ``for attempt in policy.attempts(): with attempt:``."""
    for attempt in policy.attempts():
        with attempt:
            body(attempt.number)


def raise_each(error: Callable[[int], BaseException], numbers: list[int]) -> Callable[[int], None]:
    """A block body that records the attempt number and raises ``error(number)``."""

    def body(number: int) -> None:
        numbers.append(number)
        raise error(number)

    return body


def test_block_is_retried_until_it_succeeds(virtual_clock: VirtualClock) -> None:
    """Failed attempts are swallowed and retried after the delay; success ends the loop."""
    numbers: list[int] = []
    for attempt in retry(exponential(1), times=5, on=TransientError).attempts():
        with attempt:
            numbers.append(attempt.number)
            if attempt.number < 3:
                raise TransientError
    assert [1, 2, 3] == numbers
    assert [1.0, 2.0] == virtual_clock.sleeps


def test_last_error_leaves_the_block_when_retries_run_out() -> None:
    """When the policy gives up, the last error propagates out of the loop unchanged."""
    raised: list[TransientError] = []

    def body(number: int) -> None:
        raised.append(TransientError(number))
        raise raised[-1]

    with pytest.raises(TransientError) as info:
        run_block(retry(times=2, on=TransientError), body)
    assert 3 == len(raised)
    assert raised[-1] is info.value


def test_other_errors_pass_through_at_once() -> None:
    """An error outside on= ends the loop on the attempt that raised it."""
    numbers: list[int] = []
    with pytest.raises(KeyError):
        run_block(retry(times=5, on=TransientError), raise_each(KeyError, numbers))
    assert [1] == numbers


def test_fatal_errors_are_not_retried_in_blocks() -> None:
    """A FatalError of an on= type still ends the loop at once."""
    numbers: list[int] = []
    with pytest.raises(FatalError):
        run_block(retry(times=5, on=Exception), raise_each(lambda n: FatalError("no"), numbers))
    assert [1] == numbers


def test_base_exceptions_pass_through_blocks() -> None:
    """KeyboardInterrupt is never caught by an attempt, even with on=Exception."""
    numbers: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        run_block(retry(times=5, on=Exception), raise_each(lambda n: KeyboardInterrupt(), numbers))
    assert [1] == numbers


def test_attempts_requires_on() -> None:
    """attempts() without on= raises RetryUsageError naming on=."""
    with pytest.raises(RetryUsageError, match="on="):
        retry(times=1).attempts()


def test_each_iteration_is_an_independent_loop(virtual_clock: VirtualClock) -> None:
    """Iterating the same Attempts twice runs two loops, each with a fresh schedule."""
    attempts = retry(exponential(1), times=1, on=TransientError).attempts()
    numbers: list[int] = []
    for _ in range(2):
        for attempt in attempts:
            with attempt:
                numbers.append(attempt.number)
                if attempt.number < 2:
                    raise TransientError
    assert [1, 2, 1, 2] == numbers
    assert [1.0, 1.0] == virtual_clock.sleeps


def test_budget_applies_to_blocks(virtual_clock: VirtualClock) -> None:
    """A budget records the block's first attempt and can refuse its retries."""
    budget = RetryBudget(ratio=0.0, min_per_second=0.0, window=1.0)
    numbers: list[int] = []
    with pytest.raises(TransientError):
        run_block(
            retry(times=3, on=TransientError, budget=budget), raise_each(TransientError, numbers)
        )
    assert [1] == numbers


def test_attempt_repr_names_its_number() -> None:
    """An Attempt prints its number."""
    for attempt in retry(times=1, on=TransientError).attempts():
        with attempt:
            assert "<Attempt 1>" == repr(attempt)


@pytest.mark.anyio
async def test_async_for_waits_with_the_async_sleep(virtual_clock: VirtualClock) -> None:
    """async for over attempts() retries with awaited waits, under asyncio and trio."""
    numbers: list[int] = []
    async for attempt in retry(exponential(0.5), times=4, on=TransientError).attempts():
        with attempt:
            numbers.append(attempt.number)
            if attempt.number < 4:
                raise TransientError
    assert [1, 2, 3, 4] == numbers
    assert [0.5, 1.0, 2.0] == virtual_clock.sleeps


@pytest.mark.anyio
async def test_async_for_gives_up_with_the_last_error(virtual_clock: VirtualClock) -> None:
    """async for re-raises the last error once the policy gives up."""
    raised: list[TransientError] = []

    async def block() -> None:
        async for attempt in retry(times=1, on=TransientError).attempts():
            with attempt:
                raised.append(TransientError())
                raise raised[-1]

    with pytest.raises(TransientError) as info:
        await block()
    assert raised[-1] is info.value
    assert 2 == len(raised)
