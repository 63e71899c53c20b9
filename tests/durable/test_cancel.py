"""``engine.cancel``: a run stops, its attempts are withdrawn; with compensation, undone first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from effects import FatalError
from effects.durable import (
    RunCancelled,
    UnknownRunError,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import events_named, names, rows

pytestmark = pytest.mark.anyio
#: A bound on a wait that must end (never a timing claim).
PATIENCE = 30.0


def charging(calls: list[Any], **policy: Any) -> Any:
    """A step 'charge' that records each call, with *policy*."""

    @step("charge", **policy)
    async def charge(order: Any) -> str:
        calls.append(order)
        return "charged"

    return charge


def paying(charge: Any) -> Any:
    """A workflow reserving (a local step, undone by 'release'), then charging."""

    @workflow("pay")
    async def pay(ctx: WorkflowContext, order: Any) -> str:
        await ctx.local_step("reserve", lambda: "r-1", compensate=lambda u: None)
        return str(await ctx.step(charge, order))

    return pay


async def test_a_plain_cancel_withdraws_the_pending_step_and_its_task_never_runs(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run suspended on a dispatched step: cancelled at once; a worker later runs nothing."""
    calls: list[Any] = []
    charge = charging(calls)
    pay = paying(charge)
    async with durable_engine(workflows=[pay]) as orchestrator:
        run_id = await orchestrator.start(pay, {"id": 7})
        await orchestrator.run_until_idle()
        assert "suspended" == (await orchestrator.get_run(run_id)).status
        cancelled = await orchestrator.cancel(run_id)
        waited = await orchestrator.wait(run_id, timeout=PATIENCE)
        async with durable_engine(steps=[charge]) as worker:
            await worker.run_until_idle(advance_time=True)
        await orchestrator.run_until_idle(advance_time=True)
        run = await orchestrator.get_run(run_id)
        (told,) = await events_named(orchestrator, run_id, "run.cancelled")
        withdrawn = await events_named(orchestrator, run_id, "step.withdrawn")
        checkpoints = await orchestrator.checkpoints(run_id)
    assert ("cancelled", None, "plain") == (cancelled.status, cancelled.error, cancelled.cancel)
    assert ("cancelled", "cancelled") == (waited.status, run.status)
    assert [] == calls
    assert {"compensate": False, "compensation_failed": []} == told.data
    assert [{"attempt": 1, "claimed": False}] == [e.data for e in withdrawn]
    charged = checkpoints[1]
    assert ("failed", False, "cancelled") == (
        charged.status, charged.final, charged.error and charged.error.code
    )  # fmt: skip
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM tasks")
    assert [] == [c for c in checkpoints if c.name.startswith("compensate:")]


async def test_a_cancel_of_a_durable_retry_waiting_on_wake_at_ends_its_attempts(
    durable_engine: DurableEngineFactory,
) -> None:
    """A failed attempt waiting out its backoff: after a cancel, no attempt is ever made again."""
    calls: list[Any] = []

    @step("flaky", retries=5, backoff_ms=1000)
    async def flaky(_: Any) -> None:
        calls.append(current_step().attempt)
        raise ConnectionError("503")

    @workflow("retrying")
    async def retrying(ctx: WorkflowContext, _: Any) -> None:
        await ctx.step(flaky, None)

    async with durable_engine(workflows=[retrying], steps=[flaky]) as engine:
        run_id = await engine.start(retrying, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        assert ("suspended", [1]) == (run.status, calls)
        assert run.wake_at is not None
        await engine.cancel(run_id)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("cancelled", None, [1]) == (run.status, run.wake_at, calls)


async def test_a_running_attempt_learns_the_cancel_at_its_heartbeat_and_its_result_is_discarded(
    durable_engine: DurableEngineFactory,
) -> None:
    """The engine cancels a run whose attempt it runs: heartbeat() raises; the result goes."""
    started, release = asyncio.Event(), asyncio.Event()
    beats: list[str] = []

    @step("long")
    async def long(_: Any) -> str:
        started.set()
        await release.wait()
        try:
            current_step().heartbeat({"half": True})
        except RunCancelled as error:
            beats.append(error.run_id)
            raise
        return "done"

    @workflow("waits")
    async def waits(ctx: WorkflowContext, _: Any) -> str:
        return str(await ctx.step(long, None))

    async with durable_engine(workflows=[waits], steps=[long]) as engine:
        run_id = await engine.start(waits, None)
        draining = asyncio.ensure_future(engine.run_until_idle())
        await asyncio.wait_for(started.wait(), PATIENCE)
        await engine.cancel(run_id)
        release.set()
        await asyncio.wait_for(draining, PATIENCE)
        run = await engine.get_run(run_id)
        (discarded,) = await events_named(engine, run_id, "step.result_discarded")
        withdrawn = await events_named(engine, run_id, "step.withdrawn")
    assert [run_id] == beats
    assert "cancelled" == run.status
    assert "failed" == discarded.data["outcome"]
    assert [{"attempt": 1, "claimed": True}] == [e.data for e in withdrawn]
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM tasks")


async def test_a_worker_of_another_engine_learns_the_cancel_when_its_claim_is_refused(
    durable_engine: DurableEngineFactory,
) -> None:
    """Cancelled elsewhere: the claim's renewal finds it withdrawn; the next beat raises."""
    started = asyncio.Event()
    outcome: list[str] = []

    @step("long")
    async def long(_: Any) -> str:
        started.set()
        for _ in range(int(PATIENCE / 0.01)):
            await asyncio.sleep(0.01)
            try:
                current_step().heartbeat()
            except RunCancelled:
                outcome.append("told")
                raise
        outcome.append("never told")
        return "done"

    @workflow("waits")
    async def waits(ctx: WorkflowContext, _: Any) -> str:
        return str(await ctx.step(long, None))

    async with (
        durable_engine(workflows=[waits]) as operator,
        durable_engine(steps=[long], lease_ms=150) as worker,
    ):
        run_id = await operator.start(waits, None)
        await operator.run_until_idle()
        working = asyncio.ensure_future(worker.run_until_idle())
        await asyncio.wait_for(started.wait(), PATIENCE)
        await operator.cancel(run_id)
        await asyncio.wait_for(working, PATIENCE)
        run = await operator.get_run(run_id)
        discarded = await names(operator, run_id, "step.result_discarded")
    assert (["told"], "cancelled") == (outcome, run.status)
    assert ["step.result_discarded"] == discarded


async def test_a_turn_running_elsewhere_stops_at_its_next_step(
    durable_engine: DurableEngineFactory,
) -> None:
    """A turn in a local step when the cancel lands: its commit is refused, it goes no further."""
    started, release = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def first() -> str:
        started.set()
        await release.wait()
        ran.append("first")
        return "1"

    @workflow("two")
    async def two(ctx: WorkflowContext, _: Any) -> str:
        await ctx.local_step("first", first)
        await ctx.local_step("second", lambda: ran.append("second"))
        return "done"

    async with durable_engine(workflows=[two]) as running, durable_engine() as operator:
        run_id = await running.start(two, None)
        turning = asyncio.ensure_future(running.run_until_idle())
        await asyncio.wait_for(started.wait(), PATIENCE)
        await operator.cancel(run_id)
        release.set()
        await asyncio.wait_for(turning, PATIENCE)
        await running.run_until_idle(advance_time=True)
        run = await running.get_run(run_id)
        checkpoints = await running.checkpoints(run_id)
    assert ("cancelled", ["first"], []) == (run.status, ran, checkpoints)


async def test_a_liveness_wait_ends_when_its_run_is_cancelled(
    durable_engine: DurableEngineFactory,
) -> None:
    """A turn awaiting a step with timeout_ms: the cancel ends the wait; no attempt comes after."""
    calls: list[Any] = []
    charge = charging(calls, timeout_ms=60_000, retries=3)

    @workflow("live")
    async def live(ctx: WorkflowContext, _: Any) -> str:
        return str(await ctx.step(charge, None))

    async with durable_engine(workflows=[live]) as engine:
        run_id = await engine.start(live, None)
        await engine.run_until_idle()  # the turn waits in memory, parked on the virtual clock
        await engine.cancel(run_id)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert ("cancelled", 1) == (run.status, len(dispatched))
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM tasks")


def saga(log: list[str], *, refund_fails: bool = False) -> tuple[Any, ...]:
    """
    The seed's checkout: reserve (local, undo release), charge (dispatched, undo refund),
    ship (dispatched, which no test's worker serves until it wants to).
    """

    @step("payments:charge")
    async def charge(order: Any) -> str:
        log.append("charge")
        return "ch-1"

    @step("payments:refund", group="refunds")
    async def refund(undo: Any) -> str:
        log.append(f"refund {undo['output']}")
        if refund_fails:
            raise ConnectionError("gateway down")
        return "refunded"

    @step("shipping:ship", group="shipping")  # no engine of a test serves it until it wants to
    async def ship(order: Any) -> str:
        log.append("ship")
        return "shipped"

    def release(undo: Any) -> str:
        log.append(f"release {undo['output']}")
        return "released"

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: Any) -> str:
        await ctx.local_step("reserve", lambda: "r-1", compensate=release)
        await ctx.step(charge, order, compensate=refund)
        return str(await ctx.step(ship, order))

    return checkout, charge, refund, ship


async def test_a_compensating_cancel_undoes_the_completed_steps_then_cancels(
    durable_engine: DurableEngineFactory,
) -> None:
    """Pending with run.cancel_requested at once; a turn refunds, releases, and cancels."""
    log: list[str] = []
    checkout, charge, refund, ship = saga(log)
    async with durable_engine(workflows=[checkout], steps=[charge, refund]) as engine:
        run_id = await engine.start(checkout, {"id": 7})
        await engine.run_until_idle()  # suspended on ship: no worker serves it
        asked = await engine.cancel(run_id, compensate=True)
        await engine.run_until_idle()
        run = await engine.wait(run_id, timeout=PATIENCE)
        checkpoints = [(c.seq, c.name, c.status) for c in await engine.checkpoints(run_id)]
        trail = await names(engine, run_id, "run.")
        (told,) = await events_named(engine, run_id, "run.cancelled")
        async with durable_engine(steps=[ship]) as late_worker:
            await late_worker.run_until_idle(advance_time=True)
    assert ("pending", "compensate") == (asked.status, asked.cancel)
    assert ("cancelled", None) == (run.status, run.error)
    assert ["charge", "refund ch-1", "release r-1"] == log  # ship never ran
    assert [
        (1, "reserve", "completed"),
        (2, "payments:charge", "completed"),
        (3, "shipping:ship", "failed"),
        (4, "compensate:payments:charge", "completed"),
        (5, "compensate:reserve", "completed"),
    ] == checkpoints
    assert ["run.started", "run.cancel_requested", "run.cancelled"] == trail
    assert {"compensate": True, "compensation_failed": []} == told.data


async def test_a_compensating_cancel_whose_undo_fails_has_a_cancelled_error(
    durable_engine: DurableEngineFactory,
) -> None:
    """Failed undos of a cancel: StepError("cancelled", code "cancelled", the steps listed)."""
    log: list[str] = []
    checkout, charge, refund, _ = saga(log, refund_fails=True)
    async with durable_engine(
        workflows=[checkout], steps=[charge, refund], compensation_retries=2
    ) as engine:
        run_id = await engine.start(checkout, {"id": 7})
        await engine.run_until_idle()
        await engine.cancel(run_id, compensate=True)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (told,) = await events_named(engine, run_id, "run.cancelled")
    assert run.error is not None
    failed = {"compensation_failed": ["payments:charge"]}
    assert ("cancelled", "cancelled", "cancelled", failed) == (
        run.status, run.error.message, run.error.code, run.error.details
    )  # fmt: skip
    assert ["charge", "refund ch-1", "refund ch-1", "release r-1"] == log
    assert {"compensate": True, "compensation_failed": ["payments:charge"]} == told.data


async def test_a_second_compensating_cancel_changes_nothing_and_a_plain_one_ends_the_unwinding(
    durable_engine: DurableEngineFactory,
) -> None:
    """While an undo is out: compensate again returns it unchanged; plain cancels at once."""
    log: list[str] = []
    checkout, charge, refund, _ = saga(log)
    async with durable_engine(workflows=[checkout], steps=[charge]) as engine:
        run_id = await engine.start(checkout, {"id": 7})
        await engine.run_until_idle()
        await engine.cancel(run_id, compensate=True)
        await engine.run_until_idle()  # the refund is dispatched: no worker serves it here
        unwinding = await engine.get_run(run_id)
        events_before = await engine.events(run_id)
        again = await engine.cancel(run_id, compensate=True)
        events_after = await engine.events(run_id)
        plain = await engine.cancel(run_id)
        async with durable_engine(steps=[refund]) as late_worker:
            await late_worker.run_until_idle(advance_time=True)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        names_after = [c.name for c in await engine.checkpoints(run_id)]
        with pytest.raises(ValueError, match="cancelled with compensation"):
            await engine.requeue(run_id)
    assert ("suspended", "compensate") == (unwinding.status, unwinding.cancel)
    assert (unwinding.status, unwinding.updated_at) == (again.status, again.updated_at)
    assert events_before == events_after
    assert ("cancelled", "compensate") == (plain.status, plain.cancel)
    assert "cancelled" == run.status
    assert ["charge"] == log  # neither the refund nor the release ran
    assert "compensate:reserve" not in names_after


async def test_a_compensating_cancel_of_a_run_with_nothing_done_cancels_at_once(
    durable_engine: DurableEngineFactory,
) -> None:
    """No completed step, so no undo can be registered: cancelled in the same call."""
    log: list[str] = []
    checkout, *_ = saga(log)
    async with durable_engine(workflows=[checkout]) as engine:
        run_id = await engine.start(checkout, {"id": 7})  # pending: no turn ran yet
        run = await engine.cancel(run_id, compensate=True)
        await engine.run_until_idle()
        after = await engine.get_run(run_id)
        (told,) = await events_named(engine, run_id, "run.cancelled")
    assert ("cancelled", "cancelled", []) == (run.status, after.status, log)
    assert {"compensate": True, "compensation_failed": []} == told.data


async def test_a_compensating_cancel_racing_the_last_result_still_cancels(
    durable_engine: DurableEngineFactory,
) -> None:
    """Every step recorded when the cancel comes: the body returns, and the cancel still wins."""
    undone: list[Any] = []

    @step("charge")
    async def charge(_: Any) -> str:
        return "ch-1"

    @workflow("short")
    async def short(ctx: WorkflowContext, _: Any) -> str:
        return str(await ctx.step(charge, None, compensate="refund"))

    @step("refund")
    async def refund(undo: Any) -> None:
        undone.append(undo)

    async with (
        durable_engine(workflows=[short]) as orchestrator,
        durable_engine(steps=[charge, refund]) as worker,
    ):
        run_id = await orchestrator.start(short, None)
        await orchestrator.run_until_idle()
        await worker.run_until_idle()  # the result lands: the run is pending, not yet replayed
        assert "pending" == (await orchestrator.get_run(run_id)).status
        await orchestrator.cancel(run_id, compensate=True)
        for _ in range(3):
            await orchestrator.run_until_idle()
            await worker.run_until_idle()
        run = await orchestrator.get_run(run_id)
    assert ("cancelled", None) == (run.status, run.output)
    assert [{"input": None, "output": "ch-1"}] == undone


async def test_a_plain_cancel_racing_a_result_keeps_the_run_cancelled(
    durable_engine: DurableEngineFactory,
) -> None:
    """A result that landed before the cancel completes its step; the run never runs again."""
    calls: list[Any] = []
    charge = charging(calls)
    pay = paying(charge)
    async with (
        durable_engine(workflows=[pay]) as orchestrator,
        durable_engine(steps=[charge]) as worker,
    ):
        run_id = await orchestrator.start(pay, None)
        await orchestrator.run_until_idle()
        await worker.run_until_idle()
        await orchestrator.cancel(run_id)
        await orchestrator.run_until_idle(advance_time=True)
        run = await orchestrator.get_run(run_id)
        (_, charged) = await orchestrator.checkpoints(run_id)
    assert ("cancelled", None, "completed") == (run.status, run.output, charged.status)
    assert [None] == calls


@pytest.mark.parametrize("compensate", [False, True], ids=["plain", "compensating"])
async def test_finished_runs_are_refused_naming_their_status_and_unknown_ids_too(
    durable_engine: DurableEngineFactory, compensate: bool
) -> None:
    """Completed, failed and cancelled runs: ValueError naming the status; no run: Unknown."""

    @workflow("ends")
    async def ends(ctx: WorkflowContext, how: str) -> str:
        if how == "fail":
            raise FatalError("no", "no")
        return "ok"

    async with durable_engine(workflows=[ends]) as engine:
        done = await engine.start(ends, "ok")
        failed = await engine.start(ends, "fail")
        cancelled = await engine.start(ends, "ok")
        await engine.cancel(cancelled)
        await engine.run_until_idle()
        for run_id, status in ((done, "completed"), (failed, "failed"), (cancelled, "cancelled")):
            before = await engine.events(run_id)
            with pytest.raises(ValueError, match=f"is {status}; only a pending"):
                await engine.cancel(run_id, compensate=compensate)
            assert before == await engine.events(run_id)
        with pytest.raises(UnknownRunError, match="no run with id 'nope'"):
            await engine.cancel("nope", compensate=compensate)
        with pytest.raises(TypeError, match="compensate must be True or False"):
            await engine.cancel(done, compensate="yes")  # type: ignore[arg-type]


async def test_requeue_resumes_a_plainly_cancelled_run_where_it_stopped(
    durable_engine: DurableEngineFactory,
) -> None:
    """Requeue of a plain cancel: the withdrawn step gets a first attempt; the run completes."""
    calls: list[Any] = []
    charge = charging(calls)
    pay = paying(charge)
    async with durable_engine(workflows=[pay], steps=[charge]) as engine:
        run_id = await engine.start(pay, {"id": 7})
        await engine.cancel(run_id)  # before any turn
        requeued = await engine.requeue(run_id)
        await engine.run_until_idle()
        resumed = await engine.get_run(run_id)
        other = await engine.start(pay, {"id": 8})
        await engine.run_until_idle()
        async with durable_engine(workflows=[pay]) as no_worker:
            third = await no_worker.start(pay, {"id": 9})
            await no_worker.run_until_idle()
            await no_worker.cancel(third)
        await engine.requeue(third)
        await engine.run_until_idle()
        runs = [await engine.get_run(r) for r in (other, third)]
    assert ("pending", None) == (requeued.status, requeued.cancel)
    assert ("completed", "charged") == (resumed.status, resumed.output)
    assert [("completed", "charged")] * 2 == [(r.status, r.output) for r in runs]
    assert [{"id": 7}, {"id": 8}, {"id": 9}] == calls


async def test_requeue_refuses_a_run_whose_steps_were_undone(
    durable_engine: DurableEngineFactory,
) -> None:
    """A failed run that compensated, and a run cancelled with compensation: not requeued."""
    log: list[str] = []

    @workflow("fails")
    async def fails(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("reserve", lambda: 1, compensate=lambda u: log.append("undo"))
        raise FatalError("no", "no")

    async with durable_engine(workflows=[fails]) as engine:
        run_id = await engine.start(fails, None)
        await engine.run_until_idle()
        before = await engine.events(run_id)
        with pytest.raises(ValueError, match="failed and its completed steps were undone"):
            await engine.requeue(run_id)
        after = await engine.events(run_id)
    assert ["undo"] == log
    assert before == after


async def test_a_compensating_cancel_tells_the_withdrawn_step_but_lets_a_running_undo_finish(
    durable_engine: DurableEngineFactory,
) -> None:
    """The body's attempt in flight: withdrawn, its beat raises. An undo in flight: kept."""
    started = {"body": asyncio.Event(), "undo": asyncio.Event()}
    release = asyncio.Event()
    told: list[str] = []
    log: list[str] = []

    async def held(which: str) -> None:
        started[which].set()
        await release.wait()
        try:
            current_step().heartbeat()
        except RunCancelled:
            told.append(which)
            raise

    @step("slow-charge")
    async def slow_charge(_: Any) -> str:
        await held("body")
        return "ch"

    @step("slow-refund")
    async def slow_refund(undo: Any) -> str:
        await held("undo")
        log.append(f"refund {undo['output']}")
        return "refunded"

    @workflow("body")
    async def body(ctx: WorkflowContext, _: Any) -> str:
        await ctx.local_step("reserve", lambda: "r", compensate=lambda u: log.append("release"))
        return str(await ctx.step(slow_charge, None))

    @step("quick-charge")
    async def quick_charge(_: Any) -> str:
        return "ch"

    @workflow("unwinding")
    async def unwinding(ctx: WorkflowContext, _: Any) -> str:
        await ctx.step(quick_charge, None, compensate=slow_refund)
        raise FatalError("no stock", "out_of_stock")

    async with durable_engine(
        workflows=[body, unwinding], steps=[slow_charge, slow_refund, quick_charge]
    ) as engine:
        for which, definition in (("body", body), ("undo", unwinding)):
            release.clear()
            run_id = await engine.start(definition, None)
            draining = asyncio.ensure_future(engine.run_until_idle())
            await asyncio.wait_for(started[which].wait(), PATIENCE)
            await engine.cancel(run_id, compensate=True)
            release.set()
            await asyncio.wait_for(draining, PATIENCE)
            await engine.run_until_idle(advance_time=True)
            run = await engine.get_run(run_id)
            discarded = await names(engine, run_id, "step.result_discarded")
            assert ("cancelled", None) == (run.status, run.error), which
            assert (["step.result_discarded"] if which == "body" else []) == discarded
    assert ["body"] == told
    assert ["release", "refund ch"] == log


async def test_a_compensating_cancel_of_a_fan_undoes_the_members_that_completed(
    durable_engine: DurableEngineFactory,
) -> None:
    """A member still retrying stops the replay; the completed ones are undone, last first."""
    undone: list[Any] = []

    @step("reserve", retries=5, backoff_ms=60_000)
    async def reserve(sku: str) -> str:
        if sku == "slow":
            raise ConnectionError("warehouse busy")
        return f"r-{sku}"

    @step("release")
    async def release(undo: Any) -> None:
        undone.append(undo["output"])

    @workflow("basket")
    async def basket(ctx: WorkflowContext, skus: list[str]) -> list[str]:
        reserved = await ctx.all(reserve, skus, compensate=release)
        await ctx.local_step("after", lambda: undone.append("never"))
        return reserved

    async with durable_engine(workflows=[basket], steps=[reserve, release]) as engine:
        run_id = await engine.start(basket, ["a", "slow", "c"])
        await engine.run_until_idle()  # a and c completed; slow waits out its backoff
        assert "suspended" == (await engine.get_run(run_id)).status
        await engine.cancel(run_id, compensate=True)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = [(c.seq, c.name, c.status) for c in await engine.checkpoints(run_id)]
    assert ("cancelled", ["r-c", "r-a"]) == (run.status, undone)
    assert [
        (1, "reserve", "completed"),
        (2, "reserve", "failed"),
        (3, "reserve", "completed"),
        (4, "compensate:reserve", "completed"),
        (5, "compensate:reserve", "completed"),
    ] == checkpoints


async def test_two_cancels_at_once_cancel_once(durable_engine: DurableEngineFactory) -> None:
    """Racing cancels of one run: one cancels it, the other is refused; one run.cancelled."""
    calls: list[Any] = []
    pay = paying(charging(calls))
    async with durable_engine(workflows=[pay]) as first, durable_engine() as second:
        run_id = await first.start(pay, None)
        await first.run_until_idle()
        results = await asyncio.gather(
            first.cancel(run_id), second.cancel(run_id), return_exceptions=True
        )
        told = await events_named(first, run_id, "run.cancelled")
    refused = [r for r in results if isinstance(r, BaseException)]
    assert 1 == len(refused), results
    assert isinstance(refused[0], ValueError)
    assert "is cancelled" in str(refused[0])
    assert 1 == len(told)


@pytest.mark.parametrize(
    ("odd", "error"),
    [
        (None, TypeError),
        (3, TypeError),
        (b"pay-1", TypeError),
        ("", UnknownRunError),
        ("pay-1\x00", UnknownRunError),
        ("pay-\udcff", UnknownRunError),
        ("PAY-1", UnknownRunError),
    ],
)
async def test_odd_ids_are_refused_everywhere_an_id_is_taken(
    durable_engine: DurableEngineFactory, odd: Any, error: type[Exception]
) -> None:
    """An id of another type: TypeError naming it; empty, with NUL, a lone surrogate (no store
    can hold it), or of another case: UnknownRunError; from every method that takes an id, on
    every store; the real run is untouched."""
    charge = charging([])
    async with durable_engine(workflows=[paying(charge)], steps=[charge]) as engine:
        real = await engine.start("pay", 1, run_id="pay-1")
        before = await engine.events(real)

        async def wait(run_id: Any) -> object:
            return await engine.wait(run_id, timeout=0.01)

        calls: tuple[Callable[[Any], Awaitable[object]], ...] = (
            engine.get_run,
            engine.checkpoints,
            engine.events,
            engine.requeue,
            engine.cancel,
            engine.redispatch_pending,
            wait,
        )
        for call in calls:
            with pytest.raises(error, match=r"no run with id|run_id must be a str, got"):
                await call(odd)
        assert before == await engine.events(real)
        assert "pending" == (await engine.get_run(real)).status
