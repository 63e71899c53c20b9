"""current_step() inside a local step: its stable step id and its attempt number."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import WorkflowContext, current_step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("sync", [False, True], ids=["async", "def"])
async def test_a_local_step_knows_its_step_id_and_attempt(
    durable_engine: DurableEngineFactory, sync: bool
) -> None:
    """Each attempt sees the same step_id ("{run_id}:{seq}"), and attempts 1, 2, 3."""
    seen: list[tuple[str, int, int, str]] = []

    def look() -> str:
        context = current_step()
        seen.append((context.step_id, context.seq, context.attempt, context.name))
        if context.attempt < 3:
            raise OSError("again")
        return context.step_id

    async def look_async() -> str:
        return look()

    @workflow("keyed")
    async def wf(ctx: WorkflowContext, _: Any) -> str:
        await ctx.local_step("first", lambda: None)
        return str(await ctx.local_step("charge", look if sync else look_async, retries=3))

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    step_id = f"{run_id}:2"
    assert ("completed", step_id) == (run.status, run.output)
    assert [(step_id, 2, n, "charge") for n in (1, 2, 3)] == seen


async def test_current_step_is_gone_between_steps(durable_engine: DurableEngineFactory) -> None:
    """In the workflow's own code, before and after a local step, there is no current step."""
    outside: list[str] = []

    @workflow("outside")
    async def wf(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("step", lambda: current_step().heartbeat({"ok": 1}))
        try:
            current_step()
        except LookupError as error:
            outside.append(str(error))

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        assert "completed" == (await engine.get_run(run_id)).status
    assert 1 == len(outside)
    assert "local step's function" in outside[0]
