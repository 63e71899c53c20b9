"""Item states, error evidence and counts: the plain data the store keeps and queries return."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias, cast

import attrs

__all__ = [
    "ERROR_KINDS",
    "Counts",
    "ErrorEvidence",
    "ErrorKind",
    "ItemStatus",
    "LockInfo",
    "RunStatus",
]

ItemStatus: TypeAlias = Literal["migrated", "skipped", "failed", "needs-update", "interrupted"]
"""A stored item state. ``unchanged`` is counted by a run, never stored. ``interrupted``: the
run was stopped (Ctrl-C) while the item's process ran; it is processed again like a failure."""

RunStatus: TypeAlias = Literal["queued", "running", "succeeded", "failed", "start-failed"]
"""A Migration Run's status; ``failed`` means the run finished with a failed item or error."""

ErrorKind: TypeAlias = Literal["source", "process", "destination", "tracking", "rollback"]
ERROR_KINDS: Final = ("source", "process", "destination", "tracking", "rollback")


def _no_details() -> dict[str, Any]:
    return {}


@attrs.frozen
class ErrorEvidence:
    """
    Why an item failed.

    Attributes:
        kind: Where it failed: ``"source"`` (reading it), ``"process"`` (the pipeline's own
            code), ``"destination"`` (a destination call), ``"tracking"`` (its tracking record)
            or ``"rollback"`` (its ``rollback=`` function, in ``migrate rollback``).
        type: The error's class name.
        message: The error's message.
        details: JSON-able facts: the provider's error (``cause``), an HTTP ``status``, where the
            error was raised (``where``), ...
        attempts: How many times the failing call was attempted (1 without retries).
    """

    kind: ErrorKind
    type: str
    message: str
    details: Mapping[str, Any] = attrs.field(factory=_no_details)
    attempts: int = 1

    def to_json(self) -> dict[str, Any]:
        """The evidence as ``{"kind", "type", "message", "details", "attempts"}``."""
        return {
            "kind": self.kind,
            "type": self.type,
            "message": self.message,
            "details": dict(self.details),
            "attempts": self.attempts,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ErrorEvidence:
        """Rebuild evidence from *data* stored by `to_json` (an unknown kind reads ``process``)."""
        kind = data.get("kind", "process")
        return cls(
            kind=kind if kind in ERROR_KINDS else "process",
            type=str(data.get("type", "")),
            message=str(data.get("message", "")),
            details=dict(data.get("details") or {}),
            attempts=int(data.get("attempts", 1)),
        )


@attrs.frozen
class Counts:
    """
    Items per outcome: for a run, what happened in it; for a status, the stored states.

    Attributes:
        migrated: Items processed without error.
        skipped: Items whose process raised `Skip`.
        failed: Items that failed (with evidence stored).
        unchanged: Items already migrated (or skipped) at the same source version, not processed
            again; only runs count these, they are never stored.
        needs_update: Items marked by ``--update`` and not processed again (yet).
        interrupted: Items whose process was running when the run was stopped (Ctrl-C); a
            normal or ``--failed`` run processes them again.
        rolled_back: Items undone by a rollback (``migrate rollback``): their states were
            deleted. Only rollback runs count these; in a rollback run, *failed* counts items
            whose undo failed (their states are kept, with the attempt) and *skipped* the
            identities asked for (``--id``) that had no stored state.

    Example:
        >>> Counts(migrated=97, failed=3).total
        100
    """

    migrated: int = 0
    skipped: int = 0
    failed: int = 0
    unchanged: int = 0
    needs_update: int = 0
    interrupted: int = 0
    rolled_back: int = 0

    @property
    def total(self) -> int:
        """The sum of all counts."""
        return (
            self.migrated
            + self.skipped
            + self.failed
            + self.unchanged
            + self.needs_update
            + self.interrupted
            + self.rolled_back
        )

    def __add__(self, other: Counts) -> Counts:
        """Both counts added up, field by field."""
        return Counts(
            self.migrated + other.migrated,
            self.skipped + other.skipped,
            self.failed + other.failed,
            self.unchanged + other.unchanged,
            self.needs_update + other.needs_update,
            self.interrupted + other.interrupted,
            self.rolled_back + other.rolled_back,
        )

    def to_json(self) -> dict[str, int]:
        """``{"migrated", "skipped", "failed", "unchanged", "needs_update", "interrupted"}``: the
        counts of a run (see `rollback_json` for those of a rollback)."""
        return {
            "migrated": self.migrated,
            "skipped": self.skipped,
            "failed": self.failed,
            "unchanged": self.unchanged,
            "needs_update": self.needs_update,
            "interrupted": self.interrupted,
        }

    def rollback_json(self) -> dict[str, int]:
        """``{"rolled_back", "failed", "skipped"}``: the counts of a rollback run."""
        return {"rolled_back": self.rolled_back, "failed": self.failed, "skipped": self.skipped}

    @classmethod
    def of_statuses(cls, by_status: Mapping[str, int]) -> Counts:
        """Counts of stored states from ``{status: count}`` (``unchanged`` is 0)."""
        return cls(
            migrated=by_status.get("migrated", 0),
            skipped=by_status.get("skipped", 0),
            failed=by_status.get("failed", 0),
            needs_update=by_status.get("needs-update", 0),
            interrupted=by_status.get("interrupted", 0),
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Counts:
        """Rebuild counts from *data* stored by `to_json` (missing keys are 0)."""
        return cls(
            migrated=int(data.get("migrated", 0)),
            skipped=int(data.get("skipped", 0)),
            failed=int(data.get("failed", 0)),
            unchanged=int(data.get("unchanged", 0)),
            needs_update=int(data.get("needs_update", 0)),
            interrupted=int(data.get("interrupted", 0)),
            rolled_back=int(data.get("rolled_back", 0)),
        )


@attrs.frozen
class ItemState:
    """
    The stored state of one item.

    Attributes:
        definition_id: Its definition.
        identity: Its identity.
        status: ``migrated``, ``skipped``, ``failed`` or ``needs-update``.
        reason: Why it was skipped (``skipped`` only).
        error: The evidence of its failure (``failed`` only).
        version: The source version last processed.
        journal: The journal entries of its last processing (kept when it failed).
        tracking: Its tracking record, if any.
        run_id: The run that last changed it.
        updated_at: When, in epoch seconds.
        position: Where its source held it when it was last read (``"line 17"``), if the
            source says.
        rollback_attempts: The failed rollbacks of this state (``migrate rollback``), oldest
            first: each ``{"run_id", "entries", "error": {"type", "message"}, "failed_at"}``.
            A run that writes the state again starts it with none (they were made against the
            journal it replaces).
        journal_problem: Why the stored journal could not be read as a list of entries (it is
            not JSON, not a list, or holds entries that are not objects), if it could not;
            *journal* then holds what could be read of it. A rollback does not undo such an
            item (it fails, saying so).
    """

    definition_id: str
    identity: str
    status: ItemStatus
    reason: str | None
    error: ErrorEvidence | None
    version: str | None
    journal: tuple[dict[str, Any], ...]
    tracking: dict[str, Any] | None
    run_id: str | None
    updated_at: float
    position: str | None = None
    rollback_attempts: tuple[dict[str, Any], ...] = ()
    journal_problem: str | None = None


@attrs.frozen
class FailureRecord:
    """
    A failed item as ``migrate failures`` shows it: a ``failed`` state, or a state of any
    status whose rollback failed (``migrate rollback``).

    Attributes:
        identity: The item's identity.
        run_id: The run in which it last failed (for a state whose rollback failed: the run
            that wrote the state).
        error: The evidence of the failure; for a state whose rollback failed and that is not
            ``failed`` itself, the last rollback attempt's error (kind ``rollback``, its
            ``attempts`` the number of rollback attempts).
        journal: Its journal entries up to the failure (destination writes already made).
        position: Where its source held it (``"line 17"``), if the source says.
        status: Its stored status (``failed``, or any other for a state whose rollback failed).
        rollback_attempts: Its failed rollbacks, oldest first (see
            `ItemState.rollback_attempts`).
    """

    identity: str
    run_id: str | None
    error: ErrorEvidence
    journal: tuple[dict[str, Any], ...] = ()
    position: str | None = None
    status: str = "failed"
    rollback_attempts: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """``{"identity", "run_id", "position", "error": {...}, "journal": [...], "status",
        "rollback_attempts": [{"run_id", "entries", "error": {"type", "message"},
        "failed_at"}]}``."""
        return {
            "identity": self.identity,
            "run_id": self.run_id,
            "position": self.position,
            "error": self.error.to_json(),
            "journal": list(self.journal),
            "status": self.status,
            "rollback_attempts": [dict(attempt) for attempt in self.rollback_attempts],
        }


@attrs.frozen
class DefinitionResult:
    """
    What one run did for one definition.

    Attributes:
        mode: How it ran (``normal``, ``failed``, ``skipped``, ``ids``, ``update``; ``rollback``
            in a rollback run, whose counts are ``rolled_back``, ``failed`` and ``skipped``).
        status: ``queued``, ``running``, ``succeeded``, ``failed`` or ``blocked``.
        counts: What happened to its items in this run.
        error: Why it stopped early (a window read that failed), if it did.
        blocked: Why it was not run (a required dependency failed in this run), if it was not.
        retries: Retries made by retried calls during its work in this run: each ``"retry"``
            event of a destination or process call in an item's scope, and of a source read or
            lookup wrapped by ``source_cursor_retry`` / ``source_lookup_retry``. A call that
            succeeds at once counts 0; one that succeeds on its third attempt counts 2.
        gave_up: Retried calls (at least one retry) that failed in the end all the same: their
            schedule ended, a later error was not retryable, or the retry budget refused.
            Calls that failed on their first attempt without a retry are not counted.
        failed_stored: Failed (and interrupted) item states stored for the definition when its
            run ended: this run's and those left by earlier runs, also behind the cursor, where
            only ``--failed`` reaches them. A definition with any is ``failed``.
        orphans: The run rolls back this definition's orphans (``--rollback-orphans``): the
            three fields below are kept, and shown, only then.
        from_start: This run read the definition from the start of its source (a scan that
            reaches the end is then complete); kept with the run, so a durable run resumed in
            another process still knows.
        orphans_rolled_back: Stored states the complete scan did not see (their records are
            gone from the source) undone through the definition's ``rollback=``; their states
            were deleted.
        orphans_failed: Such states whose undo failed: kept, with the rollback attempt.
    """

    mode: str
    status: str
    counts: Counts = Counts()
    error: str | None = None
    blocked: str | None = None
    retries: int = 0
    gave_up: int = 0
    failed_stored: int = 0
    orphans: bool = False
    from_start: bool = False
    orphans_rolled_back: int = 0
    orphans_failed: int = 0

    def _orphans_json(self) -> dict[str, Any]:
        return {
            "orphans": {
                "from_start": self.from_start,
                "rolled_back": self.orphans_rolled_back,
                "failed": self.orphans_failed,
            }
        }

    def to_json(self) -> dict[str, Any]:
        """Plain data stored with the run."""
        return {
            "mode": self.mode,
            "status": self.status,
            "counts": (
                self.counts.rollback_json() if self.mode == "rollback" else self.counts.to_json()
            ),
            "error": self.error,
            "blocked": self.blocked,
            "retries": self.retries,
            "gave_up": self.gave_up,
            "failed_stored": self.failed_stored,
            **(self._orphans_json() if self.orphans else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DefinitionResult:
        """Rebuild a result from *data* stored by `to_json` (records older than the retry
        counts read 0 retries)."""
        return cls(
            mode=str(data.get("mode", "normal")),
            status=str(data.get("status", "running")),
            counts=Counts.from_json(data.get("counts") or {}),
            error=data.get("error"),
            blocked=data.get("blocked"),
            retries=int(data.get("retries", 0)),
            gave_up=int(data.get("gave_up", 0)),
            failed_stored=int(data.get("failed_stored", 0)),
            **_orphans_of(data.get("orphans")),
        )

    def to_report(self) -> dict[str, Any]:
        """The run's view for ``--json``: ``{"migrated", "skipped", "failed", "unchanged",
        "needs_update", "interrupted", "mode", "status", "error", "blocked", "retries",
        "gave_up", "failed_stored"}`` (a rollback's: ``{"rolled_back", "failed", "skipped",
        "mode", ...}``)."""
        counts = self.counts.rollback_json() if self.mode == "rollback" else self.counts.to_json()
        return {
            **counts,
            "mode": self.mode,
            "status": self.status,
            "error": self.error,
            "blocked": self.blocked,
            "retries": self.retries,
            "gave_up": self.gave_up,
            "failed_stored": self.failed_stored,
            **(
                {
                    "orphans_rolled_back": self.orphans_rolled_back,
                    "orphans_failed": self.orphans_failed,
                }
                if self.orphans
                else {}
            ),
        }


def _orphans_of(data: object) -> dict[str, Any]:
    """The orphan fields of a stored `DefinitionResult` (none: a run without orphans)."""
    if not isinstance(data, Mapping):
        return {}
    data = cast("Mapping[str, Any]", data)
    return {
        "orphans": True,
        "from_start": bool(data.get("from_start", False)),
        "orphans_rolled_back": int(data.get("rolled_back", 0)),
        "orphans_failed": int(data.get("failed", 0)),
    }


@attrs.frozen
class RunRecord:
    """
    A Migration Run as stored.

    Attributes:
        run_id: Its id (sortable by start time).
        status: ``queued``, ``running``, ``succeeded``, ``failed`` or ``start-failed``.
        mode: The run mode (``normal``, ``failed``, ``skipped``, ``ids``, ``update``).
        started_at: Epoch seconds.
        ended_at: Epoch seconds, ``None`` while it runs.
        pid: The process that ran it.
        host: That process's host.
        definitions: What it did per definition.
        error: Why it failed to start or stopped, if it did.
        durable_run_id: The durable workflow run (``effects.durable``) that owns it, if one
            does: then *pid* and *host* name the process that started it, which may be gone
            while the durable run goes on in other worker processes, so the run is never marked
            failed because that process died (see `Store.recover_dead_runs`). ``None``: the run
            belongs to its process, as every run did before.
        kind: ``"run"`` (a Migration Run of ``migrate run``) or ``"rollback"`` (one of
            ``migrate rollback``, whose definitions count ``rolled_back``, ``failed`` and
            ``skipped``).
    """

    run_id: str
    status: RunStatus
    mode: str
    started_at: float
    ended_at: float | None
    pid: int
    host: str
    definitions: Mapping[str, DefinitionResult]
    error: str | None = None
    durable_run_id: str | None = None
    kind: str = "run"

    def to_json(self) -> dict[str, Any]:
        """``{"run_id", "status", "mode", "started_at", "ended_at", "pid", "host",
        "definitions": {ID: {"migrated", ..., "mode", "status", "error", "blocked", "retries",
        "gave_up"}}, "error", "durable_run_id", "kind"}`` (``durable_run_id`` is ``null`` for a
        run that belongs to its process; a rollback's definitions count ``rolled_back``,
        ``failed`` and ``skipped``)."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "mode": self.mode,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "pid": self.pid,
            "host": self.host,
            "definitions": {key: value.to_report() for key, value in self.definitions.items()},
            "error": self.error,
            "durable_run_id": self.durable_run_id,
            "kind": self.kind,
        }


@attrs.frozen
class LockInfo:
    """
    A definition's lock: which run holds it, from which process, since when.

    Attributes:
        definition_id: The locked definition.
        run_id: The run holding the lock.
        pid: Process id of that run.
        host: Host name of that run's machine.
        acquired_at: Epoch seconds when the lock was taken.
        token: The start token of that process (see `migrate._liveness.ProcessId`), where the
            system tells it: a pid reused by a later process does not hold the lock.
        durable_run_id: The durable workflow run that holds the lock for *run_id*, if one
            does (the lock is *marked* with it). *pid*, *host* and *token* then name the process
            that took it, which may have exited while the durable run goes on elsewhere: a
            marked lock is never broken because that process died. Only ``migrate unlock``
            (`Store.unlock`) or `Store.release_locks` removes it. ``None``: the lock belongs to
            its process and is broken once that process is dead.
    """

    definition_id: str
    run_id: str
    pid: int
    host: str
    acquired_at: float
    token: str | None = None
    durable_run_id: str | None = None
