"""Static typing of recurring workflows (checked by mypy and pyright, never run).

Each ``# type: ignore[code]`` line is a wrong use that must stay an error: mypy's
``warn_unused_ignores`` and pyright's ``reportUnnecessaryTypeIgnoreComment`` fail if it stops
being one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, assert_type

from effects.durable import Engine, Recurring, WorkflowContext, WorkflowDef, workflow
from schedules import cron, exponential, fixed, spaced


@workflow("report")
async def report(ctx: WorkflowContext, day: str | None) -> int:
    return 0


nightly = Recurring("nightly", report, cron("0 3 * * *", tz="Europe/Berlin"))
hourly = Recurring("hourly", "report", spaced("1h"), input="today", catch_up="all")
quarterly = Recurring("quarter", report, fixed("15m").jittered(), catch_up="none")

assert_type(nightly, Recurring)
assert_type(nightly.name, str)
assert_type(nightly.workflow, WorkflowDef[Any, Any] | str)
assert_type(nightly.workflow_name, str)
assert_type(nightly.input, Any)
assert_type(nightly.catch_up, Literal["latest", "all", "none"])

engine = Engine("sqlite:///durable.db", workflows=[report], recurring=[nightly, hourly])
assert_type(engine.recurring, Mapping[str, Recurring])

# A catch_up that is not one of the three.
Recurring("r", report, spaced(1), catch_up="some")  # type: ignore[arg-type]
# Something that is not a schedule.
Recurring("r", report, 3600)  # type: ignore[arg-type]


def is_timeout(error: TimeoutError) -> bool:
    return True


# A schedule that reads its input as an error: a recurring steps with None.
Recurring("r", report, exponential(1).while_input(is_timeout))  # type: ignore[arg-type]
# Engine(recurring=...) takes Recurring values, not schedules.
Engine("sqlite:///durable.db", workflows=[report], recurring=[spaced(1)])  # type: ignore[list-item]
