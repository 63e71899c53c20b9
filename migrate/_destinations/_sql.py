"""A SQL table destination over any DB-API 2.0 connection, idempotent by key."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

from returns.result import Failure, Result, Success

from effects import Effect
from migrate._compensate import describe_entry, pending_changes
from migrate._destinations._sql_batch import SqlBatch, Statement, Step, run_steps
from migrate._errors import DestinationError
from migrate._json import safe_text
from migrate._pipeline import Scope, call_site, current_scope, journal_entries
from migrate._rollback_item import RollbackItem
from migrate._sources._sql import (
    DbApiConnection,
    ParamStyle,
    parameters,
    placeholder,
    quote_identifier,
)
from migrate._window_writes import WindowWrites, current_writes

__all__ = ["SqlDestination"]

#: Statements that end, start or nest transactions: `SqlDestination.execute` runs inside the
#: window's transaction (a savepoint of it), which they would break.
_TRANSACTION_CONTROL = re.compile(
    r"\s*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE|START\s+TRANSACTION|ABORT)\b",
    re.IGNORECASE,
)


#: How many upsert statements (one per set of record columns) a destination keeps.
_KEPT_STATEMENTS: Final = 256
#: The name of an upsert's effect in retry events (its function's, before it was inlined).
_UPSERT: Final = "SqlDestination.upsert.<locals>.write"
_DONE: Final[Result[None, DestinationError]] = Success(None)


class SqlDestination:
    """
    Rows of a SQL table written by key: `upsert` and `delete` are idempotent, so a retried call
    (or a reprocessed item) writes the same row again instead of a duplicate.

    During a run, the writes of one window share one connection and one transaction, committed
    once the window's items are processed and before their states are stored (so a state never
    says ``migrated`` for a row that was not committed): a load goes at the database's speed,
    not at one commit per row. An upsert is queued, and the window's upserts are sent together
    (consecutive ones of the same columns in one ``executemany``) when the window ends, or
    before the next statement that must see them (a ``delete``, `execute`, or the ``created``
    query of a key a queued row may hold). Should the database refuse them, they are sent again
    one by one, each in a savepoint: a refused row is undone alone and fails only its item, with
    a ``destination`` error naming the key, the database's reason and the process's line that
    made the call, and its entry is left out of the item's journal. Should the window's commit
    fail, every item that wrote in it fails with a ``destination`` error saying so, and the next
    run writes them again. Destinations built on the same *connect* function share that
    connection (and so can write to one SQLite file without waiting on each other's lock); with
    ``concurrency=1`` it is used in the thread processing the window, so a call from a thread the
    process starts fails (use ``concurrency`` > 1, or ``batch=False``). Outside a run, each call
    opens a connection, runs in one transaction, commits and closes.

    The process's own writes to the same database belong in that transaction too: `execute`
    runs any statement there (an audit row beside each upsert), so they commit or vanish with
    the window's. A connection of the process's own would meet the window's open transaction:
    with SQLite it waits for the database's write lock until its timeout (``database is
    locked``), with PostgreSQL it does not see the window's rows (a foreign key to a row just
    upserted fails). Where the process must write through its own connection (a library that
    opens one), build the destination with ``batch=False``: each call then commits on its own
    connection, as outside a run, at one commit per write.

    On success a call adds a change entry to the journal of the item being processed:
    ``{"kind": "change", "destination": "sql:TABLE", "operation": "upsert", "key": KEY,
    "created": BOOL}`` or ``{..., "operation": "delete", "key": KEY}``. ``created`` says whether
    the row is the migration's: it did not exist before the definition first migrated the
    item (see `upsert`), which is what `rollback` and `undo` go by. The upsert uses ``INSERT
    ... ON CONFLICT (key) DO UPDATE`` (SQLite 3.24+, PostgreSQL); the key column needs a unique
    index.

    Args:
        connect: Returns a new DB-API connection, e.g. ``lambda: sqlite3.connect("dest.db")``.
        table: Table name (``schema.table`` allowed); checked, then quoted.
        key: The key column; checked, then quoted.
        paramstyle: The driver's DB-API ``paramstyle`` (sqlite3: ``"qmark"``).
        batch: In a run, write a window's calls in one transaction (the default); ``False``:
            every call connects, writes and commits on its own, in a run as outside one.

    Raises:
        ValueError: If *table* or *key* is not a plain SQL name.

    Example:
        >>> import sqlite3, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "dest.db")
        >>> with sqlite3.connect(path) as db:
        ...     _ = db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
        >>> people = SqlDestination(lambda: sqlite3.connect(path), "people", "id")
        >>> people.upsert({"id": 1, "name": "Ada"}).run()
        <Success: None>
        >>> people.upsert({"id": 1, "name": "Ada L."}).run_or_raise()
        >>> sqlite3.connect(path).execute("SELECT * FROM people").fetchall()
        [(1, 'Ada L.')]
    """

    def __init__(
        self,
        connect: Callable[[], DbApiConnection],
        table: str,
        key: str,
        *,
        paramstyle: ParamStyle = "qmark",
        batch: bool = True,
    ) -> None:
        self._table = quote_identifier(table, argument="table")
        self._key = quote_identifier(key, argument="key")
        where = f"WHERE {self._key} = {placeholder(paramstyle, 1, 'key')}"
        #: The query finding the row of a key (a row if it exists), and its deletion.
        self._find_sql = f"SELECT 1 FROM {self._table} {where}"
        self._delete_sql = f"DELETE FROM {self._table} {where}"
        self.connect = connect
        self.table = table
        self.key = key
        self.paramstyle: ParamStyle = paramstyle
        self.batch = batch
        self.name = f"sql:{table}"
        #: The upsert statements made so far, by the record's columns.
        self._upserts: dict[tuple[str, ...], str] = {}

    def __repr__(self) -> str:
        more = "" if self.batch else ", batch=False"
        return f"SqlDestination(<connect>, {self.table!r}, {self.key!r}{more})"

    def _window_batch(self) -> tuple[WindowWrites, SqlBatch] | None:
        """The window's writes and this destination's batch in them, if the call is batched."""
        writes = current_writes() if self.batch else None
        if writes is None:
            return None
        batch = writes.batch(self.connect, self.name, self._new_batch)
        return (writes, batch) if isinstance(batch, SqlBatch) else None

    def _new_batch(self, writes: WindowWrites) -> SqlBatch:
        return SqlBatch(self.connect, self.name, inline=writes.one_thread)

    def _execute(
        self,
        sql: str,
        params: Any,
        what: str,
        *,
        fetch: bool = False,
        probe: Statement | None = None,
    ) -> list[tuple[Any, ...]]:
        """
        Run *sql* in the window's transaction (a savepoint of it, after the upserts queued
        before it), or alone; return its rows (*fetch*), else, with a *probe*, the rows the
        probe's query returned just before *sql* in the same savepoint or transaction, else
        ``[]``.
        """
        statements: list[Step] = (
            [(sql, params, fetch)] if probe is None else [(*probe, True), (sql, params, False)]
        )
        found = self._window_batch()
        if found is not None:
            writes, batch = found
            rows = batch.execute(statements, what)
            scope = current_scope()
            if scope is not None:
                writes.wrote(self.connect, scope.identity)
            return rows
        return self._alone(statements, what)

    def _alone(self, statements: Sequence[Step], what: str) -> list[tuple[Any, ...]]:
        """Run *statements* on a connection of their own in one transaction, and commit; the
        rows of the first one fetched."""
        try:
            connection = self.connect()
        except Exception as error:
            raise DestinationError(f"{self.name}: cannot connect: {error}", error) from error
        try:
            cursor = connection.cursor()
            rows = run_steps(cursor, statements)
            connection.commit()
        except Exception as error:
            # The first error is the one to report; a failing rollback adds nothing.
            with contextlib.suppress(Exception):
                connection.rollback()
            raise DestinationError(f"{self.name}: {what} failed: {error}", error) from error
        finally:
            connection.close()
        return rows

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> Effect[list[tuple[Any, ...]], DestinationError]:
        """
        An effect running one SQL statement of the process's own on this destination's
        database, in the window's transaction: it commits with the window's writes, or is
        undone with them.

        For the writes that go beside the destination's, such as an audit row for each upsert,
        which a connection of the process's own could not make while the window's transaction
        is open. Like `upsert`, it runs in a savepoint of its own (a failing statement is
        undone alone and fails with `DestinationError`); outside a run, or with
        ``batch=False``, it connects, runs and commits alone. It adds no journal entry: record
        in ``scope.journal`` what a rollback would need.

        Args:
            sql: One statement, with placeholders in the destination's *paramstyle*; not a
                transaction statement (``BEGIN``, ``COMMIT``, ``ROLLBACK``, ``SAVEPOINT``, ...).
            params: Its parameters: a sequence, or a mapping for the named paramstyles.

        Returns:
            An effect whose value is the rows the statement returned (a ``SELECT``, or
            ``RETURNING``), as tuples; ``[]`` for a statement that returns none.

        Raises:
            ValueError: At once, if *sql* is empty or a transaction statement.

        Example:
            >>> import sqlite3, tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "dest.db")
            >>> with sqlite3.connect(path) as db:
            ...     _ = db.execute("CREATE TABLE audit (person INTEGER, note TEXT)")
            >>> people = SqlDestination(lambda: sqlite3.connect(path), "people", "id")
            >>> people.execute("INSERT INTO audit VALUES (?, ?)", (1, "upserted")).run_or_raise()
            []
            >>> people.execute("SELECT person, note FROM audit").run_or_raise()
            [(1, 'upserted')]
        """
        text = cast(object, sql)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"execute needs one SQL statement, got {sql!r}")
        if _TRANSACTION_CONTROL.match(text):
            raise ValueError(
                f"execute runs inside the window's transaction, so it cannot run {sql!r}: "
                "leave BEGIN, COMMIT, ROLLBACK and savepoints to the run"
            )
        first = " ".join(text.split())[:60]

        def run() -> list[tuple[Any, ...]]:
            return self._execute(text, params, f"statement {first!r}", fetch=True)

        return Effect.attempt(run, catch=DestinationError)

    def upsert(self, record: Mapping[str, Any]) -> Effect[None, DestinationError]:
        """
        An effect inserting *record*, or updating the row with its key.

        In a run (batched), the effect queues the row (see the class docstring): it fails at
        once only for what can be known then (connecting, the query below), which a piped
        retry retries; a row the database refuses when the window sends it fails the item
        then, unretried. Its journal entry says whether the row is the migration's
        (``"created": true``) or existed before the definition first migrated the item
        (``false``): the item's earlier journal entries for this key decide, first the ones
        stored with its state by an earlier run (`Scope.prior_journal`), then this run's;
        without any, a ``SELECT`` of the key at the call, in the window's transaction (after
        the queued upserts that may hold the key), finds whether the row exists. So a row the
        migration created stays ``created`` through later runs that update it, and a row that
        was there first stays not created. Forgetting an item's state (``migrate forget``, or
        a rollback) forgets that evidence too: the next run finds the row (if one is left) as
        if it had been there first.

        Args:
            record: Column name to value; must hold the key column.

        Raises:
            ValueError: At once, if *record* lacks the key or has a column that is not a plain
                SQL name.
        """
        if self.key not in record:
            raise ValueError(f"record must have the key column {self.key!r}: {dict(record)!r}")
        columns = tuple(record)
        sql = self._upserts.get(columns) or self._upsert_sql(columns)
        if self.paramstyle in ("named", "pyformat"):
            params: Any = {f"p{i}": record[c] for i, c in enumerate(columns)}
        else:
            params = tuple(map(record.__getitem__, columns))
        key = record[self.key]

        def write() -> None:
            scope = current_scope()
            if scope is None:
                self._execute(sql, params, f"upsert of key {key!r}")
                return
            created = self._created_before(scope, key)
            found = self._window_batch()
            if found is None:
                what = f"upsert of key {key!r}"
                if created is None:
                    created = not self._execute(sql, params, what, probe=self._probe(key))
                else:
                    self._execute(sql, params, what)
                scope.journal.change(self.name, "upsert", key=key, created=created)
                return
            # In a window: queued, sent with the window's others (see the class docstring).
            writes, batch = found
            entry: dict[str, Any] = {"kind": "change", "destination": self.name}
            entry["operation"] = "upsert"
            if key is not None:
                entry["key"] = key
            journal = scope.journal.entries
            probe = None if created is not None else self._probe(key)
            existed = batch.upsert(
                (sql, params), self._table, key, probe, scope.identity, journal, entry, call_site()
            )
            entry["created"] = created if created is not None else not existed
            journal.append(entry)
            writes.wrote(self.connect, scope.identity)

        def run() -> Result[None, DestinationError]:
            # Effect.attempt(write, catch=DestinationError), without its checks of `write`
            # on every call: one upsert per item adds up.
            try:
                write()
            except DestinationError as error:
                return Failure(error)
            return _DONE

        return Effect(run, _UPSERT)

    def _upsert_sql(self, columns: tuple[str, ...]) -> str:
        """The upsert of a record with *columns* (kept for the next one with the same)."""
        quoted = [quote_identifier(c, argument="record column") for c in columns]
        style = self.paramstyle
        markers = [placeholder(style, i + 1, f"p{i}") for i in range(len(columns))]
        updates = [
            f"{q} = excluded.{q}" for c, q in zip(columns, quoted, strict=True) if c != self.key
        ]
        conflict = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
        sql = (
            f"INSERT INTO {self._table} ({', '.join(quoted)}) VALUES ({', '.join(markers)}) "
            f"ON CONFLICT ({self._key}) {conflict}"
        )
        if len(self._upserts) >= _KEPT_STATEMENTS:
            self._upserts.clear()
        self._upserts[columns] = sql
        return sql

    def _probe(self, key: Any) -> Statement:
        """The query finding the row with *key*: a row if it exists, none if not."""
        if self.paramstyle in ("named", "pyformat"):
            return self._find_sql, {"key": key}
        return self._find_sql, (key,)

    def _created_before(self, scope: Scope, key: Any) -> bool | None:
        """What the item's earliest upsert entry of *key* (an earlier run's, else this run's)
        says of ``created``; ``None`` if it has none."""
        name = self.name
        for entries in (scope.prior_journal, journal_entries(scope)):
            for entry in entries:
                if (
                    entry.get("destination") == name
                    and entry.get("operation") == "upsert"
                    and "key" in entry
                    and _same_key(entry["key"], key)
                ):
                    created = entry.get("created")
                    if isinstance(created, bool):
                        return created
        return None

    def delete(self, key: Any) -> Effect[None, DestinationError]:
        """An effect deleting the row with *key* (deleting a missing row succeeds)."""
        sql, params = self._deletion(key)

        def remove() -> None:
            self._execute(sql, params, f"delete of key {key!r}")
            scope = current_scope()
            if scope is not None:
                scope.journal.change(self.name, "delete", key=key)

        return Effect.attempt(remove, catch=DestinationError)

    def _deletion(self, key: Any) -> Statement:
        return self._delete_sql, parameters(self.paramstyle, [("key", key)])

    def undo(self, entry: Mapping[str, Any], scope: Scope | None = None) -> None:
        """
        Undo one change entry this destination recorded: delete the row an upsert created.

        An ``upsert`` entry with ``"created": true`` deletes the row with its key (a row that
        is gone already is a success, so undoing twice is harmless). A row that existed before
        the migration (``"created": false``, or no ``created`` at all: an entry of an older
        version, which cannot tell) is left as it is, with the values the migration wrote: a
        rollback does not restore the old values of an updated row. A ``delete`` entry is left
        too: the deleted row's values are not in the journal. The delete runs on a connection
        of its own and is committed before `undo` returns, also during a run.

        A handler for `migrate.compensate` (``{table.name: table.undo}``); for an item that
        only this destination changed, `rollback` undoes them all in one transaction.

        Args:
            entry: A change entry of this destination, as the journal holds it.
            scope: The rollback's scope (unused: the entry says everything).

        Raises:
            TypeError: If *entry* is not a mapping.
            ValueError: If *entry* is not a change entry of this destination, has an operation
                other than ``upsert`` and ``delete``, or is a created row without a usable key
                (none, or not a string or number).
            DestinationError: If connecting or the delete failed.

        Example:
            >>> import sqlite3, tempfile, os
            >>> path = os.path.join(tempfile.mkdtemp(), "dest.db")
            >>> with sqlite3.connect(path) as db:
            ...     _ = db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
            ...     _ = db.execute("INSERT INTO people VALUES (1, 'Ada'), (2, 'Alan')")
            >>> people = SqlDestination(lambda: sqlite3.connect(path), "people", "id")
            >>> change = {"kind": "change", "destination": "sql:people", "operation": "upsert"}
            >>> people.undo({**change, "key": 1, "created": True})
            >>> people.undo({**change, "key": 1, "created": True})  # gone already: a success
            >>> people.undo({**change, "key": 2, "created": False})  # there before: kept
            >>> sqlite3.connect(path).execute("SELECT * FROM people").fetchall()
            [(2, 'Alan')]
        """
        deletion = self._undoing(entry)
        if deletion is not None:
            self._alone([(*deletion, False)], f"undo of {describe_entry(entry)}")

    def rollback(self, item: RollbackItem, scope: Scope | None = None) -> None:
        """
        Undo an item whose journal holds changes of this destination only: deletes the rows
        its upserts created, newest first, in one transaction; ``Migration(...,
        rollback=table.rollback)``.

        Each entry is undone as `undo` says: rows the migration created are deleted, rows that
        existed before it are kept as they are (a rollback does not restore the old values of
        an updated pre-existing row, nor a deleted row); a row already gone is a success, so a
        second rollback of the same item is harmless. Entries an earlier failed attempt undid
        are skipped. Every entry is checked before anything is deleted, and the deletes are
        committed together or not at all.

        Args:
            item: The item to undo (`RollbackItem`).
            scope: The rollback's scope (unused).

        Raises:
            ValueError: Before deleting anything, if the item's journal holds a change of
                another destination (`migrate.compensate` undoes several destinations, with
                `undo` as this one's handler), or an entry `undo` refuses.
            DestinationError: If connecting or a delete failed (none of them is kept).
        """
        pending = pending_changes(item)
        others = sorted(
            {
                safe_text(repr(destination), 200)
                for entry in pending
                if (destination := entry.get("destination")) != self.name
            }
        )
        if others:
            raise ValueError(
                f"{self!r}.rollback undoes the changes of {self.name!r} only, but the journal "
                f"of item {item.identity!r} also holds changes of {', '.join(others)}: undo "
                f"them all with migrate.compensate(item, scope, {{{self.name!r}: "
                "table.undo, ...}); nothing was undone"
            )
        deletions = [d for entry in pending if (d := self._undoing(entry)) is not None]
        if deletions:
            self._alone(
                [(sql, params, False) for sql, params in deletions],
                f"rollback of item {item.identity!r}",
            )

    def _undoing(self, entry: Mapping[str, Any]) -> Statement | None:
        """The delete undoing *entry*, ``None`` if it leaves the row as it is; checks it."""
        candidate = cast(object, entry)
        if not isinstance(candidate, Mapping):
            raise TypeError(
                f"{self.name}: a journal entry must be a mapping, got {safe_text(repr(entry))}"
            )
        if entry.get("kind", "change") != "change" or entry.get("destination") != self.name:
            raise ValueError(
                f"{self.name}: {safe_text(dict(entry))} is not a change entry of {self.name!r}"
            )
        operation = entry.get("operation")
        if operation == "delete":
            return None
        if operation != "upsert":
            raise ValueError(
                f"{self.name}: cannot undo {describe_entry(entry)}: only upsert and delete "
                "entries are this destination's"
            )
        if entry.get("created") is not True:
            return None
        key: object = entry.get("key")
        if not isinstance(key, str | int | float):
            problem = "has no key" if key is None else f"has a key of type {type(key).__name__}"
            raise ValueError(
                f"{self.name}: cannot undo {describe_entry(entry)}: the entry {problem}, so "
                "the row it created cannot be found"
            )
        return self._deletion(key)


def _same_key(stored: object, key: object) -> bool:
    """Whether a journal entry's key (JSON) is *key*; never raises."""
    try:
        return bool(stored == key)
    except Exception:  # noqa: BLE001 - a key whose comparison fails is another key
        return False
