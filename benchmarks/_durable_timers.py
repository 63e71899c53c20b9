"""
The durable-timer case of the durable-steps benchmark (issue 23), on SQLite, under a virtual clock.

1. **Sleepers**: ``SLEEPERS`` runs each sleeping 1 s (``ctx.sleep(1)``), started in
   ``BATCHES`` batches ``BATCH_GAP_MS`` apart (so their due times fall between polls), then a
   poll every ``POLL_MS`` of virtual time (the clock moved, then ``run_until_idle()``: what
   ``work()`` does at each poll) until all have woken. Every sleep must wake within one poll of
   its ``wake_at``. Per poll the store's connection counts its statements and the SQLite VM
   instructions it ran (a progress handler: the rows it reads); an idle poll (nothing due) with
   ``FEW`` runs asleep and with all of them asleep shows that a poll reads what is due, not
   every run (``O(due)``, through the ``(status, wake_at)`` index of the runs).
2. **Timer against wake_at**: a run that sleeps 1 ms against one that does not; a dispatched
   step whose first attempt fails with ``backoff_ms=1`` (the run waits on ``wake_at``) against
   the same with ``backoff_ms=0`` (stamped and dispatched again in one commit, no wait). The
   difference of each pair is what a timer costs and what a dispatched step's ``wake_at`` costs:
   both a commit that suspends the run with its ``wake_at``, a claim once it is due, and a turn
   that goes on. Interleaved, one engine, ``run_until_idle(advance_time=True)``.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _durable_harness import Figures, interleaved
from _durable_ours import Counts, Variant
from _sqlite_counting import Tally, counted

from effects.durable import Engine, WorkflowContext, current_step, step, workflow
from effects.durable._store import RunQuery
from effects.testing import VirtualClock

__all__ = ["BATCHES", "FEW", "POLL_MS", "SLEEPERS", "case_ours_timers", "query_plans"]

SLEEPERS = 1000
FEW = 10
BATCHES = 10
BATCH_GAP_MS = 37
POLL_MS = 100
#: 2026-01-01T00:00:00Z, where the virtual clock starts.
START = 1_767_225_600.0
#: The VM instructions between two calls of the progress handler (its count's unit).
VM_TICK = 100


@workflow("bench:nap")
async def nap(ctx: WorkflowContext, ms: int) -> int:
    """Sleep *ms* ms."""
    await ctx.sleep(ms / 1000)
    return ms


@workflow("bench:no-nap")
async def no_nap(ctx: WorkflowContext, ms: int) -> int:
    """Return at once (what a run of ``nap`` costs without its sleep)."""
    return ms


@step("bench:fails-once")
async def fails_once(n: int) -> int:
    """Fail attempt 1 (retryable), succeed after."""
    if current_step().attempt == 1:
        msg = "attempt 1 fails"
        raise ConnectionError(msg)
    return n


@workflow("bench:retry-waits")
async def retry_waits(ctx: WorkflowContext, n: int) -> int:
    """A step failing once, its retry 1 ms later: the run waits on the checkpoint's wake_at."""
    return await ctx.step(fails_once, n, retries=2, backoff_ms=1)


@workflow("bench:retry-at-once")
async def retry_at_once(ctx: WorkflowContext, n: int) -> int:
    """The same retried at once: stamped and dispatched again in one commit, no wait."""
    return await ctx.step(fails_once, n, retries=2, backoff_ms=0)


@contextmanager
def vm_counted(engine: Engine) -> Iterator[list[int]]:
    """Count the SQLite VM instructions of *engine*'s connection (in ``VM_TICK`` units)."""
    ticks = [0]

    def tick() -> int:
        ticks[0] += 1
        return 0

    db: sqlite3.Connection = engine.store._conn  # type: ignore[attr-defined]
    db.set_progress_handler(tick, VM_TICK)
    try:
        yield ticks
    finally:
        db.set_progress_handler(None, 0)


async def _poll(engine: Engine, clock: VirtualClock, tally: Tally, ticks: list[int]) -> Figures:
    """One poll ``POLL_MS`` on: its statements and VM ticks."""
    clock.advance(POLL_MS / 1000)
    tally.clear()
    ticks[0] = 0
    await engine.run_until_idle()
    return {"statements": tally.count(), "vm": ticks[0] * VM_TICK}


async def _sleepers(url: str) -> Figures:
    """Case 1 (see the module docstring)."""
    clock = VirtualClock(start=START)
    tally = Tally()
    engine = Engine(url, workflows=[nap], clock=clock)
    with counted(tally, autocheckpoint=True):
        await engine.open()
    try:
        with vm_counted(engine) as ticks:
            few = [await engine.start(nap, 3_600_000) for _ in range(FEW)]  # never due here
            await engine.run_until_idle()
            # The loop's minutely look for unserved versions is made; idle polls follow.
            idle_few = await _poll(engine, clock, tally, ticks)
            run_ids: list[str] = []
            per_batch = SLEEPERS // BATCHES
            for _ in range(BATCHES):
                run_ids += [await engine.start(nap, 1000) for _ in range(per_batch)]
                await engine.run_until_idle()
                clock.advance(BATCH_GAP_MS / 1000)
            idle_all = await _poll(engine, clock, tally, ticks)
            polls: list[Figures] = []
            began = time.perf_counter()
            asleep = RunQuery(workflow=nap.name, status="suspended")
            while (await engine.store.count_runs(asleep)).get("suspended", 0) > FEW:
                if len(polls) > 2 * (BATCHES * BATCH_GAP_MS + 1000) // POLL_MS:
                    msg = "the sleepers did not all wake"
                    raise RuntimeError(msg)
                found = await _poll(engine, clock, tally, ticks)
                found["at"] = round(clock.now() * 1000)
                polls.append(found)
            spent = time.perf_counter() - began
        late: list[int] = []
        woke_at: dict[int, int] = {}
        for run_id in run_ids:
            (sleep,) = await engine.checkpoints(run_id)
            assert sleep.wake_at is not None
            late.append(sleep.updated_at - sleep.wake_at)
            woke_at[sleep.updated_at] = woke_at.get(sleep.updated_at, 0) + 1
        still = [(await engine.get_run(r)).status for r in few]
    finally:
        await engine.close()
    if set(still) != {"suspended"}:
        msg = f"the long sleepers woke: {still}"
        raise RuntimeError(msg)
    waking = [p for p in polls if woke_at.get(int(p["at"]), 0) > 0]
    woken = sum(woke_at.get(int(p["at"]), 0) for p in waking)
    extra_statements = sum(p["statements"] - idle_all["statements"] for p in waking)
    extra_vm = sum(p["vm"] - idle_all["vm"] for p in waking)
    return {
        "sleepers": len(run_ids),
        "max_late_ms": max(late),
        "polls": len(polls),
        "waking_polls": len(waking),
        "most_woken": max(woke_at.values()),
        "idle_few_sql": idle_few["statements"],
        "idle_all_sql": idle_all["statements"],
        "idle_few_vm": idle_few["vm"],
        "idle_all_vm": idle_all["vm"],
        "per_woken_sql": extra_statements / woken,
        "per_woken_vm": extra_vm / woken,
        "poll_ms_real": spent * 1000 / len(polls),
    }


def _variant(definition: Any, expected: int) -> Variant:
    async def once(engine: Engine) -> int:
        run_id = await engine.start(definition, expected)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        if (run.status, run.output) != ("completed", expected):
            msg = f"{definition.name} ended {run.status} with {run.output!r}: {run.error!r}"
            raise RuntimeError(msg)
        return 1

    return once


async def case_ours_timers(url: str, counted_url: str, seconds: float, counts: Counts) -> Figures:
    """Both parts of the case: the sleepers on *counted_url*, the costs on *url*."""
    figures = await _sleepers(counted_url)
    variants = {
        "nap": _variant(nap, 1),
        "no_nap": _variant(no_nap, 1),
        "retry_waits": _variant(retry_waits, 1),
        "retry_at_once": _variant(retry_at_once, 1),
    }
    engine_args: dict[str, Any] = {
        "workflows": [nap, no_nap, retry_waits, retry_at_once],
        "steps": [fails_once],
        "clock": VirtualClock(start=START),
    }
    async with Engine(url, **engine_args) as engine:
        figures.update(await interleaved(engine, variants, seconds))
    engine_args["clock"] = VirtualClock(start=START)
    figures.update(await counts(variants, engine_args))
    return figures


def query_plans(path: str) -> list[tuple[str, str]]:
    """
    ``EXPLAIN QUERY PLAN`` of the reads every poll makes, on a fresh store at *path*: the
    probe and claim of runnable runs and the next due time.
    """
    import asyncio

    from effects.durable._store import sqlite_sql as sq

    async def made() -> None:
        async with Engine(f"sqlite:///{path}"):
            pass

    asyncio.run(made())
    pair = "(?, ?)"
    statements = {
        "runnable probe": (pair.join(sq.RUNNABLE_PROBE), (0, "w", "1")),
        "runnable runs": (pair.join(sq.RUNNABLE_RUNS), (0, "w", "1", 64)),
        "next due": (sq.NEXT_DUE, (0,)),
    }
    plans: list[tuple[str, str]] = []
    db = sqlite3.connect(path)
    try:
        for name, (statement, params) in statements.items():
            rows = db.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
            plans.extend((name, str(row[-1])) for row in rows)
    finally:
        db.close()
    return plans
