"""The ``Engine``: starts runs, runs their turns, serves step tasks, recovers what was lost."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
import json
import logging
import math
import os
import random as _random
import secrets
import socket
from collections.abc import Coroutine, Iterable
from types import TracebackType
from typing import Any, Final, TypeVar, overload

import attrs

from effects import Clock
from effects.durable._attempt_runner import AttemptRunner
from effects.durable._bounds import checked_count, checked_ms
from effects.durable._codec import dump, from_data
from effects.durable._context import WorkflowContext, suspended
from effects.durable._definitions import StepDef, WorkflowDef, check_name
from effects.durable._failures import is_failure
from effects.durable._queue import Queue
from effects.durable._records import FINISHED, Checkpoint, Event, Run, Task
from effects.durable._renewal import Renewal
from effects.durable._store import (
    ClaimedRun,
    NewEvent,
    NewRun,
    RunAdvance,
    StaleTurnError,
    Store,
)
from effects.durable._time import WallClock, epoch_ms
from effects.durable._trail import merge_events
from effects.durable._turn import StepWaiter, Turn
from effects.durable.errors import StepError, StoreError, UnknownRunError
from schedules import DurationLike, RandomLike, to_seconds

__all__ = ["Engine", "open_store"]

I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741

_log: Final = logging.getLogger("effects.durable")
_SUSPENDED: Final = suspended()
# Progress without a liveness window or lease is persisted at most this often (ms).
_PROGRESS_INTERVAL_MS: Final = 1000
# How many turns and attempts run_until_idle keeps in flight at once.
_DRAIN_CONCURRENCY: Final = 64
# A turn abandoned because a write of it failed is replayed no sooner than this (ms).
_STORE_RETRY_MS: Final = 1000
# The most runs remembered as suspended here by their last turn, waiting for results.
_WAITING_HERE_MAX: Final = 10_000
# The least time between two claims that other processes' NOTIFYs prompt (seconds; at most a
# fifth of work()'s poll_ms).
_HINT_CLAIM_GAP_S: Final = 0.010


def open_store(store: str | Store) -> Store:
    """
    The store a URL names: ``sqlite:///path.db`` or ``postgresql://...``; a ``Store`` as it is.

    Raises:
        ValueError: If the URL's scheme is not one of those, or the URL is malformed.
        StoreError: For a PostgreSQL URL when the ``postgres`` extra is not installed.
    """
    if not isinstance(store, str):
        return store
    scheme = store.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from effects.durable._store_sqlite import SqliteStore  # noqa: PLC0415

        return SqliteStore(store)
    if scheme in ("postgresql", "postgres"):
        try:
            from effects.durable._store_postgres import PostgresStore  # noqa: PLC0415
        except ImportError as error:
            msg = (
                f"the PostgreSQL store needs psycopg and psycopg-pool ({error}):"
                " pip install 'effect-schedules[postgres]'"
            )
            raise StoreError(msg) from error

        return PostgresStore(store)
    msg = f"store must be a 'sqlite:///path.db' or 'postgresql://...' URL, got {store!r}"
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

    Raises:
        TypeError: If a definition is not one made by ``@workflow`` / ``@step`` / ``Queue``.
        ValueError: For two definitions with one name, or an option out of range.
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
    ) -> None:
        self._workflows: dict[str, WorkflowDef[Any, Any]] = _by_name(
            workflows, WorkflowDef, "workflow"
        )
        self._steps: dict[str, StepDef[Any, Any]] = _by_name(steps, StepDef, "step")
        self._queues: dict[str, Queue] = _by_name(queues, Queue, "queue")
        self._lease_ms = checked_ms(lease_ms, "lease_ms")
        self._reconcile_ms = checked_ms(reconcile_ms, "reconcile_ms")
        self._redispatch_ms = (
            None
            if remote_redispatch_ms is None
            else checked_ms(remote_redispatch_ms, "remote_redispatch_ms")
        )
        self._redispatch_max = checked_count(
            remote_redispatch_max, "remote_redispatch_max", least=0
        )
        self._max_recovery = (
            None
            if max_recovery_attempts is None
            else checked_count(max_recovery_attempts, "max_recovery_attempts", least=0)
        )
        for definition in self._steps.values():
            queue = definition.policy.queue
            if queue is not None and queue not in self._queues:
                msg = f"step {definition.name!r} names queue {queue!r}, which this engine lacks"
                raise ValueError(msg)
        self._store = open_store(store)
        self._clock: Clock = WallClock() if clock is None else clock
        self._random: RandomLike = _random.Random() if random is None else random
        self._workflow_keys = [(w.name, w.version) for w in self._workflows.values()]
        self._groups = sorted({s.group for s in self._steps.values()})
        self._id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._inflight: set[asyncio.Task[None]] = set()
        self._turns: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        # Whether something may have made work since work() last looked (every wake-up but a
        # worker's attempt ending, which frees a slot and nothing else).
        self._news = True
        # Whether the due times next_due reads may have changed since work() last read them.
        self._due_news = True
        self._stopping = False
        self._opened = 0
        self._waiters: dict[str, StepWaiter] = {}
        self._parked: dict[int, tuple[int, asyncio.Event]] = {}
        self._poll_ms = 1000
        # While work() runs: its concurrency and context (start() spawns turns within both).
        # wait(): its waiters by run id, and the runs in a turn of this engine now.
        self._finish_waiters: dict[str, list[asyncio.Future[Run | None]]] = {}
        self._in_turn: collections.Counter[str] = collections.Counter()
        self._waiting_here: dict[str, None] = {}
        self._finished_by_turn: set[str] = set()
        # How many NOTIFYs of other processes came (work() and turns compare counts).
        self._hints = 0
        self._working = False
        self._concurrency = 0
        # Runs start() is inserting leased to this engine, their slots taken.
        self._starting = 0
        self._work_context = contextvars.copy_context()
        self.redispatch_ms: int | None = self._redispatch_ms
        self.redispatch_max: int = remote_redispatch_max
        self.reconcile_ms: int = self._reconcile_ms
        self._attempts = AttemptRunner(
            store=self._store,
            clock=self._clock,
            owner=self._id,
            lease_ms=self._lease_ms,
            steps=self._steps,
            hear=self._hear,
        )

    def __repr__(self) -> str:
        return (
            f"Engine({self._store.url!r}, workflows={sorted(self._workflows)},"
            f" steps={sorted(self._steps)})"
        )

    @property
    def poll_ms(self) -> int:
        """The poll interval of the running ``work()`` loop (1000 ms until one runs)."""
        return self._poll_ms

    @property
    def store(self) -> Store:
        """The engine's store."""
        return self._store

    @property
    def clock(self) -> Clock:
        """The engine's clock."""
        return self._clock

    @property
    def id(self) -> str:
        """This engine's owner id on leases and claims (``host:pid:random``)."""
        return self._id

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
            hint = getattr(self._store, "wake_hint", None)
            wants = {
                "runs": bool(self._workflow_keys),
                "tasks": bool(self._groups),
                "due": self.due_changed,
            }
            if callable(hint) and inspect.isawaitable(given := hint(self._work_now, **wants)):
                await given
        self._opened += 1

    async def close(self) -> None:
        """Stop work in flight (releasing leases and claims) and close the store."""
        if self._opened == 0:
            return
        self._opened -= 1
        if self._opened:
            return
        await self._cancel_inflight()
        await self._store.close()

    def _now(self) -> int:
        return epoch_ms(self._clock)

    def _notify(self, *, due: bool = True) -> None:
        """Wake work() and run_until_idle: something may be claimable (*due*: or due later)."""
        self._news = True
        if due:
            self._due_news = True
        if self._wake is not None:
            self._wake.set()

    def _work_now(self) -> None:
        """
        Another process's write (a NOTIFY) may be work to claim now; a time to come is told
        apart, with ``due_changed``.
        """
        self._hints += 1
        self._notify(due=False)

    def _dispatched(self) -> None:
        """A turn of this engine queued attempts: news for its own workers, if it has any."""
        if self._groups:
            self._notify(due=False)

    def due_changed(self) -> None:
        """A time to come was written (a timer, a task available later): work() reads again."""
        self._due_news = True

    def _attempt_ended(self) -> None:
        """
        An attempt finished: with workflows here its result may have woken a run of this
        process (news); an engine of workers only has just a slot back.
        """
        if self._workflow_keys:
            # A result makes its run claimable now; the time it may wait for comes with the
            # turn that decides it.
            self._notify(due=False)
        elif self._wake is not None:
            self._wake.set()

    # -- what turns ask of their engine (TurnHost) ----------------------------------------------

    def waiter(self, step_id: str) -> StepWaiter:
        """The in-memory waiter of a dispatched step awaited on the liveness path."""
        found = self._waiters.get(step_id)
        if found is None:
            found = self._waiters[step_id] = StepWaiter()
        return found

    def drop_waiter(self, step_id: str) -> None:
        """Forget a liveness waiter."""
        self._waiters.pop(step_id, None)

    def queue_limit(self, name: str) -> int:
        """
        The concurrency of this engine's queue *name*.

        Raises:
            ValueError: If the engine has no queue of that name.
        """
        queue = self._queues.get(name)
        if queue is None:
            known = ", ".join(map(repr, sorted(self._queues))) or "none"
            msg = f"unknown queue {name!r}: this engine has {known}"
            raise ValueError(msg)
        return queue.concurrency

    def _virtual(self) -> bool:
        return callable(getattr(self._clock, "advance", None))

    async def sleep_until(self, deadline: int, event: asyncio.Event) -> None:
        """
        Wait until epoch ms *deadline* or until *event* is set, at most one poll interval (so
        what other processes record is read again). On a virtual clock the wait is parked:
        ``run_until_idle(advance_time=True)`` moves the clock to it.
        """
        now = self._now()
        if deadline <= now or event.is_set():
            return
        deadline = min(deadline, now + self._poll_ms)
        if self._virtual():
            key = id(event)
            self._parked[key] = (deadline, event)
            self._notify()
            try:
                await event.wait()
            finally:
                self._parked.pop(key, None)
            return
        timeout = (deadline - now) / 1000
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: see work()
                await event.wait()

    def _parked_count(self) -> int:
        return sum(1 for _, event in self._parked.values() if not event.is_set())

    def _wake_parked(self) -> None:
        now = self._now()
        for deadline, event in list(self._parked.values()):
            if deadline <= now:
                event.set()

    def _hear(
        self, step_id: str, attempt: int, *, picked_up: bool = False, finished: bool = False
    ) -> None:
        """A worker of this process claimed, beat for or finished an attempt: tell its waiter."""
        waiter = self._waiters.get(step_id)
        if waiter is not None and waiter.attempt == attempt:
            waiter.last_beat = self._now()
            waiter.picked_up = waiter.picked_up or picked_up
            waiter.finished = waiter.finished or finished
            waiter.event.set()
        elif waiter is not None and finished:
            # A result of another attempt (a late one) may still complete the step.
            waiter.finished = True
            waiter.event.set()

    def _wake_event(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
        return self._wake

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
        self, workflow: WorkflowDef[I, O], input: I, *, run_id: str | None = None
    ) -> str: ...
    @overload
    async def start(self, workflow: str, input: Any, *, run_id: str | None = None) -> str: ...
    async def start(
        self,
        workflow: WorkflowDef[Any, Any] | str,
        input: Any,  # noqa: A002 - the design's name
        *,
        run_id: str | None = None,
    ) -> str:
        """
        Start a run of *workflow* with *input*; return its id.

        Args:
            workflow: A ``WorkflowDef`` passed to this engine, or its name.
            input: The workflow's input (JSON, or what its codec takes).
            run_id: The run's id; default a random one. Starting an id that exists returns it
                and changes nothing (idempotent).

        Raises:
            ValueError: If this engine has no such workflow, or *run_id* names a run of
                another workflow.
            TypeError: If *input* cannot be stored (nothing is written).
        """
        definition = self._workflow(workflow)
        if run_id is None:
            run_id = secrets.token_hex(16)
        else:
            check_name(run_id, "run_id")
        text = dump(definition.codec, input, f"input of workflow {definition.name!r}")
        now = self._now()
        # A working engine with a free slot that serves the workflow takes the run as it makes
        # it, and runs its first turn at once: no claim, no wake-up of anyone.
        # The slot is taken before the insert: starts at once never overrun the concurrency.
        token = (
            f"{self._id}:{secrets.token_hex(6)}"
            if self._working
            and not self._stopping
            and len(self._inflight) + self._starting < self._concurrency
            and self._workflows.get(definition.name) is definition
            else None
        )
        lease_until = None if token is None else now + self._lease_ms
        reserved = 0 if token is None else 1
        self._starting += reserved
        try:
            existing = await self._store.create_run(
                NewRun(run_id, definition.name, definition.version, text, now, token, lease_until),
                (NewEvent("run.started", now, None, {"workflow": definition.name}),),
            )
        finally:
            self._starting -= reserved
        if isinstance(existing, ClaimedRun):
            if self._working and not self._stopping:
                self._spawn_turn(existing, self._work_context)
            else:
                await self._release(existing)
            return run_id
        if existing is not None and existing.workflow != definition.name:
            msg = (
                f"run {run_id!r} exists and is a run of workflow {existing.workflow!r},"
                f" not {definition.name!r}"
            )
            raise ValueError(msg)
        self._notify(due=False)
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
            waiters = self._finish_waiters.setdefault(run_id, [])
            waiters.append(waiter)
            try:
                if polled or (run_id not in self._in_turn and run_id not in self._waiting_here):
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
                waiters.remove(waiter)
                if not waiters:
                    del self._finish_waiters[run_id]

    def _finished(self, run: Run) -> None:
        """A turn of this engine finished *run* (as stored): hand it to whoever waits for it."""
        for waiter in self._finish_waiters.get(run.run_id, ()):
            if not waiter.done():
                waiter.set_result(run)

    def _turn_ended(self, run_id: str) -> None:
        """A turn of this engine ended: whoever waits for its run and has no answer reads."""
        self._in_turn[run_id] -= 1
        if not self._in_turn[run_id]:
            del self._in_turn[run_id]
        for waiter in self._finish_waiters.get(run_id, ()):
            if not waiter.done():
                waiter.set_result(None)

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
    ) -> list[Run]:
        """
        Runs, newest first.

        Args:
            status: Only runs with this status.
            workflow: Only runs of this workflow.
            limit: At most this many.
            stale_ms: Only suspended runs whose oldest pending dispatch is older than this.
        """
        stale_before = None if stale_ms is None else self._now() - stale_ms
        return await self._store.list_runs(
            status=status, workflow=workflow, limit=limit, stale_before=stale_before
        )

    async def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """
        The run's checkpoints by sequence number.

        Raises:
            UnknownRunError: If no run has this id.
        """
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
        stored = await self._store.events(run_id)
        if not stored and await self._store.get_run(run_id) is None:
            raise UnknownRunError(run_id)
        return merge_events(stored, await self._store.checkpoints(run_id))

    async def requeue(self, run_id: str) -> Run:
        """
        Retry a failed, dead or cancelled run: every failed checkpoint is reset to a fresh first
        attempt (attempts 0, retryable again, due now) and the run becomes pending. Completed
        steps are not run again.

        Raises:
            UnknownRunError: If no run has this id.
            ValueError: If the run is not failed, dead or cancelled.
        """
        try:
            run = await self._store.requeue(run_id, self._now())
        except LookupError:
            raise UnknownRunError(run_id) from None
        self._notify()
        return run

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
        if await self._store.get_run(run_id) is None:
            raise UnknownRunError(run_id)
        count = await self._store.redispatch_pending(run_id, now=self._now())
        if count:
            self._notify()
        return count

    # -- the loop ---------------------------------------------------------------------------------

    def _spawn(
        self,
        coroutine: Coroutine[Any, Any, None],
        *,
        turn: bool,
        context: contextvars.Context | None = None,
    ) -> None:
        # A turn spawned by start() runs in (a copy of) work()'s context, not its caller's.
        task = asyncio.get_running_loop().create_task(
            coroutine, context=None if context is None else context.copy()
        )
        self._inflight.add(task)
        if turn:
            self._turns.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._inflight.discard(finished)
            self._turns.discard(finished)
            if turn:
                # A turn said as it ended whether it left news (see _turn); one cancelled
                # before it began did not. Its slot is free now, in any case.
                if finished.cancelled():
                    self._news = True
                if self._wake is not None:
                    self._wake.set()
            else:
                self._attempt_ended()
            if not finished.cancelled() and finished.exception() is not None:
                _log.error(
                    "a turn or step attempt failed unexpectedly", exc_info=finished.exception()
                )

        task.add_done_callback(done)

    async def _claim(self, free: int) -> int:
        """Claim runnable runs, then tasks, up to *free* in all; start them; return how many."""
        claimed = 0
        now = self._now()
        if self._workflow_keys and free > 0:
            runs = await self._store.claim_runs(
                workflows=self._workflow_keys,
                now=now,
                lease_until=now + self._lease_ms,
                owner=self._id,
                limit=free,
            )
            for run in runs:
                self._spawn_turn(run)
            claimed += len(runs)
        if self._groups and free > claimed:
            tasks = await self._store.claim_tasks(
                groups=self._groups,
                now=now,
                claim_until=now + self._lease_ms,
                worker=self._id,
                limit=free - claimed,
            )
            for task in tasks:
                self._hear(task.step_id, task.attempt, picked_up=True)
                self._spawn(self._attempt(task, now), turn=False)
            claimed += len(tasks)
        return claimed

    async def _release(self, claimed: ClaimedRun) -> None:
        """Give back the lease of a run taken at start that no turn will run (work() ended)."""
        turn = self._make_turn(claimed)
        try:
            await turn.commit(RunAdvance("release"))
        except (StoreError, StaleTurnError):
            _log.debug("run %s: could not release the lease", claimed.run.run_id, exc_info=True)
        self._notify(due=False)

    async def _recover(self) -> bool:
        """One recovery pass; whether it made anything runnable."""
        report = await self._store.recover(
            now=self._now(),
            max_recovery_attempts=self._max_recovery,
            reconcile_ms=self._reconcile_ms,
        )
        if report.recovered_runs or report.lost_tasks:
            self._notify()
        for run_id in report.recovered_runs:
            _log.warning("recovered run %s (its lease expired)", run_id)
        for run_id in report.dead_runs:
            _log.error("run %s is dead: its lease expired too many times", run_id)
        for step_id in report.lost_tasks:
            _log.warning("step %s lost its worker; its attempt counts as failed", step_id)
        return bool(report.recovered_runs or report.lost_tasks)

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
            await self._advance_through(None)
        else:
            await self._drain()

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
        await self._advance_through(self._now() + round(seconds * 1000))

    async def _advance_through(self, until: int | None) -> None:
        advance = getattr(self._clock, "advance", None)
        if not callable(advance):
            msg = (
                "moving time needs a clock with advance(), such as VirtualClock;"
                f" got {self._clock!r}"
            )
            raise ValueError(msg)
        while True:
            await self._drain()
            now = self._now()
            due = await self._store.next_due(now)
            parked = [deadline for deadline, event in self._parked.values() if not event.is_set()]
            if parked:
                due = min(parked) if due is None else min(due, *parked)
            if until is not None and (due is None or due > until):
                if until > now:
                    advance((until - now) / 1000)
                    self._wake_parked()
                await self._drain()
                return
            if due is None:
                return
            advance(max(0, due - now) / 1000)
            self._wake_parked()

    async def _drain(self) -> None:
        wake = self._wake_event()
        await self._recover()
        while True:
            wake.clear()
            free = _DRAIN_CONCURRENCY - len(self._inflight)
            # Claim in batches: one claim transaction per slot freed would cost more than it gives.
            claimed = (
                await self._claim(free)
                if free >= _DRAIN_CONCURRENCY // 4 or not self._inflight
                else 0
            )
            # A store that awaits the server (PostgreSQL) lets a turn or attempt end during the
            # claim, after the claim's snapshot was taken: the event says so, and we look again.
            settled = not wake.is_set()
            if not self._inflight:
                # Leases may have lapsed meanwhile; claim again only if that freed a run.
                if (
                    claimed == 0
                    and settled
                    and (
                        not await self._recover()
                        or (not await self._claim(_DRAIN_CONCURRENCY) and not wake.is_set())
                    )
                ):
                    return
                continue
            # A claim that took fewer than it asked for saw nothing more to take: what appears
            # later sets the event (this process) or waits for the end-of-drain look (others).
            if (
                claimed
                and (claimed >= free or not settled)
                and len(self._inflight) < _DRAIN_CONCURRENCY
            ):
                continue
            if not claimed and settled and self._parked_count() >= len(self._inflight):
                return  # all that is left waits for a time to come
            # Every turn and attempt that ends, and every wait that parks, sets the event.
            await wake.wait()

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
        in flight are abandoned and their claims released). A ``StoreError`` (a full disk, say)
        does not end the loop: it is logged and the poll tried again, and a turn whose write
        failed is abandoned, its run neither finished nor failed but replayed a second later.

        Args:
            poll_ms: The longest idle wait between polls, in ms (> 0).
            concurrency: The most turns and attempts in flight at once (>= 1).
        """
        poll = checked_ms(poll_ms, "poll_ms")
        checked_count(concurrency, "concurrency", least=1)
        self._poll_ms = poll
        self._stopping = False
        wake = self._wake_event()
        loop = asyncio.get_running_loop()
        self._concurrency = concurrency
        self._work_context = contextvars.copy_context()
        self._working = True
        last_recovery = -math.inf
        # When (loop time) the loop looks again unless told to, and whether it had no free slot
        # when it last looked: an attempt ending then is a reason to look.
        deadline = -math.inf
        full = False
        last_claim = -math.inf
        hint_gap = min(_HINT_CLAIM_GAP_S, poll / 5000)
        hints_seen = self._hints
        try:
            while not self._stopping:
                wake.clear()
                news, self._news = self._news, False
                timed_out = loop.time() >= deadline
                if news and self._hints != hints_seen and not full and not timed_out:
                    # Other processes' writes come in streams (a worker reporting result after
                    # result): the claims they prompt are at least hint_gap apart, and each
                    # takes all that came meanwhile. A lone hint is claimed at once.
                    gap = last_claim + hint_gap - loop.time()
                    if gap > 0:
                        await asyncio.sleep(gap)
                        if self._stopping:
                            break
                        # The claim below covers whatever news came during the gap.
                        wake.clear()
                        self._news = False
                hints_seen = self._hints
                if news or full or timed_out:
                    last_claim = loop.time()
                    due_news, self._due_news = self._due_news, False
                    now = self._now()
                    timeout = poll / 1000
                    # The due times are read again only when something may have moved them;
                    # news of work to do now leaves the deadline as it was.
                    read_due = due_news or timed_out
                    due: int | None = None
                    try:
                        if now - last_recovery >= poll:
                            await self._recover()
                            last_recovery = now
                        free = concurrency - len(self._inflight) - self._starting
                        claimed = await self._claim(free) if free > 0 else 0
                        # Judged now: an attempt ending during the reads below then counts.
                        full = len(self._inflight) + self._starting >= concurrency
                        # Fewer than asked for: nothing more was there to take; what appears
                        # later wakes the loop (this process, or a NOTIFY) or the next poll.
                        if claimed >= free > 0 and len(self._inflight) < concurrency:
                            self._news = True
                            self._due_news = self._due_news or due_news
                            continue
                        if read_due:
                            due = await self._store.next_due(now)
                    except StoreError as error:
                        # A full disk or a lost connection may pass: try again at the next poll.
                        _log.error(
                            "the worker loop could not use the store (next try in %d ms): %s",
                            poll,
                            error,
                        )
                        read_due = True
                    if read_due:
                        if due is not None:
                            timeout = min(timeout, max(0.0, (due - self._now()) / 1000))
                        deadline = loop.time() + timeout
                if self._stopping:
                    break
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that lands as the wake-up does, and work() would then not stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(deadline):
                        await wake.wait()
            self._working = False
            await self._drain_for_stop()
        except BaseException:
            self._working = False
            await self._cancel_inflight()
            raise

    def stop(self) -> None:
        """Ask ``work()`` to drain and return (safe from a signal handler via the loop)."""
        self._stopping = True
        self._notify()

    async def _drain_for_stop(self) -> None:
        for task in list(self._turns):
            task.cancel()
        if self._inflight:
            await asyncio.wait(set(self._inflight))

    async def _cancel_inflight(self) -> None:
        tasks = list(self._inflight)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- a turn -----------------------------------------------------------------------------------

    def _make_turn(self, claimed: ClaimedRun) -> Turn:
        return Turn(
            self._store,
            self._clock,
            self._random,
            self._lease_ms,
            claimed.run,
            claimed.token,
            self._steps,
            self._dispatched,
            self,
            lease_until=self._now() + self._lease_ms,
        )

    def _spawn_turn(self, claimed: ClaimedRun, context: contextvars.Context | None = None) -> None:
        # Counted at once: wait() called right after start() knows the run is in a turn here.
        self._in_turn[claimed.run.run_id] += 1
        self._spawn(self._turn(claimed), turn=True, context=context)

    async def _turn(self, claimed: ClaimedRun) -> None:
        run_id = claimed.run.run_id
        hints = self._hints
        turn: Turn | None = None
        try:
            turn = await self._turn_of(claimed)
        finally:
            self._turn_ended(run_id)
            finished = run_id in self._finished_by_turn
            self._finished_by_turn.discard(run_id)
            # A finished run, or one suspended to wait for results alone, leaves nothing to
            # claim: the slot it frees (the task's done callback wakes the loops for it) is
            # all. Anything else may have: a release, a timer, a task for later, or a result
            # that another process's NOTIFY announced during the turn (the claim it prompted
            # could not take the run; the suspending commit made it runnable).
            if not finished and (turn is None or not turn.waits_only or self._hints != hints):
                self._news = True
            # Which runs wait() need not read first (bounded: the oldest are forgotten).
            self._waiting_here.pop(run_id, None)
            if not finished and turn is not None and turn.waits_only:
                self._waiting_here[run_id] = None
                if len(self._waiting_here) > _WAITING_HERE_MAX:
                    del self._waiting_here[next(iter(self._waiting_here))]

    async def _turn_of(self, claimed: ClaimedRun) -> Turn | None:
        """The turn; its Turn when it ended as its workflow did (``None``: it broke off)."""
        run = claimed.run
        definition = self._workflows[run.workflow]
        turn = self._make_turn(claimed)
        ctx = WorkflowContext(turn, claimed.checkpoints)
        renewer = Renewal(
            self._lease_ms / 3000,
            lambda: self._store.renew_lease(
                turn.run.run_id, turn.token, turn.now() + self._lease_ms
            ),
            f"the lease of run {turn.run.run_id}",
        )
        try:
            await self._replay(definition, ctx, turn)
            if turn.broken is not None:
                raise turn.broken
        except StoreError as error:
            ctx.close()
            await self._abandon(turn, error)
            return None
        except StaleTurnError:
            # Either another turn holds the run now, or a worker's result changed a checkpoint
            # under this one while its lease still holds: then give the run back, so it replays
            # at once instead of waiting for the lease to expire and counting a recovery.
            _log.info("run %s: turn ended, a write of it was stale", run.run_id)
            ctx.close()
            with contextlib.suppress(StaleTurnError):
                await turn.commit(RunAdvance("release"))
            return None
        except asyncio.CancelledError:
            ctx.close()
            try:
                await turn.commit(RunAdvance("release"))
            except Exception:  # noqa: BLE001 - the lease then simply expires
                _log.debug("run %s: could not release the lease", run.run_id, exc_info=True)
            raise
        finally:
            ctx.close()
            renewer.cancel()
        return turn

    async def _replay(
        self, definition: WorkflowDef[Any, Any], ctx: WorkflowContext, turn: Turn
    ) -> None:
        run = turn.run
        try:
            value = await definition.fn(ctx, from_data(definition.codec, run.input))
        except _SUSPENDED:
            return
        except (StaleTurnError, StoreError):
            raise
        except BaseException as error:
            if not is_failure(error, in_thread=False):
                raise  # the engine stops: the turn gives the run back
            if turn.broken is not None:
                # Whatever the workflow made of a failed write, the run is not failed by it.
                raise turn.broken from error
            if ctx.fatal is None and ctx.is_suspended:
                return
            await self._finish_failed(turn, ctx.fatal or error)
            return
        if turn.broken is not None:
            return  # the workflow swallowed a failed write: finish nothing
        if ctx.fatal is not None:
            await self._finish_failed(turn, ctx.fatal)
            return
        if ctx.is_suspended:
            return
        try:
            text = dump(definition.codec, value, f"output of workflow {definition.name!r}")
        except TypeError as error:
            await self._finish_failed(turn, error)
            return
        now = turn.now()
        await turn.commit(
            RunAdvance("finish", status="completed", output=text),
            events=(NewEvent("run.completed", now),),
            now=now,
        )
        self._finished_by_turn.add(run.run_id)
        if self._finish_waiters:
            self._finished(
                attrs.evolve(
                    run, status="completed", output=json.loads(text), updated_at=now, wake_at=None
                )
            )

    async def _abandon(self, turn: Turn, error: StoreError) -> None:
        """
        End a turn whose write failed (a full disk, a lost connection): the run is neither
        finished nor failed by it, but suspended to be replayed after ``_STORE_RETRY_MS``
        (uncounted); if even that write fails, its lease expires and recovery replays it.
        """
        run_id = turn.run.run_id
        _log.error(
            "run %s: a write of its turn failed, the turn is abandoned (replayed in %d ms): %s",
            run_id,
            _STORE_RETRY_MS,
            error,
        )
        try:
            await turn.commit(RunAdvance("suspend", wake_at=turn.now() + _STORE_RETRY_MS))
        except (StoreError, StaleTurnError):
            _log.debug("run %s: could not suspend the abandoned turn", run_id, exc_info=True)

    async def _finish_failed(self, turn: Turn, error: BaseException) -> None:
        now = turn.now()
        step_error = StepError.from_exception(error)
        await turn.commit(
            RunAdvance("finish", status="failed", error=step_error),
            events=(NewEvent("run.failed", now, None, {"error": step_error.to_json()}, "error"),),
            now=now,
        )
        self._finished_by_turn.add(turn.run.run_id)
        if self._finish_waiters:
            self._finished(
                attrs.evolve(
                    turn.run, status="failed", error=step_error, updated_at=now, wake_at=None
                )
            )

    # -- a step attempt ---------------------------------------------------------------------------

    async def _attempt(self, task: Task, claimed_at: int) -> None:
        await self._attempts.run(task, claimed_at)
        self._hear(task.step_id, task.attempt, finished=True)
        self._attempt_ended()
