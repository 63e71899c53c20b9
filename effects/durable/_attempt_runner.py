"""The attempt runner: one claimed attempt of a step task, from its handler to its result."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

import attrs

from effects import Clock, is_async_callable
from effects.durable._codec import JSON, dump, from_data
from effects.durable._definitions import StepDef
from effects.durable._failures import in_thread, is_failure, no_handler, thrown
from effects.durable._probes import Attempt, Probes
from effects.durable._records import Task
from effects.durable._renewal import Renewal
from effects.durable._step_context import StepContext, step_context
from effects.durable._store import Store, TaskOutcome
from effects.durable._time import epoch_ms
from effects.durable.errors import RunCancelled, StepError, StoreError

__all__ = ["AttemptRunner"]

_log: Final = logging.getLogger("effects.durable")
# Progress without a liveness window or lease is persisted at most this often (ms).
_PROGRESS_INTERVAL_MS: Final = 1000


class AttemptRunner:
    """
    Runs claimed attempts: the handler of the task's step (a step it has none for fails at
    once), with the claim renewed and its beats heard, then records the result. A cancelled
    attempt gives its claim back and records nothing. An attempt whose claim the store refuses
    (withdrawn) while its run is cancelled learns it: its next ``heartbeat()`` raises
    ``RunCancelled``.
    """

    __slots__ = (
        "_clock",
        "_hear",
        "_lease_ms",
        "_owner",
        "_probes",
        "_running",
        "_steps",
        "_store",
    )

    def __init__(
        self,
        *,
        store: Store,
        clock: Clock,
        owner: str,
        lease_ms: int,
        steps: Mapping[str, StepDef[Any, Any]],
        hear: Callable[[str, int], None],
        probes: Probes,
    ) -> None:
        self._store, self._clock, self._owner = store, clock, owner
        self._probes = probes
        self._lease_ms, self._steps, self._hear = lease_ms, steps, hear
        #: The beats of the attempts in flight, by task id.
        self._running: dict[int, _Beats] = {}

    def _now(self) -> int:
        return epoch_ms(self._clock)

    async def run(self, task: Task, claimed_at: int) -> None:
        """Run the attempt of *task* claimed at epoch ms *claimed_at*, and record its result."""
        definition = self._steps.get(task.name)
        if definition is None:
            outcome = TaskOutcome(error=no_handler(task.name))
        else:
            beats = _Beats(
                task,
                claimed_at,
                store=self._store,
                now=self._now,
                hear=self._hear,
                refused=lambda: self._learn(task, beats),
            )

            async def renew() -> bool:
                held = await self._renew(task)
                if not held:
                    await self._learn(task, beats, held=False)
                return held

            renewer = Renewal(self._lease_ms / 3000, renew, f"the claim on {task.step_id}")
            self._running[task.task_id] = beats
            try:
                outcome = await self._run_handler(definition, task, beats)
            except asyncio.CancelledError:
                try:
                    await self._store.release_claim(task.task_id, self._owner, now=self._now())
                except Exception:  # noqa: BLE001 - the claim then simply expires
                    _log.debug("could not release the claim on %s", task.step_id, exc_info=True)
                raise
            finally:
                renewer.cancel()
                self._running.pop(task.task_id, None)
        ended = self._now()
        await self._store.record_result(task, self._owner, outcome, ended)
        if self._probes.probes:
            self._probes.attempt(attempt_of(task, claimed_at, ended, outcome))

    async def _renew(self, task: Task) -> bool:
        return await self._store.renew_claim(
            task.task_id, self._owner, self._now() + self._lease_ms
        )

    async def _learn(self, task: Task, beats: _Beats, *, held: bool | None = None) -> None:
        """
        Whether the attempt was withdrawn by a cancel: its claim is gone (*held*, or renewed
        now to find out) and its run is cancelled or being cancelled. Then its beats say so.
        """
        try:
            if held is None:
                held = await self._renew(task)
            if held:
                return
            run = await self._store.get_run(task.run_id)
        except StoreError as error:
            _log.warning("could not read whether run %s was cancelled: %s", task.run_id, error)
            return
        if run is None or run.status == "cancelled" or run.cancel is not None:
            beats.cancelled = True

    async def cancelled(self, run_id: str) -> None:
        """This engine cancelled the run: its attempts in flight here learn it (``_learn``)."""
        for beats in list(self._running.values()):
            if beats.task.run_id == run_id:
                await self._learn(beats.task, beats)

    async def _run_handler(
        self, definition: StepDef[Any, Any], task: Task, beats: _Beats
    ) -> TaskOutcome:
        context = StepContext(
            step_id=task.step_id,
            run_id=task.run_id,
            seq=task.seq,
            name=task.name,
            attempt=task.attempt,
            redispatched=task.redispatched,
            last_progress=task.last_progress,
            beat=beats.beat,
        )
        token = step_context.set(context)
        fn = definition.fn
        is_async = is_async_callable(fn)
        try:
            value = from_data(definition.codec, task.input)
            if is_async:
                result = await fn(value)
            else:
                result = await in_thread(fn, value)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as raised:
            # The handler's failure is the attempt's result; the engine stopping is not.
            error, from_thread = thrown(raised)
            if not is_failure(error, in_thread=from_thread):
                raise
            failure = StepError.from_exception(error)
            return TaskOutcome(error=failure, progress=await beats.unsaved())
        finally:
            step_context.reset(token)
        progress = await beats.unsaved()
        try:
            output = dump(definition.codec, result, f"output of step {task.name!r}")
        except TypeError as error:
            # The same output would fail the same way on every attempt.
            failure = attrs.evolve(StepError.from_exception(error), retryable=False)
            return TaskOutcome(error=failure, progress=progress)
        return TaskOutcome(output=output, progress=progress)


def attempt_of(task: Task, claimed_at: int, ended: int, outcome: TaskOutcome) -> Attempt:
    """The probes' record of a dispatched attempt claimed at *claimed_at* that ended *ended*."""
    error = outcome.error
    waited = None if task.available_at is None else max(0, claimed_at - task.available_at)
    return Attempt(
        run_id=task.run_id,
        workflow=task.workflow,
        traceparent=task.traceparent,
        name=task.name,
        seq=task.seq,
        step_id=task.step_id,
        kind="remote",
        attempt=task.attempt,
        redispatched=task.redispatched,
        started_at=claimed_at,
        ended_at=ended,
        outcome="completed" if error is None else "failed",
        error_type=None if error is None else error.type,
        queue_wait_ms=waited,
    )


class _Beats:
    """
    An attempt's heartbeats: heard at once in this process, persisted once per half-window;
    once the attempt is known to be withdrawn by a cancel (*cancelled*), a beat raises
    ``RunCancelled``.
    """

    __slots__ = (
        "_hear",
        "_interval",
        "_last_write",
        "_loop",
        "_now",
        "_refused",
        "_store",
        "_unsaved",
        "_writing",
        "cancelled",
        "task",
    )

    def __init__(
        self,
        task: Task,
        claimed_at: int,
        *,
        store: Store,
        now: Callable[[], int],
        hear: Callable[[str, int], None],
        refused: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        self._store, self._now, self._hear, self._refused = store, now, hear, refused
        self.task = task
        #: Whether the attempt's run was cancelled (its next beat raises ``RunCancelled``).
        self.cancelled = False
        self._loop = asyncio.get_running_loop()
        windows = [w for w in (task.timeout_ms, task.lease_ms) if w is not None]
        # The claim was the first beat; a reader needs one write per half of the tightest window.
        self._interval = min(windows) // 2 if windows else _PROGRESS_INTERVAL_MS
        self._last_write = claimed_at
        self._unsaved: str | None = None
        self._writing: asyncio.Task[None] | None = None

    def beat(self, progress: Any) -> None:
        """
        Called by ``StepContext.heartbeat``, from the handler's task or thread.

        Raises:
            RunCancelled: Once the engine knows the attempt's run was cancelled.
        """
        if self.cancelled:
            raise RunCancelled(self.task.run_id)
        text = None if progress is None else dump(JSON, progress, "heartbeat progress")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._heard(text)
        else:
            self._loop.call_soon_threadsafe(self._heard, text)

    def _heard(self, text: str | None) -> None:
        task = self.task
        self._hear(task.step_id, task.attempt)
        if text is not None:
            self._unsaved = text
        now = self._now()
        windowed = task.timeout_ms is not None or task.lease_ms is not None
        due = now - self._last_write >= self._interval
        if (windowed or self._unsaved is not None) and due and self._writing is None:
            self._last_write = now
            self._writing = self._loop.create_task(self._write(now))

    async def _write(self, now: int) -> None:
        task, text = self.task, self._unsaved
        self._unsaved = None
        lease = None if task.lease_ms is None else now + task.lease_ms
        try:
            current = await self._store.heartbeat(task, now=now, progress=text, lease_until=lease)
        except Exception:  # noqa: BLE001 - a lost beat only shortens the window's slack
            _log.warning("could not persist a heartbeat of %s", task.step_id, exc_info=True)
            if self._unsaved is None:
                self._unsaved = text
            current = True
        finally:
            self._writing = None
        if not current:
            await self._refused()  # the attempt is no longer current: was it cancelled?

    async def unsaved(self) -> str | None:
        """Finish a write in flight; return progress not yet persisted (saved with the result)."""
        if self._writing is not None:
            await asyncio.shield(self._writing)
        return self._unsaved
