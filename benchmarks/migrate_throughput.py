"""
Throughput of ``migrate`` with the SQLite store, and source reads of a failed-item run.

1. 100,000 CSV rows through a process that does nothing: items per second (target >= 20,000/s).
2. ``--failed`` over 10,000 failed items of a CSV (``scan``) source: how many times the source was
   read to find them (target: once), counted by wrapping the source's ``find`` and by counting
   opens of the CSV file.

Run with ``.venv/bin/python benchmarks/migrate_throughput.py [--rows N] [--failed N]
[--profile]``; ``--profile`` prints the top of a cProfile of the throughput run.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import io
import pstats
import tempfile
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from unittest import mock

import migrate

THROUGHPUT_TARGET = 20_000  # items per second


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


class CountingCsvSource(migrate.CsvSource):
    """A CSV source counting its lookups by identity (each one reads the file)."""

    finds = 0
    identities_asked = 0

    def find(self, identities: Collection[str]) -> dict[str, migrate.Item]:
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


def throughput(work: Path, rows: int, *, profile: bool) -> float:
    """Migrate *rows* CSV rows with a no-op process; return items per second."""
    source = work / "rows.csv"
    write_csv(source, rows)
    config = migrate.Config(
        [migrate.Migration("rows", migrate.CsvSource(source), do_nothing)],
        store=f"sqlite:///{work / 'throughput.db'}",
    )
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    summary = migrate.run(config, migrate.RunOptions(definitions=("rows",)))
    if profiler is not None:
        profiler.disable()
    took = time.perf_counter() - started
    migrated = summary.definitions["rows"].counts.migrated
    if migrated != rows:
        raise SystemExit(f"expected {rows} migrated items, got {migrated}")
    rate = rows / took
    verdict = "meets" if rate >= THROUGHPUT_TARGET else "MISSES"
    print(
        f"throughput: {rows:,} CSV rows, no-op process, SQLite store: {took:.2f} s, "
        f"{rate:,.0f} items/s ({verdict} the target of {THROUGHPUT_TARGET:,}/s)"
    )
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        print(text.getvalue())
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(20)
        print(text.getvalue())
    return rate


def failed_run_reads(work: Path, rows: int) -> int:
    """Fail *rows* items, then reprocess them with ``--failed``; return source reads."""
    path = work / "failing.csv"
    write_csv(path, rows)
    fixed = {"on": False}

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if not fixed["on"]:
            raise ValueError("not yet")

    config = migrate.Config(
        [migrate.Migration("failing", CountingCsvSource(path), process)],
        store=f"sqlite:///{work / 'failed.db'}",
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
        f"{CountingCsvSource.finds} time(s) for {CountingCsvSource.identities_asked:,} "
        f"identities ({verdict} the target of once); CSV file opened {opened[0]} time(s)"
    )
    return CountingCsvSource.finds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the throughput run")
    parser.add_argument("--failed", type=int, default=10_000, help="failed items to reprocess")
    parser.add_argument("--profile", action="store_true", help="cProfile the throughput run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="migrate-bench-") as folder:
        work = Path(folder)
        throughput(work, args.rows, profile=args.profile)
        failed_run_reads(work, args.failed)


if __name__ == "__main__":
    main()
