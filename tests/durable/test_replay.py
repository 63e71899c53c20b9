"""Replay: recorded outputs answer, a changed step fails the run, suspension cannot be swallowed."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from effects.durable import NonDeterminismError, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import names

pytestmark = pytest.mark.anyio


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


async def test_the_workflow_is_replayed_from_its_start_on_every_resume(
    durable_engine: DurableEngineFactory,
) -> None:
    """Each resume runs the workflow body again; completed steps answer from their checkpoints."""
    entries: list[int] = []
    local_calls: list[int] = []

    @workflow("three")
    async def three(ctx: WorkflowContext, _: None) -> list[Any]:
        entries.append(1)

        def local() -> str:
            local_calls.append(1)
            return "a"

        a = await ctx.local_step("a", local)
        b = await ctx.step(echo, "b")
        c = await ctx.step(echo, "c")
        return [a, b, c]

    # The cache of suspended runs off: every resume replays (what this test is about).
    async with durable_engine(workflows=[three], steps=[echo], cached_runs=0) as engine:
        run_id = await engine.start(three, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", ["a", "b", "c"]) == (run.status, run.output)
    assert 3 == len(entries)
    assert 1 == len(local_calls)


async def test_a_different_step_at_a_sequence_number_fails_the_run(
    durable_engine: DurableEngineFactory,
) -> None:
    """Replay that meets another step name where one was recorded raises NonDeterminismError."""
    flip = {"name": "first"}

    @workflow("changing")
    async def changing(ctx: WorkflowContext, _: None) -> str:
        await ctx.local_step(flip["name"], lambda: 1)
        await ctx.step(echo, None)
        return "done"

    # Replay meets the changed code: no workflow is kept parked across the change.
    async with durable_engine(workflows=[changing], cached_runs=0) as engine:
        run_id = await engine.start(changing, None)
        await engine.run_until_idle()
        flip["name"] = "renamed"
        async with durable_engine(steps=[echo]) as worker:
            await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert "effects.durable.errors.NonDeterminismError" == run.error.type
    assert "non_determinism" == run.error.code
    assert "'renamed' (local)" in run.error.message
    assert "'first' (local)" in run.error.message


async def test_non_determinism_fails_the_run_even_if_the_workflow_catches_it(
    durable_engine: DurableEngineFactory,
) -> None:
    """Catching NonDeterminismError does not help: the run still fails with it."""
    flip = {"kind": "local"}

    @workflow("catching")
    async def catching(ctx: WorkflowContext, _: None) -> str:
        try:
            if flip["kind"] == "local":
                await ctx.local_step("x", lambda: 1)
            else:
                await ctx.step("x", None)
        except NonDeterminismError:
            return "swallowed"
        await ctx.step(echo, None)
        return "done"

    # Replay meets the changed code: no workflow is kept parked across the change.
    async with durable_engine(workflows=[catching], cached_runs=0) as engine:
        run_id = await engine.start(catching, None)
        await engine.run_until_idle()
        flip["kind"] = "remote"
        async with durable_engine(steps=[echo]) as worker:
            await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert "'x' (remote)" in run.error.message


async def test_suspension_is_not_caught_by_except_exception(
    durable_engine: DurableEngineFactory,
) -> None:
    """A workflow's ``except Exception`` around a dispatched step does not stop the suspension."""
    caught: list[BaseException] = []

    @workflow("guarded")
    async def guarded(ctx: WorkflowContext, _: None) -> Any:
        try:
            return await ctx.step(echo, "value")
        except Exception as error:  # noqa: BLE001 - what this test is about
            caught.append(error)
            return "swallowed"

    async with durable_engine(workflows=[guarded], steps=[echo]) as engine:
        run_id = await engine.start(guarded, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", "value") == (run.status, run.output)
    assert [] == caught


async def test_a_swallowed_suspension_still_suspends(durable_engine: DurableEngineFactory) -> None:
    """Even ``except BaseException`` cannot go on: later calls suspend, the return is ignored."""
    after: list[str] = []

    @workflow("stubborn")
    async def stubborn(ctx: WorkflowContext, _: None) -> Any:
        try:
            first = await ctx.step(echo, "first")
        except BaseException:  # noqa: BLE001 - what this test is about
            first = "swallowed"
        with contextlib.suppress(BaseException):
            await ctx.local_step("after", lambda: after.append("ran"))
        return first

    async with durable_engine(workflows=[stubborn]) as engine:
        run_id = await engine.start(stubborn, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert "suspended" == run.status
    assert ["echo"] == [cp.name for cp in checkpoints]
    assert [] == after


async def test_outputs_are_what_replay_returns_from_the_first_run(
    durable_engine: DurableEngineFactory,
) -> None:
    """A tuple output comes back as a list on the first run too: every run sees the same value."""
    seen: list[Any] = []

    @workflow("shapes")
    async def shapes(ctx: WorkflowContext, _: None) -> None:
        seen.append(await ctx.local_step("pair", lambda: (1, {2: "two"})))
        await ctx.step(echo, None)

    # The cache of suspended runs off: the replay is what sees the output a second time.
    async with durable_engine(workflows=[shapes], steps=[echo], cached_runs=0) as engine:
        await engine.start(shapes, None)
        await engine.run_until_idle()
    assert [[1, {"2": "two"}], [1, {"2": "two"}]] == seen


async def test_a_run_records_its_trail_of_events(durable_engine: DurableEngineFactory) -> None:
    """The event trail names each step's start, completion and the run's own milestones."""

    @workflow("trail")
    async def trail(ctx: WorkflowContext, _: None) -> str:
        await ctx.local_step("local", lambda: 1)
        return await ctx.step(echo, "remote")

    async with durable_engine(workflows=[trail], steps=[echo]) as engine:
        run_id = await engine.start(trail, None)
        await engine.run_until_idle()
        trail_names = await names(engine, run_id)
    assert [
        "run.started",
        "step.started",
        "step.completed",
        "step.dispatched",
        "step.started",
        "step.completed",
        "run.completed",
    ] == trail_names
