"""
The PostgreSQL store: many engines and workers on many machines sharing one database.

Everything lives in one schema (``effects_durable`` unless the URL says ``?schema=``), created and
upgraded in place under an advisory lock, so engines that start together never race. Times are
epoch-ms ``bigint``, payloads JSON ``text`` (as the engine wrote it: ASCII, every other character
escaped, so U+0000, unpaired surrogates and every number round-trip exactly, which ``jsonb``
cannot do). Runnable runs and queued tasks are claimed with
``FOR UPDATE SKIP LOCKED``; a turn's writes are a compare-and-set on its run's lease token; a
flow-control queue's slots are counted under a transaction-scoped advisory lock keyed by the
queue's name, so two engines can never both take its last slot.

Locks are always taken in one order (queue locks by name, the run's row, task rows, checkpoint
rows), so transactions of one run do not deadlock; a deadlock or serialization failure the server
reports anyway is retried. A lost connection (a server restart, a failover) is retried with
backoff for ``reconnect_timeout_ms``; a claim whose commit was cut off is taken up again by its
nonce, and a turn's commit that may have landed gives its run back to be replayed. ``LISTEN/NOTIFY``
wakes idle engines when a run, a task, a result or a timer appears: only a hint, since every
engine still polls.

One-statement writes (a start, a step's checkpoint, a turn's commit, a result) are group-committed:
beyond two in flight, the writes that come meanwhile share one pipelined transaction, and each
still fails alone (see ``PostgresStore._grouped``).

Durability is the server's: with its defaults (``synchronous_commit=on``) every commit is on disk
before it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Final, LiteralString, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from effects.durable._failures import cancelled_attempt, dead_run, lost_worker
from effects.durable._records import FINISHED, Checkpoint, Event, Run, Task
from effects.durable._store import (
    ALL_RUNS,
    CheckpointWrite,
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
    RunAdvance,
    RunQuery,
    StaleTurnError,
    TaskOutcome,
    TurnCommit,
    listing,
)
from effects.durable._store import postgres_sql as pq
from effects.durable._store.postgres_sql import DEFAULT_SCHEMA, SCHEMA_VERSION
from effects.durable._store.postgres_sql import MIGRATIONS as _MIGRATIONS
from effects.durable._store.rows import (
    CHECKPOINT_WRITE_COLUMNS,
    PRUNE_BATCH,
    RUN_COLUMNS,
    TASK_INSERT_COLUMNS,
    checkpoint_of,
    checkpoint_values,
    checkpoints_after,
    dumps,
    error_text,
    errors_text,
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
    Verdict,
    admission,
    admits,
    cancel_action,
    cancel_mode,
    cancels_attempt,
    check_requeue,
    check_send,
    gives_up,
    recovery_verdict,
    redispatch,
    redispatchable,
)
from effects.durable._store.schema import SCHEMA_NAME, check_tables, schema_version
from effects.durable._store.taps import Observer, Taps, local_step_rows
from effects.durable._store.trail import (
    EventRow,
    admitted,
    cancel_requested,
    cancelled,
    outcome_event,
    recovery_event,
    redispatched,
    requeued,
    result_discarded,
    waiting,
)
from effects.durable.errors import StepError, StoreError

__all__ = ["SCHEMA_VERSION", "PostgresOptions", "PostgresStore", "parse_postgres_url"]

_log: Final = logging.getLogger("effects.durable")
T = TypeVar("T")

_OPTIONS: Final = ("schema", "pool_size", "reconnect_timeout_ms", "listen", "options")
_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
_FIRST_BACKOFF: Final = 0.05
_MAX_BACKOFF: Final = 1.0


@attrs.frozen
class PostgresOptions:
    """The store's own options from its URL (the rest goes to libpq)."""

    schema: str = DEFAULT_SCHEMA
    pool_size: int = 10
    reconnect_timeout_ms: int = 30_000
    listen: bool = True
    #: libpq's ``options`` from the URL (server settings), kept beside our ``search_path``.
    server_options: str = ""


def parse_postgres_url(url: str) -> tuple[str, PostgresOptions]:
    """
    Split ``postgresql://user@host/db?schema=s&pool_size=10`` into a libpq URL and our options.

    Our options: ``schema`` (default ``effects_durable``, created if missing; letters, digits
    and underscores), ``pool_size``
    (connections at most, default 10), ``reconnect_timeout_ms`` (how long a call keeps retrying
    a lost server, default 30000) and ``listen`` (``true``/``false``: wake on ``NOTIFY``, default
    true). Every other query parameter (``sslmode``, ``connect_timeout``, ...) goes to libpq.

    Raises:
        ValueError: If the URL is not a ``postgresql://`` URL or an option is invalid.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        msg = f"a PostgreSQL store URL looks like 'postgresql://user@host:5432/db', got {url!r}"
        raise ValueError(msg)
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        (ours.__setitem__(key, value) if key in _OPTIONS else rest.append((key, value)))
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        msg = (
            "schema must be 1 to 48 letters, digits or underscores, not starting with a digit,"
            f" in {_masked(url)!r}, got {schema!r}"
        )
        raise ValueError(msg)
    numbers: dict[str, int] = {}
    for key, default, least in (("pool_size", 10, 2), ("reconnect_timeout_ms", 30_000, 0)):
        text = ours.get(key, str(default))
        if not text.isdigit() or int(text) < least:
            msg = f"{key} must be a whole number >= {least} in {_masked(url)!r}, got {text!r}"
            raise ValueError(msg)
        numbers[key] = int(text)
    listen = ours.get("listen", "true").lower()
    if listen not in ("true", "false", "on", "off", "1", "0"):
        msg = f"listen must be true or false in {_masked(url)!r}, got {listen!r}"
        raise ValueError(msg)
    libpq = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    options = PostgresOptions(
        schema=schema,
        pool_size=numbers["pool_size"],
        reconnect_timeout_ms=numbers["reconnect_timeout_ms"],
        listen=listen in ("true", "on", "1"),
        server_options=ours.get("options", ""),
    )
    return libpq, options


def channel_name(schema: str, kind: str) -> str:
    """The NOTIFY channel of the store in *schema* for news of *kind* (``"r"`` or ``"t"``)."""
    return f"durable.{schema}.{kind}"


def wakes(payload: str, sender: str, wanted: str) -> bool:
    """
    Whether a notification's *payload* (``"<sender>:<kinds>"``, kinds of ``"r"`` for runs,
    ``"t"`` for tasks, ``"d"`` for a time to come) should wake a store that sends as *sender*
    and wants *wanted*: never our own, and a payload without kinds (an older version's) wakes
    every store.
    """
    who, _, kinds = payload.partition(":")
    return who != sender and (not kinds or any(kind in wanted for kind in kinds))


def brings_due(payload: str) -> bool:
    """Whether a notification may bring a time to come (``"d"``, or no kinds at all)."""
    kinds = payload.partition(":")[2]
    return not kinds or "d" in kinds


def _text_array(values: Iterable[str]) -> str:
    """*values* as a ``text[]`` literal: one str parameter dumps far faster than a list."""
    quoted = (v.replace("\\", "\\\\").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'"{v}"' for v in quoted) + "}"


def _prefixed(prefix: str, names: Iterable[str]) -> list[str]:
    """The parameter names of one row of a statement: *names*, each with *prefix*."""
    return [prefix + name for name in names]


def _later(commit: TurnCommit) -> bool:
    """Whether *commit* brings a time to come: a timer, or a task available only later."""
    adv = commit.advance
    return (adv.action == "suspend" and adv.wake_at is not None) or any(
        task.available_at > commit.now for task in commit.tasks
    )


def _extras(commit: TurnCommit) -> bool:
    """
    Whether *commit* takes the general path for what no one-statement path writes: child runs,
    taken messages, event values, or a finish (which wakes a parent) with rows of its own.
    """
    return bool(
        commit.runs
        or commit.taken
        or commit.values
        or (commit.advance.action == "finish" and (commit.checkpoints or commit.tasks))
    )


def _held(adv: RunAdvance) -> tuple[LiteralString, LiteralString]:
    """The ``held`` CTE of *adv* (``rules.lease_holds``), and its statement with no rows."""
    if adv.action == "continue" and adv.lease_until is None:
        return pq.HELD_READ, pq.ADVANCE_READ
    if adv.action == "continue":
        return pq.HELD_CONTINUE, pq.ADVANCE_CONTINUE
    if adv.action == "suspend":
        return pq.HELD_SUSPEND, pq.ADVANCE_SUSPEND
    if adv.action == "finish":
        return pq.HELD_FINISH, pq.ADVANCE_FINISH
    return pq.HELD_RELEASE, pq.ADVANCE_RELEASE


def _masked(url: str) -> str:
    """*url* with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = quote(parts.username or "", safe="")
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines) or type(error).__name__


@attrs.define
class _Retry:
    """Whether the current call is a retry after a lost connection (its commit may have landed)."""

    again: bool = False


class _Taken:
    """``create_run``'s mark for an id that is taken: the run there is read next."""


class _Relock(Exception):  # noqa: N818 - a signal inside the store, never raised out of it
    """A cancel met steps of queues it holds no lock of: its transaction is tried again."""

    def __init__(self, queues: set[str]) -> None:
        super().__init__(f"also lock {sorted(queues)}")
        self.queues = queues


_TAKEN: Final = _Taken()

#: One-statement writes (or groups) in flight at once; beyond these, writes wait for a group. Two
#: let a write go at once while one other is in flight, and still group under load (measured:
#: 64 runs of local steps at once, 1.9x to 2.4x the steps/s of every write alone; more than two in
#: flight gain nothing).
_IN_FLIGHT: Final = 2
#: The most writes one group commit takes; the rest wait for the next.
_GROUP_MAX: Final = 200
#: The most connections a store keeps out of its pool for its calls (see ``_on_held``).
_HELD_MAX: Final = 4


@attrs.define(slots=True, eq=False)
class _Queued:
    """A one-statement write waiting for the next group commit (see ``_grouped``)."""

    run_id: str
    statement: LiteralString
    params: dict[str, Any]
    read: Callable[[Any, int], Any]
    alone: Callable[[AsyncConnection[Any], _Retry], Awaitable[Any]]
    future: asyncio.Future[Any]


class PostgresStore:
    """
    The engine's store in a PostgreSQL database (see the module docstring for what it promises).

    Needs the ``postgres`` extra (``pip install 'effect-schedules[postgres]'``: psycopg 3 with its
    binary wheel, and psycopg-pool).

    Args:
        url: ``"postgresql://user:password@host:5432/dbname"``; options ``schema``,
            ``pool_size``, ``reconnect_timeout_ms`` and ``listen`` (see ``parse_postgres_url``);
            other query parameters go to libpq.

    Raises:
        ValueError: If *url* is not a PostgreSQL store URL.
        StoreError: From ``open`` if psycopg is missing, the server cannot be reached or refuses
            the credentials, the schema holds tables that are not an engine store's, or its
            schema version is newer than this library's.
    """

    def __init__(self, url: str) -> None:
        self._conninfo, self._options = parse_postgres_url(url)
        #: The URL as given, its password masked.
        self.url = _masked(url)
        schema = self._options.schema
        self._schema = schema
        # One channel per kind of news, so a notification reaches only the engines that want
        # it (a worker's result wakes no worker, a dispatch no orchestrator). At most 58
        # characters: PostgreSQL refuses a channel name of 64 or more.
        self._channels = {kind: channel_name(schema, kind) for kind in "rt"}
        # Our own notifications carry this, so the listener can ignore them: the engine already
        # hears what its own process writes.
        self._sender = secrets.token_hex(8)
        self._pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None
        # A few connections kept out of the pool for the calls (a turn's steps, a start, a
        # wait's read): checking one out and back in costs more Python than a statement does.
        # Idle ones wait in _spare (the last used is used first); a call that finds none idle
        # takes another from the pool and keeps it, up to _held_max (half the pool, at most
        # _HELD_MAX, at least one); beyond that it borrows one from the pool for the call.
        self._spare: list[AsyncConnection[Any]] = []
        self._held_count = 0
        self._held_max = max(1, min(_HELD_MAX, self._options.pool_size // 2))
        # Group commit: while _IN_FLIGHT one-statement writes are in flight, the writes that
        # come meanwhile queue here, and the next transaction commits them all (``_grouped``).
        self._in_flight = 0
        self._group: list[_Queued] = []
        self._grouper: asyncio.Task[None] | None = None
        # Whether a leased run's insert is in flight beside the groups (see ``create_run``).
        self._starting = False
        # Shared run reads: whether one is in flight, and the reads queued for the next one (by
        # run id), which the reader task sends (see ``get_run``).
        self._reading = False
        self._run_reads: dict[str, list[asyncio.Future[Run | None]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._wake: Callable[[], None] | None = None
        self._wake_due: Callable[[], None] | None = None
        #: The kinds of notification the engine wants: "r" (runs) and "t" (tasks).
        self._wanted = "rt"
        self._opening: asyncio.Lock | None = None
        # Off, every turn commit and result takes its general transaction instead of its
        # one-statement path (the contract suite shows both write the same rows).
        self._one_statement_paths = True
        self._taps = Taps()
        #: The connections whose session has the events tap on.
        self._tap_conns: weakref.WeakSet[AsyncConnection[Any]] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    @property
    def location(self) -> str:
        """``in schema 's' of URL`` (the password masked)."""
        return f"in schema {self._schema!r} of {self.url}"

    async def exists(self) -> bool:
        """
        Whether the URL's schema holds a table, read on a connection of its own (nothing is
        created; a server that does not answer fails within 10 s unless the URL sets
        ``connect_timeout``).

        Raises:
            StoreError: If the server cannot be reached or refuses the connection.
        """
        kwargs = self._connect_kwargs()
        if "connect_timeout" not in conninfo_to_dict(self._conninfo):
            kwargs["connect_timeout"] = 10
        try:
            async with await psycopg.AsyncConnection.connect(self._conninfo, **kwargs) as conn:
                cursor = await conn.execute(pq.TABLE_COUNT, (self._schema,))
                row = await cursor.fetchone()
        except psycopg.Error as error:
            msg = f"cannot connect to store {self.url}: {_one_line(error)}"
            raise StoreError(msg) from error
        return row is not None and bool(row[0])

    # -- connection and schema ------------------------------------------------------------------

    async def wake_hint(
        self,
        callback: Callable[[], None],
        *,
        runs: bool = True,
        tasks: bool = True,
        due: Callable[[], None] | None = None,
    ) -> None:
        """
        Call *callback* (in the event loop) whenever another engine's NOTIFY may mean work:
        for runs (a new or woken run, a timer: what turns do) if *runs*, for tasks (a queued
        attempt: what workers do) if *tasks*. An engine of workers only is not woken by every
        run that starts. Before such a call, call *due* too if the news may bring a time to
        come (a timer, a task available later): one that says it does not, leaves the
        engine's ``next_due`` as it was.
        """
        self._wake = callback
        self._wake_due = due
        self._wanted = ("r" if runs else "") + ("t" if tasks else "")
        self._start_listening()

    def _connect_kwargs(self) -> dict[str, Any]:

        path = sql.Identifier(self._schema).as_string()
        given = self._options.server_options
        return {"autocommit": True, "options": f"{given} -c search_path={path}".strip()}

    async def open(self) -> None:
        """Connect, and create or upgrade the schema (see the class docstring for errors)."""
        if self._pool is not None:
            return
        kwargs = self._connect_kwargs()
        try:
            first = await psycopg.AsyncConnection.connect(self._conninfo, **kwargs)
        except psycopg.Error as error:
            msg = f"cannot connect to store {self.url}: {_one_line(error)}"
            raise StoreError(msg) from error
        try:
            await self._prepare(first)
        finally:
            await first.close()
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            self._conninfo,
            kwargs=kwargs,
            min_size=1,
            max_size=self._options.pool_size,
            open=False,
            name=f"effects.durable:{self._schema}",
            # The pool keeps trying in the background for longer than one call waits.
            reconnect_timeout=max(300.0, self._options.reconnect_timeout_ms / 1000),
        )
        try:
            await pool.open(wait=True, timeout=max(1.0, self._options.reconnect_timeout_ms / 1000))
        except Exception as error:
            await pool.close()
            msg = f"cannot connect to store {self.url}: {_one_line(error)}"
            raise StoreError(msg) from error
        self._pool = pool
        self._start_listening()

    def _start_listening(self) -> None:
        """Listen once the store is open and an engine said what news it wants."""
        if (
            self._options.listen
            and self._pool is not None
            and self._wake is not None
            and self._wanted
            and self._listener is None
        ):
            self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _prepare(self, conn: AsyncConnection[Any]) -> None:

        schema = self._schema
        try:
            async with conn.transaction():
                # Engines starting together wait here for the first to create or upgrade.
                await conn.execute(pq.ADVISORY_LOCK, (f"{SCHEMA_NAME}:schema:{schema}",))
                await conn.execute(sql.SQL(pq.CREATE_SCHEMA).format(sql.Identifier(schema)))
                cursor = await conn.execute(pq.TABLES, (schema,))
                tables = [row[0] for row in await cursor.fetchall()]
                version = await self._check_ours(conn, tables)
                for statements in _MIGRATIONS[version:]:
                    for statement in statements:
                        await conn.execute(statement)
                if version < SCHEMA_VERSION:
                    await conn.execute(pq.META_WRITE, (SCHEMA_NAME, str(SCHEMA_VERSION)))
        except psycopg.Error as error:
            msg = f"store {self.url}: cannot prepare schema {schema!r}: {_one_line(error)}"
            raise StoreError(msg) from error

    async def _check_ours(self, conn: AsyncConnection[Any], tables: list[str]) -> int:
        if not tables:
            return 0
        where = f"store {self.url} (schema {self._schema!r})"
        check_tables(where, tables)
        cursor = await conn.execute(pq.META)
        meta: dict[str, str] = dict(await cursor.fetchall())
        return schema_version(where, meta, SCHEMA_VERSION)

    async def close(self) -> None:
        """Stop listening and close the pool (idempotent)."""
        grouper, self._grouper = self._grouper, None
        if grouper is not None:
            grouper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await grouper
        queued, self._group = self._group, []
        for write in queued:
            self._closed_under(write, "was not sent")
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        self._fail_reads("was closed while a read of run {!r} waited")
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        pool, self._pool = self._pool, None
        spare, self._spare = self._spare, []
        self._held_count = 0
        if pool is not None:
            # (One a call still uses is closed by that call: see _on_held.)
            for conn in spare:
                await pool.putconn(conn)
            await pool.close()

    async def _listen(self) -> None:
        """Keep one connection listening on the store's channel; reconnect when it drops."""

        backoff = _FIRST_BACKOFF
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                try:
                    for kind in self._wanted:
                        channel = sql.Identifier(self._channels[kind])
                        await conn.execute(sql.SQL(pq.LISTEN).format(channel))
                    backoff = _FIRST_BACKOFF
                    # Whatever was announced while we were not listening is not lost work:
                    # one extra poll finds it.
                    self._hint_due()
                    self._hint()
                    async for note in conn.notifies():
                        if wakes(note.payload, self._sender, self._wanted):
                            if brings_due(note.payload):
                                self._hint_due()
                            self._hint()
                finally:
                    await conn.close()
            except psycopg.Error:
                _log.debug("store %s: the listening connection dropped", self.url, exc_info=True)
            await asyncio.sleep(backoff)
            backoff = min(_MAX_BACKOFF, backoff * 2)

    def _hint(self) -> None:
        wake = self._wake
        if wake is not None:
            wake()

    def _hint_due(self) -> None:
        due = self._wake_due
        if due is not None:
            due()

    @property
    def _conns(self) -> AsyncConnectionPool[AsyncConnection[Any]]:
        if self._pool is None:
            msg = f"store {self.url} is not open (use the engine as `async with engine:`)"
            raise RuntimeError(msg)
        return self._pool

    async def _call(
        self,
        fn: Callable[[AsyncConnection[Any], _Retry], Awaitable[T]],
        *,
        again: bool = False,
        once: bool = False,
        quiet: bool = False,
    ) -> T:
        """
        Run *fn* on a pooled connection, again with backoff while the server is unreachable (or
        reports a deadlock or serialization failure), for at most ``reconnect_timeout_ms``.
        *again* says an earlier try may have landed already; *once* raises the first
        ``psycopg.OperationalError`` instead of retrying; *quiet* says *fn* writes no event
        (a read), so a tapped store need not look for any.
        """

        pool = self._conns
        if not quiet and (self._taps.active or self._tap_conns):
            fn = partial(self._tapped, fn)
        deadline = time.monotonic() + self._options.reconnect_timeout_ms / 1000
        retry = _Retry(again)
        backoff = _FIRST_BACKOFF
        while True:
            try:
                if self._spare or self._held_count < self._held_max:
                    return await self._on_held(pool, fn, retry, deadline)
                async with pool.connection(timeout=max(0.1, deadline - time.monotonic())) as conn:
                    return await fn(conn, retry)
            except psycopg.OperationalError as error:
                if once:
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = f"store {self.url}: {_one_line(error)}"
                    raise StoreError(msg) from error
                _log.info("store %s: %s; retrying", self.url, _one_line(error))
                retry.again = True
                await asyncio.sleep(min(backoff, left))
                backoff = min(_MAX_BACKOFF, backoff * 2)

    async def _grouped(
        self,
        run_id: str,
        statement: LiteralString,
        params: dict[str, Any],
        read: Callable[[Any, int], T],
        alone: Callable[[AsyncConnection[Any], _Retry], Awaitable[T]],
    ) -> T:
        """
        A one-statement write of run *run_id*, group-committed: while fewer than ``_IN_FLIGHT``
        such writes are in flight it runs at once, as *alone* (its own statement in autocommit).
        Otherwise it waits, and the writes that came meanwhile are sent in one pipeline as one
        transaction, in run order: one commit (one WAL flush, one round trip) for them all.
        *read* turns the statement's first row (``None`` without one) and row count into the
        result. *statement* must not change the transaction's settings (no ``_NO_FLUSH``): the
        group's other writes would share them.

        Each write still fails alone. If the group's transaction fails (a unique violation, a
        payload the server refuses), nothing of it landed, and each write runs again alone; if
        its connection was lost (the commit may have landed), each runs alone as a retry.
        A caller cancelled before its group starts sends nothing.
        """
        if self._in_flight < _IN_FLIGHT and not self._group:
            self._in_flight += 1
            try:
                return await self._call(alone)
            finally:
                self._in_flight -= 1
                if self._group and self._grouper is None and self._pool is not None:
                    self._in_flight += 1
                    self._grouper = asyncio.get_running_loop().create_task(self._commit_groups())
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._group.append(_Queued(run_id, statement, params, read, alone, future))
        return await future

    async def _commit_groups(self) -> None:
        """Commit the queued writes, group after group, until none is left."""
        group: list[_Queued] = []
        try:
            while self._group:
                group = [q for q in self._group[:_GROUP_MAX] if not q.future.done()]
                del self._group[:_GROUP_MAX]
                if len(group) == 1:
                    await self._commit_alone(group[0], again=False)
                elif group:
                    await self._commit_group(group)
                group = []
        except asyncio.CancelledError:
            # The store is closing under its callers.
            for queued in group:
                self._closed_under(queued, "may or may not have landed")
            for queued in self._group:
                self._closed_under(queued, "was not sent")
            self._group = []
            raise
        except Exception as error:  # noqa: BLE001 - handed to every caller waiting
            for queued in (*group, *self._group):
                if not queued.future.done():
                    queued.future.set_exception(error)
            self._group = []
        finally:
            self._in_flight -= 1
            if self._grouper is asyncio.current_task():
                self._grouper = None

    def _closed_under(self, queued: _Queued, how: str) -> None:
        if not queued.future.done():
            run = queued.run_id
            msg = f"store {self.url} was closed while a write of run {run!r} waited: it {how}"
            queued.future.set_exception(StoreError(msg))

    async def _commit_alone(self, queued: _Queued, *, again: bool) -> None:
        try:
            result = await self._call(queued.alone, again=again)
        except Exception as error:  # noqa: BLE001 - it is the caller's to handle
            if not queued.future.done():
                queued.future.set_exception(error)
        else:
            if not queued.future.done():
                queued.future.set_result(result)

    async def _commit_group(self, group: list[_Queued]) -> None:
        # In run order: two groups that lock the same runs lock them in one order.
        group.sort(key=lambda q: q.run_id)

        async def together(conn: AsyncConnection[Any], _: _Retry) -> list[tuple[Any, int]]:
            cursors: list[AsyncCursor[Any]] = []
            async with conn.pipeline(), conn.transaction():
                for queued in group:
                    cursor = conn.cursor()
                    await cursor.execute(queued.statement, queued.params)
                    cursors.append(cursor)
            return [
                (await c.fetchone() if c.description is not None else None, c.rowcount)
                for c in cursors
            ]

        try:
            results = await self._call(together, once=True)
        except psycopg.Error as error:
            # Nothing landed, or (a lost connection) maybe all of it: each write alone decides.
            ambiguous = isinstance(error, psycopg.OperationalError)
            await asyncio.gather(*(self._commit_alone(q, again=ambiguous) for q in group))
            return
        for queued, (row, count) in zip(group, results, strict=True):
            if queued.future.done():
                continue
            try:
                queued.future.set_result(queued.read(row, count))
            except Exception as error:  # noqa: BLE001 - it is the caller's to handle
                queued.future.set_exception(error)

    async def _on_held(
        self,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        fn: Callable[[AsyncConnection[Any], _Retry], Awaitable[T]],
        retry: _Retry,
        deadline: float,
    ) -> T:
        """*fn* on an idle held connection, or on one taken from the pool and then held."""
        if self._spare:
            conn = self._spare.pop()
        else:
            self._held_count += 1
            try:
                conn = await pool.getconn(timeout=max(0.1, deadline - time.monotonic()))
            except BaseException:
                self._held_count -= 1
                raise
        try:
            return await fn(conn, retry)
        finally:
            if self._pool is not pool:
                # The store was closed while this call ran (its pool is gone): the
                # connection is this call's alone to close.
                await conn.close()
            elif conn.info.transaction_status != TransactionStatus.IDLE:
                # Broken, or cut off inside a statement or a transaction: the pool checks it
                # (resets or discards it) and a later call takes another.
                self._held_count -= 1
                await pool.putconn(conn)
            else:
                self._spare.append(conn)

    def tap(self, observer: Observer) -> Callable[[], None]:
        """Hear the events each transaction of this store object writes (see ``Store.tap``)."""
        return self._taps.add(observer)

    async def _tapped(
        self,
        fn: Callable[[AsyncConnection[Any], _Retry], Awaitable[T]],
        conn: AsyncConnection[Any],
        retry: _Retry,
    ) -> T:
        """
        *fn* on *conn* with the connection's tap set as the store's taps want it (on: the
        events trigger copies this session's inserts into a TEMP table; off: it copies nothing),
        then the events it committed told to the taps. What a transaction that rolled back wrote
        is gone from the TEMP table with it.
        """
        on = self._taps.active
        if on is not (conn in self._tap_conns):
            await conn.execute(pq.TAP_ON if on else pq.TAP_OFF)
            if on:
                self._tap_conns.add(conn)
            else:
                self._tap_conns.discard(conn)
        try:
            return await fn(conn, retry)
        finally:
            if on:
                await self._drain_tap(conn)

    async def _drain_tap(self, conn: AsyncConnection[Any]) -> None:
        try:
            cursor = await conn.execute(pq.TAP_DRAIN)
            rows = await cursor.fetchall()
        except psycopg.Error:
            # The connection broke (or sits in a failed transaction): its session, and the
            # TEMP table with it, is gone or going; the pool replaces it.
            self._tap_conns.discard(conn)
            _log.debug("store %s: could not read the events tap", self.url, exc_info=True)
            return
        self._taps.deliver(tapped_events(rows))

    def _channels_for(self, kinds: str) -> str:
        """The channels of *kinds* as a ``text[]`` literal (news of a time alone: every one)."""
        chosen = [channel for kind, channel in self._channels.items() if kind in kinds]
        return _text_array(chosen or self._channels.values())

    async def _notify(self, conn: AsyncConnection[Any], kinds: str = "rtd") -> None:
        if self._options.listen:
            await conn.execute(pq.NOTIFY, (f"{self._sender}:{kinds}", self._channels_for(kinds)))

    async def _queue_locks(self, conn: AsyncConnection[Any], queues: Sequence[str | None]) -> None:
        """Take the flow-control locks of *queues*, by name (one order for every transaction)."""
        for queue in sorted({q for q in queues if q is not None}):
            key = f"{SCHEMA_NAME}:queue:{self._schema}:{queue}"
            await conn.execute(pq.ADVISORY_LOCK, (key,))

    @staticmethod
    async def _insert_event(conn: AsyncConnection[Any], row: EventRow) -> None:
        await conn.execute(pq.EVENT_INSERT, row)

    @staticmethod
    def _events_json(events: Sequence[NewEvent]) -> dict[str, Any]:
        """*events* as the statements read ``%(events)s``: ``[[seq, name, level, at, "data"]]``."""
        # Each event's data as a string of its JSON text: the server then never de-escapes a
        # U+0000 or a lone surrogate in it (which PostgreSQL text cannot hold).
        return {"events": dumps([[e.seq, e.name, e.level, e.at, dumps(e.data)] for e in events])}

    def _hint_params(self, kinds: str = "rtd") -> dict[str, Any]:
        """The parameters of a statement's ``pg_notify`` for *kinds* (see ``wakes``)."""
        return {
            "channels": self._channels_for(kinds),
            "sender": f"{self._sender}:{kinds}",
            "listen": self._options.listen and bool(kinds),
        }

    @staticmethod
    def _payload_error(error: BaseException, what: str) -> TypeError:
        return TypeError(
            f"{what} cannot be stored in PostgreSQL: {_one_line(error)}"
            " (PostgreSQL text holds no U+0000)"
        )

    # -- runs -------------------------------------------------------------------------------------

    async def create_run(self, run: NewRun, events: Sequence[NewEvent]) -> Run | ClaimedRun | None:
        """Insert *run* (pending, or leased); return the existing run if the id is taken."""
        leased = run.lease_token
        params = self._run_params(run, events)

        def made(row: Any, _: int) -> Run | ClaimedRun | _Taken | None:
            if row is None or row[0] != 1:
                return _TAKEN
            return None if leased is None else leased_run(run, leased)

        async def taken(conn: AsyncConnection[Any]) -> Run | ClaimedRun | None:
            cursor = await conn.execute(pq.RUN_AND_LEASE, (run.run_id,))
            row = await cursor.fetchone()
            if row is None:
                return None
            if leased is not None and row[-1] == leased and row[3] == "running":
                # A retry after a lost reply: the first try made the run, leased to us.
                return ClaimedRun(run_of(row), leased, ())
            return run_of(row)

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Run | ClaimedRun | None:
            cursor = await conn.execute(pq.RUN_CREATE, params)
            result = made(await cursor.fetchone(), cursor.rowcount)
            return await taken(conn) if isinstance(result, _Taken) else result

        async def look(conn: AsyncConnection[Any], _: _Retry) -> Run | ClaimedRun | None:
            return await taken(conn)

        result: Run | ClaimedRun | _Taken | None
        try:
            if leased is not None and not self._starting:
                # A run a working engine takes as it makes it: its caller (a loop of starts,
                # say) waits for this insert before it can start the next, and the turns it
                # begins fill the group queue; queued behind them, each start would wait a
                # commit or two more. So one such insert at a time goes at once, beside the
                # group commits; starts made together still share a group.
                self._starting = True
                try:
                    result = await self._call(go)
                finally:
                    self._starting = False
            else:
                result = await self._grouped(run.run_id, pq.RUN_CREATE, params, made, go)
        except psycopg.DataError as error:
            raise self._payload_error(error, f"input of run {run.run_id!r}") from error
        # The id was taken (in a group commit, the look at who took it comes after).
        return await self._call(look, quiet=True) if isinstance(result, _Taken) else result

    def _run_params(self, run: NewRun, events: Sequence[NewEvent]) -> dict[str, Any]:
        """The parameters of ``RUN_CREATE`` for *run* and its *events*."""
        leased = run.lease_token
        return {
            "id": run.run_id,
            "workflow": run.workflow,
            "version": run.version,
            "status": "pending" if leased is None else "running",
            "input": run.input,
            "now": run.now,
            "token": leased,
            "until": None if leased is None else run.lease_until,
            "traceparent": run.traceparent,
            "deadline": run.deadline,
            "parent": run.parent_id,
            **self._events_json(events),
            **self._hint_params("r"),
            # A leased run is this engine's to run: no one else needs waking for it.
            **({} if leased is None else {"listen": False}),
        }

    async def get_run(self, run_id: str) -> Run | None:
        """
        The run, or ``None``. While one such read is in flight, the reads that come meanwhile
        wait and share the next one (one statement for them all: many ``Engine.wait`` polling
        at once cost one round trip). Each is still sent after it was asked for, so it sees
        every commit that came before it.
        """

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Run | None:
            return await self._run_by_id(conn, run_id)

        if not self._reading and not self._run_reads:
            self._reading = True
            try:
                return await self._call(go, quiet=True)
            finally:
                self._reading = False
                self._read_queued()
        future: asyncio.Future[Run | None] = asyncio.get_running_loop().create_future()
        self._run_reads.setdefault(run_id, []).append(future)
        self._read_queued()
        return await future

    @staticmethod
    async def _run_by_id(conn: AsyncConnection[Any], run_id: str) -> Run | None:
        row = await (await conn.execute(pq.RUN, (run_id,))).fetchone()
        return None if row is None else run_of(row)

    @staticmethod
    def _read_shared(
        ids: Sequence[str],
    ) -> Callable[[AsyncConnection[Any], _Retry], Awaitable[dict[str, Run]]]:
        """The shared read of the runs *ids* (a call for ``_call``): those that exist, by id."""
        array = _text_array(ids)

        async def go(conn: AsyncConnection[Any], _: _Retry) -> dict[str, Run]:
            cursor = await conn.execute(pq.RUNS_BY_ID, (array,))
            return {run.run_id: run for run in map(run_of, await cursor.fetchall())}

        return go

    async def _read_alone(self, run_id: str, futures: list[asyncio.Future[Run | None]]) -> None:
        """Read one run for the *futures* that wait for it, after their shared read failed."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Run | None:
            return await self._run_by_id(conn, run_id)

        try:
            run = await self._call(go, quiet=True)
        except Exception as error:  # noqa: BLE001 - it is the callers' to handle
            for future in futures:
                if not future.done():
                    future.set_exception(error)
            return
        for future in futures:
            if not future.done():
                future.set_result(run)

    def _read_queued(self) -> None:
        """Start the reader of the queued ``get_run`` calls, unless a read is in flight."""
        if not self._run_reads or self._reading:
            return
        if self._pool is None:
            # The store was closed while the read ahead of these was in flight.
            self._fail_reads("was closed while a read of run {!r} waited")
            return
        self._reading = True
        self._reader = asyncio.get_running_loop().create_task(self._read_runs())

    def _fail_reads(self, how: str) -> None:
        """Fail every queued run read with a ``StoreError`` (*how*: formatted with its run id)."""
        reads, self._run_reads = self._run_reads, {}
        for run_id, futures in reads.items():
            for future in futures:
                if not future.done():
                    future.set_exception(StoreError(f"store {self.url} " + how.format(run_id)))

    async def _read_runs(self) -> None:
        """Read the queued runs, batch after batch, one statement each, until none is left."""
        batch: dict[str, list[asyncio.Future[Run | None]]] = {}
        try:
            while self._run_reads:
                batch, self._run_reads = self._run_reads, {}
                ids = [i for i, futures in batch.items() if not all(f.done() for f in futures)]
                if not ids:
                    continue
                try:
                    found = await self._call(self._read_shared(ids), quiet=True)
                except Exception:  # noqa: BLE001 - each read then fails (or not) alone
                    for run_id in ids:
                        await self._read_alone(run_id, batch[run_id])
                    continue
                for run_id, futures in batch.items():
                    for future in futures:
                        if not future.done():
                            future.set_result(found.get(run_id))
        except asyncio.CancelledError:
            # The store is closing under its callers (``close`` fails the reads still queued).
            for run_id, futures in batch.items():
                for future in futures:
                    if not future.done():
                        msg = f"store {self.url} was closed while run {run_id!r} was read"
                        future.set_exception(StoreError(msg))
            raise
        finally:
            self._reading = False
            if self._reader is asyncio.current_task():
                self._reader = None

    async def list_runs(self, query: RunQuery = ALL_RUNS) -> list[Run]:
        """The runs *query* selects, newest first."""
        clause, values = listing.where(pq.RUNS_FILTERS, query.filter_values())
        statement = pq.RUNS + clause + pq.RUNS_ORDER

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[Run]:
            cursor = await conn.execute(statement, (*values, query.limit))  # pyright: ignore[reportArgumentType]
            return [run_of(row) for row in await cursor.fetchall()]

        return await self._call(go, quiet=True)

    async def count_runs(self, query: RunQuery = ALL_RUNS) -> dict[str, int]:
        """How many runs *query*'s filters select, by status (limit and after ignored)."""
        counted = attrs.evolve(query, after=None)
        clause, values = listing.where(pq.RUNS_FILTERS, counted.filter_values())
        statement = pq.COUNTS + clause + pq.COUNTS_GROUP

        async def go(conn: AsyncConnection[Any], _: _Retry) -> dict[str, int]:
            cursor = await conn.execute(statement, values)  # pyright: ignore[reportArgumentType]
            return dict(await cursor.fetchall())

        return await self._call(go)

    async def retrying(self, run_ids: Sequence[str], *, now: int) -> set[str]:
        """Which of *run_ids* have a retrying checkpoint at *now*."""
        if not run_ids:
            return set()

        async def go(conn: AsyncConnection[Any], _: _Retry) -> set[str]:
            cursor = await conn.execute(pq.RETRYING, (list(run_ids), now))
            return {run_id for (run_id,) in await cursor.fetchall()}

        return await self._call(go)

    async def queue_stats(self) -> dict[str, tuple[int, int]]:
        """Each queue that has attempts: ``(in_use, waiting)``."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> dict[str, tuple[int, int]]:
            cursor = await conn.execute(pq.QUEUE_STATS)
            return {queue: (used, waiting) for queue, used, waiting in await cursor.fetchall()}

        return await self._call(go)

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints by sequence number."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[Checkpoint]:
            return await self._checkpoints(conn, run_id)

        return await self._call(go, quiet=True)

    @staticmethod
    async def _checkpoints(conn: AsyncConnection[Any], run_id: str) -> list[Checkpoint]:
        cursor = await conn.execute(pq.CHECKPOINTS, (run_id,))
        return [checkpoint_of(row) for row in await cursor.fetchall()]

    async def events(self, run_id: str) -> list[Event]:
        """The run's events, oldest first."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[Event]:
            return events_of(run_id, await (await conn.execute(pq.EVENTS, (run_id,))).fetchall())

        return await self._call(go, quiet=True)

    async def get_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        """One checkpoint, read afresh."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Checkpoint | None:
            row = await (await conn.execute(pq.CHECKPOINT, (run_id, seq))).fetchone()
            return None if row is None else checkpoint_of(row)

        return await self._call(go, quiet=True)

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
        if not workflows or limit <= 0:
            return []
        # One token for the runs of this call: a (run, token) pair is still unique, and a retry
        # after a lost commit finds what the first try claimed by it.
        token = f"{owner}:{secrets.token_hex(6)}"
        params = {
            "now": now,
            "names": _text_array(name for name, _ in workflows),
            "versions": _text_array(version for _, version in workflows),
            "limit": limit,
            "token": token,
            "until": lease_until,
        }

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> list[ClaimedRun]:
            # The claim, and pipelined behind it in the same implicit transaction (one round
            # trip), the claimed runs with their checkpoints, read by the token from the index
            # of running runs. The read must be a later statement: the claim's UPDATE sees a
            # result committed after the statement began (and clears its woken flag), which a
            # read in the same statement would not. On a retry after a lost reply, the runs the
            # first try took are found the same way, and count against the limit (a scan, but
            # only then).
            async with conn.pipeline():
                await conn.execute(pq.CLAIM_RUNS_AGAIN if retry.again else pq.CLAIM_RUNS, params)
                cursor = await conn.execute(pq.CLAIMED_RUNS, {"token": token})
            runs: list[Run] = []
            by_run: dict[str, list[Sequence[Any]]] = {}
            width = len(RUN_COLUMNS)
            for row in await cursor.fetchall():
                if row[0] not in by_run:
                    runs.append(run_of(row[:width]))
                    by_run[row[0]] = []
                if row[width] is not None:
                    by_run[row[0]].append(row[width:])
            # Oldest first, as they were picked (the RETURNING order is not guaranteed).
            runs.sort(key=lambda r: (r.updated_at, r.run_id))
            claimed: list[ClaimedRun] = []
            for run in runs:
                since = passed.get(run.run_id, 0)
                # Those the caller has passed in memory are counted, not decoded.
                after, upto = checkpoints_after(by_run[run.run_id], max(since, 0))
                claimed.append(ClaimedRun(run, token, after, max(since, 0), upto))
            return claimed

        return await self._call(go)

    async def renew_lease(self, run_id: str, token: str, lease_until: int) -> bool:
        """Extend the lease *token* holds; ``False`` if it no longer holds the run."""
        params = {"until": lease_until, "run": run_id, "token": token}

        async def go(conn: AsyncConnection[Any], _: _Retry) -> bool:
            return (await conn.execute(pq.LEASE_RENEW, params)).rowcount == 1

        return await self._call(go, quiet=True)

    async def _give_back(self, run_id: str, token: str, now: int) -> None:
        """
        After a retry of a commit met a stale lease, the first try may have landed (its reply
        was lost with the connection) and the turn cannot tell: if *token* still holds the run,
        make it pending, so the next turn replays from what was recorded.
        """
        params = {"now": now, "run": run_id, "token": token}

        async def go(conn: AsyncConnection[Any], _: _Retry) -> None:
            async with conn.transaction():
                if (await conn.execute(pq.GIVE_BACK, params)).rowcount:
                    await self._notify(conn, "r")

        await self._call(go)

    async def commit_turn(self, commit: TurnCommit) -> None:
        """Apply *commit* in one transaction or raise ``StaleTurnError``."""
        retried = _Retry()
        adv = commit.advance
        hint = adv.action == "release" or (adv.action == "suspend" and adv.wake_at is not None)

        statement: LiteralString
        params: dict[str, Any]

        def held(row: Any, _: int) -> None:
            if row is None or row[0] != 1:
                raise StaleTurnError(f"run {commit.run_id}: the lease was taken over")

        async def simple(conn: AsyncConnection[Any], retry: _Retry) -> None:
            # No checkpoint or task: the advance and its events are one statement.
            retried.again = retry.again
            cursor = await conn.execute(statement, params)
            held(await cursor.fetchone(), cursor.rowcount)

        async def general(conn: AsyncConnection[Any], retry: _Retry) -> None:
            retried.again = retry.again
            # The checks read their results at the end, before COMMIT (a failed check rolls
            # everything back).
            # A task outside a limited queue is queued for sure: the advance's statement sends
            # the notification then.
            queued_for_sure = any(t.queue is None or t.queue_limit is None for t in commit.tasks)
            # A checkpoint inserted now has no older attempts to withdraw.
            fresh = {w.checkpoint.seq for w in commit.checkpoints if w.expected_rev is None}
            # The steps this commit gives up on: none of their attempts may run any more.
            settled = [w.checkpoint for w in commit.checkpoints if gives_up(w.checkpoint)]
            async with conn.transaction():
                await self._queue_locks(
                    conn, [t.queue for t in commit.tasks] + [cp.queue for cp in settled]
                )
                cursor = await conn.execute(
                    *self._advance(commit, runs=hint, tasks=queued_for_sure)
                )
                row = await cursor.fetchone()
                if row is None or row[0] != 1:
                    raise StaleTurnError(f"run {commit.run_id}: the lease was taken over")
                # Withdraw older attempts nobody claimed (only the newest may run), before the
                # checkpoint rows: task rows are locked before checkpoint rows everywhere.
                withdrawn: list[str | None] = []
                for task in commit.tasks:
                    if task.seq in fresh:
                        continue
                    cursor = await conn.execute(pq.UNCLAIMED_DELETE, (task.run_id, task.seq))
                    withdrawn.extend(row[0] for row in await cursor.fetchall())
                if settled:
                    withdrawn.extend(
                        await self._withdraw(
                            conn, commit.run_id, [cp.seq for cp in settled], commit.now
                        )
                    )
                for write in commit.checkpoints:
                    cursor = await self._write_checkpoint(conn, commit, write)
                    if cursor.rowcount != 1:
                        how = "was written" if write.expected_rev is None else "changed"
                        seq = write.checkpoint.seq
                        msg = f"run {commit.run_id}: checkpoint {seq} {how} meanwhile"
                        raise StaleTurnError(msg)
                    await self._write_errors(conn, commit.run_id, write)
                await self._commit_extras(conn, commit)
                queued = False
                for task in commit.tasks:
                    queued = await self._enqueue(conn, task, commit.now) or queued
                if queued and not queued_for_sure:
                    await self._notify(conn, "td" if _later(commit) else "t")
                for queue in sorted({q for q in withdrawn if q is not None}):
                    await self._admit_waiting(conn, queue, commit.now)

        async def single(conn: AsyncConnection[Any], retry: _Retry) -> None:
            retried.again = retry.again
            try:
                cursor = await conn.execute(statement, params)
            except psycopg.errors.UniqueViolation as error:
                # The whole statement rolled back: a row at one of its positions was written
                # meanwhile (by the first try, if this is a retry).
                msg = f"run {commit.run_id}: a checkpoint of this commit was written meanwhile"
                raise StaleTurnError(msg) from error
            held(await cursor.fetchone(), cursor.rowcount)

        try:
            if not self._one_statement_paths or _extras(commit):
                await self._call(general)
            elif not commit.checkpoints and not commit.tasks:
                statement, params = self._advance(commit, runs=hint, tasks=False)
                await self._grouped(commit.run_id, statement, params, held, simple)
            elif self._one_statement(commit):
                statement, params = self._commit_statement(commit, hint=hint)
                await self._grouped(commit.run_id, statement, params, held, single)
            else:
                await self._call(general)
        except StaleTurnError:
            if retried.again:
                await self._give_back(commit.run_id, commit.token, commit.now)
            raise
        except psycopg.DataError as error:
            raise self._payload_error(error, f"a step of run {commit.run_id!r}") from error

    async def _commit_extras(self, conn: AsyncConnection[Any], commit: TurnCommit) -> None:
        """A commit's child runs, taken messages and event values (its run's row locked)."""
        for child in commit.runs:
            await self._create_child(conn, commit.run_id, child)
        for take in commit.taken:
            params = {"seq": take.seq, "run": commit.run_id, "n": take.n}
            if (await conn.execute(pq.MESSAGE_TAKE, params)).rowcount != 1:
                msg = f"run {commit.run_id}: message {take.n} was taken meanwhile"
                raise StaleTurnError(msg)
        for value in commit.values:
            await conn.execute(
                pq.EVENT_VALUE_SET, (commit.run_id, value.key, value.value, value.seq, commit.now)
            )

    async def _create_child(
        self, conn: AsyncConnection[Any], parent_id: str, child: ChildRun
    ) -> None:
        """Insert a child run of *parent_id*; one of its id must be that parent's already."""
        params = {**self._run_params(child.run, child.events), "parent": parent_id}
        row = await (await conn.execute(pq.RUN_CREATE, params)).fetchone()
        if row is not None and row[0] == 1:
            return
        found = await (await conn.execute(pq.RUN, (child.run.run_id,))).fetchone()
        if found is None or run_of(found).parent_id != parent_id:
            msg = f"run {parent_id}: child run id {child.run.run_id!r} was taken meanwhile"
            raise StaleTurnError(msg)

    @staticmethod
    async def _withdraw(
        conn: AsyncConnection[Any], run_id: str, seqs: Sequence[int], now: int
    ) -> list[str | None]:
        """
        Withdraw the attempts of the run's checkpoints at *seqs* (their queues' locks held):
        queued or waiting ones are deleted, a claimed one is marked ``withdrawn`` (its result
        will be discarded), each with a ``step.withdrawn`` event. Returns the queues of the
        deleted ones, whose slots are free now.
        """
        cursor = await conn.execute(pq.WITHDRAW, {"run": run_id, "seqs": list(seqs), "now": now})
        return [row[0] for row in await cursor.fetchall()]

    @staticmethod
    def _one_statement(commit: TurnCommit) -> bool:
        """
        Whether *commit* fits ``_commit_statement``: every checkpoint is a new row, and every
        task a first one at its position (no older attempt to withdraw) outside any queue (no
        slot to count, no queue lock).
        """
        fresh = {w.checkpoint.seq for w in commit.checkpoints if w.expected_rev is None}
        return len(fresh) == len(commit.checkpoints) and all(
            t.queue is None and t.seq in fresh for t in commit.tasks
        )

    def _commit_statement(
        self, commit: TurnCommit, *, hint: bool
    ) -> tuple[LiteralString, dict[str, Any]]:
        """
        A turn commit that ``_one_statement`` accepts, as one statement (its own transaction
        in autocommit, one round trip): the advance's compare-and-set on the lease, then the
        checkpoint and task rows and the events, inserted only if the lease held. A checkpoint
        row that exists already fails the statement (unique violation), so nothing of it lands.
        """
        held, params = self._advance_part(commit, runs=hint, tasks=bool(commit.tasks))
        rows: list[str] = []
        for n, write in enumerate(commit.checkpoints):
            cp = write.checkpoint
            rows.append(pq.checkpoint_from_held(n))
            prefix = f"c{n}_"
            params[prefix + "seq"] = cp.seq
            params[prefix + "created_at"] = cp.created_at
            params[prefix + "policy"] = policy_text(cp)
            values = checkpoint_values(write, commit.now)
            params.update(zip(_prefixed(prefix, CHECKPOINT_WRITE_COLUMNS), values, strict=True))
            if cp.errors:
                rows.append(pq.errors_from_held(n))
                params[f"e{n}_seq"] = cp.seq
                params[f"e{n}_errors"] = errors_text(cp.errors)
        if commit.tasks:
            rows.append(pq.tasks_from_held(len(commit.tasks)))
        for n, task in enumerate(commit.tasks):
            values = task_values(task, "queued", commit.now)
            params.update(zip(_prefixed(f"t{n}_", TASK_INSERT_COLUMNS), values, strict=True))
        # Composed of the statements module's fragments only (their row numbers make them str).
        statement = f"WITH held AS ({held}),{''.join(rows)}{pq.ADVANCE_TAIL}"
        return statement, params  # pyright: ignore[reportReturnType]

    async def _write_checkpoint(
        self, conn: AsyncConnection[Any], commit: TurnCommit, write: CheckpointWrite
    ) -> psycopg.AsyncCursor[Any]:
        """Insert or update (compare-and-set on ``rev``) one row; its cursor (row count 1: done)."""
        cp = write.checkpoint
        values = checkpoint_values(write, commit.now)
        if write.expected_rev is None:
            return await conn.execute(
                pq.CHECKPOINT_INSERT,
                (*values, commit.run_id, cp.seq, cp.created_at, policy_text(cp)),
            )
        return await conn.execute(
            pq.CHECKPOINT_UPDATE, (*values, commit.run_id, cp.seq, write.expected_rev)
        )

    @staticmethod
    async def _write_errors(
        conn: AsyncConnection[Any], run_id: str, write: CheckpointWrite
    ) -> None:
        """A checkpoint's errors, written again whole when the turn gave them as values."""
        cp = write.checkpoint
        if cp.stored_errors() is not None:
            return
        if write.expected_rev is not None:
            await conn.execute(pq.ERRORS_DELETE, (run_id, cp.seq))
        if cp.errors:
            await conn.execute(pq.ERRORS_INSERT, (run_id, cp.seq, errors_text(cp.errors)))

    async def _enqueue(self, conn: AsyncConnection[Any], task: NewTask, now: int) -> bool:
        """Insert *task*, queued, or waiting when its queue has no free slot; whether queued."""
        held = 0
        if task.queue is not None and task.queue_limit is not None:
            row = await (await conn.execute(pq.SLOTS_HELD, (task.queue,))).fetchone()
            held = 0 if row is None else row[0]
        status = admission(task.queue, task.queue_limit, held)
        await conn.execute(pq.TASK_INSERT, task_values(task, status, now))
        if status == "waiting":
            await self._insert_event(
                conn, waiting(task.run_id, task.seq, task.attempt, task.queue, now)
            )
        return status == "queued"

    async def _admit_waiting(self, conn: AsyncConnection[Any], queue: str, now: int) -> bool:
        """Admit the oldest waiting attempts of *queue* into its free slots (its lock held)."""
        admitted_any = False
        while True:
            row = await (await conn.execute(pq.OLDEST_WAITING, (queue,))).fetchone()
            if row is None:
                return admitted_any
            held = await (await conn.execute(pq.SLOTS_HELD, (queue,))).fetchone()
            if held is not None and not admits(held[0], row[4]):
                return admitted_any
            await conn.execute(pq.ADMIT, (now, row[0]))
            await self._insert_event(conn, admitted(row[1], row[2], row[3], queue, now))
            admitted_any = True

    async def _release_slots(
        self, conn: AsyncConnection[Any], queues: Sequence[str | None], now: int
    ) -> bool:
        admitted_any = False
        for queue in sorted({q for q in queues if q is not None}):
            admitted_any = await self._admit_waiting(conn, queue, now) or admitted_any
        return admitted_any

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
        params = {
            "run": run_id,
            "seq": seq,
            "name": name,
            "output": output,
            "started": started,
            "now": now,
            "token": token,
            "policy": policy,
        }

        def inserted(_: Any, count: int) -> None:
            if count != 1:
                raise StaleTurnError(f"run {run_id}: the lease was taken over")

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> None:
            statement = pq.LOCAL_STEP_INSERT_AGAIN if retry.again else pq.LOCAL_STEP_INSERT
            cursor = await conn.execute(statement, params)
            if cursor.rowcount == 1:
                return
            if retry.again and await self._lease_holds(conn, run_id, token):
                return  # the first try landed: only this turn could have written the row
            inserted(None, cursor.rowcount)

        try:
            await self._grouped(run_id, pq.LOCAL_STEP_INSERT, params, inserted, go)
        except psycopg.DataError as error:
            raise self._payload_error(error, f"output of local step {name!r}") from error
        if self._taps.active:
            self._taps.deliver(tapped_events(local_step_rows(run_id, seq, started, now)))

    @staticmethod
    async def _lease_holds(conn: AsyncConnection[Any], run_id: str, token: str) -> bool:
        cursor = await conn.execute(pq.LEASE_READ, {"run": run_id, "token": token})
        return await cursor.fetchone() is not None

    def _advance(
        self, commit: TurnCommit, *, runs: bool, tasks: bool
    ) -> tuple[LiteralString, dict[str, Any]]:
        """
        The run's part of a turn commit, as a compare-and-set on its lease token, with the
        commit's events (written only if it holds): one statement whose row says 1 if it held.
        It notifies (if it held) for *runs* and *tasks* (see ``wake_hint``).
        """
        _, params = self._advance_part(commit, runs=runs, tasks=tasks)
        return _held(commit.advance)[1], params

    def _advance_part(
        self, commit: TurnCommit, *, runs: bool, tasks: bool
    ) -> tuple[LiteralString, dict[str, Any]]:
        """The ``held`` CTE of *commit*'s advance, and the parameters of its statement."""
        adv = commit.advance
        params: dict[str, Any] = {
            "run": commit.run_id,
            "token": commit.token,
            "now": commit.now,
            **self._events_json(commit.events),
            **self._hint_params(
                ("r" if runs else "")
                + ("t" if tasks else "")
                + ("d" if (runs or tasks) and _later(commit) else "")
            ),
        }
        if adv.action == "continue" and adv.lease_until is not None:
            params["until"] = adv.lease_until
        elif adv.action == "suspend":
            params["wake"] = adv.wake_at
        elif adv.action == "finish":
            params.update(status=adv.status, output=adv.output, error=error_text(adv.error))
            parent = self._hint_params("r")
            params.update(
                child=dumps(commit.run_id),
                parent_channels=parent["channels"],
                parent_sender=parent["sender"],
                parent_listen=parent["listen"],
            )
        return _held(adv)[0], params

    # -- workers ----------------------------------------------------------------------------------

    async def claim_tasks(
        self, *, groups: Sequence[str], now: int, claim_until: int, worker: str, limit: int
    ) -> list[Task]:
        """Claim up to *limit* queued tasks of *groups* available at *now*."""
        if not groups or limit <= 0:
            return []
        nonce = secrets.token_hex(8)

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> list[Task]:
            tasks: list[Task] = []
            if retry.again:
                # The first try may have claimed some before its reply was lost.
                cursor = await conn.execute(pq.CLAIMED_TASKS, (nonce,))
                tasks = [task_of(row) for row in await cursor.fetchall()]
            if len(tasks) >= limit:
                return tasks
            cursor = await conn.execute(
                pq.CLAIM_TASKS,
                {
                    "groups": _text_array(groups),
                    "now": now,
                    "limit": limit - len(tasks),
                    "worker": worker,
                    "until": claim_until,
                    "nonce": nonce,
                },
            )
            tasks.extend(task_of(row) for row in await cursor.fetchall())
            return tasks

        return await self._call(go)

    async def renew_claim(self, task_id: int, worker: str, claim_until: int) -> bool:
        """Extend a claim *worker* holds; ``False`` if it no longer holds it."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> bool:
            cursor = await conn.execute(pq.CLAIM_RENEW, (claim_until, task_id, worker))
            return cursor.rowcount == 1

        return await self._call(go, quiet=True)

    async def heartbeat(
        self, task: Task, *, now: int, progress: str | None, lease_until: int | None
    ) -> bool:
        """Persist a worker's beat (see ``Store.heartbeat``)."""
        params = {
            "now": now,
            "progress": progress,
            "lease": lease_until,
            "run": task.run_id,
            "seq": task.seq,
            "attempt": task.attempt,
        }

        async def go(conn: AsyncConnection[Any], _: _Retry) -> bool:
            return (await conn.execute(pq.HEARTBEAT, params)).rowcount == 1

        return await self._call(go, quiet=True)

    async def release_claim(self, task_id: int, worker: str, *, now: int) -> None:
        """Put a claimed task back in the queue (a withdrawn one goes, freeing its slot)."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> str | None:
            async with conn.transaction():
                cursor = await conn.execute(pq.CLAIM_RELEASE, (task_id, worker))
                if cursor.rowcount:
                    await self._notify(conn)
                    return None
                row = await (await conn.execute(pq.WITHDRAWN_QUEUE, (task_id, worker))).fetchone()
                return None if row is None else row[0]

        withdrawn = await self._call(go)
        if withdrawn is not None:
            # Its queue's lock comes before its row: another transaction.
            await self._call(
                partial(
                    self._drop_withdrawn,
                    task_id=task_id,
                    queue=withdrawn or None,
                    now=now,
                    worker=worker,
                )
            )

    async def record_result(self, task: Task, worker: str, outcome: TaskOutcome, now: int) -> bool:
        """Record an attempt's result (see ``Store.record_result``)."""

        statement: LiteralString
        params: dict[str, Any]

        def landed(row: Any, _: int) -> bool:
            return row is not None and row[0] == 1

        async def one(conn: AsyncConnection[Any], _: _Retry) -> bool:
            cursor = await conn.execute(statement, params)
            return landed(await cursor.fetchone(), cursor.rowcount)

        async def go(conn: AsyncConnection[Any], _: _Retry) -> bool:
            async with conn.transaction():
                await self._queue_locks(conn, [task.queue])
                await self._lock_run(conn, task.run_id)
                own = await conn.execute(pq.OWN_TASK_DELETE, (task.task_id, worker))
                rows = await own.fetchall()
                await self._release_slots(conn, [row[0] for row in rows], now)
                if any(row[1] == "withdrawn" for row in rows):
                    await self._insert_event(conn, result_discarded(task, outcome, now))
                    return False
                return await self._apply_outcome(
                    conn,
                    run_id=task.run_id,
                    seq=task.seq,
                    attempt=task.attempt,
                    outcome=outcome,
                    now=now,
                    released=[],
                )

        # No queue slot to free (and no progress beside a failure): one statement does it all.
        simple = self._one_statement_paths and (
            task.queue is None and (outcome.error is None or outcome.progress is None)
        )
        try:
            if not simple:
                return await self._call(go)
            statement, params = self._result_statement(task, worker, outcome, now)
            return await self._grouped(task.run_id, statement, params, landed, one)
        except psycopg.DataError as error:
            if outcome.error is not None:
                raise
            # The same output would fail the same way on every attempt.
            failure = StepError.from_exception(
                self._payload_error(error, f"output of step {task.name!r}")
            )
            failed = TaskOutcome(error=attrs.evolve(failure, retryable=False))
            return await self.record_result(task, worker, failed, now)

    def _outcome_params(
        self, run_id: str, seq: int, attempt: int, outcome: TaskOutcome, *, now: int, kinds: str
    ) -> dict[str, Any]:
        """The parameters of an outcome's statement (``APPLY_*``, ``RESULT_*``)."""
        _, _, name, level, _, data = outcome_event(run_id, seq, attempt, outcome, now)
        params: dict[str, Any] = {
            "run": run_id,
            "seq": seq,
            "attempt": attempt,
            "now": now,
            "ev_name": name,
            "ev_level": level,
            "ev_data": data,
            **self._hint_params(kinds),
        }
        if outcome.error is None:
            params.update(output=outcome.output, progress=outcome.progress)
        else:
            params["error"] = error_text(outcome.error)
        return params

    def _result_statement(
        self, task: Task, worker: str, outcome: TaskOutcome, now: int
    ) -> tuple[LiteralString, dict[str, Any]]:
        """``record_result`` as one statement, for a task of no queue."""
        # A task of no queue frees no slot: only the run it wakes is news.
        params = self._outcome_params(
            task.run_id, task.seq, task.attempt, outcome, now=now, kinds="r"
        )
        params.update(
            task=task.task_id,
            worker=worker,
            progress=outcome.progress,
            discarded=result_discarded(task, outcome, now)[5],
        )
        return (pq.RESULT_COMPLETED if outcome.error is None else pq.RESULT_FAILED), params

    @staticmethod
    async def _lock_run(conn: AsyncConnection[Any], run_id: str) -> None:
        await conn.execute(pq.RUN_LOCK, (run_id,))

    async def _apply_outcome(
        self,
        conn: AsyncConnection[Any],
        *,
        run_id: str,
        seq: int,
        attempt: int,
        outcome: TaskOutcome,
        now: int,
        released: list[psycopg.AsyncCursor[Any]],
    ) -> bool:
        """
        Complete or fail the checkpoint, wake the run and admit into freed queue slots (the run
        row already locked); whether the outcome applied. *released*: cursors of task deletions
        (``RETURNING queue``) whose slots this frees. Results are read only at the end, so the
        statements can go out pipelined.
        """
        params = self._outcome_params(run_id, seq, attempt, outcome, now=now, kinds="rtd")
        if outcome.error is None:
            # Other attempts of a step that completes are moot; their rows go first (task rows
            # before checkpoint rows). A completed step has none left, so this changes nothing
            # when the result turns out not to matter.
            released.append(await conn.execute(pq.MOOT_DELETE, params))
            statement = pq.APPLY_COMPLETED
        else:
            if outcome.progress is not None:
                await conn.execute(pq.PROGRESS, (outcome.progress, run_id, seq))
            statement = pq.APPLY_FAILED
        applied = await conn.execute(statement, params)
        queues = [row[0] for cursor in released for row in await cursor.fetchall()]
        await self._release_slots(conn, queues, now)
        row = await applied.fetchone()
        return row is not None and row[0] == 1

    async def redispatch_pending(self, run_id: str, *, now: int) -> int:
        """Re-enqueue the run's pending dispatched steps with attempt + 1; return how many."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> int:
            count = 0
            async with conn.transaction():
                cursor = await conn.execute(pq.PENDING_QUEUES, (run_id,))
                await self._queue_locks(conn, [row[0] for row in await cursor.fetchall()])
                await self._lock_run(conn, run_id)
                found = await (await conn.execute(pq.RUN, (run_id,))).fetchone()
                carried = None if found is None else run_of(found)
                for cp in filter(redispatchable, await self._checkpoints(conn, run_id)):
                    attempt = cp.attempts + 1
                    cursor = await conn.execute(pq.UNCLAIMED_DELETE, (run_id, cp.seq))
                    withdrawn = await cursor.fetchall()
                    limit = next((row[1] for row in withdrawn if row[1] is not None), None)
                    if limit is None:
                        cursor = await conn.execute(pq.QUEUE_LIMIT_OF_STEP, (run_id, cp.seq))
                        held = await cursor.fetchone()
                        limit = None if held is None else held[0]
                    await conn.execute(
                        pq.REDISPATCH,
                        {"attempt": attempt, "now": now, "run": run_id, "seq": cp.seq},
                    )
                    await self._enqueue(conn, redispatch(cp, now, limit, carried), now)
                    await self._release_slots(conn, [row[0] for row in withdrawn], now)
                    await self._insert_event(conn, redispatched(run_id, cp.seq, attempt, now))
                    count += 1
                if count:
                    await self._notify(conn)
            return count

        return await self._call(go)

    # -- maintenance ------------------------------------------------------------------------------

    async def recover(
        self, *, now: int, max_recovery_attempts: int | None, reconcile_ms: int
    ) -> RecoveryReport:
        """
        Recover expired run leases and expired task claims (see ``Store.recover``), each in its
        own transaction: two engines recovering at once each take a run or a claim only if it is
        still expired, and an error on one is logged and skips it, never stopping the pass.
        """

        async def expired(conn: AsyncConnection[Any], _: _Retry) -> list[Any]:
            return await (await conn.execute(pq.EXPIRED, {"now": now})).fetchall()

        found = await self._call(expired, quiet=True)
        runs = [(run_id,) for kind, _, run_id, _ in found if kind == "run"]
        tasks = [
            (task_id, run_id, queue) for kind, task_id, run_id, queue in found if kind == "task"
        ]
        for kind, task_id, _, queue in found:
            if kind == "gone":
                # A withdrawn attempt whose worker went silent: its slot is free, nothing else.
                try:
                    await self._call(partial(self._drop_withdrawn, task_id=task_id, queue=queue,
                                             now=now, expired=True))  # fmt: skip
                except Exception:  # noqa: BLE001 - one task's trouble must not stop the pass
                    _log.exception("store %s: could not drop task %s", self.url, task_id)
        recovered: list[str] = []
        dead: list[str] = []
        lost: list[str] = []
        for (run_id,) in runs:
            try:
                verdict = await self._call(
                    partial(
                        self._recover_run,
                        run_id=run_id,
                        now=now,
                        max_recovery_attempts=max_recovery_attempts,
                        reconcile_ms=reconcile_ms,
                    )
                )
            except Exception:  # noqa: BLE001 - one run's trouble must not stop the pass
                _log.exception("store %s: could not recover run %s", self.url, run_id)
                continue
            if verdict == "dead":
                dead.append(run_id)
            elif verdict is not None:
                recovered.append(run_id)
        for task_id, run_id, queue in tasks:
            try:
                step_id = await self._call(
                    partial(
                        self._recover_task, task_id=task_id, run_id=run_id, queue=queue, now=now
                    )
                )
            except Exception:  # noqa: BLE001 - one task's trouble must not stop the pass
                _log.exception("store %s: could not recover task %s", self.url, task_id)
                continue
            if step_id is not None:
                lost.append(step_id)
        return RecoveryReport(recovered, dead, lost)

    async def _recover_run(
        self,
        conn: AsyncConnection[Any],
        _: _Retry,
        *,
        run_id: str,
        now: int,
        max_recovery_attempts: int | None,
        reconcile_ms: int,
    ) -> Verdict | None:
        async with conn.transaction():
            row = await (await conn.execute(pq.EXPIRED_RUN, (run_id, now))).fetchone()
            if row is None:
                return None  # another engine recovered it, or its turn renewed the lease
            count: int = row[0]
            awaiting = await (await conn.execute(pq.AWAITING_LIVENESS, (run_id,))).fetchone()
            verdict = recovery_verdict(
                awaiting_liveness=awaiting is not None,
                recovery_attempts=count,
                max_recovery_attempts=max_recovery_attempts,
            )
            wake_at = now + reconcile_ms
            if verdict == "reconciling":
                await conn.execute(pq.RUN_RECONCILE, (wake_at, now, run_id))
            elif verdict == "dead":
                error = error_text(dead_run(count, max_recovery_attempts))
                await conn.execute(pq.RUN_DEAD, (error, now, run_id))
                await conn.execute(
                    pq.PARENT_WAKE, {"run": run_id, "now": now, "child": dumps(run_id)}
                )
            else:
                await conn.execute(pq.RUN_RECOVER, (now, run_id))
            await self._insert_event(conn, recovery_event(run_id, verdict, count, wake_at, now))
            await self._notify(conn)
            return verdict

    async def _drop_withdrawn(
        self,
        conn: AsyncConnection[Any],
        _: _Retry,
        *,
        task_id: int,
        queue: str | None,
        now: int,
        expired: bool = False,
        worker: str | None = None,
    ) -> None:
        """Delete a withdrawn attempt (its claim lapsed, or its worker let it go); free its slot."""
        async with conn.transaction():
            await self._queue_locks(conn, [queue])
            cursor = await conn.execute(
                pq.WITHDRAWN_DROP,
                {"task": task_id, "expired": expired, "now": now, "worker": worker},
            )
            await self._release_slots(conn, [row[0] for row in await cursor.fetchall()], now)

    async def _recover_task(
        self,
        conn: AsyncConnection[Any],
        _: _Retry,
        *,
        task_id: int,
        run_id: str,
        queue: str | None,
        now: int,
    ) -> str | None:
        async with conn.transaction():
            await self._queue_locks(conn, [queue])
            await self._lock_run(conn, run_id)
            row = await (await conn.execute(pq.EXPIRED_CLAIM_DELETE, (task_id, now))).fetchone()
            if row is None:
                return None  # reported meanwhile, renewed, or recovered by another engine
            await self._release_slots(conn, [row[0]], now)
            await self._apply_outcome(
                conn,
                run_id=run_id,
                seq=row[1],
                attempt=row[3],
                outcome=TaskOutcome(error=lost_worker()),
                now=now,
                released=[],
            )
            await self._notify(conn)
            step_id: str = row[2]
            return step_id

    async def next_due(self, now: int) -> int | None:
        """The earliest epoch ms after *now* at which a timer, lease or claim comes due."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> int | None:
            row = await (await conn.execute(pq.NEXT_DUE, {"n": now})).fetchone()
            return None if row is None else row[0]

        return await self._call(go, quiet=True)

    async def requeue(self, run_id: str, now: int) -> Run:
        """Reset failed checkpoints to a fresh first attempt and make the run pending."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Run:
            async with conn.transaction():
                # Attempts still queued or running for the steps reset here must not complete
                # their fresh first attempt: they are withdrawn (queue locks first, by name).
                failed = await (await conn.execute(pq.FAILED_REMOTE, (run_id,))).fetchall()
                await self._queue_locks(conn, [queue for _, queue in failed])
                row = await (await conn.execute(pq.RUN_FOR_UPDATE, (run_id,))).fetchone()
                if row is None:
                    msg = f"no run with id {run_id!r}"
                    raise LookupError(msg)
                unwound = await (await conn.execute(pq.COMPENSATION, (run_id,))).fetchone()
                check_requeue(run_of(row), unwound=unwound is not None)
                if failed:
                    freed = await self._withdraw(conn, run_id, [seq for seq, _ in failed], now)
                    await self._release_slots(conn, freed, now)
                await conn.execute(pq.FAILED_ERRORS_DELETE, {"run": run_id})
                reset = (await conn.execute(pq.FAILED_RESET, (now, now, run_id))).rowcount
                new = await (await conn.execute(pq.RUN_REQUEUE, (now, run_id))).fetchone()
                await self._insert_event(conn, requeued(run_id, reset, now))
                await self._notify(conn)
            assert new is not None
            return run_of(new)

        return await self._call(go)

    async def unserved(self, served: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """How many runs wait for each unserved ``(workflow, version)`` (``rules.unserved``)."""
        if not served:
            return {}
        pairs = dumps([list(pair) for pair in served])

        async def go(conn: AsyncConnection[Any], _: _Retry) -> dict[tuple[str, str], int]:
            cursor = await conn.execute(pq.UNSERVED_COUNTS, (pairs,))
            return {(w, v): n for w, v, n in await cursor.fetchall()}

        return await self._call(go, quiet=True)

    async def prune(self, *, before: int, statuses: Sequence[str], dry_run: bool = False) -> int:
        """Delete (or count) the runs of *statuses* last changed before *before* (see ``Store``)."""
        if not statuses:
            return 0
        params = {"statuses": list(statuses), "before": before, "batch": PRUNE_BATCH}

        async def count(conn: AsyncConnection[Any], _: _Retry) -> int:
            row = await (await conn.execute(pq.PRUNABLE_COUNT, params)).fetchone()
            return 0 if row is None else int(row[0])

        async def batch(conn: AsyncConnection[Any], _: _Retry) -> int:
            async with conn.transaction():
                cursor = await conn.execute(pq.PRUNABLE, params)
                found = [run_id for (run_id,) in await cursor.fetchall()]
                if found:
                    for statement in pq.PRUNE:
                        await conn.execute(statement, (found,))
                return len(found)

        if dry_run:
            return await self._call(count, quiet=True)
        pruned = 0
        # A batch retried after its reply was lost may have landed: the count is then short
        # by that batch, and the runs are gone all the same.
        while (deleted := await self._call(batch)) > 0:
            pruned += deleted
            if deleted < PRUNE_BATCH:
                break
        return pruned

    async def cancel_run(self, run_id: str, *, compensate: bool, now: int) -> Run:
        """
        Cancel the run as ``rules.cancel_action`` says (see ``Store.cancel_run``), and every
        unfinished run below it the same way. Locks in the store's order: the queues of the
        steps it stops waiting for (read first; once the runs' rows are locked no turn can
        dispatch more, and a queue read too early is locked on a second try), then the runs'
        rows (the run's, then those below it in id order), task rows, checkpoint rows.
        """

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> Run:
            locked: set[str] | None = None
            while True:
                try:
                    return await self._cancel(
                        conn, run_id, compensate=compensate, now=now, locked=locked, retry=retry
                    )
                except _Relock as more:
                    locked = more.queues

        return await self._call(go)

    async def _cancel(
        self,
        conn: AsyncConnection[Any],
        run_id: str,
        *,
        compensate: bool,
        now: int,
        locked: set[str] | None,
        retry: _Retry,
    ) -> Run:
        async with conn.transaction():
            below = [
                row[0] for row in await (await conn.execute(pq.DESCENDANTS, (run_id,))).fetchall()
            ]
            if locked is None:
                cursor = await conn.execute(pq.PENDING_QUEUES_OF_RUNS, ([run_id, *below],))
                locked = {row[0] for row in await cursor.fetchall() if row[0] is not None}
            await self._queue_locks(conn, sorted(locked))
            row = await (await conn.execute(pq.RUN_FOR_UPDATE, (run_id,))).fetchone()
            if row is None:
                msg = f"no run with id {run_id!r}"
                raise LookupError(msg)
            run = run_of(row)
            if retry.again and run.status == "cancelled" and run.updated_at == now:
                return run  # the first try landed before its reply was lost
            freed: list[str | None] = []
            if not await self._cancel_one(conn, run, compensate, now, locked, freed):
                return run
            # Read again under the run's lock: no run below it can start another now.
            below = [
                row[0] for row in await (await conn.execute(pq.DESCENDANTS, (run_id,))).fetchall()
            ]
            if below:
                cursor = await conn.execute(pq.RUNS_FOR_UPDATE, (below,))
                for child in [run_of(found) for found in await cursor.fetchall()]:
                    if child.status not in FINISHED:
                        await self._cancel_one(conn, child, compensate, now, locked, freed)
            await self._release_slots(conn, freed, now)
            new = await (await conn.execute(pq.RUN, (run_id,))).fetchone()
        assert new is not None
        return run_of(new)

    # -- recurring workflows ----------------------------------------------------------------------

    async def recurring(self, names: Sequence[str] | None = None) -> list[RecurringRow]:
        """The rows of the recurring workflows *names* (``None``: every one), by name."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[RecurringRow]:
            if names is None:
                cursor = await conn.execute(pq.RECURRING_ALL)
            else:
                cursor = await conn.execute(pq.RECURRING, (list(names),))
            return [recurring_of(row) for row in await cursor.fetchall()]

        return await self._call(go, quiet=True)

    async def due_recurring(self, now: int) -> list[RecurringRow]:
        """The recurring rows with ``next_at <= now``, earliest first (off ``recurring_due``)."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[RecurringRow]:
            cursor = await conn.execute(pq.RECURRING_DUE, (now,))
            return [recurring_of(row) for row in await cursor.fetchall()]

        return await self._call(go, quiet=True)

    async def write_recurring(self, writes: Sequence[RecurringWrite]) -> list[bool]:
        """
        Each write a compare-and-set with its runs, all in one transaction (see ``Store``). The
        rows are written in name order, so two engines writing the same rows never deadlock. A
        retry after a lost connection finds a write the first try landed moved on: it then
        reports that write as not landed (its runs were made by the first try).
        """
        order = sorted(range(len(writes)), key=lambda i: writes[i].row.name)

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[bool]:
            landed = [False] * len(writes)
            async with conn.transaction():
                for i in order:
                    write = writes[i]
                    row = write.row
                    values = recurring_values(row)
                    if write.expected_rev is None:
                        cursor = await conn.execute(
                            pq.RECURRING_INSERT, (row.name, row.created_at, *values)
                        )
                    else:
                        cursor = await conn.execute(
                            pq.RECURRING_UPDATE, (*values, row.name, write.expected_rev)
                        )
                    landed[i] = cursor.rowcount == 1
                    if not landed[i]:
                        continue
                    # Each new run wakes the other engines (RUN_CREATE's NOTIFY).
                    for run, started in write.starts:
                        await conn.execute(pq.RUN_CREATE, self._run_params(run, (started,)))
            return landed

        return await self._call(go)

    async def _cancel_one(  # noqa: PLR0917 - one caller's state, in order
        self,
        conn: AsyncConnection[Any],
        run: Run,
        compensate: bool,
        now: int,
        locked: set[str],
        freed: list[str | None],
    ) -> bool:
        """
        Cancel *run* (unfinished, its row locked) as ``rules.cancel_action`` says; ``False``:
        it was kept. The queues of the attempts it withdraws are added to *freed*.

        Raises:
            _Relock: If it stops steps of a queue not in *locked*.
        """
        run_id = run.run_id
        checkpoints = await self._checkpoints(conn, run_id)
        action = cancel_action(
            run,
            compensate=compensate,
            has_completed=any(cp.status == "completed" for cp in checkpoints),
        )
        if action == "keep":
            return False
        keep_undos = action == "request"
        stopped = [cp for cp in checkpoints if cancels_attempt(cp, keep_undos=keep_undos)]
        missing = {cp.queue for cp in stopped if cp.queue is not None} - locked
        if missing:
            raise _Relock(locked | missing)
        seqs = [cp.seq for cp in stopped]
        if seqs:
            freed.extend(await self._withdraw(conn, run_id, seqs, now))
            params = {
                "run": run_id,
                "seqs": seqs,
                "now": now,
                "error": error_text(cancelled_attempt()),
            }
            await conn.execute(pq.CANCEL_ATTEMPTS, params)
        if action == "cancel":
            mode = cancel_mode(run, compensate=compensate)
            await conn.execute(pq.RUN_CANCEL, {"run": run_id, "mode": mode, "now": now})
            await self._insert_event(conn, cancelled(run_id, compensate=compensate, now=now))
            if (
                await conn.execute(
                    pq.PARENT_WAKE, {"run": run_id, "now": now, "child": dumps(run_id)}
                )
            ).rowcount:
                await self._notify(conn, "r")
        else:
            await conn.execute(pq.RUN_CANCEL_REQUEST, {"run": run_id, "now": now})
            await self._insert_event(conn, cancel_requested(run_id, now))
            await self._notify(conn, "r")
        return True

    # -- messages, events and children ------------------------------------------------------------

    async def send(self, message: NewMessage) -> bool:
        """
        Store *message* and wake its run (see ``Store.send``): the run's row is locked first,
        so the wake reads what a turn of the run committed meanwhile (a recv it now waits in).
        """
        params = {
            "run": message.run_id,
            "topic": message.topic,
            "body": message.body,
            "id": message.message_id,
            "now": message.now,
        }

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> bool:
            async with conn.transaction():
                row = await (await conn.execute(pq.RUN_FOR_UPDATE, (message.run_id,))).fetchone()
                if row is None:
                    msg = f"no run with id {message.run_id!r}"
                    raise LookupError(msg)
                check_send(run_of(row))
                if (await conn.execute(pq.MESSAGE_INSERT, params)).rowcount != 1:
                    # Known: a duplicate, or (a retry after a lost reply) this one.
                    return retry.again and await self._sent_as(conn, message)
                if (await conn.execute(pq.MESSAGE_WAKE, params)).rowcount:
                    await self._notify(conn, "r")
                return True

        return await self._call(go)

    @staticmethod
    async def _sent_as(conn: AsyncConnection[Any], message: NewMessage) -> bool:
        """Whether a retried send's message is there as sent at its time (its first try landed)."""
        cursor = await conn.execute(pq.MESSAGE_SENT_AT, (message.run_id, message.message_id))
        row = await cursor.fetchone()
        return row is not None and row[0] == message.now

    async def next_message(self, run_id: str, topic: str) -> Message | None:
        """The run's first unread message on *topic*, or ``None``."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Message | None:
            row = await (await conn.execute(pq.NEXT_MESSAGE, (run_id, topic))).fetchone()
            return None if row is None else message_of(row)

        return await self._call(go, quiet=True)

    async def event_value(self, run_id: str, key: str) -> EventValue | None:
        """The run's latest value of event *key*, or ``None``."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> EventValue | None:
            row = await (await conn.execute(pq.EVENT_VALUE, (run_id, key))).fetchone()
            return None if row is None else event_value_of(row)

        return await self._call(go, quiet=True)

    async def child_runs(self, run_id: str) -> list[Run]:
        """The runs whose parent is *run_id*, oldest first."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[Run]:
            return [
                run_of(row)
                for row in await (await conn.execute(pq.CHILD_RUNS, (run_id,))).fetchall()
            ]

        return await self._call(go, quiet=True)
