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
from migrate._sources import Cursor, Fault, Item
from migrate._sources._base import MissingFieldError, duplicate_fault, excerpt
from migrate._state import Counts, ErrorEvidence, ItemStatus
from migrate._store import POSITIONAL_TYPES, PriorState, StateWrite, Store
from migrate._text import plural

__all__ = ["FailureNote", "LoopStart", "WindowLoop", "WindowResult"]

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
class LoopStart:
    """What a window loop knows before its first window."""

    #: Items expected in all, when known cheaply (targeted modes; counting sources from the top).
    total: int | None
    #: Things the user should know about this definition's run.
    notes: tuple[str, ...] = ()


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
        clear_positional: Clear stale failures of records without identity (the window ends a
            pass over the whole source).
        stop: Why the definition stops at this window (its source could not be read); such a
            result has nothing to commit.
    """

    states: tuple[StateWrite, ...]
    counts: Counts
    failures: tuple[FailureNote, ...] = ()
    cursor: Cursor = None
    save_cursor: bool = False
    mark_needs_update: bool = False
    clear_positional: bool = False
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
        #: Whether an item whose stored state this run wrote is a duplicate (see `_met_before`).
        self._across_windows = True

    def start(self) -> LoopStart:
        """Prepare the loop: how many items it expects (when known cheaply), and notes."""
        mode = self.mode
        if mode in ("normal", "update"):
            self._cursor = None if mode == "update" else self.store.cursor(self.definition_id)
            total = self.migration.source.count() if self._cursor is None else None
            return LoopStart(total)
        notes: tuple[str, ...] = ()
        if mode == "failed":
            targets = self.store.identities(self.definition_id, "failed")
            positional = [t for t in targets if self._is_positional(t)]
            if positional:
                targets = [t for t in targets if t not in set(positional)]
                shown = ", ".join(positional[:3]) + (", ..." if len(positional) > 3 else "")
                notes = (
                    f"{self.definition_id}: {plural(len(positional), 'failed record')} without "
                    f"a usable identity ({shown}) cannot be looked up by identity: fix them in "
                    f"the source and run a normal run (migrate run {self.definition_id}), which "
                    "reads them again and clears them once a pass over the whole source no "
                    f"longer meets them; or drop them: migrate forget {self.definition_id} "
                    "--id KEY",
                )
            self._targets = targets
        elif mode == "skipped":
            self._targets = self.store.identities(self.definition_id, "skipped")
        else:
            self._targets = list(self.ids)
        return LoopStart(len(self._targets), notes)

    def _is_positional(self, identity: str) -> bool:
        if not (identity.startswith("<") and identity.endswith(">")):
            return False
        state = self.store.item(self.definition_id, identity)
        return (
            state is not None and state.error is not None and (state.error.type in POSITIONAL_TYPES)
        )

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
        # Whether this run read the source from its first record on: then reaching the last
        # window means every record was met, and stale failures of records without identity
        # can be cleared.
        whole_pass = False
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
            if window.from_start:
                if not first:
                    # The source started over mid-run (its data changed): records met before
                    # the restart were written by this run, which no longer means "met twice".
                    self._across_windows = False
                whole_pass = True
            tally = _Tally()
            states: list[StateWrite] = []
            if window.items or window.faults:
                states = self._window_states(
                    window.items, window.faults, tally, discovery=True, update=update
                )
            last = window.done or not (window.items or window.faults)
            yield WindowResult(
                tuple(states),
                tally.counts(),
                tuple(tally.failures),
                window.next_cursor,
                save_cursor=True,
                # Marked with the first window read, so a source whose arguments do not match
                # its data (a failed read above) leaves every stored state as it was.
                mark_needs_update=update and first,
                clear_positional=whole_pass and last,
            )
            first = False
            cursor = window.next_cursor
            if last:
                return

    # --- targeted: failed, skipped and ids runs -------------------------------------------------

    def _targeted(self) -> Iterator[WindowResult]:
        source = self.migration.source
        retry = self.migration.source_lookup_retry
        targets = self._targets
        if not targets:
            return
        size = int(getattr(source, "window_size", _DEFAULT_WINDOW) or _DEFAULT_WINDOW)
        found: Mapping[str, Item | Fault] | None = None
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
                entry: Item | Fault | None
                if found is not None:
                    entry = found.get(identity)
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
                    entry = result.unwrap()
                if entry is None:
                    evidence = ErrorEvidence(
                        kind="source",
                        type="NotFound",
                        message=f"identity {identity!r} was not found in {source.describe()}",
                        details={"source": source.describe()},
                    )
                    states.append(self._failed(identity, evidence, prior.get(identity), tally))
                    continue
                if isinstance(entry, Fault):
                    states.append(self._fault_state(entry, prior.get(identity), tally, identity))
                    continue
                items.append(entry)
            states.extend(self._process_items(items, tally, discovery=False, prior=prior))
            yield WindowResult(tuple(states), tally.counts(), tuple(tally.failures))

    def _stop_on_missing_field(self, error: SourceError) -> WindowResult | None:
        # The source's arguments do not match its data: every lookup would fail alike, and
        # turning the targeted items' states into failures would lose what they were.
        if not isinstance(error, MissingFieldError):
            return None
        describe = self.migration.source.describe()
        return WindowResult((), Counts(), stop=f"looking up items in {describe} failed: {error}")

    def _failed(  # noqa: PLR0917 - private; every caller has all of them at hand
        self,
        identity: str,
        evidence: ErrorEvidence,
        prior: PriorState | None,
        tally: _Tally,
        position: str | None = None,
        journal: str | None = None,
    ) -> StateWrite:
        tally.failed += 1
        tally.failures.append(FailureNote(evidence.kind, evidence.type, evidence.message))
        return StateWrite(
            identity,
            "failed",
            None if prior is None else prior.version,
            error=_encode(evidence.to_json()),
            journal=journal,
            tracking=None if prior is None else prior.tracking,
            position=position,
        )

    def _fault_state(
        self, fault: Fault, prior: PriorState | None, tally: _Tally, key: str | None = None
    ) -> StateWrite:
        evidence = ErrorEvidence("source", fault.type, fault.message, fault.details)
        return self._failed(key or fault.key, evidence, prior, tally, fault.position)

    # --- a window's records -------------------------------------------------------------------

    def _window_states(
        self,
        items: Sequence[Item],
        faults: Sequence[Fault],
        tally: _Tally,
        *,
        discovery: bool,
        update: bool,
    ) -> list[StateWrite]:
        keys = [item.identity for item in items]
        if faults:
            keys += [fault.key for fault in faults]
        prior = self.store.prior_states(self.definition_id, keys)
        states: list[StateWrite] = []
        if len(set(keys)) != len(keys):
            items, faults = self._duplicates(items, faults, prior, tally, states)
        states.extend(self._fault_state(fault, prior.get(fault.key), tally) for fault in faults)
        if prior and self._across_windows:
            items = self._met_before(items, prior, tally, states)
        states.extend(
            self._process_items(items, tally, discovery=discovery, update=update, prior=prior)
        )
        return states

    def _place(self, entry: Item | Fault) -> str:
        if entry.position is not None:
            return entry.position
        assert isinstance(entry, Item)  # a fault always has a position
        return f"record {excerpt(entry.data, 80)}"

    def _duplicates(
        self,
        items: Sequence[Item],
        faults: Sequence[Fault],
        prior: Mapping[str, PriorState],
        tally: _Tally,
        states: list[StateWrite],
    ) -> tuple[list[Item], list[Fault]]:
        """Fail every identity the window holds twice; return the records left to handle."""
        by_key: dict[str, list[Item | Fault]] = {}
        entry: Item | Fault
        for entry in items:
            by_key.setdefault(entry.identity, []).append(entry)
        for entry in faults:
            by_key.setdefault(entry.key, []).append(entry)
        describe = self.migration.source.describe()
        for key, entries in by_key.items():
            if len(entries) > 1:
                fault = duplicate_fault(describe, key, [self._place(e) for e in entries])
                states.append(self._fault_state(fault, prior.get(key), tally))
        twice = {key for key, entries in by_key.items() if len(entries) > 1}
        return (
            [item for item in items if item.identity not in twice],
            [fault for fault in faults if fault.key not in twice],
        )

    def _met_before(
        self,
        items: Sequence[Item],
        prior: Mapping[str, PriorState],
        tally: _Tally,
        states: list[StateWrite],
    ) -> list[Item]:
        """Fail the items an earlier window of this run already held; return the others."""
        run_id = self.run_id
        again = [
            item
            for item in items
            if (state := prior.get(item.identity)) is not None
            and state.run_id == run_id
            and state.status != "needs-update"
        ]
        if not again:
            return list(items)
        describe = self.migration.source.describe()
        for item in again:
            earlier = self.store.item(self.definition_id, item.identity)
            if earlier is None:  # pragma: no cover - prior_states just saw it
                continue
            # The earlier record was counted in its window; this window moves that count to
            # "failed", so the identity is counted once in the run.
            if earlier.status == "migrated":
                tally.migrated -= 1
            elif earlier.status == "skipped":
                tally.skipped -= 1
            elif earlier.status == "failed":
                tally.failed -= 1
            places = [earlier.position or "an earlier window"]
            if earlier.error is not None and earlier.error.type == "DuplicateIdentity":
                places = [str(p) for p in earlier.error.details.get("positions", places)]
            here = self._place(item)
            fault = duplicate_fault(describe, item.identity, [*places, here])
            message = (
                f"identity {item.identity!r} appears again in {describe} at {here}; this run "
                f"read it before at {', '.join(places)} and processed it ({earlier.status}), "
                f"so the record at {here} was not processed: make each identity appear once "
                "in the source, then run the failed items again"
            )
            evidence = ErrorEvidence("source", fault.type, message, fault.details)
            journal = _encode(list(earlier.journal)) if earlier.journal else None
            states.append(
                self._failed(
                    item.identity, evidence, prior[item.identity], tally, places[0], journal
                )
            )
        seen_again = {item.identity for item in again}
        return [item for item in items if item.identity not in seen_again]

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
        if not items:
            return []
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
            item.identity,
            status,
            item.version,
            reason,
            error_json,
            journal,
            tracking,
            item.position,
        )


def _run_in(scope: Scope, thunk: Callable[[], Result[_T, SourceError]]) -> Result[_T, SourceError]:
    token = _CURRENT.set(scope)
    try:
        return thunk()
    finally:
        _CURRENT.reset(token)
