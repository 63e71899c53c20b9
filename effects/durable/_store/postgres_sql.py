"""
Every SQL statement of the PostgreSQL store, each written once and named; the guards several of
them share are named fragments, composed here at import time. Parameters are ``%s`` or
``%(name)s``.

Where a guard encodes a rule of ``rules``, its comment names the rule. The one-statement fast
paths (a turn's commit, a result, a start) decide inside SQL: their guards are the fragments
``LEASE_HELD``, ``NOT_SETTLED``, ``COMPLETES``, ``FAILS`` and ``NOT_WITHDRAWN``.
"""

from __future__ import annotations

from typing import Final, LiteralString

from effects.durable._store import listing, rows

SCHEMA_VERSION: Final = 8
DEFAULT_SCHEMA: Final = "effects_durable"

#: ``rules.settled`` of the checkpoint of alias ``c``.
SETTLED: Final = "(c.status = 'completed' OR (c.status = 'failed' AND c.final))"

# Each entry moves the schema from version i to i + 1; a store is upgraded by running the ones it
# lacks, in one transaction, under the schema's advisory lock.
MIGRATIONS: Final[tuple[tuple[LiteralString, ...], ...]] = (
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
        f" checkpoints c WHERE c.run_id = t.run_id AND c.seq = t.seq AND {SETTLED})",
    ),
    (
        # Sagas: how a run was asked to cancel (plainly, or with its compensations first), and
        # the step a dispatched compensation runs (its tasks carry that name).
        "ALTER TABLE runs ADD COLUMN cancel text",
        "ALTER TABLE checkpoints ADD COLUMN handler text",
    ),
    (
        # The dashboard: each checkpoint's effective policy (JSON text, written with the row),
        # runs paged newest first by (created_at, run_id) off an index, and the retrying steps
        # (failed, not settled, a next attempt to come) in a partial index of their own.
        "ALTER TABLE checkpoints ADD COLUMN policy text",
        "DROP INDEX runs_by_created",
        'CREATE INDEX runs_by_created ON runs (created_at DESC, run_id COLLATE "C")',
        # A status or a workflow filter pages off its own range (and counts the workflow's
        # runs by status from the index alone), however rare its runs are.
        'CREATE INDEX runs_by_status_created ON runs (status, created_at DESC, run_id COLLATE "C")',
        "CREATE INDEX runs_by_workflow ON runs"
        ' (workflow, created_at DESC, run_id COLLATE "C", status)',
        "CREATE INDEX checkpoints_retrying ON checkpoints (wake_at, run_id)"
        " WHERE status = 'failed' AND NOT final",
    ),
    (
        # Telemetry: the run's W3C traceparent (one trace per run), which every attempt carries
        # with its workflow's name, so a worker in any process traces and labels it.
        "ALTER TABLE runs ADD COLUMN traceparent text",
        "ALTER TABLE tasks ADD COLUMN traceparent text, ADD COLUMN workflow text",
        # The events tap (``Store.tap``): a session that sets effects_durable.tap to 'on' (and
        # has made its TEMP table durable_tap) gets a copy of each event row it inserts; every
        # other session pays only the WHEN test of one setting per row.
        "CREATE FUNCTION durable_tap() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO pg_temp.durable_tap (run_id, seq, name, level, at, data)"
        " VALUES (NEW.run_id, NEW.seq, NEW.name, NEW.level, NEW.at, NEW.data);"
        " RETURN NULL; END $$",
        "CREATE TRIGGER durable_tap AFTER INSERT ON events FOR EACH ROW"
        " WHEN (current_setting('effects_durable.tap', true) = 'on')"
        " EXECUTE FUNCTION durable_tap()",
    ),
    (
        # Workflow primitives (issue 23): a run's whole-run deadline (epoch ms, or NULL), and
        # finished runs by their last change, so retention (prune) reads only what it deletes.
        "ALTER TABLE runs ADD COLUMN deadline bigint",
        "CREATE INDEX runs_by_status_updated ON runs (status, updated_at)",
    ),
    (
        # Recurring workflows: each one's place on its schedule's grid, stepped by a
        # compare-and-set on rev; a poll reads what is due off the index on next_at.
        """CREATE TABLE recurring (
            name text PRIMARY KEY,
            workflow text NOT NULL,
            schedule text NOT NULL,
            state text NOT NULL,
            next_at bigint,
            recurs boolean NOT NULL,
            missed_at bigint,
            rev integer NOT NULL DEFAULT 1,
            created_at bigint NOT NULL,
            updated_at bigint NOT NULL
        )""",
        "CREATE INDEX recurring_due ON recurring (next_at) WHERE next_at IS NOT NULL",
    ),
    (
        # Messages in (engine.send, ctx.recv), events out (ctx.set_event, engine.get_event),
        # and child workflows (the run that started a run). A run's messages are numbered in
        # send order; the unread ones of a topic are one range of a partial index; a
        # message_id is unique within its run (NULL: none given, never a conflict).
        "CREATE TABLE messages (run_id text NOT NULL, n integer NOT NULL, topic text NOT NULL,"
        " body text NOT NULL, message_id text, sent_at bigint NOT NULL, seq integer,"
        " PRIMARY KEY (run_id, n))",
        "CREATE UNIQUE INDEX messages_by_id ON messages (run_id, message_id)",
        "CREATE INDEX messages_unread ON messages (run_id, topic, n) WHERE seq IS NULL",
        "CREATE TABLE event_values (run_id text NOT NULL, key text NOT NULL, value text NOT NULL,"
        " seq integer NOT NULL, set_at bigint NOT NULL, PRIMARY KEY (run_id, key))",
        "ALTER TABLE runs ADD COLUMN parent_id text",
        "CREATE INDEX runs_by_parent ON runs (parent_id) WHERE parent_id IS NOT NULL",
    ),
)

# -- the events tap (``Store.tap``), per session ---------------------------------------------------

TAP_ON: Final = (
    "CREATE TEMP TABLE IF NOT EXISTS durable_tap (n bigserial, run_id text, seq integer,"
    " name text, level text, at bigint, data text); SET effects_durable.tap = 'on'"
)
TAP_OFF: Final = "SET effects_durable.tap = 'off'; DROP TABLE IF EXISTS pg_temp.durable_tap"
TAP_DRAIN: Final = (
    "WITH d AS (DELETE FROM pg_temp.durable_tap RETURNING n, run_id, seq, name, level, at, data)"
    " SELECT run_id, seq, name, level, at, data FROM d ORDER BY n"
)

# -- schema ----------------------------------------------------------------------------------------

TABLE_COUNT: Final = "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s"
TABLES: Final = (
    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY table_name"
)
META: Final = "SELECT key, value FROM durable_meta"
META_WRITE: Final = (
    "INSERT INTO durable_meta (key, value) VALUES ('schema', %s),"
    " ('version', %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
#: The transaction's advisory lock of the key ``%s`` (the schema's, or a queue's).
ADVISORY_LOCK: Final = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
#: With ``psycopg.sql``: the schema, and a channel to listen on.
CREATE_SCHEMA: Final = "CREATE SCHEMA IF NOT EXISTS {}"
LISTEN: Final = "LISTEN {}"
#: The payload ``%s`` on each channel of the ``text[]`` ``%s``.
NOTIFY: Final = "SELECT pg_notify(c, %s) FROM unnest(%s::text[]) AS c"

# -- fragments -------------------------------------------------------------------------------------

#: ``rules.lease_holds`` of the run ``%(run)s`` and the token ``%(token)s``.
LEASE_HELD: Final = "run_id = %(run)s AND lease_token = %(token)s AND status = 'running'"
#: Not ``rules.settled``: a checkpoint row whose attempts are not over.
NOT_SETTLED: Final = "status <> 'completed' AND NOT (status = 'failed' AND final)"
#: ``rules.runnable`` of a run row at ``%(now)s``.
RUNNABLE: Final = "(status = 'pending' OR (status = 'suspended' AND wake_at <= %(now)s))"
#: ``rules.claim_holds`` of the task ``%s`` and the worker ``%s``.
CLAIM_HELD: Final = "task_id = %s AND claimed_by = %s AND status = 'claimed'"
#: ``rules.attempt_current`` of a checkpoint row and the attempt ``%(attempt)s``.
ATTEMPT_CURRENT: Final = "status IN ('pending', 'running') AND attempts = %(attempt)s"
#: In ``record_result``'s one statement: the attempt reporting was not withdrawn (its ``own``
#: CTE); a withdrawn one's result is discarded (``rules.outcome_applies``).
NOT_WITHDRAWN: Final = "NOT EXISTS (SELECT 1 FROM own WHERE status = 'withdrawn')"
#: Joined into the statements whose loss in a server crash is harmless (claims, lease and claim
#: renewals, heartbeats): their commit does not wait for the WAL to reach the disk. A claim lost
#: that way leaves its run or task claimable again, and the claimer's next durable write is
#: refused by the compare-and-set; any later durable commit flushes it anyway.
NO_FLUSH: Final = "(SELECT set_config('synchronous_commit', 'off', true)) AS no_flush"
_RUN_COLUMNS: Final = ", ".join(rows.RUN_COLUMNS)
_RUN_COLUMNS_OF_R: Final = ", ".join(f"r.{c}" for c in rows.RUN_COLUMNS)
# The errors of the checkpoint row of alias ``c`` (or of ``checkpoints``) as the JSON text of a
# list, from step_errors, in order.
_ERRORS_OF_C: Final = (
    "COALESCE((SELECT '[' || string_agg(e.error, ',' ORDER BY e.n) || ']' FROM step_errors e"
    " WHERE e.run_id = c.run_id AND e.seq = c.seq), '[]')"
)
_ERRORS_OF_CHECKPOINTS: Final = (
    "COALESCE((SELECT '[' || string_agg(e.error, ',' ORDER BY e.n) || ']' FROM step_errors e"
    " WHERE e.run_id = checkpoints.run_id AND e.seq = checkpoints.seq), '[]')"
)
_CHECKPOINT_COLUMNS_OF_C: Final = ", ".join(
    _ERRORS_OF_C if c == "errors" else f"c.{c}" for c in rows.CHECKPOINT_COLUMNS
)
_CHECKPOINT_COLUMNS: Final = ", ".join(
    _ERRORS_OF_CHECKPOINTS if c == "errors" else c for c in rows.CHECKPOINT_COLUMNS
)
_TASK_COLUMNS_OF_T: Final = ", ".join(f"t.{c}" for c in rows.TASK_COLUMNS)
#: How many attempts of the queue ``%s`` hold a slot (``rules.admission``, ``rules.admits``).
SLOTS_HELD: Final = f"SELECT COUNT(*) FROM tasks WHERE queue = %s AND status IN {rows.SLOT_HOLDERS}"
# The notification of a statement's ``hint`` CTE, sent once per row of its *source*.
_HINT_OF_HELD: Final = (
    " hint AS (SELECT pg_notify(c, %(sender)s) FROM held,"
    " unnest(%(channels)s::text[]) AS c WHERE %(listen)s)"
)
_HINT_OF_UP: Final = (
    " hint AS (SELECT pg_notify(c, %(sender)s) FROM up,"
    " unnest(%(channels)s::text[]) AS c WHERE %(listen)s)"
)

# -- events and errors -----------------------------------------------------------------------------

#: One event of ``trail.EventRow``.
EVENT_INSERT: Final = (
    "INSERT INTO events (run_id, seq, name, level, at, data) VALUES (%s, %s, %s, %s, %s, %s)"
)
# Events of one run from the JSON text ``%(events)s`` (one parameter: psycopg dumps a str far
# faster than five arrays), inserted once per row of the CTE named (``made``, ``held``) that
# returns the run's id when the write it guards happened, in their order.
_EVENTS_FROM_MADE: Final = (
    "INSERT INTO events (run_id, seq, name, level, at, data)"
    " SELECT made.run_id, (e.ev->>0)::integer, e.ev->>1, e.ev->>2, (e.ev->>3)::bigint,"
    " e.ev->>4 FROM made, json_array_elements(%(events)s::json) WITH ORDINALITY"
    " AS e(ev, n) ORDER BY e.n"
)
_EVENTS_FROM_HELD: Final = (
    "INSERT INTO events (run_id, seq, name, level, at, data)"
    " SELECT held.run_id, (e.ev->>0)::integer, e.ev->>1, e.ev->>2, (e.ev->>3)::bigint,"
    " e.ev->>4 FROM held, json_array_elements(%(events)s::json) WITH ORDINALITY"
    " AS e(ev, n) ORDER BY e.n"
)
#: One more error (``%(error)s``) of the checkpoint ``(%(run)s, %(seq)s)``, after those it has,
#: once per row of ``up``: a row of its own, so an attempt costs the same however many came before.
ERROR_APPEND: Final = (
    "INSERT INTO step_errors (run_id, seq, n, error) SELECT up.run_id, %(seq)s,"
    " (SELECT COALESCE(MAX(n), 0) + 1 FROM step_errors WHERE run_id = %(run)s"
    " AND seq = %(seq)s), %(error)s FROM up"
)
ERRORS_DELETE: Final = "DELETE FROM step_errors WHERE run_id = %s AND seq = %s"
#: The errors of a checkpoint ``(%s, %s)`` from the JSON list ``%s`` (``rows.errors_text``).
ERRORS_INSERT: Final = (
    "INSERT INTO step_errors (run_id, seq, n, error) SELECT %s, %s, e.n, e.v"
    " FROM json_array_elements_text(%s::json) WITH ORDINALITY AS e(v, n)"
)

# -- runs ------------------------------------------------------------------------------------------

#: A start in one statement: the run, its events and the notification, or nothing at all.
RUN_CREATE: Final = (
    "WITH made AS (INSERT INTO runs (run_id, workflow, version, status, input,"
    " created_at, updated_at, lease_token, lease_until, traceparent, deadline, parent_id)"
    " VALUES (%(id)s, %(workflow)s, %(version)s, %(status)s, %(input)s, %(now)s, %(now)s,"
    " %(token)s, %(until)s, %(traceparent)s, %(deadline)s, %(parent)s)"
    " ON CONFLICT (run_id) DO NOTHING"
    " RETURNING run_id, input),"
    f" trail AS ({_EVENTS_FROM_MADE}),"
    " hint AS (SELECT pg_notify(c, %(sender)s) FROM made,"
    " unnest(%(channels)s::text[]) AS c WHERE %(listen)s)"
    " SELECT (SELECT COUNT(*) FROM made), (SELECT COUNT(*) FROM hint),"
    " (SELECT input FROM made)"
)
RUN: Final = f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s"
#: ``get_run`` of several runs at once (reads that share one statement): the ``text[]`` ``%s``.
RUNS_BY_ID: Final = f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ANY(%s::text[])"
RUN_AND_LEASE: Final = f"SELECT {_RUN_COLUMNS}, lease_token FROM runs WHERE run_id = %s"
#: ``list_runs``: this, its filters joined by AND after WHERE, then ``RUNS_ORDER``.
RUNS: Final = f"SELECT {_RUN_COLUMNS} FROM runs"
#: The filters of ``list_runs``, in the order ``listing.where`` takes their values.
#: ``rules.unserved``: the run's workflow is among the JSON list ``%s`` of ``[name, version]``
#: pairs at another version.
UNSERVED: Final = (
    "EXISTS (SELECT 1 FROM json_array_elements(%s::json) AS p WHERE p->>0 = runs.workflow"
    " AND p->>1 <> runs.version)"
)
RUNS_FILTERS: Final = listing.filters(
    "%s",
    not_final="NOT final",
    starts_with="starts_with(run_id, %s)",
    unserved=UNSERVED,
    text_order=' COLLATE "C"',
)
#: ``Store.unserved``: how many runs wait for each unserved (workflow, version) of ``%s``.
UNSERVED_COUNTS: Final = (
    f"SELECT workflow, version, COUNT(*) FROM runs WHERE {RUNS_FILTERS[-1]}"
    " GROUP BY workflow, version"
)
RUNS_ORDER: Final = ' ORDER BY created_at DESC, run_id COLLATE "C" LIMIT %s'
#: ``count_runs``: this, its filters, then ``COUNTS_GROUP``.
COUNTS: Final = "SELECT status, COUNT(*) FROM runs"
COUNTS_GROUP: Final = " GROUP BY status"
#: ``rules.retrying``: the runs of the ``text[]`` ``%s`` with a retrying checkpoint at ``%s``.
RETRYING: Final = (
    "SELECT DISTINCT run_id FROM checkpoints WHERE run_id = ANY(%s::text[])"
    " AND status = 'failed' AND NOT final AND wake_at > %s"
)
#: ``queue_stats``: each queue's attempts holding a slot, and waiting for one.
QUEUE_STATS: Final = (
    f"SELECT queue, COUNT(*) FILTER (WHERE status IN {rows.SLOT_HOLDERS}),"
    " COUNT(*) FILTER (WHERE status = 'waiting') FROM tasks WHERE queue IS NOT NULL"
    ' GROUP BY queue ORDER BY queue COLLATE "C"'
)
CHECKPOINTS: Final = f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s ORDER BY seq"
CHECKPOINT: Final = f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = %s AND seq = %s"
EVENTS: Final = "SELECT name, level, at, seq, data FROM events WHERE run_id = %s ORDER BY id"
#: The run's row lock, taken before its task and checkpoint rows.
RUN_LOCK: Final = "SELECT 1 FROM runs WHERE run_id = %s FOR NO KEY UPDATE"

# -- turns -----------------------------------------------------------------------------------------

_CLAIM_RUNS_HEAD: Final = (
    f"WITH picked AS (SELECT run_id FROM runs, {NO_FLUSH} WHERE {RUNNABLE}"
    " AND (workflow, version) IN"
    " (SELECT * FROM unnest(%(names)s::text[], %(versions)s::text[]))"
    ' ORDER BY updated_at, run_id COLLATE "C" '
)
_CLAIM_RUNS_TAIL: Final = (
    " FOR UPDATE OF runs SKIP LOCKED)"
    " UPDATE runs SET status = 'running', lease_token = %(token)s,"
    " lease_until = %(until)s, woken = false FROM picked"
    " WHERE runs.run_id = picked.run_id"
)
#: Runnable runs, claimed with the token ``%(token)s``.
CLAIM_RUNS: Final = f"{_CLAIM_RUNS_HEAD}LIMIT %(limit)s{_CLAIM_RUNS_TAIL}"
#: The same on a retry after a lost reply: what the first try took counts against the limit.
CLAIM_RUNS_AGAIN: Final = (
    f"{_CLAIM_RUNS_HEAD}LIMIT GREATEST(0, %(limit)s - (SELECT COUNT(*) FROM runs"
    f" WHERE lease_token = %(token)s)){_CLAIM_RUNS_TAIL}"
)
#: The runs claimed with the token ``%(token)s``, with their checkpoints.
CLAIMED_RUNS: Final = (
    f"SELECT {_RUN_COLUMNS_OF_R}, {_CHECKPOINT_COLUMNS_OF_C} FROM runs r"
    " LEFT JOIN checkpoints c ON c.run_id = r.run_id WHERE r.status = 'running'"
    " AND r.lease_token = %(token)s ORDER BY r.run_id, c.seq"
)
LEASE_RENEW: Final = f"UPDATE runs SET lease_until = %(until)s FROM {NO_FLUSH} WHERE {LEASE_HELD}"
LEASE_READ: Final = f"SELECT 1 FROM runs WHERE {LEASE_HELD}"
#: After a retried commit met a stale lease: the run given back, if the token still holds it.
GIVE_BACK: Final = (
    "UPDATE runs SET status = 'pending', lease_token = NULL, lease_until = NULL,"
    f" updated_at = %(now)s WHERE {LEASE_HELD}"
)
# The run's part of a turn commit (``RunAdvance``), each a compare-and-set on the lease that
# returns the run's id if it held: the ``held`` CTE of an advance statement.
# A share lock, not a write: a step's commit rewrites no run row, yet no recovery can take the
# run before this transaction ends.
HELD_READ: Final = f"SELECT run_id FROM runs WHERE {LEASE_HELD} FOR SHARE"
HELD_CONTINUE: Final = (
    f"UPDATE runs SET lease_until = %(until)s, updated_at = %(now)s WHERE {LEASE_HELD}"
    " RETURNING run_id"
)
HELD_SUSPEND: Final = (
    "UPDATE runs SET status = CASE WHEN woken THEN 'pending' ELSE 'suspended' END,"
    " wake_at = %(wake)s, lease_token = NULL, lease_until = NULL,"
    f" updated_at = %(now)s WHERE {LEASE_HELD} RETURNING run_id"
)
HELD_FINISH: Final = (
    "UPDATE runs SET status = %(status)s, output = %(output)s,"
    " error = %(error)s, wake_at = NULL, lease_token = NULL, lease_until = NULL,"
    f" updated_at = %(now)s WHERE {LEASE_HELD} RETURNING run_id, parent_id"
)
#: ``rules.child_wakes`` of the parent of the run ``held`` finishes: unfinished, with a
#: ``child`` checkpoint pending on it (input ``%(child)s``, the run's id as JSON text); then its
#: notification (``%(parent_listen)s``).
_PARENT_WAKE_OF_HELD: Final = (
    " woke AS (UPDATE runs p SET woken = true, wake_at = NULL, updated_at = %(now)s,"
    " status = CASE WHEN p.status = 'suspended' THEN 'pending' ELSE p.status END FROM held"
    " WHERE p.run_id = held.parent_id AND p.status IN ('pending', 'running', 'suspended')"
    " AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.run_id = p.run_id AND c.kind = 'child'"
    " AND c.status = 'pending' AND c.input = %(child)s) RETURNING p.run_id),"
    " woke_hint AS (SELECT pg_notify(c, %(parent_sender)s) FROM woke,"
    " unnest(%(parent_channels)s::text[]) AS c WHERE %(parent_listen)s),"
)
HELD_RELEASE: Final = (
    "UPDATE runs SET status = 'pending', lease_token = NULL, lease_until = NULL,"
    f" updated_at = %(now)s WHERE {LEASE_HELD} RETURNING run_id"
)
#: What follows ``WITH held AS (...),`` and the rows of a commit: the commit's events and its
#: notification, written only if the lease held; the statement's row says 1 if it held.
ADVANCE_TAIL: Final = (
    f" trail AS ({_EVENTS_FROM_HELD}),{_HINT_OF_HELD}"
    " SELECT (SELECT COUNT(*) FROM held), (SELECT COUNT(*) FROM hint)"
)
ADVANCE_READ: Final = f"WITH held AS ({HELD_READ}),{ADVANCE_TAIL}"
ADVANCE_CONTINUE: Final = f"WITH held AS ({HELD_CONTINUE}),{ADVANCE_TAIL}"
ADVANCE_SUSPEND: Final = f"WITH held AS ({HELD_SUSPEND}),{ADVANCE_TAIL}"
ADVANCE_FINISH: Final = (
    f"WITH held AS ({HELD_FINISH}),{_PARENT_WAKE_OF_HELD}{ADVANCE_TAIL},"
    " (SELECT COUNT(*) FROM woke_hint)"
)
ADVANCE_RELEASE: Final = f"WITH held AS ({HELD_RELEASE}),{ADVANCE_TAIL}"


def checkpoint_from_held(n: int) -> str:
    """
    The CTE ``c<n>_w`` of a one-statement commit: its *n*-th new checkpoint row, inserted once per
    row of ``held`` (the lease held), its parameters named ``c<n>_<column>``. Every placeholder
    is cast: in an INSERT ... SELECT an untyped NULL would be text.
    """
    p = f"c{n}_"
    return (
        f" {p}w AS (INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts,"
        " wake_at, output, error, final, retry_state, grp, queue, dispatched_at, input,"
        " timeout_ms, lease_ms, redispatches, heartbeat_at, handler, created_at, updated_at,"
        " policy)"
        f" SELECT held.run_id, %({p}seq)s::integer, %({p}name)s::text, %({p}kind)s::text,"
        f" %({p}step_id)s::text, %({p}status)s::text, %({p}attempts)s::integer,"
        f" %({p}wake_at)s::bigint, %({p}output)s::text, %({p}error)s::text,"
        f" %({p}final)s::boolean, %({p}retry_state)s::text, %({p}grp)s::text,"
        f" %({p}queue)s::text, %({p}dispatched_at)s::bigint, %({p}input)s::text,"
        f" %({p}timeout_ms)s::bigint, %({p}lease_ms)s::bigint, %({p}redispatches)s::integer,"
        f" %({p}heartbeat_at)s::bigint, %({p}handler)s::text, %({p}created_at)s::bigint,"
        f" %({p}updated_at)s::bigint, %({p}policy)s::text"
        " FROM held),"
    )


def errors_from_held(n: int) -> str:
    """
    The CTE ``e<n>_w`` of a one-statement commit: the errors of its *n*-th new checkpoint
    (``e<n>_errors``, ``rows.errors_text``; ``e<n>_seq``), once per row of ``held``.
    """
    p = f"e{n}_"
    return (
        f" {p}w AS (INSERT INTO step_errors (run_id, seq, n, error) SELECT held.run_id,"
        f" %({p}seq)s::integer, e.n, e.v FROM held,"
        f" json_array_elements_text(%({p}errors)s::json) WITH ORDINALITY AS e(v, n)),"
    )


def tasks_from_held(count: int) -> str:
    """
    The CTE ``tasks_w`` of a one-statement commit: its *count* new tasks, outside any queue and
    queued, once per row of ``held``, the *n*-th one's parameters named ``t<n>_<column>``. One
    INSERT ordered by position, so the tasks of a commit take their ids in the commit's order,
    as the general path's inserts one by one do (CTEs of their own would run in no set order).
    """
    rows = ", ".join(
        f"({n}, %(t{n}_seq)s::integer, %(t{n}_step_id)s::text, %(t{n}_name)s::text,"
        f" %(t{n}_grp)s::text, %(t{n}_input)s::text, %(t{n}_attempt)s::integer,"
        f" %(t{n}_available_at)s::bigint, %(t{n}_redispatched)s::boolean,"
        f" %(t{n}_created_at)s::bigint, %(t{n}_workflow)s::text, %(t{n}_traceparent)s::text)"
        for n in range(count)
    )
    return (
        " tasks_w AS (INSERT INTO tasks (run_id, seq, step_id, name, grp, input, attempt, status,"
        " available_at, redispatched, created_at, workflow, traceparent) SELECT held.run_id,"
        " v.seq, v.step_id, v.name, v.grp, v.input, v.attempt, 'queued', v.available_at,"
        " v.redispatched, v.created_at, v.workflow, v.traceparent"
        f" FROM held, (VALUES {rows}) AS v(n, seq, step_id, name, grp, input, attempt,"
        " available_at, redispatched, created_at, workflow, traceparent) ORDER BY v.n),"
    )


CHECKPOINT_INSERT: Final = (
    f"INSERT INTO checkpoints ({', '.join(rows.CHECKPOINT_WRITE_COLUMNS)}, run_id, seq, created_at,"
    f" policy) VALUES ({', '.join('%s' for _ in rows.CHECKPOINT_WRITE_COLUMNS)}, %s, %s, %s, %s)"
    " ON CONFLICT (run_id, seq) DO NOTHING"
)
#: A turn's update of a checkpoint, a compare-and-set on its revision.
CHECKPOINT_UPDATE: Final = (
    f"UPDATE checkpoints SET {', '.join(f'{c} = %s' for c in rows.CHECKPOINT_WRITE_COLUMNS)},"
    " rev = rev + 1 WHERE run_id = %s AND seq = %s AND rev = %s"
)
# ``record_local_step``: the completed checkpoint, inserted only if the lease holds. The share
# lock holds off a recovery of the run until this insert commits.
LOCAL_STEP_INSERT: Final = (
    "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts,"
    " output, created_at, updated_at, policy)"
    " SELECT %(run)s, %(seq)s, %(name)s, 'local', %(run)s || ':' || %(seq)s,"
    " 'completed', 1, %(output)s, %(started)s, %(now)s, %(policy)s::text"
    f" WHERE EXISTS (SELECT 1 FROM runs WHERE {LEASE_HELD} FOR SHARE)"
)
#: The same on a retry after a lost reply (the first try may have written the row).
LOCAL_STEP_INSERT_AGAIN: Final = f"{LOCAL_STEP_INSERT} ON CONFLICT (run_id, seq) DO NOTHING"

# -- tasks and queues ------------------------------------------------------------------------------

#: The older attempts of a step nobody claimed (only the newest may run), deleted.
UNCLAIMED_DELETE: Final = (
    "DELETE FROM tasks WHERE run_id = %s AND seq = %s AND status IN ('queued', 'waiting')"
    " RETURNING queue, queue_limit"
)
#: The attempts of the run's checkpoints at ``%(seqs)s`` withdrawn, each with a
#: ``step.withdrawn`` event; returns the queues of the deleted ones.
WITHDRAW: Final = (
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
    " SELECT queue FROM gone"
)
TASK_INSERT: Final = (
    f"INSERT INTO tasks ({', '.join(rows.TASK_INSERT_COLUMNS)})"
    f" VALUES ({', '.join('%s' for _ in rows.TASK_INSERT_COLUMNS)})"
)
OLDEST_WAITING: Final = (
    "SELECT task_id, run_id, seq, attempt, queue_limit FROM tasks"
    " WHERE queue = %s AND status = 'waiting' ORDER BY task_id LIMIT 1"
)
ADMIT: Final = (
    "UPDATE tasks SET status = 'queued', available_at = GREATEST(available_at, %s)"
    " WHERE task_id = %s"
)
#: The tasks the claim with the nonce ``%s`` took (a retry after a lost reply).
CLAIMED_TASKS: Final = (
    f"SELECT {_TASK_COLUMNS_OF_T}, c.progress, c.timeout_ms, c.lease_ms FROM tasks t"
    " LEFT JOIN checkpoints c ON c.run_id = t.run_id AND c.seq = t.seq"
    " WHERE t.claim_nonce = %s AND t.status = 'claimed' ORDER BY t.task_id"
)
#: One statement: the claim, the pickup beat on each checkpoint (which renews a lost-dispatch
#: lease) and the step.started events (``trail.started_data``).
CLAIM_TASKS: Final = (
    f"WITH picked AS (SELECT task_id FROM tasks, {NO_FLUSH} WHERE status = 'queued'"
    " AND grp = ANY(%(groups)s::text[]) AND available_at <= %(now)s ORDER BY task_id"
    " LIMIT %(limit)s FOR UPDATE OF tasks SKIP LOCKED),"
    " claimed AS (UPDATE tasks t SET status = 'claimed', claimed_by = %(worker)s,"
    " claim_until = %(until)s, claim_nonce = %(nonce)s FROM picked"
    f" WHERE t.task_id = picked.task_id RETURNING {_TASK_COLUMNS_OF_T}),"
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
    f" SELECT {_TASK_COLUMNS_OF_T}, b.progress, b.timeout_ms, b.lease_ms FROM claimed t"
    " LEFT JOIN beat b ON b.run_id = t.run_id AND b.seq = t.seq ORDER BY t.task_id"
)
CLAIM_RENEW: Final = f"UPDATE tasks SET claim_until = %s FROM {NO_FLUSH} WHERE {CLAIM_HELD}"
HEARTBEAT: Final = (
    "UPDATE checkpoints SET heartbeat_at = %(now)s,"
    " progress = COALESCE(%(progress)s::text, progress),"
    " wake_at = CASE WHEN lease_ms IS NULL OR %(lease)s::bigint IS NULL THEN wake_at"
    " ELSE %(lease)s::bigint END, updated_at = %(now)s, rev = rev + 1"
    f" FROM {NO_FLUSH} WHERE run_id = %(run)s AND seq = %(seq)s AND {ATTEMPT_CURRENT}"
)
CLAIM_RELEASE: Final = (
    f"UPDATE tasks SET status = 'queued', claimed_by = NULL, claim_until = NULL WHERE {CLAIM_HELD}"
)
WITHDRAWN_QUEUE: Final = (
    "SELECT COALESCE(queue, '') FROM tasks WHERE task_id = %s"
    " AND claimed_by = %s AND status = 'withdrawn'"
)
#: A withdrawn attempt dropped: its claim lapsed (``%(expired)s``), or its worker let it go.
WITHDRAWN_DROP: Final = (
    "DELETE FROM tasks WHERE task_id = %(task)s AND status = 'withdrawn'"
    " AND (NOT %(expired)s OR claim_until < %(now)s)"
    " AND (%(worker)s::text IS NULL OR claimed_by = %(worker)s::text) RETURNING queue"
)
PENDING_QUEUES: Final = (
    "SELECT DISTINCT queue FROM checkpoints WHERE run_id = %s AND kind = 'remote'"
    " AND status IN ('pending', 'running')"
)
QUEUE_LIMIT_OF_STEP: Final = "SELECT queue_limit FROM tasks WHERE run_id = %s AND seq = %s LIMIT 1"
REDISPATCH: Final = (
    "UPDATE checkpoints SET status = 'pending', attempts = %(attempt)s,"
    " dispatched_at = %(now)s, redispatches = redispatches + 1,"
    " wake_at = CASE WHEN lease_ms IS NULL THEN wake_at"
    " ELSE %(now)s + lease_ms END, updated_at = %(now)s, rev = rev + 1"
    " WHERE run_id = %(run)s AND seq = %(seq)s"
)

# -- results ---------------------------------------------------------------------------------------

OWN_TASK_DELETE: Final = (
    "DELETE FROM tasks WHERE task_id = %s AND claimed_by = %s RETURNING queue, status"
)
# The outcome's change of its checkpoint, if ``rules.outcome_applies``: a success completes a
# step not settled, a failure fails only the current attempt.
_COMPLETE: Final = (
    "UPDATE checkpoints SET status = 'completed', output = %(output)s::text,"
    " error = NULL, wake_at = NULL, final = false, updated_at = %(now)s,"
    " rev = rev + 1, progress = COALESCE(%(progress)s::text, progress)"
    " WHERE run_id = %(run)s AND seq = %(seq)s"
)
COMPLETES: Final = f"{_COMPLETE} AND {NOT_SETTLED}"
FAILS: Final = (
    "UPDATE checkpoints SET status = 'failed', error = %(error)s,"
    " final = false, wake_at = NULL,"
    " updated_at = %(now)s, rev = rev + 1 WHERE run_id = %(run)s AND seq = %(seq)s"
    f" AND {ATTEMPT_CURRENT}"
)
#: Other attempts of a step that completes are moot; a completed step has none left.
MOOT_DELETE: Final = (
    "DELETE FROM tasks WHERE run_id = %(run)s AND seq = %(seq)s AND EXISTS"
    f" (SELECT 1 FROM checkpoints WHERE run_id = %(run)s AND seq = %(seq)s AND {NOT_SETTLED})"
    " RETURNING queue"
)
#: A failure's progress, kept while the step has not settled.
PROGRESS: Final = (
    f"UPDATE checkpoints SET progress = %s WHERE run_id = %s AND seq = %s AND {NOT_SETTLED}"
)
# After the ``up`` CTE (the checkpoint changed): the outcome's event, the run woken (a suspended
# one pending, a running one ``woken``) and the notification; the row says 1 if it applied.
_OUTCOME_TAIL: Final = (
    " trail AS (INSERT INTO events (run_id, seq, name, level, at, data)"
    " SELECT run_id, %(seq)s, %(ev_name)s, %(ev_level)s, %(now)s, %(ev_data)s FROM up),"
    " wake AS (UPDATE runs SET woken = true, wake_at = NULL, updated_at = %(now)s,"
    " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
    " WHERE run_id = %(run)s AND status IN ('pending', 'running', 'suspended')"
    f" AND EXISTS (SELECT 1 FROM up)),{_HINT_OF_UP}"
    " SELECT (SELECT COUNT(*) FROM up), (SELECT COUNT(*) FROM hint)"
)
#: An outcome applied (the run's row locked already): a success, then a failure.
APPLY_COMPLETED: Final = f"WITH up AS ({COMPLETES} RETURNING run_id),{_OUTCOME_TAIL}"
APPLY_FAILED: Final = (
    f"WITH up AS ({FAILS} RETURNING run_id), errs AS ({ERROR_APPEND}),{_OUTCOME_TAIL}"
)
# ``record_result`` of a task of no queue, in one statement. Each step's condition reads the
# step before it (a one-time filter, run before the step scans), so the locks are taken in the
# store's one order: the run, task rows, the checkpoint.
_RESULT_HEAD: Final = (
    "WITH lk AS (SELECT run_id FROM runs WHERE run_id = %(run)s FOR NO KEY UPDATE),"
    " own AS (DELETE FROM tasks WHERE task_id = %(task)s AND claimed_by = %(worker)s"
    " AND (SELECT COUNT(*) FROM lk) >= 0 RETURNING status),"
    " discard AS (INSERT INTO events (run_id, seq, name, level, at, data)"
    " SELECT %(run)s, %(seq)s, 'step.result_discarded', 'warning', %(now)s,"
    " %(discarded)s FROM own WHERE status = 'withdrawn'),"
)
RESULT_COMPLETED: Final = (
    f"{_RESULT_HEAD} moot AS (DELETE FROM tasks WHERE run_id = %(run)s AND seq = %(seq)s"
    f" AND task_id <> %(task)s AND {NOT_WITHDRAWN} AND EXISTS (SELECT 1 FROM checkpoints"
    f" WHERE run_id = %(run)s AND seq = %(seq)s AND {NOT_SETTLED}) RETURNING 1),"
    f" up AS ({COMPLETES} AND {NOT_WITHDRAWN} AND (SELECT COUNT(*) FROM moot) >= 0"
    f" RETURNING run_id),{_OUTCOME_TAIL}"
)
RESULT_FAILED: Final = (
    f"{_RESULT_HEAD} up AS ({FAILS} AND {NOT_WITHDRAWN} RETURNING run_id),"
    f" errs AS ({ERROR_APPEND}),{_OUTCOME_TAIL}"
)

# -- maintenance -----------------------------------------------------------------------------------

#: One read of what expired, so a pass with nothing to do costs one round trip and no lock.
EXPIRED: Final = (
    "(SELECT 'run', NULL::bigint, run_id, NULL FROM runs WHERE status = 'running'"
    " AND lease_until < %(now)s ORDER BY lease_until LIMIT 500) UNION ALL"
    " (SELECT 'task', task_id, run_id, queue FROM tasks WHERE status = 'claimed'"
    " AND claim_until < %(now)s ORDER BY claim_until LIMIT 500) UNION ALL"
    " (SELECT 'gone', task_id, run_id, queue FROM tasks WHERE status = 'withdrawn'"
    " AND claim_until < %(now)s ORDER BY claim_until LIMIT 500)"
)
EXPIRED_RUN: Final = (
    "SELECT recovery_attempts FROM runs WHERE run_id = %s AND status = 'running'"
    " AND lease_until < %s FOR NO KEY UPDATE SKIP LOCKED"
)
#: What ``rules.recovery_verdict`` reads as *awaiting_liveness*.
AWAITING_LIVENESS: Final = (
    "SELECT 1 FROM checkpoints WHERE run_id = %s AND kind = 'remote'"
    " AND timeout_ms IS NOT NULL AND status IN ('pending', 'running') LIMIT 1"
)
#: Parked until ``%s``, or its deadline if that comes first (``rules.parked_until``).
RUN_RECONCILE: Final = (
    "UPDATE runs SET status = 'suspended', wake_at = LEAST(%s::bigint, deadline),"
    " lease_token = NULL, lease_until = NULL, updated_at = %s WHERE run_id = %s"
)
RUN_DEAD: Final = (
    "UPDATE runs SET status = 'dead', error = %s, lease_token = NULL,"
    " lease_until = NULL, updated_at = %s WHERE run_id = %s"
)
RUN_RECOVER: Final = (
    "UPDATE runs SET status = 'pending', lease_token = NULL,"
    " lease_until = NULL, recovery_attempts = recovery_attempts + 1,"
    " updated_at = %s WHERE run_id = %s"
)
EXPIRED_CLAIM_DELETE: Final = (
    "DELETE FROM tasks WHERE task_id = %s AND status = 'claimed' AND claim_until < %s"
    " RETURNING queue, seq, step_id, attempt"
)
# A lease or claim held until T expires at T + 1 (recovery takes `until < now`).
NEXT_DUE: Final = (
    "SELECT LEAST("
    " (SELECT MIN(wake_at) FROM runs WHERE status = 'suspended' AND wake_at > %(n)s),"
    " (SELECT MIN(lease_until) + 1 FROM runs WHERE status = 'running'"
    " AND lease_until >= %(n)s),"
    " (SELECT MIN(available_at) FROM tasks WHERE status = 'queued'"
    " AND available_at > %(n)s),"
    " (SELECT MIN(claim_until) + 1 FROM tasks WHERE status = 'claimed'"
    " AND claim_until >= %(n)s),"
    " (SELECT MIN(claim_until) + 1 FROM tasks WHERE status = 'withdrawn'"
    " AND claim_until >= %(n)s))"
)
FAILED_REMOTE: Final = (
    "SELECT seq, queue FROM checkpoints WHERE run_id = %s AND kind = 'remote' AND status = 'failed'"
)
RUN_FOR_UPDATE: Final = f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = %s FOR NO KEY UPDATE"
FAILED_ERRORS_DELETE: Final = (
    "DELETE FROM step_errors WHERE run_id = %(run)s AND seq IN (SELECT seq FROM"
    " checkpoints WHERE run_id = %(run)s AND status = 'failed')"
)
#: ``rules.check_requeue``: what a requeue resets of the failed checkpoints, then of the run.
FAILED_RESET: Final = (
    "UPDATE checkpoints SET status = CASE kind WHEN 'local' THEN 'pending'"
    " ELSE 'failed' END, attempts = 0, final = false, error = NULL,"
    " retry_state = NULL,"
    " wake_at = CASE kind WHEN 'local' THEN NULL ELSE %s::bigint END,"
    " updated_at = %s, rev = rev + 1 WHERE run_id = %s AND status = 'failed'"
)
RUN_REQUEUE: Final = (
    "UPDATE runs SET status = 'pending', output = NULL, error = NULL,"
    " wake_at = NULL, woken = false, lease_token = NULL, lease_until = NULL,"
    " recovery_attempts = 0, cancel = NULL, deadline = NULL,"
    f" updated_at = %s WHERE run_id = %s RETURNING {_RUN_COLUMNS}"
)
#: ``rules.compensated``: whether the run ``%s`` has a compensation's checkpoint.
COMPENSATION: Final = (
    "SELECT 1 FROM checkpoints WHERE run_id = %s AND substr(name, 1, 11) = 'compensate:' LIMIT 1"
)

#: The parent of the run ``%(run)s`` wakes (``rules.child_wakes``): the run has just finished
#: (cancelled, dead) in this transaction, and the parent waits for it (``%(child)s``: the run's
#: id as JSON text, its child checkpoint's input).
PARENT_WAKE: Final = (
    "UPDATE runs SET woken = true, wake_at = NULL, updated_at = %(now)s,"
    " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
    " WHERE run_id = (SELECT parent_id FROM runs WHERE run_id = %(run)s)"
    " AND status IN ('pending', 'running', 'suspended') AND EXISTS (SELECT 1 FROM checkpoints c"
    " WHERE c.run_id = runs.run_id AND c.kind = 'child' AND c.status = 'pending'"
    " AND c.input = %(child)s)"
)
#: The ids of every run below the run ``%s`` (its children, theirs, ...).
DESCENDANTS: Final = (
    "WITH RECURSIVE tree(run_id) AS (SELECT run_id FROM runs WHERE parent_id = %s"
    " UNION SELECT r.run_id FROM runs r JOIN tree t ON r.parent_id = t.run_id)"
    " SELECT run_id FROM tree"
)
#: The rows of the runs of the ``text[]`` ``%s``, locked in id order, oldest first.
RUNS_FOR_UPDATE: Final = (
    f"SELECT {_RUN_COLUMNS} FROM (SELECT * FROM runs WHERE run_id = ANY(%s::text[])"
    ' ORDER BY run_id COLLATE "C" FOR NO KEY UPDATE) r ORDER BY created_at, run_id COLLATE "C"'
)
#: The queues of the pending dispatched steps of the runs of the ``text[]`` ``%s``.
PENDING_QUEUES_OF_RUNS: Final = (
    "SELECT DISTINCT queue FROM checkpoints WHERE run_id = ANY(%s::text[]) AND kind = 'remote'"
    " AND status IN ('pending', 'running')"
)
CHILD_RUNS: Final = (
    f'SELECT {_RUN_COLUMNS} FROM runs WHERE parent_id = %s ORDER BY created_at, run_id COLLATE "C"'
)

# -- messages and events ---------------------------------------------------------------------------

#: A message to the run ``%(run)s``, numbered after its last (the run's row locked); nothing if
#: its id is known.
MESSAGE_INSERT: Final = (
    "INSERT INTO messages (run_id, n, topic, body, message_id, sent_at) SELECT %(run)s,"
    " COALESCE(MAX(n), 0) + 1, %(topic)s, %(body)s, %(id)s, %(now)s FROM messages"
    " WHERE run_id = %(run)s ON CONFLICT (run_id, message_id) DO NOTHING"
)
#: ``rules.message_wakes`` of the run ``%(run)s`` for a message on ``%(topic)s``. A statement
#: after the row lock, so it sees what a turn committed while the lock was awaited.
MESSAGE_WAKE: Final = (
    "UPDATE runs SET woken = true, wake_at = NULL, updated_at = %(now)s,"
    " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
    " WHERE run_id = %(run)s AND (status = 'running' OR (status IN ('pending', 'suspended')"
    " AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.run_id = %(run)s AND c.kind = 'recv'"
    " AND c.status = 'pending' AND c.name = %(topic)s)))"
)
#: When the message of run ``%s`` with id ``%s`` was sent (a retried send looks for its first try).
MESSAGE_SENT_AT: Final = "SELECT sent_at FROM messages WHERE run_id = %s AND message_id = %s"
#: The run's first unread message on the topic ``%s``.
NEXT_MESSAGE: Final = (
    f"SELECT {', '.join(rows.MESSAGE_COLUMNS)} FROM messages WHERE run_id = %s AND topic = %s"
    " AND seq IS NULL ORDER BY n LIMIT 1"
)
#: A turn takes message ``%(n)s`` of run ``%(run)s`` for its recv at ``%(seq)s``, if unread.
MESSAGE_TAKE: Final = (
    "UPDATE messages SET seq = %(seq)s WHERE run_id = %(run)s AND n = %(n)s AND seq IS NULL"
)
#: The run's event set at a checkpoint (the latest wins).
EVENT_VALUE_SET: Final = (
    "INSERT INTO event_values (run_id, key, value, seq, set_at) VALUES (%s, %s, %s, %s, %s)"
    " ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, seq = excluded.seq,"
    " set_at = excluded.set_at"
)
EVENT_VALUE: Final = (
    f"SELECT {', '.join(rows.EVENT_VALUE_COLUMNS)} FROM event_values WHERE run_id = %s AND key = %s"
)

# -- cancel ----------------------------------------------------------------------------------------

#: The steps ``%(seqs)s`` of the run ``%(run)s`` a cancel stops waiting for
#: (``rules.cancels_attempt``): failed with ``%(error)s``, not final, each error a row of its own
#: after those it has.
CANCEL_ATTEMPTS: Final = (
    "WITH up AS (UPDATE checkpoints SET status = 'failed', error = %(error)s, final = false,"
    " wake_at = NULL, updated_at = %(now)s, rev = rev + 1 WHERE run_id = %(run)s"
    " AND seq = ANY(%(seqs)s::integer[]) RETURNING seq)"
    " INSERT INTO step_errors (run_id, seq, n, error) SELECT %(run)s, up.seq,"
    " (SELECT COALESCE(MAX(n), 0) + 1 FROM step_errors e WHERE e.run_id = %(run)s"
    " AND e.seq = up.seq), %(error)s FROM up"
)
#: ``rules.cancel_action`` "cancel": the run ``%(run)s`` cancelled at once, as ``%(mode)s``.
RUN_CANCEL: Final = (
    "UPDATE runs SET status = 'cancelled', cancel = %(mode)s, error = NULL, wake_at = NULL,"
    " woken = false, lease_token = NULL, lease_until = NULL, updated_at = %(now)s"
    f" WHERE run_id = %(run)s RETURNING {_RUN_COLUMNS}"
)
#: ``rules.cancel_action`` "request": the run pending; its next turn undoes, then cancels.
RUN_CANCEL_REQUEST: Final = (
    "UPDATE runs SET status = 'pending', cancel = 'compensate', wake_at = NULL,"
    " lease_token = NULL, lease_until = NULL, updated_at = %(now)s"
    f" WHERE run_id = %(run)s RETURNING {_RUN_COLUMNS}"
)

# -- retention -------------------------------------------------------------------------------------

#: ``rules.prunable``: no attempt of the run is out (claimed, or withdrawn but still running).
_NO_ATTEMPT_OUT: Final = (
    "NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = runs.run_id"
    " AND t.status IN ('claimed', 'withdrawn'))"
)
#: ``prune``: the runs of the statuses ``%(statuses)s`` last changed before ``%(before)s``, at
#: most ``%(batch)s`` of them, off ``runs_by_status_updated``, locked (a run another
#: transaction holds, a requeue say, is left for the next prune).
PRUNABLE: Final = (
    "SELECT run_id FROM runs WHERE status = ANY(%(statuses)s) AND updated_at < %(before)s"
    f" AND {_NO_ATTEMPT_OUT} LIMIT %(batch)s FOR UPDATE SKIP LOCKED"
)
PRUNABLE_COUNT: Final = (
    "SELECT COUNT(*) FROM runs WHERE status = ANY(%(statuses)s) AND updated_at < %(before)s"
    f" AND {_NO_ATTEMPT_OUT}"
)
#: A pruned run's rows in each table of ``rows.RUN_TABLES``, then the run itself, for the runs
#: of the array ``%s``.
PRUNE: Final[tuple[LiteralString, ...]] = tuple(
    f"DELETE FROM {table} WHERE run_id = ANY(%s)" for table in (*rows.RUN_TABLES, "runs")
)

# -- recurring workflows ---------------------------------------------------------------------------

_RECURRING_COLUMNS: Final = ", ".join(rows.RECURRING_COLUMNS)
#: The rows of the names in the ``text[]`` ``%s``.
RECURRING: Final = (
    f"SELECT {_RECURRING_COLUMNS} FROM recurring WHERE name = ANY(%s::text[])"
    ' ORDER BY name COLLATE "C"'
)
RECURRING_ALL: Final = f'SELECT {_RECURRING_COLUMNS} FROM recurring ORDER BY name COLLATE "C"'
#: The rows due at ``%s``: a range of the partial index ``recurring_due``.
RECURRING_DUE: Final = (
    f"SELECT {_RECURRING_COLUMNS} FROM recurring WHERE next_at IS NOT NULL AND next_at <= %s"
    ' ORDER BY next_at, name COLLATE "C"'
)
#: A first write: nothing if another engine wrote the name first.
RECURRING_INSERT: Final = (
    f"INSERT INTO recurring (name, created_at, {', '.join(rows.RECURRING_WRITE_COLUMNS)})"
    f" VALUES (%s, %s, {', '.join('%s' for _ in rows.RECURRING_WRITE_COLUMNS)})"
    " ON CONFLICT (name) DO NOTHING"
)
#: A step, a compare-and-set on the revision ``%s`` it read.
RECURRING_UPDATE: Final = (
    f"UPDATE recurring SET {', '.join(f'{c} = %s' for c in rows.RECURRING_WRITE_COLUMNS)},"
    " rev = rev + 1 WHERE name = %s AND rev = %s"
)
