"""``ctx.now()`` and ``ctx.uuid()``: read once, recorded as local steps, the same on replays."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from effects.durable import WorkflowContext, step, workflow
from effects.durable._pytest_plugin import START, DurableEngineFactory

pytestmark = pytest.mark.anyio


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


def recording(seen: list[tuple[datetime.datetime, str]]) -> Any:
    """A workflow that reads now and a uuid, dispatches a step (a replay follows), returns them."""

    @workflow("stamped")
    async def stamped(ctx: WorkflowContext, _: Any) -> list[str]:
        at = await ctx.now()
        made = await ctx.uuid()
        seen.append((at, made))
        await ctx.step(echo, None)
        await ctx.sleep("1h")
        return [at.isoformat(), made]

    return stamped


async def test_now_and_uuid_are_the_same_on_every_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """Three turns (start, after the step, after the sleep) see one time and one uuid."""
    seen: list[tuple[datetime.datetime, str]] = []
    stamped = recording(seen)
    # The cache of suspended runs off: each turn after the first replays (what this is about).
    async with durable_engine(workflows=[stamped], steps=[echo], cached_runs=0) as engine:
        run_id = await engine.start(stamped, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    first = seen[0]
    assert 3 == len(seen)
    assert [first] * 3 == seen
    assert [first[0].isoformat(), first[1]] == run.output
    assert [("durable.now", "local"), ("durable.uuid", "local")] == [
        (c.name, c.kind) for c in checkpoints[:2]
    ]


async def test_now_is_the_engine_clock_in_utc(durable_engine: DurableEngineFactory) -> None:
    """ctx.now() is an aware UTC datetime of the engine's clock (the fixture's start)."""
    seen: list[tuple[datetime.datetime, str]] = []
    stamped = recording(seen)
    async with durable_engine(workflows=[stamped], steps=[echo]) as engine:
        await engine.start(stamped, None)
        await engine.run_until_idle()
    at = seen[0][0]
    assert datetime.datetime.fromtimestamp(START, datetime.UTC) == at
    assert datetime.timedelta(0) == at.utcoffset()


async def test_uuid_is_a_canonical_version_4_uuid_and_differs_per_run(
    durable_engine: DurableEngineFactory,
) -> None:
    """Each run records its own uuid4, in canonical lower-case form."""
    seen: list[tuple[datetime.datetime, str]] = []
    stamped = recording(seen)
    async with durable_engine(workflows=[stamped], steps=[echo]) as engine:
        await engine.start(stamped, None)
        await engine.start(stamped, None)
        await engine.run_until_idle()
    made = [text for _, text in seen]
    assert 2 == len(set(made))
    for text in made:
        parsed = uuid.UUID(text)
        assert (str(parsed), 4) == (text, parsed.version)


async def test_a_new_engine_after_a_restart_replays_the_recorded_values(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run suspended by one engine and finished by another returns the first time and uuid."""
    seen: list[tuple[datetime.datetime, str]] = []
    stamped = recording(seen)
    async with durable_engine(workflows=[stamped]) as engine:
        run_id = await engine.start(stamped, None)
        await engine.run_until_idle()
    durable_engine.clock.advance(600)
    async with durable_engine(workflows=[stamped], steps=[echo]) as engine:
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert [seen[0][0].isoformat(), seen[0][1]] == run.output
    assert {seen[0]} == set(seen)
