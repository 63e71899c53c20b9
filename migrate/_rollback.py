"""
``migrate rollback``: undo stored items through their definitions' ``rollback=`` functions.

A rollback is a Migration Run of kind ``rollback`` (`RunRecord.kind`). It never reads a source:
every stored state of the chosen definitions (any status) is handed, as a `RollbackItem`, to
its definition's ``rollback(item, scope)``, in natural identity order (``"7"`` before
``"13"``), one definition after the other in reverse dependency order (dependents first). An
undo that returns deletes the state, journal and all, so the next run migrates the item again;
one that raises keeps the state and appends one rollback attempt ``{"run_id", "entries",
"error": {"type", "message"}, "failed_at"}`` to it (``entries``: what that attempt had undone,
taken from the error's ``entries`` attribute when it has one, as the error of
`migrate.compensate` does). The counts ``rolled_back``, ``failed`` and ``skipped`` (an ``--id``
with no stored state) add up to the states selected.

Before anything is recorded, the rollback takes its definitions' locks (`LockHeld` while another
run holds one) and checks, under them, that every definition with states to undo has a
``rollback=``, and (unless *force*) that no definition depending on one it undoes, left out of
it, still holds states (`RollbackRefused`). Each definition's cursor is reset before its first
undo, so its next normal run reads the source from the start.

The states undone, and the attempts that failed, are committed after an undo ends, before the
next one starts, once that undo, or the undo work since the last commit, took `BATCH_SECONDS`
(5 ms) or `COMMIT_RATIO` times as long as the last commit did, or the batch holds `BATCH` items.
So an undo taking 5 ms or more (any network call), or longer than `COMMIT_RATIO` commits, is
committed at its end; only undos faster than that share a commit, which keeps committing a small
part of a rollback's time. The crash bound this gives: a process killed mid-rollback
(``kill -9``) loses only the deletes not committed yet, and a rerun undoes those items again:
the undos that had ended since the last commit, which is at most the one that had just ended
(with ``-c N``, one per worker) when undos are that slow, and at most the undos of the last 5 ms
otherwise. The undo that was running when the process died never ended and runs again; every
other item is undone exactly once, since a committed delete stays deleted. A ``rollback=`` must
still be idempotent (a row already gone is a success), as `SqlDestination.rollback` is.

Ctrl-C stops after the undo running, which ends as it would (a second Ctrl-C stops it too: that
item keeps its state, with an ``Interrupted`` attempt; with ``-c N`` the undos running are
stopped at once, alike), commits what was done and stores the run failed, interrupted, as
``migrate run`` does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

import attrs

from effects import add_hook
from effects._callables import is_async_callable
from migrate._definition import Config, Migration, Rollback
from migrate._errors import (
    LockHeld,
    RefusedError,
    RollbackRefused,
    UsageError,
)
from migrate._json import encode, plain, safe_text
from migrate._pipeline import (
    _CURRENT,  # pyright: ignore[reportPrivateUsage]
    RetryTally,
    Scope,
    counting_retries,
    evidence_for,
    record_attempts,
)
from migrate._refusals import held_lock_of
from migrate._reports import RunSummary
from migrate._rollback_item import RollbackItem
from migrate._runner import ErrorTally, RunLifecycle, new_run_id
from migrate._state import Counts, DefinitionResult, ItemState
from migrate._store import RollbackCommit, Store
from migrate._text import natural_key, plural, storable, stored_text
from migrate._window_loop import _ended  # pyright: ignore[reportPrivateUsage]
from migrate._workers import DaemonPool

__all__ = [
    "BATCH",
    "BATCH_SECONDS",
    "COMMIT_RATIO",
    "RollbackPlan",
    "RollbackStep",
    "plan_rollback",
    "preview_rollback",
    "rollback",
]

_T = TypeVar("_T")

#: Items per rollback commit at most (their deletes and failed attempts in one transaction).
BATCH = 1000
#: Seconds of undo work per rollback commit at most: an undo taking this long or longer (any
#: network call) is committed alone, before the next undo starts.
BATCH_SECONDS = 0.005
#: A batch is committed sooner, once the undo work since the last commit took this many times as
#: long as that commit did: undos slower than that commit alone too, and only undos much faster
#: than a commit share one, so committing stays a small part of the rollback's time.
COMMIT_RATIO = 9


def _strings(value: Iterable[str] | str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


@attrs.frozen
class RollbackStep:
    """
    One definition of a rollback.

    Attributes:
        definition_id: The definition.
        reason: Why it is rolled back: ``"named"``, ``"all"`` (no definition named), or
            ``"dependent of X"`` (added by ``with_dependencies`` because it depends on X).
    """

    definition_id: str
    reason: str


@attrs.frozen
class RollbackPlan:
    """
    The definitions a rollback undoes, in the order it undoes them (dependents first).

    Attributes:
        steps: The definitions, in order.
        ids: The identities asked for (``--id``; one definition), deduplicated; empty: every
            stored state.
        force: Whether the check of dependents still holding states is skipped.
        concurrency: Undos at once (``-c N``); ``None``: one at a time.
    """

    steps: tuple[RollbackStep, ...]
    ids: tuple[str, ...] = ()
    force: bool = False
    concurrency: int | None = None

    @property
    def definition_ids(self) -> tuple[str, ...]:
        """The definition ids in the order they are rolled back."""
        return tuple(step.definition_id for step in self.steps)

    def describe(self, states: Mapping[str, int] | None = None) -> str:
        """What ``migrate rollback --plan`` prints: the definitions in order, with the number
        of stored states each would undo (from *states*, when given)."""
        width = max((len(s.definition_id) for s in self.steps), default=0)
        lines = [f"Rollback plan: {plural(len(self.steps), 'definition')}, dependents first"]
        counted = {
            s.definition_id: ""
            if states is None
            else plural(states.get(s.definition_id, 0), "state")
            for s in self.steps
        }
        count_width = max((len(c) for c in counted.values()), default=0)
        for number, step in enumerate(self.steps, 1):
            parts = [f"{step.definition_id:<{width}}"]
            if states is not None:
                parts.append(f"{counted[step.definition_id]:>{count_width}}")
            parts.append(step.reason)
            lines.append(f"  {number}. " + "  ".join(parts))
        if self.ids:
            lines.append(f"  identities: {', '.join(self.ids)}")
        if self.force:
            lines.append("  dependents holding states: not checked (--force)")
        if self.concurrency is not None:
            lines.append(f"  concurrency: {self.concurrency}")
        return "\n".join(lines)

    def to_json(self, states: Mapping[str, int] | None = None) -> dict[str, Any]:
        """``{"kind": "rollback", "steps": [{"definition", "reason", "states"}], "ids",
        "force", "concurrency"}`` (``states`` is ``null`` without *states*)."""
        return {
            "kind": "rollback",
            "steps": [
                {
                    "definition": s.definition_id,
                    "reason": s.reason,
                    "states": None if states is None else states.get(s.definition_id, 0),
                }
                for s in self.steps
            ],
            "ids": list(self.ids),
            "force": self.force,
            "concurrency": self.concurrency,
        }


def plan_rollback(
    config: Config,
    definitions: Iterable[str] | str = (),
    *,
    ids: Iterable[str] | str = (),
    with_dependencies: bool = False,
    force: bool = False,
    concurrency: int | None = None,
) -> RollbackPlan:
    """
    Decide which definitions a rollback undoes, in which order (see `rollback`).

    Raises:
        UsageError: For an unknown definition, *ids* without exactly one definition named
            (unless the config has only one), *ids* with *with_dependencies*, or a
            *concurrency* below 1.
    """
    named: list[str] = []
    for definition_id in _strings(definitions):
        config.get(definition_id)  # UsageError naming an unknown id
        if definition_id not in named:
            named.append(definition_id)
    wanted = tuple(dict.fromkeys(_strings(ids)))
    if wanted:
        if with_dependencies:
            raise UsageError(
                "--id and --with-dependencies cannot be used together: the identities belong to "
                "one definition; roll back its dependents first, by name"
            )
        if len(named) > 1 or (not named and len(config.ids) != 1):
            raise UsageError(
                "--id needs the one definition the identities belong to: migrate rollback DEF "
                f"--id X (known: {', '.join(config.ids) or 'none'})"
            )
    if concurrency is not None and (isinstance(concurrency, bool) or concurrency < 1):
        raise UsageError(f"concurrency must be >= 1, got {concurrency!r}")
    reasons = dict.fromkeys(named or config.ids, "named" if named else "all")
    if with_dependencies:
        pending = list(reasons)
        while pending:
            current = pending.pop(0)
            for dependent in config.dependents(current):
                if dependent not in reasons:
                    reasons[dependent] = f"dependent of {current}"
                    pending.append(dependent)
    order = tuple(reversed(config.order(list(reasons))))
    return RollbackPlan(
        steps=tuple(RollbackStep(d, reasons[d]) for d in order),
        ids=wanted,
        force=force,
        concurrency=concurrency,
    )


def _selected(store: Store, the_plan: RollbackPlan) -> dict[str, int]:
    """How many stored states the rollback would undo, per definition."""
    if the_plan.ids:
        wanted = [identity for identity in the_plan.ids if storable(identity)]
        return {d: len(store.prior_states(d, wanted)) for d in the_plan.definition_ids}
    return {d: store.counts(d).total for d in the_plan.definition_ids}


def _refusal(
    config: Config, the_plan: RollbackPlan, store: Store, states: Mapping[str, int]
) -> RollbackRefused | None:
    """Why the rollback may not start (``None``: it may)."""
    problems: list[str] = []
    for definition_id in the_plan.definition_ids:
        count = states.get(definition_id, 0)
        if count and config.get(definition_id).rollback is None:
            problems.append(
                f"refusing to roll back {definition_id!r}: it has "
                f"{plural(count, 'stored item state')} but no rollback= to undo them with; give "
                f"Migration({definition_id!r}, ..., rollback=fn) a function undoing one item"
            )
    if not the_plan.force:
        chosen = set(the_plan.definition_ids)
        held: dict[str, int] = {}
        for definition_id in the_plan.definition_ids:
            for dependent in config.dependents(definition_id):
                if dependent in chosen:
                    continue
                if dependent not in held:
                    held[dependent] = store.counts(dependent).total
                if held[dependent]:
                    problems.append(
                        f"refusing to roll back {definition_id!r}: {dependent!r} depends on it "
                        f"and still holds {plural(held[dependent], 'stored item state')}; "
                        f"rollback {dependent} first, rerun with --with-dependencies, or use "
                        "--force"
                    )
    return RollbackRefused(tuple(problems)) if problems else None


def preview_rollback(
    config: Config, the_plan: RollbackPlan
) -> tuple[dict[str, int], tuple[RefusedError, ...]]:
    """
    What ``migrate rollback --plan`` shows, without writing anything: the stored states each
    definition would undo, and the refusals the rollback would meet now (a lock another run
    holds, a definition without ``rollback=``, a dependent still holding states).

    Raises:
        StoreError: If the store cannot be read.
    """
    found: list[RefusedError] = []
    with config.using_store(read_only=True) as store:
        lock = held_lock_of(the_plan.definition_ids, store)
        if lock is not None:
            found.append(LockHeld(lock))
        states = _selected(store, the_plan)
        refused = _refusal(config, the_plan, store, states)
        if refused is not None:
            found.append(refused)
    return states, tuple(found)


def rollback(
    config: Config,
    definitions: Iterable[str] | str = (),
    *,
    ids: Iterable[str] | str = (),
    with_dependencies: bool = False,
    force: bool = False,
    concurrency: int | None = None,
) -> RunSummary:
    """
    Undo stored items: a Migration Run of kind ``rollback`` (see the module docstring).

    Every stored state of the chosen definitions (any status) goes to its definition's
    ``rollback(item, scope)`` (`Migration.rollback`) as a `RollbackItem`, in natural identity
    order, dependents first. A successful undo deletes the state (the next run migrates the
    item again); a failed one keeps it and appends a rollback attempt. Failed undos never raise:
    they are counted (``failed``) and shown by `failures`.

    Args:
        config: The definitions and store.
        definitions: Ids to roll back; empty means all.
        ids: Only these identities of the one definition named (``--id``); one without a stored
            state is counted ``skipped``; duplicates count once.
        with_dependencies: Also roll back the definitions that depend on these (``requires``
            or ``optional``), transitively, before them.
        force: Roll back although a definition depending on one rolled back, and left out,
            still holds states.
        concurrency: Undos at once (``async`` ones as tasks, plain ones in threads); ``None``:
            one at a time.

    Returns:
        The summary (`RunSummary.kind` ``"rollback"``): per definition, ``rolled_back``,
        ``failed`` and ``skipped`` in its counts; ``status`` ``"failed"`` if an undo failed.

    Raises:
        UsageError: As `plan_rollback`.
        LockHeld: If another live run holds a definition's lock (nothing is recorded).
        RollbackRefused: If a definition with states to undo has no ``rollback=``, or a
            dependent left out still holds states and *force* is not set (nothing is recorded).
        StoreError: If the store cannot be used, or a commit failed (the run is stored failed,
            with the batches committed before it).
        KeyboardInterrupt: After Ctrl-C, once what was undone is committed (the run is stored
            failed, ``interrupted``).

    Example:
        >>> import migrate
        >>> written = {}
        >>> def process(item, scope):
        ...     written[item.identity] = item.data
        ...     scope.journal.change("dict:written", "insert", key=item.identity)
        >>> def undo(item, scope):
        ...     for entry in reversed(item.journal):
        ...         written.pop(entry["key"], None)  # already gone: a success too
        >>> source = migrate.MemorySource([{"id": 1}, {"id": 2}])
        >>> migration = migrate.Migration("p", source, process, rollback=undo)
        >>> config = migrate.Config([migration], store=migrate.MemoryStore())
        >>> migrate.run(config).definitions["p"].counts.migrated
        2
        >>> migrate.rollback(config).to_json()["definitions"]
        {'p': {'rolled_back': 2, 'failed': 0, 'skipped': 0}}
        >>> written, migrate.status(config).definitions["p"].migrated
        ({}, 0)
    """
    the_plan = plan_rollback(
        config,
        definitions,
        ids=ids,
        with_dependencies=with_dependencies,
        force=force,
        concurrency=concurrency,
    )
    return run_rollback(config, the_plan)


def run_rollback(config: Config, the_plan: RollbackPlan) -> RunSummary:
    """Carry out *the_plan* (see `rollback`)."""
    with config.using_store() as store:
        return _Rollback(config, the_plan, store).execute()


class _Interrupted(BaseException):
    """Ctrl-C reached a concurrent rollback: what it did is noted, the batch not committed."""


class _Rollback(RunLifecycle):
    """One rollback run: locks, preflight, the run record, each definition's undos."""

    def __init__(self, config: Config, the_plan: RollbackPlan, store: Store) -> None:
        self.config = config
        self.plan = the_plan
        self.store = store
        self.run_id = new_run_id()
        self.results: dict[str, DefinitionResult] = {
            d: DefinitionResult("rollback", "queued") for d in the_plan.definition_ids
        }
        self.errors = ErrorTally()
        self.notes: list[str] = []
        self.config_ids = frozenset(config.ids)
        self._aio: asyncio.Runner | None = None

    def execute(self) -> RunSummary:
        store = self.store
        store.recover_dead_runs()
        # The locks first, so the preflight's answer holds until the rollback ends; a refusal
        # records nothing (the locks alone are taken, and released again).
        store.acquire_locks(self.run_id, self.plan.definition_ids)
        try:
            summary = self._execute_locked()
        except BaseException:
            self._release(quiet=True)
            raise
        self._release(quiet=False)
        return summary

    def _execute_locked(self) -> RunSummary:
        store = self.store
        refused = _refusal(self.config, self.plan, store, _selected(store, self.plan))
        if refused is not None:
            raise refused
        started = time.time()
        store.create_run(self.run_id, "rollback", self.results, kind="rollback")
        store.update_run(self.run_id, status="running")
        remove_hook = add_hook(record_attempts)
        try:
            for definition_id in self.plan.definition_ids:
                migration = self.config.get(definition_id)
                tally = RetryTally(definition_id)
                with counting_retries(tally):
                    _DefinitionRollback(self, migration, tally).run()
        except BaseException as error:
            self._record_interrupted(error)
            raise
        finally:
            remove_hook()
        status: Literal["succeeded", "failed"] = (
            "succeeded" if all(r.status == "succeeded" for r in self.results.values()) else "failed"
        )
        store.update_run(self.run_id, status=status, definitions=self.results, ended=True)
        return RunSummary(
            run_id=self.run_id,
            status=status,
            started_at=started,
            ended_at=time.time(),
            definitions=dict(self.results),
            top_errors=self.errors.top(),
            notes=tuple(self.notes),
            kind="rollback",
        )


class _DefinitionRollback:
    """One definition of a rollback: its undos, committed in batches, and its counts."""

    def __init__(self, owner: Any, migration: Migration, tally: RetryTally) -> None:
        # A _Rollback, or the _Run of ``migrate run --rollback-orphans`` (migrate._orphans).
        self.owner: _Rollback = owner
        self.store = owner.store
        self.definition_id = migration.id
        self.run_id = owner.run_id
        self.fn: Rollback | None = migration.rollback
        self.tally = tally
        concurrency = owner.plan.concurrency
        self.concurrency = 1 if concurrency is None else concurrency
        self.counts = Counts()
        #: Marks the states kept with a failed attempt as seen by this run (orphans).
        self.seen_by: str | None = None
        self._pool: DaemonPool | None = None
        self._stopping = False
        # The batch not committed yet.
        self._deleted: list[str] = []
        self._attempts: list[tuple[str, str]] = []
        self._failures: list[tuple[str, str]] = []
        self._batch_started = time.monotonic()
        #: How long the last commit of a batch took, in seconds (none yet: 0, commit at once).
        self._commit_seconds = 0.0

    def _result(self, status: str, counts: Counts | None = None) -> DefinitionResult:
        return DefinitionResult(
            "rollback",
            status,
            self.counts if counts is None else counts,
            retries=self.tally.retries,
            gave_up=self.tally.gave_up,
        )

    def run(self) -> None:
        owner = self.owner
        store = self.store
        # Before the first delete: the next normal run reads the source from the start.
        store.reset_cursor(self.definition_id)
        targets, missing = self._targets()
        self.counts = Counts(skipped=len(missing))
        if missing:
            shown = ", ".join(repr(i) for i in missing[:5]) + (", ..." if len(missing) > 5 else "")
            owner.notes.append(
                f"{self.definition_id}: {plural(len(missing), 'identity', 'identities')} asked "
                f"for had no stored state ({shown}): skipped"
            )
        owner.results[self.definition_id] = self._result("running")
        store.update_run(self.run_id, definitions=owner.results)
        if targets:
            fn = self.fn
            if fn is None:  # pragma: no cover - the preflight refused it, under the lock
                raise RollbackRefused((f"{self.definition_id!r} has no rollback=",))
            self._batch_started = time.monotonic()
            self.undo_all(fn, targets)
        status = "failed" if self.counts.failed else "succeeded"
        owner.results[self.definition_id] = self._result(status)
        store.update_run(self.run_id, definitions=owner.results)

    def undo_all(self, fn: Rollback, targets: Sequence[ItemState]) -> None:
        """
        Undo *targets* with *fn* (one by one, or at once for an ``async`` fn or ``-c N``) and
        commit the last batch.

        Raises:
            KeyboardInterrupt: After committing what was done, if Ctrl-C stopped the undos.
        """
        try:
            if is_async_callable(fn) or self.concurrency > 1:
                stopped = self.owner.run_async(self._undo_concurrently(fn, targets))
            else:
                stopped = self._undo_one_by_one(fn, targets)
        except _Interrupted:
            stopped = True
        except KeyboardInterrupt:
            # Ctrl-C between two undos (or during a commit): what was done is committed.
            self._flush()
            raise
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
        self._flush()
        if stopped:
            raise KeyboardInterrupt

    def _targets(self) -> tuple[list[ItemState], list[str]]:
        """The states to undo, in natural identity order, and the identities asked for that
        have none."""
        store = self.store
        wanted = self.owner.plan.ids
        found: list[ItemState]
        if not wanted:
            found = list(store.items(self.definition_id))
        else:
            found = []
            for identity in wanted:
                state = store.item(self.definition_id, identity) if storable(identity) else None
                if state is not None:
                    found.append(state)
        found.sort(key=lambda state: natural_key(state.identity))
        present = {state.identity for state in found}
        return found, [identity for identity in wanted if identity not in present]

    # --- the batch ---------------------------------------------------------------------------

    def _note(self, identity: str, attempt: dict[str, Any] | None, took: float) -> None:
        """
        Add one undo's outcome to the batch (*took*: the seconds that undo ran); commit the batch
        once that undo, or the undo work since the last commit, is long enough (`BATCH_SECONDS`,
        `COMMIT_RATIO` commits), or the batch is full.
        """
        if attempt is None:
            self._deleted.append(identity)
        else:
            self._add_attempt(identity, attempt)
        # With -c N undos overlap: one undo long enough commits at its end, whatever the rest.
        work = max(took, time.monotonic() - self._batch_started)
        if (
            work >= BATCH_SECONDS
            or work >= COMMIT_RATIO * self._commit_seconds
            or len(self._deleted) + len(self._attempts) >= BATCH
        ):
            self._flush()

    def _add_attempt(self, identity: str, attempt: dict[str, Any]) -> None:
        error = attempt["error"]
        self._attempts.append((identity, encode(attempt)))
        self._failures.append((error["type"], error["message"]))

    def _flush(self) -> None:
        """Commit the batch: its deletes, its attempts and the counts, in one transaction."""
        deleted, attempts = self._deleted, self._attempts
        if deleted or attempts:
            started = time.monotonic()
            owner = self.owner
            counts = self.counts + Counts(failed=len(attempts), rolled_back=len(deleted))
            results = {**owner.results, self.definition_id: self._result("running", counts)}
            self.store.commit_rollback(
                RollbackCommit(
                    self.definition_id,
                    self.run_id,
                    deleted,
                    attempts,
                    results,
                    seen_by=self.seen_by,
                )
            )
            # Counted only now that the batch is stored: a failed commit counts nothing.
            self.counts = counts
            owner.results = results
            for type_, message in self._failures:
                owner.errors.count(self.definition_id, "rollback", type_, message)
            self._deleted, self._attempts, self._failures = [], [], []
            self._commit_seconds = time.monotonic() - started
        self._batch_started = time.monotonic()

    # --- one undo ----------------------------------------------------------------------------

    def _item(self, state: ItemState) -> tuple[RollbackItem, Scope]:
        journal = tuple(entry for entry in state.journal if entry.get("kind") == "change")
        item = RollbackItem(
            identity=state.identity,
            status=state.status,
            source_version=state.version,
            journal=journal,
            rollback_attempts=state.rollback_attempts,
            tracking=state.tracking,
        )
        tracking = dict(state.tracking) if isinstance(state.tracking, dict) else None
        scope = Scope(
            self.run_id, self.definition_id, state.identity, tracking, self.owner.tracking_lookup
        )
        return item, scope

    def _attempt(self, type_: str, message: str, entries: object = ()) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "entries": (
                plain(list(cast("Sequence[object]", entries)))
                if isinstance(entries, list | tuple)
                else []
            ),
            "error": {"type": stored_text(type_), "message": stored_text(message)},
            "failed_at": time.time(),
        }

    def _failed(self, error: BaseException, scope: Scope | None) -> dict[str, Any]:
        evidence = evidence_for(error, scope)  # never raises, whatever the error does
        return self._attempt(evidence.type, evidence.message, _entries_of(error))

    def _interrupted(self) -> dict[str, Any]:
        self._stopping = True
        return self._attempt(
            "Interrupted",
            "the rollback was stopped (Ctrl-C) while this item was undone; its state is kept, "
            "and the next rollback undoes it again",
        )

    def _unreadable(self, state: ItemState) -> dict[str, Any]:
        return self._attempt(
            "UnreadableJournal",
            f"{state.journal_problem}: its rollback was not called (it would undo from a "
            "journal that is not the one stored); undo the item by hand, then: migrate forget "
            f"{self.definition_id} --id {state.identity}",
        )

    def _returned(self, result: object, scope: Scope) -> dict[str, Any] | None:
        """The attempt of a plain rollback that returned *result* (``None``: it succeeded)."""
        if result is None:
            return None
        problem = _returned_problem(result, self.fn)
        return None if problem is None else self._failed(problem, scope)

    def _undo_sync(self, fn: Rollback, state: ItemState) -> dict[str, Any] | None:
        if state.journal_problem is not None:
            return self._unreadable(state)
        item, scope = self._item(state)
        token = _CURRENT.set(scope)
        try:
            result = fn(item, scope)
        except KeyboardInterrupt:
            return self._interrupted()
        except BaseException as error:  # noqa: BLE001 - sys.exit() in a rollback fails its item
            return self._failed(error, scope)
        finally:
            _CURRENT.reset(token)
        return self._returned(result, scope)

    def _undo_one_by_one(self, fn: Rollback, targets: Sequence[ItemState]) -> bool:
        """Undo *targets* in order in this thread; whether Ctrl-C stopped it (after the undo it
        came in, see `_stop_after_the_item`)."""
        note = self._note
        undo = self._undo_sync
        clock = time.monotonic
        with _stop_after_the_item() as asked:
            for state in targets:
                started = clock()
                attempt = undo(fn, state)
                note(state.identity, attempt, clock() - started)
                if self._stopping or asked.is_set():
                    return True
        return False

    # --- concurrently: async rollbacks as tasks, plain ones in threads ----------------------

    def _workers(self) -> DaemonPool:
        if self._pool is None:
            self._pool = DaemonPool(self.concurrency, f"migrate-rollback-{self.definition_id}")
        return self._pool

    def _from_call(
        self, call: concurrent.futures.Future[Any], scope: Scope
    ) -> dict[str, Any] | None:
        """The attempt of a plain rollback whose *call* (in a worker thread) ended."""
        error = call.exception()
        if error is None:
            return self._returned(call.result(), scope)
        if isinstance(error, KeyboardInterrupt):
            return self._interrupted()
        return self._failed(error, scope)

    async def _undo_concurrently(self, fn: Rollback, targets: Sequence[ItemState]) -> bool:
        """Undo *targets* with `concurrency` at once; whether Ctrl-C stopped it."""
        is_async = is_async_callable(fn)
        pending = iter(targets)
        #: worker -> the state it undoes, its scope, and its thread's call (plain rollbacks).
        running: dict[int, tuple[ItemState, Scope, concurrent.futures.Future[Any] | None]] = {}

        async def undo(worker: int, state: ItemState) -> dict[str, Any] | None:
            if state.journal_problem is not None:
                return self._unreadable(state)
            item, scope = self._item(state)
            _CURRENT.set(scope)  # each task has its own context
            running[worker] = (state, scope, None)
            try:
                if not is_async:
                    # The thread runs in a copy of this task's context: its scope and tally.
                    call = self._workers().submit(contextvars.copy_context().run, fn, item, scope)
                    running[worker] = (state, scope, call)
                    await _ended(call)
                    return self._from_call(call, scope)
                result = fn(item, scope)
                if inspect.isawaitable(result):
                    await result
            except KeyboardInterrupt:
                return self._interrupted()
            except asyncio.CancelledError:
                raise
            except BaseException as error:  # noqa: BLE001 - sys.exit() fails its item
                return self._failed(error, scope)
            return None

        async def work(worker: int) -> None:
            for state in pending:
                started = time.monotonic()
                attempt = await undo(worker, state)
                running.pop(worker, None)
                self._note(state.identity, attempt, time.monotonic() - started)
                if self._stopping:
                    return

        workers = [asyncio.ensure_future(work(n)) for n in range(self.concurrency)]
        try:
            await asyncio.gather(*workers)
        except (KeyboardInterrupt, asyncio.CancelledError):
            for task in workers:
                task.cancel()
            # A plain rollback stuck in its thread cannot be stopped: abandoned (a daemon), its
            # outcome ignored unless it ended already. Its state is kept: undone again later.
            if self._pool is not None:
                self._pool.abandon_all()
            for worker in sorted(running):
                state, scope, call = running[worker]
                attempt = (
                    self._from_call(call, scope)
                    if call is not None and call.done()
                    else self._interrupted()
                )
                if attempt is None:
                    self._deleted.append(state.identity)
                else:
                    self._add_attempt(state.identity, attempt)
            raise _Interrupted from None
        except BaseException:
            # A commit failed (the store): no undo goes on behind the error.
            for task in workers:
                task.cancel()
            if self._pool is not None:
                self._pool.abandon_all()
            raise
        return self._stopping


@contextlib.contextmanager
def _stop_after_the_item() -> Generator[threading.Event]:
    """
    While undos run one by one in the main thread: the first Ctrl-C (SIGINT) only asks to stop
    after the undo running, which then ends as it would (a half-done undo is the one thing a
    rollback must not leave behind); a second one raises `KeyboardInterrupt` at once, in it.
    Elsewhere (another thread, a handler of the program's own) SIGINT is left as it is.
    """
    asked = threading.Event()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield asked
        return

    def ask(signum: int, frame: object) -> None:
        asked.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, ask)
    try:
        yield asked
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _entries_of(error: BaseException) -> object:
    """The journal entries *error* says were undone (its ``entries`` attribute), if any."""
    try:
        return getattr(error, "entries", None)
    except Exception:  # noqa: BLE001 - an attribute that raises is one we cannot read
        return None


def _returned_problem(result: object, fn: Callable[..., Any] | None) -> TypeError | None:
    """Why a plain rollback's return value means it did not do its work, if it does."""
    if inspect.iscoroutine(result) or inspect.isawaitable(result):
        what = "a coroutine" if inspect.iscoroutine(result) else "an awaitable"
        advice = "declare it `async def` (an async rollback is awaited)"
    elif inspect.isgenerator(result) or inspect.isasyncgen(result):
        what = "a generator"
        advice = "a rollback does its work and returns: remove the yield"
    else:
        return None  # any other return value is ignored, as a process's is
    close = getattr(result, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()  # never run: closing it keeps Python from warning about it
    name = safe_text(getattr(fn, "__qualname__", type(fn).__qualname__), 200)
    return TypeError(
        f"the rollback {name} is not an async function but returned {what}, so its body never "
        f"ran: {advice}"
    )
