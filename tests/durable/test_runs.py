"""Runs: idempotent start, leases recovered and counted, dead runs, requeue of failed steps only."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import UnknownRunError, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import Flaky, events_named, rows

pytestmark = pytest.mark.anyio


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


@workflow("simple")
async def simple(ctx: WorkflowContext, value: Any) -> Any:
    """Echo the input through a dispatched step."""
    return await ctx.step(echo, value)


async def abandon_turn(factory: DurableEngineFactory, lease_ms: int = 1000) -> str:
    """Claim the pending run as a turn of a process that then dies (its lease is never renewed)."""
    async with factory(workflows=[simple]) as dead:
        now = round(factory.clock.now() * 1000)
        (claimed,) = await dead.store.claim_runs(
            workflows=[("simple", "1")], now=now, lease_until=now + lease_ms, owner="dead", limit=1
        )
        return claimed.run.run_id


async def test_start_with_an_existing_run_id_is_idempotent(
    durable_engine: DurableEngineFactory,
) -> None:
    """Starting the same run_id twice makes one run and returns the id both times."""
    async with durable_engine(workflows=[simple], steps=[echo]) as engine:
        first = await engine.start(simple, "a", run_id="order-7")
        second = await engine.start(simple, "b", run_id="order-7")
        await engine.run_until_idle()
        run = await engine.get_run("order-7")
    assert ("order-7", "order-7") == (first, second)
    assert ("completed", "a") == (run.status, run.output)
    assert [(1,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")


async def test_an_existing_run_id_of_another_workflow_is_refused(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run_id already used by another workflow is a ValueError naming both."""

    @workflow("other")
    async def other(ctx: WorkflowContext, _: None) -> None:
        return None

    async with durable_engine(workflows=[simple, other]) as engine:
        await engine.start(simple, None, run_id="shared")
        with pytest.raises(ValueError, match="'simple', not 'other'"):
            await engine.start(other, None, run_id="shared")


async def test_unknown_workflows_and_runs_are_clear_errors(
    durable_engine: DurableEngineFactory,
) -> None:
    """start of an unknown workflow and a lookup of an unknown run name what is missing."""
    async with durable_engine(workflows=[simple]) as engine:
        with pytest.raises(ValueError, match=r"unknown workflow 'nope': this engine has 'simple'"):
            await engine.start("nope", None)
        with pytest.raises(UnknownRunError, match="'missing'"):
            await engine.get_run("missing")
        with pytest.raises(UnknownRunError):
            await engine.checkpoints("missing")
        with pytest.raises(UnknownRunError):
            await engine.events("missing")
        with pytest.raises(UnknownRunError):
            await engine.requeue("missing")
        assert [] == await engine.list_runs()


async def test_an_expired_lease_is_recovered_by_another_engine_and_counted(
    durable_engine: DurableEngineFactory,
) -> None:
    """A turn whose process died leaves a lease that expires; any engine recovers and counts it."""
    async with durable_engine(workflows=[simple], steps=[echo]) as engine:
        run_id = await engine.start(simple, "x")
        await abandon_turn(durable_engine, lease_ms=2000)
        await engine.run_until_idle()
        assert "running" == (await engine.get_run(run_id)).status
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        recovered = await events_named(engine, run_id, "run.recovered")
    assert ("completed", "x", 1) == (run.status, run.output, run.recovery_attempts)
    assert 1 == len(recovered)


async def test_max_recovery_attempts_makes_a_run_dead(
    durable_engine: DurableEngineFactory,
) -> None:
    """With max_recovery_attempts=1, the second expiry of the run's lease makes it dead."""
    async with durable_engine(workflows=[simple], max_recovery_attempts=1) as engine:
        run_id = await engine.start(simple, "x")
        await abandon_turn(durable_engine)
        durable_engine.clock.advance(2)
        now = round(durable_engine.clock.now() * 1000)
        report = await engine.store.recover(now=now, max_recovery_attempts=1, reconcile_ms=300_000)
        assert ([run_id], []) == (list(report.recovered_runs), list(report.dead_runs))
        await abandon_turn(durable_engine)
        durable_engine.clock.advance(2)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        dead = await events_named(engine, run_id, "run.dead")
    assert ("dead", 1) == (run.status, run.recovery_attempts)
    assert run.error is not None
    assert "max_recovery_attempts" == run.error.code
    assert 1 == len(dead)


async def test_requeue_resets_failed_checkpoints_only(durable_engine: DurableEngineFactory) -> None:
    """requeue gives failed steps a fresh budget; completed steps are not run again."""
    first = Flaky([], value="kept")
    second = Flaky([OSError("a"), OSError("b"), OSError("c")], value="second")

    @step("first")
    def first_step(_: None) -> Any:
        return first(None)

    @step("second", retries=2)
    def second_step(_: None) -> Any:
        return second(None)

    @workflow("pair")
    async def pair(ctx: WorkflowContext, _: None) -> list[Any]:
        return [await ctx.step(first_step, None), await ctx.step(second_step, None)]

    async with durable_engine(workflows=[pair], steps=[first_step, second_step]) as engine:
        run_id = await engine.start(pair, None)
        await engine.run_until_idle(advance_time=True)
        assert "failed" == (await engine.get_run(run_id)).status
        requeued = await engine.requeue(run_id)
        assert "pending" == requeued.status
        checkpoints = await engine.checkpoints(run_id)
        assert [("completed", 1), ("failed", 0)] == [(c.status, c.attempts) for c in checkpoints]
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", ["kept", "second"]) == (run.status, run.output)
    assert 1 == len(first.calls)
    assert 4 == len(second.calls)
    assert 2 == checkpoints[1].attempts


async def test_requeue_refuses_a_run_that_has_not_failed(
    durable_engine: DurableEngineFactory,
) -> None:
    """Only failed, dead or cancelled runs can be retried; the message says the status."""
    async with durable_engine(workflows=[simple], steps=[echo]) as engine:
        run_id = await engine.start(simple, 1)
        await engine.run_until_idle()
        with pytest.raises(ValueError, match="is completed"):
            await engine.requeue(run_id)


@workflow("start-over", requeue=False)
async def start_over(ctx: WorkflowContext, value: Any) -> Any:
    """Fails at once; a run of it must never be requeued."""
    return await ctx.local_step("boom", lambda: 1 // 0)


async def test_requeue_of_a_workflow_that_refuses_it_changes_nothing(
    durable_engine: DurableEngineFactory,
) -> None:
    """``requeue=False``: a ValueError naming the workflow; the run stays failed, as it was."""
    async with durable_engine(workflows=[start_over]) as engine:
        run_id = await engine.start(start_over, 1)
        await engine.run_until_idle()
        before = (await engine.get_run(run_id), await engine.checkpoints(run_id))
        with pytest.raises(ValueError, match=r"'start-over' is not requeued \(requeue=False\)$"):
            await engine.requeue(run_id)
        assert before == (await engine.get_run(run_id), await engine.checkpoints(run_id))
        assert "failed" == before[0].status
        with pytest.raises(UnknownRunError):
            await engine.requeue("no-such-run")


@pytest.mark.parametrize(
    ("requeue", "error"),
    [(0, TypeError), (None, TypeError), ("", ValueError), (" ", ValueError), ("a\nb", ValueError)],
)
def test_requeue_must_be_a_bool_or_one_line(requeue: Any, error: type[Exception]) -> None:
    """A ``requeue`` that is neither a bool nor one line of text is refused, naming the workflow."""
    with pytest.raises(error, match="requeue of workflow 'w'"):
        workflow("w", requeue=requeue)


async def test_list_runs_filters_by_status_and_workflow(
    durable_engine: DurableEngineFactory,
) -> None:
    """list_runs gives runs newest first, by status and by workflow."""
    async with durable_engine(workflows=[simple]) as engine:
        for n in range(3):
            await engine.start(simple, n, run_id=f"r{n}")
            await engine.run_until_idle()
            durable_engine.clock.advance(1)
        assert ["r2", "r1", "r0"] == [r.run_id for r in await engine.list_runs()]
        assert 3 == len(await engine.list_runs(status="suspended", workflow="simple"))
        assert [] == await engine.list_runs(status="completed")
        assert ["r2"] == [r.run_id for r in await engine.list_runs(limit=1)]
        durable_engine.clock.advance(60)
        stale = await engine.list_runs(stale_ms=61_500)
        assert ["r1", "r0"] == [r.run_id for r in stale]
