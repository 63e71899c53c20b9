"""The engine's records as users read them: ``Run``, ``Checkpoint``, ``Event``; and ``Task``."""

from __future__ import annotations

import json
from typing import Any, Literal

import attrs

from effects.durable.errors import StepError

__all__ = [
    "Checkpoint",
    "CheckpointKind",
    "CheckpointStatus",
    "Event",
    "Run",
    "RunStatus",
    "Task",
]

RunStatus = Literal["pending", "running", "suspended", "completed", "failed", "cancelled", "dead"]
#: What a checkpoint records: a local step, a dispatched (remote) step, or one of the workflow
#: primitives (a durable sleep, a receive, an event, a child run, a patch marker).
CheckpointKind = Literal["local", "remote", "sleep", "recv", "event", "child", "patch"]
CheckpointStatus = Literal["pending", "running", "completed", "failed"]


def _errors_repr(errors: tuple[StepError, ...] | str) -> str:
    return repr(_decoded_errors(errors))


def _decoded_errors(errors: tuple[StepError, ...] | str) -> tuple[StepError, ...]:
    """*errors* as StepError values (decoded from the JSON text of a list, when text)."""
    if not isinstance(errors, str):
        return errors
    return tuple(StepError.from_json(e) for e in json.loads(errors))


#: Statuses a run never leaves on its own.
FINISHED: frozenset[str] = frozenset({"completed", "failed", "cancelled", "dead"})


@attrs.frozen
class Run:
    """
    One execution of a workflow.

    Attributes:
        run_id: The run's id.
        workflow: The workflow's name.
        version: The workflow's version the run was started with.
        status: ``pending``, ``running``, ``suspended``, ``completed``, ``failed``,
            ``cancelled`` or ``dead``.
        input: The workflow's input (decoded JSON).
        output: The workflow's output once ``completed``, else ``None``.
        error: The failure once ``failed`` or ``dead``, else ``None``.
        recovery_attempts: How many times an expired lease of this run was recovered.
        created_at: Epoch ms of ``start``.
        updated_at: Epoch ms of the last change.
        wake_at: Epoch ms at which a ``suspended`` run is due again, or ``None`` (it waits for
            a result).
        cancel: How the run was asked to cancel: ``None`` (never, or a requeue resumed it),
            ``"plain"`` (``engine.cancel(run_id)``), or ``"compensate"`` (``engine.cancel(run_id,
            compensate=True)``: its compensations run first, then it is ``cancelled``).
        traceparent: The W3C ``traceparent`` made at ``start`` (one trace per run, whichever
            process runs it), or ``None`` for a run of a store from before telemetry.
        deadline: Epoch ms at which the run fails with ``workflow_timeout`` unless it finished
            (``created_at`` plus its whole-run timeout), or ``None`` (no timeout).
        parent_id: The run that started this one as a child workflow (``ctx.child``,
            ``ctx.start_child``), or ``None``.
    """

    run_id: str
    workflow: str
    version: str
    status: RunStatus
    input: Any
    output: Any
    error: StepError | None
    recovery_attempts: int
    created_at: int
    updated_at: int
    wake_at: int | None = None
    cancel: str | None = None
    traceparent: str | None = None
    deadline: int | None = None
    parent_id: str | None = None


@attrs.frozen
class Checkpoint:
    """
    The record of one step of a run, at its sequence number.

    Attributes:
        run_id: The run.
        seq: 1-based position of the step in the workflow.
        name: The step's name.
        kind: ``"local"`` (ran in the engine's process), ``"remote"`` (dispatched to a worker),
            ``"sleep"`` (``ctx.sleep``), ``"patch"`` (``ctx.patched``), or the primitive that
            wrote it: ``"recv"`` (``ctx.recv``: named by the topic, its output the message),
            ``"event"`` (``ctx.set_event``: named by the key, its output the value), ``"child"``
            (``ctx.child`` / ``ctx.start_child``: named by the child's workflow, its input the
            child's run id).
        step_id: ``"{run_id}:{seq}"``, the idempotency key, the same on every attempt.
        status: ``pending``, ``running``, ``completed`` or ``failed``.
        attempts: Attempts made (a remote step's current attempt number while it is pending).
        wake_at: Epoch ms of the next attempt of a failed remote step waiting out its backoff
            (with ``remote_redispatch_ms``, the lease of a pending one); of a timer (a sleep, a
            ``recv`` with a timeout), when it is due, kept once it completed; else ``None``.
        output: The output once ``completed`` (decoded JSON), else ``None``.
        error: The last attempt's failure, else ``None``.
        errors: Every failed attempt's error, oldest first (decoded from the store when first
            read, so a step with many attempts costs nothing per attempt until someone looks).
        final: Whether a ``failed`` checkpoint is settled: its error is what replay raises.
        created_at: Epoch ms when the step was first reached.
        updated_at: Epoch ms of the last change.
        progress: The last heartbeat progress a worker reported (JSON), or ``None``.
        group: Which workers serve a remote step (``"default"`` unless its definition says).
        queue: The flow-control queue of a remote step, or ``None``.
        retry_state: The JSON state of a remote step's retry schedule, or ``None``.
        dispatched_at: Epoch ms of a remote step's latest dispatch, or ``None``.
        input: A remote step's input (decoded JSON), else ``None``.
        rev: The row's revision, which every write increments (for compare-and-set).
        exception: A pickle of a failed local step's exception, or ``None``.
        timeout_ms: The liveness window of a dispatched step on the liveness path, else ``None``.
        lease_ms: The lost-dispatch lease of a pending dispatched step, else ``None``.
        redispatches: How many times a lost dispatch of this step was re-driven.
        heartbeat_at: Epoch ms of the worker's last persisted beat (the claim counts), or ``None``.
        handler: The name of the step a dispatched compensation (``compensate:<step>``) runs,
            which its tasks carry; ``None`` for every other checkpoint (its tasks carry ``name``).
        policy: The step's effective retry policy as stored when the checkpoint was first
            written (a per-call override included): the five retry fields of ``StepOptions``, or
            ``{"retry": <the schedule's repr>, "retries": <cap or None>}``; ``None`` for a
            checkpoint written before policies were stored.

    ``errors`` may be given as the JSON text of the list (as a store holds it): it is decoded
    when first read, and written back as it was when the checkpoint changes in other ways.
    """

    run_id: str
    seq: int
    name: str
    kind: CheckpointKind
    step_id: str
    status: CheckpointStatus
    attempts: int
    wake_at: int | None
    output: Any
    error: StepError | None
    _errors: tuple[StepError, ...] | str = attrs.field(
        eq=_decoded_errors, alias="errors", repr=_errors_repr
    )
    final: bool
    created_at: int
    updated_at: int
    progress: Any = None
    group: str = "default"
    queue: str | None = None
    retry_state: Any = None
    dispatched_at: int | None = None
    input: Any = None
    rev: int = 0
    timeout_ms: int | None = None
    lease_ms: int | None = None
    redispatches: int = 0
    heartbeat_at: int | None = None
    handler: str | None = None
    policy: Any = None
    _decoded: tuple[StepError, ...] | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )

    @property
    def errors(self) -> tuple[StepError, ...]:
        """Every failed attempt's error, oldest first."""
        errors = self._errors
        if not isinstance(errors, str):
            return errors
        if self._decoded is None:
            object.__setattr__(self, "_decoded", _decoded_errors(errors))
        assert self._decoded is not None
        return self._decoded

    def stored_errors(self) -> str | None:
        """
        The JSON text ``errors`` was read from the store as, while they are unchanged (a
        store then need not write them again); ``None`` once they were given as values.
        """
        errors = self._errors
        return errors if isinstance(errors, str) else None


@attrs.frozen
class Event:
    """
    One entry of a run's event trail.

    Attributes:
        run_id: The run the event belongs to.
        name: ``step.started``, ``step.completed``, ``step.failed``, ``step.retry_scheduled``,
            ``run.started``, ``run.completed``, ``run.failed``, ``run.recovered``, ...
        level: ``"info"``, ``"warning"`` or ``"error"``.
        at: Epoch ms.
        seq: The checkpoint's sequence number the event is about, or ``None`` for a run event.
        data: JSON details (``attempt``, ``wake_at``, ``error``, ...).
    """

    run_id: str
    name: str
    level: str
    at: int
    seq: int | None
    data: dict[str, Any]


@attrs.frozen
class Task:
    """
    One dispatched attempt of a remote step, as a worker claims it.

    Attributes:
        task_id: The store's id of this attempt.
        run_id: The run.
        seq: The checkpoint's sequence number.
        step_id: ``"{run_id}:{seq}"``.
        name: The step's name (what handler to run).
        group: Which workers claim it.
        input: The step's input (decoded JSON).
        attempt: 1-based attempt number.
        queue: The flow-control queue, or ``None``.
        redispatched: Whether this attempt re-drives a dispatch that looked lost.
        last_progress: The progress the previous attempt last reported, or ``None``.
        timeout_ms: The step's liveness window, or ``None``.
        lease_ms: The step's lost-dispatch lease, or ``None``.
        workflow: The workflow of the run, or ``None`` (an attempt enqueued before telemetry).
        traceparent: The run's W3C ``traceparent``, or ``None``.
        available_at: Epoch ms from which the attempt could be claimed (its dispatch, or the
            ``wake_at`` of its retry); ``None`` where unknown.
    """

    task_id: int
    run_id: str
    seq: int
    step_id: str
    name: str
    group: str
    input: Any
    attempt: int
    queue: str | None = None
    redispatched: bool = False
    last_progress: Any = None
    timeout_ms: int | None = None
    lease_ms: int | None = None
    workflow: str | None = None
    traceparent: str | None = None
    available_at: int | None = None
