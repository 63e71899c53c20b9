"""
The memory store: the whole ``Store`` contract in this process, no file and no server.

``memory://NAME`` names a store that lives as long as the process: engines that open the same
name share it (as engines share a SQLite file), so closing an engine and opening another on the
name is a restart. It keeps SQLite's semantics rule for rule, on rows with SQLite's columns:
payloads are kept as the JSON text the engine wrote (never the caller's objects), times as epoch
ms, a task's id is never reused. Each method is one transaction under the store's lock and never
awaits inside it, so it is safe under asyncio, trio and threads, and it never suspends: no method
has anything to wait for. A transaction that raises writes nothing (its journal is undone).

Engines of this process that share a store hear each other's writes (``wake_hint``), as
PostgreSQL's NOTIFY tells engines of other processes.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import threading
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, Final, cast

import attrs

from effects.durable._failures import cancelled_attempt, dead_run, lost_worker
from effects.durable._records import FINISHED, Checkpoint, Event, Run, Task
from effects.durable._store import (
    ALL_RUNS,
    CheckpointWrite,
    ClaimedRun,
    EventValue,
    Message,
    NewEvent,
    NewMessage,
    NewRun,
    NewTask,
    RecoveryReport,
    RecurringRow,
    RecurringWrite,
    RunQuery,
    StaleTurnError,
    TaskOutcome,
    TurnCommit,
    listing,
)
from effects.durable._store.rows import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_WRITE_COLUMNS,
    EVENT_VALUE_COLUMNS,
    MESSAGE_COLUMNS,
    PRUNE_BATCH,
    RECURRING_COLUMNS,
    RUN_COLUMNS,
    RUN_TABLES,
    TASK_COLUMNS,
    TASK_INSERT_COLUMNS,
    checkpoint_of,
    checkpoint_values,
    dumps,
    error_text,
    event_value_of,
    events_of,
    leased_run,
    message_of,
    policy_text,
    run_of,
    tapped_events,
    task_of,
    task_values,
)
from effects.durable._store.rules import (
    REQUEUEABLE,
    Verdict,
    admission,
    admits,
    attempt_current,
    awaiting_liveness,
    cancel_action,
    cancel_mode,
    cancels_attempt,
    check_requeue,
    check_send,
    child_wakes,
    claim_holds,
    compensated,
    gives_up,
    lease_holds,
    message_wakes,
    outcome_applies,
    parked_until,
    prunable,
    recovery_verdict,
    redispatch,
    redispatchable,
    retrying,
    runnable,
    settled,
    stale_dispatch,
    wakes,
)
from effects.durable._store.rules import unserved as is_unserved
from effects.durable._store.taps import Observer, Taps, local_step_rows
from effects.durable._store.trail import (
    EventRow,
    admitted,
    cancel_requested,
    cancelled,
    event_rows,
    outcome_event,
    recovery_event,
    redispatched,
    requeued,
    result_discarded,
    started_data,
    waiting,
    withdrawn,
)

__all__ = ["MemoryStore", "parse_memory_url"]

_SCHEME: Final = "memory://"
#: Task statuses that hold a slot of a flow-control queue (``rows.SLOT_HOLDERS``).
_SLOT_HOLDERS: Final = frozenset({"queued", "claimed", "withdrawn"})
#: Task statuses of an attempt that is out: a worker runs it and may still report.
_OUT: Final = frozenset({"claimed", "withdrawn"})


def parse_memory_url(url: str) -> str:
    """
    The store name of ``memory://NAME``.

    Raises:
        ValueError: If *url* is not a ``memory://`` URL, names no store (a blank name), has
            options (``?`` or ``#``), or its name has a control character or a lone surrogate.
    """
    if not url.lower().startswith(_SCHEME):
        msg = f"a memory store URL looks like 'memory://NAME', got {url!r}"
        raise ValueError(msg)
    name = url[len(_SCHEME) :]
    if not name.strip():
        msg = f"the memory store URL {url!r} names no store: use 'memory://NAME'"
        raise ValueError(msg)
    if "?" in name or "#" in name:
        # Options would silently become part of the name and open a different, empty store.
        msg = f"the memory store URL {url!r} takes no options: use 'memory://NAME'"
        raise ValueError(msg)
    if not name.isprintable():
        msg = f"the memory store name in {url!r} has a control character or a lone surrogate"
        raise ValueError(msg)
    return name


# -- rows: one frozen value per row, with SQLite's columns ---------------------------------------


@attrs.frozen
class _RunRow:
    run_id: str
    workflow: str
    version: str
    status: str
    input: str
    output: str | None
    error: str | None
    created_at: int
    updated_at: int
    wake_at: int | None = None
    woken: bool = False
    lease_token: str | None = None
    lease_until: int | None = None
    recovery_attempts: int = 0
    cancel: str | None = None
    traceparent: str | None = None
    deadline: int | None = None
    parent_id: str | None = None


@attrs.frozen
class _CheckpointRow:
    run_id: str
    seq: int
    name: str
    kind: str
    step_id: str
    status: str
    attempts: int
    wake_at: int | None
    input: str | None
    output: str | None
    error: str | None
    final: bool
    retry_state: str | None
    grp: str
    queue: str | None
    dispatched_at: int | None
    created_at: int
    updated_at: int
    rev: int = 1
    progress: str | None = None
    heartbeat_at: int | None = None
    timeout_ms: int | None = None
    lease_ms: int | None = None
    redispatches: int = 0
    handler: str | None = None
    policy: str | None = None


@attrs.frozen
class _TaskRow:
    task_id: int
    run_id: str
    seq: int
    step_id: str
    name: str
    grp: str
    queue: str | None
    input: str
    attempt: int
    status: str
    available_at: int
    claimed_by: str | None
    claim_until: int | None
    redispatched: bool
    created_at: int
    queue_limit: int | None
    traceparent: str | None = None
    workflow: str | None = None


@attrs.frozen
class _EventRow:
    run_id: str
    id: int
    seq: int | None
    name: str
    level: str
    at: int
    data: str


@attrs.frozen
class _MessageRow:
    run_id: str
    n: int
    topic: str
    body: str
    message_id: str | None
    sent_at: int
    seq: int | None = None


@attrs.frozen
class _EventValueRow:
    run_id: str
    key: str
    value: str
    seq: int
    set_at: int


#: The columns of each table, as ``MemoryStore.dump`` shows them (SQLite's, in its order).
_COLUMNS: Final = {
    "runs": tuple(f.name for f in attrs.fields(_RunRow)),
    "checkpoints": tuple(f.name for f in attrs.fields(_CheckpointRow)),
    "tasks": tuple(f.name for f in attrs.fields(_TaskRow)),
    "events": tuple(f.name for f in attrs.fields(_EventRow)),
    "step_errors": ("run_id", "seq", "n", "error"),
    "recurring": RECURRING_COLUMNS,
    "messages": MESSAGE_COLUMNS,
    "event_values": EVENT_VALUE_COLUMNS,
}

_MISSING: Final = object()


@attrs.define(eq=False)
class _Hint:
    """An engine's ``wake_hint`` subscription: told only in the thread that subscribed."""

    store: MemoryStore
    callback: Callable[[], None]
    runs: bool
    tasks: bool
    due: Callable[[], None] | None
    thread: int


@attrs.define(eq=False)
class _Tables:
    """
    One named store's rows, and the lock every transaction on them holds. A write goes through
    ``put``, which journals the value it replaces, so a transaction that raises is undone.
    """

    runs: dict[str, _RunRow] = attrs.field(factory=dict[str, _RunRow])
    # By run, then by seq: a run's checkpoints are read together, on every claim.
    checkpoints: dict[str, dict[int, _CheckpointRow]] = attrs.field(
        factory=dict[str, dict[int, _CheckpointRow]]
    )
    # Each failed attempt's error (JSON text), oldest first: the ``step_errors`` rows.
    step_errors: dict[tuple[str, int], tuple[str, ...]] = attrs.field(
        factory=dict[tuple[str, int], tuple[str, ...]]
    )
    tasks: dict[int, _TaskRow] = attrs.field(factory=dict[int, _TaskRow])
    events: dict[str, tuple[_EventRow, ...]] = attrs.field(factory=dict[str, tuple[_EventRow, ...]])
    # Recurring workflows by name; a row holds SQLite's columns in their order.
    recurring: dict[str, RecurringRow] = attrs.field(factory=dict[str, RecurringRow])
    # ``rows.RUN_DATA_TABLES``, by run: its messages in send order, its event values by key.
    messages: dict[str, tuple[_MessageRow, ...]] = attrs.field(
        factory=dict[str, tuple[_MessageRow, ...]]
    )
    event_values: dict[str, dict[str, _EventValueRow]] = attrs.field(
        factory=dict[str, dict[str, _EventValueRow]]
    )
    last_task_id: int = 0
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    hints: list[_Hint] = attrs.field(factory=list[_Hint])
    journal: list[tuple[dict[Any, Any], Any, Any]] | None = None
    #: The events the transaction in progress wrote, while its store object is tapped.
    tap: list[EventRow] | None = None

    def put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        """Set ``table[key]`` to *value* (``None``: delete it), journaled."""
        if self.journal is not None:
            self.journal.append((table, key, table.get(key, _MISSING)))
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    def undo(self, journal: list[tuple[dict[Any, Any], Any, Any]]) -> None:
        for table, key, old in reversed(journal):
            if old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old

    def checkpoints_of(self, run_id: str) -> dict[int, _CheckpointRow]:
        return self.checkpoints.setdefault(run_id, {})

    def tasks_in_order(self) -> list[_TaskRow]:
        """Every task by id (an undone delete puts a task back at the end of the dict)."""
        return sorted(self.tasks.values(), key=lambda t: t.task_id)


# The named stores of this process. Module state, and necessarily: ``memory://NAME`` must reach
# the same rows from every engine of the process that names it (as a path reaches one file),
# and engines share nothing else. Guarded by ``_STORES_LOCK``, since engines may live in threads.
_STORES: dict[str, _Tables] = {}
_STORES_LOCK: Final = threading.Lock()


# -- reading rows as records ----------------------------------------------------------------------


def _run(row: _RunRow) -> Run:
    return run_of([getattr(row, c) for c in RUN_COLUMNS])


def _errors_text(tables: _Tables, run_id: str, seq: int) -> str:
    """The checkpoint's errors as the JSON text of a list, as SQLite's ``group_concat`` builds."""
    return "[" + ",".join(tables.step_errors.get((run_id, seq), ())) + "]"


def _checkpoint(tables: _Tables, row: _CheckpointRow) -> Checkpoint:
    return checkpoint_of(
        [
            _errors_text(tables, row.run_id, row.seq) if c == "errors" else getattr(row, c)
            for c in CHECKPOINT_COLUMNS
        ]
    )


def _task(row: _TaskRow, beat: _CheckpointRow | None) -> Task:
    """The task as claimed: its row, then its checkpoint's progress, timeout and lease."""
    after = (None, None, None) if beat is None else (beat.progress, beat.timeout_ms, beat.lease_ms)
    return task_of([*(getattr(row, c) for c in TASK_COLUMNS), *after])


def _unclaimed_of(run_id: str, seq: int) -> Callable[[_TaskRow], bool]:
    """Picks the attempts of checkpoint ``(run_id, seq)`` that no worker has claimed."""
    return lambda t: t.run_id == run_id and t.seq == seq and t.status in ("queued", "waiting")


# -- the store ------------------------------------------------------------------------------------


class MemoryStore:
    """
    The engine's store in this process's memory (see the module docstring for what it promises).

    Args:
        url: ``"memory://NAME"``; every store of this process opened with *NAME* shares its rows.

    Raises:
        ValueError: If *url* is not a memory store URL or names no store.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = parse_memory_url(url)
        self._tables: _Tables | None = None
        self._taps = Taps()

    def __repr__(self) -> str:
        return f"MemoryStore({self.url!r})"

    def tap(self, observer: Observer) -> Callable[[], None]:
        """Hear the events each transaction of this store object writes (see ``Store.tap``)."""
        return self._taps.add(observer)

    @classmethod
    def drop(cls, name: str) -> bool:
        """
        Forget the store named *name* and free its rows; whether there was one. Engines that
        have it open keep the rows they hold; the next ``open`` of the name starts empty.
        """
        with _STORES_LOCK:
            return _STORES.pop(name, None) is not None

    @classmethod
    def dump(cls, name: str) -> dict[str, tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
        """
        The rows of the store named *name*, for tests and tools that inspect them: each table of
        SQLite's schema as its column names and its rows (sorted by key), values as SQLite keeps
        them (JSON text, epoch ms, booleans as 0 or 1).

        Raises:
            LookupError: If no store of that name is in use.
        """
        with _STORES_LOCK:
            tables = _STORES.get(name)
        if tables is None:
            msg = f"no memory store named {name!r} in this process"
            raise LookupError(msg)
        with tables.lock:
            found: dict[str, list[tuple[Any, ...]]] = {
                "runs": [attrs.astuple(tables.runs[k]) for k in sorted(tables.runs)],
                "checkpoints": [
                    attrs.astuple(row)
                    for run_id in sorted(tables.checkpoints)
                    for _, row in sorted(tables.checkpoints[run_id].items())
                ],
                "tasks": [attrs.astuple(t) for t in tables.tasks_in_order()],
                "events": [
                    attrs.astuple(e)
                    for run_id in sorted(tables.events)
                    for e in tables.events[run_id]
                ],
                "step_errors": [
                    (run_id, seq, n, error)
                    for (run_id, seq), texts in sorted(tables.step_errors.items())
                    for n, error in enumerate(texts, 1)
                ],
                "recurring": [attrs.astuple(tables.recurring[k]) for k in sorted(tables.recurring)],
                "messages": [
                    attrs.astuple(m)
                    for run_id in sorted(tables.messages)
                    for m in tables.messages[run_id]
                ],
                "event_values": [
                    attrs.astuple(values[key])
                    for _, values in sorted(tables.event_values.items())
                    for key in sorted(values)
                ],
            }
        return {
            table: (_COLUMNS[table], [_sqlite_values(row) for row in rows])
            for table, rows in found.items()
        }

    @property
    def location(self) -> str:
        """``in this process's memory as 'NAME' (URL)``."""
        return f"in this process's memory as {self.name!r} ({self.url})"

    async def exists(self) -> bool:
        """Whether a store of this name is in use in this process (none is made here)."""
        with _STORES_LOCK:
            return self.name in _STORES

    async def wake_hint(
        self,
        callback: Callable[[], None],
        *,
        runs: bool = True,
        tasks: bool = True,
        due: Callable[[], None] | None = None,
    ) -> None:
        """
        Call *callback* (and first *due*, for a write that brings a time to come) when another
        engine of this thread writes runs (if *runs*) or tasks (if *tasks*) to this store.
        Engines in other threads are not told (their event loops are not this one's): polling
        finds their work.
        """
        tables = self._open_tables
        with tables.lock:
            tables.hints[:] = [h for h in tables.hints if h.store is not self]
            hint = _Hint(self, callback, runs, tasks, due, threading.get_ident())
            tables.hints.append(hint)

    async def open(self) -> None:
        """Take the rows of the store of this name, making it empty if it is not in use."""
        if self._tables is not None:
            return
        with _STORES_LOCK:
            self._tables = _STORES.setdefault(self.name, _Tables())

    async def close(self) -> None:
        """Let go of the rows (idempotent); they stay in the process for the next engine."""
        tables, self._tables = self._tables, None
        if tables is not None:
            with tables.lock:
                tables.hints[:] = [h for h in tables.hints if h.store is not self]

    # -- transactions -----------------------------------------------------------------------------

    @property
    def _open_tables(self) -> _Tables:
        if self._tables is None:
            msg = f"store {self.url} is not open (use the engine as `async with engine:`)"
            raise RuntimeError(msg)
        return self._tables

    @contextlib.contextmanager
    def _read(self) -> Generator[_Tables]:
        tables = self._open_tables
        with tables.lock:
            yield tables

    @contextlib.contextmanager
    def _write(self) -> Generator[_Tables]:
        """One transaction: every write of the block lands, or (it raised) none does."""
        tables = self._open_tables
        tapped: list[EventRow] | None = [] if self._taps.active else None
        with tables.lock:
            journal: list[tuple[dict[Any, Any], Any, Any]] = []
            tables.journal, last_task_id = journal, tables.last_task_id
            tables.tap = tapped
            try:
                yield tables
            except BaseException:
                tables.undo(journal)
                tables.last_task_id = last_task_id
                raise
            finally:
                tables.journal = None
                tables.tap = None
        # Told outside the lock: an observer may read this store.
        if tapped:
            self._taps.deliver(tapped_events(tapped))

    def _tell(self, *, runs: bool = False, tasks: bool = False, due: bool = False) -> None:
        """Wake the other engines of this thread that listen for what a write brought."""
        tables = self._tables
        if tables is None or not (runs or tasks):
            return
        thread = threading.get_ident()
        with tables.lock:
            told = [
                h
                for h in tables.hints
                if h.store is not self
                and h.thread == thread
                and ((runs and h.runs) or (tasks and h.tasks))
            ]
        for hint in told:
            if due and hint.due is not None:
                hint.due()
            hint.callback()

    # -- rules shared by the writes ---------------------------------------------------------------

    @staticmethod
    def _append_event(tables: _Tables, event: EventRow) -> None:
        """Append *event* to its run's trail: a run's events are numbered 1, 2, ... in commit
        order (SQLite's ``id``)."""
        run_id, seq, name, level, at, data = event
        trail = tables.events.get(run_id, ())
        row = _EventRow(run_id, len(trail) + 1, seq, name, level, at, data)
        tables.put(tables.events, run_id, (*trail, row))
        if tables.tap is not None:
            tables.tap.append(event)

    def _insert_events(self, tables: _Tables, events: Iterable[EventRow]) -> None:
        for event in events:
            self._append_event(tables, event)

    @staticmethod
    def _slots_held(tables: _Tables, queue: str) -> int:
        """Admission rule: queued, claimed and withdrawn attempts hold a slot of their queue."""
        return sum(
            1 for t in tables.tasks.values() if t.queue == queue and t.status in _SLOT_HOLDERS
        )

    def _enqueue(self, tables: _Tables, task: NewTask, now: int) -> None:
        """
        Insert *task* as ``rules.admission`` says: queued, or waiting (with ``step.queued``)
        when its flow-control queue has no free slot.
        """
        held = 0
        if task.queue is not None and task.queue_limit is not None:
            held = self._slots_held(tables, task.queue)
        status = admission(task.queue, task.queue_limit, held)
        tables.last_task_id += 1
        inserted = dict(zip(TASK_INSERT_COLUMNS, task_values(task, status, now), strict=True))
        row = _TaskRow(task_id=tables.last_task_id, claimed_by=None, claim_until=None, **inserted)
        tables.put(tables.tasks, row.task_id, row)
        if status == "waiting":
            self._append_event(
                tables, waiting(task.run_id, task.seq, task.attempt, task.queue, now)
            )

    def _admit_waiting(self, tables: _Tables, queue: str, now: int) -> None:
        """The oldest waiting attempts of *queue* take its free slots (``rules.admits``)."""
        while True:
            oldest = next(
                (t for t in tables.tasks_in_order() if t.queue == queue and t.status == "waiting"),
                None,
            )
            if oldest is None or not admits(self._slots_held(tables, queue), oldest.queue_limit):
                return
            queued = attrs.evolve(
                oldest, status="queued", available_at=max(oldest.available_at, now)
            )
            tables.put(tables.tasks, oldest.task_id, queued)
            self._append_event(
                tables, admitted(oldest.run_id, oldest.seq, oldest.attempt, queue, now)
            )

    def _release_slots(self, tables: _Tables, gone: Iterable[_TaskRow], now: int) -> None:
        """Admission rule: a deleted task frees its queue's slot for the oldest waiting one."""
        for queue in dict.fromkeys(t.queue for t in gone if t.queue is not None):
            self._admit_waiting(tables, queue, now)

    @staticmethod
    def _delete_tasks(tables: _Tables, which: Callable[[_TaskRow], bool]) -> list[_TaskRow]:
        """Delete the tasks *which* picks; return them, by id."""
        gone = [t for t in tables.tasks_in_order() if which(t)]
        for t in gone:
            tables.put(tables.tasks, t.task_id, None)
        return gone

    def _withdraw(self, tables: _Tables, run_id: str, seqs: Sequence[int], now: int) -> None:
        """
        Withdrawal rule: the attempts of the run's checkpoints at *seqs* never run. Queued or
        waiting ones are deleted; a claimed one is marked ``withdrawn`` (its result will be
        discarded). Each is a ``step.withdrawn`` event.
        """
        if not seqs:
            return
        wanted = set(seqs)
        deleted = self._delete_tasks(
            tables,
            lambda t: t.run_id == run_id and t.seq in wanted and t.status in ("queued", "waiting"),
        )
        claimed = [
            t
            for t in tables.tasks_in_order()
            if t.run_id == run_id and t.seq in wanted and t.status == "claimed"
        ]
        for t in claimed:
            tables.put(tables.tasks, t.task_id, attrs.evolve(t, status="withdrawn"))
        self._release_slots(tables, deleted, now)
        self._insert_events(
            tables,
            [
                withdrawn(run_id, t.seq, t.attempt, claimed=held, now=now)
                for rows, held in ((deleted, False), (claimed, True))
                for t in rows
            ],
        )

    def _apply_outcome(
        self,
        tables: _Tables,
        *,
        run_id: str,
        seq: int,
        attempt: int,
        outcome: TaskOutcome,
        now: int,
    ) -> bool:
        """
        Complete or fail the checkpoint and wake its run, as ``rules.outcome_applies`` says;
        ``False`` when the result no longer matters. A worker's last progress is kept unless
        the step is ``settled``.
        """
        cps = tables.checkpoints_of(run_id)
        row = cps.get(seq)
        if row is None or settled(row.status, row.final):
            return False
        if outcome.progress is not None:
            row = attrs.evolve(row, progress=outcome.progress)
            tables.put(cps, seq, row)
        if not outcome_applies(row.status, row.attempts, row.final, attempt=attempt, ok=outcome.ok):
            return False
        if outcome.error is None:
            done = attrs.evolve(
                row,
                status="completed",
                output=outcome.output,
                error=None,
                wake_at=None,
                final=False,
                updated_at=now,
                rev=row.rev + 1,
            )
            tables.put(cps, seq, done)
            # Other attempts of a step that has completed are moot.
            moot = self._delete_tasks(tables, lambda t: t.run_id == run_id and t.seq == seq)
            self._release_slots(tables, moot, now)
        else:
            text = error_text(outcome.error)
            failed = attrs.evolve(
                row,
                status="failed",
                error=text,
                final=False,
                wake_at=None,
                updated_at=now,
                rev=row.rev + 1,
            )
            tables.put(cps, seq, failed)
            assert text is not None
            errors = tables.step_errors.get((run_id, seq), ())
            tables.put(tables.step_errors, (run_id, seq), (*errors, text))
        self._append_event(tables, outcome_event(run_id, seq, attempt, outcome, now))
        self._wake_run(tables, run_id, now)
        return True

    @staticmethod
    def _wake_run(tables: _Tables, run_id: str, now: int) -> None:
        """
        Wake rule: a result marks its unfinished run woken (a running turn's suspension then
        makes it pending) and makes a suspended one pending.
        """
        run = tables.runs.get(run_id)
        if run is None or not wakes(run.status):
            return
        status = "pending" if run.status == "suspended" else run.status
        woken = attrs.evolve(run, woken=True, wake_at=None, updated_at=now, status=status)
        tables.put(tables.runs, run_id, woken)

    @staticmethod
    def _leased(tables: _Tables, run_id: str, token: str) -> _RunRow | None:
        """The run, if *token*'s lease on it holds (``rules.lease_holds``)."""
        run = tables.runs.get(run_id)
        if run is None or not lease_holds(run.status, run.lease_token, token):
            return None
        return run

    # -- runs -------------------------------------------------------------------------------------

    async def create_run(self, run: NewRun, events: Sequence[NewEvent]) -> Run | ClaimedRun | None:
        """Insert *run* (pending, or leased); return the existing run if the id is taken."""
        with self._write() as tables:
            taken = self._create_run(tables, run, events)
        if taken is not None:
            return taken
        if run.lease_token is None:
            self._tell(runs=True)
            return None
        return leased_run(run, run.lease_token)

    def _create_run(self, tables: _Tables, run: NewRun, events: Sequence[NewEvent]) -> Run | None:
        """Insert *run*; the run that has its id already, if one does (then nothing is written)."""
        taken = tables.runs.get(run.run_id)
        if taken is not None:
            return _run(taken)
        leased = run.lease_token is not None
        row = _RunRow(
            run_id=run.run_id,
            workflow=run.workflow,
            version=run.version,
            status="running" if leased else "pending",
            input=run.input,
            output=None,
            error=None,
            created_at=run.now,
            updated_at=run.now,
            lease_token=run.lease_token,
            lease_until=run.lease_until if leased else None,
            traceparent=run.traceparent,
            deadline=run.deadline,
            parent_id=run.parent_id,
        )
        tables.put(tables.runs, run.run_id, row)
        self._insert_events(tables, event_rows(run.run_id, events))
        return None

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        with self._read() as tables:
            row = tables.runs.get(run_id)
            return None if row is None else _run(row)

    async def list_runs(self, query: RunQuery = ALL_RUNS) -> list[Run]:
        """The runs *query* selects, newest first."""
        with self._read() as tables:
            found = self._selected(tables, query)
            found.sort(key=lambda r: r.run_id)
            found.sort(key=lambda r: r.created_at, reverse=True)
            # As SQL's LIMIT: a negative one is no limit.
            return [_run(r) for r in (found if query.limit < 0 else found[: query.limit])]

    async def count_runs(self, query: RunQuery = ALL_RUNS) -> dict[str, int]:
        """How many runs *query*'s filters select, by status (limit and after ignored)."""
        with self._read() as tables:
            counts: dict[str, int] = {}
            for run in self._selected(tables, attrs.evolve(query, after=None)):
                counts[run.status] = counts.get(run.status, 0) + 1
            return counts

    @staticmethod
    def _selected(tables: _Tables, query: RunQuery) -> list[_RunRow]:
        """The rows *query*'s filters select, in no order."""
        stale_before = query.stale_before
        after = query.after
        retrying_at = query.retrying_at
        served = dict(query.unserved or ())

        def stale(run: _RunRow) -> bool:
            assert stale_before is not None
            return run.status == "suspended" and any(
                stale_dispatch(cp.kind, cp.status, cp.dispatched_at, stale_before)
                for cp in tables.checkpoints.get(run.run_id, {}).values()
            )

        def comes_after(run: _RunRow) -> bool:
            assert after is not None
            return (-run.created_at, run.run_id) > (-after[0], after[1])

        def is_retrying(run: _RunRow) -> bool:
            assert retrying_at is not None
            return any(
                retrying(cp.status, cp.final, cp.wake_at, retrying_at)
                for cp in tables.checkpoints.get(run.run_id, {}).values()
            )

        # ``listing.filters``'s clauses, in their order, as predicates on a row.
        clauses: tuple[Callable[[_RunRow], bool], ...] = (
            lambda run: run.status == query.status,
            lambda run: run.workflow == query.workflow,
            stale,
            comes_after,
            lambda run: run.run_id.startswith(query.id_prefix or ""),
            is_retrying,
            lambda run: run.status in REQUEUEABLE,
            lambda run: is_unserved(run.status, run.workflow, run.version, served),
        )
        applied = [f for f, _ in listing.given(clauses, query.filter_values())]
        return [run for run in tables.runs.values() if all(f(run) for f in applied)]

    async def retrying(self, run_ids: Sequence[str], *, now: int) -> set[str]:
        """Which of *run_ids* have a retrying checkpoint at *now*."""
        with self._read() as tables:
            return {
                run_id
                for run_id in run_ids
                if any(
                    retrying(cp.status, cp.final, cp.wake_at, now)
                    for cp in tables.checkpoints.get(run_id, {}).values()
                )
            }

    async def queue_stats(self) -> dict[str, tuple[int, int]]:
        """Each queue that has attempts: ``(in_use, waiting)``."""
        with self._read() as tables:
            stats: dict[str, tuple[int, int]] = {}
            for task in tables.tasks.values():
                if task.queue is None:
                    continue
                in_use, waiting = stats.get(task.queue, (0, 0))
                stats[task.queue] = (
                    in_use + (task.status in _SLOT_HOLDERS),
                    waiting + (task.status == "waiting"),
                )
            return dict(sorted(stats.items()))

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints by sequence number."""
        with self._read() as tables:
            return self._checkpoints(tables, run_id)

    @staticmethod
    def _checkpoints(tables: _Tables, run_id: str) -> list[Checkpoint]:
        cps = tables.checkpoints.get(run_id, {})
        return [_checkpoint(tables, cps[seq]) for seq in sorted(cps)]

    async def events(self, run_id: str) -> list[Event]:
        """The run's events, oldest first."""
        with self._read() as tables:
            trail = tables.events.get(run_id, ())
            return events_of(run_id, [(e.name, e.level, e.at, e.seq, e.data) for e in trail])

    async def get_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        """One checkpoint, read afresh."""
        with self._read() as tables:
            row = tables.checkpoints.get(run_id, {}).get(seq)
            return None if row is None else _checkpoint(tables, row)

    # -- turns ------------------------------------------------------------------------------------

    async def claim_runs(
        self,
        *,
        workflows: Sequence[tuple[str, str]],
        now: int,
        lease_until: int,
        owner: str,
        limit: int,
        known: Mapping[str, int] | None = None,
    ) -> list[ClaimedRun]:
        """
        Take up to *limit* ``rules.runnable`` runs of *workflows*, oldest change first, each
        with a fresh lease token (see ``Store.claim_runs`` for *known*).
        """
        passed: Mapping[str, int] = {} if known is None else known
        if not workflows or limit <= 0:
            return []
        wanted = set(workflows)
        with self._write() as tables:
            ready = [
                run
                for run in tables.runs.values()
                if (run.workflow, run.version) in wanted and runnable(run.status, run.wake_at, now)
            ]
            ready.sort(key=lambda r: (r.updated_at, r.run_id))
            claimed: list[ClaimedRun] = []
            for row in ready[:limit]:
                token = f"{owner}:{secrets.token_hex(6)}"
                leased = attrs.evolve(
                    row, status="running", lease_token=token, lease_until=lease_until, woken=False
                )
                tables.put(tables.runs, row.run_id, leased)
                run = attrs.evolve(_run(row), status="running")
                since = passed.get(row.run_id, 0)
                if since <= 0:
                    claimed.append(ClaimedRun(run, token, self._checkpoints(tables, row.run_id)))
                    continue
                cps = tables.checkpoints.get(row.run_id, {})
                upto = [cps[seq].rev for seq in cps if seq <= since]
                after = [_checkpoint(tables, cps[seq]) for seq in sorted(cps) if seq > since]
                claimed.append(ClaimedRun(run, token, after, since, (len(upto), sum(upto))))
            return claimed

    async def renew_lease(self, run_id: str, token: str, lease_until: int) -> bool:
        """Extend the lease *token* holds; ``False`` if it no longer holds the run."""
        with self._write() as tables:
            run = self._leased(tables, run_id, token)
            if run is None:
                return False
            tables.put(tables.runs, run_id, attrs.evolve(run, lease_until=lease_until))
            return True

    async def commit_turn(self, commit: TurnCommit) -> None:
        """
        Turn rule: apply *commit* if its lease still holds the run and every checkpoint it
        updates is at the revision it read; else raise ``StaleTurnError`` and write nothing.
        """
        with self._write() as tables:
            woke = self._commit_turn(tables, commit)
        adv = commit.advance
        self._tell(
            runs=woke
            or bool(commit.runs)
            or adv.action == "release"
            or (adv.action == "suspend" and adv.wake_at is not None),
            tasks=bool(commit.tasks),
            due=adv.wake_at is not None or any(t.available_at > commit.now for t in commit.tasks),
        )

    def _commit_turn(self, tables: _Tables, commit: TurnCommit) -> bool:
        """Apply *commit*; whether it woke the run's parent."""
        run = self._leased(tables, commit.run_id, commit.token)
        if run is None:
            raise StaleTurnError(f"run {commit.run_id}: the lease was taken over")
        self._advance(tables, run, commit)
        woke = commit.advance.action == "finish" and self._wake_parent(tables, run, commit.now)
        for child in commit.runs:
            taken = self._create_run(tables, child.run, child.events)
            if taken is not None and taken.parent_id != commit.run_id:
                msg = f"run {commit.run_id}: child run id {child.run.run_id!r} was taken meanwhile"
                raise StaleTurnError(msg)
        for take in commit.taken:
            self._take(tables, commit.run_id, take.n, take.seq)
        for value in commit.values:
            values = tables.event_values.get(commit.run_id, {})
            row = _EventValueRow(commit.run_id, value.key, value.value, value.seq, commit.now)
            tables.put(tables.event_values, commit.run_id, {**values, value.key: row})
        cps = tables.checkpoints_of(commit.run_id)
        for write in commit.checkpoints:
            self._write_checkpoint(tables, cps, commit, write)
        self._insert_events(tables, event_rows(commit.run_id, commit.events))
        for task in commit.tasks:
            # Withdraw older attempts nobody claimed: only the newest may run.
            unclaimed = self._delete_tasks(tables, _unclaimed_of(task.run_id, task.seq))
            self._enqueue(tables, task, commit.now)
            self._release_slots(tables, unclaimed, commit.now)
        return woke

    @staticmethod
    def _take(tables: _Tables, run_id: str, n: int, seq: int) -> None:
        """A turn takes message *n* of the run for its recv at *seq*, if it is still unread."""
        trail = tables.messages.get(run_id, ())
        index = next((i for i, m in enumerate(trail) if m.n == n and m.seq is None), None)
        if index is None:
            raise StaleTurnError(f"run {run_id}: message {n} was taken meanwhile")
        taken = attrs.evolve(trail[index], seq=seq)
        tables.put(tables.messages, run_id, (*trail[:index], taken, *trail[index + 1 :]))

    @staticmethod
    def _wake_parent(tables: _Tables, run: _RunRow, now: int) -> bool:
        """The parent of finishing *run* wakes as ``rules.child_wakes`` says; whether it did."""
        parent = None if run.parent_id is None else tables.runs.get(run.parent_id)
        if parent is None:
            return False
        waited = dumps(run.run_id)  # the input of the child checkpoint that waits for it
        awaits = any(
            cp.kind == "child" and cp.status == "pending" and cp.input == waited
            for cp in tables.checkpoints.get(parent.run_id, {}).values()
        )
        if not child_wakes(parent.status, awaits_child=awaits):
            return False
        MemoryStore._wake_run(tables, parent.run_id, now)
        return True

    def _write_checkpoint(
        self,
        tables: _Tables,
        cps: dict[int, _CheckpointRow],
        commit: TurnCommit,
        write: CheckpointWrite,
    ) -> None:
        """Checkpoint rule: insert a new row, or update one at the revision the turn read."""
        cp = write.checkpoint
        old = cps.get(cp.seq)
        if write.expected_rev is None and old is not None:
            msg = f"run {commit.run_id}: checkpoint {cp.seq} was written meanwhile"
            raise StaleTurnError(msg)
        if write.expected_rev is not None and (old is None or old.rev != write.expected_rev):
            msg = f"run {commit.run_id}: checkpoint {cp.seq} changed meanwhile"
            raise StaleTurnError(msg)
        written = checkpoint_values(write, commit.now)
        row = _CheckpointRow(
            run_id=commit.run_id,
            seq=cp.seq,
            created_at=cp.created_at if old is None else old.created_at,
            rev=1 if old is None else old.rev + 1,
            # A turn never writes a worker's progress: an update keeps it, and the policy.
            progress=None if old is None else old.progress,
            policy=policy_text(cp) if old is None else old.policy,
            **dict(zip(CHECKPOINT_WRITE_COLUMNS, written, strict=True)),
        )
        tables.put(cps, cp.seq, row)
        if cp.stored_errors() is None:
            # Given as values: written again whole.
            texts = tuple(dumps(e.to_json()) for e in cp.errors)
            tables.put(tables.step_errors, (commit.run_id, cp.seq), texts or None)
        if gives_up(cp):
            self._withdraw(tables, commit.run_id, (cp.seq,), commit.now)

    @staticmethod
    def _advance(tables: _Tables, run: _RunRow, commit: TurnCommit) -> None:
        """
        Advance rule: what the turn does to its run (the lease was checked). ``continue``
        renews the lease (or, without a new one, writes nothing); ``suspend`` makes the run
        suspended, or pending if a result woke it meanwhile; ``finish`` ends it; ``release``
        gives it back.
        """
        adv = commit.advance
        if adv.action == "continue":
            if adv.lease_until is None:
                return
            new = attrs.evolve(run, lease_until=adv.lease_until, updated_at=commit.now)
        elif adv.action == "suspend":
            new = attrs.evolve(
                run,
                status="pending" if run.woken else "suspended",
                wake_at=adv.wake_at,
                lease_token=None,
                lease_until=None,
                updated_at=commit.now,
            )
        elif adv.action == "finish":
            assert adv.status is not None
            new = attrs.evolve(
                run,
                status=adv.status,
                output=adv.output,
                error=error_text(adv.error),
                wake_at=None,
                lease_token=None,
                lease_until=None,
                updated_at=commit.now,
            )
        else:
            new = attrs.evolve(
                run, status="pending", lease_token=None, lease_until=None, updated_at=commit.now
            )
        tables.put(tables.runs, run.run_id, new)

    async def record_local_step(
        self,
        run_id: str,
        token: str,
        *,
        seq: int,
        name: str,
        output: str,
        started: int,
        now: int,
        policy: str | None = None,
    ) -> None:
        """A local step that succeeded on its first attempt (see ``Store.record_local_step``)."""
        with self._write() as tables:
            if self._leased(tables, run_id, token) is None:
                raise StaleTurnError(f"run {run_id}: the lease was taken over")
            cps = tables.checkpoints_of(run_id)
            if seq in cps:
                msg = f"run {run_id}: checkpoint {seq} was written meanwhile"
                raise StaleTurnError(msg)
            row = _CheckpointRow(
                run_id=run_id,
                seq=seq,
                name=name,
                kind="local",
                step_id=f"{run_id}:{seq}",
                status="completed",
                attempts=1,
                wake_at=None,
                input=None,
                output=output,
                error=None,
                final=False,
                retry_state=None,
                grp="default",
                queue=None,
                dispatched_at=None,
                created_at=started,
                updated_at=now,
                policy=policy,
            )
            tables.put(cps, seq, row)
            if tables.tap is not None:
                tables.tap.extend(local_step_rows(run_id, seq, started, now))

    # -- workers ----------------------------------------------------------------------------------

    async def claim_tasks(
        self, *, groups: Sequence[str], now: int, claim_until: int, worker: str, limit: int
    ) -> list[Task]:
        """
        Claim rule: take up to *limit* queued tasks of *groups* available at *now*, by id. The
        claim is the worker's pickup beat on the checkpoint of the attempt it awaits (and
        renews its lost-dispatch lease), with ``step.started``.
        """
        if not groups or limit <= 0:
            return []
        wanted = set(groups)
        with self._write() as tables:
            ready = [
                t
                for t in tables.tasks_in_order()
                if t.status == "queued" and t.grp in wanted and t.available_at <= now
            ][:limit]
            claimed: list[Task] = []
            for row in ready:
                tables.put(
                    tables.tasks,
                    row.task_id,
                    attrs.evolve(row, status="claimed", claimed_by=worker, claim_until=claim_until),
                )
                cps = tables.checkpoints_of(row.run_id)
                cp = cps.get(row.seq)
                beat = None
                if cp is not None and attempt_current(cp.status, cp.attempts, row.attempt):
                    beat = attrs.evolve(
                        cp,
                        status="running",
                        heartbeat_at=now,
                        wake_at=cp.wake_at if cp.lease_ms is None else now + cp.lease_ms,
                        updated_at=now,
                        rev=cp.rev + 1,
                    )
                    tables.put(cps, row.seq, beat)
                claimed.append(_task(row, beat))
            self._insert_events(
                tables,
                [
                    (
                        t.run_id,
                        t.seq,
                        "step.started",
                        "info",
                        now,
                        dumps(started_data(t.attempt, worker, redispatched=t.redispatched)),
                    )
                    for t in claimed
                ],
            )
            return claimed

    async def renew_claim(self, task_id: int, worker: str, claim_until: int) -> bool:
        """Extend a claim *worker* holds; ``False`` if it no longer holds it."""
        with self._write() as tables:
            row = tables.tasks.get(task_id)
            if row is None or not claim_holds(row.status, row.claimed_by, worker):
                return False
            tables.put(tables.tasks, task_id, attrs.evolve(row, claim_until=claim_until))
            return True

    async def heartbeat(
        self, task: Task, *, now: int, progress: str | None, lease_until: int | None
    ) -> bool:
        """Persist a worker's beat (see ``Store.heartbeat``)."""
        with self._write() as tables:
            cps = tables.checkpoints_of(task.run_id)
            cp = cps.get(task.seq)
            if cp is None or not attempt_current(cp.status, cp.attempts, task.attempt):
                return False
            renews = cp.lease_ms is not None and lease_until is not None
            beat = attrs.evolve(
                cp,
                heartbeat_at=now,
                progress=cp.progress if progress is None else progress,
                wake_at=lease_until if renews else cp.wake_at,
                updated_at=now,
                rev=cp.rev + 1,
            )
            tables.put(cps, task.seq, beat)
            return True

    async def release_claim(self, task_id: int, worker: str, *, now: int) -> None:
        """Put a claimed task back in the queue (a withdrawn one goes, freeing its slot)."""
        with self._write() as tables:
            row = tables.tasks.get(task_id)
            if row is None or row.claimed_by != worker:
                return
            if claim_holds(row.status, row.claimed_by, worker):
                back = attrs.evolve(row, status="queued", claimed_by=None, claim_until=None)
                tables.put(tables.tasks, task_id, back)
            elif row.status == "withdrawn":
                tables.put(tables.tasks, task_id, None)
                self._release_slots(tables, [row], now)
        self._tell(tasks=True)

    async def record_result(self, task: Task, worker: str, outcome: TaskOutcome, now: int) -> bool:
        """
        Result rule (see ``Store.record_result``): the worker's task row goes, freeing its slot;
        a withdrawn attempt's result is discarded with ``step.result_discarded``.
        """
        with self._write() as tables:
            row = tables.tasks.get(task.task_id)
            own = row is not None and row.claimed_by == worker
            if own:
                assert row is not None
                tables.put(tables.tasks, row.task_id, None)
                self._release_slots(tables, [row], now)
                if row.status == "withdrawn":
                    self._append_event(tables, result_discarded(task, outcome, now))
                    return False
            landed = self._apply_outcome(
                tables,
                run_id=task.run_id,
                seq=task.seq,
                attempt=task.attempt,
                outcome=outcome,
                now=now,
            )
        self._tell(runs=landed)
        return landed

    async def redispatch_pending(self, run_id: str, *, now: int) -> int:
        """
        Redispatch rule: enqueue every pending dispatched step of the run again with attempt
        + 1 (its queued older attempts withdrawn, its queue's limit kept); return how many.
        """
        with self._write() as tables:
            count = 0
            cps = tables.checkpoints_of(run_id)
            run_row = tables.runs.get(run_id)
            carried = None if run_row is None else _run(run_row)
            for step in filter(redispatchable, self._checkpoints(tables, run_id)):
                seq, row = step.seq, cps[step.seq]
                again = attrs.evolve(
                    row,
                    status="pending",
                    attempts=step.attempts + 1,
                    dispatched_at=now,
                    redispatches=row.redispatches + 1,
                    wake_at=row.wake_at if row.lease_ms is None else now + row.lease_ms,
                    updated_at=now,
                    rev=row.rev + 1,
                )
                tables.put(cps, seq, again)
                unclaimed = self._delete_tasks(tables, _unclaimed_of(run_id, seq))
                limit = next((t.queue_limit for t in unclaimed if t.queue_limit is not None), None)
                if limit is None:
                    held = next(
                        (t for t in tables.tasks_in_order() if t.run_id == run_id and t.seq == seq),
                        None,
                    )
                    limit = None if held is None else held.queue_limit
                self._enqueue(tables, redispatch(step, now, limit, carried), now)
                self._release_slots(tables, unclaimed, now)
                self._append_event(tables, redispatched(run_id, seq, step.attempts + 1, now))
                count += 1
        self._tell(tasks=count > 0)
        return count

    # -- maintenance ------------------------------------------------------------------------------

    async def recover(
        self, *, now: int, max_recovery_attempts: int | None, reconcile_ms: int
    ) -> RecoveryReport:
        """Recover expired run leases and expired task claims (see ``Store.recover``)."""
        with self._write() as tables:
            recovered: list[str] = []
            dead: list[str] = []
            lost: list[str] = []
            expired = [
                r
                for r in tables.runs.values()
                if r.status == "running" and r.lease_until is not None and r.lease_until < now
            ]
            for run in expired:
                verdict = self._recover_run(tables, run, now, max_recovery_attempts, reconcile_ms)
                (dead if verdict == "dead" else recovered).append(run.run_id)
            for task in tables.tasks_in_order():
                if task.status != "claimed" or task.claim_until is None or task.claim_until >= now:
                    continue
                tables.put(tables.tasks, task.task_id, None)
                self._release_slots(tables, [task], now)
                self._apply_outcome(
                    tables,
                    run_id=task.run_id,
                    seq=task.seq,
                    attempt=task.attempt,
                    outcome=TaskOutcome(error=lost_worker()),
                    now=now,
                )
                lost.append(task.step_id)
            # A withdrawn attempt whose worker went silent: its slot is free, nothing else.
            gone = self._delete_tasks(
                tables,
                lambda t: (
                    t.status == "withdrawn" and t.claim_until is not None and t.claim_until < now
                ),
            )
            self._release_slots(tables, gone, now)
        self._tell(runs=bool(recovered or lost), due=bool(recovered))
        return RecoveryReport(recovered, dead, lost)

    def _recover_run(
        self,
        tables: _Tables,
        run: _RunRow,
        now: int,
        max_recovery_attempts: int | None,
        reconcile_ms: int,
    ) -> Verdict:
        """Write what ``rules.recovery_verdict`` makes of *run*, whose lease expired."""
        count = run.recovery_attempts
        # A liveness step (``timeout_ms``) still awaited: its worker may still report.
        awaiting = any(
            awaiting_liveness(cp.kind, cp.status, cp.timeout_ms)
            for cp in tables.checkpoints.get(run.run_id, {}).values()
        )
        verdict = recovery_verdict(
            awaiting_liveness=awaiting,
            recovery_attempts=count,
            max_recovery_attempts=max_recovery_attempts,
        )
        cleared = attrs.evolve(run, lease_token=None, lease_until=None, updated_at=now)
        wake_at = now + reconcile_ms
        if verdict == "reconciling":
            parked = parked_until(wake_at, run.deadline)
            after = attrs.evolve(cleared, status="suspended", wake_at=parked)
        elif verdict == "dead":
            error = error_text(dead_run(count, max_recovery_attempts))
            after = attrs.evolve(cleared, status="dead", error=error)
        else:
            after = attrs.evolve(cleared, status="pending", recovery_attempts=count + 1)
        tables.put(tables.runs, run.run_id, after)
        if verdict == "dead":
            self._wake_parent(tables, run, now)
        self._append_event(tables, recovery_event(run.run_id, verdict, count, wake_at, now))
        return verdict

    async def next_due(self, now: int) -> int | None:
        """
        The earliest epoch ms after *now* at which a timer, lease or claim comes due. A lease or
        claim held until T expires at T + 1 (recovery takes ``until < now``).
        """
        with self._read() as tables:
            times = itertools.chain(
                (
                    r.wake_at
                    for r in tables.runs.values()
                    if r.status == "suspended" and r.wake_at is not None and r.wake_at > now
                ),
                (
                    r.lease_until + 1
                    for r in tables.runs.values()
                    if r.status == "running" and r.lease_until is not None and r.lease_until >= now
                ),
                (
                    t.available_at
                    for t in tables.tasks.values()
                    if t.status == "queued" and t.available_at > now
                ),
                (
                    t.claim_until + 1
                    for t in tables.tasks.values()
                    if t.status in ("claimed", "withdrawn")
                    and t.claim_until is not None
                    and t.claim_until >= now
                ),
            )
            return min(times, default=None)

    async def requeue(self, run_id: str, now: int) -> Run:
        """
        Requeue rule: reset the run's failed checkpoints to a fresh first attempt (a remote one
        due now, its attempts withdrawn) and make the run pending.

        Raises:
            LookupError: If there is no such run.
            ValueError: If the run is not failed, dead or cancelled.
        """
        with self._write() as tables:
            run = tables.runs.get(run_id)
            if run is None:
                msg = f"no run with id {run_id!r}"
                raise LookupError(msg)
            cps = tables.checkpoints_of(run_id)
            check_requeue(_run(run), unwound=any(compensated(cp.name) for cp in cps.values()))
            failed = [seq for seq in sorted(cps) if cps[seq].status == "failed"]
            # Attempts still queued or running for the steps reset here must not complete
            # their fresh first attempt: they are withdrawn.
            self._withdraw(tables, run_id, [s for s in failed if cps[s].kind == "remote"], now)
            for seq in failed:
                cp = cps[seq]
                local = cp.kind == "local"
                reset = attrs.evolve(
                    cp,
                    status="pending" if local else "failed",
                    attempts=0,
                    final=False,
                    error=None,
                    retry_state=None,
                    wake_at=None if local else now,
                    updated_at=now,
                    rev=cp.rev + 1,
                )
                tables.put(cps, seq, reset)
                tables.put(tables.step_errors, (run_id, seq), None)
            fresh = attrs.evolve(
                run,
                status="pending",
                output=None,
                error=None,
                wake_at=None,
                woken=False,
                lease_token=None,
                lease_until=None,
                recovery_attempts=0,
                cancel=None,
                deadline=None,
                updated_at=now,
            )
            tables.put(tables.runs, run_id, fresh)
            self._append_event(tables, requeued(run_id, len(failed), now))
        self._tell(runs=True)
        return _run(fresh)

    async def unserved(self, served: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """How many runs wait for each unserved ``(workflow, version)`` (``rules.unserved``)."""
        wanted = dict(served)
        counts: dict[tuple[str, str], int] = {}
        with self._read() as tables:
            for run in tables.runs.values():
                if is_unserved(run.status, run.workflow, run.version, wanted):
                    key = (run.workflow, run.version)
                    counts[key] = counts.get(key, 0) + 1
        return counts

    async def prune(self, *, before: int, statuses: Sequence[str], dry_run: bool = False) -> int:
        """Delete (or count) the runs of *statuses* last changed before *before* (see ``Store``)."""
        wanted = frozenset(statuses)
        pruned = 0
        while True:
            with self._write() as tables:
                out = {t.run_id for t in tables.tasks.values() if t.status in _OUT}
                found = [
                    r.run_id
                    for r in tables.runs.values()
                    if prunable(
                        r.status,
                        r.updated_at,
                        statuses=wanted,
                        before=before,
                        attempt_out=r.run_id in out,
                    )
                ]
                if dry_run:
                    return len(found)
                picked = frozenset(found[:PRUNE_BATCH])
                for name in RUN_TABLES:
                    _delete_rows_of(tables, getattr(tables, name), picked)
                for run_id in picked:
                    tables.put(tables.runs, run_id, None)
            pruned += len(picked)
            if len(picked) < PRUNE_BATCH:
                return pruned

    async def cancel_run(self, run_id: str, *, compensate: bool, now: int) -> Run:
        """
        Cancel rule (see ``Store.cancel_run``): ``rules.cancel_action`` decides; the attempts
        ``rules.cancels_attempt`` picks are withdrawn and their steps failed as cancelled; every
        unfinished run below it is cancelled the same way.

        Raises:
            LookupError: If there is no such run.
            ValueError: If the run is finished.
        """
        with self._write() as tables:
            run = tables.runs.get(run_id)
            if run is None:
                msg = f"no run with id {run_id!r}"
                raise LookupError(msg)
            woke = False
            action = self._cancel(tables, run, compensate=compensate, now=now)
            if action != "keep":
                for below in self._descendants(tables, run_id):
                    if below.status not in FINISHED:
                        self._cancel(tables, below, compensate=compensate, now=now)
                woke = True
            after = tables.runs[run_id]
        self._tell(runs=woke)
        return _run(after)

    # -- recurring workflows ----------------------------------------------------------------------

    async def recurring(self, names: Sequence[str] | None = None) -> list[RecurringRow]:
        """The rows of the recurring workflows *names* (``None``: every one), by name."""
        with self._read() as tables:
            wanted = tables.recurring if names is None else set(names)
            return [tables.recurring[n] for n in sorted(wanted) if n in tables.recurring]

    async def due_recurring(self, now: int) -> list[RecurringRow]:
        """
        The recurring rows with ``next_at <= now``, earliest first. (A scan: the memory store
        is for tests, and keeps no index.)
        """
        with self._read() as tables:
            due = [
                r for r in tables.recurring.values() if r.next_at is not None and r.next_at <= now
            ]
        return sorted(due, key=lambda r: (r.next_at, r.name))

    async def write_recurring(self, writes: Sequence[RecurringWrite]) -> list[bool]:
        """Each write a compare-and-set with its runs, all in one transaction (see ``Store``)."""
        landed: list[bool] = []
        with self._write() as tables:
            for write in writes:
                stored = tables.recurring.get(write.row.name)
                if write.expected_rev is None:
                    held = stored is None
                    row = attrs.evolve(write.row, rev=1)
                else:
                    held = stored is not None and stored.rev == write.expected_rev
                    row = attrs.evolve(
                        write.row,
                        rev=write.expected_rev + 1,
                        created_at=write.row.created_at if stored is None else stored.created_at,
                    )
                landed.append(held)
                if not held:
                    continue
                tables.put(tables.recurring, row.name, row)
                for run, started in write.starts:
                    self._create_run(tables, run, (started,))
        if any(landed[i] and w.starts for i, w in enumerate(writes)):
            self._tell(runs=True)
        return landed

    @staticmethod
    def _descendants(tables: _Tables, run_id: str) -> list[_RunRow]:
        """Every run below *run_id* (its children, theirs, ...), oldest first."""
        found: dict[str, _RunRow] = {}
        frontier = {run_id}
        while frontier:
            below = [
                r for r in tables.runs.values() if r.parent_id in frontier and r.run_id not in found
            ]
            found.update((r.run_id, r) for r in below)
            frontier = {r.run_id for r in below}
        return sorted(found.values(), key=lambda r: (r.created_at, r.run_id))

    def _cancel(self, tables: _Tables, run: _RunRow, *, compensate: bool, now: int) -> str:
        """Cancel *run* (unfinished) as ``rules.cancel_action`` says; return the action."""
        run_id = run.run_id
        record = _run(run)
        cps = tables.checkpoints_of(run_id)
        action = cancel_action(
            record,
            compensate=compensate,
            has_completed=any(cp.status == "completed" for cp in cps.values()),
        )
        if action == "keep":
            return action
        keep_undos = action == "request"
        stopped = [
            seq
            for seq, cp in sorted(cps.items())
            if cancels_attempt(_checkpoint(tables, cp), keep_undos=keep_undos)
        ]
        self._withdraw(tables, run_id, stopped, now)
        text = error_text(cancelled_attempt())
        assert text is not None
        for seq in stopped:
            cp = cps[seq]
            failed = attrs.evolve(
                cp,
                status="failed",
                error=text,
                final=False,
                wake_at=None,
                updated_at=now,
                rev=cp.rev + 1,
            )
            tables.put(cps, seq, failed)
            errors = tables.step_errors.get((run_id, seq), ())
            tables.put(tables.step_errors, (run_id, seq), (*errors, text))
        cleared = attrs.evolve(
            run,
            cancel=cancel_mode(record, compensate=compensate),
            wake_at=None,
            lease_token=None,
            lease_until=None,
            updated_at=now,
        )
        if action == "cancel":
            after = attrs.evolve(cleared, status="cancelled", error=None, woken=False)
            self._append_event(tables, cancelled(run_id, compensate=compensate, now=now))
        else:
            after = attrs.evolve(cleared, status="pending")
            self._append_event(tables, cancel_requested(run_id, now))
        tables.put(tables.runs, run_id, after)
        if action == "cancel":
            self._wake_parent(tables, after, now)
        return action

    # -- messages, events and children ------------------------------------------------------------

    async def send(self, message: NewMessage) -> bool:
        """Store *message* and wake its run (see ``Store.send``)."""
        run_id = message.run_id
        with self._write() as tables:
            run = tables.runs.get(run_id)
            if run is None:
                msg = f"no run with id {run_id!r}"
                raise LookupError(msg)
            check_send(_run(run))
            trail = tables.messages.get(run_id, ())
            if message.message_id is not None and any(
                m.message_id == message.message_id for m in trail
            ):
                return False
            n = trail[-1].n + 1 if trail else 1
            row = _MessageRow(
                run_id, n, message.topic, message.body, message.message_id, message.now
            )
            tables.put(tables.messages, run_id, (*trail, row))
            awaits = any(
                cp.kind == "recv" and cp.status == "pending" and cp.name == message.topic
                for cp in tables.checkpoints.get(run_id, {}).values()
            )
            woke = message_wakes(run.status, awaits_topic=awaits)
            if woke:
                self._wake_run(tables, run_id, message.now)
        self._tell(runs=woke)
        return True

    async def next_message(self, run_id: str, topic: str) -> Message | None:
        """The run's first unread message on *topic*, or ``None``."""
        with self._read() as tables:
            found = next(
                (m for m in tables.messages.get(run_id, ()) if m.topic == topic and m.seq is None),
                None,
            )
            return None if found is None else message_of(attrs.astuple(found))

    async def event_value(self, run_id: str, key: str) -> EventValue | None:
        """The run's latest value of event *key*, or ``None``."""
        with self._read() as tables:
            found = tables.event_values.get(run_id, {}).get(key)
            return None if found is None else event_value_of(attrs.astuple(found))

    async def child_runs(self, run_id: str) -> list[Run]:
        """The runs whose parent is *run_id*, oldest first."""
        with self._read() as tables:
            below = [r for r in tables.runs.values() if r.parent_id == run_id]
            below.sort(key=lambda r: (r.created_at, r.run_id))
            return [_run(r) for r in below]


def _delete_rows_of(tables: _Tables, table: dict[Any, Any], run_ids: frozenset[str]) -> None:
    """
    Delete the rows of the runs *run_ids* from one table of ``rows.RUN_TABLES``: an entry keyed
    by the run, by a tuple that starts with it, or whose row has its ``run_id``.
    """
    for key, value in list(table.items()):
        owner: object = cast("tuple[object, ...]", key)[0] if isinstance(key, tuple) else key
        if owner in run_ids or getattr(value, "run_id", None) in run_ids:
            tables.put(table, key, None)


def _sqlite_values(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Booleans as SQLite gives them (0 or 1)."""
    return tuple(int(v) if isinstance(v, bool) else v for v in values)
