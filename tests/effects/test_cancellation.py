"""Cancellation from outside a retried call ends it at once, mid-wait or mid-attempt.

Real time is the point here: the waits are 10 s on the system clock and the deadlines 50 ms.
Ending in under ``PROMPT`` seconds (far below the 10 s wait, far above the deadline) proves the
cancellation was prompt, with room for a machine slowed down tenfold.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from effects import AsyncEffect, EffectTimeoutError, retry
from schedules import spaced

DEADLINE = 0.05
LONG = 10.0
PROMPT = 3.0


class TransientError(Exception):
    """Retried by the policies in these tests."""


async def cancel_after(backend: str, work: Callable[[], Awaitable[object]]) -> float:
    """Run *work* under a DEADLINE from the backend's own tools; return the seconds it took.

    Asserts that the caller saw the cancellation (not a retry, not a result).
    """
    started = time.monotonic()
    if backend == "trio":
        import trio

        with trio.move_on_after(DEADLINE) as scope:
            await work()
        assert scope.cancelled_caught
    else:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(work(), DEADLINE)
    return time.monotonic() - started


async def real_sleep(backend: str, seconds: float) -> None:
    if backend == "trio":
        import trio

        await trio.sleep(seconds)
    else:
        await asyncio.sleep(seconds)


@pytest.mark.anyio
async def test_cancel_during_the_wait_of_a_decorated_function(anyio_backend: str) -> None:
    """wait_for / a trio cancel scope cancels a decorated call mid-wait, with no more attempts."""
    calls: list[int] = []

    @retry(spaced(LONG), on=TransientError)
    async def flaky() -> None:
        calls.append(1)
        raise TransientError

    elapsed = await cancel_after(anyio_backend, flaky)
    assert elapsed < PROMPT
    await real_sleep(anyio_backend, 0.02)
    assert [1] == calls


@pytest.mark.anyio
async def test_cancel_during_an_attempt_is_not_retried(anyio_backend: str) -> None:
    """Cancellation raised inside an attempt propagates even with on=Exception."""
    calls: list[int] = []

    @retry(times=5, on=Exception)
    async def slow() -> None:
        calls.append(1)
        await real_sleep(anyio_backend, LONG)

    elapsed = await cancel_after(anyio_backend, slow)
    assert elapsed < PROMPT
    assert [1] == calls


@pytest.mark.anyio
async def test_cancel_a_retried_async_effect_mid_wait(anyio_backend: str) -> None:
    """A retried AsyncEffect waiting between attempts is cancelled at once."""
    calls: list[int] = []

    async def thunk() -> int:
        calls.append(1)
        raise TransientError

    effect = AsyncEffect.attempt(thunk, catch=Exception).retry(spaced(LONG))
    elapsed = await cancel_after(anyio_backend, effect.run)
    assert elapsed < PROMPT
    assert [1] == calls


@pytest.mark.anyio
async def test_cancel_an_async_for_attempts_loop_mid_wait(anyio_backend: str) -> None:
    """An async for attempts() loop waiting between attempts is cancelled at once."""
    numbers: list[int] = []

    async def block() -> None:
        async for attempt in retry(spaced(LONG), on=TransientError).attempts():
            with attempt:
                numbers.append(attempt.number)
                raise TransientError

    elapsed = await cancel_after(anyio_backend, block)
    assert elapsed < PROMPT
    assert [1] == numbers


@pytest.mark.anyio
async def test_asyncio_timeout_block_cancels_a_retry(anyio_backend: str) -> None:
    """asyncio.timeout / trio.fail_after around a retried call raise their own timeout error."""
    calls: list[int] = []

    @retry(spaced(LONG), on=TransientError)
    async def flaky() -> None:
        calls.append(1)
        raise TransientError

    started = time.monotonic()
    if anyio_backend == "trio":
        import trio

        with pytest.raises(trio.TooSlowError), trio.fail_after(DEADLINE):
            await flaky()
    else:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(DEADLINE):
                await flaky()
    assert time.monotonic() - started < PROMPT
    assert [1] == calls


@pytest.mark.anyio
async def test_timed_out_attempts_are_retried_as_typed_failures(anyio_backend: str) -> None:
    """.timeout(d) inside a retry: each attempt is cancelled, failed typed, then retried."""
    starts: list[float] = []

    async def slow() -> int:
        starts.append(time.monotonic())
        await real_sleep(anyio_backend, LONG)
        return 1

    started = time.monotonic()
    result = await AsyncEffect.sync(slow).timeout(0.01).retry(times=2).run()
    assert isinstance(result.failure(), EffectTimeoutError)
    assert 3 == len(starts)
    assert time.monotonic() - started < PROMPT
