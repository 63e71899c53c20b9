"""
Destination changes of earlier runs, kept in an item's journal when a later run rewrites its state.

A state's journal is what `migrate.rollback` undoes. A later run that processes the item again
and fails, skips it, is interrupted, or writes other destination keys would otherwise replace
the journal and lose the record of rows an earlier run wrote: they could never be rolled back.
So a new journal keeps, before its own entries, the earlier journal's change entries whose
destination and key it does not change again (a change of the same destination and key
supersedes the earlier one, so the journal does not grow with repeated updates). Diagnostic
entries of earlier runs are not kept: they describe those runs only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from migrate._json import encode

__all__ = ["carry_changes"]

_CHANGE = '"change"'


def _target(entry: Mapping[str, Any]) -> tuple[object, str]:
    # Keys may be any JSON value (a composite key is a list or an object): compare their text.
    return entry.get("destination"), json.dumps(entry.get("key"), sort_keys=True)


def carry_changes(prior: str | None, journal: str | None) -> str | None:
    """
    The journal to store: *journal* (JSON text of this run's entries, or ``None``) after the
    change entries of *prior* (the stored journal) that it does not supersede.

    A *prior* that is not a JSON array, and entries in it that are not change objects, are
    left out; with nothing to carry, *journal* is returned as it is.

    Example:
        >>> prior = '[{"kind": "change", "destination": "sql:t", "key": 1}, {"kind": "diagnostic"}]'
        >>> carry_changes(prior, None)
        '[{"kind": "change", "destination": "sql:t", "key": 1}]'
        >>> carry_changes(prior, '[{"kind": "change", "destination": "sql:t", "key": 1}]')
        '[{"kind": "change", "destination": "sql:t", "key": 1}]'
    """
    if prior is None or prior == journal or _CHANGE not in prior:
        # The same entries again (an update that redid what the last run did): nothing to carry.
        return journal
    try:
        earlier: object = json.loads(prior)
        entries: object = [] if journal is None else json.loads(journal)
    except ValueError:
        return journal
    if not isinstance(earlier, list) or not isinstance(entries, list):
        return journal
    ours = _changes(cast("list[object]", entries))
    covered = {_target(entry) for entry in ours}
    kept = [e for e in _changes(cast("list[object]", earlier)) if _target(e) not in covered]
    if not kept:
        return journal
    return encode([*kept, *cast("list[object]", entries)])


def _changes(entries: list[object]) -> list[dict[str, Any]]:
    return [
        cast("dict[str, Any]", entry)
        for entry in entries
        if isinstance(entry, dict) and cast("dict[str, Any]", entry).get("kind") == "change"
    ]
