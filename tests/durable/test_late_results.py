"""A stalled worker whose claim expired reports late: it may finish a step, never rewrite one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from effects.durable import (
    Checkpoint,
    Engine,
    Task,
    WorkflowContext,
    step,
    workflow,
)
from effects.durable._engine import open_store
from effects.durable._pytest_plugin import START
from effects.durable._store import TaskOutcome, TurnCommit
from effects.testing import VirtualClock
from tests.durable.crash_support.app import compensate
from tests.durable.crash_support.harness import FINISHED, Nodes, read_execs, wait_until_async

LEASE_MS = 300


@asynccontextmanager
async def _stalled_run(
    tmp_path: Path, nodes: Nodes, url: str, data: dict[str, Any]
) -> AsyncIterator[tuple[Engine, Callable[[], None]]]:
    """
    A run of ``compensate`` whose step a worker process runs and stalls in (its event loop
    blocked, so its claim expires); this process orchestrates. Yields the engine and a function
    that un-stalls the worker.
    """
    stall = tmp_path / "stall"
    stall.mkdir()
    async with Engine(url, workflows=[compensate], lease_ms=LEASE_MS) as engine:
        await engine.start(compensate, data, run_id="order-7")
        work = asyncio.get_running_loop().create_task(engine.work(poll_ms=20))
        try:
            nodes.spawn(
                "worker",
                *("--url", url, "--role", "worker", "--lease-ms", str(LEASE_MS), "--poll-ms", "20"),
                env={"CRASH_STALL": str(stall)},
            )

            def release() -> None:
                (stall / "release").write_text("go")

            yield engine, release
        finally:
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)


async def _until(nodes: Nodes, what: str, check: Callable[[], Awaitable[bool]]) -> None:
    async def alive_and() -> bool:
        nodes.check_alive()
        return await check()

    await wait_until_async(alive_and, timeout=60, what=what)


def _stall_attempts(nodes: Nodes) -> list[int]:
    """The attempts of the stalling step that ran to their end."""
    return [
        r["attempt"]
        for r in read_execs(nodes.logs)
        if r["ev"] == "end" and r["name"] == "crash:stall"
    ]


def _shape(cp: Checkpoint) -> tuple[str, bool, list[str | None]]:
    return (cp.status, cp.final, [e.code for e in cp.errors])


@pytest.mark.anyio
@pytest.mark.not_on_memory("a stalled worker process")
async def test_late_success_after_the_step_failed_for_good_does_not_rewrite_it(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """A success landing after the step was settled failed (and compensated) changes nothing."""
    async with _stalled_run(tmp_path, nodes, durable_store_url, {"order": 7}) as (engine, release):
        # The claim expires, the lost attempt was the only one: the step fails for good and the
        # workflow compensates, its next dispatched step waiting for the stalled worker.
        async def compensating() -> bool:
            return len(await engine.checkpoints("order-7")) == 3

        await _until(nodes, "the compensation path", compensating)
        release()

        async def finished() -> bool:
            return (await engine.get_run("order-7")).status in FINISHED

        await _until(nodes, "the run to finish", finished)
        first = (await engine.checkpoints("order-7"))[0]
        run = await engine.get_run("order-7")
    assert [1] == _stall_attempts(nodes)
    assert ("completed", "refunded 7 after worker_lost") == (run.status, run.output)
    assert ("failed", True, ["worker_lost"]) == _shape(first)


@pytest.mark.anyio
@pytest.mark.not_on_memory("a stalled worker process")
async def test_late_success_while_the_retry_waits_completes_the_step(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """A late success of a lost attempt whose retry waits out a backoff completes the step."""
    policy = {"retries": 3, "backoff_ms": 600_000}
    data = {"order": 7, "policy": policy}
    async with _stalled_run(tmp_path, nodes, durable_store_url, data) as (engine, release):

        async def waiting() -> bool:
            (first,) = await engine.checkpoints("order-7") or [None]
            return first is not None and first.wake_at is not None

        await _until(nodes, "the retry's wake_at", waiting)
        release()

        async def finished() -> bool:
            return (await engine.get_run("order-7")).status in FINISHED

        await _until(nodes, "the run to finish", finished)
        first = (await engine.checkpoints("order-7"))[0]
        run = await engine.get_run("order-7")
        dispatched = [
            e.data["attempt"] for e in await engine.events("order-7") if e.name == "step.dispatched"
        ]
    assert [1] == _stall_attempts(nodes)
    assert ("completed", "charged 7") == (run.status, run.output)
    assert ("completed", False, ["worker_lost"], [1]) == (*_shape(first), dispatched)


@step("late:charge", retries=3, backoff_ms=100)
async def _charge(data: dict[str, Any]) -> str:
    return f"charged {data['order']}"


@workflow("late:order")
async def _order(ctx: WorkflowContext, data: dict[str, Any]) -> str:
    return await ctx.step(_charge, data)


class _LateResultStore:
    """A store in which a stalled worker's success lands just before a redispatch."""

    def __init__(self, url: str) -> None:
        self.inner = open_store(url)
        self.url = url
        self.late: list[tuple[Task, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def commit_turn(self, commit: TurnCommit) -> None:
        if commit.tasks and commit.tasks[0].attempt == 2 and self.late:
            task, worker = self.late.pop()
            outcome = TaskOutcome(output='"charged late"')
            await self.inner.record_result(task, worker, outcome, commit.now)
        await self.inner.commit_turn(commit)


@pytest.mark.anyio
async def test_late_success_racing_a_redispatch_leaves_the_run_runnable_at_once(
    durable_store_url: str,
) -> None:
    """A turn whose redispatch lost the race to a late result gives its run back: no recovery."""
    store = _LateResultStore(durable_store_url)
    clock = VirtualClock(start=START)
    async with Engine(store, workflows=[_order], clock=clock, lease_ms=1000) as engine:
        await engine.start(_order, {"order": 7}, run_id="order-7")
        await engine.run_until_idle()
        # A worker claims the attempt and stalls past its claim.
        now = round(clock.now() * 1000)
        (task,) = await store.inner.claim_tasks(
            groups=["default"], now=now, claim_until=now + 1000, worker="stalled", limit=1
        )
        store.late.append((task, "stalled"))
        clock.advance(2.0)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run("order-7")
        events = await engine.events("order-7")
    assert [] == store.late
    assert ("completed", "charged late", 0) == (run.status, run.output, run.recovery_attempts)
    assert [] == [e for e in events if e.name == "run.recovered"]
