"""
Durable steps of ``effects.durable`` on PostgreSQL beside DBOS Transact and procrastinate on the
same server, in one run, with hand-written floors and ratios.

Run: ``.venv/bin/python benchmarks/durable_steps_pg.py [--store postgresql://...] [--seconds S]
[--workers 1,2,4] [--batch N] [--poll-ms P]``. Without ``--store`` a throwaway server is started
(``tests/postgres_server.py``) at PostgreSQL's default durability (``fsync=on``,
``synchronous_commit=on``: every commit is on disk before it returns), which is how every side
runs. With ``--store`` the server given is used as it is configured; each case gets a database
of its own (created and dropped), so the role needs ``CREATEDB``. DBOS (``dbos``) and procrastinate
are optional: a side that is not installed is skipped, and said so.

Every case runs in a fresh interpreter (this script with ``--case``) and prints one JSON line.

1. **Local steps**: a workflow of 10 local ``async def`` steps (each adds one), started and run to
   completion one run after another; steps/s = 10 x runs / elapsed, start and finish included.
   Ours: ``engine.start`` + ``engine.run_until_idle`` (the test driver), and ``engine.start`` +
   ``engine.wait`` with ``engine.work()`` running (a service's way: the working engine takes
   the run as it inserts it). DBOS: the ``@DBOS.workflow`` called directly, its steps
   ``@DBOS.step``, both ``async def`` and (its native path) ``def``.
2. **Dispatched round trips**: a run that dispatches one step to a worker process and completes
   with its output; batches of ``--batch`` runs; round trips/s = runs / elapsed, with 1, 2 and 4
   worker processes. Ours: each run started and waited for (``engine.wait``) from its start, the
   orchestrator's ``work()`` running the turns in this process. DBOS: a workflow (one step)
   enqueued on a queue that worker processes listen to, its result awaited. procrastinate: a
   task deferred, run by worker processes, its job awaited until ``succeeded``. Every side
   polls at ``--poll-ms``; ours and procrastinate also wake on ``NOTIFY``.
3. **One durable retry**: a dispatched step that fails on its first attempt and succeeds on its
   second (``retries=2``), in one process, interleaved with the same run without the failure;
   the cost is the difference per run.
4. **Floors**: one ``INSERT`` per step, hand-written with psycopg (autocommit: the statement is
   its own transaction, one round trip), both with psycopg's blocking connection and with its
   asyncio one (ours is an asyncio engine); and one ``FOR UPDATE SKIP LOCKED`` claim plus one
   completion per task, by 1, 2 and 4 processes on a prefilled table.
5. **Concurrent local steps**: 64 runs of the 10-step workflow started together and run at
   once, batch after batch; steps/s = 10 x runs / elapsed. Ours: ``asyncio.gather`` of 64
   ``engine.start``, then of their ``engine.wait``, with ``engine.work(concurrency=64)``
   running. DBOS: 64 ``async def`` workflows gathered on one event loop.
6. **Queue drain**: N = max(200, 300 x ``--seconds``) items queued with no worker running,
   then ``--workers`` worker processes start (each connects, says it is ready and waits; all
   begin together at a signal); items/s = N / (from that signal until the last item is done).
   Ours: N runs of the one-step workflow, each suspended on its dispatched step (the
   orchestrator's ``work()`` runs in this process and completes them; each is waited for with
   ``engine.wait``). DBOS: N workflows (one step) enqueued on the queue (its workers launch at
   the signal: a queue thread dequeues from launch on); every result checked. procrastinate: N
   tasks deferred, done when all their jobs are ``succeeded``. DBOS and procrastinate are
   looked at every 10 ms; ours is told in memory.

For the claim floor and every dispatched and drain case, the CPU each item cost is printed too:
this process, the worker processes, and the server's processes (when it runs on this machine:
the postmaster, its live processes and those it reaped), so the ratios can be read against the
two cores they share.

Targets (issue 11): local steps >= 0.5x the insert floor and >= 4x DBOS; dispatched steps with
2 workers >= 0.5x the claim floor and above DBOS and procrastinate. The issue's figures for the
peers (procrastinate about 0.35x the claim floor) are queue drains, so the marks are printed for
the drains (6.) and for the round trips from each start (2.) alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from _durable_dbos import dbos_app, dbos_launched  # noqa: E402
from psycopg import sql  # noqa: E402

from effects.durable import Engine, Run, WorkflowContext, current_step, step, workflow  # noqa: E402

SCRIPT = Path(__file__).resolve()
STEPS = 10
QUEUE = "bench"
WAIT_POLL = 0.001
#: Runs at once in the concurrent local-steps cases.
CONCURRENT = 64
#: How often the drain cases look for the last item done (DBOS, procrastinate: seconds).
DRAIN_POLL = 0.01
#: The store read of each ``engine.wait`` in the ours-drain case (ms): a fallback only, since
#: this process's turns complete the runs and tell their waits in memory; rare, so that N waits
#: do not load the server.
DRAIN_WAIT_POLL_MS = 10_000
#: A worker's last argument that makes it wait, once ready, for the parent's ``SIGUSR1``.
GATED = "gated"
Figures = dict[str, float]


# -- our workflows and steps ----------------------------------------------------------------------


async def _add_one(n: int) -> int:
    return n + 1


@workflow("bench:ten")
async def ten(ctx: WorkflowContext, n: int) -> int:
    """Ten local steps, each adding one."""
    for i in range(STEPS):
        n = await ctx.local_step(f"step-{i}", functools.partial(_add_one, n))
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
    """Dispatch ``bump``; return its output."""
    return await ctx.step(bump, n)


@workflow("bench:one-flaky-step")
async def one_flaky_step(ctx: WorkflowContext, n: int) -> int:
    """Dispatch ``flaky`` (one durable retry); return its output."""
    return await ctx.step(flaky, n)


# -- helpers --------------------------------------------------------------------------------------


def drain_items(seconds: float) -> int:
    """N of the queue-drain cases: about *seconds* of draining, and never fewer than 200."""
    return max(200, int(300 * seconds))


def _rate(count: int, elapsed: float) -> Figures:
    return {"count": count, "seconds": elapsed, "rate": count / elapsed}


def _timed(seconds: float, once: Callable[[], int]) -> Figures:
    count, start = 0, time.perf_counter()
    while True:
        count += once()
        if (now := time.perf_counter()) - start >= seconds:
            return _rate(count, now - start)


async def _timed_async(seconds: float, once: Callable[[], Awaitable[int]]) -> Figures:
    count, start = 0, time.perf_counter()
    while True:
        count += await once()
        if (now := time.perf_counter()) - start >= seconds:
            return _rate(count, now - start)


def _exit_when_parent_leaves() -> None:
    """SIGTERM this process once its stdin (a pipe from the parent) closes, even on a kill -9."""
    if not os.isatty(0) and not Path("/dev/stdin").is_file():

        def watch() -> None:
            with contextlib.suppress(OSError):
                while os.read(0, 4096):
                    pass
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, daemon=True).start()

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


class Children:
    """Worker processes (this script with ``--worker``), stopped when the block ends."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start a worker; wait for its ``ready`` line."""
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--worker", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            msg = f"worker {args} did not start: {line!r}"
            raise RuntimeError(msg)
        return proc

    def go(self) -> None:
        """Let gated workers (started with ``GATED``) begin: ``SIGUSR1`` to each."""
        for proc in self.procs:
            proc.send_signal(signal.SIGUSR1)


def _with_database(url: str, database: str) -> str:
    """*url* naming *database* instead (a libpq URL)."""
    head, _, query = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{database}" + (f"?{query}" if query else "")


@contextlib.contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A new database on the server of *url* for the block (dropped after); its URL."""
    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _with_database(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


# -- CPU accounting -------------------------------------------------------------------------------

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None (gone, or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _postmaster(url: str) -> int | None:
    """The pid of the server of *url* when it runs on this machine, else None."""
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT pg_backend_pid()").fetchone()
        # Read while the connection is open: its backend process exits once it closes.
        fields = None if row is None else _proc_stat(int(row[0]))
    return None if fields is None else int(fields[1])


def _server_cpu(postmaster: int) -> float:
    """CPU seconds of the server so far: the postmaster, its live processes, and those reaped."""
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _proc_stat(int(entry.name))) is not None:
            if int(entry.name) == postmaster:
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            elif int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
    return total / _HZ


def _pids_cpu(pids: Iterable[int]) -> float:
    """CPU seconds so far of the live processes *pids*."""
    total = 0
    for pid in pids:
        if (fields := _proc_stat(pid)) is not None:
            total += int(fields[11]) + int(fields[12])
    return total / _HZ


class CpuMeter:
    """CPU per item of a timed window: this process, its worker processes, and the server."""

    def __init__(self, url: str, workers: Iterable[int] = ()) -> None:
        self.postmaster = _postmaster(url)
        self.workers = list(workers)
        self._start = self._now()

    def _now(self) -> tuple[float, float, float | None]:
        return (
            time.process_time(),
            _pids_cpu(self.workers),
            None if self.postmaster is None else _server_cpu(self.postmaster),
        )

    def restart(self) -> None:
        """Start the window now."""
        self._start = self._now()

    def per_item(self, count: float, *, workers_cpu: float | None = None) -> Figures:
        """ms of CPU per item since the window began (*workers_cpu*: seconds the workers said)."""
        own, workers, server = self._now()
        start_own, start_workers, start_server = self._start
        used = workers - start_workers if workers_cpu is None else workers_cpu
        figures = {
            "cpu_self_ms": (own - start_own) * 1000 / count,
            "cpu_workers_ms": used * 1000 / count,
        }
        if server is not None and start_server is not None:
            figures["cpu_server_ms"] = (server - start_server) * 1000 / count
        return figures


# -- floors ---------------------------------------------------------------------------------------


def case_floor_insert(url: str, seconds: float) -> Figures:
    """One INSERT per step, autocommit, psycopg's blocking connection."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "CREATE TABLE steps (run_id text, seq int, output jsonb, PRIMARY KEY (run_id, seq))"
        )
        seq = 0

        def hundred() -> int:
            nonlocal seq
            for _ in range(100):
                seq += 1
                db.execute("INSERT INTO steps VALUES (%s, %s, %s::jsonb)", ("run", seq, "1"))
            return 100

        hundred()
        return _timed(seconds, hundred)


async def case_floor_insert_async(url: str, seconds: float) -> Figures:
    """One INSERT per step, autocommit, psycopg's asyncio connection."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
        await db.execute(
            "CREATE TABLE steps (run_id text, seq int, output jsonb, PRIMARY KEY (run_id, seq))"
        )
        seq = 0

        async def hundred() -> int:
            nonlocal seq
            for _ in range(100):
                seq += 1
                await db.execute("INSERT INTO steps VALUES (%s, %s, %s::jsonb)", ("run", seq, "1"))
            return 100

        await hundred()
        return await _timed_async(seconds, hundred)


def case_floor_claim(url: str, workers: int, seconds: float) -> Figures:
    """One SKIP LOCKED claim + one completion per task, by *workers* processes."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "CREATE TABLE queue (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " status text NOT NULL, input jsonb NOT NULL, output jsonb, claimed_by text)"
        )
        db.execute("CREATE INDEX queue_queued ON queue (id) WHERE status = 'queued'")
        db.execute(
            "INSERT INTO queue (status, input) SELECT 'queued', to_jsonb(n)"
            " FROM generate_series(1, 400000) n"
        )
        db.execute("VACUUM ANALYZE queue")
    # Every worker starts claiming at the same moment, once all are connected.
    start_at = time.time() + 2.0 + 0.5 * workers
    with Children() as children:
        procs = [
            children.start("floor-claim", url, str(seconds), str(start_at)) for _ in range(workers)
        ]
        meter = CpuMeter(url)
        time.sleep(max(0.0, start_at - time.time() - 0.05))
        meter.restart()
        results = []
        for proc in procs:
            assert proc.stdout is not None
            results.append(json.loads(proc.stdout.readline()))
        count = sum(r["count"] for r in results)
        # The workers hold their connections until told to go: their server processes count.
        cpu = meter.per_item(count, workers_cpu=sum(r["cpu"] for r in results))
    return {**_rate(count, max(r["seconds"] for r in results)), **cpu}


def worker_floor_claim(url: str, seconds: float, start_at: float) -> None:
    """Claim and complete tasks for *seconds* from epoch *start_at*; print the count."""
    me = f"w{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as db:
        print("ready", flush=True)
        time.sleep(max(0.0, start_at - time.time()))
        count, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            row = db.execute(
                "UPDATE queue SET status = 'claimed', claimed_by = %s WHERE id = (SELECT id"
                " FROM queue WHERE status = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)"
                " RETURNING id, input",
                (me,),
            ).fetchone()
            if row is None:
                break
            db.execute(
                "UPDATE queue SET status = 'done', output = %s::jsonb WHERE id = %s",
                (json.dumps(row[1] + 1), row[0]),
            )
            count += 1
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(json.dumps({"count": count, "seconds": took, "cpu": cpu}), flush=True)
        sys.stdin.read()


# -- ours -----------------------------------------------------------------------------------------


def _our_url(url: str) -> str:
    return url + ("&" if "?" in url else "?") + "schema=bench"


async def case_ours_local(url: str, seconds: float) -> Figures:
    """Runs of the 10-step local workflow, one after another."""
    async with Engine(_our_url(url), workflows=[ten]) as engine:

        async def one_run() -> int:
            await engine.start(ten, 0)
            await engine.run_until_idle()
            return STEPS

        await one_run()
        figures = await _timed_async(seconds, one_run)
        done = await engine.list_runs(status="completed", limit=1_000_000)
        if len(done) != round(figures["count"]) // STEPS + 1:
            msg = f"expected every run completed, got {len(done)}"
            raise RuntimeError(msg)
    return figures


async def _timed_while_working(
    engine: Engine, seconds: float, once: Callable[[], Awaitable[int]], **work: int
) -> Figures:
    """*once* warmed up, then timed for *seconds*, while the engine's ``work(**work)`` runs."""
    worker = asyncio.get_running_loop().create_task(engine.work(**work))
    try:
        await once()
        return await _timed_async(seconds, once)
    finally:
        engine.stop()
        await worker


async def case_ours_local_work(url: str, seconds: float) -> Figures:
    """Runs of the 10-step local workflow, one after another: start, then wait (work() runs)."""
    async with Engine(_our_url(url), workflows=[ten]) as engine:

        async def one_run() -> int:
            run = await engine.wait(await engine.start(ten, 0))
            if run.output != STEPS:
                msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
                raise RuntimeError(msg)
            return STEPS

        return await _timed_while_working(engine, seconds, one_run, poll_ms=50)


async def case_ours_local_concurrent(url: str, seconds: float, poll_ms: int) -> Figures:
    """Batches of 64 runs of the 10-step local workflow started together (work() runs)."""
    async with Engine(_our_url(url), workflows=[ten]) as engine:

        async def one_batch() -> int:
            run_ids = await asyncio.gather(*(engine.start(ten, i) for i in range(CONCURRENT)))
            runs = await asyncio.gather(*(engine.wait(r, poll_ms=poll_ms) for r in run_ids))
            for i, run in enumerate(runs):
                if run.status != "completed" or run.output != i + STEPS:
                    msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
                    raise RuntimeError(msg)
            return STEPS * CONCURRENT

        return await _timed_while_working(
            engine, seconds, one_batch, poll_ms=poll_ms, concurrency=CONCURRENT
        )


async def _start_and_wait(engine: Engine, batch: int, poll_ms: int) -> None:
    """Start runs 0..batch-1 of ``one_step``, each waited for from its start; check outputs."""
    waits: list[asyncio.Task[Run]] = []
    for n in range(batch):
        run_id = await engine.start(one_step, n)
        waits.append(asyncio.get_running_loop().create_task(engine.wait(run_id, poll_ms=poll_ms)))
    for n, run in enumerate(await asyncio.gather(*waits)):
        if run.status != "completed" or run.output != n + 1:
            msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
            raise RuntimeError(msg)


async def case_ours_dispatch(
    url: str, workers: int, seconds: float, batch: int, poll_ms: int
) -> Figures:
    """Batches of runs dispatching one step to *workers* worker processes."""
    url = _our_url(url)
    async with Engine(url, workflows=[one_step]) as engine:
        with Children() as children:
            for _ in range(workers):
                children.start("ours", url, str(poll_ms))
            loop = asyncio.get_running_loop()
            orchestrator = loop.create_task(engine.work(poll_ms=poll_ms, concurrency=64))
            try:

                async def one_batch() -> int:
                    await _start_and_wait(engine, batch, poll_ms)
                    return batch

                await one_batch()
                meter = CpuMeter(url.partition("?")[0], (p.pid for p in children.procs))
                figures = await _timed_async(seconds, one_batch)
                figures.update(meter.per_item(figures["count"]))
            finally:
                engine.stop()
                await orchestrator
    return figures


async def case_ours_drain(url: str, workers: int, items: int, poll_ms: int) -> Figures:
    """*items* runs suspended on their dispatched step, then drained by *workers* processes."""
    url = _our_url(url)
    async with Engine(url, workflows=[one_step]) as engine:
        loop = asyncio.get_running_loop()
        orchestrator = loop.create_task(engine.work(poll_ms=poll_ms, concurrency=64))
        try:
            run_ids: list[str] = []
            for first in range(0, items, 64):
                chunk = range(first, min(items, first + 64))
                run_ids += await asyncio.gather(*(engine.start(one_step, n) for n in chunk))
            # Each run's first turn dispatches its step and suspends it; no one serves the step.
            while len(await engine.list_runs(status="suspended", limit=items)) < items:
                await asyncio.sleep(0.05)
            with Children() as children:
                for _ in range(workers):
                    children.start("ours", url, str(poll_ms), GATED)
                waits = [
                    loop.create_task(engine.wait(run_id, poll_ms=DRAIN_WAIT_POLL_MS))
                    for run_id in run_ids
                ]
                await asyncio.sleep(0)  # every wait is listening before the workers begin
                meter = CpuMeter(url.partition("?")[0], (p.pid for p in children.procs))
                start = time.perf_counter()
                children.go()
                runs = await asyncio.gather(*waits)
                elapsed = time.perf_counter() - start
                cpu = meter.per_item(items)
            for n, run in enumerate(runs):
                if run.status != "completed" or run.output != n + 1:
                    msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
                    raise RuntimeError(msg)
        finally:
            engine.stop()
            await orchestrator
    return {**_rate(items, elapsed), **cpu}


class _Gate:
    """
    A worker's start and end: *go* once the parent's ``SIGUSR1`` comes (at once unless
    *gated*), *left* once stdin closes or SIGTERM comes (which also sets *go*), then *on_leave*.
    """

    def __init__(self, gated: bool, on_leave: Callable[[], object]) -> None:
        loop = asyncio.get_running_loop()
        self.go, self.left = asyncio.Event(), asyncio.Event()
        self._on_leave = on_leave
        loop.add_signal_handler(signal.SIGTERM, self.leave)
        if gated:
            loop.add_signal_handler(signal.SIGUSR1, self.go.set)
        else:
            self.go.set()

        def parent_left() -> None:
            if not os.read(0, 4096):
                loop.remove_reader(0)
                self.leave()

        loop.add_reader(0, parent_left)

    def leave(self) -> None:
        self.left.set()
        self.go.set()
        self._on_leave()


async def worker_ours(url: str, poll_ms: int, gated: bool = False) -> None:
    """Serve the steps until stdin closes or SIGTERM (*gated*: from the parent's SIGUSR1 on)."""
    async with Engine(url, steps=[bump, flaky]) as engine:
        gate = _Gate(gated, engine.stop)
        print("ready", flush=True)
        await gate.go.wait()
        # work() forgets a stop() that came before it: a worker told to leave does not start.
        if not gate.left.is_set():
            await engine.work(poll_ms=poll_ms, concurrency=64)


async def case_ours_retry(url: str, seconds: float) -> Figures:
    """Per-run time with one durable retry and without, interleaved, in one process."""
    url = _our_url(url)
    async with Engine(url, workflows=[one_step, one_flaky_step], steps=[bump, flaky]) as engine:
        spent = {one_step.name: 0.0, one_flaky_step.name: 0.0}
        runs = dict.fromkeys(spent, 0)

        async def block() -> int:
            for definition in (one_step, one_flaky_step):
                start = time.perf_counter()
                for n in range(5):
                    await engine.start(definition, n)
                    await engine.run_until_idle()
                spent[definition.name] += time.perf_counter() - start
                runs[definition.name] += 5
            return 10

        await block()
        spent = dict.fromkeys(spent, 0.0)
        runs = dict.fromkeys(spent, 0)
        await _timed_async(seconds, block)
    plain = spent[one_step.name] / runs[one_step.name]
    retried = spent[one_flaky_step.name] / runs[one_flaky_step.name]
    return {"rate": 1 / retried, "plain_us": plain * 1e6, "retried_us": retried * 1e6,
            "cost_us": (retried - plain) * 1e6}  # fmt: skip


# -- DBOS -----------------------------------------------------------------------------------------


def case_dbos_local(url: str, sync_steps: bool, seconds: float) -> Figures:
    """Runs of DBOS's 10-step workflow, called directly, one after another."""
    app = dbos_app(url, "bench-local", 1.0, listen=())
    with dbos_launched():
        if sync_steps:

            def one_run() -> int:
                if app.ten_sync(0) != STEPS:
                    raise RuntimeError("DBOS returned a wrong result")
                return STEPS

            one_run()
            return _timed(seconds, one_run)

        async def one_run_async() -> int:
            if await app.ten_async(0) != STEPS:
                raise RuntimeError("DBOS returned a wrong result")
            return STEPS

        async def timed() -> Figures:
            await one_run_async()
            return await _timed_async(seconds, one_run_async)

        return asyncio.run(timed())


def case_dbos_local_concurrent(url: str, seconds: float) -> Figures:
    """Batches of 64 DBOS 10-step ``async def`` workflows gathered on one event loop."""
    app = dbos_app(url, "bench-local", 1.0, listen=())
    with dbos_launched():

        async def one_batch() -> int:
            results = await asyncio.gather(*(app.ten_async(i) for i in range(CONCURRENT)))
            if results != [i + STEPS for i in range(CONCURRENT)]:
                raise RuntimeError("DBOS returned a wrong result")
            return STEPS * CONCURRENT

        async def timed() -> Figures:
            await one_batch()
            return await _timed_async(seconds, one_batch)

        return asyncio.run(timed())


def case_dbos_dispatch(url: str, workers: int, seconds: float, batch: int, poll_ms: int) -> Figures:
    """Batches of DBOS workflows enqueued for *workers* worker processes."""
    from dbos import DBOS

    app = dbos_app(url, "bench-orchestrator", poll_ms / 1000, listen=())
    with dbos_launched(), Children() as children:
        # Registered before the workers launch, so their queue threads find it at once.
        DBOS.register_queue(QUEUE, polling_interval_sec=poll_ms / 1000)
        for i in range(workers):
            children.start("dbos", url, str(poll_ms), f"bench-worker-{i}")

        async def one_batch() -> int:
            handles = [await DBOS.enqueue_workflow_async(QUEUE, app.child, n) for n in range(batch)]
            for n, handle in enumerate(handles):
                if await handle.get_result(polling_interval_sec=WAIT_POLL) != n + 1:
                    raise RuntimeError("DBOS returned a wrong result")
            return batch

        async def timed() -> Figures:
            await one_batch()
            meter = CpuMeter(url, (p.pid for p in children.procs))
            figures = await _timed_async(seconds, one_batch)
            return {**figures, **meter.per_item(figures["count"])}

        return asyncio.run(timed())


def case_dbos_drain(url: str, workers: int, items: int, poll_ms: int) -> Figures:
    """*items* DBOS workflows enqueued with no worker, then drained by *workers* processes."""
    from dbos import DBOS

    app = dbos_app(url, "bench-orchestrator", poll_ms / 1000, listen=())
    with dbos_launched(), Children() as children:
        DBOS.register_queue(QUEUE, polling_interval_sec=poll_ms / 1000)

        async def drain() -> Figures:
            handles = [await DBOS.enqueue_workflow_async(QUEUE, app.child, n) for n in range(items)]
            for i in range(workers):
                children.start("dbos", url, str(poll_ms), f"bench-worker-{i}", GATED)
            meter = CpuMeter(url, (p.pid for p in children.procs))
            start = time.perf_counter()
            children.go()
            for n, handle in enumerate(handles):
                if await handle.get_result(polling_interval_sec=DRAIN_POLL) != n + 1:
                    raise RuntimeError("DBOS returned a wrong result")
            elapsed = time.perf_counter() - start
            return {**_rate(items, elapsed), **meter.per_item(items)}

        return asyncio.run(drain())


def worker_dbos(url: str, poll_ms: int, executor: str, gated: bool = False) -> None:
    """
    A DBOS process listening to the queue until stdin closes or SIGTERM (*gated*: it launches
    at the parent's SIGUSR1, since its queue thread dequeues from launch on).
    """
    dbos_app(url, executor, poll_ms / 1000, listen=(QUEUE,))
    if gated:
        go = threading.Event()
        signal.signal(signal.SIGUSR1, lambda signum, frame: go.set())
        print("ready", flush=True)
        go.wait()
    with dbos_launched():
        if not gated:
            print("ready", flush=True)
        sys.stdin.read()


# -- procrastinate --------------------------------------------------------------------------------


def _procrastinate(url: str) -> tuple[Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="bench.bump", queue=QUEUE)
    async def bump_task(n: int) -> int:
        return n + 1

    return app, bump_task


async def case_procrastinate(
    url: str, workers: int, seconds: float, batch: int, poll_ms: int
) -> Figures:
    """Batches of deferred tasks run by *workers* procrastinate worker processes."""
    app, bump_task = _procrastinate(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        with Children() as children:
            for _ in range(workers):
                children.start("procrastinate", url, str(poll_ms))
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:

                async def one_batch() -> int:
                    ids = [await bump_task.defer_async(n=n) for n in range(batch)]
                    while True:
                        cursor = await db.execute(
                            "SELECT COUNT(*) FROM procrastinate_jobs WHERE id = ANY(%s)"
                            " AND status = 'succeeded'",
                            (ids,),
                        )
                        row = await cursor.fetchone()
                        if row is not None and row[0] == len(ids):
                            return batch
                        await asyncio.sleep(WAIT_POLL)

                await one_batch()
                meter = CpuMeter(url, (p.pid for p in children.procs))
                figures = await _timed_async(seconds, one_batch)
                return {**figures, **meter.per_item(figures["count"])}


async def case_procrastinate_drain(url: str, workers: int, items: int, poll_ms: int) -> Figures:
    """*items* tasks deferred with no worker, then drained by *workers* processes."""
    app, bump_task = _procrastinate(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        ids = await bump_task.batch_defer_async(*({"n": n} for n in range(items)))
        with Children() as children:
            for _ in range(workers):
                children.start("procrastinate", url, str(poll_ms), GATED)
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
                meter = CpuMeter(url, (p.pid for p in children.procs))
                start = time.perf_counter()
                children.go()
                # The database holds these jobs alone; the partial index of todo/doing answers.
                while True:
                    cursor = await db.execute(
                        "SELECT EXISTS (SELECT FROM procrastinate_jobs"
                        " WHERE status IN ('todo', 'doing'))"
                    )
                    row = await cursor.fetchone()
                    if row is not None and not row[0]:
                        break
                    await asyncio.sleep(DRAIN_POLL)
                elapsed = time.perf_counter() - start
                cpu = meter.per_item(items)
                cursor = await db.execute(
                    "SELECT COUNT(*) FROM procrastinate_jobs WHERE id = ANY(%s)"
                    " AND status = 'succeeded'",
                    (ids,),
                )
                row = await cursor.fetchone()
                if row is None or row[0] != items:
                    msg = f"expected {items} jobs succeeded, got {row}"
                    raise RuntimeError(msg)
    return {**_rate(items, elapsed), **cpu}


async def worker_procrastinate(url: str, poll_ms: int, gated: bool = False) -> None:
    """A procrastinate worker until stdin closes or SIGTERM (*gated*: from SIGUSR1 on)."""
    app, _ = _procrastinate(url)
    async with app.open_async():
        tasks: list[asyncio.Task[None]] = []
        gate = _Gate(gated, lambda: [task.cancel() for task in tasks])
        print("ready", flush=True)
        await gate.go.wait()
        if gate.left.is_set():
            return
        task = asyncio.get_running_loop().create_task(
            app.run_worker_async(
                queues=[QUEUE],
                concurrency=64,
                fetch_job_polling_interval=poll_ms / 1000,
                install_signal_handlers=False,
                delete_jobs="never",
            )
        )
        tasks.append(task)
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- running cases --------------------------------------------------------------------------------


def available(module: str) -> bool:
    """Whether a peer is installed."""
    return importlib.util.find_spec(module) is not None


def cases(workers: Sequence[int]) -> list[str]:
    """Every case of a run, in order, leaving out peers that are not installed."""
    keys = [
        "floor-insert",
        "floor-insert-async",
        *(f"floor-claim:{w}" for w in workers),
        "ours-local",
        "ours-local-work",
        "ours-local-concurrent",
        "dbos-local:async",
        "dbos-local:sync",
        "dbos-local-concurrent",
        *(f"ours-dispatch:{w}" for w in workers),
        *(f"dbos-dispatch:{w}" for w in workers),
        *(f"procrastinate:{w}" for w in workers),
        *(f"ours-drain:{w}" for w in workers),
        *(f"dbos-drain:{w}" for w in workers),
        *(f"procrastinate-drain:{w}" for w in workers),
        "ours-retry",
    ]
    return [
        key
        for key in keys
        if not (key.startswith("dbos") and not available("dbos"))
        and not (key.startswith("procrastinate") and not available("procrastinate"))
    ]


def run_case(key: str, url: str, args: argparse.Namespace) -> Figures:
    """Measure *key* in this process, on the database at *url*."""
    kind, _, rest = key.partition(":")
    if kind == "floor-insert":
        return case_floor_insert(url, args.seconds)
    if kind == "floor-insert-async":
        return asyncio.run(case_floor_insert_async(url, args.seconds))
    if kind == "floor-claim":
        return case_floor_claim(url, int(rest), args.seconds)
    if kind == "ours-local":
        return asyncio.run(case_ours_local(url, args.seconds))
    if kind == "ours-local-work":
        return asyncio.run(case_ours_local_work(url, args.seconds))
    if kind == "ours-local-concurrent":
        return asyncio.run(case_ours_local_concurrent(url, args.seconds, args.poll_ms))
    if kind == "ours-drain":
        items = drain_items(args.seconds)
        return asyncio.run(case_ours_drain(url, int(rest), items, args.poll_ms))
    if kind == "ours-dispatch":
        return asyncio.run(
            case_ours_dispatch(url, int(rest), args.seconds, args.batch, args.poll_ms)
        )
    if kind == "ours-retry":
        return asyncio.run(case_ours_retry(url, args.seconds))
    if kind == "dbos-local":
        return case_dbos_local(url, rest == "sync", args.seconds)
    if kind == "dbos-local-concurrent":
        return case_dbos_local_concurrent(url, args.seconds)
    if kind == "dbos-drain":
        return case_dbos_drain(url, int(rest), drain_items(args.seconds), args.poll_ms)
    if kind == "dbos-dispatch":
        return case_dbos_dispatch(url, int(rest), args.seconds, args.batch, args.poll_ms)
    if kind == "procrastinate":
        return asyncio.run(
            case_procrastinate(url, int(rest), args.seconds, args.batch, args.poll_ms)
        )
    if kind == "procrastinate-drain":
        items = drain_items(args.seconds)
        return asyncio.run(case_procrastinate_drain(url, int(rest), items, args.poll_ms))
    msg = f"unknown case {key!r}"
    raise ValueError(msg)


def measure(key: str, server: str, args: argparse.Namespace) -> Figures:
    """Run *key* in a fresh interpreter on a fresh database of *server*."""
    with (
        fresh_database(server) as url,
        tempfile.TemporaryFile("w+") as out_file,
        tempfile.TemporaryFile("w+") as err,
    ):
        argv = [sys.executable, str(SCRIPT), "--case", key, "--store", url,
                "--seconds", str(args.seconds), "--batch", str(args.batch),
                "--poll-ms", str(args.poll_ms)]  # fmt: skip
        # Its stdin stays open while it runs: a case that sees it close stops.
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out_file, stderr=err,
                                text=True)  # fmt: skip
        try:
            proc.wait(timeout=180 + 10 * args.seconds)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
        if proc.returncode:
            err.seek(0)
            msg = f"case {key} failed (exit {proc.returncode}):\n{err.read()[-3000:]}"
            raise SystemExit(msg)
        out_file.seek(0)
        out = out_file.read()
    figures: Figures = json.loads(out.strip().splitlines()[-1])
    return figures


def _ratio(ours: float | None, theirs: float | None, goal: float | None = None) -> str:
    if ours is None or theirs is None or not theirs:
        return "n/a"
    text = f"{ours / theirs:.2f}x"
    if goal is not None:
        text += f" ({'meets' if ours / theirs >= goal else 'MISSES'} >= {goal:g}x)"
    return text


def report(results: dict[str, Figures], workers: Sequence[int]) -> None:
    """Print the tables and ratios."""

    def rate(key: str) -> float | None:
        found = results.get(key)
        return None if found is None else found["rate"]

    def line(label: str, key: str, unit: str) -> None:
        value = rate(key)
        shown = "n/a (not installed)" if value is None else f"{value:>10,.0f} {unit}"
        print(f"  {label:<44} {shown}")

    def cpu_line(key: str, label: str) -> None:
        found = results.get(key)
        if found is None or "cpu_self_ms" not in found:
            return
        parts = [found["cpu_self_ms"], found["cpu_workers_ms"], found.get("cpu_server_ms")]
        total = sum(p for p in parts if p is not None)
        server = "n/a (not local)" if parts[2] is None else f"{parts[2]:.2f}"
        print(f"    CPU ms per item, {label}: caller {parts[0]:.2f}, workers {parts[1]:.2f},"
              f" server {server}, total {total:.2f}")  # fmt: skip

    print("\nLocal steps (10-step runs, start and finish included)")
    line("floor: INSERT, psycopg blocking", "floor-insert", "steps/s")
    line("floor: INSERT, psycopg asyncio", "floor-insert-async", "steps/s")
    line("effects.durable, run_until_idle", "ours-local", "steps/s")
    line("effects.durable, work() + wait", "ours-local-work", "steps/s")
    line("DBOS, async def", "dbos-local:async", "steps/s")
    line("DBOS, def", "dbos-local:sync", "steps/s")
    line(
        f"effects.durable, {CONCURRENT} at once, work() + wait", "ours-local-concurrent", "steps/s"
    )
    line(f"DBOS, async def, {CONCURRENT} at once", "dbos-local-concurrent", "steps/s")
    ours = max((r for r in (rate("ours-local"), rate("ours-local-work")) if r), default=None)
    best_dbos = max(
        (r for r in (rate("dbos-local:async"), rate("dbos-local:sync")) if r), default=None
    )
    print(f"  ours / floor (blocking):  {_ratio(ours, rate('floor-insert'), 0.5)}")
    print(f"  ours / floor (asyncio):   {_ratio(ours, rate('floor-insert-async'), 0.5)}")
    print(f"  ours / DBOS (its best):   {_ratio(ours, best_dbos, 4)}")
    at_once, floor_insert = rate("ours-local-concurrent"), rate("floor-insert")
    print(f"  {CONCURRENT} runs at once, ours / floor (blocking): {_ratio(at_once, floor_insert)}")
    print(f"  {CONCURRENT} runs at once, ours / DBOS:             "
          f"{_ratio(at_once, rate('dbos-local-concurrent'))}")  # fmt: skip
    print("\nDispatched round trips (runs/s)")
    for w in workers:
        print(f" {w} worker process{'es' if w > 1 else ''}")
        line("floor: SKIP LOCKED claim + completion", f"floor-claim:{w}", "tasks/s")
        line("effects.durable", f"ours-dispatch:{w}", "runs/s")
        line("DBOS queued workflow", f"dbos-dispatch:{w}", "runs/s")
        line("procrastinate task", f"procrastinate:{w}", "jobs/s")
        goal = 0.5 if w == 2 else None
        ours = rate(f"ours-dispatch:{w}")
        print(f"  ours / claim floor:       {_ratio(ours, rate(f'floor-claim:{w}'), goal)}")
        above = 1.0001 if w == 2 else None
        print(f"  ours / DBOS:              {_ratio(ours, rate(f'dbos-dispatch:{w}'), above)}")
        print(f"  ours / procrastinate:     {_ratio(ours, rate(f'procrastinate:{w}'), above)}")
        cpu_line(f"floor-claim:{w}", "floor")
        cpu_line(f"ours-dispatch:{w}", "effects.durable")
        cpu_line(f"dbos-dispatch:{w}", "DBOS")
        cpu_line(f"procrastinate:{w}", "procrastinate")
    drained = next((found for key, found in results.items() if "-drain:" in key), None)
    if drained is not None:
        print(f"\nQueue drain (N = {drained['count']:,.0f} items queued, then the workers start;"
              " items/s = N / time to the last one)")  # fmt: skip
        for w in workers:
            print(f" {w} worker process{'es' if w > 1 else ''}")
            floor = rate(f"floor-claim:{w}")
            line("floor: SKIP LOCKED claim + completion", f"floor-claim:{w}", "tasks/s")
            line("effects.durable, one-step runs", f"ours-drain:{w}", "items/s")
            line("DBOS queued workflows", f"dbos-drain:{w}", "items/s")
            line("procrastinate tasks", f"procrastinate-drain:{w}", "items/s")
            ours = rate(f"ours-drain:{w}")
            goal = 0.5 if w == 2 else None
            above = 1.0001 if w == 2 else None
            print(f"  ours / claim floor:          {_ratio(ours, floor, goal)}")
            print(f"  DBOS / claim floor:          {_ratio(rate(f'dbos-drain:{w}'), floor)}")
            print(f"  procrastinate / claim floor: "
                  f"{_ratio(rate(f'procrastinate-drain:{w}'), floor)}")  # fmt: skip
            print(f"  ours / DBOS:                 {_ratio(ours, rate(f'dbos-drain:{w}'), above)}")
            print(f"  ours / procrastinate:        "
                  f"{_ratio(ours, rate(f'procrastinate-drain:{w}'), above)}")  # fmt: skip
            cpu_line(f"floor-claim:{w}", "floor")
            cpu_line(f"ours-drain:{w}", "effects.durable")
            cpu_line(f"dbos-drain:{w}", "DBOS")
            cpu_line(f"procrastinate-drain:{w}", "procrastinate")
    retry = results.get("ours-retry")
    if retry is not None:
        print("\nOne durable retry (one process)")
        plain, retried, cost = retry["plain_us"], retry["retried_us"], retry["cost_us"]
        print(f"  a run without a retry: {plain:,.0f} us; with one: {retried:,.0f} us")
        print(f"  the retry costs {cost:,.0f} us")


def main() -> int:
    """Parse the options; run one case, one worker, or the whole comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="a postgresql:// URL of a server (default: a fresh one)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--poll-ms", type=int, default=50)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs of every case, interleaved; the median counts"
    )
    parser.add_argument(
        "--data-dir",
        help="where the fresh server keeps its files (e.g. /dev/shm: fsync costs nothing there)",
    )
    parser.add_argument("--case")
    parser.add_argument("--worker", nargs="+")
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        _exit_when_parent_leaves()
        gated = rest[-1] == GATED
        if kind == "ours":
            asyncio.run(worker_ours(rest[0], int(rest[1]), gated))
        elif kind == "dbos":
            worker_dbos(rest[0], int(rest[1]), rest[2], gated)
        elif kind == "procrastinate":
            asyncio.run(worker_procrastinate(rest[0], int(rest[1]), gated))
        else:
            worker_floor_claim(rest[0], float(rest[1]), float(rest[2]))
        return 0
    if args.case:
        _exit_when_parent_leaves()
        print(json.dumps(run_case(args.case, args.store, args)), flush=True)
        return 0
    workers = [int(w) for w in args.workers.split(",")]
    with contextlib.ExitStack() as stack:
        server = args.store
        if server is None:
            from tests.postgres_server import PostgresServer

            server = stack.enter_context(PostgresServer(durable=True, folder=args.data_dir)).dsn()
        with psycopg.connect(server) as db:
            version = db.execute("SHOW server_version").fetchone()
            durability = db.execute(
                "SELECT string_agg(name || '=' || setting, ', ') FROM pg_settings"
                " WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes')"
            ).fetchone()
        print(
            f"PostgreSQL {version[0] if version else '?'} ({durability[0] if durability else '?'})"
        )
        for peer in ("dbos", "procrastinate"):
            if not available(peer):
                print(f"{peer} is not installed: its cases are skipped")
        # Round after round over every case, so a noisy moment of the shared machine (its
        # disk's fsync rate varies many times over) falls on every side alike; medians count.
        rounds: dict[str, list[Figures]] = {}
        for n in range(args.rounds):
            print(f"round {n + 1} of {args.rounds}", flush=True)
            for key in cases(workers):
                figures = measure(key, server, args)
                rounds.setdefault(key, []).append(figures)
                print(f"  {key}: {figures['rate']:,.0f}/s", flush=True)
        results = {
            key: sorted(runs, key=lambda f: f["rate"])[len(runs) // 2]
            for key, runs in rounds.items()
        }
        report(results, workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
