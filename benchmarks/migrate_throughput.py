"""
Throughput of ``migrate`` with the SQLite store beside hand-written baselines, and source reads of
a failed-item run.

1. 100,000 CSV rows through a process that does nothing: items per second (target >= 20,000/s),
   side by side in the same run with two hand-written loops over the same CSV file (no Python
   peer of this SDK exists, so these are the baselines):

   - floor: ``csv.DictReader``, one state row per item written to SQLite with ``executemany`` per
     1,000 rows and a commit per window, with the store's settings (WAL, ``synchronous=NORMAL``):
     what any tool keeping a state per item pays at least;
   - naive: the loop people write first, ``INSERT`` and ``commit()`` per item with sqlite3's
     defaults (rollback journal, ``synchronous=FULL``); too slow for every row, so it runs over the
     first ``--naive-rows`` rows (default 5,000) and its rate is items over that time.

   The candidates run in interleaved rounds (``--rounds``, default 3; each round a fresh database)
   so that load from other processes hits them alike; the best round of each is reported, with
   ours / floor and ours / naive.
2. ``--failed`` over 10,000 failed items of a CSV (``scan``) source: how many times the source was
   read to find them (target: once), counted by wrapping the source's ``find`` and by counting
   opens of the CSV file.

3. ``SqlDestination`` load: ``--load-rows`` rows (default 5,000) upserted into a SQLite table
   with sqlite3's defaults (rollback journal, ``synchronous=FULL``: a commit is an fsync), side by
   side: ours (a run: one connection and one transaction per window of 1,000, the window's
   upserts sent in one ``executemany``), the same run with a process that writes nothing (target:
   ours at least 0.5 x its items/s), the same upserts called outside a run (a connection and a
   commit per row, what each call does without a window; over the first 1,000 rows at most),
   and the floor (``executemany`` and one commit). Then ours and the no-op run again with the
   destination in the store's settings (WAL, ``synchronous=NORMAL``: no fsync per commit), which
   leaves our own cost per row.

4. Memory: the same no-op run, and the floor loop, over N / 10 and N rows (``--rows``), each in a
   fresh process: the tracemalloc peak (Python's allocations; SQLite's page cache, bounded by its
   ``cache_size``, is not traced) and the peak RSS of a run without tracemalloc. Streaming keeps
   the peak bounded by the window, not the source: target, peak at N <= 1.5 x peak at N / 10.

5. ``--store postgresql://...`` (or ``--store postgresql``: a throwaway server of
   ``tests/postgres_server.py`` at PostgreSQL's default durability, ``fsync=on`` and
   ``synchronous_commit=on``): items 1 and 2 with the PostgreSQL store, each round in a fresh
   schema of that database (created, then dropped; the role needs ``CREATE`` on it), beside the
   PostgreSQL floor: the same CSV rows, one hand-written batched ``INSERT ... ON CONFLICT DO
   UPDATE`` of a window's state rows (``unnest`` of arrays: one statement) and a ``COMMIT`` per
   window, with psycopg; and the naive loop's PostgreSQL form (``INSERT`` and ``COMMIT`` per
   item). Items 3 and 4 are about SQLite and are left out.

6. ``--durable``: in item 1, the same rows also as a durable run (``migrate.durable.run``: the
   workflow ``migrate.run``, one local step per window, its default durable store beside the
   migrate store), started and worked in this process; target: at least 0.8 x the plain run.

7. Rollback: in item 1, after each round's run, ``migrate.rollback`` of the states it migrated
   (``--rows`` of them) with a no-op ``rollback=``, in the same store: items per second beside the
   run's; target: at least 0.5 x the run's items/s. Its deletes are committed in batches:
   no-op undos share a transaction of up to ``migrate._rollback.BATCH`` states, committed once
   the undo work since the last commit took ``BATCH_SECONDS`` or ``COMMIT_RATIO`` commits.

Run with ``.venv/bin/python benchmarks/migrate_throughput.py [--rows N] [--failed N]
[--naive-rows N] [--load-rows N] [--rounds N] [--profile] [--no-memory] [--store URL]
[--durable]``;
``--profile`` prints the top of a cProfile of one throughput run.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import csv
import gc
import io
import itertools
import pstats
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from unittest import mock

from _memory import Figures, emit, fresh, peak_rss
from _postgres_floor import PostgresBench

import migrate
import migrate.durable as migrate_durable

THROUGHPUT_TARGET = 20_000  # items per second
#: A rollback of the run's states against the run, items/s over items/s (at least).
ROLLBACK_TARGET = 0.5
#: A durable run against the plain one, items/s over items/s (at least).
DURABLE_TARGET = 0.8
WINDOW = 1_000  # rows per window: the sources' default window_size


def times(count: int) -> str:
    """``"1 time"``, ``"2 times"``."""
    return f"{count:,} time" if count == 1 else f"{count:,} times"


def write_csv(path: Path, rows: int) -> None:
    """Write *rows* rows of ``id,name,email,city`` to *path*."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "name", "email", "city"])
        writer.writerows(
            (i, f"name {i}", f"user{i}@example.org", f"city {i % 97}") for i in range(1, rows + 1)
        )


def do_nothing(item: migrate.Item, scope: migrate.Scope) -> None:
    """The process of the throughput run: nothing at all."""


def undo_nothing(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
    """The rollback of the throughput run: nothing at all."""


class CountingCsvSource(migrate.CsvSource):
    """A CSV source counting its lookups by identity (each one reads the file)."""

    finds = 0
    identities_asked = 0

    def find(self, identities: Collection[str]) -> dict[str, migrate.Item | migrate.Fault]:
        CountingCsvSource.finds += 1
        CountingCsvSource.identities_asked += len(identities)
        return super().find(identities)


@contextmanager
def counting_opens(path: Path) -> Iterator[list[int]]:
    """Count ``Path.open`` calls on *path* (the CSV source opens its file that way)."""
    opened = [0]
    real_open = Path.open

    def open_(self: Path, *args: Any, **kwargs: Any) -> IO[Any]:
        if self == path:
            opened[0] += 1
        return real_open(self, *args, **kwargs)  # type: ignore[no-any-return]

    with mock.patch.object(Path, "open", open_):
        yield opened


def ours(
    store: str,
    source: Path,
    rows: int,
    profiler: cProfile.Profile | None,
    *,
    durable: bool = False,
    timings: dict[str, float] | None = None,
) -> float:
    """
    Migrate the *rows* rows of *source* with a no-op process into the fresh *store*; seconds.
    *durable*: as a durable run (``migrate.durable.run``: its default durable store, each window
    a step), started and worked in this process. With *timings*, then roll the states back with a
    no-op ``rollback=`` and put its seconds there as ``"rollback"``.
    """
    config = migrate.Config(
        [migrate.Migration("rows", migrate.CsvSource(source), do_nothing, rollback=undo_nothing)],
        store=store,
    )
    options = migrate.RunOptions(definitions=("rows",))
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    summary = migrate_durable.run(config, options) if durable else migrate.run(config, options)
    if profiler is not None:
        profiler.disable()
    took = time.perf_counter() - started
    migrated = summary.definitions["rows"].counts.migrated
    if migrated != rows:
        raise SystemExit(f"expected {rows} migrated items, got {migrated}")
    if timings is not None:
        started = time.perf_counter()
        undone = migrate.rollback(config, ("rows",)).definitions["rows"].counts.rolled_back
        timings["rollback"] = time.perf_counter() - started
        if undone != rows:
            raise SystemExit(f"expected {rows} rolled back items, got {undone}")
    return took


STATE_TABLE = (
    "CREATE TABLE item_states (definition TEXT NOT NULL, identity TEXT NOT NULL, "
    "status TEXT NOT NULL, run_id TEXT, updated_at REAL NOT NULL, "
    "PRIMARY KEY (definition, identity)) WITHOUT ROWID"
)
INSERT_STATE = "INSERT OR REPLACE INTO item_states VALUES ('rows', ?, 'migrated', 'r1', ?)"


def floor(db_path: Path, source: Path, rows: int) -> float:
    """The floor loop of the module docstring over *rows* rows of *source*; seconds."""
    started = time.perf_counter()
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(STATE_TABLE)
    written = 0
    with source.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        while True:
            window = [(row["id"], time.time()) for row in itertools.islice(reader, WINDOW)]
            if not window:
                break
            db.execute("BEGIN")
            db.executemany(INSERT_STATE, window)
            db.execute("COMMIT")
            written += len(window)
    db.close()
    took = time.perf_counter() - started
    if written != rows:
        raise SystemExit(f"floor: expected {rows} rows, wrote {written}")
    return took


def naive(db_path: Path, source: Path, rows: int) -> float:
    """The naive loop of the module docstring over the first *rows* rows of *source*; seconds."""
    started = time.perf_counter()
    db = sqlite3.connect(db_path)
    db.execute(STATE_TABLE)
    written = 0
    with source.open(newline="", encoding="utf-8") as handle:
        for row in itertools.islice(csv.DictReader(handle), rows):
            db.execute(INSERT_STATE, (row["id"], time.time()))
            db.commit()
            written += 1
    db.close()
    took = time.perf_counter() - started
    if written != rows:
        raise SystemExit(f"naive: expected {rows} rows, wrote {written}")
    return took


def throughput(
    work: Path,
    rows: int,
    naive_rows: int,
    rounds: int,
    pg: PostgresBench | None,
    *,
    profile: bool,
    durable: bool = False,
) -> float:
    """
    Time ours, the floor and the naive loop (and with *durable* ours as a durable run) in
    interleaved rounds; print; return our rate.
    """
    source = work / "rows.csv"
    write_csv(source, rows)
    naive_rows = min(naive_rows, rows)
    profiler = cProfile.Profile() if profile else None
    best = {
        "ours": float("inf"),
        "rollback": float("inf"),
        "floor": float("inf"),
        "naive": float("inf"),
    }
    if durable:
        best["durable"] = float("inf")
    for round_ in range(rounds):
        # Only the first round is profiled: the profile is of one run, not of several.
        chosen = profiler if round_ == 0 else None
        took: dict[str, float] = {}
        store = (
            f"sqlite:///{work / f'throughput-{round_}.db'}"
            if pg is None
            else pg.store(f"ours_{round_}")
        )
        took["ours"] = ours(store, source, rows, chosen, timings=took)
        if pg is None:
            took["floor"] = floor(work / f"floor-{round_}.db", source, rows)
            took["naive"] = naive(work / f"naive-{round_}.db", source, naive_rows)
        else:
            took["floor"] = pg.floor(f"floor_{round_}", source, rows, WINDOW)
            took["naive"] = pg.naive(f"naive_{round_}", source, naive_rows)
        if durable:
            store = (
                f"sqlite:///{work / f'durable-{round_}.db'}"
                if pg is None
                else pg.store(f"durable_{round_}")
            )
            took["durable"] = ours(store, source, rows, None, durable=True)
        for name, seconds in took.items():
            best[name] = min(best[name], seconds)
    rates = {
        "ours": rows / best["ours"],
        "rollback": rows / best["rollback"],
        "floor": rows / best["floor"],
        "naive": naive_rows / best["naive"],
    }
    if durable:
        rates["durable"] = rows / best["durable"]
    rate = rates["ours"]
    verdict = "meets" if rate >= THROUGHPUT_TARGET else "MISSES"
    kind = "SQLite" if pg is None else f"PostgreSQL ({pg.describe()})"
    print(
        f"throughput: {rows:,} CSV rows, no-op process, {kind} store: {best['ours']:.2f} s, "
        f"{rate:,.0f} items/s ({verdict} the target of {THROUGHPUT_TARGET:,}/s)"
    )
    print(f"side by side, best of {rounds} interleaved round(s), same CSV file:")
    batch = "executemany" if pg is None else "one INSERT ... ON CONFLICT"
    labels = {
        "ours": f"migrate run (CsvSource, no-op, store), {rows:,} rows",
        "rollback": f"migrate rollback of its states (no-op rollback=), {rows:,} states",
        "floor": f"floor: DictReader + {batch}/commit per {WINDOW:,}, {rows:,} rows",
        "naive": f"naive: DictReader + INSERT/commit per item, {naive_rows:,} rows",
    }
    if durable:
        labels["durable"] = f"migrate run --durable (a step per window), {rows:,} rows"
    width = max(len(label) for label in labels.values()) + 2
    print(f"  {'loop':<{width}}{'items/s':>10}{'ours / it':>11}")
    for name, label in labels.items():
        print(f"  {label:<{width}}{rates[name]:>10,.0f}{rate / rates[name]:>11.2f}")
    print(
        f"  ours / floor = {rate / rates['floor']:.2f}: the floor keeps no cursor, run record, "
        "contract or prior-state check"
    )
    print(f"  ours / naive = {rate / rates['naive']:.1f}: ours is that many times faster")
    ratio = rates["rollback"] / rate
    verdict = "meets" if ratio >= ROLLBACK_TARGET else "MISSES"
    print(
        f"  rollback / run = {ratio:.2f} ({verdict} the target of {ROLLBACK_TARGET}x): the "
        "run's states undone and deleted, a transaction per batch"
    )
    if durable:
        ratio = rates["durable"] / rate
        verdict = "meets" if ratio >= DURABLE_TARGET else "MISSES"
        print(
            f"  durable / plain = {ratio:.2f} ({verdict} the target of {DURABLE_TARGET}x): the "
            "same run as a durable workflow, a checkpoint per window"
        )
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        print(text.getvalue())
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
        print(text.getvalue())
    return rate


LOAD_TABLE = "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, email TEXT)"
#: At most this many rows go through the commit-per-row loop (an fsync each).
PER_CALL_ROWS = 1_000
#: Upserts in a run over the same run with a no-op process, items/s over items/s (at least).
LOAD_TARGET = 0.5


def _load_db(path: Path, *, wal: bool = False) -> Path:
    db = sqlite3.connect(path)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute(LOAD_TABLE)
    db.commit()
    db.close()
    return path


def _connect(path: Path, *, wal: bool) -> Callable[[], sqlite3.Connection]:
    """Connections to *path*, with the store's settings (WAL, NORMAL) if *wal*."""

    def connect() -> sqlite3.Connection:
        db = sqlite3.connect(path)
        if wal:
            db.execute("PRAGMA synchronous=NORMAL")
        return db

    return connect


def load_ours(
    work: Path, rows: int, round_: int, *, noop: bool = False, wal: bool = False
) -> float:
    """Upsert *rows* rows through SqlDestination inside a run (*noop*: the same run, writing
    nothing); seconds."""
    name = f"load-{'noop' if noop else 'ours'}-{'wal' if wal else 'full'}-{round_}"
    dest = _load_db(work / f"{name}.db", wal=wal)
    table = migrate.SqlDestination(_connect(dest, wal=wal), "people", "id")

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if noop:
            return
        record = {"id": int(item.identity), "name": f"n{item.identity}", "email": "e@x.org"}
        table.upsert(record).run_or_raise()

    source = migrate.MemorySource([{"id": i} for i in range(1, rows + 1)], window_size=WINDOW)
    config = migrate.Config(
        [migrate.Migration("load", source, process)],
        store=f"sqlite:///{work / f'{name}-store.db'}",
    )
    started = time.perf_counter()
    summary = migrate.run(config)
    took = time.perf_counter() - started
    if summary.definitions["load"].counts.migrated != rows:
        raise SystemExit(f"load: expected {rows} migrated, got {summary.definitions['load']}")
    return took


def load_per_call(work: Path, rows: int, round_: int) -> float:
    """The same upserts outside a run: a connection and a commit per row; seconds."""
    dest = _load_db(work / f"load-call-{round_}.db")
    table = migrate.SqlDestination(lambda: sqlite3.connect(dest), "people", "id")
    started = time.perf_counter()
    for i in range(1, rows + 1):
        table.upsert({"id": i, "name": f"n{i}", "email": "e@x.org"}).run_or_raise()
    return time.perf_counter() - started


def load_floor(work: Path, rows: int, round_: int) -> float:
    """executemany of the rows and one commit; seconds."""
    dest = _load_db(work / f"load-floor-{round_}.db")
    started = time.perf_counter()
    db = sqlite3.connect(dest)
    db.executemany(
        "INSERT INTO people VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET name = excluded.name",
        [(i, f"n{i}", "e@x.org") for i in range(1, rows + 1)],
    )
    db.commit()
    db.close()
    return time.perf_counter() - started


def destination_load(work: Path, rows: int, rounds: int) -> float:
    """Time the loads of the module docstring (item 3) in interleaved rounds; print; return
    our rate."""
    per_call = min(rows, PER_CALL_ROWS)
    best = {
        name: float("inf") for name in ("ours", "noop", "call", "floor", "ours_wal", "noop_wal")
    }
    for round_ in range(rounds):
        took = {
            "ours": load_ours(work, rows, round_),
            "noop": load_ours(work, rows, round_, noop=True),
            "call": load_per_call(work, per_call, round_),
            "floor": load_floor(work, rows, round_),
            "ours_wal": load_ours(work, rows, round_, wal=True),
            "noop_wal": load_ours(work, rows, round_, noop=True, wal=True),
        }
        for name, seconds in took.items():
            best[name] = min(best[name], seconds)
    rates = {name: (per_call if name == "call" else rows) / best[name] for name in best}
    labels = {
        "ours": f"ours: upserts in a run, {rows:,} rows",
        "noop": "no-op: the same run, its process writing nothing",
        "call": f"per call: the same upserts outside a run (a commit each), {per_call:,} rows",
        "floor": "executemany and one commit",
    }
    print(
        f"SqlDestination load, best of {rounds} interleaved round(s), SQLite defaults "
        "(rollback journal, FULL sync):"
    )
    width = max(len(label) for label in labels.values()) + 2
    print(f"  {'loop':<{width}}{'rows/s':>10}{'ours / it':>11}")
    for name, label in labels.items():
        print(f"  {label:<{width}}{rates[name]:>10,.0f}{rates['ours'] / rates[name]:>11.2f}")
    for suffix, what in (("", "FULL sync"), ("_wal", "WAL, NORMAL sync (no fsync per commit)")):
        ratio = rates[f"ours{suffix}"] / rates[f"noop{suffix}"]
        verdict = "meets" if ratio >= LOAD_TARGET else "MISSES"
        print(
            f"  upserts / no-op = {ratio:.2f} ({verdict} the target of {LOAD_TARGET}x), "
            f"destination {what}: {rates[f'ours{suffix}']:,.0f} vs "
            f"{rates[f'noop{suffix}']:,.0f} rows/s"
        )
    return rates["ours"]


def failed_run_reads(work: Path, rows: int, pg: PostgresBench | None) -> int:
    """Fail *rows* items, then reprocess them with ``--failed``; return source reads."""
    path = work / "failing.csv"
    write_csv(path, rows)
    fixed = {"on": False}

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if not fixed["on"]:
            raise ValueError("not yet")

    config = migrate.Config(
        [migrate.Migration("failing", CountingCsvSource(path), process)],
        store=f"sqlite:///{work / 'failed.db'}" if pg is None else pg.store("failed"),
    )
    first = migrate.run(config, migrate.RunOptions(definitions=("failing",)))
    failed = first.definitions["failing"].counts.failed
    if failed != rows:
        raise SystemExit(f"expected {rows} failed items, got {failed}")
    fixed["on"] = True
    CountingCsvSource.finds = CountingCsvSource.identities_asked = 0
    with counting_opens(path) as opened:
        started = time.perf_counter()
        summary = migrate.run(config, migrate.RunOptions(definitions=("failing",), failed=True))
        took = time.perf_counter() - started
    migrated = summary.definitions["failing"].counts.migrated
    if migrated != rows:
        raise SystemExit(f"expected {rows} reprocessed items, got {migrated}")
    verdict = "meets" if CountingCsvSource.finds == 1 else "MISSES"
    print(
        f"--failed over {rows:,} failed items of a scan source: {took:.2f} s; source read "
        f"{times(CountingCsvSource.finds)} for {CountingCsvSource.identities_asked:,} "
        f"identities ({verdict} the target of once); CSV file opened {times(opened[0])}"
    )
    return CountingCsvSource.finds


# --- memory ------------------------------------------------------------------------------------

MEMORY_TARGET = 1.5  # peak at --rows over peak at --rows / 10
MEMORY_LOOPS = {"ours": "ours (migrate run)", "floor": "hand-written floor loop"}


def memory_case(loop: str, mode: str, source: Path, db_path: Path, rows: int) -> Figures:
    """Run *loop* over *source* in this (fresh) process; its peak memory, *mode* = trace|rss."""
    gc.collect()
    rss_before = peak_rss()
    if mode == "trace":
        tracemalloc.start(1)
    if loop == "ours":
        config = migrate.Config(
            [migrate.Migration("rows", migrate.CsvSource(source), do_nothing)],
            store=f"sqlite:///{db_path}",
        )
        summary = migrate.run(config, migrate.RunOptions(definitions=("rows",)))
        if summary.definitions["rows"].counts.migrated != rows:
            raise SystemExit(f"expected {rows} migrated items")
    else:
        floor(db_path, source, rows)
    peak = tracemalloc.get_traced_memory()[1] if mode == "trace" else 0
    tracemalloc.stop()
    rss = peak_rss()
    return {"peak": peak, "rss": rss, "rss_growth": rss - rss_before}


def memory(work: Path, rows: int) -> float:
    """Peak memory of ours and the floor at *rows* / 10 and *rows*; print; return our ratio."""
    sizes = (max(1, rows // 10), rows)
    script = Path(__file__)
    got: dict[tuple[str, int], Figures] = {}
    for size in sizes:
        source = work / f"memory-{size}.csv"
        write_csv(source, size)
        for loop in MEMORY_LOOPS:
            figures: Figures = {}
            for mode in ("trace", "rss"):
                db_path = work / f"memory-{loop}-{mode}-{size}.db"
                case = ("--memory-case", f"{loop}:{mode}", "--rows", str(size))
                figures |= {
                    f"{mode}_{key}": value
                    for key, value in fresh(script, *case, str(source), str(db_path)).items()
                }
            got[loop, size] = figures
    print(
        f"memory, {sizes[0]:,} vs {sizes[1]:,} CSV rows (window {WINDOW:,}), each case in a "
        "fresh process: tracemalloc peak, and peak RSS (VmHWM, else ru_maxrss) of a run without "
        "tracemalloc (its growth = over the process after imports)"
    )
    print(f"  {'loop':<26}{'rows':>9}{'traced peak':>13}{'peak RSS':>10}{'growth':>10}")
    for (loop, size), figures in got.items():
        print(
            f"  {MEMORY_LOOPS[loop]:<26}{size:>9,}{figures['trace_peak'] / 1e6:>10.2f} MB"
            f"{figures['rss_rss'] / 1e6:>7.1f} MB{figures['rss_rss_growth'] / 1e6:>7.1f} MB"
        )
    ratios = {
        loop: (
            got[loop, sizes[1]]["trace_peak"] / got[loop, sizes[0]]["trace_peak"],
            got[loop, sizes[1]]["rss_rss"] / got[loop, sizes[0]]["rss_rss"],
        )
        for loop in MEMORY_LOOPS
    }
    ours = ratios["ours"][0]
    verdict = "meets" if ours <= MEMORY_TARGET else "MISSES"
    for loop, (traced, rss) in ratios.items():
        print(
            f"  {MEMORY_LOOPS[loop]}: peak at {sizes[1]:,} / peak at {sizes[0]:,} rows = "
            f"{traced:.2f} traced, {rss:.2f} peak RSS"
        )
    print(f"  ours {ours:.2f} ({verdict} the target of <= {MEMORY_TARGET}: bounded by the window)")
    return ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the throughput run")
    parser.add_argument("--failed", type=int, default=10_000, help="failed items to reprocess")
    parser.add_argument(
        "--naive-rows", type=int, default=5_000, help="rows of the commit-per-item loop"
    )
    parser.add_argument(
        "--load-rows", type=int, default=5_000, help="rows of the SqlDestination load"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds, best kept")
    parser.add_argument("--profile", action="store_true", help="cProfile one throughput run")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory comparison")
    parser.add_argument(
        "--durable", action="store_true", help="also run the throughput run as a durable run"
    )
    parser.add_argument(
        "--store",
        default="sqlite",
        help="sqlite (default), a postgresql:// URL, or postgresql: a throwaway server",
    )
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_case:
        loop, _, mode = args.memory_case.partition(":")
        source, db_path = args.paths
        emit(memory_case(loop, mode, source, db_path, args.rows))
        return
    if min(args.rows, args.failed, args.naive_rows, args.load_rows, args.rounds) < 1:
        parser.error("--rows, --failed, --naive-rows, --load-rows and --rounds must be >= 1")
    if args.store != "sqlite" and not args.store.startswith(("postgresql", "postgres://")):
        parser.error(f"--store must be sqlite, postgresql or a postgresql:// URL, not {args.store}")
    with (
        tempfile.TemporaryDirectory(prefix="migrate-bench-") as folder,
        contextlib.ExitStack() as stack,
    ):
        work = Path(folder)
        pg = None
        if args.store != "sqlite":
            pg = stack.enter_context(PostgresBench.at(args.store))
        throughput(
            work,
            args.rows,
            args.naive_rows,
            args.rounds,
            pg,
            profile=args.profile,
            durable=args.durable,
        )
        failed_run_reads(work, args.failed, pg)
        if pg is not None:
            print("SqlDestination load and memory: SQLite figures, left out with --store")
            return
        destination_load(work, args.load_rows, args.rounds)
        if not args.no_memory:
            memory(work, args.rows)


if __name__ == "__main__":
    main()
