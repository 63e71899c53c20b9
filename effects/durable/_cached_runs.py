"""
The engine's cache of suspended runs (``Engine(cached_runs=...)``): a run's workflow kept alive
in memory between its turns, so that a turn resumes it where it waits instead of replaying it
from its start.

With the cache on, a turn runs its workflow in a task of its own (a ``Fiber``). Where the
workflow suspends in one of the waiting primitives (``ctx.step``, ``ctx.all``, ``ctx.sleep``,
``ctx.recv``, ``ctx.child``, a dispatched compensation), the suspending commit is made as always,
and then the call *parks*: it waits in memory instead of unwinding the workflow, and the turn
ends. The next turn of the run in this engine resumes the parked call, which takes its step
again from its start with the checkpoints that turn claimed: exactly what a replay does when
it reaches that point, without the replay of everything before it.

A parked workflow is only as good as the checkpoints it has passed: the claim that resumes it
reads, instead of them, how many there are and the sum of their revisions (which only grow),
and the run is replayed as before unless both are what the workflow saw. A run whose
compensating cancel was asked, or whose deadline passed, is replayed too (those turns replay
in a mode of their own), as is any run this engine no longer holds in its cache: the least
recently parked are dropped beyond ``cached_runs``. A dropped workflow is ended with the
suspension a replayed turn raises, on a context that writes nothing more.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from effects.durable._context import WorkflowContext, attach, forget, reopen
from effects.durable._definitions import WorkflowDef
from effects.durable._records import Checkpoint
from effects.durable._saga import Ending, play
from effects.durable._store import ClaimedRun
from effects.durable._turn import Suspended, Turn

__all__ = ["CachedRuns", "Fiber", "checked_cache_size"]

_log: Final = logging.getLogger("effects.durable")
#: How long closing the cache waits for the dropped workflows to end (seconds); one that
#: catches its suspension and goes on waiting is cancelled after.
_CLOSE_WAIT_S: Final = 1.0


def checked_cache_size(value: object) -> int:
    """
    *value* as ``Engine``'s ``cached_runs``: an ``int`` >= 0.

    Raises:
        TypeError: If it is not an ``int`` (a ``bool`` is refused).
        ValueError: If it is negative.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"cached_runs must be an int >= 0 (0 turns the cache off), got {value!r}"
        raise TypeError(msg)
    if value < 0:
        msg = f"cached_runs must be >= 0 (0 turns the cache off), got {value}"
        raise ValueError(msg)
    return value


class Fiber:
    """
    One run's workflow in a task of its own, across turns: parked between them, where a
    waiting primitive suspended the run.

    Attributes:
        definition: The workflow.
        ctx: Its context (the same object across turns).
        turn: Its turn (the same object, bound to each new claim by ``resume``).
        base: The sequence number the parked call started after (0 before the first park).
    """

    __slots__ = (
        "_done",
        "_resume",
        "_revs",
        "_snapshot",
        "_task",
        "base",
        "ctx",
        "definition",
        "turn",
    )

    def __init__(self, definition: WorkflowDef[Any, Any], ctx: WorkflowContext, turn: Turn) -> None:
        self.definition = definition
        self.ctx = ctx
        self.turn = turn
        self.base = 0
        # (how many, sum of revisions) of the checkpoints at or below base, as the workflow saw
        # them: what the claim that resumes it must read.
        self._revs = (0, 0)
        # The revisions of the checkpoints the last claim read (those after base).
        self._snapshot: dict[int, int] = {}
        self._task: asyncio.Task[Ending] | None = None
        self._resume: asyncio.Future[None] | None = None
        self._done: asyncio.Future[Ending | None] | None = None
        turn.revs = {}
        attach(ctx, self)

    # -- the workflow's side ----------------------------------------------------------------------

    def here(self) -> bool:
        """Whether the running task is this fiber's own (a call of a task the workflow made
        does not park: it suspends, and the run replays)."""
        return self._task is not None and asyncio.current_task() is self._task

    async def park(self, start: int) -> None:
        """
        Park the workflow's call that began after sequence number *start*, its suspending
        commit made: the turn ends, and this returns when a turn resumes it (then the call
        takes its step again). Raises ``Suspended`` if the fiber is dropped instead.
        """
        turn = self.turn
        revs = turn.revs if turn.revs is not None else {}
        count, total = self._revs
        snapshot = self._snapshot
        for seq in range(self.base + 1, start + 1):
            # Written by a turn (its new revision), read by the last claim, or recorded by a
            # local step's first-try commit (a new row: revision 1).
            count += 1
            total += revs.get(seq) or snapshot.get(seq) or 1
        self._revs = (count, total)
        self.base = start
        revs.clear()
        snapshot.clear()
        turn.names.clear()
        forget(self.ctx)
        resume = self._resume = asyncio.get_running_loop().create_future()
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)
        await resume

    # -- the turn's side --------------------------------------------------------------------------

    @property
    def parked(self) -> bool:
        """Whether the workflow waits parked for a turn to resume it."""
        resume = self._resume
        return resume is not None and not resume.done()

    def fits(self, claimed: ClaimedRun, definition: WorkflowDef[Any, Any], now: int) -> bool:
        """
        Whether *claimed* (a claim of this fiber's run) resumes it: the same workflow, no
        compensating cancel asked, the deadline not passed, and the checkpoints at or below
        ``base`` as the workflow saw them.
        """
        run = claimed.run
        if not self.parked or definition is not self.definition or run.cancel is not None:
            return False
        if run.deadline is not None and now >= run.deadline:
            return False
        if claimed.since == self.base:
            return claimed.upto == self._revs
        if claimed.since == 0:
            below = [cp.rev for cp in claimed.checkpoints if cp.seq <= self.base]
            return (len(below), sum(below)) == self._revs
        return False

    def after_base(self, checkpoints: Sequence[Checkpoint]) -> list[Checkpoint]:
        """The checkpoints of *checkpoints* after ``base`` (what a resumed call reads)."""
        return [cp for cp in checkpoints if cp.seq > self.base]

    def rebind(self, claimed: ClaimedRun, lease_until: int) -> Turn:
        """The fiber's turn, bound to *claimed* (its run, token and lease) for a new turn."""
        turn = self.turn
        turn.run = claimed.run
        turn.token = claimed.token
        turn.lease_until = lease_until
        turn.broken = None
        turn.waits_only = False
        turn.made_runs = False
        turn.timing_out = False
        return turn

    async def run_turn(self, checkpoints: Sequence[Checkpoint]) -> Ending | None:
        """
        Run the workflow until it ends (its ``Ending``) or parks (``None``): from its start
        the first time (*checkpoints*: all the turn read), else from its parked call with
        *checkpoints* (those after ``base``).
        The workflow's exceptions come out as ``play``'s do; cancelling the caller cancels it.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Ending | None] = loop.create_future()
        self._done = done
        self._snapshot = {cp.seq: cp.rev for cp in checkpoints}
        if self._task is None:
            self._task = loop.create_task(play(self.definition, self.ctx, self.turn))
            self._task.add_done_callback(self._ended)
        else:
            resume = self._resume
            assert resume is not None
            self._resume = None
            reopen(self.ctx, checkpoints)
            resume.set_result(None)
        try:
            return await done
        except asyncio.CancelledError:
            task = self._task
            if not task.done():
                task.cancel()
                # The workflow sees the cancellation as it did in the turn's own task; the
                # turn goes on (releasing its lease) once it has ended.
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait((task,))
            raise

    def _ended(self, task: asyncio.Task[Ending]) -> None:
        done = self._done
        if task.cancelled():
            if done is not None and not done.done():
                done.cancel()
            return
        error = task.exception()
        if done is None or done.done():
            if error is not None and not isinstance(error, Suspended):
                _log.debug("a dropped cached workflow ended with %r", error)
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(task.result())

    def drop(self) -> asyncio.Task[Ending] | None:
        """
        End a parked workflow: its call raises ``Suspended`` (as a replayed turn's would) on
        a closed context, which writes nothing. Returns its task (to wait for), if it runs.
        """
        self.ctx.close()
        resume = self._resume
        self._resume = None
        if resume is not None and not resume.done():
            resume.set_exception(Suspended())
        task = self._task
        return None if task is None or task.done() else task


class CachedRuns:
    """
    The parked ``Fiber`` of up to *size* runs, the least recently parked dropped first.
    A fiber is out of the cache while a turn of its run runs it.
    """

    __slots__ = ("_dropped", "_fibers", "_size", "resumed")

    def __init__(self, size: int) -> None:
        self._size = size
        self._fibers: collections.OrderedDict[str, Fiber] = collections.OrderedDict()
        self._dropped: set[asyncio.Task[Ending]] = set()
        #: How many turns resumed a parked workflow (for tests and benchmarks).
        self.resumed = 0

    def __len__(self) -> int:
        return len(self._fibers)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._fibers

    def known(self) -> Mapping[str, int]:
        """Each cached run's ``base``: what a claim reads of it (``Store.claim_runs``)."""
        return {run_id: fiber.base for run_id, fiber in self._fibers.items()}

    def take(self, run_id: str) -> Fiber | None:
        """The run's fiber, out of the cache (a turn runs it now), or ``None``."""
        return self._fibers.pop(run_id, None)

    def put(self, run_id: str, fiber: Fiber) -> None:
        """Keep *fiber* (parked) for the run's next turn, dropping the least recent beyond size."""
        old = self._fibers.pop(run_id, None)
        if old is not None and old is not fiber:
            self._drop(old)
        self._fibers[run_id] = fiber
        while len(self._fibers) > self._size:
            _, evicted = self._fibers.popitem(last=False)
            self._drop(evicted)

    def discard(self, run_id: str) -> None:
        """Drop the run's fiber, if cached (the run was cancelled, say)."""
        fiber = self._fibers.pop(run_id, None)
        if fiber is not None:
            self._drop(fiber)

    def drop(self, fiber: Fiber) -> None:
        """Drop *fiber* (not cached: a turn found it unfit)."""
        self._drop(fiber)

    def _drop(self, fiber: Fiber) -> None:
        task = fiber.drop()
        if task is not None:
            self._dropped.add(task)
            task.add_done_callback(self._dropped.discard)

    async def close(self) -> None:
        """Drop every fiber and wait (a little) for their workflows to end; cancel the rest."""
        for run_id in list(self._fibers):
            self.discard(run_id)
        tasks = set(self._dropped)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=_CLOSE_WAIT_S)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
