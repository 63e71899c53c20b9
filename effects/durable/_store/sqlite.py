"""
The SQLite store: one file, WAL, a versioned schema upgraded in place.

Durability: by default (``synchronous=NORMAL`` in WAL mode) every committed transaction survives a
crash of the process; a power loss may undo the last few commits. ``?synchronous=full`` in the URL
fsyncs every commit, so a power loss loses nothing committed either. Several processes may share
one file: every write is a ``BEGIN IMMEDIATE`` transaction, so claims are never handed to two
workers. Every method runs its transaction without awaiting inside it, so the coroutines of one
process never interleave within a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from effects.durable._failures import dead_run, lost_worker
from effects.durable._records import Checkpoint, Event, Run, Task
from effects.durable._store import (
    ClaimedRun,
    NewEvent,
    NewRun,
    NewTask,
    RecoveryReport,
    StaleTurnError,
    TaskOutcome,
    TurnCommit,
    discarded,
)
from effects.durable._store.rows import (
    CHECKPOINT_COLUMNS,
    RUN_COLUMNS,
    SLOT_HOLDERS,
    TASK_COLUMNS,
    checkpoint_of,
    dumps,
    error_text,
    loads,
    run_of,
    task_of,
)
from effects.durable.errors import StoreError

__all__ = ["SCHEMA_VERSION", "SqliteStore", "parse_sqlite_url"]

_T = TypeVar("_T")
# A write blocks the event loop on another process's lock at most this long (s), then yields
# and tries again after a pause that doubles from the first to the longest.
_BLOCKING_WAIT_S: Final = 0.02
_FIRST_PAUSE_S: Final = 0.001
_LONGEST_PAUSE_S: Final = 0.05


class _Busy(Exception):  # noqa: N818 - a signal inside the store, never raised out of it
    """Another process holds the write lock."""


def _is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


SCHEMA_NAME: Final = "effects.durable"
SCHEMA_VERSION: Final = 3

# A checkpoint whose attempts are over: completed, or failed for good (of alias ``c``).
_SETTLED: Final = "(c.status = 'completed' OR (c.status = 'failed' AND c.final = 1))"

# Each entry moves the schema from version i to i + 1; a store is upgraded by running the ones it
# lacks, in one transaction.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        "CREATE TABLE durable_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            version TEXT NOT NULL,
            status TEXT NOT NULL,
            input TEXT NOT NULL,
            output TEXT,
            error TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            wake_at INTEGER,
            woken INTEGER NOT NULL DEFAULT 0,
            lease_token TEXT,
            lease_until INTEGER,
            recovery_attempts INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX runs_by_status ON runs (status, wake_at)",
        "CREATE INDEX runs_by_created ON runs (created_at)",
        """CREATE TABLE checkpoints (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            step_id TEXT NOT NULL,
            status TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            wake_at INTEGER,
            input TEXT,
            output TEXT,
            error TEXT,
            errors TEXT NOT NULL DEFAULT '[]',
            final INTEGER NOT NULL DEFAULT 0,
            exception BLOB,
            retry_state TEXT,
            grp TEXT NOT NULL DEFAULT 'default',
            queue TEXT,
            dispatched_at INTEGER,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            rev INTEGER NOT NULL DEFAULT 1,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE tasks (
            task_id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            step_id TEXT NOT NULL,
            name TEXT NOT NULL,
            grp TEXT NOT NULL,
            queue TEXT,
            input TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            status TEXT NOT NULL,
            available_at INTEGER NOT NULL,
            claimed_by TEXT,
            claim_until INTEGER,
            redispatched INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL
        )""",
        "CREATE INDEX tasks_queued ON tasks (status, grp, available_at)",
        "CREATE INDEX tasks_by_step ON tasks (run_id, seq)",
        # Keyed by run, numbered per run in commit order: a run's trail is one range of the
        # table, so appending to it touches few pages.
        """CREATE TABLE events (
            run_id TEXT NOT NULL,
            id INTEGER NOT NULL,
            seq INTEGER,
            name TEXT NOT NULL,
            level TEXT NOT NULL,
            at INTEGER NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, id)
        ) WITHOUT ROWID""",
    ),
    (
        # Heartbeats (the last progress a worker reported and when it last beat), the liveness
        # window, the lost-dispatch lease and its count, and flow-control limits.
        "ALTER TABLE checkpoints ADD COLUMN progress TEXT",
        "ALTER TABLE checkpoints ADD COLUMN heartbeat_at INTEGER",
        "ALTER TABLE checkpoints ADD COLUMN timeout_ms INTEGER",
        "ALTER TABLE checkpoints ADD COLUMN lease_ms INTEGER",
        "ALTER TABLE checkpoints ADD COLUMN redispatches INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE tasks ADD COLUMN queue_limit INTEGER",
    ),
    (
        # Failed local steps are rebuilt from their StepError, never unpickled: the pickles go.
        "ALTER TABLE checkpoints DROP COLUMN exception",
        # Every attempt's error in a row of its own: a failed attempt appends one row, and the
        # checkpoint's row stays small however many attempts came before.
        """CREATE TABLE step_errors (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            n INTEGER NOT NULL,
            error TEXT NOT NULL,
            PRIMARY KEY (run_id, seq, n)
        ) WITHOUT ROWID""",
        "INSERT INTO step_errors (run_id, seq, n, error) SELECT c.run_id, c.seq, j.key + 1,"
        " j.value FROM checkpoints c, json_each(c.errors) j",
        "ALTER TABLE checkpoints DROP COLUMN errors",
        # Attempts left queued behind a step that had settled (an older version did not
        # withdraw them): nobody may run them now.
        f"DELETE FROM tasks WHERE status IN ('queued', 'waiting') AND EXISTS (SELECT 1 FROM"
        f" checkpoints c WHERE c.run_id = tasks.run_id AND c.seq = tasks.seq AND {_SETTLED})",
    ),
)

_SYNCHRONOUS: Final = {"off": "OFF", "normal": "NORMAL", "full": "FULL", "extra": "EXTRA"}

_RUN_COLUMNS: Final = ", ".join(RUN_COLUMNS)
# The checkpoint's errors as the JSON text of a list, from its rows in step_errors, in order.
_ERRORS_OF_CHECKPOINT: Final = (
    "COALESCE((SELECT '[' || group_concat(error, ',') || ']' FROM (SELECT error FROM"
    " step_errors e WHERE e.run_id = checkpoints.run_id AND e.seq = checkpoints.seq"
    " ORDER BY e.n)), '[]')"
)
_CHECKPOINT_COLUMNS: Final = ", ".join(
    _ERRORS_OF_CHECKPOINT if c == "errors" else c for c in CHECKPOINT_COLUMNS
)
_TASK_COLUMNS: Final = ", ".join(TASK_COLUMNS)
_SLOT_HOLDERS: Final = SLOT_HOLDERS


def parse_sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    """
    Split ``sqlite:///path?synchronous=full`` into the path and its options.

    ``sqlite:///relative.db`` is relative to the working directory, ``sqlite:////abs.db`` absolute,
    ``sqlite:///:memory:`` a private in-memory database.

    Raises:
        ValueError: If the URL is not a ``sqlite:///`` URL, has no path, or an unknown option.
    """
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not parts.path.startswith("/"):
        msg = f"a SQLite store URL looks like 'sqlite:///path/to/file.db', got {url!r}"
        raise ValueError(msg)
    path = unquote(parts.path[1:])
    if not path:
        msg = f"the SQLite store URL {url!r} names no file"
        raise ValueError(msg)
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    unknown = sorted(set(options) - {"synchronous", "busy_timeout_ms"})
    if unknown:
        msg = (
            f"unknown option {unknown[0]!r} in store URL {url!r};"
            " known: synchronous, busy_timeout_ms"
        )
        raise ValueError(msg)
    sync = options.get("synchronous", "normal").lower()
    if sync not in _SYNCHRONOUS:
        msg = f"synchronous must be one of {', '.join(_SYNCHRONOUS)} in {url!r}, got {sync!r}"
        raise ValueError(msg)
    timeout = options.get("busy_timeout_ms", "30000")
    if not timeout.isdigit():
        msg = f"busy_timeout_ms must be a whole number of ms in {url!r}, got {timeout!r}"
        raise ValueError(msg)
    return path, {"synchronous": _SYNCHRONOUS[sync], "busy_timeout_ms": timeout}


_EVENT_INSERT: Final = (
    "INSERT INTO events (run_id, id, seq, name, level, at, data) VALUES"
    " (?1, (SELECT COALESCE(MAX(id), 0) + 1 FROM events WHERE run_id = ?1), ?2, ?3, ?4, ?5, ?6)"
)


# One more error (``?3``, JSON text) of the checkpoint ``(?1, ?2)``, after those it has.
_ERROR_APPEND: Final = (
    "INSERT INTO step_errors (run_id, seq, n, error) VALUES (?1, ?2, (SELECT COALESCE(MAX(n), 0)"
    " + 1 FROM step_errors WHERE run_id = ?1 AND seq = ?2), ?3)"
)


class SqliteStore:
    """
    The engine's store in one SQLite file (see the module docstring for what it promises).

    Args:
        url: ``"sqlite:///path.db"``; options ``synchronous`` (``normal`` by default, ``full``
            to fsync every commit) and ``busy_timeout_ms`` (how long a write waits for another
            process's transaction, default 30000).

    Raises:
        ValueError: If *url* is not a SQLite store URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self._path, self._options = parse_sqlite_url(url)
        self._db: sqlite3.Connection | None = None
        self._grouped = self._options["synchronous"] in ("FULL", "EXTRA")
        self._busy_timeout_s = int(self._options["busy_timeout_ms"]) / 1000
        self._retry: asyncio.TimerHandle | None = None
        self._busy_waited = 0.0
        self._pause = _FIRST_PAUSE_S
        self._pending: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any]]] = []

    def __repr__(self) -> str:
        return f"SqliteStore({self.url!r})"

    @property
    def location(self) -> str:
        """``at /absolute/path.db (URL)``."""
        shown = self._path if self._path == ":memory:" else str(Path(self._path).resolve())
        return f"at {shown} ({self.url})"

    async def exists(self) -> bool:
        """Whether the file exists (a private ``:memory:`` database always does)."""
        return self._path == ":memory:" or Path(self._path).exists()

    async def wake_hint(
        self,
        callback: Callable[[], None],
        *,
        runs: bool = True,
        tasks: bool = True,
        due: Callable[[], None] | None = None,
    ) -> None:
        """Nothing: SQLite tells no other process of a write; their work is found by polling."""
        del callback, runs, tasks, due

    # -- connection and schema ------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file, check it is an engine store, and create or upgrade its schema."""
        if self._db is not None:
            return
        if self._path != ":memory:":
            folder = Path(self._path).resolve().parent
            if not folder.is_dir():
                msg = f"cannot open store {self.url}: folder {folder} does not exist"
                raise StoreError(msg)
        try:
            db = sqlite3.connect(
                self._path,
                isolation_level=None,
                # Blocks the event loop briefly at most; longer waits yield (see _transact).
                timeout=min(_BLOCKING_WAIT_S, self._busy_timeout_s),
                check_same_thread=False,
            )
        except sqlite3.Error as error:
            msg = f"cannot open store {self.url}: {error}"
            raise StoreError(msg) from error
        waited, pause = 0.0, _FIRST_PAUSE_S
        try:
            while True:
                try:
                    self._prepare(db)
                    break
                except _Busy as busy:
                    # Another process is creating or upgrading the schema right now.
                    if waited >= self._busy_timeout_s:
                        raise self._locked() from busy
                    await asyncio.sleep(pause)
                    waited += pause
                    pause = min(pause * 2, _LONGEST_PAUSE_S)
        except BaseException:
            db.close()
            raise
        self._db = db

    def _prepare(self, db: sqlite3.Connection) -> None:
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            version = self._check_ours(db, tables)
            # Only once the file is known to be ours (or empty) may it be switched to WAL.
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"PRAGMA synchronous={self._options['synchronous']}")
            if version < SCHEMA_VERSION:
                self._upgrade(db)
        except sqlite3.OperationalError as error:
            if _is_busy(error):
                raise _Busy from error
            msg = f"store {self.url} is not a usable SQLite database: {error}"
            raise StoreError(msg) from error
        except sqlite3.DatabaseError as error:
            msg = f"store {self.url} is not a usable SQLite database: {error}"
            raise StoreError(msg) from error

    def _check_ours(self, db: sqlite3.Connection, tables: set[str]) -> int:
        if not tables:
            return 0
        if "durable_meta" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            msg = f"store {self.url} is not an effects.durable store (it holds tables {shown})"
            raise StoreError(msg)
        meta = dict(db.execute("SELECT key, value FROM durable_meta").fetchall())
        if meta.get("schema") != SCHEMA_NAME or not str(meta.get("version", "")).isdigit():
            msg = (
                f"store {self.url} is not an effects.durable store (schema {meta.get('schema')!r})"
            )
            raise StoreError(msg)
        version = int(meta["version"])
        if version > SCHEMA_VERSION:
            msg = (
                f"store {self.url} has schema version {version}, newer than this version of "
                f"effects.durable understands ({SCHEMA_VERSION}); upgrade effect-schedules"
            )
            raise StoreError(msg)
        return version

    def _upgrade(self, db: sqlite3.Connection) -> None:
        try:
            db.execute("BEGIN IMMEDIATE")
            # Read again under the write lock: another process may have upgraded meanwhile.
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            version = self._check_ours(db, tables)
            for statements in _MIGRATIONS[version:]:
                for statement in statements:
                    db.execute(statement)
            db.execute(
                "INSERT INTO durable_meta (key, value) VALUES ('schema', ?), ('version', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (SCHEMA_NAME, str(SCHEMA_VERSION)),
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        """Close the connection (idempotent), after the writes still waiting for a commit."""
        if self._retry is not None:
            self._retry.cancel()
        self._flush()
        db, self._db = self._db, None
        if db is not None:
            db.close()

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            msg = f"store {self.url} is not open (use the engine as `async with engine:`)"
            raise RuntimeError(msg)
        return self._db

    @contextlib.contextmanager
    def _read_errors(self) -> Generator[None]:
        """A read's SQLite failure (a damaged page, an I/O error) as a ``StoreError``."""
        try:
            yield
        except sqlite3.Error as error:
            msg = f"store {self.url}: a read failed: {error}"
            raise StoreError(msg) from error

    def _run_now(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """*work* in one write transaction; ``_Busy`` if another process holds the write lock."""
        db = self._conn
        try:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                if _is_busy(error):
                    raise _Busy from error
                raise
            result = work(db)
            db.execute("COMMIT")
        except BaseException as error:
            # Also when a signal lands right after BEGIN: the write lock is never left held.
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            if isinstance(error, sqlite3.Error):
                msg = f"store {self.url}: the write failed: {error}"
                raise StoreError(msg) from error
            raise
        return result

    async def _transact(
        self, work: Callable[[sqlite3.Connection], _T], *, durable: bool = True
    ) -> _T:
        """
        Run *work* in a write transaction.

        A write that a crash may lose without harm (``durable=False``: claims, lease and claim
        renewals, heartbeats; losing one only makes a run or task claimable again, or a window a
        little shorter) commits without an fsync even under ``synchronous=full``; the next durable
        commit's fsync covers it, so the order of writes on disk is kept.

        While another process holds the write lock the event loop is not blocked (beyond a
        few ms): the write waits with ``asyncio.sleep`` and tries again, for at most
        ``busy_timeout_ms``. With ``synchronous`` FULL or EXTRA the writes that coroutines issue
        in one turn of the event loop share one transaction, each in a savepoint of its own, so
        one fsync covers them all (group commit); each caller still resumes only once its write
        is durable, and a write that fails rolls back alone.
        """
        if not self._grouped or not durable:
            waited = 0.0
            pause = _FIRST_PAUSE_S
            while True:
                try:
                    return self._run_now(work) if durable else self._run_unsynced(work)
                except _Busy as busy:
                    if waited >= self._busy_timeout_s:
                        raise self._locked() from busy
                    await asyncio.sleep(pause)
                    waited += pause
                    pause = min(pause * 2, _LONGEST_PAUSE_S)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_T] = loop.create_future()
        self._pending.append((work, done))
        if len(self._pending) == 1 and self._retry is None:
            loop.call_soon(self._flush)
        return await done

    def _run_unsynced(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if not self._grouped:
            return self._run_now(work)
        db = self._conn
        db.execute("PRAGMA synchronous=OFF")
        try:
            return self._run_now(work)
        finally:
            db.execute(f"PRAGMA synchronous={self._options['synchronous']}")

    def _locked(self) -> StoreError:
        return StoreError(
            f"store {self.url}: another process held the write lock for longer than"
            f" busy_timeout_ms={self._options['busy_timeout_ms']}"
        )

    def _flush(self) -> None:
        self._retry = None
        batch, self._pending = self._pending, []
        if not batch or self._db is None:
            for _, done in batch:
                if not done.done():
                    done.set_exception(StoreError(f"store {self.url} is closed"))
            return
        outcomes: list[tuple[asyncio.Future[Any], bool, Any]] = []

        def grouped(db: sqlite3.Connection) -> None:
            outcomes.clear()
            for work, done in batch:
                db.execute("SAVEPOINT grouped")
                try:
                    value = work(db)
                except Exception as error:  # handed to its caller
                    if not db.in_transaction:
                        # SQLite rolled the whole transaction back (SQLITE_FULL, an I/O
                        # error): the batch's writes are gone, and this error says why.
                        raise
                    db.execute("ROLLBACK TO grouped")
                    db.execute("RELEASE grouped")
                    handed: Exception = error
                    if isinstance(error, sqlite3.Error):
                        handed = StoreError(f"store {self.url}: the write failed: {error}")
                        handed.__cause__ = error
                    outcomes.append((done, False, handed))
                else:
                    db.execute("RELEASE grouped")
                    outcomes.append((done, True, value))

        try:
            self._run_now(grouped)
        except _Busy:
            # Another process writes: try again shortly, with whatever joined meanwhile.
            self._pending = batch + self._pending
            self._busy_waited += self._pause
            if self._busy_waited >= self._busy_timeout_s:
                self._busy_waited, self._pause = 0.0, _FIRST_PAUSE_S
                error: BaseException = self._locked()
                batch, self._pending = self._pending, []
                for _, done in batch:
                    if not done.done():
                        done.set_exception(error)
                return
            self._retry = asyncio.get_running_loop().call_later(self._pause, self._flush)
            self._pause = min(self._pause * 2, _LONGEST_PAUSE_S)
            return
        except Exception as failure:  # noqa: BLE001 - the commit failed: every write with it
            for _, done in batch:
                if not done.done():
                    done.set_exception(failure)
            return
        self._busy_waited, self._pause = 0.0, _FIRST_PAUSE_S
        for done, ok, value in outcomes:
            if done.done():
                continue
            if ok:
                done.set_result(value)
            else:
                done.set_exception(value)

    @staticmethod
    def _insert_events(db: sqlite3.Connection, run_id: str, events: Sequence[NewEvent]) -> None:
        if len(events) == 1:
            e = events[0]
            db.execute(_EVENT_INSERT, (run_id, e.seq, e.name, e.level, e.at, dumps(e.data)))
        elif events:
            db.executemany(
                _EVENT_INSERT,
                [(run_id, e.seq, e.name, e.level, e.at, dumps(e.data)) for e in events],
            )

    # -- runs -------------------------------------------------------------------------------------

    async def create_run(self, run: NewRun, events: Sequence[NewEvent]) -> Run | ClaimedRun | None:
        """Insert *run* (pending, or leased); return the existing run if the id is taken."""
        return await self._transact(lambda db: self._create_run(db, run, events))

    def _create_run(
        self, db: sqlite3.Connection, run: NewRun, events: Sequence[NewEvent]
    ) -> Run | ClaimedRun | None:
        inserted = db.execute(
            "INSERT INTO runs (run_id, workflow, version, status, input, created_at,"
            " updated_at, lease_token, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (run_id) DO NOTHING",
            (
                run.run_id,
                run.workflow,
                run.version,
                "pending" if run.lease_token is None else "running",
                run.input,
                run.now,
                run.now,
                run.lease_token,
                None if run.lease_token is None else run.lease_until,
            ),
        ).rowcount
        if inserted != 1:
            row = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run.run_id,)
            ).fetchone()
            return run_of(row)
        self._insert_events(db, run.run_id, events)
        if run.lease_token is None:
            return None
        created = Run(run.run_id, run.workflow, run.version, "running", loads(run.input),
                      None, None, 0, run.now, run.now)  # fmt: skip
        return ClaimedRun(created, run.lease_token, ())

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        with self._read_errors():
            row = self._conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return None if row is None else run_of(row)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        stale_before: int | None = None,
    ) -> list[Run]:
        """Runs newest first, filtered (see ``Store.list_runs``)."""
        with self._read_errors():
            where: list[str] = []
            params: list[object] = []
            if status is not None:
                where.append("status = ?")
                params.append(status)
            if workflow is not None:
                where.append("workflow = ?")
                params.append(workflow)
            if stale_before is not None:
                where.append(
                    "status = 'suspended' AND run_id IN (SELECT run_id FROM checkpoints WHERE"
                    " kind = 'remote' AND status IN ('pending', 'running') AND dispatched_at < ?)"
                )
                params.append(stale_before)
            clause = f"WHERE {' AND '.join(where)}" if where else ""
            rows = self._conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs {clause}"
                " ORDER BY created_at DESC, run_id LIMIT ?",
                (*params, limit),
            ).fetchall()
            return [run_of(row) for row in rows]

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints by sequence number."""
        with self._read_errors():
            return self._checkpoints(self._conn, run_id)

    @staticmethod
    def _checkpoints(db: sqlite3.Connection, run_id: str) -> list[Checkpoint]:
        rows = db.execute(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY seq",
            (run_id,),
        ).fetchall()
        return [checkpoint_of(row) for row in rows]

    async def events(self, run_id: str) -> list[Event]:
        """The run's events, oldest first."""
        with self._read_errors():
            rows = self._conn.execute(
                "SELECT name, level, at, seq, data FROM events WHERE run_id = ? ORDER BY id",
                (run_id,),
            ).fetchall()
            return [
                Event(name, level, at, seq, json.loads(data)) for name, level, at, seq, data in rows
            ]

    # -- turns ------------------------------------------------------------------------------------

    async def claim_runs(
        self,
        *,
        workflows: Sequence[tuple[str, str]],
        now: int,
        lease_until: int,
        owner: str,
        limit: int,
    ) -> list[ClaimedRun]:
        """Take up to *limit* runnable runs of *workflows*, each with a fresh lease token."""
        with self._read_errors():
            if not workflows or limit <= 0:
                return []
            pairs = ", ".join("(?, ?)" for _ in workflows)
            flat = [part for pair in workflows for part in pair]
            query = (
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE status IN ('pending', 'suspended')"
                " AND (status = 'pending' OR wake_at <= ?)"
                f" AND (workflow, version) IN (VALUES {pairs})"
                " ORDER BY updated_at, run_id LIMIT ?"
            )
            # A read first: an idle poll takes no write lock (and writes no empty transaction).
            probe = (
                "SELECT 1 FROM runs WHERE status IN ('pending', 'suspended')"
                " AND (status = 'pending' OR wake_at <= ?)"
                f" AND (workflow, version) IN (VALUES {pairs}) LIMIT 1"
            )
            if not self._conn.execute(probe, (now, *flat)).fetchone():
                return []

            def work(db: sqlite3.Connection) -> list[ClaimedRun]:
                claimed: list[ClaimedRun] = []
                rows = db.execute(query, (now, *flat, limit)).fetchall()
                for row in rows:
                    token = f"{owner}:{secrets.token_hex(6)}"
                    db.execute(
                        "UPDATE runs SET status = 'running', lease_token = ?, lease_until = ?,"
                        " woken = 0 WHERE run_id = ?",
                        (token, lease_until, row[0]),
                    )
                    run = attrs.evolve(run_of(row), status="running")
                    claimed.append(ClaimedRun(run, token, self._checkpoints(db, run.run_id)))
                return claimed

            return await self._transact(work, durable=False)

    async def renew_lease(self, run_id: str, token: str, lease_until: int) -> bool:
        """Extend the lease *token* holds; ``False`` if it no longer holds the run."""

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE runs SET lease_until = ? WHERE run_id = ? AND lease_token = ?"
                " AND status = 'running'",
                (lease_until, run_id, token),
            )
            return cursor.rowcount == 1

        return await self._transact(work, durable=False)

    async def commit_turn(self, commit: TurnCommit) -> None:
        """Apply *commit* in one transaction or raise ``StaleTurnError``."""
        await self._transact(lambda db: self._commit_turn(db, commit))

    def _commit_turn(self, db: sqlite3.Connection, commit: TurnCommit) -> None:
        if not self._advance(db, commit):
            raise StaleTurnError(f"run {commit.run_id}: the lease was taken over")
        for write in commit.checkpoints:
            cp = write.checkpoint
            values = (
                cp.name,
                cp.kind,
                cp.step_id,
                cp.status,
                cp.attempts,
                cp.wake_at,
                write.output,
                error_text(cp.error),
                int(cp.final),
                None if cp.retry_state is None else dumps(cp.retry_state),
                cp.group,
                cp.queue,
                cp.dispatched_at,
                write.input,
                cp.timeout_ms,
                cp.lease_ms,
                cp.redispatches,
                cp.heartbeat_at,
                commit.now,
            )
            if write.expected_rev is None:
                try:
                    db.execute(
                        "INSERT INTO checkpoints (name, kind, step_id, status, attempts,"
                        " wake_at, output, error, final, retry_state, grp,"
                        " queue, dispatched_at, input, timeout_ms, lease_ms, redispatches,"
                        " heartbeat_at, updated_at, run_id, seq, created_at)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                        " ?, ?)",
                        (*values, commit.run_id, cp.seq, cp.created_at),
                    )
                except sqlite3.IntegrityError:
                    msg = f"run {commit.run_id}: checkpoint {cp.seq} was written meanwhile"
                    raise StaleTurnError(msg) from None
            else:
                cursor = db.execute(
                    "UPDATE checkpoints SET name = ?, kind = ?, step_id = ?, status = ?,"
                    " attempts = ?, wake_at = ?, output = ?, error = ?, final = ?,"
                    " retry_state = ?, grp = ?, queue = ?, dispatched_at = ?,"
                    " input = ?, timeout_ms = ?, lease_ms = ?, redispatches = ?,"
                    " heartbeat_at = ?, updated_at = ?, rev = rev + 1"
                    " WHERE run_id = ? AND seq = ? AND rev = ?",
                    (*values, commit.run_id, cp.seq, write.expected_rev),
                )
                if cursor.rowcount != 1:
                    msg = f"run {commit.run_id}: checkpoint {cp.seq} changed meanwhile"
                    raise StaleTurnError(msg)
            if cp.stored_errors() is None:
                # Given as values: written again whole (a turn changes them rarely, and few).
                if write.expected_rev is not None:
                    db.execute(
                        "DELETE FROM step_errors WHERE run_id = ? AND seq = ?",
                        (commit.run_id, cp.seq),
                    )
                if cp.errors:
                    db.executemany(
                        "INSERT INTO step_errors (run_id, seq, n, error) VALUES (?, ?, ?, ?)",
                        [
                            (commit.run_id, cp.seq, n, dumps(e.to_json()))
                            for n, e in enumerate(cp.errors, 1)
                        ],
                    )
            if cp.kind == "remote" and cp.status == "failed" and cp.final:
                # The engine gave up on the step: no attempt of it may run any more.
                self._withdraw(db, commit.run_id, (cp.seq,), commit.now)
        self._insert_events(db, commit.run_id, commit.events)
        for task in commit.tasks:
            # Withdraw older attempts nobody claimed: only the newest may run.
            withdrawn = db.execute(
                "DELETE FROM tasks WHERE run_id = ? AND seq = ? AND status IN"
                " ('queued', 'waiting') RETURNING queue",
                (task.run_id, task.seq),
            ).fetchall()
            self._enqueue(db, task, commit.now)
            for (queue,) in withdrawn:
                if queue is not None:
                    self._admit_waiting(db, queue, commit.now)

    @staticmethod
    def _enqueue(db: sqlite3.Connection, task: NewTask, now: int) -> None:
        """Insert *task*, queued, or waiting when its flow-control queue has no free slot."""
        status = "queued"
        if task.queue is not None and task.queue_limit is not None:
            (held,) = db.execute(
                f"SELECT COUNT(*) FROM tasks WHERE queue = ? AND status IN {_SLOT_HOLDERS}",
                (task.queue,),
            ).fetchone()
            if held >= task.queue_limit:
                status = "waiting"
        db.execute(
            "INSERT INTO tasks (run_id, seq, step_id, name, grp, queue, queue_limit, input,"
            " attempt, status, available_at, redispatched, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task.run_id,
                task.seq,
                task.step_id,
                task.name,
                task.group,
                task.queue,
                task.queue_limit,
                task.input,
                task.attempt,
                status,
                task.available_at,
                int(task.redispatched),
                now,
            ),
        )
        if status == "waiting":
            db.execute(
                _EVENT_INSERT,
                (
                    task.run_id,
                    task.seq,
                    "step.queued",
                    "info",
                    now,
                    dumps({"attempt": task.attempt, "queue": task.queue}),
                ),
            )

    @staticmethod
    def _admit_waiting(db: sqlite3.Connection, queue: str, now: int) -> None:
        """Admit the oldest waiting attempts of *queue* into the slots that are free."""
        while True:
            row = db.execute(
                "SELECT task_id, run_id, seq, attempt, queue_limit FROM tasks"
                " WHERE queue = ? AND status = 'waiting' ORDER BY task_id LIMIT 1",
                (queue,),
            ).fetchone()
            if row is None:
                return
            (held,) = db.execute(
                f"SELECT COUNT(*) FROM tasks WHERE queue = ? AND status IN {_SLOT_HOLDERS}",
                (queue,),
            ).fetchone()
            if held >= (row[4] or 1):
                return
            db.execute(
                "UPDATE tasks SET status = 'queued', available_at = MAX(available_at, ?)"
                " WHERE task_id = ?",
                (now, row[0]),
            )
            db.execute(
                _EVENT_INSERT,
                (
                    row[1],
                    row[2],
                    "step.admitted",
                    "info",
                    now,
                    dumps({"attempt": row[3], "queue": queue}),
                ),
            )

    def _release_slot(self, db: sqlite3.Connection, deleted: list[Any], now: int) -> None:
        """Admit waiting attempts of the queues that the deleted tasks (``queue`` rows) held."""
        for queue in {row[0] for row in deleted if row[0] is not None}:
            self._admit_waiting(db, queue, now)

    def _withdraw(self, db: sqlite3.Connection, run_id: str, seqs: Sequence[int], now: int) -> None:
        """
        Withdraw the attempts of the run's checkpoints at *seqs*: queued or waiting ones are
        deleted; one a worker has claimed is marked ``withdrawn``, so its result is discarded
        when it reports. Each withdrawal is a ``step.withdrawn`` event.
        """
        if not seqs:
            return
        marks = ", ".join("?" for _ in seqs)
        deleted = db.execute(
            f"DELETE FROM tasks WHERE run_id = ? AND seq IN ({marks})"
            " AND status IN ('queued', 'waiting') RETURNING queue, seq, attempt",
            (run_id, *seqs),
        ).fetchall()
        claimed = db.execute(
            f"UPDATE tasks SET status = 'withdrawn' WHERE run_id = ? AND seq IN ({marks})"
            " AND status = 'claimed' RETURNING NULL, seq, attempt",
            (run_id, *seqs),
        ).fetchall()
        self._release_slot(db, deleted, now)
        for rows, held in ((deleted, False), (claimed, True)):
            for _, seq, attempt in rows:
                db.execute(
                    _EVENT_INSERT,
                    (
                        run_id,
                        seq,
                        "step.withdrawn",
                        "info",
                        now,
                        dumps({"attempt": attempt, "claimed": held}),
                    ),
                )

    async def record_local_step(
        self, run_id: str, token: str, *, seq: int, name: str, output: str, started: int, now: int
    ) -> None:
        """A local step that succeeded on its first attempt (see ``Store.record_local_step``)."""
        query = (
            "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts,"
            " output, created_at, updated_at)"
            " SELECT ?1, ?2, ?3, 'local', ?1 || ':' || ?2, 'completed', 1, ?4, ?5, ?6"
            " WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = ?1 AND lease_token = ?7"
            " AND status = 'running')"
        )
        values = (run_id, seq, name, output, started, now, token)

        def insert(db: sqlite3.Connection) -> None:
            try:
                inserted = db.execute(query, values).rowcount
            except sqlite3.IntegrityError:
                msg = f"run {run_id}: checkpoint {seq} was written meanwhile"
                raise StaleTurnError(msg) from None
            if inserted != 1:
                raise StaleTurnError(f"run {run_id}: the lease was taken over")

        await self._transact(insert)

    @staticmethod
    def _advance(db: sqlite3.Connection, commit: TurnCommit) -> bool:
        """The run's part of a turn commit, as a compare-and-set on its lease token."""
        adv = commit.advance
        guard = (commit.run_id, commit.token)
        if adv.action == "continue" and adv.lease_until is None:
            # A read, so a step's commit writes no page of the runs table.
            return (
                db.execute(
                    "SELECT 1 FROM runs WHERE run_id = ? AND lease_token = ?"
                    " AND status = 'running'",
                    guard,
                ).fetchone()
                is not None
            )
        if adv.action == "continue":
            cursor = db.execute(
                "UPDATE runs SET lease_until = ?, updated_at = ?"
                " WHERE run_id = ? AND lease_token = ? AND status = 'running'",
                (adv.lease_until, commit.now, *guard),
            )
        elif adv.action == "suspend":
            cursor = db.execute(
                "UPDATE runs SET status = CASE WHEN woken = 1 THEN 'pending' ELSE 'suspended' END,"
                " wake_at = ?, lease_token = NULL, lease_until = NULL, updated_at = ?"
                " WHERE run_id = ? AND lease_token = ? AND status = 'running'",
                (adv.wake_at, commit.now, *guard),
            )
        elif adv.action == "finish":
            cursor = db.execute(
                "UPDATE runs SET status = ?, output = ?, error = ?, wake_at = NULL,"
                " lease_token = NULL, lease_until = NULL, updated_at = ?"
                " WHERE run_id = ? AND lease_token = ? AND status = 'running'",
                (adv.status, adv.output, error_text(adv.error), commit.now, *guard),
            )
        else:
            cursor = db.execute(
                "UPDATE runs SET status = 'pending', lease_token = NULL, lease_until = NULL,"
                " updated_at = ? WHERE run_id = ? AND lease_token = ? AND status = 'running'",
                (commit.now, *guard),
            )
        return cursor.rowcount == 1

    # -- workers ----------------------------------------------------------------------------------

    async def claim_tasks(
        self, *, groups: Sequence[str], now: int, claim_until: int, worker: str, limit: int
    ) -> list[Task]:
        """Claim up to *limit* queued tasks of *groups* available at *now*."""
        with self._read_errors():
            if not groups or limit <= 0:
                return []
            marks = ", ".join("?" for _ in groups)
            query = (
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE status = 'queued'"
                f" AND grp IN ({marks}) AND available_at <= ? ORDER BY task_id LIMIT ?"
            )
            probe = (
                "SELECT 1 FROM tasks WHERE status = 'queued'"
                f" AND grp IN ({marks}) AND available_at <= ? LIMIT 1"
            )
            if not self._conn.execute(probe, (*groups, now)).fetchone():
                return []

            def work(db: sqlite3.Connection) -> list[Task]:
                tasks: list[Task] = []
                rows = db.execute(query, (*groups, now, limit)).fetchall()
                events: list[tuple[Any, ...]] = []
                for row in rows:
                    db.execute(
                        "UPDATE tasks SET status = 'claimed', claimed_by = ?, claim_until = ?"
                        " WHERE task_id = ?",
                        (worker, claim_until, row[0]),
                    )
                    # The claim is the worker's pickup beat (and renews a lost-dispatch lease).
                    current = db.execute(
                        "UPDATE checkpoints SET status = 'running', heartbeat_at = ?1,"
                        " wake_at = CASE WHEN lease_ms IS NULL THEN wake_at ELSE ?1 + lease_ms END,"
                        " updated_at = ?1, rev = rev + 1"
                        " WHERE run_id = ?2 AND seq = ?3 AND status IN ('pending', 'running')"
                        " AND attempts = ?4 RETURNING progress, timeout_ms, lease_ms",
                        (now, row[1], row[2], row[7]),
                    ).fetchone()
                    task = task_of((*row, *(current or (None, None, None))))
                    tasks.append(task)
                    data = {"attempt": task.attempt, "kind": "remote", "worker": worker}
                    if task.redispatched:
                        data["redispatched"] = True
                    events.append((task.run_id, task.seq, "step.started", "info", now, dumps(data)))
                if events:
                    db.executemany(_EVENT_INSERT, events)
                return tasks

            return await self._transact(work, durable=False)

    async def renew_claim(self, task_id: int, worker: str, claim_until: int) -> bool:
        """Extend a claim *worker* holds; ``False`` if it no longer holds it."""

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE tasks SET claim_until = ? WHERE task_id = ? AND claimed_by = ?"
                " AND status = 'claimed'",
                (claim_until, task_id, worker),
            )
            return cursor.rowcount == 1

        return await self._transact(work, durable=False)

    async def heartbeat(
        self, task: Task, *, now: int, progress: str | None, lease_until: int | None
    ) -> bool:
        """Persist a worker's beat (see ``Store.heartbeat``)."""

        def beat(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE checkpoints SET heartbeat_at = ?1, progress = COALESCE(?2, progress),"
                " wake_at = CASE WHEN lease_ms IS NULL OR ?3 IS NULL THEN wake_at ELSE ?3 END,"
                " updated_at = ?1, rev = rev + 1"
                " WHERE run_id = ?4 AND seq = ?5 AND attempts = ?6"
                " AND status IN ('pending', 'running')",
                (now, progress, lease_until, task.run_id, task.seq, task.attempt),
            )
            return cursor.rowcount == 1

        return await self._transact(beat, durable=False)

    async def get_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        """One checkpoint, read afresh."""
        with self._read_errors():
            row = self._conn.execute(
                f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? AND seq = ?",
                (run_id, seq),
            ).fetchone()
            return None if row is None else checkpoint_of(row)

    async def redispatch_pending(self, run_id: str, *, now: int) -> int:
        """Re-enqueue the run's pending dispatched steps with attempt + 1; return how many."""

        def work(db: sqlite3.Connection) -> int:
            count = 0
            for cp in self._checkpoints(db, run_id):
                if cp.kind != "remote" or cp.status not in ("pending", "running"):
                    continue
                attempt = cp.attempts + 1
                db.execute(
                    "UPDATE checkpoints SET status = 'pending', attempts = ?1, dispatched_at = ?2,"
                    " redispatches = redispatches + 1,"
                    " wake_at = CASE WHEN lease_ms IS NULL THEN wake_at ELSE ?2 + lease_ms END,"
                    " updated_at = ?2, rev = rev + 1 WHERE run_id = ?3 AND seq = ?4",
                    (attempt, now, run_id, cp.seq),
                )
                withdrawn = db.execute(
                    "DELETE FROM tasks WHERE run_id = ? AND seq = ? AND status IN"
                    " ('queued', 'waiting') RETURNING queue, queue_limit",
                    (run_id, cp.seq),
                ).fetchall()
                limit = next((row[1] for row in withdrawn if row[1] is not None), None)
                if limit is None:
                    held = db.execute(
                        "SELECT queue_limit FROM tasks WHERE run_id = ? AND seq = ? LIMIT 1",
                        (run_id, cp.seq),
                    ).fetchone()
                    limit = None if held is None else held[0]
                self._enqueue(
                    db,
                    NewTask(
                        run_id,
                        cp.seq,
                        cp.step_id,
                        cp.name,
                        cp.group,
                        dumps(cp.input),
                        attempt,
                        now,
                        cp.queue,
                        redispatched=True,
                        queue_limit=limit,
                    ),
                    now,
                )
                self._release_slot(db, withdrawn, now)
                db.execute(
                    _EVENT_INSERT,
                    (
                        run_id,
                        cp.seq,
                        "step.redispatched",
                        "warning",
                        now,
                        dumps({"attempt": attempt, "by": "redispatch_pending"}),
                    ),
                )
                count += 1
            return count

        return await self._transact(work)

    async def release_claim(self, task_id: int, worker: str, *, now: int) -> None:
        """Put a claimed task back in the queue (a withdrawn one goes, freeing its slot)."""

        def work(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE tasks SET status = 'queued', claimed_by = NULL, claim_until = NULL"
                " WHERE task_id = ? AND claimed_by = ? AND status = 'claimed'",
                (task_id, worker),
            )
            gone = db.execute(
                "DELETE FROM tasks WHERE task_id = ? AND claimed_by = ? AND status = 'withdrawn'"
                " RETURNING queue",
                (task_id, worker),
            ).fetchall()
            self._release_slot(db, gone, now)

        return await self._transact(work, durable=False)

    async def record_result(self, task: Task, worker: str, outcome: TaskOutcome, now: int) -> bool:
        """Record an attempt's result (see ``Store.record_result``)."""

        def record(db: sqlite3.Connection) -> bool:
            deleted = db.execute(
                "DELETE FROM tasks WHERE task_id = ? AND claimed_by = ? RETURNING queue, status",
                (task.task_id, worker),
            ).fetchall()
            self._release_slot(db, deleted, now)
            if deleted and deleted[0][1] == "withdrawn":
                db.execute(
                    _EVENT_INSERT,
                    (
                        task.run_id,
                        task.seq,
                        "step.result_discarded",
                        "warning",
                        now,
                        dumps(discarded(task, outcome)),
                    ),
                )
                return False
            return self._apply_outcome(
                db, run_id=task.run_id, seq=task.seq, attempt=task.attempt, outcome=outcome, now=now
            )

        return await self._transact(record)

    def _apply_outcome(
        self,
        db: sqlite3.Connection,
        *,
        run_id: str,
        seq: int,
        attempt: int,
        outcome: TaskOutcome,
        now: int,
    ) -> bool:
        row = db.execute(
            "SELECT status, attempts, final FROM checkpoints WHERE run_id = ? AND seq = ?",
            (run_id, seq),
        ).fetchone()
        # A settled failure is what replay raises, and the workflow may have acted on it: a late
        # success of an attempt whose claim had expired must not rewrite that history.
        if row is None or row[0] == "completed" or (row[0] == "failed" and row[2]):
            return False
        status, attempts, _ = row
        if outcome.progress is not None:
            db.execute(
                "UPDATE checkpoints SET progress = ? WHERE run_id = ? AND seq = ?",
                (outcome.progress, run_id, seq),
            )
        if outcome.error is None:
            db.execute(
                "UPDATE checkpoints SET status = 'completed', output = ?, error = NULL,"
                " wake_at = NULL, final = 0, updated_at = ?, rev = rev + 1"
                " WHERE run_id = ? AND seq = ?",
                (outcome.output, now, run_id, seq),
            )
            # Other attempts of a step that has completed are moot.
            moot = db.execute(
                "DELETE FROM tasks WHERE run_id = ? AND seq = ? RETURNING queue", (run_id, seq)
            ).fetchall()
            self._release_slot(db, moot, now)
            event = ("step.completed", "info", {"attempt": attempt, "kind": "remote"})
        else:
            if status not in ("pending", "running") or attempts != attempt:
                return False
            text = error_text(outcome.error)
            db.execute(
                "UPDATE checkpoints SET status = 'failed', error = ?, final = 0,"
                " wake_at = NULL, updated_at = ?, rev = rev + 1 WHERE run_id = ? AND seq = ?",
                (text, now, run_id, seq),
            )
            # A row of its own: an attempt costs the same however many came before.
            db.execute(_ERROR_APPEND, (run_id, seq, text))
            level = "warning" if outcome.error.retryable else "error"
            event = (
                "step.failed",
                level,
                {"attempt": attempt, "kind": "remote", "error": outcome.error.to_json()},
            )
        db.execute(_EVENT_INSERT, (run_id, seq, event[0], event[1], now, dumps(event[2])))
        db.execute(
            "UPDATE runs SET woken = 1, wake_at = NULL, updated_at = ?,"
            " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
            " WHERE run_id = ? AND status IN ('pending', 'running', 'suspended')",
            (now, run_id),
        )
        return True

    # -- maintenance ------------------------------------------------------------------------------

    async def recover(
        self, *, now: int, max_recovery_attempts: int | None, reconcile_ms: int
    ) -> RecoveryReport:
        """Recover expired run leases and expired task claims (see ``Store.recover``)."""
        with self._read_errors():
            db = self._conn
            # A read first, so a pass with nothing to do takes no write lock.
            (expired,) = db.execute(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'running' AND lease_until < ?1)"
                " OR EXISTS (SELECT 1 FROM tasks WHERE status IN ('claimed', 'withdrawn')"
                " AND claim_until < ?1)",
                (now,),
            ).fetchone()
            if not expired:
                return RecoveryReport()

            def work(db: sqlite3.Connection) -> RecoveryReport:
                recovered: list[str] = []
                dead: list[str] = []
                lost: list[str] = []
                for run_id, count in db.execute(
                    "SELECT run_id, recovery_attempts FROM runs WHERE status = 'running'"
                    " AND lease_until < ?",
                    (now,),
                ).fetchall():
                    awaiting = db.execute(
                        "SELECT 1 FROM checkpoints WHERE run_id = ? AND kind = 'remote'"
                        " AND timeout_ms IS NOT NULL AND status IN ('pending', 'running') LIMIT 1",
                        (run_id,),
                    ).fetchone()
                    if awaiting is not None:
                        # Its dispatcher died awaiting a liveness step: a worker may still report,
                        # so park the run on the reconcile wake; this is not counted as a recovery.
                        db.execute(
                            "UPDATE runs SET status = 'suspended', wake_at = ?, lease_token = NULL,"
                            " lease_until = NULL, updated_at = ? WHERE run_id = ?",
                            (now + reconcile_ms, now, run_id),
                        )
                        db.execute(
                            _EVENT_INSERT,
                            (
                                run_id,
                                None,
                                "run.reconciling",
                                "warning",
                                now,
                                dumps({"wake_at": now + reconcile_ms}),
                            ),
                        )
                        recovered.append(run_id)
                        continue
                    if max_recovery_attempts is not None and count >= max_recovery_attempts:
                        error = dead_run(count, max_recovery_attempts)
                        db.execute(
                            "UPDATE runs SET status = 'dead', error = ?, lease_token = NULL,"
                            " lease_until = NULL, updated_at = ? WHERE run_id = ?",
                            (error_text(error), now, run_id),
                        )
                        dead.append(run_id)
                        name, level, data = "run.dead", "error", {"recovery_attempts": count}
                    else:
                        db.execute(
                            "UPDATE runs SET status = 'pending', lease_token = NULL,"
                            " lease_until = NULL, recovery_attempts = recovery_attempts + 1,"
                            " updated_at = ? WHERE run_id = ?",
                            (now, run_id),
                        )
                        recovered.append(run_id)
                        name, level, data = (
                            "run.recovered",
                            "warning",
                            {"recovery_attempts": count + 1},
                        )
                    db.execute(_EVENT_INSERT, (run_id, None, name, level, now, dumps(data)))
                for task_id, run_id, seq, step_id, attempt in db.execute(
                    "SELECT task_id, run_id, seq, step_id, attempt FROM tasks"
                    " WHERE status = 'claimed' AND claim_until < ?",
                    (now,),
                ).fetchall():
                    deleted = db.execute(
                        "DELETE FROM tasks WHERE task_id = ? RETURNING queue", (task_id,)
                    ).fetchall()
                    self._release_slot(db, deleted, now)
                    self._apply_outcome(
                        db,
                        run_id=run_id,
                        seq=seq,
                        attempt=attempt,
                        outcome=TaskOutcome(error=lost_worker()),
                        now=now,
                    )
                    lost.append(step_id)
                # A withdrawn attempt whose worker went silent: its slot is free, nothing else.
                gone = db.execute(
                    "DELETE FROM tasks WHERE status = 'withdrawn' AND claim_until < ?"
                    " RETURNING queue",
                    (now,),
                ).fetchall()
                self._release_slot(db, gone, now)
                return RecoveryReport(recovered, dead, lost)

            return await self._transact(work)

    async def next_due(self, now: int) -> int | None:
        """The earliest epoch ms after *now* at which a timer, lease or claim comes due."""
        with self._read_errors():
            # A lease or claim held until T expires at T + 1 (recovery takes `until < now`).
            row = self._conn.execute(
                "SELECT MIN(t) FROM ("
                " SELECT MIN(wake_at) AS t FROM runs WHERE status = 'suspended' AND wake_at > ?1"
                " UNION ALL SELECT MIN(lease_until) + 1 FROM runs WHERE status = 'running'"
                " AND lease_until >= ?1"
                " UNION ALL SELECT MIN(available_at) FROM tasks WHERE status = 'queued'"
                " AND available_at > ?1"
                " UNION ALL SELECT MIN(claim_until) + 1 FROM tasks"
                " WHERE status IN ('claimed', 'withdrawn') AND claim_until >= ?1)",
                (now,),
            ).fetchone()
            due: int | None = row[0]
            return due

    async def requeue(self, run_id: str, now: int) -> Run:
        """Reset failed checkpoints to a fresh first attempt and make the run pending."""

        def work(db: sqlite3.Connection) -> Run:
            row = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if row is None:
                msg = f"no run with id {run_id!r}"
                raise LookupError(msg)
            run = run_of(row)
            if run.status not in ("failed", "dead", "cancelled"):
                msg = (
                    f"run {run_id} is {run.status}; only a failed, dead or cancelled run can be"
                    " retried"
                )
                raise ValueError(msg)
            # Attempts still queued or running for the steps reset here must not complete
            # their fresh first attempt: they are withdrawn.
            failed = db.execute(
                "SELECT seq FROM checkpoints WHERE run_id = ? AND status = 'failed'"
                " AND kind = 'remote'",
                (run_id,),
            ).fetchall()
            self._withdraw(db, run_id, [seq for (seq,) in failed], now)
            db.execute(
                "DELETE FROM step_errors WHERE run_id = ? AND seq IN (SELECT seq FROM"
                " checkpoints WHERE run_id = ? AND status = 'failed')",
                (run_id, run_id),
            )
            reset = db.execute(
                "UPDATE checkpoints SET status = CASE kind WHEN 'local' THEN 'pending'"
                " ELSE 'failed' END, attempts = 0, final = 0, error = NULL,"
                " retry_state = NULL,"
                " wake_at = CASE kind WHEN 'local' THEN NULL ELSE ? END,"
                " updated_at = ?, rev = rev + 1 WHERE run_id = ? AND status = 'failed'",
                (now, now, run_id),
            ).rowcount
            db.execute(
                "UPDATE runs SET status = 'pending', output = NULL, error = NULL, wake_at = NULL,"
                " woken = 0, lease_token = NULL, lease_until = NULL, recovery_attempts = 0,"
                " updated_at = ? WHERE run_id = ?",
                (now, run_id),
            )
            self._insert_events(
                db, run_id, [NewEvent("run.requeued", now, data={"checkpoints_reset": reset})]
            )
            new = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            return run_of(new)

        return await self._transact(work)
