"""A worker process stopped mid-step: SIGTERM drains (the attempt reports), Ctrl-C hands it back."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.crash_support.app import waiting
from tests.durable.crash_support.harness import (
    FINISHED,
    Node,
    Nodes,
    read_execs,
    trail_problems,
    wait_until_async,
)

pytestmark = pytest.mark.not_on_memory("a worker process is stopped by a signal")

LEASE_MS = 30_000


@asynccontextmanager
async def _mid_step(
    tmp_path: Path, nodes: Nodes, url: str
) -> AsyncIterator[tuple[Engine, Node, Path]]:
    """
    A run whose one step a worker process is in the middle of (waiting for a file), this process
    orchestrating; yields the engine, the worker and the folder whose ``release`` file ends the
    wait. Claims and leases last 30 s, so nothing here can expire.
    """
    folder = tmp_path / "wait"
    folder.mkdir()
    async with Engine(url, workflows=[waiting], lease_ms=LEASE_MS) as engine:
        await engine.start(waiting, {"order": 7}, run_id="order-7")
        work = asyncio.get_running_loop().create_task(engine.work(poll_ms=20))
        try:
            worker = nodes.spawn(
                "worker",
                *("--url", url, "--role", "worker", "--lease-ms", str(LEASE_MS), "--poll-ms", "20"),
                env={"CRASH_WAIT": str(folder)},
            )

            async def started() -> bool:
                nodes.check_alive()
                return any(r["ev"] == "start" for r in read_execs(nodes.logs))

            await wait_until_async(started, timeout=60, what="the worker to start the step")
            yield engine, worker, folder
        finally:
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)


async def _finished(engine: Engine) -> Any:
    async def done() -> bool:
        return (await engine.get_run("order-7")).status in FINISHED

    await wait_until_async(done, timeout=60, what="the run to finish")
    return await engine.get_run("order-7")


@pytest.mark.anyio
async def test_sigterm_lets_the_attempt_in_flight_finish_and_report(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """SIGTERM mid-step: the worker finishes that attempt, records it, and exits 0."""
    async with _mid_step(tmp_path, nodes, durable_store_url) as (engine, worker, folder):
        os.kill(worker.pid, signal.SIGTERM)

        async def stopping() -> bool:
            return (nodes.logs / f"stopping-{worker.pid}").exists()

        await wait_until_async(stopping, timeout=60, what="the worker to begin stopping")
        (folder / "release").write_text("go")
        assert 0 == await asyncio.to_thread(worker.process.wait, 60), worker.tail()
        worker.stopped = True
        run = await _finished(engine)
        problems = await trail_problems(engine, {"order-7": f"done 7 by {worker.pid}"})
        events = [e.name for e in await engine.events("order-7")]
    assert ("completed", []) == (run.status, problems)
    assert "step.failed" not in events
    ends = [(r["pid"], r["attempt"]) for r in read_execs(nodes.logs) if r["ev"] == "end"]
    assert [(worker.pid, 1)] == ends


@pytest.mark.anyio
async def test_ctrl_c_hands_the_attempt_back_for_another_worker(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """SIGINT mid-step: the claim is released at once, and another worker runs that attempt."""
    async with _mid_step(tmp_path, nodes, durable_store_url) as (engine, worker, _):
        os.kill(worker.pid, signal.SIGINT)
        code = await asyncio.to_thread(worker.process.wait, 60)
        worker.stopped = True
        # Long before the 30 s claim could expire, a fresh worker (that does not wait) gets it.
        other = nodes.spawn(
            "other",
            *("--url", engine.store.url, "--role", "worker", "--lease-ms", str(LEASE_MS)),
        )
        run = await _finished(engine)
        problems = await trail_problems(engine, {"order-7": f"done 7 by {other.pid}"})
        events = [e.name for e in await engine.events("order-7")]
    assert code != 0
    assert ("completed", []) == (run.status, problems)
    assert "step.failed" not in events
    starts = [(r["pid"], r["attempt"]) for r in read_execs(nodes.logs) if r["ev"] == "start"]
    assert [(worker.pid, 1), (other.pid, 1)] == starts
