"""What runs and queries return: plain frozen data with ``to_json()``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from migrate._state import Counts, DefinitionResult, RunRecord

__all__ = [
    "DefinitionStatus",
    "ErrorCount",
    "ProgressEvent",
    "RunRef",
    "RunSummary",
    "StatusReport",
]


@attrs.frozen
class ErrorCount:
    """
    How many items of a definition failed with the same kind, type and message in a run.

    Messages that differ only in their numbers (``row 17 ...``, ``row 42 ...``) count as one.

    Attributes:
        definition_id: The definition.
        kind: ``source``, ``process``, ``destination`` or ``tracking``.
        type: The error's class name.
        message: The error's message; when the group's messages differ, their common pattern
            with ``<n>`` in place of the numbers.
        count: How many items failed with it in the run.
    """

    definition_id: str
    kind: str
    type: str
    message: str
    count: int

    def to_json(self) -> dict[str, Any]:
        """``{"definition", "kind", "type", "message", "count"}``."""
        return {
            "definition": self.definition_id,
            "kind": self.kind,
            "type": self.type,
            "message": self.message,
            "count": self.count,
        }


@attrs.frozen
class RunSummary:
    """
    What a run did.

    Attributes:
        run_id: The run's id.
        status: ``"succeeded"`` (no failed item, no error) or ``"failed"``.
        started_at: Epoch seconds.
        ended_at: Epoch seconds.
        definitions: Per definition: mode, status, counts for this run, error, blocked reason,
            retries.
        top_errors: The failures' most common errors, most common first (at most 5).
        notes: Things the user should know, such as a changed source contract accepted by
            ``force``.
        kind: ``"run"``, or ``"rollback"`` for what `migrate.rollback` returns: then each
            definition's counts are ``rolled_back``, ``failed`` and ``skipped``.
    """

    run_id: str
    status: Literal["succeeded", "failed"]
    started_at: float
    ended_at: float
    definitions: Mapping[str, DefinitionResult]
    top_errors: tuple[ErrorCount, ...] = ()
    notes: tuple[str, ...] = ()
    kind: str = "run"

    def to_json(self) -> dict[str, Any]:
        """``{"run_id", "status", "definitions": {ID: {"migrated", "skipped", "failed",
        "unchanged", "needs_update", "mode", "status", "error", "blocked", "retries",
        "gave_up"}}, "started_at", "ended_at", "top_errors", "notes"}``; a rollback's is
        ``{"run_id", "kind": "rollback", "definitions": {ID: {"rolled_back", "failed",
        "skipped"}}}`` (what ``migrate rollback --json`` prints)."""
        if self.kind == "rollback":
            return {
                "run_id": self.run_id,
                "kind": "rollback",
                "definitions": {
                    key: value.counts.rollback_json() for key, value in self.definitions.items()
                },
            }
        return {
            "run_id": self.run_id,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "definitions": {key: value.to_report() for key, value in self.definitions.items()},
            "top_errors": [error.to_json() for error in self.top_errors],
            "notes": list(self.notes),
        }


@attrs.frozen
class ProgressEvent:
    """
    Progress of one definition in a run, for progress bars and log lines.

    Attributes:
        run_id: The run.
        definition_id: The definition.
        mode: Its mode in this run.
        kind: ``"start"`` (before the first window), ``"item"`` (items processed in the current
            window, not yet committed: at most every 0.1 s, for progress bars), ``"window"``
            (after each committed window) or ``"end"``.
        window: Windows committed so far (1-based count).
        processed: Items handled so far (the sum of *counts*).
        total: Items expected in all, when known (targeted modes; sources that count cheaply,
            on a run from the beginning); else ``None``.
        counts: Counts so far.
        retries: Retries made so far by the definition's retried calls (see
            `DefinitionResult.retries`).
    """

    run_id: str
    definition_id: str
    mode: str
    kind: Literal["start", "item", "window", "end"]
    window: int
    processed: int
    total: int | None
    counts: Counts
    retries: int = 0


@attrs.frozen
class RunRef:
    """
    A reference to a run.

    Attributes:
        run_id: The run's id.
        status: ``queued``, ``running``, ``succeeded``, ``failed`` or ``start-failed``.
        started_at: Epoch seconds.
        ended_at: Epoch seconds; ``None`` while it runs.
    """

    run_id: str
    status: str
    started_at: float
    ended_at: float | None

    @classmethod
    def of(cls, record: RunRecord | None) -> RunRef | None:
        """The reference to *record* (``None`` for ``None``)."""
        if record is None:
            return None
        return cls(record.run_id, record.status, record.started_at, record.ended_at)

    def to_json(self) -> dict[str, Any]:
        """``{"run_id", "status", "started_at", "ended_at"}``."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


@attrs.frozen
class DefinitionStatus:
    """
    Stored item states of one definition, counted, and its latest run.

    Attributes:
        migrated: Items stored as ``migrated``.
        skipped: Items stored as ``skipped``.
        failed: Items stored as ``failed``.
        needs_update: Items stored as ``needs-update``.
        latest_run: Its latest run that started; runs refused before they started (a lock
            held, a preflight refusal) are not shown; ``None`` if it never ran.
        interrupted: Items stored as ``interrupted`` (a run was stopped while processing them).
    """

    migrated: int
    skipped: int
    failed: int
    needs_update: int
    latest_run: RunRef | None
    interrupted: int = 0

    def to_json(self) -> dict[str, Any]:
        """``{"migrated", "skipped", "failed", "needs_update", "interrupted", "latest_run"}``."""
        return {
            "migrated": self.migrated,
            "skipped": self.skipped,
            "failed": self.failed,
            "needs_update": self.needs_update,
            "interrupted": self.interrupted,
            "latest_run": None if self.latest_run is None else self.latest_run.to_json(),
        }


@attrs.frozen
class StatusReport:
    """
    What ``migrate status`` shows.

    Attributes:
        definitions: Per definition id, in config order: its `DefinitionStatus`.
    """

    definitions: Mapping[str, DefinitionStatus]

    def to_json(self) -> dict[str, Any]:
        """``{"definitions": {ID: {"migrated", "skipped", "failed", "needs_update",
        "interrupted", "latest_run"}}}``."""
        return {"definitions": {key: value.to_json() for key, value in self.definitions.items()}}
