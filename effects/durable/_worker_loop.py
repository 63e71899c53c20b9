"""
The worker loop: it claims runs and tasks as slots allow, runs their turns and attempts, and
recovers what was lost; and it is what those turns ask of their engine (``TurnHost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Final

from effects import Clock
from effects.durable._attempt_runner import AttemptRunner
from effects.durable._cached_runs import CachedRuns
from effects.durable._definitions import StepDef, WorkflowDef
from effects.durable._finishes import Finishes
from effects.durable._probes import Attempt, Probes
from effects.durable._queue import Queue
from effects.durable._records import Task
from effects.durable._recurrences import Recurrences
from effects.durable._store import ClaimedRun, RecoveryReport, Store
from effects.durable._store.rules import task_name
from effects.durable._time import epoch_ms
from effects.durable._turn import StepWaiter
from effects.durable._turn_runner import TurnEnd, TurnRunner
from effects.durable.errors import StoreError
from schedules import RandomLike

__all__ = ["WorkerLoop"]

_log: Final = logging.getLogger("effects.durable")
# How many turns and attempts run_until_idle keeps in flight at once.
_DRAIN_CONCURRENCY: Final = 64
# The most recurring polls one drain makes (each steps at most a batch of due times per
# recurring; one suffices unless a catch-up is longer than a batch).
_DRAIN_RECURRING_POLLS: Final = 1000
# The least time between two claims that other processes' NOTIFYs prompt (seconds; at most a
# fifth of work()'s poll_ms).
_HINT_CLAIM_GAP_S: Final = 0.010
# How often (engine clock ms) work() and run_until_idle look for runs waiting for a version of
# this engine's workflows that it does not serve: a look reads every waiting run, so it is
# spaced out, not made on every poll.
_UNSERVED_EVERY_MS: Final = 60_000


class WorkerLoop:
    """
    One engine's worker loop and its state: the turns and attempts in flight, whether something
    may be claimable now (news) or due later (due news), the wake-ups that say so, the slots
    ``start()`` takes, and the waits that turns park on a virtual clock. ``work()`` and
    ``drain()`` (``run_until_idle``) both claim through it.

    It is also the ``TurnHost`` of the turns it runs: the engine's options they read, the
    in-memory waiters of dispatched steps that workers of this process tell, and their waits.
    """

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        random: RandomLike,
        owner: str,
        lease_ms: int,
        reconcile_ms: int,
        redispatch_ms: int | None,
        redispatch_max: int,
        max_recovery: int | None,
        compensation_retries: int,
        workflows: Mapping[str, WorkflowDef[Any, Any]],
        steps: Mapping[str, StepDef[Any, Any]],
        queues: Mapping[str, Queue],
        workflow_keys: Sequence[tuple[str, str]],
        groups: Sequence[str],
        finishes: Finishes,
        probes: Probes,
        recurrences: Recurrences,
        cached_runs: int = 0,
    ) -> None:
        self._store, self._clock, self._owner, self._lease_ms = store, clock, owner, lease_ms
        self._recurrences = recurrences
        self._max_recovery, self._queues = max_recovery, queues
        self._workflow_keys, self._groups = workflow_keys, groups
        self._finishes = finishes
        self._probes = probes
        #: What turns read (TurnHost): the engine's options, and work()'s poll interval (1000
        #: ms until it runs).
        self.redispatch_ms = redispatch_ms
        self.redispatch_max = redispatch_max
        self.reconcile_ms = reconcile_ms
        self.compensation_retries = compensation_retries
        self.poll_ms = 1000
        #: The parked workflows of suspended runs (``Engine``'s ``cached_runs``; ``None``: off).
        self.cache = CachedRuns(cached_runs) if cached_runs > 0 else None
        self._turns = TurnRunner(
            store=store,
            clock=clock,
            random=random,
            lease_ms=lease_ms,
            workflows=workflows,
            steps=steps,
            host=self,
            dispatched=self._dispatched,
            finishes=finishes,
            probes=probes,
            cache=self.cache,
        )
        self._attempts = AttemptRunner(
            store=store,
            clock=clock,
            owner=owner,
            lease_ms=lease_ms,
            steps=steps,
            hear=self._hear,
            probes=probes,
        )
        self._inflight: set[asyncio.Task[None]] = set()
        self._turn_tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        # Whether something may have made work since work() last looked (every wake-up but a
        # worker's attempt ending, which frees a slot and nothing else).
        self._news = True
        # Whether the due times next_due reads may have changed since work() last read them.
        self._due_news = True
        self._stopping = False
        self._waiters: dict[str, StepWaiter] = {}
        self._parked: dict[int, tuple[int, asyncio.Event]] = {}
        # How many NOTIFYs of other processes came (work() and turns compare counts).
        self._hints = 0
        # While work() runs: its concurrency and context (start() spawns turns within both).
        self._working = False
        self._concurrency = 0
        # Runs start() is inserting leased to this engine, their slots taken.
        self._starting = 0
        # When the loop last looked for unserved versions, and the pairs it warned of (once
        # each for the engine's life).
        self._unserved_at = -math.inf
        self._warned: set[tuple[str, str]] = set()
        self._work_context = contextvars.copy_context()

    def _now(self) -> int:
        return epoch_ms(self._clock)

    # -- news -------------------------------------------------------------------------------------

    def notify(self, *, due: bool = True) -> None:
        """Wake work() and run_until_idle: something may be claimable (*due*: or due later)."""
        self._news = True
        if due:
            self._due_news = True
        if self._wake is not None:
            self._wake.set()

    def work_now(self) -> None:
        """
        Another process's write (a NOTIFY) may be work to claim now; a time to come is told
        apart, with ``due_changed``.
        """
        self._hints += 1
        self.notify(due=False)

    def _dispatched(self) -> None:
        """A turn of this engine queued attempts: news for its own workers, if it has any."""
        if self._groups:
            self.notify(due=False)

    def due_changed(self) -> None:
        """A time to come was written (a timer, a task available later): work() reads again."""
        self._due_news = True

    def event_set(self, run_id: str) -> None:
        """A turn here set an event of the run: ``get_event`` waiters of this engine read it."""
        self._finishes.event_set(run_id)

    def _attempt_ended(self) -> None:
        """
        An attempt finished: with workflows here its result may have woken a run of this
        process (news); an engine of workers only has just a slot back.
        """
        if self._workflow_keys:
            # A result makes its run claimable now; the time it may wait for comes with the
            # turn that decides it.
            self.notify(due=False)
        elif self._wake is not None:
            self._wake.set()

    def _wake_event(self) -> asyncio.Event:
        if self._wake is None:
            self._wake = asyncio.Event()
        return self._wake

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
        deadline = min(deadline, now + self.poll_ms)
        if self._virtual():
            key = id(event)
            self._parked[key] = (deadline, event)
            self.notify()
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

    async def cancelled(self, run_id: str) -> None:
        """
        This engine cancelled the run: its liveness waits here read their checkpoint at once
        (and end), and its attempts in flight here learn it (their heartbeats raise).
        """
        for step_id, waiter in list(self._waiters.items()):
            if step_id.rpartition(":")[0] == run_id:
                waiter.finished = True
                waiter.event.set()
        if self.cache is not None:
            self.cache.discard(run_id)
        await self._attempts.cancelled(run_id)

    # -- runs start() makes -----------------------------------------------------------------------

    def reserve(self) -> bool:
        """
        Take a slot for a run ``start()`` is making, if ``work()`` runs with one free: the run
        is then made leased to this engine (``take`` runs it). Give the slot back with
        ``unreserve`` once the insert is done (a turn holds it from then on).
        """
        if (
            self._working
            and not self._stopping
            and len(self._inflight) + self._starting < self._concurrency
        ):
            self._starting += 1
            return True
        return False

    def unreserve(self) -> None:
        """The insert a ``reserve`` was for is done (or failed)."""
        self._starting -= 1

    async def take(self, claimed: ClaimedRun) -> None:
        """
        Run the first turn of a run ``start()`` made leased to this engine, in (a copy of)
        ``work()``'s context, not its caller's; if ``work()`` ended meanwhile, give its lease
        back.
        """
        if self._working and not self._stopping:
            self._spawn_turn(claimed, self._work_context)
        else:
            await self._turns.release(claimed)
            self.notify(due=False)

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
            self._turn_tasks.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._inflight.discard(finished)
            self._turn_tasks.discard(finished)
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

    def _spawn_turn(self, claimed: ClaimedRun, context: contextvars.Context | None = None) -> None:
        # Counted at once: wait() called right after start() knows the run is in a turn here.
        self._finishes.began(claimed.run.run_id)
        self._spawn(self._turn(claimed), turn=True, context=context)

    async def _turn(self, claimed: ClaimedRun) -> None:
        hints = self._hints
        end: TurnEnd = "more"
        try:
            end = await self._turns.run(claimed)
        finally:
            # A finished run, or one suspended to wait for results alone, leaves nothing to
            # claim: the slot it frees (the task's done callback wakes the loops for it) is
            # all. Anything else may have: a release, a timer, a task for later, or a result
            # that another process's NOTIFY announced during the turn (the claim it prompted
            # could not take the run; the suspending commit made it runnable).
            if end != "finished" and (end != "waits" or self._hints != hints):
                self._news = True

    async def _attempt(self, task: Task, claimed_at: int) -> None:
        await self._attempts.run(task, claimed_at)
        self._hear(task.step_id, task.attempt, finished=True)
        self._attempt_ended()

    async def _claim(self, free: int) -> int:
        """Claim runnable runs, then tasks, up to *free* in all; start them; return how many."""
        claimed = 0
        now = self._now()
        if self._workflow_keys and free > 0:
            runs = await self._store.claim_runs(
                workflows=self._workflow_keys,
                now=now,
                lease_until=now + self._lease_ms,
                owner=self._owner,
                limit=free,
                known=None if self.cache is None or not len(self.cache) else self.cache.known(),
            )
            for run in runs:
                self._spawn_turn(run)
            claimed += len(runs)
        if self._groups and free > claimed:
            tasks = await self._store.claim_tasks(
                groups=self._groups,
                now=now,
                claim_until=now + self._lease_ms,
                worker=self._owner,
                limit=free - claimed,
            )
            for task in tasks:
                self._hear(task.step_id, task.attempt, picked_up=True)
                self._spawn(self._attempt(task, now), turn=False)
            claimed += len(tasks)
        return claimed

    async def _recover(self) -> bool:
        """One recovery pass; whether it made anything runnable."""
        report = await self._store.recover(
            now=self._now(),
            max_recovery_attempts=self._max_recovery,
            reconcile_ms=self.reconcile_ms,
        )
        if report.recovered_runs or report.lost_tasks:
            self.notify()
        for run_id in report.recovered_runs:
            _log.warning("recovered run %s (its lease expired)", run_id)
        for run_id in report.dead_runs:
            _log.error("run %s is dead: its lease expired too many times", run_id)
        for step_id in report.lost_tasks:
            _log.warning("step %s lost its worker; its attempt counts as failed", step_id)
        if self._probes.probes:
            await self._tell_recovery(report)
        return bool(report.recovered_runs or report.lost_tasks)

    async def _look_for_unserved(self) -> None:
        """
        Every ``_UNSERVED_EVERY_MS``: warn (once per pair, for the engine's life) of the runs
        that wait for a version of one of this engine's workflows that it does not serve,
        naming the workflow, the version and how many wait.
        """
        now = self._now()
        if not self._workflow_keys or now - self._unserved_at < _UNSERVED_EVERY_MS:
            return
        self._unserved_at = now
        found = await self._store.unserved(self._workflow_keys)
        serves = dict(self._workflow_keys)
        for (name, version), count in sorted(found.items()):
            if (name, version) in self._warned:
                continue
            self._warned.add((name, version))
            _log.warning(
                "%d run(s) of workflow %r wait for version %r, which this engine does not serve"
                " (it serves version %r): unless another engine serves it, start one with"
                " version %r of %r (or cancel those runs); `runs --unserved` lists them",
                count,
                name,
                version,
                serves[name],
                version,
                name,
            )

    async def _tell_recovery(self, report: RecoveryReport) -> None:
        """Tell the probes the runs a recovery made dead and the attempts whose worker it lost."""
        for run_id in report.dead_runs:
            run = await self._store.get_run(run_id)
            if run is not None:
                self._probes.run_ended(run_id, run.workflow, "dead")
        for step_id in report.lost_tasks:
            run_id, _, seq = step_id.rpartition(":")
            run = await self._store.get_run(run_id)
            cp = await self._store.get_checkpoint(run_id, int(seq))
            if run is None or cp is None:
                continue
            now = self._now()
            self._probes.attempt(
                Attempt(
                    run_id=run_id,
                    workflow=run.workflow,
                    traceparent=run.traceparent,
                    name=task_name(cp),
                    seq=cp.seq,
                    step_id=step_id,
                    kind="remote",
                    attempt=cp.attempts,
                    redispatched=False,
                    started_at=cp.heartbeat_at or now,
                    ended_at=now,
                    outcome="lost",
                    error_type=None if cp.error is None else cp.error.type,
                )
            )

    async def advance_through(self, until: int | None) -> None:
        """
        Drain, then move a virtual clock to the next due time (a ``wake_at``, a lease or claim
        expiring, a parked wait) and drain again, until nothing is due (*until* ``None``) or
        until epoch ms *until*, where the clock stops.

        Raises:
            ValueError: If the clock cannot be advanced.
        """
        advance = getattr(self._clock, "advance", None)
        if not callable(advance):
            msg = (
                "moving time needs a clock with advance(), such as VirtualClock;"
                f" got {self._clock!r}"
            )
            raise ValueError(msg)
        while True:
            await self.drain()
            now = self._now()
            due = await self._store.next_due(now)
            parked = [deadline for deadline, event in self._parked.values() if not event.is_set()]
            if parked:
                due = min(parked) if due is None else min(due, *parked)
            # A recurring's due times never end: moving time to them is for a bounded move
            # (run_for) alone, which stops at each on the way, as work() would.
            recurring = self._recurrences.earliest() if until is not None else None
            if recurring is not None and recurring > now:
                due = recurring if due is None else min(due, recurring)
            if until is not None and (due is None or due > until):
                if until > now:
                    advance((until - now) / 1000)
                    self._wake_parked()
                await self.drain()
                return
            if due is None:
                return
            advance(max(0, due - now) / 1000)
            self._wake_parked()

    async def drain(self) -> None:
        """
        Do everything that is due now, up to ``_DRAIN_CONCURRENCY`` at once, recurring
        workflows' due runs included; then return.

        Raises:
            StoreError: At the end, if a recurring's stored row cannot be stepped (the first
                such error; each is logged).
        """
        broken: list[StoreError] = []
        # A long catch-up takes several writes: each poll passes at most a batch of due times.
        for _ in range(_DRAIN_RECURRING_POLLS):
            now = self._now()
            if not self._recurrences.due(now):
                break
            # (A store error is the caller's; a next call tries again at once.)
            broken += await self._recurrences.poll(now, retry_ms=0)
        await self._drain()
        if broken:
            raise broken[0]

    async def _drain(self) -> None:
        wake = self._wake_event()
        await self._recover()
        await self._look_for_unserved()
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

    async def work(self, poll: int, concurrency: int) -> None:
        """``Engine.work`` with its options checked: *poll* ms, *concurrency* slots."""
        self.poll_ms = poll
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
                            await self._look_for_unserved()
                            last_recovery = now
                        if self._recurrences.due(now):
                            # Errors of single recurrings are logged; they stop nothing.
                            await self._recurrences.poll(now, retry_ms=poll)
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
                    recurring = self._recurrences.earliest()
                    if recurring is not None:
                        wait = max(0.0, (recurring - self._now()) / 1000)
                        deadline = min(deadline, loop.time() + wait)
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
            await self.cancel_inflight()
            raise

    def stop(self) -> None:
        """Ask ``work()`` to drain and return."""
        self._stopping = True
        self.notify()

    async def _drain_for_stop(self) -> None:
        for task in list(self._turn_tasks):
            task.cancel()
        if self._inflight:
            await asyncio.wait(set(self._inflight))

    async def cancel_inflight(self) -> None:
        """
        Cancel every turn and attempt in flight (leases and claims are released) and wait;
        drop the parked workflows.
        """
        tasks = list(self._inflight)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        if self.cache is not None:
            await self.cache.close()
