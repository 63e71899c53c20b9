"""
Whole-run timeout: at ``created_at + timeout`` an unfinished run fails with
``workflow_timeout``, its pending attempts withdrawn and its compensations run.
"""

from __future__ import annotations

import asyncio
import datetime
import math
from typing import Any

import pytest

from effects.durable import (
    Engine,
    Recurring,
    WorkflowContext,
    WorkflowTimeout,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from schedules import spaced
from tests.durable.support import START_MS, events_named, rows

pytestmark = pytest.mark.anyio
#: A bound on a wait that must end (never a timing claim).
PATIENCE = 30.0


@step("charge")
async def charge(order: Any) -> str:
    """Charge an order."""
    return f"charged {order}"


@step("refund")
async def refund(undo: dict[str, Any]) -> str:
    """Undo a charge."""
    return f"refunded {undo['output']}"


def _code(run: Any) -> str | None:
    return None if run.error is None else run.error.code


async def test_a_run_waiting_on_a_step_fails_at_its_deadline_and_its_attempt_is_withdrawn(
    durable_engine: DurableEngineFactory,
) -> None:
    """No worker: at +10 s exactly the run fails (run.failed), its queued task withdrawn."""

    @workflow("pay")
    async def pay(ctx: WorkflowContext, order: Any) -> str:
        return str(await ctx.step(charge, order))

    async with durable_engine(workflows=[pay]) as engine:
        run_id = await engine.start(pay, 7, timeout="10s")
        await engine.run_until_idle()
        waiting = await engine.get_run(run_id)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (failed,) = await events_named(engine, run_id, "run.failed")
        withdrawn = await events_named(engine, run_id, "step.withdrawn")
        (cp,) = await engine.checkpoints(run_id)
        async with durable_engine(steps=[charge]) as worker:
            await worker.run_until_idle(advance_time=True)
        after = await engine.get_run(run_id)
    deadline = START_MS + 10_000
    assert ("suspended", deadline, deadline) == (waiting.status, waiting.deadline, waiting.wake_at)
    assert ("failed", "workflow_timeout", deadline) == (run.status, _code(run), run.updated_at)
    assert run.error is not None
    assert "effects.durable.errors.WorkflowTimeout" == run.error.type
    assert {"timeout_ms": 10_000, "deadline": deadline} == run.error.details
    assert deadline == failed.at
    assert [{"attempt": 1, "claimed": False}] == [e.data for e in withdrawn]
    assert ("failed", False, "workflow_timeout") == (
        cp.status, cp.final, cp.error and cp.error.code
    )  # fmt: skip
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM tasks")
    assert "failed" == after.status


async def test_a_timed_out_run_runs_its_compensations_last_first(
    durable_engine: DurableEngineFactory,
) -> None:
    """Reserve (local undo), charge (dispatched undo), a 1 h sleep; 30 min timeout: both undone."""
    undone: list[str] = []

    @workflow("book")
    async def book(ctx: WorkflowContext, order: Any) -> str:
        await ctx.local_step("reserve", lambda: "r-1", compensate=lambda u: undone.append("r"))
        await ctx.step(charge, order, compensate=refund)
        await ctx.sleep("1h")
        return "booked"

    async with durable_engine(workflows=[book], steps=[charge, refund]) as engine:
        run_id = await engine.start(book, 7, timeout="30m")
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("failed", "workflow_timeout") == (run.status, _code(run))
    assert START_MS + 1_800_000 == run.updated_at
    assert ["r"] == undone
    assert [
        ("reserve", "completed"),
        ("charge", "completed"),
        ("durable.sleep", "pending"),
        ("compensate:charge", "completed"),
        ("compensate:reserve", "completed"),
    ] == [(c.name, c.status) for c in checkpoints]
    assert "refunded charged 7" == checkpoints[3].output


async def test_a_long_turn_is_stopped_at_the_deadline(
    durable_engine: DurableEngineFactory,
) -> None:
    """A local step retrying in memory for 10 s fails the run at its 5.5 s deadline exactly."""
    tries: list[int] = []

    def flaky() -> None:
        tries.append(1)
        raise ConnectionError("503")

    @workflow("busy")
    async def busy(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("flaky", flaky, retries=11, backoff_ms=1000)

    async with durable_engine(workflows=[busy]) as engine:
        run_id = await engine.start(busy, None, timeout=5.5)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("failed", "workflow_timeout", START_MS + 5500) == (
        run.status, _code(run), run.updated_at
    )  # fmt: skip
    assert 6 == len(tries)
    assert [] == checkpoints


async def test_a_liveness_wait_ends_at_the_deadline(
    durable_engine: DurableEngineFactory,
) -> None:
    """A step awaited in the turn (timeout_ms 60 s, no worker): the run fails at +10 s."""

    @workflow("live")
    async def live(ctx: WorkflowContext, order: Any) -> str:
        return str(await ctx.step(charge, order, timeout_ms=60_000))

    async with durable_engine(workflows=[live]) as engine:
        run_id = await engine.start(live, 7, timeout=10)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        withdrawn = await events_named(engine, run_id, "step.withdrawn")
    assert ("failed", "workflow_timeout", START_MS + 10_000) == (
        run.status, _code(run), run.updated_at
    )  # fmt: skip
    assert 1 == len(withdrawn)


async def test_the_deadline_counts_from_the_start_and_start_wins_over_the_definition(
    durable_engine: DurableEngineFactory,
) -> None:
    """@workflow(timeout='1h') gives +1 h; start(timeout=) wins; no timeout: no deadline."""

    @workflow("slow", timeout="1h")
    async def slow(ctx: WorkflowContext, _: Any) -> str:
        await ctx.sleep("1d")
        return "done"

    @workflow("free")
    async def free(ctx: WorkflowContext, _: Any) -> str:
        await ctx.sleep("1d")
        return "done"

    async with durable_engine(workflows=[slow, free]) as engine:
        declared = await engine.start(slow, None)
        given = await engine.start(slow, None, timeout=datetime.timedelta(minutes=5))
        none = await engine.start(free, None)
        await engine.run_until_idle()
        runs = [await engine.get_run(r) for r in (declared, given, none)]
        await engine.run_until_idle(advance_time=True)
        ended = [await engine.get_run(r) for r in (declared, given, none)]
    assert [START_MS + 3_600_000, START_MS + 300_000, None] == [r.deadline for r in runs]
    assert [START_MS + 3_600_000, START_MS + 300_000, START_MS + 86_400_000] == [
        r.wake_at for r in runs
    ]
    assert [
        ("failed", "workflow_timeout"),
        ("failed", "workflow_timeout"),
        ("completed", None),
    ] == [(r.status, _code(r)) for r in ended]
    assert [START_MS + 3_600_000, START_MS + 300_000, START_MS + 86_400_000] == [
        r.updated_at for r in ended
    ]


async def test_a_run_that_finishes_in_time_is_not_touched(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run done before its deadline completes; nothing wakes it at the deadline."""

    @workflow("quick")
    async def quick(ctx: WorkflowContext, _: Any) -> str:
        await ctx.sleep(5)
        return "done"

    async with durable_engine(workflows=[quick]) as engine:
        run_id = await engine.start(quick, None, timeout=10)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("completed", "done", START_MS + 5000) == (run.status, run.output, run.updated_at)


async def test_a_requeued_timed_out_run_loses_its_deadline_and_resumes(
    durable_engine: DurableEngineFactory,
) -> None:
    """retry of a timed-out run with nothing to undo: the step gets a fresh attempt, completes."""

    @workflow("pay")
    async def pay(ctx: WorkflowContext, order: Any) -> str:
        return str(await ctx.step(charge, order))

    async with durable_engine(workflows=[pay]) as engine:
        run_id = await engine.start(pay, 7, timeout="10s")
        await engine.run_until_idle(advance_time=True)
        requeued = await engine.requeue(run_id)
        async with durable_engine(steps=[charge]) as worker:
            await engine.run_until_idle()
            await worker.run_until_idle()
            await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("pending", None) == (requeued.status, requeued.deadline)
    assert ("completed", "charged 7") == (run.status, run.output)


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(0, ValueError), (0.0004, ValueError), (-1, ValueError), (math.nan, ValueError),
     (math.inf, ValueError), (True, ValueError), ("soon", ValueError), (10**300, ValueError),
     ([1], TypeError)],
    ids=["zero", "sub-ms", "negative", "nan", "inf", "bool", "garbage", "huge", "list"],
)  # fmt: skip
async def test_an_odd_timeout_is_refused_before_anything_is_written(
    durable_engine: DurableEngineFactory, timeout: Any, error: type[Exception]
) -> None:
    """engine.start and @workflow refuse it, naming the timeout; no run is made."""

    @workflow("w")
    async def w(ctx: WorkflowContext, _: Any) -> None:
        return None

    async with durable_engine(workflows=[w]) as engine:
        with pytest.raises(error, match="timeout"):
            await engine.start(w, None, run_id="r", timeout=timeout)
        runs = await engine.list_runs()
    with pytest.raises(error, match="timeout"):
        workflow("v", timeout=timeout)
    assert [] == runs


@pytest.mark.not_on_memory("a real clock: the engine's own wall clock")
async def test_a_turn_stuck_in_a_local_step_is_stopped_at_the_deadline_on_a_real_clock(
    durable_store_url: str,
) -> None:
    """A local step awaiting 60 s of real time: work() fails the run at its 0.3 s deadline."""

    @workflow("stuck")
    async def stuck(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("wait", lambda: asyncio.sleep(60))

    async with Engine(durable_store_url, workflows=[stuck], lease_ms=5000) as engine:
        worker = asyncio.create_task(engine.work(poll_ms=50))
        try:
            run_id = await engine.start(stuck, None, timeout=0.3)
            run = await engine.wait(run_id, timeout=PATIENCE)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
    assert run.deadline is not None
    assert ("failed", "workflow_timeout") == (run.status, _code(run))
    assert run.updated_at >= run.deadline


def test_workflow_timeout_is_a_durable_error_with_its_code() -> None:
    """WorkflowTimeout: code workflow_timeout, not retryable, details name timeout and deadline."""
    error = WorkflowTimeout("r", 10, 1010)
    assert ("workflow_timeout", False, {"timeout_ms": 10, "deadline": 1010}) == (
        error.code, error.retryable, error.details
    )  # fmt: skip


@step("undo:refund", group="refunds")
async def refund_elsewhere(undo: dict[str, Any]) -> str:
    """Undo a charge, on a worker of the group 'refunds'."""
    return f"refunded {undo['output']}"


@step("far", group="far")
async def far(value: Any) -> Any:
    """A step of a group no engine of these tests serves."""
    return value


async def test_a_compensating_cancel_outlives_the_deadline_it_began_before(
    durable_engine: DurableEngineFactory,
) -> None:
    """Cancelled with compensation, its undo still out past the deadline: no timeout, no spin;
    once the undo lands the run ends cancelled."""

    @workflow("pay-then-wait")
    async def pay_then_wait(ctx: WorkflowContext, order: Any) -> None:
        await ctx.step(charge, order, compensate=refund_elsewhere)
        await ctx.step(far, order)

    async with durable_engine(workflows=[pay_then_wait], steps=[charge]) as engine:
        run_id = await engine.start(pay_then_wait, 7, timeout=60)
        await engine.run_until_idle()
        await engine.cancel(run_id, compensate=True)
        await engine.run_until_idle()  # the undo is dispatched; no worker of 'refunds' yet
        durable_engine.clock.advance(120)
        await asyncio.wait_for(engine.run_until_idle(), timeout=PATIENCE)
        waiting = await engine.get_run(run_id)
        async with durable_engine(steps=[refund_elsewhere]) as worker:
            await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        names = [(c.name, c.status) for c in await engine.checkpoints(run_id)]
    assert ("suspended", None) == (waiting.status, waiting.wake_at)
    assert ("cancelled", None) == (run.status, run.error)
    assert ("compensate:charge", "completed") == names[-1]


async def test_a_child_and_a_recurring_run_take_their_workflows_timeout(
    durable_engine: DurableEngineFactory,
) -> None:
    """
    A run a parent starts (ctx.child) or a Recurring starts gets its workflow's timeout as
    engine.start gives it: deadline = created_at + timeout, and it fails there.
    """

    @workflow("slow-kid", timeout="5s")
    async def slow_kid(ctx: WorkflowContext, order: Any) -> str:
        return str(await ctx.step(charge, order))

    @workflow("parent")
    async def parent(ctx: WorkflowContext, order: Any) -> str:
        return await ctx.child(slow_kid, order)

    ticks = Recurring("ticks", slow_kid, spaced("1h"), input=3)
    async with durable_engine(workflows=[slow_kid, parent], recurring=[ticks]) as engine:
        run_id = await engine.start(parent, 9)
        await engine.run_until_idle()
        (child,) = await engine.list_runs(workflow="slow-kid")
        await engine.run_for("1h")
        started = await engine.get_run(f"ticks@{START_MS + 3_600_000}")
        await engine.run_for("10s")
        child_after = await engine.get_run(child.run_id)
        started_after = await engine.get_run(started.run_id)
        run = await engine.get_run(run_id)
    assert child.deadline == child.created_at + 5_000
    assert started.deadline == started.created_at + 5_000
    assert ("failed", "workflow_timeout") == (child_after.status, _code(child_after))
    assert ("failed", "workflow_timeout") == (started_after.status, _code(started_after))
    assert ("failed", "workflow_timeout") == (run.status, _code(run))
