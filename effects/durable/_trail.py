"""A run's event trail: its stored events and those a local step's fast path derives."""

from __future__ import annotations

from typing import Any, Final

from effects.durable._records import Checkpoint, Event

__all__ = ["merge_events"]

_RUN_FIRST: Final = frozenset({"run.started", "run.requeued"})
_RUN_LAST: Final = frozenset(
    {"run.error_routed", "run.completed", "run.failed", "run.dead", "run.cancelled"}
)


def _first_local() -> dict[str, Any]:
    return {"attempt": 1, "kind": "local"}


def merge_events(stored: list[Event], checkpoints: list[Checkpoint]) -> list[Event]:
    """
    The run's trail: the stored events, plus ``step.started`` and ``step.completed`` of every
    local step that succeeded on its first attempt (its fast path stores no event rows), from
    its checkpoint. Events sort by time; within one ms, run starts first, then steps in sequence
    order, then the run's end, each keeping its stored order.
    """
    with_rows = {e.seq for e in stored}
    derived = [
        event
        for cp in checkpoints
        if cp.kind == "local"
        and cp.status == "completed"
        and cp.attempts == 1
        and cp.seq not in with_rows
        for event in (
            Event(cp.run_id, "step.started", "info", cp.created_at, cp.seq, _first_local()),
            Event(cp.run_id, "step.completed", "info", cp.updated_at, cp.seq, _first_local()),
        )
    ]
    if not derived:
        return stored

    def key(item: tuple[int, Event]) -> tuple[int, int, int, int]:
        index, event = item
        group = 0 if event.name in _RUN_FIRST else 2 if event.name in _RUN_LAST else 1
        return (event.at, group, -1 if event.seq is None else event.seq, index)

    ordered = sorted(enumerate([*stored, *derived]), key=key)
    return [event for _, event in ordered]
