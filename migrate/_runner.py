"""
Running a plan: windows from the source, items through the process, states into the store.

Per window: one query loads the prior states of the window's identities, the items are
processed (in order, or up to ``concurrency`` at once), then one transaction writes their states,
the run's counts and the cursor. A crash loses at most the uncommitted window, which the next run
reads again; committed windows are never counted twice.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import attrs
from returns.result import Failure, Result

from effects import add_hook
from migrate._definition import Config, Migration
from migrate._errors import (
    ContractChanged,
    LockHeld,
    PreflightRefused,
    Skip,
    SourceError,
    TrackingError,
)
from migrate._pipeline import (
    _CURRENT,  # pyright: ignore[reportPrivateUsage]
    RetryTally,
    Scope,
    attempts_of,
    counting_retries,
    evidence_for,
    record_attempts,
)
from migrate._planner import Plan, PlanStep, RunOptions, plan
from migrate._reports import ErrorCount, ProgressEvent, RunSummary
from migrate._sources import Contract, Cursor, Item
from migrate._sources._base import MissingFieldError
from migrate._state import Counts, DefinitionResult, ErrorEvidence
from migrate._store_sqlite import PriorState, StateRow, Store
from migrate._text import plural

__all__ = ["Progress", "new_run_id", "preflight", "run"]

Progress = Callable[[ProgressEvent], object]
_T = TypeVar("_T")

_TOP_ERRORS = 5
#: Runs of digits, which make otherwise equal error messages differ (ids, counts, lines).
_NUMBERS = re.compile(r"\d+")
_DEFAULT_WINDOW = 1000
_TICK_EVERY = 0.1  # seconds between "item" progress events inside a window


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
    """
    options = RunOptions() if options is None else options
    the_plan = plan(config, options)
    with config.open_store() as store:
        return _Run(config, the_plan, store, progress).execute()


def preflight(config: Config, store: Store, definition_id: str, dependency: str) -> str | None:
    """
    Why *definition_id* may not run yet because of its required *dependency*, or ``None``.

    The dependency's latest run must have finished with ``succeeded`` for it, and no failed
    item of it may be stored.
    """
    refused = f"refusing to run {definition_id!r}: required dependency {dependency!r}"
    advice = (
        f"run {dependency!r} first (migrate run {dependency}; migrate run {dependency} --failed "
        f"reprocesses its failures), or pass --force"
    )
    latest = store.latest_run_for(dependency)
    if latest is None:
        return f"{refused} has never run; {advice}"
    result = latest.definitions.get(dependency)
    if latest.status in ("queued", "running"):
        return f"{refused} is still running in run {latest.run_id}; wait for it, or pass --force"
    if result is None or result.status != "succeeded":
        what = "did not succeed"
        if result is not None and result.error:
            what = f"stopped with an error ({result.error})"
        elif result is not None and result.counts.failed:
            what = f"ended with {plural(result.counts.failed, 'failed item')}"
        return f"{refused}: its latest run {latest.run_id} {what}; {advice}"
    failed = store.count_status(dependency, "failed")
    if failed:
        return f"{refused} has {plural(failed, 'failed item')}; {advice}"
    return None


def _encode(value: Any) -> str:
    return json.dumps(value, default=repr)


class _Run:
    """One Migration Run over a plan."""

    def __init__(
        self, config: Config, the_plan: Plan, store: Store, progress: Progress | None
    ) -> None:
        self.config = config
        self.plan = the_plan
        self.store = store
        self.progress = progress
        self.run_id = new_run_id()
        self.results: dict[str, DefinitionResult] = {
            step.definition_id: DefinitionResult(step.mode, "queued") for step in the_plan.steps
        }
        self.errors: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        #: One message seen per group of ``errors``, and whether the group's messages differ.
        self.error_examples: dict[tuple[str, str, str, str], tuple[str, bool]] = {}
        self._aio: asyncio.Runner | None = None
        self.config_ids = frozenset(config.ids)
        #: Contracts to record when their definition starts, and whether to reset its cursor.
        self.contracts: dict[str, tuple[Contract, bool]] = {}
        self.notes: list[str] = []

    # --- the run ----------------------------------------------------------------------------

    def count_error(self, definition_id: str, kind: str, type_: str, message: str) -> None:
        """
        Count a failure for the summary's most common errors.

        Messages that differ only in their numbers (ids, line numbers, sizes) are one group, so
        "bad row 17" and "bad row 42" count together; the summary shows the message itself when
        the group holds one, else the pattern with ``<n>`` for the numbers.
        """
        key = (definition_id, kind, type_, _NUMBERS.sub("<n>", message))
        self.errors[key] += 1
        seen = self.error_examples.get(key)
        if seen is None:
            self.error_examples[key] = (message, False)
        elif not seen[1] and seen[0] != message:
            self.error_examples[key] = (seen[0], True)

    def _shown_message(self, key: tuple[str, str, str, str]) -> str:
        example, differs = self.error_examples[key]
        return key[3] if differs else example

    def execute(self) -> RunSummary:
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
            return self._execute_locked(started)
        finally:
            try:
                if self._aio is not None:
                    self._aio.close()
            finally:
                store.release_locks(self.run_id)

    def _execute_locked(self, started: float) -> RunSummary:
        store = self.store
        self._check_contracts()
        if not self.plan.force:
            problems = [
                problem
                for definition_id, dependency in self.plan.checked
                if (problem := preflight(self.config, store, definition_id, dependency))
            ]
            if problems:
                error = PreflightRefused(tuple(problems))
                store.update_run(self.run_id, status="start-failed", error=str(error), ended=True)
                raise error
        store.update_run(self.run_id, status="running")
        # Registered for this run only: outside runs, retries in the process stay listener-free.
        remove_hook = add_hook(record_attempts)
        try:
            for step in self.plan.steps:
                blocked = self._blocked_by(step)
                if blocked is not None:
                    self.results[step.definition_id] = DefinitionResult(
                        step.mode, "blocked", blocked=blocked
                    )
                    continue
                self._run_step(step)
        except BaseException as error:
            self.results = {
                key: (
                    attrs.evolve(value, status="failed")
                    if value.status in ("queued", "running")
                    else value
                )
                for key, value in self.results.items()
            }
            store.update_run(
                self.run_id,
                status="failed",
                definitions=self.results,
                error=f"interrupted: {type(error).__name__}: {error}",
                ended=True,
            )
            raise
        finally:
            remove_hook()
        status: Literal["succeeded", "failed"] = (
            "succeeded" if all(r.status == "succeeded" for r in self.results.values()) else "failed"
        )
        store.update_run(self.run_id, status=status, definitions=self.results, ended=True)
        top = tuple(
            ErrorCount(key[0], key[1], key[2], self._shown_message(key), count)
            for key, count in self.errors.most_common(_TOP_ERRORS)
        )
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
        store = self.store
        changed: dict[str, tuple[str, ...]] = {}
        lines: list[str] = []
        for step in self.plan.steps:
            definition_id = step.definition_id
            current = self.config.get(definition_id).source.contract()
            stored = store.contract(definition_id)
            if stored is None:
                self.contracts[definition_id] = (current, False)
                continue
            if stored.fingerprint == current.fingerprint:
                continue
            # The saved cursor was made under the old contract (a keyset on the old identity,
            # another kind's position): an accepted change restarts discovery from the top.
            self.contracts[definition_id] = (current, True)
            if not store.has_state(definition_id):
                continue  # nothing was stored under the old contract
            changes = stored.changes(current)
            if self.plan.force:
                advice = (
                    ""
                    if step.mode == "update"
                    else "; to process every migrated item again under it: "
                    f"migrate run {definition_id} --update"
                )
                self.notes.append(
                    f"{definition_id}: accepted the changed source contract "
                    f"({'; '.join(changes)}); discovery starts again from the first item{advice}"
                )
                continue
            changed[definition_id] = changes
            stored_states = plural(store.counts(definition_id).total, "stored item state")
            lines.append(
                f"definition {definition_id!r} changed its source contract since its states "
                f"were stored: {'; '.join(changes)}. Its {stored_states} "
                "and saved cursor were recorded under the old contract. If the change is "
                f"intended, run: migrate run {definition_id} --force --update (records the new "
                "contract, then processes every migrated item again); otherwise undo the change "
                "in the config"
            )
        if changed:
            error = ContractChanged("\n".join(lines), changed)
            store.update_run(self.run_id, status="start-failed", error=str(error), ended=True)
            raise error

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

    # --- one definition ---------------------------------------------------------------------

    def _run_step(self, step: PlanStep) -> None:
        migration = self.config.get(step.definition_id)
        runner = _DefinitionRunner(self, migration, step)
        runner.run()

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


class _DefinitionRunner:
    """Runs one definition of a plan, window by window."""

    def __init__(self, owner: _Run, migration: Migration, step: PlanStep) -> None:
        self.owner = owner
        self.migration = migration
        self.step = step
        self.definition_id = migration.id
        self.run_id = owner.run_id
        self.store = owner.store
        self.process = migration.process
        self.concurrency = (
            owner.plan.concurrency if owner.plan.concurrency is not None else migration.concurrency
        )
        self.is_async = inspect.iscoroutinefunction(migration.process) or (
            inspect.iscoroutinefunction(getattr(migration.process, "__call__", None))  # noqa: B004
        )
        self.counts = [0, 0, 0, 0, 0]  # migrated, skipped, failed, unchanged, needs_update
        self.windows = 0
        self.total: int | None = None
        self.error: str | None = None
        self.lookup = owner.tracking_lookup
        self.ticking = owner.progress is not None
        self.next_tick = 0.0
        self.tally = RetryTally(self.definition_id)

    # counts and reporting

    def _counts(self) -> Counts:
        m, s, f, u, n = self.counts
        return Counts(m, s, f, u, n)

    def _result(self, status: str) -> DefinitionResult:
        tally = self.tally
        return DefinitionResult(
            self.step.mode,
            status,
            self._counts(),
            self.error,
            retries=tally.retries,
            gave_up=tally.gave_up,
        )

    def _emit(self, kind: str) -> None:
        if self.owner.progress is None:
            return
        counts = self._counts()
        self.owner.progress(
            ProgressEvent(
                run_id=self.run_id,
                definition_id=self.definition_id,
                mode=self.step.mode,
                kind=kind,  # type: ignore[arg-type]
                window=self.windows,
                processed=counts.total,
                total=self.total,
                counts=counts,
                retries=self.tally.retries,
            )
        )

    def _commit(self, rows: Sequence[StateRow], cursor: Cursor, save_cursor: bool) -> None:
        self.windows += 1
        self.owner.results[self.definition_id] = self._result("running")
        self.store.commit_window(
            self.definition_id,
            rows,
            run_id=self.run_id,
            definitions=self.owner.results,
            cursor=cursor,
            save_cursor=save_cursor,
        )
        self._emit("window")
        self.next_tick = time.monotonic() + _TICK_EVERY

    def _tick(self) -> None:
        self._emit("item")
        self.next_tick = time.monotonic() + _TICK_EVERY

    def run(self) -> None:
        # Every retried call of this definition's work, from this thread or from the tasks and
        # worker threads it starts (they copy the context), counts into its tally.
        with counting_retries(self.tally):
            self._run()

    def _run(self) -> None:
        mode = self.step.mode
        pending = self.owner.contracts.pop(self.definition_id, None)
        if pending is not None:
            contract, reset_cursor = pending
            self.store.save_contract(
                self.definition_id, contract, self.run_id, reset_cursor=reset_cursor
            )
        self.owner.results[self.definition_id] = self._result("running")
        self.next_tick = time.monotonic() + _TICK_EVERY
        if mode in ("normal", "update"):
            self._run_discovery(update=mode == "update")
        else:
            self._run_targeted()
        if mode == "update":
            self.counts[4] = self.store.count_status(
                self.definition_id, "needs-update", self.run_id
            )
        failed = self.counts[2] > 0 or self.error is not None
        self.owner.results[self.definition_id] = self._result("failed" if failed else "succeeded")
        self.store.update_run(self.run_id, definitions=self.owner.results)
        self._emit("end")

    # discovery: normal and update runs

    def _run_discovery(self, *, update: bool) -> None:
        source = self.migration.source
        cursor = None if update else self.store.cursor(self.definition_id)
        if cursor is None:
            self.total = source.count()
        self._emit("start")
        retry = self.migration.source_cursor_retry
        unmarked = update
        while True:
            effect = source.read(cursor)
            if retry is not None:
                effect = effect.pipe(retry)
            sink = Scope(self.run_id, self.definition_id, "")
            outcome = self._run_in(sink, effect.run)
            if isinstance(outcome, Failure):
                error: SourceError = outcome.failure()
                attempts = attempts_of(sink, error)
                self.error = (
                    f"reading {source.describe()} failed after {plural(attempts, 'attempt')}: "
                    f"{type(error).__name__}: {error}"
                )
                return
            if unmarked:
                # Marked once the source has read, so a source whose arguments do not match its
                # data (a SourceError above) leaves every stored state as it was.
                self.store.mark_needs_update(self.definition_id, self.run_id)
                unmarked = False
            window = outcome.unwrap()
            rows = self._process_window(window.items, discovery=True) if window.items else []
            self._commit(rows, window.next_cursor, save_cursor=True)
            cursor = window.next_cursor
            if window.done or not window.items:
                return

    # targeted: failed, skipped and ids runs

    def _targets(self) -> list[str]:
        mode = self.step.mode
        if mode == "failed":
            return self.store.identities(self.definition_id, "failed")
        if mode == "skipped":
            return self.store.identities(self.definition_id, "skipped")
        return list(dict.fromkeys(self.owner.plan.ids))

    def _run_targeted(self) -> None:
        source = self.migration.source
        retry = self.migration.source_lookup_retry
        targets = self._targets()
        self.total = len(targets)
        self._emit("start")
        if not targets:
            return
        size = int(getattr(source, "window_size", _DEFAULT_WINDOW) or _DEFAULT_WINDOW)
        found: dict[str, Item] | None = None
        batch_error: ErrorEvidence | None = None
        if source.lookup_strategy == "scan":
            # One read of the source for every targeted identity, not one per identity.
            effect = source.lookup_many(targets)
            if retry is not None:
                effect = effect.pipe(retry)
            sink = Scope(self.run_id, self.definition_id, "")
            outcome = self._run_in(sink, effect.run)
            if isinstance(outcome, Failure):
                if self._stop_on_missing_field(outcome.failure()):
                    return
                batch_error = evidence_for(outcome.failure(), sink, "source")
            else:
                found = outcome.unwrap()
        for start in range(0, len(targets), size):
            chunk = targets[start : start + size]
            prior = self.store.prior_states(self.definition_id, chunk)
            items: list[Item] = []
            rows: list[StateRow] = []
            for identity in chunk:
                if batch_error is not None:
                    rows.append(self._failed_row(identity, batch_error, prior.get(identity)))
                    continue
                if found is not None:
                    item = found.get(identity)
                else:
                    lookup = source.lookup(identity)
                    if retry is not None:
                        lookup = lookup.pipe(retry)
                    sink = Scope(self.run_id, self.definition_id, identity)
                    result = self._run_in(sink, lookup.run)
                    if isinstance(result, Failure):
                        if self._stop_on_missing_field(result.failure()):
                            return
                        evidence = evidence_for(result.failure(), sink, "source")
                        rows.append(self._failed_row(identity, evidence, prior.get(identity)))
                        continue
                    item = result.unwrap()
                if item is None:
                    evidence = ErrorEvidence(
                        kind="source",
                        type="NotFound",
                        message=f"identity {identity!r} was not found in {source.describe()}",
                        details={"source": source.describe()},
                    )
                    rows.append(self._failed_row(identity, evidence, prior.get(identity)))
                    continue
                items.append(item)
            rows.extend(self._process_window(items, discovery=False, prior=prior))
            self._commit(rows, None, save_cursor=False)

    def _stop_on_missing_field(self, error: SourceError) -> bool:
        # The source's arguments do not match its data: every lookup would fail alike, and
        # turning the targeted items' states into failures would lose what they were.
        if not isinstance(error, MissingFieldError):
            return False
        self.error = f"looking up items in {self.migration.source.describe()} failed: {error}"
        return True

    @staticmethod
    def _run_in(
        scope: Scope, thunk: Callable[[], Result[_T, SourceError]]
    ) -> Result[_T, SourceError]:
        token = _CURRENT.set(scope)
        try:
            return thunk()
        finally:
            _CURRENT.reset(token)

    def _failed_row(
        self, identity: str, evidence: ErrorEvidence, prior: PriorState | None
    ) -> StateRow:
        self.counts[2] += 1
        self.owner.count_error(self.definition_id, evidence.kind, evidence.type, evidence.message)
        return (
            self.definition_id,
            identity,
            "failed",
            None,
            _encode(evidence.to_json()),
            None if prior is None else prior.version,
            None,
            None if prior is None else prior.tracking,
            self.run_id,
            time.time(),
        )

    # processing items

    def _process_window(
        self,
        items: Sequence[Item],
        *,
        discovery: bool,
        prior: dict[str, PriorState] | None = None,
    ) -> list[StateRow]:
        if prior is None:
            prior = self.store.prior_states(self.definition_id, [i.identity for i in items])
        todo: list[tuple[Item, PriorState | None]] = []
        counts = self.counts
        if discovery and prior:
            for item in items:
                state = prior.get(item.identity)
                if (
                    state is not None
                    and state.status in ("migrated", "skipped")
                    and state.version is not None
                    and state.version == item.version
                ):
                    counts[3] += 1
                else:
                    todo.append((item, state))
        else:
            todo = [(item, prior.get(item.identity)) for item in items]
        if not todo:
            return []
        if self.is_async or self.concurrency > 1:
            return self.owner.run_async(self._process_async(todo))
        now = time.time()
        if not self.ticking:
            return [self._process_sync(item, state, now) for item, state in todo]
        rows: list[StateRow] = []
        clock = time.monotonic
        for item, state in todo:
            rows.append(self._process_sync(item, state, now))
            if clock() >= self.next_tick:
                self._tick()
        return rows

    def _scope(self, item: Item, state: PriorState | None) -> Scope:
        tracking = None if state is None or state.tracking is None else json.loads(state.tracking)
        return Scope(self.run_id, self.definition_id, item.identity, tracking, self.lookup)

    def _process_sync(self, item: Item, state: PriorState | None, now: float) -> StateRow:
        scope = self._scope(item, state)
        token = _CURRENT.set(scope)
        try:
            result = self.process(item, scope)
            if inspect.isawaitable(result):
                self.owner.run_async(result)
        except Skip as skip:
            return self._row(item, scope, state, "skipped", skip.reason, None, now)
        except Exception as error:  # noqa: BLE001 - any error of the process fails the item
            return self._row(item, scope, state, "failed", None, error, now)
        finally:
            _CURRENT.reset(token)
        return self._row(item, scope, state, "migrated", None, None, now)

    async def _process_async(self, todo: list[tuple[Item, PriorState | None]]) -> list[StateRow]:
        semaphore = asyncio.Semaphore(self.concurrency)
        now = time.time()
        is_async = self.is_async
        ticking = self.ticking

        async def one(item: Item, state: PriorState | None) -> StateRow:
            row = await attempt(item, state)
            if ticking and time.monotonic() >= self.next_tick:
                self._tick()
            return row

        async def attempt(item: Item, state: PriorState | None) -> StateRow:
            async with semaphore:
                scope = self._scope(item, state)
                _CURRENT.set(scope)  # each task has its own context
                try:
                    if is_async:
                        result = self.process(item, scope)
                        if inspect.isawaitable(result):
                            await result
                    else:
                        result = await asyncio.to_thread(self.process, item, scope)
                        if inspect.isawaitable(result):
                            await result
                except Skip as skip:
                    return self._row(item, scope, state, "skipped", skip.reason, None, now)
                except Exception as error:  # noqa: BLE001 - any error fails the item
                    return self._row(item, scope, state, "failed", None, error, now)
                return self._row(item, scope, state, "migrated", None, None, now)

        return list(await asyncio.gather(*(one(item, state) for item, state in todo)))

    def _row(  # noqa: PLR0917 - a private hot-path helper; keywords would cost per item
        self,
        item: Item,
        scope: Scope,
        state: PriorState | None,
        status: str,
        reason: str | None,
        error: Exception | None,
        now: float,
    ) -> StateRow:
        counts = self.counts
        error_json: str | None = None
        if status == "migrated":
            counts[0] += 1
        elif status == "skipped":
            counts[1] += 1
        else:
            counts[2] += 1
            assert error is not None
            evidence = evidence_for(error, scope)
            self.owner.count_error(
                self.definition_id, evidence.kind, evidence.type, evidence.message
            )
            error_json = _encode(evidence.to_json())
        entries = scope.journal.entries
        journal = _encode(entries) if entries else None
        tracking: str | None
        if scope.tracked:
            tracking = _encode(scope.tracking)
        else:
            tracking = None if state is None else state.tracking
        return (
            self.definition_id,
            item.identity,
            status,
            reason,
            error_json,
            item.version,
            journal,
            tracking,
            self.run_id,
            now,
        )
