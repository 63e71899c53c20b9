"""
``attach_otel``'s counters, counted in ints and read through observable counters: engines
attached to one meter add up, a detached engine's counts stay, and each collection reads totals.
"""

from __future__ import annotations

import pytest

from effects.durable import WorkflowContext, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.telemetry_support import Telemetry, counts

pytestmark = pytest.mark.anyio


@workflow("counted-steps")
async def two_steps(ctx: WorkflowContext, n: int) -> int:
    """Two local steps."""
    n = await ctx.local_step("first", lambda: n + 1)
    return await ctx.local_step("second", lambda: n + 1)


async def test_two_engines_on_one_meter_add_up_and_a_detached_one_keeps_its_counts(
    durable_engine: DurableEngineFactory,
) -> None:
    """Two engines, one meter: their attempts and runs add up, also after one detached."""
    telemetry = Telemetry()
    async with (
        durable_engine(workflows=[two_steps]) as one,
        durable_engine(workflows=[two_steps]) as other,
    ):
        detach_one = telemetry.attach(one)
        telemetry.attach(other)
        await one.start(two_steps, 0)
        await one.run_until_idle()
        detach_one()
        await one.start(two_steps, 0)  # not counted: detached
        await one.run_until_idle()
        await other.start(two_steps, 0)
        await other.run_until_idle()
    points = telemetry.points()
    telemetry.shutdown()
    assert {"completed": 4} == counts(points, "durable.step.attempts", "durable.step.outcome")
    assert {"first": 2, "second": 2} == counts(points, "durable.step.attempts", "durable.step.name")
    assert {"completed": 2} == counts(points, "durable.runs", "durable.run.status")
    assert {"local": 4} == counts(points, "durable.step.duration", "durable.step.kind")


async def test_each_collection_reads_the_totals_so_far(
    durable_engine: DurableEngineFactory,
) -> None:
    """A second read after more runs gives the new totals, not the difference."""
    telemetry = Telemetry()
    async with durable_engine(workflows=[two_steps]) as engine:
        telemetry.attach(engine)
        await engine.start(two_steps, 0)
        await engine.run_until_idle()
        first = counts(telemetry.points(), "durable.step.attempts", "durable.step.outcome")
        for _ in range(2):
            await engine.start(two_steps, 0)
            await engine.run_until_idle()
        second = counts(telemetry.points(), "durable.step.attempts", "durable.step.outcome")
    telemetry.shutdown()
    assert ({"completed": 2}, {"completed": 6}) == (first, second)
