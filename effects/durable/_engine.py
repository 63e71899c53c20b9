"""The ``Engine``, the public facade: options, the store by URL, runs, and its worker loop."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random as _random
import secrets
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Final, TypeVar, overload

import attrs

from effects import Clock
from effects.durable._bounds import MAX_WAKE_MS, checked_count, checked_ms, timeout_ms
from effects.durable._cached_runs import CachedRuns, checked_cache_size
from effects.durable._codec import JSON, dump, from_data
from effects.durable._definitions import StepDef, WorkflowDef, check_name
from effects.durable._finishes import Finishes
from effects.durable._probes import Probes
from effects.durable._queue import Queue
from effects.durable._records import FINISHED, Checkpoint, Event, Run
from effects.durable._recurrences import Recurrences, Scheduled
from effects.durable._recurring import Recurring
from effects.durable._store import ClaimedRun, NewEvent, NewMessage, NewRun, RunQuery, Store
from effects.durable._store.rows import dumps as dump_state
from effects.durable._time import WallClock, epoch_ms
from effects.durable._trail import merge_events
from effects.durable._worker_loop import WorkerLoop
from effects.durable.errors import StoreError, UnknownRunError
from schedules import DurationLike, RandomLike, to_seconds

__all__ = ["PRUNABLE_STATUSES", "Engine", "cached_runs_of", "new_run_id", "open_store"]

_log: Final = logging.getLogger("effects.durable")

#: What ``prune`` deletes by default: every finished status.
PRUNABLE_STATUSES: Final = ("completed", "failed", "cancelled", "dead")
#: What to send instead of a value that is not JSON (messages and events take no codec).
_JSON_ONLY: Final = "send JSON data: dicts, lists, strings, finite numbers, booleans, None"

I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741


def new_run_id(now: int) -> str:
    """
    A new run id: 32 hex digits, epoch ms *now* (12 digits) then 80 random bits.

    Time first, so the runs started one after another are neighbours in every table keyed by
    run id (checkpoints, events, the runs' own key): a new run's rows go at the end of each
    index, into the page written last, instead of into a random page of a full one, which
    SQLite then rebalances with its neighbours (several pages written for one row). The random
    part keeps ids of one millisecond apart, across engines too.

    Example:
        >>> run_id = new_run_id(1_700_000_000_000)
        >>> (len(run_id), run_id[:12])
        (32, '018bcfe56800')
    """
    return f"{now & 0xFFFF_FFFF_FFFF:012x}{secrets.token_hex(10)}"


def open_store(store: str | Store) -> Store:
    """
    The store a URL names: ``sqlite:///path.db``, ``postgresql://...`` or ``memory://NAME``; a
    ``Store`` as it is.

    Raises:
        ValueError: If the URL's scheme is not one of those, or the URL is malformed (a
            ``memory://`` URL without a name).
        StoreError: For a PostgreSQL URL when the ``postgres`` extra is not installed.
    """
    if not isinstance(store, str):
        return store
    scheme = store.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from effects.durable._store.sqlite import SqliteStore  # noqa: PLC0415

        return SqliteStore(store)
    if scheme in ("postgresql", "postgres"):
        try:
            from effects.durable._store.postgres import PostgresStore  # noqa: PLC0415
        except ImportError as error:
            msg = (
                f"the PostgreSQL store needs psycopg and psycopg-pool ({error}):"
                " pip install 'effect-schedules[postgres]'"
            )
            raise StoreError(msg) from error

        return PostgresStore(store)
    if scheme == "memory":
        from effects.durable._store.memory import MemoryStore  # noqa: PLC0415

        return MemoryStore(store)
    msg = (
        "store must be a 'sqlite:///path.db', 'postgresql://...' or 'memory://NAME' URL,"
        f" got {store!r}"
    )
    raise ValueError(msg)


def _by_name(items: Iterable[Any], kind: type[Any], what: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    item: Any
    for item in items:
        if not isinstance(item, kind):
            msg = f"{what}s must be made by @{what}, got {item!r}"
            raise TypeError(msg)
        name: str = item.name
        if name in found:
            msg = f"two {what}s are named {name!r}; names must be unique in an engine"
            raise ValueError(msg)
        found[name] = item
    return found


class Engine:
    """
    A durable workflow engine on one store: it starts runs, runs their turns, serves the tasks of
    its steps' groups, and recovers expired leases and claims.

    Use it as ``async with Engine(...) as engine:``, which opens the store (creating or
    upgrading its schema) and closes it. Several engines (in one process or many) may share a
    store; an engine knows only the workflows, steps and queues passed to it.

    Args:
        store: A store URL (``"sqlite:///durable.db"``, the default; ``"postgresql://..."``) or
            a ``Store``.
        workflows: The ``WorkflowDef`` values this engine runs.
        steps: The ``StepDef`` values it serves as a worker (it claims the tasks of their
            groups).
        queues: Flow-control ``Queue`` values.
        clock: Where time comes from: the wall clock by default; an
            ``effects.testing.VirtualClock`` is read as epoch seconds, so tests skip time.
        random: Random source for jitter (anything with ``random()``); default a fresh
            ``random.Random()``.
        lease_ms: How long a turn's hold on a run, and a worker's claim on a task, lasts without
            renewal (renewed while they run), in ms; default 30 s.
        reconcile_ms: The wake of a run whose dispatching process died on the liveness path, in
            ms; default 5 minutes. The engine that recovers the run applies its own value, so
            give every engine on one store the same.
        remote_redispatch_ms: The lease of a pending dispatched step (lost-dispatch detection),
            in ms, or ``None`` (default: off).
        remote_redispatch_max: How many times a lost dispatch is re-driven before the step fails
            with ``remote_step_lost``; default 10.
        max_recovery_attempts: After this many recoveries of an expired run lease the run is
            ``dead``; ``None`` (default) for no limit.
        compensation_retries: Each compensation's attempts, the first included (default 1),
            whatever its ``StepDef`` declares; a compensation that spends them is recorded
            (``step.compensation_failed``) and the others still run.
        recurring: ``Recurring`` values: workflows this engine starts once per recurrence of
            a schedule while it works (``work()``, ``run_until_idle()``); engines sharing a
            store start each recurrence once.
        cached_runs: How many suspended runs this engine keeps alive in memory (default 1000):
            the workflow of such a run waits where it suspended, and the run's next turn here
            resumes it there instead of replaying it from its start. The least recently
            suspended are dropped beyond it; a run is replayed after a crash, when another
            engine ran it meanwhile, when its compensating cancel was asked or its deadline
            passed, and once dropped. 0 turns the cache off (every turn replays).

    Raises:
        TypeError: If a definition is not one made by ``@workflow`` / ``@step`` / ``Queue`` /
            ``Recurring``, a recurring's input cannot be stored, or *cached_runs* is not an
            ``int``.
        ValueError: For two definitions with one name, an option out of range, or a recurring
            of a workflow this engine does not serve.
    """

    def __init__(
        self,
        store: str | Store = "sqlite:///durable.db",
        *,
        workflows: Iterable[WorkflowDef[Any, Any]] = (),
        steps: Iterable[StepDef[Any, Any]] = (),
        queues: Iterable[Queue] = (),
        clock: Clock | None = None,
        random: RandomLike | None = None,
        lease_ms: int = 30_000,
        reconcile_ms: int = 300_000,
        remote_redispatch_ms: int | None = None,
        remote_redispatch_max: int = 10,
        max_recovery_attempts: int | None = None,
        compensation_retries: int = 1,
        recurring: Iterable[Recurring] = (),
        cached_runs: int = 1000,
    ) -> None:
        self._workflows: dict[str, WorkflowDef[Any, Any]] = _by_name(
            workflows, WorkflowDef, "workflow"
        )
        self._steps: dict[str, StepDef[Any, Any]] = _by_name(steps, StepDef, "step")
        queues_by_name: dict[str, Queue] = _by_name(queues, Queue, "queue")
        self._queues = queues_by_name
        self._lease_ms = checked_ms(lease_ms, "lease_ms")
        reconcile = checked_ms(reconcile_ms, "reconcile_ms")
        redispatch = (
            None
            if remote_redispatch_ms is None
            else checked_ms(remote_redispatch_ms, "remote_redispatch_ms")
        )
        redispatch_max = checked_count(remote_redispatch_max, "remote_redispatch_max", least=0)
        max_recovery = (
            None
            if max_recovery_attempts is None
            else checked_count(max_recovery_attempts, "max_recovery_attempts", least=0)
        )
        undo_attempts = checked_count(compensation_retries, "compensation_retries", least=1)
        cache_size = checked_cache_size(cached_runs)
        for definition in self._steps.values():
            queue = definition.policy.queue
            if queue is not None and queue not in queues_by_name:
                msg = f"step {definition.name!r} names queue {queue!r}, which this engine lacks"
                raise ValueError(msg)
        scheduled = _scheduled(recurring, self._workflows)
        self._recurring = {name: entry.recurring for name, entry in scheduled.items()}
        self._store = open_store(store)
        self._clock: Clock = WallClock() if clock is None else clock
        rng = _random.Random() if random is None else random
        self._workflow_keys = [(w.name, w.version) for w in self._workflows.values()]
        self._groups = sorted({s.group for s in self._steps.values()})
        self._id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._opened = 0
        self._listeners: tuple[Callable[[Event], object], ...] = ()
        self._untap: Callable[[], None] | None = None
        # What wait() learns in memory, from the turns of this engine.
        self._finishes = Finishes()
        self._probes = Probes()
        self._loop = WorkerLoop(
            store=self._store,
            clock=self._clock,
            random=rng,
            owner=self._id,
            lease_ms=self._lease_ms,
            reconcile_ms=reconcile,
            redispatch_ms=redispatch,
            redispatch_max=redispatch_max,
            max_recovery=max_recovery,
            compensation_retries=undo_attempts,
            workflows=self._workflows,
            steps=self._steps,
            queues=queues_by_name,
            workflow_keys=self._workflow_keys,
            groups=self._groups,
            finishes=self._finishes,
            probes=self._probes,
            recurrences=Recurrences(
                store=self._store, random=rng, scheduled=scheduled, probes=self._probes
            ),
            cached_runs=cache_size,
        )

    def __repr__(self) -> str:
        return (
            f"Engine({self._store.url!r}, workflows={sorted(self._workflows)},"
            f" steps={sorted(self._steps)})"
        )

    @property
    def store(self) -> Store:
        """The engine's store."""
        return self._store

    @property
    def clock(self) -> Clock:
        """The engine's clock."""
        return self._clock

    @property
    def queues(self) -> Mapping[str, Queue]:
        """The engine's flow-control queues by name (a read-only view)."""
        return MappingProxyType(self._queues)

    @property
    def recurring(self) -> Mapping[str, Recurring]:
        """The engine's recurring workflows by name (a read-only view)."""
        return MappingProxyType(self._recurring)

    @property
    def id(self) -> str:
        """This engine's owner id on leases and claims (``host:pid:random``)."""
        return self._id

    # -- listeners --------------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[Event], object]) -> Callable[[], None]:
        """
        Call ``listener(event)`` for every event this engine's store object writes, in this
        process: exactly the events ``events()`` shows (a local step's first-try
        ``step.started`` and ``step.completed``, which no row holds, included), each right after
        the commit that wrote it, in commit order, on the engine's event loop. Other processes'
        events are heard by their own listeners. A listener that raises is logged on
        ``effects.durable`` and ignored; it must not block (it runs inside the engine's write
        path). With no listener the engine collects nothing.

        Args:
            listener: A function of one ``Event``; its return value is ignored.

        Returns:
            A function that removes this listener (calling it again does nothing).

        Raises:
            TypeError: If *listener* is not callable.

        """
        if not callable(listener):
            msg = f"subscribe takes a function of one Event, got {listener!r}"
            raise TypeError(msg)
        self._listeners = (*self._listeners, listener)
        if self._untap is None:
            self._untap = self._store.tap(self._heard)
        removed = False

        def unsubscribe() -> None:
            nonlocal removed
            if removed:
                return
            removed = True
            index = next(i for i, heard in enumerate(self._listeners) if heard is listener)
            self._listeners = self._listeners[:index] + self._listeners[index + 1 :]
            if not self._listeners and self._untap is not None:
                self._untap()
                self._untap = None

        return unsubscribe

    def _heard(self, events: Sequence[Event]) -> None:
        for event in events:
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception:  # noqa: BLE001 - a listener's bug must not stop the engine
                    _log.exception(
                        "a listener raised on event %s of run %s; ignored", event.name, event.run_id
                    )

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the store (create or upgrade its schema). ``async with`` calls this."""
        if self._opened == 0:
            await self._store.open()
            # A store that hears other processes' writes (PostgreSQL's NOTIFY) wakes work().
            await self._store.wake_hint(
                self._loop.work_now,
                runs=bool(self._workflow_keys),
                tasks=bool(self._groups),
                due=self._loop.due_changed,
            )
        self._opened += 1

    async def close(self) -> None:
        """
        Stop work in flight (releasing leases and claims), drop the cached runs' workflows,
        and close the store.
        """
        if self._opened == 0:
            return
        self._opened -= 1
        if self._opened:
            return
        await self._loop.cancel_inflight()
        await self._store.close()

    def _now(self) -> int:
        return epoch_ms(self._clock)

    # -- runs -------------------------------------------------------------------------------------

    def _workflow(self, workflow: WorkflowDef[Any, Any] | str) -> WorkflowDef[Any, Any]:
        name: object = workflow.name if isinstance(workflow, WorkflowDef) else workflow
        if not isinstance(name, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            msg = f"start takes a WorkflowDef or a workflow's name, got {workflow!r}"
            raise TypeError(msg)
        found = self._workflows.get(name)
        if found is None:
            known = ", ".join(map(repr, sorted(self._workflows))) or "none"
            msg = f"unknown workflow {name!r}: this engine has {known}"
            raise ValueError(msg)
        return found

    @overload
    async def start(
        self,
        workflow: WorkflowDef[I, O],
        input: I,
        *,
        run_id: str | None = None,
        timeout: DurationLike | None = None,
    ) -> str: ...
    @overload
    async def start(
        self,
        workflow: str,
        input: Any,
        *,
        run_id: str | None = None,
        timeout: DurationLike | None = None,
    ) -> str: ...
    async def start(
        self,
        workflow: WorkflowDef[Any, Any] | str,
        input: Any,  # noqa: A002 - the design's name
        *,
        run_id: str | None = None,
        timeout: DurationLike | None = None,
    ) -> str:
        """
        Start a run of *workflow* with *input*; return its id.

        Args:
            workflow: A ``WorkflowDef`` passed to this engine, or its name.
            input: The workflow's input (JSON, or what its codec takes).
            run_id: The run's id; default a new one (``new_run_id``: 32 hex digits, the time
                first, then 80 random bits). Starting an id that exists returns it and changes
                nothing (idempotent).
            timeout: The whole-run timeout (seconds, a ``timedelta`` or a string like
                ``"1h"``); default the workflow's own (``@workflow(..., timeout=)``), else none.
                At its deadline (``created_at + timeout``, epoch ms, the run's ``deadline``) a
                run that has not finished fails with code ``"workflow_timeout"`` (event
                ``run.failed``), however long its current turn takes: its pending attempts are
                withdrawn, as a cancel withdraws them, and its compensations run.

        Raises:
            ValueError: If this engine has no such workflow, *run_id* names a run of another
                workflow, or *timeout* is not a duration of at least 1 ms.
            TypeError: If *input* cannot be stored (nothing is written), or *timeout* is not a
                duration.
        """
        definition = self._workflow(workflow)
        limit = definition.timeout_ms if timeout is None else timeout_ms(timeout, "timeout")
        if run_id is None:
            run_id = new_run_id(self._now())
        else:
            check_name(run_id, "run_id")
        text = dump(definition.codec, input, f"input of workflow {definition.name!r}")
        now = self._now()
        deadline = None if limit is None else now + limit
        if deadline is not None and deadline > MAX_WAKE_MS:
            msg = f"timeout must end by epoch ms {MAX_WAKE_MS}, got {timeout!r} ({limit} ms)"
            raise ValueError(msg)
        # A working engine with a free slot that serves the workflow takes the run as it makes
        # it, and runs its first turn at once: no claim, no wake-up of anyone.
        # The slot is taken before the insert: starts at once never overrun the concurrency.
        reserved = self._workflows.get(definition.name) is definition and self._loop.reserve()
        token = f"{self._id}:{secrets.token_hex(6)}" if reserved else None
        lease_until = None if token is None else now + self._lease_ms
        trace = self._probes.run_trace(run_id, definition.name, now)
        try:
            existing = await self._store.create_run(
                NewRun(
                    run_id,
                    definition.name,
                    definition.version,
                    text,
                    now,
                    token,
                    lease_until,
                    trace.traceparent,
                    deadline,
                ),
                (NewEvent("run.started", now, None, {"workflow": definition.name}),),
            )
        finally:
            if reserved:
                self._loop.unreserve()
        if existing is None or isinstance(existing, ClaimedRun):
            trace.made()
        if isinstance(existing, ClaimedRun):
            await self._loop.take(existing)
            return run_id
        if existing is not None and existing.workflow != definition.name:
            msg = (
                f"run {run_id!r} exists and is a run of workflow {existing.workflow!r},"
                f" not {definition.name!r}"
            )
            raise ValueError(msg)
        self._loop.notify(due=False)
        return run_id

    async def wait(
        self, run_id: str, *, timeout: DurationLike | None = None, poll_ms: int = 100
    ) -> Run:
        """
        Wait until the run has finished (``completed``, ``failed``, ``cancelled`` or ``dead``);
        return its record, as ``get_run`` does.

        A run this engine finishes is seen at once, in memory; one finished elsewhere (another
        process, or ``dead`` by recovery) is seen at the next read of the store, every *poll_ms*.
        Waiting runs nothing: some engine's ``work()`` (this one's, or another process's) or
        ``run_until_idle`` must run the run.

        Args:
            run_id: The run's id.
            timeout: The longest wait (seconds, a ``timedelta`` or a string like ``"30s"``),
                in real time (the event loop's clock, whatever the engine's clock); default no
                limit.
            poll_ms: How often the store is read again, in ms (> 0); default 100.

        Raises:
            UnknownRunError: If no run has this id.
            TimeoutError: If the run has not finished within *timeout*.
            ValueError: If *timeout* or *poll_ms* is not valid.
        """
        _storable(run_id)
        poll = checked_ms(poll_ms, "poll_ms") / 1000
        loop = asyncio.get_running_loop()
        deadline = (
            math.inf if timeout is None else loop.time() + to_seconds(timeout, name="timeout")
        )
        status = "unread"
        polled = False
        while True:
            # Registered before the read: a finish between the read and the wait is not missed.
            # A run in a turn of this engine, or whose last turn here suspended it to wait for
            # results, is answered in memory when a turn of it here ends: then there is nothing
            # to read first (a run another engine takes up meanwhile is read at the next poll).
            waiter: asyncio.Future[Run | None] = loop.create_future()
            self._finishes.watch(run_id, waiter)
            try:
                if polled or not self._finishes.known(run_id):
                    run = await self.get_run(run_id)
                    if run.status in FINISHED:
                        return run
                    status = run.status
                left = deadline - loop.time()
                if left <= 0:
                    msg = f"run {run_id!r} has not finished within {timeout!r} (it is {status})"
                    raise TimeoutError(msg)
                await asyncio.wait((waiter,), timeout=min(poll, left))
                polled = not waiter.done()
                finished = None if polled else waiter.result()
                if finished is not None:
                    return self._decoded(finished)
            finally:
                self._finishes.unwatch(run_id, waiter)

    def _decoded(self, run: Run) -> Run:
        definition = self._workflows.get(run.workflow)
        if definition is None:
            return run
        return attrs.evolve(
            run,
            input=from_data(definition.codec, run.input),
            output=None if run.output is None else from_data(definition.codec, run.output),
        )

    async def get_run(self, run_id: str) -> Run:
        """
        The run's record, its input and output decoded by its workflow's codec.

        Raises:
            UnknownRunError: If no run has this id (a ``ValueError`` and a ``LookupError``).
        """
        _storable(run_id)
        run = await self._store.get_run(run_id)
        if run is None:
            raise UnknownRunError(run_id)
        return self._decoded(run)

    async def list_runs(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        limit: int = 100,
        stale_ms: int | None = None,
        after: str | None = None,
        id_prefix: str | None = None,
        retrying: bool = False,
        unserved: bool = False,
    ) -> list[Run]:
        """
        Runs, newest first (by creation time, then id).

        Args:
            status: Only runs with this status.
            workflow: Only runs of this workflow.
            limit: At most this many.
            stale_ms: Only suspended runs whose oldest pending dispatch is older than this.
            after: Only runs after this run in that order (the next page after its last run).
            id_prefix: Only runs whose id starts with this.
            retrying: Only runs with a step waiting out its backoff now (failed, not settled,
                its next attempt in the future).
            unserved: Only runs that wait (pending or suspended) for a version of one of this
                engine's workflows that it does not serve (see ``work``).

        Raises:
            UnknownRunError: If *after* names no run.
        """
        now = self._now()
        stale_before = None if stale_ms is None else now - stale_ms
        key = None
        if after is not None:
            found = await self._store.get_run(after)
            if found is None:
                raise UnknownRunError(after)
            key = (found.created_at, found.run_id)
        query = RunQuery(
            status,
            workflow,
            limit,
            stale_before,
            after=key,
            id_prefix=id_prefix,
            retrying_at=now if retrying else None,
            unserved=tuple(self._workflow_keys) if unserved else None,
        )
        return await self._store.list_runs(query)

    def serves(self, workflow: str) -> str | None:
        """The version of *workflow* this engine serves, or ``None`` if it has no such workflow."""
        found = self._workflows.get(workflow)
        return None if found is None else found.version

    async def prune(
        self,
        *,
        older_than: DurationLike,
        statuses: Sequence[str] = PRUNABLE_STATUSES,
        dry_run: bool = False,
    ) -> int:
        """
        Delete every row of the finished runs that ended (their last change) more than
        *older_than* ago: the run, its checkpoints, attempts, events and every other row the
        store keeps of it; return how many runs. A pending, running or suspended run is never
        pruned; nor, until its worker reports or its claim lapses, a run with an attempt still
        out. Runs go in batches of ``PRUNE_BATCH``, each batch one transaction: a failure (a
        full disk) leaves whole runs, never part of one, and the next prune goes on.

        Args:
            older_than: How long ago a run must have ended (seconds, a ``timedelta`` or a string
                like ``"30d"``); longer than the clock has run prunes nothing.
            statuses: Which finished statuses to prune (default all four).
            dry_run: Count what would be pruned and delete nothing.

        Raises:
            ValueError: If *older_than* is negative, NaN, infinite, a ``bool`` or unparsable,
                or *statuses* names a status that is not finished (or none that exists).
            TypeError: If *older_than* is not a duration, or *statuses* is a string or holds
                something else than strings.
        """
        seconds = to_seconds(older_than, name="older_than")
        chosen = _finished_statuses(statuses)
        now = self._now()
        # Older than the clock: nothing ended before the epoch.
        before = max(0, now - seconds * 1000)
        return await self._store.prune(before=math.ceil(before), statuses=chosen, dry_run=dry_run)

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """
        The run's checkpoints by sequence number.

        Raises:
            UnknownRunError: If no run has this id.
        """
        _storable(run_id)
        found = await self._store.checkpoints(run_id)
        if not found and await self._store.get_run(run_id) is None:
            raise UnknownRunError(run_id)
        return found

    async def events(self, run_id: str) -> list[Event]:
        """
        The run's event trail, oldest first.

        Raises:
            UnknownRunError: If no run has this id.
        """
        _storable(run_id)
        stored = await self._store.events(run_id)
        if not stored and await self._store.get_run(run_id) is None:
            raise UnknownRunError(run_id)
        return merge_events(stored, await self._store.checkpoints(run_id))

    async def requeue(self, run_id: str) -> Run:
        """
        Retry a failed, dead or cancelled run: every failed checkpoint is reset to a fresh first
        attempt (attempts 0, retryable again, due now) and the run becomes pending. Completed
        steps are not run again; a plainly cancelled run resumes where the cancel stopped it.

        Raises:
            UnknownRunError: If no run has this id.
            ValueError: If the run is not failed, dead or cancelled; if its completed steps were
                undone (cancelled with compensation, or failed and compensated); or if its
                workflow, as this engine has it, says ``requeue=False`` (or what to do instead).
        """
        _storable(run_id)
        found = await self._store.get_run(run_id)
        if found is None:
            raise UnknownRunError(run_id)
        definition = self._workflows.get(found.workflow)
        if definition is not None and definition.requeue is not True:
            msg = f"run {run_id} of workflow {found.workflow!r} is not requeued (requeue=False)"
            if isinstance(definition.requeue, str):
                msg = f"{msg}: {definition.requeue}"
            raise ValueError(msg)
        try:
            run = await self._store.requeue(run_id, self._now())
        except LookupError:
            raise UnknownRunError(run_id) from None
        self._loop.notify()
        return run

    async def cancel(self, run_id: str, *, compensate: bool = False) -> Run:
        """
        Cancel a run that is not finished; return its record as stored after.

        Plain: the run is ``cancelled`` at once (event ``run.cancelled``). Its pending tasks are
        withdrawn in the same commit (a worker that claimed one learns it at its next
        ``heartbeat()``, which raises ``RunCancelled``, or when it reports: its result is
        discarded); a turn running elsewhere stops at its next step (its lease is gone); a
        liveness wait ends. ``requeue`` resumes it later, if wanted.

        With *compensate*: the compensations its completed steps registered run first (as when
        a run fails), then it is ``cancelled``. This returns at once: the run is ``pending``
        (event ``run.cancel_requested``) until a turn has undone its steps; ``wait()`` returns
        once it is ``cancelled``. Its replay stops at the first step without a settled record
        (that step's tasks are withdrawn now, as a plain cancel does); the undos' own results
        are kept. A second compensating cancel meanwhile returns the run unchanged; a plain one
        cancels it at once and the remaining undos do not run. A run with no completed step is
        cancelled at once. A cancelled run's error is ``None``, unless undos failed: then
        ``StepError("cancelled", code="cancelled", details={"compensation_failed": [...]})``.

        Raises:
            UnknownRunError: If no run has this id.
            ValueError: If the run is finished (completed, failed, cancelled or dead), naming
                its status.
            TypeError: If *compensate* is not a bool.
        """
        _storable(run_id)
        if not isinstance(compensate, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            msg = f"compensate must be True or False, got {compensate!r}"
            raise TypeError(msg)
        try:
            run = await self._store.cancel_run(run_id, compensate=compensate, now=self._now())
        except LookupError:
            raise UnknownRunError(run_id) from None
        for reached in [run, *await self._below(run_id)]:
            await self._loop.cancelled(reached.run_id)
            if reached.status != "cancelled" or reached.updated_at != run.updated_at:
                continue
            self._finishes.finished(reached)
            if self._probes.probes:
                self._probes.run_ended(reached.run_id, reached.workflow, "cancelled")
        # Pending runs (a turn of each undoes, then cancels) and a parent a cancelled child
        # woke: work for this engine's loop.
        self._loop.notify()
        return self._decoded(run)

    async def _below(self, run_id: str) -> list[Run]:
        """Every run below *run_id*: its children (``ctx.child``, ``ctx.start_child``), theirs..."""
        found: list[Run] = []
        level = [run_id]
        while level:
            children = [c for parent in level for c in await self._store.child_runs(parent)]
            found.extend(children)
            level = [c.run_id for c in children]
        return found

    async def send(
        self,
        run_id: str,
        topic: str,
        message: Any,
        *,
        message_id: str | None = None,
    ) -> None:
        """
        Send *message* to the run on *topic*: its workflow receives it with
        ``ctx.recv(topic)``, in send order, once.

        The message is stored with the run (durably, before this returns) and kept until a
        ``recv`` takes it, however long that is; a run waiting in ``recv`` on the topic is made
        runnable in the same transaction. With *message_id*, sending is idempotent: a message
        with an id the run has had already (read or not) stores nothing, for the run's life.

        Args:
            run_id: The run's id.
            topic: The topic (a non-empty name).
            message: JSON (no NaN or infinity, at most ``MAX_DEPTH`` deep).
            message_id: An id that makes the send idempotent, or ``None`` (default): every send
                is a new message (a PostgreSQL write retried after a lost connection may then
                store it twice; give an id where that matters).

        Raises:
            UnknownRunError: If no run has this id.
            ValueError: If the run is finished (naming its status); if *topic* or
                *message_id* is empty, has surrounding spaces, U+0000 or a lone surrogate.
            TypeError: If *message* is not JSON, or *topic* or *message_id* is not a string;
                nothing is written.
        """
        _storable(run_id)
        check_name(topic, "topic")
        if message_id is not None:
            check_name(message_id, "message_id")
        body = dump(JSON, message, f"message to run {run_id!r} on topic {topic!r}", hint=_JSON_ONLY)
        try:
            woke = await self._store.send(
                NewMessage(run_id, topic, body, self._now(), message_id=message_id)
            )
        except LookupError:
            raise UnknownRunError(run_id) from None
        if woke:
            self._loop.notify(due=False)

    async def get_event(
        self,
        run_id: str,
        key: str,
        *,
        timeout: DurationLike | None = None,
        poll_ms: int = 100,
    ) -> Any:
        """
        The value the run last set for event *key* (``ctx.set_event``), or ``None``.

        Without *timeout* it answers now. With one it waits, in real time (the event loop's
        clock, whatever the engine's clock), until the run sets the key, and returns ``None``
        if it has not within *timeout* or the run finished without setting it. An event a
        turn of this engine sets is seen at once; one set elsewhere at the next read of the
        store, every *poll_ms*.

        Args:
            run_id: The run's id.
            key: The event's key.
            timeout: The longest wait (seconds, a ``timedelta`` or a string like ``"30s"``);
                default none (answer now).
            poll_ms: How often the store is read again while waiting, in ms (> 0).

        Raises:
            UnknownRunError: If no run has this id.
            TypeError: If *key* is not a string.
            ValueError: If *key* is not a valid name, or *timeout* or *poll_ms* is not valid.
        """
        _storable(run_id)
        check_name(key, "event key")
        poll = checked_ms(poll_ms, "poll_ms") / 1000
        loop = asyncio.get_running_loop()
        wait = 0.0 if timeout is None else to_seconds(timeout, name="timeout")
        deadline = loop.time() + wait
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            self._finishes.watch_events(run_id, waiter)
            try:
                # The run before the value: a run finished then can set nothing after.
                run = await self._store.get_run(run_id)
                if run is None:
                    raise UnknownRunError(run_id)
                found = await self._store.event_value(run_id, key)
                if found is not None:
                    return found.value
                left = deadline - loop.time()
                if left <= 0 or run.status in FINISHED:
                    return None
                await asyncio.wait((waiter,), timeout=min(poll, left))
            finally:
                self._finishes.unwatch_events(run_id, waiter)

    async def redispatch_pending(self, run_id: str) -> int:
        """
        Enqueue the run's pending dispatched steps again, the same ``step_id`` with
        ``attempt + 1`` (queued, unclaimed older attempts are withdrawn); return how many.

        Safe on a healthy run: a worker still running an older attempt may finish it, and the
        first result to land completes the step. Use it for a dispatch that was lost (a worker
        crashed with its claim renewed elsewhere, a store restored from backup).

        Raises:
            UnknownRunError: If no run has this id.
        """
        _storable(run_id)
        if await self._store.get_run(run_id) is None:
            raise UnknownRunError(run_id)
        count = await self._store.redispatch_pending(run_id, now=self._now())
        if count:
            self._loop.notify()
        return count

    # -- the worker loop --------------------------------------------------------------------------

    async def run_until_idle(self, *, advance_time: bool = False) -> None:
        """
        Do everything that is due now: pending runs, due timers, queued tasks of the groups this
        engine serves, expired leases and claims; return when nothing is left to do now.

        Args:
            advance_time: Also move a virtual clock (one with ``advance``) to each next due time
                (a ``wake_at``, a lease or a claim expiring, a liveness window) and go on, until
                nothing is left.

        Raises:
            ValueError: If *advance_time* is set but the engine's clock cannot be advanced.
        """
        if advance_time:
            await self._loop.advance_through(None)
        else:
            await self._loop.drain()

    async def run_for(self, duration: DurationLike) -> None:
        """
        Move a virtual clock forward by *duration*, doing at each due time on the way what is due
        then (as ``run_until_idle(advance_time=True)`` does), and stop at the end of it.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"1.5s"``.

        Raises:
            ValueError: If the engine's clock cannot be advanced, or *duration* is not a valid
                duration.
        """
        seconds = to_seconds(duration, name="duration")
        await self._loop.advance_through(self._now() + round(seconds * 1000))

    async def work(self, *, poll_ms: int = 1000, concurrency: int = 32) -> None:
        """
        The worker loop: run turns and step attempts, up to *concurrency* at once, until
        ``stop()`` is called or the task running it is cancelled.

        It polls every *poll_ms* for pending runs, due timers, expired leases and claims; it
        wakes at once for runs, tasks and results written by this process, and at each known
        due time. On PostgreSQL it also wakes for other processes' writes (NOTIFY); under a
        stream of them its claims are at least min(10 ms, *poll_ms* / 5) apart, each taking all
        that came meanwhile (a lone one is claimed at once). A run this engine starts while
        this loop has a free slot is taken as it is made and its first turn runs at once.
        ``stop()`` drains: no new claims, attempts in flight finish and report, turns are
        stopped and their leases released. Cancelling the task stops it promptly (attempts
        in flight are abandoned and their claims released). Runs waiting for a version of one of
        its workflows that it does not serve are told once per ``(workflow, version)``, as a
        WARNING on ``effects.durable`` naming how many wait (``run_until_idle`` looks too; a
        look is made at most once a minute). A ``StoreError`` (a full disk, say)
        does not end the loop: it is logged and the poll tried again, and a turn whose write
        failed is abandoned, its run neither finished nor failed but replayed a second later.

        Args:
            poll_ms: The longest idle wait between polls, in ms (> 0).
            concurrency: The most turns and attempts in flight at once (>= 1).
        """
        poll = checked_ms(poll_ms, "poll_ms")
        checked_count(concurrency, "concurrency", least=1)
        await self._loop.work(poll, concurrency)

    def stop(self) -> None:
        """Ask ``work()`` to drain and return (safe from a signal handler via the loop)."""
        self._loop.stop()


def _finished_statuses(statuses: object) -> tuple[str, ...]:
    """*statuses* checked as finished run statuses, each once, in the order given."""
    if isinstance(statuses, str) or not isinstance(statuses, Iterable):
        msg = (
            f"statuses must be a sequence of run statuses such as ('completed', 'failed'),"
            f" got {statuses!r}"
        )
        raise TypeError(msg)
    chosen: list[str] = []
    given: Iterable[object] = statuses  # pyright: ignore[reportUnknownVariableType]
    for status in given:
        if not isinstance(status, str):
            msg = f"statuses must hold run statuses (strings), got {status!r}"
            raise TypeError(msg)
        if status not in FINISHED:
            msg = (
                f"prune takes finished statuses only ({', '.join(PRUNABLE_STATUSES)}); {status!r}"
                " is not one: a pending, running or suspended run is never pruned"
            )
            raise ValueError(msg)
        if status not in chosen:
            chosen.append(status)
    return tuple(chosen)


def _scheduled(
    recurring: Iterable[Recurring], workflows: Mapping[str, WorkflowDef[Any, Any]]
) -> dict[str, Scheduled]:
    """
    The recurrings by name, each with the workflow this engine serves and its stored input.

    Raises:
        TypeError: If one is not a ``Recurring``, or its input or its schedule's state cannot
            be stored as JSON.
        ValueError: For two with one name, or one of a workflow this engine does not serve (or
            serves at another version).
    """
    found: dict[str, Scheduled] = {}
    given = list(recurring)
    for item in given:
        if not isinstance(item, Recurring):  # pyright: ignore[reportUnnecessaryIsInstance]
            msg = f"recurring takes Recurring(name, workflow, schedule) values, got {item!r}"
            raise TypeError(msg)
    for item in _by_name(given, Recurring, "recurring").values():
        entry: Recurring = item
        definition = workflows.get(entry.workflow_name)
        wanted = entry.workflow
        if definition is None or (
            isinstance(wanted, WorkflowDef) and wanted.version != definition.version
        ):
            known = ", ".join(
                sorted(f"{w.name!r} (version {w.version})" for w in workflows.values())
            )
            named = (
                repr(wanted)
                if isinstance(wanted, str)
                else f"{wanted.name!r} (version {wanted.version})"
            )
            msg = (
                f"recurring {entry.name!r} starts workflow {named}, which this engine does not"
                f" serve (it has {known or 'none'}): pass the workflow in workflows=[...]"
            )
            raise ValueError(msg)
        text = dump(definition.codec, entry.input, f"input of recurring {entry.name!r}")
        try:
            dump_state(entry.schedule.initial())
        except (TypeError, ValueError) as error:
            msg = (
                f"the schedule of recurring {entry.name!r} has a state that cannot be stored"
                f" as JSON ({error}): a schedule's state must be plain data"
            )
            raise TypeError(msg) from None
        found[entry.name] = Scheduled(entry, definition, text)
    return found


def _storable(run_id: object) -> None:
    """
    Refuse an id that is not a string (``TypeError``) and, as unknown, one no store can hold,
    so no run can have it (NUL, a lone surrogate): the store's driver would otherwise fail with
    an error of its own (PostgreSQL refuses NUL in text; an encoder refuses surrogates).
    """
    if not isinstance(run_id, str):
        msg = f"run_id must be a str, got {type(run_id).__name__}: {run_id!r}"
        raise TypeError(msg)
    if "\x00" in run_id:
        raise UnknownRunError(run_id)
    if not run_id.isascii():
        try:
            run_id.encode()
        except UnicodeEncodeError:
            raise UnknownRunError(run_id) from None


def probes_of(engine: Engine) -> Probes:
    """The telemetry probes of *engine* (for ``effects.durable.instrumentation``)."""
    return engine._probes  # pyright: ignore[reportPrivateUsage]


def cached_runs_of(engine: Engine) -> CachedRuns | None:
    """The cache of suspended runs of *engine* (``None``: ``cached_runs=0``), for tests."""
    return engine._loop.cache  # pyright: ignore[reportPrivateUsage]
