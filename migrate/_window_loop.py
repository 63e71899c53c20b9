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
import concurrent.futures
import contextlib
import contextvars
import inspect
import itertools
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from returns.result import Failure, Result

from effects import Effect
from effects._callables import is_async_callable
from migrate._carried import carry_changes
from migrate._definition import Migration
from migrate._errors import DestinationError, Skip, SourceError, TrackingError
from migrate._json import encode, encode_entries, plain, safe_text
from migrate._pipeline import (
    _CURRENT,  # pyright: ignore[reportPrivateUsage]
    Scope,
    TrackingLookup,
    attempts_of,
    evidence_for,
    journal_entries,
)
from migrate._planner import Mode
from migrate._sources import Cursor, Fault, Item
from migrate._sources._base import MissingFieldError, duplicate_fault, excerpt
from migrate._state import Counts, ErrorEvidence, ItemStatus
from migrate._store import POSITIONAL_TYPES, PriorState, StateWrite, Store
from migrate._telemetry import observed_read
from migrate._text import plural, storable, stored_text, unstorable_part
from migrate._window_writes import WindowWrites, current_writes, writing
from migrate._workers import DaemonPool

__all__ = ["FailureNote", "LoopStart", "WindowLoop", "WindowResult"]

_T = TypeVar("_T")
_R = TypeVar("_R")
_X = TypeVar("_X", bound=Exception)

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
    #: The run whose ``needs-update`` marks this run carries out (an ``--update``, or the rest of
    #: one that did not finish), else ``None``.
    marked_by: str | None = None


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
        interrupted: The run was stopped (Ctrl-C) during this window: *states* hold what was
            done until then (the items being processed as ``interrupted``); the lifecycle
            commits them, without the cursor, and stops the run.
        notes: What the user should know (identities the source does not have).
        forget: Identities whose stored states go (failed records the source no longer has).
        update_done: The window ends the pass of an update: its request is cleared.
        seen: The identities (and faults' keys) the window met, marked as seen by the run
            (``--rollback-orphans`` only; see `migrate._store.WindowCommit.seen`).
        from_start: The window begins at the source's first record.
    """

    states: tuple[StateWrite, ...]
    counts: Counts
    failures: tuple[FailureNote, ...] = ()
    cursor: Cursor = None
    save_cursor: bool = False
    mark_needs_update: bool = False
    clear_positional: bool = False
    stop: str | None = None
    interrupted: bool = False
    notes: tuple[str, ...] = ()
    forget: tuple[str, ...] = ()
    update_done: bool = False
    seen: tuple[str, ...] = ()
    from_start: bool = False


class _Tally:
    """The counts of the window being processed (mutable until the window ends)."""

    __slots__ = ("failed", "failures", "interrupted", "migrated", "skipped", "unchanged")

    def __init__(self) -> None:
        self.migrated = 0
        self.skipped = 0
        self.failed = 0
        self.unchanged = 0
        self.interrupted = 0
        self.failures: list[FailureNote] = []

    def uncount(self, status: str) -> None:
        """Take back one item counted as *status* (its state is about to become another)."""
        if status == "migrated":
            self.migrated -= 1
        elif status == "skipped":
            self.skipped -= 1
        elif status == "failed":
            self.failed -= 1
        elif status == "interrupted":
            self.interrupted -= 1

    def counts(self) -> Counts:
        return Counts(
            self.migrated, self.skipped, self.failed, self.unchanged, interrupted=self.interrupted
        )


def is_async_process(process: Callable[..., Any]) -> bool:
    """
    Whether *process* is async: the one detector of ``effects`` (``async def`` functions,
    partials of them, objects with ``async def __call__``, ...).
    """
    return is_async_callable(process)


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
        mark_seen: Report what each window met (`WindowResult.seen`), for
            ``--rollback-orphans``; and a normal run whose saved cursor is at the end of the
            source (its first read finds nothing) reads the source again from the start, so
            the run makes a complete scan.
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
        mark_seen: bool = False,
    ) -> None:
        self.migration = migration
        self.mark_seen = mark_seen
        #: Whether an empty first read from the saved cursor starts the scan over (see above).
        self._rescan = False
        #: The keys the last window met (`WindowResult.seen`).
        self._seen: list[str] = []
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
        self.timeout = migration.timeout
        self._pool: DaemonPool | None = None
        self.next_tick = 0.0
        self._cursor: Cursor = None
        self._targets: list[str] = []
        self._positional: list[str] = []
        #: Whether an item whose stored state this run wrote is a duplicate (see `_met_before`).
        self._across_windows = True
        #: Whether the first window's commit marks the migrated states needs-update.
        self._mark = False
        #: Whether this run carries out an update request, cleared at the end of its pass.
        self._updating = False

    def start(self, *, resume: bool = False) -> LoopStart:
        """
        Prepare the loop: how many items it expects (when known cheaply), and notes.

        *resume*: this run committed windows of the definition already (in another process, a
        durable run recovered): a discovery goes on from the saved cursor (an ``--update``
        whose marking was committed goes on as the update it is), and a targeted run leaves out
        the identities whose state this run wrote.
        """
        mode = self.mode
        definition_id = self.definition_id
        notes: tuple[str, ...] = ()
        # An update asked for and not carried out (its run died, was stopped or blocked) is
        # carried out by this run: from the top if its marking was not committed, else from the
        # saved cursor, where it stopped.
        request = (
            None if mode == "update" and not resume else self.store.update_request(definition_id)
        )
        if mode in ("normal", "update"):
            marked_by: str | None = None
            if resume and mode == "update":
                # The first window's commit marked the states; a request gone means the pass
                # ended (its last window cleared it): the loop reads on from the end.
                self._cursor = self.store.cursor(definition_id)
                self._updating = request is not None
                return LoopStart(None, (), self.run_id)
            if mode == "update" or (request is not None and not request.marked):
                self._mark = self._updating = True
                self._cursor = None
                marked_by = self.run_id
            else:
                self._cursor = self.store.cursor(definition_id)
                self._rescan = self.mark_seen and not resume and self._cursor is not None
                if request is not None:
                    self._updating = True
                    marked_by = request.run_id
            if request is not None:
                notes = (
                    f"{definition_id}: carrying out the --update that run {request.run_id} asked "
                    "for and did not finish",
                )
            total = self.migration.source.count() if self._cursor is None else None
            return LoopStart(total, notes, marked_by)
        if request is not None:
            notes = (
                f"{definition_id}: the --update that run {request.run_id} asked for is not "
                f"finished; the next normal run of {definition_id} carries it out",
            )
        if mode == "failed":
            # Interrupted items wait for a run like failed ones: Ctrl-C during a --failed run
            # must not lose track of the failures it had not finished.
            targets = sorted(
                self.store.identities(self.definition_id, "failed")
                + self.store.identities(self.definition_id, "interrupted")
            )
            # Records without a usable identity cannot be looked up by one: they are checked
            # by reading the source through (see _positional_pass).
            self._positional = [t for t in targets if self._is_positional(t)]
            if self._positional:
                positional = set(self._positional)
                targets = [t for t in targets if t not in positional]
            self._targets = targets
        elif mode == "skipped":
            self._targets = self.store.identities(self.definition_id, "skipped")
        else:
            self._targets = list(self.ids)
        if resume:
            # Written by this run's committed windows: processed already.
            mine = {
                identity
                for identity, state in self.store.prior_states(
                    definition_id, [*self._targets, *self._positional]
                ).items()
                if state.run_id == self.run_id
            }
            self._targets = [t for t in self._targets if t not in mine]
            self._positional = [t for t in self._positional if t not in mine]
        return LoopStart(len(self._targets) + len(self._positional), notes)

    def _is_positional(self, identity: str) -> bool:
        if not (identity.startswith("<") and identity.endswith(">")):
            return False
        state = self.store.item(self.definition_id, identity)
        return (
            state is not None and state.error is not None and (state.error.type in POSITIONAL_TYPES)
        )

    def _traced(self, effect: Effect[_R, _X], count: Callable[[_R], int]) -> Effect[_R, _X]:
        """*effect* (a read of the source), each attempt in a span while runs are observed."""
        attributes = {
            "migration.run.id": self.run_id,
            "migration.definition.id": self.definition_id,
        }
        traced = observed_read(effect.run, attributes, count)
        return effect if traced is None else Effect.from_result(traced)

    def windows(self) -> Iterator[WindowResult]:
        """Yield each window's result; call `start` first."""
        self.next_tick = time.monotonic() + _TICK_EVERY
        if self.mode in ("normal", "update"):
            return self._discovery(update=self._mark)
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
            effect = self._traced(source.read(cursor), _records)
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
            if (
                self._rescan
                and first
                and not window.from_start
                and not (window.items or window.faults)
            ):
                # The saved cursor is at the source's end (the last pass ended): the scan of
                # --rollback-orphans starts over from the first record.
                self._rescan = False
                cursor = None
                continue
            self._rescan = False
            if window.from_start:
                if not first:
                    # The source started over mid-run (its data changed): records met before
                    # the restart were written by this run, which no longer means "met twice".
                    self._across_windows = False
                whole_pass = True
            tally = _Tally()
            states: list[StateWrite] = []
            self._seen = []
            if window.items or window.faults:
                try:
                    states = self._window_states(
                        window.items, window.faults, tally, discovery=True, update=update
                    )
                except _Interrupted as stop:
                    yield self._stopped(stop, tally, mark_needs_update=self._mark and first)
                    return
            last = window.done or not (window.items or window.faults)
            yield WindowResult(
                tuple(states),
                tally.counts(),
                tuple(tally.failures),
                window.next_cursor,
                save_cursor=True,
                # Marked with the first window read, so a source whose arguments do not match
                # its data (a failed read above) leaves every stored state as it was.
                mark_needs_update=self._mark and first,
                clear_positional=whole_pass and last,
                # The pass is over: the update asked for is carried out.
                update_done=self._updating and last,
                seen=tuple(self._seen) if self.mark_seen else (),
                from_start=window.from_start,
            )
            first = False
            cursor = window.next_cursor
            if last:
                return

    # --- targeted: failed, skipped and ids runs -------------------------------------------------

    def _positional_pass(self) -> Iterator[WindowResult]:
        """
        Check the failed records without a usable identity (``<line 17>``) by reading the whole
        source once for its faults (items are not processed): those met again stay failed with
        fresh evidence, the others are gone from the source (fixed or removed) and forgotten.
        """
        source = self.migration.source
        retry = self.migration.source_cursor_retry
        wanted = set(self._positional)
        met: dict[str, Fault] = {}
        cursor: Cursor = None
        while True:
            effect = self._traced(source.read(cursor), _records)
            if retry is not None:
                effect = effect.pipe(retry)
            sink = Scope(self.run_id, self.definition_id, "")
            outcome = _run_in(sink, effect.run)
            if isinstance(outcome, Failure):
                error: SourceError = outcome.failure()
                yield WindowResult(
                    (),
                    Counts(),
                    stop=f"reading {source.describe()} for its records without identity failed "
                    f"after {plural(attempts_of(sink, error), 'attempt')}: "
                    f"{type(error).__name__}: {error}",
                )
                return
            window = outcome.unwrap()
            met.update((f.key, f) for f in window.faults if f.key in wanted)
            cursor = window.next_cursor
            if window.done or not (window.items or window.faults):
                break
        prior = self.store.prior_states(self.definition_id, self._positional)
        tally = _Tally()
        states = _carried(
            [self._fault_state(met[k], prior.get(k), tally) for k in sorted(met)], prior
        )
        gone = tuple(k for k in self._positional if k not in met)
        notes: tuple[str, ...] = ()
        if gone:
            shown = ", ".join(gone[:3]) + (", ..." if len(gone) > 3 else "")
            notes = (
                f"{self.definition_id}: {plural(len(gone), 'failed record')} without a usable "
                f"identity ({shown}) no longer in {source.describe()}: forgotten",
            )
        yield WindowResult(
            tuple(states), tally.counts(), tuple(tally.failures), forget=gone, notes=notes
        )

    def _targeted(self) -> Iterator[WindowResult]:
        if self._positional:
            for checked in self._positional_pass():
                yield checked
                if checked.stop is not None:
                    return
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
            effect = self._traced(source.lookup_many(targets), len)
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
            absent: list[str] = []
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
                    absent.append(identity)
                    stored = prior.get(identity)
                    if self.mode == "ids" and (stored is None or stored.status != "failed"):
                        # Asked for by hand: reported, and nothing stored that no run could
                        # ever clear; a state stored earlier is kept as it is.
                        continue
                    evidence = ErrorEvidence(
                        kind="source",
                        type="NotFound",
                        message=f"identity {identity!r} was not found in {source.describe()}",
                        details={"source": source.describe()},
                    )
                    states.append(self._failed(identity, evidence, stored, tally))
                    continue
                if isinstance(entry, Fault):
                    states.append(self._fault_state(entry, prior.get(identity), tally, identity))
                    continue
                items.append(entry)
            try:
                states.extend(self._process_items(items, tally, discovery=False, prior=prior))
            except _Interrupted as stop:
                yield self._stopped(_Interrupted(_carried([*states, *stop.states], prior)), tally)
                return
            notes = self._absent_notes(absent, prior)
            states = _carried(states, prior) if prior else states
            yield WindowResult(tuple(states), tally.counts(), tuple(tally.failures), notes=notes)

    def _absent_notes(
        self, absent: Sequence[str], prior: Mapping[str, PriorState]
    ) -> tuple[str, ...]:
        """What the user should know about targeted identities the source does not have."""
        if not absent:
            return ()
        definition_id = self.definition_id
        describe = self.migration.source.describe()
        shown = ", ".join(repr(i) for i in absent[:5]) + (", ..." if len(absent) > 5 else "")
        stored = [i for i in absent if i in prior]
        forget = f"migrate forget {definition_id} " + " ".join(
            f"--id {_shell_word(i)}" for i in (stored or absent)[:5]
        )
        if self.mode == "ids":
            kept = (
                f"; the stored states of {plural(len(stored), 'identity', 'identities')} are kept "
                f"as they were (to drop them: {forget})"
                if stored
                else ""
            )
            return (
                f"{definition_id}: {plural(len(absent), 'identity', 'identities')} not in "
                f"{describe} ({shown}): nothing was stored for them{kept}",
            )
        return (
            f"{definition_id}: {plural(len(absent), 'failed identity', 'failed identities')} no "
            f"longer in {describe} ({shown}) stay failed; if they are gone for good: {forget}",
        )

    @staticmethod
    def _stopped(
        stop: _Interrupted, tally: _Tally, *, mark_needs_update: bool = False
    ) -> WindowResult:
        # The cursor stays where it was: the next run reads this window again, so the items it
        # did not reach are processed then (and the finished ones count as unchanged).
        return WindowResult(
            tuple(stop.states),
            tally.counts(),
            tuple(tally.failures),
            mark_needs_update=mark_needs_update,
            interrupted=True,
        )

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
            error=encode_evidence(evidence),
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
        # One look at them all: storable text joined is storable (a surrogate stays one).
        if not storable("".join(keys)):
            items, faults = self._unstorable(items, faults)
            keys = [item.identity for item in items]
        if faults:
            keys += [fault.key for fault in faults]
        if self.mark_seen and discovery:
            self._seen = keys
        prior = self.store.prior_states(self.definition_id, keys)
        states: list[StateWrite] = []
        if len(set(keys)) != len(keys):
            items, faults = self._duplicates(items, faults, prior, tally, states)
        states.extend(self._fault_state(fault, prior.get(fault.key), tally) for fault in faults)
        if prior and self._across_windows:
            items = self._met_before(items, prior, tally, states)
        try:
            processed = self._process_items(
                items, tally, discovery=discovery, update=update, prior=prior
            )
        except _Interrupted as stop:
            raise _Interrupted(_carried([*states, *stop.states], prior)) from None
        states.extend(processed)
        return _carried(states, prior) if prior else states

    def _unstorable(
        self, items: Sequence[Item], faults: Sequence[Fault]
    ) -> tuple[list[Item], list[Fault]]:
        """Turn items whose identity no store can hold (a lone surrogate, U+0000) into faults."""
        describe = self.migration.source.describe()
        kept: list[Item] = []
        more = list(faults)
        for item in items:
            if storable(item.identity):
                kept.append(item)
                continue
            place = self._place(item)
            more.append(
                Fault(
                    place,
                    "BadIdentity",
                    f"{describe} {place} has an identity with {unstorable_part(item.identity)} "
                    f"({stored_text(item.identity)!r}), which no store can hold; the record "
                    "was not migrated",
                    details={"source": describe, "record": excerpt(item.data)},
                )
            )
        return kept, more

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
            tally.uncount(earlier.status)
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
            journal = encode_entries(earlier.journal)[0] if earlier.journal else None
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
        todo: Iterable[tuple[Item, PriorState | None]]
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
            if not todo:
                return []
        elif prior:
            todo = [(item, prior.get(item.identity)) for item in items]
        else:
            # Lazily: zip() hands the loop one pair it reuses, not a tuple kept per item.
            todo = zip(items, itertools.repeat(None))
        writes = WindowWrites(one_thread=not self._threaded())
        try:
            with writing(writes):
                states = self._process_todo(todo, tally)
        except _Interrupted as stop:
            # The finished items' states are committed: so must their destination writes be.
            raise _Interrupted(self._after_writes(writes, stop.states, tally)) from None
        except BaseException:
            writes.abandon()
            raise
        return self._after_writes(writes, states, tally)

    def _after_writes(
        self, writes: WindowWrites, states: list[StateWrite], tally: _Tally
    ) -> list[StateWrite]:
        """Send and commit the window's batched destination writes; fail the items of a write
        refused (alone) or of a failed commit (all that wrote there)."""
        rows, failures = writes.finish()
        if not rows and not failures:
            return states
        # identity -> (error, whether the journal is replaced, the journal replacing it)
        failed: dict[str, tuple[BaseException, bool, list[dict[str, Any]] | None]] = {}
        for row in rows:
            failed.setdefault(row.identity, (row.error, True, row.journal))
        for failure in failures:
            error = DestinationError(
                f"{failure.name}: committing the window's writes failed: "
                f"{type(failure.error).__name__}: {safe_text(failure.error)}; none of them was "
                "kept (the next run writes them again)",
                failure.error,
            )
            for identity in failure.identities:
                failed.setdefault(identity, (error, False, None))
        result: list[StateWrite] = []
        for state in states:
            hit = failed.get(state.identity)
            if hit is None:
                result.append(state)
                continue
            cause, replaced, journal = hit
            if replaced:
                # A refused write is not in the item's journal: it changed nothing.
                state = state._replace(  # noqa: PLW2901 - the state as it is now
                    journal=encode_entries(journal)[0] if journal else None
                )
            if state.status == "failed":
                result.append(state)  # failed already: its own error is the one to show
                continue
            tally.uncount(state.status)
            evidence = evidence_for(cause, None)
            tally.failed += 1
            tally.failures.append(FailureNote(evidence.kind, evidence.type, evidence.message))
            result.append(
                state._replace(status="failed", reason=None, error=encode_evidence(evidence))
            )
        return result

    def _process_todo(
        self, todo: Iterable[tuple[Item, PriorState | None]], tally: _Tally
    ) -> list[StateWrite]:
        if self._threaded():
            states: list[StateWrite] = self.run_async(self._process_async(list(todo), tally))
            return states
        now = time.time()
        states = []
        # The hot loop of a plain process: bound names, no per-item allocation of our own.
        process = self._process_sync
        keep = states.append
        try:
            if self.on_item is None:
                for item, state in todo:
                    keep(process(item, state, now, tally))
            else:
                clock = time.monotonic
                for item, state in todo:
                    keep(process(item, state, now, tally))
                    if clock() >= self.next_tick:
                        self._tick(tally)
        except _Interrupted as stop:
            raise _Interrupted([*states, *stop.states]) from None
        except KeyboardInterrupt:
            raise _Interrupted(states) from None
        return states

    def _threaded(self) -> bool:
        """Whether items run as tasks or in worker threads (else one by one in this thread)."""
        return self.is_async or self.concurrency > 1 or self.timeout is not None

    def _tick(self, tally: _Tally) -> None:
        if self.on_item is not None:
            self.on_item(tally.counts())
        self.next_tick = time.monotonic() + _TICK_EVERY

    def _scope(self, item: Item, state: PriorState | None) -> Scope:
        if state is None:
            return Scope(self.run_id, self.definition_id, item.identity, None, self.lookup)
        tracking = None if state.tracking is None else json.loads(state.tracking)
        # The stored journal stays text until a destination asks for it (Scope.prior_journal).
        return Scope(
            self.run_id,
            self.definition_id,
            item.identity,
            tracking,
            self.lookup,
            prior_journal=state.journal,
        )

    def _process_sync(
        self, item: Item, state: PriorState | None, now: float, tally: _Tally
    ) -> StateWrite:
        scope = (
            Scope(self.run_id, self.definition_id, item.identity, None, self.lookup)
            if state is None
            else self._scope(item, state)
        )
        token = _CURRENT.set(scope)
        try:
            result = self.process(item, scope)
            if result is not None:
                returned = _returned_problem(result, self.process)
                if returned is not None:
                    return self._state(item, scope, state, "failed", None, returned, tally)
        except Skip as skip:
            return self._skipped(item, scope, state, skip, tally)
        except KeyboardInterrupt:
            raise _Interrupted([self._interrupted(item, scope, state, tally)]) from None
        except BaseException as error:
            if isinstance(error, GeneratorExit):
                raise
            # sys.exit() and any other error of one item fail that item, never the run.
            return self._state(item, scope, state, "failed", None, error, tally)
        finally:
            _CURRENT.reset(token)
        if scope._journal is None and not scope._tracked:  # pyright: ignore[reportPrivateUsage]
            # What _state makes of an item migrated without a journal or tracking of its own.
            tally.migrated += 1
            return tuple.__new__(  # pyright: ignore[reportUnknownMemberType]
                StateWrite,
                (
                    item.identity,
                    "migrated",
                    item.version,
                    None,
                    None,
                    None,
                    None if state is None else state.tracking,
                    item.position,
                ),
            )
        return self._state(item, scope, state, "migrated", None, None, tally)

    async def _process_async(
        self, todo: list[tuple[Item, PriorState | None]], tally: _Tally
    ) -> list[StateWrite]:
        semaphore = asyncio.Semaphore(self.concurrency)
        is_async = self.is_async
        ticking = self.on_item is not None
        timeout = self.timeout
        done: dict[int, StateWrite] = {}
        running: dict[int, tuple[Item, Scope, PriorState | None]] = {}
        calls: dict[int, concurrent.futures.Future[Any]] = {}

        async def one(index: int, item: Item, state: PriorState | None) -> None:
            async with semaphore:
                scope = self._scope(item, state)
                _CURRENT.set(scope)  # each task has its own context
                running[index] = (item, scope, state)
                done[index] = await attempt(index, item, scope, state)
                del running[index]
            if ticking and time.monotonic() >= self.next_tick:
                self._tick(tally)

        async def attempt(
            index: int, item: Item, scope: Scope, state: PriorState | None
        ) -> StateWrite:
            try:
                async with asyncio.timeout(timeout):
                    if not is_async:
                        # The worker thread runs in a copy of this task's context: its scope
                        # and the definition's retry tally.
                        call = contextvars.copy_context().run
                        calls[index] = self._workers().submit(call, self.process, item, scope)
                        await _ended(calls[index])
                        return self._returned(calls[index], item, scope, state, tally)
                    result = self.process(item, scope)
                    if inspect.isawaitable(result):
                        await result
            except Skip as skip:
                return self._skipped(item, scope, state, skip, tally)
            except TimeoutError as error:
                late = calls.get(index)
                if late is not None and self._pool is not None:
                    self._pool.abandon(late)  # it may run on: another thread takes its place
                return self._state(item, scope, state, "failed", None, self._late(error), tally)
            except (KeyboardInterrupt, asyncio.CancelledError, GeneratorExit):
                raise
            except BaseException as error:  # noqa: BLE001 - sys.exit() in a process fails it
                return self._state(item, scope, state, "failed", None, error, tally)
            return self._state(item, scope, state, "migrated", None, None, tally)

        tasks = [
            asyncio.ensure_future(one(index, item, state))
            for index, (item, state) in enumerate(todo)
        ]
        try:
            await asyncio.gather(*tasks)
        except (KeyboardInterrupt, asyncio.CancelledError):
            for task in tasks:
                task.cancel()
            # What finished is kept (also a call whose thread returned just before the stop);
            # what was running is recorded as interrupted. A plain process stuck in its thread
            # cannot be stopped: its thread is abandoned (a daemon), whatever it does ignored.
            if self._pool is not None:
                self._pool.abandon_all()
            for index in sorted(running):
                call = calls.get(index)
                item, scope, state = running[index]
                done[index] = (
                    self._returned(call, item, scope, state, tally)
                    if call is not None and call.done()
                    else self._interrupted(item, scope, state, tally)
                )
            raise _Interrupted([done[i] for i in sorted(done)]) from None
        return [done[i] for i in range(len(todo))]

    def _returned(
        self,
        call: concurrent.futures.Future[Any],
        item: Item,
        scope: Scope,
        state: PriorState | None,
        tally: _Tally,
    ) -> StateWrite:
        """The state of an item whose plain process *call* (in a worker thread) ended."""
        error = call.exception()
        if error is None:
            result = call.result()
            returned = None if result is None else _returned_problem(result, self.process)
            if returned is not None:
                return self._state(item, scope, state, "failed", None, returned, tally)
            return self._state(item, scope, state, "migrated", None, None, tally)
        if isinstance(error, Skip):
            return self._skipped(item, scope, state, error, tally)
        if isinstance(error, KeyboardInterrupt):
            return self._interrupted(item, scope, state, tally)
        return self._state(item, scope, state, "failed", None, error, tally)

    def _workers(self) -> DaemonPool:
        if self._pool is None:
            self._pool = DaemonPool(self.concurrency, f"migrate-{self.definition_id}")
        return self._pool

    def close(self) -> None:
        """Let the worker threads go (those still busy finish in the background)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def _late(self, error: TimeoutError) -> TimeoutError:
        seconds = f"{self.timeout or 0.0:g}s"
        late = TimeoutError(
            f"the process did not finish within its timeout of {seconds}"
            + ("" if self.is_async else "; it was left to finish in its thread, outcome ignored")
        )
        late.__cause__ = None
        late.__traceback__ = error.__traceback__
        return late

    def _skipped(
        self,
        item: Item,
        scope: Scope,
        state: PriorState | None,
        skip: Skip,
        tally: _Tally,
    ) -> StateWrite:
        reason = getattr(skip, "reason", None)
        if not isinstance(reason, str):
            wrong = TypeError(
                f"Skip(reason) needs a string reason, got {type(reason).__name__}: "
                f"{safe_text(reason, 200)}"
            )
            wrong.__traceback__ = skip.__traceback__
            return self._state(item, scope, state, "failed", None, wrong, tally)
        return self._state(item, scope, state, "skipped", stored_text(reason), None, tally)

    def _interrupted(
        self, item: Item, scope: Scope, state: PriorState | None, tally: _Tally
    ) -> StateWrite:
        tally.interrupted += 1
        evidence = ErrorEvidence(
            "process",
            "Interrupted",
            "the run was stopped (Ctrl-C) while this item was processed; it is processed "
            "again by the next normal or --failed run",
        )
        entries = journal_entries(scope)
        journal = encode_entries(entries)[0] if entries else None
        return StateWrite(
            item.identity,
            "interrupted",
            None if state is None else state.version,
            error=encode(evidence.to_json()),
            journal=journal,
            tracking=None if state is None else state.tracking,
            position=item.position,
        )

    def _state(  # noqa: PLR0917 - a private hot-path helper; keywords would cost per item
        self,
        item: Item,
        scope: Scope,
        state: PriorState | None,
        status: ItemStatus,
        reason: str | None,
        error: BaseException | None,
        tally: _Tally,
    ) -> StateWrite:
        journal: str | None = None
        problem: BaseException | None = None
        entries = journal_entries(scope)
        if entries:
            journal, unencodable = encode_entries(entries)
            if unencodable is not None:
                problem = TypeError(f"{unencodable}; the item's journal must hold JSON values only")
        tracking = None if state is None else state.tracking
        if scope.tracked:
            try:
                tracking = encode(scope.tracking)
            except (TypeError, ValueError) as wrong:
                problem = TrackingError(
                    f"the tracking record cannot be stored as JSON: {safe_text(wrong)}"
                )
        if problem is not None and status != "failed":
            # What the process did is in the journal; its state cannot be stored as it is.
            status, reason, error = "failed", None, problem
        error_json: str | None = None
        if status == "migrated":
            tally.migrated += 1
        elif status == "skipped":
            tally.skipped += 1
        else:
            tally.failed += 1
            assert error is not None
            evidence = evidence_for(error, scope)
            if problem is not None and problem is not error:
                evidence = attrs.evolve(
                    evidence, details={**evidence.details, "also": safe_text(problem)}
                )
            hint = _lock_hint(error, evidence.message)
            if hint is not None:
                evidence = attrs.evolve(evidence, details={**evidence.details, "hint": hint})
            tally.failures.append(FailureNote(evidence.kind, evidence.type, evidence.message))
            error_json = encode_evidence(evidence)
        # tuple.__new__ skips StateWrite's generated __new__ (a Python call per item).
        return tuple.__new__(  # pyright: ignore[reportUnknownMemberType]
            StateWrite,
            (
                item.identity,
                status,
                item.version,
                reason,
                error_json,
                journal,
                tracking,
                item.position,
            ),
        )


def _carried(states: list[StateWrite], prior: Mapping[str, PriorState]) -> list[StateWrite]:
    """*states* with the earlier runs' destination changes their priors' journals hold and they
    do not redo (`migrate._carried`): what a rollback must still undo."""
    for index, state in enumerate(states):
        earlier = prior.get(state.identity)
        if earlier is not None and earlier.journal is not None:
            journal = carry_changes(earlier.journal, state.journal)
            if journal is not state.journal:
                states[index] = state._replace(journal=journal)
    return states


class _Interrupted(BaseException):
    """The run was stopped mid-window; *states* are what the window did until then."""

    def __init__(self, states: list[StateWrite]) -> None:
        super().__init__("interrupted")
        self.states = states


def _lock_hint(error: BaseException, message: str) -> str | None:
    """
    What to do when a process's own SQLite connection waited out its timeout for the write lock
    that the window's batched destination writes hold: ``None`` for any other failure.
    """
    if isinstance(error, DestinationError) or "database is locked" not in message:
        return None
    writes = current_writes()
    names = [] if writes is None else writes.names()
    if not names:
        return None
    return (
        f"the window's transaction of {', '.join(names)} holds the database's write lock until "
        "the window commits, so a connection of the process's own to that database waits for "
        "it: write through the destination's execute(sql, params) to share the transaction, or "
        "build it with SqlDestination(..., batch=False)"
    )


def _returned_problem(result: object, process: Callable[..., Any]) -> TypeError | None:
    """Why a plain process's return value means it did not do its work, if it does."""
    if inspect.iscoroutine(result) or inspect.isawaitable(result):
        what = "a coroutine" if inspect.iscoroutine(result) else "an awaitable"
        advice = "declare it `async def` (an async process is awaited)"
    elif inspect.isgenerator(result) or inspect.isasyncgen(result):
        what = "a generator"
        advice = "a process does its work and returns: remove the yield"
    else:
        return None
    close = getattr(result, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()  # never run: closing it keeps Python from warning about it
    name = getattr(process, "__qualname__", type(process).__qualname__)
    return TypeError(
        f"the process {name} is not an async function but returned {what}, so its body never "
        f"ran: {advice}"
    )


def encode_evidence(evidence: ErrorEvidence) -> str:
    """*evidence* as strict JSON; its details reduced to plain values if they need it."""
    data = evidence.to_json()
    try:
        return encode(data)
    except (TypeError, ValueError):
        data["details"] = plain(data["details"])
        return encode(data)


def _shell_word(text: str) -> str:
    return text if text and all(c.isalnum() or c in "-_.:/@" for c in text) else repr(text)


async def _ended(call: concurrent.futures.Future[Any]) -> None:
    """
    Wait until *call* (a worker thread's) has ended, without taking its outcome: that is read
    from *call* itself (`WindowLoop._returned`), which never reports an error nobody asked for.

    ``asyncio.wrap_future`` would copy the call's exception into an asyncio future that asyncio
    logs ("Future exception was never retrieved", with a traceback) once it is collected
    unread; and a call given up at its timeout would still report to it after the window, or
    to a closed loop. The future waited on here only ever holds ``None``.
    """
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def wake(_: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, ended)

    call.add_done_callback(wake)
    await ended


def _resolve(ended: asyncio.Future[None]) -> None:
    if not ended.done():  # cancelled meanwhile (the item's timeout, Ctrl-C)
        ended.set_result(None)


def _records(window: Any) -> int:
    """The records a window of a source read: its items and its faults."""
    return len(window.items) + len(window.faults)


def _run_in(scope: Scope, thunk: Callable[[], Result[_T, SourceError]]) -> Result[_T, SourceError]:
    token = _CURRENT.set(scope)
    try:
        return thunk()
    finally:
        _CURRENT.reset(token)
