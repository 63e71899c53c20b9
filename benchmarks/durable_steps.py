"""
Durable steps of ``effects.durable`` beside DBOS Transact, both on SQLite, in one run.

Run: ``.venv/bin/python benchmarks/durable_steps.py [--seconds S] [--batch N] [--workers 1,2]``
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

``--rounds N`` measures every case N times, interleaved, and keeps each case's best round.

Targets (issue 7): local steps >= 10x DBOS's steps/s at equal durability and >= 0.4x the floor;
dispatched round trips >= 3x DBOS's queued workflows/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
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

from effects.durable import Engine, WorkflowContext, current_step, step, workflow

SCRIPT = Path(__file__).resolve()
STEPS_PER_RUN = 10
STEP_NAMES = tuple(f"step-{i}" for i in range(STEPS_PER_RUN))
QUEUE = "bench-steps"
#: The case process's own check for finished runs, on both sides (seconds).
WAIT_POLL = 0.001
#: How long a worker may take to start, and to stop once asked.
START_TIMEOUT = 60.0
STOP_GRACE = 10.0

Figures = dict[str, float]
T = TypeVar("T")
#: The floor's settings: case key suffix and how the tables name it.
FLOORS = (("wal-normal", "WAL+NORMAL"), ("wal-full", "WAL+FULL"), ("delete-full", "DELETE+FULL"))

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


async def _wait_completed(engine: Engine, run_ids: Sequence[str]) -> None:
    """Wait (polling every ``WAIT_POLL``) until every run completed with its input + 1."""
    for n, run_id in enumerate(run_ids):
        while (run := await engine.get_run(run_id)).status in ("pending", "running", "suspended"):
            await asyncio.sleep(WAIT_POLL)
        if run.status != "completed" or run.output != n + 1:
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


# -- DBOS -----------------------------------------------------------------------------------------


class DbosApp(NamedTuple):
    """The DBOS functions, registered by ``dbos_app`` (DBOS needs them before ``launch``)."""

    ten_async: Callable[[int], Coroutine[Any, Any, int]]
    ten_sync: Callable[[int], int]
    child: Callable[[int], Coroutine[Any, Any, int]]
    parent: Callable[[int], Coroutine[Any, Any, int]]


def dbos_app(path: Path, executor: str, poll: float, *, listen: Sequence[str]) -> DbosApp:
    """Configure DBOS on the SQLite file *path* and register the benchmark's functions."""
    from dbos import DBOS

    DBOS(
        config={
            "name": "durable-bench",
            "system_database_url": f"sqlite:///{path}",
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
    app = dbos_app(folder / "dbos.sqlite", "bench-local", 1.0, listen=())
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


def case_dbos_dispatch(
    folder: Path, *, workers: int, seconds: float, batch: int, poll_ms: int, via_parent: bool
) -> Figures:
    """Batches of DBOS workflows queued to *workers* worker processes (or enqueued by parents)."""
    from dbos import DBOS

    path = folder / "dbos.sqlite"
    poll = poll_ms / 1000
    app = dbos_app(path, "bench-orchestrator", poll, listen=())
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
    dbos_app(path, executor, poll_ms / 1000, listen=(QUEUE,))
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
        "--batch", str(args.batch), "--poll-ms", str(args.poll_ms),
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
                    " the FULL figures are only as steady as that (try --rounds 3)",
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
    parser.add_argument("--rounds", type=_positive(int), default=1, help="best of N rounds (1)")
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS columns")
    parser.add_argument(
        "--only",
        type=lambda text: [part for part in text.split(",") if part],
        help="measure only the cases whose keys start with one of these, comma-separated"
        " (floor, ours-local, ours-dispatch:full, dbos-queued, ...)",
    )
    parser.add_argument("--dir", help="folder for the temporary SQLite files (system temp)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=("ours", "dbos"), help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--executor", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.poll_ms < 1 or args.rounds < 1:
        parser.error("--batch, --poll-ms and --rounds must be >= 1")
    return args


def _best(rounds: list[Figures]) -> Figures:
    """The round with the highest rate; for the retry, the median cost's round."""
    if "rate" in rounds[0]:
        return max(rounds, key=lambda figures: figures["rate"])
    costs = [figures["cost_us"] for figures in rounds]
    return rounds[costs.index(statistics.median_low(costs))]


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every case and print the tables."""
    args = parse_args(argv)
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
    if args.only:
        known = cases(args.workers, with_dbos=True)
        unknown = [p for p in args.only if not any(key.startswith(p) for key in known)]
        if unknown:
            print(
                f"--only {unknown[0]!r} names no case; cases: {', '.join(known)}", file=sys.stderr
            )
            return 2
        todo = [key for key in todo if any(key.startswith(p) for p in args.only)]
    rounds: dict[str, list[Figures]] = {key: [] for key in todo}
    try:
        for _ in range(args.rounds):
            # The floors again at the end of each round: their spread shows how much the disk's
            # speed (shared with other processes) moved while the cases ran.
            floors = [key for key in todo if key.startswith("floor")]
            for key in [*todo, *floors]:
                print(f"  ... {key}", file=sys.stderr, flush=True)
                rounds[key].append(measure(key, args))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
