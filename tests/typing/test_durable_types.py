"""Static typing of ``effects.durable`` (checked by mypy and pyright, never run).

Each ``# type: ignore[code]`` line is a wrong use that must stay an error: mypy's
``warn_unused_ignores`` and pyright's ``reportUnnecessaryTypeIgnoreComment`` fail if it stops
being one.
"""

from __future__ import annotations

from typing import Any, assert_type

from effects.durable import (
    Checkpoint,
    Engine,
    Event,
    Run,
    StepContext,
    StepDef,
    StepError,
    WorkflowContext,
    WorkflowDef,
    current_step,
    step,
    workflow,
)
from schedules import exponential


@step("charge", retries=4, backoff="exp", backoff_ms=500, jitter=True)
async def charge(order: dict[str, int]) -> str:
    assert_type(current_step(), StepContext)
    return f"ch_{order['id']}"


@step("count", retry=exponential(0.5).times(3))
def count(text: str) -> int:
    return len(text)


assert_type(charge, StepDef[dict[str, int], str])
assert_type(count, StepDef[str, int])


async def fetch_quote() -> float:
    return 9.5


def sync_quote() -> float:
    return 9.5


@workflow("checkout", version="2")
async def checkout(ctx: WorkflowContext, order: dict[str, int]) -> str:
    quote = await ctx.local_step("quote", fetch_quote, retries=5, backoff_ms=200)
    assert_type(quote, float)
    again = await ctx.local_step("again", sync_quote)
    assert_type(again, float)
    charged = await ctx.step(charge, order, retries=8, backoff_max_ms=120_000)
    assert_type(charged, str)
    lengths = await ctx.all(count, ["a", "bb"])
    assert_type(lengths, list[int])
    by_name = await ctx.step("elsewhere", {"any": "json"})
    assert_type(by_name, Any)
    await ctx.step(charge, "not an order")  # type: ignore[misc]
    await ctx.step(charge, order, retries="3")  # type: ignore[call-overload]
    return charged


assert_type(checkout, WorkflowDef[dict[str, int], str])


async def use(engine: Engine) -> None:
    run_id = await engine.start(checkout, {"id": 7})
    assert_type(run_id, str)
    await engine.start(checkout, "wrong")  # type: ignore[misc]
    assert_type(await engine.get_run(run_id), Run)
    assert_type(await engine.wait(run_id, timeout="30s", poll_ms=50), Run)
    await engine.wait(run_id, timeout=object())  # type: ignore[arg-type]
    assert_type(await engine.checkpoints(run_id), list[Checkpoint])
    assert_type(await engine.events(run_id), list[Event])
    assert_type(await engine.redispatch_pending(run_id), int)
    await engine.run_until_idle(advance_time=True)
    assert_type(await engine.cancel(run_id), Run)
    assert_type(await engine.cancel(run_id, compensate=True), Run)
    await engine.cancel(run_id, True)  # type: ignore[call-arg]


# -- sagas: compensate= and error routes --------------------------------------------------------


@step("refund")
async def refund(undo: dict[str, Any]) -> None:
    return None


def release(undo: dict[str, Any]) -> None:
    return None


async def declined(ctx: WorkflowContext, order: dict[str, int], error: StepError) -> str:
    return f"declined: {error.code}"


@workflow("saga", on_error={"declined": declined})
async def saga(ctx: WorkflowContext, order: dict[str, int]) -> str:
    await ctx.local_step("reserve", sync_quote, compensate=release)
    charged = await ctx.step(charge, order, compensate=refund)
    assert_type(charged, str)
    await ctx.step(charge, order, compensate="refund")
    assert_type(await ctx.all(count, ["a"], compensate=refund), list[int])
    await ctx.step(charge, order, compensate=release)  # type: ignore[call-overload]
    return charged


assert_type(saga, WorkflowDef[dict[str, int], str])
