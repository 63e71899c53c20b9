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

The case of issue 21:

9. **Compensation**: a workflow of 10 steps, each registering an undo, that completes, beside the
   same workflow failing at its last step so that the nine before it are undone (nine
   compensations ``compensate:<step>``), interleaved in one process (one engine serving the
   steps); with local steps (local undos) and with dispatched ones (dispatched undos). An undo
   should cost what a step of its kind costs: per undo = (compensated run - completed run) / 9,
   beside per step = completed run / 10.

The case of issue 23 (``_durable_timers.py``):

10. **Durable timers**: 1,000 runs each sleeping 1 s under a virtual clock, polled every 100 ms
    of virtual time: every sleep wakes within one poll of its ``wake_at``, and a poll reads what
    is due, not every run (statements and SQLite VM instructions of an idle poll with 10 runs
    asleep and with all of them asleep; per run woken; the query plans of a poll's reads). And a
    timer beside a dispatched step's ``wake_at``: a run sleeping 1 ms against one that does not,
    a step retried after ``backoff_ms=1`` (the run waits on ``wake_at``) against one retried at
    once; the two differences, and their ratio.

``--rounds N`` measures every case N times, interleaved, and keeps each case's best round (for
the cases timing several variants, each variant's best time); the spread is printed.
``--only`` and ``--skip`` pick cases by key prefix (``ours-heartbeat``, ``ours-fan``,
``ours-queue``, ``ours-concurrent``, ``ours-saga``, ``dbos-concurrent``, ``floor``, ...).

Targets (issue 7): local steps >= 10x DBOS's steps/s at equal durability and >= 0.4x the floor;
dispatched round trips >= 3x DBOS's queued workflows/s.

This file is SQLite's piece of the durable-steps harness: the floors, a fresh file per case and
the store URLs of our two settings, the counts of ``_sqlite_counting.py``, and the tables. The
harness (``_durable_harness.py``), our cases (``_durable_ours.py``) and DBOS's
(``_durable_dbos.py``) are the same for PostgreSQL (``durable_steps_pg.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import IO, Any

from _durable_dbos import (
    case_dbos_concurrent,
    case_dbos_dispatch,
    case_dbos_local,
    dbos_version,
    serve_dbos,
)
from _durable_harness import (
    Children,
    Dispatch,
    Figures,
    Results,
    best_round,
    exit_when_parent_leaves,
    fmt_rate,
    fmt_ratio,
    measure_in_process,
    per_hundred,
    raise_on_sigterm,
    target,
    timed,
)
from _durable_ours import (
    BEAT_WINDOW_MS,
    BEAT_YIELDS,
    TELEMETRY_SLICE_S,
    Counts,
    Variant,
    case_ours_concurrent,
    case_ours_dispatch,
    case_ours_fan,
    case_ours_fan_procs,
    case_ours_heartbeat,
    case_ours_local,
    case_ours_queue,
    case_ours_retry,
    case_ours_saga,
    case_ours_telemetry,
    serve_ours,
)
from _durable_timers import BATCHES, FEW, POLL_MS, SLEEPERS, case_ours_timers, query_plans
from _sqlite_counting import Tally, counted

from effects.durable import Engine, SqliteStore, Store

SCRIPT = Path(__file__).resolve()
#: The floor's settings: case key suffix and how the tables name it.
FLOORS = (("wal-normal", "WAL+NORMAL"), ("wal-full", "WAL+FULL"), ("delete-full", "DELETE+FULL"))
#: Our two durability settings, and how the tables name them.
SETTINGS = ("normal", "full")
JOURNAL = {"normal": "WAL+NORMAL", "full": "WAL+FULL", "full-ungrouped": "WAL+FULL"}


def store_url(path: Path, setting: str) -> str:
    """Our store URL for *path* at *setting* (``normal``: the default, or ``full``)."""
    return f"sqlite:///{path}" + ("?synchronous=full" if setting == "full" else "")


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

        def write(seq: int) -> None:
            db.execute("BEGIN")
            db.execute("INSERT INTO steps VALUES (?, ?, ?)", ("run", seq, "1"))
            db.execute("COMMIT")

        hundred = per_hundred(write)
        hundred()
        return timed(seconds, hundred)
    finally:
        db.close()


# -- counting -------------------------------------------------------------------------------------


async def counted_figures(
    store: str | Store, variants: dict[str, Variant], **engine_args: Any
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


def _ungroup(store: SqliteStore) -> None:
    """
    Switch the store's group commit off (a benchmark control only: the engine has no option for
    it), so that each write is a transaction of its own, fsynced alone under FULL.
    """
    if getattr(store, "_grouped", None) is not True:
        msg = f"{store!r} has no group commit switch to turn off (SqliteStore._grouped)"
        raise RuntimeError(msg)
    setattr(store, "_grouped", False)  # noqa: B010 - a private switch, named on purpose


def counting(url: str, *, grouped: bool = True) -> Counts:
    """
    ``counted_figures`` on a fresh store at *url* (as ``Counts``: what our cases take), its
    group commit switched off unless *grouped*.
    """

    async def counts(variants: dict[str, Variant], engine_args: dict[str, Any]) -> Figures:
        store = SqliteStore(url)
        if not grouped:
            _ungroup(store)
        return await counted_figures(store, variants, **engine_args)

    return counts


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
        *(f"ours-saga:{s}" for s in SETTINGS),
        *(f"ours-heartbeat:{path}:{s}" for path in ("liveness", "lease") for s in SETTINGS),
        *(f"ours-fan:{s}" for s in SETTINGS),
        *(f"ours-fan-procs:{s}:{max(workers)}" for s in SETTINGS),
        *(f"ours-queue:{s}" for s in SETTINGS),
        *(f"ours-concurrent:{s}" for s in ("normal", "full", "full-ungrouped")),
        *(f"ours-timers:{s}" for s in SETTINGS),
        *(f"dbos-concurrent:{kind}" for kind in ("async", "sync")),
    ]
    return [key for key in keys if with_dbos or not key.startswith("dbos")]


def run_case(key: str, args: argparse.Namespace) -> Figures:
    """Measure case *key* in this process (a fresh one, started by ``measure``)."""
    exit_when_parent_leaves()
    raise_on_sigterm()
    kind, *rest = key.split(":")
    with (
        tempfile.TemporaryDirectory(prefix="durable-bench-", dir=args.dir) as tmp,
        Children(SCRIPT, Path(tmp)) as children,
    ):
        folder = Path(tmp)
        url_of = partial(store_url, folder / "durable.db")
        counted_url = partial(store_url, folder / "counted.db")
        dbos_url = f"sqlite:///{folder / 'dbos.sqlite'}"
        if kind == "floor":
            journal, synchronous = rest[0].split("-")
            return case_floor(folder, journal.upper(), synchronous.upper(), args.seconds)
        if kind == "ours-local":
            return asyncio.run(case_ours_local(url_of(rest[1]), rest[0] == "sync", args.seconds))
        if kind == "ours-telemetry":
            return asyncio.run(case_ours_telemetry(url_of(rest[0]), args.seconds))
        if kind == "ours-dispatch":
            return asyncio.run(
                case_ours_dispatch(children, url_of(rest[0]), Dispatch.of(args, int(rest[1])))
            )
        if kind == "ours-retry":
            return asyncio.run(case_ours_retry(url_of(rest[0]), args.seconds))
        if kind == "ours-saga":
            return asyncio.run(case_ours_saga(url_of(rest[0]), args.seconds))
        if kind == "ours-heartbeat":
            store = SqliteStore(url_of(rest[1]))
            return asyncio.run(case_ours_heartbeat(store, rest[0], args.beats, args.seconds))
        if kind == "ours-fan":
            counts = counting(counted_url(rest[0]))
            return asyncio.run(case_ours_fan(url_of(rest[0]), args.fan, args.seconds, counts))
        if kind == "ours-fan-procs":
            return asyncio.run(
                case_ours_fan_procs(
                    children,
                    url_of(rest[0]),
                    workers=int(rest[1]),
                    size=args.fan,
                    seconds=args.seconds,
                    poll_ms=args.poll_ms,
                )
            )
        if kind == "ours-queue":
            counts = counting(counted_url(rest[0]))
            return asyncio.run(case_ours_queue(url_of(rest[0]), args.batch, args.seconds, counts))
        if kind == "ours-concurrent":
            setting = rest[0].removesuffix("-ungrouped")
            grouped = not rest[0].endswith("-ungrouped")
            store = SqliteStore(url_of(setting))
            if not grouped:
                _ungroup(store)
            counts = counting(counted_url(setting), grouped=grouped)
            return asyncio.run(
                case_ours_concurrent(
                    store, runs=args.concurrent, seconds=args.seconds, counts=counts
                )
            )
        if kind == "ours-timers":
            return asyncio.run(
                case_ours_timers(
                    url_of(rest[0]),
                    store_url(folder / "sleepers.db", rest[0]),
                    args.seconds,
                    counting(counted_url(rest[0])),
                )
            )
        if kind == "dbos-concurrent":
            return case_dbos_concurrent(dbos_url, rest[0] == "sync", args.concurrent, args.seconds)
        if kind == "dbos-local":
            return case_dbos_local(dbos_url, rest[0] == "sync", args.seconds)
        if kind in ("dbos-queued", "dbos-parent"):
            return case_dbos_dispatch(
                children,
                dbos_url,
                Dispatch.of(args, int(rest[0])),
                via_parent=kind == "dbos-parent",
            )
    msg = f"unknown case {key!r}"
    raise ValueError(msg)


def measure(key: str, args: argparse.Namespace) -> Figures:
    """Run case *key* in a fresh interpreter; return its figures."""
    options = [
        "--seconds", str(args.seconds), "--batch", str(args.batch), "--poll-ms", str(args.poll_ms),
        "--beats", str(args.beats), "--fan", str(args.fan), "--concurrent", str(args.concurrent),
        *(("--dir", args.dir) if args.dir else ()),
    ]  # fmt: skip
    return measure_in_process(SCRIPT, key, options, timeout=120 + 10 * args.seconds)


# -- the report -----------------------------------------------------------------------------------


class Report(Results):
    """The figures of a run, printed as tables with ratios."""

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
            ratio = fmt_ratio(rate, self.rate(floor)) if floor else ""
            print(f"  {label:<38}{sqlite_setting:<14}{fmt_rate(rate):>10}{ratio:>9}", file=out)
        for kind, label in (("async", "async def steps"), ("sync", "def steps")):
            ours, theirs = self.rate(f"ours-local:{kind}:full"), self.rate(f"dbos-local:{kind}")
            goal = target(ours, theirs, 10) if kind == "async" else ""
            print(f"  ours / DBOS, {label}, both FULL = {fmt_ratio(ours, theirs)}{goal}", file=out)
        spreads = []
        for setting, name in FLOORS:
            rates = [figures["rate"] for figures in self.rounds(f"floor:{setting}")]
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
                        if max(len(self.rounds(f"floor:{s}")) for s, _ in FLOORS) < 6
                        else ""
                    ),
                    file=out,
                )
        for setting in ("normal", "full"):
            ours = self.rate(f"ours-local:async:{setting}")
            bottom = self.rate(floors[setting])
            print(
                f"  ours / floor, async def steps, {journal[setting]} ="
                f" {fmt_ratio(ours, bottom)}{target(ours, bottom, 0.4)}",
                file=out,
            )
        # CPU per step: what a quiet machine's wall clock approaches at NORMAL (no fsync waits).
        ours_found = self.found("ours-local:async:normal")
        floor_found = self.found(floors["normal"])
        if ours_found and floor_found and "cpu_us" in ours_found and "cpu_us" in floor_found:
            ours_cpu, floor_cpu = ours_found["cpu_us"], floor_found["cpu_us"]
            print(
                f"  CPU per step at WAL+NORMAL (the process's own, however loaded the machine):"
                f" ours {ours_cpu:,.1f} us, floor {floor_cpu:,.1f} us; floor / ours ="
                f" {floor_cpu / ours_cpu:.2f}",
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
            cells = "".join(f"{fmt_rate(self.rate(f'{prefix}:{w}')):>12}" for w in workers)
            print(f"  {label:<44}{sqlite_setting:<14}{cells}", file=out)
        for w in workers:
            ours = self.rate(f"ours-dispatch:full:{w}")
            queued, parent = self.rate(f"dbos-queued:{w}"), self.rate(f"dbos-parent:{w}")
            print(
                f"  {w} worker{'s' if w > 1 else ''}: ours / DBOS queued workflow, both FULL ="
                f" {fmt_ratio(ours, queued)}{target(ours, queued, 3)};"
                f" ours / DBOS workflow + child = {fmt_ratio(ours, parent)}",
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
            found = self.found(f"ours-retry:{setting}")
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

    def print_saga(self, out: IO[str]) -> None:
        """The compensation table: what an undo costs beside a step of its kind."""
        keys = [(setting, f"ours-saga:{setting}") for setting in SETTINGS]
        if not any(self.found(key) for _, key in keys):
            return
        print(
            "Compensation: a 10-step run completing, and failing at its last step with the nine"
            " before it undone; one process, interleaved (us)",
            file=out,
        )
        print(
            f"  {'steps':<20}{'SQLite':<12}{'completed':>11}{'compensated':>13}{'per step':>10}"
            f"{'per undo':>10}{'undo / step':>13}",
            file=out,
        )
        for setting, key in keys:
            found = self.found(key)
            if found is None:
                continue
            for kind, label in (("local", "local"), ("remote", "dispatched")):
                print(
                    f"  {label:<20}{JOURNAL[setting]:<12}{found[f'{kind}_completed_us']:>11,.0f}"
                    f"{found[f'{kind}_compensated_us']:>13,.0f}{found[f'{kind}_step_us']:>10,.0f}"
                    f"{found[f'{kind}_undo_us']:>10,.0f}"
                    f"{found[f'{kind}_undo_us'] / found[f'{kind}_step_us']:>13.2f}",
                    file=out,
                )
        print(
            "  per step: a completed run over its 10 steps (start and finish included); per undo:"
            " the compensated run's extra time over its 9 undos. Checked: the failed runs undid"
            " nine steps.",
            file=out,
        )

    def print_heartbeat(self, out: IO[str], beats: int) -> None:
        """The heartbeat table: cost per beat, throttled, persisted and naive."""
        keys = [
            (path, setting, f"ours-heartbeat:{path}:{setting}")
            for path in ("liveness", "lease")
            for setting in SETTINGS
        ]
        if not any(self.found(key) for _, _, key in keys):
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
            found = self.found(key)
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
            spreads.append((f"{path} {setting} no beats us/run", self.spread(key, "none_us")))
            spreads.append(
                (f"{path} {setting} naive handler us", self.spread(key, "naive_handler_us"))
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
        self.print_spreads(out, spreads)

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
        if not any(self.found(key) for _, _, key in rows):
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
            found = self.found(key)
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
            spread = self.spread(key, "fan_us")
            spreads.append(
                (f"{key} fan ms", None if spread is None else (spread[0] / 1000, spread[1] / 1000))
            )
        self.print_spreads(out, spreads)

    def print_queue(self, out: IO[str], batch: int) -> None:
        """The queue-admission table: cost per attempt with and without a queue."""
        keys = [(setting, f"ours-queue:{setting}") for setting in SETTINGS]
        if not any(self.found(key) for _, key in keys):
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
            found = self.found(key)
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
                spreads.append((f"{setting} {kind} us", self.spread(key, f"{kind}_us")))
        self.print_spreads(out, spreads)

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
        if not any(self.found(key) for _, _, key, _ in rows):
            return
        print(
            f"Group commit: {runs} runs of 10 local steps started and run at once (steps/s)",
            file=out,
        )
        print(f"  {'case':<48}{'SQLite':<14}{'steps/s':>10}{'/ floor':>9}{'tx/step':>9}", file=out)
        table = [
            (label, JOURNAL[setting], key, floor, self.found(key))
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
            (f"{key.split(':', 1)[1]} steps/s", self.spread(key, "rate")) for _, _, key, _ in rows
        ]
        for label, sqlite_setting, key, floor, found in table:
            rate = self.rate(key)
            if rate is None and not key.startswith("ours-concurrent"):
                continue
            ratio = fmt_ratio(rate, self.rate(floor)) if floor else ""
            tx = "" if found is None else f"{found['step_tx']:.3f}"
            print(
                f"  {label:<48}{sqlite_setting:<14}{fmt_rate(rate):>10}{ratio:>9}{tx:>9}",
                file=out,
            )
        ours = self.rate("ours-concurrent:full")
        dbos = [
            r for r in (self.rate("dbos-concurrent:async"), self.rate("dbos-concurrent:sync")) if r
        ]
        print(
            f"  ours / DBOS's better one, both concurrent, both FULL ="
            f" {fmt_ratio(ours, max(dbos) if dbos else None)}",
            file=out,
        )
        print(
            "  what group commit gives at FULL: concurrent runs grouped / switched off ="
            f" {fmt_ratio(ours, self.rate('ours-concurrent:full-ungrouped'))};"
            f" concurrent / one run after another ="
            f" {fmt_ratio(ours, self.rate('ours-local:async:full'))}",
            file=out,
        )
        self.print_spreads(out, spreads)

    def print_timers(self, out: IO[str]) -> None:
        """The durable-timers table: 1,000 sleepers polled, and a timer beside wake_at."""
        keys = [(setting, f"ours-timers:{setting}") for setting in SETTINGS]
        if not any(self.found(key) for _, key in keys):
            return
        print(
            f"Durable timers: {SLEEPERS:,} runs each sleeping 1 s (virtual clock), started in"
            f" {BATCHES} batches, a poll every {POLL_MS} ms of virtual time",
            file=out,
        )
        print(
            f"  {'SQLite':<12}{'latest wake':>13}{'polls':>7}{'idle poll: statements':>23}"
            f"{'VM instr.':>22}{'per run woken: statements':>27}{'VM instr.':>11}",
            file=out,
        )
        print(
            f"  {'':<12}{'after wake_at':>13}{'':>7}{f'{FEW} asleep':>11}{'all asleep':>12}"
            f"{f'{FEW} asleep':>11}{'all asleep':>11}",
            file=out,
        )
        for setting, key in keys:
            found = self.found(key)
            if found is None:
                continue
            late = found["max_late_ms"]
            verdict = "within one poll" if late <= POLL_MS else "LATER THAN A POLL"
            print(
                f"  {JOURNAL[setting]:<12}{late:>10,.0f} ms{found['polls']:>7,.0f}"
                f"{found['idle_few_sql']:>11,.0f}{found['idle_all_sql']:>12,.0f}"
                f"{found['idle_few_vm']:>11,.0f}{found['idle_all_vm']:>11,.0f}"
                f"{found['per_woken_sql']:>27.1f}{found['per_woken_vm']:>11,.0f}  {verdict}",
                file=out,
            )
        print(
            "  An idle poll reads the same with 10 runs asleep as with all of them: it reads what"
            " is due (O(due runs)), through these plans:",
            file=out,
        )
        with tempfile.TemporaryDirectory(prefix="durable-bench-plans-") as tmp:
            for name, plan in query_plans(str(Path(tmp) / "plans.db")):
                print(f"    {name}: {plan}", file=out)
        print(
            "A timer beside a dispatched step's wake_at: run_until_idle(advance_time=True), one"
            " process, interleaved (us per run)",
            file=out,
        )
        print(
            f"  {'SQLite':<12}{'sleep 1 ms':>11}{'no sleep':>10}{'timer':>8}{'retry 1 ms':>12}"
            f"{'retry now':>11}{'wake_at':>9}{'timer / wake_at':>17}{'tx':>7}{'tx':>9}"
            f"{'sql':>6}{'sql':>9}",
            file=out,
        )
        print(f"  {'':<12}{'':>11}{'':>10}{'':>8}{'':>12}{'':>11}{'':>9}{'':>17}"
              f"{'timer':>7}{'wake_at':>9}{'timer':>6}{'wake_at':>9}", file=out)  # fmt: skip
        for setting, key in keys:
            found = self.found(key)
            if found is None:
                continue
            # From the figures shown (each variant's best over the rounds).
            timer = found["nap_us"] - found["no_nap_us"]
            wake = found["retry_waits_us"] - found["retry_at_once_us"]
            timer_tx = found["nap_tx"] - found["no_nap_tx"]
            wake_tx = found["retry_waits_tx"] - found["retry_at_once_tx"]
            timer_sql = found["nap_sql"] - found["no_nap_sql"]
            wake_sql = found["retry_waits_sql"] - found["retry_at_once_sql"]
            ratio = f"{timer / wake:.2f}" if wake > 0 else "n/a"
            print(
                f"  {JOURNAL[setting]:<12}{found['nap_us']:>11,.0f}{found['no_nap_us']:>10,.0f}"
                f"{timer:>8,.0f}{found['retry_waits_us']:>12,.0f}"
                f"{found['retry_at_once_us']:>11,.0f}{wake:>9,.0f}{ratio:>17}"
                f"{timer_tx:>7.1f}{wake_tx:>9.1f}{timer_sql:>6.0f}{wake_sql:>9.0f}",
                file=out,
            )
        print(
            "  timer: a run sleeping 1 ms less one that does not; wake_at: a step retried after"
            " 1 ms (the run waits on wake_at) less one retried at once; tx, sql: the write"
            " transactions and statements each adds per run.",
            file=out,
        )


# -- main -----------------------------------------------------------------------------------------


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
        "--telemetry",
        action="store_true",
        help="measure only the local-step case without and with attach_otel, side by side",
    )
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
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument(
        "--store",
        help="postgresql://... (or 'postgresql' for a throwaway server): run the PostgreSQL"
        " benchmark, benchmarks/durable_steps_pg.py, with the other options",
    )
    args = parser.parse_args(argv)
    counts = ("batch", "poll_ms", "rounds", "beats", "fan", "concurrent")
    if any(getattr(args, name) < 1 for name in counts):
        parser.error("--batch, --poll-ms, --rounds, --beats, --fan and --concurrent must be >= 1")
    return args


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


#: The telemetry budget of issue 22: attached telemetry costs the local-step case at most this.
TELEMETRY_BUDGET = 0.10


def _telemetry(args: argparse.Namespace) -> int:
    """``--telemetry``: the local-step case without and with ``attach_otel``, and their ratio."""
    key = "ours-telemetry:normal"
    found: list[Figures] = []
    for _ in range(args.rounds):
        print(f"  ... {key}", file=sys.stderr, end="", flush=True)
        start = time.monotonic()
        found.append(measure(key, args))
        print(f" {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
    # The round whose ratio is the median: one slow slice of either side moves no verdict.
    ratios = sorted(f["otel_rate"] / f["plain_rate"] for f in found)
    ratio = ratios[len(ratios) // 2]
    best = next(f for f in found if f["otel_rate"] / f["plain_rate"] == ratio)
    cost = 1 / ratio - 1
    print(
        f"Local steps with telemetry: runs of a 10-step workflow, WAL+NORMAL, {args.seconds:g} s"
        f" per side in {TELEMETRY_SLICE_S:g} s slices, median of {args.rounds} round(s)"
    )
    print(f"  {'case':46} {'steps/s':>9}")
    print(f"  {'ours, async def steps':46} {best['plain_rate']:>9,.0f}")
    print(f"  {'ours, async def steps, attach_otel (SDK)':46} {best['otel_rate']:>9,.0f}")
    verdict = "within" if cost <= TELEMETRY_BUDGET else "OVER"
    print(
        f"  with / without = {ratio:.3f}: telemetry costs {cost:+.1%} per step"
        f" ({verdict} the {TELEMETRY_BUDGET:.0%} budget); every round: "
        + ", ".join(f"{r:.3f}" for r in ratios)
    )
    print(f"  spans exported: {best['spans']:,.0f} (one per step, one root per run)")
    step_us = 1e6 / best["plain_rate"]
    spent_us = 1e6 / best["otel_rate"] - step_us
    floor_us = best["sdk_floor_us"]
    print(
        f"  per step: {step_us:,.1f} us without telemetry, {spent_us:+,.1f} us with it; the"
        f" SDK's own work for it (its spans and histogram values made by hand, interleaved):"
        f" {floor_us:,.1f} us = {floor_us / step_us:.0%} of a step"
    )
    print(
        f"  telemetry / SDK floor = {spent_us / floor_us:.2f}"
        f" (the {TELEMETRY_BUDGET:.0%} budget is {TELEMETRY_BUDGET * step_us:,.1f} us per step)"
    )
    # The same in CPU (this process's engine thread), which other processes' load inflates less.
    plain_cpu, otel_cpu, floor_cpu = (
        best["plain_cpu_us"],
        best["otel_cpu_us"],
        best["sdk_floor_cpu_us"],
    )
    print(
        f"  CPU per step: {plain_cpu:,.1f} us without, {otel_cpu:,.1f} us with telemetry"
        f" ({otel_cpu / plain_cpu - 1:+.0%}); the SDK floor {floor_cpu:,.1f} us"
        f" ({floor_cpu / plain_cpu:.0%} of a step); telemetry / SDK floor ="
        f" {(otel_cpu - plain_cpu) / floor_cpu:.2f}"
    )
    return 0


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
    if args.worker:
        exit_when_parent_leaves()
        kind, *rest = args.worker
        (serve_dbos if kind == "dbos" else serve_ours)(rest)
        return 0
    if args.case:
        print(json.dumps(run_case(args.case, args)))
        return 0
    if args.telemetry:
        return _telemetry(args)
    version = None if args.no_dbos else dbos_version()
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
    raise_on_sigterm()
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
    report = Report({key: best_round(found) for key, found in rounds.items()}, rounds)
    print(f"  load average {os.getloadavg()[0]:.1f} at the end")
    print()
    report.print_local(sys.stdout)
    print()
    report.print_dispatch(sys.stdout, args.workers, args.batch, args.poll_ms)
    print()
    report.print_retry(sys.stdout)
    for table in (
        report.print_saga,
        partial(report.print_heartbeat, beats=args.beats),
        partial(report.print_fan, size=args.fan, workers=max(args.workers), poll_ms=args.poll_ms),
        partial(report.print_queue, batch=args.batch),
        partial(report.print_concurrent, runs=args.concurrent),
        report.print_timers,
    ):
        printed = io.StringIO()
        table(printed)
        if printed.getvalue():
            print()
            print(printed.getvalue(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
