"""
The run lifecycle: plan, run record, locks, refusals, each definition's window loop, results.

Per window the loop (``migrate._window_loop``) returns a result; this module commits it (the
window's states, the run's counts and the cursor in one transaction) and only then adds its
counts to the run's. A crash loses at most the uncommitted window, which the next run reads
again; a failed commit (a full disk) leaves the stored counts at the last committed window.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Literal, TypeVar

import attrs

from effects import add_hook
from migrate._definition import Config, Migration
from migrate._errors import (
    LockHeld,
    StoreError,
    TrackingError,
)
from migrate._pipeline import RetryTally, counting_retries, record_attempts
from migrate._planner import Plan, PlanStep, RunOptions, plan
from migrate._refusals import check_contracts, preflight_refusal
from migrate._reports import ErrorCount, ProgressEvent, RunSummary
from migrate._sources import Contract
from migrate._state import Counts, DefinitionResult
from migrate._store import Store, WindowCommit
from migrate._telemetry import SpanHandle, Value, span
from migrate._window_loop import LoopStart, WindowLoop, WindowResult

__all__ = ["ErrorTally", "Progress", "RunLifecycle", "new_run_id", "run"]

Progress = Callable[[ProgressEvent], object]
_T = TypeVar("_T")

_TOP_ERRORS = 5
#: Runs of digits, which make otherwise equal error messages differ (ids, counts, lines).
_NUMBERS = re.compile(r"\d+")


def _count_into(traced: SpanHandle, counts: Counts) -> None:
    """The item counts as attributes ``migration.items.<outcome>`` (those that are not 0)."""
    for field in attrs.fields(Counts):
        value = getattr(counts, field.name)
        if value:
            traced.set(f"migration.items.{field.name}", value)


def _summary_counts(summary: RunSummary) -> Counts:
    """The counts of every definition of *summary*, added up."""
    total = Counts()
    for result in summary.definitions.values():
        total += result.counts
    return total


def new_run_id() -> str:
    """
    A run id sortable by start time: ``YYYYmmddTHHMMSS-xxxxxxxx`` (UTC).

    32 random bits keep two runs started in the same second apart (the store's run ids are
    unique, so a collision would fail the second run).
    """
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


def run(
    config: Config,
    options: RunOptions | None = None,
    *,
    progress: Progress | None = None,
) -> RunSummary:
    """
    Run the plan for *options*: a new Migration Run over the chosen definitions.

    Item failures never raise: they are stored with evidence and counted in the summary.

    Args:
        config: The definitions and store.
        options: What to run and how; default: a normal run of every definition.
        progress: Called with a `ProgressEvent` at the start and end of each definition and
            after each committed window, in the calling thread.

    Raises:
        UsageError: For options that cannot go together or an unknown definition.
        LockHeld: If another live run holds a definition's lock (this run is stored as
            ``start-failed``).
        PreflightRefused: If a required dependency outside the plan did not run cleanly and
            *force* is not set (stored as ``start-failed``).
        ContractChanged: If a definition's source contract differs from the one recorded with
            its stored states and *force* is not set (stored as ``start-failed``).
        StoreSchemaError: If the store is newer than this version understands.
        StoreError: If the store cannot be used, or a window's commit failed (the run's stored
            counts then stay at the last committed window).
    """
    options = RunOptions() if options is None else options
    the_plan = plan(config, options)
    with config.using_store() as store:
        return _Run(config, the_plan, store, progress).execute()


class ErrorTally:
    """The failures of a run, grouped for the summary's most common errors."""

    def __init__(self) -> None:
        self._groups: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        #: One message seen per group, and whether the group's messages differ.
        self._examples: dict[tuple[str, str, str, str], tuple[str, bool]] = {}

    def count(self, definition_id: str, kind: str, type_: str, message: str) -> None:
        """
        Count a failure.

        Messages that differ only in their numbers (ids, line numbers, sizes) are one group, so
        "bad row 17" and "bad row 42" count together; the summary shows the message itself when
        the group holds one, else the pattern with ``<n>`` for the numbers.
        """
        key = (definition_id, kind, type_, _NUMBERS.sub("<n>", message))
        self._groups[key] += 1
        seen = self._examples.get(key)
        if seen is None:
            self._examples[key] = (message, False)
        elif not seen[1] and seen[0] != message:
            self._examples[key] = (seen[0], True)

    def top(self) -> tuple[ErrorCount, ...]:
        """The most common groups (at most five), most common first."""
        return tuple(
            ErrorCount(key[0], key[1], key[2], self._shown(key), count)
            for key, count in self._groups.most_common(_TOP_ERRORS)
        )

    def _shown(self, key: tuple[str, str, str, str]) -> str:
        example, differs = self._examples[key]
        return key[3] if differs else example


class RunLifecycle:
    """What a Migration Run of any kind does around its work: its event loop, its locks'
    release, its record when it is stopped, and tracking lookups."""

    store: Store
    run_id: str
    results: dict[str, DefinitionResult]
    config_ids: frozenset[str]
    _aio: asyncio.Runner | None

    def _release(self, *, quiet: bool) -> None:
        """Close the event loop and release the locks; *quiet*: an error is on its way already."""
        try:
            if self._aio is not None:
                self._aio.close()
        finally:
            try:
                self.store.release_locks(self.run_id)
            except StoreError:
                # The store is what failed (a full disk): the first error is the one to report,
                # and the next run's recovery frees the locks of this process once it is gone.
                if not quiet:
                    raise

    def _record_interrupted(self, error: BaseException) -> None:
        """Store the run as failed with what stopped it, keeping the committed counts."""
        self.results = {
            key: (
                attrs.evolve(value, status="failed")
                if value.status in ("queued", "running")
                else value
            )
            for key, value in self.results.items()
        }
        reason = f"interrupted: {type(error).__name__}: {error}"
        if isinstance(error, StoreError):
            reason = f"stopped: {error}"
        # The store may be what failed (a full disk): then the next run's recovery of dead
        # runs marks this one, and the error raised is the first one.
        with contextlib.suppress(StoreError):
            self.store.update_run(
                self.run_id, status="failed", definitions=self.results, error=reason, ended=True
            )

    def run_async(self, awaitable: Awaitable[_T]) -> _T:
        """Await *awaitable* on this run's event loop (created on first use)."""
        if self._aio is None:
            self._aio = asyncio.Runner()

        async def wait() -> _T:
            return await awaitable

        # The runner's own context was copied when it was created, in whatever definition ran
        # first: run in the caller's, so its item scope and retry tally reach the tasks.
        return self._aio.run(wait(), context=contextvars.copy_context())

    def tracking_lookup(self, definition_id: str, identity: str) -> dict[str, Any] | None:
        if definition_id not in self.config_ids:
            raise TrackingError(
                f"lookup of unknown definition {definition_id!r}; known: "
                f"{', '.join(sorted(self.config_ids))}"
            )
        return self.store.tracking(definition_id, identity)


class _Run(RunLifecycle):
    """One Migration Run over a plan: the lifecycle around each definition's window loop."""

    def __init__(
        self,
        config: Config,
        the_plan: Plan,
        store: Store,
        progress: Progress | None,
        run_id: str | None = None,
    ) -> None:
        self.config = config
        self.plan = the_plan
        self.store = store
        self.progress = progress
        self.run_id = new_run_id() if run_id is None else run_id
        self.results: dict[str, DefinitionResult] = {
            step.definition_id: DefinitionResult(step.mode, "queued") for step in the_plan.steps
        }
        self.errors = ErrorTally()
        self._aio: asyncio.Runner | None = None
        self.config_ids = frozenset(config.ids)
        #: Contracts to record when their definition starts, and whether to reset its cursor.
        self.contracts: dict[str, tuple[Contract, bool]] = {}
        self.notes: list[str] = []

    # --- the run ----------------------------------------------------------------------------

    def count_error(self, definition_id: str, kind: str, type_: str, message: str) -> None:
        """Count a failure for the summary's most common errors (see `ErrorTally.count`)."""
        self.errors.count(definition_id, kind, type_, message)

    def execute(self) -> RunSummary:
        attributes = {"migration.run.id": self.run_id, "migration.run.mode": self.plan.mode}
        with span("migration.run", attributes) as traced:
            summary = self._execute()
            traced.set("migration.run.status", summary.status)
            _count_into(traced, _summary_counts(summary))
            if summary.status != "succeeded":
                traced.failed("MigrationFailed")
            return summary

    def _execute(self) -> RunSummary:
        store = self.store
        store.recover_dead_runs()
        started = time.time()
        store.create_run(self.run_id, self.plan.mode, self.results)
        try:
            store.acquire_locks(self.run_id, self.plan.definition_ids)
        except LockHeld as error:
            store.update_run(self.run_id, status="start-failed", error=str(error), ended=True)
            raise
        try:
            summary = self._execute_locked(started)
        except BaseException:
            self._release(quiet=True)
            raise
        self._release(quiet=False)
        return summary

    def _refuse(self, error: Exception) -> None:
        self.store.update_run(self.run_id, status="start-failed", error=str(error), ended=True)
        raise error

    def _execute_locked(self, started: float) -> RunSummary:
        store = self.store
        self._check_contracts()
        refused = preflight_refusal(self.config, self.plan, store)
        if refused is not None:
            self._refuse(refused)
        store.update_run(self.run_id, status="running")
        # Registered for this run only: outside runs, retries in the process stay listener-free.
        remove_hook = add_hook(record_attempts)
        try:
            # Before any window: an update asked for is kept until it is carried out, even if
            # this run dies, is stopped, or does not reach the definition (blocked).
            for step in self.plan.steps:
                if step.mode == "update":
                    store.request_update(step.definition_id, self.run_id)
            for step in self.plan.steps:
                blocked = self._blocked_by(step)
                if blocked is not None:
                    self.results[step.definition_id] = DefinitionResult(
                        step.mode, "blocked", blocked=blocked, orphans=self.plan.rollback_orphans
                    )
                    continue
                self._run_definition(step)
            if self.plan.rollback_orphans:
                self._roll_back_orphans()
        except BaseException as error:
            self._record_interrupted(error)
            raise
        finally:
            remove_hook()
        status: Literal["succeeded", "failed"] = (
            "succeeded" if all(r.status == "succeeded" for r in self.results.values()) else "failed"
        )
        store.update_run(self.run_id, status=status, definitions=self.results, ended=True)
        top = self.errors.top()
        return RunSummary(
            run_id=self.run_id,
            status=status,
            started_at=started,
            ended_at=time.time(),
            definitions=dict(self.results),
            top_errors=top,
            notes=tuple(self.notes),
        )

    def _check_contracts(self) -> None:
        """Refuse the run if a definition's contract changed under its stored states."""
        check = check_contracts(self.config, self.plan, self.store)
        self.contracts.update(check.record)
        self.notes.extend(check.notes)
        if check.refusal is not None:
            self._refuse(check.refusal)

    def _blocked_by(self, step: PlanStep) -> str | None:
        if self.plan.force:
            return None
        for dependency in self.config.get(step.definition_id).requires:
            result = self.results.get(dependency)
            if result is not None and result.status != "succeeded":
                return (
                    f"required dependency {dependency!r} did not succeed in this run "
                    f"({result.status}); fix it and run again, or pass --force"
                )
        return None

    def _roll_back_orphans(self) -> None:
        """After every scan: the orphans of each definition scanned completely, dependents
        first (see `migrate._orphans`)."""
        from migrate._orphans import (  # noqa: PLC0415 - it imports this module
            OrphanPage,
            orphan_note,
            scan_complete,
            skipped_note,
        )

        for step in reversed(self.plan.steps):
            definition_id = step.definition_id
            if not scan_complete(self.results[definition_id]):
                self.notes.append(skipped_note(definition_id, self.results[definition_id]))
                continue
            page = OrphanPage(self, definition_id)
            while not page.page()[1]:
                pass
            self.notes.append(orphan_note(definition_id, self.results[definition_id]))

    # --- one definition ---------------------------------------------------------------------

    def _run_definition(self, step: PlanStep) -> None:
        migration = self.config.get(step.definition_id)
        _Definition(self, migration, step).run()


class _Definition:
    """One definition of a run: drives its window loop, commits each result, keeps the totals."""

    def __init__(self, owner: _Run, migration: Migration, step: PlanStep) -> None:
        self.owner = owner
        self.store = owner.store
        self.step = step
        self.definition_id = migration.id
        self.run_id = owner.run_id
        self.counts = Counts()
        self.windows = 0
        #: The run's stored per-definition record, when each window's commit is refused if the
        #: stored one moved since (a durable run, which another process may have taken over).
        self.fence: Mapping[str, DefinitionResult] | None = None
        self.started = LoopStart(None)
        self._windows: Iterator[WindowResult] = iter(())
        self.total: int | None = None
        self.error: str | None = None
        self.tally = RetryTally(self.definition_id)
        #: Whether the run rolls back this definition's orphans, and whether it read the
        #: definition from the start of its source (`DefinitionResult.from_start`).
        self.orphans = owner.plan.rollback_orphans
        self.from_start = False
        concurrency = owner.plan.concurrency
        self.loop = WindowLoop(
            migration,
            step.mode,
            run_id=owner.run_id,
            store=owner.store,
            ids=owner.plan.ids,
            concurrency=migration.concurrency if concurrency is None else concurrency,
            run_async=owner.run_async,
            on_item=None if owner.progress is None else self._tick,
            lookup=owner.tracking_lookup,
            mark_seen=self.orphans and step.mode in ("normal", "update"),
        )

    def _result(
        self,
        status: str,
        counts: Counts | None = None,
        failed_stored: int = 0,
        *,
        from_start: bool | None = None,
    ) -> DefinitionResult:
        tally = self.tally
        return DefinitionResult(
            self.step.mode,
            status,
            self.counts if counts is None else counts,
            self.error,
            retries=tally.retries,
            gave_up=tally.gave_up,
            failed_stored=failed_stored,
            orphans=self.orphans,
            from_start=self.from_start if from_start is None else from_start,
        )

    def _emit(self, kind: str, counts: Counts | None = None) -> None:
        progress = self.owner.progress
        if progress is None:
            return
        shown = self.counts if counts is None else counts
        progress(
            ProgressEvent(
                run_id=self.run_id,
                definition_id=self.definition_id,
                mode=self.step.mode,
                kind=kind,  # type: ignore[arg-type]
                window=self.windows,
                processed=shown.total,
                total=self.total,
                counts=shown,
                retries=self.tally.retries,
            )
        )

    def _tick(self, in_window: Counts) -> None:
        # Items of the current window, not yet committed, shown on top of the committed ones.
        self._emit("item", self.counts + in_window)

    def run(self) -> None:
        # Every retried call of this definition's work, from this thread or from the tasks and
        # worker threads it starts (they copy the context), counts into its tally.
        attributes = {
            "migration.run.id": self.run_id,
            "migration.definition.id": self.definition_id,
            "migration.definition.mode": self.step.mode,
        }
        with span("migration.definition", attributes) as traced, counting_retries(self.tally):
            self.open()
            try:
                while self.next_window():
                    pass
            finally:
                self.loop.close()
            result = self.finish()
            traced.set("migration.definition.status", result.status)
            _count_into(traced, result.counts)
            if result.status != "succeeded":
                traced.failed("DefinitionFailed")

    def open(self, resumed: DefinitionResult | None = None) -> None:
        """
        Start the definition: record its new contract, start its window loop.

        *resumed*: the definition's stored result, when another process (or an earlier turn)
        of the same Migration Run committed windows of it already: the counts go on from it,
        the loop from what those windows stored, and a contract recorded then is not again.
        """
        owner = self.owner
        pending = owner.contracts.pop(self.definition_id, None)
        resuming = resumed is not None and resumed.status == "running"
        if pending is not None and not resuming:
            contract, reset_cursor = pending
            self.store.save_contract(
                self.definition_id, contract, self.run_id, reset_cursor=reset_cursor
            )
        if resumed is not None and resuming:
            self.counts = resumed.counts
            self.from_start = resumed.from_start
            self.tally.retries, self.tally.gave_up = resumed.retries, resumed.gave_up
        owner.results[self.definition_id] = self._result("running")
        self.started = self.loop.start(resume=resuming)
        self.total = self.started.total
        owner.notes.extend(self.started.notes)
        self._windows = iter(self.loop.windows())
        self._emit("start")

    def next_window(self) -> bool:
        """
        Process and commit the next window; ``False`` when there is none left (the source is
        done, or the loop stopped: then ``error`` says why).

        Raises:
            KeyboardInterrupt: After committing a window cut short by Ctrl-C.
        """
        attributes: dict[str, Value] = {
            "migration.run.id": self.run_id,
            "migration.definition.id": self.definition_id,
            "migration.window.index": self.windows + 1,
        }
        with span("migration.source.window", attributes) as traced:
            result = next(self._windows, None)
            if result is None:
                traced.discard()  # the loop was done: this window read nothing
                return False
            if result.stop is not None:
                self.error = result.stop
                traced.failed("SourceError")
                return False
            self._commit(result)
            _count_into(traced, result.counts)
            if result.interrupted:
                raise KeyboardInterrupt
            return True

    def finish(self) -> DefinitionResult:
        """Store the definition's end: its status, and the needs-update and failed counts."""
        owner = self.owner
        if self.started.marked_by is not None:
            # Marked by this run, or by the update it carried on: those it did not meet again.
            marked = self.store.count_status(
                self.definition_id, "needs-update", self.started.marked_by
            )
            self.counts = attrs.evolve(self.counts, needs_update=marked)
        # Failures behind the cursor, left by earlier runs, count too: a scheduler reading
        # "succeeded" must be able to trust that nothing of this definition waits.
        waiting = self.store.count_status(self.definition_id, "failed") + self.store.count_status(
            self.definition_id, "interrupted"
        )
        failed = self.counts.failed > 0 or self.error is not None or waiting > 0
        result = self._result("failed" if failed else "succeeded", failed_stored=waiting)
        owner.results[self.definition_id] = result
        self.store.update_run(self.run_id, definitions=owner.results)
        self._emit("end")
        return result

    def _commit(self, result: WindowResult) -> None:
        owner = self.owner
        counts = self.counts + result.counts
        from_start = self.from_start or (self.orphans and result.from_start)
        results = {
            **owner.results,
            self.definition_id: self._result("running", counts, from_start=from_start),
        }
        self.store.commit_window(
            WindowCommit(
                self.definition_id,
                self.run_id,
                result.states,
                results,
                based_on=self.fence,
                cursor=result.cursor,
                save_cursor=result.save_cursor,
                mark_needs_update=result.mark_needs_update,
                clear_positional=result.clear_positional,
                forget=result.forget,
                update_done=result.update_done,
                seen=result.seen,
            )
        )
        # Counted only now that the window is stored: a failed commit counts nothing.
        self.counts = counts
        self.from_start = from_start
        if self.fence is not None:
            self.fence = results
        owner.results = results
        owner.notes.extend(result.notes)
        self.windows += 1
        for failure in result.failures:
            owner.count_error(self.definition_id, failure.kind, failure.type, failure.message)
        self._emit("window")
