"""
Durable steps of ``effects.durable`` beside DBOS Transact, both on SQLite, in one run.

Run: ``.venv/bin/python benchmarks/durable_steps.py [--seconds S] [--batch N] [--workers 1,2]
[--rounds N] [--only PREFIXES] [--skip PREFIXES]``
(``--store postgresql://...``, or ``--store postgresql`` for a throwaway server, runs
``benchmarks/durable_steps_pg.py`` instead: the same cases on PostgreSQL, beside DBOS and
procrastinate on the same server; its other options are passed on).
(DBOS comes with ``pip install 'effect-schedules[bench]'``; without it its columns are skipped).

Every case runs in a fresh interpreter (this script again, with ``--case NAME``) on a fresh
SQLite file in a temporary folder, so no case sees another's threads, caches or tables. A case
runs for ``--seconds`` after an untimed warm-up, and prints one JSON line that the parent reads.
Each side runs at its own durability default and, for the ratios, at equal durability:

- **ours, default**: WAL with ``synchronous=NORMAL`` (nothing committed is lost on a crash of the
  process; a power loss may undo the last commits);
- **ours, full**: WAL with ``synchronous=FULL`` (``?synchronous=full`` in the store URL: every
  commit is fsynced, so a power loss loses nothing committed either);
- **DBOS**: its SQLite system database as it makes it: a rollback journal (``journal_mode=DELETE``)
  with SQLite's default ``synchronous=FULL``, which is power-loss durable too. So "equal
  durability" compares ours-full with DBOS; a rollback journal costs more fsyncs per commit than
  WAL, which the floor rows show.

The cases:

1. **Local steps**: a workflow of 10 local steps (each adds one to a number), started and run to
   completion one run after another (ours: ``engine.start`` + ``engine.run_until_idle``; DBOS: the
   ``@DBOS.workflow`` called directly, its steps ``@DBOS.step``). Steps are ``async def`` on both
   sides; ours also with ``def`` steps (which the engine runs in a thread), DBOS also with a
   ``def`` workflow of ``def`` steps (its native path; its async path hops to a thread for every
   database call). steps/s = 10 x runs / elapsed, start and finish included.
2. **Dispatched round trips**: a workflow that dispatches one step (adding one) to a worker and
   completes with its output. The orchestrating engine runs in the case process (``work()``),
   each worker is a real subprocess running an ``Engine`` that serves the step. Runs are started
   in batches of ``--batch`` and a batch is done when all its runs completed; round trips/s =
   runs / elapsed. DBOS has no dispatched step; the nearest are its queues, with workers in
   processes that listen to the queue (``DBOS.listen_queues``), measured two ways:
   (a) **queued workflows**: the case process enqueues a workflow (one ``@DBOS.step``) on the
   queue and waits for its result; a worker dequeues and runs it (the target compares with this);
   (b) **parent + queued child**: a workflow in the case process enqueues that child workflow
   and waits for its result, which is what our round trip does (a durable run whose step runs
   elsewhere). Both sides poll across processes at the same interval, ``--poll-ms`` (ours:
   ``work(poll_ms=)`` in the orchestrator and the workers; DBOS: the queue's
   ``polling_interval_sec`` and, in (b), the parent's ``get_result(polling_interval_sec=)``); the
   case process itself checks for completed runs every 1 ms on both sides.
3. **One durable retry**: the dispatched step fails on its first attempt and succeeds on its
   second (``retries=2, backoff_ms=0``): the failure is recorded, the run wakes, stamps
   ``wake_at``, re-dispatches and a worker runs attempt 2. Measured in one process (one engine
   serving the workflow and the step, runs one after another, no polling), interleaved with the
   same workflow without the failure; the cost is the difference per run. DBOS has no durable
   retry to compare with: its step retries run in memory inside the workflow's process.
4. **Floor**: a hand-written loop of one ``INSERT`` + ``COMMIT`` per step (``sqlite3``, one
   connection) in each setting: WAL+NORMAL, WAL+FULL and DELETE+FULL (DBOS's). The floors are
   measured at the start and again at the end of each round; the best is kept and their spread
   printed, since an fsync's cost moves a lot on a disk shared with other processes.

The cases of issue 10 (``--beats``, ``--fan`` and ``--concurrent`` set their sizes):

5. **Heartbeats**: a workflow dispatching one step whose handler beats ``--beats`` times,
   yielding ``BEAT_YIELDS`` event-loop turns after each beat (its "work"), one engine serving the
   workflow and the step, runs one after another; on the liveness path (the step has
   ``timeout_ms``; the engine's lost-dispatch lease does not apply to it) and on a durable step
   with the engine's ``remote_redispatch_ms`` lease, both windows ``BEAT_WINDOW_MS``. Four
   handlers, interleaved: **no beats**; **throttled**: every beat within the half-window, so the
   engine keeps it in memory; **persisted**: the engine's clock (``SkipClock``, the wall clock
   plus an offset) skips half a window before each beat, so every beat is due and the engine
   writes it; **naive**: an awaited ``store.heartbeat`` per beat, what an engine without the
   throttle does. Cost per beat = (handler's time - no beats' time) / beats; the case checks, on
   the checkpoint's revision, that throttled beats wrote nothing and the others one row each.
   On the liveness path the dispatching turn waits in this process, so each beat also wakes it.
6. **Fan**: ``ctx.all`` of ``--fan`` steps against the same steps one ``ctx.step`` after another,
   interleaved in one case: (a) one engine serving the steps too (no polling; write transactions
   and statements per run counted on a second engine whose connection counts them, see
   ``_sqlite_counting.py``); (b) the steps served by worker processes (as in case 2).
7. **Queue admission**: batches of ``--batch`` runs started together, each dispatching one step,
   one process: without a queue, through a ``Queue`` with a slot for every run, and through a
   queue of concurrency 1 (all but one attempt wait and are admitted as results land); cost per
   attempt against no queue, and write transactions per attempt.
8. **Group commit**: ``--concurrent`` runs of the 10-step local workflow started together and
   run at once (ours: ``asyncio.gather`` of ``engine.start`` then ``run_until_idle``); at FULL
   the store commits the writes of one event-loop turn together (one fsync). Beside it: ours
   with group commit switched off (the benchmark flips the store's private switch; the engine
   has no option for it), DBOS running as many workflows at once (``async def`` ones gathered on
   one event loop, and ``def`` ones started with ``DBOS.start_workflow`` in its thread pool), the
   runs-one-after-another rows of case 1 and the WAL+FULL and DELETE+FULL floors.

``--rounds N`` measures every case N times, interleaved, and keeps each case's best round (for
the cases timing several variants, each variant's best time); the spread is printed.
``--only`` and ``--skip`` pick cases by key prefix (``ours-heartbeat``, ``ours-fan``,
``ours-queue``, ``ours-concurrent``, ``dbos-concurrent``, ``floor``, ...).

Targets (issue 7): local steps >= 10x DBOS's steps/s at equal durability and >= 0.4x the floor;
dispatched round trips >= 3x DBOS's queued workflows/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import io
import json
import os
import select
import signal
import sqlite3
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from functools import partial
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, NamedTuple, TypeVar

from _sqlite_counting import Tally, counted

from effects.durable import (
    Engine,
    Queue,
    SqliteStore,
    StepDef,
    StepOptions,
    Store,
    Task,
    WorkflowContext,
    WorkflowDef,
    current_step,
    step,
    workflow,
)

SCRIPT = Path(__file__).resolve()
STEPS_PER_RUN = 10
STEP_NAMES = tuple(f"step-{i}" for i in range(STEPS_PER_RUN))
QUEUE = "bench-steps"
#: The flow-control queues of the admission case: one never full, one of concurrency 1.
QUEUE_FREE = "bench-free"
QUEUE_ONE = "bench-one"
#: The case process's own check for finished runs, on both sides (seconds).
WAIT_POLL = 0.001
#: How long a worker may take to start, and to stop once asked.
START_TIMEOUT = 60.0
STOP_GRACE = 10.0

Figures = dict[str, float]
T = TypeVar("T")
#: The floor's settings: case key suffix and how the tables name it.
FLOORS = (("wal-normal", "WAL+NORMAL"), ("wal-full", "WAL+FULL"), ("delete-full", "DELETE+FULL"))
#: Our two durability settings, and how the tables name them.
SETTINGS = ("normal", "full")
JOURNAL = {"normal": "WAL+NORMAL", "full": "WAL+FULL", "full-ungrouped": "WAL+FULL"}

# -- our workflows and steps ----------------------------------------------------------------------


async def _add_one(n: int) -> int:
    return n + 1


def _add_one_sync(n: int) -> int:
    return n + 1


@workflow("bench:ten-async")
async def ten_async(ctx: WorkflowContext, n: int) -> int:
    """Ten local ``async def`` steps, each adding one."""
    for name in STEP_NAMES:
        n = await ctx.local_step(name, partial(_add_one, n))
    return n


@workflow("bench:ten-sync")
async def ten_sync(ctx: WorkflowContext, n: int) -> int:
    """Ten local ``def`` steps (run in a thread), each adding one."""
    for name in STEP_NAMES:
        n = await ctx.local_step(name, partial(_add_one_sync, n))
    return n


@step("bench:bump")
async def bump(n: int) -> int:
    """The dispatched step: add one."""
    return n + 1


@step("bench:flaky", retries=2, backoff_ms=0)
async def flaky(n: int) -> int:
    """Add one, failing on the first attempt."""
    if current_step().attempt == 1:
        msg = "fails on its first attempt"
        raise RuntimeError(msg)
    return n + 1


@workflow("bench:one-step")
async def one_step(ctx: WorkflowContext, n: int) -> int:
    """Dispatch ``bump`` and return its output."""
    return await ctx.step(bump, n)


@workflow("bench:one-flaky-step")
async def one_flaky_step(ctx: WorkflowContext, n: int) -> int:
    """Dispatch ``flaky`` (one durable retry) and return its output."""
    return await ctx.step(flaky, n)


@workflow("bench:fan")
async def fan(ctx: WorkflowContext, size: int) -> int:
    """Dispatch ``bump`` for 0 .. size - 1 at once (``ctx.all``); the outputs' sum."""
    return sum(await ctx.all(bump, range(size)))


@workflow("bench:sequence")
async def sequence(ctx: WorkflowContext, size: int) -> int:
    """The same steps as ``fan``, dispatched one after another; the outputs' sum."""
    total = 0
    for n in range(size):
        total += await ctx.step(bump, n)
    return total


def fan_output(size: int) -> int:
    """What ``fan`` and ``sequence`` return."""
    return size * (size + 1) // 2


@workflow("bench:one-step-free-queue")
async def one_step_free_queue(ctx: WorkflowContext, n: int) -> int:
    """``one_step`` admitted through a queue that always has a free slot."""
    return await ctx.step(bump, n, queue=QUEUE_FREE)


@workflow("bench:one-step-queue-of-one")
async def one_step_queue_of_one(ctx: WorkflowContext, n: int) -> int:
    """``one_step`` admitted through a queue of concurrency 1."""
    return await ctx.step(bump, n, queue=QUEUE_ONE)


def store_url(path: Path, setting: str) -> str:
    """Our store URL for *path* at *setting* (``normal``: the default, or ``full``)."""
    return f"sqlite:///{path}" + ("?synchronous=full" if setting == "full" else "")


# -- processes ------------------------------------------------------------------------------------


def _exit_when_parent_leaves() -> None:
    """SIGTERM this process once its stdin, a pipe from its parent, closes (even on a kill -9)."""
    if not stat.S_ISFIFO(os.fstat(0).st_mode):
        return  # run by hand: there is no parent to watch

    def watch() -> None:
        # The raw descriptor: a daemon thread blocked in a buffered read would abort the
        # interpreter's shutdown.
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _raise_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit`` so ``finally`` blocks stop workers and delete files."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


class Children:
    """Subprocesses that are stopped when the block ends: stdin closed, then SIGTERM, then kill."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._procs: list[tuple[subprocess.Popen[str], Path]] = []

    def __enter__(self) -> Children:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start this script with *args*; wait until it prints ``ready``."""
        log = self._folder / f"child-{len(self._procs)}.log"
        with log.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self._procs.append((proc, log))
        self._wait_ready(proc, log)
        return proc

    @staticmethod
    def _wait_ready(proc: subprocess.Popen[str], log: Path) -> None:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([proc.stdout], [], [], left)
            if readable:
                line = proc.stdout.readline()
                if line.strip() == "ready":
                    return
                if not line:
                    break
        proc.kill()
        msg = f"worker {proc.args!r} did not start:\n{log.read_text()[-2000:]}"
        raise RuntimeError(msg)

    def check(self) -> None:
        """Raise ``RuntimeError`` (with its log's tail) if a child has exited."""
        for proc, log in self._procs:
            if proc.poll() is not None:
                msg = (
                    f"worker {proc.args!r} exited with {proc.returncode}:\n"
                    f"{log.read_text()[-2000:]}"
                )
                raise RuntimeError(msg)

    async def watch(self, work: Awaitable[T], *also: asyncio.Task[Any]) -> T:
        """Await *work*, but fail at once if a child exits or one of the tasks *also* ends."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait(
                    {task, *also}, timeout=0.2, return_when="FIRST_COMPLETED"
                )
                if task in done:
                    return task.result()
                for ended in done:
                    msg = f"{ended.get_name()} ended while runs were still going"
                    raise RuntimeError(msg) from (None if ended.cancelled() else ended.exception())
                self.check()
        finally:
            task.cancel()

    def stop(self) -> None:
        """Ask every child to stop (close its stdin), then make sure it has."""
        procs, self._procs = self._procs, []
        for proc, _ in procs:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
        deadline = time.monotonic() + STOP_GRACE
        for proc, _ in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(2)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


# -- timing ---------------------------------------------------------------------------------------


def _timed_loop(seconds: float, once: Callable[[], int]) -> tuple[int, float]:
    """Call *once* (returning a count) until *seconds* have passed, at least once."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        count += once()
        now = time.perf_counter()
        if now >= deadline:
            return count, now - start


async def _timed_loop_async(
    seconds: float, once: Callable[[], Awaitable[int]]
) -> tuple[int, float]:
    """Like ``_timed_loop`` for a coroutine function."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        count += await once()
        now = time.perf_counter()
        if now >= deadline:
            return count, now - start


def _rate(count: int, elapsed: float) -> Figures:
    return {"count": count, "seconds": elapsed, "rate": count / elapsed}


# -- floor ----------------------------------------------------------------------------------------


def case_floor(folder: Path, journal: str, synchronous: str, seconds: float) -> Figures:
    """One INSERT + COMMIT per step, hand-written, in *journal* mode at *synchronous*."""
    db = sqlite3.connect(folder / "floor.db", isolation_level=None)
    try:
        mode = db.execute(f"PRAGMA journal_mode={journal}").fetchone()[0]
        if mode.lower() != journal.lower():
            msg = f"SQLite refused journal_mode={journal} (it is {mode})"
            raise RuntimeError(msg)
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute(
            "CREATE TABLE steps (run_id TEXT NOT NULL, seq INTEGER NOT NULL,"
            " output TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
        )
        seq = 0

        def hundred() -> int:
            nonlocal seq
            for _ in range(100):
                seq += 1
                db.execute("BEGIN")
                db.execute("INSERT INTO steps VALUES (?, ?, ?)", ("run", seq, "1"))
                db.execute("COMMIT")
            return 100

        hundred()
        return _rate(*_timed_loop(seconds, hundred))
    finally:
        db.close()


# -- ours -----------------------------------------------------------------------------------------


async def case_ours_local(url: str, sync_steps: bool, seconds: float) -> Figures:
    """Runs of the 10-step local workflow, one after another."""
    definition = ten_sync if sync_steps else ten_async
    async with Engine(url, workflows=[definition]) as engine:

        async def one_run() -> int:
            await engine.start(definition, 0)
            await engine.run_until_idle()
            return STEPS_PER_RUN

        await one_run()
        figures = _rate(*await _timed_loop_async(seconds, one_run))
        runs = round(figures["count"]) // STEPS_PER_RUN + 1
        done = await engine.list_runs(status="completed", limit=runs + 1)
        if runs != len(done) or any(run.output != STEPS_PER_RUN for run in done):
            msg = f"expected {runs} runs completed with output {STEPS_PER_RUN}, got {done[:3]}"
            raise RuntimeError(msg)
    return figures


async def _wait_completed(
    engine: Engine, run_ids: Sequence[str], outputs: Sequence[Any] | None = None
) -> None:
    """
    Wait (polling every ``WAIT_POLL``) until every run completed with its output in *outputs*
    (by default: run *n* with ``n + 1``, the output of ``one_step`` started with *n*).
    """
    for n, run_id in enumerate(run_ids):
        while (run := await engine.get_run(run_id)).status in ("pending", "running", "suspended"):
            await asyncio.sleep(WAIT_POLL)
        if run.status != "completed" or run.output != (n + 1 if outputs is None else outputs[n]):
            msg = f"run {run_id} ended {run.status} with {run.output!r} {run.error!r}"
            raise RuntimeError(msg)


async def case_ours_dispatch(
    folder: Path, url: str, *, workers: int, seconds: float, batch: int, poll_ms: int
) -> Figures:
    """Batches of runs dispatching one step to *workers* worker processes."""
    # The workers are stopped after the engine has closed its store: a signal that lands just
    # after the engine's BEGIN IMMEDIATE can leave its write lock held until the connection
    # closes, and a worker waiting for that lock would not stop.
    with Children(folder) as children:
        async with Engine(url, workflows=[one_step]) as engine:
            for _ in range(workers):
                children.start("--worker", "ours", "--store", url, "--poll-ms", str(poll_ms))
            loop = asyncio.get_running_loop()
            orchestrator = loop.create_task(engine.work(poll_ms=poll_ms), name="engine.work()")
            try:

                async def one_batch() -> int:
                    run_ids = [await engine.start(one_step, n) for n in range(batch)]
                    await children.watch(_wait_completed(engine, run_ids), orchestrator)
                    return batch

                await one_batch()
                figures = _rate(*await _timed_loop_async(seconds, one_batch))
            finally:
                engine.stop()
                await orchestrator
    return figures


async def case_ours_retry(url: str, seconds: float) -> Figures:
    """Per-run time of a dispatched step with one durable retry, and without, interleaved."""
    async with Engine(url, workflows=[one_step, one_flaky_step], steps=[bump, flaky]) as engine:
        spent = {one_step.name: 0.0, one_flaky_step.name: 0.0}
        runs = {one_step.name: 0, one_flaky_step.name: 0}
        last = ""

        async def block() -> int:
            nonlocal last
            for definition in (one_step, one_flaky_step):
                start = time.perf_counter()
                for n in range(5):
                    last = await engine.start(definition, n)
                    await engine.run_until_idle()
                spent[definition.name] += time.perf_counter() - start
                runs[definition.name] += 5
            return 10

        await block()
        for name in spent:
            spent[name] = 0.0
            runs[name] = 0
        await _timed_loop_async(seconds, block)
        (checkpoint,) = await engine.checkpoints(last)
        if (checkpoint.attempts, checkpoint.status) != (2, "completed"):
            msg = f"the flaky step should complete on attempt 2, got {checkpoint!r}"
            raise RuntimeError(msg)
    plain = spent[one_step.name] / runs[one_step.name]
    retried = spent[one_flaky_step.name] / runs[one_flaky_step.name]
    return {
        "runs": runs[one_step.name] + runs[one_flaky_step.name],
        "plain_us": plain * 1e6,
        "retried_us": retried * 1e6,
        "cost_us": (retried - plain) * 1e6,
    }


async def worker_ours(url: str, poll_ms: int) -> None:
    """A worker process: an Engine serving the steps, until SIGTERM or its stdin closes."""
    async with Engine(url, steps=[bump, flaky]) as engine:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, engine.stop)
        print("ready", flush=True)
        await engine.work(poll_ms=poll_ms)


async def counted_figures(
    store: str | Store,
    variants: dict[str, Callable[[Engine], Awaitable[int]]],
    **engine_args: Any,
) -> Figures:
    """
    Write transactions (``{kind}_tx``) and statements (``{kind}_sql``) per unit of each
    variant, on a fresh engine over *store* whose connection counts them; each variant runs once
    uncounted first. These do not depend on the machine's load.
    """
    tally = Tally()
    engine = Engine(store, **engine_args)
    with counted(tally, autocheckpoint=True):
        await engine.open()  # the store connects here
    figures: Figures = {}
    try:
        for kind, once in variants.items():
            await once(engine)
            tally.clear()
            units = await once(engine)
            figures[f"{kind}_tx"] = tally.writes / units
            figures[f"{kind}_sql"] = tally.count() / units
    finally:
        await engine.close()
    return figures


async def case_ours_fan(url: str, counted_url: str, size: int, seconds: float) -> Figures:
    """A fan of *size* steps against *size* steps one after another, one engine serving all."""

    def variant(definition: WorkflowDef[int, int]) -> Callable[[Engine], Awaitable[int]]:
        async def once(engine: Engine) -> int:
            run_id = await engine.start(definition, size)
            await engine.run_until_idle()
            run = await engine.get_run(run_id)
            if (run.status, run.output) != ("completed", fan_output(size)):
                msg = f"{definition.name} run ended {run.status} with {run.output!r} {run.error!r}"
                raise RuntimeError(msg)
            return 1

        return once

    variants = {"fan": variant(fan), "sequence": variant(sequence)}
    async with Engine(url, workflows=[fan, sequence], steps=[bump]) as engine:
        figures = await _interleaved(engine, variants, seconds)
    counts = await counted_figures(counted_url, variants, workflows=[fan, sequence], steps=[bump])
    return {**figures, **counts}


async def _interleaved(
    engine: Engine, variants: dict[str, Callable[[Engine], Awaitable[int]]], seconds: float
) -> Figures:
    """
    Each variant once (untimed), then the variants in turn, a block at a time, until *seconds*
    have passed; the median over the blocks of each variant's time per unit, in microseconds,
    as ``{kind}_us`` (a median, so that one slow fsync of a shared disk does not move a
    difference between variants).
    """
    times: dict[str, list[float]] = {kind: [] for kind in variants}

    async def block() -> int:
        for kind, once in variants.items():
            start = time.perf_counter()
            done = await once(engine)
            times[kind].append((time.perf_counter() - start) / done)
        return 1

    await block()
    for found in times.values():
        found.clear()
    blocks, _ = await _timed_loop_async(seconds, block)
    figures: Figures = {f"{kind}_us": statistics.median(times[kind]) * 1e6 for kind in variants}
    figures["blocks"] = blocks
    return figures


async def case_ours_fan_procs(
    folder: Path, url: str, *, workers: int, size: int, seconds: float, poll_ms: int
) -> Figures:
    """The fan against the sequence, their steps served by *workers* worker processes."""
    with Children(folder) as children:
        async with Engine(url, workflows=[fan, sequence]) as engine:
            for _ in range(workers):
                children.start("--worker", "ours", "--store", url, "--poll-ms", str(poll_ms))
            loop = asyncio.get_running_loop()
            orchestrator = loop.create_task(engine.work(poll_ms=poll_ms), name="engine.work()")

            def variant(definition: WorkflowDef[int, int]) -> Callable[[Engine], Awaitable[int]]:
                async def once(engine: Engine) -> int:
                    run_id = await engine.start(definition, size)
                    waited = _wait_completed(engine, [run_id], [fan_output(size)])
                    await children.watch(waited, orchestrator)
                    return 1

                return once

            try:
                variants = {"fan": variant(fan), "sequence": variant(sequence)}
                figures = await _interleaved(engine, variants, seconds)
            finally:
                engine.stop()
                await orchestrator
    return figures


async def case_ours_queue(url: str, counted_url: str, batch: int, seconds: float) -> Figures:
    """
    Batches of runs dispatching one step: without a queue, through a queue with a free slot for
    every run, and through a queue of concurrency 1 (all but one attempt wait for admission).
    """
    definitions = {
        "plain": one_step,
        "free": one_step_free_queue,
        "saturated": one_step_queue_of_one,
    }
    engine_args: dict[str, Any] = {
        "workflows": list(definitions.values()),
        "steps": [bump],
        "queues": [Queue(QUEUE_FREE, concurrency=batch), Queue(QUEUE_ONE, concurrency=1)],
    }
    last: dict[str, list[str]] = {}

    def variant(kind: str) -> Callable[[Engine], Awaitable[int]]:
        definition = definitions[kind]

        async def once(engine: Engine) -> int:
            # Started together, as concurrent callers would: under FULL they share a commit.
            run_ids = await asyncio.gather(*(engine.start(definition, n) for n in range(batch)))
            await engine.run_until_idle()
            last[kind] = list(run_ids)
            return batch

        return once

    variants = {kind: variant(kind) for kind in definitions}
    async with Engine(url, **engine_args) as engine:
        figures = await _interleaved(engine, variants, seconds)
        for run_ids in last.values():
            await _wait_completed(engine, run_ids)
        # The saturated queue did make attempts wait: count the runs with a step.queued event.
        waited = 0
        for run_id in last["saturated"]:
            events = await engine.events(run_id)
            waited += any(event.name == "step.queued" for event in events)
        if batch > 1 and waited == 0:
            msg = "no attempt waited for the queue of concurrency 1"
            raise RuntimeError(msg)
        figures["waited"] = waited
    counts = await counted_figures(counted_url, variants, **engine_args)
    return {**figures, **counts}


def _ungroup(store: SqliteStore) -> None:
    """
    Switch the store's group commit off (a benchmark control only: the engine has no option for
    it), so that each write is a transaction of its own, fsynced alone under FULL.
    """
    if getattr(store, "_grouped", None) is not True:
        msg = f"{store!r} has no group commit switch to turn off (SqliteStore._grouped)"
        raise RuntimeError(msg)
    setattr(store, "_grouped", False)  # noqa: B010 - a private switch, named on purpose


async def case_ours_concurrent(
    url: str, counted_url: str, *, runs: int, grouped: bool, seconds: float
) -> Figures:
    """Batches of *runs* runs of the 10-step local workflow, started together, run together."""

    async def once(engine: Engine) -> int:
        run_ids = await asyncio.gather(*(engine.start(ten_async, 0) for _ in range(runs)))
        await engine.run_until_idle()
        last[:] = run_ids
        return runs * STEPS_PER_RUN

    last: list[str] = []
    store = SqliteStore(url)
    if not grouped:
        _ungroup(store)
    async with Engine(store, workflows=[ten_async]) as engine:
        await once(engine)
        figures = _rate(*await _timed_loop_async(seconds, partial(once, engine)))
        for run_id in last:
            run = await engine.get_run(run_id)
            if (run.status, run.output) != ("completed", STEPS_PER_RUN):
                msg = f"run {run_id} ended {run.status} with {run.output!r} {run.error!r}"
                raise RuntimeError(msg)
    counted_store = SqliteStore(counted_url)
    if not grouped:
        _ungroup(counted_store)
    counts = await counted_figures(counted_store, {"step": once}, workflows=[ten_async])
    return {**figures, **counts}


# -- heartbeats -----------------------------------------------------------------------------------

#: The handler variants of the heartbeat case: no beats, beats inside the half-window (kept in
#: memory), beats each past the half-window (each persisted), and a store write per beat.
BEAT_KINDS = ("none", "throttled", "persisted", "naive")
#: The liveness window (``timeout_ms``) or the lost-dispatch lease of the heartbeat case (ms).
BEAT_WINDOW_MS = 10_000
#: Event-loop turns a handler yields after each beat, in every variant: enough for a persisted
#: beat's write to finish (under group commit it is queued, flushed, then resumed), so that the
#: next beat is never skipped for a write still in flight.
BEAT_YIELDS = 3
#: The engine's lease in the heartbeat case: its clock jumps by half a window per persisted
#: beat, and no claim or run lease may lapse meanwhile.
LONG_LEASE_MS = 10**9


class SkipClock:
    """
    The wall clock plus an offset that the ``persisted`` handler moves by half a window before
    each beat, so that every beat is due for a write without the run sleeping. It has no
    ``advance``, so the engine treats it as a real clock: no wait is parked.
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        """Epoch seconds, skipped ahead."""
        return time.time() + self.offset

    def skip(self, ms: int) -> None:
        """Move the clock *ms* ahead."""
        self.offset += ms / 1000

    def sleep(self, seconds: float) -> None:
        """Block the thread for *seconds*."""
        time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        """Suspend the task for *seconds*."""
        await asyncio.sleep(seconds)


def _dispatching(name: str, definition: StepDef[int, int]) -> WorkflowDef[int, int]:
    @workflow(name)
    async def dispatch(ctx: WorkflowContext, n: int) -> int:
        return await ctx.step(definition, n)

    return dispatch


def heartbeat_defs(
    path: str, beats: int, store: Store, clock: SkipClock, spent: dict[str, list[float]]
) -> tuple[dict[str, WorkflowDef[int, int]], list[StepDef[int, int]]]:
    """
    For each of ``BEAT_KINDS``, a workflow dispatching a step whose handler beats *beats* times
    so; *path* is ``liveness`` (the step has ``timeout_ms``) or ``lease`` (a durable step, the
    engine has ``remote_redispatch_ms``). Each handler appends its own duration (seconds) to
    ``spent[kind]``: what runs on the event loop while it yields (a beat's write, the waiting
    turn woken by a beat) is inside it, the run's other commits are not.
    """
    lease = BEAT_WINDOW_MS if path == "lease" else None
    options: StepOptions = {"timeout_ms": BEAT_WINDOW_MS} if path == "liveness" else {}

    async def pause() -> None:
        for _ in range(BEAT_YIELDS):
            await asyncio.sleep(0)

    async def none(n: int) -> int:
        for _ in range(beats):
            await pause()
        return n + 1

    async def throttled(n: int) -> int:
        beat = current_step().heartbeat
        for i in range(beats):
            beat(i)
            await pause()
        return n + 1

    async def persisted(n: int) -> int:
        beat = current_step().heartbeat
        for i in range(beats):
            clock.skip(BEAT_WINDOW_MS // 2)
            beat(i)
            await pause()
        return n + 1

    async def naive(n: int) -> int:
        here = current_step()
        task = Task(0, here.run_id, here.seq, here.step_id, here.name, "default", n, here.attempt)
        for i in range(beats):
            now = round(clock.now() * 1000)
            until = None if lease is None else now + lease
            await store.heartbeat(task, now=now, progress=json.dumps(i), lease_until=until)
            await pause()
        return n + 1

    def timed(kind: str, fn: Callable[[int], Awaitable[int]]) -> Callable[[int], Awaitable[int]]:
        async def handler(n: int) -> int:
            start = time.perf_counter()
            try:
                return await fn(n)
            finally:
                spent[kind].append(time.perf_counter() - start)

        return handler

    handlers = {"none": none, "throttled": throttled, "persisted": persisted, "naive": naive}
    steps = {
        kind: step(f"bench:beat-{kind}", **options)(timed(kind, fn))
        for kind, fn in handlers.items()
    }
    workflows = {kind: _dispatching(f"bench:beats-{kind}", steps[kind]) for kind in handlers}
    return workflows, list(steps.values())


async def case_ours_heartbeat(url: str, path: str, beats: int, seconds: float) -> Figures:
    """
    Per-run time of a dispatched step beating *beats* times in each of ``BEAT_KINDS``, one
    engine serving the workflow and the step, runs one after another, interleaved; and the beats
    each variant persisted per run (the checkpoint's revisions beyond those of ``none``).
    """
    clock = SkipClock()
    store = SqliteStore(url)
    spent: dict[str, list[float]] = {kind: [] for kind in BEAT_KINDS}
    workflows, steps = heartbeat_defs(path, beats, store, clock, spent)
    last: dict[str, str] = {}

    def variant(kind: str) -> Callable[[Engine], Awaitable[int]]:
        async def once(engine: Engine) -> int:
            last[kind] = await engine.start(workflows[kind], 1)
            await engine.run_until_idle()
            return 1

        return once

    async with Engine(
        store,
        workflows=workflows.values(),
        steps=steps,
        clock=clock,
        lease_ms=LONG_LEASE_MS,
        remote_redispatch_ms=BEAT_WINDOW_MS if path == "lease" else None,
    ) as engine:
        figures = await _interleaved(engine, {kind: variant(kind) for kind in BEAT_KINDS}, seconds)
        for kind, durations in spent.items():
            # The warm-up block's durations are left out, as _interleaved leaves out its times.
            figures[f"{kind}_handler_us"] = statistics.median(durations[1:]) * 1e6
        revisions: dict[str, int] = {}
        for kind, run_id in last.items():
            await _wait_completed(engine, [run_id], [2])
            (checkpoint,) = await engine.checkpoints(run_id)
            revisions[kind] = checkpoint.rev
    writes = {kind: revisions[kind] - revisions["none"] for kind in BEAT_KINDS}
    expected = {"none": 0, "throttled": 0, "persisted": beats, "naive": beats}
    if writes != expected:
        msg = f"expected these beats persisted per run: {expected}; got {writes}"
        raise RuntimeError(msg)
    figures.update({f"{kind}_writes": writes[kind] for kind in BEAT_KINDS})
    figures["beats"] = beats
    return figures


# -- DBOS -----------------------------------------------------------------------------------------


class DbosApp(NamedTuple):
    """The DBOS functions, registered by ``dbos_app`` (DBOS needs them before ``launch``)."""

    ten_async: Callable[[int], Coroutine[Any, Any, int]]
    ten_sync: Callable[[int], int]
    child: Callable[[int], Coroutine[Any, Any, int]]
    parent: Callable[[int], Coroutine[Any, Any, int]]


def dbos_app(url: str, executor: str, poll: float, *, listen: Sequence[str]) -> DbosApp:
    """
    Configure DBOS on its system database *url* (a SQLite file here, a PostgreSQL database in
    ``durable_steps_pg.py``) and register the benchmark's functions.
    """
    from dbos import DBOS

    DBOS(
        config={
            "name": "durable-bench",
            "system_database_url": url,
            "log_level": "WARNING",
            # Set, not derived from the code, so every process agrees; one executor id each,
            # so that no process recovers another's workflows at launch.
            "application_version": "bench",
            "executor_id": executor,
        }
    )
    DBOS.listen_queues(list(listen))

    @DBOS.step(name="bench.add-one")
    async def add_one(n: int) -> int:
        return n + 1

    @DBOS.step(name="bench.add-one-sync")
    def add_one_sync(n: int) -> int:
        return n + 1

    @DBOS.workflow(name="bench.ten-async")
    async def dbos_ten_async(n: int) -> int:
        for _ in range(STEPS_PER_RUN):
            n = await add_one(n)
        return n

    @DBOS.workflow(name="bench.ten-sync")
    def dbos_ten_sync(n: int) -> int:
        for _ in range(STEPS_PER_RUN):
            n = add_one_sync(n)
        return n

    @DBOS.workflow(name="bench.child")
    async def child(n: int) -> int:
        return await add_one(n)

    @DBOS.workflow(name="bench.parent")
    async def parent(n: int) -> int:
        handle = await DBOS.enqueue_workflow_async(QUEUE, child, n)
        return await handle.get_result(polling_interval_sec=poll)

    return DbosApp(dbos_ten_async, dbos_ten_sync, child, parent)


@contextlib.contextmanager
def dbos_launched() -> Iterator[None]:
    """``DBOS.launch()`` for the block, ``DBOS.destroy()`` after it."""
    from dbos import DBOS

    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy(destroy_registry=True)


def case_dbos_local(folder: Path, sync_steps: bool, seconds: float) -> Figures:
    """Runs of DBOS's 10-step workflow, called directly, one after another."""
    app = dbos_app(f"sqlite:///{folder / 'dbos.sqlite'}", "bench-local", 1.0, listen=())
    with dbos_launched():
        if sync_steps:

            def one_run() -> int:
                if app.ten_sync(0) != STEPS_PER_RUN:
                    raise RuntimeError("the DBOS workflow returned a wrong result")
                return STEPS_PER_RUN

            one_run()
            return _rate(*_timed_loop(seconds, one_run))

        async def one_run_async() -> int:
            if await app.ten_async(0) != STEPS_PER_RUN:
                raise RuntimeError("the DBOS workflow returned a wrong result")
            return STEPS_PER_RUN

        async def timed() -> Figures:
            await one_run_async()
            return _rate(*await _timed_loop_async(seconds, one_run_async))

        return asyncio.run(timed())


def case_dbos_concurrent(folder: Path, sync_steps: bool, runs: int, seconds: float) -> Figures:
    """
    Batches of *runs* DBOS 10-step workflows at once: ``async def`` ones gathered on one event
    loop, or ``def`` ones started with ``DBOS.start_workflow`` (each in a thread of its pool).
    """
    from dbos import DBOS

    app = dbos_app(f"sqlite:///{folder / 'dbos.sqlite'}", "bench-concurrent", 1.0, listen=())
    with dbos_launched():
        if sync_steps:

            def batch() -> int:
                handles = [DBOS.start_workflow(app.ten_sync, 0) for _ in range(runs)]
                if any(handle.get_result() != STEPS_PER_RUN for handle in handles):
                    raise RuntimeError("a DBOS workflow returned a wrong result")
                return runs * STEPS_PER_RUN

            batch()
            return _rate(*_timed_loop(seconds, batch))

        async def batch_async() -> int:
            results = await asyncio.gather(*(app.ten_async(0) for _ in range(runs)))
            if any(result != STEPS_PER_RUN for result in results):
                raise RuntimeError("a DBOS workflow returned a wrong result")
            return runs * STEPS_PER_RUN

        async def timed() -> Figures:
            await batch_async()
            return _rate(*await _timed_loop_async(seconds, batch_async))

        return asyncio.run(timed())


def case_dbos_dispatch(
    folder: Path, *, workers: int, seconds: float, batch: int, poll_ms: int, via_parent: bool
) -> Figures:
    """Batches of DBOS workflows queued to *workers* worker processes (or enqueued by parents)."""
    from dbos import DBOS

    path = folder / "dbos.sqlite"
    poll = poll_ms / 1000
    app = dbos_app(f"sqlite:///{path}", "bench-orchestrator", poll, listen=())
    with Children(folder) as children, dbos_launched():
        # Registered before the workers launch, so their queue threads find it at once.
        DBOS.register_queue(QUEUE, polling_interval_sec=poll)
        for i in range(workers):
            children.start(
                "--worker", "dbos", "--store", str(path), "--poll-ms", str(poll_ms),
                "--executor", f"bench-worker-{i}",
            )  # fmt: skip

        async def one_batch() -> int:
            if via_parent:
                handles = [await DBOS.start_workflow_async(app.parent, n) for n in range(batch)]
            else:
                handles = [
                    await DBOS.enqueue_workflow_async(QUEUE, app.child, n) for n in range(batch)
                ]
            for n, handle in enumerate(handles):
                got = handle.get_result(polling_interval_sec=WAIT_POLL)
                if await children.watch(got) != n + 1:
                    raise RuntimeError("a DBOS workflow returned a wrong result")
            return batch

        async def timed() -> Figures:
            await one_batch()
            return _rate(*await _timed_loop_async(seconds, one_batch))

        return asyncio.run(timed())


def worker_dbos(path: Path, executor: str, poll_ms: int) -> None:
    """A DBOS worker process listening to the queue, until SIGTERM or its stdin closes."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)
    dbos_app(f"sqlite:///{path}", executor, poll_ms / 1000, listen=(QUEUE,))
    with dbos_launched():
        print("ready", flush=True)
        while not stop.wait(0.1):
            pass


# -- cases ----------------------------------------------------------------------------------------


def cases(workers: Sequence[int], *, with_dbos: bool) -> list[str]:
    """The keys of every case of a run, in the order they are measured."""
    keys = [
        *(f"floor:{setting}" for setting, _ in FLOORS),
        *(f"ours-local:{kind}:{s}" for kind in ("async", "sync") for s in ("normal", "full")),
        *(f"dbos-local:{kind}" for kind in ("async", "sync")),
        *(f"ours-dispatch:{s}:{w}" for w in workers for s in ("normal", "full")),
        *(f"dbos-{how}:{w}" for w in workers for how in ("queued", "parent")),
        *(f"ours-retry:{s}" for s in ("normal", "full")),
        *(f"ours-heartbeat:{path}:{s}" for path in ("liveness", "lease") for s in SETTINGS),
        *(f"ours-fan:{s}" for s in SETTINGS),
        *(f"ours-fan-procs:{s}:{max(workers)}" for s in SETTINGS),
        *(f"ours-queue:{s}" for s in SETTINGS),
        *(f"ours-concurrent:{s}" for s in ("normal", "full", "full-ungrouped")),
        *(f"dbos-concurrent:{kind}" for kind in ("async", "sync")),
    ]
    return [key for key in keys if with_dbos or not key.startswith("dbos")]


def run_case(key: str, args: argparse.Namespace) -> Figures:
    """Measure case *key* in this process (a fresh one, started by ``measure``)."""
    _exit_when_parent_leaves()
    _raise_on_sigterm()
    kind, *rest = key.split(":")
    with tempfile.TemporaryDirectory(prefix="durable-bench-", dir=args.dir) as tmp:
        folder = Path(tmp)
        url_of = partial(store_url, folder / "durable.db")
        if kind == "floor":
            journal, synchronous = rest[0].split("-")
            return case_floor(folder, journal.upper(), synchronous.upper(), args.seconds)
        if kind == "ours-local":
            return asyncio.run(case_ours_local(url_of(rest[1]), rest[0] == "sync", args.seconds))
        if kind == "ours-dispatch":
            return asyncio.run(
                case_ours_dispatch(
                    folder,
                    url_of(rest[0]),
                    workers=int(rest[1]),
                    seconds=args.seconds,
                    batch=args.batch,
                    poll_ms=args.poll_ms,
                )
            )
        if kind == "ours-retry":
            return asyncio.run(case_ours_retry(url_of(rest[0]), args.seconds))
        counted_url = partial(store_url, folder / "counted.db")
        if kind == "ours-heartbeat":
            return asyncio.run(
                case_ours_heartbeat(url_of(rest[1]), rest[0], args.beats, args.seconds)
            )
        if kind == "ours-fan":
            return asyncio.run(
                case_ours_fan(url_of(rest[0]), counted_url(rest[0]), args.fan, args.seconds)
            )
        if kind == "ours-fan-procs":
            return asyncio.run(
                case_ours_fan_procs(
                    folder,
                    url_of(rest[0]),
                    workers=int(rest[1]),
                    size=args.fan,
                    seconds=args.seconds,
                    poll_ms=args.poll_ms,
                )
            )
        if kind == "ours-queue":
            return asyncio.run(
                case_ours_queue(url_of(rest[0]), counted_url(rest[0]), args.batch, args.seconds)
            )
        if kind == "ours-concurrent":
            setting = rest[0].removesuffix("-ungrouped")
            return asyncio.run(
                case_ours_concurrent(
                    url_of(setting),
                    counted_url(setting),
                    runs=args.concurrent,
                    grouped=not rest[0].endswith("-ungrouped"),
                    seconds=args.seconds,
                )
            )
        if kind == "dbos-concurrent":
            return case_dbos_concurrent(folder, rest[0] == "sync", args.concurrent, args.seconds)
        if kind == "dbos-local":
            return case_dbos_local(folder, rest[0] == "sync", args.seconds)
        if kind in ("dbos-queued", "dbos-parent"):
            return case_dbos_dispatch(
                folder,
                workers=int(rest[0]),
                seconds=args.seconds,
                batch=args.batch,
                poll_ms=args.poll_ms,
                via_parent=kind == "dbos-parent",
            )
    msg = f"unknown case {key!r}"
    raise ValueError(msg)


def measure(key: str, args: argparse.Namespace) -> Figures:
    """Run case *key* in a fresh interpreter; return its figures."""
    argv = [
        sys.executable, str(SCRIPT), "--case", key, "--seconds", str(args.seconds),
        "--batch", str(args.batch), "--poll-ms", str(args.poll_ms), "--beats", str(args.beats),
        "--fan", str(args.fan), "--concurrent", str(args.concurrent),
        *(("--dir", args.dir) if args.dir else ()),
    ]  # fmt: skip
    # Its stdin stays open while it runs: a case that sees it close stops (see
    # _exit_when_parent_leaves), so nothing outlives this process.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
        try:
            proc.wait(timeout=120 + 10 * args.seconds)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(STOP_GRACE + 5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
        out.seek(0)
        err.seek(0)
        output, errors = out.read(), err.read()
    if proc.returncode:
        msg = f"case {key} failed (exit {proc.returncode}):\n{errors[-3000:]}"
        raise SystemExit(msg)
    figures: Figures = json.loads(output.strip().splitlines()[-1])
    return figures


# -- the report -----------------------------------------------------------------------------------


def _fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _fmt_ratio(ours: float | None, theirs: float | None) -> str:
    return "n/a" if ours is None or theirs is None or not theirs else f"{ours / theirs:.2f}"


def _target(ours: float | None, theirs: float | None, goal: float) -> str:
    if ours is None or theirs is None or not theirs:
        return ""
    met = "meets" if ours / theirs >= goal else "MISSES"
    return f" ({met} the target of >= {goal:g}x)"


class Report:
    """The figures of a run, printed as tables with ratios."""

    def __init__(self, results: dict[str, Figures], rounds: dict[str, list[Figures]]) -> None:
        self._results = results
        self._rounds = rounds

    def rate(self, key: str) -> float | None:
        """A case's rate, or ``None`` when it was skipped."""
        found = self._results.get(key)
        return None if found is None else found["rate"]

    def print_local(self, out: IO[str]) -> None:
        """The local-steps table."""
        floors = {"normal": "floor:wal-normal", "full": "floor:wal-full"}
        journal = {"normal": "WAL+NORMAL", "full": "WAL+FULL"}
        print("Local steps: runs of a 10-step workflow, one after another (steps/s)", file=out)
        print(f"  {'case':<38}{'SQLite':<14}{'steps/s':>10}{'/ floor':>9}", file=out)
        rows: list[tuple[str, str, str, str]] = []
        for kind, label in (("async", "async def steps"), ("sync", "def steps (in a thread)")):
            for setting in ("normal", "full"):
                key = f"ours-local:{kind}:{setting}"
                rows.append((f"ours, {label}", journal[setting], key, floors[setting]))
        for kind, label in (("async", "async def steps"), ("sync", "def workflow and steps")):
            rows.append(
                (f"DBOS, {label}", "DELETE+FULL", f"dbos-local:{kind}", "floor:delete-full")
            )
        rows.extend(
            ("floor: INSERT + COMMIT per step", name, f"floor:{setting}", "")
            for setting, name in FLOORS
        )
        for label, sqlite_setting, key, floor in rows:
            rate = self.rate(key)
            ratio = _fmt_ratio(rate, self.rate(floor)) if floor else ""
            print(f"  {label:<38}{sqlite_setting:<14}{_fmt_rate(rate):>10}{ratio:>9}", file=out)
        for kind, label in (("async", "async def steps"), ("sync", "def steps")):
            ours, theirs = self.rate(f"ours-local:{kind}:full"), self.rate(f"dbos-local:{kind}")
            goal = _target(ours, theirs, 10) if kind == "async" else ""
            print(f"  ours / DBOS, {label}, both FULL = {_fmt_ratio(ours, theirs)}{goal}", file=out)
        spreads = []
        for setting, name in FLOORS:
            rates = [figures["rate"] for figures in self._rounds.get(f"floor:{setting}", [])]
            if len(rates) > 1:
                spreads.append((name, min(rates), max(rates)))
        if spreads:
            shown = ", ".join(f"{name} {low:,.0f}-{high:,.0f}" for name, low, high in spreads)
            print(f"  the floor moved during the run (best kept): {shown}", file=out)
            if any(high > 1.5 * low for _, low, high in spreads):
                print(
                    "  note: the disk's speed moved by more than 1.5x (other processes share it);"
                    " the FULL figures are only as steady as that"
                    # Two floor measurements a round: at its start and at its end.
                    + (
                        " (try --rounds 3)"
                        if max(len(self._rounds.get(f"floor:{s}", [])) for s, _ in FLOORS) < 6
                        else ""
                    ),
                    file=out,
                )
        for setting in ("normal", "full"):
            ours = self.rate(f"ours-local:async:{setting}")
            bottom = self.rate(floors[setting])
            print(
                f"  ours / floor, async def steps, {journal[setting]} ="
                f" {_fmt_ratio(ours, bottom)}{_target(ours, bottom, 0.4)}",
                file=out,
            )

    def print_dispatch(
        self, out: IO[str], workers: Sequence[int], batch: int, poll_ms: int
    ) -> None:
        """The dispatched round-trips table."""
        print(
            f"Dispatched round trips: batches of {batch} runs, workers in processes, polling"
            f" every {poll_ms} ms (round trips/s)",
            file=out,
        )
        header = "".join(f"{f'{w} worker' + ('s' if w > 1 else ''):>12}" for w in workers)
        print(f"  {'case':<44}{'SQLite':<14}{header}", file=out)
        rows = (
            ("ours: workflow dispatching a step", "WAL+NORMAL", "ours-dispatch:normal"),
            ("ours: workflow dispatching a step", "WAL+FULL", "ours-dispatch:full"),
            ("DBOS: queued workflow (one step)", "DELETE+FULL", "dbos-queued"),
            ("DBOS: workflow + queued child workflow", "DELETE+FULL", "dbos-parent"),
        )
        for label, sqlite_setting, prefix in rows:
            cells = "".join(f"{_fmt_rate(self.rate(f'{prefix}:{w}')):>12}" for w in workers)
            print(f"  {label:<44}{sqlite_setting:<14}{cells}", file=out)
        for w in workers:
            ours = self.rate(f"ours-dispatch:full:{w}")
            queued, parent = self.rate(f"dbos-queued:{w}"), self.rate(f"dbos-parent:{w}")
            print(
                f"  {w} worker{'s' if w > 1 else ''}: ours / DBOS queued workflow, both FULL ="
                f" {_fmt_ratio(ours, queued)}{_target(ours, queued, 3)};"
                f" ours / DBOS workflow + child = {_fmt_ratio(ours, parent)}",
                file=out,
            )

    def print_retry(self, out: IO[str]) -> None:
        """The durable-retry table."""
        print(
            "One durable retry: a dispatched step failing once (backoff_ms=0), one process,"
            " runs one after another (us per run)",
            file=out,
        )
        print(
            f"  {'case':<38}{'SQLite':<14}{'no failure':>11}{'one retry':>11}{'cost':>9}"
            f"{'cost / run':>12}",
            file=out,
        )
        for setting, name in (("normal", "WAL+NORMAL"), ("full", "WAL+FULL")):
            found = self._results.get(f"ours-retry:{setting}")
            if found is None:
                continue
            plain, retried, cost = found["plain_us"], found["retried_us"], found["cost_us"]
            print(
                f"  {'ours: dispatched step':<38}{name:<14}{plain:>11,.0f}{retried:>11,.0f}"
                f"{cost:>9,.0f}{cost / plain:>12.2f}",
                file=out,
            )
        print(
            "  DBOS: n/a (no durable retry: its step retries run in memory in the workflow's"
            " process)",
            file=out,
        )

    def _found(self, key: str) -> Figures | None:
        return self._results.get(key)

    def _spread(self, key: str, field: str) -> tuple[float, float] | None:
        """The lowest and highest *field* of case *key* over its rounds (``None``: one round)."""
        values = [figures[field] for figures in self._rounds.get(key, []) if field in figures]
        return (min(values), max(values)) if len(values) > 1 else None

    def _print_spreads(
        self, out: IO[str], spreads: list[tuple[str, tuple[float, float] | None]]
    ) -> None:
        """One item per figure, ``label low-high``, wrapped between items at 100 columns."""
        shown = [
            f"{label} {low:,.1f}-{high:,.1f}"
            for label, found in spreads
            if found
            for low, high in (found,)
        ]
        line = "  spread over the rounds (best kept):"
        for index, item in enumerate(shown):
            piece = f" {item}{',' if index < len(shown) - 1 else ''}"
            if len(line) + len(piece) > 100 and line.strip():
                print(line, file=out)
                line = "   "
            line += piece
        if shown:
            print(line, file=out)

    def print_heartbeat(self, out: IO[str], beats: int) -> None:
        """The heartbeat table: cost per beat, throttled, persisted and naive."""
        keys = [
            (path, setting, f"ours-heartbeat:{path}:{setting}")
            for path in ("liveness", "lease")
            for setting in SETTINGS
        ]
        if not any(self._found(key) for _, _, key in keys):
            return
        print(
            f"Heartbeats: a dispatched step beating {beats} times, {BEAT_YIELDS} event-loop turns"
            " after each beat; one process, runs one after another (us per beat)",
            file=out,
        )
        print(
            f"  {'step':<42}{'SQLite':<12}{'no beats':>11}{'throttled':>11}{'persisted':>11}"
            f"{'naive':>9}{'naive / throttled':>19}",
            file=out,
        )
        labels = {
            "liveness": f"liveness path (timeout_ms={BEAT_WINDOW_MS})",
            "lease": f"lease (remote_redispatch_ms={BEAT_WINDOW_MS})",
        }
        spreads: list[tuple[str, tuple[float, float] | None]] = []
        for path, setting, key in keys:
            found = self._found(key)
            if found is None:
                continue
            plain = found["none_us"]
            cost = {
                kind: (found[f"{kind}_handler_us"] - found["none_handler_us"]) / found["beats"]
                for kind in ("throttled", "persisted", "naive")
            }
            # A throttled beat that costs nothing measurable (as printed) has no ratio.
            shown = round(cost["throttled"], 1) > 0
            ratio = f"{cost['naive'] / cost['throttled']:.1f}" if shown else "n/a"
            print(
                f"  {labels[path]:<42}{JOURNAL[setting]:<12}{plain:>8,.0f} us"
                f"{cost['throttled']:>11.1f}{cost['persisted']:>11.1f}{cost['naive']:>9.1f}"
                f"{ratio:>19}",
                file=out,
            )
            spreads.append((f"{path} {setting} no beats us/run", self._spread(key, "none_us")))
            spreads.append(
                (f"{path} {setting} naive handler us", self._spread(key, "naive_handler_us"))
            )
        print(
            "  no beats: us per run, start to finish; the rest: the handler's time over that of"
            " the handler without beats, per beat (median of the runs). throttled: every beat"
            " within the half-window, kept in memory; persisted: every beat past it (the clock"
            " skipped), written by the engine; naive: an awaited store.heartbeat per beat."
            " Checked on the last runs: no beats and throttled wrote no beat, persisted and naive"
            " one per beat.",
            file=out,
        )
        self._print_spreads(out, spreads)

    def print_fan(self, out: IO[str], size: int, workers: int, poll_ms: int) -> None:
        """The fan table: ctx.all of *size* steps against *size* sequential steps."""
        rows = [
            ("one process (the engine serves the steps)", setting, f"ours-fan:{setting}")
            for setting in SETTINGS
        ] + [
            (
                f"{workers} worker process{'es' if workers > 1 else ''},"
                f" polling every {poll_ms} ms",
                setting,
                f"ours-fan-procs:{setting}:{workers}",
            )
            for setting in SETTINGS
        ]
        if not any(self._found(key) for _, _, key in rows):
            return
        print(
            f"Fan: ctx.all of {size} steps against {size} ctx.step calls one after another"
            " (ms per run; write transactions per run)",
            file=out,
        )
        print(
            f"  {'steps served by':<44}{'SQLite':<12}{'fan':>9}{'sequence':>10}{'seq / fan':>11}"
            f"{'fan tx':>8}{'seq tx':>8}",
            file=out,
        )
        spreads: list[tuple[str, tuple[float, float] | None]] = []
        for label, setting, key in rows:
            found = self._found(key)
            if found is None:
                continue
            fan_ms, seq_ms = found["fan_us"] / 1000, found["sequence_us"] / 1000
            tx = (
                f"{found['fan_tx']:>8,.0f}{found['sequence_tx']:>8,.0f}"
                if "fan_tx" in found
                else f"{'-':>8}{'-':>8}"
            )
            print(
                f"  {label:<44}{JOURNAL[setting]:<12}{fan_ms:>9,.1f}{seq_ms:>10,.1f}"
                f"{seq_ms / fan_ms:>11.1f}{tx}",
                file=out,
            )
            spread = self._spread(key, "fan_us")
            spreads.append(
                (f"{key} fan ms", None if spread is None else (spread[0] / 1000, spread[1] / 1000))
            )
        self._print_spreads(out, spreads)

    def print_queue(self, out: IO[str], batch: int) -> None:
        """The queue-admission table: cost per attempt with and without a queue."""
        keys = [(setting, f"ours-queue:{setting}") for setting in SETTINGS]
        if not any(self._found(key) for _, key in keys):
            return
        print(
            f"Queue admission: batches of {batch} runs started together, each dispatching one step;"
            " one process (us per attempt)",
            file=out,
        )
        print(
            f"  {'case':<44}{'SQLite':<12}{'us/attempt':>11}{'cost':>8}{'tx/attempt':>12}"
            f"{'statements':>12}",
            file=out,
        )
        spreads: list[tuple[str, tuple[float, float] | None]] = []
        for setting, key in keys:
            found = self._found(key)
            if found is None:
                continue
            labels = {
                "plain": "no queue",
                "free": f"queue with a free slot (concurrency {batch})",
                "saturated": f"queue of concurrency 1 ({found['waited']:.0f} of {batch} waited)",
            }
            for kind, label in labels.items():
                spent = found[f"{kind}_us"]
                cost = "" if kind == "plain" else f"{spent - found['plain_us']:,.0f}"
                print(
                    f"  {label:<44}{JOURNAL[setting]:<12}{spent:>11,.0f}{cost:>8}"
                    f"{found[f'{kind}_tx']:>12.2f}{found[f'{kind}_sql']:>12.1f}",
                    file=out,
                )
                spreads.append((f"{setting} {kind} us", self._spread(key, f"{kind}_us")))
        self._print_spreads(out, spreads)

    def print_concurrent(self, out: IO[str], runs: int) -> None:
        """The group-commit table: concurrent runs of local steps beside DBOS and the floors."""
        rows = [
            ("ours, concurrent runs", "normal", "ours-concurrent:normal", "floor:wal-normal"),
            ("ours, concurrent runs", "full", "ours-concurrent:full", "floor:wal-full"),
            (
                "ours, concurrent, group commit switched off",
                "full",
                "ours-concurrent:full-ungrouped",
                "floor:wal-full",
            ),
        ]
        if not any(self._found(key) for _, _, key, _ in rows):
            return
        print(
            f"Group commit: {runs} runs of 10 local steps started and run at once (steps/s)",
            file=out,
        )
        print(f"  {'case':<48}{'SQLite':<14}{'steps/s':>10}{'/ floor':>9}{'tx/step':>9}", file=out)
        table = [
            (label, JOURNAL[setting], key, floor, self._found(key))
            for label, setting, key, floor in rows
        ]
        table += [
            (
                "ours, one run after another (local steps)",
                "WAL+FULL",
                "ours-local:async:full",
                "floor:wal-full",
                None,
            ),
            (
                "DBOS, async def workflows gathered (asyncio)",
                "DELETE+FULL",
                "dbos-concurrent:async",
                "floor:delete-full",
                None,
            ),
            (
                "DBOS, def workflows started at once (threads)",
                "DELETE+FULL",
                "dbos-concurrent:sync",
                "floor:delete-full",
                None,
            ),
            (
                "DBOS, one after another (local steps)",
                "DELETE+FULL",
                "dbos-local:async",
                "floor:delete-full",
                None,
            ),
            ("floor: INSERT + COMMIT per step", "WAL+FULL", "floor:wal-full", "", None),
            ("floor: INSERT + COMMIT per step", "DELETE+FULL", "floor:delete-full", "", None),
        ]
        spreads = [
            (f"{key.split(':', 1)[1]} steps/s", self._spread(key, "rate")) for _, _, key, _ in rows
        ]
        for label, sqlite_setting, key, floor, found in table:
            rate = self.rate(key)
            if rate is None and not key.startswith("ours-concurrent"):
                continue
            ratio = _fmt_ratio(rate, self.rate(floor)) if floor else ""
            tx = "" if found is None else f"{found['step_tx']:.3f}"
            print(
                f"  {label:<48}{sqlite_setting:<14}{_fmt_rate(rate):>10}{ratio:>9}{tx:>9}",
                file=out,
            )
        ours = self.rate("ours-concurrent:full")
        dbos = [
            r for r in (self.rate("dbos-concurrent:async"), self.rate("dbos-concurrent:sync")) if r
        ]
        print(
            f"  ours / DBOS's better one, both concurrent, both FULL ="
            f" {_fmt_ratio(ours, max(dbos) if dbos else None)}",
            file=out,
        )
        print(
            "  what group commit gives at FULL: concurrent runs grouped / switched off ="
            f" {_fmt_ratio(ours, self.rate('ours-concurrent:full-ungrouped'))};"
            f" concurrent / one run after another ="
            f" {_fmt_ratio(ours, self.rate('ours-local:async:full'))}",
            file=out,
        )
        self._print_spreads(out, spreads)


# -- main -----------------------------------------------------------------------------------------


def _dbos_version() -> str | None:
    """DBOS's version if it can be imported, else ``None``."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return None
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def _workers(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or any(count < 1 for count in counts):
        msg = f"--workers takes worker counts >= 1 separated by commas, like 1,2; got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return counts


def _positive(kind: type[float] | type[int]) -> Callable[[str], Any]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            value = -1
        if value < 0:
            msg = f"expected a number >= 0, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (``--case`` and ``--worker`` are how the script runs its own parts)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--seconds", type=_positive(float), default=2.0, help="timed seconds per case (2)"
    )
    parser.add_argument(
        "--batch", type=_positive(int), default=50, help="runs per dispatched batch (50)"
    )
    parser.add_argument(
        "--poll-ms", type=_positive(int), default=10, help="cross-process polling interval (10)"
    )
    parser.add_argument(
        "--workers", type=_workers, default=[1, 2], help="worker process counts (1,2)"
    )
    parser.add_argument(
        "--beats", type=_positive(int), default=100, help="heartbeats per step (100)"
    )
    parser.add_argument(
        "--fan", type=_positive(int), default=100, help="steps in the fan and the sequence (100)"
    )
    parser.add_argument(
        "--concurrent", type=_positive(int), default=50, help="runs at once, group commit (50)"
    )
    parser.add_argument("--rounds", type=_positive(int), default=1, help="best of N rounds (1)")
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS columns")
    parser.add_argument(
        "--only",
        type=lambda text: [part for part in text.split(",") if part],
        help="measure only the cases whose keys start with one of these, comma-separated"
        " (floor, ours-local, ours-dispatch:full, dbos-queued, ...)",
    )
    parser.add_argument(
        "--skip",
        type=lambda text: [part for part in text.split(",") if part],
        default=[],
        help="leave out the cases whose keys start with one of these, comma-separated",
    )
    parser.add_argument("--dir", help="folder for the temporary SQLite files (system temp)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=("ours", "dbos"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--store",
        help="postgresql://... (or 'postgresql' for a throwaway server): run the PostgreSQL"
        " benchmark, benchmarks/durable_steps_pg.py, with the other options",
    )
    parser.add_argument("--executor", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    counts = ("batch", "poll_ms", "rounds", "beats", "fan", "concurrent")
    if any(getattr(args, name) < 1 for name in counts):
        parser.error("--batch, --poll-ms, --rounds, --beats, --fan and --concurrent must be >= 1")
    return args


def _best(rounds: list[Figures]) -> Figures:
    """
    The round with the highest rate; for the retry, the median cost's round; for the cases that
    time several variants, each variant's lowest time (``_us``), counts from the first round.
    """
    first = rounds[0]
    if "rate" in first:
        return max(rounds, key=lambda figures: figures["rate"])
    if "cost_us" in first:
        costs = [figures["cost_us"] for figures in rounds]
        return rounds[costs.index(statistics.median_low(costs))]
    return {
        key: min(figures[key] for figures in rounds) if key.endswith("_us") else value
        for key, value in first.items()
    }


def _postgres_benchmark(argv: Sequence[str]) -> int | None:
    """
    Run ``durable_steps_pg.py`` when *argv* names a PostgreSQL store with ``--store``; its exit
    code, or None when it does not.
    """
    for index, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if name != "--store":
            continue
        value = value if equals else (argv[index + 1] if index + 1 < len(argv) else "")
        if value != "postgresql" and not value.startswith(("postgresql://", "postgres://")):
            return None
        rest = [*argv[:index], *argv[index + (1 if equals else 2) :]]
        if value != "postgresql":
            rest = ["--store", value, *rest]
        script = Path(__file__).with_name("durable_steps_pg.py")
        return subprocess.run([sys.executable, str(script), *rest], check=False).returncode
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every case and print the tables."""
    given = list(sys.argv[1:] if argv is None else argv)
    if "--worker" not in given and "--case" not in given:
        code = _postgres_benchmark(given)
        if code is not None:
            return code
    args = parse_args(argv)
    if args.store is not None and args.worker is None and args.case is None:
        print(
            f"--store {args.store!r}: give a postgresql:// URL, or 'postgresql' for a throwaway"
            " server (the SQLite cases make their own files: use --dir for where)",
            file=sys.stderr,
        )
        return 2
    if args.worker == "ours":
        _exit_when_parent_leaves()
        asyncio.run(worker_ours(args.store, args.poll_ms))
        return 0
    if args.worker == "dbos":
        _exit_when_parent_leaves()
        worker_dbos(Path(args.store), args.executor, args.poll_ms)
        return 0
    if args.case:
        print(json.dumps(run_case(args.case, args)))
        return 0
    version = None if args.no_dbos else _dbos_version()
    print(
        f"durable_steps: effects.durable beside DBOS Transact{f' {version}' if version else ''}"
        " on SQLite;"
        f" {args.seconds:g} s per case, best of {args.rounds} round(s);"
        f" load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    if version is None:
        reason = (
            "--no-dbos"
            if args.no_dbos
            else "DBOS Transact is not installed (pip install 'effect-schedules[bench]')"
        )
        print(f"  {reason}: its columns are skipped")
    _raise_on_sigterm()
    todo = cases(args.workers, with_dbos=version is not None)
    known = cases(args.workers, with_dbos=True)
    for flag, prefixes in (("--only", args.only or []), ("--skip", args.skip)):
        unknown = [p for p in prefixes if not any(key.startswith(p) for key in known)]
        if unknown:
            print(
                f"{flag} {unknown[0]!r} names no case; cases: {', '.join(known)}", file=sys.stderr
            )
            return 2
    if args.only:
        todo = [key for key in todo if any(key.startswith(p) for p in args.only)]
    todo = [key for key in todo if not any(key.startswith(p) for p in args.skip)]
    rounds: dict[str, list[Figures]] = {key: [] for key in todo}
    try:
        for _ in range(args.rounds):
            # The floors again at the end of each round: their spread shows how much the disk's
            # speed (shared with other processes) moved while the cases ran.
            floors = [key for key in todo if key.startswith("floor")]
            for key in [*todo, *floors]:
                print(f"  ... {key}", file=sys.stderr, end="", flush=True)
                start = time.monotonic()
                try:
                    rounds[key].append(measure(key, args))
                finally:
                    print(f" {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    report = Report({key: _best(found) for key, found in rounds.items()}, rounds)
    print(f"  load average {os.getloadavg()[0]:.1f} at the end")
    print()
    report.print_local(sys.stdout)
    print()
    report.print_dispatch(sys.stdout, args.workers, args.batch, args.poll_ms)
    print()
    report.print_retry(sys.stdout)
    for table in (
        partial(report.print_heartbeat, beats=args.beats),
        partial(report.print_fan, size=args.fan, workers=max(args.workers), poll_ms=args.poll_ms),
        partial(report.print_queue, batch=args.batch),
        partial(report.print_concurrent, runs=args.concurrent),
    ):
        printed = io.StringIO()
        table(printed)
        if printed.getvalue():
            print()
            print(printed.getvalue(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
