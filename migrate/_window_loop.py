"""
The window loop of one definition in one run: read a window, process its items, return a result.

`WindowLoop.windows` yields one `WindowResult` per window: the item states to commit, what the
window counted, and the cursor after it. It reads the store (saved cursor, prior states,
tracking records) but never writes to it: the run lifecycle (``migrate._runner``) commits each
result before asking for the next, and only counts a window once its commit succeeded. A durable
step can run the same loop and checkpoint each result.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from returns.result import Failure, Result

from migrate._definition import Migration
from migrate._errors import Skip, SourceError
from migrate._pipeline import (
    _CURRENT,  # pyright: ignore[reportPrivateUsage]
    Scope,
    TrackingLookup,
    attempts_of,
    evidence_for,
)
from migrate._planner import Mode
from migrate._sources import Cursor, Item
from migrate._sources._base import MissingFieldError
from migrate._state import Counts, ErrorEvidence, ItemStatus
from migrate._store import PriorState, StateWrite, Store
from migrate._text import plural

__all__ = ["FailureNote", "WindowLoop", "WindowResult"]

_T = TypeVar("_T")

_DEFAULT_WINDOW = 1000
_TICK_EVERY = 0.1  # seconds between "item" progress callbacks inside a window

RunAsync = Callable[[Awaitable[_T]], _T]


@attrs.frozen
class FailureNote:
    """One failed item of a window, for the run's most common errors."""

    kind: str
    type: str
    message: str


@attrs.frozen
class WindowResult:
    """
    What one window did. The lifecycle commits it (`migrate._store.WindowCommit`) and then adds
    *counts* to the run's.

    Attributes:
        states: The item states to write (at most one per identity).
        counts: What happened to the window's items.
        failures: The failed items' errors, in order.
        cursor: The cursor after the window.
        save_cursor: Whether *cursor* is saved (discovery), or the saved one kept (targeted).
        mark_needs_update: Mark the migrated states ``needs-update`` before writing *states*.
        stop: Why the definition stops at this window (its source could not be read); such a
            result has nothing to commit.
    """

    states: tuple[StateWrite, ...]
    counts: Counts
    failures: tuple[FailureNote, ...] = ()
    cursor: Cursor = None
    save_cursor: bool = False
    mark_needs_update: bool = False
    stop: str | None = None


def _encode(value: Any) -> str:
    return json.dumps(value, default=repr)


class _Tally:
    """The counts of the window being processed (mutable until the window ends)."""

    __slots__ = ("failed", "failures", "migrated", "skipped", "unchanged")

    def __init__(self) -> None:
        self.migrated = 0
        self.skipped = 0
        self.failed = 0
        self.unchanged = 0
        self.failures: list[FailureNote] = []

    def counts(self) -> Counts:
        return Counts(self.migrated, self.skipped, self.failed, self.unchanged)


def is_async_process(process: Callable[..., Any]) -> bool:
    """Whether *process* is an ``async def`` function or an object with ``async def __call__``."""
    return inspect.iscoroutinefunction(process) or inspect.iscoroutinefunction(
        getattr(process, "__call__", None)  # noqa: B004 - the method, not callability
    )


class WindowLoop:
    """
    The windows of one definition in one run (see the module docstring).

    Args:
        migration: The definition.
        mode: How it runs.
        run_id: The run.
        store: Read for the saved cursor, prior states and failed/skipped targets; never written.
        ids: The identities of an ``ids`` run.
        concurrency: Items processed at once.
        run_async: Runs an awaitable to its end on the run's event loop.
        on_item: Called with the counts so far of the window being processed, at most every
            0.1 s while it is processed (progress bars).
        lookup: Reads another definition's tracking record (`Scope.lookup`).
    """

    def __init__(
        self,
        migration: Migration,
        mode: Mode,
        *,
        run_id: str,
        store: Store,
        ids: Sequence[str] = (),
        concurrency: int = 1,
        run_async: RunAsync[Any],
        on_item: Callable[[Counts], object] | None = None,
        lookup: TrackingLookup | None = None,
    ) -> None:
        self.migration = migration
        self.mode = mode
        self.definition_id = migration.id
        self.run_id = run_id
        self.store = store
        self.ids = tuple(dict.fromkeys(ids))
        self.concurrency = concurrency
        self.run_async = run_async
        self.on_item = on_item
        self.lookup = lookup
        self.process = migration.process
        self.is_async = is_async_process(migration.process)
        self.next_tick = 0.0
        self._cursor: Cursor = None
        self._targets: list[str] = []

    def start(self) -> int | None:
        """Prepare the loop; return how many items it expects, when that is known cheaply."""
        mode = self.mode
        if mode in ("normal", "update"):
            self._cursor = None if mode == "update" else self.store.cursor(self.definition_id)
            return self.migration.source.count() if self._cursor is None else None
        if mode == "failed":
            self._targets = self.store.identities(self.definition_id, "failed")
        elif mode == "skipped":
            self._targets = self.store.identities(self.definition_id, "skipped")
        else:
            self._targets = list(self.ids)
        return len(self._targets)

    def windows(self) -> Iterator[WindowResult]:
        """Yield each window's result; call `start` first."""
        self.next_tick = time.monotonic() + _TICK_EVERY
        if self.mode in ("normal", "update"):
            return self._discovery(update=self.mode == "update")
        return self._targeted()

    # --- discovery: normal and update runs ------------------------------------------------------

    def _discovery(self, *, update: bool) -> Iterator[WindowResult]:
        source = self.migration.source
        retry = self.migration.source_cursor_retry
        cursor = self._cursor
        first = True
        while True:
            effect = source.read(cursor)
            if retry is not None:
                effect = effect.pipe(retry)
            sink = Scope(self.run_id, self.definition_id, "")
            outcome = _run_in(sink, effect.run)
            if isinstance(outcome, Failure):
                error: SourceError = outcome.failure()
                attempts = attempts_of(sink, error)
                yield WindowResult(
                    (),
                    Counts(),
                    stop=f"reading {source.describe()} failed after "
                    f"{plural(attempts, 'attempt')}: {type(error).__name__}: {error}",
                )
                return
            window = outcome.unwrap()
            tally = _Tally()
            states: list[StateWrite] = []
            if window.items:
                states = self._process_items(window.items, tally, discovery=True, update=update)
            yield WindowResult(
                tuple(states),
                tally.counts(),
                tuple(tally.failures),
                window.next_cursor,
                save_cursor=True,
                # Marked with the first window read, so a source whose arguments do not match
                # its data (a failed read above) leaves every stored state as it was.
                mark_needs_update=update and first,
            )
            first = False
            cursor = window.next_cursor
            if window.done or not window.items:
                return

    # --- targeted: failed, skipped and ids runs -------------------------------------------------

    def _targeted(self) -> Iterator[WindowResult]:
        source = self.migration.source
        retry = self.migration.source_lookup_retry
        targets = self._targets
        if not targets:
            return
        size = int(getattr(source, "window_size", _DEFAULT_WINDOW) or _DEFAULT_WINDOW)
        found: Mapping[str, Item] | None = None
        batch_error: ErrorEvidence | None = None
        if source.lookup_strategy == "scan":
            # One read of the source for every targeted identity, not one per identity.
            effect = source.lookup_many(targets)
            if retry is not None:
                effect = effect.pipe(retry)
            sink = Scope(self.run_id, self.definition_id, "")
            outcome = _run_in(sink, effect.run)
            if isinstance(outcome, Failure):
                stop = self._stop_on_missing_field(outcome.failure())
                if stop is not None:
                    yield stop
                    return
                batch_error = evidence_for(outcome.failure(), sink, "source")
            else:
                found = outcome.unwrap()
        for start in range(0, len(targets), size):
            chunk = targets[start : start + size]
            prior = self.store.prior_states(self.definition_id, chunk)
            tally = _Tally()
            items: list[Item] = []
            states: list[StateWrite] = []
            for identity in chunk:
                if batch_error is not None:
                    states.append(self._failed(identity, batch_error, prior.get(identity), tally))
                    continue
                if found is not None:
                    item = found.get(identity)
                else:
                    lookup = source.lookup(identity)
                    if retry is not None:
                        lookup = lookup.pipe(retry)
                    sink = Scope(self.run_id, self.definition_id, identity)
                    result = _run_in(sink, lookup.run)
                    if isinstance(result, Failure):
                        stop = self._stop_on_missing_field(result.failure())
                        if stop is not None:
                            yield stop
                            return
                        evidence = evidence_for(result.failure(), sink, "source")
                        states.append(self._failed(identity, evidence, prior.get(identity), tally))
                        continue
                    item = result.unwrap()
                if item is None:
                    evidence = ErrorEvidence(
                        kind="source",
                        type="NotFound",
                        message=f"identity {identity!r} was not found in {source.describe()}",
                        details={"source": source.describe()},
                    )
                    states.append(self._failed(identity, evidence, prior.get(identity), tally))
                    continue
                items.append(item)
            states.extend(self._process_items(items, tally, discovery=False, prior=prior))
            yield WindowResult(tuple(states), tally.counts(), tuple(tally.failures))

    def _stop_on_missing_field(self, error: SourceError) -> WindowResult | None:
        # The source's arguments do not match its data: every lookup would fail alike, and
        # turning the targeted items' states into failures would lose what they were.
        if not isinstance(error, MissingFieldError):
            return None
        describe = self.migration.source.describe()
        return WindowResult((), Counts(), stop=f"looking up items in {describe} failed: {error}")

    def _failed(
        self, identity: str, evidence: ErrorEvidence, prior: PriorState | None, tally: _Tally
    ) -> StateWrite:
        tally.failed += 1
        tally.failures.append(FailureNote(evidence.kind, evidence.type, evidence.message))
        return StateWrite(
            identity,
            "failed",
            None if prior is None else prior.version,
            error=_encode(evidence.to_json()),
            tracking=None if prior is None else prior.tracking,
        )

    # --- processing items -------------------------------------------------------------------

    def _process_items(
        self,
        items: Sequence[Item],
        tally: _Tally,
        *,
        discovery: bool,
        update: bool = False,
        prior: Mapping[str, PriorState] | None = None,
    ) -> list[StateWrite]:
        if prior is None:
            prior = self.store.prior_states(self.definition_id, [i.identity for i in items])
        todo: list[tuple[Item, PriorState | None]]
        if discovery and prior:
            # Unchanged: met again at the version last processed. In an --update run the
            # migrated states were all marked needs-update, so only skipped ones qualify.
            done_statuses: tuple[ItemStatus, ...] = (
                ("skipped",) if update else ("migrated", "skipped")
            )
            todo = []
            for item in items:
                state = prior.get(item.identity)
                if (
                    state is not None
                    and state.status in done_statuses
                    and state.version is not None
                    and state.version == item.version
                ):
                    tally.unchanged += 1
                else:
                    todo.append((item, state))
        else:
            todo = [(item, prior.get(item.identity)) for item in items]
        if not todo:
            return []
        if self.is_async or self.concurrency > 1:
            states: list[StateWrite] = self.run_async(self._process_async(todo, tally))
            return states
        now = time.time()
        if self.on_item is None:
            return [self._process_sync(item, state, now, tally) for item, state in todo]
        states = []
        clock = time.monotonic
        for item, state in todo:
            states.append(self._process_sync(item, state, now, tally))
            if clock() >= self.next_tick:
                self._tick(tally)
        return states

    def _tick(self, tally: _Tally) -> None:
        if self.on_item is not None:
            self.on_item(tally.counts())
        self.next_tick = time.monotonic() + _TICK_EVERY

    def _scope(self, item: Item, state: PriorState | None) -> Scope:
        tracking = None if state is None or state.tracking is None else json.loads(state.tracking)
        return Scope(self.run_id, self.definition_id, item.identity, tracking, self.lookup)

    def _process_sync(
        self, item: Item, state: PriorState | None, now: float, tally: _Tally
    ) -> StateWrite:
        scope = self._scope(item, state)
        token = _CURRENT.set(scope)
        try:
            result = self.process(item, scope)
            if result is not None and inspect.isawaitable(result):
                self.run_async(result)
        except Skip as skip:
            return self._state(item, scope, state, "skipped", skip.reason, None, tally)
        except Exception as error:  # noqa: BLE001 - any error of the process fails the item
            return self._state(item, scope, state, "failed", None, error, tally)
        finally:
            _CURRENT.reset(token)
        return self._state(item, scope, state, "migrated", None, None, tally)

    async def _process_async(
        self, todo: list[tuple[Item, PriorState | None]], tally: _Tally
    ) -> list[StateWrite]:
        semaphore = asyncio.Semaphore(self.concurrency)
        is_async = self.is_async
        ticking = self.on_item is not None

        async def one(item: Item, state: PriorState | None) -> StateWrite:
            written = await attempt(item, state)
            if ticking and time.monotonic() >= self.next_tick:
                self._tick(tally)
            return written

        async def attempt(item: Item, state: PriorState | None) -> StateWrite:
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
                    return self._state(item, scope, state, "skipped", skip.reason, None, tally)
                except Exception as error:  # noqa: BLE001 - any error fails the item
                    return self._state(item, scope, state, "failed", None, error, tally)
                return self._state(item, scope, state, "migrated", None, None, tally)

        return list(await asyncio.gather(*(one(item, state) for item, state in todo)))

    def _state(  # noqa: PLR0917 - a private hot-path helper; keywords would cost per item
        self,
        item: Item,
        scope: Scope,
        state: PriorState | None,
        status: ItemStatus,
        reason: str | None,
        error: Exception | None,
        tally: _Tally,
    ) -> StateWrite:
        error_json: str | None = None
        if status == "migrated":
            tally.migrated += 1
        elif status == "skipped":
            tally.skipped += 1
        else:
            tally.failed += 1
            assert error is not None
            evidence = evidence_for(error, scope)
            tally.failures.append(FailureNote(evidence.kind, evidence.type, evidence.message))
            error_json = _encode(evidence.to_json())
        entries = scope.journal.entries
        journal = _encode(entries) if entries else None
        tracking: str | None
        if scope.tracked:
            tracking = _encode(scope.tracking)
        else:
            tracking = None if state is None else state.tracking
        return StateWrite(
            item.identity, status, item.version, reason, error_json, journal, tracking
        )


def _run_in(scope: Scope, thunk: Callable[[], Result[_T, SourceError]]) -> Result[_T, SourceError]:
    token = _CURRENT.set(scope)
    try:
        return thunk()
    finally:
        _CURRENT.reset(token)
