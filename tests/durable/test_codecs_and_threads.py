"""Codecs store other types; sync handlers run in threads and still see their step context."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest

from effects.durable import WorkflowContext, current_step, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio


class DateCodec:
    """Dates as ISO strings, so a workflow's values stay dates on every replay."""

    def encode(self, value: Any) -> Any:
        """A date (or a list of them) as JSON data."""
        if isinstance(value, dt.date):
            return {"date": value.isoformat()}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        return value

    def decode(self, data: Any) -> Any:
        """Back to dates."""
        if isinstance(data, dict) and set(data) == {"date"}:
            return dt.date.fromisoformat(data["date"])
        if isinstance(data, list):
            return [self.decode(v) for v in data]
        return data


codec = DateCodec()


@step("next-day", codec=codec)
def next_day(day: dt.date) -> dt.date:
    """The day after."""
    assert isinstance(day, dt.date)
    return day + dt.timedelta(days=1)


@workflow("dates", codec=codec)
async def dates(ctx: WorkflowContext, start: dt.date) -> list[dt.date]:
    """Dates through a local step and a dispatched step, returned as dates."""
    local = await ctx.local_step("same-day", lambda: start, codec=codec)
    assert isinstance(local, dt.date)
    later = await ctx.step(next_day, local)
    assert isinstance(later, dt.date)
    return [local, later]


async def test_a_codec_keeps_values_of_other_types(durable_engine: DurableEngineFactory) -> None:
    """Inputs and outputs of a codec's type come back as that type, first run and replay alike."""
    async with durable_engine(workflows=[dates], steps=[next_day]) as engine:
        run_id = await engine.start(dates, dt.date(2026, 2, 28))
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", [dt.date(2026, 2, 28), dt.date(2026, 3, 1)]) == (run.status, run.output)
    assert {"date": "2026-03-01"} == checkpoints[1].output


async def test_a_sync_handler_runs_in_a_thread_with_its_step_context(
    durable_engine: DurableEngineFactory,
) -> None:
    """A def handler runs off the event loop, and current_step() and heartbeats work there."""
    seen: list[tuple[str, bool, int]] = []

    @step("threaded", timeout_ms=5000)
    def threaded(value: int) -> int:
        ctx = current_step()
        seen.append((ctx.name, threading.current_thread() is threading.main_thread(), ctx.attempt))
        ctx.heartbeat({"value": value})
        return value * 2

    @workflow("uses-threads")
    async def uses_threads(ctx: WorkflowContext, value: int) -> int:
        return await ctx.step(threaded, value)

    async with durable_engine(workflows=[uses_threads], steps=[threaded]) as engine:
        run_id = await engine.start(uses_threads, 21)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
    assert ("completed", 42) == (run.status, run.output)
    assert [("threaded", False, 1)] == seen
    assert {"value": 21} == checkpoint.progress


async def test_current_step_outside_a_handler_is_a_clear_error() -> None:
    """current_step() outside a dispatched step's handler says where it works."""
    with pytest.raises(LookupError, match="only available inside a dispatched step's handler"):
        current_step()


async def test_heartbeat_progress_must_be_json(durable_engine: DurableEngineFactory) -> None:
    """Heartbeat progress that is not JSON is a TypeError in the handler, naming the step."""

    @step("beats-badly")
    async def beats_badly(_: None) -> str:
        try:
            current_step().heartbeat({"when": object()})
        except TypeError as error:
            return str(error)
        return "accepted"

    @workflow("bad-beat")
    async def bad_beat(ctx: WorkflowContext, _: None) -> str:
        return await ctx.step(beats_badly, None)

    async with durable_engine(workflows=[bad_beat], steps=[beats_badly]) as engine:
        run_id = await engine.start(bad_beat, None)
        await engine.run_until_idle()
        output = (await engine.get_run(run_id)).output
    assert "heartbeat progress of step 'beats-badly' cannot be stored" in output
