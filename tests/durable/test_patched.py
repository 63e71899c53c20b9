"""``ctx.patched``: True for runs that reach the change under new code, False for older runs."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


@workflow("order")
async def old_order(ctx: WorkflowContext, _: Any) -> str:
    """The code before the change: reserve, then charge."""
    await ctx.step(echo, "reserve")
    return str(await ctx.step(echo, "charge"))


def new_order(seen: list[bool]) -> Any:
    """The code after the change: reserve, then (patched) charge in cents, else charge."""

    @workflow("order")
    async def order(ctx: WorkflowContext, _: Any) -> str:
        await ctx.step(echo, "reserve")
        patched = ctx.patched("charge-in-cents")
        seen.append(patched)
        if patched:
            return str(await ctx.step(echo, "charge-cents"))
        return str(await ctx.step(echo, "charge"))

    return order


async def test_a_new_run_takes_the_patch_and_keeps_taking_it_on_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """True on the first turn and on every replay; a 'patch' checkpoint is recorded."""
    seen: list[bool] = []
    order = new_order(seen)
    async with durable_engine(workflows=[order], steps=[echo]) as engine:
        run_id = await engine.start(order, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", "charge-cents") == (run.status, run.output)
    assert [True, True] == seen
    assert [("echo", "remote"), ("charge-in-cents", "patch"), ("echo", "remote")] == [
        (c.name, c.kind) for c in checkpoints
    ]
    assert ("completed", None) == (checkpoints[1].status, checkpoints[1].output)


async def test_an_old_run_that_passed_the_point_takes_the_old_path_and_no_number(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run whose 'charge' was dispatched under old code replays it: False, no patch record."""
    seen: list[bool] = []
    async with (
        durable_engine(workflows=[old_order]) as engine,
        durable_engine(steps=[echo]) as worker,
    ):
        run_id = await engine.start(old_order, None)
        await engine.run_until_idle()
        await worker.run_until_idle()
        await engine.run_until_idle()  # reserve done: charge dispatched at seq 2
        before = await engine.checkpoints(run_id)
    order = new_order(seen)
    async with durable_engine(workflows=[order], steps=[echo]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        after = await engine.checkpoints(run_id)
    assert [("echo", "completed"), ("echo", "pending")] == [(c.name, c.status) for c in before]
    assert ("completed", "charge") == (run.status, run.output)
    assert [False] == seen
    assert [("echo", "remote"), ("echo", "remote")] == [(c.name, c.kind) for c in after]


async def test_an_old_run_suspended_before_the_point_takes_the_patch(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run still waiting on 'reserve' when the code changed reaches the point anew: True."""
    seen: list[bool] = []
    async with durable_engine(workflows=[old_order]) as engine:
        run_id = await engine.start(old_order, None)
        await engine.run_until_idle()  # no worker: suspended at reserve
    order = new_order(seen)
    async with durable_engine(workflows=[order], steps=[echo]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", "charge-cents") == (run.status, run.output)
    assert {True} == set(seen)


async def test_a_repeated_change_id_is_a_point_of_its_own_each_time(
    durable_engine: DurableEngineFactory,
) -> None:
    """Two patched('x') in a row: both True, two records; an old run with one: True, False."""
    seen: list[bool] = []

    @workflow("twice")
    async def twice(ctx: WorkflowContext, _: Any) -> list[bool]:
        marks = [ctx.patched("x"), ctx.patched("x")]
        seen.extend(marks)
        await ctx.step(echo, None)
        return marks

    @workflow("twice")
    async def once(ctx: WorkflowContext, _: Any) -> list[bool]:
        marks = [ctx.patched("x")]
        await ctx.step(echo, None)
        return marks

    async with durable_engine(workflows=[twice], steps=[echo]) as engine:
        new_id = await engine.start(twice, None)
        await engine.run_until_idle()
        new_run = await engine.get_run(new_id)
        kinds = [(c.name, c.kind) for c in await engine.checkpoints(new_id)]
    async with durable_engine(workflows=[once]) as engine:
        old_id = await engine.start(once, None)
        await engine.run_until_idle()  # patch x at 1, echo pending at 2
    seen.clear()
    async with durable_engine(workflows=[twice], steps=[echo]) as engine:
        await engine.run_until_idle()
        old_run = await engine.get_run(old_id)
    assert ("completed", [True, True]) == (new_run.status, new_run.output)
    assert [("x", "patch"), ("x", "patch"), ("echo", "remote")] == kinds
    assert ("completed", [True, False]) == (old_run.status, old_run.output)
    assert [True, False] == seen


async def test_a_patch_before_a_first_try_local_step_and_a_return_is_written(
    durable_engine: DurableEngineFactory,
) -> None:
    """The marker rides on the next write: a local step's, or the run's completion."""

    @workflow("quick")
    async def quick(ctx: WorkflowContext, _: Any) -> int:
        ctx.patched("a")
        one = await ctx.local_step("one", lambda: 1)
        ctx.patched("b")
        return one

    async with durable_engine(workflows=[quick]) as engine:
        run_id = await engine.start(quick, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", 1) == (run.status, run.output)
    assert [("a", "patch"), ("one", "local"), ("b", "patch")] == [
        (c.name, c.kind) for c in checkpoints
    ]


async def test_another_patch_recorded_at_the_position_is_false(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run that recorded patch 'b' meets new code asking 'a' there first: False, then True."""
    seen: list[bool] = []

    @workflow("p")
    async def with_b(ctx: WorkflowContext, _: Any) -> None:
        ctx.patched("b")
        await ctx.step(echo, None)

    @workflow("p")
    async def with_a_then_b(ctx: WorkflowContext, _: Any) -> None:
        seen.extend([ctx.patched("a"), ctx.patched("b")])
        await ctx.step(echo, None)

    async with durable_engine(workflows=[with_b]) as engine:
        run_id = await engine.start(with_b, None)
        await engine.run_until_idle()
    async with durable_engine(workflows=[with_a_then_b], steps=[echo]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert "completed" == run.status
    assert [False, True] == seen[:2]


@pytest.mark.parametrize(
    ("change_id", "error"),
    [("", ValueError), (" x", ValueError), ("a\x00b", ValueError), ("\ud800", ValueError),
     (None, TypeError), (7, TypeError)],
    ids=["empty", "spaces", "nul", "surrogate", "none", "int"],
)  # fmt: skip
async def test_an_odd_change_id_raises_and_records_nothing(
    durable_engine: DurableEngineFactory, change_id: Any, error: type[Exception]
) -> None:
    """The workflow sees the error at ctx.patched; no patch checkpoint is written."""

    @workflow("odd")
    async def odd(ctx: WorkflowContext, _: Any) -> str:
        try:
            ctx.patched(change_id)
        except Exception as raised:  # noqa: BLE001 - the point: what it raises
            return type(raised).__name__
        return "patched"

    async with durable_engine(workflows=[odd]) as engine:
        run_id = await engine.start(odd, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", error.__name__, []) == (run.status, run.output, checkpoints)
