"""
The store protocol: every operation a run and the queries need, typed, whatever keeps the data.

`SqliteStore` (one file, the default) and `MemoryStore` (tests, throwaway runs) implement it;
another backend implements the same methods. A store never sees a table row: a run hands it
`StateWrite` values inside a `WindowCommit`, and it answers with the values of ``migrate._state``.

The one rule every implementation keeps: `Store.commit_window` is atomic. A window's item
states, the run's per-definition record (its counts) and the definition's cursor are committed
together or not at all, so a crash or a failed commit never leaves states without counts, counts
without states, or a cursor past states that were not written. `Store.commit_rollback` is atomic
alike: the states a rollback undid are deleted, and its failed attempts appended, together with
the rollback run's counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple, Protocol, runtime_checkable

import attrs

from migrate._errors import StaleWindowError
from migrate._sources import Contract, Cursor
from migrate._state import (
    Counts,
    DefinitionResult,
    FailureRecord,
    ItemState,
    ItemStatus,
    LockInfo,
    RunRecord,
    RunStatus,
)
from migrate._text import storable, unstorable_part

__all__ = [
    "POSITIONAL_TYPES",
    "PriorState",
    "RollbackCommit",
    "StateWrite",
    "Store",
    "UpdateRequest",
    "WindowCommit",
    "check_durable_run_id",
    "stale_window",
]

#: Evidence types of failures stored under a positional key (``<line 17>``) because the record
#: had no usable identity; `WindowCommit.clear_positional` removes stale ones.
POSITIONAL_TYPES = frozenset(
    {"MissingIdentity", "BadIdentity", "UndecodableRecord", "MalformedRecord"}
)


def check_durable_run_id(value: str | None) -> str | None:
    """
    Return *value* if it can mark a run or a lock (`RunRecord.durable_run_id`,
    `LockInfo.durable_run_id`): ``None``, or a non-empty string without surrounding whitespace,
    U+0000 or lone surrogates, which every store keeps as it is (PostgreSQL's ``text`` holds no
    NUL, and no store takes a lone surrogate). The ids of ``effects.durable`` are names of that
    kind already; refusing the rest here, before anything is written, keeps every store alike,
    where each would otherwise fail in its own way or store the value altered.

    Raises:
        ValueError: If it is empty, has surrounding whitespace, or holds U+0000 or a lone
            surrogate; the message says which.
    """
    if value is None:
        return None
    if not value or value.strip() != value:
        raise ValueError(
            f"durable_run_id must be a non-empty id without surrounding spaces, got {value!r}"
        )
    if not storable(value):
        raise ValueError(
            f"durable_run_id must not hold {unstorable_part(value)} (no store keeps it as it "
            f"is), got {value!r}"
        )
    return value


class PriorState(NamedTuple):
    """What a run needs to know about an item's stored state before processing it."""

    status: ItemStatus
    version: str | None
    #: The tracking record as JSON text, decoded only for items that are processed.
    tracking: str | None
    #: The run that last wrote the state.
    run_id: str | None
    #: Its journal as JSON text (``Scope.prior_journal``), decoded only if a destination asks.
    journal: str | None = None


class StateWrite(NamedTuple):
    """
    One item's new state, as a window commits it; the store adds the definition, run and time.

    The JSON fields hold text the run has already encoded (and so proved encodable): a store
    keeps them as they are, in whatever JSON column type it has.
    """

    identity: str
    status: ItemStatus
    version: str | None
    reason: str | None = None
    #: The `ErrorEvidence` as JSON text (``failed`` and ``interrupted`` states).
    error: str | None = None
    #: The journal entries as a JSON array.
    journal: str | None = None
    #: The tracking record as a JSON object.
    tracking: str | None = None
    #: Where the source holds the record (``line 17``), when it says.
    position: str | None = None


class UpdateRequest(NamedTuple):
    """
    An ``--update`` of a definition that was asked for and not yet carried out to the end.

    A run records it before its first window and clears it with the window that ends its pass
    over the source, so an update stopped on the way (a crash, Ctrl-C, an unreadable source, a
    blocked definition) is carried out by the next normal or ``--update`` run of the definition.
    """

    #: The run that asked for it.
    run_id: str
    #: When, in epoch seconds.
    requested_at: float
    #: Whether its marking (``migrated`` states to ``needs-update``, the cursor reset) is
    #: committed: then the update goes on from the saved cursor instead of starting over.
    marked: bool


@attrs.frozen
class WindowCommit:
    """
    Everything one window changes, committed in one transaction by `Store.commit_window`.

    Attributes:
        definition_id: The definition the window belongs to.
        run_id: The run that processed it; its per-definition record becomes *results*.
        states: The window's new item states (at most one per identity).
        results: The run's per-definition record after this window (counts included).
        cursor: The cursor after the window.
        save_cursor: Save *cursor* (discovery); targeted runs keep the saved one.
        forget: Identities whose stored states are removed (before *states* are written).
        mark_needs_update: First, mark every ``migrated`` state ``needs-update`` (the first
            window of an ``--update`` run, so a failed first read leaves the states as they were),
            and the definition's `UpdateRequest` marked.
        clear_positional: Remove the positional failures (a ``<...>`` key and an evidence type
            in `POSITIONAL_TYPES`) of the definition that this run did not write: its pass over
            the whole source found no such record at those positions any more.
        update_done: Clear the definition's `UpdateRequest`: this window ends the update's
            pass over the source.
        seen: Identities the window met (items, unchanged ones included, and faults' keys)
            whose states are marked as seen by *run_id* (after *states* are written): a run
            with ``--rollback-orphans`` marks every state its scan meets, and rolls back those
            of the definition it did not (`Store.orphans`). Empty for other runs.
        based_on: The run's per-definition record this window started from; when given, the
            commit is refused with `StaleWindowError` (nothing written) unless the stored record
            is still exactly that: another process that took the run over (a durable run whose
            worker was paused past its lease) committed meanwhile.
    """

    definition_id: str
    run_id: str
    states: Sequence[StateWrite]
    results: Mapping[str, DefinitionResult]
    cursor: Cursor = None
    save_cursor: bool = False
    forget: tuple[str, ...] = ()
    mark_needs_update: bool = False
    clear_positional: bool = False
    update_done: bool = False
    based_on: Mapping[str, DefinitionResult] | None = None
    seen: Sequence[str] = ()


@attrs.frozen
class RollbackCommit:
    """
    What one batch of a rollback changes, committed in one transaction by
    `Store.commit_rollback`.

    Attributes:
        definition_id: The definition whose states are undone.
        run_id: The rollback run; its per-definition record becomes *results*.
        deleted: Identities whose undo is done: their states go, journal and all, so the next
            run migrates them again. One missing already is no error.
        attempts: ``(identity, attempt)`` pairs for the items whose undo failed: *attempt* is
            the JSON text of one ``{"run_id", "entries", "error": {"type", "message"},
            "failed_at"}`` object, appended to the state's `ItemState.rollback_attempts` (the
            state itself is kept as it was). An attempt equal to the state's last one is not
            appended again (a commit sent twice), nor is one for a state that is gone.
        results: The run's per-definition record after this batch (counts included).
        seen_by: When given (the orphans of a ``--rollback-orphans`` run), the states kept with
            a failed attempt are marked as seen by this run, so `Store.orphans` does not
            select them again in it (a later page, a durable run recovered).
    """

    definition_id: str
    run_id: str
    deleted: Sequence[str]
    attempts: Sequence[tuple[str, str]]
    results: Mapping[str, DefinitionResult]
    seen_by: str | None = None


@runtime_checkable
class Store(Protocol):
    """
    Where item states, runs, cursors, contracts and locks are kept (see the module docstring).

    A store is a context manager; leaving it closes it. Errors reaching the store's backend
    (a corrupt file, a full disk, a lock held past the timeout) raise `StoreError` naming the
    store and the cause.
    """

    def describe(self) -> str:
        """The store for messages, e.g. ``sqlite:/srv/state.db``."""
        ...

    def close(self) -> None:
        """Release the store's resources (idempotent)."""
        ...

    def __enter__(self) -> Store: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    # --- runs -------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        mode: str,
        definitions: Mapping[str, DefinitionResult],
        *,
        durable_run_id: str | None = None,
        kind: str = "run",
    ) -> None:
        """
        Record a new run with status ``queued``, held by this process, or, with
        *durable_run_id*, owned by that durable workflow run (`RunRecord.durable_run_id`):
        this process only started it, and `recover_dead_runs` never marks it failed. *kind*:
        ``"run"``, or ``"rollback"`` for a run of ``migrate rollback`` (`RunRecord.kind`).

        Raises:
            ValueError: If *durable_run_id* cannot be stored as it is (see
                `check_durable_run_id`); nothing is written.
        """
        ...

    def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus | None = None,
        definitions: Mapping[str, DefinitionResult] | None = None,
        error: str | None = None,
        ended: bool = False,
    ) -> None:
        """Change a stored run; ``None`` and ``False`` leave a field as it is."""
        ...

    def run(self, run_id: str) -> RunRecord | None:
        """The run with this id, if any."""
        ...

    def runs(self, limit: int | None = 20) -> tuple[RunRecord, ...]:
        """Runs, newest first; at most *limit* (``None``: all)."""
        ...

    def latest_run_for(
        self, definition_id: str, *, include_start_failed: bool = False
    ) -> RunRecord | None:
        """The newest run that covered *definition_id* (start-failed runs skipped by default)."""
        ...

    def recover_dead_runs(self) -> tuple[str, ...]:
        """
        Mark failed the ``queued`` / ``running`` runs whose process is dead, release their locks
        (those not marked with a durable run), and return their ids (see
        `migrate._liveness.is_alive`). A run with a `RunRecord.durable_run_id` is not owned by a
        process: it and its locks are never touched.
        """
        ...

    # --- locks ------------------------------------------------------------------------------

    def acquire_locks(
        self, run_id: str, definition_ids: Iterable[str], *, durable_run_id: str | None = None
    ) -> None:
        """
        Take the locks of all *definition_ids* for *run_id* atomically (all or none), marked
        with *durable_run_id* if given (`LockInfo.durable_run_id`). A lock whose process is dead
        is broken first, unless it is marked: a marked lock is held until `release_locks` or
        `unlock` removes it, whatever became of the process that took it.

        Raises:
            LockHeld: Naming the first definition whose lock another live run, or any durable
                run, holds.
            ValueError: If *durable_run_id* cannot be stored as it is (see
                `check_durable_run_id`); nothing is taken.
        """
        ...

    def release_locks(self, run_id: str, *, durable_run_id: str | None = None) -> None:
        """
        Release every lock *run_id* holds; with *durable_run_id*, only those of its locks
        marked with it (a lock not so marked, or a wrong mark, releases nothing and raises
        nothing). Idempotent.
        """
        ...

    def locks(self) -> tuple[LockInfo, ...]:
        """The locks held now, by definition."""
        ...

    def unlock(self, definition_id: str) -> LockInfo | None:
        """Break *definition_id*'s lock; return it (``None`` if it was not locked)."""
        ...

    # --- contracts --------------------------------------------------------------------------

    def contract(self, definition_id: str) -> Contract | None:
        """The contract recorded for *definition_id*, if any."""
        ...

    def save_contract(
        self, definition_id: str, contract: Contract, run_id: str, *, reset_cursor: bool = False
    ) -> None:
        """Record *contract* for *definition_id* (and forget its cursor if asked), atomically."""
        ...

    def has_state(self, definition_id: str) -> bool:
        """Whether *definition_id* has a stored item state or a saved cursor."""
        ...

    # --- the window loop ---------------------------------------------------------------------

    def cursor(self, definition_id: str) -> Cursor:
        """The saved cursor of *definition_id* (``None``: from the beginning)."""
        ...

    def reset_cursor(self, definition_id: str) -> None:
        """Forget the saved cursor: the next normal run reads from the beginning."""
        ...

    def prior_states(
        self, definition_id: str, identities: Sequence[str]
    ) -> Mapping[str, PriorState]:
        """The stored states of these identities (absent ones are missing), in one read."""
        ...

    def commit_window(self, commit: WindowCommit) -> None:
        """Commit one window atomically (see `WindowCommit`)."""
        ...

    def mark_needs_update(self, definition_id: str, run_id: str) -> int:
        """Mark every ``migrated`` item ``needs-update`` and forget the cursor; return how many."""
        ...

    def commit_rollback(self, commit: RollbackCommit) -> None:
        """
        Commit one batch of a rollback atomically (see `RollbackCommit`): its states deleted,
        its failed attempts appended, the run's counts recorded; all or nothing.
        """
        ...

    def request_update(self, definition_id: str, run_id: str) -> None:
        """
        Record that *run_id* asks for an update of *definition_id*: an `UpdateRequest`, not
        marked, replacing any earlier one. Cleared by the `WindowCommit` with ``update_done``.
        """
        ...

    def update_request(self, definition_id: str) -> UpdateRequest | None:
        """The update of *definition_id* asked for and not carried out yet, if any."""
        ...

    def identities(self, definition_id: str, status: ItemStatus) -> list[str]:
        """Identities of *definition_id* whose state is *status*, in identity order."""
        ...

    def count_status(
        self, definition_id: str, status: ItemStatus, run_id: str | None = None
    ) -> int:
        """How many items of *definition_id* have *status* (last written by *run_id*, if given)."""
        ...

    def tracking(self, definition_id: str, identity: str) -> dict[str, Any] | None:
        """The tracking record stored for one item, or ``None``."""
        ...

    # --- queries ----------------------------------------------------------------------------

    def counts(self, definition_id: str) -> Counts:
        """The stored states of *definition_id*, counted by status (``unchanged`` is 0)."""
        ...

    def item(self, definition_id: str, identity: str) -> ItemState | None:
        """The stored state of one item, or ``None``."""
        ...

    def items(self, definition_id: str) -> tuple[ItemState, ...]:
        """Every stored state of *definition_id*, in identity order."""
        ...

    def orphans(
        self, definition_id: str, run_id: str, limit: int | None = None
    ) -> tuple[ItemState, ...]:
        """
        The stored states of *definition_id* not marked as seen by *run_id* (see
        `WindowCommit.seen`), in identity order, the first *limit* (``None``: all): after a
        complete scan by that run, the states whose records are gone from the source.
        """
        ...

    def failures(self, definition_id: str, limit: int | None = None) -> tuple[FailureRecord, ...]:
        """Failed items of *definition_id* with their evidence, and its states of any status
        whose rollback failed (with their attempts), in natural identity order."""
        ...

    def forget(self, definition_id: str, identities: Sequence[str]) -> tuple[ItemState, ...]:
        """Remove the stored states of these identities; return the states removed."""
        ...


def stale_window(commit: WindowCommit) -> StaleWindowError:
    """The refusal of *commit*, whose run's stored counts moved since it started."""
    return StaleWindowError(
        f"the window of {commit.definition_id!r} in run {commit.run_id} was not committed: the "
        "run's stored counts moved since it started (another process works the run)"
    )
