"""The turn runner: one turn of a claimed run, from its replay to the commit that ends it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from effects import Clock
from effects.durable._cached_runs import CachedRuns, Fiber
from effects.durable._context import WorkflowContext
from effects.durable._definitions import StepDef, WorkflowDef
from effects.durable._failures import cancelled_run, timed_out_attempt
from effects.durable._finishes import Finishes
from effects.durable._probes import Probes
from effects.durable._records import Checkpoint
from effects.durable._renewal import Renewal
from effects.durable._saga import Ending, play, with_failed_undos
from effects.durable._store import (
    CheckpointWrite,
    ClaimedRun,
    NewEvent,
    RunAdvance,
    StaleTurnError,
    Store,
)
from effects.durable._store.rows import dumps
from effects.durable._store.rules import cancels_attempt
from effects.durable._time import epoch_ms
from effects.durable._turn import HOLD, DeadlinePassed, Turn, TurnHost
from effects.durable.errors import StepError, StoreError
from schedules import RandomLike

__all__ = ["TurnEnd", "TurnRunner"]

_log: Final = logging.getLogger("effects.durable")
# A turn abandoned because a write of it failed is replayed no sooner than this (ms).
_STORE_RETRY_MS: Final = 1000

#: How a turn ended: it finished its run; it suspended the run to wait for results alone (no
#: timer, no task for later); or anything else (a timer, a task for later, a release, a turn
#: broken off), which may have left something to claim.
TurnEnd = Literal["finished", "waits", "more"]


class TurnRunner:
    """
    Runs turns of claimed runs: replays the run's workflow with its lease renewed, and commits
    how the turn ended (finished, failed, suspended, or given back). A turn whose write failed
    is abandoned; one that finds its lease stale gives the run back. Whoever waits for the run
    in this process (``Finishes``) learns how it ended.
    """

    __slots__ = (
        "_cache",
        "_clock",
        "_dispatched",
        "_finishes",
        "_host",
        "_lease_ms",
        "_probes",
        "_random",
        "_steps",
        "_store",
        "_workflows",
    )

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        random: RandomLike,
        lease_ms: int,
        workflows: Mapping[str, WorkflowDef[Any, Any]],
        steps: Mapping[str, StepDef[Any, Any]],
        host: TurnHost,
        dispatched: Callable[[], None],
        finishes: Finishes,
        probes: Probes,
        cache: CachedRuns | None = None,
    ) -> None:
        self._store, self._clock, self._random, self._lease_ms = store, clock, random, lease_ms
        #: The parked workflows of suspended runs (``None``: off, every turn replays).
        self._cache = cache
        self._probes = probes
        self._workflows, self._steps = workflows, steps
        self._host, self._dispatched, self._finishes = host, dispatched, finishes

    def make_turn(self, claimed: ClaimedRun) -> Turn:
        """The ``Turn`` of a claimed run, its lease counted from now."""
        return Turn(
            self._store,
            self._clock,
            self._random,
            self._lease_ms,
            claimed.run,
            claimed.token,
            self._steps,
            self._dispatched,
            self._host,
            lease_until=epoch_ms(self._clock) + self._lease_ms,
            probes=self._probes,
            workflows=self._workflows,
        )

    async def release(self, claimed: ClaimedRun) -> None:
        """Give back the lease of a run taken at start that no turn will run (work() ended)."""
        turn = self.make_turn(claimed)
        try:
            await turn.commit(RunAdvance("release"))
        except (StoreError, StaleTurnError):
            _log.debug("run %s: could not release the lease", claimed.run.run_id, exc_info=True)

    async def run(self, claimed: ClaimedRun) -> TurnEnd:
        """
        The turn of *claimed* (spawned after ``Finishes.began``); say how it ended. The run's
        waiters are answered as it ends, whatever way.
        """
        run_id = claimed.run.run_id
        end: TurnEnd = "more"
        try:
            end = await self._turn_of(claimed)
        finally:
            self._finishes.ended(run_id, waits=end == "waits")
        return end

    def _parked(self, claimed: ClaimedRun, definition: WorkflowDef[Any, Any]) -> Fiber | None:
        """The run's parked workflow, if this engine has it and *claimed* resumes it."""
        cache = self._cache
        if cache is None:
            return None
        fiber = cache.take(claimed.run.run_id)
        if fiber is not None and not fiber.fits(claimed, definition, epoch_ms(self._clock)):
            cache.drop(fiber)
            return None
        return fiber

    async def _turn_of(self, claimed: ClaimedRun) -> TurnEnd:
        run = claimed.run
        definition = self._workflows[run.workflow]
        fiber = self._parked(claimed, definition)
        if fiber is None:
            turn = self.make_turn(claimed)
        else:
            turn = fiber.rebind(claimed, epoch_ms(self._clock) + self._lease_ms)
        # Past its deadline (and not being cancelled with compensation): this turn times it out.
        turn.timing_out = (
            run.deadline is not None and run.cancel != "compensate" and turn.now() >= run.deadline
        )
        ctx: WorkflowContext | None = None
        parked = False
        renewer = Renewal(
            self._lease_ms / 3000,
            lambda: self._store.renew_lease(
                turn.run.run_id, turn.token, turn.now() + self._lease_ms
            ),
            f"the lease of run {turn.run.run_id}",
        )
        watchdog = _Watchdog.of(turn)
        try:
            checkpoints = claimed.checkpoints
            if fiber is not None:
                ctx = fiber.ctx
                checkpoints = fiber.after_base(checkpoints)
            elif claimed.since:
                # The claim read the run as its parked workflow here had seen it, which this
                # turn cannot resume (dropped meanwhile, or unfit): it replays, from them all.
                checkpoints = await turn.store.checkpoints(run.run_id)
            if turn.timing_out:
                checkpoints = await _stop_waiting(turn, checkpoints)
            if ctx is None:
                ctx = WorkflowContext(turn, checkpoints)
                if self._cache is not None:
                    fiber = Fiber(definition, ctx, turn)
            ending = await self._play(definition, ctx, turn, fiber, checkpoints)
            parked = ending is None
            finished = await self._end(turn, ending)
            if turn.broken is not None:
                raise turn.broken
        except StoreError as error:
            await self._abandon(turn, error)
            return "more"
        except StaleTurnError:
            # Either another turn holds the run now, or a worker's result changed a checkpoint
            # under this one while its lease still holds: then give the run back, so it replays
            # at once instead of waiting for the lease to expire and counting a recovery.
            _log.info("run %s: turn ended, a write of it was stale", run.run_id)
            with contextlib.suppress(StaleTurnError):
                await turn.commit(RunAdvance("release"))
            return "more"
        except DeadlinePassed:
            await self._give_back_at_deadline(turn)
            return "more"
        except asyncio.CancelledError:
            if watchdog is not None and watchdog.stopped_the_turn():
                await self._give_back_at_deadline(turn)
                return "more"
            try:
                await turn.commit(RunAdvance("release"))
            except Exception:  # noqa: BLE001 - the lease then simply expires
                _log.debug("run %s: could not release the lease", run.run_id, exc_info=True)
            raise
        finally:
            renewer.cancel()
            if watchdog is not None:
                watchdog.cancel()
            if fiber is not None and parked and turn.broken is None and self._cache is not None:
                # Kept for the run's next turn here (the suspending commit is made).
                self._cache.put(run.run_id, fiber)
            else:
                if fiber is not None and self._cache is not None:
                    self._cache.drop(fiber)
                if ctx is not None:
                    ctx.close()
        # A child's finish may have woken its parent, and children started are runs to claim:
        # news for this engine's loop.
        news = turn.made_runs or (finished and run.parent_id is not None)
        if finished and not news:
            return "finished"
        return "waits" if turn.waits_only and not news else "more"

    async def _give_back_at_deadline(self, turn: Turn) -> None:
        """
        End a turn that its run's deadline stopped: the run is given back (pending), and the
        next turn, which finds the deadline passed, times it out from what was recorded.
        """
        _log.info("run %s: its deadline came during a turn; it is timed out next", turn.run.run_id)
        try:
            await turn.commit(RunAdvance("release"))
        except (StaleTurnError, StoreError):
            _log.debug("run %s: could not release the lease", turn.run.run_id, exc_info=True)

    async def _play(
        self,
        definition: WorkflowDef[Any, Any],
        ctx: WorkflowContext,
        turn: Turn,
        fiber: Fiber | None,
        checkpoints: Sequence[Checkpoint],
    ) -> Ending | None:
        """
        Replay the workflow, or resume its parked call (*fiber*); how it ended, or ``None``:
        it parked (the run is suspended, its workflow kept).
        """
        if fiber is None:
            return await play(definition, ctx, turn)
        if fiber.parked:
            assert self._cache is not None
            self._cache.resumed += 1
            return await fiber.run_turn(checkpoints)
        return await fiber.run_turn(checkpoints)

    async def _end(self, turn: Turn, ending: Ending | None) -> bool:
        """Commit how the run ended; whether the turn finished it (completed, failed, cancelled)."""
        if ending is None or ending.kind == "none":
            return False
        if ending.kind == "completed":
            assert ending.output is not None
            await self._finish_completed(turn, ending.output, ending.routed)
        elif ending.kind == "failed":
            assert ending.error is not None
            await self._finish_failed(turn, ending.error, ending.compensation_failed)
        else:
            await self._finish_cancelled(turn, ending.compensation_failed)
        if self._probes.probes:
            run = turn.run
            self._probes.run_ended(run.run_id, run.workflow, ending.kind)
        return True

    async def _finish_completed(self, turn: Turn, text: str, routed: str | None) -> None:
        now = turn.now()
        events = [NewEvent("run.completed", now)]
        if routed is not None:
            events.insert(0, NewEvent("run.error_routed", now, None, {"code": routed}))
        await turn.commit(
            RunAdvance("finish", status="completed", output=text), events=events, now=now
        )
        if self._finishes.waiters:
            self._finishes.finished(
                attrs.evolve(
                    turn.run,
                    status="completed",
                    output=json.loads(text),
                    updated_at=now,
                    wake_at=None,
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

    async def _finish_failed(
        self, turn: Turn, error: BaseException, compensation_failed: tuple[str, ...] = ()
    ) -> None:
        now = turn.now()
        step_error = with_failed_undos(StepError.from_exception(error), compensation_failed)
        await turn.commit(
            RunAdvance("finish", status="failed", error=step_error),
            events=(NewEvent("run.failed", now, None, {"error": step_error.to_json()}, "error"),),
            now=now,
        )
        if self._finishes.waiters:
            self._finishes.finished(
                attrs.evolve(
                    turn.run, status="failed", error=step_error, updated_at=now, wake_at=None
                )
            )

    async def _finish_cancelled(self, turn: Turn, compensation_failed: tuple[str, ...]) -> None:
        """End a run cancelled with compensation, its undos done (or recorded as failed)."""
        now = turn.now()
        failed = list(compensation_failed)
        error = cancelled_run(failed) if failed else None
        data = {"compensate": True, "compensation_failed": failed}
        await turn.commit(
            RunAdvance("finish", status="cancelled", error=error),
            events=(NewEvent("run.cancelled", now, None, data, "warning"),),
            now=now,
        )
        if self._finishes.waiters:
            self._finishes.finished(
                attrs.evolve(
                    turn.run, status="cancelled", error=error, updated_at=now, wake_at=None
                )
            )


async def _stop_waiting(turn: Turn, checkpoints: Sequence[Checkpoint]) -> Sequence[Checkpoint]:
    """
    A run past its deadline stops waiting for its dispatched steps, as a cancel does: each
    one still awaited (a dispatched compensation excepted) is failed, not final, with code
    ``workflow_timeout``, and the same commit withdraws its attempts (``rules.gives_up``).
    Returns the checkpoints as they are after.
    """
    stopped = [cp for cp in checkpoints if cancels_attempt(cp, keep_undos=True)]
    if not stopped:
        return checkpoints
    now = turn.now()
    error = timed_out_attempt()
    changed: dict[int, Checkpoint] = {}
    writes: list[CheckpointWrite] = []
    for cp in stopped:
        failed = attrs.evolve(
            cp,
            status="failed",
            error=error,
            errors=(*cp.errors, error),
            final=False,
            wake_at=None,
            updated_at=now,
        )
        text = None if cp.input is None else dumps(cp.input)
        writes.append(CheckpointWrite(failed, cp.rev, input=text))
        changed[cp.seq] = attrs.evolve(failed, rev=cp.rev + 1)
    await turn.commit(HOLD, checkpoints=writes, now=now)
    return [changed.get(cp.seq, cp) for cp in checkpoints]


class _Watchdog:
    """
    Stops a turn at its run's deadline on a real clock (a virtual clock's waits end at the
    deadline instead, and every step checks it): at the deadline it cancels the turn's task,
    which then gives the run back to be timed out.
    """

    __slots__ = ("_fired", "_task", "_turn", "_watch")

    def __init__(self, turn: Turn, task: asyncio.Task[Any]) -> None:
        self._turn = turn
        self._task = task
        self._fired = False
        self._watch = asyncio.get_running_loop().create_task(self._run())

    @classmethod
    def of(cls, turn: Turn) -> _Watchdog | None:
        """The watchdog of *turn*'s run, or ``None`` (no deadline, a virtual clock, no task)."""
        task = asyncio.current_task()
        if turn.deadline is None or task is None:
            return None
        if callable(getattr(turn.clock, "advance", None)):
            return None
        return cls(turn, task)

    async def _run(self) -> None:
        deadline = self._turn.deadline
        assert deadline is not None
        while (left := deadline - self._turn.now()) > 0:
            # Read the clock again after each wait: the wall clock may have been set back.
            await asyncio.sleep(left / 1000)
        self._fired = True
        self._task.cancel()

    def stopped_the_turn(self) -> bool:
        """
        Whether the cancellation the turn's task met is this watchdog's alone (then it is
        taken back, and the turn ends as its deadline asks).
        """
        return self._fired and self._task.uncancel() == 0

    def cancel(self) -> None:
        """Stop watching (the turn ended)."""
        self._watch.cancel()
