"""Static typing of messages, events and child workflows (checked by mypy and pyright, never run).

Each ``# type: ignore[code]`` line is a wrong use that must stay an error: mypy's
``warn_unused_ignores`` and pyright's ``reportUnnecessaryTypeIgnoreComment`` fail if it stops
being one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, assert_type

from effects.durable import (
    ChildWorkflowError,
    DurableError,
    Engine,
    StepError,
    WorkflowContext,
    workflow,
)


@workflow("kid")
async def kid(ctx: WorkflowContext, n: int) -> str:
    return str(n)


@workflow("parent")
async def parent(ctx: WorkflowContext, order: dict[str, int]) -> list[str]:
    message = await ctx.recv("orders")
    assert_type(message, Any)
    timed = await ctx.recv("orders", timeout="1h")
    assert_type(timed, Any)
    await ctx.recv("orders", timeout=timedelta(minutes=5))
    await ctx.recv("orders", timeout=2.5)
    assert_type(await ctx.set_event("stage", {"done": 1}), None)
    output = await ctx.child(kid, order["n"])
    assert_type(output, str)
    named = await ctx.child("kid", 3, run_id="kid-3")
    assert_type(named, Any)
    started = await ctx.start_child(kid, 4)
    assert_type(started, str)
    assert_type(await ctx.start_child("kid", 4, run_id="k"), str)
    try:
        await ctx.child(kid, 5)
    except ChildWorkflowError as error:
        assert_type(error.run_id, str)
        assert_type(error.step_error, StepError)
        assert_type(error.code, str | None)
        assert_type(error.retryable, bool)
    await ctx.child(kid, "5")  # type: ignore[misc]
    await ctx.start_child(kid, "5")  # type: ignore[misc]
    await ctx.recv(7)  # type: ignore[arg-type]
    await ctx.child(kid, 5, run_id=5)  # type: ignore[call-overload]
    return [output, started]


async def use(engine: Engine) -> None:
    assert_type(await engine.send("r", "orders", {"sku": 7}), None)
    assert_type(await engine.send("r", "orders", [1], message_id="m-1"), None)
    assert_type(await engine.get_event("r", "stage"), Any)
    assert_type(await engine.get_event("r", "stage", timeout="30s", poll_ms=50), Any)
    await engine.send("r", "orders", 1, message_id=3)  # type: ignore[arg-type]
    await engine.get_event("r", 3)  # type: ignore[arg-type]
    error = ChildWorkflowError("r:1", StepError("failed"))
    assert_type(error, ChildWorkflowError)
    base: DurableError = error
    assert isinstance(base, DurableError)
