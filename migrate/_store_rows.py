"""
Rows of the SQL stores as values: the column lists and decoders SQLite and PostgreSQL share.

Both stores keep the same columns in the same order and the JSON fields as the exact text the
run encoded, so one decoder serves both and a value reads back the same from either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import attrs

from migrate._state import (
    DefinitionResult,
    ErrorEvidence,
    FailureRecord,
    ItemState,
    LockInfo,
    RunRecord,
    RunStatus,
)
from migrate._text import natural_key

__all__ = [
    "LOCK_COLUMNS",
    "LOCK_WIDTH",
    "RUN_COLUMNS",
    "RUN_WIDTH",
    "STATE_COLUMNS",
    "FAILURE_COLUMNS",
    "dead_run",
    "decode_attempts",
    "decode_journal",
    "definitions_json",
    "failure_record",
    "failure_records",
    "item_state",
    "loads",
    "lock_info",
    "next_attempts",
    "rollback_evidence",
    "run_record",
]

RUN_COLUMNS: Final = (
    "id, status, mode, definitions, error, started_at, ended_at, pid, host, durable_run_id, kind"
)
STATE_COLUMNS: Final = (
    "definition, identity, status, reason, error, version, journal, tracking, run_id, updated_at, "
    "position, rollback_attempts"
)
#: The columns `failure_record` reads.
FAILURE_COLUMNS: Final = "identity, run_id, error, journal, position, status, rollback_attempts"
LOCK_COLUMNS: Final = "definition, run_id, pid, host, acquired_at, process, durable_run_id"
#: How many columns `RUN_COLUMNS` and `LOCK_COLUMNS` hold: a query that selects more columns
#: after them finds the first of its own at this index.
RUN_WIDTH: Final = 11
LOCK_WIDTH: Final = 7


def loads(text: str | None) -> Any:
    """*text* decoded as JSON; ``None`` stays ``None``."""
    return None if text is None else json.loads(text)


def _kind_name(value: object) -> str:
    """The JSON name of a decoded value's type."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


def decode_journal(text: str | None) -> tuple[tuple[dict[str, Any], ...], str | None]:
    """
    A stored journal's entries, and why it could not be read as a list of entries (``None``:
    it could). Never raises: a journal that is not JSON or not a list reads as no entries, an
    entry that is not an object as ``{"kind": "unreadable", "index": N, "value": ...}``, each
    with the problem said (a state written by hand, or by another program).
    """
    if text is None:
        return (), None
    try:
        value = json.loads(text)
    except ValueError as error:
        return (), f"the stored journal is not JSON ({error})"
    if not isinstance(value, list):
        return (), f"the stored journal is a JSON {_kind_name(value)}, not a list of entries"
    entries: list[dict[str, Any]] = []
    problem: str | None = None
    for index, entry in enumerate(cast("list[object]", value)):
        if isinstance(entry, dict):
            entries.append(cast("dict[str, Any]", entry))
            continue
        if problem is None:
            problem = f"stored journal entry {index} is a JSON {_kind_name(entry)}, not an object"
        entries.append({"kind": "unreadable", "index": index, "value": entry})
    return tuple(entries), problem


def decode_attempts(text: str | None) -> tuple[dict[str, Any], ...]:
    """A state's stored rollback attempts (never raises: what is not a list of objects is
    left out)."""
    if text is None:
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(
        cast("dict[str, Any]", entry)
        for entry in cast("list[object]", value)
        if isinstance(entry, dict)
    )


def next_attempts(stored: str | None, attempt: str) -> str | None:
    """
    The rollback attempts to store once *attempt* (JSON text of one attempt) is appended to
    *stored* (the state's, JSON text or ``None``); ``None`` when nothing changes, because
    *attempt* equals the last one stored (a commit sent twice appends it once).
    """
    kept = list(decode_attempts(stored))
    added = json.loads(attempt)
    if kept and kept[-1] == added:
        return None
    return json.dumps([*kept, added])


def definitions_json(definitions: Mapping[str, DefinitionResult]) -> str:
    """A run's per-definition records as the JSON text both stores keep."""
    return json.dumps({key: value.to_json() for key, value in definitions.items()})


def lock_info(row: Sequence[Any]) -> LockInfo:
    """A row of `LOCK_COLUMNS`."""
    return LockInfo(row[0], row[1], row[2], row[3], row[4], row[5], row[6])


def run_record(row: Sequence[Any]) -> RunRecord:
    """A row of `RUN_COLUMNS`."""
    definitions = {
        key: DefinitionResult.from_json(value) for key, value in json.loads(row[3]).items()
    }
    return RunRecord(
        run_id=row[0],
        status=row[1],
        mode=row[2],
        definitions=definitions,
        error=row[4],
        started_at=row[5],
        ended_at=row[6],
        pid=row[7],
        host=row[8],
        durable_run_id=row[9],
        kind=row[10] or "run",
    )


def item_state(row: Sequence[Any]) -> ItemState:
    """A row of `STATE_COLUMNS`."""
    error = loads(row[4])
    journal, problem = decode_journal(row[6])
    return ItemState(
        definition_id=row[0],
        identity=row[1],
        status=row[2],
        reason=row[3],
        error=None if error is None else ErrorEvidence.from_json(error),
        version=row[5],
        journal=journal,
        tracking=loads(row[7]),
        run_id=row[8],
        updated_at=row[9],
        position=row[10],
        rollback_attempts=decode_attempts(row[11]),
        journal_problem=problem,
    )


def rollback_evidence(attempts: Sequence[Mapping[str, Any]]) -> ErrorEvidence:
    """The evidence a failure record shows for a state whose last rollback failed."""
    last = attempts[-1]
    found: object = last.get("error")
    error: Mapping[str, Any] = (
        cast("Mapping[str, Any]", found) if isinstance(found, Mapping) else {}
    )
    return ErrorEvidence(
        kind="rollback",
        type=str(error.get("type", "")),
        message=str(error.get("message", "")),
        details={"run_id": last.get("run_id"), "failed_at": last.get("failed_at")},
        attempts=len(attempts),
    )


def failure_record(row: Sequence[Any]) -> FailureRecord:
    """A row of `FAILURE_COLUMNS`."""
    attempts = decode_attempts(row[6])
    status = str(row[5])
    if status != "failed" and attempts:
        error = rollback_evidence(attempts)
    else:
        error = ErrorEvidence.from_json(loads(row[2]) or {})
    return FailureRecord(
        identity=row[0],
        run_id=row[1],
        error=error,
        journal=decode_journal(row[3])[0],
        position=row[4],
        status=status,
        rollback_attempts=attempts,
    )


def failure_records(rows: Sequence[Sequence[Any]], limit: int | None) -> tuple[FailureRecord, ...]:
    """
    Rows of `FAILURE_COLUMNS` as failures in natural identity order (``"7"`` before ``"13"``),
    the first *limit* of them (``None``: all).
    """
    ordered = sorted(rows, key=lambda row: natural_key(row[0]))
    return tuple(failure_record(row) for row in (ordered if limit is None else ordered[:limit]))


def dead_run(record: RunRecord) -> tuple[RunStatus, dict[str, DefinitionResult]]:
    """
    What a run whose process died becomes: ``running`` is ``failed`` and ``queued`` is
    ``start-failed``, and so are its definitions that were still queued or running.
    """
    status: RunStatus = "failed" if record.status == "running" else "start-failed"
    definitions = {
        key: attrs.evolve(
            value, status="failed" if value.status in ("running", "queued") else value.status
        )
        for key, value in record.definitions.items()
    }
    return status, definitions
