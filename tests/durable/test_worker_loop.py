"""work(): when a worker loop looks at the store again, and when it need not."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from effects.durable import Engine, WorkflowContext, current_step, step, workflow
from effects.durable._engine import open_store

pytestmark = pytest.mark.anyio

#: How long a test waits for work that must finish (a bound on a hang, not a timing claim).
PATIENCE = 60.0
#: A poll no test waits for: whatever happens, happens because the loop was told.
NEVER_MS = 600_000


@step("double")
async def double(n: int) -> int:
    """Twice the input."""
    return 2 * n


@step("double-later", retries=2, backoff_ms=300)
async def double_later(n: int) -> int:
    """Twice the input, failing on the first attempt (the retry waits 300 ms)."""
    if current_step().attempt == 1:
        msg = "not yet"
        raise RuntimeError(msg)
    return 2 * n


@workflow("doubled-later")
async def doubled_later(ctx: WorkflowContext, n: int) -> int:
    """Dispatch ``double_later``; return its output."""
    return await ctx.step(double_later, n)


@workflow("doubled")
async def doubled(ctx: WorkflowContext, n: int) -> int:
    """Dispatch ``double``; return its output."""
    return await ctx.step(double, n)


def _quiet(url: str) -> str:
    """*url*, on PostgreSQL without NOTIFY (the listener's hints come at moments of their own)."""
    return f"{url}&listen=false" if url.startswith("postgresql:") else url


async def _dispatched(url: str, count: int) -> list[str]:
    """*count* runs of ``doubled`` started and turned until each waits for its step."""
    async with Engine(url, workflows=[doubled]) as orchestrator:
        ids = [await orchestrator.start(doubled, n) for n in range(count)]
        await orchestrator.run_until_idle()
    return ids


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    async def poll() -> None:
        while not await check():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), PATIENCE)
    except TimeoutError:
        pytest.fail(f"gave up waiting for {what}")


async def _outputs(url: str, ids: list[str]) -> list[Any]:
    async with Engine(url, workflows=[doubled]) as orchestrator:
        await orchestrator.run_until_idle()
        return [(await orchestrator.get_run(run_id)).output for run_id in ids]


async def test_a_full_worker_takes_the_next_task_when_a_slot_frees(
    durable_store_url: str,
) -> None:
    """Concurrency 1, three tasks queued, no poll in sight: each attempt's end brings the next."""
    url = _quiet(durable_store_url)
    ids = await _dispatched(url, 3)
    async with Engine(url, steps=[double]) as worker:
        loop = asyncio.get_running_loop().create_task(worker.work(poll_ms=NEVER_MS, concurrency=1))

        async def all_done() -> bool:
            for run_id in ids:
                (checkpoint,) = await worker.checkpoints(run_id)
                if checkpoint.status != "completed":
                    return False
            return True

        await _until(all_done, "the three steps")
        worker.stop()
        await asyncio.wait_for(loop, PATIENCE)
    assert [0, 2, 4] == await _outputs(url, ids)


async def test_an_attempt_ending_with_slots_free_costs_a_worker_no_claim(
    durable_store_url: str,
) -> None:
    """A worker with room to spare took every task at once: their ends make it claim nothing."""
    url = _quiet(durable_store_url)
    ids = await _dispatched(url, 3)
    store = open_store(url)
    claims: list[int] = []
    claim_tasks = store.claim_tasks

    async def counted(**kwargs: Any) -> Any:
        tasks = await claim_tasks(**kwargs)
        claims.append(len(tasks))
        return tasks

    store.claim_tasks = counted  # type: ignore[method-assign]
    async with Engine(store, steps=[double]) as worker:
        loop = asyncio.get_running_loop().create_task(worker.work(poll_ms=NEVER_MS, concurrency=8))

        async def all_done() -> bool:
            checkpoints = [await worker.checkpoints(run_id) for run_id in ids]
            return all(cp.status == "completed" for (cp,) in checkpoints)

        await _until(all_done, "the three steps")
        # Let every attempt's end reach the loop before it is stopped.
        await asyncio.sleep(0.2)
        worker.stop()
        await asyncio.wait_for(loop, PATIENCE)
    assert [3] == claims
    assert [0, 2, 4] == await _outputs(url, ids)


async def test_a_durable_retry_runs_on_time_with_no_poll_in_sight(postgres_url: str) -> None:
    """Turns and workers apart, polls ten minutes away: the retry's timer is read and kept."""
    async with (
        Engine(postgres_url, workflows=[doubled_later]) as orchestrator,
        Engine(postgres_url, steps=[double_later]) as worker,
    ):
        loops = [
            asyncio.get_running_loop().create_task(engine.work(poll_ms=NEVER_MS))
            for engine in (orchestrator, worker)
        ]
        try:
            run_id = await orchestrator.start(doubled_later, 4)

            async def finished() -> bool:
                return (await orchestrator.get_run(run_id)).status == "completed"

            await _until(finished, "the run, its step retried once")
            run = await orchestrator.get_run(run_id)
            (checkpoint,) = await orchestrator.checkpoints(run_id)
        finally:
            for engine in (orchestrator, worker):
                engine.stop()
            await asyncio.wait_for(asyncio.gather(*loops), PATIENCE)
    assert (8, 2) == (run.output, checkpoint.attempts)
