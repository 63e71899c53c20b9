"""
Rows of the SQL stores as values: the column lists and decoders SQLite and PostgreSQL share.

Both stores keep the same columns in the same order and the JSON fields as the exact text the
run encoded, so one decoder serves both and a value reads back the same from either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

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
    "dead_run",
    "definitions_json",
    "failure_record",
    "failure_records",
    "item_state",
    "loads",
    "lock_info",
    "run_record",
]

RUN_COLUMNS: Final = (
    "id, status, mode, definitions, error, started_at, ended_at, pid, host, durable_run_id"
)
STATE_COLUMNS: Final = (
    "definition, identity, status, reason, error, version, journal, tracking, run_id, updated_at, "
    "position"
)
LOCK_COLUMNS: Final = "definition, run_id, pid, host, acquired_at, process, durable_run_id"
#: How many columns `RUN_COLUMNS` and `LOCK_COLUMNS` hold: a query that selects more columns
#: after them finds the first of its own at this index.
RUN_WIDTH: Final = 10
LOCK_WIDTH: Final = 7


def loads(text: str | None) -> Any:
    """*text* decoded as JSON; ``None`` stays ``None``."""
    return None if text is None else json.loads(text)


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
    )


def item_state(row: Sequence[Any]) -> ItemState:
    """A row of `STATE_COLUMNS`."""
    error = loads(row[4])
    return ItemState(
        definition_id=row[0],
        identity=row[1],
        status=row[2],
        reason=row[3],
        error=None if error is None else ErrorEvidence.from_json(error),
        version=row[5],
        journal=tuple(loads(row[6]) or ()),
        tracking=loads(row[7]),
        run_id=row[8],
        updated_at=row[9],
        position=row[10],
    )


def failure_record(row: Sequence[Any]) -> FailureRecord:
    """A row of ``identity, run_id, error, journal, position``."""
    return FailureRecord(
        identity=row[0],
        run_id=row[1],
        error=ErrorEvidence.from_json(loads(row[2]) or {}),
        journal=tuple(loads(row[3]) or ()),
        position=row[4],
    )


def failure_records(rows: Sequence[Sequence[Any]], limit: int | None) -> tuple[FailureRecord, ...]:
    """
    Rows of ``identity, run_id, error, journal, position`` as failures in natural identity order
    (``"7"`` before ``"13"``), the first *limit* of them (``None``: all).
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
