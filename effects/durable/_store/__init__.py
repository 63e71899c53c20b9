"""
The ``Store`` protocol: everything the engine asks of its storage, in a few transactions.

A store keeps runs, checkpoints, tasks and events. The engine never builds SQL: it hands the store
whole records and small write descriptions (``TurnCommit``, ``TaskOutcome``), and each method is one
transaction. Three implementations meet this contract: SQLite (embedded, the default), PostgreSQL,
and memory (in this process, for tests; SQLite's semantics).
Payloads (inputs, outputs, progress, details) are JSON *text* on the way in (already encoded and
checked by the engine) and JSON *data* on the way out. Times are epoch milliseconds (``int``).

Concurrency rules every implementation keeps:

- A run's lease is a compare-and-set on its row: a turn's writes carry the lease ``token`` it was
  claimed with and fail with ``StaleTurnError`` when another turn took the run meanwhile.
- A checkpoint row carries a revision; a turn's update names the revision it read and fails with
  ``StaleTurnError`` when a worker changed the row meanwhile.
- A task is claimed by one worker at a time; a result is recorded only for the attempt the
  checkpoint is waiting for (a late success of an older attempt still completes a step that has
  not completed, unless its failure was settled: replay has raised that, and the workflow may
  have acted on it).
- A result that lands while the run is running marks it *woken*, so the turn's suspension turns
  into ``pending`` instead of losing the wake-up.
- An attempt the engine gave up on never runs: a commit that settles a dispatched step's
  failure (and ``requeue``, for the steps it resets) withdraws its attempts in the same
  transaction. A queued one is deleted; one a worker has claimed is marked ``withdrawn`` (it
  keeps its queue slot until it reports or its claim lapses) and its result is discarded, with
  the event ``step.result_discarded``. Each withdrawal is a ``step.withdrawn`` event.
- A cancel (``cancel_run``) takes the run's lease away, so a turn running elsewhere fails at
  its next write, and withdraws the attempts of the steps it stops waiting for in the same
  transaction (``rules.cancel_action``, ``rules.cancels_attempt``); it reaches every unfinished
  run the run started (``parent_id``), and theirs, in that transaction too.
- A message (``send``) is stored and wakes its run in one transaction, as
  ``rules.message_wakes`` says; a turn takes it (``TurnCommit.taken``) in the commit that
  completes its ``recv`` checkpoint, so it is delivered once. A ``message_id`` is kept for the
  run's life: the same id again stores nothing.
- Whatever finishes a run (a turn's commit, a cancel, recovery making it dead) wakes its parent
  in the same transaction, as ``rules.child_wakes`` says.
- A recurring workflow's row (``write_recurring``) is a compare-and-set on its revision, in the
  same transaction as the runs its step starts: a step and its runs land together or not at all,
  and of two engines stepping one recurrence only one lands.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs

from effects.durable._names import EventName
from effects.durable._records import Checkpoint, Event, Run, Task
from effects.durable.errors import DurableError, StepError

__all__ = [
    "ALL_RUNS",
    "CheckpointWrite",
    "ChildRun",
    "ClaimedRun",
    "EventValue",
    "EventWrite",
    "Message",
    "NewEvent",
    "NewMessage",
    "NewRun",
    "NewTask",
    "RecoveryReport",
    "RecurringRow",
    "RecurringWrite",
    "RunAdvance",
    "RunQuery",
    "StaleTurnError",
    "Store",
    "Take",
    "TaskOutcome",
    "TurnCommit",
    "discarded",
]


class StaleTurnError(DurableError):
    """A turn's write was refused: its lease was taken over, or a checkpoint moved under it."""


@attrs.frozen
class NewRun:
    """
    A run to create: ``pending``, or, with *lease_token*, ``running`` and leased (until epoch ms
    *lease_until*) to the engine that starts it and runs its first turn at once; *traceparent*
    is its W3C trace context; *deadline* the epoch ms of its whole-run timeout, or ``None``;
    *parent_id* the run that starts it as a child workflow.
    """

    run_id: str
    workflow: str
    version: str
    input: str
    now: int
    lease_token: str | None = None
    lease_until: int | None = None
    traceparent: str | None = None
    deadline: int | None = None
    parent_id: str | None = None


@attrs.frozen
class ChildRun:
    """
    A child workflow's run that a turn's commit creates (pending, its ``parent_id`` the
    committing run), with its events. If its id is taken by a run of the same parent the
    commit writes no run; by any other run it is refused (``StaleTurnError``).
    """

    run: NewRun
    events: Sequence[NewEvent] = ()


@attrs.frozen
class NewMessage:
    """
    A message to run *run_id* on *topic*: *body* is JSON text; *message_id* (``None``: none)
    makes it idempotent: the same id again, for the run's life, stores nothing.
    """

    run_id: str
    topic: str
    body: str
    now: int
    message_id: str | None = None


@attrs.frozen
class Message:
    """
    A message as stored: its place *n* in its run's send order (1, 2, ...), its *body* (JSON
    data), and *seq*, the ``recv`` checkpoint that took it (``None``: not read yet).
    """

    run_id: str
    n: int
    topic: str
    body: Any
    message_id: str | None
    sent_at: int
    seq: int | None = None


@attrs.frozen
class Take:
    """A turn's commit takes message *n* of its run for the ``recv`` checkpoint at *seq*."""

    n: int
    seq: int


@attrs.frozen
class EventWrite:
    """A turn's commit sets the run's event *key* to *value* (JSON text) at checkpoint *seq*."""

    key: str
    value: str
    seq: int


@attrs.frozen
class EventValue:
    """An event value as stored: the latest *value* (JSON data) of *key*, set at *seq* and *at*."""

    run_id: str
    key: str
    value: Any
    seq: int
    at: int


@attrs.frozen
class RunQuery:
    """
    Which runs ``list_runs`` returns, newest first (by ``created_at``, then ``run_id``): at most
    *limit*, of *status* and of *workflow* when given; with *stale_before* (epoch ms) only
    suspended runs whose oldest pending dispatch was made before it; with *after* (the
    ``(created_at, run_id)`` of a run) only the runs that come after it in that order (a keyset
    page); with *id_prefix* only runs whose id starts with it; with *retrying_at* (epoch ms) only
    runs with a retrying checkpoint then (``rules.retrying``); with *retryable* only failed,
    dead or cancelled runs (those ``requeue`` takes); with *unserved* (the ``(workflow,
    version)`` pairs an engine serves) only the runs that wait for a version of one of those
    workflows that it does not serve (``rules.unserved``).
    """

    status: str | None = None
    workflow: str | None = None
    limit: int = 100
    stale_before: int | None = None
    after: tuple[int, str] | None = None
    id_prefix: str | None = None
    retrying_at: int | None = None
    retryable: bool = False
    unserved: tuple[tuple[str, str], ...] | None = None

    def filter_values(self) -> tuple[tuple[object, ...] | None, ...]:
        """
        The filters' parameters in ``listing.filters``'s order, each a tuple of the values its
        clause binds (``None``: that filter is off).
        """
        after = None if self.after is None else (self.after[0], self.after[0], self.after[1])
        return (
            None if self.status is None else (self.status,),
            None if self.workflow is None else (self.workflow,),
            None if self.stale_before is None else (self.stale_before,),
            after,
            None if not self.id_prefix else (self.id_prefix,),
            None if self.retrying_at is None else (self.retrying_at,),
            () if self.retryable else None,
            None if self.unserved is None else (_pairs_text(self.unserved),),
        )


ALL_RUNS: RunQuery = RunQuery()


def _pairs_text(pairs: Sequence[tuple[str, str]]) -> str:
    """*pairs* as the JSON text of a list of ``[name, version]`` lists (what SQL reads)."""
    return json.dumps([list(pair) for pair in pairs], separators=(",", ":"))


@attrs.frozen
class NewEvent:
    """An event to append to a run's trail."""

    name: EventName
    at: int
    seq: int | None = None
    data: dict[str, Any] = attrs.field(factory=dict[str, Any])
    level: str = "info"


@attrs.frozen
class NewTask:
    """
    A dispatched attempt to enqueue. One naming a *queue* is admitted only while fewer than
    *queue_limit* attempts of that queue hold a slot (queued or claimed); otherwise it waits, and
    the store admits the oldest waiting attempt whenever a slot frees. It carries its run's
    *workflow* and *traceparent* (telemetry in the worker's process).
    """

    run_id: str
    seq: int
    step_id: str
    name: str
    group: str
    input: str
    attempt: int
    available_at: int
    queue: str | None = None
    redispatched: bool = False
    queue_limit: int | None = None
    workflow: str | None = None
    traceparent: str | None = None


@attrs.frozen
class CheckpointWrite:
    """
    A checkpoint row to insert (``expected_rev`` is ``None``) or to update in place (the revision
    the turn read). Payload fields are JSON text.
    """

    checkpoint: Checkpoint
    expected_rev: int | None
    output: str | None = None
    input: str | None = None


@attrs.frozen
class RunAdvance:
    """
    What a turn's commit does to its run.

    - ``"continue"``: the turn goes on; the lease is renewed to *lease_until*.
    - ``"suspend"``: the turn ends; the run waits until *wake_at* (``None``: until a result), or
      becomes pending at once if a result woke it during the turn.
    - ``"finish"``: the run ends with *status* (``completed``, ``failed``), *output* or *error*.
    - ``"release"``: the turn gives the run back (pending, no lease), e.g. on shutdown.
    """

    action: Literal["continue", "suspend", "finish", "release"]
    lease_until: int | None = None
    wake_at: int | None = None
    status: str | None = None
    output: str | None = None
    error: StepError | None = None


@attrs.frozen
class TurnCommit:
    """
    One transaction of a turn: checkpoint rows, tasks, events and the run's advance; the child
    runs it starts (*runs*), the messages it takes (*taken*, each still unread, else
    ``StaleTurnError``) and the event values it sets (*values*).
    """

    run_id: str
    token: str
    now: int
    advance: RunAdvance
    checkpoints: Sequence[CheckpointWrite] = ()
    tasks: Sequence[NewTask] = ()
    events: Sequence[NewEvent] = ()
    runs: Sequence[ChildRun] = ()
    taken: Sequence[Take] = ()
    values: Sequence[EventWrite] = ()


@attrs.frozen
class TaskOutcome:
    """A worker's result for one attempt: an output (JSON text) or an error."""

    output: str | None = None
    error: StepError | None = None
    progress: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the attempt succeeded."""
        return self.error is None


def discarded(task: Task, outcome: TaskOutcome) -> dict[str, Any]:
    """The data of ``step.result_discarded``: the result of an attempt that was withdrawn."""
    return {
        "attempt": task.attempt,
        "outcome": "completed" if outcome.error is None else "failed",
        "reason": "withdrawn: the engine had given up on the step, or reset it",
    }


@attrs.frozen
class ClaimedRun:
    """
    A run a turn now holds: the lease token and everything replay needs.

    *checkpoints* are the run's checkpoints after sequence number *since* (0: all of them);
    *upto* is ``(how many, sum of their revisions)`` of those at or below *since* (a claim
    whose caller keeps the run's workflow alive up to that point reads only those figures, to
    check that nothing it has passed changed: revisions only grow).
    """

    run: Run
    token: str
    checkpoints: Sequence[Checkpoint]
    since: int = 0
    upto: tuple[int, int] = (0, 0)


@attrs.frozen
class RecoveryReport:
    """What one recovery pass did."""

    recovered_runs: Sequence[str] = ()
    dead_runs: Sequence[str] = ()
    lost_tasks: Sequence[str] = ()


@attrs.frozen
class RecurringRow:
    """
    The stored place of a recurring workflow on its schedule's grid (table ``recurring``).

    Attributes:
        name: The ``Recurring``'s name (the key).
        workflow: The name of the workflow its runs are of, as last written.
        schedule: The schedule's ``repr`` as last written (a changed one restarts the grid).
        state: The schedule's state, as JSON text.
        next_at: When to step it next, epoch ms; ``None`` once the schedule is done.
        recurs: Whether *next_at* is a recurrence (a run is due then) or only a wake-up to
            step again (a wait of ``MAX_DELAY``).
        missed_at: While a catch-up of several missed recurrences is under way (one write at a
            time), the latest of them not started yet; else ``None``.
        rev: The row's revision, which each write moves on by one (its compare-and-set).
        created_at: When the first engine to see it wrote it, epoch ms.
        updated_at: When it was last written, epoch ms.
    """

    name: str
    workflow: str
    schedule: str
    state: str
    next_at: int | None
    recurs: bool
    missed_at: int | None
    rev: int
    created_at: int
    updated_at: int


@attrs.frozen
class RecurringWrite:
    """
    One step of a recurring workflow, for ``write_recurring``: *row* as it is to be stored
    (its ``rev`` ignored: the store sets it), inserted when *expected_rev* is ``None`` (and no
    row of its name exists), else updated only if the stored revision is *expected_rev*; with it,
    in the same transaction, the runs its due times start, each with its ``run.started`` event.
    """

    row: RecurringRow
    expected_rev: int | None
    starts: Sequence[tuple[NewRun, NewEvent]] = ()


class Store(Protocol):
    """
    The storage of an ``Engine``; see the module docstring for the rules every method keeps.

    Implementations: ``SqliteStore`` (``"sqlite:///path.db"``), the PostgreSQL store
    (``"postgresql://..."``, the ``postgres`` extra) and ``MemoryStore`` (``"memory://NAME"``).
    """

    url: str

    @property
    def location(self) -> str:
        """Where the store is, for people: ``at /path/durable.db``, ``in schema 's' of URL``."""
        ...

    async def exists(self) -> bool:
        """
        Whether a store is there already (a file, a schema with tables, a memory store of that
        name in use), found without creating anything; inspection refuses to make one.

        Raises:
            StoreError: If the store's server cannot be reached.
        """
        ...

    async def wake_hint(
        self,
        callback: Callable[[], None],
        *,
        runs: bool = True,
        tasks: bool = True,
        due: Callable[[], None] | None = None,
    ) -> None:
        """
        Call *callback* whenever another process's write may be work for this engine: new or
        woken runs if *runs*, queued attempts if *tasks*; first *due* too when the write may
        bring a time to come. A store that hears no other process (SQLite, memory) never
        calls them: polling finds their work.
        """
        ...

    def tap(self, observer: Callable[[Sequence[Event]], None]) -> Callable[[], None]:
        """
        Call *observer* with the events each transaction of this store object writes, in their
        order, right after it commits, on the event loop (or thread) that wrote them; a local
        step's first-try success (``record_local_step``) counts its ``step.started`` and
        ``step.completed`` as ``Engine.events`` derives them. Writes of other store objects
        (other processes) are not heard. An observer that raises is logged and ignored. While
        nothing is tapped a store collects nothing. Returns the remover (idempotent).

        Raises:
            TypeError: If *observer* is not callable.
        """
        ...

    async def open(self) -> None:
        """Connect, and create or upgrade the schema; ``StoreError`` if the store is not ours."""
        ...

    async def close(self) -> None:
        """Release connections (idempotent)."""
        ...

    async def create_run(self, run: NewRun, events: Sequence[NewEvent]) -> Run | ClaimedRun | None:
        """
        Insert *run*: return ``None``, or, when it carries a lease token, the run as stored
        (``running``, no checkpoints). If its id exists, write nothing and return that run.
        """
        ...

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or ``None``."""
        ...

    async def list_runs(self, query: RunQuery = ALL_RUNS) -> list[Run]:
        """The runs *query* selects, newest first."""
        ...

    async def count_runs(self, query: RunQuery = ALL_RUNS) -> dict[str, int]:
        """
        How many runs *query*'s filters select (its *limit* and *after* ignored), by status;
        a status no run has is left out.
        """
        ...

    async def retrying(self, run_ids: Sequence[str], *, now: int) -> set[str]:
        """Which of *run_ids* have a retrying checkpoint at epoch ms *now* (``rules.retrying``)."""
        ...

    async def queue_stats(self) -> dict[str, tuple[int, int]]:
        """
        Each flow-control queue that has attempts, as ``(in_use, waiting)``: the attempts
        holding one of its slots (queued, claimed, or withdrawn but still running), and those
        waiting for one.
        """
        ...

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The run's checkpoints by sequence number."""
        ...

    async def events(self, run_id: str) -> list[Event]:
        """The run's events, oldest first."""
        ...

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
        Take up to *limit* runnable runs of the given ``(name, version)`` pairs: pending, or
        suspended with ``wake_at <= now``. Each gets a fresh lease token held until *lease_until*.
        A claimed run that *known* maps to a sequence number ``s`` comes with its checkpoints
        after ``s`` only, and ``upto`` counting those at or below it (``ClaimedRun``).
        """
        ...

    async def renew_lease(self, run_id: str, token: str, lease_until: int) -> bool:
        """Extend a held lease; ``False`` if the token no longer holds the run."""
        ...

    async def commit_turn(self, commit: TurnCommit) -> None:
        """
        Apply *commit* in one transaction, or raise ``StaleTurnError`` and write nothing. A
        ``finish`` wakes the run's parent (``rules.child_wakes``).
        """
        ...

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
        """
        The common case of a turn's commit, on its own fast path: a local step that succeeded
        on its first attempt. Insert its completed checkpoint (``started`` is its creation time;
        *policy* the JSON text of its effective policy),
        if *token* still holds the run; else raise ``StaleTurnError`` and write nothing. No event
        rows are written: ``Engine.events`` shows the step's ``step.started`` and
        ``step.completed`` from the checkpoint itself.
        """
        ...

    async def claim_tasks(
        self, *, groups: Sequence[str], now: int, claim_until: int, worker: str, limit: int
    ) -> list[Task]:
        """Claim up to *limit* queued tasks of *groups* that are available at *now*."""
        ...

    async def renew_claim(self, task_id: int, worker: str, claim_until: int) -> bool:
        """Extend a held claim; ``False`` if *worker* no longer holds it."""
        ...

    async def release_claim(self, task_id: int, worker: str, *, now: int) -> None:
        """
        Put a claimed task back in the queue, unstarted (a worker shutting down); a withdrawn
        one is deleted instead, freeing its queue slot at epoch ms *now*.
        """
        ...

    async def record_result(self, task: Task, worker: str, outcome: TaskOutcome, now: int) -> bool:
        """
        Record an attempt's result: complete or fail its checkpoint and wake the run. Returns
        ``False`` when the result no longer matters (the step completed, its failure is settled,
        a later attempt is under way, or the attempt was withdrawn: then with the event
        ``step.result_discarded``) and nothing but the task's own row changed.
        """
        ...

    async def recover(
        self, *, now: int, max_recovery_attempts: int | None, reconcile_ms: int
    ) -> RecoveryReport:
        """
        Make expired run leases pending again (counting a recovery, or making the run dead past
        *max_recovery_attempts*), and turn expired task claims into retryable ``worker lost``
        failures of their attempt. A run whose lease expired while it awaited a liveness step
        (a pending checkpoint with ``timeout_ms``) is parked suspended until ``now +
        reconcile_ms`` instead, without counting a recovery.
        """
        ...

    async def get_checkpoint(self, run_id: str, seq: int) -> Checkpoint | None:
        """One checkpoint, read afresh (the liveness path re-reads before timing out)."""
        ...

    async def heartbeat(
        self, task: Task, *, now: int, progress: str | None, lease_until: int | None
    ) -> bool:
        """
        Persist a worker's beat for *task*'s attempt: ``heartbeat_at``, the progress (JSON text,
        kept as it was when ``None``) and, when *lease_until* is given and the checkpoint has a
        lost-dispatch lease, the renewed lease. ``False`` if the attempt is no longer current.
        """
        ...

    async def redispatch_pending(self, run_id: str, *, now: int) -> int:
        """
        Enqueue every pending dispatched step of the run again with ``attempt + 1`` (queued but
        unclaimed older attempts are withdrawn); return how many. The run's lease is not needed.
        """
        ...

    async def next_due(self, now: int) -> int | None:
        """The earliest epoch ms after *now* at which something becomes due, or ``None``."""
        ...

    async def requeue(self, run_id: str, now: int) -> Run:
        """
        Reset the run's failed checkpoints to a fresh first attempt and make it pending; the
        attempts of those steps still queued or claimed are withdrawn (``rules.check_requeue``).

        Raises:
            LookupError: If there is no such run.
            ValueError: If the run is not failed, dead or cancelled, or its steps were undone.
        """
        ...

    async def unserved(self, served: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """
        How many runs wait (pending or suspended) for each ``(workflow, version)`` whose
        workflow *served* (an engine's pairs) names at another version (``rules.unserved``);
        a pair with none is left out.
        """
        ...

    async def prune(self, *, before: int, statuses: Sequence[str], dry_run: bool = False) -> int:
        """
        Delete every row of the runs of *statuses* (finished ones, checked by the caller) whose
        last change (``updated_at``) came before epoch ms *before*: the run and its rows in
        every table of ``rows.RUN_TABLES``; return how many runs. With *dry_run* count them and
        delete nothing. Runs are deleted in batches, each batch one transaction, so a failure
        (a full disk) leaves whole runs, never part of one.
        """
        ...

    async def recurring(self, names: Sequence[str] | None = None) -> list[RecurringRow]:
        """The rows of the recurring workflows *names* (``None``: every one), by name."""
        ...

    async def due_recurring(self, now: int) -> list[RecurringRow]:
        """
        The recurring rows to step at epoch ms *now* (``next_at <= now``), earliest first: one
        read of an index on ``next_at``, so a poll costs what is due, not what is stored.
        """
        ...

    async def write_recurring(self, writes: Sequence[RecurringWrite]) -> list[bool]:
        """
        Apply *writes* in one transaction, each a compare-and-set on its row (see
        ``RecurringWrite``): for each, whether it landed. The runs of a write that did not land
        are not made; a run whose id exists already is left as it is.
        """
        ...

    async def send(self, message: NewMessage) -> bool:
        """
        Store *message* after the run's others and wake the run as ``rules.message_wakes``
        says, in one transaction; ``False`` (nothing written) if its ``message_id`` is known
        for the run already.

        Raises:
            LookupError: If there is no such run.
            ValueError: If the run is finished, naming its status (``rules.check_send``).
        """
        ...

    async def next_message(self, run_id: str, topic: str) -> Message | None:
        """The run's first message on *topic* that no ``recv`` has taken, or ``None``."""
        ...

    async def event_value(self, run_id: str, key: str) -> EventValue | None:
        """The value the run last set for event *key*, or ``None``."""
        ...

    async def child_runs(self, run_id: str) -> list[Run]:
        """The runs whose parent is *run_id*, oldest first (by ``created_at``, then id)."""
        ...

    async def cancel_run(self, run_id: str, *, compensate: bool, now: int) -> Run:
        """
        Cancel the run as ``rules.cancel_action`` says, in one transaction: ``cancelled`` at once
        (event ``run.cancelled``), or, for a compensating cancel of a run with completed steps,
        pending with ``cancel = "compensate"`` (event ``run.cancel_requested``), or unchanged.
        Either way its lease is gone, and the attempts of the steps ``rules.cancels_attempt``
        picks are withdrawn and those steps failed (code ``cancelled``, not final). Every
        unfinished run it started, and theirs (``parent_id``), is cancelled the same way in the
        same transaction (one finished or already asked to is left as it is). Returns the run
        as stored after.

        Raises:
            LookupError: If there is no such run.
            ValueError: If the run is finished, naming its status.
        """
        ...
