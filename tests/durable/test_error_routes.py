"""Error routes: ``@workflow(on_error={code: handler})`` turn an expected failure into output."""

from __future__ import annotations

from typing import Any

import pytest

from effects import FatalError
from effects.durable import StepError, WorkflowContext, current_step, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import events_named, names

pytestmark = pytest.mark.anyio


class Coded(Exception):  # noqa: N818 - an error as a service raises it
    """An error with a code and details."""

    def __init__(self, message: str, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


def raising(error: BaseException) -> Any:
    """A step function that raises *error*."""

    def fn() -> Any:
        raise error

    return fn


async def test_a_routed_fatal_error_completes_the_run_with_the_handlers_output(
    durable_engine: DurableEngineFactory,
) -> None:
    """FatalError("declined") escaping the body: the handler's value completes the run."""
    seen: list[Any] = []
    undone: list[Any] = []

    async def declined(ctx: WorkflowContext, order: dict[str, Any], error: StepError) -> Any:
        seen.append((ctx.run_id == run_id, order, error))
        return {"status": "declined", "reason": error.message}

    @workflow("checkout", on_error={"declined": declined})
    async def checkout(ctx: WorkflowContext, order: dict[str, Any]) -> Any:
        await ctx.local_step("reserve", lambda: 1, compensate=undone.append)
        await ctx.local_step("charge", raising(FatalError("card declined", "declined")))
        return {"status": "paid"}

    async with durable_engine(workflows=[checkout]) as engine:
        run_id = await engine.start(checkout, {"id": 7})
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        trail = await names(engine, run_id, "run.")
        (routed,) = await events_named(engine, run_id, "run.error_routed")
    assert ("completed", {"status": "declined", "reason": "card declined"}, None) == (
        run.status, run.output, run.error
    )  # fmt: skip
    ((same_run, order, error),) = seen
    assert (True, {"id": 7}) == (same_run, order)
    assert ("declined", "effects.errors.FatalError", False) == (
        error.code, error.type, error.retryable
    )  # fmt: skip
    assert ["run.started", "run.error_routed", "run.completed"] == trail
    assert {"code": "declined"} == routed.data
    assert [] == undone  # no compensation for a routed error


async def test_a_remote_step_errors_worker_code_is_routed_with_its_details(
    durable_engine: DurableEngineFactory,
) -> None:
    """A RemoteStepError whose worker's code is a key: the handler gets that code and details."""
    got: list[StepError] = []

    @step("payments:charge")
    async def charge(_: Any) -> None:
        raise Coded("insufficient funds", "declined", {"balance": 3})

    async def declined(ctx: WorkflowContext, _: Any, error: StepError) -> str:
        got.append(error)
        return "declined"

    @workflow("checkout", on_error={"declined": declined})
    async def checkout(ctx: WorkflowContext, order: Any) -> str:
        await ctx.step(charge, order)
        return "paid"

    async with durable_engine(workflows=[checkout], steps=[charge]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", "declined") == (run.status, run.output)
    (error,) = got
    assert ("declined", {"balance": 3}) == (error.code, error.details)
    assert "insufficient funds" in error.message
    assert error.type.endswith("RemoteStepError")


async def test_spent_attempts_with_a_code_are_routed(durable_engine: DurableEngineFactory) -> None:
    """A local step's last exception after its retries, carrying a code, is routed."""

    async def busy(ctx: WorkflowContext, _: Any, error: StepError) -> str:
        return f"later: {error.message}"

    @workflow("retried", on_error={"busy": busy})
    async def retried(ctx: WorkflowContext, _: Any) -> str:
        return await ctx.local_step("call", raising(Coded("429", "busy")), retries=3)

    async with durable_engine(workflows=[retried]) as engine:
        run_id = await engine.start(retried, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (cp,) = await engine.checkpoints(run_id)
    assert ("completed", "later: 429", 3) == (run.status, run.output, cp.attempts)


@pytest.mark.parametrize(
    "error",
    [Coded("other code", "fraud"), Coded("no code"), FatalError("no code either")],
    ids=["unrouted-code", "no-code", "fatal-no-code"],
)
async def test_an_unrouted_code_or_no_code_fails_the_run_and_compensates(
    durable_engine: DurableEngineFactory, error: Exception
) -> None:
    """Only a key of on_error is routed; an error of no code never is."""
    called: list[str] = []
    undone: list[Any] = []

    async def handler(ctx: WorkflowContext, _: Any, err: StepError) -> str:
        called.append(err.message)
        return "routed"

    @workflow("wf", on_error={"declined": handler, "None": handler})
    async def wf(ctx: WorkflowContext, _: Any) -> str:
        await ctx.local_step("a", lambda: 1, compensate=undone.append)
        await ctx.local_step("b", raising(error))
        return "done"

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert run.error is not None
    assert ("failed", str(error)) == (run.status, run.error.message)
    assert [] == called
    assert [{"input": None, "output": 1}] == undone


async def test_a_handler_that_raises_fails_the_run_with_its_error_then_compensates(
    durable_engine: DurableEngineFactory,
) -> None:
    """The handler's own error fails the run (never routed again); undos, its own too, run."""
    order: list[str] = []

    async def declined(ctx: WorkflowContext, _: Any, error: StepError) -> str:
        await ctx.local_step("notify", lambda: "sent", compensate=lambda u: order.append("unsend"))
        raise Coded("the mailer is down", "declined")  # its code is a route: not taken again

    @workflow("wf", on_error={"declined": declined})
    async def wf(ctx: WorkflowContext, _: Any) -> str:
        await ctx.local_step("reserve", lambda: 1, compensate=lambda u: order.append("release"))
        await ctx.local_step("charge", raising(FatalError("card declined", "declined")))
        return "paid"

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = [c.name for c in await engine.checkpoints(run_id)]
        trail = await names(engine, run_id, "run.")
    assert run.error is not None
    assert ("failed", "the mailer is down") == (run.status, run.error.message)
    assert ["unsend", "release"] == order
    assert [
        "reserve", "charge", "notify", "compensate:notify", "compensate:reserve",
    ] == checkpoints  # fmt: skip
    assert ["run.started", "run.failed"] == trail


async def test_a_handler_with_steps_is_replayed_deterministically(
    durable_engine: DurableEngineFactory,
) -> None:
    """A handler that dispatches a step suspends; replayed, its completed steps do not run again."""
    calls: list[str] = []

    @step("mail:apology")
    async def apology(order: Any) -> str:
        calls.append(f"apology {current_step().seq}")
        return f"mailed {order['id']}"

    async def declined(ctx: WorkflowContext, order: Any, error: StepError) -> dict[str, Any]:
        noted = await ctx.local_step("note", lambda: calls.append("note") or error.code)
        mailed = await ctx.step(apology, order)
        return {"noted": noted, "mailed": mailed}

    @workflow("wf", on_error={"declined": declined})
    async def wf(ctx: WorkflowContext, order: Any) -> Any:
        await ctx.local_step("charge", raising(FatalError("card declined", "declined")))
        return "paid"

    async with (
        durable_engine(workflows=[wf]) as orchestrator,
        durable_engine(steps=[apology]) as worker,
    ):
        run_id = await orchestrator.start(wf, {"id": 7})
        await orchestrator.run_until_idle()
        assert "suspended" == (await orchestrator.get_run(run_id)).status
        await worker.run_until_idle()
        await orchestrator.run_until_idle()
        run = await orchestrator.get_run(run_id)
        checkpoints = [(c.seq, c.name, c.status) for c in await orchestrator.checkpoints(run_id)]
    assert ("completed", {"noted": "declined", "mailed": "mailed 7"}) == (run.status, run.output)
    assert ["note", "apology 3"] == calls
    assert [
        (1, "charge", "failed"), (2, "note", "completed"), (3, "mail:apology", "completed"),
    ] == checkpoints  # fmt: skip


async def test_non_determinism_is_never_routed(durable_engine: DurableEngineFactory) -> None:
    """A NonDeterminismError fails the run even with a handler for its code."""
    version = {"name": "a"}
    called: list[str] = []

    async def handler(ctx: WorkflowContext, _: Any, error: StepError) -> str:
        called.append("handler")
        return "routed"

    @step("wait")
    async def wait(_: Any) -> None:
        return None

    @workflow("wf", on_error={"non_determinism": handler})
    async def wf(ctx: WorkflowContext, _: Any) -> str:
        await ctx.local_step(version["name"], lambda: 1)
        await ctx.step(wait, None)
        return "done"

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
    version["name"] = "b"
    async with durable_engine(workflows=[wf], steps=[wait]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("failed", "non_determinism", []) == (run.status, run.error and run.error.code, called)


async def test_a_handler_output_that_cannot_be_stored_fails_the_run(
    durable_engine: DurableEngineFactory,
) -> None:
    """What a handler returns is stored like the body's output: not JSON, a TypeError fails it."""

    async def odd(ctx: WorkflowContext, _: Any, error: StepError) -> object:
        return object()

    @workflow("wf", on_error={"x": odd})
    async def wf(ctx: WorkflowContext, _: Any) -> str:
        raise FatalError("boom", "x")

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("failed", "builtins.TypeError") == (run.status, run.error and run.error.type)


async def _handler(ctx: WorkflowContext, _: Any, error: StepError) -> None:
    return None


def _sync_handler(ctx: WorkflowContext, _: Any, error: StepError) -> None:
    return None


async def _generator(ctx: WorkflowContext, _: Any, error: StepError) -> Any:
    yield None


@pytest.mark.parametrize(
    ("on_error", "error", "said"),
    [
        ([("declined", _handler)], TypeError, "must be a mapping"),
        ("declined", TypeError, "must be a mapping"),
        ({1: _handler}, TypeError, "must be a string"),
        ({None: _handler}, TypeError, "must be a string"),
        ({"": _handler}, ValueError, "must not be empty"),
        ({"declined": _sync_handler}, TypeError, "must be an async def"),
        ({"declined": "handler"}, TypeError, "must be an async def"),
        ({"declined": None}, TypeError, "must be an async def"),
        ({"declined": _generator}, TypeError, "not yield"),
    ],
)
def test_odd_error_routes_are_refused_at_definition(
    on_error: Any, error: type[Exception], said: str
) -> None:
    """on_error must map non-empty string codes to async def handlers."""
    with pytest.raises(error, match=said):
        workflow("wf", on_error=on_error)


def test_error_routes_are_kept_read_only() -> None:
    """The definition's routes are a copy: changing the given dict changes nothing."""
    given: dict[str, Any] = {"declined": _handler}

    @workflow("wf", on_error=given)
    async def wf(ctx: WorkflowContext, _: Any) -> None:
        return None

    given["other"] = _handler
    assert ["declined"] == list(wf.on_error)
    with pytest.raises(TypeError):
        wf.on_error["x"] = _handler  # type: ignore[index]
