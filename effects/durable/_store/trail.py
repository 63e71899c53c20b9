"""
The events a store writes of its own (not handed to it by the engine), each built once: their
names, levels and data, and a row of them as every dialect's event insert takes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from effects.durable._names import EventName
from effects.durable._records import Task
from effects.durable._store import NewEvent, TaskOutcome, discarded
from effects.durable._store.rows import dumps

__all__ = [
    "EventRow",
    "admitted",
    "cancel_requested",
    "cancelled",
    "cancelled_data",
    "event_rows",
    "outcome_event",
    "recovery_event",
    "redispatched",
    "requeued",
    "result_discarded",
    "started_data",
    "waiting",
    "withdrawn",
]

#: An event as a dialect's event insert takes it: run id, seq, name, level, at, data (JSON text).
EventRow = tuple[str, int | None, EventName, str, int, str]


def event_rows(run_id: str, events: Sequence[NewEvent]) -> list[EventRow]:
    """The rows of *events* of run *run_id*, in their order."""
    return [(run_id, e.seq, e.name, e.level, e.at, dumps(e.data)) for e in events]


def outcome_event(run_id: str, seq: int, attempt: int, outcome: TaskOutcome, now: int) -> EventRow:
    """``step.completed`` or ``step.failed``: an attempt's outcome applied to its checkpoint."""
    if outcome.error is None:
        return (
            run_id,
            seq,
            "step.completed",
            "info",
            now,
            dumps({"attempt": attempt, "kind": "remote"}),
        )
    data = {"attempt": attempt, "kind": "remote", "error": outcome.error.to_json()}
    level = "warning" if outcome.error.retryable else "error"
    return run_id, seq, "step.failed", level, now, dumps(data)


def result_discarded(task: Task, outcome: TaskOutcome, now: int) -> EventRow:
    """``step.result_discarded``: the result of an attempt that was withdrawn."""
    return (
        task.run_id,
        task.seq,
        "step.result_discarded",
        "warning",
        now,
        dumps(discarded(task, outcome)),
    )


def started_data(attempt: int, worker: str, *, redispatched: bool) -> dict[str, Any]:
    """The data of ``step.started``: a worker claimed the attempt."""
    data: dict[str, Any] = {"attempt": attempt, "kind": "remote", "worker": worker}
    if redispatched:
        data["redispatched"] = True
    return data


def waiting(run_id: str, seq: int, attempt: int, queue: str | None, now: int) -> EventRow:
    """``step.queued``: the attempt waits for a slot of its flow-control queue."""
    return run_id, seq, "step.queued", "info", now, dumps({"attempt": attempt, "queue": queue})


def admitted(run_id: str, seq: int, attempt: int, queue: str, now: int) -> EventRow:
    """``step.admitted``: a waiting attempt took a free slot of its queue."""
    return run_id, seq, "step.admitted", "info", now, dumps({"attempt": attempt, "queue": queue})


def withdrawn(run_id: str, seq: int, attempt: int, *, claimed: bool, now: int) -> EventRow:
    """``step.withdrawn``: an attempt the engine gave up on (deleted, or marked if claimed)."""
    data = {"attempt": attempt, "claimed": claimed}
    return run_id, seq, "step.withdrawn", "info", now, dumps(data)


def redispatched(run_id: str, seq: int, attempt: int, now: int) -> EventRow:
    """``step.redispatched``: ``redispatch_pending`` enqueued the step again."""
    data = {"attempt": attempt, "by": "redispatch_pending"}
    return run_id, seq, "step.redispatched", "warning", now, dumps(data)


def recovery_event(run_id: str, verdict: str, count: int, wake_at: int, now: int) -> EventRow:
    """The event of a recovery *verdict* (see ``rules.recovery_verdict``) of a run recovered
    *count* times before."""
    if verdict == "reconciling":
        return run_id, None, "run.reconciling", "warning", now, dumps({"wake_at": wake_at})
    if verdict == "dead":
        return run_id, None, "run.dead", "error", now, dumps({"recovery_attempts": count})
    data = {"recovery_attempts": count + 1}
    return run_id, None, "run.recovered", "warning", now, dumps(data)


def requeued(run_id: str, reset: int, now: int) -> EventRow:
    """``run.requeued``: ``requeue`` reset *reset* checkpoints and made the run pending."""
    return run_id, None, "run.requeued", "info", now, dumps({"checkpoints_reset": reset})


def cancelled_data(*, compensate: bool, compensation_failed: Sequence[str]) -> dict[str, Any]:
    """The data of ``run.cancelled`` (from a cancel, or from the turn that ends an unwinding)."""
    return {"compensate": compensate, "compensation_failed": list(compensation_failed)}


def cancelled(run_id: str, *, compensate: bool, now: int) -> EventRow:
    """``run.cancelled``: a cancel ended the run at once (no undo ran)."""
    data = cancelled_data(compensate=compensate, compensation_failed=())
    return run_id, None, "run.cancelled", "warning", now, dumps(data)


def cancel_requested(run_id: str, now: int) -> EventRow:
    """``run.cancel_requested``: a compensating cancel; the run's next turn undoes its steps."""
    return run_id, None, "run.cancel_requested", "warning", now, dumps({})
