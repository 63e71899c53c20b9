"""
The run's state machine, once for every store: pure decisions over row values (no SQL, no I/O).

A store reads the few values a rule needs, asks the rule, and writes what it says. Where a store
must decide inside SQL (the lease compare-and-set of every turn write, PostgreSQL's
one-statement fast paths), the guard is a named fragment of its statements module
(``sqlite_sql``, ``postgres_sql``) whose comment names the rule here that it encodes; each rule
below lists those fragments under *SQL*.
"""

from __future__ import annotations

from typing import Final, Literal

from effects.durable._names import WORKFLOW_TIMEOUT
from effects.durable._records import FINISHED, Checkpoint, Run
from effects.durable._store import NewTask
from effects.durable._store.rows import dumps

__all__ = [
    "COMPENSATION_PREFIX",
    "REQUEUEABLE",
    "Admission",
    "CancelAction",
    "Verdict",
    "admission",
    "admits",
    "attempt_current",
    "awaited",
    "awaiting_liveness",
    "cancel_action",
    "cancel_mode",
    "cancels_attempt",
    "check_requeue",
    "check_send",
    "child_wakes",
    "claim_holds",
    "compensated",
    "gives_up",
    "lease_holds",
    "message_wakes",
    "outcome_applies",
    "parked_until",
    "prunable",
    "recovery_verdict",
    "redispatch",
    "redispatchable",
    "retrying",
    "runnable",
    "settled",
    "stale_dispatch",
    "task_name",
    "unserved",
    "wakes",
]

#: The run statuses ``requeue`` accepts: runs that ended without completing.
REQUEUEABLE: Final = ("failed", "dead", "cancelled")
#: How the checkpoints of compensations are named: ``compensate:<the step it undoes>`` (a name a
#: workflow's own steps cannot take).
COMPENSATION_PREFIX: Final = "compensate:"

Verdict = Literal["reconciling", "dead", "recovered"]
Admission = Literal["queued", "waiting"]
CancelAction = Literal["cancel", "request", "keep"]


def lease_holds(status: str, lease_token: str | None, token: str) -> bool:
    """
    A turn's lease holds while its run is ``running`` and still carries the *token* the turn
    was claimed with; every write of the turn is a compare-and-set on it.

    SQL: ``LEASE_HELD`` in both statements modules (every advance, ``record_local_step``,
    ``renew_lease``).
    """
    return status == "running" and lease_token == token


def runnable(status: str, wake_at: int | None, now: int) -> bool:
    """
    A turn may claim a run that is pending, or suspended and due (``wake_at <= now``; a
    suspended run without ``wake_at`` waits for a result).

    SQL: ``RUNNABLE`` in both statements modules (``claim_runs``).
    """
    return status == "pending" or (status == "suspended" and wake_at is not None and wake_at <= now)


def parked_until(wake_at: int | None, deadline: int | None) -> int | None:
    """
    When a suspended run is due: at *wake_at* (``None``: when a result wakes it), or at its
    whole-run *deadline* (epoch ms) if that comes first, so a run that waits is woken to time
    out at its deadline.

    SQL: ``RUN_RECONCILE`` in both statements modules (a reconciling run parked by recovery);
    every other suspension is a turn's, which applies this rule before it commits.
    """
    if deadline is None:
        return wake_at
    return deadline if wake_at is None else min(wake_at, deadline)


def unserved(status: str, workflow: str, version: str, served: dict[str, str]) -> bool:
    """
    A run waits for a version nobody here serves: it is pending or suspended, and of a
    workflow that *served* (name to version, an engine's) has at another version.

    SQL: the unserved clause of ``listing.filters`` (``UNSERVED`` in both statements modules).
    """
    return status in ("pending", "suspended") and workflow in served and served[workflow] != version


def prunable(
    status: str, updated_at: int, *, statuses: frozenset[str], before: int, attempt_out: bool
) -> bool:
    """
    ``prune`` deletes a run of one of *statuses* (finished ones) whose last change came before
    epoch ms *before*, unless an attempt of it is still out (claimed or withdrawn: its worker
    may still report, and its queue slot is freed only then); it is pruned once that attempt
    reported or its claim lapsed.

    SQL: ``PRUNABLE`` and ``PRUNABLE_COUNT`` in both statements modules.
    """
    return status in statuses and updated_at < before and not attempt_out


def claim_holds(status: str, claimed_by: str | None, worker: str) -> bool:
    """
    A worker's claim of a task holds while the task is ``claimed`` by it: a withdrawn or
    released one is no longer renewed or put back.

    SQL: ``CLAIM_HELD`` in both statements modules (``renew_claim``, ``release_claim``).
    """
    return status == "claimed" and claimed_by == worker


def settled(status: str, final: bool) -> bool:
    """
    A checkpoint whose attempts are over: completed, or failed for good (replay raises that
    failure, and the workflow may have acted on it).

    SQL: ``SETTLED`` (``sqlite_sql``, ``postgres_sql``), ``NOT_SETTLED`` (``postgres_sql``).
    """
    return status == "completed" or (status == "failed" and final)


def outcome_applies(status: str, attempts: int, final: bool, *, attempt: int, ok: bool) -> bool:
    """
    Whether an attempt's outcome changes its checkpoint. A success applies to any step not
    ``settled`` (a late success of an older attempt, whose claim lapsed, still completes it);
    a failure only to the attempt the checkpoint waits for, while it is pending or running.
    A withdrawn attempt's outcome never reaches this rule: its result is discarded first.

    SQL: ``COMPLETES`` and ``FAILS`` (``postgres_sql``), each beside ``NOT_WITHDRAWN`` in the
    one-statement result.
    """
    if settled(status, final):
        return False
    return ok or attempt_current(status, attempts, attempt)


def awaited(status: str) -> bool:
    """
    A dispatched step's checkpoint still awaits its outcome while it is pending or running.

    SQL: ``status IN ('pending', 'running')`` in both statements modules (``ATTEMPT_CURRENT``,
    the stale filter of ``listing.filters``, the liveness probe of recovery, result guards).
    """
    return status in ("pending", "running")


def awaiting_liveness(kind: str, status: str, timeout_ms: int | None) -> bool:
    """
    Recovery waits for a run with a dispatched step under a liveness window (``timeout_ms``)
    that is still awaited: its worker may still report, or the window lapse.
    """
    return kind == "remote" and timeout_ms is not None and awaited(status)


def stale_dispatch(kind: str, status: str, dispatched_at: int | None, before: int) -> bool:
    """A dispatched step still awaited whose dispatch was made before epoch ms *before*."""
    return (
        kind == "remote"
        and awaited(status)
        and dispatched_at is not None
        and dispatched_at < before
    )


def retrying(status: str, final: bool, wake_at: int | None, now: int) -> bool:
    """
    A checkpoint waiting out its backoff: failed, not settled, its next attempt after epoch ms
    *now* (a requeued step, due at once, is not retrying).

    SQL: ``listing.filters``'s retrying clause, ``sqlite_sql.RETRYING``, ``postgres_sql.RETRYING``.
    """
    return status == "failed" and not final and wake_at is not None and wake_at > now


def wakes(status: str) -> bool:
    """
    A result wakes its run while the run is unfinished (pending, running or suspended): a
    suspended run becomes pending, a running turn's suspension then makes it pending.
    """
    return status in ("pending", "running", "suspended")


def check_send(run: Run) -> None:
    """
    Refuse a message to a finished run: nothing would ever read it.

    Raises:
        ValueError: If the run is finished, naming its status.
    """
    if run.status in FINISHED:
        msg = (
            f"run {run.run_id} is {run.status}; only a pending, running or suspended run can"
            " be sent a message"
        )
        raise ValueError(msg)


def message_wakes(status: str, *, awaits_topic: bool) -> bool:
    """
    A message wakes its run (as a result does: ``wakes``) while the run is running (its turn
    may be about to wait for that topic: its suspension then makes it pending), or while it is
    pending or suspended with a ``recv`` of the message's topic pending (*awaits_topic*); a run
    waiting for something else is left alone, and finds the message when it reaches ``recv``.

    SQL: ``MESSAGE_WAKE`` in both statements modules.
    """
    return status == "running" or (status in ("pending", "suspended") and awaits_topic)


def child_wakes(status: str, *, awaits_child: bool) -> bool:
    """
    A child run that finishes wakes its parent (as a result does: ``wakes``) while the parent
    is unfinished and waits for it in ``ctx.child`` (*awaits_child*: a ``child`` checkpoint
    pending whose input is this child's run id). A parent that only started it
    (``ctx.start_child``), or waits for another child, is left alone.

    SQL: ``PARENT_WAKE`` in both statements modules.
    """
    return wakes(status) and awaits_child


def attempt_current(status: str, attempts: int, attempt: int) -> bool:
    """
    An attempt is the current one (its beats count, its claim is a pickup beat) while its
    checkpoint is pending or running at that attempt.

    SQL: ``ATTEMPT_CURRENT`` in both statements modules.
    """
    return awaited(status) and attempts == attempt


def gives_up(cp: Checkpoint) -> bool:
    """
    Whether writing *cp* ends a dispatched step's attempts: it settles the step's failure, or
    (not final, code ``workflow_timeout``) the run passed its deadline and stops waiting for it.
    Then none of its attempts may run any more, and the same commit withdraws them.
    """
    if cp.kind != "remote" or cp.status != "failed":
        return False
    return cp.final or (cp.error is not None and cp.error.code == WORKFLOW_TIMEOUT)


def recovery_verdict(
    *, awaiting_liveness: bool, recovery_attempts: int, max_recovery_attempts: int | None
) -> Verdict:
    """
    What recovery makes of a run whose lease expired. One awaiting a liveness step (a pending
    dispatched checkpoint with ``timeout_ms``) is ``reconciling``: its worker may still report,
    so it is parked until the reconcile wake, not counted as a recovery. Otherwise it is
    ``dead`` once it was recovered *max_recovery_attempts* times, else ``recovered`` (pending
    again, one more recovery counted).
    """
    if awaiting_liveness:
        return "reconciling"
    if max_recovery_attempts is not None and recovery_attempts >= max_recovery_attempts:
        return "dead"
    return "recovered"


def compensated(name: str) -> bool:
    """
    Whether the checkpoint called *name* is a compensation's (``compensate:<step>``): a run that
    has one has been unwound.

    SQL: ``COMPENSATION`` in both statements modules (``requeue``).
    """
    return name.startswith(COMPENSATION_PREFIX)


def check_requeue(run: Run, *, unwound: bool = False) -> None:
    """
    Refuse to requeue a run that has not ended without completing (``REQUEUEABLE``), or one
    whose completed steps were undone: cancelled with compensation (``cancel`` is
    ``"compensate"``), or *unwound* (it has a ``compensated`` checkpoint). A requeue resets
    every failed checkpoint to a fresh first attempt (a local one pending, a dispatched one
    failed and due at once), withdraws the attempts of the dispatched ones, and makes the run
    pending with no output, error, lease, cancel or recovery count: a plainly cancelled run
    resumes where it stopped.

    Raises:
        ValueError: If the run is not failed, dead or cancelled, or was unwound.
    """
    if run.status not in REQUEUEABLE:
        msg = (
            f"run {run.run_id} is {run.status}; only a failed, dead or cancelled run can be retried"
        )
        raise ValueError(msg)
    if run.cancel == "compensate" or unwound:
        how = "cancelled with compensation" if run.cancel == "compensate" else "failed"
        msg = (
            f"run {run.run_id} is {how} and its completed steps were undone (compensate:"
            " checkpoints); it cannot be retried: start a new run"
        )
        raise ValueError(msg)


def cancel_action(run: Run, *, compensate: bool, has_completed: bool) -> CancelAction:
    """
    What ``cancel_run`` does to *run* (*has_completed*: whether any of its steps completed):

    - ``"cancel"``: the run is ``cancelled`` at once: a plain cancel (also of a run whose
      compensating cancel is under way: its remaining undos do not run), or a compensating
      cancel of a run with no completed step (nothing can have registered an undo);
    - ``"request"``: a compensating cancel: the run becomes pending with ``cancel =
      "compensate"`` (event ``run.cancel_requested``), and its next turn undoes, then cancels;
    - ``"keep"``: a compensating cancel of a run already asked to: nothing changes.

    In each case but ``"keep"``, the attempts ``cancels_attempt`` picks are withdrawn and their
    checkpoints failed (``cancelled``, not final), in the same transaction.

    Raises:
        ValueError: If the run is finished, naming its status.
    """
    if run.status in FINISHED:
        msg = (
            f"run {run.run_id} is {run.status}; only a pending, running or suspended run can be"
            " cancelled"
        )
        raise ValueError(msg)
    if not compensate:
        return "cancel"
    if run.cancel == "compensate":
        return "keep"
    return "request" if has_completed else "cancel"


def cancel_mode(run: Run, *, compensate: bool) -> str:
    """What a cancel leaves as *run*'s ``cancel``: ``"compensate"`` once asked for, else plain."""
    return "compensate" if compensate or run.cancel == "compensate" else "plain"


def cancels_attempt(cp: Checkpoint, *, keep_undos: bool) -> bool:
    """
    Whether a cancel stops waiting for *cp*: a dispatched step still ``awaited`` (its attempts
    are withdrawn, so a late result is discarded, and it is failed, not final, with code
    ``cancelled``: a requeue gives it a fresh first attempt). With *keep_undos* (a compensating
    cancel's request) a dispatched compensation (``handler`` set) goes on: its result is kept.
    """
    return (
        cp.kind == "remote" and awaited(cp.status) and not (keep_undos and cp.handler is not None)
    )


def admission(queue: str | None, limit: int | None, held: int) -> Admission:
    """
    A new attempt of a flow-control *queue* is ``queued`` while fewer than *limit* attempts of
    the queue hold a slot (``rows.SLOT_HOLDERS``), else ``waiting``; one of no queue or no limit
    is always queued.
    """
    if queue is not None and limit is not None and held >= limit:
        return "waiting"
    return "queued"


def admits(held: int, limit: int | None) -> bool:
    """Whether a waiting attempt (its queue's *limit*, ``None`` read as 1) takes a free slot."""
    return held < (limit or 1)


def task_name(cp: Checkpoint) -> str:
    """
    The step name the attempts of *cp* carry (what handler a worker runs): a dispatched
    compensation's ``handler`` (its checkpoint is named ``compensate:<step>``), else its name.
    """
    return cp.handler or cp.name


def redispatchable(cp: Checkpoint) -> bool:
    """Whether ``redispatch_pending`` sends *cp* again: a dispatched step pending or running."""
    return cp.kind == "remote" and awaited(cp.status)


def redispatch(cp: Checkpoint, now: int, queue_limit: int | None, run: Run | None) -> NewTask:
    """
    The attempt that redispatches *cp*: ``attempts + 1``, available at once, marked
    redispatched, in its queue with the limit its earlier attempts had (*queue_limit*), carrying
    its *run*'s workflow and traceparent.
    """
    return NewTask(
        run_id=cp.run_id,
        seq=cp.seq,
        step_id=cp.step_id,
        name=task_name(cp),
        group=cp.group,
        input=dumps(cp.input),
        attempt=cp.attempts + 1,
        available_at=now,
        queue=cp.queue,
        redispatched=True,
        queue_limit=queue_limit,
        workflow=None if run is None else run.workflow,
        traceparent=None if run is None else run.traceparent,
    )
