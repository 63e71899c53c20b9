"""
What polling recurring workflows costs as their number grows: 1,000 recurrings beside 10, one of
them due at each poll, on SQLite, on a virtual clock.

Run: ``.venv/bin/python benchmarks/durable_recurring.py [--recurrings N] [--polls N]``

Recurring *i* of *N* waits 3600 + *i* seconds, then *N* seconds each time
(``from_delays(3600 + i).and_then(spaced(N))``), all first seen at once, so from an hour on one
comes due each second, whatever *N*. Each poll moves the clock one second and calls
``run_until_idle()``, which steps what is due, starts its run and runs it. Printed per poll: the
recurring rows the store read (``due_recurring`` and ``recurring``: what the engine asked for,
counted at the store's methods), the SQL statements (SQLite), and the time; then the ratio of the
times per poll (N recurrings / 10), and the plan of the due read, which is one range of the index
``recurring_due``. The row counts do not depend on the machine; the times do (the ratio is what
to read). The PostgreSQL store reads the same range (``tests/durable/test_benchmark_recurring.py``
shows its plan).
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _sqlite_counting import Tally, counted

from effects.durable import Engine, Recurring, WorkflowContext, workflow
from effects.durable._engine import open_store
from effects.durable._store import sqlite_sql
from effects.testing import VirtualClock
from schedules import from_delays, spaced

#: 2026-01-01T00:00:00Z in epoch seconds.
T0 = 1_767_225_600.0


@workflow("bench:tick")
async def tick(ctx: WorkflowContext, value: Any) -> Any:
    """Return the input."""
    return value


class CountingStore:
    """A store that counts the recurring rows its reads return."""

    def __init__(self, url: str) -> None:
        self._inner = open_store(url)
        self.rows_read = 0
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def due_recurring(self, now: int) -> Any:
        """Count, then read."""
        found = await self._inner.due_recurring(now)
        self.reads += 1
        self.rows_read += len(found)
        return found

    async def recurring(self, names: Any = None) -> Any:
        """Count, then read."""
        found = await self._inner.recurring(names)
        self.reads += 1
        self.rows_read += len(found)
        return found


async def measure(url: str, count: int, polls: int) -> dict[str, float]:
    """Per poll: recurring rows read, reads, statements, ms; and the runs started."""
    clock = VirtualClock(T0)
    recurring = [
        Recurring(f"r{i:05d}", tick, from_delays(3600 + i).and_then(spaced(count)), input=i)
        for i in range(count)
    ]
    store = CountingStore(url)
    tally = Tally()
    with counted(tally):
        async with Engine(store, workflows=[tick], recurring=recurring, clock=clock) as engine:
            await engine.run_until_idle()  # the first steps of all of them
            clock.advance(3600)
            await engine.run_until_idle()  # r00000 is due
            store.rows_read = store.reads = 0
            tally.clear()
            started = time.perf_counter()
            for _ in range(polls):
                clock.advance(1)
                await engine.run_until_idle()
            elapsed = time.perf_counter() - started
            runs = len(await engine.list_runs(limit=1_000_000))
    return {
        "rows": store.rows_read / polls,
        "reads": store.reads / polls,
        "statements": tally.count() / polls,
        "ms": 1000 * elapsed / polls,
        "runs": runs,
    }


def due_plan(path: Path) -> str:
    """The plan SQLite makes for the due read."""
    with sqlite3.connect(path) as db:
        rows = db.execute(f"EXPLAIN QUERY PLAN {sqlite_sql.RECURRING_DUE}", (0,)).fetchall()
    return "; ".join(row[-1] for row in rows)


def main(argv: list[str] | None = None) -> int:
    """Run both sizes and print the table."""
    parser = argparse.ArgumentParser(prog="durable_recurring")
    parser.add_argument("--recurrings", type=int, default=1000)
    parser.add_argument("--polls", type=int, default=200)
    args = parser.parse_args(argv)
    if args.polls < 1 or args.recurrings < 10:
        parser.error("--polls must be >= 1 and --recurrings >= 10")
    folder = Path(tempfile.mkdtemp(prefix="durable-recurring-"))
    results: dict[int, dict[str, float]] = {}
    for count in (10, args.recurrings):
        url = f"sqlite:///{folder / f'{count}.db'}"
        results[count] = asyncio.run(measure(url, count, args.polls))
    print(f"Recurring polls: {args.recurrings:,} recurrings beside 10, one due per poll (SQLite)")
    print("  recurrings  polls  rows read/poll  reads/poll  statements/poll  ms/poll")
    for count, found in results.items():
        print(
            f"  {count:<10,}  {args.polls:<5}  {found['rows']:<14.2f}  {found['reads']:<10.2f}"
            f"  {found['statements']:<15.1f}  {found['ms']:.2f}"
        )
    ratio = results[args.recurrings]["ms"] / results[10]["ms"]
    print(f"  ratio of ms/poll ({args.recurrings:,} / 10): {ratio:.2f}")
    print(f"  plan of the due read: {due_plan(folder / f'{args.recurrings}.db')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
