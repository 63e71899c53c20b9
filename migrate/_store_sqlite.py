"""
The SQLite store: item states, runs, cursors, contracts and locks in one file (WAL mode).

Writes are batched: one transaction per window holds the window's item states, the run's counts
and the definition's cursor, so a crash loses the window entirely or not at all. Opening checks
the file before anything is written to it: a file that is not a SQLite database, is truncated, is
another program's database or has a newer schema is refused with a `StoreError` (or
`StoreSchemaError`) naming it, and left as it was.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
from collections.abc import Generator, Iterable, Mapping, Sequence
from itertools import compress
from operator import is_not
from pathlib import Path
from types import TracebackType
from typing import Any, Final, cast

from migrate._errors import ConfigError, LockHeld, StoreError, StoreSchemaError
from migrate._liveness import ProcessId, is_alive, this_process
from migrate._sources import Contract, Cursor
from migrate._state import (
    Counts,
    DefinitionResult,
    FailureRecord,
    ItemState,
    ItemStatus,
    LockInfo,
    RunRecord,
    RunStatus,
)
from migrate._store import (
    POSITIONAL_TYPES,
    PriorState,
    RollbackCommit,
    StateWrite,
    Store,
    UpdateRequest,
    WindowCommit,
    check_durable_run_id,
    stale_window,
)
from migrate._store_memory import MemoryStore
from migrate._store_rows import (
    FAILURE_COLUMNS,
    LOCK_COLUMNS,
    RUN_COLUMNS,
    RUN_WIDTH,
    STATE_COLUMNS,
    dead_run,
    definitions_json,
    failure_records,
    item_state,
    loads,
    lock_info,
    next_attempts,
    run_record,
)
from migrate._text import plural, storable, stored_text

__all__ = ["SCHEMA_VERSION", "SqliteStore", "open_sqlite", "sqlite_exists", "store_path"]

#: The schema this version writes; a store with a higher version is refused, a lower one upgraded.
#: 1: item states, runs, cursors, locks. 2: adds definition contracts. 3: adds each state's source
#: position and the start token of the process holding a run or a lock. 4: adds the update requests
#: not carried out yet. 5: adds the durable run that owns a run or holds a lock. 6: adds each run's
#: kind (a run or a rollback) and each state's failed rollback attempts. 7: adds the run whose
#: scan last saw each state (``--rollback-orphans``). 8: the index of states by status keeps the
#: states that are not ``migrated`` only (`_DROPPED_INDEXES`).
SCHEMA_VERSION: Final = 8

DEFAULT_TIMEOUT: Final = 30.0  # seconds a write waits for another connection's lock

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS item_states (
    definition TEXT NOT NULL,
    identity TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    error TEXT,
    version TEXT,
    journal TEXT,
    tracking TEXT,
    run_id TEXT,
    updated_at REAL NOT NULL,
    position TEXT,
    rollback_attempts TEXT,
    seen_by TEXT,
    PRIMARY KEY (definition, identity)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS item_states_waiting ON item_states (definition, status)
    WHERE status <> 'migrated';
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    mode TEXT NOT NULL,
    definitions TEXT NOT NULL,
    error TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    process TEXT,
    durable_run_id TEXT,
    kind TEXT NOT NULL DEFAULT 'run'
);
CREATE TABLE IF NOT EXISTS cursors (
    definition TEXT PRIMARY KEY,
    cursor TEXT,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS contracts (
    definition TEXT PRIMARY KEY,
    contract TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    run_id TEXT NOT NULL,
    recorded_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS update_requests (
    definition TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    requested_at REAL NOT NULL,
    marked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS locks (
    definition TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    process TEXT,
    durable_run_id TEXT
);
"""

#: Indexes of older schema versions, dropped by the upgrade. 8: ``item_states_by_status``, an
#: index of every state by status, replaced by ``item_states_waiting``: the runs' lookups by status
#: all ask for states that are not ``migrated`` (failed, skipped, interrupted, needs-update), and
#: most states are, so keeping them out of the index saves a second b-tree insert per item.
_DROPPED_INDEXES: Final = ("item_states_by_status",)
#: The condition `_SCHEMA`'s partial index holds: a query by status names it to use the index.
_WAITING: Final = "status <> 'migrated'"

#: Columns later schema versions added to tables an older store already has.
_ADDED_COLUMNS: Final = (
    ("item_states", "position", "TEXT"),
    ("runs", "process", "TEXT"),
    ("locks", "process", "TEXT"),
    ("runs", "durable_run_id", "TEXT"),
    ("locks", "durable_run_id", "TEXT"),
    ("runs", "kind", "TEXT NOT NULL DEFAULT 'run'"),
    ("item_states", "rollback_attempts", "TEXT"),
    ("item_states", "seen_by", "TEXT"),
)

#: A StateWrite's fields as item_states columns, in the tuple's order.
_STATE_FIELDS: Final = StateWrite._fields
_NONES: Final = (None,) * len(_STATE_FIELDS)
#: The fields present in the most common state: identity, status, version and position; and
#: in that of an item that wrote to a destination: a journal too.
_COMMON: Final = (True, True, True, False, False, False, False, True)
_JOURNALED: Final = (True, True, True, False, False, True, False, True)


def _literal(text: str) -> str:
    """*text* as a SQL string literal, or ``?`` (bound instead) if SQL text cannot hold it."""
    if "\x00" in text or not storable(text):
        return "?"
    return "'" + text.replace("'", "''") + "'"


@functools.lru_cache(maxsize=64)
def _insert_states(present: tuple[bool, ...], definition: str, run: str) -> str:
    """
    The statement writing a window's states whose fields are not ``None`` where *present*
    says; *definition* and *run* are SQL literals (or ``?``, see `_state_rows`). Its
    parameters: those of *definition* and *run* that are ``?``, the time, then the fields.

    A field that is ``None`` is left out (it is NULL, the column's default): sqlite3 binds
    ``None`` through its adapter lookup, which costs about a microsecond per value, more than
    the rest of a typical state's row; the definition and run, the same in every row, are
    written into the statement rather than bound again for each row. So a window's states go in
    one ``executemany`` per pattern of absent fields (one or two in a window), prepared once
    per definition in a run.
    """
    columns = ", ".join(compress(_STATE_FIELDS, present))
    markers = ", ".join("?" * (1 + sum(present)))
    return (
        f"INSERT OR REPLACE INTO item_states (definition, run_id, updated_at, {columns}) "
        f"VALUES ({definition}, {run}, {markers})"
    )


def _state_writes(
    db: sqlite3.Connection, states: Sequence[StateWrite], definition_id: str, run_id: str
) -> None:
    """
    Write *states* of *definition_id* by *run_id* (see `_insert_states`); of two states of one
    identity the last, as one ``INSERT OR REPLACE`` after the other keeps it.
    """
    definition, run = _literal(definition_id), _literal(run_id)
    head: tuple[Any, ...] = (
        *((definition_id,) if definition == "?" else ()),
        *((run_id,) if run == "?" else ()),
        time.time(),
    )
    # Most states of most windows: migrated or skipped with a version and a position, and no
    # error, journal or tracking; built without a loop of our own.
    common = [
        (*head, state[0], state[1], state[2], state[7])
        for state in states
        if state[3] is state[4] is state[5] is state[6] is None
        and state[2] is not None
        and state[7] is not None
    ]
    if len(common) == len(states):
        db.executemany(_insert_states(_COMMON, definition, run), common)
        return
    if not common:
        # The states of items that wrote to a destination: a journal as well.
        journaled = [
            (*head, state[0], state[1], state[2], state[5], state[7])
            for state in states
            if state[3] is state[4] is state[6] is None
            and state[2] is not None
            and state[5] is not None
            and state[7] is not None
        ]
        if len(journaled) == len(states):
            db.executemany(_insert_states(_JOURNALED, definition, run), journaled)
            return
    groups: dict[tuple[bool, ...], list[tuple[Any, ...]]] = {}
    for state in {state[0]: state for state in states}.values():
        present = tuple(map(is_not, state, _NONES))
        rows = groups.get(present)
        if rows is None:
            rows = groups[present] = []
        rows.append((*head, *compress(state, present)))
    for present, params in groups.items():
        db.executemany(_insert_states(present, definition, run), params)


_MAGIC = b"SQLite format 3\x00"
_HEADER = 100


def _path_and_options(url: str, base_dir: Path | None) -> tuple[Path, float]:
    prefix = "sqlite:///"
    if not url.startswith(prefix) or len(url) == len(prefix):
        raise ConfigError(
            "store must look like 'sqlite:///path/to/state.db' or "
            f"'postgresql://user@host:5432/db', got {url!r}"
        )
    rest, _, query = url[len(prefix) :].partition("?")
    timeout = DEFAULT_TIMEOUT
    for key, values in urllib.parse.parse_qs(query, keep_blank_values=True).items():
        if key != "timeout":
            raise ConfigError(f"store {url!r}: unknown option {key!r} (known: timeout)")
        try:
            timeout = float(values[-1])
        except ValueError:
            timeout = -1.0
        if not 0 <= timeout < float("inf"):
            raise ConfigError(f"store {url!r}: timeout must be seconds >= 0, got {values[-1]!r}")
    path = Path(rest)
    if not path.is_absolute():
        path = (base_dir if base_dir is not None else Path.cwd()) / path
    return path, timeout


def store_path(url: str, base_dir: str | os.PathLike[str] | None = None) -> Path:
    """
    The file of the store at *url* (relative paths start at *base_dir*, else the working
    folder).

    Raises:
        ConfigError: If *url* is not a ``sqlite:///`` URL or has an unknown option.
    """
    return _path_and_options(url, None if base_dir is None else Path(base_dir))[0]


def sqlite_exists(path: Path) -> bool:
    """
    Whether the store file at *path* exists; ``False`` when it does not exist yet, but could
    be created (its folders are folders, or are missing).

    Raises:
        StoreError: If no store file can be at *path*: it is a folder, a folder on its way is a
            file, or it cannot be looked at (permissions).
    """
    try:
        found = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as error:
        raise StoreError(
            f"store {path} cannot be opened: {error.strerror or error}", error
        ) from error
    else:
        if stat.S_ISDIR(found.st_mode):
            raise StoreError(f"store {path} cannot be opened: it is a folder, not a store file")
        return True
    for folder in path.parents:
        try:
            mode = folder.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # missing (created on demand), or under a file: met further up
        except OSError as error:
            raise StoreError(
                f"store {path} cannot be opened: {folder}: {error.strerror or error}", error
            ) from error
        if not stat.S_ISDIR(mode):
            raise StoreError(f"store {path} cannot be opened: {folder} is a file, not a folder")
        return False
    return False


def open_sqlite(
    url: str,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    read_only: bool = False,
) -> Store:
    """The SQLite store at a ``sqlite:///`` *url* (see `migrate.open_store`)."""
    path, timeout = _path_and_options(url, None if base_dir is None else Path(base_dir))
    if read_only and not sqlite_exists(path):
        return MemoryStore(name=f"sqlite:{path} (not created yet)")
    return SqliteStore(path, read_only=read_only, timeout=timeout)


def _writable(path: Path) -> bool:
    """Whether *path* and its folder (for SQLite's -wal and -shm files) can be written."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def _header_problem(path: Path) -> str | None:
    """Why the file at *path* cannot be a whole SQLite database, judged from its header alone."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            header = handle.read(_HEADER)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if size == 0:
        return None  # an empty file is an empty database
    if not header.startswith(_MAGIC):
        if _MAGIC.startswith(header):
            return f"is truncated ({size} bytes, shorter than the SQLite header)"
        return "is not a SQLite database (its first bytes are not the SQLite header)"
    if len(header) < _HEADER:
        return f"is truncated ({size} bytes, shorter than the 100-byte SQLite header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header is valid when its change counter matches "version valid for";
    # pages still in a write-ahead log (a checkpoint cut short by a full disk) are not missing.
    wal = path.with_name(path.name + "-wal")
    pending = wal.exists() and wal.stat().st_size > 0
    if pages and header[24:28] == header[92:96] and size < pages * page_size and not pending:
        return (
            f"is truncated ({size:,} bytes; its header says {pages:,} pages of {page_size:,} bytes)"
        )
    return None


class SqliteStore:
    """
    Item states, runs, cursors, contracts and locks in one SQLite file (a `Store`).

    Thread-safe: one connection guarded by a lock. Use as a context manager, or call `close`.

    Args:
        path: The database file; it and its folder are created on demand (unless *read_only*).
        read_only: Open for reading only (``mode=ro``; an ``immutable`` open where the file's
            folder cannot even hold SQLite's shared-memory file, as on a read-only mount).
        timeout: Seconds a write waits for a lock another connection holds.

    Raises:
        StoreSchemaError: If the file's schema version is newer than `SCHEMA_VERSION`.
        StoreError: If the file is not a migrate store, is corrupt or truncated, or cannot be
            opened (*path* is a folder, a folder on its way is a file); the file is left as it
            was.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.timeout = timeout
        self._lock = threading.RLock()
        self._process = this_process()
        #: The tables of later schema versions that a read-only store may lack.
        self._tables = frozenset({"contracts", "update_requests"})
        #: The columns a read selects, per table: those a read-only store of an older schema
        #: lacks read as ``NULL AS column``.
        self._columns = {
            "item_states": STATE_COLUMNS,
            "locks": LOCK_COLUMNS,
            "runs": RUN_COLUMNS,
            "failures": FAILURE_COLUMNS,
        }
        self.host = self._process.host
        sqlite_exists(self.path)  # a StoreError naming what is in the way, if anything is
        problem = _header_problem(self.path)
        if problem is not None:
            raise StoreError(f"store {self.path} {problem}; it was left as it is")
        self._db = self._connect()
        try:
            self._check_and_prepare()
        except BaseException:
            self._db.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        if not self.read_only and self.path.exists() and not _writable(self.path):
            # SQLite would open it for reading only, and fail at the first write (or sooner,
            # when its folder cannot hold the write-ahead log): say so before anything.
            raise StoreError(
                f"store {self.path} is read-only (the file or its folder cannot be written); "
                "this command writes to the store: give it a writable store",
                read_only=True,
            )
        if not self.read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                return sqlite3.connect(
                    self.path,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=self.timeout,
                )
            except (OSError, sqlite3.Error) as error:
                raise self._error("cannot be opened", error) from error
        location = urllib.parse.quote(str(self.path.resolve()))
        last: sqlite3.Error | None = None
        for options in ("mode=ro", "mode=ro&immutable=1"):
            try:
                db = sqlite3.connect(
                    f"file:{location}?{options}",
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=self.timeout,
                )
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as error:
                last = error
                continue
            return db
        assert last is not None
        raise self._error("cannot be opened for reading", last) from last

    def _error(self, what: str, error: BaseException) -> StoreError:
        text = str(error) or type(error).__name__
        lowered = text.lower()
        read_only = "readonly" in lowered or "read-only" in lowered
        if read_only:
            what = f"is read-only ({what})"
            text = f"{text}; this command writes to the store: give it a writable store"
        elif "locked" in lowered or "busy" in lowered:
            text = f"{text} (another connection held a lock for more than {self.timeout:g}s)"
        return StoreError(f"store {self.path} {what}: {text}", error, read_only=read_only)

    def _check_and_prepare(self) -> None:
        db = self._db
        try:
            tables = {
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        except sqlite3.DatabaseError as error:
            raise self._error("is not a readable SQLite database", error) from error
        ours = {"schema_version", "item_states"}
        if tables and not ours <= tables:
            shown = ", ".join(sorted(t for t in tables if not t.startswith("sqlite_")))
            raise StoreError(
                f"store {self.path} is a SQLite database but not a migrate store (its tables: "
                f"{shown}); it was left as it is: choose another store path"
            )
        version: int | None = None
        if tables:
            try:
                version = db.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            except sqlite3.DatabaseError as error:
                raise self._error("is corrupt", error) from error
        if version is not None and version > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"store {self.path} has schema version {version}, newer than this version "
                f"of migrate understands ({SCHEMA_VERSION}); upgrade migrate"
            )
        if self.read_only:
            if version is None:
                raise StoreError(
                    f"store {self.path} is an empty SQLite database, not a migrate store yet"
                )
            # An older schema is read as it is (a read-only store cannot be upgraded): the
            # columns later versions added read as null.
            self._tables = frozenset(tables)
            for table, column, _kind in _ADDED_COLUMNS:
                present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    keys: tuple[str, ...] = (
                        ("item_states", "failures") if table == "item_states" else (table,)
                    )
                    for key in keys:
                        self._columns[key] = self._columns[key].replace(column, f"NULL AS {column}")
            return
        try:
            db.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as error:
            raise self._error("cannot be prepared", error) from error
        with self.transaction("creating or upgrading the schema") as tx:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    tx.execute(statement)
            for table, column, kind in _ADDED_COLUMNS:
                present = {row[1] for row in tx.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    tx.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
            for index in _DROPPED_INDEXES:
                tx.execute(f"DROP INDEX IF EXISTS {index}")
            if version is None:
                tx.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif version < SCHEMA_VERSION:
                tx.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))

    def describe(self) -> str:
        """``sqlite:PATH``."""
        return f"sqlite:{self.path}"

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    @contextlib.contextmanager
    def transaction(self, what: str = "writing") -> Generator[sqlite3.Connection]:
        """
        A write transaction (``BEGIN IMMEDIATE``), committed on success, else rolled back.

        Raises:
            StoreError: Naming the store and *what* was being done, if SQLite fails (the
                transaction is then rolled back, so nothing of it is kept).
        """
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise self._error(f"failed while {what}", error) from error
            try:
                yield db
                db.execute("COMMIT")
            except BaseException as error:
                # A failed COMMIT may have ended the transaction already (SQLITE_FULL does).
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                if isinstance(error, sqlite3.Error):
                    raise self._error(f"failed while {what}", error) from error
                raise

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as error:
                raise self._error("failed while reading", error) from error

    # --- runs -------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        mode: str,
        definitions: Mapping[str, DefinitionResult],
        *,
        durable_run_id: str | None = None,
        kind: str = "run",
    ) -> None:
        """Record a new run with status ``queued`` for this process (or owned by the durable
        run *durable_run_id*; of *kind*, see `Store.create_run`)."""
        check_durable_run_id(durable_run_id)
        me = self._process
        with self.transaction(f"recording run {run_id}") as db:
            db.execute(
                "INSERT INTO runs (id, status, mode, definitions, started_at, pid, host, process, "
                "durable_run_id, kind) VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    mode,
                    definitions_json(definitions),
                    time.time(),
                    me.pid,
                    me.host,
                    me.token,
                    durable_run_id,
                    kind,
                ),
            )

    def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | None = None,
        definitions: Mapping[str, DefinitionResult] | None = None,
        error: str | None = None,
        ended: bool = False,
    ) -> None:
        """Change a stored run; ``None`` and ``False`` leave a field as it is."""
        with self.transaction(f"updating run {run_id}") as db:
            self._update_run(db, run_id, status, definitions, error, ended)

    def _update_run(  # noqa: PLR0917 - private; mirrors update_run's keywords
        self,
        db: sqlite3.Connection,
        run_id: str,
        status: RunStatus | None,
        definitions: Mapping[str, DefinitionResult] | None,
        error: str | None,
        ended: bool,
    ) -> None:
        sets: list[str] = []
        params: list[Any] = []
        if status is not None:
            sets.append("status = ?")
            params.append(status)
        if definitions is not None:
            sets.append("definitions = ?")
            params.append(definitions_json(definitions))
        if error is not None:
            sets.append("error = ?")
            params.append(stored_text(error))
        if ended:
            sets.append("ended_at = ?")
            params.append(time.time())
        if sets:
            db.execute(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?", (*params, run_id))

    def run(self, run_id: str) -> RunRecord | None:
        """The run with this id, if any."""
        rows = self._query(f"SELECT {self._columns['runs']} FROM runs WHERE id = ?", (run_id,))
        return run_record(rows[0]) if rows else None

    def runs(self, limit: int | None = 20) -> tuple[RunRecord, ...]:
        """Runs, newest first; at most *limit* (``None``: all)."""
        sql = f"SELECT {self._columns['runs']} FROM runs ORDER BY seq DESC"
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        return tuple(run_record(row) for row in self._query(sql, params))

    def latest_run_for(
        self, definition_id: str, *, include_start_failed: bool = False
    ) -> RunRecord | None:
        """The newest run that covered *definition_id* (start-failed runs skipped by default)."""
        skip = "" if include_start_failed else "status != 'start-failed' AND "
        rows = self._query(
            f"SELECT {self._columns['runs']} FROM runs WHERE {skip}EXISTS "
            "(SELECT 1 FROM json_each(runs.definitions) WHERE key = ?) ORDER BY seq DESC LIMIT 1",
            (definition_id,),
        )
        return run_record(rows[0]) if rows else None

    def recover_dead_runs(self) -> tuple[str, ...]:
        """
        Mark failed the runs of dead processes on this host and release their locks.

        A run still ``queued`` or ``running`` whose process is dead (its pid is gone, or the pid
        now belongs to a process started at another time) crashed (``kill -9``, power loss, a
        restarted container): ``running`` becomes ``failed``, ``queued`` becomes
        ``start-failed``, with the error "process N died". Returns the ids changed.

        A run owned by a durable run (`RunRecord.durable_run_id`) is skipped: its process only
        started it. Nor are the locks marked with a durable run released (see `acquire_locks`).
        """
        if self.read_only:
            return ()
        rows = self._query(
            f"SELECT {RUN_COLUMNS}, process FROM runs WHERE status IN ('queued', 'running') "
            "AND host = ? AND durable_run_id IS NULL",
            (self.host,),
        )
        dead = [
            record
            for record, token in ((run_record(row), row[RUN_WIDTH]) for row in rows)
            if is_alive(ProcessId(record.pid, record.host, token)) is False
        ]
        if not dead:
            return ()
        with self.transaction("recovering the runs of dead processes") as db:
            for record in dead:
                status, definitions = dead_run(record)
                self._update_run(
                    db, record.run_id, status, definitions, f"process {record.pid} died", True
                )
                db.execute(
                    "DELETE FROM locks WHERE run_id = ? AND durable_run_id IS NULL",
                    (record.run_id,),
                )
        return tuple(record.run_id for record in dead)

    # --- locks ------------------------------------------------------------------------------

    def acquire_locks(
        self, run_id: str, definition_ids: Iterable[str], *, durable_run_id: str | None = None
    ) -> None:
        """
        Take the locks of all *definition_ids* for *run_id* atomically (all or none), marked
        with *durable_run_id* if given.

        A lock held by a dead process on this host is broken first, unless it is marked with a
        durable run: the process that took it may have exited long ago while the durable run
        goes on in other processes, so only `release_locks` or `unlock` removes it.

        Raises:
            LockHeld: Naming the first definition whose lock another live run, or any durable
                run, holds.
            ValueError: If *durable_run_id* cannot be stored as it is; nothing is taken.
        """
        check_durable_run_id(durable_run_id)
        wanted = list(definition_ids)
        now = time.time()
        me = self._process
        with self.transaction("taking locks") as db:
            for definition_id in wanted:
                row = db.execute(
                    f"SELECT {LOCK_COLUMNS} FROM locks WHERE definition = ?", (definition_id,)
                ).fetchone()
                if row is None:
                    continue
                lock = lock_info(row)
                if lock.durable_run_id is None and (
                    is_alive(ProcessId(lock.pid, lock.host, lock.token)) is False
                ):
                    db.execute("DELETE FROM locks WHERE definition = ?", (definition_id,))
                    continue
                raise LockHeld(lock)
            db.executemany(
                f"INSERT INTO locks ({LOCK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(d, run_id, me.pid, me.host, now, me.token, durable_run_id) for d in wanted],
            )

    def release_locks(self, run_id: str, *, durable_run_id: str | None = None) -> None:
        """Release every lock *run_id* holds (with *durable_run_id*: only those marked so)."""
        if durable_run_id is not None and not storable(durable_run_id):
            return  # no lock can be marked with it (see check_durable_run_id)
        with self.transaction(f"releasing the locks of run {run_id}") as db:
            if durable_run_id is None:
                db.execute("DELETE FROM locks WHERE run_id = ?", (run_id,))
            else:
                db.execute(
                    "DELETE FROM locks WHERE run_id = ? AND durable_run_id = ?",
                    (run_id, durable_run_id),
                )

    def locks(self) -> tuple[LockInfo, ...]:
        """The locks held now."""
        rows = self._query(f"SELECT {self._columns['locks']} FROM locks ORDER BY definition")
        return tuple(lock_info(row) for row in rows)

    def unlock(self, definition_id: str) -> LockInfo | None:
        """Break *definition_id*'s lock; return it (``None`` if it was not locked)."""
        with self.transaction(f"unlocking {definition_id!r}") as db:
            row = db.execute(
                f"SELECT {LOCK_COLUMNS} FROM locks WHERE definition = ?", (definition_id,)
            ).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM locks WHERE definition = ?", (definition_id,))
        return lock_info(row)

    # --- contracts --------------------------------------------------------------------------

    def contract(self, definition_id: str) -> Contract | None:
        """The contract recorded for *definition_id*, or ``None`` if none was recorded yet."""
        if "contracts" not in self._tables:
            return None  # a read-only schema-1 store
        rows = self._query("SELECT contract FROM contracts WHERE definition = ?", (definition_id,))
        return Contract.from_json(json.loads(rows[0][0])) if rows else None

    def save_contract(
        self, definition_id: str, contract: Contract, run_id: str, *, reset_cursor: bool = False
    ) -> None:
        """Record *contract* as *definition_id*'s, replacing any (and the cursor if asked)."""
        with self.transaction(f"recording the contract of {definition_id!r}") as db:
            db.execute(
                "INSERT OR REPLACE INTO contracts (definition, contract, fingerprint, run_id, "
                "recorded_at) VALUES (?, ?, ?, ?, ?)",
                (
                    definition_id,
                    json.dumps(contract.to_json(), sort_keys=True),
                    contract.fingerprint,
                    run_id,
                    time.time(),
                ),
            )
            if reset_cursor:
                _save_cursor(db, definition_id, None)

    def has_state(self, definition_id: str) -> bool:
        """Whether *definition_id* has a stored item state or a saved cursor."""
        rows = self._query(
            "SELECT EXISTS (SELECT 1 FROM item_states WHERE definition = ?) OR EXISTS "
            "(SELECT 1 FROM cursors WHERE definition = ? AND cursor IS NOT NULL)",
            (definition_id, definition_id),
        )
        return bool(rows[0][0])

    # --- cursors and item states ------------------------------------------------------------

    def cursor(self, definition_id: str) -> Cursor:
        """The saved cursor of *definition_id* (``None``: from the beginning)."""
        rows = self._query("SELECT cursor FROM cursors WHERE definition = ?", (definition_id,))
        return cast(Cursor, loads(rows[0][0])) if rows else None

    def reset_cursor(self, definition_id: str) -> None:
        """Forget the saved cursor: the next normal run reads from the beginning."""
        with self.transaction(f"resetting the cursor of {definition_id!r}") as db:
            _save_cursor(db, definition_id, None)

    def prior_states(self, definition_id: str, identities: Sequence[str]) -> dict[str, PriorState]:
        """Stored status, version, tracking and journal json and run of these identities, in one
        query."""
        if not identities:
            return {}
        rows = self._query(
            "SELECT identity, status, version, tracking, run_id, journal FROM item_states "
            "WHERE definition = ? AND identity IN (SELECT value FROM json_each(?))",
            (definition_id, json.dumps(identities)),
        )
        return {row[0]: PriorState(row[1], row[2], row[3], row[4], row[5]) for row in rows}

    def commit_window(self, commit: WindowCommit) -> None:
        """Commit one window: its item states, the run's counts and the cursor, atomically."""
        definition_id = commit.definition_id
        states = commit.states
        what = (
            f"committing a window of {definition_id!r} "
            f"({len(states):,} item state{'' if len(states) == 1 else 's'})"
        )
        based_on = None if commit.based_on is None else definitions_json(commit.based_on)
        with self.transaction(what) as db:
            if based_on is not None:
                row = db.execute(
                    "SELECT definitions FROM runs WHERE id = ?", (commit.run_id,)
                ).fetchone()
                # Compared as values: key order is not the question.
                if row is None or json.loads(row[0]) != json.loads(based_on):
                    raise stale_window(commit)
            if commit.mark_needs_update:
                self._mark_needs_update(db, definition_id, commit.run_id)
                db.execute(
                    "UPDATE update_requests SET marked = 1 WHERE definition = ?", (definition_id,)
                )
            if commit.forget:
                db.execute(
                    "DELETE FROM item_states WHERE definition = ? "
                    "AND identity IN (SELECT value FROM json_each(?))",
                    (definition_id, json.dumps(list(commit.forget))),
                )
            if commit.clear_positional:
                db.execute(
                    f"DELETE FROM item_states WHERE definition = ? AND {_WAITING} "
                    "AND status = 'failed' "
                    "AND identity LIKE '<%>' AND run_id IS NOT ? "
                    "AND json_extract(error, '$.type') IN "
                    "(SELECT value FROM json_each(?))",
                    (definition_id, commit.run_id, json.dumps(sorted(POSITIONAL_TYPES))),
                )
            if states:
                _state_writes(db, states, definition_id, commit.run_id)
            if commit.seen:
                # After the states: a state written anew starts unseen (INSERT OR REPLACE).
                db.execute(
                    "UPDATE item_states SET seen_by = ? WHERE definition = ? "
                    "AND identity IN (SELECT value FROM json_each(?))",
                    (commit.run_id, definition_id, json.dumps(list(commit.seen))),
                )
            self._update_run(db, commit.run_id, None, commit.results, None, False)
            if commit.save_cursor:
                _save_cursor(db, definition_id, commit.cursor)
            if commit.update_done:
                db.execute("DELETE FROM update_requests WHERE definition = ?", (definition_id,))

    def _mark_needs_update(self, db: sqlite3.Connection, definition_id: str, run_id: str) -> int:
        changed = db.execute(
            "UPDATE item_states SET status = 'needs-update', run_id = ?, updated_at = ? "
            "WHERE definition = ? AND status = 'migrated'",
            (run_id, time.time(), definition_id),
        ).rowcount
        _save_cursor(db, definition_id, None)
        return int(changed)

    def mark_needs_update(self, definition_id: str, run_id: str) -> int:
        """Mark every ``migrated`` item ``needs-update`` and reset the cursor, atomically."""
        with self.transaction(f"marking the items of {definition_id!r} needs-update") as db:
            return self._mark_needs_update(db, definition_id, run_id)

    def commit_rollback(self, commit: RollbackCommit) -> None:
        """Commit one batch of a rollback: states deleted, attempts appended and the run's
        counts, atomically (see `RollbackCommit`)."""
        definition_id = commit.definition_id
        deleted = list(commit.deleted)
        what = (
            f"committing a rollback batch of {definition_id!r} "
            f"({plural(len(deleted), 'state')} deleted, "
            f"{plural(len(commit.attempts), 'failed attempt')})"
        )
        with self.transaction(what) as db:
            if deleted:
                db.execute(
                    "DELETE FROM item_states WHERE definition = ? "
                    "AND identity IN (SELECT value FROM json_each(?))",
                    (definition_id, json.dumps(deleted)),
                )
            for identity, attempt in commit.attempts:
                row = db.execute(
                    "SELECT rollback_attempts FROM item_states WHERE definition = ? "
                    "AND identity = ?",
                    (definition_id, identity),
                ).fetchone()
                if row is None:
                    continue  # gone: nothing to keep an attempt for
                attempts = next_attempts(row[0], attempt)
                if attempts is not None:
                    db.execute(
                        "UPDATE item_states SET rollback_attempts = ? WHERE definition = ? "
                        "AND identity = ?",
                        (attempts, definition_id, identity),
                    )
                if commit.seen_by is not None:
                    db.execute(
                        "UPDATE item_states SET seen_by = ? WHERE definition = ? AND identity = ?",
                        (commit.seen_by, definition_id, identity),
                    )
            self._update_run(db, commit.run_id, None, commit.results, None, False)

    def request_update(self, definition_id: str, run_id: str) -> None:
        """Record an update of *definition_id* asked for by *run_id* (see `UpdateRequest`)."""
        with self.transaction(f"recording the update request of {definition_id!r}") as db:
            db.execute(
                "INSERT OR REPLACE INTO update_requests (definition, run_id, requested_at, marked) "
                "VALUES (?, ?, ?, 0)",
                (definition_id, run_id, time.time()),
            )

    def update_request(self, definition_id: str) -> UpdateRequest | None:
        """The update of *definition_id* asked for and not carried out yet, if any."""
        if "update_requests" not in self._tables:
            return None  # a read-only store of an older schema
        rows = self._query(
            "SELECT run_id, requested_at, marked FROM update_requests WHERE definition = ?",
            (definition_id,),
        )
        return UpdateRequest(rows[0][0], rows[0][1], bool(rows[0][2])) if rows else None

    def identities(self, definition_id: str, status: ItemStatus) -> list[str]:
        """Identities of *definition_id* whose state is *status*, in identity order."""
        rows = self._query(
            f"SELECT identity FROM item_states WHERE definition = ? AND {_by_status(status)} "
            "ORDER BY identity",
            (definition_id, status),
        )
        return [row[0] for row in rows]

    def count_status(
        self, definition_id: str, status: ItemStatus, run_id: str | None = None
    ) -> int:
        """How many items of *definition_id* have *status* (last changed by *run_id*, if given)."""
        sql = f"SELECT count(*) FROM item_states WHERE definition = ? AND {_by_status(status)}"
        params: list[Any] = [definition_id, status]
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        return int(self._query(sql, params)[0][0])

    def counts(self, definition_id: str) -> Counts:
        """The stored states of *definition_id*, counted by status (``unchanged`` is 0)."""
        rows = self._query(
            "SELECT status, count(*) FROM item_states WHERE definition = ? GROUP BY status",
            (definition_id,),
        )
        return Counts.of_statuses({row[0]: int(row[1]) for row in rows})

    def item(self, definition_id: str, identity: str) -> ItemState | None:
        """The stored state of one item, or ``None``."""
        rows = self._query(
            f"SELECT {self._columns['item_states']} FROM item_states "
            "WHERE definition = ? AND identity = ?",
            (definition_id, identity),
        )
        return item_state(rows[0]) if rows else None

    def items(self, definition_id: str) -> tuple[ItemState, ...]:
        """Every stored state of *definition_id*, in identity order."""
        rows = self._query(
            f"SELECT {self._columns['item_states']} FROM item_states "
            "WHERE definition = ? ORDER BY identity",
            (definition_id,),
        )
        return tuple(item_state(row) for row in rows)

    def orphans(
        self, definition_id: str, run_id: str, limit: int | None = None
    ) -> tuple[ItemState, ...]:
        """The states of *definition_id* that *run_id*'s scan did not see (see `Store.orphans`)."""
        sql = (
            f"SELECT {self._columns['item_states']} FROM item_states "
            "WHERE definition = ? AND seen_by IS NOT ? ORDER BY identity"
        )
        params: list[Any] = [definition_id, run_id]
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return tuple(item_state(row) for row in self._query(sql, params))

    def failures(self, definition_id: str, limit: int | None = None) -> tuple[FailureRecord, ...]:
        """
        Failed items of *definition_id* with their evidence, in natural identity order (see
        `natural_key`: ``"7"`` before ``"13"``), the first *limit* of them (``None``: all).
        """
        columns = self._columns["failures"]
        # A store older than rollbacks has no attempts to ask for.
        attempts = (
            "" if "NULL AS rollback_attempts" in columns else (" OR rollback_attempts IS NOT NULL")
        )
        rows = self._query(
            f"SELECT {columns} FROM item_states "
            f"WHERE definition = ? AND (status = 'failed'{attempts})",
            (definition_id,),
        )
        return failure_records(rows, limit)

    def forget(self, definition_id: str, identities: Sequence[str]) -> tuple[ItemState, ...]:
        """Remove the stored states of these identities; return the states removed."""
        wanted = json.dumps(list(identities))
        with self.transaction(f"forgetting item states of {definition_id!r}") as db:
            rows = db.execute(
                f"SELECT {self._columns['item_states']} FROM item_states WHERE definition = ? "
                "AND identity IN (SELECT value FROM json_each(?)) ORDER BY identity",
                (definition_id, wanted),
            ).fetchall()
            db.execute(
                "DELETE FROM item_states WHERE definition = ? "
                "AND identity IN (SELECT value FROM json_each(?))",
                (definition_id, wanted),
            )
        return tuple(item_state(row) for row in rows)

    def tracking(self, definition_id: str, identity: str) -> dict[str, Any] | None:
        """The tracking record stored for one item, or ``None``."""
        rows = self._query(
            "SELECT tracking FROM item_states WHERE definition = ? AND identity = ?",
            (definition_id, identity),
        )
        return cast("dict[str, Any] | None", loads(rows[0][0])) if rows else None


def _by_status(status: str) -> str:
    """The condition ``status = ?`` for *status*, so written that the partial index of states by
    status (`_WAITING`) serves it when it can: SQLite uses it only for a query that states its
    condition in so many words."""
    return "status = ?" if status == "migrated" else f"{_WAITING} AND status = ?"


def _save_cursor(db: sqlite3.Connection, definition_id: str, cursor: Cursor) -> None:
    db.execute(
        "INSERT OR REPLACE INTO cursors (definition, cursor, updated_at) VALUES (?, ?, ?)",
        (definition_id, None if cursor is None else json.dumps(cursor), time.time()),
    )
