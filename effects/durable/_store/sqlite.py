"""
The SQLite store: one file, WAL, a versioned schema upgraded in place.

Durability: by default (``synchronous=NORMAL`` in WAL mode) every committed transaction survives a
crash of the process; a power loss may undo the last few commits. ``?synchronous=full`` in the URL
fsyncs every commit, so a power loss loses nothing committed either. Several processes may share
one file: every write is a ``BEGIN IMMEDIATE`` transaction (or one statement in autocommit, which
SQLite runs the same way: write lock first), so claims are never handed to two workers. Every
method runs its transaction without awaiting inside it, so the coroutines of one process never
interleave within a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sqlite3
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from effects.durable._failures import cancelled_attempt, dead_run, lost_worker
from effects.durable._records import FINISHED, Checkpoint, Event, Run, Task
from effects.durable._store import (
    ALL_RUNS,
    ChildRun,
    ClaimedRun,
    EventValue,
    Message,
    NewEvent,
    NewMessage,
    NewRun,
    NewTask,
    RecoveryReport,
    RecurringRow,
    RecurringWrite,
    RunQuery,
    StaleTurnError,
    TaskOutcome,
    TurnCommit,
    listing,
)
from effects.durable._store import sqlite_sql as sq
from effects.durable._store.rows import (
    PRUNE_BATCH,
    checkpoint_of,
    checkpoint_values,
    dumps,
    error_text,
    event_value_of,
    events_of,
    leased_run,
    message_of,
    policy_text,
    recurring_of,
    recurring_values,
    run_of,
    tapped_events,
    task_of,
    task_values,
)
from effects.durable._store.rules import (
    admission,
    admits,
    cancel_action,
    cancel_mode,
    cancels_attempt,
    check_requeue,
    check_send,
    gives_up,
    outcome_applies,
    recovery_verdict,
    redispatch,
    redispatchable,
    settled,
)
from effects.durable._store.schema import SCHEMA_NAME, check_tables, schema_version
from effects.durable._store.sqlite_sql import MIGRATIONS as _MIGRATIONS
from effects.durable._store.sqlite_sql import SCHEMA_VERSION
from effects.durable._store.taps import Observer, Taps, local_step_rows
from effects.durable._store.trail import (
    EventRow,
    admitted,
    cancel_requested,
    cancelled,
    event_rows,
    outcome_event,
    recovery_event,
    redispatched,
    requeued,
    result_discarded,
    started_data,
    waiting,
    withdrawn,
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


_SYNCHRONOUS: Final = {"off": "OFF", "normal": "NORMAL", "full": "FULL", "extra": "EXTRA"}


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
        self._taps = Taps()
        # Whether the connection has its tap (a TEMP trigger on events: this connection's
        # inserts alone, copied into a TEMP table that each commit drains).
        self._tap_on = False

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

    def tap(self, observer: Observer) -> Callable[[], None]:
        """Hear the events each transaction of this store object writes (see ``Store.tap``)."""
        return self._taps.add(observer)

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
            tables = {row[0] for row in db.execute(sq.TABLES)}
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
        where = f"store {self.url}"
        check_tables(where, sorted(tables))
        return schema_version(where, dict(db.execute(sq.META).fetchall()), SCHEMA_VERSION)

    def _upgrade(self, db: sqlite3.Connection) -> None:
        try:
            db.execute("BEGIN IMMEDIATE")
            # Read again under the write lock: another process may have upgraded meanwhile.
            tables = {row[0] for row in db.execute(sq.TABLES)}
            version = self._check_ours(db, tables)
            for statements in _MIGRATIONS[version:]:
                for statement in statements:
                    db.execute(statement)
            db.execute(sq.META_WRITE, (SCHEMA_NAME, str(SCHEMA_VERSION)))
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
        self._tap_on = False
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
        if self._tap_on is not self._taps.active:
            self._set_tap(db)
        tapped: list[Any] = []
        try:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                if _is_busy(error):
                    raise _Busy from error
                raise
            result = work(db)
            if self._tap_on:
                tapped = db.execute(sq.TAP_READ).fetchall()
                if tapped:
                    db.execute(sq.TAP_CLEAR)
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
        if tapped:
            self._taps.deliver(tapped_events(tapped))
        return result

    def _set_tap(self, db: sqlite3.Connection) -> None:
        """Install the connection's tap (someone listens now) or take it away (nobody does)."""
        on = self._taps.active
        for statement in sq.TAP_ON if on else sq.TAP_OFF:
            db.execute(statement)
        self._tap_on = on

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

        def alone(db: sqlite3.Connection) -> None:
            # One write in the turn (a workflow of local steps, one after another): no
            # savepoint to keep it apart; what it raises rolls the transaction back and is
            # handed to its caller below, as the savepoint would have.
            outcomes.clear()
            work, done = batch[0]
            outcomes.append((done, True, work(db)))

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
            self._run_now(alone if len(batch) == 1 else grouped)
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
    def _insert_events(db: sqlite3.Connection, rows: Sequence[EventRow]) -> None:
        if len(rows) == 1:
            db.execute(sq.EVENT_INSERT, rows[0])
        elif rows:
            db.executemany(sq.EVENT_INSERT, rows)

    # -- runs -------------------------------------------------------------------------------------

    async def create_run(self, run: NewRun, events: Sequence[NewEvent]) -> Run | ClaimedRun | None:
        """Insert *run* (pending, or leased); return the existing run if the id is taken."""
        return await self._transact(lambda db: self._create_run(db, run, events))

    def _create_run(
        self, db: sqlite3.Connection, run: NewRun, events: Sequence[NewEvent]
    ) -> Run | ClaimedRun | None:
        token = run.lease_token
        inserted = db.execute(
            sq.RUN_INSERT,
            (
                run.run_id,
                run.workflow,
                run.version,
                "pending" if token is None else "running",
                run.input,
                run.now,
                run.now,
                token,
                None if token is None else run.lease_until,
                run.traceparent,
                run.deadline,
                run.parent_id,
            ),
        ).rowcount
        if inserted != 1:
            return run_of(db.execute(sq.RUN, (run.run_id,)).fetchone())
        self._insert_events(db, event_rows(run.run_id, events))
        return None if token is None else leased_run(run, token)

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        with self._read_errors():
            row = self._conn.execute(sq.RUN, (run_id,)).fetchone()
            return None if row is None else run_of(row)

    async def list_runs(self, query: RunQuery = ALL_RUNS) -> list[Run]:
        """The runs *query* selects, newest first."""
        with self._read_errors():
            clause, values = listing.where(sq.RUNS_FILTERS, query.filter_values())
            rows = self._conn.execute(
                sq.RUNS + clause + sq.RUNS_ORDER, (*values, query.limit)
            ).fetchall()
            return [run_of(row) for row in rows]

    async def count_runs(self, query: RunQuery = ALL_RUNS) -> dict[str, int]:
        """How many runs *query*'s filters select, by status (limit and after ignored)."""
        counted = attrs.evolve(query, after=None)
        with self._read_errors():
            clause, values = listing.where(sq.RUNS_FILTERS, counted.filter_values())
            group = sq.COUNTS_GROUP_FILTERED if clause else sq.COUNTS_GROUP
            found = self._conn.execute(sq.COUNTS + clause + group, values).fetchall()
            return dict(found)

    async def retrying(self, run_ids: Sequence[str], *, now: int) -> set[str]:
        """Which of *run_ids* have a retrying checkpoint at *now*."""
        if not run_ids:
            return set()
        with self._read_errors():
            found = self._conn.execute(sq.RETRYING, (dumps(list(run_ids)), now)).fetchall()
            return {run_id for (run_id,) in found}

    async def queue_stats(self) -> dict[str, tuple[int, int]]:
        """Each queue that has attempts: ``(in_use, waiting)``."""
        with self._read_errors():
            found = self._conn.execute(sq.QUEUE_STATS).fetchall()
            return {queue: (in_use, waiting) for queue, in_use, waiting in found}

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints by sequence number."""
        with self._read_errors():
            return self._checkpoints(self._conn, run_id)

    @staticmethod
    def _checkpoints(db: sqlite3.Connection, run_id: str) -> list[Checkpoint]:
        return [checkpoint_of(row) for row in db.execute(sq.CHECKPOINTS, (run_id,)).fetchall()]

    async def events(self, run_id: str) -> list[Event]:
        """The run's events, oldest first."""
        with self._read_errors():
            return events_of(run_id, self._conn.execute(sq.EVENTS, (run_id,)).fetchall())

    # -- turns ------------------------------------------------------------------------------------

    async def claim_runs(
        self,
        *,
        workflows: Sequence[tuple[str, str]],
        now: int,
        lease_until: int,
        owner: str,
        limit: int,
        known: Mapping[str, int] | None = None,
    ) -> list[ClaimedRun]:
        """Take up to *limit* runnable runs of *workflows*, each with a fresh lease token."""
        passed: Mapping[str, int] = {} if known is None else known
        with self._read_errors():
            if not workflows or limit <= 0:
                return []
            pairs = ", ".join("(?, ?)" for _ in workflows)
            flat = [part for pair in workflows for part in pair]
            # A read first: an idle poll takes no write lock (and writes no empty transaction).
            probe = pairs.join(sq.RUNNABLE_PROBE)
            if not self._conn.execute(probe, (now, *flat)).fetchone():
                return []
            query = pairs.join(sq.RUNNABLE_RUNS)

            def work(db: sqlite3.Connection) -> list[ClaimedRun]:
                claimed: list[ClaimedRun] = []
                for row in db.execute(query, (now, *flat, limit)).fetchall():
                    token = f"{owner}:{secrets.token_hex(6)}"
                    db.execute(sq.RUN_CLAIM, (token, lease_until, row[0]))
                    run = attrs.evolve(run_of(row), status="running")
                    since = passed.get(run.run_id, 0)
                    if since <= 0:
                        claimed.append(ClaimedRun(run, token, self._checkpoints(db, run.run_id)))
                        continue
                    after = db.execute(sq.CHECKPOINTS_AFTER, (run.run_id, since)).fetchall()
                    count, revs = db.execute(sq.CHECKPOINTS_UPTO, (run.run_id, since)).fetchone()
                    checkpoints = [checkpoint_of(row) for row in after]
                    claimed.append(ClaimedRun(run, token, checkpoints, since, (count, revs)))
                return claimed

            return await self._transact(work, durable=False)

    async def renew_lease(self, run_id: str, token: str, lease_until: int) -> bool:
        """Extend the lease *token* holds; ``False`` if it no longer holds the run."""

        def work(db: sqlite3.Connection) -> bool:
            return db.execute(sq.LEASE_RENEW, (lease_until, run_id, token)).rowcount == 1

        return await self._transact(work, durable=False)

    async def commit_turn(self, commit: TurnCommit) -> None:
        """Apply *commit* in one transaction or raise ``StaleTurnError``."""
        await self._transact(lambda db: self._commit_turn(db, commit))

    def _commit_turn(self, db: sqlite3.Connection, commit: TurnCommit) -> None:
        if not self._advance(db, commit):
            raise StaleTurnError(f"run {commit.run_id}: the lease was taken over")
        if commit.advance.action == "finish":
            db.execute(sq.PARENT_WAKE, (commit.now, commit.run_id, dumps(commit.run_id)))
        for child in commit.runs:
            self._create_child(db, commit.run_id, child)
        for take in commit.taken:
            if db.execute(sq.MESSAGE_TAKE, (take.seq, commit.run_id, take.n)).rowcount != 1:
                msg = f"run {commit.run_id}: message {take.n} was taken meanwhile"
                raise StaleTurnError(msg)
        for value in commit.values:
            db.execute(
                sq.EVENT_VALUE_SET, (commit.run_id, value.key, value.value, value.seq, commit.now)
            )
        for write in commit.checkpoints:
            cp = write.checkpoint
            values = checkpoint_values(write, commit.now)
            if write.expected_rev is None:
                try:
                    db.execute(
                        sq.CHECKPOINT_INSERT,
                        (*values, commit.run_id, cp.seq, cp.created_at, policy_text(cp)),
                    )
                except sqlite3.IntegrityError:
                    msg = f"run {commit.run_id}: checkpoint {cp.seq} was written meanwhile"
                    raise StaleTurnError(msg) from None
            elif (
                db.execute(
                    sq.CHECKPOINT_UPDATE, (*values, commit.run_id, cp.seq, write.expected_rev)
                ).rowcount
                != 1
            ):
                msg = f"run {commit.run_id}: checkpoint {cp.seq} changed meanwhile"
                raise StaleTurnError(msg)
            if cp.stored_errors() is None:
                # Given as values: written again whole (a turn changes them rarely, and few).
                if write.expected_rev is not None:
                    db.execute(sq.ERRORS_DELETE, (commit.run_id, cp.seq))
                if cp.errors:
                    db.executemany(
                        sq.ERROR_INSERT,
                        [
                            (commit.run_id, cp.seq, n, dumps(e.to_json()))
                            for n, e in enumerate(cp.errors, 1)
                        ],
                    )
            if gives_up(cp):
                self._withdraw(db, commit.run_id, (cp.seq,), commit.now)
        self._insert_events(db, event_rows(commit.run_id, commit.events))
        for task in commit.tasks:
            # Withdraw older attempts nobody claimed: only the newest may run.
            withdrawn = db.execute(sq.UNCLAIMED_DELETE, (task.run_id, task.seq)).fetchall()
            self._enqueue(db, task, commit.now)
            self._release_slot(db, withdrawn, commit.now)

    def _create_child(self, db: sqlite3.Connection, parent_id: str, child: ChildRun) -> None:
        """Insert a child run of *parent_id*; one of its id must be that parent's already."""
        taken = self._create_run(db, child.run, child.events)
        if isinstance(taken, Run) and taken.parent_id != parent_id:
            msg = f"run {parent_id}: child run id {child.run.run_id!r} was taken meanwhile"
            raise StaleTurnError(msg)

    @staticmethod
    def _enqueue(db: sqlite3.Connection, task: NewTask, now: int) -> None:
        """Insert *task*, queued, or waiting when its flow-control queue has no free slot."""
        held = 0
        if task.queue is not None and task.queue_limit is not None:
            (held,) = db.execute(sq.SLOTS_HELD, (task.queue,)).fetchone()
        status = admission(task.queue, task.queue_limit, held)
        db.execute(sq.TASK_INSERT, task_values(task, status, now))
        if status == "waiting":
            db.execute(
                sq.EVENT_INSERT, waiting(task.run_id, task.seq, task.attempt, task.queue, now)
            )

    @staticmethod
    def _admit_waiting(db: sqlite3.Connection, queue: str, now: int) -> None:
        """Admit the oldest waiting attempts of *queue* into the slots that are free."""
        while True:
            row = db.execute(sq.OLDEST_WAITING, (queue,)).fetchone()
            if row is None:
                return
            (held,) = db.execute(sq.SLOTS_HELD, (queue,)).fetchone()
            if not admits(held, row[4]):
                return
            db.execute(sq.ADMIT, (now, row[0]))
            db.execute(sq.EVENT_INSERT, admitted(row[1], row[2], row[3], queue, now))

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
        listed = dumps(list(seqs))
        deleted = db.execute(sq.WITHDRAW_UNCLAIMED, (run_id, listed)).fetchall()
        claimed = db.execute(sq.WITHDRAW_CLAIMED, (run_id, listed)).fetchall()
        self._release_slot(db, deleted, now)
        self._insert_events(
            db,
            [
                withdrawn(run_id, seq, attempt, claimed=held, now=now)
                for rows, held in ((deleted, False), (claimed, True))
                for _, seq, attempt in rows
            ],
        )

    async def record_local_step(
        self,
        run_id: str,
        token: str,
        *,
        seq: int,
        name: str,
        output: str,
        started: int,
        now: int,
        policy: str | None = None,
    ) -> None:
        """A local step that succeeded on its first attempt (see ``Store.record_local_step``)."""
        values = (run_id, seq, name, output, started, now, token, policy)
        if not self._grouped and not self._tap_on and not self._taps.active:
            # The hot path of a workflow of local steps: one statement in autocommit is a
            # write transaction of its own (SQLite takes the write lock before it reads, as
            # BEGIN IMMEDIATE does, and commits when it ends), so the two statements around
            # it would only cost their round trips.
            waited, pause = 0.0, _FIRST_PAUSE_S
            while True:
                try:
                    inserted = self._insert_local(values)
                    break
                except _Busy as busy:
                    if waited >= self._busy_timeout_s:
                        raise self._locked() from busy
                    await asyncio.sleep(pause)
                    waited += pause
                    pause = min(pause * 2, _LONGEST_PAUSE_S)
            if inserted != 1:
                raise StaleTurnError(f"run {run_id}: the lease was taken over")
            return

        def insert(db: sqlite3.Connection) -> None:
            try:
                inserted = db.execute(sq.LOCAL_STEP_INSERT, values).rowcount
            except sqlite3.IntegrityError:
                msg = f"run {run_id}: checkpoint {seq} was written meanwhile"
                raise StaleTurnError(msg) from None
            if inserted != 1:
                raise StaleTurnError(f"run {run_id}: the lease was taken over")
            if self._tap_on:
                db.executemany(sq.TAP_INSERT, local_step_rows(run_id, seq, started, now))

        await self._transact(insert)

    def _insert_local(self, values: tuple[Any, ...]) -> int:
        """``LOCAL_STEP_INSERT`` of *values* as one autocommit transaction; the rows inserted."""
        try:
            return self._conn.execute(sq.LOCAL_STEP_INSERT, values).rowcount
        except sqlite3.IntegrityError:
            msg = f"run {values[0]}: checkpoint {values[1]} was written meanwhile"
            raise StaleTurnError(msg) from None
        except sqlite3.OperationalError as error:
            if _is_busy(error):
                raise _Busy from error
            msg = f"store {self.url}: the write failed: {error}"
            raise StoreError(msg) from error
        except sqlite3.Error as error:
            msg = f"store {self.url}: the write failed: {error}"
            raise StoreError(msg) from error

    @staticmethod
    def _advance(db: sqlite3.Connection, commit: TurnCommit) -> bool:
        """The run's part of a turn commit, as a compare-and-set on its lease token."""
        adv = commit.advance
        guard = (commit.run_id, commit.token)
        if adv.action == "continue" and adv.lease_until is None:
            return db.execute(sq.LEASE_READ, guard).fetchone() is not None
        if adv.action == "continue":
            cursor = db.execute(sq.ADVANCE_CONTINUE, (adv.lease_until, commit.now, *guard))
        elif adv.action == "suspend":
            cursor = db.execute(sq.ADVANCE_SUSPEND, (adv.wake_at, commit.now, *guard))
        elif adv.action == "finish":
            values = (adv.status, adv.output, error_text(adv.error), commit.now, *guard)
            cursor = db.execute(sq.ADVANCE_FINISH, values)
        else:
            cursor = db.execute(sq.ADVANCE_RELEASE, (commit.now, *guard))
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
            if not self._conn.execute(marks.join(sq.CLAIMABLE_PROBE), (*groups, now)).fetchone():
                return []
            query = marks.join(sq.CLAIMABLE)

            def work(db: sqlite3.Connection) -> list[Task]:
                tasks: list[Task] = []
                for row in db.execute(query, (*groups, now, limit)).fetchall():
                    db.execute(sq.TASK_CLAIM, (worker, claim_until, row[0]))
                    current = db.execute(sq.PICKUP_BEAT, (now, row[1], row[2], row[7])).fetchone()
                    tasks.append(task_of((*row, *(current or (None, None, None)))))
                if tasks:
                    db.executemany(
                        sq.EVENT_INSERT,
                        [
                            (
                                t.run_id,
                                t.seq,
                                "step.started",
                                "info",
                                now,
                                dumps(started_data(t.attempt, worker, redispatched=t.redispatched)),
                            )
                            for t in tasks
                        ],
                    )
                return tasks

            return await self._transact(work, durable=False)

    async def renew_claim(self, task_id: int, worker: str, claim_until: int) -> bool:
        """Extend a claim *worker* holds; ``False`` if it no longer holds it."""

        def work(db: sqlite3.Connection) -> bool:
            return db.execute(sq.CLAIM_RENEW, (claim_until, task_id, worker)).rowcount == 1

        return await self._transact(work, durable=False)

    async def heartbeat(
        self, task: Task, *, now: int, progress: str | None, lease_until: int | None
    ) -> bool:
        """Persist a worker's beat (see ``Store.heartbeat``)."""
        values = (now, progress, lease_until, task.run_id, task.seq, task.attempt)

        def beat(db: sqlite3.Connection) -> bool:
            return db.execute(sq.HEARTBEAT, values).rowcount == 1

        return await self._transact(beat, durable=False)

    async def get_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        """One checkpoint, read afresh."""
        with self._read_errors():
            row = self._conn.execute(sq.CHECKPOINT, (run_id, seq)).fetchone()
            return None if row is None else checkpoint_of(row)

    async def redispatch_pending(self, run_id: str, *, now: int) -> int:
        """Re-enqueue the run's pending dispatched steps with attempt + 1; return how many."""

        def work(db: sqlite3.Connection) -> int:
            count = 0
            row = db.execute(sq.RUN, (run_id,)).fetchone()
            carried = None if row is None else run_of(row)
            for cp in filter(redispatchable, self._checkpoints(db, run_id)):
                db.execute(sq.REDISPATCH, (cp.attempts + 1, now, run_id, cp.seq))
                withdrawn = db.execute(sq.UNCLAIMED_DELETE, (run_id, cp.seq)).fetchall()
                limit = next((row[1] for row in withdrawn if row[1] is not None), None)
                if limit is None:
                    held = db.execute(sq.QUEUE_LIMIT_OF_STEP, (run_id, cp.seq)).fetchone()
                    limit = None if held is None else held[0]
                self._enqueue(db, redispatch(cp, now, limit, carried), now)
                self._release_slot(db, withdrawn, now)
                db.execute(sq.EVENT_INSERT, redispatched(run_id, cp.seq, cp.attempts + 1, now))
                count += 1
            return count

        return await self._transact(work)

    async def release_claim(self, task_id: int, worker: str, *, now: int) -> None:
        """Put a claimed task back in the queue (a withdrawn one goes, freeing its slot)."""

        def work(db: sqlite3.Connection) -> None:
            db.execute(sq.CLAIM_RELEASE, (task_id, worker))
            gone = db.execute(sq.WITHDRAWN_RELEASE, (task_id, worker)).fetchall()
            self._release_slot(db, gone, now)

        return await self._transact(work, durable=False)

    async def record_result(self, task: Task, worker: str, outcome: TaskOutcome, now: int) -> bool:
        """Record an attempt's result (see ``Store.record_result``)."""

        def record(db: sqlite3.Connection) -> bool:
            deleted = db.execute(sq.OWN_TASK_DELETE, (task.task_id, worker)).fetchall()
            self._release_slot(db, deleted, now)
            if deleted and deleted[0][1] == "withdrawn":
                db.execute(sq.EVENT_INSERT, result_discarded(task, outcome, now))
                return False
            return self._apply_outcome(
                db, outcome, run_id=task.run_id, seq=task.seq, attempt=task.attempt, now=now
            )

        return await self._transact(record)

    def _apply_outcome(
        self,
        db: sqlite3.Connection,
        outcome: TaskOutcome,
        *,
        run_id: str,
        seq: int,
        attempt: int,
        now: int,
    ) -> bool:
        row = db.execute(sq.CHECKPOINT_STATE, (run_id, seq)).fetchone()
        if row is None or settled(row[0], bool(row[2])):
            return False
        if outcome.progress is not None:
            db.execute(sq.PROGRESS, (outcome.progress, run_id, seq))
        if not outcome_applies(row[0], row[1], bool(row[2]), attempt=attempt, ok=outcome.ok):
            return False
        if outcome.error is None:
            db.execute(sq.COMPLETE, (outcome.output, now, run_id, seq))
            self._release_slot(db, db.execute(sq.MOOT_DELETE, (run_id, seq)).fetchall(), now)
        else:
            text = error_text(outcome.error)
            db.execute(sq.FAIL, (text, now, run_id, seq))
            # A row of its own: an attempt costs the same however many came before.
            db.execute(sq.ERROR_APPEND, (run_id, seq, text))
        db.execute(sq.EVENT_INSERT, outcome_event(run_id, seq, attempt, outcome, now))
        db.execute(sq.RUN_WAKE, (now, run_id))
        return True

    # -- maintenance ------------------------------------------------------------------------------

    async def recover(
        self, *, now: int, max_recovery_attempts: int | None, reconcile_ms: int
    ) -> RecoveryReport:
        """Recover expired run leases and expired task claims (see ``Store.recover``)."""
        with self._read_errors():
            # A read first, so a pass with nothing to do takes no write lock.
            (expired,) = self._conn.execute(sq.EXPIRED_PROBE, (now,)).fetchone()
            if not expired:
                return RecoveryReport()

            def work(db: sqlite3.Connection) -> RecoveryReport:
                recovered: list[str] = []
                dead: list[str] = []
                lost: list[str] = []
                wake_at = now + reconcile_ms
                for run_id, count in db.execute(sq.EXPIRED_RUNS, (now,)).fetchall():
                    awaiting = db.execute(sq.AWAITING_LIVENESS, (run_id,)).fetchone() is not None
                    verdict = recovery_verdict(
                        awaiting_liveness=awaiting,
                        recovery_attempts=count,
                        max_recovery_attempts=max_recovery_attempts,
                    )
                    if verdict == "reconciling":
                        db.execute(sq.RUN_RECONCILE, (wake_at, now, run_id))
                    elif verdict == "dead":
                        error = error_text(dead_run(count, max_recovery_attempts))
                        db.execute(sq.RUN_DEAD, (error, now, run_id))
                        db.execute(sq.PARENT_WAKE, (now, run_id, dumps(run_id)))
                    else:
                        db.execute(sq.RUN_RECOVER, (now, run_id))
                    (dead if verdict == "dead" else recovered).append(run_id)
                    db.execute(
                        sq.EVENT_INSERT, recovery_event(run_id, verdict, count, wake_at, now)
                    )
                for task_id, run_id, seq, step_id, attempt in db.execute(
                    sq.EXPIRED_CLAIMS, (now,)
                ).fetchall():
                    self._release_slot(db, db.execute(sq.TASK_DELETE, (task_id,)).fetchall(), now)
                    lost_one = TaskOutcome(error=lost_worker())
                    self._apply_outcome(
                        db, lost_one, run_id=run_id, seq=seq, attempt=attempt, now=now
                    )
                    lost.append(step_id)
                # A withdrawn attempt whose worker went silent: its slot is free, nothing else.
                self._release_slot(
                    db, db.execute(sq.EXPIRED_WITHDRAWN_DELETE, (now,)).fetchall(), now
                )
                return RecoveryReport(recovered, dead, lost)

            return await self._transact(work)

    async def next_due(self, now: int) -> int | None:
        """The earliest epoch ms after *now* at which a timer, lease or claim comes due."""
        with self._read_errors():
            due: int | None = self._conn.execute(sq.NEXT_DUE, (now,)).fetchone()[0]
            return due

    async def requeue(self, run_id: str, now: int) -> Run:
        """Reset failed checkpoints to a fresh first attempt and make the run pending."""

        def work(db: sqlite3.Connection) -> Run:
            row = db.execute(sq.RUN, (run_id,)).fetchone()
            if row is None:
                msg = f"no run with id {run_id!r}"
                raise LookupError(msg)
            unwound = db.execute(sq.COMPENSATION, (run_id,)).fetchone() is not None
            check_requeue(run_of(row), unwound=unwound)
            # Attempts still queued or running for the steps reset here must not complete
            # their fresh first attempt: they are withdrawn.
            failed = db.execute(sq.FAILED_REMOTE, (run_id,)).fetchall()
            self._withdraw(db, run_id, [seq for (seq,) in failed], now)
            db.execute(sq.FAILED_ERRORS_DELETE, (run_id, run_id))
            reset = db.execute(sq.FAILED_RESET, (now, now, run_id)).rowcount
            db.execute(sq.RUN_REQUEUE, (now, run_id))
            self._insert_events(db, [requeued(run_id, reset, now)])
            return run_of(db.execute(sq.RUN, (run_id,)).fetchone())

        return await self._transact(work)

    async def unserved(self, served: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """How many runs wait for each unserved ``(workflow, version)`` (``rules.unserved``)."""
        if not served:
            return {}
        pairs = dumps([list(pair) for pair in served])
        with self._read_errors():
            found = self._conn.execute(sq.UNSERVED_COUNTS, (pairs,)).fetchall()
        return {(workflow, version): count for workflow, version, count in found}

    async def prune(self, *, before: int, statuses: Sequence[str], dry_run: bool = False) -> int:
        """Delete (or count) the runs of *statuses* last changed before *before* (see ``Store``)."""
        if not statuses:
            return 0
        marks = ", ".join("?" for _ in statuses)
        if dry_run:
            with self._read_errors():
                (count,) = self._conn.execute(
                    marks.join(sq.PRUNABLE_COUNT), (*statuses, before)
                ).fetchone()
            return int(count)
        pick = marks.join(sq.PRUNABLE)

        def batch(db: sqlite3.Connection) -> int:
            found = [run_id for (run_id,) in db.execute(pick, (*statuses, before, PRUNE_BATCH))]
            if not found:
                return 0
            listed = dumps(found)
            for statement in sq.PRUNE:
                db.execute(statement, (listed,))
            return len(found)

        pruned = 0
        while (deleted := await self._transact(batch)) > 0:
            pruned += deleted
            if deleted < PRUNE_BATCH:
                break
        return pruned

    async def cancel_run(self, run_id: str, *, compensate: bool, now: int) -> Run:
        """
        Cancel the run as ``rules.cancel_action`` says (see ``Store.cancel_run``), and every
        unfinished run below it the same way.
        """

        def work(db: sqlite3.Connection) -> Run:
            row = db.execute(sq.RUN, (run_id,)).fetchone()
            if row is None:
                msg = f"no run with id {run_id!r}"
                raise LookupError(msg)
            run = run_of(row)
            if not self._cancel(db, run, compensate=compensate, now=now):
                return run
            for below in db.execute(sq.DESCENDANTS, (run_id,)).fetchall():
                child = run_of(below)
                if child.status not in FINISHED:
                    self._cancel(db, child, compensate=compensate, now=now)
            return run_of(db.execute(sq.RUN, (run_id,)).fetchone())

        return await self._transact(work)

    # -- recurring workflows ----------------------------------------------------------------------

    async def recurring(self, names: Sequence[str] | None = None) -> list[RecurringRow]:
        """The rows of the recurring workflows *names* (``None``: every one), by name."""
        with self._read_errors():
            if names is None:
                found = self._conn.execute(sq.RECURRING_ALL).fetchall()
            else:
                found = self._conn.execute(sq.RECURRING, (dumps(list(names)),)).fetchall()
            return [recurring_of(row) for row in found]

    async def due_recurring(self, now: int) -> list[RecurringRow]:
        """The recurring rows with ``next_at <= now``, earliest first (off ``recurring_due``)."""
        with self._read_errors():
            return [recurring_of(r) for r in self._conn.execute(sq.RECURRING_DUE, (now,))]

    async def write_recurring(self, writes: Sequence[RecurringWrite]) -> list[bool]:
        """Each write a compare-and-set with its runs, all in one transaction (see ``Store``)."""

        def work(db: sqlite3.Connection) -> list[bool]:
            landed: list[bool] = []
            for write in writes:
                row = write.row
                values = recurring_values(row)
                if write.expected_rev is None:
                    cursor = db.execute(sq.RECURRING_INSERT, (row.name, row.created_at, *values))
                else:
                    cursor = db.execute(
                        sq.RECURRING_UPDATE, (*values, row.name, write.expected_rev)
                    )
                held = cursor.rowcount == 1
                landed.append(held)
                if held:
                    for run, started in write.starts:
                        self._create_run(db, run, (started,))
            return landed

        return await self._transact(work)

    def _cancel(self, db: sqlite3.Connection, run: Run, *, compensate: bool, now: int) -> bool:
        """Cancel *run* (unfinished) as ``rules.cancel_action`` says; ``False``: it was kept."""
        run_id = run.run_id
        checkpoints = self._checkpoints(db, run_id)
        action = cancel_action(
            run,
            compensate=compensate,
            has_completed=any(cp.status == "completed" for cp in checkpoints),
        )
        if action == "keep":
            return False
        keep_undos = action == "request"
        stopped = [cp.seq for cp in checkpoints if cancels_attempt(cp, keep_undos=keep_undos)]
        self._withdraw(db, run_id, stopped, now)
        text = error_text(cancelled_attempt())
        for seq in stopped:
            db.execute(sq.FAIL, (text, now, run_id, seq))
            db.execute(sq.ERROR_APPEND, (run_id, seq, text))
        if action == "cancel":
            mode = cancel_mode(run, compensate=compensate)
            db.execute(sq.RUN_CANCEL, (mode, now, run_id))
            self._insert_events(db, [cancelled(run_id, compensate=compensate, now=now)])
            db.execute(sq.PARENT_WAKE, (now, run_id, dumps(run_id)))
        else:
            db.execute(sq.RUN_CANCEL_REQUEST, (now, run_id))
            self._insert_events(db, [cancel_requested(run_id, now)])
        return True

    # -- messages, events and children ------------------------------------------------------------

    async def send(self, message: NewMessage) -> bool:
        """Store *message* and wake its run (see ``Store.send``)."""

        def work(db: sqlite3.Connection) -> bool:
            row = db.execute(sq.RUN, (message.run_id,)).fetchone()
            if row is None:
                msg = f"no run with id {message.run_id!r}"
                raise LookupError(msg)
            check_send(run_of(row))
            values = (message.run_id, message.topic, message.body, message.message_id, message.now)
            if db.execute(sq.MESSAGE_INSERT, values).rowcount != 1:
                return False
            db.execute(sq.MESSAGE_WAKE, (message.now, message.run_id, message.topic))
            return True

        return await self._transact(work)

    async def next_message(self, run_id: str, topic: str) -> Message | None:
        """The run's first unread message on *topic*, or ``None``."""
        with self._read_errors():
            row = self._conn.execute(sq.NEXT_MESSAGE, (run_id, topic)).fetchone()
            return None if row is None else message_of(row)

    async def event_value(self, run_id: str, key: str) -> EventValue | None:
        """The run's latest value of event *key*, or ``None``."""
        with self._read_errors():
            row = self._conn.execute(sq.EVENT_VALUE, (run_id, key)).fetchone()
            return None if row is None else event_value_of(row)

    async def child_runs(self, run_id: str) -> list[Run]:
        """The runs whose parent is *run_id*, oldest first."""
        with self._read_errors():
            return [run_of(row) for row in self._conn.execute(sq.CHILD_RUNS, (run_id,))]
