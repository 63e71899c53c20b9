"""Compensation (sagas): undos registered as steps complete, run last first when a run fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from effects import FatalError
from effects.durable import (
    Engine,
    NonDeterminismError,
    RemoteStepError,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import events_named, rows

pytestmark = pytest.mark.anyio


class Coded(Exception):  # noqa: N818 - an error as a service raises it
    """An error with a code and details."""

    def __init__(self, message: str, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


def fail(error: BaseException) -> Any:
    """A step function that raises *error*."""

    def raising() -> Any:
        raise error

    return raising


def shop(log: list[Any], *, ship: BaseException | None = None, **policy: Any) -> Any:
    """
    The seed's checkout as a saga of local steps: reserve (undo: release), charge (undo:
    refund), ship, which raises *ship* when given. Every call lands in *log*.
    """

    def release(undo: dict[str, Any]) -> str:
        log.append(("release", undo))
        return "released"

    async def refund(undo: dict[str, Any]) -> str:
        log.append(("refund", undo))
        return "refunded"

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: dict[str, Any]) -> str:
        reservation = await ctx.local_step(
            "reserve", lambda: log.append("reserve") or "res-1", compensate=release
        )
        charge = await ctx.local_step(
            "charge", lambda: log.append("charge") or {"id": "ch-1"}, compensate=refund
        )
        await ctx.local_step("ship", fail(ship) if ship else lambda: "shipped", **policy)
        return f"{reservation} {charge['id']}"

    return checkout


async def test_a_failed_run_undoes_its_steps_last_completed_first_and_keeps_its_error(
    durable_engine: DurableEngineFactory,
) -> None:
    """Refund, then release, once each, as compensate:<step>; the run fails with ship's error."""
    log: list[Any] = []
    checkout = shop(log, ship=FatalError("out of stock", "out_of_stock"))
    async with durable_engine(workflows=[checkout]) as engine:
        run_id = await engine.start(checkout, {"id": 7})
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
        failed = await events_named(engine, run_id, "run.failed")
        # Another turn changes nothing: the run is over.
        await engine.run_until_idle(advance_time=True)
    assert [
        "reserve",
        "charge",
        ("refund", {"input": None, "output": {"id": "ch-1"}}),
        ("release", {"input": None, "output": "res-1"}),
    ] == log
    assert ("failed", "out_of_stock", "out of stock", None) == (
        run.status, run.error and run.error.code, run.error and run.error.message,
        run.error and run.error.details,
    )  # fmt: skip
    assert [
        (1, "reserve", "local", "completed", None),
        (2, "charge", "local", "completed", None),
        (3, "ship", "local", "failed", None),
        (4, "compensate:charge", "local", "completed", "refunded"),
        (5, "compensate:reserve", "local", "completed", "released"),
    ] == [(c.seq, c.name, c.kind, c.status, c.output if c.seq > 3 else None) for c in checkpoints]
    assert 1 == len(failed)


async def test_a_run_that_completes_or_catches_its_error_runs_no_undo(
    durable_engine: DurableEngineFactory,
) -> None:
    """Undos run only for a run about to fail: not for a completed run, nor a caught error."""
    log: list[Any] = []
    plain = shop(log)

    @workflow("caught")
    async def caught(ctx: WorkflowContext, _: Any) -> str:
        await ctx.local_step("reserve", lambda: 1, compensate=lambda u: log.append(("undo", u)))
        try:
            await ctx.local_step("ship", fail(FatalError("no", "x")))
        except FatalError:
            return "handled"
        return "shipped"

    async with durable_engine(workflows=[plain, caught]) as engine:
        first = await engine.start(plain, {"id": 1})
        second = await engine.start(caught, None)
        await engine.run_until_idle()
        runs = [await engine.get_run(r) for r in (first, second)]
        names = [c.name for r in (first, second) for c in await engine.checkpoints(r)]
    assert [("completed", "res-1 ch-1"), ("completed", "handled")] == [
        (r.status, r.output) for r in runs
    ]
    assert ["reserve", "charge"] == log
    assert not any(name.startswith("compensate:") for name in names)


async def test_dispatched_undos_run_on_workers_with_the_steps_input_and_output(
    durable_engine: DurableEngineFactory,
) -> None:
    """A StepDef undo is dispatched as compensate:<step>; its tasks run the undo's handler."""
    seen: list[Any] = []

    @step("payments:charge")
    async def charge(order: dict[str, Any]) -> dict[str, Any]:
        return {"charge_id": f"ch_{order['id']}"}

    @step("payments:refund")
    async def refund(undo: dict[str, Any]) -> str:
        ctx = current_step()
        seen.append((undo, ctx.name, ctx.step_id))
        return f"refunded {undo['output']['charge_id']}"

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, order: dict[str, Any]) -> str:
        await ctx.step(charge, order, compensate=refund)
        await ctx.step("shipping:ship", order)  # no worker has it: "no handler"
        return "shipped"

    async with (
        durable_engine(workflows=[checkout]) as orchestrator,
        durable_engine(steps=[charge, refund]) as worker,
    ):
        run_id = await orchestrator.start(checkout, {"id": 7})
        for _ in range(4):
            await orchestrator.run_until_idle()
            await worker.run_until_idle()
        await orchestrator.run_until_idle()
        run = await orchestrator.get_run(run_id)
        checkpoints = await orchestrator.checkpoints(run_id)
        dispatched = await events_named(orchestrator, run_id, "step.dispatched")
    assert ("failed", "no_handler") == (run.status, run.error and run.error.code)
    undo = checkpoints[-1]
    assert ("compensate:payments:charge", "remote", "completed", "payments:refund") == (
        undo.name, undo.kind, undo.status, undo.handler
    )  # fmt: skip
    assert "refunded ch_7" == undo.output
    assert [
        ({"input": {"id": 7}, "output": {"charge_id": "ch_7"}}, "payments:refund", undo.step_id)
    ] == seen
    assert {"attempt": 1, "name": undo.name, "handler": "payments:refund"} == dispatched[-1].data


async def test_a_fan_registers_an_undo_per_member_in_input_order(
    durable_engine: DurableEngineFactory,
) -> None:
    """Members undone last first; a member that failed is not undone, those that completed are."""
    undone: list[Any] = []

    @step("reserve")
    async def reserve(sku: str) -> str:
        if sku == "broken":
            raise FatalError("no such item", "unknown_sku")
        return f"r-{sku}"

    @step("release")
    async def release(undo: dict[str, Any]) -> None:
        undone.append(undo)

    @workflow("basket")
    async def basket(ctx: WorkflowContext, skus: list[str]) -> list[str]:
        return await ctx.all(reserve, skus, compensate=release)

    async with durable_engine(workflows=[basket], steps=[reserve, release]) as engine:
        run_id = await engine.start(basket, ["a", "broken", "c"])
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        names = [c.name for c in await engine.checkpoints(run_id)]
    assert ("failed", "unknown_sku") == (run.status, run.error and run.error.code)
    assert ["reserve"] * 3 + ["compensate:reserve"] * 2 == names
    assert [{"input": "c", "output": "r-c"}, {"input": "a", "output": "r-a"}] == undone


async def test_a_failing_undo_is_retried_then_recorded_and_the_others_still_run(
    durable_engine: DurableEngineFactory,
) -> None:
    """compensation_retries attempts, then step.compensation_failed; the run's error lists it."""
    calls: list[str] = []

    def broken(_: Any) -> None:
        calls.append("refund")
        raise Coded("gateway down", "unavailable")

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("reserve", lambda: 1, compensate=lambda u: calls.append("release"))
        await ctx.local_step("charge", lambda: 2, compensate=broken)
        await ctx.local_step("ship", fail(Coded("lost", "lost", {"parcel": 9})))

    async with durable_engine(workflows=[checkout], compensation_retries=3) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        (told,) = await events_named(engine, run_id, "step.compensation_failed")
        undo = (await engine.checkpoints(run_id))[3]
    assert ["refund", "refund", "refund", "release"] == calls
    assert run.error is not None
    assert ("failed", "lost", {"parcel": 9, "compensation_failed": ["charge"]}) == (
        run.status, run.error.code, run.error.details
    )  # fmt: skip
    assert ("error", 4, "charge", 3, "gateway down") == (
        told.level, told.seq, told.data["step"], told.data["attempts"],
        told.data["error"]["message"],
    )  # fmt: skip
    assert ("compensate:charge", "failed", True, 3) == (
        undo.name, undo.status, undo.final, undo.attempts
    )  # fmt: skip


@pytest.mark.parametrize("details", [None, "a string", [1, 2]], ids=["none", "string", "list"])
async def test_failed_undos_join_the_original_errors_details(
    durable_engine: DurableEngineFactory, details: Any
) -> None:
    """Details that are not an object are kept under details["details"]; None becomes {}."""

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("a", lambda: 1, compensate=fail(ValueError("no")))
        await ctx.local_step("b", lambda: 2, compensate=fail(ValueError("no")))
        await ctx.local_step("ship", fail(Coded("lost", "lost", details)))

    async with durable_engine(workflows=[checkout]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert run.error is not None
    expected: dict[str, Any] = {"compensation_failed": ["b", "a"]}
    if details is not None:
        expected["details"] = details
    assert expected == run.error.details


@pytest.mark.parametrize(
    "error",
    [FatalError("refused", "refused"), Coded("refused")],
    ids=["fatal", "not-retryable"],
)
async def test_a_fatal_or_not_retryable_undo_error_ends_its_attempts_at_once(
    durable_engine: DurableEngineFactory, error: Exception
) -> None:
    """A FatalError or retryable=False ends an undo's attempts at once, whatever the retries."""
    calls: list[int] = []
    error.retryable = False  # type: ignore[attr-defined]

    def undo(_: Any) -> None:
        calls.append(1)
        raise error

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("charge", lambda: 1, compensate=undo)
        await ctx.local_step("ship", fail(FatalError("no", "x")))

    async with durable_engine(workflows=[checkout], compensation_retries=5) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        (told,) = await events_named(engine, run_id, "step.compensation_failed")
    assert [1] == calls
    assert 1 == told.data["attempts"]


async def test_a_dispatched_undo_retries_durably_with_its_own_backoff(
    durable_engine: DurableEngineFactory,
) -> None:
    """The undo's StepDef backoff between attempts, compensation_retries of them, then recorded."""
    attempts: list[int] = []

    @step("refund", retries=10, backoff="fixed", backoff_ms=250)
    async def refund(_: Any) -> None:
        attempts.append(current_step().attempt)
        raise ConnectionError("gateway down")

    @step("charge-remote")
    async def charge(_: Any) -> int:
        if current_step().attempt == 1 and not attempts:
            return 1
        raise AssertionError("charged twice")

    @workflow("failing")
    async def failing(ctx: WorkflowContext, _: Any) -> None:
        await ctx.step(charge, 1, compensate=refund)
        await ctx.local_step("ship", fail(FatalError("no", "x")))

    async with durable_engine(
        workflows=[failing], steps=[charge, refund], compensation_retries=3
    ) as engine:
        run_id = await engine.start(failing, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
        (told,) = await events_named(engine, run_id, "step.compensation_failed")
    assert [1, 2, 3] == attempts
    undo_dispatches = [e for e in dispatched if e.seq == 3]
    assert [0, 250, 500] == [e.at - undo_dispatches[0].at for e in undo_dispatches]
    assert ("failed", {"compensation_failed": ["charge-remote"]}) == (
        run.status, run.error and run.error.details
    )  # fmt: skip
    assert (3, "charge-remote", 3) == (told.seq, told.data["step"], told.data["attempts"])


async def test_undos_are_rebuilt_from_history_and_a_completed_undo_never_runs_again(
    durable_engine: DurableEngineFactory,
) -> None:
    """Registered over many turns; unwinding itself spans turns; each undo runs once."""
    log: list[str] = []

    @step("charge")
    async def charge(n: int) -> int:
        log.append(f"charge {n}")
        return n

    @step("refund")
    async def refund(undo: dict[str, Any]) -> None:
        log.append(f"refund {undo['output']}")

    @workflow("steps")
    async def steps(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step(
            "hold", lambda: log.append("hold"), compensate=lambda _: log.append("unhold")
        )
        await ctx.step(charge, 1, compensate=refund)
        await ctx.step(charge, 2, compensate=refund)
        await ctx.step(charge, 3)
        raise FatalError("boom", "boom")

    async with durable_engine(workflows=[steps], steps=[charge, refund]) as engine:
        run_id = await engine.start(steps, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        names = [(c.seq, c.name) for c in await engine.checkpoints(run_id)]
    assert "failed" == run.status
    assert ["hold", "charge 1", "charge 2", "charge 3", "refund 2", "refund 1", "unhold"] == log
    assert [
        (1, "hold"), (2, "charge"), (3, "charge"), (4, "charge"),
        (5, "compensate:charge"), (6, "compensate:charge"), (7, "compensate:hold"),
    ] == names  # fmt: skip


async def test_non_determinism_fails_the_run_with_no_compensation(
    durable_engine: DurableEngineFactory,
) -> None:
    """Replay meeting another step: the run fails with NonDeterminismError; nothing is undone."""
    undone: list[Any] = []
    version = {"step": "a"}

    @step("wait")
    async def wait(_: Any) -> None:
        return None

    @workflow("changing")
    async def changing(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step(version["step"], lambda: 1, compensate=undone.append)
        await ctx.step(wait, None)

    async with durable_engine(workflows=[changing]) as engine:
        run_id = await engine.start(changing, None)
        await engine.run_until_idle()
    version["step"] = "b"
    async with durable_engine(workflows=[changing], steps=[wait]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("failed", "non_determinism") == (run.status, run.error and run.error.code)
    assert [] == undone
    assert NonDeterminismError.code == "non_determinism"


async def test_an_output_that_cannot_be_stored_fails_the_run_and_undoes(
    durable_engine: DurableEngineFactory,
) -> None:
    """A workflow returning what is not JSON fails the run (TypeError), and its steps are undone."""
    undone: list[Any] = []

    @workflow("odd")
    async def odd(ctx: WorkflowContext, _: Any) -> object:
        await ctx.local_step("a", lambda: 1, compensate=undone.append)
        return object()

    async with durable_engine(workflows=[odd]) as engine:
        run_id = await engine.start(odd, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("failed", "builtins.TypeError") == (run.status, run.error and run.error.type)
    assert [{"input": None, "output": 1}] == undone


async def test_an_undo_output_that_cannot_be_stored_fails_that_undo(
    durable_engine: DurableEngineFactory,
) -> None:
    """An undo returning what is not JSON has failed (recorded); the run keeps its error."""

    @workflow("odd-undo")
    async def odd_undo(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("a", lambda: 1, compensate=lambda _: object())
        raise FatalError("boom", "boom")

    async with durable_engine(workflows=[odd_undo]) as engine:
        run_id = await engine.start(odd_undo, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        (told,) = await events_named(engine, run_id, "step.compensation_failed")
    assert ("boom", {"compensation_failed": ["a"]}) == (
        run.error and run.error.code, run.error and run.error.details
    )  # fmt: skip
    assert "builtins.TypeError" == told.data["error"]["type"]


class _Callable:
    def __call__(self, undo: Any) -> None:
        return None


async def _gen(undo: Any) -> Any:
    yield undo


def _sync_gen(undo: Any) -> Any:
    yield undo


@step("an-undo")
async def an_undo(_: Any) -> None:
    """A dispatched undo."""


@pytest.mark.parametrize(
    ("where", "value", "error", "said"),
    [
        ("local", "an-undo", TypeError, "must be a function"),
        ("local", an_undo, TypeError, "must be a function"),
        ("local", 42, TypeError, "must be a function"),
        ("local", True, TypeError, "must be a function"),
        ("local", _gen, TypeError, "not yield"),
        ("local", _sync_gen, TypeError, "not yield"),
        ("remote", lambda undo: None, TypeError, "takes a StepDef or a step's name"),
        ("remote", _Callable(), TypeError, "takes a StepDef or a step's name"),
        ("remote", 3.5, TypeError, "takes a StepDef or a step's name"),
        ("remote", "", ValueError, "non-empty name"),
        ("remote", " padded ", ValueError, "non-empty name"),
        ("fan", lambda undo: None, TypeError, "takes a StepDef or a step's name"),
        ("name", None, ValueError, "compensate:"),
    ],
)
async def test_odd_compensate_values_and_reserved_names_are_refused_before_anything_runs(
    durable_engine: DurableEngineFactory, where: str, value: Any, error: type[Exception], said: str
) -> None:
    """A bad compensate= is a TypeError or ValueError at the call, before the step runs."""
    ran: list[str] = []
    caught: list[BaseException] = []

    @step("work")
    async def work(_: Any) -> None:
        ran.append("work")

    @workflow("odd")
    async def odd(ctx: WorkflowContext, _: Any) -> str:
        try:
            if where == "local":
                await ctx.local_step("a", lambda: ran.append("a"), compensate=value)
            elif where == "remote":
                await ctx.step(work, None, compensate=value)
            elif where == "fan":
                await ctx.all(work, [1, 2], compensate=value)
            else:
                await ctx.local_step("compensate:a", lambda: ran.append("a"))
        except Exception as refused:  # noqa: BLE001 - the point
            caught.append(refused)
        return "done"

    async with durable_engine(workflows=[odd], steps=[work]) as engine:
        run_id = await engine.start(odd, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", []) == (run.status, ran)
    (refused,) = caught
    assert isinstance(refused, error)
    assert said in str(refused)
    assert [] == rows(durable_engine.url, "SELECT seq FROM checkpoints")


async def test_a_step_name_with_the_compensation_prefix_is_refused_for_dispatched_steps(
    durable_engine: DurableEngineFactory,
) -> None:
    """ctx.step("compensate:x") and a StepDef of such a name are refused as ValueError."""

    @step("compensate:x")
    async def reserved(_: Any) -> None:
        return None

    @workflow("reserved")
    async def uses(ctx: WorkflowContext, _: Any) -> list[str]:
        said: list[str] = []
        for target in (reserved, "compensate:y"):
            try:
                await ctx.step(target, None)
            except ValueError as error:
                said.append(str(error).split(" starts")[0])
        return said

    async with durable_engine(workflows=[uses]) as engine:
        run_id = await engine.start(uses, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ["step name 'compensate:x'", "step name 'compensate:y'"] == run.output


async def test_compensation_retries_is_checked() -> None:
    """compensation_retries is a count >= 1."""

    for bad, kind in ((0, ValueError), (True, TypeError), ("2", TypeError)):
        with pytest.raises(kind, match="compensation_retries"):
            Engine("memory://never-opened", compensation_retries=bad)


async def test_a_raising_remote_step_undone_with_its_spent_attempts_error(
    durable_engine: DurableEngineFactory,
) -> None:
    """Spent attempts fail the run with their RemoteStepError; the earlier step is undone."""
    undone: list[Any] = []

    @step("flaky", retries=2)
    async def flaky(_: Any) -> None:
        raise Coded("503", "unavailable")

    @workflow("spent")
    async def spent(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("a", lambda: "kept", compensate=undone.append)
        await ctx.step(flaky, None)

    async with durable_engine(workflows=[spent], steps=[flaky]) as engine:
        run_id = await engine.start(spent, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert run.error is not None
    assert ("failed", "unavailable", "effects.durable.errors.RemoteStepError") == (
        run.status, run.error.code, run.error.type
    )  # fmt: skip
    assert [{"input": None, "output": "kept"}] == undone
    assert RemoteStepError.__name__ in run.error.type


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit], ids=["interrupt", "exit"])
async def test_an_undo_def_raising_an_exit_in_its_thread_has_failed_not_stopped_the_engine(
    durable_engine: DurableEngineFactory, raised: type[BaseException]
) -> None:
    """A def undo's own KeyboardInterrupt or SystemExit is its failure: recorded, others run."""
    undone: list[str] = []

    def exits(_: Any) -> None:
        raise raised

    @workflow("exiting")
    async def exiting(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("a", lambda: 1, compensate=lambda u: undone.append("a"))
        await ctx.local_step("b", lambda: 2, compensate=exits)
        raise FatalError("boom", "boom")

    async with durable_engine(workflows=[exiting]) as engine:
        run_id = await engine.start(exiting, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("failed", {"compensation_failed": ["b"]}) == (
        run.status,
        run.error and run.error.details,
    )
    assert ["a"] == undone


async def test_an_async_undo_raising_cancelled_error_itself_has_failed(
    durable_engine: DurableEngineFactory,
) -> None:
    """An undo that raises asyncio.CancelledError of its own (the engine is not cancelled)."""

    async def cancels(_: Any) -> None:
        raise asyncio.CancelledError

    @workflow("cancelling")
    async def cancelling(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("a", lambda: 1, compensate=cancels)
        raise FatalError("boom", "boom")

    async with durable_engine(workflows=[cancelling], compensation_retries=2) as engine:
        run_id = await engine.start(cancelling, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        (told,) = await events_named(engine, run_id, "step.compensation_failed")
    assert ("failed", 2) == (run.status, told.data["attempts"])


async def test_a_liveness_step_registers_its_undo_and_an_undos_own_liveness_window_is_dropped(
    durable_engine: DurableEngineFactory,
) -> None:
    """A step awaited with timeout_ms registers its undo; the undo (timeout_ms too) is durable."""
    undone: list[Any] = []

    @step("live", timeout_ms=60_000)
    async def live(n: int) -> int:
        return n + 1

    @step("unlive", timeout_ms=10)
    async def unlive(undo: Any) -> None:
        undone.append(undo)

    @workflow("lively")
    async def lively(ctx: WorkflowContext, _: Any) -> None:
        await ctx.step(live, 1, compensate=unlive)
        raise FatalError("boom", "boom")

    async with durable_engine(workflows=[lively], steps=[live, unlive]) as engine:
        run_id = await engine.start(lively, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (undo,) = [c for c in await engine.checkpoints(run_id) if c.name.startswith("compensate:")]
    assert "failed" == run.status
    assert [{"input": 1, "output": 2}] == undone
    assert ("completed", None) == (undo.status, undo.timeout_ms)


async def test_an_undo_naming_a_queue_the_engine_lacks_is_refused_where_it_is_given(
    durable_engine: DurableEngineFactory,
) -> None:
    """The undo's queue is checked when its step completes, not when the run unwinds."""

    @step("queued-undo", queue="nowhere")
    async def queued_undo(_: Any) -> None:
        return None

    @step("work")
    async def work(_: Any) -> int:
        return 1

    @workflow("q")
    async def q(ctx: WorkflowContext, _: Any) -> str:
        try:
            await ctx.step(work, None, compensate=queued_undo)
        except ValueError as error:
            return str(error)
        return "registered"

    async with durable_engine(workflows=[q], steps=[work]) as engine:
        run_id = await engine.start(q, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", "unknown queue 'nowhere': this engine has none") == (
        run.status, run.output
    )  # fmt: skip


class _JumpingClock:
    """A wall clock a test sets by hand: it may jump back or ahead (NTP, a VM resumed)."""

    def __init__(self, start: float) -> None:
        self.at = start

    def now(self) -> float:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += seconds

    async def sleep_async(self, seconds: float) -> None:
        await asyncio.sleep(0)
        self.at += seconds


async def test_an_undo_waiting_to_retry_survives_clock_jumps_and_runs_once_per_attempt(
    durable_engine: DurableEngineFactory,
) -> None:
    """A dispatched undo fails once and waits 10 s for its retry. The clock jumps back an hour:
    nothing runs (the wait is not over on this clock), nothing is lost. It jumps ahead a day:
    the retry runs once, not once per missed interval; the run fails with its original error."""
    attempts: list[int] = []

    @step("refund-once", retries=5, backoff="fixed", backoff_ms=10_000)
    async def refund(_: Any) -> None:
        attempts.append(current_step().attempt)
        if current_step().attempt == 1:
            raise ConnectionError("gateway down")

    @step("charge-jump")
    async def charge(_: Any) -> int:
        return 1

    @workflow("jumping")
    async def jumping(ctx: WorkflowContext, _: Any) -> None:
        await ctx.step(charge, 1, compensate=refund)
        await ctx.local_step("ship", fail(FatalError("no stock", "out_of_stock")))

    clock = _JumpingClock(1_800_000_000.0)
    async with durable_engine(
        workflows=[jumping], steps=[charge, refund], compensation_retries=3, clock=clock
    ) as engine:
        run_id = await engine.start(jumping, None)
        await engine.run_until_idle()
        assert ([1], "suspended") == (attempts, (await engine.get_run(run_id)).status)
        clock.at -= 3600
        await engine.run_until_idle()
        assert ([1], "suspended") == (attempts, (await engine.get_run(run_id)).status)
        clock.at += 3600 + 86_400
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert [1, 2] == attempts
    assert run.error is not None
    assert ("failed", "out_of_stock", None) == (run.status, run.error.code, run.error.details)
