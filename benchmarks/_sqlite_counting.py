"""
Counting what a store asks of SQLite: statements (with their time) and write transactions.

``counted(tally)`` makes ``sqlite3.connect`` return connections that count into *tally* for the
block, so a store opened inside it is counted. A write transaction is a ``BEGIN IMMEDIATE`` ...
``COMMIT`` pair, or a write statement run alone in autocommit (one fsync under
``synchronous=FULL``; a group commit is one); it is *empty* when no row changed. These counts do
not depend on the machine's load.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Tally", "counted", "counting_connection"]

#: The first word of a statement that writes, to six letters.
_WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "REPLAC"})


class Tally:
    """Statement counts and times of every counted connection, by statement."""

    def __init__(self) -> None:
        self.statements: dict[str, list[float]] = {}
        self.writes = 0
        self.empty_writes = 0

    def add(self, sql: str, seconds: float) -> None:
        """Count one statement that took *seconds*."""
        key = " ".join(sql.split())[:72]
        found = self.statements.setdefault(key, [0.0, 0.0])
        found[0] += 1
        found[1] += seconds

    def count(self) -> int:
        """How many statements were counted."""
        return sum(int(count) for count, _ in self.statements.values())

    def clear(self) -> None:
        """Forget what was counted (after the warm-up)."""
        self.statements.clear()
        self.writes = self.empty_writes = 0


def counting_connection(
    tally: Tally, clock: Callable[[], float] = time.perf_counter
) -> type[sqlite3.Connection]:
    """
    A ``sqlite3.Connection`` class that counts into *tally*, timing statements by *clock*
    (default the wall clock; ``time.thread_time`` for the CPU they took).
    """

    class Counting(sqlite3.Connection):
        changes_at_begin = 0

        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            if sql == "BEGIN IMMEDIATE":
                self.changes_at_begin = self.total_changes
            elif sql == "COMMIT":
                tally.writes += 1
                tally.empty_writes += self.total_changes == self.changes_at_begin
            # A write statement outside a transaction is one of its own (autocommit).
            alone = not self.in_transaction and sql.lstrip()[:6].upper() in _WRITES
            changes = self.total_changes
            start = clock()
            try:
                return super().execute(sql, parameters)
            finally:
                tally.add(sql, clock() - start)
                if alone:
                    tally.writes += 1
                    tally.empty_writes += self.total_changes == changes

        def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
            start = clock()
            try:
                return super().executemany(sql, parameters)
            finally:
                tally.add(f"(many) {sql}", clock() - start)

    return Counting


@contextmanager
def counted(
    tally: Tally, *, autocheckpoint: bool = False, clock: Callable[[], float] = time.perf_counter
) -> Iterator[None]:
    """
    Make ``sqlite3.connect`` in the block return counting connections; without
    *autocheckpoint* they run with ``wal_autocheckpoint=0``, so the WAL's growth is the pages
    written.
    """
    connect = sqlite3.connect
    factory = counting_connection(tally, clock)

    def counting_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", factory)
        db: sqlite3.Connection = connect(*args, **kwargs)
        if not autocheckpoint:
            db.execute("PRAGMA wal_autocheckpoint=0")
        return db

    # The store calls sqlite3.connect at open; swapping the module's function is the one seam.
    sqlite3.connect = counting_connect  # type: ignore[assignment]
    try:
        yield
    finally:
        sqlite3.connect = connect
