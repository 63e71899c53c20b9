"""
What the command line prints: the JSON forms of runs, checkpoints and events, and text tables.

Every piece of stored text that reaches a terminal goes through ``safe``: a run id, a name or an
error message holding an escape sequence is shown escaped, never played.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast
from urllib.parse import urlsplit, urlunsplit

from effects.durable._records import Checkpoint, Event, Run
from effects.durable.errors import StepError

__all__ = [
    "checkpoint_json",
    "checkpoints_table",
    "clip",
    "dumps",
    "error_text",
    "event_data",
    "event_json",
    "events_table",
    "iso",
    "recurring_table",
    "redacted",
    "run_json",
    "run_text",
    "runs_table",
    "safe",
    "show_json",
]

_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_VALUE_LIMIT: Final = 500
_CELL_LIMIT: Final = 80


def safe(text: str) -> str:
    """
    *text* with every non-printable character escaped (``\\x1b``, ``\\n``, ``\\u202e``, ...).

    Control characters (C0, C1, DEL), format characters (bidirectional overrides, zero-width
    marks), line and paragraph separators, lone surrogates and unassigned code points are
    escaped; everything printable, ASCII or not, is kept.

    Example:
        >>> safe("run \\x1b[31mred\\x1b[0m\\n")
        'run \\\\x1b[31mred\\\\x1b[0m\\\\n'
    """
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if char.isprintable():
            out.append(char)
        elif char in _SHORT:
            out.append(_SHORT[char])
        else:
            point = ord(char)
            if point < 0x100:
                out.append(f"\\x{point:02x}")
            elif point < 0x10000:
                out.append(f"\\u{point:04x}")
            else:
                out.append(f"\\U{point:08x}")
    return "".join(out)


def clip(text: str, limit: int) -> str:
    """*text* cut to at most *limit* characters, ending in ``...`` when cut."""
    return text if len(text) <= limit else f"{text[: max(0, limit - 3)]}..."


def dumps(document: Any, *, indent: int | None = 2) -> str:
    """
    *document* as JSON with every non-ASCII or control character escaped, so the text is safe
    to print on any terminal and parses back to the same data.
    """
    # ensure_ascii escapes all but DEL, which is ASCII; it can only sit inside a string.
    text = json.dumps(document, indent=indent, ensure_ascii=True)
    return text.replace("\x7f", "\\u007f")


def iso(ms: object) -> str:
    """
    Epoch milliseconds as ISO-8601 UTC (``2026-01-01T00:00:00.000Z``); ``-`` for ``None``.

    Example:
        >>> iso(1_767_225_600_250), iso(None)
        ('2026-01-01T00:00:00.250Z', '-')
    """
    if ms is None:
        return "-"
    if isinstance(ms, bool) or not isinstance(ms, int):
        return safe(str(ms))
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):  # far outside what a clock reads
        return str(ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def error_text(error: StepError | None) -> str:
    """An error on one line, ``[code] message``, escaped; ``-`` for ``None``."""
    if error is None:
        return "-"
    message = " ".join(error.message.split()) or error.type
    return safe(f"[{error.code}] {message}" if error.code else message)


def _value(data: Any) -> str:
    return "-" if data is None else safe(json.dumps(data, ensure_ascii=False))


# -- JSON forms --------------------------------------------------------------------------------


def run_json(run: Run) -> dict[str, Any]:
    """A run as JSON data; times are epoch ms, as stored."""
    return {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "version": run.version,
        "status": run.status,
        "input": run.input,
        "output": run.output,
        "error": None if run.error is None else run.error.to_json(),
        "recovery_attempts": run.recovery_attempts,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "wake_at": run.wake_at,
        "cancel": run.cancel,
        "parent_id": run.parent_id,
    }


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint as JSON data (without the pickle of a failed local step's exception)."""
    c = checkpoint
    return {
        "seq": c.seq,
        "name": c.name,
        "kind": c.kind,
        "step_id": c.step_id,
        "status": c.status,
        "attempts": c.attempts,
        "wake_at": c.wake_at,
        "input": c.input,
        "output": c.output,
        "error": None if c.error is None else c.error.to_json(),
        "errors": [e.to_json() for e in c.errors],
        "final": c.final,
        "handler": c.handler,
        "policy": c.policy,
        "group": c.group,
        "queue": c.queue,
        "progress": c.progress,
        "retry_state": c.retry_state,
        "dispatched_at": c.dispatched_at,
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    }


def event_json(event: Event) -> dict[str, Any]:
    """An event as JSON data."""
    return {
        "name": event.name,
        "level": event.level,
        "at": event.at,
        "seq": event.seq,
        "data": event.data,
    }


# -- text --------------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    lines = (
        "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
        for cells in (header, *rows)
    )
    return "\n".join(lines)


def runs_table(runs: Sequence[Run]) -> str:
    """Runs as a table: id, workflow, status, created, updated, error."""
    if not runs:
        return "no runs"
    rows = [
        [
            safe(r.run_id),
            safe(r.workflow),
            r.status,
            iso(r.created_at),
            iso(r.updated_at),
            clip(error_text(r.error), _CELL_LIMIT),
        ]
        for r in runs
    ]
    return _table(["run", "workflow", "status", "created", "updated", "error"], rows)


def recurring_table(entries: Sequence[Mapping[str, Any]]) -> str:
    """
    Recurring workflows (as ``recurring --json`` gives them) as a table: name, workflow,
    schedule, next due (ISO-8601 UTC), status, catch_up.
    """
    if not entries:
        return "no recurring workflows"
    rows = [
        [
            safe(e["name"]),
            safe(e["workflow"]),
            clip(safe(e["schedule"]), _CELL_LIMIT),
            iso(e["next_due"]),
            e["status"],
            e["catch_up"],
        ]
        for e in entries
    ]
    return _table(["name", "workflow", "schedule", "next due", "status", "catch_up"], rows)


def run_text(run: Run, *, now_ms: int) -> str:
    """One run's fields, one per line (a long input or output is cut; ``--json`` has it all)."""
    wake = iso(run.wake_at)
    if run.wake_at is not None:
        wait = (run.wake_at - now_ms) / 1000
        wake += f" (in {wait:.1f} s)" if wait > 0 else " (due)"
    fields = [
        ("run", safe(run.run_id)),
        ("workflow", f"{safe(run.workflow)} (version {safe(run.version)})"),
        ("status", run.status),
        ("created", iso(run.created_at)),
        ("updated", iso(run.updated_at)),
        ("wake_at", wake),
        ("recovered", f"{run.recovery_attempts} times"),
        ("input", clip(_value(run.input), _VALUE_LIMIT)),
        ("output", clip(_value(run.output), _VALUE_LIMIT)),
        ("error", error_text(run.error)),
    ]
    if run.error is not None:
        fields.append(("error type", safe(run.error.type)))
    if run.cancel is not None:
        how = "with compensation" if run.cancel == "compensate" else "plainly"
        fields.append(("cancel", f"asked for, {how}"))
    if run.parent_id is not None:
        fields.append(("parent", f"{safe(run.parent_id)} (this run is its child workflow)"))
    width = max(len(name) for name, _ in fields)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in fields)


def checkpoints_table(checkpoints: Sequence[Checkpoint]) -> str:
    """
    Checkpoints as a table: seq, name, kind, status, attempts, wake_at, updated, error; and the
    last heartbeat progress when a step reported any.
    """
    if not checkpoints:
        return "no checkpoints"
    progress = any(c.progress is not None for c in checkpoints)
    rows = [
        [
            str(c.seq),
            safe(c.name),
            c.kind,
            f"{c.status} (final)" if c.status == "failed" and c.final else c.status,
            str(c.attempts),
            iso(c.wake_at),
            iso(c.updated_at),
            clip(error_text(c.error), _CELL_LIMIT),
            *([clip(_value(c.progress), _CELL_LIMIT // 2)] if progress else []),
        ]
        for c in checkpoints
    ]
    header = ["seq", "name", "kind", "status", "attempts", "wake_at", "updated", "error"]
    return _table([*header, *(["progress"] if progress else [])], rows)


def show_json(
    run: Run, checkpoints: Sequence[Checkpoint], events: Sequence[Event]
) -> dict[str, Any]:
    """What ``show RUN --json`` prints: ``{"run", "checkpoints", "events"}``."""
    return {
        "run": run_json(run),
        "checkpoints": [checkpoint_json(c) for c in checkpoints],
        "events": [event_json(e) for e in events],
    }


def redacted(url: str) -> str:
    """*url* with its password, if any, shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def event_data(data: Mapping[str, Any], limit: int = 2 * _CELL_LIMIT) -> str:
    """
    An event's data on one line, ``key=value`` (times as ISO-8601, errors as ``[code]
    message``), escaped and cut to *limit* characters.
    """
    return _event_data(data, limit)


def _event_data(data: Mapping[str, Any], limit: int = 2 * _CELL_LIMIT) -> str:
    parts: list[str] = []
    for key, value in data.items():
        if key.endswith("_at") and isinstance(value, int) and not isinstance(value, bool):
            text = iso(value)
        elif isinstance(value, dict) and "message" in value:  # an error, as StepError stores it
            try:
                text = error_text(StepError.from_json(cast("dict[str, Any]", value)))
            except (TypeError, ValueError):
                text = json.dumps(value, ensure_ascii=False)
        elif isinstance(value, str):
            text = value
        else:
            text = json.dumps(value, ensure_ascii=False)
        parts.append(f"{key}={text}")
    return clip(safe(" ".join(parts)), limit)


def events_table(events: Sequence[Event]) -> str:
    """Events as a table: at, seq, level, name, data (``key=value``; times as ISO-8601)."""
    if not events:
        return "no events"
    rows = [
        [
            iso(e.at),
            "-" if e.seq is None else str(e.seq),
            safe(e.level),
            safe(e.name),
            _event_data(e.data),
        ]
        for e in events
    ]
    return _table(["at", "seq", "level", "name", "data"], rows)
