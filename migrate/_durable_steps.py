"""
The bodies of the ``migrate.run`` workflow's steps, run in the thread of one Migration Run.

Each durable Migration Run that a process works has one `LiveRun`: a thread of its own (the
store's connection and the run's event loop for async processes stay in it), the store opened
there, and the `_Run` and current `_Definition` of ``migrate._runner``, the same code a plain run
executes. Nothing here is durable by itself: every step reads what it needs from the migrate
store, so a process that picks the run up after another died goes on from what was committed
(the cursor, the run's counts, the states this run wrote).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

import attrs

from effects import FatalError, add_hook
from migrate._definition import Config
from migrate._errors import MigrateError, RefusedError, StaleWindowError, StoreError, UsageError
from migrate._pipeline import counting_retries, record_attempts
from migrate._planner import RunOptions, plan
from migrate._refusals import check_contracts, preflight_refusal
from migrate._reports import ProgressEvent, RunSummary
from migrate._runner import ErrorTally, _Definition, _Run  # pyright: ignore[reportPrivateUsage]
from migrate._sources import Contract
from migrate._state import DefinitionResult, RunRecord, RunStatus
from migrate._store import Store

__all__ = ["PROGRESS", "LiveRun", "BeginRefused", "summary_of"]

_T = TypeVar("_T")

#: Where the progress of a Migration Run worked in this context goes: (durable run id, sink).
PROGRESS: Final[contextvars.ContextVar[tuple[str, Callable[[ProgressEvent], object]] | None]] = (
    contextvars.ContextVar("migrate_durable_progress", default=None)
)
_TERMINAL: Final = frozenset({"succeeded", "failed", "start-failed"})


class BeginRefused(FatalError):  # noqa: N818 - a verdict, as LockHeld is
    """``migrate.begin`` refused the run (code ``locked``, ``contract_changed``, ``preflight``)."""


def _refusal_code(error: MigrateError) -> str:
    name = type(error).__name__
    if name == "LockHeld":
        return "locked"
    if name == "ContractChanged":
        return "contract_changed"
    return "preflight"


class LiveRun:
    """
    One durable Migration Run as this process works it: its thread, store, run and definition.

    Every method but `call` runs in the run's thread (through `call`).
    """

    def __init__(self, config: Config, given: Mapping[str, Any], durable_run_id: str) -> None:
        self.config = config
        self.run_id: str = given["run_id"]
        self.options = RunOptions(**given["options"])
        self.durable_run_id = durable_run_id
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"migrate-{self.run_id}")
        self._stack = contextlib.ExitStack()
        self._run: _Run | None = None
        #: The definition being worked, and the window number its next window has.
        self._current: tuple[str, int, _Definition] | None = None

    async def call(self, fn: Callable[[], _T]) -> _T:
        """Run *fn* in this run's thread, in a copy of the caller's context (its progress)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, fn)

    async def close(self) -> None:
        """Close the store and the run's event loop (in the thread), then end the thread."""
        try:
            await self.call(self._stack.close)
        finally:
            self._executor.shutdown(wait=False)

    # --- in the thread ------------------------------------------------------------------

    def _opened(self) -> _Run:
        if self._run is not None:
            return self._run
        try:
            the_plan = plan(self.config, self.options)
        except UsageError as error:
            msg = f"this worker's config cannot run it: {error}"
            raise BeginRefused(msg, "preflight") from None
        store: Store = self._stack.enter_context(self.config.using_store())
        record = store.run(self.run_id)
        if record is None:
            msg = (
                f"migration run {self.run_id} is not in {store.describe()}: this worker's config "
                "has another migrate store that shares the durable store; give each migrate store "
                "a durable store of its own (--durable-store, migrate.durable.engine(store=...))"
            )
            raise BeginRefused(msg, "preflight")
        owner = _Run(self.config, the_plan, store, None, run_id=self.run_id)
        owner.results.update(record.definitions)
        self._stack.callback(add_hook(record_attempts))
        # The run's event loop (async processes), closed with the store.
        self._stack.callback(lambda: owner._aio.close() if owner._aio is not None else None)  # pyright: ignore[reportPrivateUsage]
        self._run = owner
        return owner

    def begin(self) -> dict[str, Any]:
        """
        Re-plan from this worker's config, check the locks, contracts and preflight, and mark
        the run running. A refusal stores the run ``start-failed``, releases its locks and
        raises `BeginRefused`.
        """
        owner = self._opened()
        store = owner.store
        try:
            self._check_locks(owner)
            check = _check_contracts(owner)
            refused = preflight_refusal(owner.config, owner.plan, store)
            if refused is not None:
                raise refused
        except RefusedError as error:
            store.update_run(self.run_id, status="start-failed", error=str(error), ended=True)
            store.release_locks(self.run_id, durable_run_id=self.durable_run_id)
            raise BeginRefused(str(error), _refusal_code(error)) from None
        store.update_run(self.run_id, status="running")
        for step in owner.plan.steps:
            if step.mode == "update":
                store.request_update(step.definition_id, self.run_id)
        return {
            "definitions": list(owner.plan.definition_ids),
            **({"rollback_orphans": True} if owner.plan.rollback_orphans else {}),
            "notes": list(owner.notes),
            "contracts": {
                definition_id: {"contract": contract.to_json(), "reset_cursor": reset}
                for definition_id, (contract, reset) in check.items()
            },
        }

    def _check_locks(self, owner: _Run) -> None:
        held = {
            lock.definition_id
            for lock in owner.store.locks()
            if lock.run_id == self.run_id and lock.durable_run_id == self.durable_run_id
        }
        missing = [d for d in owner.plan.definition_ids if d not in held]
        if missing:
            msg = (
                f"migration run {self.run_id} no longer holds the lock of "
                f"{', '.join(map(repr, missing))} (broken by migrate unlock?); start a new run"
            )
            raise RefusedError(msg)

    def window(self, definition_id: str, n: int, contracts: Mapping[str, Any]) -> dict[str, Any]:
        """
        Commit window *n* of *definition_id* (its first one: also start the definition, or
        store it blocked). ``done`` says the definition has ended; a source that could not be
        read, or a store that failed, raises a `FatalError` (``source`` / ``store``) after the
        definition's end is stored.
        """
        owner = self._opened()
        progress = PROGRESS.get()
        owner.progress = progress[1] if progress and progress[0] == self.durable_run_id else None
        try:
            return self._window(owner, definition_id, n, contracts)
        except StaleWindowError:
            # Another process took the run over (this one was paused past its lease): what
            # this process knew is stale, and the engine refuses this step's checkpoint.
            self._current = None
            raise
        except StoreError as error:
            raise FatalError(f"store error: {error}", "store") from None

    def _window(
        self, owner: _Run, definition_id: str, n: int, contracts: Mapping[str, Any]
    ) -> dict[str, Any]:
        head = {"definition": definition_id, "n": n}
        current = self._current
        stored = owner.store.run(self.run_id)
        stored_result = None if stored is None else stored.definitions.get(definition_id)
        if (
            current is not None
            and current[:2] == (definition_id, n)
            and stored_result == owner.results.get(definition_id)
        ):
            definition = current[2]
        else:
            # Picked up here (another process committed the windows before), or a first window.
            if current is not None:
                current[2].loop.close()
            self._current = None
            if stored_result is not None and stored_result.status in ("succeeded", "failed"):
                return {**head, "done": True, "status": stored_result.status}
            if stored_result is not None and stored_result.status == "blocked":
                return {**head, "done": True, "status": "blocked"}
            owner.results[definition_id] = stored_result or owner.results[definition_id]
            step = next(s for s in owner.plan.steps if s.definition_id == definition_id)
            blocked = owner._blocked_by(step)  # pyright: ignore[reportPrivateUsage]
            if blocked is not None:
                owner.results[definition_id] = DefinitionResult(
                    step.mode, "blocked", blocked=blocked
                )
                owner.store.update_run(self.run_id, definitions=owner.results)
                return {**head, "done": True, "status": "blocked"}
            pending = contracts.get(definition_id)
            if pending is not None:
                owner.contracts[definition_id] = (
                    Contract.from_json(pending["contract"]),
                    bool(pending["reset_cursor"]),
                )
            definition = _Definition(owner, owner.config.get(definition_id), step)
            if stored is not None:
                definition.fence = stored.definitions
            with counting_retries(definition.tally):
                definition.open(resumed=stored_result)
        notes_before = len(owner.notes)
        with counting_retries(definition.tally):
            more = definition.next_window()
        notes = owner.notes[notes_before:]
        if more:
            self._current = (definition_id, n + 1, definition)
            return {**head, "done": False, **({"notes": notes} if notes else {})}
        definition.loop.close()
        self._current = None
        result = definition.finish()
        if definition.error is not None:
            raise FatalError(f"{definition_id}: {definition.error}", "source")
        return {
            **head,
            "done": True,
            "status": result.status,
            **({"notes": notes} if notes else {}),
        }

    def orphans(self, definition_id: str, n: int) -> dict[str, Any]:
        """
        Roll back page *n* of *definition_id*'s orphans (``--rollback-orphans``, after every
        definition's windows): the next `migrate._orphans.PAGE` states its complete scan did
        not see, committed in batches. ``done`` says none is left (or the scan was not
        complete: then nothing is rolled back and ``notes`` says why). A recovered run goes on
        from what was committed: deleted states are gone, failed ones marked as seen by it.
        """
        from migrate._orphans import (  # noqa: PLC0415 - only runs with orphans need it
            OrphanPage,
            orphan_note,
            scan_complete,
            skipped_note,
        )

        owner = self._opened()
        head = {"definition": definition_id, "n": n}
        stored = owner.store.run(self.run_id)
        result = None if stored is None else stored.definitions.get(definition_id)
        if result is None:
            return {**head, "done": True}
        owner.results.update(stored.definitions if stored is not None else {})
        if not scan_complete(result):
            return {**head, "done": True, "notes": [skipped_note(definition_id, result)]}
        try:
            count, done = OrphanPage(owner, definition_id).page()
        except StoreError as error:
            raise FatalError(f"store error: {error}", "store") from None
        if not done:
            return {**head, "done": False, "rolled_back": count}
        final = owner.results[definition_id]
        return {**head, "done": True, "notes": [orphan_note(definition_id, final)]}

    def complete(self, notes: list[str]) -> dict[str, Any]:
        """Store the run's end (idempotent: a finished run keeps its record), release the locks."""
        owner = self._opened()
        store = owner.store
        record = store.run(self.run_id)
        if record is not None and record.status not in _TERMINAL:
            results = dict(record.definitions)
            ok = all(r.status == "succeeded" for r in results.values())
            status: RunStatus = "succeeded" if ok else "failed"
            store.update_run(self.run_id, status=status, definitions=results, ended=True)
        store.release_locks(self.run_id, durable_run_id=self.durable_run_id)
        final = store.run(self.run_id)
        assert final is not None
        return summary_of(store, final, notes).to_json()

    def fail(self, reason: str) -> None:
        """Store the run failed with *reason* (unless it has ended), release the locks."""
        owner = self._opened()
        store = owner.store
        record = store.run(self.run_id)
        if record is not None and record.status not in _TERMINAL:
            results = {
                key: attrs.evolve(value, status="failed")
                if value.status in ("queued", "running")
                else value
                for key, value in record.definitions.items()
            }
            store.update_run(
                self.run_id, status="failed", definitions=results, error=reason, ended=True
            )
        store.release_locks(self.run_id, durable_run_id=self.durable_run_id)


def _check_contracts(owner: _Run) -> dict[str, tuple[Contract, bool]]:
    """The run's contract check: raises its refusal; returns the contracts to record."""
    check = check_contracts(owner.config, owner.plan, owner.store)
    owner.notes.extend(check.notes)
    if check.refusal is not None:
        raise check.refusal
    return dict(check.record)


def summary_of(store: Store, record: RunRecord, notes: list[str] | tuple[str, ...]) -> RunSummary:
    """
    The `RunSummary` of a stored Migration Run: its record, and the most common errors of the
    failed items it left (read from the store, so every process's windows count).
    """
    errors = ErrorTally()
    for definition_id in record.definitions:
        for failure in store.failures(definition_id):
            # A state whose rollback failed is listed too: not a failure of this run.
            if failure.run_id == record.run_id and failure.status == "failed":
                error = failure.error
                errors.count(definition_id, error.kind, error.type, error.message)
    return RunSummary(
        run_id=record.run_id,
        status="succeeded" if record.status == "succeeded" else "failed",
        started_at=record.started_at,
        ended_at=record.ended_at if record.ended_at is not None else record.started_at,
        definitions=dict(record.definitions),
        top_errors=errors.top(),
        notes=tuple(notes),
    )
