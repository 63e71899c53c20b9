"""Lost dispatch: a pending step's lease, renewed by beats, re-driven when it lapses, bounded."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import pytest

from effects.durable import (
    Engine,
    RemoteStepError,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from effects.durable._engine import open_store
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable._store import TaskOutcome
from tests.durable.support import START_MS, Intercepting, events_named, execute, relative, rows

pytestmark = pytest.mark.anyio


@step("export")
async def export(value: Any) -> Any:
    """Return the input, telling whether this attempt re-drives a lost one."""
    return {"value": value, "redispatched": current_step().redispatched}


@workflow("exports")
async def exports(ctx: WorkflowContext, value: Any) -> Any:
    """Run the export; report a lost step's code instead of failing."""
    try:
        return await ctx.step(export, value)
    except RemoteStepError as error:
        return {"lost": error.step_error.code, "attempts": len(error.errors)}


async def lose_tasks(engine: Engine) -> int:
    """Withdraw every queued task, as a transport losing them would."""
    return execute(engine.store.url, "DELETE FROM tasks")


@pytest.mark.not_on_memory("loses tasks with an SQL write, as a transport would")
async def test_a_lapsed_lease_redispatches_the_same_step(
    durable_engine: DurableEngineFactory,
) -> None:
    """With remote_redispatch_ms a lost task is re-driven, attempt + 1, when the lease lapses."""
    options: dict[str, Any] = {"remote_redispatch_ms": 10_000}
    async with durable_engine(workflows=[exports], **options) as engine:
        run_id = await engine.start(exports, "x")
        await engine.run_until_idle()
        (checkpoint,) = await engine.checkpoints(run_id)
        assert ([10_000], [10_000]) == (
            relative([checkpoint.wake_at]),
            relative([(await engine.get_run(run_id)).wake_at]),
        )
        assert 1 == await lose_tasks(engine)
        await engine.run_for(10)  # the lease lapses: re-dispatched
        async with durable_engine(steps=[export]) as worker:
            await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        redispatched = await events_named(engine, run_id, "step.redispatched")
        started = await events_named(engine, run_id, "step.started")
    assert ("completed", {"value": "x", "redispatched": True}) == (run.status, run.output)
    assert [10_000] == relative([e.at for e in redispatched])
    assert "warning" == redispatched[0].level
    assert [True] == [e.data.get("redispatched") for e in started]


async def test_the_bound_runs_out_with_remote_step_lost(
    durable_engine: DurableEngineFactory,
) -> None:
    """After remote_redispatch_max re-drives the step fails with code remote_step_lost."""
    options: dict[str, Any] = {"remote_redispatch_ms": 1000, "remote_redispatch_max": 2}
    async with durable_engine(workflows=[exports], **options) as engine:  # nobody ever works
        run_id = await engine.start(exports, "x")
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        lost = await events_named(engine, run_id, "step.lost")
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert {"lost": "remote_step_lost", "attempts": 1} == run.output
    assert [0, 1000, 2000] == relative([e.at for e in dispatched])
    assert [3000] == relative([e.at for e in lost])
    assert "error" == lost[0].level


@pytest.mark.sqlite_only(
    "counts writes against virtual time: a server's write takes real time, during which the"
    " handler's virtual beats race on and are folded into the write in flight, by design"
)
async def test_heartbeats_renew_the_lease_with_one_write_per_half_window(
    durable_engine: DurableEngineFactory,
) -> None:
    """A worker beating every 10 ms for 5 s renews a 2 s lease with one write a second, not 500."""
    clock = durable_engine.clock
    writes: list[int] = []

    @step("chatty")
    async def chatty(_: None) -> str:
        for _beat in range(500):
            await clock.sleep_async(0.01)
            current_step().heartbeat()
        return "done"

    @workflow("uses-chatty")
    async def uses_chatty(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step(chatty, None)

    async def count(result: bool, task: Any, **kwargs: Any) -> None:
        writes.append(kwargs["now"])

    store = Intercepting(open_store(durable_engine.url), heartbeat=count)
    engine = Engine(
        store,
        workflows=[uses_chatty],
        steps=[chatty],
        clock=clock,
        remote_redispatch_ms=2000,
    )
    async with engine:
        run_id = await engine.start(uses_chatty, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        redispatched = await events_named(engine, run_id, "step.redispatched")
    assert ("completed", "done") == (run.status, run.output)
    assert [] == redispatched
    assert 4 <= len(writes) <= 6
    assert all(b - a >= 1000 for a, b in itertools.pairwise(writes))


async def test_a_beat_from_another_process_renews_the_lease(
    durable_engine: DurableEngineFactory,
) -> None:
    """A persisted beat moves the lease; an early wake of the run just parks on it again."""
    async with durable_engine(workflows=[exports], remote_redispatch_ms=2000) as engine:
        run_id = await engine.start(exports, 1)
        await engine.run_until_idle()
        (task,) = await engine.store.claim_tasks(
            groups=["default"], now=START_MS, claim_until=START_MS + 10**6, worker="w", limit=1
        )
        for second in (1, 2, 3, 4):
            await engine.run_for(1)
            now = START_MS + second * 1000
            assert await engine.store.heartbeat(
                task, now=now, progress=None, lease_until=now + 2000
            )
        await engine.run_for(1)
        assert [] == await events_named(engine, run_id, "step.redispatched")
        await engine.store.record_result(task, "w", TaskOutcome(output='"beat"'), START_MS)
        await engine.run_until_idle()
        assert "beat" == (await engine.get_run(run_id)).output


async def test_without_redispatch_a_pending_step_is_never_redispatched(
    durable_engine: DurableEngineFactory,
) -> None:
    """Off by default: a slow worker's step stays pending however long, never double-run."""
    async with durable_engine(workflows=[exports]) as engine:
        run_id = await engine.start(exports, 1)
        await engine.run_until_idle()
        await engine.store.claim_tasks(
            groups=["default"], now=START_MS, claim_until=START_MS + 10**9, worker="slow", limit=1
        )
        await engine.run_for("2h")
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert ("suspended", None) == (run.status, run.wake_at)
    assert ("running", 1, None) == (checkpoint.status, checkpoint.attempts, checkpoint.wake_at)
    assert 1 == len(dispatched)


@pytest.mark.not_on_memory("loses tasks with an SQL write, as a transport would")
async def test_redispatch_pending_re_enqueues_by_hand(durable_engine: DurableEngineFactory) -> None:
    """redispatch_pending re-enqueues a stranded step with attempt + 1 and returns the count."""
    async with durable_engine(workflows=[exports]) as engine:
        run_id = await engine.start(exports, "by hand")
        await engine.run_until_idle()
        await lose_tasks(engine)
        assert 1 == await engine.redispatch_pending(run_id)
        assert [(2, 1)] == rows(durable_engine.url, "SELECT attempt, redispatched FROM tasks")
        async with durable_engine(steps=[export]) as worker:
            await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        assert 0 == await engine.redispatch_pending(run_id)  # nothing pending: safe, a no-op
    assert {"value": "by hand", "redispatched": True} == run.output


async def test_a_fan_carries_leases_on_every_member(durable_engine: DurableEngineFactory) -> None:
    """Fan members are written with the lease on them and the run parks on it."""

    @workflow("fan-exports")
    async def fan_exports(ctx: WorkflowContext, values: list[int]) -> Any:
        return await ctx.all(export, values)

    async with durable_engine(workflows=[fan_exports], remote_redispatch_ms=5000) as engine:
        run_id = await engine.start(fan_exports, [1, 2])
        await engine.run_until_idle()
        checkpoints = await engine.checkpoints(run_id)
        run = await engine.get_run(run_id)
    assert [[5000], [5000]] == [relative([cp.wake_at]) for cp in checkpoints]
    assert [5000] == relative([run.wake_at])


async def test_durable_retries_reach_effects_hooks(durable_engine: DurableEngineFactory) -> None:
    """Retries, give-ups and re-drives are told to effects.add_hook listeners, by name."""
    from effects import RetryEvent, add_hook

    seen: list[RetryEvent] = []
    remove = add_hook(seen.append)

    @step("flaky-export", retries=2, backoff_ms=250)
    async def flaky_export(_: None) -> None:
        raise ConnectionError("down")

    @workflow("hooked")
    async def hooked(ctx: WorkflowContext, _: None) -> str:
        with contextlib.suppress(ZeroDivisionError):
            await ctx.local_step("warm", lambda: 1 / 0, retries=2, backoff_ms=10)
        try:
            await ctx.step(flaky_export, None)
        except RemoteStepError:
            return "gave up"
        return "exported"

    try:
        async with durable_engine(workflows=[hooked], steps=[flaky_export]) as engine:
            run_id = await engine.start(hooked, None)
            await engine.run_until_idle(advance_time=True)
            assert "gave up" == (await engine.get_run(run_id)).output
    finally:
        remove()
    assert [
        ("hooked/warm", "retry", 1, 0.01),
        ("hooked/warm", "give_up", 2, None),
        ("hooked/flaky-export", "retry", 1, 0.25),
        ("hooked/flaky-export", "give_up", 2, None),
    ] == [(e.name, e.kind, e.attempt, e.delay) for e in seen]
    assert isinstance(seen[-1].error, RemoteStepError)
    assert isinstance(seen[0].error, ZeroDivisionError)
