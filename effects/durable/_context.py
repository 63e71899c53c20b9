"""
Replay: the ``WorkflowContext`` a workflow awaits its steps through, and one turn's state.

A turn runs the workflow from its start. Each ``local_step`` / ``step`` call takes the next sequence
number; a checkpoint already recorded there answers it (its output, or its error raised again), and
the first step without a usable record does the work: a local step runs in place and commits its
outcome; a dispatched step writes a pending checkpoint and a task in one transaction and suspends
the run. Suspension is ``_Suspended``, a ``BaseException``, so a workflow's ``except Exception``
cannot swallow it; and once a turn has suspended, every later call suspends again. The workflow
primitives take a number each too: ``sleep`` (a durable timer, ``effects.durable._timers``),
``now`` and ``uuid`` (local steps), ``patched`` (a marker, or no number where the run recorded
another step there).

A step given ``compensate=`` registers its undo when it completes (on every replay alike), and
``unwind`` runs the registered undos last-registered first, each as a checkpointed step
``compensate:<step>`` (see ``effects.durable._saga``). A run asked to cancel with compensation
replays in *cancel mode*: its steps answer from their records, and the first step without a
settled record stops the workflow (``Stopped``, a ``BaseException`` too). A run past its
whole-run deadline replays the same way, then fails (``workflow_timeout``); before that, each
step checks the deadline, which stops the turn where it is (``DeadlinePassed``).
"""

from __future__ import annotations

import datetime
import functools
import inspect
import json
import uuid
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Concatenate, Final, ParamSpec, Protocol, TypeVar, overload

import attrs
from typing_extensions import Unpack

from effects import FatalError, is_async_callable
from effects.durable import _timers as timers
from effects.durable._bounds import duration_ms
from effects.durable._codec import JSON, Codec, dump, from_data
from effects.durable._definitions import StepDef, WorkflowDef, check_name
from effects.durable._failures import child_failure, in_thread, is_failure, thrown
from effects.durable._policy import StepOptions, StepPolicy, policy_from_options
from effects.durable._primitives import ChildTarget, child_target, written
from effects.durable._probes import Attempt
from effects.durable._records import FINISHED, Checkpoint, CheckpointKind, Run
from effects.durable._remote import Member, compensation_failed, liveness, settle_members
from effects.durable._step_context import StepContext, step_context
from effects.durable._store import CheckpointWrite, EventWrite, NewEvent, RunAdvance, Take
from effects.durable._store.rules import COMPENSATION_PREFIX, settled
from effects.durable._turn import HOLD, Stopped, Suspended, Turn, tell_hooks, wait_ms
from effects.durable.errors import (
    ChildWorkflowError,
    NonDeterminismError,
    StepError,
    StepFailedError,
    StoreError,
    restore_exception,
)
from schedules import DurationLike

__all__ = [
    "Parking",
    "WorkflowContext",
    "attach",
    "forget",
    "reopen",
    "stopped",
    "suspended",
    "unwind",
]

T = TypeVar("T")
P = ParamSpec("P")
I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741

_EMPTY_POLICY: Final = StepPolicy({})
_JSON_SCALARS: Final = frozenset({int, str, float, bool, type(None)})
#: What to give instead of an event value that is not JSON (events take no codec).
_JSON_ONLY: Final = "set JSON data: dicts, lists, strings, finite numbers, booleans, None"
_Suspended = Suspended
_Stopped = Stopped
#: The names of the checkpoints of ``sleep``, ``now`` and ``uuid``.
_SLEEP: Final = "durable.sleep"
_NOW: Final = "durable.now"
_UUID: Final = "durable.uuid"
#: What ``_run_local`` returns for a compensation whose attempts are spent (recorded, not raised).
_UNDO_FAILED: Final = object()
#: The options of a dispatched undo's definition that a compensation does not take: its attempts
#: are ``compensation_retries``, and it always takes the durable path.
_NOT_FOR_UNDOS: Final = ("retries", "timeout_ms", "pickup_timeout_ms")


def suspended() -> type[BaseException]:
    """The exception class a turn's suspension raises (for the engine only)."""
    return Suspended


def stopped() -> type[BaseException]:
    """The exception class a cancel mode's stop raises (for the engine only)."""
    return Stopped


class Parking(Protocol):
    """Where a context's waiting calls park (``effects.durable._cached_runs.Fiber``)."""

    def here(self) -> bool:
        """Whether the running task may park (it is the workflow's own)."""
        ...

    async def park(self, start: int) -> None:
        """Wait for the next turn of the run (the call began after sequence number *start*)."""
        ...


def attach(ctx: WorkflowContext, parking: Parking) -> None:
    """Have *ctx*'s waiting calls park at *parking* instead of unwinding (for the engine only)."""
    ctx._parking = parking  # pyright: ignore[reportPrivateUsage]


def forget(ctx: WorkflowContext) -> None:
    """Let go of the checkpoints a parked *ctx* read (a resume brings them again)."""
    ctx._checkpoints = {}  # pyright: ignore[reportPrivateUsage]


def reopen(ctx: WorkflowContext, checkpoints: Sequence[Checkpoint]) -> None:
    """Open a parked *ctx* for a new turn that read *checkpoints* (for the engine only)."""
    ctx._checkpoints = {cp.seq: cp for cp in checkpoints}  # pyright: ignore[reportPrivateUsage]
    ctx._closed = ctx._suspended = False  # pyright: ignore[reportPrivateUsage]


def _resumable(
    method: Callable[Concatenate[WorkflowContext, P], Awaitable[T]],
) -> Callable[Concatenate[WorkflowContext, P], Coroutine[Any, Any, T]]:
    """
    A waiting primitive that parks where it suspends the run, with the engine's cache of
    suspended runs on: the suspending commit made, it waits for the run's next turn here and
    then takes its step again from its start, with that turn's checkpoints (what a replay does
    at this point). It unwinds as before (``Suspended``) when another call is under way, in a
    task the workflow made, or where the turn cannot go on.
    """

    @functools.wraps(method)
    async def resumable(self: WorkflowContext, /, *args: P.args, **kwargs: P.kwargs) -> T:
        parking = self._parking  # pyright: ignore[reportPrivateUsage]
        if parking is None:
            return await method(self, *args, **kwargs)
        while True:
            start = self._seq  # pyright: ignore[reportPrivateUsage]
            usable = self._usable()  # pyright: ignore[reportPrivateUsage]
            self._calls += 1  # pyright: ignore[reportPrivateUsage]
            try:
                return await method(self, *args, **kwargs)
            except Suspended:
                if not (
                    usable
                    and self._calls == 1  # pyright: ignore[reportPrivateUsage]
                    and self._suspended  # pyright: ignore[reportPrivateUsage]
                    and self._usable(suspended=True)  # pyright: ignore[reportPrivateUsage]
                    and parking.here()
                ):
                    raise
            finally:
                self._calls -= 1  # pyright: ignore[reportPrivateUsage]
            await parking.park(start)
            self._seq = start  # pyright: ignore[reportPrivateUsage]

    return resumable


async def unwind(ctx: WorkflowContext) -> list[str]:
    """
    Run the compensations *ctx*'s turn registered, last first; the names of the steps whose
    undo failed (for the engine only: not a method, so no workflow unwinds itself twice).
    """
    return await ctx._unwind()  # pyright: ignore[reportPrivateUsage]


@attrs.frozen
class _Undo:
    """
    A compensation registered by a completed step: a local function of *argument*, or a
    dispatched step (*handler*, with its group, codec and policy) whose input is *input_text*.
    """

    undoes: str
    argument: Any
    local: Callable[[Any], Any] | None = None
    handler: str | None = None
    group: str = "default"
    codec: Codec = JSON
    policy: StepPolicy = _EMPTY_POLICY
    input_text: str | None = None


def _local_undo(value: object, name: str) -> Callable[[Any], Any] | None:
    """The undo function *value* of local step *name*, checked (``None``: no undo)."""
    if value is None:
        return None
    if isinstance(value, StepDef | str | bool) or not callable(value):
        msg = (
            f"compensate of local step {name!r} must be a function (def or async def) of one"
            " argument, {'input': None, 'output': <the step's output>}; got"
            f" {value!r} (to dispatch an undo to a worker, compensate a ctx.step with a StepDef)"
        )
        raise TypeError(msg)
    if inspect.isgeneratorfunction(value) or inspect.isasyncgenfunction(value):
        msg = f"compensate of local step {name!r} must return, not yield: {value!r} is a generator"
        raise TypeError(msg)
    undo: Callable[[Any], Any] = value
    return undo


def _reserved(name: str) -> str:
    """*name*, unless it is a compensation's name (those are the engine's own)."""
    if name.startswith(COMPENSATION_PREFIX):
        msg = (
            f"step name {name!r} starts with {COMPENSATION_PREFIX!r}, which names the"
            " checkpoints of compensations; choose another name"
        )
        raise ValueError(msg)
    return name


def _local_outcome(
    turn: Turn,
    seq: int,
    name: str,
    *,
    attempt: int,
    errors: list[StepError],
    created: int,
    now: int,
    policy: StepPolicy,
    failed: bool = False,
) -> Checkpoint:
    """A local step's checkpoint once its outcome is known (completed, or failed for good)."""
    return Checkpoint(
        run_id=turn.run.run_id,
        seq=seq,
        name=name,
        kind="local",
        step_id=f"{turn.run.run_id}:{seq}",
        status="failed" if failed else "completed",
        attempts=attempt,
        wake_at=None,
        output=None,
        error=errors[-1] if failed else None,
        errors=tuple(errors),
        final=failed,
        created_at=created,
        updated_at=now,
        policy=policy.stored()[0],
    )


def _started(at: int, seq: int, attempt: int) -> NewEvent:
    return NewEvent("step.started", at, seq, {"attempt": attempt, "kind": "local"})


def _local_attempt(  # noqa: PLR0917 - one call shape, five callers in one function
    turn: Turn,
    seq: int,
    name: str,
    attempt: int,
    started: int,
    now: int,
    error: StepError | None = None,
    wake_at: int | None = None,
) -> Attempt:
    """The probes' record of a local step's attempt (failed with *error*, retried at *wake_at*)."""
    run = turn.run
    return Attempt(
        run_id=run.run_id,
        workflow=run.workflow,
        traceparent=run.traceparent,
        name=name,
        seq=seq,
        step_id=f"{run.run_id}:{seq}",
        kind="local",
        attempt=attempt,
        redispatched=False,
        started_at=started,
        ended_at=now,
        outcome="completed" if error is None else "failed",
        error_type=None if error is None else error.type,
        wake_at=wake_at,
    )


def _tell_probes(turn: Turn, untold: list[Attempt]) -> None:
    """Tell the probes the attempts a commit has just recorded."""
    for attempt in untold:
        turn.probes.attempt(attempt)
    untold.clear()


def _describe(name: str, kind: CheckpointKind) -> str:
    return f"{name!r} ({kind})"


def _iso(seconds: float) -> str:
    """Epoch *seconds* as ISO 8601 text in UTC (what ``ctx.now`` records)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat()


def _id_text(run_id: str) -> str:
    """A child's run id as a ``child`` checkpoint stores it (its input: a JSON string)."""
    return dump(JSON, run_id, "child run id")


def _slept(now: int, seq: int, cp: Checkpoint) -> NewEvent:
    """``step.completed`` of a sleep that came due."""
    return NewEvent("step.completed", now, seq, {"kind": "sleep", "wake_at": cp.wake_at})


def _restored(checkpoint: Checkpoint) -> Exception:
    """The exception a failed local step raises again on replay (built from its record)."""
    return restore_exception(checkpoint.error or StepError("the step failed"))


class WorkflowContext:
    """
    What a workflow awaits its steps through. The engine makes one per turn.

    Attributes:
        run_id: The run's id.
        workflow: The workflow's name.
    """

    __slots__ = (
        "_calls",
        "_cancelling",
        "_checkpoints",
        "_closed",
        "_fatal",
        "_parking",
        "_seq",
        "_stopped",
        "_suspended",
        "_turn",
        "_undos",
        "_unwinding",
    )

    def __init__(self, turn: Turn, checkpoints: Sequence[Checkpoint]) -> None:
        self._turn = turn
        self._checkpoints = {cp.seq: cp for cp in checkpoints}
        self._seq = 0
        self._closed = False
        self._suspended = False
        self._fatal: NonDeterminismError | None = None
        self._undos: list[_Undo] = []
        self._unwinding = False
        # A run asked to cancel with compensation, or past its deadline, replays only what it
        # has recorded.
        self._cancelling = turn.run.cancel == "compensate" or turn.timing_out
        self._stopped = False
        # With the engine's cache of suspended runs: where waiting calls park, and how many
        # waiting calls are under way.
        self._parking: Parking | None = None
        self._calls = 0

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._turn.run.run_id

    @property
    def workflow(self) -> str:
        """The workflow's name."""
        return self._turn.run.workflow

    def __repr__(self) -> str:
        return f"<WorkflowContext run {self.run_id!r} at step {self._seq}>"

    # -- bookkeeping ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        """Raise what a call on this context meets once the turn cannot go on."""
        if self._fatal is not None:
            raise self._fatal
        if self._stopped and not self._unwinding:
            raise _Stopped
        if self._closed or self._turn.broken is not None:
            # A turn whose write failed goes no further, even if the workflow caught the error.
            raise _Suspended

    def _next(self, name: str, kind: CheckpointKind) -> tuple[int, Checkpoint | None]:
        self._check_open()
        if self._turn.deadline is not None:
            self._turn.check_deadline()
        self._seq += 1
        seq = self._seq
        self._turn.names[seq] = name
        recorded = self._checkpoints.get(seq)
        if recorded is not None and (recorded.name != name or recorded.kind != kind):
            self._fatal = NonDeterminismError(
                seq, _describe(recorded.name, recorded.kind), _describe(name, kind)
            )
            raise self._fatal
        return seq, recorded

    def _usable(self, *, suspended: bool = False) -> bool:
        """
        Whether a call may park: the turn goes on (*suspended*: it did, up to its suspending
        commit), with no write failed or pending, no non-determinism met, not cancelling.
        """
        turn = self._turn
        return (
            (suspended or not self._closed)
            and turn.broken is None
            and not turn.unwritten
            and self._fatal is None
            and not self._stopped
            and not self._cancelling
        )

    def _suspend(self) -> _Suspended:
        self._closed = self._suspended = True
        return _Suspended()

    def _stops_at(self, recorded: Checkpoint | None) -> bool:
        """In cancel mode, whether a step of the workflow stops it here: its record is unsettled."""
        return (
            self._cancelling
            and not self._unwinding
            and (recorded is None or not settled(recorded.status, recorded.final))
        )

    def _stop(self) -> _Stopped:
        self._stopped = True
        return _Stopped()

    def close(self) -> None:
        """End the turn: any later call on this context suspends without writing."""
        self._closed = True

    @property
    def is_suspended(self) -> bool:
        """Whether this turn has suspended the run (a swallowed suspension still counts)."""
        return self._suspended

    @property
    def fatal(self) -> NonDeterminismError | None:
        """The non-determinism this turn met, which fails the run even if the workflow caught it."""
        return self._fatal

    @property
    def cancelling(self) -> bool:
        """
        Whether the run is being cancelled with compensation, or timed out (this turn replays
        what is recorded, then undoes).
        """
        return self._cancelling

    @property
    def timing_out(self) -> bool:
        """Whether this turn times the run out (its deadline passed): it replays, then undoes."""
        return self._turn.timing_out

    # -- local steps ------------------------------------------------------------------------------

    @overload
    async def local_step(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]],
        /,
        *,
        codec: Codec | None = None,
        compensate: Callable[[dict[str, Any]], Any] | None = None,
        **policy: Unpack[StepOptions],
    ) -> T: ...
    @overload
    async def local_step(
        self,
        name: str,
        fn: Callable[[], T],
        /,
        *,
        codec: Codec | None = None,
        compensate: Callable[[dict[str, Any]], Any] | None = None,
        **policy: Unpack[StepOptions],
    ) -> T: ...
    async def local_step(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]] | Callable[[], T],
        /,
        *,
        codec: Codec | None = None,
        compensate: Callable[[dict[str, Any]], Any] | None = None,
        **policy: Unpack[StepOptions],
    ) -> T:
        """
        Run *fn* here, retrying in memory, and checkpoint its outcome.

        On replay a completed step returns its recorded output (decoded JSON) without running.
        Every exception is retried per *policy* except ``effects.FatalError`` (``retryable =
        False`` has no effect here); the backoff waits inside the turn, which keeps the run's
        lease. Only the outcome is recorded, so a crash between attempts replays from attempt 1.
        When the attempts are spent the last exception propagates as it was, and replay raises
        one of the same class, built from its record (no ``pickle``): its arguments, ``code``
        and ``details``. An exception that cannot be built again that way (see
        ``effects.durable.errors.restore_exception``) is raised as a ``StepFailedError``, on
        this turn and on every replay alike, so the workflow takes the same branch each time.
        Code that raises ``asyncio.CancelledError`` itself (the engine's task is not being
        cancelled), and a ``def`` that raises ``SystemExit`` or ``KeyboardInterrupt`` in its
        thread, has failed an attempt like any other exception.

        With ``compensate=undo``, the completed step registers *undo*, a function (``def`` or
        ``async def``) of ``{"input": None, "output": <the output>}``: should the run fail
        (or be cancelled with compensation), it runs as the local step ``compensate:<name>``
        (see ``Engine``'s ``compensation_retries``).

        Args:
            name: The step's name (replay checks it at this position).
            fn: A function of no arguments (``async def``, or a ``def`` that runs in a thread).
            codec: How the output is stored; default strict JSON.
            compensate: The step's undo, or ``None`` (default) for none.
            **policy: ``StepOptions`` (``retries``, ``backoff``, ``backoff_ms``,
                ``backoff_max_ms``, ``jitter``, ``retry``; the liveness options are ignored).

        Returns:
            The output, as decoded from its stored form (so the first run and every replay see
            the same value).

        Raises:
            TypeError: If the output cannot be stored (nothing is written), an option is bad,
                or *compensate* is not a function of one argument.
            ValueError: If an option is out of range, or *name* starts with ``compensate:``.
            NonDeterminismError: If the run recorded a different step at this position.
        """
        _reserved(check_name(name, "local step name"))
        undo = _local_undo(compensate, name)
        seq, recorded = self._next(name, "local")
        store_codec = JSON if codec is None else codec
        output: T
        if recorded is not None and recorded.status == "completed":
            output = from_data(store_codec, recorded.output)
        elif recorded is not None and recorded.status == "failed" and recorded.final:
            raise _restored(recorded)
        elif self._stops_at(recorded):
            raise self._stop()
        else:
            checked = (
                policy_from_options(policy, where=f"local step {name!r}")
                if policy
                else _EMPTY_POLICY
            )
            output = await self._run_local(
                seq=seq, name=name, fn=fn, codec=store_codec, policy=checked, recorded=recorded
            )
        if undo is not None:
            self._undos.append(_Undo(name, {"input": None, "output": output}, local=undo))
        return output

    async def _run_local(
        self,
        *,
        seq: int,
        name: str,
        fn: Callable[[], Any],
        codec: Codec,
        policy: StepPolicy,
        recorded: Checkpoint | None,
        undoes: str | None = None,
    ) -> Any:
        """
        The attempts of a local step, and the commit of its outcome; its output. For the
        compensation of step *undoes*: a ``FatalError`` or a ``retryable = False`` error ends
        its attempts too, an output that cannot be stored fails the attempt, and spent
        attempts are recorded with ``step.compensation_failed`` and return ``_UNDO_FAILED``.
        """
        turn = self._turn
        is_async = is_async_callable(fn)
        events: list[NewEvent] = []
        created = 0 if recorded is None else recorded.created_at
        schedule = None
        state: Any = None
        errors: list[StepError] = []
        # The failed attempts the probes hear once a commit has recorded them.
        untold: list[Attempt] = []
        probed = bool(turn.probes.probes)
        attempt = 0
        while True:
            attempt += 1
            started = turn.now()
            if attempt == 1 and recorded is None:
                created = started
            # current_step() in the step's code (a thread copies the context, so a def sees it).
            running = step_context.set(
                StepContext(
                    step_id=f"{turn.run.run_id}:{seq}",
                    run_id=turn.run.run_id,
                    seq=seq,
                    name=name,
                    attempt=attempt,
                )
            )
            text: str | None = None
            try:
                try:
                    result = await fn() if is_async else await in_thread(fn)
                    if type(result) not in _JSON_SCALARS and inspect.isawaitable(result):
                        result = await result
                    if undoes is not None:
                        text = dump(codec, result, f"output of compensation {name!r}")
                finally:
                    step_context.reset(running)
            except BaseException as raised:
                error, from_thread = thrown(raised)
                if not is_failure(error, in_thread=from_thread):
                    raise
                now = turn.now()
                step_error = StepError.from_exception(error)
                errors.append(step_error)
                events.append(_started(started, seq, attempt))
                events.append(
                    NewEvent(
                        "step.failed",
                        now,
                        seq,
                        {"attempt": attempt, "kind": "local", "error": step_error.to_json()},
                        "warning",
                    )
                )
                # Hooks take an Exception: a cancellation or exit of user code is told as failed.
                told = error if isinstance(error, Exception) else StepFailedError(step_error)
                delay: float | None = None
                if not isinstance(error, FatalError) and (undoes is None or step_error.retryable):
                    if schedule is None:
                        schedule = policy.schedule()
                        state = schedule.initial()
                    state, _, delay = schedule.step(now / 1000, told, state, turn.rng)
                if delay is None:
                    if probed:
                        untold.append(
                            _local_attempt(turn, seq, name, attempt, started, now, step_error)
                        )
                    tell_hooks(
                        "give_up",
                        attempt=attempt,
                        delay=None,
                        error=told,
                        elapsed=(now - created) / 1000,
                        name=f"{turn.run.workflow}/{name}",
                    )
                    if undoes is not None:
                        events.append(compensation_failed(seq, undoes, attempt, step_error, now))
                    await self._fail_local(
                        seq=seq,
                        name=name,
                        policy=policy,
                        recorded=recorded,
                        created=created,
                        attempt=attempt,
                        errors=errors,
                        events=events,
                        now=now,
                    )
                    _tell_probes(turn, untold)
                    if undoes is not None:
                        return _UNDO_FAILED
                    # What every replay will raise; the exception itself where it is the same.
                    replayed = restore_exception(step_error)
                    if type(replayed) is type(error):
                        raise
                    raise replayed from error
                delay_ms = wait_ms(delay, step_error.retry_after)
                if probed:
                    untold.append(
                        _local_attempt(
                            turn, seq, name, attempt, started, now, step_error, now + delay_ms
                        )
                    )
                tell_hooks(
                    "retry",
                    attempt=attempt,
                    delay=delay_ms / 1000,
                    error=told,
                    elapsed=(now - created) / 1000,
                    name=f"{turn.run.workflow}/{name}",
                )
                events.append(
                    NewEvent(
                        "step.retry_scheduled",
                        now,
                        seq,
                        {
                            "attempt": attempt,
                            "kind": "local",
                            "delay_ms": delay_ms,
                            "wake_at": now + delay_ms,
                        },
                    )
                )
                if delay_ms > 0:
                    # Renewed to cover the wait, so no other engine recovers the run meanwhile.
                    await turn.commit(turn.lease(now, delay_ms), events=events, now=now)
                    events = []
                    _tell_probes(turn, untold)
                    # A wait past the run's deadline ends there: the run times out then.
                    await turn.clock.sleep_async(turn.until_deadline(delay_ms, now) / 1000)
                    turn.check_deadline()
                continue
            if text is None:
                text = dump(codec, result, f"output of local step {name!r}")
            now = turn.now()
            if recorded is None and attempt == 1 and not turn.has_unwritten:
                try:
                    await turn.store.record_local_step(
                        turn.run.run_id,
                        turn.token,
                        seq=seq,
                        name=name,
                        output=text,
                        started=started,
                        now=now,
                        policy=policy.stored()[1],
                    )
                except StoreError as error:
                    turn.broken = error
                    raise
                if probed:
                    untold.append(_local_attempt(turn, seq, name, attempt, started, now))
                    _tell_probes(turn, untold)
                if codec is JSON and type(result) in _JSON_SCALARS:
                    return result  # JSON gives back exactly these
                return from_data(codec, json.loads(text))
            events.append(_started(started, seq, attempt))
            events.append(
                NewEvent("step.completed", now, seq, {"attempt": attempt, "kind": "local"})
            )
            checkpoint = _local_outcome(
                turn,
                seq,
                name,
                attempt=attempt,
                errors=errors,
                created=created,
                now=now,
                policy=policy,
            )
            await turn.commit(
                HOLD,
                checkpoints=(
                    CheckpointWrite(checkpoint, None if recorded is None else recorded.rev, text),
                ),
                events=events,
                now=now,
            )
            if probed:
                untold.append(_local_attempt(turn, seq, name, attempt, started, now))
                _tell_probes(turn, untold)
            return from_data(codec, json.loads(text))

    async def _fail_local(
        self,
        *,
        seq: int,
        name: str,
        policy: StepPolicy,
        recorded: Checkpoint | None,
        created: int,
        attempt: int,
        errors: list[StepError],
        events: list[NewEvent],
        now: int,
    ) -> None:
        turn = self._turn
        checkpoint = _local_outcome(
            turn,
            seq,
            name,
            attempt=attempt,
            errors=errors,
            created=created,
            now=now,
            policy=policy,
            failed=True,
        )
        write = CheckpointWrite(checkpoint, None if recorded is None else recorded.rev)
        await turn.commit(HOLD, checkpoints=(write,), events=events, now=now)

    # -- durable timers ---------------------------------------------------------------------------

    @_resumable
    async def sleep(self, duration: DurationLike) -> None:
        """
        Wait *duration* durably: the run suspends (its state is in the store; an engine with
        ``cached_runs`` keeps the workflow waiting here too) and is woken once the time has
        come, by whichever engine serves it.

        The first turn that reaches the sleep reads the clock once and records a checkpoint of
        kind ``"sleep"``, ``pending`` with ``wake_at = now + duration``; a replay, a crash, a
        restart or a clock read after that never moves it, so the sleep is neither shortened
        nor repeated. Once due it is ``completed`` (keeping ``wake_at``) and every replay
        passes it at once. ``sleep(0)`` (or less than half a ms) completes at once.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"1h"`` or ``"250ms"``,
                rounded to whole ms.

        Raises:
            ValueError: If *duration* is negative, NaN, infinite, a ``bool``, an unparsable
                string, or ends after ``MAX_WAKE_MS`` (nothing is written).
            TypeError: If *duration* is none of the accepted types.
            NonDeterminismError: If the run recorded a different step at this position.
        """
        now = self._turn.now()
        ms = duration_ms(duration, now)
        seq, recorded = self._next(_SLEEP, "sleep")
        if recorded is not None and recorded.status == "completed":
            return
        if self._stops_at(recorded):
            raise self._stop()
        turn = self._turn
        if recorded is not None:
            if timers.due(recorded, now):
                # The completion rides on the turn's next write: a timer costs its arming
                # commit and the claim that wakes it, as a dispatched step's wake_at does.
                timers.fire_later(turn, recorded, now=now, events=(_slept(now, seq, recorded),))
                return
            await timers.wait(turn, recorded, now)
            raise self._suspend()
        wake_at = now + ms
        armed = NewEvent("step.started", now, seq, {"kind": "sleep", "wake_at": wake_at, "ms": ms})
        if ms == 0:
            cp = timers.pending(turn, seq, name=_SLEEP, kind="sleep", wake_at=now, now=now)
            timers.fire_later(
                turn, cp, now=now, events=(armed, _slept(now, seq, cp)), recorded=False
            )
            return
        await timers.arm(turn, seq, name=_SLEEP, kind="sleep", wake_at=wake_at, now=now,
                         events=(armed,))  # fmt: skip
        raise self._suspend()

    # -- recorded values and patches --------------------------------------------------------------

    async def now(self) -> datetime.datetime:
        """
        The engine clock's time as a UTC ``datetime``, read once and recorded (the local step
        ``durable.now``): every replay returns the same value.

        Raises:
            NonDeterminismError: If the run recorded a different step at this position.
        """
        clock = self._turn.clock
        text = await self.local_step(_NOW, lambda: _iso(clock.now()))
        return datetime.datetime.fromisoformat(text)

    async def uuid(self) -> str:
        """
        A random UUID, version 4, in canonical form (``"1b4e28ba-2fa1-4d3b-a3f5-ef19b5a7633b"``),
        made once and recorded (the local step ``durable.uuid``): every replay returns it again.

        Raises:
            NonDeterminismError: If the run recorded a different step at this position.
        """
        return str(await self.local_step(_UUID, lambda: str(uuid.uuid4())))

    def patched(self, change_id: str) -> bool:
        """
        Whether this run takes the new code path of the change *change_id*, so one version of a
        workflow serves runs started before a change and runs started after it.

        ``True`` for a run that reaches this point under the code that has the patch: a
        checkpoint of kind ``"patch"`` named *change_id* is recorded here (with the turn's next
        write), so every replay says ``True`` again. ``False`` for a run that had passed this
        point before the patch existed (another step is recorded at this position): that takes
        no sequence number, so the old path replays as it was recorded. Once no run of the old
        code is left, drop the old path; keep the ``patched`` call (or replace it by nothing
        only when no run recorded the patch either).

        Example:
            .. code-block:: python

                if ctx.patched("charge-in-cents"):
                    await ctx.step(charge_cents, order)
                else:
                    await ctx.step(charge, order)

        Args:
            change_id: A name for the change (a non-empty string); a second ``patched`` with
                the same id is a point of its own.

        Raises:
            TypeError: If *change_id* is not a string.
            ValueError: If *change_id* is empty, has surrounding spaces, U+0000 or a lone
                surrogate.
        """
        check_name(change_id, "change_id")
        self._check_open()
        ahead = self._checkpoints.get(self._seq + 1)
        if ahead is not None and (ahead.kind != "patch" or ahead.name != change_id):
            return False  # the run passed here under older code: the old path replays
        seq, recorded = self._next(change_id, "patch")
        if recorded is not None:
            return True
        if self._stops_at(None):
            raise self._stop()
        turn = self._turn
        now = turn.now()
        marker = timers.pending(turn, seq, name=change_id, kind="patch", wake_at=None, now=now)
        turn.defer(CheckpointWrite(attrs.evolve(marker, status="completed"), None))
        return True

    # -- dispatched steps -------------------------------------------------------------------------

    def _resolve(
        self, step: StepDef[Any, Any] | str, what: str
    ) -> tuple[str, StepDef[Any, Any] | None]:
        if isinstance(step, StepDef):
            return _reserved(step.name), step
        if isinstance(step, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            return _reserved(check_name(step, "step name")), self._turn.steps.get(step)
        msg = f"{what} takes a StepDef or a step's name, got {step!r}"
        raise TypeError(msg)

    def _undo_of(self, value: object, name: str) -> _Undo | None:
        """
        The dispatched undo *value* (a ``StepDef`` or a step's name) of step *name*, checked,
        with its policy (its backoff; ``compensation_retries`` attempts; the durable path), as
        a template whose argument each completed step fills in (``None``: no undo).
        """
        if value is None:
            return None
        where = f"compensate of step {name!r}"
        definition: StepDef[Any, Any] | None
        if isinstance(value, StepDef):
            given: StepDef[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
            handler, definition = given.name, given
        elif isinstance(value, str):
            handler = check_name(value, where)
            definition = self._turn.steps.get(value)
        else:
            msg = (
                f"{where} takes a StepDef or a step's name (the undo is dispatched with"
                f" {{'input': <the step's input>, 'output': <its output>}}), got {value!r}"
            )
            raise TypeError(msg)
        declared = _EMPTY_POLICY if definition is None else definition.policy
        fields = {k: v for k, v in declared.fields.items() if k not in _NOT_FOR_UNDOS}
        fields["retries"] = self._turn.host.compensation_retries
        policy = StepPolicy(fields)
        if policy.queue is not None:
            self._turn.host.queue_limit(policy.queue)  # an unknown queue is a ValueError
        return _Undo(
            name,
            None,
            handler=handler,
            group="default" if definition is None else definition.group,
            codec=JSON if definition is None else definition.codec,
            policy=policy,
        )

    def _register(self, undo: _Undo | None, value: Any, output: Any) -> None:
        """A completed dispatched step's undo, its input ``{"input", "output"}`` encoded now."""
        if undo is None:
            return
        argument = {"input": value, "output": output}
        text = dump(
            undo.codec,
            argument,
            f"input of compensation {undo.handler!r} of step {undo.undoes!r}",
        )
        self._undos.append(attrs.evolve(undo, argument=argument, input_text=text))

    def _policy(
        self, name: str, definition: StepDef[Any, Any] | None, overrides: Mapping[str, Any]
    ) -> StepPolicy:
        declared = _EMPTY_POLICY if definition is None else definition.policy
        policy = (
            declared.merge(policy_from_options(overrides, where=f"step {name!r}"))
            if overrides
            else declared
        )
        queue = policy.queue
        if queue is not None:
            self._turn.host.queue_limit(queue)  # an unknown queue is a ValueError naming it
        return policy

    @overload
    async def step(
        self,
        step: StepDef[I, O],
        input: I,
        /,
        *,
        compensate: StepDef[Any, Any] | str | None = None,
        **overrides: Unpack[StepOptions],
    ) -> O: ...
    @overload
    async def step(
        self,
        step: str,
        input: Any,
        /,
        *,
        compensate: StepDef[Any, Any] | str | None = None,
        **overrides: Unpack[StepOptions],
    ) -> Any: ...
    @_resumable
    async def step(
        self,
        step: StepDef[Any, Any] | str,
        input: Any,  # noqa: A002 - the design's name
        /,
        *,
        compensate: StepDef[Any, Any] | str | None = None,
        **overrides: Unpack[StepOptions],
    ) -> Any:
        """
        Dispatch a step to a worker and suspend the run until its result lands.

        The first call writes a ``pending`` checkpoint and a task in one transaction and suspends
        (its state is in the store; an engine with ``cached_runs`` keeps the workflow waiting
        here, and resumes it here). On replay: a completed step returns its output; a failed
        attempt is retried durably per the effective policy (the definition's, with every given
        override winning): ``wake_at = now + delay(attempt)`` is stamped once, the run suspends,
        and once due the same ``step_id`` is dispatched again with ``attempt + 1``.

        With ``timeout_ms`` the step takes the liveness path instead: each attempt is awaited in
        memory, in this turn, and silence past the window re-dispatches it at once (see
        ``RemoteStepTimeout``).

        With ``compensate=undo_step`` (a ``StepDef`` or a step's name), the completed step
        registers its undo: should the run fail (or be cancelled with compensation), *undo_step*
        is dispatched as the step ``compensate:<name>`` with ``{"input": input, "output":
        output}``, with ``Engine``'s ``compensation_retries`` attempts and its own backoff.

        Args:
            step: A ``StepDef``, or a step's name (served by whichever worker has a handler).
            input: The step's input (JSON, or what the definition's codec takes).
            compensate: The step's undo, or ``None`` (default) for none.
            **overrides: ``StepOptions`` fields that win over the definition's.

        Returns:
            The step's output.

        Raises:
            RemoteStepError: The step failed with a non-retryable error (``retryable = False``,
                ``FatalError``, no handler), or its attempts are spent. ``.step_error`` holds the
                last error, ``.errors`` every attempt's. With ``remote_redispatch_ms``, a dispatch
                that stayed lost past ``remote_redispatch_max`` re-drives has code
                ``"remote_step_lost"``.
            RemoteStepTimeout: On the liveness path, when the last attempt went silent.
            TypeError: If *input* (or the undo's input) cannot be stored (nothing is written),
                an option is bad, or *compensate* is neither a ``StepDef`` nor a name.
            ValueError: If an option is out of range, names a queue the engine lacks, or the
                step's name starts with ``compensate:``.
            NonDeterminismError: If the run recorded a different step at this position.
        """
        name, definition = self._resolve(step, "ctx.step")
        undo = self._undo_of(compensate, name)
        seq, recorded = self._next(name, "remote")
        policy = self._policy(name, definition, overrides)
        if self._stops_at(recorded):
            raise self._stop()
        member = self._member(
            seq, name=name, definition=definition, policy=policy, recorded=recorded, value=input
        )
        if policy.timeout_ms is not None and not (
            recorded is not None and (recorded.status == "completed" or recorded.final)
        ):
            output = await liveness(self._turn, member)
            self._register(undo, input, output)
            return output
        if await settle_members(self._turn, (member,)):
            raise self._suspend()
        if member.error is not None:
            raise member.error
        self._register(undo, input, member.output)
        return member.output

    @overload
    async def all(
        self,
        step: StepDef[I, O],
        inputs: Iterable[I],
        /,
        *,
        compensate: StepDef[Any, Any] | str | None = None,
        **overrides: Unpack[StepOptions],
    ) -> list[O]: ...
    @overload
    async def all(
        self,
        step: str,
        inputs: Iterable[Any],
        /,
        *,
        compensate: StepDef[Any, Any] | str | None = None,
        **overrides: Unpack[StepOptions],
    ) -> list[Any]: ...
    async def all(
        self,
        step: StepDef[Any, Any] | str,
        inputs: Iterable[Any],
        /,
        *,
        compensate: StepDef[Any, Any] | str | None = None,
        **overrides: Unpack[StepOptions],
    ) -> list[Any]:
        """
        Dispatch one task per input in one transaction, suspend once, and return the outputs
        in input order (a fan).

        Each member retries durably on its own policy. When every member has settled, a member
        that failed for good raises its ``RemoteStepError`` (the first such member, in input
        order); otherwise the outputs are returned. Members take consecutive sequence numbers.
        With ``compensate=undo_step``, each member that completed registers its undo, in input
        order (also when another member failed), as ``ctx.step`` does.

        Raises:
            ValueError: If the step has ``timeout_ms`` (a fan needs durable steps), or names a
                queue the engine lacks.
            RemoteStepError: For the first member that failed for good, once all have settled.
            TypeError: If an input cannot be stored (nothing is written), or *compensate* is
                neither a ``StepDef`` nor a name.
        """
        # A waiting fan that parks takes its step again on resume: with the same inputs.
        given = list(inputs) if isinstance(inputs, Iterator) else inputs
        return await self._fan(step, given, compensate=compensate, **overrides)

    @_resumable
    async def _fan(
        self,
        step: StepDef[Any, Any] | str,
        inputs: Iterable[Any],
        /,
        *,
        compensate: StepDef[Any, Any] | str | None = None,
        **overrides: Unpack[StepOptions],
    ) -> list[Any]:
        """``all``, its inputs iterable again."""
        name, definition = self._resolve(step, "ctx.all")
        undo = self._undo_of(compensate, name)
        values = list(inputs)
        policy = self._policy(name, definition, overrides)
        if policy.timeout_ms is not None:
            msg = (
                f"ctx.all cannot fan out step {name!r}: it has timeout_ms (the liveness path);"
                " a fan needs durable steps, so drop timeout_ms for it"
            )
            raise ValueError(msg)
        members: list[Member] = []
        for value in values:
            seq, recorded = self._next(name, "remote")
            members.append(
                self._member(
                    seq,
                    name=name,
                    definition=definition,
                    policy=policy,
                    recorded=recorded,
                    value=value,
                )
            )
        if not members:
            return []
        if any(self._stops_at(member.recorded) for member in members):
            self._register_members(undo, values, members)
            raise self._stop()
        if await settle_members(self._turn, members):
            raise self._suspend()
        self._register_members(undo, values, members)
        for member in members:
            if member.error is not None:
                raise member.error
        return [member.output for member in members]

    def _register_members(
        self, undo: _Undo | None, values: list[Any], members: list[Member]
    ) -> None:
        """The undos of a fan's members that completed, in input order."""
        if undo is None:
            return
        for value, member in zip(values, members, strict=True):
            recorded = member.recorded
            if member.state == "done":
                self._register(undo, value, member.output)
            elif (
                member.state == "waiting"
                and recorded is not None
                and recorded.status == "completed"
            ):
                self._register(undo, value, from_data(member.codec, recorded.output))

    def _member(
        self,
        seq: int,
        *,
        name: str,
        definition: StepDef[Any, Any] | None,
        policy: StepPolicy,
        recorded: Checkpoint | None,
        value: Any,
    ) -> Member:
        codec = JSON if definition is None else definition.codec
        return Member(
            seq=seq,
            name=name,
            group="default" if definition is None else definition.group,
            policy=policy,
            codec=codec,
            recorded=recorded,
            input_text=None
            if recorded is not None
            else dump(codec, value, f"input of step {name!r}"),
        )

    # -- messages, events and child workflows -----------------------------------------------------

    async def _read(self, read: Awaitable[T]) -> T:
        """A read of the store inside the turn; a failed one breaks the turn, as a write does."""
        try:
            return await read
        except StoreError as error:
            self._turn.broken = error
            raise

    @_resumable
    async def recv(self, topic: str, *, timeout: DurationLike | None = None) -> Any:
        """
        The next message sent to this run on *topic* (``engine.send``) that no ``recv`` of the
        run has taken: in send order, each delivered once. Messages sent before the workflow
        gets here are kept for it.

        With none there yet, the run suspends durably (its state is in the store; an engine with
        ``cached_runs`` keeps the workflow waiting here too) until one is sent, or until
        *timeout* has passed: then ``None``. The message taken is recorded (a
        ``recv`` checkpoint named by the topic, its output the message) in the transaction that
        marks it read, so every replay returns the same message and a crash neither loses nor
        repeats one. The deadline is read once, when the run first waits here (a timer, as
        ``sleep``'s): a replay, a crash or a restart never moves it.

        Args:
            topic: The topic (a non-empty name).
            timeout: How long to wait for a message (seconds, a ``timedelta`` or a string like
                ``"1h"``, rounded to whole ms); ``None`` (default): as long as it takes; ``0``:
                take one only if it is there already.

        Returns:
            The message (decoded JSON), or ``None`` once *timeout* passed without one.

        Raises:
            TypeError: If *topic* is not a string, or *timeout* is none of the accepted types.
            ValueError: If *topic* is empty, has surrounding spaces, U+0000 or a lone
                surrogate, or *timeout* is negative, NaN or too long (nothing is written).
            NonDeterminismError: If the run recorded another step at this position.
        """
        check_name(topic, "topic")
        turn = self._turn
        ms = None if timeout is None else duration_ms(timeout, turn.now(), name="timeout")
        seq, recorded = self._next(topic, "recv")
        if recorded is not None and recorded.status == "completed":
            return recorded.output
        if self._stops_at(recorded):
            raise self._stop()
        found = await self._read(turn.store.next_message(turn.run.run_id, topic))
        now = turn.now()
        if found is not None:
            text = dump(JSON, found.body, f"message on topic {topic!r}")
            done = written(turn.run, seq, topic, "recv", now=now, recorded=recorded)
            rev = None if recorded is None else recorded.rev
            await turn.commit(
                HOLD,
                checkpoints=(CheckpointWrite(done, rev, output=text),),
                taken=(Take(found.n, seq),),
                now=now,
            )
            return found.body
        if recorded is not None:
            # A timer of its own: due, it completes with None; else the run waits again.
            if timers.due(recorded, now):
                await timers.fire(turn, recorded, now=now, output="null")
                return None
            await timers.wait(turn, recorded, now)
            raise self._suspend()
        if ms == 0:
            cp = timers.pending(turn, seq, name=topic, kind="recv", wake_at=now, now=now)
            await timers.fire(turn, cp, now=now, output="null", recorded=False)
            return None
        wake_at = None if ms is None else now + ms
        await timers.arm(turn, seq, name=topic, kind="recv", wake_at=wake_at, now=now)
        raise self._suspend()

    async def set_event(self, key: str, value: Any) -> None:
        """
        Publish *value* as this run's event *key*: ``engine.get_event(run_id, key)`` returns
        the latest value set. Written once (an ``event`` checkpoint named by the key, its
        output the value), in one transaction with the value; a replay does not write it again.

        Args:
            key: The event's key (a non-empty name).
            value: JSON.

        Raises:
            TypeError: If *key* is not a string, or *value* is not JSON (NaN, nested deeper than
                ``MAX_DEPTH``...): nothing is written.
            ValueError: If *key* is empty, has surrounding spaces, U+0000 or a lone surrogate.
            NonDeterminismError: If the run recorded another step at this position.
        """
        check_name(key, "event key")
        seq, recorded = self._next(key, "event")
        if recorded is not None and recorded.status == "completed":
            return
        if self._stops_at(recorded):
            raise self._stop()
        text = dump(JSON, value, f"value of event {key!r}", hint=_JSON_ONLY)
        turn = self._turn
        now = turn.now()
        done = written(turn.run, seq, key, "event", now=now, recorded=recorded)
        rev = None if recorded is None else recorded.rev
        await turn.commit(
            HOLD,
            checkpoints=(CheckpointWrite(done, rev, output=text),),
            values=(EventWrite(key, text, seq),),
            now=now,
        )
        turn.host.event_set(turn.run.run_id)

    @overload
    async def child(
        self, workflow: WorkflowDef[I, O], input: I, /, *, run_id: str | None = None
    ) -> O: ...
    @overload
    async def child(self, workflow: str, input: Any, /, *, run_id: str | None = None) -> Any: ...
    @_resumable
    async def child(
        self,
        workflow: WorkflowDef[Any, Any] | str,
        input: Any,  # noqa: A002 - the design's name
        /,
        *,
        run_id: str | None = None,
    ) -> Any:
        """
        Start a run of *workflow* as this run's child, suspend until it finishes, and return
        its output.

        The child's run id is ``f"{run_id of this run}:{seq}"`` unless *run_id* is given. It is
        started in the transaction that records the step (a ``child`` checkpoint named by the
        workflow), so a replay, or a crash right after, never starts it twice. Whatever engine
        serves *workflow* runs it; its finish wakes this run. ``engine.cancel`` of this run
        cancels it too.

        Args:
            workflow: A ``WorkflowDef`` (this engine's or another's), or the name of a workflow
                this engine has.
            input: The child's input (JSON, or what its workflow's codec takes).
            run_id: The child's run id; default ``f"{self.run_id}:{seq}"``.

        Returns:
            The child's output, decoded by its workflow's codec.

        Raises:
            ChildWorkflowError: If the child failed, was cancelled or is dead (``.code`` is the
                child's code, ``"cancelled"`` or ``"run_dead"``); the same on every replay.
            TypeError: If *input* cannot be stored (nothing is written), or *workflow* is
                neither a ``WorkflowDef`` nor a name.
            ValueError: If the name is not one of this engine's workflows, or *run_id* is not a
                valid id or names a run that is not this run's child of that workflow.
            NonDeterminismError: If the run recorded another step at this position.
        """
        target = child_target(workflow, self._turn.workflows)
        seq, recorded = self._next(target.name, "child")
        if recorded is None:
            if self._stops_at(None):
                raise self._stop()
            await self._start_child(seq, target, input, run_id, wait=True)
            raise self._suspend()
        child_id = str(recorded.input)
        if recorded.status == "completed":
            return from_data(target.codec, recorded.output)
        if recorded.status == "failed":
            raise ChildWorkflowError(child_id, recorded.error or StepError("the child failed"))
        if self._stops_at(recorded):
            raise self._stop()
        turn = self._turn
        found = await self._read(turn.store.get_run(child_id))
        if found is not None and found.status not in FINISHED:
            await turn.commit(RunAdvance("suspend"))
            raise self._suspend()
        return await self._child_ended(seq, recorded, target, child_id, found)

    async def _child_ended(
        self,
        seq: int,
        recorded: Checkpoint,
        target: ChildTarget,
        child_id: str,
        found: Run | None,
    ) -> Any:
        """Record how the child *found* (``None``: its run is gone) ended; its output, or raise."""
        turn = self._turn
        now = turn.now()
        if found is not None and found.status == "completed":
            text = dump(JSON, found.output, f"output of child run {child_id!r}")
            done = written(turn.run, seq, target.name, "child", now=now, recorded=recorded)
            write = CheckpointWrite(done, recorded.rev, text, _id_text(child_id))
            await turn.commit(HOLD, checkpoints=(write,), now=now)
            return from_data(target.codec, found.output)
        error = (
            StepError(f"child run {child_id!r} no longer exists")
            if found is None
            else child_failure(found.status, found.error)
        )
        failed = written(
            turn.run, seq, target.name, "child", now=now, recorded=recorded, status="failed",
            error=error,
        )  # fmt: skip
        write = CheckpointWrite(failed, recorded.rev, input=_id_text(child_id))
        await turn.commit(HOLD, checkpoints=(write,), now=now)
        raise ChildWorkflowError(child_id, error)

    @overload
    async def start_child(
        self, workflow: WorkflowDef[I, Any], input: I, /, *, run_id: str | None = None
    ) -> str: ...
    @overload
    async def start_child(
        self, workflow: str, input: Any, /, *, run_id: str | None = None
    ) -> str: ...
    async def start_child(
        self,
        workflow: WorkflowDef[Any, Any] | str,
        input: Any,  # noqa: A002 - the design's name
        /,
        *,
        run_id: str | None = None,
    ) -> str:
        """
        Start a run of *workflow* as this run's child, without waiting for it; return its id.

        As ``child`` starts it (the same id, once, in the transaction that records the
        ``child`` checkpoint); this run goes on at once. ``engine.cancel`` of this run cancels
        the child too, while it is unfinished; its outcome is read with ``engine.get_run`` or
        ``engine.wait``.

        Raises:
            TypeError: If *input* cannot be stored (nothing is written), or *workflow* is
                neither a ``WorkflowDef`` nor a name.
            ValueError: As ``child``.
            NonDeterminismError: If the run recorded another step at this position.
        """
        target = child_target(workflow, self._turn.workflows)
        seq, recorded = self._next(target.name, "child")
        if recorded is not None:
            return str(recorded.input)
        if self._stops_at(None):
            raise self._stop()
        return await self._start_child(seq, target, input, run_id, wait=False)

    async def _start_child(
        self, seq: int, target: ChildTarget, value: Any, run_id: str | None, *, wait: bool
    ) -> str:
        """
        Record the ``child`` checkpoint at *seq* and start the child run in one transaction:
        pending (*wait*: the run suspends) or completed (its output the child's id).
        """
        turn = self._turn
        parent = turn.run.run_id
        child_id = f"{parent}:{seq}" if run_id is None else check_name(run_id, "run_id")
        text = dump(target.codec, value, f"input of child workflow {target.name!r}")
        existing = await self._read(turn.store.get_run(child_id))
        if existing is not None and (
            existing.parent_id != parent or existing.workflow != target.name
        ):
            msg = (
                f"run {child_id!r} exists and is not a child of this run of workflow"
                f" {target.name!r}; give the child another run_id"
            )
            raise ValueError(msg)
        now = turn.now()
        trace = turn.probes.run_trace(child_id, target.name, now)
        id_text = _id_text(child_id)
        cp = written(
            turn.run, seq, target.name, "child", now=now, recorded=None,
            status="pending" if wait else "completed", input=child_id,
        )  # fmt: skip
        write = CheckpointWrite(cp, None, output=None if wait else id_text, input=id_text)
        await turn.commit(
            RunAdvance("suspend") if wait else HOLD,
            checkpoints=(write,),
            runs=(target.new_run(child_id, parent, text, now, trace.traceparent),),
            now=now,
        )
        if existing is None:
            trace.made()
        return child_id

    # -- compensations ----------------------------------------------------------------------------

    async def _unwind(self) -> list[str]:
        """
        Run the registered compensations, the last registered first, each as the checkpointed
        step ``compensate:<step>`` at the next sequence numbers (so every replay numbers them
        alike); return the names of the steps whose undo spent its attempts, in unwinding
        order. A completed compensation never runs again; one without a record runs (again,
        after a crash: undos must be idempotent). See ``unwind``.

        Raises:
            Suspended: While a dispatched undo is out (the run waits for its result).
        """
        self._unwinding = True
        failed: list[str] = []
        for undo in reversed(self._undos):
            done = await (
                self._undo_local(undo) if undo.local is not None else self._undo_remote(undo)
            )
            if not done:
                failed.append(undo.undoes)
        return failed

    async def _undo_local(self, undo: _Undo) -> bool:
        name = f"{COMPENSATION_PREFIX}{undo.undoes}"
        seq, recorded = self._next(name, "local")
        if recorded is not None and recorded.status == "completed":
            return True
        if recorded is not None and recorded.status == "failed" and recorded.final:
            return False
        assert undo.local is not None
        outcome = await self._run_local(
            seq=seq,
            name=name,
            fn=functools.partial(undo.local, undo.argument),
            codec=JSON,
            policy=StepPolicy({"retries": self._turn.host.compensation_retries}),
            recorded=recorded,
            undoes=undo.undoes,
        )
        return outcome is not _UNDO_FAILED

    @_resumable
    async def _undo_remote(self, undo: _Undo) -> bool:
        name = f"{COMPENSATION_PREFIX}{undo.undoes}"
        seq, recorded = self._next(name, "remote")
        member = Member(
            seq=seq,
            name=name,
            group=undo.group,
            policy=undo.policy,
            codec=undo.codec,
            recorded=recorded,
            input_text=None if recorded is not None else undo.input_text,
            handler=undo.handler,
            undoes=undo.undoes,
        )
        if await settle_members(self._turn, (member,)):
            raise self._suspend()
        return member.error is None
