"""
Every SQL statement of the SQLite store, each written once and named; the guards several of them
share are named fragments, composed here at import time. Parameters are ``?`` (or ``?N``).

Where a guard encodes a rule of ``rules``, its comment names the rule.
"""

from __future__ import annotations

from typing import Final

from effects.durable._store import listing, rows

SCHEMA_VERSION: Final = 9

#: ``rules.settled`` of the checkpoint of alias ``c``.
SETTLED: Final = "(c.status = 'completed' OR (c.status = 'failed' AND c.final = 1))"

# Each entry moves the schema from version i to i + 1; a store is upgraded by running the ones it
# lacks, in one transaction.
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
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
        f" checkpoints c WHERE c.run_id = tasks.run_id AND c.seq = tasks.seq AND {SETTLED})",
    ),
    (
        # Sagas: how a run was asked to cancel (plainly, or with its compensations first), and
        # the step a dispatched compensation runs (its tasks carry that name).
        "ALTER TABLE runs ADD COLUMN cancel TEXT",
        "ALTER TABLE checkpoints ADD COLUMN handler TEXT",
    ),
    (
        # The dashboard: each checkpoint's effective policy (JSON, written with the row), runs
        # paged newest first by (created_at, run_id) off an index, and the retrying steps
        # (failed, not settled, a next attempt to come) in a partial index of their own.
        "ALTER TABLE checkpoints ADD COLUMN policy TEXT",
        "DROP INDEX runs_by_created",
        "CREATE INDEX runs_by_created ON runs (created_at DESC, run_id)",
        # A status or a workflow filter pages off its own range (and counts the workflow's
        # runs by status from the index alone), however rare its runs are.
        "CREATE INDEX runs_by_status_created ON runs (status, created_at DESC, run_id)",
        "CREATE INDEX runs_by_workflow ON runs (workflow, created_at DESC, run_id, status)",
        "CREATE INDEX checkpoints_retrying ON checkpoints (wake_at, run_id)"
        " WHERE status = 'failed' AND final = 0",
    ),
    (
        # Telemetry: the run's W3C traceparent (one trace per run), which every attempt carries
        # with its workflow's name, so a worker in any process traces and labels it.
        "ALTER TABLE runs ADD COLUMN traceparent TEXT",
        "ALTER TABLE tasks ADD COLUMN traceparent TEXT",
        "ALTER TABLE tasks ADD COLUMN workflow TEXT",
    ),
    (
        # Workflow primitives (issue 23): a run's whole-run deadline (epoch ms, or NULL), and
        # finished runs by their last change, so retention (prune) reads only what it deletes.
        "ALTER TABLE runs ADD COLUMN deadline INTEGER",
        "CREATE INDEX runs_by_status_updated ON runs (status, updated_at)",
    ),
    (
        # Recurring workflows: each one's place on its schedule's grid, stepped by a
        # compare-and-set on rev; a poll reads what is due off the index on next_at.
        """CREATE TABLE recurring (
            name TEXT PRIMARY KEY,
            workflow TEXT NOT NULL,
            schedule TEXT NOT NULL,
            state TEXT NOT NULL,
            next_at INTEGER,
            recurs INTEGER NOT NULL,
            missed_at INTEGER,
            rev INTEGER NOT NULL DEFAULT 1,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX recurring_due ON recurring (next_at) WHERE next_at IS NOT NULL",
    ),
    (
        # Messages in (engine.send, ctx.recv), events out (ctx.set_event, engine.get_event),
        # and child workflows (the run that started a run). A run's messages are numbered in
        # send order; the unread ones of a topic are one range of a partial index; a
        # message_id is unique within its run (NULL: none given, never a conflict).
        """CREATE TABLE messages (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            topic TEXT NOT NULL,
            body TEXT NOT NULL,
            message_id TEXT,
            sent_at INTEGER NOT NULL,
            seq INTEGER,
            PRIMARY KEY (run_id, n)
        ) WITHOUT ROWID""",
        "CREATE UNIQUE INDEX messages_by_id ON messages (run_id, message_id)",
        "CREATE INDEX messages_unread ON messages (run_id, topic, n) WHERE seq IS NULL",
        """CREATE TABLE event_values (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            seq INTEGER NOT NULL,
            set_at INTEGER NOT NULL,
            PRIMARY KEY (run_id, key)
        ) WITHOUT ROWID""",
        "ALTER TABLE runs ADD COLUMN parent_id TEXT",
        "CREATE INDEX runs_by_parent ON runs (parent_id) WHERE parent_id IS NOT NULL",
    ),
)

# -- schema ----------------------------------------------------------------------------------------

TABLES: Final = "SELECT name FROM sqlite_master"
META: Final = "SELECT key, value FROM durable_meta"
META_WRITE: Final = (
    "INSERT INTO durable_meta (key, value) VALUES ('schema', ?), ('version', ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

# -- fragments -------------------------------------------------------------------------------------

#: ``rules.lease_holds`` of the run ``?`` and the token ``?``.
LEASE_HELD: Final = "run_id = ? AND lease_token = ? AND status = 'running'"
#: ``rules.attempt_current`` of a checkpoint row and the attempt ``?6``.
ATTEMPT_CURRENT: Final = "attempts = ?6 AND status IN ('pending', 'running')"
#: ``rules.runnable`` of a run row at ``?``. Each branch is a range of an index (``runs_by_status``
#: for the due suspended runs): a probe or a claim reads the runs it may take, not every run
#: asleep.
RUNNABLE: Final = "(status = 'pending' OR (status = 'suspended' AND wake_at <= ?))"
_RUN_COLUMNS: Final = ", ".join(rows.RUN_COLUMNS)
# The checkpoint's errors as the JSON text of a list, from its rows in step_errors, in order.
_ERRORS_OF_CHECKPOINT: Final = (
    "COALESCE((SELECT '[' || group_concat(error, ',') || ']' FROM (SELECT error FROM"
    " step_errors e WHERE e.run_id = checkpoints.run_id AND e.seq = checkpoints.seq"
    " ORDER BY e.n)), '[]')"
)
_CHECKPOINT_COLUMNS: Final = ", ".join(
    _ERRORS_OF_CHECKPOINT if c == "errors" else c for c in rows.CHECKPOINT_COLUMNS
)
_TASK_COLUMNS: Final = ", ".join(rows.TASK_COLUMNS)
#: How many attempts of the queue ``?`` hold a slot (``rules.admission``, ``rules.admits``).
SLOTS_HELD: Final = f"SELECT COUNT(*) FROM tasks WHERE queue = ? AND status IN {rows.SLOT_HOLDERS}"

# -- events and errors -----------------------------------------------------------------------------

#: One event of ``trail.EventRow``, numbered after the run's last.
EVENT_INSERT: Final = (
    "INSERT INTO events (run_id, id, seq, name, level, at, data) VALUES"
    " (?1, (SELECT COALESCE(MAX(id), 0) + 1 FROM events WHERE run_id = ?1), ?2, ?3, ?4, ?5, ?6)"
)
# The connection's tap (``Store.tap``): a TEMP trigger sees this connection's inserts alone, and
# its TEMP table rolls back with the transaction (or the savepoint) that wrote them.
TAP_ON: Final = (
    "CREATE TEMP TABLE IF NOT EXISTS durable_tap (run_id TEXT, seq INTEGER, name TEXT,"
    " level TEXT, at INTEGER, data TEXT)",
    "CREATE TEMP TRIGGER IF NOT EXISTS durable_tap AFTER INSERT ON main.events BEGIN"
    " INSERT INTO durable_tap VALUES (NEW.run_id, NEW.seq, NEW.name, NEW.level, NEW.at,"
    " NEW.data); END",
)
TAP_OFF: Final = (
    "DROP TRIGGER IF EXISTS temp.durable_tap",
    "DROP TABLE IF EXISTS temp.durable_tap",
)
#: A derived event (``taps.local_step_rows``) into the tap: ``trail.EventRow``.
TAP_INSERT: Final = "INSERT INTO temp.durable_tap VALUES (?, ?, ?, ?, ?, ?)"
TAP_READ: Final = "SELECT run_id, seq, name, level, at, data FROM temp.durable_tap ORDER BY rowid"
TAP_CLEAR: Final = "DELETE FROM temp.durable_tap"
#: One more error (``?3``, JSON text) of the checkpoint ``(?1, ?2)``, after those it has.
ERROR_APPEND: Final = (
    "INSERT INTO step_errors (run_id, seq, n, error) VALUES (?1, ?2, (SELECT COALESCE(MAX(n), 0)"
    " + 1 FROM step_errors WHERE run_id = ?1 AND seq = ?2), ?3)"
)
ERRORS_DELETE: Final = "DELETE FROM step_errors WHERE run_id = ? AND seq = ?"
ERROR_INSERT: Final = "INSERT INTO step_errors (run_id, seq, n, error) VALUES (?, ?, ?, ?)"

# -- runs ------------------------------------------------------------------------------------------

RUN_INSERT: Final = (
    "INSERT INTO runs (run_id, workflow, version, status, input, created_at, updated_at,"
    " lease_token, lease_until, traceparent, deadline, parent_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"
)
RUN: Final = f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?"
#: ``list_runs``: this, its filters joined by AND after WHERE, then ``RUNS_ORDER``.
RUNS: Final = f"SELECT {_RUN_COLUMNS} FROM runs"
#: The filters of ``list_runs``, in the order ``listing.where`` takes their values.
#: ``rules.unserved``: the run's workflow is among the JSON list ``?`` of ``[name, version]``
#: pairs at another version.
UNSERVED: Final = (
    "EXISTS (SELECT 1 FROM json_each(?) AS p WHERE json_extract(p.value, '$[0]') = runs.workflow"
    " AND json_extract(p.value, '$[1]') <> runs.version)"
)
RUNS_FILTERS: Final = listing.filters(
    "?", not_final="final = 0", starts_with="instr(run_id, ?) = 1", unserved=UNSERVED
)
#: ``Store.unserved``: how many runs wait for each unserved (workflow, version) of ``?``.
UNSERVED_COUNTS: Final = (
    f"SELECT workflow, version, COUNT(*) FROM runs WHERE {RUNS_FILTERS[-1]}"
    " GROUP BY workflow, version"
)
RUNS_ORDER: Final = " ORDER BY created_at DESC, run_id LIMIT ?"
#: ``count_runs``: this, its filters, then ``COUNTS_GROUP``.
COUNTS: Final = "SELECT status, COUNT(*) FROM runs"
COUNTS_GROUP: Final = " GROUP BY status"
#: The same under a filter: grouped by an expression, so SQLite reads the filter's own index
#: (``runs_by_workflow`` covers a workflow's counts) rather than walking ``runs_by_status``
#: for its order, row by row into the table.
COUNTS_GROUP_FILTERED: Final = " GROUP BY status || ''"
#: ``rules.retrying``: the runs of the JSON list ``?`` with a retrying checkpoint at ``?``.
RETRYING: Final = (
    "SELECT DISTINCT run_id FROM checkpoints WHERE run_id IN (SELECT value FROM json_each(?))"
    " AND status = 'failed' AND final = 0 AND wake_at > ?"
)
#: ``queue_stats``: each queue's attempts holding a slot, and waiting for one.
QUEUE_STATS: Final = (
    f"SELECT queue, SUM(status IN {rows.SLOT_HOLDERS}), SUM(status = 'waiting') FROM tasks"
    " WHERE queue IS NOT NULL GROUP BY queue ORDER BY queue"
)
CHECKPOINTS: Final = f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? ORDER BY seq"
CHECKPOINT: Final = f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? AND seq = ?"
#: A claimed run's checkpoints after a sequence number its engine has passed in memory, and how
#: many are at or below it with the sum of their revisions (``ClaimedRun.upto``).
CHECKPOINTS_AFTER: Final = (
    f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ? AND seq > ? ORDER BY seq"
)
CHECKPOINTS_UPTO: Final = (
    "SELECT COUNT(*), COALESCE(SUM(rev), 0) FROM checkpoints WHERE run_id = ? AND seq <= ?"
)
EVENTS: Final = "SELECT name, level, at, seq, data FROM events WHERE run_id = ? ORDER BY id"

# -- turns -----------------------------------------------------------------------------------------

#: ``claim_runs``: these around the ``(?, ?)`` pairs of the workflows' names and versions.
RUNNABLE_PROBE: Final = (
    f"SELECT 1 FROM runs WHERE {RUNNABLE} AND (workflow, version) IN (VALUES ",
    ") LIMIT 1",
)
RUNNABLE_RUNS: Final = (
    f"SELECT {_RUN_COLUMNS} FROM runs WHERE {RUNNABLE} AND (workflow, version) IN (VALUES ",
    ") ORDER BY updated_at, run_id LIMIT ?",
)
RUN_CLAIM: Final = (
    "UPDATE runs SET status = 'running', lease_token = ?, lease_until = ?,"
    " woken = 0 WHERE run_id = ?"
)
LEASE_RENEW: Final = f"UPDATE runs SET lease_until = ? WHERE {LEASE_HELD}"
# The advances of a turn commit (``RunAdvance``), each a compare-and-set on the lease.
# A read, so a step's commit writes no page of the runs table.
LEASE_READ: Final = f"SELECT 1 FROM runs WHERE {LEASE_HELD}"
ADVANCE_CONTINUE: Final = f"UPDATE runs SET lease_until = ?, updated_at = ? WHERE {LEASE_HELD}"
ADVANCE_SUSPEND: Final = (
    "UPDATE runs SET status = CASE WHEN woken = 1 THEN 'pending' ELSE 'suspended' END,"
    f" wake_at = ?, lease_token = NULL, lease_until = NULL, updated_at = ? WHERE {LEASE_HELD}"
)
ADVANCE_FINISH: Final = (
    "UPDATE runs SET status = ?, output = ?, error = ?, wake_at = NULL,"
    f" lease_token = NULL, lease_until = NULL, updated_at = ? WHERE {LEASE_HELD}"
)
ADVANCE_RELEASE: Final = (
    "UPDATE runs SET status = 'pending', lease_token = NULL, lease_until = NULL,"
    f" updated_at = ? WHERE {LEASE_HELD}"
)
CHECKPOINT_INSERT: Final = (
    f"INSERT INTO checkpoints ({', '.join(rows.CHECKPOINT_WRITE_COLUMNS)}, run_id, seq, created_at,"
    f" policy) VALUES ({', '.join('?' for _ in rows.CHECKPOINT_WRITE_COLUMNS)}, ?, ?, ?, ?)"
)
#: A turn's update of a checkpoint, a compare-and-set on its revision.
CHECKPOINT_UPDATE: Final = (
    f"UPDATE checkpoints SET {', '.join(f'{c} = ?' for c in rows.CHECKPOINT_WRITE_COLUMNS)},"
    " rev = rev + 1 WHERE run_id = ? AND seq = ? AND rev = ?"
)
#: ``record_local_step``: the completed checkpoint, inserted only if the lease holds
#: (``rules.lease_holds`` of the run ``?1`` and the token ``?7``), with its policy ``?8``.
LOCAL_STEP_INSERT: Final = (
    "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts,"
    " output, created_at, updated_at, policy)"
    " SELECT ?1, ?2, ?3, 'local', ?1 || ':' || ?2, 'completed', 1, ?4, ?5, ?6, ?8"
    " WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = ?1 AND lease_token = ?7"
    " AND status = 'running')"
)

# -- tasks and queues ------------------------------------------------------------------------------

#: The older attempts of a step nobody claimed (only the newest may run), deleted.
UNCLAIMED_DELETE: Final = (
    "DELETE FROM tasks WHERE run_id = ? AND seq = ? AND status IN ('queued', 'waiting')"
    " RETURNING queue, queue_limit"
)
TASK_INSERT: Final = (
    f"INSERT INTO tasks ({', '.join(rows.TASK_INSERT_COLUMNS)})"
    f" VALUES ({', '.join('?' for _ in rows.TASK_INSERT_COLUMNS)})"
)
OLDEST_WAITING: Final = (
    "SELECT task_id, run_id, seq, attempt, queue_limit FROM tasks"
    " WHERE queue = ? AND status = 'waiting' ORDER BY task_id LIMIT 1"
)
ADMIT: Final = (
    "UPDATE tasks SET status = 'queued', available_at = MAX(available_at, ?) WHERE task_id = ?"
)
# The attempts of the run ``?`` at the seqs of the JSON list ``?`` (``_withdraw``).
WITHDRAW_UNCLAIMED: Final = (
    "DELETE FROM tasks WHERE run_id = ? AND seq IN (SELECT value FROM json_each(?))"
    " AND status IN ('queued', 'waiting') RETURNING queue, seq, attempt"
)
WITHDRAW_CLAIMED: Final = (
    "UPDATE tasks SET status = 'withdrawn' WHERE run_id = ? AND seq IN (SELECT value FROM"
    " json_each(?)) AND status = 'claimed' RETURNING NULL, seq, attempt"
)
#: ``claim_tasks``: these around the ``?`` marks of the groups.
CLAIMABLE_PROBE: Final = (
    "SELECT 1 FROM tasks WHERE status = 'queued' AND grp IN (",
    ") AND available_at <= ? LIMIT 1",
)
CLAIMABLE: Final = (
    f"SELECT {_TASK_COLUMNS} FROM tasks WHERE status = 'queued' AND grp IN (",
    ") AND available_at <= ? ORDER BY task_id LIMIT ?",
)
TASK_CLAIM: Final = (
    "UPDATE tasks SET status = 'claimed', claimed_by = ?, claim_until = ? WHERE task_id = ?"
)
#: The claim is the worker's pickup beat (and renews a lost-dispatch lease), if the attempt
#: ``?4`` is current (``rules.attempt_current``).
PICKUP_BEAT: Final = (
    "UPDATE checkpoints SET status = 'running', heartbeat_at = ?1,"
    " wake_at = CASE WHEN lease_ms IS NULL THEN wake_at ELSE ?1 + lease_ms END,"
    " updated_at = ?1, rev = rev + 1"
    " WHERE run_id = ?2 AND seq = ?3 AND status IN ('pending', 'running')"
    " AND attempts = ?4 RETURNING progress, timeout_ms, lease_ms"
)
#: ``rules.claim_holds`` of the task ``?`` and the worker ``?``.
CLAIM_HELD: Final = "task_id = ? AND claimed_by = ? AND status = 'claimed'"
CLAIM_RENEW: Final = f"UPDATE tasks SET claim_until = ? WHERE {CLAIM_HELD}"
CLAIM_RELEASE: Final = (
    f"UPDATE tasks SET status = 'queued', claimed_by = NULL, claim_until = NULL WHERE {CLAIM_HELD}"
)
WITHDRAWN_RELEASE: Final = (
    "DELETE FROM tasks WHERE task_id = ? AND claimed_by = ? AND status = 'withdrawn'"
    " RETURNING queue"
)
HEARTBEAT: Final = (
    "UPDATE checkpoints SET heartbeat_at = ?1, progress = COALESCE(?2, progress),"
    " wake_at = CASE WHEN lease_ms IS NULL OR ?3 IS NULL THEN wake_at ELSE ?3 END,"
    f" updated_at = ?1, rev = rev + 1 WHERE run_id = ?4 AND seq = ?5 AND {ATTEMPT_CURRENT}"
)
REDISPATCH: Final = (
    "UPDATE checkpoints SET status = 'pending', attempts = ?1, dispatched_at = ?2,"
    " redispatches = redispatches + 1,"
    " wake_at = CASE WHEN lease_ms IS NULL THEN wake_at ELSE ?2 + lease_ms END,"
    " updated_at = ?2, rev = rev + 1 WHERE run_id = ?3 AND seq = ?4"
)
QUEUE_LIMIT_OF_STEP: Final = "SELECT queue_limit FROM tasks WHERE run_id = ? AND seq = ? LIMIT 1"

# -- results ---------------------------------------------------------------------------------------

OWN_TASK_DELETE: Final = (
    "DELETE FROM tasks WHERE task_id = ? AND claimed_by = ? RETURNING queue, status"
)
#: What ``rules.outcome_applies`` reads of a checkpoint.
CHECKPOINT_STATE: Final = (
    "SELECT status, attempts, final FROM checkpoints WHERE run_id = ? AND seq = ?"
)
PROGRESS: Final = "UPDATE checkpoints SET progress = ? WHERE run_id = ? AND seq = ?"
COMPLETE: Final = (
    "UPDATE checkpoints SET status = 'completed', output = ?, error = NULL,"
    " wake_at = NULL, final = 0, updated_at = ?, rev = rev + 1 WHERE run_id = ? AND seq = ?"
)
#: Other attempts of a step that has completed are moot.
MOOT_DELETE: Final = "DELETE FROM tasks WHERE run_id = ? AND seq = ? RETURNING queue"
FAIL: Final = (
    "UPDATE checkpoints SET status = 'failed', error = ?, final = 0,"
    " wake_at = NULL, updated_at = ?, rev = rev + 1 WHERE run_id = ? AND seq = ?"
)
#: A result wakes its run: a suspended one becomes pending, a running one ``woken``.
RUN_WAKE: Final = (
    "UPDATE runs SET woken = 1, wake_at = NULL, updated_at = ?,"
    " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
    " WHERE run_id = ? AND status IN ('pending', 'running', 'suspended')"
)

# -- maintenance -----------------------------------------------------------------------------------

EXPIRED_PROBE: Final = (
    "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'running' AND lease_until < ?1)"
    " OR EXISTS (SELECT 1 FROM tasks WHERE status IN ('claimed', 'withdrawn')"
    " AND claim_until < ?1)"
)
EXPIRED_RUNS: Final = (
    "SELECT run_id, recovery_attempts FROM runs WHERE status = 'running' AND lease_until < ?"
)
#: What ``rules.recovery_verdict`` reads as *awaiting_liveness*.
AWAITING_LIVENESS: Final = (
    "SELECT 1 FROM checkpoints WHERE run_id = ? AND kind = 'remote'"
    " AND timeout_ms IS NOT NULL AND status IN ('pending', 'running') LIMIT 1"
)
#: Parked until ``?1``, or its deadline if that comes first (``rules.parked_until``).
RUN_RECONCILE: Final = (
    "UPDATE runs SET status = 'suspended', wake_at = MIN(?1, COALESCE(deadline, ?1)),"
    " lease_token = NULL, lease_until = NULL, updated_at = ?2 WHERE run_id = ?3"
)
RUN_DEAD: Final = (
    "UPDATE runs SET status = 'dead', error = ?, lease_token = NULL,"
    " lease_until = NULL, updated_at = ? WHERE run_id = ?"
)
RUN_RECOVER: Final = (
    "UPDATE runs SET status = 'pending', lease_token = NULL,"
    " lease_until = NULL, recovery_attempts = recovery_attempts + 1,"
    " updated_at = ? WHERE run_id = ?"
)
EXPIRED_CLAIMS: Final = (
    "SELECT task_id, run_id, seq, step_id, attempt FROM tasks"
    " WHERE status = 'claimed' AND claim_until < ?"
)
TASK_DELETE: Final = "DELETE FROM tasks WHERE task_id = ? RETURNING queue"
EXPIRED_WITHDRAWN_DELETE: Final = (
    "DELETE FROM tasks WHERE status = 'withdrawn' AND claim_until < ? RETURNING queue"
)
# A lease or claim held until T expires at T + 1 (recovery takes `until < now`).
NEXT_DUE: Final = (
    "SELECT MIN(t) FROM ("
    " SELECT MIN(wake_at) AS t FROM runs WHERE status = 'suspended' AND wake_at > ?1"
    " UNION ALL SELECT MIN(lease_until) + 1 FROM runs WHERE status = 'running'"
    " AND lease_until >= ?1"
    " UNION ALL SELECT MIN(available_at) FROM tasks WHERE status = 'queued'"
    " AND available_at > ?1"
    " UNION ALL SELECT MIN(claim_until) + 1 FROM tasks"
    " WHERE status IN ('claimed', 'withdrawn') AND claim_until >= ?1)"
)
FAILED_REMOTE: Final = (
    "SELECT seq FROM checkpoints WHERE run_id = ? AND status = 'failed' AND kind = 'remote'"
)
FAILED_ERRORS_DELETE: Final = (
    "DELETE FROM step_errors WHERE run_id = ? AND seq IN (SELECT seq FROM"
    " checkpoints WHERE run_id = ? AND status = 'failed')"
)
#: ``rules.check_requeue``: what a requeue resets of the failed checkpoints, then of the run.
FAILED_RESET: Final = (
    "UPDATE checkpoints SET status = CASE kind WHEN 'local' THEN 'pending'"
    " ELSE 'failed' END, attempts = 0, final = 0, error = NULL, retry_state = NULL,"
    " wake_at = CASE kind WHEN 'local' THEN NULL ELSE ? END,"
    " updated_at = ?, rev = rev + 1 WHERE run_id = ? AND status = 'failed'"
)
RUN_REQUEUE: Final = (
    "UPDATE runs SET status = 'pending', output = NULL, error = NULL, wake_at = NULL,"
    " woken = 0, lease_token = NULL, lease_until = NULL, recovery_attempts = 0,"
    " cancel = NULL, deadline = NULL, updated_at = ? WHERE run_id = ?"
)
#: ``rules.compensated``: whether the run ``?`` has a compensation's checkpoint.
COMPENSATION: Final = (
    "SELECT 1 FROM checkpoints WHERE run_id = ? AND substr(name, 1, 11) = 'compensate:' LIMIT 1"
)

#: A run's parent wakes when the run ``?2`` finishes (``rules.child_wakes``): unfinished, with
#: a ``child`` checkpoint pending on it (its input ``?3``: the run's id as JSON text).
PARENT_WAKE: Final = (
    "UPDATE runs SET woken = 1, wake_at = NULL, updated_at = ?1,"
    " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
    " WHERE run_id = (SELECT parent_id FROM runs WHERE run_id = ?2)"
    " AND status IN ('pending', 'running', 'suspended') AND EXISTS (SELECT 1 FROM checkpoints c"
    " WHERE c.run_id = runs.run_id AND c.kind = 'child' AND c.status = 'pending'"
    " AND c.input = ?3)"
)
#: Every run below the run ``?`` (its children, theirs, ...), oldest first.
DESCENDANTS: Final = (
    "WITH RECURSIVE tree(run_id) AS (SELECT run_id FROM runs WHERE parent_id = ?1"
    " UNION SELECT r.run_id FROM runs r JOIN tree t ON r.parent_id = t.run_id)"
    f" SELECT {_RUN_COLUMNS} FROM runs WHERE run_id IN (SELECT run_id FROM tree)"
    " ORDER BY created_at, run_id"
)
CHILD_RUNS: Final = (
    f"SELECT {_RUN_COLUMNS} FROM runs WHERE parent_id = ? ORDER BY created_at, run_id"
)

# -- messages and events ---------------------------------------------------------------------------

#: A message to the run ``?1``, numbered after its last; nothing if its id ``?4`` is known.
MESSAGE_INSERT: Final = (
    "INSERT INTO messages (run_id, n, topic, body, message_id, sent_at) VALUES"
    " (?1, (SELECT COALESCE(MAX(n), 0) + 1 FROM messages WHERE run_id = ?1), ?2, ?3, ?4, ?5)"
    " ON CONFLICT (run_id, message_id) DO NOTHING"
)
#: ``rules.message_wakes`` of the run ``?2`` for a message on the topic ``?3``.
MESSAGE_WAKE: Final = (
    "UPDATE runs SET woken = 1, wake_at = NULL, updated_at = ?1,"
    " status = CASE WHEN status = 'suspended' THEN 'pending' ELSE status END"
    " WHERE run_id = ?2 AND (status = 'running' OR (status IN ('pending', 'suspended')"
    " AND EXISTS (SELECT 1 FROM checkpoints c WHERE c.run_id = ?2 AND c.kind = 'recv'"
    " AND c.status = 'pending' AND c.name = ?3)))"
)
_MESSAGE_COLUMNS: Final = ", ".join(rows.MESSAGE_COLUMNS)
#: The run's first unread message on the topic ``?``.
NEXT_MESSAGE: Final = (
    f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE run_id = ? AND topic = ? AND seq IS NULL"
    " ORDER BY n LIMIT 1"
)
#: A turn takes message ``?3`` of run ``?2`` for its recv at ``?1``, if it is still unread.
MESSAGE_TAKE: Final = "UPDATE messages SET seq = ?1 WHERE run_id = ?2 AND n = ?3 AND seq IS NULL"
#: The run's event ``?2`` set to ``?3`` at checkpoint ``?4``, time ``?5`` (the latest wins).
EVENT_VALUE_SET: Final = (
    "INSERT INTO event_values (run_id, key, value, seq, set_at) VALUES (?1, ?2, ?3, ?4, ?5)"
    " ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, seq = excluded.seq,"
    " set_at = excluded.set_at"
)
EVENT_VALUE: Final = (
    f"SELECT {', '.join(rows.EVENT_VALUE_COLUMNS)} FROM event_values WHERE run_id = ? AND key = ?"
)

# -- cancel ----------------------------------------------------------------------------------------

#: ``rules.cancel_action`` "cancel": the run ``?3`` cancelled at once, as ``?1`` (``cancel_mode``).
RUN_CANCEL: Final = (
    "UPDATE runs SET status = 'cancelled', cancel = ?1, error = NULL, wake_at = NULL, woken = 0,"
    " lease_token = NULL, lease_until = NULL, updated_at = ?2 WHERE run_id = ?3"
)
#: ``rules.cancel_action`` "request": the run ``?`` pending, its next turn undoes, then cancels.
RUN_CANCEL_REQUEST: Final = (
    "UPDATE runs SET status = 'pending', cancel = 'compensate', wake_at = NULL,"
    " lease_token = NULL, lease_until = NULL, updated_at = ? WHERE run_id = ?"
)

# -- retention -------------------------------------------------------------------------------------

#: ``rules.prunable``: no attempt of the run is out (claimed, or withdrawn but still running).
_NO_ATTEMPT_OUT: Final = (
    "NOT EXISTS (SELECT 1 FROM tasks t WHERE t.run_id = runs.run_id"
    " AND t.status IN ('claimed', 'withdrawn'))"
)
#: ``prune``: these around the ``?`` marks of the statuses: the runs of those statuses last
#: changed before ``?`` (at most ``?`` of them), off ``runs_by_status_updated``.
PRUNABLE: Final = (
    "SELECT run_id FROM runs WHERE status IN (",
    f") AND updated_at < ? AND {_NO_ATTEMPT_OUT} LIMIT ?",
)
PRUNABLE_COUNT: Final = (
    "SELECT COUNT(*) FROM runs WHERE status IN (",
    f") AND updated_at < ? AND {_NO_ATTEMPT_OUT}",
)
#: A pruned run's rows in each table of ``rows.RUN_TABLES``, then the run itself, for the runs
#: of the JSON list ``?``.
PRUNE: Final = tuple(
    f"DELETE FROM {table} WHERE run_id IN (SELECT value FROM json_each(?))"
    for table in (*rows.RUN_TABLES, "runs")
)

# -- recurring workflows ---------------------------------------------------------------------------

_RECURRING_COLUMNS: Final = ", ".join(rows.RECURRING_COLUMNS)
#: The rows of the names in the JSON list ``?``.
RECURRING: Final = (
    f"SELECT {_RECURRING_COLUMNS} FROM recurring WHERE name IN (SELECT value FROM json_each(?))"
    " ORDER BY name"
)
RECURRING_ALL: Final = f"SELECT {_RECURRING_COLUMNS} FROM recurring ORDER BY name"
#: The rows due at ``?``: a range of the partial index ``recurring_due`` (named, so that no
#: plan ever reads the whole table instead).
RECURRING_DUE: Final = (
    f"SELECT {_RECURRING_COLUMNS} FROM recurring INDEXED BY recurring_due"
    " WHERE next_at IS NOT NULL AND next_at <= ? ORDER BY next_at, name"
)
#: A first write: nothing if another engine wrote the name first.
RECURRING_INSERT: Final = (
    f"INSERT INTO recurring (name, created_at, {', '.join(rows.RECURRING_WRITE_COLUMNS)})"
    f" VALUES (?, ?, {', '.join('?' for _ in rows.RECURRING_WRITE_COLUMNS)})"
    " ON CONFLICT (name) DO NOTHING"
)
#: A step, a compare-and-set on the revision ``?`` it read.
RECURRING_UPDATE: Final = (
    f"UPDATE recurring SET {', '.join(f'{c} = ?' for c in rows.RECURRING_WRITE_COLUMNS)},"
    " rev = rev + 1 WHERE name = ? AND rev = ?"
)
