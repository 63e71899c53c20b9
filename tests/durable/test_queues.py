"""Flow-control queues: every attempt is admitted, a slot is held only until the result lands."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import Queue, WorkflowContext, current_step, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import events_named, relative, rows

pytestmark = pytest.mark.anyio

running: list[str] = []


@step("call-api", queue="api", retries=3, backoff_ms=60_000)
async def call_api(who: str) -> str:
    """Fails twice for 'flaky' (which then waits a minute each time); succeeds for others."""
    running.append(who)
    if who == "flaky" and current_step().attempt < 3:
        raise ConnectionError("busy")
    return f"{who} done"


@workflow("uses-api")
async def uses_api(ctx: WorkflowContext, who: str) -> str:
    """Call the API once."""
    return await ctx.step(call_api, who)


async def test_a_step_waiting_out_its_backoff_holds_no_slot(
    durable_engine: DurableEngineFactory,
) -> None:
    """Two workflows share a queue of one: the other is never blocked by a long backoff."""
    running.clear()
    options: dict[str, Any] = {"queues": [Queue("api", concurrency=1)]}
    async with durable_engine(workflows=[uses_api], steps=[call_api], **options) as engine:
        flaky = await engine.start(uses_api, "flaky")
        await engine.run_until_idle()  # flaky fails, waits 60 s, holding no slot
        steady = await engine.start(uses_api, "steady")
        await engine.run_until_idle()
        assert "steady done" == (await engine.get_run(steady)).output
        assert "suspended" == (await engine.get_run(flaky)).status
        await engine.run_until_idle(advance_time=True)
        assert "flaky done" == (await engine.get_run(flaky)).output
        completed = await events_named(engine, steady, "step.completed")
    assert ["flaky", "steady", "flaky", "flaky"] == running
    assert [0] == relative([e.at for e in completed])


async def test_admission_waits_for_a_free_slot_without_polling(
    durable_engine: DurableEngineFactory,
) -> None:
    """With every slot held, a new attempt waits; when a result lands the oldest is admitted."""
    async with durable_engine(workflows=[uses_api], queues=[Queue("api", 2)]) as engine:
        ids = [await engine.start(uses_api, f"w{n}") for n in range(4)]
        await engine.run_until_idle()
        statuses = rows(durable_engine.url, "SELECT status FROM tasks ORDER BY task_id")
        assert [("queued",), ("queued",), ("waiting",), ("waiting",)] == statuses
        async with durable_engine(steps=[call_api], queues=[Queue("api", 2)]) as worker:
            await worker.run_until_idle()
        await engine.run_until_idle()
        outputs = [(await engine.get_run(run_id)).output for run_id in ids]
        admitted = [
            e for run_id in ids for e in await events_named(engine, run_id, "step.admitted")
        ]
        queued = [e for run_id in ids for e in await events_named(engine, run_id, "step.queued")]
    assert ["w0 done", "w1 done", "w2 done", "w3 done"] == outputs
    assert (2, 2) == (len(queued), len(admitted))


async def test_an_unknown_queue_on_a_call_is_a_clear_error(
    durable_engine: DurableEngineFactory,
) -> None:
    """queue= naming a queue the engine lacks fails the call with a ValueError naming it."""

    @workflow("wrong-queue")
    async def wrong_queue(ctx: WorkflowContext, _: None) -> str:
        return await ctx.step(call_api, "x", queue="nope")

    async with durable_engine(workflows=[wrong_queue], queues=[Queue("api")]) as engine:
        run_id = await engine.start(wrong_queue, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert "unknown queue 'nope': this engine has 'api'" == run.error.message
