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
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Any, Final, LiteralString, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import attrs
import psycopg
from psycopg import AsyncConnection, AsyncCursor, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool

from effects.durable._failures import dead_run, lost_worker
from effects.durable._records import Checkpoint, Event, Run, Task
from effects.durable._store import (
    CheckpointWrite,
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
    errors_text,
    loads,
    run_of,
    task_of,
)
from effects.durable.errors import StepError, StoreError

__all__ = ["SCHEMA_VERSION", "PostgresOptions", "PostgresStore", "parse_postgres_url"]

_log: Final = logging.getLogger("effects.durable")
T = TypeVar("T")

SCHEMA_NAME: Final = "effects.durable"
SCHEMA_VERSION: Final = 2
DEFAULT_SCHEMA: Final = "effects_durable"

# Each entry moves the schema from version i to i + 1; a store is upgraded by running the ones it
# lacks, in one transaction, under the schema's advisory lock.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        "CREATE TABLE durable_meta (key text PRIMARY KEY, value text NOT NULL)",
        """CREATE TABLE runs (
            run_id text PRIMARY KEY,
            workflow text NOT NULL,
            version text NOT NULL,
            status text NOT NULL,
            input jsonb NOT NULL,
            output jsonb,
            error jsonb,
            created_at bigint NOT NULL,
            updated_at bigint NOT NULL,
            wake_at bigint,
            woken boolean NOT NULL DEFAULT false,
            lease_token text,
            lease_until bigint,
            recovery_attempts integer NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX runs_runnable ON runs (status, wake_at)",
        "CREATE INDEX runs_by_created ON runs (created_at)",
        "CREATE INDEX runs_leased ON runs (lease_until) WHERE status = 'running'",
        """CREATE TABLE checkpoints (
            run_id text NOT NULL,
            seq integer NOT NULL,
            name text NOT NULL,
            kind text NOT NULL,
            step_id text NOT NULL,
            status text NOT NULL,
            attempts integer NOT NULL,
            wake_at bigint,
            input jsonb,
            output jsonb,
            error jsonb,
            errors jsonb NOT NULL DEFAULT '[]',
            final boolean NOT NULL DEFAULT false,
            exception bytea,
            retry_state jsonb,
            grp text NOT NULL DEFAULT 'default',
            queue text,
            dispatched_at bigint,
            created_at bigint NOT NULL,
            updated_at bigint NOT NULL,
            rev integer NOT NULL DEFAULT 1,
            progress jsonb,
            heartbeat_at bigint,
            timeout_ms bigint,
            lease_ms bigint,
            redispatches integer NOT NULL DEFAULT 0,
            PRIMARY KEY (run_id, seq)
        )""",
        "CREATE INDEX checkpoints_dispatched ON checkpoints (dispatched_at)"
        " WHERE kind = 'remote' AND status IN ('pending', 'running')",
        """CREATE TABLE tasks (
            task_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            run_id text NOT NULL,
            seq integer NOT NULL,
            step_id text NOT NULL,
            name text NOT NULL,
            grp text NOT NULL,
            queue text,
            queue_limit integer,
            input jsonb NOT NULL,
            attempt integer NOT NULL,
            status text NOT NULL,
            available_at bigint NOT NULL,
            claimed_by text,
            claim_until bigint,
            claim_nonce text,
            redispatched boolean NOT NULL DEFAULT false,
            created_at bigint NOT NULL
        )""",
        "CREATE INDEX tasks_queued ON tasks (grp, available_at, task_id) WHERE status = 'queued'",
        "CREATE INDEX tasks_claimed ON tasks (claim_until) WHERE status = 'claimed'",
        "CREATE INDEX tasks_by_step ON tasks (run_id, seq)",
        "CREATE INDEX tasks_by_queue ON tasks (queue, status, task_id) WHERE queue IS NOT NULL",
        # One sequence for all runs: ids order a run's trail in insertion order.
        """CREATE TABLE events (
            id bigint GENERATED ALWAYS AS IDENTITY,
            run_id text NOT NULL,
            seq integer,
            name text NOT NULL,
            level text NOT NULL,
            at bigint NOT NULL,
            data jsonb NOT NULL,
            PRIMARY KEY (run_id, id)
        )""",
    ),
    (
        # Payloads as the JSON text the engine wrote: jsonb refuses U+0000 and unpaired
        # surrogates (in an error message, say) and rewrites numbers (1e16 as 10000000000000000,
        # -0.0 as 0), so a replay would see another value than the first run did.
        "ALTER TABLE runs ALTER COLUMN input TYPE text USING input::text,"
        " ALTER COLUMN output TYPE text USING output::text,"
        " ALTER COLUMN error TYPE text USING error::text",
        "ALTER TABLE checkpoints ALTER COLUMN input TYPE text USING input::text,"
        " ALTER COLUMN output TYPE text USING output::text,"
        " ALTER COLUMN error TYPE text USING error::text,"
        " ALTER COLUMN retry_state TYPE text USING retry_state::text,"
        " ALTER COLUMN progress TYPE text USING progress::text,"
        # Failed local steps are rebuilt from their StepError, never unpickled: the pickles go.
        " DROP COLUMN exception",
        # Every attempt's error in a row of its own: a failed attempt appends one row, and the
        # checkpoint's row stays small however many attempts came before.
        "CREATE TABLE step_errors (run_id text NOT NULL, seq integer NOT NULL,"
        " n integer NOT NULL, error text NOT NULL, PRIMARY KEY (run_id, seq, n))",
        "INSERT INTO step_errors (run_id, seq, n, error) SELECT c.run_id, c.seq, e.n, e.v::text"
        " FROM checkpoints c, jsonb_array_elements(c.errors) WITH ORDINALITY AS e(v, n)",
        "ALTER TABLE checkpoints DROP COLUMN errors",
        "ALTER TABLE tasks ALTER COLUMN input TYPE text USING input::text",
        "ALTER TABLE events ALTER COLUMN data TYPE text USING data::text",
        "CREATE INDEX tasks_withdrawn ON tasks (claim_until) WHERE status = 'withdrawn'",
        # Attempts left queued behind a step that had settled (an older version did not
        # withdraw them): nobody may run them now.
        "DELETE FROM tasks t WHERE status IN ('queued', 'waiting') AND EXISTS (SELECT 1 FROM"
        " checkpoints c WHERE c.run_id = t.run_id AND c.seq = t.seq"
        " AND (c.status = 'completed' OR (c.status = 'failed' AND c.final)))",
    ),
)

_RUN_COLUMNS: Final = ", ".join(RUN_COLUMNS)
# The errors of the checkpoint row *t* as the JSON text of a list, from step_errors, in order.
_ERRORS_OF: Final = (
    "COALESCE((SELECT '[' || string_agg(e.error, ',' ORDER BY e.n) || ']' FROM step_errors e"
    " WHERE e.run_id = {t}.run_id AND e.seq = {t}.seq), '[]')"
)
_RUN_COLUMNS_OF_R: Final = ", ".join(f"r.{c}" for c in RUN_COLUMNS)
_CHECKPOINT_COLUMNS_OF_C: Final = ", ".join(
    _ERRORS_OF.format(t="c") if c == "errors" else f"c.{c}" for c in CHECKPOINT_COLUMNS
)
# The columns read from ``checkpoints`` itself (no alias).
_CHECKPOINT_READ: Final = ", ".join(
    _ERRORS_OF.format(t="checkpoints") if c == "errors" else c for c in CHECKPOINT_COLUMNS
)
_TASK_COLUMNS: Final = ", ".join(TASK_COLUMNS)
_SLOT_HOLDERS: Final = SLOT_HOLDERS
_EVENT_INSERT: Final = (
    "INSERT INTO events (run_id, seq, name, level, at, data) VALUES (%s, %s, %s, %s, %s, %s)"
)
# Events of one run from the JSON text of ``_events_json`` (one parameter: psycopg dumps a str
# far faster than five arrays), inserted once per row of *source* (a CTE that returns the run's
# id when the write it guards happened), in their order.
_EVENTS_FROM: Final = (
    "INSERT INTO events (run_id, seq, name, level, at, data)"
    " SELECT {source}.run_id, (e.ev->>0)::integer, e.ev->>1, e.ev->>2, (e.ev->>3)::bigint,"
    " e.ev->>4 FROM {source}, json_array_elements(%(events)s::json) WITH ORDINALITY"
    " AS e(ev, n) ORDER BY e.n"
)
# A new checkpoint row, inserted once per row of the ``held`` CTE (the lease held); the
# parameters' names get a per-row prefix. Every placeholder is cast: in an INSERT ... SELECT an
# untyped NULL would be text.
_CHECKPOINT_FROM_HELD: Final = (
    "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts, wake_at,"
    " output, error, final, retry_state, grp, queue, dispatched_at, input,"
    " timeout_ms, lease_ms, redispatches, heartbeat_at, created_at, updated_at)"
    " SELECT held.run_id, %(seq)s::integer, %(name)s::text, %(kind)s::text, %(step_id)s::text,"
    " %(status)s::text, %(attempts)s::integer, %(wake_at)s::bigint, %(output)s::text,"
    " %(error)s::text, %(final)s::boolean,"
    " %(retry_state)s::text, %(grp)s::text, %(queue)s::text, %(dispatched_at)s::bigint,"
    " %(input)s::text, %(timeout_ms)s::bigint, %(lease_ms)s::bigint,"
    " %(redispatches)s::integer, %(heartbeat_at)s::bigint, %(created_at)s::bigint,"
    " %(updated_at)s::bigint FROM held"
)
# The errors of a new checkpoint (``%(errors)s``, ``_errors_text``), once per row of
# ``held`` (prefixed likewise).
_ERRORS_FROM_HELD: Final = (
    "INSERT INTO step_errors (run_id, seq, n, error) SELECT held.run_id, %(seq)s::integer, e.n,"
    " e.v FROM held, json_array_elements_text(%(errors)s::json) WITH ORDINALITY AS e(v, n)"
)
# A new task outside any queue, queued, inserted once per row of ``held`` (prefixed likewise).
_TASK_FROM_HELD: Final = (
    "INSERT INTO tasks (run_id, seq, step_id, name, grp, input, attempt, status, available_at,"
    " redispatched, created_at) SELECT held.run_id, %(seq)s::integer, %(step_id)s::text,"
    " %(name)s::text, %(grp)s::text, %(input)s::text, %(attempt)s::integer, 'queued',"
    " %(available_at)s::bigint, %(redispatched)s::boolean, %(created_at)s::bigint FROM held"
)
# Joined into the statements whose loss in a server crash is harmless (claims, lease and claim
# renewals, heartbeats): their commit does not wait for the WAL to reach the disk. A claim lost
# that way leaves its run or task claimable again, and the claimer's next durable write is
# refused by the compare-and-set; any later durable commit flushes it anyway.
_NO_FLUSH: Final = "(SELECT set_config('synchronous_commit', 'off', true)) AS no_flush"
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


def _prefixed(prefix: str, pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Named parameters from *pairs*, each name with *prefix* (one row of a statement)."""
    return {prefix + key: value for key, value in pairs}


# One more error (``%(error)s``) of the checkpoint ``(%(run)s, %(seq)s)``, after those it has,
# once per row of ``up``: a row of its own, so an attempt costs the same however many came before.
_ERROR_APPEND: Final = (
    "INSERT INTO step_errors (run_id, seq, n, error) SELECT up.run_id, %(seq)s,"
    " (SELECT COALESCE(MAX(n), 0) + 1 FROM step_errors WHERE run_id = %(run)s"
    " AND seq = %(seq)s), %(error)s FROM up"
)


# In ``record_result``'s statement: the attempt reporting was not withdrawn (its ``own`` CTE).
_NOT_WITHDRAWN: Final = "NOT EXISTS (SELECT 1 FROM own WHERE status = 'withdrawn')"


def _gives_up(cp: Checkpoint) -> bool:
    """Whether writing *cp* settles a dispatched step's failure (its attempts are over)."""
    return cp.kind == "remote" and cp.status == "failed" and cp.final


def _later(commit: TurnCommit) -> bool:
    """Whether *commit* brings a time to come: a timer, or a task available only later."""
    adv = commit.advance
    return (adv.action == "suspend" and adv.wake_at is not None) or any(
        task.available_at > commit.now for task in commit.tasks
    )


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


_TAKEN: Final = _Taken()

#: One-statement writes (or groups) in flight at once; beyond these, writes wait for a group. Two
#: let a write go at once while one other is in flight, and still group under load (measured:
#: 64 runs of local steps at once, 1.9x to 2.4x the steps/s of every write alone; more than two in
#: flight gain nothing).
_IN_FLIGHT: Final = 2
#: The most writes one group commit takes; the rest wait for the next.
_GROUP_MAX: Final = 200


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
        # One connection kept out of the pool for calls that come one after another (a turn's
        # steps): checking one out and back in costs more Python than a statement does. A call
        # that finds it in use takes one from the pool.
        self._held: AsyncConnection[Any] | None = None
        self._held_busy = False
        # Group commit: while _IN_FLIGHT one-statement writes are in flight, the writes that
        # come meanwhile queue here, and the next transaction commits them all (``_grouped``).
        self._in_flight = 0
        self._group: list[_Queued] = []
        self._grouper: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._wake: Callable[[], None] | None = None
        self._wake_due: Callable[[], None] | None = None
        #: The kinds of notification the engine wants: "r" (runs) and "t" (tasks).
        self._wanted = "rt"
        self._opening: asyncio.Lock | None = None
        # Off, every turn commit and result takes its general transaction instead of its
        # one-statement path (the contract suite shows both write the same rows).
        self._one_statement_paths = True

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
                cursor = await conn.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s",
                    (self._schema,),
                )
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
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"{SCHEMA_NAME}:schema:{schema}",),
                )
                await conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
                cursor = await conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
                    " ORDER BY table_name",
                    (schema,),
                )
                tables = [row[0] for row in await cursor.fetchall()]
                version = await self._check_ours(conn, tables)
                for statements in _MIGRATIONS[version:]:
                    for statement in statements:
                        await conn.execute(statement)
                if version < SCHEMA_VERSION:
                    await conn.execute(
                        "INSERT INTO durable_meta (key, value) VALUES ('schema', %s),"
                        " ('version', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (SCHEMA_NAME, str(SCHEMA_VERSION)),
                    )
        except psycopg.Error as error:
            msg = f"store {self.url}: cannot prepare schema {schema!r}: {_one_line(error)}"
            raise StoreError(msg) from error

    async def _check_ours(self, conn: AsyncConnection[Any], tables: list[str]) -> int:
        if not tables:
            return 0
        where = f"store {self.url} (schema {self._schema!r})"
        if "durable_meta" not in tables:
            shown = ", ".join(tables[:5])
            msg = f"{where} is not an effects.durable store (it holds tables {shown})"
            raise StoreError(msg)
        cursor = await conn.execute("SELECT key, value FROM durable_meta")
        meta: dict[str, str] = dict(await cursor.fetchall())
        if meta.get("schema") != SCHEMA_NAME or not str(meta.get("version", "")).isdigit():
            msg = f"{where} is not an effects.durable store (schema {meta.get('schema')!r})"
            raise StoreError(msg)
        version = int(meta["version"])
        if version > SCHEMA_VERSION:
            msg = (
                f"{where} has schema version {version}, newer than this version of "
                f"effects.durable understands ({SCHEMA_VERSION}); upgrade effect-schedules"
            )
            raise StoreError(msg)
        return version

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
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        pool, self._pool = self._pool, None
        held, self._held = self._held, None
        if pool is not None:
            if held is not None and not self._held_busy:
                # (One a call still uses is closed by that call: see _on_held.)
                await pool.putconn(held)
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
                        await conn.execute(sql.SQL("LISTEN {}").format(channel))
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
    ) -> T:
        """
        Run *fn* on a pooled connection, again with backoff while the server is unreachable (or
        reports a deadlock or serialization failure), for at most ``reconnect_timeout_ms``.
        *again* says an earlier try may have landed already; *once* raises the first
        ``psycopg.OperationalError`` instead of retrying.
        """

        pool = self._conns
        deadline = time.monotonic() + self._options.reconnect_timeout_ms / 1000
        retry = _Retry(again)
        backoff = _FIRST_BACKOFF
        while True:
            try:
                if not self._held_busy:
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
        """*fn* on the held connection (taken from the pool when there is none yet)."""
        self._held_busy = True
        try:
            conn = self._held
            if conn is None:
                conn = await pool.getconn(timeout=max(0.1, deadline - time.monotonic()))
                self._held = conn
            try:
                return await fn(conn, retry)
            finally:
                if self._pool is not pool:
                    # The store was closed while this call ran (its pool is gone): the
                    # connection is this call's alone to close.
                    await conn.close()
                elif conn.info.transaction_status != TransactionStatus.IDLE:
                    # Broken, or cut off inside a statement or a transaction: the pool checks
                    # it (resets or discards it) and the next call takes another.
                    self._held = None
                    await pool.putconn(conn)
        finally:
            self._held_busy = False

    def _channels_for(self, kinds: str) -> str:
        """The channels of *kinds* as a ``text[]`` literal (news of a time alone: every one)."""
        chosen = [channel for kind, channel in self._channels.items() if kind in kinds]
        return _text_array(chosen or self._channels.values())

    async def _notify(self, conn: AsyncConnection[Any], kinds: str = "rtd") -> None:
        if self._options.listen:
            await conn.execute(
                "SELECT pg_notify(c, %s) FROM unnest(%s::text[]) AS c",
                (f"{self._sender}:{kinds}", self._channels_for(kinds)),
            )

    async def _queue_locks(self, conn: AsyncConnection[Any], queues: Sequence[str | None]) -> None:
        """Take the flow-control locks of *queues*, by name (one order for every transaction)."""
        for queue in sorted({q for q in queues if q is not None}):
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"{SCHEMA_NAME}:queue:{self._schema}:{queue}",),
            )

    @staticmethod
    async def _insert_events(
        conn: AsyncConnection[Any], run_id: str, events: Sequence[NewEvent]
    ) -> None:

        if not events:
            return
        async with conn.cursor() as cursor:
            await cursor.executemany(
                _EVENT_INSERT,
                [(run_id, e.seq, e.name, e.level, e.at, dumps(e.data)) for e in events],
            )

    @staticmethod
    def _events_json(events: Sequence[NewEvent]) -> dict[str, Any]:
        """*events* as ``_EVENTS_FROM`` reads them: ``[[seq, name, level, at, "data"]]``."""
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

        # One statement: the run, its events and the notification, or nothing at all.
        statement: LiteralString = (
            "WITH made AS (INSERT INTO runs (run_id, workflow, version, status, input,"
            " created_at, updated_at, lease_token, lease_until) VALUES (%(id)s,"
            " %(workflow)s, %(version)s, %(status)s, %(input)s, %(now)s, %(now)s,"
            " %(token)s, %(until)s) ON CONFLICT (run_id) DO NOTHING RETURNING run_id, input),"
            f" trail AS ({_EVENTS_FROM.format(source='made')}),"
            " hint AS (SELECT pg_notify(c, %(sender)s) FROM made,"
            " unnest(%(channels)s::text[]) AS c WHERE %(listen)s)"
            " SELECT (SELECT COUNT(*) FROM made), (SELECT COUNT(*) FROM hint),"
            " (SELECT input FROM made)"
        )
        params = {
            "id": run.run_id,
            "workflow": run.workflow,
            "version": run.version,
            "status": "pending" if leased is None else "running",
            "input": run.input,
            "now": run.now,
            "token": leased,
            "until": None if leased is None else run.lease_until,
            **self._events_json(events),
            **self._hint_params("r"),
            # A leased run is this engine's to run: no one else needs waking for it.
            **({} if leased is None else {"listen": False}),
        }

        def made(row: Any, _: int) -> Run | ClaimedRun | _Taken | None:
            if row is None or row[0] != 1:
                return _TAKEN
            if leased is None:
                return None
            created = Run(run.run_id, run.workflow, run.version, "running", loads(row[2]),
                          None, None, 0, run.now, run.now)  # fmt: skip
            return ClaimedRun(created, leased, ())

        async def taken(conn: AsyncConnection[Any]) -> Run | ClaimedRun | None:
            cursor = await conn.execute(
                f"SELECT {_RUN_COLUMNS}, lease_token FROM runs WHERE run_id = %s", (run.run_id,)
            )
            row = await cursor.fetchone()
            if row is None:
                return None
            if leased is not None and row[-1] == leased and row[3] == "running":
                # A retry after a lost reply: the first try made the run, leased to us.
                return ClaimedRun(run_of(row), leased, ())
            return run_of(row)

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Run | ClaimedRun | None:
            cursor = await conn.execute(statement, params)
            result = made(await cursor.fetchone(), cursor.rowcount)
            return await taken(conn) if isinstance(result, _Taken) else result

        async def look(conn: AsyncConnection[Any], _: _Retry) -> Run | ClaimedRun | None:
            return await taken(conn)

        try:
            result = await self._grouped(run.run_id, statement, params, made, go)
        except psycopg.DataError as error:
            raise self._payload_error(error, f"input of run {run.run_id!r}") from error
        # The id was taken (in a group commit, the look at who took it comes after).
        return await self._call(look) if isinstance(result, _Taken) else result

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Run | None:
            cursor = await conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,)
            )
            row = await cursor.fetchone()
            return None if row is None else run_of(row)

        return await self._call(go)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        stale_before: int | None = None,
    ) -> list[Run]:
        """Runs newest first, filtered (see ``Store.list_runs``)."""
        where: list[str] = []
        params: list[object] = []
        if status is not None:
            where.append("status = %s")
            params.append(status)
        if workflow is not None:
            where.append("workflow = %s")
            params.append(workflow)
        if stale_before is not None:
            where.append(
                "status = 'suspended' AND run_id IN (SELECT run_id FROM checkpoints WHERE"
                " kind = 'remote' AND status IN ('pending', 'running') AND dispatched_at < %s)"
            )
            params.append(stale_before)
        clause = f"WHERE {' AND '.join(where)}" if where else ""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[Run]:
            cursor = await conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs {clause}"  # pyright: ignore[reportArgumentType]
                ' ORDER BY created_at DESC, run_id COLLATE "C" LIMIT %s',
                (*params, limit),
            )
            return [run_of(row) for row in await cursor.fetchall()]

        return await self._call(go)

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints by sequence number."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[Checkpoint]:
            return await self._checkpoints(conn, run_id)

        return await self._call(go)

    @staticmethod
    async def _checkpoints(conn: AsyncConnection[Any], run_id: str) -> list[Checkpoint]:
        cursor = await conn.execute(
            f"SELECT {_CHECKPOINT_READ} FROM checkpoints WHERE run_id = %s ORDER BY seq",
            (run_id,),
        )
        return [checkpoint_of(row) for row in await cursor.fetchall()]

    async def events(self, run_id: str) -> list[Event]:
        """The run's events, oldest first."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> list[Event]:
            cursor = await conn.execute(
                "SELECT name, level, at, seq, data FROM events WHERE run_id = %s ORDER BY id",
                (run_id,),
            )
            return [
                Event(name, level, at, seq, json.loads(data))
                for name, level, at, seq, data in await cursor.fetchall()
            ]

        return await self._call(go)

    async def get_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        """One checkpoint, read afresh."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Checkpoint | None:
            cursor = await conn.execute(
                f"SELECT {_CHECKPOINT_READ} FROM checkpoints WHERE run_id = %s AND seq = %s",
                (run_id, seq),
            )
            row = await cursor.fetchone()
            return None if row is None else checkpoint_of(row)

        return await self._call(go)

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
        if not workflows or limit <= 0:
            return []
        names = _text_array(name for name, _ in workflows)
        versions = _text_array(version for _, version in workflows)
        # One token for the runs of this call: a (run, token) pair is still unique, and a retry
        # after a lost commit finds what the first try claimed by it.
        token = f"{owner}:{secrets.token_hex(6)}"

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> list[ClaimedRun]:
            # The claim, and pipelined behind it in the same implicit transaction (one round
            # trip), the claimed runs with their checkpoints, read by the token from the index
            # of running runs. The read must be a later statement: the claim's UPDATE sees a
            # result committed after the statement began (and clears its woken flag), which a
            # read in the same statement would not. On a retry after a lost reply, the runs the
            # first try took are found the same way, and count against the limit (a scan, but
            # only then).
            taken = (
                "LIMIT GREATEST(0, %(limit)s - (SELECT COUNT(*) FROM runs"
                " WHERE lease_token = %(token)s))"
                if retry.again
                else "LIMIT %(limit)s"
            )
            params = {
                "now": now,
                "names": names,
                "versions": versions,
                "limit": limit,
                "token": token,
                "until": lease_until,
            }
            async with conn.pipeline():
                await conn.execute(
                    f"WITH picked AS (SELECT run_id FROM runs, {_NO_FLUSH}"
                    " WHERE (status = 'pending' OR (status = 'suspended' AND wake_at <= %(now)s))"
                    " AND (workflow, version) IN"
                    " (SELECT * FROM unnest(%(names)s::text[], %(versions)s::text[]))"
                    f' ORDER BY updated_at, run_id COLLATE "C" {taken}'
                    " FOR UPDATE OF runs SKIP LOCKED)"
                    " UPDATE runs SET status = 'running', lease_token = %(token)s,"
                    " lease_until = %(until)s, woken = false FROM picked"
                    " WHERE runs.run_id = picked.run_id",
                    params,
                )
                cursor = await conn.execute(
                    f"SELECT {_RUN_COLUMNS_OF_R}, {_CHECKPOINT_COLUMNS_OF_C} FROM runs r"
                    " LEFT JOIN checkpoints c ON c.run_id = r.run_id WHERE r.status = 'running'"
                    " AND r.lease_token = %(token)s ORDER BY r.run_id, c.seq",
                    {"token": token},
                )
            runs: list[Run] = []
            by_run: dict[str, list[Checkpoint]] = {}
            width = len(RUN_COLUMNS)
            for row in await cursor.fetchall():
                if row[0] not in by_run:
                    runs.append(run_of(row[:width]))
                    by_run[row[0]] = []
                if row[width] is not None:
                    by_run[row[0]].append(checkpoint_of(row[width:]))
            # Oldest first, as they were picked (the RETURNING order is not guaranteed).
            runs.sort(key=lambda r: (r.updated_at, r.run_id))
            return [ClaimedRun(run, token, by_run[run.run_id]) for run in runs]

        return await self._call(go)

    async def renew_lease(self, run_id: str, token: str, lease_until: int) -> bool:
        """Extend the lease *token* holds; ``False`` if it no longer holds the run."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> bool:
            cursor = await conn.execute(
                f"UPDATE runs SET lease_until = %s FROM {_NO_FLUSH} WHERE run_id = %s"
                " AND lease_token = %s AND status = 'running'",
                (lease_until, run_id, token),
            )
            return cursor.rowcount == 1

        return await self._call(go)

    async def _give_back(self, run_id: str, token: str, now: int) -> None:
        """
        After a retry of a commit met a stale lease, the first try may have landed (its reply
        was lost with the connection) and the turn cannot tell: if *token* still holds the run,
        make it pending, so the next turn replays from what was recorded.
        """

        async def go(conn: AsyncConnection[Any], _: _Retry) -> None:
            async with conn.transaction():
                cursor = await conn.execute(
                    "UPDATE runs SET status = 'pending', lease_token = NULL, lease_until = NULL,"
                    " updated_at = %s WHERE run_id = %s AND lease_token = %s"
                    " AND status = 'running'",
                    (now, run_id, token),
                )
                if cursor.rowcount:
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
            settled = [w.checkpoint for w in commit.checkpoints if _gives_up(w.checkpoint)]
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
                    cursor = await conn.execute(
                        "DELETE FROM tasks WHERE run_id = %s AND seq = %s AND status IN"
                        " ('queued', 'waiting') RETURNING queue",
                        (task.run_id, task.seq),
                    )
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
            if not self._one_statement_paths:
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
        cursor = await conn.execute(
            "WITH gone AS (DELETE FROM tasks WHERE run_id = %(run)s"
            " AND seq = ANY(%(seqs)s::integer[]) AND status IN ('queued', 'waiting')"
            " RETURNING queue, seq, attempt, task_id, false AS claimed),"
            " kept AS (UPDATE tasks SET status = 'withdrawn' WHERE run_id = %(run)s"
            " AND seq = ANY(%(seqs)s::integer[]) AND status = 'claimed'"
            " RETURNING NULL::text AS queue, seq, attempt, task_id, true AS claimed),"
            " trail AS (INSERT INTO events (run_id, seq, name, level, at, data)"
            " SELECT %(run)s, w.seq, 'step.withdrawn', 'info', %(now)s,"
            " json_build_object('attempt', w.attempt, 'claimed', w.claimed)::text"
            " FROM (SELECT * FROM gone UNION ALL SELECT * FROM kept ORDER BY task_id) w)"
            " SELECT queue FROM gone",
            {"run": run_id, "seqs": list(seqs), "now": now},
        )
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
        in autocommit, one round trip): the advance's compare-and-set on the lease, its events,
        then the checkpoint and task rows, inserted only if the lease held. A checkpoint row
        that exists already fails the statement (unique violation), so nothing of it lands.
        """
        statement, params = self._advance(commit, runs=hint, tasks=bool(commit.tasks))
        parts: list[str] = []
        for n, write in enumerate(commit.checkpoints):
            cp: Checkpoint = write.checkpoint
            parts.append(_CHECKPOINT_FROM_HELD.replace("%(", f"%(c{n}_"))
            params.update(
                _prefixed(
                    f"c{n}_",
                    (
                        ("seq", cp.seq),
                        ("name", cp.name),
                        ("kind", cp.kind),
                        ("step_id", cp.step_id),
                        ("status", cp.status),
                        ("attempts", cp.attempts),
                        ("wake_at", cp.wake_at),
                        ("output", write.output),
                        ("error", error_text(cp.error)),
                        ("final", cp.final),
                        ("retry_state", None if cp.retry_state is None else dumps(cp.retry_state)),
                        ("grp", cp.group),
                        ("queue", cp.queue),
                        ("dispatched_at", cp.dispatched_at),
                        ("input", write.input),
                        ("timeout_ms", cp.timeout_ms),
                        ("lease_ms", cp.lease_ms),
                        ("redispatches", cp.redispatches),
                        ("heartbeat_at", cp.heartbeat_at),
                        ("created_at", cp.created_at),
                        ("updated_at", commit.now),
                    ),
                )
            )
            if cp.errors:
                parts.append(_ERRORS_FROM_HELD.replace("%(", f"%(e{n}_"))
                params.update(
                    _prefixed(f"e{n}_", (("seq", cp.seq), ("errors", errors_text(cp.errors))))
                )
        for n, task in enumerate(commit.tasks):
            parts.append(_TASK_FROM_HELD.replace("%(", f"%(t{n}_"))
            params.update(
                _prefixed(
                    f"t{n}_",
                    (
                        ("seq", task.seq),
                        ("step_id", task.step_id),
                        ("name", task.name),
                        ("grp", task.group),
                        ("input", task.input),
                        ("attempt", task.attempt),
                        ("available_at", task.available_at),
                        ("redispatched", task.redispatched),
                        ("created_at", commit.now),
                    ),
                )
            )
        rows = "".join(f" w{n} AS ({part})," for n, part in enumerate(parts))
        # The advance's statement begins "WITH held AS (...), trail ...": the rows go after it.
        head, tail = statement.split(" trail AS (", 1)
        return (head + rows + " trail AS (" + tail), params  # pyright: ignore[reportReturnType]

    async def _write_checkpoint(
        self, conn: AsyncConnection[Any], commit: TurnCommit, write: Any
    ) -> psycopg.AsyncCursor[Any]:
        """Insert or update (compare-and-set on ``rev``) one row; its cursor (row count 1: done)."""

        cp: Checkpoint = write.checkpoint
        values = (
            cp.name,
            cp.kind,
            cp.step_id,
            cp.status,
            cp.attempts,
            cp.wake_at,
            write.output,
            error_text(cp.error),
            cp.final,
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
            return await conn.execute(
                "INSERT INTO checkpoints (name, kind, step_id, status, attempts, wake_at,"
                " output, error, final, retry_state, grp, queue,"
                " dispatched_at, input, timeout_ms, lease_ms, redispatches, heartbeat_at,"
                " updated_at, run_id, seq, created_at) VALUES (%s, %s, %s, %s, %s, %s,"
                " %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                " %s, %s, %s, %s) ON CONFLICT (run_id, seq) DO NOTHING",
                (*values, commit.run_id, cp.seq, cp.created_at),
            )
        return await conn.execute(
            "UPDATE checkpoints SET name = %s, kind = %s, step_id = %s, status = %s,"
            " attempts = %s, wake_at = %s, output = %s, error = %s,"
            " final = %s, retry_state = %s, grp = %s, queue = %s,"
            " dispatched_at = %s, input = %s, timeout_ms = %s, lease_ms = %s,"
            " redispatches = %s, heartbeat_at = %s, updated_at = %s, rev = rev + 1"
            " WHERE run_id = %s AND seq = %s AND rev = %s",
            (*values, commit.run_id, cp.seq, write.expected_rev),
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
            await conn.execute(
                "DELETE FROM step_errors WHERE run_id = %s AND seq = %s", (run_id, cp.seq)
            )
        if cp.errors:
            await conn.execute(
                "INSERT INTO step_errors (run_id, seq, n, error) SELECT %s, %s, e.n, e.v"
                " FROM json_array_elements_text(%s::json) WITH ORDINALITY AS e(v, n)",
                (run_id, cp.seq, errors_text(cp.errors)),
            )

    async def _enqueue(self, conn: AsyncConnection[Any], task: NewTask, now: int) -> bool:
        """Insert *task*, queued, or waiting when its queue has no free slot; whether queued."""

        status = "queued"
        if task.queue is not None and task.queue_limit is not None:
            cursor = await conn.execute(
                f"SELECT COUNT(*) FROM tasks WHERE queue = %s AND status IN {_SLOT_HOLDERS}",
                (task.queue,),
            )
            row = await cursor.fetchone()
            if row is not None and row[0] >= task.queue_limit:
                status = "waiting"
        await conn.execute(
            "INSERT INTO tasks (run_id, seq, step_id, name, grp, queue, queue_limit, input,"
            " attempt, status, available_at, redispatched, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
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
                task.redispatched,
                now,
            ),
        )
        if status == "waiting":
            await conn.execute(
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
        return status == "queued"

    async def _admit_waiting(self, conn: AsyncConnection[Any], queue: str, now: int) -> bool:
        """Admit the oldest waiting attempts of *queue* into its free slots (its lock held)."""

        admitted = False
        while True:
            cursor = await conn.execute(
                "SELECT task_id, run_id, seq, attempt, queue_limit FROM tasks"
                " WHERE queue = %s AND status = 'waiting' ORDER BY task_id LIMIT 1",
                (queue,),
            )
            row = await cursor.fetchone()
            if row is None:
                return admitted
            cursor = await conn.execute(
                f"SELECT COUNT(*) FROM tasks WHERE queue = %s AND status IN {_SLOT_HOLDERS}",
                (queue,),
            )
            held = await cursor.fetchone()
            if held is not None and held[0] >= (row[4] or 1):
                return admitted
            await conn.execute(
                "UPDATE tasks SET status = 'queued', available_at = GREATEST(available_at, %s)"
                " WHERE task_id = %s",
                (now, row[0]),
            )
            await conn.execute(
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
            admitted = True

    async def _release_slots(
        self, conn: AsyncConnection[Any], queues: Sequence[str | None], now: int
    ) -> bool:
        admitted = False
        for queue in sorted({q for q in queues if q is not None}):
            admitted = await self._admit_waiting(conn, queue, now) or admitted
        return admitted

    async def record_local_step(
        self, run_id: str, token: str, *, seq: int, name: str, output: str, started: int, now: int
    ) -> None:
        """A local step that succeeded on its first attempt (see ``Store.record_local_step``)."""

        def insert(again: bool) -> LiteralString:
            # The share lock holds off a recovery of the run until this insert commits.
            return (
                "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts,"
                " output, created_at, updated_at)"
                " SELECT %(run)s, %(seq)s, %(name)s, 'local', %(run)s || ':' || %(seq)s,"
                " 'completed', 1, %(output)s, %(started)s, %(now)s"
                " WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = %(run)s"
                " AND lease_token = %(token)s AND status = 'running' FOR SHARE)"
                + (" ON CONFLICT (run_id, seq) DO NOTHING" if again else "")
            )

        params = {
            "run": run_id,
            "seq": seq,
            "name": name,
            "output": output,
            "started": started,
            "now": now,
            "token": token,
        }

        def inserted(_: Any, count: int) -> None:
            if count != 1:
                raise StaleTurnError(f"run {run_id}: the lease was taken over")

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> None:
            cursor = await conn.execute(insert(retry.again), params)
            if cursor.rowcount == 1:
                return
            if retry.again and await self._lease_holds(conn, run_id, token):
                return  # the first try landed: only this turn could have written the row
            inserted(None, cursor.rowcount)

        try:
            await self._grouped(run_id, insert(False), params, inserted, go)
        except psycopg.DataError as error:
            raise self._payload_error(error, f"output of local step {name!r}") from error

    @staticmethod
    async def _lease_holds(conn: AsyncConnection[Any], run_id: str, token: str) -> bool:
        cursor = await conn.execute(
            "SELECT 1 FROM runs WHERE run_id = %s AND lease_token = %s AND status = 'running'",
            (run_id, token),
        )
        return await cursor.fetchone() is not None

    def _advance(
        self, commit: TurnCommit, *, runs: bool, tasks: bool
    ) -> tuple[LiteralString, dict[str, Any]]:
        """
        The run's part of a turn commit, as a compare-and-set on its lease token, with the
        commit's events (written only if it holds): one statement whose row says 1 if it held.
        It notifies (if it held) for *runs* and *tasks* (see ``wake_hint``).
        """
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
        guard = "WHERE run_id = %(run)s AND lease_token = %(token)s AND status = 'running'"
        if adv.action == "continue" and adv.lease_until is None:
            # A share lock, not a write: a step's commit rewrites no run row, yet no recovery
            # can take the run before this transaction ends.
            held = f"SELECT run_id FROM runs {guard} FOR SHARE"
        elif adv.action == "continue":
            held = f"UPDATE runs SET lease_until = %(until)s, updated_at = %(now)s {guard}"
            params["until"] = adv.lease_until
        elif adv.action == "suspend":
            held = (
                "UPDATE runs SET status = CASE WHEN woken THEN 'pending' ELSE 'suspended' END,"
                " wake_at = %(wake)s, lease_token = NULL, lease_until = NULL,"
                f" updated_at = %(now)s {guard}"
            )
            params["wake"] = adv.wake_at
        elif adv.action == "finish":
            held = (
                "UPDATE runs SET status = %(status)s, output = %(output)s,"
                " error = %(error)s, wake_at = NULL, lease_token = NULL, lease_until = NULL,"
                f" updated_at = %(now)s {guard}"
            )
            params.update(status=adv.status, output=adv.output, error=error_text(adv.error))
        else:
            held = (
                "UPDATE runs SET status = 'pending', lease_token = NULL, lease_until = NULL,"
                f" updated_at = %(now)s {guard}"
            )
        if not held.startswith("SELECT"):
            held += " RETURNING run_id"
        statement = (
            f"WITH held AS ({held}), trail AS ({_EVENTS_FROM.format(source='held')}),"
            " hint AS (SELECT pg_notify(c, %(sender)s) FROM held,"
            " unnest(%(channels)s::text[]) AS c WHERE %(listen)s)"
            " SELECT (SELECT COUNT(*) FROM held), (SELECT COUNT(*) FROM hint)"
        )
        return statement, params

    # -- workers ----------------------------------------------------------------------------------

    async def claim_tasks(
        self, *, groups: Sequence[str], now: int, claim_until: int, worker: str, limit: int
    ) -> list[Task]:
        """Claim up to *limit* queued tasks of *groups* available at *now*."""
        if not groups or limit <= 0:
            return []
        nonce = secrets.token_hex(8)
        task_columns = ", ".join(f"t.{c}" for c in _TASK_COLUMNS.split(", "))

        async def go(conn: AsyncConnection[Any], retry: _Retry) -> list[Task]:
            tasks: list[Task] = []
            if retry.again:
                # The first try may have claimed some before its reply was lost.
                cursor = await conn.execute(
                    f"SELECT {task_columns}, c.progress, c.timeout_ms, c.lease_ms FROM tasks t"
                    " LEFT JOIN checkpoints c ON c.run_id = t.run_id AND c.seq = t.seq"
                    " WHERE t.claim_nonce = %s AND t.status = 'claimed' ORDER BY t.task_id",
                    (nonce,),
                )
                tasks = [task_of(row) for row in await cursor.fetchall()]
            if len(tasks) >= limit:
                return tasks
            # One statement: the claim, the pickup beat on each checkpoint (which renews a
            # lost-dispatch lease) and the step.started events.
            cursor = await conn.execute(
                f"WITH picked AS (SELECT task_id FROM tasks, {_NO_FLUSH} WHERE status = 'queued'"
                " AND grp = ANY(%(groups)s::text[]) AND available_at <= %(now)s ORDER BY task_id"
                " LIMIT %(limit)s FOR UPDATE OF tasks SKIP LOCKED),"
                " claimed AS (UPDATE tasks t SET status = 'claimed', claimed_by = %(worker)s,"
                " claim_until = %(until)s, claim_nonce = %(nonce)s FROM picked"
                f" WHERE t.task_id = picked.task_id RETURNING {task_columns}),"
                " beat AS (UPDATE checkpoints c SET status = 'running', heartbeat_at = %(now)s,"
                " wake_at = CASE WHEN c.lease_ms IS NULL THEN c.wake_at"
                " ELSE %(now)s + c.lease_ms END, updated_at = %(now)s, rev = c.rev + 1"
                " FROM claimed t WHERE c.run_id = t.run_id AND c.seq = t.seq"
                " AND c.status IN ('pending', 'running') AND c.attempts = t.attempt"
                " RETURNING c.run_id, c.seq, c.progress, c.timeout_ms, c.lease_ms),"
                " started AS (INSERT INTO events (run_id, seq, name, level, at, data)"
                " SELECT t.run_id, t.seq, 'step.started', 'info', %(now)s,"
                " (jsonb_build_object('attempt', t.attempt, 'kind', 'remote',"
                " 'worker', %(worker)s::text) || CASE WHEN t.redispatched"
                " THEN '{\"redispatched\": true}'::jsonb ELSE '{}'::jsonb END)::text"
                " FROM (SELECT * FROM claimed ORDER BY task_id) t)"
                f" SELECT {task_columns}, b.progress, b.timeout_ms, b.lease_ms FROM claimed t"
                " LEFT JOIN beat b ON b.run_id = t.run_id AND b.seq = t.seq ORDER BY t.task_id",
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
            cursor = await conn.execute(
                f"UPDATE tasks SET claim_until = %s FROM {_NO_FLUSH} WHERE task_id = %s"
                " AND claimed_by = %s AND status = 'claimed'",
                (claim_until, task_id, worker),
            )
            return cursor.rowcount == 1

        return await self._call(go)

    async def heartbeat(
        self, task: Task, *, now: int, progress: str | None, lease_until: int | None
    ) -> bool:
        """Persist a worker's beat (see ``Store.heartbeat``)."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> bool:
            cursor = await conn.execute(
                "UPDATE checkpoints SET heartbeat_at = %(now)s,"
                " progress = COALESCE(%(progress)s::text, progress),"
                " wake_at = CASE WHEN lease_ms IS NULL OR %(lease)s::bigint IS NULL THEN wake_at"
                " ELSE %(lease)s::bigint END, updated_at = %(now)s, rev = rev + 1"
                f" FROM {_NO_FLUSH}"
                " WHERE run_id = %(run)s AND seq = %(seq)s AND attempts = %(attempt)s"
                " AND status IN ('pending', 'running')",
                {
                    "now": now,
                    "progress": progress,
                    "lease": lease_until,
                    "run": task.run_id,
                    "seq": task.seq,
                    "attempt": task.attempt,
                },
            )
            return cursor.rowcount == 1

        return await self._call(go)

    async def release_claim(self, task_id: int, worker: str, *, now: int) -> None:
        """Put a claimed task back in the queue (a withdrawn one goes, freeing its slot)."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> str | None:
            async with conn.transaction():
                cursor = await conn.execute(
                    "UPDATE tasks SET status = 'queued', claimed_by = NULL, claim_until = NULL"
                    " WHERE task_id = %s AND claimed_by = %s AND status = 'claimed'",
                    (task_id, worker),
                )
                if cursor.rowcount:
                    await self._notify(conn)
                    return None
                cursor = await conn.execute(
                    "SELECT COALESCE(queue, '') FROM tasks WHERE task_id = %s"
                    " AND claimed_by = %s AND status = 'withdrawn'",
                    (task_id, worker),
                )
                row = await cursor.fetchone()
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
                own = await conn.execute(
                    "DELETE FROM tasks WHERE task_id = %s AND claimed_by = %s"
                    " RETURNING queue, status",
                    (task.task_id, worker),
                )
                rows = await own.fetchall()
                await self._release_slots(conn, [row[0] for row in rows], now)
                if any(row[1] == "withdrawn" for row in rows):
                    await conn.execute(
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

    def _result_statement(
        self, task: Task, worker: str, outcome: TaskOutcome, now: int
    ) -> tuple[LiteralString, dict[str, Any]]:
        """
        ``record_result`` as one statement, for a task of no queue. Each step's condition reads
        the step before it (a one-time filter, run before the step scans), so the locks are
        taken in the store's one order: the run, task rows, the checkpoint.
        """
        params: dict[str, Any] = {
            "run": task.run_id,
            "seq": task.seq,
            "task": task.task_id,
            "worker": worker,
            "attempt": task.attempt,
            "now": now,
            "progress": outcome.progress,
            # A task of no queue frees no slot: only the run it wakes is news.
            **self._hint_params("r"),
        }
        appended = ""
        if outcome.error is None:
            # Other attempts of a step that completes are moot. A settled failure is what replay
            # raises, and the workflow may have acted on it: a late success never rewrites it.
            moot = (
                " moot AS (DELETE FROM tasks WHERE run_id = %(run)s AND seq = %(seq)s"
                f" AND task_id <> %(task)s AND {_NOT_WITHDRAWN}"
                " AND EXISTS (SELECT 1 FROM checkpoints WHERE run_id = %(run)s AND seq = %(seq)s"
                " AND status <> 'completed' AND NOT (status = 'failed' AND final)) RETURNING 1),"
            )
            change = (
                "UPDATE checkpoints SET status = 'completed', output = %(output)s::text,"
                " error = NULL, wake_at = NULL, final = false, updated_at = %(now)s,"
                " rev = rev + 1, progress = COALESCE(%(progress)s::text, progress)"
                " WHERE run_id = %(run)s AND seq = %(seq)s AND status <> 'completed'"
                f" AND NOT (status = 'failed' AND final) AND {_NOT_WITHDRAWN}"
                " AND (SELECT COUNT(*) FROM moot) >= 0"
            )
            params["output"] = outcome.output
            event = ("step.completed", "info", {"attempt": task.attempt, "kind": "remote"})
        else:
            moot = ""
            error = outcome.error.to_json()
            change = (
                "UPDATE checkpoints SET status = 'failed', error = %(error)s,"
                " final = false, wake_at = NULL,"
                " updated_at = %(now)s, rev = rev + 1 WHERE run_id = %(run)s AND seq = %(seq)s"
                " AND status IN ('pending', 'running') AND attempts = %(attempt)s"
                f" AND {_NOT_WITHDRAWN}"
            )
            appended = f" errs AS ({_ERROR_APPEND}),"
            params["error"] = dumps(error)
            level = "warning" if outcome.error.retryable else "error"
            event = (
                "step.failed",
                level,
                {"attempt": task.attempt, "kind": "remote", "error": error},
            )
        params.update(ev_name=event[0], ev_level=event[1], ev_data=dumps(event[2]))
        params["discarded"] = dumps(discarded(task, outcome))
        statement = (
            "WITH lk AS (SELECT run_id FROM runs WHERE run_id = %(run)s FOR NO KEY UPDATE),"
            " own AS (DELETE FROM tasks WHERE task_id = %(task)s AND claimed_by = %(worker)s"
            " AND (SELECT COUNT(*) FROM lk) >= 0 RETURNING status),"
            " discard AS (INSERT INTO events (run_id, seq, name, level, at, data)"
            " SELECT %(run)s, %(seq)s, 'step.result_discarded', 'warning', %(now)s,"
            " %(discarded)s FROM own WHERE status = 'withdrawn'),"
            f"{moot}"
            f" up AS ({change} RETURNING run_id),{appended}"
            " trail AS (INSERT INTO events (run_id, seq, name, level, at, data)"
            " SELECT run_id, %(seq)s, %(ev_name)s, %(ev_level)s, %(now)s, %(ev_data)s FROM up),"
            " wake AS (UPDATE runs SET woken = true, wake_at = NULL, updated_at = %(now)s,"
            " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
            " WHERE run_id = %(run)s AND status IN ('pending', 'running', 'suspended')"
            " AND EXISTS (SELECT 1 FROM up)),"
            " hint AS (SELECT pg_notify(c, %(sender)s) FROM up,"
            " unnest(%(channels)s::text[]) AS c WHERE %(listen)s)"
            " SELECT (SELECT COUNT(*) FROM up), (SELECT COUNT(*) FROM hint)"
        )
        return statement, params

    @staticmethod
    async def _lock_run(conn: AsyncConnection[Any], run_id: str) -> None:
        await conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR NO KEY UPDATE", (run_id,))

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
        params: dict[str, Any] = {
            "run": run_id,
            "seq": seq,
            "attempt": attempt,
            "now": now,
            **self._hint_params(),
        }
        if outcome.error is None:
            # Other attempts of a step that completes are moot; their rows go first (task rows
            # before checkpoint rows). A completed step has none left, so this changes nothing
            # when the result turns out not to matter.
            released.append(
                await conn.execute(
                    "DELETE FROM tasks WHERE run_id = %(run)s AND seq = %(seq)s AND EXISTS"
                    " (SELECT 1 FROM checkpoints WHERE run_id = %(run)s AND seq = %(seq)s"
                    " AND status <> 'completed' AND NOT (status = 'failed' AND final))"
                    " RETURNING queue",
                    params,
                )
            )
            change = (
                "UPDATE checkpoints SET status = 'completed', output = %(output)s::text,"
                " error = NULL, wake_at = NULL, final = false, updated_at = %(now)s,"
                " rev = rev + 1, progress = COALESCE(%(progress)s::text, progress)"
                " WHERE run_id = %(run)s AND seq = %(seq)s AND status <> 'completed'"
                " AND NOT (status = 'failed' AND final)"
            )
            params.update(output=outcome.output, progress=outcome.progress)
            event = ("step.completed", "info", {"attempt": attempt, "kind": "remote"})
            appended = ""
        else:
            appended = f" errs AS ({_ERROR_APPEND}),"
            if outcome.progress is not None:
                await conn.execute(
                    "UPDATE checkpoints SET progress = %s WHERE run_id = %s AND seq = %s"
                    " AND status <> 'completed' AND NOT (status = 'failed' AND final)",
                    (outcome.progress, run_id, seq),
                )
            error = outcome.error.to_json()
            change = (
                "UPDATE checkpoints SET status = 'failed', error = %(error)s,"
                " final = false, wake_at = NULL,"
                " updated_at = %(now)s, rev = rev + 1 WHERE run_id = %(run)s AND seq = %(seq)s"
                " AND status IN ('pending', 'running') AND attempts = %(attempt)s"
            )
            params["error"] = dumps(error)
            level = "warning" if outcome.error.retryable else "error"
            event = ("step.failed", level, {"attempt": attempt, "kind": "remote", "error": error})
        params.update(ev_name=event[0], ev_level=event[1], ev_data=dumps(event[2]))
        applied = await conn.execute(
            f"WITH up AS ({change} RETURNING run_id),{appended}"
            " trail AS (INSERT INTO events (run_id, seq, name, level, at, data)"
            " SELECT run_id, %(seq)s, %(ev_name)s, %(ev_level)s, %(now)s, %(ev_data)s FROM up),"
            " wake AS (UPDATE runs SET woken = true, wake_at = NULL, updated_at = %(now)s,"
            " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
            " WHERE run_id = %(run)s AND status IN ('pending', 'running', 'suspended')"
            " AND EXISTS (SELECT 1 FROM up)),"
            " hint AS (SELECT pg_notify(c, %(sender)s) FROM up,"
            " unnest(%(channels)s::text[]) AS c WHERE %(listen)s)"
            " SELECT (SELECT COUNT(*) FROM up), (SELECT COUNT(*) FROM hint)",
            params,
        )
        queues = [row[0] for cursor in released for row in await cursor.fetchall()]
        await self._release_slots(conn, queues, now)
        row = await applied.fetchone()
        return row is not None and row[0] == 1

    async def redispatch_pending(self, run_id: str, *, now: int) -> int:
        """Re-enqueue the run's pending dispatched steps with attempt + 1; return how many."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> int:
            count = 0
            async with conn.transaction():
                cursor = await conn.execute(
                    "SELECT DISTINCT queue FROM checkpoints WHERE run_id = %s AND kind = 'remote'"
                    " AND status IN ('pending', 'running')",
                    (run_id,),
                )
                await self._queue_locks(conn, [row[0] for row in await cursor.fetchall()])
                await self._lock_run(conn, run_id)
                for cp in await self._checkpoints(conn, run_id):
                    if cp.kind != "remote" or cp.status not in ("pending", "running"):
                        continue
                    attempt = cp.attempts + 1
                    cursor = await conn.execute(
                        "DELETE FROM tasks WHERE run_id = %s AND seq = %s AND status IN"
                        " ('queued', 'waiting') RETURNING queue, queue_limit",
                        (run_id, cp.seq),
                    )
                    withdrawn = await cursor.fetchall()
                    limit = next((row[1] for row in withdrawn if row[1] is not None), None)
                    if limit is None:
                        cursor = await conn.execute(
                            "SELECT queue_limit FROM tasks WHERE run_id = %s AND seq = %s LIMIT 1",
                            (run_id, cp.seq),
                        )
                        held = await cursor.fetchone()
                        limit = None if held is None else held[0]
                    await conn.execute(
                        "UPDATE checkpoints SET status = 'pending', attempts = %(attempt)s,"
                        " dispatched_at = %(now)s, redispatches = redispatches + 1,"
                        " wake_at = CASE WHEN lease_ms IS NULL THEN wake_at"
                        " ELSE %(now)s + lease_ms END, updated_at = %(now)s, rev = rev + 1"
                        " WHERE run_id = %(run)s AND seq = %(seq)s",
                        {"attempt": attempt, "now": now, "run": run_id, "seq": cp.seq},
                    )
                    await self._enqueue(
                        conn,
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
                    await self._release_slots(conn, [row[0] for row in withdrawn], now)
                    await conn.execute(
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
            # One read, so a pass with nothing to do costs one round trip and takes no lock.
            cursor = await conn.execute(
                "(SELECT 'run', NULL::bigint, run_id, NULL FROM runs WHERE status = 'running'"
                " AND lease_until < %(now)s ORDER BY lease_until LIMIT 500) UNION ALL"
                " (SELECT 'task', task_id, run_id, queue FROM tasks WHERE status = 'claimed'"
                " AND claim_until < %(now)s ORDER BY claim_until LIMIT 500) UNION ALL"
                " (SELECT 'gone', task_id, run_id, queue FROM tasks WHERE status = 'withdrawn'"
                " AND claim_until < %(now)s ORDER BY claim_until LIMIT 500)",
                {"now": now},
            )
            return await cursor.fetchall()

        found = await self._call(expired)
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
    ) -> str | None:

        async with conn.transaction():
            cursor = await conn.execute(
                "SELECT recovery_attempts FROM runs WHERE run_id = %s AND status = 'running'"
                " AND lease_until < %s FOR NO KEY UPDATE SKIP LOCKED",
                (run_id, now),
            )
            row = await cursor.fetchone()
            if row is None:
                return None  # another engine recovered it, or its turn renewed the lease
            count: int = row[0]
            cursor = await conn.execute(
                "SELECT 1 FROM checkpoints WHERE run_id = %s AND kind = 'remote'"
                " AND timeout_ms IS NOT NULL AND status IN ('pending', 'running') LIMIT 1",
                (run_id,),
            )
            if await cursor.fetchone() is not None:
                # Its dispatcher died awaiting a liveness step: a worker may still report, so
                # park the run on the reconcile wake; this is not counted as a recovery.
                await conn.execute(
                    "UPDATE runs SET status = 'suspended', wake_at = %s, lease_token = NULL,"
                    " lease_until = NULL, updated_at = %s WHERE run_id = %s",
                    (now + reconcile_ms, now, run_id),
                )
                await conn.execute(
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
                await self._notify(conn)
                return "reconciling"
            if max_recovery_attempts is not None and count >= max_recovery_attempts:
                error = dead_run(count, max_recovery_attempts)
                await conn.execute(
                    "UPDATE runs SET status = 'dead', error = %s, lease_token = NULL,"
                    " lease_until = NULL, updated_at = %s WHERE run_id = %s",
                    (error_text(error), now, run_id),
                )
                verdict = "dead"
                name, level, data = "run.dead", "error", {"recovery_attempts": count}
            else:
                await conn.execute(
                    "UPDATE runs SET status = 'pending', lease_token = NULL,"
                    " lease_until = NULL, recovery_attempts = recovery_attempts + 1,"
                    " updated_at = %s WHERE run_id = %s",
                    (now, run_id),
                )
                verdict = "recovered"
                name, level, data = "run.recovered", "warning", {"recovery_attempts": count + 1}
            await conn.execute(_EVENT_INSERT, (run_id, None, name, level, now, dumps(data)))
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
                "DELETE FROM tasks WHERE task_id = %(task)s AND status = 'withdrawn'"
                " AND (NOT %(expired)s OR claim_until < %(now)s)"
                " AND (%(worker)s::text IS NULL OR claimed_by = %(worker)s::text) RETURNING queue",
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
            cursor = await conn.execute(
                "DELETE FROM tasks WHERE task_id = %s AND status = 'claimed' AND claim_until < %s"
                " RETURNING queue, seq, step_id, attempt",
                (task_id, now),
            )
            row = await cursor.fetchone()
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
            # A lease or claim held until T expires at T + 1 (recovery takes `until < now`).
            cursor = await conn.execute(
                "SELECT LEAST("
                " (SELECT MIN(wake_at) FROM runs WHERE status = 'suspended' AND wake_at > %(n)s),"
                " (SELECT MIN(lease_until) + 1 FROM runs WHERE status = 'running'"
                " AND lease_until >= %(n)s),"
                " (SELECT MIN(available_at) FROM tasks WHERE status = 'queued'"
                " AND available_at > %(n)s),"
                " (SELECT MIN(claim_until) + 1 FROM tasks WHERE status = 'claimed'"
                " AND claim_until >= %(n)s),"
                " (SELECT MIN(claim_until) + 1 FROM tasks WHERE status = 'withdrawn'"
                " AND claim_until >= %(n)s))",
                {"n": now},
            )
            row = await cursor.fetchone()
            return None if row is None else row[0]

        return await self._call(go)

    async def requeue(self, run_id: str, now: int) -> Run:
        """Reset failed checkpoints to a fresh first attempt and make the run pending."""

        async def go(conn: AsyncConnection[Any], _: _Retry) -> Run:
            async with conn.transaction():
                # Attempts still queued or running for the steps reset here must not complete
                # their fresh first attempt: they are withdrawn (queue locks first, by name).
                cursor = await conn.execute(
                    "SELECT seq, queue FROM checkpoints WHERE run_id = %s AND kind = 'remote'"
                    " AND status = 'failed'",
                    (run_id,),
                )
                failed = await cursor.fetchall()
                await self._queue_locks(conn, [queue for _, queue in failed])
                cursor = await conn.execute(
                    f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s FOR NO KEY UPDATE",
                    (run_id,),
                )
                row = await cursor.fetchone()
                if row is None:
                    msg = f"no run with id {run_id!r}"
                    raise LookupError(msg)
                run = run_of(row)
                if run.status not in ("failed", "dead", "cancelled"):
                    msg = (
                        f"run {run_id} is {run.status}; only a failed, dead or cancelled run can"
                        " be retried"
                    )
                    raise ValueError(msg)
                if failed:
                    freed = await self._withdraw(conn, run_id, [seq for seq, _ in failed], now)
                    await self._release_slots(conn, freed, now)
                await conn.execute(
                    "DELETE FROM step_errors WHERE run_id = %(run)s AND seq IN (SELECT seq FROM"
                    " checkpoints WHERE run_id = %(run)s AND status = 'failed')",
                    {"run": run_id},
                )
                cursor = await conn.execute(
                    "UPDATE checkpoints SET status = CASE kind WHEN 'local' THEN 'pending'"
                    " ELSE 'failed' END, attempts = 0, final = false, error = NULL,"
                    " retry_state = NULL,"
                    " wake_at = CASE kind WHEN 'local' THEN NULL ELSE %s::bigint END,"
                    " updated_at = %s, rev = rev + 1 WHERE run_id = %s AND status = 'failed'",
                    (now, now, run_id),
                )
                reset = cursor.rowcount
                cursor = await conn.execute(
                    "UPDATE runs SET status = 'pending', output = NULL, error = NULL,"
                    " wake_at = NULL, woken = false, lease_token = NULL, lease_until = NULL,"
                    " recovery_attempts = 0, updated_at = %s WHERE run_id = %s"
                    f" RETURNING {_RUN_COLUMNS}",
                    (now, run_id),
                )
                new = await cursor.fetchone()
                await conn.execute(
                    _EVENT_INSERT,
                    (
                        run_id,
                        None,
                        "run.requeued",
                        "info",
                        now,
                        dumps({"checkpoints_reset": reset}),
                    ),
                )
                await self._notify(conn)
            assert new is not None
            return run_of(new)

        return await self._call(go)
