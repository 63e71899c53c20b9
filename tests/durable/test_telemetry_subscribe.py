"""
``engine.subscribe``: listeners hear exactly what ``engine.events()`` shows, as it commits, in
this process only; a listener that raises is logged and ignored; unsubscribing stops them.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from effects.durable import Event, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import Flaky

pytestmark = pytest.mark.anyio


@step("double")
async def double(value: int) -> int:
    """Twice the input."""
    return 2 * value


flaky = Flaky([ConnectionError("reset")], value=5)


@workflow("mixed")
async def mixed(ctx: WorkflowContext, value: int) -> int:
    """A first-try local step, a local step that fails once, then a dispatched step."""
    one = await ctx.local_step("one", lambda: value + 1)
    two = await ctx.local_step("two", flaky, retries=2, backoff_ms=10)
    return await ctx.step(double, one + two)


@workflow("plain")
async def plain(ctx: WorkflowContext, value: int) -> int:
    """One local step."""
    return await ctx.local_step("inc", lambda: value + 1)


async def test_a_listener_hears_exactly_what_events_shows_derived_events_included(
    durable_engine: DurableEngineFactory,
) -> None:
    """Local first-try, local retried and dispatched steps: the same events, the same order."""
    flaky.calls.clear()
    heard: list[Event] = []
    async with durable_engine(workflows=[mixed], steps=[double]) as engine:
        engine.subscribe(heard.append)
        run_id = await engine.start(mixed, 1)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        shown = await engine.events(run_id)
    assert ("completed", 14) == (run.status, run.output)
    assert shown == heard
    assert {run_id} == {e.run_id for e in heard}
    # The first local step wrote no event row: its two events are the derived ones.
    assert ("step.started", 1) == (heard[1].name, heard[1].seq)
    assert ("step.completed", 1) == (heard[2].name, heard[2].seq)


async def test_listeners_are_called_in_order_and_one_that_raises_is_logged_and_ignored(
    durable_engine: DurableEngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A raising listener neither stops the run nor the listeners after it."""
    calls: list[tuple[str, str]] = []

    def broken(event: Event) -> None:
        calls.append(("broken", event.name))
        raise RuntimeError("listener bug")

    async with durable_engine(workflows=[plain]) as engine:
        engine.subscribe(broken)
        engine.subscribe(lambda event: calls.append(("second", event.name)))
        with caplog.at_level(logging.ERROR, logger="effects.durable"):
            run_id = await engine.start(plain, 1)
            await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", 2) == (run.status, run.output)
    names = ["run.started", "step.started", "step.completed", "run.completed"]
    assert [(who, name) for name in names for who in ("broken", "second")] == calls
    logged = [r for r in caplog.records if "a listener raised" in r.getMessage()]
    assert 4 == len(logged)
    assert all(r.exc_info is not None for r in logged)


async def test_unsubscribe_stops_a_listener_and_a_second_call_does_nothing(
    durable_engine: DurableEngineFactory,
) -> None:
    """After unsubscribe nothing more is heard; subscribing again hears new events only."""
    first: list[str] = []
    again: list[str] = []
    async with durable_engine(workflows=[plain]) as engine:
        unsubscribe = engine.subscribe(lambda event: first.append(event.name))
        await engine.start(plain, 1, run_id="a")
        unsubscribe()
        unsubscribe()
        await engine.run_until_idle()
        engine.subscribe(lambda event: again.append(f"{event.run_id}/{event.name}"))
        await engine.start(plain, 1, run_id="b")
        await engine.run_until_idle()
        assert ["completed", "completed"] == [(await engine.get_run(r)).status for r in "ab"]
    assert ["run.started"] == first
    assert ["b/run.started", "b/step.started", "b/step.completed", "b/run.completed"] == again


async def test_a_write_that_writes_nothing_tells_nothing(
    durable_engine: DurableEngineFactory,
) -> None:
    """Starting an id that exists writes no event, so no listener hears one."""
    heard: list[str] = []
    async with durable_engine(workflows=[plain]) as engine:
        engine.subscribe(lambda event: heard.append(event.name))
        await engine.start(plain, 1, run_id="r")
        await engine.start(plain, 1, run_id="r")
    assert ["run.started"] == heard


@pytest.mark.not_on_memory("two processes' stores: two store objects on one file or schema")
async def test_each_engine_hears_the_writes_of_its_own_store_object_only(
    durable_engine: DurableEngineFactory,
) -> None:
    """The orchestrator hears its turn's events; the worker (another store) hears its attempt's."""
    orchestrated: list[str] = []
    worked: list[str] = []

    @workflow("one")
    async def one(ctx: WorkflowContext, value: int) -> int:
        return await ctx.step(double, value)

    async with (
        durable_engine(workflows=[one]) as orchestrator,
        durable_engine(steps=[double]) as worker,
    ):
        orchestrator.subscribe(lambda event: orchestrated.append(event.name))
        worker.subscribe(lambda event: worked.append(event.name))
        run_id = await orchestrator.start(one, 4)
        await orchestrator.run_until_idle()
        await worker.run_until_idle()
        await orchestrator.run_until_idle()
        run = await orchestrator.get_run(run_id)
        everything = [e.name for e in await orchestrator.events(run_id)]
    assert ("completed", 8) == (run.status, run.output)
    assert ["run.started", "step.dispatched", "run.completed"] == orchestrated
    assert ["step.started", "step.completed"] == worked
    assert [
        "run.started",
        "step.dispatched",
        "step.started",
        "step.completed",
        "run.completed",
    ] == (everything)


def test_subscribe_refuses_what_is_not_callable(durable_engine: DurableEngineFactory) -> None:
    """A listener must be a function of one Event."""
    engine = durable_engine(workflows=[plain])
    not_callable: Any = "print"
    with pytest.raises(TypeError, match="subscribe takes a function of one Event"):
        engine.subscribe(not_callable)
