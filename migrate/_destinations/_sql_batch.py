"""
One window's transaction on one destination database, for `SqlDestination`: upserts queued and
sent together, the other statements run at once, in order with them.

A queued upsert goes with the window's others when the window ends (or before the next
statement that must see it: a query, a delete, the process's own ``execute``): consecutive
upserts of one statement in one ``executemany`` inside a savepoint. Should that fail, the
savepoint is rolled back and the rows are sent one by one, each in a savepoint of its own, so a
row the database refuses is undone alone and fails only its item (a `RowFailure`).
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import sqlite3
import threading
import unicodedata
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeAlias, TypeVar

from migrate._errors import DestinationError
from migrate._pipeline import CallSite, site_traceback
from migrate._sources._sql import DbApiConnection
from migrate._window_writes import RowFailure
from migrate._workers import DaemonPool

__all__ = ["SqlBatch", "Statement", "Step", "fetched", "run_steps"]

_T = TypeVar("_T")

#: A statement and its parameters.
Statement: TypeAlias = tuple[str, Any]
#: A statement, its parameters, and whether its rows are wanted.
Step: TypeAlias = tuple[str, Any, bool]
#: A queued upsert: statement, parameters, table, key, item identity, the item's journal
#: entries and the upsert's entry among them, and the process's call (a plain tuple: one is
#: made per row).
_Queued: TypeAlias = tuple[
    str, Any, str, Any, str, "list[dict[str, Any]]", "dict[str, Any]", "CallSite | None"
]
_BY_STATEMENT = operator.itemgetter(0)
#: A key of unknown type: it may equal any other one (see `_loose`).
_ANY = object()
_NUMBERS = (int, float)


class SqlBatch:
    """
    One database's transaction for one window (see the module docstring).

    A DB-API connection (sqlite3's among them) may only be used by the thread that opened it. A
    window whose items run one by one in its own thread (*inline*) uses the connection there;
    otherwise every statement runs in a thread of the batch's own, as the window's items may
    run in several.

    Args:
        connect: Makes the connection (on first use).
        name: The destination, for messages.
        inline: Use the connection in the thread that made the batch (see above).
    """

    def __init__(self, connect: Callable[[], DbApiConnection], name: str, *, inline: bool) -> None:
        self._connect = connect
        self._name = name
        self._owner = threading.get_ident() if inline else None
        self._thread = None if inline else DaemonPool(1, f"migrate-{name}")
        self._connection: DbApiConnection | None = None
        self._cursor: Any = None
        #: Why the window's transaction cannot be trusted any more (a statement ended it).
        self._broken: str | None = None
        self._queued: list[_Queued] = []
        #: The (table, loose key) of the queued upserts, and their tables: when a probe may
        #: need them sent first.
        self._keys: set[tuple[str, Hashable]] = set()
        self._tables: set[str] = set()
        #: Rows refused when the queue was sent before the window's end (reported by `flush`).
        self._refused: list[RowFailure] = []

    # --- called from the items' threads -------------------------------------------------------

    def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._thread is not None:
            return self._thread.submit(fn, *args).result()
        if threading.get_ident() != self._owner:
            raise DestinationError(
                f"{self._name}: called from a thread the window did not start; with "
                "concurrency=1 a window's writes go through the connection of the thread "
                "processing it: give the definition concurrency > 1, or build the destination "
                "with batch=False"
            )
        return fn(*args)

    def execute(self, statements: Sequence[Step], what: str) -> list[tuple[Any, ...]]:
        """
        Send the queued upserts, then run *statements* inside one savepoint of the window's
        transaction; return the rows of the first one to be fetched (``[]`` if none is).

        Raises:
            DestinationError: If connecting or a statement failed (they are undone alone).
        """
        return self._call(self._execute, statements, what)

    def upsert(  # noqa: PLR0917 - one call per row; keywords would cost on each
        self,
        statement: Statement,
        table: str,
        key: Any,
        probe: Statement | None,
        identity: str,
        journal: list[dict[str, Any]],
        entry: dict[str, Any],
        site: CallSite | None,
    ) -> bool:
        """
        Queue the upsert *statement* of *key* in *table* for item *identity*, whose *journal*
        holds (or is about to hold) its *entry*; with a *probe*, first run it (after sending
        the queued upserts that may hold *key*) and return whether it found a row.

        Raises:
            DestinationError: If connecting or the probe failed (nothing was queued).
        """
        if self._thread is None and threading.get_ident() == self._owner:
            return self._upsert(statement, table, key, probe, identity, journal, entry, site)
        return self._call(
            self._upsert, statement, table, key, probe, identity, journal, entry, site
        )

    def flush(self) -> list[RowFailure]:
        """
        Send the queued upserts (the window ends); return the rows refused, each undone alone.

        Raises:
            DestinationError: If the window's transaction broke, so that none of it can be
                trusted (the batch's commit is then refused too).
        """
        return self._call(self._flush)

    def commit(self) -> None:
        """Commit the window's writes; raises the driver's error if that failed."""
        try:
            self._call(self._end, True)
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=False)

    def rollback(self) -> None:
        """Undo the window's writes (nothing if they were committed already)."""
        try:
            self._call(self._end, False)
        except Exception:  # noqa: BLE001, S110 - rolling back is the best that can be done
            pass
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=False)

    # --- in the connection's thread ----------------------------------------------------------

    def _cursor_of(self) -> Any:
        """The window's cursor, connecting and beginning the transaction on first use."""
        if self._broken is not None:
            raise DestinationError(f"{self._name}: {self._broken}")
        if self._cursor is not None:
            return self._cursor
        try:
            connection = self._connect()
        except Exception as error:
            raise DestinationError(f"{self._name}: cannot connect: {error}", error) from error
        try:
            # sqlite3 opens a transaction only before INSERT, UPDATE and DELETE; a
            # SAVEPOINT first would start one of its own that each RELEASE commits. SQLite's
            # takes the write lock at once: the window holds it from its first write call, as
            # when each write ran at once (the upserts themselves wait for the window's end).
            if getattr(connection, "in_transaction", None) is False:
                immediate = isinstance(connection, sqlite3.Connection)
                connection.cursor().execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
            cursor = connection.cursor()
        except Exception as error:
            with contextlib.suppress(Exception):
                connection.close()
            raise DestinationError(
                f"{self._name}: cannot begin a transaction: {error}", error
            ) from error
        self._connection, self._cursor = connection, cursor
        return cursor

    def _execute(self, statements: Sequence[Step], what: str) -> list[tuple[Any, ...]]:
        if self._broken is not None:
            raise DestinationError(f"{self._name}: {what} was not run: {self._broken}")
        cursor = self._cursor_of()
        # Run after what the process queued before: the statement sees those rows.
        self._refused.extend(self._flush_queue(cursor))
        try:
            cursor.execute("SAVEPOINT migrate_write")
            rows = run_steps(cursor, statements)
        except Exception as error:
            with contextlib.suppress(Exception):
                cursor.execute("ROLLBACK TO SAVEPOINT migrate_write")
                cursor.execute("RELEASE SAVEPOINT migrate_write")
            raise DestinationError(f"{self._name}: {what} failed: {error}", error) from error
        self._release(cursor, "migrate_write", what)
        return rows

    def _release(self, cursor: Any, savepoint: str, what: str) -> None:
        try:
            cursor.execute(f"RELEASE SAVEPOINT {savepoint}")
        except Exception as error:
            # The statement ended the window's transaction (a COMMIT or ROLLBACK the driver
            # let through): what the window wrote before may be committed or gone, so none of
            # its items may be stored as migrated; the window's commit fails them all.
            self._broken = (
                f"{what} ended the window's transaction (a COMMIT or ROLLBACK in it?); every "
                "item that wrote in this window fails and is written again by the next run"
            )
            with contextlib.suppress(Exception):
                self._connection.rollback()  # type: ignore[union-attr]
            raise DestinationError(f"{self._name}: {self._broken}: {error}", error) from error

    def _upsert(  # noqa: PLR0917 - see upsert
        self,
        statement: Statement,
        table: str,
        key: Any,
        probe: Statement | None,
        identity: str,
        journal: list[dict[str, Any]],
        entry: dict[str, Any],
        site: CallSite | None,
    ) -> bool:
        cursor = self._cursor_of()
        loose = (table, _loose(key))
        found = False
        if probe is not None:
            if table in self._tables and (
                loose in self._keys or loose[1] is _ANY or (table, _ANY) in self._keys
            ):
                # A queued upsert may hold this key: the probe must see its row.
                self._refused.extend(self._flush_queue(cursor))
            try:
                cursor.execute(*probe)
                found = bool(cursor.fetchall())
            except Exception as error:
                raise DestinationError(
                    f"{self._name}: upsert of key {key!r} failed: {error}", error
                ) from error
        self._queued.append((*statement, table, key, identity, journal, entry, site))
        self._keys.add(loose)
        self._tables.add(table)
        return found

    def _flush(self) -> list[RowFailure]:
        refused, self._refused = self._refused, []
        if self._cursor is not None:
            refused.extend(self._flush_queue(self._cursor))
        return refused

    def _flush_queue(self, cursor: Any) -> list[RowFailure]:
        """Send the queued upserts in order (see the module docstring)."""
        queued, self._queued = self._queued, []
        self._keys.clear()
        self._tables.clear()
        refused: list[RowFailure] = []
        for sql, group in itertools.groupby(queued, _BY_STATEMENT):
            rows = list(group)
            if len(rows) > 1 and self._together(cursor, sql, rows):
                continue
            for row in rows:
                failure = self._alone(cursor, row)
                if failure is not None:
                    refused.append(failure)
        return refused

    def _together(self, cursor: Any, sql: str, rows: list[_Queued]) -> bool:
        """Send *rows* in one ``executemany``; ``False`` (undone) if the database refused it."""
        try:
            cursor.execute("SAVEPOINT migrate_batch")
        except Exception as error:
            self._broken = f"sending the window's upserts failed: {error}"
            raise DestinationError(f"{self._name}: {self._broken}", error) from error
        try:
            cursor.executemany(sql, [row[1] for row in rows])
        except Exception:  # noqa: BLE001 - each row is sent alone now, to find which it was
            try:
                cursor.execute("ROLLBACK TO SAVEPOINT migrate_batch")
            except Exception as error:
                self._broken = f"undoing a refused batch failed: {error}"
                raise DestinationError(f"{self._name}: {self._broken}", error) from error
            self._release(cursor, "migrate_batch", "sending the window's upserts")
            return False
        self._release(cursor, "migrate_batch", "sending the window's upserts")
        return True

    def _alone(self, cursor: Any, row: _Queued) -> RowFailure | None:
        """Send one queued upsert in a savepoint; its failure if the database refused it."""
        sql, params, _table, key, identity, journal, entry, site = row
        what = f"upsert of key {key!r}"
        try:
            cursor.execute("SAVEPOINT migrate_write")
        except Exception as error:
            self._broken = f"sending the window's upserts failed: {error}"
            raise DestinationError(f"{self._name}: {self._broken}", error) from error
        try:
            cursor.execute(sql, params)
        except Exception as error:  # noqa: BLE001 - the row's item fails with it
            try:
                cursor.execute("ROLLBACK TO SAVEPOINT migrate_write")
            except Exception as undo:
                self._broken = f"undoing a refused {what} failed: {undo}"
                raise DestinationError(f"{self._name}: {self._broken}", undo) from undo
            self._release(cursor, "migrate_write", what)
            failure = DestinationError(f"{self._name}: {what} failed: {error}", error)
            # The evidence names the process's line that made the write, as if it had failed
            # there (the driver's error stays the cause).
            failure.__traceback__ = site_traceback(site)
            kept = [e for e in journal if e is not entry]
            return RowFailure(self._name, identity, failure, kept or None)
        self._release(cursor, "migrate_write", what)
        return None

    def _end(self, commit: bool) -> None:
        connection, self._connection, self._cursor = self._connection, None, None
        self._queued, self._keys, self._tables = [], set(), set()
        if connection is None:
            return
        try:
            if commit and self._broken is not None:
                raise DestinationError(self._broken)
            if commit:
                connection.commit()
            else:
                connection.rollback()
        except Exception:
            with contextlib.suppress(Exception):
                connection.rollback()
            raise
        finally:
            with contextlib.suppress(Exception):
                connection.close()


def _loose(key: Any) -> Hashable:
    """
    *key* in a form equal for every two keys a database may take for one row (so a query for
    one knows when a queued upsert of the other must go first): numbers and numeric text by
    value (SQLite's column affinity makes ``1`` and ``"1"`` one key), other text case-folded,
    compatibility-normalized and stripped (case-insensitive collations, padded ``CHAR``); bytes
    as they are. A key of any other type may equal anything (`_ANY`). Two keys that differ here
    are different rows in any database; two that are equal may not be (that costs a send).
    """
    if isinstance(key, _NUMBERS):
        return key if key == key else "nan"  # noqa: PLR0124 - NaN equals no key
    if isinstance(key, str):
        text = unicodedata.normalize("NFKC", key).casefold().strip()
        try:
            number = float(text)
        except ValueError:
            return text
        return number if number == number else "nan"  # noqa: PLR0124
    if isinstance(key, bytes):
        return key
    return _ANY


def run_steps(cursor: Any, statements: Sequence[Step]) -> list[tuple[Any, ...]]:
    """Execute *statements* in order on *cursor*; the rows of the first one fetched."""
    rows: list[tuple[Any, ...]] | None = None
    for sql, params, fetch in statements:
        cursor.execute(sql, params)
        if fetch and rows is None:
            rows = fetched(cursor)
    return [] if rows is None else rows


def fetched(cursor: Any) -> list[tuple[Any, ...]]:
    """The rows a statement returned (``[]`` when it returns none), as tuples."""
    if cursor.description is None:
        return []
    return [tuple(row) for row in cursor.fetchall()]
