"""Clock and randomness services: context-variable scoping across threads and tasks."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from effects import Effect, SystemClock, retry, use_clock, use_random
from effects._services import checkpoint, current_clock, current_random, running_under_trio
from effects.testing import VirtualClock
from schedules import spaced


def test_default_clock_is_the_system_clock() -> None:
    """Without use_clock, retries use SystemClock (time.monotonic)."""
    clock = current_clock()
    assert isinstance(clock, SystemClock)
    before = time.monotonic()
    assert before <= clock.now() <= time.monotonic()


def test_use_clock_sets_and_restores() -> None:
    """use_clock installs the clock for the block and restores the previous one after."""
    outer, inner = VirtualClock(), VirtualClock(start=5)
    with use_clock(outer):
        with use_clock(inner) as entered:
            assert inner is entered
            assert inner is current_clock()
        assert outer is current_clock()
    assert isinstance(current_clock(), SystemClock)


def test_a_use_clock_block_cannot_be_entered_twice() -> None:
    """Re-entering the same use_clock object while active is refused."""
    block = use_clock(VirtualClock())
    with block, pytest.raises(RuntimeError, match="already active"), block:
        pass


def test_clock_set_in_a_thread_does_not_leak() -> None:
    """A clock installed in one thread is invisible to other threads and to the caller."""
    seen: dict[str, object] = {}
    ready = threading.Barrier(2, timeout=60)

    def with_virtual() -> None:
        with use_clock(VirtualClock(start=100)):
            ready.wait()
            seen["virtual"] = current_clock().now()
            ready.wait()

    def plain() -> None:
        ready.wait()
        seen["plain"] = current_clock()
        ready.wait()

    threads = [threading.Thread(target=with_virtual), threading.Thread(target=plain)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 100.0 == seen["virtual"]
    assert isinstance(seen["plain"], SystemClock)
    assert isinstance(current_clock(), SystemClock)


def test_threads_retry_on_their_own_clocks() -> None:
    """Two threads retrying under different virtual clocks each record only their own waits."""
    clocks = {"a": VirtualClock(), "b": VirtualClock()}
    barrier = threading.Barrier(2, timeout=60)

    def work(name: str, delay: float) -> None:
        with use_clock(clocks[name]):
            barrier.wait()
            Effect.fail(ValueError()).pipe(retry(spaced(delay), times=3)).run()

    threads = [
        threading.Thread(target=work, args=("a", 1.0)),
        threading.Thread(target=work, args=("b", 2.0)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [1.0, 1.0, 1.0] == clocks["a"].sleeps
    assert [2.0, 2.0, 2.0] == clocks["b"].sleeps


def test_clock_set_in_a_task_does_not_leak() -> None:
    """Under asyncio, a clock set in one task is invisible to a sibling task."""

    async def main() -> tuple[float, object]:
        gate = asyncio.Event()

        async def with_virtual() -> float:
            with use_clock(VirtualClock(start=7)):
                await gate.wait()
                return current_clock().now()

        async def plain() -> object:
            await asyncio.sleep(0)
            gate.set()
            return current_clock()

        return await asyncio.gather(with_virtual(), plain())

    virtual_now, plain_clock = asyncio.run(main())
    assert 7.0 == virtual_now
    assert isinstance(plain_clock, SystemClock)


@pytest.mark.anyio
async def test_tasks_started_inside_use_clock_inherit_it(anyio_backend: str) -> None:
    """Child tasks started inside a use_clock block see its clock (asyncio and trio)."""
    clock = VirtualClock(start=3)
    seen: list[float] = []

    async def child() -> None:
        seen.append(current_clock().now())

    with use_clock(clock):
        if anyio_backend == "trio":
            import trio

            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)
        else:
            await asyncio.create_task(child())
    assert [3.0] == seen


def test_use_random_drives_jitter() -> None:
    """use_random supplies the rng the schedule's jitter draws from."""

    def delays(seed: int) -> list[float]:
        clock = VirtualClock()
        with use_clock(clock), use_random(random.Random(seed)):
            policy = retry(spaced(1).jittered(), times=4)
            Effect.fail(ValueError()).pipe(policy).run()
        return clock.sleeps

    assert delays(3) == delays(3)
    assert delays(3) != delays(4)
    assert delays(3) == spaced(1).jittered().times(4).delays(seed=3)


def test_use_random_is_scoped_to_its_thread() -> None:
    """An rng set in one thread is not seen by another."""
    rng = random.Random(1)
    seen: list[object] = []
    with use_random(rng):
        thread = threading.Thread(target=lambda: seen.append(current_random()))
        thread.start()
        thread.join()
        assert rng is current_random()
    assert rng is not seen[0]


def test_system_clock_sleeps_for_real() -> None:
    """SystemClock.sleep blocks for about the requested time."""
    started = time.monotonic()
    SystemClock().sleep(0.01)
    assert time.monotonic() - started >= 0.009


@pytest.mark.anyio
async def test_system_clock_async_sleep_uses_the_running_library(anyio_backend: str) -> None:
    """sleep_async works under asyncio and trio, detected without importing anyio."""
    assert (anyio_backend == "trio") == running_under_trio()
    started = time.monotonic()
    await SystemClock().sleep_async(0.01)
    assert time.monotonic() - started >= 0.009


def test_not_under_trio_outside_an_event_loop() -> None:
    """Plain sync code is not detected as running under trio."""
    assert not running_under_trio()


@pytest.mark.anyio
async def test_use_random_is_scoped_to_its_task(anyio_backend: str) -> None:
    """An rng set inside one task is not seen by a sibling task (asyncio and trio)."""
    rng = random.Random(1)
    seen: dict[str, object] = {}

    async def with_rng() -> None:
        with use_random(rng):
            await checkpoint()
            seen["own"] = current_random()
            await checkpoint()

    async def sibling() -> None:
        await checkpoint()
        seen["sibling"] = current_random()

    if anyio_backend == "trio":
        import trio

        async with trio.open_nursery() as nursery:
            nursery.start_soon(with_rng)
            nursery.start_soon(sibling)
    else:
        await asyncio.gather(with_rng(), sibling())
    assert rng is seen["own"]
    assert rng is not seen["sibling"]
    assert rng is not current_random()
