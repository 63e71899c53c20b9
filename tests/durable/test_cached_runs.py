"""
The cache of suspended runs (``Engine(cached_runs=...)``): what it keeps, what drops a parked
workflow (eviction, cancel, close, a changed record), and that a run goes on right after each.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from effects.durable import Engine, WorkflowContext, step, workflow
from effects.durable._engine import cached_runs_of
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio


@step("cache:bump")
async def bump(n: int) -> int:
    """Add one."""
    return n + 1


def _cache_len(engine: Engine) -> int:
    cache = cached_runs_of(engine)
    assert cache is not None
    return len(cache)


def _resumed(engine: Engine) -> int:
    cache = cached_runs_of(engine)
    assert cache is not None
    return cache.resumed


def _counting(entered: list[str], cleaned: list[str]) -> Any:
    @workflow("cache:counting")
    async def counting(ctx: WorkflowContext, n: int) -> int:
        entered.append(ctx.run_id)
        try:
            for _ in range(2):
                n = await ctx.step(bump, n)
        finally:
            # Reached when the run ends, and when a suspension unwinds it (a replayed turn's
            # or a dropped workflow's): then on a closed context, which runs and writes nothing.
            await ctx.local_step("cleanup", lambda: cleaned.append(ctx.run_id))
        return n

    return counting


@pytest.mark.parametrize("value", [-1, 1.5, "10", True, None])
def test_a_bad_cache_size_is_refused_naming_it(value: object) -> None:
    """cached_runs takes an int >= 0; anything else is an error naming it."""
    with pytest.raises((TypeError, ValueError), match="cached_runs"):
        Engine("memory://cache-bad", cached_runs=value)  # type: ignore[arg-type]


async def test_the_cache_is_on_by_default_and_off_at_zero(
    durable_engine: DurableEngineFactory,
) -> None:
    """An engine keeps parked runs unless cached_runs=0."""
    assert cached_runs_of(durable_engine()) is not None
    assert cached_runs_of(durable_engine(cached_runs=0)) is None


async def test_the_least_recently_parked_runs_are_dropped_and_replayed(
    durable_engine: DurableEngineFactory,
) -> None:
    """With room for one, the other runs are dropped (writing nothing) and replayed after."""
    entered: list[str] = []
    cleaned: list[str] = []
    counting = _counting(entered, cleaned)
    async with durable_engine(workflows=[counting], cached_runs=1) as engine:
        ids = [await engine.start(counting, 10 * i, run_id=f"lru-{i}") for i in range(3)]
        await engine.run_until_idle()
        assert 1 == _cache_len(engine)
        parked = [await engine.checkpoints(run_id) for run_id in ids]
        async with durable_engine(steps=[bump]) as worker:
            await worker.run_until_idle()
            await engine.run_until_idle()
            await worker.run_until_idle()
            await engine.run_until_idle()
        runs = [await engine.get_run(run_id) for run_id in ids]
        done = [[cp.name for cp in await engine.checkpoints(run_id)] for run_id in ids]
        assert 0 == _cache_len(engine)
    # The dropped workflows' finally blocks wrote nothing: one checkpoint each while parked.
    assert [["cache:bump"]] * 3 == [[cp.name for cp in cps] for cps in parked]
    assert [("completed", 10 * i + 2) for i in range(3)] == [(r.status, r.output) for r in runs]
    assert [["cache:bump", "cache:bump", "cleanup"]] * 3 == done
    assert sorted(ids) == sorted(cleaned)
    # Each run's body began once per turn that could not resume it.
    assert all(entered.count(run_id) >= 2 for run_id in ids[:2])


async def test_a_cancelled_parked_run_is_dropped(durable_engine: DurableEngineFactory) -> None:
    """Cancelling a parked run drops its workflow; nothing more is written for it."""
    entered: list[str] = []
    cleaned: list[str] = []
    counting = _counting(entered, cleaned)
    async with durable_engine(workflows=[counting]) as engine:
        run_id = await engine.start(counting, 0)
        await engine.run_until_idle()
        assert 1 == _cache_len(engine)
        await engine.cancel(run_id)
        assert 0 == _cache_len(engine)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        names = [cp.name for cp in await engine.checkpoints(run_id)]
    assert ("cancelled", ["cache:bump"], []) == (run.status, names, cleaned)


async def test_a_compensating_cancel_of_a_parked_run_replays_and_undoes(
    durable_engine: DurableEngineFactory,
) -> None:
    """A compensating cancel is run by a replay in cancel mode: the undo runs once."""
    undone: list[int] = []

    @workflow("cache:saga")
    async def saga(ctx: WorkflowContext, n: int) -> int:
        await ctx.local_step("reserve", lambda: n, compensate=lambda _: undone.append(n))
        return await ctx.step(bump, n)

    async with durable_engine(workflows=[saga]) as engine:
        run_id = await engine.start(saga, 5)
        await engine.run_until_idle()
        assert 1 == _cache_len(engine)
        await engine.cancel(run_id, compensate=True)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        assert 0 == _cache_len(engine)
    assert ("cancelled", [5]) == (run.status, undone)


async def test_closing_the_engine_drops_parked_runs_and_another_engine_finishes_them(
    durable_engine: DurableEngineFactory,
) -> None:
    """Parked workflows end with the engine; the runs wait in the store, replayed elsewhere."""
    entered: list[str] = []
    cleaned: list[str] = []
    counting = _counting(entered, cleaned)
    async with durable_engine(workflows=[counting]) as engine:
        run_id = await engine.start(counting, 0)
        await engine.run_until_idle()
        assert 1 == _cache_len(engine)
    assert 0 == _cache_len(engine)
    async with durable_engine(workflows=[counting], steps=[bump]) as other:
        parked = await other.get_run(run_id)
        await other.run_until_idle()
        run = await other.get_run(run_id)
    assert "suspended" == parked.status
    assert ("completed", 2, [run_id]) == (run.status, run.output, cleaned)
    assert [run_id, run_id] == entered


async def test_engines_taking_turns_resume_their_own_parked_workflows(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run moving between two engines replays once in each, then each resumes and catches up."""
    entered: list[str] = []

    @workflow("cache:four")
    async def four(ctx: WorkflowContext, n: int) -> int:
        entered.append(ctx.run_id)
        for _ in range(4):
            n = await ctx.step(bump, n)
        return n

    async with (
        durable_engine(workflows=[four]) as first,
        durable_engine(workflows=[four]) as second,
        durable_engine(steps=[bump]) as worker,
    ):
        run_id = await first.start(four, 0)
        for turn in range(5):
            await (first if turn % 2 == 0 else second).run_until_idle()
            await worker.run_until_idle()
        run = await first.get_run(run_id)
        resumed = _resumed(first) + _resumed(second)
        names = [cp.name for cp in await first.checkpoints(run_id)]
    assert ("completed", 4) == (run.status, run.output)
    assert ["cache:bump"] * 4 == names
    # One replay in each engine; every other turn resumed a parked workflow.
    assert (2, 3) == (len(entered), resumed)


@pytest.mark.sqlite_only("changes a recorded checkpoint behind the engine's back, in SQL")
async def test_a_changed_record_the_workflow_passed_makes_the_run_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """A checkpoint the parked workflow passed that changed since is seen: the run replays."""
    entered: list[str] = []

    @workflow("cache:two")
    async def two(ctx: WorkflowContext, n: int) -> int:
        entered.append(ctx.run_id)
        first = await ctx.local_step("first", lambda: n)
        return await ctx.step(bump, first)

    async with durable_engine(workflows=[two]) as engine, durable_engine(steps=[bump]) as worker:
        run_id = await engine.start(two, 1)
        await engine.run_until_idle()
        path = durable_engine.url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as db:
            db.execute(
                "UPDATE checkpoints SET rev = rev + 1 WHERE run_id = ? AND seq = 1", (run_id,)
            )
        await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        resumed = _resumed(engine)
    assert ("completed", 2, 0, 2) == (run.status, run.output, resumed, len(entered))


async def test_a_parked_fan_over_a_generator_resumes_with_its_inputs(
    durable_engine: DurableEngineFactory,
) -> None:
    """ctx.all over a one-shot iterator parks and resumes with the same inputs."""

    @workflow("cache:fan")
    async def fan(ctx: WorkflowContext, n: int) -> list[int]:
        return await ctx.all(bump, (i * n for i in range(3)))

    async with durable_engine(workflows=[fan], steps=[bump]) as engine:
        run_id = await engine.start(fan, 10)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        resumed = _resumed(engine)
    # The members' results come back in one claim or in several (on a real server a claim can
    # come between them): the run resumes in place once per claim, one to three times.
    assert ("completed", [1, 11, 21]) == (run.status, run.output)
    assert resumed in (1, 2, 3), resumed
