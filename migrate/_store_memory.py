"""A `Store` in memory: for tests, examples and runs whose state may be thrown away."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple, cast

import attrs

from migrate._errors import LockHeld
from migrate._liveness import this_process
from migrate._sources import Contract, Cursor
from migrate._state import (
    Counts,
    DefinitionResult,
    ErrorEvidence,
    FailureRecord,
    ItemState,
    ItemStatus,
    LockInfo,
    RunRecord,
    RunStatus,
)
from migrate._store import (
    POSITIONAL_TYPES,
    PriorState,
    RollbackCommit,
    StateWrite,
    UpdateRequest,
    WindowCommit,
    check_durable_run_id,
    stale_window,
)
from migrate._store_rows import (
    decode_attempts,
    decode_journal,
    next_attempts,
    rollback_evidence,
)
from migrate._text import natural_key

__all__ = ["MemoryStore"]


class _Stored(NamedTuple):
    state: StateWrite
    run_id: str | None
    updated_at: float
    #: The failed rollback attempts as a JSON array, ``None``: none.
    rollback_attempts: str | None = None
    #: The run whose scan last saw the state (``--rollback-orphans``).
    seen_by: str | None = None


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class MemoryStore:
    """
    Item states, runs, cursors, contracts and locks in this process's memory (a `Store`).

    Everything is lost with the object. Closing it keeps the data, so one `MemoryStore` given as
    a `Config`'s ``store`` serves several runs, as a file would. Thread-safe.

    Args:
        name: How `describe` names it.

    Example:
        >>> import migrate
        >>> store = migrate.MemoryStore()
        >>> config = migrate.Config(
        ...     [migrate.Migration("p", migrate.MemorySource([{"id": 1}]), lambda i, s: None)],
        ...     store=store,
        ... )
        >>> migrate.run(config).definitions["p"].counts.migrated
        1
        >>> store.counts("p").migrated
        1
    """

    def __init__(self, *, name: str = "memory") -> None:
        self.name = name
        self._lock = threading.RLock()
        self._states: dict[str, dict[str, _Stored]] = {}
        self._runs: dict[str, RunRecord] = {}
        self._cursors: dict[str, Cursor] = {}
        self._contracts: dict[str, Contract] = {}
        self._locks: dict[str, LockInfo] = {}
        self._updates: dict[str, UpdateRequest] = {}

    def __repr__(self) -> str:
        return f"MemoryStore(name={self.name!r})"

    def describe(self) -> str:
        """``memory:NAME``."""
        return f"memory:{self.name}"

    def close(self) -> None:
        """Nothing to release: the data stays with the object."""

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
        """Record a new run with status ``queued`` for this process (or owned by the durable
        run *durable_run_id*; of *kind*, see `Store.create_run`)."""
        check_durable_run_id(durable_run_id)
        me = this_process()
        with self._lock:
            if run_id in self._runs:
                raise ValueError(f"run {run_id!r} exists already")
            self._runs[run_id] = RunRecord(
                run_id=run_id,
                status="queued",
                mode=mode,
                started_at=time.time(),
                ended_at=None,
                pid=me.pid,
                host=me.host,
                definitions=dict(definitions),
                durable_run_id=durable_run_id,
                kind=kind,
            )

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
        with self._lock:
            self._update_run(run_id, status, definitions, error, ended)

    def _update_run(
        self,
        run_id: str,
        status: RunStatus | None,
        definitions: Mapping[str, DefinitionResult] | None,
        error: str | None,
        ended: bool,
    ) -> None:
        record = self._runs.get(run_id)
        if record is None:
            return
        self._runs[run_id] = attrs.evolve(
            record,
            status=record.status if status is None else status,
            definitions=record.definitions if definitions is None else dict(definitions),
            error=record.error if error is None else error,
            ended_at=time.time() if ended else record.ended_at,
        )

    def run(self, run_id: str) -> RunRecord | None:
        """The run with this id, if any."""
        with self._lock:
            return self._runs.get(run_id)

    def runs(self, limit: int | None = 20) -> tuple[RunRecord, ...]:
        """Runs, newest first; at most *limit* (``None``: all)."""
        with self._lock:
            newest = tuple(reversed(self._runs.values()))
        return newest if limit is None else newest[:limit]

    def latest_run_for(
        self, definition_id: str, *, include_start_failed: bool = False
    ) -> RunRecord | None:
        """The newest run that covered *definition_id* (start-failed runs skipped by default)."""
        for record in self.runs(None):
            if definition_id in record.definitions and (
                include_start_failed or record.status != "start-failed"
            ):
                return record
        return None

    def recover_dead_runs(self) -> tuple[str, ...]:
        """Nothing to recover: every run of a memory store belongs to this living process (or
        to a durable run, which no process owns)."""
        return ()

    # --- locks ------------------------------------------------------------------------------

    def acquire_locks(
        self, run_id: str, definition_ids: Iterable[str], *, durable_run_id: str | None = None
    ) -> None:
        """
        Take the locks of all *definition_ids* for *run_id* atomically (all or none), marked
        with *durable_run_id* if given. No lock is ever broken here: every lock of a memory
        store was taken by this living process (or, marked, is held for a durable run).
        """
        check_durable_run_id(durable_run_id)
        wanted = list(definition_ids)
        me = this_process()
        with self._lock:
            for definition_id in wanted:
                held = self._locks.get(definition_id)
                if held is not None:
                    raise LockHeld(held)
            now = time.time()
            for definition_id in wanted:
                self._locks[definition_id] = LockInfo(
                    definition_id, run_id, me.pid, me.host, now, me.token, durable_run_id
                )

    def release_locks(self, run_id: str, *, durable_run_id: str | None = None) -> None:
        """Release every lock *run_id* holds (with *durable_run_id*: only those marked so)."""
        with self._lock:
            for definition_id in [
                d
                for d, lock in self._locks.items()
                if lock.run_id == run_id
                and (durable_run_id is None or lock.durable_run_id == durable_run_id)
            ]:
                del self._locks[definition_id]

    def locks(self) -> tuple[LockInfo, ...]:
        """The locks held now."""
        with self._lock:
            return tuple(self._locks[d] for d in sorted(self._locks))

    def unlock(self, definition_id: str) -> LockInfo | None:
        """Break *definition_id*'s lock; return it (``None`` if it was not locked)."""
        with self._lock:
            return self._locks.pop(definition_id, None)

    # --- contracts --------------------------------------------------------------------------

    def contract(self, definition_id: str) -> Contract | None:
        """The contract recorded for *definition_id*, if any."""
        with self._lock:
            return self._contracts.get(definition_id)

    def save_contract(
        self, definition_id: str, contract: Contract, run_id: str, *, reset_cursor: bool = False
    ) -> None:
        """Record *contract* for *definition_id* (and forget its cursor if asked)."""
        with self._lock:
            self._contracts[definition_id] = contract
            if reset_cursor:
                self._cursors[definition_id] = None

    def has_state(self, definition_id: str) -> bool:
        """Whether *definition_id* has a stored item state or a saved cursor."""
        with self._lock:
            return bool(self._states.get(definition_id)) or (
                self._cursors.get(definition_id) is not None
            )

    # --- the window loop --------------------------------------------------------------------

    def cursor(self, definition_id: str) -> Cursor:
        """The saved cursor of *definition_id* (``None``: from the beginning)."""
        with self._lock:
            cursor = self._cursors.get(definition_id)
        # A copy, as a file store would return: a source must not share the stored object.
        return cast(Cursor, json.loads(json.dumps(cursor)))

    def reset_cursor(self, definition_id: str) -> None:
        """Forget the saved cursor: the next normal run reads from the beginning."""
        with self._lock:
            self._cursors[definition_id] = None

    def prior_states(self, definition_id: str, identities: Sequence[str]) -> dict[str, PriorState]:
        """The stored states of these identities."""
        with self._lock:
            stored = self._states.get(definition_id)
            if not stored:
                return {}
            found: dict[str, PriorState] = {}
            for identity in identities:
                hit = stored.get(identity)
                if hit is not None:
                    state = hit.state
                    found[identity] = PriorState(
                        state.status, state.version, state.tracking, hit.run_id, state.journal
                    )
            return found

    def commit_window(self, commit: WindowCommit) -> None:
        """Commit one window atomically (one lock held throughout; nothing can fail halfway)."""
        # The cursor is encoded first: a cursor JSON cannot hold fails before anything changes.
        cursor_text = json.dumps(commit.cursor) if commit.save_cursor else None
        with self._lock:
            if commit.based_on is not None:
                record = self._runs.get(commit.run_id)
                if record is None or dict(record.definitions) != dict(commit.based_on):
                    raise stale_window(commit)
            definition_id = commit.definition_id
            stored = self._states.setdefault(definition_id, {})
            if commit.mark_needs_update:
                self._mark(definition_id, commit.run_id)
                request = self._updates.get(definition_id)
                if request is not None:
                    self._updates[definition_id] = request._replace(marked=True)
            for identity in commit.forget:
                stored.pop(identity, None)
            if commit.clear_positional:
                for identity, hit in list(stored.items()):
                    positional = identity.startswith("<") and identity.endswith(">")
                    if positional and hit.state.status == "failed" and hit.run_id != commit.run_id:
                        error: dict[str, Any] = _loads(hit.state.error) or {}
                        if error.get("type") in POSITIONAL_TYPES:
                            del stored[identity]
            now = time.time()
            for state in commit.states:
                stored[state.identity] = _Stored(state, commit.run_id, now)
            for identity in commit.seen:
                met = stored.get(identity)
                if met is not None:
                    stored[identity] = met._replace(seen_by=commit.run_id)
            self._update_run(commit.run_id, None, commit.results, None, False)
            if cursor_text is not None:
                self._cursors[definition_id] = json.loads(cursor_text)
            if commit.update_done:
                self._updates.pop(definition_id, None)

    def _mark(self, definition_id: str, run_id: str) -> int:
        stored = self._states.setdefault(definition_id, {})
        now = time.time()
        changed = 0
        for identity, hit in list(stored.items()):
            if hit.state.status == "migrated":
                stored[identity] = hit._replace(
                    state=hit.state._replace(status="needs-update"), run_id=run_id, updated_at=now
                )
                changed += 1
        self._cursors[definition_id] = None
        return changed

    def mark_needs_update(self, definition_id: str, run_id: str) -> int:
        """Mark every ``migrated`` item ``needs-update`` and forget the cursor; return how many."""
        with self._lock:
            return self._mark(definition_id, run_id)

    def commit_rollback(self, commit: RollbackCommit) -> None:
        """Commit one batch of a rollback atomically (one lock held throughout)."""
        with self._lock:
            stored = self._states.setdefault(commit.definition_id, {})
            for identity in commit.deleted:
                stored.pop(identity, None)
            for identity, attempt in commit.attempts:
                hit = stored.get(identity)
                if hit is None:
                    continue
                attempts = next_attempts(hit.rollback_attempts, attempt)
                if attempts is not None:
                    hit = hit._replace(rollback_attempts=attempts)
                if commit.seen_by is not None:
                    hit = hit._replace(seen_by=commit.seen_by)
                stored[identity] = hit
            self._update_run(commit.run_id, None, commit.results, None, False)

    def request_update(self, definition_id: str, run_id: str) -> None:
        """Record an update of *definition_id* asked for by *run_id* (see `UpdateRequest`)."""
        with self._lock:
            self._updates[definition_id] = UpdateRequest(run_id, time.time(), marked=False)

    def update_request(self, definition_id: str) -> UpdateRequest | None:
        """The update of *definition_id* asked for and not carried out yet, if any."""
        with self._lock:
            return self._updates.get(definition_id)

    def identities(self, definition_id: str, status: ItemStatus) -> list[str]:
        """Identities of *definition_id* whose state is *status*, in identity order."""
        with self._lock:
            stored = self._states.get(definition_id, {})
            return sorted(i for i, hit in stored.items() if hit.state.status == status)

    def count_status(
        self, definition_id: str, status: ItemStatus, run_id: str | None = None
    ) -> int:
        """How many items of *definition_id* have *status* (last written by *run_id*, if given)."""
        with self._lock:
            return sum(
                1
                for hit in self._states.get(definition_id, {}).values()
                if hit.state.status == status and (run_id is None or hit.run_id == run_id)
            )

    def tracking(self, definition_id: str, identity: str) -> dict[str, Any] | None:
        """The tracking record stored for one item, or ``None``."""
        with self._lock:
            hit = self._states.get(definition_id, {}).get(identity)
        return None if hit is None else cast("dict[str, Any] | None", _loads(hit.state.tracking))

    # --- queries ----------------------------------------------------------------------------

    def counts(self, definition_id: str) -> Counts:
        """The stored states of *definition_id*, counted by status (``unchanged`` is 0)."""
        by_status: dict[str, int] = {}
        with self._lock:
            for hit in self._states.get(definition_id, {}).values():
                by_status[hit.state.status] = by_status.get(hit.state.status, 0) + 1
        return Counts.of_statuses(by_status)

    def _item_state(self, definition_id: str, hit: _Stored) -> ItemState:
        state = hit.state
        error = _loads(state.error)
        journal, problem = decode_journal(state.journal)
        return ItemState(
            definition_id=definition_id,
            identity=state.identity,
            status=state.status,
            reason=state.reason,
            error=None if error is None else ErrorEvidence.from_json(error),
            version=state.version,
            journal=journal,
            tracking=_loads(state.tracking),
            run_id=hit.run_id,
            updated_at=hit.updated_at,
            position=state.position,
            rollback_attempts=decode_attempts(hit.rollback_attempts),
            journal_problem=problem,
        )

    def item(self, definition_id: str, identity: str) -> ItemState | None:
        """The stored state of one item, or ``None``."""
        with self._lock:
            hit = self._states.get(definition_id, {}).get(identity)
        return None if hit is None else self._item_state(definition_id, hit)

    def items(self, definition_id: str) -> tuple[ItemState, ...]:
        """Every stored state of *definition_id*, in identity order."""
        with self._lock:
            stored = dict(self._states.get(definition_id, {}))
        return tuple(self._item_state(definition_id, stored[i]) for i in sorted(stored))

    def orphans(
        self, definition_id: str, run_id: str, limit: int | None = None
    ) -> tuple[ItemState, ...]:
        """The states of *definition_id* that *run_id*'s scan did not see (see `Store.orphans`)."""
        with self._lock:
            stored = dict(self._states.get(definition_id, {}))
        found = sorted(i for i, hit in stored.items() if hit.seen_by != run_id)
        if limit is not None:
            found = found[:limit]
        return tuple(self._item_state(definition_id, stored[i]) for i in found)

    def failures(self, definition_id: str, limit: int | None = None) -> tuple[FailureRecord, ...]:
        """Failed items of *definition_id* with their evidence, and its states whose rollback
        failed, in natural identity order."""
        failed = [
            s for s in self.items(definition_id) if s.status == "failed" or s.rollback_attempts
        ]
        failed.sort(key=lambda s: natural_key(s.identity))
        return tuple(
            FailureRecord(
                identity=s.identity,
                run_id=s.run_id,
                error=(
                    rollback_evidence(s.rollback_attempts)
                    if s.status != "failed" and s.rollback_attempts
                    else s.error or ErrorEvidence("process", "", "")
                ),
                journal=s.journal,
                position=s.position,
                status=s.status,
                rollback_attempts=s.rollback_attempts,
            )
            for s in (failed if limit is None else failed[:limit])
        )

    def forget(self, definition_id: str, identities: Sequence[str]) -> tuple[ItemState, ...]:
        """Remove the stored states of these identities; return the states removed."""
        with self._lock:
            stored = self._states.get(definition_id, {})
            removed = [
                self._item_state(definition_id, stored.pop(i))
                for i in sorted(set(identities))
                if i in stored
            ]
        return tuple(removed)
