"""
The SQLite store: item states, runs, cursors and locks in one file (WAL mode).

Writes are batched: one transaction per window holds the window's item states, the run's counts
and the definition's cursor, so a crash loses the window entirely or not at all.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Generator, Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NamedTuple, cast

import attrs

from migrate._errors import ConfigError, LockHeld, StoreSchemaError
from migrate._sources import Contract, Cursor
from migrate._state import (
    Counts,
    DefinitionResult,
    ErrorEvidence,
    FailureRecord,
    ItemState,
    ItemStatus,
    LockInfo,
    RunRecord,
    RunStatus,
)

__all__ = ["SCHEMA_VERSION", "PriorState", "StateRow", "Store", "open_store", "pid_alive"]

#: The schema this version writes; a store with a higher version is refused, a lower one upgraded.
#: 1: item states, runs, cursors, locks. 2: adds definition contracts.
SCHEMA_VERSION: Final = 2

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
    PRIMARY KEY (definition, identity)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS item_states_by_status ON item_states (definition, status);
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
    host TEXT NOT NULL
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
CREATE TABLE IF NOT EXISTS locks (
    definition TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    acquired_at REAL NOT NULL
);
"""

_INSERT_STATE = (
    "INSERT OR REPLACE INTO item_states (definition, identity, status, reason, error, version, "
    "journal, tracking, run_id, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

StateRow = tuple[
    str, str, str, "str | None", "str | None", "str | None", "str | None", "str | None", str, float
]
"""definition, identity, status, reason, error json, version, journal json, tracking json,
run id, updated_at: one row of ``item_states``, as the runner builds it."""


class PriorState(NamedTuple):
    """What a run needs to know about an item's stored state."""

    status: str
    version: str | None
    tracking: str | None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (permission errors count as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _path_from_url(url: str, base_dir: Path | None) -> Path:
    prefix = "sqlite:///"
    if not url.startswith(prefix) or len(url) == len(prefix):
        raise ConfigError(f"store must look like 'sqlite:///path/to/state.db', got {url!r}")
    path = Path(url[len(prefix) :])
    if not path.is_absolute():
        path = (base_dir if base_dir is not None else Path.cwd()) / path
    return path


def open_store(url: str, *, base_dir: str | os.PathLike[str] | None = None) -> Store:
    """
    Open (creating on demand) the store at *url*.

    Args:
        url: ``"sqlite:///relative/path.db"`` or ``"sqlite:////absolute/path.db"``.
        base_dir: Where a relative path starts; ``None``: the working folder.

    Raises:
        ConfigError: If *url* is not a ``sqlite:///`` URL.
        StoreSchemaError: If the store was written by a newer version of ``migrate``.
    """
    return Store(_path_from_url(url, None if base_dir is None else Path(base_dir)))


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class Store:
    """
    Item states, runs, cursors and locks in one SQLite file.

    Thread-safe: one connection guarded by a lock. Use as a context manager, or call `close`.

    Args:
        path: The database file; it and its folder are created on demand.

    Raises:
        StoreSchemaError: If the file's schema version is newer than `SCHEMA_VERSION`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.host = socket.gethostname()
        self._db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._migrate_schema()
        except BaseException:
            self._db.close()
            raise

    def _migrate_schema(self) -> None:
        with self.transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            version = db.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            if version is None:
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif version < SCHEMA_VERSION:
                # Every change so far only adds tables, which the statements above created.
                db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))
            elif version > SCHEMA_VERSION:
                raise StoreSchemaError(
                    f"store {self.path} has schema version {version}, newer than this version "
                    f"of migrate understands ({SCHEMA_VERSION}); upgrade migrate"
                )

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @contextmanager
    def transaction(self) -> Generator[sqlite3.Connection, None, None]:
        """A write transaction (``BEGIN IMMEDIATE``), committed on success, else rolled back."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # --- runs -------------------------------------------------------------------------------

    def create_run(
        self, run_id: str, mode: str, definitions: Mapping[str, DefinitionResult]
    ) -> None:
        """Record a new run with status ``queued`` for this process."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO runs (id, status, mode, definitions, started_at, pid, host) "
                "VALUES (?, 'queued', ?, ?, ?, ?, ?)",
                (run_id, mode, _definitions_json(definitions), time.time(), os.getpid(), self.host),
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
        """
        Change a stored run; ``None`` and ``False`` leave a field as it is.

        Args:
            run_id: The run.
            status: Its new status.
            definitions: Its new per-definition record.
            error: Why it failed or stopped.
            ended: Set its end time to now.
        """
        with self.transaction() as db:
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
            params.append(_definitions_json(definitions))
        if error is not None:
            sets.append("error = ?")
            params.append(error)
        if ended:
            sets.append("ended_at = ?")
            params.append(time.time())
        if sets:
            db.execute(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?", (*params, run_id))

    def run(self, run_id: str) -> RunRecord | None:
        """The run with this id, if any."""
        rows = self._query(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return _run_record(rows[0]) if rows else None

    def runs(self, limit: int | None = 20) -> tuple[RunRecord, ...]:
        """Runs, newest first; at most *limit* (``None``: all)."""
        sql = f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY seq DESC"
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        return tuple(_run_record(row) for row in self._query(sql, params))

    def latest_run_for(
        self, definition_id: str, *, include_start_failed: bool = False
    ) -> RunRecord | None:
        """The newest run that covered *definition_id* (start-failed runs skipped by default)."""
        rows = self._query(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE EXISTS "
            "(SELECT 1 FROM json_each(runs.definitions) WHERE key = ?) ORDER BY seq DESC",
            (definition_id,),
        )
        for row in rows:
            record = _run_record(row)
            if include_start_failed or record.status != "start-failed":
                return record
        return None

    def recover_dead_runs(self) -> tuple[str, ...]:
        """
        Mark failed the runs of dead processes on this host and release their locks.

        A run still ``queued`` or ``running`` whose pid is not alive on this host crashed
        (``kill -9``, power loss): ``running`` becomes ``failed``, ``queued`` becomes
        ``start-failed``, with the error "process N died". Returns the ids changed.
        """
        rows = self._query(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE status IN ('queued', 'running') AND host = ?",
            (self.host,),
        )
        dead = [_run_record(row) for row in rows]
        dead = [record for record in dead if not pid_alive(record.pid)]
        if not dead:
            return ()
        with self.transaction() as db:
            for record in dead:
                status: RunStatus = "failed" if record.status == "running" else "start-failed"
                definitions = {
                    key: attrs.evolve(
                        value,
                        status="failed" if value.status in ("running", "queued") else value.status,
                    )
                    for key, value in record.definitions.items()
                }
                self._update_run(
                    db, record.run_id, status, definitions, f"process {record.pid} died", True
                )
                db.execute("DELETE FROM locks WHERE run_id = ?", (record.run_id,))
        return tuple(record.run_id for record in dead)

    # --- locks ------------------------------------------------------------------------------

    def acquire_locks(self, run_id: str, definition_ids: Iterable[str]) -> None:
        """
        Take the locks of all *definition_ids* for *run_id* atomically (all or none).

        A lock held by a dead process on this host is broken first.

        Raises:
            LockHeld: Naming the first definition whose lock another live run holds.
        """
        wanted = list(definition_ids)
        now = time.time()
        pid = os.getpid()
        with self.transaction() as db:
            for definition_id in wanted:
                row = db.execute(
                    "SELECT definition, run_id, pid, host, acquired_at FROM locks "
                    "WHERE definition = ?",
                    (definition_id,),
                ).fetchone()
                if row is None:
                    continue
                lock = LockInfo(*row)
                if lock.host == self.host and not pid_alive(lock.pid):
                    db.execute("DELETE FROM locks WHERE definition = ?", (definition_id,))
                    continue
                raise LockHeld(lock)
            db.executemany(
                "INSERT INTO locks (definition, run_id, pid, host, acquired_at) "
                "VALUES (?, ?, ?, ?, ?)",
                [(d, run_id, pid, self.host, now) for d in wanted],
            )

    def release_locks(self, run_id: str) -> None:
        """Release every lock *run_id* holds."""
        with self.transaction() as db:
            db.execute("DELETE FROM locks WHERE run_id = ?", (run_id,))

    def locks(self) -> tuple[LockInfo, ...]:
        """The locks held now."""
        rows = self._query(
            "SELECT definition, run_id, pid, host, acquired_at FROM locks ORDER BY definition"
        )
        return tuple(LockInfo(*row) for row in rows)

    def unlock(self, definition_id: str) -> LockInfo | None:
        """Break *definition_id*'s lock; return it (``None`` if it was not locked)."""
        with self.transaction() as db:
            row = db.execute(
                "SELECT definition, run_id, pid, host, acquired_at FROM locks WHERE definition = ?",
                (definition_id,),
            ).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM locks WHERE definition = ?", (definition_id,))
        return LockInfo(*row)

    # --- contracts --------------------------------------------------------------------------

    def contract(self, definition_id: str) -> Contract | None:
        """The contract recorded for *definition_id*, or ``None`` if none was recorded yet."""
        rows = self._query("SELECT contract FROM contracts WHERE definition = ?", (definition_id,))
        return Contract.from_json(json.loads(rows[0][0])) if rows else None

    def save_contract(
        self, definition_id: str, contract: Contract, run_id: str, *, reset_cursor: bool = False
    ) -> None:
        """
        Record *contract* as *definition_id*'s, replacing any, in one transaction.

        Args:
            definition_id: The definition.
            contract: Its source contract now.
            run_id: The run recording it.
            reset_cursor: Also forget the saved cursor (the next normal run reads from the start).
        """
        with self.transaction() as db:
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
                self._save_cursor(db, definition_id, None)

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
        return cast(Cursor, _loads(rows[0][0])) if rows else None

    def prior_states(self, definition_id: str, identities: Sequence[str]) -> dict[str, PriorState]:
        """Stored status, version and tracking json of these identities, in one query."""
        if not identities:
            return {}
        rows = self._query(
            "SELECT identity, status, version, tracking FROM item_states WHERE definition = ? "
            "AND identity IN (SELECT value FROM json_each(?))",
            (definition_id, json.dumps(identities)),
        )
        return {row[0]: PriorState(row[1], row[2], row[3]) for row in rows}

    def commit_window(
        self,
        definition_id: str,
        rows: Sequence[StateRow],
        *,
        run_id: str,
        definitions: Mapping[str, DefinitionResult],
        cursor: Cursor = None,
        save_cursor: bool = False,
    ) -> None:
        """
        Commit one window: its item states, the run's counts and the cursor in one transaction.

        Args:
            definition_id: The definition the window belongs to.
            rows: The window's item states (`StateRow` tuples).
            run_id: The run whose per-definition record is replaced by *definitions*.
            definitions: The run's per-definition record, counts included.
            cursor: The cursor after the window.
            save_cursor: Save *cursor* (discovery runs); targeted runs keep the saved one.
        """
        with self.transaction() as db:
            if rows:
                db.executemany(_INSERT_STATE, rows)
            self._update_run(db, run_id, None, definitions, None, False)
            if save_cursor:
                self._save_cursor(db, definition_id, cursor)

    def _save_cursor(self, db: sqlite3.Connection, definition_id: str, cursor: Cursor) -> None:
        db.execute(
            "INSERT OR REPLACE INTO cursors (definition, cursor, updated_at) VALUES (?, ?, ?)",
            (definition_id, None if cursor is None else json.dumps(cursor), time.time()),
        )

    def reset_cursor(self, definition_id: str) -> None:
        """Forget the saved cursor: the next normal run reads from the beginning."""
        with self.transaction() as db:
            self._save_cursor(db, definition_id, None)

    def mark_needs_update(self, definition_id: str, run_id: str) -> int:
        """Mark every ``migrated`` item ``needs-update`` and reset the cursor, atomically."""
        with self.transaction() as db:
            changed = db.execute(
                "UPDATE item_states SET status = 'needs-update', run_id = ?, updated_at = ? "
                "WHERE definition = ? AND status = 'migrated'",
                (run_id, time.time(), definition_id),
            ).rowcount
            self._save_cursor(db, definition_id, None)
        return int(changed)

    def identities(self, definition_id: str, status: ItemStatus) -> list[str]:
        """Identities of *definition_id* whose state is *status*, in identity order."""
        rows = self._query(
            "SELECT identity FROM item_states WHERE definition = ? AND status = ? "
            "ORDER BY identity",
            (definition_id, status),
        )
        return [row[0] for row in rows]

    def count_status(
        self, definition_id: str, status: ItemStatus, run_id: str | None = None
    ) -> int:
        """How many items of *definition_id* have *status* (last changed by *run_id*, if given)."""
        sql = "SELECT count(*) FROM item_states WHERE definition = ? AND status = ?"
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
        by_status = {row[0]: int(row[1]) for row in rows}
        return Counts(
            migrated=by_status.get("migrated", 0),
            skipped=by_status.get("skipped", 0),
            failed=by_status.get("failed", 0),
            needs_update=by_status.get("needs-update", 0),
        )

    def item(self, definition_id: str, identity: str) -> ItemState | None:
        """The stored state of one item, or ``None``."""
        rows = self._query(
            f"SELECT {_STATE_COLUMNS} FROM item_states WHERE definition = ? AND identity = ?",
            (definition_id, identity),
        )
        return _item_state(rows[0]) if rows else None

    def items(self, definition_id: str) -> tuple[ItemState, ...]:
        """Every stored state of *definition_id*, in identity order."""
        rows = self._query(
            f"SELECT {_STATE_COLUMNS} FROM item_states WHERE definition = ? ORDER BY identity",
            (definition_id,),
        )
        return tuple(_item_state(row) for row in rows)

    def failures(self, definition_id: str, limit: int | None = None) -> tuple[FailureRecord, ...]:
        """
        Failed items of *definition_id* with their evidence, in natural identity order (see
        `natural_key`: ``"7"`` before ``"13"``), the first *limit* of them (``None``: all).
        """
        rows = self._query(
            "SELECT identity, run_id, error, journal FROM item_states "
            "WHERE definition = ? AND status = 'failed'",
            (definition_id,),
        )
        ordered = sorted(rows, key=lambda row: natural_key(row[0]))
        return tuple(
            FailureRecord(
                identity=row[0],
                run_id=row[1],
                error=ErrorEvidence.from_json(_loads(row[2]) or {}),
                journal=tuple(_loads(row[3]) or ()),
            )
            for row in (ordered if limit is None else ordered[:limit])
        )

    def tracking(self, definition_id: str, identity: str) -> dict[str, Any] | None:
        """The tracking record stored for one item, or ``None``."""
        rows = self._query(
            "SELECT tracking FROM item_states WHERE definition = ? AND identity = ?",
            (definition_id, identity),
        )
        return cast("dict[str, Any] | None", _loads(rows[0][0])) if rows else None


_DIGITS = re.compile(r"([0-9]+)")


def natural_key(identity: str) -> tuple[tuple[int, int, str], ...]:
    """
    Sort key putting identities in natural order: runs of digits compare as numbers (before
    text at the same place), the rest as text; equal numbers by their text (``"007"`` first).

    Example:
        >>> sorted(["13", "7", "b2", "b10", "a", "100"], key=natural_key)
        ['7', '13', '100', 'a', 'b2', 'b10']
    """
    parts = _DIGITS.split(identity)
    # split() with a group alternates text, digits, text, ...: odd positions are digit runs.
    return tuple(
        (0, int(part), part) if index % 2 else (1, 0, part)
        for index, part in enumerate(parts)
        if part
    )


_RUN_COLUMNS = "id, status, mode, definitions, error, started_at, ended_at, pid, host"
_STATE_COLUMNS = (
    "definition, identity, status, reason, error, version, journal, tracking, run_id, updated_at"
)


def _definitions_json(definitions: Mapping[str, DefinitionResult]) -> str:
    return json.dumps({key: value.to_json() for key, value in definitions.items()})


def _run_record(row: Sequence[Any]) -> RunRecord:
    definitions = {
        key: DefinitionResult.from_json(value) for key, value in json.loads(row[3]).items()
    }
    return RunRecord(
        run_id=row[0],
        status=row[1],
        mode=row[2],
        definitions=definitions,
        error=row[4],
        started_at=row[5],
        ended_at=row[6],
        pid=row[7],
        host=row[8],
    )


def _item_state(row: Sequence[Any]) -> ItemState:
    error = _loads(row[4])
    return ItemState(
        definition_id=row[0],
        identity=row[1],
        status=row[2],
        reason=row[3],
        error=None if error is None else ErrorEvidence.from_json(error),
        version=row[5],
        journal=tuple(_loads(row[6]) or ()),
        tracking=_loads(row[7]),
        run_id=row[8],
        updated_at=row[9],
    )
