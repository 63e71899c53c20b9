"""An attempt the engine gave up on never runs: it is withdrawn in the commit that settles it."""

from __future__ import annotations

import asyncio
import contextlib
import textwrap
from pathlib import Path
from typing import Any

import pytest

from effects.durable import (
    Engine,
    RemoteStepError,
    RemoteStepTimeout,
    WorkflowContext,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.cli_support import work_process
from tests.durable.support import events_named, rows

pytestmark = pytest.mark.anyio
PATIENCE = 30.0


def charging(calls: list[Any], **policy: Any) -> Any:
    """A step that records each call (a charge), with *policy*."""

    @step("charge", **policy)
    async def charge(order: Any) -> str:
        calls.append(order)
        return "charged"

    return charge


def with_fallback(charge: Any, caught: type[BaseException]) -> Any:
    """A workflow that charges, and on *caught* takes the fallback (a local step)."""

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: Any) -> str:
        try:
            return str(await ctx.step(charge, order))
        except caught:
            return str(await ctx.local_step("fallback", lambda: "fallback"))

    return checkout


async def gave_up(durable_engine: DurableEngineFactory, checkout: Any) -> tuple[Any, list[Any]]:
    """Run *checkout* with no worker until it took its fallback: the run, its withdrawals."""
    async with durable_engine(workflows=[checkout]) as orchestrator:
        run_id = await orchestrator.start(checkout, {"id": 7})
        await orchestrator.run_until_idle(advance_time=True)
        run = await orchestrator.get_run(run_id)
        return run, await events_named(orchestrator, run_id, "step.withdrawn")


async def test_the_last_pickup_timeout_withdraws_its_attempt(
    durable_engine: DurableEngineFactory,
) -> None:
    """No worker picked the step up in time: a worker that starts later runs nothing."""
    calls: list[Any] = []
    charge = charging(calls, timeout_ms=1000, retries=2)
    checkout = with_fallback(charge, RemoteStepTimeout)
    run, withdrawn = await gave_up(durable_engine, checkout)
    async with durable_engine(steps=[charge]) as worker:
        await worker.run_until_idle(advance_time=True)
    assert ("completed", "fallback") == (run.status, run.output)
    assert [] == calls
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM tasks")
    assert [{"attempt": 2, "claimed": False}] == [e.data for e in withdrawn]


async def test_a_running_attempt_given_up_on_has_its_result_discarded(
    durable_store_url: str,
) -> None:
    """The worker went silent and the engine gave up: its late success changes nothing."""
    release = asyncio.Event()
    started = asyncio.Event()
    calls: list[Any] = []
    phases: list[str] = []

    @step("charge", timeout_ms=200, pickup_timeout_ms=10_000)
    async def charge(order: Any) -> str:
        calls.append(order)
        started.set()
        await release.wait()
        return "charged"

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: Any) -> str:
        try:
            return str(await ctx.step(charge, order))
        except RemoteStepTimeout as error:
            phases.append(error.phase)
            return str(await ctx.local_step("fallback", lambda: "fallback"))

    async with (
        Engine(durable_store_url, workflows=[checkout]) as orchestrator,
        Engine(durable_store_url, steps=[charge]) as worker,
    ):
        working = asyncio.get_running_loop().create_task(worker.work(poll_ms=20))
        try:
            run_id = await orchestrator.start(checkout, {"id": 7})
            await asyncio.wait_for(orchestrator.run_until_idle(), PATIENCE)
            assert started.is_set()
            run = await orchestrator.wait(run_id, timeout=PATIENCE)
            release.set()
            await asyncio.wait_for(_until_discarded(orchestrator, run_id), PATIENCE)
        finally:
            working.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await working
        (checkpoint, _) = await orchestrator.checkpoints(run_id)
        withdrawn = await events_named(orchestrator, run_id, "step.withdrawn")
        discarded = await events_named(orchestrator, run_id, "step.result_discarded")
        after = await orchestrator.get_run(run_id)
    assert ("completed", "fallback", ["running"]) == (run.status, run.output, phases)
    assert ("completed", "fallback") == (after.status, after.output)
    assert ("failed", True, None) == (checkpoint.status, checkpoint.final, checkpoint.output)
    assert [{"id": 7}] == calls
    assert [{"attempt": 1, "claimed": True}] == [e.data for e in withdrawn]
    assert [(1, "completed", "warning")] == [
        (e.data["attempt"], e.data["outcome"], e.level) for e in discarded
    ]
    assert [(0,)] == rows(durable_store_url, "SELECT COUNT(*) FROM tasks")


async def test_a_lost_dispatch_given_up_on_is_withdrawn(
    durable_engine: DurableEngineFactory,
) -> None:
    """remote_step_lost settles the step: its queued attempt is gone before any worker sees it."""
    calls: list[Any] = []
    charge = charging(calls)
    checkout = with_fallback(charge, RemoteStepError)
    async with durable_engine(
        workflows=[checkout], remote_redispatch_ms=1000, remote_redispatch_max=0
    ) as orchestrator:
        run_id = await orchestrator.start(checkout, {"id": 7})
        await orchestrator.run_until_idle(advance_time=True)
        run = await orchestrator.get_run(run_id)
        (checkpoint, _) = await orchestrator.checkpoints(run_id)
    async with durable_engine(steps=[charge]) as worker:
        await worker.run_until_idle(advance_time=True)
    assert ("completed", "fallback") == (run.status, run.output)
    assert checkpoint.error is not None
    assert "remote_step_lost" == checkpoint.error.code
    assert [] == calls


async def test_a_queued_attempt_in_a_flow_control_queue_frees_its_slot_when_withdrawn(
    durable_engine: DurableEngineFactory,
) -> None:
    """A withdrawn attempt of a queue frees its slot: the next run's attempt is admitted."""
    from effects.durable import Queue

    calls: list[Any] = []
    charge = charging(calls, timeout_ms=1000, queue="cards")
    checkout = with_fallback(charge, RemoteStepTimeout)
    queues = [Queue("cards", concurrency=1)]
    async with durable_engine(workflows=[checkout], queues=queues) as orchestrator:
        first = await orchestrator.start(checkout, {"id": 1})
        await orchestrator.run_until_idle(advance_time=True)
        assert "fallback" == (await orchestrator.get_run(first)).output
    async with durable_engine(workflows=[checkout], steps=[charge], queues=queues) as both:
        second = await both.start(checkout, {"id": 2})
        await both.run_until_idle(advance_time=True)
        assert "charged" == (await both.get_run(second)).output
    assert [{"id": 2}] == calls


async def test_a_leftover_attempt_after_requeue_cannot_complete_the_reset_step(
    durable_store_url: str,
) -> None:
    """requeue withdraws the attempt still running: its late result is discarded, not output."""
    release = asyncio.Event()
    started = asyncio.Event()
    calls: list[int] = []

    @step("charge", timeout_ms=200, pickup_timeout_ms=10_000)
    async def charge(_: Any) -> str:
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            started.set()
            await release.wait()
            return "stale"
        return "fresh"

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: Any) -> str:
        return str(await ctx.step(charge, order))

    async with (
        Engine(durable_store_url, workflows=[checkout]) as orchestrator,
        Engine(durable_store_url, steps=[charge]) as worker,
    ):
        working = asyncio.get_running_loop().create_task(worker.work(poll_ms=20))
        try:
            run_id = await orchestrator.start(checkout, None)
            await asyncio.wait_for(orchestrator.run_until_idle(), PATIENCE)
            assert started.is_set()
            failed = await orchestrator.wait(run_id, timeout=PATIENCE)
            assert ("failed", "remote_step_timeout") == (
                failed.status,
                failed.error and failed.error.code,
            )
            await orchestrator.requeue(run_id)
            release.set()
            await asyncio.wait_for(_until_discarded(orchestrator, run_id), PATIENCE)
            orchestrating = asyncio.get_running_loop().create_task(orchestrator.work(poll_ms=20))
            try:
                run = await orchestrator.wait(run_id, timeout=PATIENCE)
            finally:
                orchestrating.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await orchestrating
        finally:
            working.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await working
        discarded = await events_named(orchestrator, run_id, "step.result_discarded")
    assert ("completed", "fresh") == (run.status, run.output)
    assert [1, 2] == calls
    assert [(1, "completed")] == [(e.data["attempt"], e.data["outcome"]) for e in discarded]


async def _until_discarded(engine: Engine, run_id: str) -> None:
    while not await events_named(engine, run_id, "step.result_discarded"):
        await asyncio.sleep(0.01)


WORKER_APP = """
from pathlib import Path
from effects.durable import Engine, step

HERE = Path(__file__).resolve().parent


@step("charge", timeout_ms=1000, retries=2)
async def charge(order):
    with (HERE / "charges").open("a") as f:
        f.write(f"{order}\\n")
    return "charged"


@step("probe")
async def probe(n):
    return n


engine = Engine(URL, steps=[charge, probe])
"""


@pytest.mark.timeout(120)
@pytest.mark.not_on_memory("a worker process")
async def test_a_worker_process_started_later_never_runs_a_withdrawn_attempt(
    durable_engine: DurableEngineFactory, tmp_path: Path
) -> None:
    """A real worker process that starts after the engine gave up charges nothing."""
    calls: list[Any] = []
    charge = charging(calls, timeout_ms=1000, retries=2)
    checkout = with_fallback(charge, RemoteStepTimeout)
    assert "fallback" == (await gave_up(durable_engine, checkout))[0].output
    (tmp_path / "worker_app.py").write_text(
        f"URL = {durable_engine.url!r}\n" + textwrap.dedent(WORKER_APP)
    )
    worker = work_process(tmp_path, "worker_app:engine")
    try:
        # The probe's task comes after the leftover one would: once the worker ran the probe,
        # it had its chance to claim the leftover too.
        async with Engine(durable_engine.url, workflows=[_probing()]) as prober:
            probe = await prober.start("probing", 1)
            working = asyncio.get_running_loop().create_task(prober.work(poll_ms=50))
            try:
                done = await prober.wait(probe, timeout=PATIENCE)
            finally:
                working.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await working
        assert ("completed", 1) == (done.status, done.output)
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=PATIENCE)
    assert not (tmp_path / "charges").exists(), err


def _probing() -> Any:
    @step("probe")
    async def probe(n: int) -> int:
        return n

    @workflow("probing")
    async def probing(ctx: WorkflowContext, n: int) -> int:
        return await ctx.step(probe, n)

    return probing
