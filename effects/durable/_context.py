"""
Replay: the ``WorkflowContext`` a workflow awaits its steps through, and one turn's state.

A turn runs the workflow from its start. Each ``local_step`` / ``step`` call takes the next sequence
number; a checkpoint already recorded there answers it (its output, or its error raised again), and
the first step without a usable record does the work: a local step runs in place and commits its
outcome; a dispatched step writes a pending checkpoint and a task in one transaction and suspends
the run. Suspension is ``_Suspended``, a ``BaseException``, so a workflow's ``except Exception``
cannot swallow it; and once a turn has suspended, every later call suspends again.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar, overload

from typing_extensions import Unpack

from effects import FatalError, is_async_callable
from effects.durable._codec import JSON, Codec, dump, from_data
from effects.durable._definitions import StepDef, check_name
from effects.durable._failures import in_thread, is_failure, thrown
from effects.durable._policy import StepOptions, StepPolicy, policy_from_options
from effects.durable._records import Checkpoint, CheckpointKind
from effects.durable._remote import Member, liveness, settle_members
from effects.durable._step_context import StepContext, step_context
from effects.durable._store import CheckpointWrite, NewEvent
from effects.durable._turn import HOLD, Suspended, Turn, tell_hooks, wait_ms
from effects.durable.errors import (
    NonDeterminismError,
    StepError,
    StepFailedError,
    StoreError,
    restore_exception,
)

__all__ = ["WorkflowContext", "suspended"]

T = TypeVar("T")
I = TypeVar("I")  # noqa: E741
O = TypeVar("O")  # noqa: E741

_EMPTY_POLICY: Final = StepPolicy({})
_JSON_SCALARS: Final = frozenset({int, str, float, bool, type(None)})
_Suspended = Suspended


def suspended() -> type[BaseException]:
    """The exception class a turn's suspension raises (for the engine only)."""
    return Suspended


def _local_outcome(
    turn: Turn,
    seq: int,
    name: str,
    *,
    attempt: int,
    errors: list[StepError],
    created: int,
    now: int,
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
    )


def _started(at: int, seq: int, attempt: int) -> NewEvent:
    return NewEvent("step.started", at, seq, {"attempt": attempt, "kind": "local"})


def _describe(name: str, kind: CheckpointKind) -> str:
    return f"{name!r} ({kind})"


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

    __slots__ = ("_checkpoints", "_closed", "_fatal", "_seq", "_suspended", "_turn")

    def __init__(self, turn: Turn, checkpoints: Sequence[Checkpoint]) -> None:
        self._turn = turn
        self._checkpoints = {cp.seq: cp for cp in checkpoints}
        self._seq = 0
        self._closed = False
        self._suspended = False
        self._fatal: NonDeterminismError | None = None

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

    def _next(self, name: str, kind: CheckpointKind) -> tuple[int, Checkpoint | None]:
        if self._fatal is not None:
            raise self._fatal
        if self._closed or self._turn.broken is not None:
            # A turn whose write failed goes no further, even if the workflow caught the error.
            raise _Suspended
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

    def _suspend(self) -> _Suspended:
        self._closed = self._suspended = True
        return _Suspended()

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

    # -- local steps ------------------------------------------------------------------------------

    @overload
    async def local_step(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]],
        /,
        *,
        codec: Codec | None = None,
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
        **policy: Unpack[StepOptions],
    ) -> T: ...
    async def local_step(
        self,
        name: str,
        fn: Callable[[], Awaitable[T]] | Callable[[], T],
        /,
        *,
        codec: Codec | None = None,
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

        Args:
            name: The step's name (replay checks it at this position).
            fn: A function of no arguments (``async def``, or a ``def`` that runs in a thread).
            codec: How the output is stored; default strict JSON.
            **policy: ``StepOptions`` (``retries``, ``backoff``, ``backoff_ms``,
                ``backoff_max_ms``, ``jitter``, ``retry``; the liveness options are ignored).

        Returns:
            The output, as decoded from its stored form (so the first run and every replay see
            the same value).

        Raises:
            TypeError: If the output cannot be stored (nothing is written), or an option is bad.
            ValueError: If an option is out of range.
            NonDeterminismError: If the run recorded a different step at this position.
        """
        check_name(name, "local step name")
        seq, recorded = self._next(name, "local")
        store_codec = JSON if codec is None else codec
        if recorded is not None:
            if recorded.status == "completed":
                result: T = from_data(store_codec, recorded.output)
                return result
            if recorded.status == "failed" and recorded.final:
                raise _restored(recorded)
        checked = (
            policy_from_options(policy, where=f"local step {name!r}") if policy else _EMPTY_POLICY
        )
        output: T = await self._run_local(
            seq=seq, name=name, fn=fn, codec=store_codec, policy=checked, recorded=recorded
        )
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
    ) -> Any:
        turn = self._turn
        is_async = is_async_callable(fn)
        events: list[NewEvent] = []
        created = 0 if recorded is None else recorded.created_at
        schedule = None
        state: Any = None
        errors: list[StepError] = []
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
            try:
                try:
                    result = await fn() if is_async else await in_thread(fn)
                    if inspect.isawaitable(result):
                        result = await result
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
                if not isinstance(error, FatalError):
                    if schedule is None:
                        schedule = policy.schedule()
                        state = schedule.initial()
                    state, _, delay = schedule.step(now / 1000, told, state, turn.rng)
                if delay is None:
                    tell_hooks(
                        "give_up",
                        attempt=attempt,
                        delay=None,
                        error=told,
                        elapsed=(now - created) / 1000,
                        name=f"{turn.run.workflow}/{name}",
                    )
                    await self._fail_local(
                        seq=seq,
                        name=name,
                        recorded=recorded,
                        created=created,
                        attempt=attempt,
                        errors=errors,
                        events=events,
                        now=now,
                    )
                    # What every replay will raise; the exception itself where it is the same.
                    replayed = restore_exception(step_error)
                    if type(replayed) is type(error):
                        raise
                    raise replayed from error
                delay_ms = wait_ms(delay, step_error.retry_after)
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
                    await turn.clock.sleep_async(delay_ms / 1000)
                continue
            text = dump(codec, result, f"output of local step {name!r}")
            now = turn.now()
            if recorded is None and attempt == 1:
                try:
                    await turn.store.record_local_step(
                        turn.run.run_id,
                        turn.token,
                        seq=seq,
                        name=name,
                        output=text,
                        started=started,
                        now=now,
                    )
                except StoreError as error:
                    turn.broken = error
                    raise
                if codec is JSON and type(result) in _JSON_SCALARS:
                    return result  # JSON gives back exactly these
                return from_data(codec, json.loads(text))
            events.append(_started(started, seq, attempt))
            events.append(
                NewEvent("step.completed", now, seq, {"attempt": attempt, "kind": "local"})
            )
            checkpoint = _local_outcome(
                turn, seq, name, attempt=attempt, errors=errors, created=created, now=now
            )
            await turn.commit(
                HOLD,
                checkpoints=(
                    CheckpointWrite(checkpoint, None if recorded is None else recorded.rev, text),
                ),
                events=events,
                now=now,
            )
            return from_data(codec, json.loads(text))

    async def _fail_local(
        self,
        *,
        seq: int,
        name: str,
        recorded: Checkpoint | None,
        created: int,
        attempt: int,
        errors: list[StepError],
        events: list[NewEvent],
        now: int,
    ) -> None:
        turn = self._turn
        checkpoint = _local_outcome(
            turn, seq, name, attempt=attempt, errors=errors, created=created, now=now, failed=True
        )
        write = CheckpointWrite(checkpoint, None if recorded is None else recorded.rev)
        await turn.commit(HOLD, checkpoints=(write,), events=events, now=now)

    # -- dispatched steps -------------------------------------------------------------------------

    def _resolve(
        self, step: StepDef[Any, Any] | str, what: str
    ) -> tuple[str, StepDef[Any, Any] | None]:
        if isinstance(step, StepDef):
            return step.name, step
        if isinstance(step, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            return check_name(step, "step name"), self._turn.steps.get(step)
        msg = f"{what} takes a StepDef or a step's name, got {step!r}"
        raise TypeError(msg)

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
        self, step: StepDef[I, O], input: I, /, **overrides: Unpack[StepOptions]
    ) -> O: ...
    @overload
    async def step(self, step: str, input: Any, /, **overrides: Unpack[StepOptions]) -> Any: ...
    async def step(
        self,
        step: StepDef[Any, Any] | str,
        input: Any,  # noqa: A002 - the design's name
        /,
        **overrides: Unpack[StepOptions],
    ) -> Any:
        """
        Dispatch a step to a worker and suspend the run until its result lands.

        The first call writes a ``pending`` checkpoint and a task in one transaction and suspends
        (nothing is held in memory). On replay: a completed step returns its output; a failed
        attempt is retried durably per the effective policy (the definition's, with every given
        override winning): ``wake_at = now + delay(attempt)`` is stamped once, the run suspends,
        and once due the same ``step_id`` is dispatched again with ``attempt + 1``.

        With ``timeout_ms`` the step takes the liveness path instead: each attempt is awaited in
        memory, in this turn, and silence past the window re-dispatches it at once (see
        ``RemoteStepTimeout``).

        Args:
            step: A ``StepDef``, or a step's name (served by whichever worker has a handler).
            input: The step's input (JSON, or what the definition's codec takes).
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
            TypeError: If *input* cannot be stored (nothing is written), or an option is bad.
            ValueError: If an option is out of range, or names a queue the engine lacks.
            NonDeterminismError: If the run recorded a different step at this position.
        """
        name, definition = self._resolve(step, "ctx.step")
        seq, recorded = self._next(name, "remote")
        policy = self._policy(name, definition, overrides)
        member = self._member(
            seq, name=name, definition=definition, policy=policy, recorded=recorded, value=input
        )
        if policy.timeout_ms is not None and not (
            recorded is not None and (recorded.status == "completed" or recorded.final)
        ):
            return await liveness(self._turn, member)
        if await settle_members(self._turn, (member,)):
            raise self._suspend()
        if member.error is not None:
            raise member.error
        return member.output

    @overload
    async def all(
        self, step: StepDef[I, O], inputs: Iterable[I], /, **overrides: Unpack[StepOptions]
    ) -> list[O]: ...
    @overload
    async def all(
        self, step: str, inputs: Iterable[Any], /, **overrides: Unpack[StepOptions]
    ) -> list[Any]: ...
    async def all(
        self,
        step: StepDef[Any, Any] | str,
        inputs: Iterable[Any],
        /,
        **overrides: Unpack[StepOptions],
    ) -> list[Any]:
        """
        Dispatch one task per input in one transaction, suspend once, and return the outputs
        in input order (a fan).

        Each member retries durably on its own policy. When every member has settled, a member
        that failed for good raises its ``RemoteStepError`` (the first such member, in input
        order); otherwise the outputs are returned. Members take consecutive sequence numbers.

        Raises:
            ValueError: If the step has ``timeout_ms`` (a fan needs durable steps), or names a
                queue the engine lacks.
            RemoteStepError: For the first member that failed for good, once all have settled.
            TypeError: If an input cannot be stored (nothing is written).
        """
        name, definition = self._resolve(step, "ctx.all")
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
        if await settle_members(self._turn, members):
            raise self._suspend()
        for member in members:
            if member.error is not None:
                raise member.error
        return [member.output for member in members]

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
