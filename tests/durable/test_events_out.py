"""
Events out: ``ctx.set_event`` writes a value once (never again on replay) and
``engine.get_event`` reads the latest, at once or waiting up to a timeout in real time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from effects.durable import UnknownRunError, WorkflowContext, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import rows

pytestmark = pytest.mark.anyio
#: A bound on a wait that must end (never a timing claim).
PATIENCE = 30.0


@workflow("progress")
async def progress(ctx: WorkflowContext, total: int) -> str:
    """Publish its stage, wait for a go, publish again (the same key) and a second key."""
    await ctx.set_event("stage", {"done": 0, "of": total})
    go = await ctx.recv("go")
    await ctx.set_event("stage", {"done": total, "of": total})
    await ctx.set_event("answer", go)
    return "ok"


def event_rows(url: str, run_id: str) -> list[tuple[Any, ...]]:
    """The run's event values as ``(key, value, seq, set_at)``."""
    return rows(
        url,
        "SELECT key, value, seq, set_at FROM event_values WHERE run_id = ? ORDER BY key",
        (run_id,),
    )


async def test_get_event_answers_now_with_the_latest_value_or_none(
    durable_engine: DurableEngineFactory,
) -> None:
    """None before any set; the first value; then the latest of the key, and the other key."""
    async with durable_engine(workflows=[progress]) as engine:
        run_id = await engine.start(progress, 3, run_id="p")
        before = await engine.get_event(run_id, "stage")
        await engine.run_until_idle()
        first = await engine.get_event(run_id, "stage")
        missing = await engine.get_event(run_id, "answer")
        await engine.send(run_id, "go", [1, "two"])
        await engine.run_until_idle()
        latest = await engine.get_event(run_id, "stage")
        answer = await engine.get_event(run_id, "answer")
        checkpoints = await engine.checkpoints(run_id)
    assert (None, None) == (before, missing)
    assert {"done": 0, "of": 3} == first
    assert {"done": 3, "of": 3} == latest
    assert [1, "two"] == answer
    assert [
        ("stage", "event", {"done": 0, "of": 3}),
        ("go", "recv", [1, "two"]),
        ("stage", "event", {"done": 3, "of": 3}),
        ("answer", "event", [1, "two"]),
    ] == [(c.name, c.kind, c.output) for c in checkpoints]


async def test_set_event_is_written_once_and_not_again_on_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """The replays after the recv leave the first value's row and checkpoint as written."""
    async with durable_engine(workflows=[progress]) as engine:
        run_id = await engine.start(progress, 2, run_id="p")
        await engine.run_until_idle()
        written = event_rows(durable_engine.url, run_id)
        first = (await engine.checkpoints(run_id))[0]
        await engine.run_for("1h")
        await engine.send(run_id, "go", None)
        await engine.run_until_idle()
        after = event_rows(durable_engine.url, run_id)
        replayed = (await engine.checkpoints(run_id))[0]
        run = await engine.get_run(run_id)
    assert "completed" == run.status
    assert [("stage", '{"done":0,"of":2}', 1, first.created_at)] == written
    assert [
        ("answer", "null", 4, first.created_at + 3_600_000),
        ("stage", '{"done":2,"of":2}', 3, first.created_at + 3_600_000),
    ] == after
    assert first == replayed
    assert (1, first.created_at) == (replayed.rev, replayed.updated_at)


async def test_get_event_with_a_timeout_waits_for_a_turn_of_this_engine_to_set_it(
    durable_engine: DurableEngineFactory,
) -> None:
    """A waiting get_event is answered once the turn that sets the key commits."""
    async with durable_engine(workflows=[progress]) as engine:
        run_id = await engine.start(progress, 5, run_id="p")
        waiting = asyncio.ensure_future(engine.get_event(run_id, "stage", timeout=PATIENCE))
        await asyncio.sleep(0)
        assert not waiting.done()
        await engine.run_until_idle()
        value = await asyncio.wait_for(waiting, PATIENCE)
    assert {"done": 0, "of": 5} == value


async def test_get_event_with_a_timeout_reads_what_another_engine_set(
    durable_engine: DurableEngineFactory,
) -> None:
    """An engine that runs nothing itself sees another engine's set_event at its next poll."""
    async with (
        durable_engine() as reader,
        durable_engine(workflows=[progress]) as runner,
    ):
        run_id = await runner.start(progress, 1, run_id="p")
        await runner.run_until_idle()
        await runner.send(run_id, "go", "yes")
        waiting = asyncio.ensure_future(
            reader.get_event(run_id, "answer", timeout=PATIENCE, poll_ms=10)
        )
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await runner.run_until_idle()
        value = await asyncio.wait_for(waiting, PATIENCE)
    assert "yes" == value


async def test_get_event_with_a_timeout_gives_none_when_the_key_is_never_set(
    durable_engine: DurableEngineFactory,
) -> None:
    """Past its real-time timeout: None; for a run that finished without the key: None at once."""
    async with durable_engine(workflows=[progress]) as engine:
        run_id = await engine.start(progress, 1, run_id="p")
        await engine.run_until_idle()
        timed_out = await engine.get_event(run_id, "answer", timeout=0.05, poll_ms=10)
        await engine.cancel(run_id)
        finished = await asyncio.wait_for(
            engine.get_event(run_id, "answer", timeout=PATIENCE * 10), PATIENCE
        )
    assert (None, None) == (timed_out, finished)


async def test_get_event_refuses_an_unknown_run_and_a_bad_key(
    durable_engine: DurableEngineFactory,
) -> None:
    """UnknownRunError for an id no run has (waiting or not); TypeError or ValueError for a key."""
    async with durable_engine(workflows=[progress]) as engine:
        await engine.start(progress, 1, run_id="p")
        for timeout in (None, 1.0):
            with pytest.raises(UnknownRunError):
                await engine.get_event("nope", "stage", timeout=timeout)
        with pytest.raises(UnknownRunError):
            await engine.get_event("no\x00pe", "stage")
        with pytest.raises(TypeError, match="event key"):
            await engine.get_event("p", None)  # type: ignore[arg-type]
        for key in ("", " stage", "st\x00age", "st\udcffage"):
            with pytest.raises(ValueError, match="event key"):
                await engine.get_event("p", key)
        with pytest.raises(ValueError, match="timeout"):
            await engine.get_event("p", "stage", timeout=-1)


@workflow("publish")
async def publish(ctx: WorkflowContext, value: Any) -> str:
    """Publish *value* (or a value that is not JSON, for the input 'not-json')."""
    try:
        await ctx.set_event("v", {1, 2} if value == "not-json" else value)
    except TypeError as error:
        return f"refused: {error}"
    return "set"


async def test_a_value_that_is_not_json_is_a_type_error_in_the_workflow_and_nothing_is_written(
    durable_engine: DurableEngineFactory,
) -> None:
    """set_event of a set: TypeError naming the key, caught by the workflow; no row, no value."""
    async with durable_engine(workflows=[publish]) as engine:
        await engine.start(publish, "not-json", run_id="p")
        await engine.run_until_idle()
        run = await engine.get_run("p")
        value = await engine.get_event("p", "v")
        checkpoints = await engine.checkpoints("p")
    assert "completed" == run.status
    assert "value of event 'v' cannot be stored as JSON" in str(run.output)
    assert (None, []) == (value, checkpoints)
    assert [] == event_rows(durable_engine.url, "p")
