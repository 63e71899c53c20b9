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
   the cost is the difference per run. **Compensation**: a 10-step run completing, beside the
   same run failing at its last step and undoing the nine before it (local, then dispatched
   steps): an undo costs what a step of its kind costs.
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

This file is PostgreSQL's piece of the durable-steps harness: the server (given, or a throwaway
one) and a fresh database per case, the floors, procrastinate, the CPU of the server's
processes, and the report. The harness (``_durable_harness.py``), our cases (``_durable_ours.py``)
and DBOS's (``_durable_dbos.py``) are the same for SQLite (``durable_steps.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import secrets
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from _durable_dbos import (  # noqa: E402
    case_dbos_concurrent,
    case_dbos_dispatch,
    case_dbos_drain,
    case_dbos_local,
    serve_dbos,
)
from _durable_harness import (  # noqa: E402
    DRAIN_POLL,
    GATED,
    WAIT_POLL,
    Children,
    CpuMeter,
    Dispatch,
    Figures,
    Gate,
    Results,
    exit_when_parent_leaves,
    fmt_times,
    measure_in_process,
    median_round,
    per_hundred,
    per_hundred_async,
    proc_stat,
    raise_on_sigterm,
    rate,
    timed,
    timed_async,
)
from _durable_ours import (  # noqa: E402
    case_ours_concurrent_work,
    case_ours_dispatch,
    case_ours_drain,
    case_ours_local,
    case_ours_local_work,
    case_ours_retry,
    case_ours_saga,
    serve_ours,
)
from psycopg import sql  # noqa: E402

SCRIPT = Path(__file__).resolve()
#: The queue of procrastinate's tasks.
QUEUE = "bench"
#: Runs at once in the concurrent local-steps cases.
CONCURRENT = 64
#: ``engine.work``'s concurrency in the orchestrator and the workers (procrastinate's too).
WORK_CONCURRENCY = 64
#: The store read of each ``engine.wait`` in the ours-drain case (ms): a fallback only, since
#: this process's turns complete the runs and tell their waits in memory; rare, so that N waits
#: do not load the server.
DRAIN_WAIT_POLL_MS = 10_000


def drain_items(seconds: float) -> int:
    """N of the queue-drain cases: about *seconds* of draining, and never fewer than 200."""
    return max(200, int(300 * seconds))


def _our_url(url: str) -> str:
    return url + ("&" if "?" in url else "?") + "schema=bench"


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


# -- the server's CPU -----------------------------------------------------------------------------


def _postmaster(url: str) -> int | None:
    """The pid of the server of *url* when it runs on this machine, else None."""
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT pg_backend_pid()").fetchone()
        # Read while the connection is open: its backend process exits once it closes.
        fields = None if row is None else proc_stat(int(row[0]))
    return None if fields is None else int(fields[1])


def server_meter(url: str, workers: Iterable[int] = ()) -> CpuMeter:
    """A CPU meter from now on: this process, *workers*, and the server of *url* if local."""
    return CpuMeter(_postmaster(url), workers)


# -- floors ---------------------------------------------------------------------------------------

#: The insert floors' table, and their one statement per step.
STEPS_TABLE = "CREATE TABLE steps (run_id text, seq int, output jsonb, PRIMARY KEY (run_id, seq))"
INSERT_STEP = "INSERT INTO steps VALUES (%s, %s, %s::jsonb)"


def case_floor_insert(url: str, seconds: float) -> Figures:
    """One INSERT per step, autocommit, psycopg's blocking connection."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(STEPS_TABLE)
        hundred = per_hundred(lambda seq: db.execute(INSERT_STEP, ("run", seq, "1")))
        hundred()
        return timed(seconds, hundred)


async def case_floor_insert_async(url: str, seconds: float) -> Figures:
    """One INSERT per step, autocommit, psycopg's asyncio connection."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
        await db.execute(STEPS_TABLE)
        hundred = per_hundred_async(lambda seq: db.execute(INSERT_STEP, ("run", seq, "1")))
        await hundred()
        return await timed_async(seconds, hundred)


def case_floor_claim(children: Children, url: str, workers: int, seconds: float) -> Figures:
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
    procs = [
        children.start("--worker", "floor-claim", url, str(seconds), str(start_at))
        for _ in range(workers)
    ]
    meter = server_meter(url)
    time.sleep(max(0.0, start_at - time.time() - 0.05))
    meter.restart()
    results = []
    for proc in procs:
        assert proc.stdout is not None
        results.append(json.loads(proc.stdout.readline()))
    count = sum(r["count"] for r in results)
    # The workers hold their connections until told to go: their server processes count.
    cpu = meter.per_item(count, workers_cpu=sum(r["cpu"] for r in results))
    children.stop()
    return {**rate(count, max(r["seconds"] for r in results)), **cpu}


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


# -- procrastinate --------------------------------------------------------------------------------


def _procrastinate(url: str) -> tuple[Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="bench.bump", queue=QUEUE)
    async def bump_task(n: int) -> int:
        return n + 1

    return app, bump_task


async def case_procrastinate(children: Children, url: str, dispatch: Dispatch) -> Figures:
    """Batches of deferred tasks run by procrastinate worker processes."""
    workers, seconds, batch, poll_ms = dispatch
    app, bump_task = _procrastinate(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for _ in range(workers):
            children.start("--worker", "procrastinate", url, str(poll_ms))
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
            meter = server_meter(url, children.pids)
            figures = await timed_async(seconds, one_batch)
            return {**figures, **meter.per_item(figures["count"])}


async def case_procrastinate_drain(
    children: Children, url: str, workers: int, items: int, poll_ms: int
) -> Figures:
    """*items* tasks deferred with no worker, then drained by *workers* processes."""
    app, bump_task = _procrastinate(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        ids = await bump_task.batch_defer_async(*({"n": n} for n in range(items)))
        for _ in range(workers):
            children.start("--worker", "procrastinate", url, str(poll_ms), GATED)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
            meter = server_meter(url, children.pids)
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
    return {**rate(items, elapsed), **cpu}


async def worker_procrastinate(url: str, poll_ms: int, gated: bool = False) -> None:
    """A procrastinate worker until stdin closes or SIGTERM (*gated*: from SIGUSR1 on)."""
    app, _ = _procrastinate(url)
    async with app.open_async():
        tasks: list[asyncio.Task[None]] = []
        gate = Gate(gated, lambda: [task.cancel() for task in tasks])
        print("ready", flush=True)
        await gate.go.wait()
        if gate.left.is_set():
            return
        task = asyncio.get_running_loop().create_task(
            app.run_worker_async(
                queues=[QUEUE],
                concurrency=WORK_CONCURRENCY,
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
        "ours-saga",
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
    with Children(SCRIPT) as children:
        ours = _our_url(url)
        meter = partial(server_meter, url)
        dispatch = partial(Dispatch.of, args)
        if kind == "floor-insert":
            return case_floor_insert(url, args.seconds)
        if kind == "floor-insert-async":
            return asyncio.run(case_floor_insert_async(url, args.seconds))
        if kind == "floor-claim":
            return case_floor_claim(children, url, int(rest), args.seconds)
        if kind == "ours-local":
            return asyncio.run(case_ours_local(ours, False, args.seconds))
        if kind == "ours-local-work":
            return asyncio.run(case_ours_local_work(ours, args.seconds))
        if kind == "ours-local-concurrent":
            return asyncio.run(
                case_ours_concurrent_work(ours, CONCURRENT, args.seconds, args.poll_ms)
            )
        if kind == "ours-drain":
            return asyncio.run(
                case_ours_drain(
                    children,
                    ours,
                    workers=int(rest),
                    items=drain_items(args.seconds),
                    poll_ms=args.poll_ms,
                    concurrency=WORK_CONCURRENCY,
                    wait_poll_ms=DRAIN_WAIT_POLL_MS,
                    meter=meter,
                )
            )
        if kind == "ours-dispatch":
            return asyncio.run(
                case_ours_dispatch(
                    children,
                    ours,
                    dispatch(int(rest)),
                    concurrency=WORK_CONCURRENCY,
                    wait_each=True,
                    meter=meter,
                )
            )
        if kind == "ours-retry":
            return asyncio.run(case_ours_retry(ours, args.seconds))
        if kind == "ours-saga":
            return asyncio.run(case_ours_saga(ours, args.seconds))
        if kind == "dbos-local":
            return case_dbos_local(url, rest == "sync", args.seconds)
        if kind == "dbos-local-concurrent":
            return case_dbos_concurrent(url, False, CONCURRENT, args.seconds)
        if kind == "dbos-drain":
            items = drain_items(args.seconds)
            return case_dbos_drain(
                children, url, workers=int(rest), items=items, poll_ms=args.poll_ms, meter=meter
            )
        if kind == "dbos-dispatch":
            return case_dbos_dispatch(children, url, dispatch(int(rest)), meter=meter)
        if kind == "procrastinate":
            return asyncio.run(case_procrastinate(children, url, dispatch(int(rest))))
        if kind == "procrastinate-drain":
            items = drain_items(args.seconds)
            return asyncio.run(
                case_procrastinate_drain(children, url, int(rest), items, args.poll_ms)
            )
    msg = f"unknown case {key!r}"
    raise ValueError(msg)


def measure(key: str, server: str, args: argparse.Namespace) -> Figures:
    """Run *key* in a fresh interpreter on a fresh database of *server*."""
    with fresh_database(server) as url:
        options = ["--store", url, "--seconds", str(args.seconds), "--batch", str(args.batch),
                   "--poll-ms", str(args.poll_ms)]  # fmt: skip
        return measure_in_process(SCRIPT, key, options, timeout=180 + 10 * args.seconds)


# -- the report -----------------------------------------------------------------------------------


def report(results: dict[str, Figures], workers: Sequence[int]) -> None:
    """Print the tables and ratios."""
    rate = Results(results).rate

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
    print(f"  ours / floor (blocking):  {fmt_times(ours, rate('floor-insert'), 0.5)}")
    print(f"  ours / floor (asyncio):   {fmt_times(ours, rate('floor-insert-async'), 0.5)}")
    print(f"  ours / DBOS (its best):   {fmt_times(ours, best_dbos, 4)}")
    at_once, floor_insert = rate("ours-local-concurrent"), rate("floor-insert")
    print(
        f"  {CONCURRENT} runs at once, ours / floor (blocking): {fmt_times(at_once, floor_insert)}"
    )
    print(f"  {CONCURRENT} runs at once, ours / DBOS:             "
          f"{fmt_times(at_once, rate('dbos-local-concurrent'))}")  # fmt: skip
    print("\nDispatched round trips (runs/s)")
    for w in workers:
        print(f" {w} worker process{'es' if w > 1 else ''}")
        line("floor: SKIP LOCKED claim + completion", f"floor-claim:{w}", "tasks/s")
        line("effects.durable", f"ours-dispatch:{w}", "runs/s")
        line("DBOS queued workflow", f"dbos-dispatch:{w}", "runs/s")
        line("procrastinate task", f"procrastinate:{w}", "jobs/s")
        goal = 0.5 if w == 2 else None
        ours = rate(f"ours-dispatch:{w}")
        print(f"  ours / claim floor:       {fmt_times(ours, rate(f'floor-claim:{w}'), goal)}")
        above = 1.0001 if w == 2 else None
        print(f"  ours / DBOS:              {fmt_times(ours, rate(f'dbos-dispatch:{w}'), above)}")
        print(f"  ours / procrastinate:     {fmt_times(ours, rate(f'procrastinate:{w}'), above)}")
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
            print(f"  ours / claim floor:          {fmt_times(ours, floor, goal)}")
            print(f"  DBOS / claim floor:          {fmt_times(rate(f'dbos-drain:{w}'), floor)}")
            print(f"  procrastinate / claim floor: "
                  f"{fmt_times(rate(f'procrastinate-drain:{w}'), floor)}")  # fmt: skip
            print(
                f"  ours / DBOS:                 {fmt_times(ours, rate(f'dbos-drain:{w}'), above)}"
            )
            print(f"  ours / procrastinate:        "
                  f"{fmt_times(ours, rate(f'procrastinate-drain:{w}'), above)}")  # fmt: skip
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
    saga = results.get("ours-saga")
    if saga is not None:
        print("\nCompensation: a 10-step run completing, and failing at its last step with the")
        print("nine before it undone; one process, interleaved (us)")
        print(f"  {'steps':<12}{'completed':>11}{'compensated':>13}{'per step':>10}"
              f"{'per undo':>10}{'undo / step':>13}")  # fmt: skip
        for kind, label in (("local", "local"), ("remote", "dispatched")):
            step_us, undo_us = saga[f"{kind}_step_us"], saga[f"{kind}_undo_us"]
            print(f"  {label:<12}{saga[f'{kind}_completed_us']:>11,.0f}"
                  f"{saga[f'{kind}_compensated_us']:>13,.0f}{step_us:>10,.0f}"
                  f"{undo_us:>10,.0f}{undo_us / step_us:>13.2f}")  # fmt: skip


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
        exit_when_parent_leaves()
        raise_on_sigterm()
        gated = rest[-1] == GATED
        if kind == "ours":
            serve_ours(rest)
        elif kind == "dbos":
            serve_dbos(rest)
        elif kind == "procrastinate":
            asyncio.run(worker_procrastinate(rest[0], int(rest[1]), gated))
        else:
            worker_floor_claim(rest[0], float(rest[1]), float(rest[2]))
        return 0
    if args.case:
        exit_when_parent_leaves()
        raise_on_sigterm()
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
        results = {key: median_round(runs) for key, runs in rounds.items()}
        report(results, workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
