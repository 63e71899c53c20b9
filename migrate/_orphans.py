"""
``migrate run --rollback-orphans``: undo the stored states whose records are gone from the source.

A run with the flag marks every state its scan meets (each window commit sets the state's
``seen_by`` to the run id: items, unchanged ones and faults' keys alike, see
`migrate._store.WindowCommit.seen`) and records in its per-definition result whether it read the
definition from the start of the source (`DefinitionResult.from_start`). Once every definition's
scan has ended, the definitions whose scan was complete (read from the start to the end by this
one Migration Run, in one process or several) have their states not marked by the run rolled
back, dependents first, through the same pipeline as ``migrate rollback`` (the definition's
``rollback=``; a success deletes the state, a failure keeps it and appends an attempt), counted
as `DefinitionResult.orphans_rolled_back` / `DefinitionResult.orphans_failed`. The states kept
with a failed attempt are marked as seen by the run too, so a later page (or a durable run
recovered in another process) does not select them again; deleted ones are gone.
"""

from __future__ import annotations

from typing import Any

import attrs

from migrate._definition import Migration
from migrate._pipeline import RetryTally, counting_retries
from migrate._rollback import (
    _DefinitionRollback,  # pyright: ignore[reportPrivateUsage]
)
from migrate._state import Counts, DefinitionResult
from migrate._text import natural_key, plural

__all__ = ["PAGE", "OrphanPage", "orphan_note", "scan_complete", "skipped_note"]

#: Orphan states selected (and rolled back, in batches) per page: one ``migrate.orphans`` step.
PAGE = 1000


def scan_complete(result: DefinitionResult) -> bool:
    """Whether *result* (a definition of a run with ``--rollback-orphans``) records a complete
    scan: read from the start of the source and ended without a read that failed."""
    return (
        result.orphans
        and result.from_start
        and result.error is None
        and result.status in ("succeeded", "failed")
    )


def skipped_note(definition_id: str, result: DefinitionResult) -> str:
    """Why the orphans of *definition_id* are not rolled back in this run."""
    if result.status == "blocked":
        why = "it was blocked"
    elif not result.from_start:
        why = (
            "this run read it from the saved cursor, not from the start of the source (it "
            "resumed a pass left unfinished), so its scan is not complete; the next run with "
            "--rollback-orphans scans it from the start"
        )
    else:
        why = "its scan did not reach the end of the source"
    return f"{definition_id}: no orphans rolled back: {why}"


def orphan_note(definition_id: str, result: DefinitionResult) -> str:
    """The summary's line on the orphans of *definition_id* that were rolled back."""
    failed = f", {result.orphans_failed:,} failed (their states are kept, with the attempt)"
    return (
        f"{definition_id}: {plural(result.orphans_rolled_back, 'orphan')} rolled back (stored "
        f"states the complete scan did not see: gone from the source)"
        + (failed if result.orphans_failed else "")
    )


class OrphanPage(_DefinitionRollback):
    """
    The orphans of one definition of a run (a ``_Run`` of ``migrate._runner``), a page at a
    time, through the rollback pipeline; the counts go to the definition's result.
    """

    def __init__(self, owner: Any, definition_id: str) -> None:
        migration: Migration = owner.config.get(definition_id)
        super().__init__(owner, migration, RetryTally(definition_id))
        self.base: DefinitionResult = self.owner.results[definition_id]
        # Counted on from what earlier pages (or processes) of the run committed.
        self.counts = Counts(
            rolled_back=self.base.orphans_rolled_back, failed=self.base.orphans_failed
        )
        self.seen_by = self.run_id

    def _result(self, status: str, counts: Counts | None = None) -> DefinitionResult:
        counts = self.counts if counts is None else counts
        return attrs.evolve(
            self.base, orphans_rolled_back=counts.rolled_back, orphans_failed=counts.failed
        )

    def page(self) -> tuple[int, bool]:
        """
        Roll back the next `PAGE` orphans, committed in batches; return how many were selected
        and whether none is left. The last page stores the definition ``failed`` if an orphan's
        undo failed.

        Raises:
            KeyboardInterrupt: After Ctrl-C, once what was undone is committed.
        """
        store = self.store
        # Read at each call, not bound at definition, so a test can make pages small.
        limit = PAGE
        targets = sorted(
            store.orphans(self.definition_id, self.run_id, limit),
            key=lambda state: natural_key(state.identity),
        )
        if targets:
            fn = self.fn
            assert fn is not None  # the plan refused a definition without one
            with counting_retries(self.tally):
                self.undo_all(fn, targets)
        done = len(targets) < limit
        if done:
            result = self._result("")
            if result.orphans_failed and result.status == "succeeded":
                result = attrs.evolve(result, status="failed")
            self.owner.results[self.definition_id] = result
            store.update_run(self.run_id, definitions=self.owner.results)
        return len(targets), done
