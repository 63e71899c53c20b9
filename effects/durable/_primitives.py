"""
The records of the workflow primitives that are neither local nor dispatched steps: what a
``recv``, a ``set_event`` and a child workflow write, built purely (the context commits them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from effects.durable._codec import JSON, Codec
from effects.durable._definitions import WorkflowDef, check_name
from effects.durable._records import Checkpoint, CheckpointKind, CheckpointStatus, Run
from effects.durable._store import ChildRun, NewEvent, NewRun
from effects.durable.errors import StepError

__all__ = ["ChildTarget", "child_target", "written"]

#: The statuses of a checkpoint that a primitive writes at once (its work is done).
_DONE: Final[CheckpointStatus] = "completed"


@attrs.frozen
class ChildTarget:
    """
    The workflow a child run runs: its *name*, *version*, *codec* and whole-run *timeout_ms*
    (``None``: none).
    """

    name: str
    version: str
    codec: Codec = JSON
    timeout_ms: int | None = None

    def new_run(self, run_id: str, parent_id: str, text: str, now: int, trace: str) -> ChildRun:
        """The child run a commit makes (pending, input *text*) and its ``run.started``."""
        deadline = None if self.timeout_ms is None else now + self.timeout_ms
        run = NewRun(
            run_id,
            self.name,
            self.version,
            text,
            now,
            traceparent=trace,
            deadline=deadline,
            parent_id=parent_id,
        )
        data = {"workflow": self.name, "parent": parent_id}
        return ChildRun(run, (NewEvent("run.started", now, None, data),))


def child_target(workflow: object, known: Mapping[str, WorkflowDef[Any, Any]]) -> ChildTarget:
    """
    The child workflow *workflow* names: a ``WorkflowDef`` (served by this engine or another),
    or the name of one this engine has.

    Raises:
        TypeError: If it is neither.
        ValueError: If it is a name this engine does not have.
    """
    if isinstance(workflow, WorkflowDef):
        definition: WorkflowDef[Any, Any] = workflow  # pyright: ignore[reportUnknownVariableType]
        return ChildTarget(
            definition.name, definition.version, definition.codec, definition.timeout_ms
        )
    if not isinstance(workflow, str):
        msg = f"a child workflow is a WorkflowDef or a workflow's name, got {workflow!r}"
        raise TypeError(msg)
    found = known.get(check_name(workflow, "child workflow name"))
    if found is None:
        shown = ", ".join(map(repr, sorted(known))) or "none"
        msg = (
            f"unknown workflow {workflow!r}: this engine has {shown}; pass the WorkflowDef of"
            " a workflow another engine serves"
        )
        raise ValueError(msg)
    return ChildTarget(found.name, found.version, found.codec, found.timeout_ms)


def written(
    run: Run,
    seq: int,
    name: str,
    kind: CheckpointKind,
    *,
    now: int,
    recorded: Checkpoint | None,
    status: CheckpointStatus = _DONE,
    wake_at: int | None = None,
    error: StepError | None = None,
    input: Any = None,  # noqa: A002 - the checkpoint's field
) -> Checkpoint:
    """
    The checkpoint a primitive writes at *seq*: new (created *now*), or *recorded* moved on
    (its creation time, ``wake_at`` and input kept unless given). A failed one is settled.
    """
    return Checkpoint(
        run_id=run.run_id,
        seq=seq,
        name=name,
        kind=kind,
        step_id=f"{run.run_id}:{seq}",
        status=status,
        attempts=0,
        wake_at=wake_at if recorded is None or wake_at is not None else recorded.wake_at,
        output=None,
        error=error,
        errors=() if error is None else (error,),
        final=error is not None,
        created_at=now if recorded is None else recorded.created_at,
        updated_at=now,
        input=input if recorded is None or input is not None else recorded.input,
    )
