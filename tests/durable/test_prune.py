"""
``engine.prune``: every row of the finished runs that ended before ``now - older_than`` goes;
pending, running and suspended runs never do; ``dry_run`` counts and deletes nothing.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

import effects.durable._store.memory as memory_store
import effects.durable._store.postgres as postgres_store
import effects.durable._store.sqlite as sqlite_store
from effects import FatalError
from effects.durable import WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable._store import TaskOutcome
from effects.durable._store.rows import RUN_TABLES
from tests.durable.support import rows

pytestmark = pytest.mark.anyio

DAY = 86_400


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


@step("far", group="far")
async def far(value: Any) -> Any:
    """A step of a group no engine of these tests serves."""
    return value


@workflow("job")
async def job(ctx: WorkflowContext, how: str) -> str:
    """Completes, fails, sleeps a day, or waits on a step, as its input says."""
    if how == "sleep":
        await ctx.sleep("1d")
    if how == "wait":
        await ctx.step(far, None)
    await ctx.step(echo, how)
    if how == "fail":
        raise FatalError("failed on purpose", "on_purpose")
    return how


def counts(url: str, run_ids: list[str]) -> dict[str, int]:
    """How many rows of *run_ids* each table holds (``runs`` and every ``RUN_TABLES`` one)."""
    listed = ", ".join(f"'{r}'" for r in run_ids)
    return {
        table: rows(url, f"SELECT COUNT(*) FROM {table} WHERE run_id IN ({listed})")[0][0]
        for table in ("runs", *RUN_TABLES)
    }


async def test_prune_deletes_every_row_of_old_finished_runs_and_nothing_else(
    durable_engine: DurableEngineFactory,
) -> None:
    """Completed, failed, cancelled runs of 40 days ago go; recent and unfinished ones stay."""
    async with durable_engine(workflows=[job], steps=[echo]) as engine:
        old = [await engine.start(job, how) for how in ("done", "fail")]
        cancelled = await engine.start(job, "wait")
        sleeping = await engine.start(job, "sleep")
        waiting = await engine.start(job, "wait")
        await engine.run_until_idle()
        await engine.cancel(cancelled)
        durable_engine.clock.advance(40 * DAY)  # the sleeper completes now: recently
        recent = await engine.start(job, "done")
        await engine.run_until_idle()
        pending = await engine.start(job, "done")
        before = counts(durable_engine.url, [*old, cancelled])
        would = await engine.prune(older_than="30d", dry_run=True)
        untouched = counts(durable_engine.url, [*old, cancelled])
        pruned = await engine.prune(older_than="30d")
        statuses = {r.run_id: r.status for r in await engine.list_runs()}
    assert before["runs"] == 3
    assert all(before[t] > 0 for t in ("checkpoints", "events"))
    assert (3, 3) == (would, pruned)
    assert before == untouched
    assert dict.fromkeys(("runs", *RUN_TABLES), 0) == counts(durable_engine.url, [*old, cancelled])
    assert {recent: "completed", sleeping: "completed", waiting: "suspended",
            pending: "pending"} == statuses  # fmt: skip


async def test_unfinished_runs_are_never_pruned_however_old(
    durable_engine: DurableEngineFactory,
) -> None:
    """older_than=0 and a year of quiet: pending, running and suspended runs stay."""
    async with durable_engine(workflows=[job]) as engine:
        sleeping = await engine.start(job, "sleep")
        await engine.run_until_idle()
        running = await engine.start(job, "done")
        (held,) = await engine.store.claim_runs(
            workflows=[("job", "1")],
            now=round(durable_engine.clock.now() * 1000),
            lease_until=2**43,
            owner="elsewhere",
            limit=1,
        )
        pending = await engine.start(job, "done")
    durable_engine.clock.advance(365 * DAY)
    async with durable_engine() as engine:
        pruned = await engine.prune(older_than=0)
        left = {r.run_id: r.status for r in await engine.list_runs()}
    assert running == held.run.run_id
    assert 0 == pruned
    assert {sleeping: "suspended", running: "running", pending: "pending"} == left


async def test_statuses_choose_what_goes_and_the_cutoff_is_strict(
    durable_engine: DurableEngineFactory,
) -> None:
    """Only failed runs; a run that ended exactly older_than ago stays, 1 ms more and it goes."""
    async with durable_engine(workflows=[job], steps=[echo]) as engine:
        done = await engine.start(job, "done")
        failed = await engine.start(job, "fail")
        await engine.run_until_idle()
        ended = (await engine.get_run(failed)).updated_at
        durable_engine.clock.advance(10)
        now = round(durable_engine.clock.now() * 1000)
        exactly = await engine.prune(older_than=(now - ended) / 1000, statuses=("failed",))
        durable_engine.clock.advance(0.001)
        later = await engine.prune(older_than=(now - ended) / 1000, statuses=["failed", "failed"])
        left = [r.run_id for r in await engine.list_runs()]
    assert (0, 1, [done]) == (exactly, later, left)


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"older_than": -1}, ValueError, "older_than"),
        ({"older_than": math.nan}, ValueError, "older_than"),
        ({"older_than": math.inf}, ValueError, "older_than"),
        ({"older_than": True}, ValueError, "older_than"),
        ({"older_than": "a month"}, ValueError, "older_than"),
        ({"older_than": None}, TypeError, "older_than"),
        ({"older_than": 1, "statuses": ("running",)}, ValueError, "'running' is not one"),
        ({"older_than": 1, "statuses": ("suspended",)}, ValueError, "never pruned"),
        ({"older_than": 1, "statuses": ("bogus",)}, ValueError, "'bogus'"),
        ({"older_than": 1, "statuses": "completed"}, TypeError, "sequence"),
        ({"older_than": 1, "statuses": (None,)}, TypeError, "strings"),
    ],
    ids=["negative", "nan", "inf", "bool", "garbage", "none", "running", "suspended", "bogus",
         "str", "none-status"],
)  # fmt: skip
async def test_odd_arguments_are_refused_and_nothing_goes(
    durable_engine: DurableEngineFactory,
    kwargs: dict[str, Any],
    error: type[Exception],
    fragment: str,
) -> None:
    """A bad older_than or a status that is not finished: refused, every run kept."""
    async with durable_engine(workflows=[job], steps=[echo]) as engine:
        await engine.start(job, "done")
        await engine.run_until_idle()
        durable_engine.clock.advance(DAY)
        with pytest.raises(error, match=fragment):
            await engine.prune(**kwargs)
        left = await engine.list_runs()
    assert 1 == len(left)


async def test_an_older_than_longer_than_the_clock_has_run_prunes_nothing(
    durable_engine: DurableEngineFactory,
) -> None:
    """10**300 seconds, a timedelta of 999,999,999 days: 0, nothing deleted, no overflow."""
    async with durable_engine(workflows=[job], steps=[echo]) as engine:
        await engine.start(job, "done")
        await engine.run_until_idle()
        huge = await engine.prune(older_than=10**300)
        longest = await engine.prune(older_than=datetime.timedelta(days=999_999_999))
        left = await engine.list_runs()
    assert (0, 0, 1) == (huge, longest, len(left))


async def test_prune_goes_in_batches_until_every_old_run_is_gone(
    durable_engine: DurableEngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With batches of 3, seven finished runs go in three transactions; all are counted."""
    for module in (memory_store, sqlite_store, postgres_store):
        monkeypatch.setattr(module, "PRUNE_BATCH", 3)
    async with durable_engine(workflows=[job], steps=[echo]) as engine:
        for _ in range(7):
            await engine.start(job, "done")
        await engine.run_until_idle()
        durable_engine.clock.advance(DAY)
        pruned = await engine.prune(older_than="1h")
        left = await engine.list_runs()
    assert (7, []) == (pruned, left)


async def test_a_finished_run_whose_attempt_is_still_out_waits_for_it(
    durable_engine: DurableEngineFactory,
) -> None:
    """A cancelled run whose claimed attempt still runs: kept until the worker reports."""
    async with durable_engine(workflows=[job]) as engine:
        run_id = await engine.start(job, "done")
        await engine.run_until_idle()
        (claimed,) = await engine.store.claim_tasks(
            groups=["default"], now=2**42, claim_until=2**43, worker="w", limit=1
        )
        await engine.cancel(run_id)
        durable_engine.clock.advance(DAY)
        kept = await engine.prune(older_than="1h")
        await engine.store.record_result(claimed, "w", TaskOutcome(output='"x"'), 0)
        pruned = await engine.prune(older_than="1h")
    assert (0, 1) == (kept, pruned)
