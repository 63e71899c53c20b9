"""``ctx.sleep``: a durable timer that wakes at exactly its time, once, whatever replays it."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from effects.durable import NonDeterminismError, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable._timers import MAX_WAKE_MS
from tests.durable.support import START_MS, events_named

pytestmark = pytest.mark.anyio

HOUR_MS = 3_600_000


def sleeper(duration: Any, name: str = "sleeper") -> Any:
    """A workflow that sleeps *duration*, then returns the engine clock's epoch ms."""

    @workflow(name)
    async def sleeps(ctx: WorkflowContext, _: Any) -> int:
        await ctx.sleep(duration)
        return int(await ctx.local_step("woke", lambda: _now_ms(ctx)))

    return sleeps


def _now_ms(ctx: WorkflowContext) -> int:
    return ctx._turn.now()  # pyright: ignore[reportPrivateUsage]


async def test_a_one_hour_sleep_wakes_at_exactly_plus_3_600_000_ms(
    durable_engine: DurableEngineFactory,
) -> None:
    """Suspended with its wake_at until then; completed at +3,600,000 ms, wake_at kept."""
    sleeps = sleeper("1h")
    async with durable_engine(workflows=[sleeps]) as engine:
        run_id = await engine.start(sleeps, None)
        await engine.run_until_idle()
        waiting = await engine.get_run(run_id)
        (pending,) = await engine.checkpoints(run_id)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        slept, _ = await engine.checkpoints(run_id)
    assert ("suspended", START_MS + HOUR_MS) == (waiting.status, waiting.wake_at)
    assert ("durable.sleep", "sleep", "pending", START_MS + HOUR_MS) == (
        pending.name, pending.kind, pending.status, pending.wake_at
    )  # fmt: skip
    assert ("completed", START_MS + HOUR_MS) == (run.status, run.output)
    assert ("completed", START_MS + HOUR_MS, None) == (slept.status, slept.wake_at, slept.output)


@pytest.mark.parametrize(
    ("duration", "ms"),
    [
        (90, 90_000),
        (0.25, 250),
        ("1h30m", 5_400_000),
        ("250ms", 250),
        (datetime.timedelta(days=2), 172_800_000),
        (0.0004, 0),
    ],
    ids=["int", "float", "hours-minutes", "ms", "timedelta", "sub-ms"],
)
async def test_every_duration_like_sleeps_its_whole_ms(
    durable_engine: DurableEngineFactory, duration: Any, ms: int
) -> None:
    """Seconds, strings and timedeltas: the run wakes at exactly now + round(s * 1000) ms."""
    sleeps = sleeper(duration)
    async with durable_engine(workflows=[sleeps]) as engine:
        run_id = await engine.start(sleeps, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("completed", START_MS + ms) == (run.status, run.output)


async def test_sleep_zero_completes_at_once_in_one_turn(
    durable_engine: DurableEngineFactory,
) -> None:
    """sleep(0) records a completed sleep at now and goes on without suspending."""
    sleeps = sleeper(0)
    async with durable_engine(workflows=[sleeps]) as engine:
        run_id = await engine.start(sleeps, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        slept, _ = await engine.checkpoints(run_id)
        started = await events_named(engine, run_id, "step.started")
    assert ("completed", START_MS) == (run.status, run.output)
    assert ("completed", START_MS) == (slept.status, slept.wake_at)
    assert [{"kind": "sleep", "wake_at": START_MS, "ms": 0}] == [
        e.data for e in started if e.seq == 1
    ]


@pytest.mark.parametrize(
    ("duration", "error"),
    [
        (-1, ValueError),
        ("-1s", ValueError),
        (math.nan, ValueError),
        (math.inf, ValueError),
        (True, ValueError),
        ("soon", ValueError),
        (10**300, ValueError),
        ((MAX_WAKE_MS + 1) / 1000, ValueError),
        (None, TypeError),
        ([1], TypeError),
    ],
    ids=[
        "negative",
        "negative-text",
        "nan",
        "inf",
        "bool",
        "garbage",
        "huge",
        "past-max",
        "none",
        "list",
    ],
)
async def test_an_odd_duration_raises_into_the_workflow_and_writes_nothing(
    durable_engine: DurableEngineFactory, duration: Any, error: type[Exception]
) -> None:
    """The workflow catches the error at ctx.sleep: no sleep checkpoint, no suspension."""

    @workflow("odd")
    async def odd(ctx: WorkflowContext, _: Any) -> str:
        try:
            await ctx.sleep(duration)
        except Exception as raised:  # noqa: BLE001 - the point: what it raises
            return type(raised).__name__
        return "slept"

    async with durable_engine(workflows=[odd]) as engine:
        run_id = await engine.start(odd, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", error.__name__, []) == (run.status, run.output, checkpoints)


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


async def test_a_replay_passes_a_completed_sleep_at_once_and_never_sleeps_again(
    durable_engine: DurableEngineFactory,
) -> None:
    """Sleep, a dispatched step, sleep: each replay after a result passes the sleeps at once."""

    @workflow("twice")
    async def twice(ctx: WorkflowContext, _: Any) -> int:
        await ctx.sleep(10)
        await ctx.step(echo, 1)
        await ctx.sleep(5)
        return _now_ms(ctx)

    async with durable_engine(workflows=[twice], steps=[echo]) as engine:
        run_id = await engine.start(twice, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
        completed = await events_named(engine, run_id, "step.completed")
    assert ("completed", START_MS + 15_000) == (run.status, run.output)
    assert [START_MS + 10_000, None, START_MS + 15_000] == [c.wake_at for c in checkpoints]
    assert [1, 3] == [e.seq for e in completed if e.data.get("kind") == "sleep"]


async def test_new_code_with_another_duration_keeps_the_recorded_wake_at(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run that began a 1 h sleep under old code still wakes at +1 h under a 2 h sleep."""
    old, new = sleeper("1h", "nap"), sleeper("2h", "nap")
    async with durable_engine(workflows=[old]) as engine:
        run_id = await engine.start(old, None)
        await engine.run_until_idle()
    async with durable_engine(workflows=[new]) as engine:
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("completed", START_MS + HOUR_MS) == (run.status, run.output)


async def test_a_sleep_where_another_step_was_recorded_is_non_determinism(
    durable_engine: DurableEngineFactory,
) -> None:
    """A code change that puts a sleep where a step was recorded fails the run."""

    @workflow("changed")
    async def before(ctx: WorkflowContext, _: Any) -> None:
        await ctx.step(echo, 1)

    @workflow("changed")
    async def after(ctx: WorkflowContext, _: Any) -> None:
        await ctx.sleep(1)

    async with durable_engine(workflows=[before]) as engine:
        run_id = await engine.start(before, None)
        await engine.run_until_idle()
    async with durable_engine(workflows=[after], steps=[echo]) as engine:
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert NonDeterminismError.__qualname__ in run.error.type
