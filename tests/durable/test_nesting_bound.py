"""Values nested deeper than MAX_DEPTH are refused before anything is written, on every path."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import (
    MAX_DEPTH,
    RemoteStepError,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import rows

pytestmark = pytest.mark.anyio


def nested(depth: int) -> Any:
    """A list nested *depth* levels deep (``[]`` is 1)."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


async def test_a_workflow_input_at_the_bound_is_kept_and_beyond_it_refused(
    durable_engine: DurableEngineFactory,
) -> None:
    """MAX_DEPTH levels are stored and read back; one more is a TypeError naming the bound."""

    @workflow("deep")
    async def deep(ctx: WorkflowContext, value: Any) -> Any:
        return value

    async with durable_engine(workflows=[deep]) as engine:
        with pytest.raises(TypeError, match=rf"input of workflow 'deep'.* {MAX_DEPTH} deep"):
            await engine.start(deep, nested(MAX_DEPTH + 1))
        with pytest.raises(TypeError, match="input of workflow 'deep'"):
            await engine.start(deep, nested(1000))
        assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")
        run_id = await engine.start(deep, nested(MAX_DEPTH))
        await engine.run_until_idle()
        assert nested(MAX_DEPTH) == (await engine.get_run(run_id)).output


@pytest.mark.parametrize("where", ["local output", "step input", "step output", "output"])
async def test_a_value_beyond_the_bound_is_named_and_nothing_is_written(
    durable_engine: DurableEngineFactory, where: str
) -> None:
    """A local step's output, a step's input or output, the workflow's output: refused, named."""
    too_deep = nested(MAX_DEPTH + 1)

    @step("deepens")
    async def deepens(_: Any) -> Any:
        return too_deep

    @workflow("deepening")
    async def wf(ctx: WorkflowContext, _: None) -> Any:
        if where == "local output":
            return await ctx.local_step("local", lambda: too_deep)
        if where == "step input":
            return await ctx.step(echo, too_deep)
        if where == "step output":
            try:
                return await ctx.step(deepens, None)
            except RemoteStepError as error:
                return error.step_error.message
        return too_deep

    async with durable_engine(workflows=[wf], steps=[echo, deepens]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    message = run.output if where == "step output" else run.error and run.error.message
    assert f"more than {MAX_DEPTH} deep" in str(message)
    if where in ("local output", "step input"):
        assert [] == checkpoints


async def test_deep_progress_is_refused_and_deep_details_kept_as_text(
    durable_engine: DurableEngineFactory,
) -> None:
    """heartbeat() refuses deep progress; an error's too deep details are kept as their repr."""

    class DeepError(Exception):
        details = nested(MAX_DEPTH + 1)

    @step("beats")
    async def beats(_: Any) -> None:
        with pytest.raises(TypeError, match="heartbeat progress"):
            current_step().heartbeat(nested(MAX_DEPTH + 1))
        raise DeepError("deep")

    @workflow("beating")
    async def wf(ctx: WorkflowContext, _: None) -> Any:
        try:
            await ctx.step(beats, None)
        except RemoteStepError as error:
            return error.step_error.details
        return None

    async with durable_engine(workflows=[wf], steps=[beats]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert "completed" == run.status
    assert isinstance(run.output, str)
    assert run.output.startswith("[[[")
