"""
The PostgreSQL store: item states, runs, cursors, contracts and locks in one schema of a
database that `migrate run` processes on many machines share.

The tables are SQLite's, column for column, so both stores hold the same values: times are epoch
seconds (``double precision``, what SQLite's ``REAL`` holds), and the JSON fields are ``json``,
which keeps the exact text the run encoded. ``jsonb`` would not: it reorders keys, drops
duplicate ones, turns ``-0.0`` into ``0`` and ``1e300`` into an integer, and refuses the
``\\u0000`` and lone-surrogate escapes that SQLite stores, so an item would read back otherwise
than it was written. The schema (``migrate`` unless the URL says ``?schema=``) is created and
upgraded in place under an advisory lock, so processes that start together never race.

Locks are rows, as in SQLite, taken all or none under a transaction-scoped advisory lock. Whether
the process holding a lock or a run still lives is told by the server: each store's connection
holds a session advisory lock on a random key recorded beside its runs and locks, and the server
releases it when that process dies, on whatever machine. Another process of this host that its
pid and start token say is alive keeps its locks too (as in SQLite), which covers the moment
after a server restart before its holder reconnects.

A lost connection (a server restart, a failover) is reconnected and the call retried for
``reconnect_timeout_ms``; a window commit cut off at ``COMMIT`` is checked by its token before it is
sent again, so it never lands twice. After a reconnection the store takes its key again and checks
that its locks are still its own; a lock another run took meanwhile is a `StoreError`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress
from operator import is_not
from types import TracebackType
from typing import Any, Final, LiteralString, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from migrate._errors import LockHeld, StoreError, StoreSchemaError
from migrate._liveness import ProcessId, is_alive, this_process
from migrate._postgres_url import masked, parse_postgres_url
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
    UpdateRequest,
    WindowCommit,
    check_durable_run_id,
    stale_window,
)
from migrate._store_rows import (
    FAILURE_COLUMNS,
    LOCK_COLUMNS,
    LOCK_WIDTH,
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
from migrate._text import storable, stored_text

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

T = TypeVar("T")
Connection = psycopg.Connection[tuple[Any, ...]]

#: Recorded in the schema's meta table, so another program's tables are never taken for ours.
SCHEMA_NAME: Final = "migrate"
#: The schema this version writes; a newer one is refused, an older one upgraded.
#: 1: item states, runs, cursors, contracts, locks. 2: adds the update requests not carried out.
#: 3: adds the durable run that owns a run or holds a lock. 4: adds each run's kind (a run or a
#: rollback) and each state's failed rollback attempts. 5: adds the run whose scan last saw each
#: state (``--rollback-orphans``). 6: the index of states by status keeps the states that are not
#: ``migrated`` only.
SCHEMA_VERSION: Final = 6

# Each entry moves the schema from version i to i + 1; a store is upgraded by running the ones it
# lacks, in one transaction, under the schema's advisory lock.
_MIGRATIONS: Final[tuple[tuple[LiteralString, ...], ...]] = (
    (
        "CREATE TABLE migrate_meta (key text PRIMARY KEY, value text NOT NULL)",
        """CREATE TABLE item_states (
            definition text NOT NULL,
            identity text NOT NULL,
            status text NOT NULL,
            reason text,
            error json,
            version text,
            journal json,
            tracking json,
            run_id text,
            updated_at double precision NOT NULL,
            position text,
            PRIMARY KEY (definition, identity)
        )""",
        "CREATE INDEX item_states_by_status ON item_states (definition, status)",
        """CREATE TABLE runs (
            seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            id text PRIMARY KEY,
            status text NOT NULL,
            mode text NOT NULL,
            definitions json NOT NULL,
            error text,
            started_at double precision NOT NULL,
            ended_at double precision,
            pid integer NOT NULL,
            host text NOT NULL,
            process text,
            holder bigint NOT NULL,
            last_commit text
        )""",
        "CREATE INDEX runs_active ON runs (status) WHERE status IN ('queued', 'running')",
        """CREATE TABLE cursors (
            definition text PRIMARY KEY,
            cursor json,
            updated_at double precision NOT NULL
        )""",
        """CREATE TABLE contracts (
            definition text PRIMARY KEY,
            contract json NOT NULL,
            fingerprint text NOT NULL,
            run_id text NOT NULL,
            recorded_at double precision NOT NULL
        )""",
        """CREATE TABLE locks (
            definition text PRIMARY KEY,
            run_id text NOT NULL,
            pid integer NOT NULL,
            host text NOT NULL,
            acquired_at double precision NOT NULL,
            process text,
            holder bigint NOT NULL
        )""",
    ),
    (
        """CREATE TABLE update_requests (
            definition text PRIMARY KEY,
            run_id text NOT NULL,
            requested_at double precision NOT NULL,
            marked boolean NOT NULL DEFAULT false
        )""",
    ),
    # IF NOT EXISTS: a store whose version was set back by hand (as tests of the older upgrades
    # do) may hold these columns already.
    (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS durable_run_id text",
        "ALTER TABLE locks ADD COLUMN IF NOT EXISTS durable_run_id text",
    ),
    (
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'run'",
        "ALTER TABLE item_states ADD COLUMN IF NOT EXISTS rollback_attempts json",
    ),
    ("ALTER TABLE item_states ADD COLUMN IF NOT EXISTS seen_by text",),
    # The runs' lookups by status all ask for states that are not migrated (failed, skipped,
    # interrupted, needs-update), and most states are: kept out of the index, they cost one
    # index insert less each.
    (
        "DROP INDEX IF EXISTS item_states_by_status",
        "CREATE INDEX IF NOT EXISTS item_states_waiting ON item_states (definition, status) "
        "WHERE status <> 'migrated'",
    ),
)
#: The condition of the partial index of states by status: a query by status names it, so that
#: the planner uses the index whatever it knows of the value compared (a parameter).
_WAITING: Final = "status <> 'migrated'"

# Whether the store connection whose key is in ``holder`` still lives: its session advisory lock
# (a single bigint key shows in pg_locks as its high and low halves).
_HOLDER_LIVES: Final = (
    "EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.granted "
    "AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database "
    "WHERE datname = current_database()) "
    "AND (l.classid::bigint << 32 | l.objid::bigint) = holder)"
)
# Identities sort by their UTF-8 bytes, as in SQLite, whatever the database's collation.
_BY_IDENTITY: Final = 'ORDER BY identity COLLATE "C"'
# A window's states travel as one JSON array, encoded by the json module and taken apart by the
# server: one parameter instead of eight text[] (whose encoding alone costs psycopg about 5x as
# much client time; end to end the two measured alike). Each state is the array of its fields that
# are not None, the statement naming those columns (see `_upsert_states`); a column left out is
# NULL, as the update sets it. jsonb: each element is parsed once, where json's ->> parses it again
# for every field taken.
_UPSERT_SET: Final = (
    "ON CONFLICT (definition, identity) DO UPDATE SET run_id = excluded.run_id, "
    "updated_at = excluded.updated_at, status = excluded.status, version = excluded.version, "
    "reason = excluded.reason, error = excluded.error, journal = excluded.journal, "
    "tracking = excluded.tracking, position = excluded.position, rollback_attempts = NULL"
)
#: A StateWrite's fields as item_states columns, in the tuple's order, and those of type json.
_STATE_FIELDS: Final[tuple[LiteralString, ...]] = (
    "identity",
    "status",
    "version",
    "reason",
    "error",
    "journal",
    "tracking",
    "position",
)
_JSON_FIELDS: Final = frozenset({"error", "journal", "tracking"})
#: The n-th element of a state's array, as text.
_ELEMENTS: Final[tuple[LiteralString, ...]] = (
    "w->>0",
    "w->>1",
    "w->>2",
    "w->>3",
    "w->>4",
    "w->>5",
    "w->>6",
    "w->>7",
)
_NONES: Final = (None,) * len(_STATE_FIELDS)
#: The fields present in the most common state: identity, status, version and position.
_COMMON: Final = (True, True, True, False, False, False, False, True)


@functools.lru_cache(maxsize=32)
def _upsert_states(present: tuple[bool, ...]) -> LiteralString:
    """The upsert of a window's states whose fields are not ``None`` where *present* says; its
    parameters: the definition, run id, time, and the JSON array of the states' arrays."""
    columns: list[LiteralString] = [
        field for field, wanted in zip(_STATE_FIELDS, present, strict=True) if wanted
    ]
    values: list[LiteralString] = [
        f"({element})::json" if name in _JSON_FIELDS else element
        for element, name in zip(_ELEMENTS, columns, strict=False)
    ]
    return (
        f"INSERT INTO item_states (definition, run_id, updated_at, {', '.join(columns)}) "
        f"SELECT %s, %s, %s, {', '.join(values)} FROM jsonb_array_elements(%s::jsonb) AS w "
        f"{_UPSERT_SET}"
    )


def _state_groups(states: Sequence[StateWrite]) -> dict[tuple[bool, ...], str]:
    """
    *states* as JSON arrays of their fields that are not ``None``, by which fields those are;
    one state per identity, the last (as SQLite's INSERT OR REPLACE keeps it: an upsert may not
    meet one row twice).
    """
    unique = list({state[0]: state for state in states}.values())
    common = [
        (state[0], state[1], state[2], state[7])
        for state in unique
        if state[3] is state[4] is state[5] is state[6] is None
        and state[2] is not None
        and state[7] is not None
    ]
    if len(common) == len(unique):
        return {_COMMON: json.dumps(common, ensure_ascii=False)}
    groups: dict[tuple[bool, ...], list[list[Any]]] = {}
    for state in unique:
        present = tuple(map(is_not, state, _NONES))
        groups.setdefault(present, []).append(list(compress(state, present)))
    return {present: json.dumps(rows, ensure_ascii=False) for present, rows in groups.items()}


# The texts of a JSON array parameter (cheaper to send than a text[] of a window's identities).
_JSON_TEXTS: Final = "(SELECT json_array_elements_text(%s::json))"
_SAVE_CURSOR: Final = (
    "INSERT INTO cursors (definition, cursor, updated_at) VALUES (%s, %s::json, %s) "
    "ON CONFLICT (definition) DO UPDATE SET cursor = excluded.cursor, "
    "updated_at = excluded.updated_at"
)
# Errors worth the same call again on a fresh transaction: the server chose us as a deadlock's
# victim, or could not serialize.
_TRANSIENT: Final = frozenset({"40001", "40P01"})
_FIRST_BACKOFF: Final = 0.05
_MAX_BACKOFF: Final = 1.0


def _one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.split())


class PostgresStore:
    """
    Item states, runs, cursors, contracts and locks in a PostgreSQL schema (a `Store`).

    Needs the ``postgres`` extra (``pip install 'effect-schedules[postgres]'``: psycopg 3 with its
    binary wheel). Thread-safe: one connection guarded by a lock. Use as a context manager, or
    call `close`.

    Args:
        url: ``"postgresql://user:password@host:5432/dbname"``; the options ``schema``,
            ``reconnect_timeout_ms`` and ``options`` (see `parse_postgres_url`); every other query
            parameter goes to libpq.
        read_only: Open for reading only: nothing is created or written (the session is
            ``default_transaction_read_only``); a schema that does not exist reads as empty
            (see `exists`).

    Raises:
        ConfigError: If *url* is not a PostgreSQL URL or one of our options is invalid.
        StoreSchemaError: If the schema was written by a newer version of ``migrate``.
        StoreError: If the server cannot be reached or refuses the credentials, or the schema
            holds tables that are not a migrate store's; the message shows the URL with its
            password masked.
    """

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        self._conninfo, self._options = parse_postgres_url(url)
        #: The URL as given, its password masked.
        self.url = masked(url)
        self.schema = self._options.schema
        self.read_only = read_only
        self._lock = threading.RLock()
        self._process = this_process()
        self.host = self._process.host
        # The session advisory lock that says this store's runs and locks are alive (positive,
        # so its halves in pg_locks read back without a sign).
        self._holder = secrets.randbits(62) + 1
        #: definition -> (run id, durable run id), for the locks this store took and has not
        #: released.
        self._held: dict[str, tuple[str, str | None]] = {}
        #: Whether the schema holds a store (only a read-only open finds none).
        self.exists = True
        #: The schema version the store has (an older one stays so when opened read-only).
        self._version = SCHEMA_VERSION
        #: The columns reads of runs and locks select: those an older schema opened read-only
        #: lacks read as ``NULL AS column``.
        self._run_columns: LiteralString = RUN_COLUMNS
        self._lock_columns: LiteralString = LOCK_COLUMNS
        self._state_columns: LiteralString = STATE_COLUMNS
        self._failure_columns: LiteralString = FAILURE_COLUMNS
        self._closed = False
        #: The server process of this store's last session.
        self._backend: int | None = None
        try:
            conn = self._connect()
        except psycopg.Error as error:
            msg = f"cannot connect to store {self.url}: {_one_line(error)}"
            raise StoreError(msg, error) from error
        self._conn: Connection | None = conn
        try:
            self._prepare(conn)
        except BaseException:
            self.close()
            raise

    # --- connection and schema ------------------------------------------------------------

    def _connect(self) -> Connection:
        path = sql.Identifier(self.schema).as_string()
        options = f"{self._options.server_options} -c search_path={path}"
        if self.read_only:
            options += " -c default_transaction_read_only=on"
        conn = psycopg.connect(
            self._conninfo,
            autocommit=True,
            options=options.strip(),
            application_name=f"migrate:{self._process.pid}",
        )
        try:
            # The JSON columns are read as their text, decoded as SQLite's are.
            conn.adapters.register_loader("json", TextLoader)
            if not self.read_only:
                self._take_holder_key(conn)
        except BaseException:
            conn.close()
            raise
        self._backend = conn.info.backend_pid
        return conn

    def _take_holder_key(self, conn: Connection) -> None:
        """Hold this store's key in *conn*'s session; a session of ours the server still keeps
        (the client saw the network fail, the server did not yet) is ended first."""
        query: LiteralString = "SELECT pg_try_advisory_lock(%s)"
        if conn.execute(query, (self._holder,)).fetchall()[0][0]:
            return
        if self._backend is not None:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (self._backend,))
            if conn.execute(query, (self._holder,)).fetchall()[0][0]:
                return
        # Reported as a lost connection: the caller tries again until reconnect_timeout_ms.
        msg = "this store's previous session still holds its key"
        raise psycopg.OperationalError(msg)

    def _prepare(self, conn: Connection) -> None:
        schema = self.schema
        try:
            with conn.transaction():
                if not self.read_only:
                    # Processes starting together wait here for the first to create or upgrade.
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                        (f"{SCHEMA_NAME}:schema:{schema}",),
                    )
                    # Only when missing: a role that may read and write the tables but not
                    # create schemas uses a store made for it.
                    found = conn.execute(
                        "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
                    ).fetchall()
                    if not found:
                        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
                rows = conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                    "ORDER BY table_name",
                    (schema,),
                ).fetchall()
                version = self._check_ours(conn, [str(row[0]) for row in rows])
                if self.read_only:
                    self.exists = version > 0
                    self._version = version
                    if 0 < version < 3:
                        self._run_columns = self._run_columns.replace(
                            "durable_run_id", "NULL AS durable_run_id"
                        )
                        self._lock_columns = self._lock_columns.replace(
                            "durable_run_id", "NULL AS durable_run_id"
                        )
                    if 0 < version < 4:
                        self._run_columns = self._run_columns.replace("kind", "NULL AS kind")
                        self._state_columns = self._state_columns.replace(
                            "rollback_attempts", "NULL AS rollback_attempts"
                        )
                        self._failure_columns = self._failure_columns.replace(
                            "rollback_attempts", "NULL AS rollback_attempts"
                        )
                    return
                for statements in _MIGRATIONS[version:]:
                    for statement in statements:
                        conn.execute(statement)
                if version < SCHEMA_VERSION:
                    conn.execute(
                        "INSERT INTO migrate_meta (key, value) VALUES ('schema', %s), "
                        "('version', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (SCHEMA_NAME, str(SCHEMA_VERSION)),
                    )
        except psycopg.Error as error:
            msg = f"store {self.url}: cannot prepare schema {schema!r}: {_one_line(error)}"
            raise StoreError(msg, error) from error

    def _check_ours(self, conn: Connection, tables: list[str]) -> int:
        if not tables:
            return 0
        where = f"store {self.url} (schema {self.schema!r})"
        if "migrate_meta" not in tables:
            shown = ", ".join(tables[:5])
            raise StoreError(
                f"{where} is not a migrate store (it holds the tables {shown}); it was left as "
                "it is: choose another schema with ?schema=NAME"
            )
        meta: dict[str, str] = dict(conn.execute("SELECT key, value FROM migrate_meta").fetchall())
        if meta.get("schema") != SCHEMA_NAME or not meta.get("version", "").isdigit():
            raise StoreError(
                f"{where} is not a migrate store (its meta table names {meta.get('schema')!r}); "
                "it was left as it is: choose another schema with ?schema=NAME"
            )
        version = int(meta["version"])
        if version > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"{where} has schema version {version}, newer than this version of migrate "
                f"understands ({SCHEMA_VERSION}); upgrade migrate"
            )
        return version

    def describe(self) -> str:
        """The URL, its password masked (``postgresql://ada:***@db/app?schema=migrate``)."""
        return self.url

    def close(self) -> None:
        """Close the connection, which releases this store's session lock (idempotent)."""
        with self._lock:
            # Closed for good: only a connection the server lost is made again.
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    def _live(self) -> Connection:
        """The connection, made again (and this store's key and locks taken back) if it was lost."""
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        conn = self._connect()
        self._conn = conn
        if self._held:
            rows = conn.execute(
                "SELECT definition, run_id, durable_run_id FROM locks WHERE definition = ANY(%s)",
                (sorted(self._held),),
            ).fetchall()
            now: dict[str, tuple[str, str | None]] = {row[0]: (row[1], row[2]) for row in rows}
            lost = sorted(d for d, held in self._held.items() if now.get(d) != held)
            if lost:
                for definition_id in lost:
                    del self._held[definition_id]
                raise StoreError(
                    f"store {self.url}: the lock of {', '.join(map(repr, lost))} was taken by "
                    "another run while the connection to the server was lost; this run stops "
                    "here (its committed windows are kept)"
                )
        return conn

    def _call(
        self,
        what: str,
        fn: Callable[[Connection], T],
        *,
        write: bool = True,
        landed: Callable[[Connection], bool] | None = None,
    ) -> T:
        """
        Run *fn* (in a transaction if *write*), again on a new connection while the server is
        unreachable, for at most ``reconnect_timeout_ms``. A write whose ``COMMIT`` was cut off
        is sent again only if *landed* (given) says it did not land.

        Raises:
            StoreError: Naming the store and *what* was being done.
        """
        with self._lock:
            if self._closed:
                raise StoreError(f"store {self.url} is closed (while {what})")
            deadline = time.monotonic() + self._options.reconnect_timeout_ms / 1000
            backoff = _FIRST_BACKOFF
            check = False
            while True:
                conn: Connection | None = None
                committing = False
                try:
                    conn = self._live()
                    if check and landed is not None and landed(conn):
                        return cast(T, None)
                    if not write:
                        return fn(conn)
                    with conn.transaction():
                        result = fn(conn)
                        committing = True
                    return result
                except psycopg.Error as error:
                    transient = error.sqlstate in _TRANSIENT
                    lost = conn is None or conn.closed or conn.broken
                    if not (lost or transient):
                        raise self._error(what, error) from error
                    if lost:
                        self._drop(conn)
                    check = check or committing
                    left = deadline - time.monotonic()
                    if left <= 0:
                        limit = self._options.reconnect_timeout_ms
                        msg = (
                            f"store {self.url} failed while {what}: {_one_line(error)} (still "
                            f"failing after reconnect_timeout_ms={limit}; nothing of it was "
                            "half-written)"
                        )
                        raise StoreError(msg, error) from error
                    time.sleep(min(backoff, left))
                    backoff = min(_MAX_BACKOFF, backoff * 2)

    def _drop(self, conn: Connection | None) -> None:
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
        self._conn = None

    def _error(self, what: str, error: psycopg.Error) -> StoreError:
        read_only = isinstance(
            error, psycopg.errors.ReadOnlySqlTransaction | psycopg.errors.InsufficientPrivilege
        )
        text = _one_line(error)
        if read_only:
            text += "; this command writes to the store: give it a role that may write"
        msg = f"store {self.url} failed while {what}: {text}"
        return StoreError(msg, error, read_only=read_only)

    def _rows(self, query: LiteralString, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        def go(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(query, params).fetchall()

        return self._call("reading", go, write=False)

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
        params = (
            run_id,
            mode,
            definitions_json(definitions),
            time.time(),
            me.pid,
            me.host,
            me.token,
            self._holder,
            durable_run_id,
            kind,
        )

        def go(conn: Connection) -> None:
            # A retry of a commit that landed meets its own row: nothing to do.
            conn.execute(
                "INSERT INTO runs (id, status, mode, definitions, started_at, pid, host, "
                "process, holder, durable_run_id, kind) "
                "VALUES (%s, 'queued', %s, %s::json, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                params,
            )

        self._call(f"recording run {run_id}", go)

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
        self._call(
            f"updating run {run_id}",
            lambda conn: _update_run(conn, run_id, status, definitions, error, ended),
        )

    def run(self, run_id: str) -> RunRecord | None:
        """The run with this id, if any."""
        rows = self._rows(f"SELECT {self._run_columns} FROM runs WHERE id = %s", (run_id,))
        return run_record(rows[0]) if rows else None

    def runs(self, limit: int | None = 20) -> tuple[RunRecord, ...]:
        """Runs, newest first; at most *limit* (``None``: all)."""
        rows = self._rows(
            f"SELECT {self._run_columns} FROM runs ORDER BY seq DESC LIMIT %s", (limit,)
        )
        return tuple(run_record(row) for row in rows)

    def latest_run_for(
        self, definition_id: str, *, include_start_failed: bool = False
    ) -> RunRecord | None:
        """The newest run that covered *definition_id* (start-failed runs skipped by default)."""
        rows = self._rows(
            f"SELECT {self._run_columns} FROM runs WHERE (%s OR status != 'start-failed') "
            "AND (definitions -> %s) IS NOT NULL ORDER BY seq DESC LIMIT 1",
            (include_start_failed, definition_id),
        )
        return run_record(rows[0]) if rows else None

    def recover_dead_runs(self) -> tuple[str, ...]:
        """
        Mark failed the runs of dead processes, on any host, and release their locks.

        A run still ``queued`` or ``running`` whose store connection is gone (its session lock
        is free) and whose process is not known alive on this host crashed (``kill -9``, power
        loss, a lost machine): ``running`` becomes ``failed``, ``queued`` becomes
        ``start-failed``, with the error "process N died". Returns the ids changed.

        A run owned by a durable run (`RunRecord.durable_run_id`) is skipped: its process only
        started it. Nor are the locks marked with a durable run released (see `acquire_locks`).
        """
        if self.read_only:
            return ()
        rows = self._rows(
            f"SELECT {RUN_COLUMNS}, process, {_HOLDER_LIVES} FROM runs "
            "WHERE status IN ('queued', 'running') AND durable_run_id IS NULL ORDER BY seq"
        )
        dead = [
            run_record(row)
            for row in rows
            if not _lives(row[RUN_WIDTH + 1], row[7], row[8], row[RUN_WIDTH])
        ]
        if not dead:
            return ()

        def go(conn: Connection) -> tuple[str, ...]:
            changed: list[str] = []
            for record in dead:
                status, definitions = dead_run(record)
                # Another process may have recovered it meanwhile: only a run still active.
                cursor = conn.execute(
                    "UPDATE runs SET status = %s, definitions = %s::json, error = %s, "
                    "ended_at = %s WHERE id = %s AND status IN ('queued', 'running')",
                    (
                        status,
                        definitions_json(definitions),
                        f"process {record.pid} died",
                        time.time(),
                        record.run_id,
                    ),
                )
                conn.execute(
                    "DELETE FROM locks WHERE run_id = %s AND durable_run_id IS NULL",
                    (record.run_id,),
                )
                if cursor.rowcount:
                    changed.append(record.run_id)
            return tuple(changed)

        return self._call("recovering the runs of dead processes", go)

    # --- locks ------------------------------------------------------------------------------

    def acquire_locks(
        self, run_id: str, definition_ids: Iterable[str], *, durable_run_id: str | None = None
    ) -> None:
        """
        Take the locks of all *definition_ids* for *run_id* atomically (all or none), marked
        with *durable_run_id* if given.

        A lock whose holder is dead (its store connection is gone, and its process is not known
        alive on this host) is broken first, unless it is marked with a durable run: the
        process that took it may have exited long ago while the durable run goes on in other
        processes, so only `release_locks` or `unlock` removes it.

        Raises:
            LockHeld: Naming the first definition whose lock another live run, or any durable
                run, holds.
            ValueError: If *durable_run_id* cannot be stored as it is; nothing is taken.
        """
        check_durable_run_id(durable_run_id)
        wanted = list(dict.fromkeys(definition_ids))
        me = self._process

        def go(conn: Connection) -> None:
            # Every taker waits here for the others, so two never both see a lock free.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"{SCHEMA_NAME}:locks:{self.schema}",),
            )
            rows = conn.execute(
                f"SELECT {LOCK_COLUMNS}, {_HOLDER_LIVES} FROM locks WHERE definition = ANY(%s)",
                (wanted,),
            ).fetchall()
            held = {row[0]: row for row in rows}
            for definition_id in wanted:
                row = held.get(definition_id)
                if row is None:
                    continue
                lock = lock_info(row)
                if lock.durable_run_id is not None or _lives(
                    row[LOCK_WIDTH], lock.pid, lock.host, lock.token
                ):
                    raise LockHeld(lock)
            conn.execute("DELETE FROM locks WHERE definition = ANY(%s)", (wanted,))
            now = time.time()
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO locks (definition, run_id, pid, host, acquired_at, process, "
                    "holder, durable_run_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    [
                        (d, run_id, me.pid, me.host, now, me.token, self._holder, durable_run_id)
                        for d in wanted
                    ],
                )

        def landed(conn: Connection) -> bool:
            rows = conn.execute(
                "SELECT count(*) FROM locks WHERE definition = ANY(%s) AND run_id = %s "
                "AND holder = %s",
                (wanted, run_id, self._holder),
            ).fetchall()
            return int(rows[0][0]) == len(wanted)

        self._call("taking locks", go, landed=landed)
        self._held.update(dict.fromkeys(wanted, (run_id, durable_run_id)))

    def release_locks(self, run_id: str, *, durable_run_id: str | None = None) -> None:
        """Release every lock *run_id* holds (with *durable_run_id*: only those marked so)."""
        if durable_run_id is not None and not storable(durable_run_id):
            return  # no lock can be marked with it (see check_durable_run_id)

        def go(conn: Connection) -> None:
            conn.execute(
                "DELETE FROM locks WHERE run_id = %s AND (%s::text IS NULL OR durable_run_id = %s)",
                (run_id, durable_run_id, durable_run_id),
            )

        self._call(f"releasing the locks of run {run_id}", go)
        for definition_id in [
            d
            for d, (run, mark) in self._held.items()
            if run == run_id and durable_run_id in (None, mark)
        ]:
            del self._held[definition_id]

    def locks(self) -> tuple[LockInfo, ...]:
        """The locks held now."""
        rows = self._rows(f"SELECT {self._lock_columns} FROM locks ORDER BY definition")
        return tuple(lock_info(row) for row in rows)

    def unlock(self, definition_id: str) -> LockInfo | None:
        """Break *definition_id*'s lock; return it (``None`` if it was not locked)."""

        def go(conn: Connection) -> LockInfo | None:
            rows = conn.execute(
                f"DELETE FROM locks WHERE definition = %s RETURNING {LOCK_COLUMNS}",
                (definition_id,),
            ).fetchall()
            return lock_info(rows[0]) if rows else None

        broken = self._call(f"unlocking {definition_id!r}", go)
        self._held.pop(definition_id, None)
        return broken

    # --- contracts --------------------------------------------------------------------------

    def contract(self, definition_id: str) -> Contract | None:
        """The contract recorded for *definition_id*, or ``None`` if none was recorded yet."""
        rows = self._rows("SELECT contract FROM contracts WHERE definition = %s", (definition_id,))
        return Contract.from_json(json.loads(rows[0][0])) if rows else None

    def save_contract(
        self, definition_id: str, contract: Contract, run_id: str, *, reset_cursor: bool = False
    ) -> None:
        """Record *contract* as *definition_id*'s, replacing any (and the cursor if asked)."""
        params = (
            definition_id,
            json.dumps(contract.to_json(), sort_keys=True),
            contract.fingerprint,
            run_id,
            time.time(),
        )

        def go(conn: Connection) -> None:
            conn.execute(
                "INSERT INTO contracts (definition, contract, fingerprint, run_id, recorded_at) "
                "VALUES (%s, %s::json, %s, %s, %s) ON CONFLICT (definition) DO UPDATE SET "
                "contract = excluded.contract, fingerprint = excluded.fingerprint, "
                "run_id = excluded.run_id, recorded_at = excluded.recorded_at",
                params,
            )
            if reset_cursor:
                _save_cursor(conn, definition_id, None)

        self._call(f"recording the contract of {definition_id!r}", go)

    def has_state(self, definition_id: str) -> bool:
        """Whether *definition_id* has a stored item state or a saved cursor."""
        rows = self._rows(
            "SELECT EXISTS (SELECT 1 FROM item_states WHERE definition = %s) OR EXISTS "
            "(SELECT 1 FROM cursors WHERE definition = %s AND cursor IS NOT NULL)",
            (definition_id, definition_id),
        )
        return bool(rows[0][0])

    # --- cursors and item states ------------------------------------------------------------

    def cursor(self, definition_id: str) -> Cursor:
        """The saved cursor of *definition_id* (``None``: from the beginning)."""
        rows = self._rows("SELECT cursor FROM cursors WHERE definition = %s", (definition_id,))
        return cast(Cursor, loads(rows[0][0])) if rows else None

    def reset_cursor(self, definition_id: str) -> None:
        """Forget the saved cursor: the next normal run reads from the beginning."""
        self._call(
            f"resetting the cursor of {definition_id!r}",
            lambda conn: _save_cursor(conn, definition_id, None),
        )

    def prior_states(self, definition_id: str, identities: Sequence[str]) -> dict[str, PriorState]:
        """Stored status, version, tracking and journal json and run of these identities, in one
        query."""
        if not identities:
            return {}
        # A probe of the key per identity, whatever the planner's statistics say: with the
        # few rows counted when the table was last analyzed (a store filled by this very run),
        # "identity IN (...)" read every state of the definition and hashed them, per window.
        rows = self._rows(
            "SELECT s.identity, s.status, s.version, s.tracking, s.run_id, s.journal "
            "FROM json_array_elements_text(%s::json) AS w (identity) CROSS JOIN LATERAL "
            "(SELECT identity, status, version, tracking, run_id, journal FROM item_states "
            "WHERE definition = %s AND identity = w.identity LIMIT 1) AS s",
            (json.dumps(identities, ensure_ascii=False), definition_id),
        )
        return {row[0]: PriorState(row[1], row[2], row[3], row[4], row[5]) for row in rows}

    def commit_window(self, commit: WindowCommit) -> None:
        """Commit one window: its item states, the run's counts and the cursor, atomically."""
        definition_id = commit.definition_id
        run_id = commit.run_id
        # Encoded before the transaction: a cursor JSON cannot hold fails with nothing sent.
        cursor_json = _cursor_json(commit.cursor) if commit.save_cursor else None
        results = definitions_json(commit.results)
        states = commit.states
        groups = _state_groups(states) if states else {}
        token = secrets.token_hex(8)
        what = (
            f"committing a window of {definition_id!r} "
            f"({len(states):,} item state{'' if len(states) == 1 else 's'})"
        )

        based_on = None if commit.based_on is None else definitions_json(commit.based_on)
        seen = json.dumps(list(commit.seen), ensure_ascii=False) if commit.seen else None

        def go(conn: Connection) -> None:
            if based_on is not None:
                # The row lock holds off another process's commit until this one ends.
                row = conn.execute(
                    "SELECT definitions::text FROM runs WHERE id = %s FOR UPDATE", (run_id,)
                ).fetchone()
                # Compared as values: key order is not the question.
                if row is None or json.loads(row[0]) != json.loads(based_on):
                    raise stale_window(commit)
            if commit.mark_needs_update:
                _mark_needs_update(conn, definition_id, run_id)
                conn.execute(
                    "UPDATE update_requests SET marked = true WHERE definition = %s",
                    (definition_id,),
                )
            if commit.forget:
                conn.execute(
                    "DELETE FROM item_states WHERE definition = %s AND identity = ANY(%s)",
                    (definition_id, list(commit.forget)),
                )
            if commit.clear_positional:
                _clear_positional(conn, definition_id, run_id)
            now = time.time()
            for present, rows in groups.items():
                conn.execute(_upsert_states(present), (definition_id, run_id, now, rows))
            if seen is not None:
                conn.execute(
                    "UPDATE item_states SET seen_by = %s WHERE definition = %s "
                    f"AND identity IN {_JSON_TEXTS}",
                    (run_id, definition_id, seen),
                )
            # The token tells a retry whether a commit cut off at COMMIT landed.
            conn.execute(
                "UPDATE runs SET definitions = %s::json, last_commit = %s WHERE id = %s",
                (results, token, run_id),
            )
            if commit.save_cursor:
                _save_cursor(conn, definition_id, cursor_json, encoded=True)
            if commit.update_done:
                conn.execute("DELETE FROM update_requests WHERE definition = %s", (definition_id,))

        def landed(conn: Connection) -> bool:
            rows = conn.execute("SELECT last_commit FROM runs WHERE id = %s", (run_id,)).fetchall()
            return bool(rows) and rows[0][0] == token

        self._call(what, go, landed=landed)

    def mark_needs_update(self, definition_id: str, run_id: str) -> int:
        """Mark every ``migrated`` item ``needs-update`` and reset the cursor, atomically."""
        return self._call(
            f"marking the items of {definition_id!r} needs-update",
            lambda conn: _mark_needs_update(conn, definition_id, run_id),
        )

    def commit_rollback(self, commit: RollbackCommit) -> None:
        """Commit one batch of a rollback: states deleted, attempts appended and the run's
        counts, atomically (see `RollbackCommit`)."""
        definition_id = commit.definition_id
        run_id = commit.run_id
        deleted = json.dumps(list(commit.deleted), ensure_ascii=False)
        attempts = list(commit.attempts)
        results = definitions_json(commit.results)
        token = secrets.token_hex(8)
        what = (
            f"committing a rollback batch of {definition_id!r} "
            f"({len(commit.deleted):,} state{'' if len(commit.deleted) == 1 else 's'} deleted, "
            f"{len(attempts):,} failed attempt{'' if len(attempts) == 1 else 's'})"
        )

        def go(conn: Connection) -> None:
            if commit.deleted:
                conn.execute(
                    f"DELETE FROM item_states WHERE definition = %s AND identity IN {_JSON_TEXTS}",
                    (definition_id, deleted),
                )
            if attempts:
                # Read and written back as text: json's operators refuse a value holding a
                # \u0000 escape, which an error message or an undone entry may quote.
                rows = conn.execute(
                    "SELECT identity, rollback_attempts FROM item_states WHERE definition = %s "
                    "AND identity = ANY(%s) FOR UPDATE",
                    (definition_id, [identity for identity, _ in attempts]),
                ).fetchall()
                stored: dict[str, str | None] = {row[0]: row[1] for row in rows}
                changed: list[tuple[str, str, str]] = []
                for identity, attempt in attempts:
                    if identity not in stored:
                        continue  # gone: nothing to keep an attempt for
                    after = next_attempts(stored[identity], attempt)
                    if after is not None:
                        stored[identity] = after
                        changed.append((after, definition_id, identity))
                if changed:
                    with conn.cursor() as cursor:
                        cursor.executemany(
                            "UPDATE item_states SET rollback_attempts = %s::json "
                            "WHERE definition = %s AND identity = %s",
                            changed,
                        )
                if commit.seen_by is not None:
                    conn.execute(
                        "UPDATE item_states SET seen_by = %s WHERE definition = %s "
                        "AND identity = ANY(%s)",
                        (commit.seen_by, definition_id, [identity for identity, _ in attempts]),
                    )
            # The token tells a retry whether a commit cut off at COMMIT landed.
            conn.execute(
                "UPDATE runs SET definitions = %s::json, last_commit = %s WHERE id = %s",
                (results, token, run_id),
            )

        def landed(conn: Connection) -> bool:
            rows = conn.execute("SELECT last_commit FROM runs WHERE id = %s", (run_id,)).fetchall()
            return bool(rows) and rows[0][0] == token

        self._call(what, go, landed=landed)

    def request_update(self, definition_id: str, run_id: str) -> None:
        """Record an update of *definition_id* asked for by *run_id* (see `UpdateRequest`)."""
        params = (definition_id, run_id, time.time())

        def go(conn: Connection) -> None:
            # A retry of a commit that landed writes the same row again: nothing changes.
            conn.execute(
                "INSERT INTO update_requests (definition, run_id, requested_at, marked) "
                "VALUES (%s, %s, %s, false) ON CONFLICT (definition) DO UPDATE SET "
                "run_id = excluded.run_id, requested_at = excluded.requested_at, marked = false",
                params,
            )

        self._call(f"recording the update request of {definition_id!r}", go)

    def update_request(self, definition_id: str) -> UpdateRequest | None:
        """The update of *definition_id* asked for and not carried out yet, if any."""
        if self._version < 2 or not self.exists:
            return None  # a read-only store of an older schema
        rows = self._rows(
            "SELECT run_id, requested_at, marked FROM update_requests WHERE definition = %s",
            (definition_id,),
        )
        return UpdateRequest(rows[0][0], rows[0][1], bool(rows[0][2])) if rows else None

    def identities(self, definition_id: str, status: ItemStatus) -> list[str]:
        """Identities of *definition_id* whose state is *status*, in identity order."""
        rows = self._rows(
            f"SELECT identity FROM item_states WHERE definition = %s AND {_by_status(status)} "
            f"{_BY_IDENTITY}",
            (definition_id, status),
        )
        return [row[0] for row in rows]

    def count_status(
        self, definition_id: str, status: ItemStatus, run_id: str | None = None
    ) -> int:
        """How many items of *definition_id* have *status* (last changed by *run_id*, if given)."""
        rows = self._rows(
            f"SELECT count(*) FROM item_states WHERE definition = %s AND {_by_status(status)} "
            "AND (%s::text IS NULL OR run_id = %s)",
            (definition_id, status, run_id, run_id),
        )
        return int(rows[0][0])

    def counts(self, definition_id: str) -> Counts:
        """The stored states of *definition_id*, counted by status (``unchanged`` is 0)."""
        rows = self._rows(
            "SELECT status, count(*) FROM item_states WHERE definition = %s GROUP BY status",
            (definition_id,),
        )
        return Counts.of_statuses({row[0]: int(row[1]) for row in rows})

    def item(self, definition_id: str, identity: str) -> ItemState | None:
        """The stored state of one item, or ``None``."""
        rows = self._rows(
            f"SELECT {self._state_columns} FROM item_states WHERE definition = %s "
            "AND identity = %s",
            (definition_id, identity),
        )
        return item_state(rows[0]) if rows else None

    def items(self, definition_id: str) -> tuple[ItemState, ...]:
        """Every stored state of *definition_id*, in identity order."""
        rows = self._rows(
            f"SELECT {self._state_columns} FROM item_states WHERE definition = %s {_BY_IDENTITY}",
            (definition_id,),
        )
        return tuple(item_state(row) for row in rows)

    def orphans(
        self, definition_id: str, run_id: str, limit: int | None = None
    ) -> tuple[ItemState, ...]:
        """The states of *definition_id* that *run_id*'s scan did not see (see `Store.orphans`)."""
        query: LiteralString = (
            f"SELECT {self._state_columns} FROM item_states WHERE definition = %s "
            f"AND seen_by IS DISTINCT FROM %s {_BY_IDENTITY}"
        )
        params: list[Any] = [definition_id, run_id]
        if limit is not None:
            query += " LIMIT %s"
            params.append(limit)
        return tuple(item_state(row) for row in self._rows(query, params))

    def failures(self, definition_id: str, limit: int | None = None) -> tuple[FailureRecord, ...]:
        """
        Failed items of *definition_id* with their evidence, in natural identity order (see
        `natural_key`: ``"7"`` before ``"13"``), the first *limit* of them (``None``: all).
        """
        # A store older than rollbacks (read-only) has no attempts to ask for.
        attempts: LiteralString = "" if self._version < 4 else " OR rollback_attempts IS NOT NULL"
        rows = self._rows(
            f"SELECT {self._failure_columns} FROM item_states "
            f"WHERE definition = %s AND (status = 'failed'{attempts})",
            (definition_id,),
        )
        return failure_records(rows, limit)

    def forget(self, definition_id: str, identities: Sequence[str]) -> tuple[ItemState, ...]:
        """Remove the stored states of these identities; return the states removed."""
        wanted = list(identities)

        def go(conn: Connection) -> tuple[ItemState, ...]:
            rows = conn.execute(
                f"DELETE FROM item_states WHERE definition = %s AND identity = ANY(%s) "
                f"RETURNING {STATE_COLUMNS}",
                (definition_id, wanted),
            ).fetchall()
            # Code point order is UTF-8 byte order, SQLite's identity order.
            return tuple(sorted((item_state(row) for row in rows), key=lambda s: s.identity))

        return self._call(f"forgetting item states of {definition_id!r}", go)

    def tracking(self, definition_id: str, identity: str) -> dict[str, Any] | None:
        """The tracking record stored for one item, or ``None``."""
        rows = self._rows(
            "SELECT tracking FROM item_states WHERE definition = %s AND identity = %s",
            (definition_id, identity),
        )
        return cast("dict[str, Any] | None", loads(rows[0][0])) if rows else None


def _lives(holder_lives: bool, pid: int, host: str, token: str | None) -> bool:
    """
    Whether the holder of a run or a lock lives. A process of this host that is gone is dead
    (its session may outlive it by a moment); otherwise it lives while its session does, and so
    does another process of this host that lives (it may be reconnecting after a server
    restart). This process knows that a store of its own whose session is gone was closed.
    """
    here = is_alive(ProcessId(pid, host, token))  # None: another host
    if here is False:
        return False
    if holder_lives:
        return True
    me = this_process()
    return here is True and (pid, host) != (me.pid, me.host)


def _by_status(status: str) -> LiteralString:
    """``status = %s`` for *status*, naming the partial index's condition when it holds."""
    return "status = %s" if status == "migrated" else f"{_WAITING} AND status = %s"


def _evidence_type(error: str | None) -> object:
    evidence = loads(error)
    return cast("dict[str, object]", evidence).get("type") if isinstance(evidence, dict) else None


def _cursor_json(cursor: Cursor) -> str | None:
    return None if cursor is None else json.dumps(cursor)


def _save_cursor(
    conn: Connection, definition_id: str, cursor: Cursor | str, *, encoded: bool = False
) -> None:
    text = cast("str | None", cursor) if encoded else _cursor_json(cast(Cursor, cursor))
    conn.execute(_SAVE_CURSOR, (definition_id, text, time.time()))


def _mark_needs_update(conn: Connection, definition_id: str, run_id: str) -> int:
    cursor = conn.execute(
        "UPDATE item_states SET status = 'needs-update', run_id = %s, updated_at = %s "
        "WHERE definition = %s AND status = 'migrated'",
        (run_id, time.time(), definition_id),
    )
    _save_cursor(conn, definition_id, None)
    return int(cursor.rowcount)


def _clear_positional(conn: Connection, definition_id: str, run_id: str) -> None:
    # The evidence type is read here, not by the server: json's operators refuse a value that
    # holds a \u0000 escape anywhere, and evidence may quote one.
    rows = conn.execute(
        f"SELECT identity, error FROM item_states WHERE definition = %s AND {_WAITING} "
        "AND status = 'failed' "
        "AND identity LIKE '<%%>' AND run_id IS DISTINCT FROM %s FOR UPDATE",
        (definition_id, run_id),
    ).fetchall()
    stale = [row[0] for row in rows if _evidence_type(row[1]) in POSITIONAL_TYPES]
    if stale:
        conn.execute(
            "DELETE FROM item_states WHERE definition = %s AND identity = ANY(%s)",
            (definition_id, stale),
        )


def _update_run(  # noqa: PLR0917 - private; mirrors update_run's keywords
    conn: Connection,
    run_id: str,
    status: RunStatus | None,
    definitions: Mapping[str, DefinitionResult] | None,
    error: str | None,
    ended: bool,
) -> None:
    conn.execute(
        "UPDATE runs SET status = coalesce(%s, status), "
        "definitions = coalesce(%s::json, definitions), error = coalesce(%s, error), "
        "ended_at = CASE WHEN %s THEN %s ELSE ended_at END WHERE id = %s",
        (
            status,
            None if definitions is None else definitions_json(definitions),
            None if error is None else stored_text(error),
            ended,
            time.time(),
            run_id,
        ),
    )
