"""Fans: ctx.all dispatches one task per input at once, members retry on their own, order kept."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import RemoteStepError, WorkflowContext, current_step, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import events_named, relative, rows

pytestmark = pytest.mark.anyio


@step("square", retries=3, backoff_ms=1000)
async def square(n: int) -> int:
    """n squared; input 3 fails on its first two attempts, input 13 always fails."""
    attempt = current_step().attempt
    if n == 13 or (n == 3 and attempt < 3):
        raise OSError(f"{n} failed on attempt {attempt}")
    return n * n


@workflow("squares")
async def squares(ctx: WorkflowContext, numbers: list[int]) -> Any:
    """Square every number in one fan."""
    try:
        return await ctx.all(square, numbers)
    except RemoteStepError as error:
        return {"failed": error.step_id, "message": error.step_error.message}


async def test_a_fan_dispatches_in_one_transaction_and_suspends_once(
    durable_engine: DurableEngineFactory,
) -> None:
    """All members' checkpoints and tasks are written together; the run suspends once."""
    async with durable_engine(workflows=[squares]) as engine:
        run_id = await engine.start(squares, [1, 2, 4])
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert "suspended" == run.status
    assert [1, 2, 3] == [cp.seq for cp in checkpoints]
    assert {e.at for e in dispatched} == {dispatched[0].at}
    assert [(1,), (2,), (3,)] == rows(durable_engine.url, "SELECT seq FROM tasks ORDER BY seq")


async def test_outputs_come_back_in_input_order_with_members_retrying_alone(
    durable_engine: DurableEngineFactory,
) -> None:
    """A member that fails retries durably on its own; the others are not re-run."""
    async with durable_engine(workflows=[squares], steps=[square]) as engine:
        run_id = await engine.start(squares, [5, 3, 7])
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert ("completed", [25, 9, 49]) == (run.status, run.output)
    assert [1, 3, 1] == [cp.attempts for cp in checkpoints]
    assert [(2, 0), (2, 1000), (2, 2000)] == [
        (e.seq, t)
        for e, t in zip(dispatched, relative([e.at for e in dispatched]), strict=True)
        if e.seq == 2
    ]


async def test_a_member_that_spends_its_retries_raises_after_the_others_settle(
    durable_engine: DurableEngineFactory,
) -> None:
    """The failing member's RemoteStepError comes once every member has settled."""
    async with durable_engine(workflows=[squares], steps=[square]) as engine:
        run_id = await engine.start(squares, [13, 3])
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert {"failed": f"{run_id}:1", "message": "13 failed on attempt 3"} == run.output
    assert [("failed", 3), ("completed", 3)] == [(cp.status, cp.attempts) for cp in checkpoints]


async def test_an_empty_fan_returns_an_empty_list(durable_engine: DurableEngineFactory) -> None:
    """ctx.all of no inputs writes nothing and returns []."""
    async with durable_engine(workflows=[squares]) as engine:
        run_id = await engine.start(squares, [])
        await engine.run_until_idle()
        assert ("completed", []) == ((r := await engine.get_run(run_id)).status, r.output)
        assert [] == await engine.checkpoints(run_id)


async def test_a_fan_refuses_a_step_with_timeout_ms(durable_engine: DurableEngineFactory) -> None:
    """A fan needs durable steps: a liveness step is refused with an error naming timeout_ms."""

    @workflow("bad-fan")
    async def bad_fan(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.all(square, [1, 2], timeout_ms=5000)

    async with durable_engine(workflows=[bad_fan]) as engine:
        run_id = await engine.start(bad_fan, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert "timeout_ms" in run.error.message
    assert [] == checkpoints


async def test_fan_then_step_replays_in_sequence(durable_engine: DurableEngineFactory) -> None:
    """A fan takes consecutive sequence numbers; a step after it takes the next one."""

    @workflow("fan-then-step")
    async def fan_then_step(ctx: WorkflowContext, _: None) -> Any:
        values = await ctx.all(square, [1, 2])
        return [*values, await ctx.step(square, 4)]

    async with durable_engine(workflows=[fan_then_step], steps=[square]) as engine:
        run_id = await engine.start(fan_then_step, None)
        await engine.run_until_idle()
        assert [1, 4, 16] == (await engine.get_run(run_id)).output
        assert [1, 2, 3] == [cp.seq for cp in await engine.checkpoints(run_id)]
