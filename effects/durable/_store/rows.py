"""
The stores' rows, once for every dialect: the column lists of each table and the codecs between
a row's values and the engine's records.

Both SQL stores keep the same columns (a test compares their schemas with these lists) and the
same value types: epoch ms integers, JSON text (ASCII, as ``dumps`` writes it), booleans (SQLite
gives them as 0 or 1).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, LiteralString

from effects.durable._records import Checkpoint, Event, Run, Task
from effects.durable._store import (
    CheckpointWrite,
    ClaimedRun,
    EventValue,
    Message,
    NewRun,
    NewTask,
    RecurringRow,
)
from effects.durable.errors import StepError

__all__ = [
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_WRITE_COLUMNS",
    "EVENT_VALUE_COLUMNS",
    "MESSAGE_COLUMNS",
    "PRUNE_BATCH",
    "RECURRING_COLUMNS",
    "RECURRING_WRITE_COLUMNS",
    "RUN_COLUMNS",
    "RUN_DATA_TABLES",
    "RUN_TABLES",
    "SLOT_HOLDERS",
    "TASK_COLUMNS",
    "TASK_INSERT_COLUMNS",
    "checkpoint_of",
    "checkpoint_values",
    "checkpoints_after",
    "dumps",
    "error_of",
    "error_text",
    "errors_text",
    "event_value_of",
    "events_of",
    "leased_run",
    "loads",
    "message_of",
    "policy_text",
    "recurring_of",
    "recurring_values",
    "run_of",
    "task_of",
    "task_values",
]

#: The columns of a run, in the order ``run_of`` reads them.
RUN_COLUMNS: Final = (
    "run_id",
    "workflow",
    "version",
    "status",
    "input",
    "output",
    "error",
    "recovery_attempts",
    "created_at",
    "updated_at",
    "wake_at",
    "cancel",
    "traceparent",
    "deadline",
    "parent_id",
)
#: The columns of a message (the ``messages`` table), in the order ``message_of`` reads them:
#: ``n`` numbers a run's messages in send order; ``seq`` is the ``recv`` checkpoint that took
#: it (NULL: unread); ``message_id`` is unique per run (NULL: none given).
MESSAGE_COLUMNS: Final = ("run_id", "n", "topic", "body", "message_id", "sent_at", "seq")
#: The columns of an event value (the ``event_values`` table, one row per run and key), in the
#: order ``event_value_of`` reads them.
EVENT_VALUE_COLUMNS: Final = ("run_id", "key", "value", "seq", "set_at")
#: The tables of a run's messages and event values, each keyed by ``run_id`` (in the memory
#: store: ``_Tables`` attributes of these names, keyed by run id): deleting a run deletes its
#: rows of each (``DELETE FROM <table> WHERE run_id = ...``).
RUN_DATA_TABLES: Final[tuple[LiteralString, ...]] = ("messages", "event_values")
#: The tables that hold a run's rows beside ``runs``, each with a ``run_id`` column (the memory
#: store: an attribute of its tables keyed by the run, by a tuple starting with it, or holding
#: rows that have a ``run_id``): ``prune`` deletes a finished run's rows from every one. A
#: feature that keeps rows of a run in a table of its own (messages, event values) adds the
#: table's name here, and retention covers it on every store.
RUN_TABLES: Final[tuple[LiteralString, ...]] = (
    "checkpoints",
    "step_errors",
    "tasks",
    "events",
    *RUN_DATA_TABLES,
)
#: How many runs one transaction of ``prune`` deletes.
PRUNE_BATCH: Final = 500
#: The columns of a checkpoint, in the order ``checkpoint_of`` reads them. ``errors`` is not a
#: column: each dialect reads it from ``step_errors`` (one row per failed attempt), as JSON text.
CHECKPOINT_COLUMNS: Final = (
    "run_id",
    "seq",
    "name",
    "kind",
    "step_id",
    "status",
    "attempts",
    "wake_at",
    "output",
    "error",
    "errors",
    "final",
    "created_at",
    "updated_at",
    "progress",
    "grp",
    "queue",
    "retry_state",
    "dispatched_at",
    "input",
    "rev",
    "timeout_ms",
    "lease_ms",
    "redispatches",
    "heartbeat_at",
    "handler",
    "policy",
)
#: The columns of a task ``task_of`` reads, before its checkpoint's progress, timeout and lease.
TASK_COLUMNS: Final = (
    "task_id",
    "run_id",
    "seq",
    "step_id",
    "name",
    "grp",
    "input",
    "attempt",
    "queue",
    "redispatched",
    "workflow",
    "traceparent",
    "available_at",
)
#: The columns a turn writes of a checkpoint row, in the order ``checkpoint_values`` gives them
#: (an insert adds ``run_id``, ``seq`` and ``created_at``).
CHECKPOINT_WRITE_COLUMNS: Final = (
    "name",
    "kind",
    "step_id",
    "status",
    "attempts",
    "wake_at",
    "output",
    "error",
    "final",
    "retry_state",
    "grp",
    "queue",
    "dispatched_at",
    "input",
    "timeout_ms",
    "lease_ms",
    "redispatches",
    "heartbeat_at",
    "handler",
    "updated_at",
)
#: The columns of a new task row, in the order ``task_values`` gives them.
TASK_INSERT_COLUMNS: Final = (
    "run_id",
    "seq",
    "step_id",
    "name",
    "grp",
    "queue",
    "queue_limit",
    "input",
    "attempt",
    "status",
    "available_at",
    "redispatched",
    "created_at",
    "workflow",
    "traceparent",
)
#: The columns of a recurring workflow's row, in the order ``recurring_of`` reads them.
RECURRING_COLUMNS: Final = (
    "name",
    "workflow",
    "schedule",
    "state",
    "next_at",
    "recurs",
    "missed_at",
    "rev",
    "created_at",
    "updated_at",
)
#: The columns a write sets, in the order ``recurring_values`` gives them (an insert adds
#: ``name`` and ``created_at``; ``rev`` is the store's).
RECURRING_WRITE_COLUMNS: Final = (
    "workflow",
    "schedule",
    "state",
    "next_at",
    "recurs",
    "missed_at",
    "updated_at",
)
#: The task statuses that hold a slot of a flow-control queue. A withdrawn attempt a worker
#: still runs holds its slot until it reports or its claim lapses.
SLOT_HOLDERS: Final = "('queued', 'claimed', 'withdrawn')"

#: JSON text as the stores keep it: compact, ASCII (every other character escaped, so any text
#: round-trips whatever the store's text type holds).
dumps: Final = json.JSONEncoder(separators=(",", ":")).encode


def loads(text: str | None) -> Any:
    """The value of stored JSON *text* (``None`` for SQL NULL)."""
    return None if text is None else json.loads(text)


def error_of(text: str | None) -> StepError | None:
    """The ``StepError`` stored as JSON *text*, or ``None``."""
    return None if text is None else StepError.from_json(json.loads(text))


def error_text(error: StepError | None) -> str | None:
    """*error* as stored JSON text, or ``None``."""
    return None if error is None else dumps(error.to_json())


def errors_text(errors: Sequence[StepError]) -> str:
    """*errors* as a JSON list of each one's JSON text (a store inserts one row per item)."""
    return dumps([dumps(e.to_json()) for e in errors])


def run_of(row: Sequence[Any]) -> Run:
    """A ``Run`` from a row of ``RUN_COLUMNS``."""
    return Run(
        run_id=row[0],
        workflow=row[1],
        version=row[2],
        status=row[3],
        input=loads(row[4]),
        output=loads(row[5]),
        error=error_of(row[6]),
        recovery_attempts=row[7],
        created_at=row[8],
        updated_at=row[9],
        wake_at=row[10],
        cancel=row[11],
        traceparent=row[12],
        deadline=row[13],
        parent_id=row[14],
    )


def message_of(row: Sequence[Any]) -> Message:
    """A ``Message`` from a row of ``MESSAGE_COLUMNS``."""
    return Message(
        run_id=row[0],
        n=row[1],
        topic=row[2],
        body=loads(row[3]),
        message_id=row[4],
        sent_at=row[5],
        seq=row[6],
    )


def event_value_of(row: Sequence[Any]) -> EventValue:
    """An ``EventValue`` from a row of ``EVENT_VALUE_COLUMNS``."""
    return EventValue(run_id=row[0], key=row[1], value=loads(row[2]), seq=row[3], at=row[4])


#: Where a row of ``CHECKPOINT_COLUMNS`` holds the sequence number and the revision.
_SEQ_AT: Final = CHECKPOINT_COLUMNS.index("seq")
_REV_AT: Final = CHECKPOINT_COLUMNS.index("rev")


def checkpoints_after(
    rows: Sequence[Sequence[Any]], since: int
) -> tuple[list[Checkpoint], tuple[int, int]]:
    """
    The checkpoints of *rows* (of ``CHECKPOINT_COLUMNS``, by sequence number) after *since*,
    and ``(how many, sum of revisions)`` of those at or below it (``ClaimedRun.upto``): the
    rows below are counted, not decoded.
    """
    count = total = 0
    after: list[Checkpoint] = []
    for row in rows:
        if row[_SEQ_AT] <= since:
            count += 1
            total += row[_REV_AT]
        else:
            after.append(checkpoint_of(row))
    return after, (count, total)


def checkpoint_of(row: Sequence[Any]) -> Checkpoint:
    """A ``Checkpoint`` from a row of ``CHECKPOINT_COLUMNS`` (its errors decoded when read)."""
    return Checkpoint(
        run_id=row[0],
        seq=row[1],
        name=row[2],
        kind=row[3],
        step_id=row[4],
        status=row[5],
        attempts=row[6],
        wake_at=row[7],
        output=loads(row[8]),
        error=error_of(row[9]),
        errors=row[10],
        final=bool(row[11]),
        created_at=row[12],
        updated_at=row[13],
        progress=loads(row[14]),
        group=row[15],
        queue=row[16],
        retry_state=loads(row[17]),
        dispatched_at=row[18],
        input=loads(row[19]),
        rev=row[20],
        timeout_ms=row[21],
        lease_ms=row[22],
        redispatches=row[23],
        heartbeat_at=row[24],
        handler=row[25],
        policy=loads(row[26]),
    )


def task_of(row: Sequence[Any]) -> Task:
    """A ``Task`` from a row of ``TASK_COLUMNS`` then its checkpoint's progress, timeout, lease."""
    return Task(
        task_id=row[0],
        run_id=row[1],
        seq=row[2],
        step_id=row[3],
        name=row[4],
        group=row[5],
        input=loads(row[6]),
        attempt=row[7],
        queue=row[8],
        redispatched=bool(row[9]),
        workflow=row[10],
        traceparent=row[11],
        available_at=row[12],
        last_progress=loads(row[13]),
        timeout_ms=row[14],
        lease_ms=row[15],
    )


def checkpoint_values(write: CheckpointWrite, now: int) -> tuple[Any, ...]:
    """The values of ``CHECKPOINT_WRITE_COLUMNS`` that *write* stores at epoch ms *now*."""
    cp = write.checkpoint
    return (
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
        cp.handler,
        now,
    )


def policy_text(checkpoint: Checkpoint) -> str | None:
    """The stored JSON text of *checkpoint*'s policy (an insert writes it; updates keep it)."""
    return None if checkpoint.policy is None else dumps(checkpoint.policy)


def task_values(task: NewTask, status: str, now: int) -> tuple[Any, ...]:
    """The values of ``TASK_INSERT_COLUMNS`` of *task*, inserted with *status* at *now*."""
    return (
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
        task.workflow,
        task.traceparent,
    )


def leased_run(run: NewRun, token: str) -> ClaimedRun:
    """*run* as ``create_run`` stored it leased to *token*: running, no checkpoints yet."""
    created = Run(run.run_id, run.workflow, run.version, "running", loads(run.input),
                  None, None, 0, run.now, run.now, traceparent=run.traceparent,
                  deadline=run.deadline,
                  parent_id=run.parent_id)  # fmt: skip
    return ClaimedRun(created, token, ())


def events_of(run_id: str, rows: Sequence[Sequence[Any]]) -> list[Event]:
    """The ``Event`` of each row of ``name, level, at, seq, data`` of run *run_id*."""
    return [
        Event(run_id, name, level, at, seq, json.loads(data)) for name, level, at, seq, data in rows
    ]


def tapped_events(rows: Sequence[Sequence[Any]]) -> list[Event]:
    """The ``Event`` of each row of ``run_id, seq, name, level, at, data`` (a store's tap)."""
    return [
        Event(run_id, name, level, at, seq, json.loads(data))
        for run_id, seq, name, level, at, data in rows
    ]


def recurring_of(row: Sequence[Any]) -> RecurringRow:
    """A ``RecurringRow`` from its columns in ``RECURRING_COLUMNS`` order."""
    name, workflow, schedule, state, next_at, recurs, missed_at, rev, created, updated = row
    return RecurringRow(
        name, workflow, schedule, state, next_at, bool(recurs), missed_at, rev, created, updated
    )


def recurring_values(row: RecurringRow) -> tuple[Any, ...]:
    """The values of ``RECURRING_WRITE_COLUMNS`` of *row*."""
    return tuple(getattr(row, column) for column in RECURRING_WRITE_COLUMNS)
