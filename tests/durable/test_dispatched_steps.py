"""Dispatched steps, durable path: suspend, claim, result, wake_at stamped once, re-dispatch."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from effects import FatalError
from effects.durable import RemoteStepError, StepError, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable._store import TaskOutcome
from effects.http import ApiRequestError
from schedules import exponential, spaced
from tests.durable.support import START_MS, Flaky, events_named, relative, rows

pytestmark = pytest.mark.anyio


class Coded(Exception):  # noqa: N818 - a worker's error as it is
    """An error with a code and details, as a worker would report it."""

    def __init__(self, message: str, code: str, details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


def charging(handler: Flaky, **policy: Any) -> tuple[Any, Any]:
    """A step 'charge' running *handler* with *policy*, and a workflow that calls it once."""

    @step("charge", **policy)
    def charge(order: Any) -> Any:
        return handler(order)

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: Any) -> Any:
        return await ctx.step(charge, order)

    return charge, checkout


async def test_dispatch_writes_checkpoint_and_task_and_suspends(
    durable_engine: DurableEngineFactory,
) -> None:
    """The first call leaves a pending checkpoint, a queued task and a suspended run, no more."""
    _, checkout = charging(Flaky([]))
    async with durable_engine(workflows=[checkout]) as engine:  # no worker for the step
        run_id = await engine.start(checkout, {"id": 7})
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
    assert ("suspended", None) == (run.status, run.wake_at)
    assert ("pending", "remote", 1, f"{run_id}:1") == (
        checkpoint.status,
        checkpoint.kind,
        checkpoint.attempts,
        checkpoint.step_id,
    )
    tasks = rows(durable_engine.url, "SELECT step_id, name, attempt, status, input FROM tasks")
    assert [(f"{run_id}:1", "charge", 1, "queued", '{"id":7}')] == tasks
    runs = rows(durable_engine.url, "SELECT lease_token, lease_until FROM runs")
    assert [(None, None)] == runs


async def test_a_worker_completes_the_step_and_the_run_resumes(
    durable_engine: DurableEngineFactory,
) -> None:
    """A worker engine with the step claims the task; its result resumes the run to completion."""
    handler = Flaky([], value={"charge_id": "ch_1"})
    charge, checkout = charging(handler)
    async with (
        durable_engine(workflows=[checkout]) as orchestrator,
        durable_engine(steps=[charge]) as worker,
    ):
        run_id = await orchestrator.start(checkout, {"id": 7})
        await orchestrator.run_until_idle()
        await worker.run_until_idle()
        assert "pending" == (await orchestrator.get_run(run_id)).status
        await orchestrator.run_until_idle()
        run = await orchestrator.get_run(run_id)
    assert ("completed", {"charge_id": "ch_1"}) == (run.status, run.output)
    assert [{"id": 7}] == handler.calls
    assert [] == rows(durable_engine.url, "SELECT * FROM tasks")


async def test_wake_at_is_exact_and_nothing_is_dispatched_before_it(
    durable_engine: DurableEngineFactory,
) -> None:
    """A failure stamps wake_at = now + delay to the ms; the retry is dispatched then, no sooner."""
    handler = Flaky([OSError("502")] * 2, value="ok")
    charge, checkout = charging(handler, retries=3, backoff="exp", backoff_ms=400)
    clock = durable_engine.clock
    async with durable_engine(workflows=[checkout], steps=[charge]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        (checkpoint,) = await engine.checkpoints(run_id)
        assert ("failed", 1) == (checkpoint.status, checkpoint.attempts)
        assert [400] == relative([checkpoint.wake_at])
        assert [400] == relative([(await engine.get_run(run_id)).wake_at])
        clock.advance(0.399)
        await engine.run_until_idle()
        assert 1 == len(handler.calls)
        clock.advance(0.001)
        await engine.run_until_idle()
        assert 2 == len(handler.calls)
        (checkpoint,) = await engine.checkpoints(run_id)
        assert ("failed", 2, [400 + 800]) == (
            checkpoint.status,
            checkpoint.attempts,
            relative([checkpoint.wake_at]),
        )
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert ("completed", "ok") == (run.status, run.output)
    assert [0, 400, 1200] == relative([e.at for e in dispatched])
    assert [1, 2, 3] == [e.data["attempt"] for e in dispatched]


async def test_the_same_step_id_is_dispatched_with_attempt_plus_one(
    durable_engine: DurableEngineFactory,
) -> None:
    """Every attempt of a step carries the same step_id and the next attempt number."""
    seen: list[tuple[str, int]] = []

    @step("retried", retries=3)
    async def retried(_: None) -> str:
        from effects.durable import current_step

        ctx = current_step()
        seen.append((ctx.step_id, ctx.attempt))
        if ctx.attempt < 3:
            raise OSError("again")
        return "third"

    @workflow("uses")
    async def uses(ctx: WorkflowContext, _: None) -> str:
        return await ctx.step(retried, None)

    async with durable_engine(workflows=[uses], steps=[retried]) as engine:
        run_id = await engine.start(uses, None)
        await engine.run_until_idle(advance_time=True)
        assert "third" == (await engine.get_run(run_id)).output
    assert [(f"{run_id}:1", 1), (f"{run_id}:1", 2), (f"{run_id}:1", 3)] == seen


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (FatalError("card declined", "declined"), "declined"),
        (Coded("invalid card", "invalid", {"field": "number"}), "invalid"),
    ],
    ids=["fatal-error", "retryable-false"],
)
async def test_non_retryable_failures_surface_at_once(
    durable_engine: DurableEngineFactory, error: Exception, code: str
) -> None:
    """FatalError or retryable = False from a worker raises RemoteStepError on the first attempt."""
    if isinstance(error, Coded):
        error.retryable = False  # type: ignore[attr-defined]
    handler = Flaky([error])
    charge, _ = charging(handler, retries=5, backoff_ms=10)
    caught: list[RemoteStepError] = []

    @workflow("catches")
    async def catches(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.step(charge, None)
        except RemoteStepError as failure:
            caught.append(failure)
            return failure.step_error.code or ""
        return "charged"

    async with durable_engine(workflows=[catches], steps=[charge]) as engine:
        run_id = await engine.start(catches, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("completed", code) == (run.status, run.output)
    assert 1 == len(handler.calls)
    assert 1 == len(caught[0].errors)
    assert [] == durable_engine.clock.sleeps


async def test_a_name_without_a_handler_surfaces_at_once(
    durable_engine: DurableEngineFactory,
) -> None:
    """A worker without a handler for the name reports 'no handler for <name>', never retried."""
    other = Flaky([])
    served, _ = charging(other)

    @workflow("asks")
    async def asks(ctx: WorkflowContext, _: None) -> None:
        await ctx.step("nobody:serves-this", {"x": 1}, retries=5)

    async with durable_engine(workflows=[asks], steps=[served]) as engine:
        run_id = await engine.start(asks, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert "no_handler" == run.error.code
    assert "no handler for nobody:serves-this" in run.error.message
    assert (1, True) == (checkpoint.attempts, checkpoint.final)


async def test_exhausted_retries_keep_the_last_error_and_every_attempt(
    durable_engine: DurableEngineFactory,
) -> None:
    """After the last attempt, .step_error is the last error and .errors holds all of them."""
    handler = Flaky([Coded(f"try {n}", f"e{n}", {"n": n}) for n in (1, 2, 3)])
    charge, _ = charging(handler, retries=3, backoff_ms=100)
    caught: list[RemoteStepError] = []

    @workflow("spends")
    async def spends(ctx: WorkflowContext, _: None) -> None:
        try:
            await ctx.step(charge, None)
        except RemoteStepError as failure:
            caught.append(failure)
            raise

    async with durable_engine(workflows=[spends], steps=[charge]) as engine:
        run_id = await engine.start(spends, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    (failure,) = caught
    assert ("try 3", "e3", {"n": 3}) == (
        failure.step_error.message,
        failure.step_error.code,
        failure.step_error.details,
    )
    assert ["try 1", "try 2", "try 3"] == [e.message for e in failure.errors]
    assert "failed" == run.status
    assert run.error is not None
    assert ("e3", {"n": 3}) == (run.error.code, run.error.details)
    assert [0.1, 0.1] == [round(d, 3) for d in _waits(durable_engine)]


def _waits(factory: DurableEngineFactory) -> list[float]:
    """Seconds between consecutive dispatches, read from the store's events."""
    times = [
        at
        for (at,) in rows(
            factory.url, "SELECT at FROM events WHERE name = 'step.dispatched' ORDER BY id"
        )
    ]
    return [(b - a) / 1000 for a, b in itertools.pairwise(times)]


async def test_per_call_overrides_win_field_by_field(
    durable_engine: DurableEngineFactory,
) -> None:
    """ctx.step(def, input, retries=...) keeps the definition's backoff fields it does not name."""
    handler = Flaky([OSError("x")] * 4, value="ok")
    charge, _ = charging(handler, retries=2, backoff="exp", backoff_ms=100, backoff_max_ms=250)

    @workflow("patient")
    async def patient(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.step(charge, None, retries=5)

    async with durable_engine(workflows=[patient], steps=[charge]) as engine:
        run_id = await engine.start(patient, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("completed", "ok") == (run.status, run.output)
    assert [0.1, 0.2, 0.25, 0.25] == _waits(durable_engine)


async def test_a_dead_workers_claim_expires_into_a_retryable_failure(
    durable_engine: DurableEngineFactory,
) -> None:
    """A claim nobody renews expires; the engine records 'worker lost' and retries durably."""
    handler = Flaky([], value="finally")
    charge, checkout = charging(handler, retries=2, backoff_ms=1000)
    async with (
        durable_engine(workflows=[checkout], lease_ms=5000) as engine,
        durable_engine(steps=[charge]) as worker,
    ):
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        # A worker that claims the task and dies without a word.
        now = round(durable_engine.clock.now() * 1000)
        (task,) = await engine.store.claim_tasks(
            groups=["default"], now=now, claim_until=now + 5000, worker="dead", limit=1
        )
        await engine.run_until_idle(advance_time=True)
        await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
        failed = await events_named(engine, run_id, "step.failed")
        # The dead worker's late report changes nothing.
        assert not await engine.store.record_result(task, "dead", TaskOutcome(output='"x"'), now)
    assert ("completed", "finally") == (run.status, run.output)
    assert ["worker_lost"] == [e.data["error"]["code"] for e in failed]
    assert [5001] == relative([failed[0].at])
    assert 2 == checkpoint.attempts


async def test_a_late_success_from_a_lost_claim_still_completes_the_step(
    durable_engine: DurableEngineFactory,
) -> None:
    """A worker whose claim expired but who then reports success completes a step still waiting."""
    _, checkout = charging(Flaky([]), retries=3, backoff_ms=60_000)
    async with durable_engine(workflows=[checkout], lease_ms=1000) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        now = round(durable_engine.clock.now() * 1000)
        (task,) = await engine.store.claim_tasks(
            groups=["default"], now=now, claim_until=now + 1000, worker="slow", limit=1
        )
        durable_engine.clock.advance(2)
        await engine.run_until_idle()  # claim expired: attempt 1 failed, retry in 60 s
        (checkpoint,) = await engine.checkpoints(run_id)
        assert ("failed", [START_MS + 2000 + 60_000]) == (checkpoint.status, [checkpoint.wake_at])
        assert await engine.store.record_result(task, "slow", TaskOutcome(output='"late"'), now)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", "late") == (run.status, run.output)


async def test_any_schedule_drives_a_durable_retry_with_its_state_on_the_checkpoint(
    durable_engine: DurableEngineFactory,
) -> None:
    """retry= a Schedule: its JSON state is stored beside wake_at and the waits follow it."""
    policy = spaced("2s").times(3) & exponential("500ms")
    handler = Flaky([OSError("x")] * 3, value="ok")
    charge, checkout = charging(handler, retry=policy)
    async with durable_engine(workflows=[checkout], steps=[charge]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        (checkpoint,) = await engine.checkpoints(run_id)
        assert checkpoint.retry_state is not None
        assert [2000] == relative([checkpoint.wake_at])
        await engine.run_until_idle(advance_time=True)
        assert "completed" == (await engine.get_run(run_id)).status
    assert [2.0, 2.0, 2.0] == _waits(durable_engine)


async def test_within_stops_a_durable_retry_at_its_limit(
    durable_engine: DurableEngineFactory,
) -> None:
    """A time-bounded schedule measures from the first failure, across suspensions."""
    handler = Flaky([OSError("x")] * 10)
    charge, checkout = charging(handler, retry=spaced("1s").within("3s"))
    async with durable_engine(workflows=[checkout], steps=[charge]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert "failed" == run.status
    assert 4 == len(handler.calls)


async def test_retry_after_sets_the_least_wait(durable_engine: DurableEngineFactory) -> None:
    """An error with retry_after (as effects.http builds) waits at least that long."""
    handler = Flaky([ApiRequestError(429, retry_after=30)], value="ok")
    charge, checkout = charging(handler, retries=2, backoff_ms=100)
    async with durable_engine(workflows=[checkout], steps=[charge]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        (checkpoint,) = await engine.checkpoints(run_id)
        assert checkpoint.error is not None
        assert 30.0 == checkpoint.error.retry_after
        assert [30_000] == relative([checkpoint.wake_at])
        await engine.run_until_idle(advance_time=True)
        assert "ok" == (await engine.get_run(run_id)).output


async def test_the_schedule_sees_the_step_error(durable_engine: DurableEngineFactory) -> None:
    """A retry schedule's predicates receive the recorded StepError of the attempt."""
    seen: list[StepError] = []

    def transient(error: StepError) -> bool:
        seen.append(error)
        return error.code != "permanent"

    handler = Flaky([Coded("flap", "transient", None), Coded("stop", "permanent", None)])
    charge, checkout = charging(handler, retry=spaced(1).while_input(transient))
    async with durable_engine(workflows=[checkout], steps=[charge]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle(advance_time=True)
        assert "failed" == (await engine.get_run(run_id)).status
    assert ["transient", "permanent"] == [e.code for e in seen]
    assert 2 == len(handler.calls)
