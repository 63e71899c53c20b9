"""Static typing of the workflow primitives of issue 23 (checked by mypy and pyright, never run).

Each ``# type: ignore[code]`` line is a wrong use that must stay an error: mypy's
``warn_unused_ignores`` and pyright's ``reportUnnecessaryTypeIgnoreComment`` fail if it stops
being one.
"""

from __future__ import annotations

import datetime
from typing import assert_type

from effects.durable import Engine, Run, WorkflowContext, WorkflowDef, WorkflowTimeout, workflow


@workflow("nap", timeout="1h")
async def nap(ctx: WorkflowContext, minutes: int) -> str:
    assert_type(await ctx.sleep(minutes * 60), None)
    assert_type(await ctx.sleep("1h30m"), None)
    assert_type(await ctx.sleep(datetime.timedelta(minutes=minutes)), None)
    await ctx.sleep(object())  # type: ignore[arg-type]
    at = await ctx.now()
    assert_type(at, datetime.datetime)
    made = await ctx.uuid()
    assert_type(made, str)
    assert_type(ctx.patched("charge-in-cents"), bool)
    ctx.patched(3)  # type: ignore[arg-type]
    return f"{at.isoformat()} {made}"


assert_type(nap, WorkflowDef[int, str])
assert_type(nap.timeout_ms, int | None)


async def operate(engine: Engine) -> None:
    run_id = await engine.start(nap, 5, timeout=datetime.timedelta(minutes=30))
    assert_type(run_id, str)
    assert_type(await engine.start("nap", 5, run_id="n-1", timeout="10m"), str)
    await engine.start(nap, 5, timeout=object())  # type: ignore[call-overload]
    assert_type(await engine.prune(older_than="30d"), int)
    assert_type(await engine.prune(older_than=86_400, statuses=("failed",), dry_run=True), int)
    await engine.prune(older_than="30d", dry_run="yes")  # type: ignore[arg-type]
    await engine.prune()  # type: ignore[call-arg]
    assert_type(await engine.list_runs(unserved=True), list[Run])
    assert_type(engine.serves("nap"), str | None)
    run = await engine.get_run(run_id)
    assert_type(run.deadline, int | None)


def timed_out(error: WorkflowTimeout) -> tuple[str, str, int, int]:
    return (error.code, error.run_id, error.timeout_ms, error.deadline)
