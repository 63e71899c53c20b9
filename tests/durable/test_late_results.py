"""A stalled worker whose claim expired reports late: it may finish a step, never rewrite one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Checkpoint, Engine
from tests.durable.crash_support.app import compensate
from tests.durable.crash_support.harness import FINISHED, Nodes, read_execs, wait_until_async

LEASE_MS = 300


@asynccontextmanager
async def _stalled_run(
    tmp_path: Path, nodes: Nodes, data: dict[str, Any]
) -> AsyncIterator[tuple[Engine, Callable[[], None]]]:
    """
    A run of ``compensate`` whose step a worker process runs and stalls in (its event loop
    blocked, so its claim expires); this process orchestrates. Yields the engine and a function
    that un-stalls the worker.
    """
    url = f"sqlite:///{tmp_path / 'durable.db'}"
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
async def test_late_success_after_the_step_failed_for_good_does_not_rewrite_it(
    tmp_path: Path, nodes: Nodes
) -> None:
    """A success landing after the step was settled failed (and compensated) changes nothing."""
    async with _stalled_run(tmp_path, nodes, {"order": 7}) as (engine, release):
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
async def test_late_success_while_the_retry_waits_completes_the_step(
    tmp_path: Path, nodes: Nodes
) -> None:
    """A late success of a lost attempt whose retry waits out a backoff completes the step."""
    policy = {"retries": 3, "backoff_ms": 600_000}
    async with _stalled_run(tmp_path, nodes, {"order": 7, "policy": policy}) as (engine, release):

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
