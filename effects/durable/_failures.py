"""
Failures: which exceptions user code raises are its failures (and which are the engine
stopping), and the failures the engine records of its own (a lost worker, a lost dispatch, ...).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from effects.durable._names import (
    CANCELLED,
    MAX_RECOVERY,
    NO_HANDLER,
    REDISPATCHED,
    RUN_DEAD,
    STEP_LOST,
    WORKER_LOST,
    WORKFLOW_TIMEOUT,
)
from effects.durable.errors import (
    DurableError,
    NoHandler,
    RemoteStepLost,
    RunCancelled,
    RunDead,
    StepError,
    WorkflowTimeout,
)
from effects.durable.errors import WorkerLost as _WorkerLost

__all__ = [
    "cancelled_attempt",
    "cancelled_run",
    "child_failure",
    "dead_run",
    "in_thread",
    "is_failure",
    "lapsed_dispatch",
    "lost_dispatch",
    "lost_worker",
    "no_handler",
    "thrown",
    "timed_out_attempt",
]


class _Raised:
    """What a ``def`` raised in its thread, carried out as a value (see ``in_thread``)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _boxed(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except BaseException as error:  # noqa: BLE001 - told apart by the caller
        return _Raised(error)


async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """
    ``fn(*args)`` in a worker thread. What it raises there is raised here as it was, while a
    ``KeyboardInterrupt`` or cancellation that reaches this task instead propagates untouched,
    so ``is_failure(..., in_thread=True)`` is only ever asked of what the thread raised.
    """
    result = await asyncio.to_thread(_boxed, fn, *args)
    if type(result) is not _Raised:
        return result
    if isinstance(result.error, Exception):
        raise result.error
    raise _FromThread from result.error


class _FromThread(Exception):  # noqa: N818 - a carrier, never seen by users
    """Raised by ``in_thread`` with a ``BaseException`` the thread raised as its cause."""


def thrown(error: BaseException) -> tuple[BaseException, bool]:
    """*error* as its code raised it, and whether that was in a worker thread (``in_thread``)."""
    if type(error) is _FromThread and error.__cause__ is not None:
        return error.__cause__, True
    return error, False


def is_failure(error: BaseException, *, in_thread: bool) -> bool:
    """
    Whether *error*, raised out of a workflow, a local step or a handler, is a failure of that
    code (recorded, and counted against its attempts) rather than the engine being stopped.

    Every ``Exception`` is. An ``asyncio.CancelledError`` is unless the engine's own task is
    being cancelled (``Task.cancelling()``): code that raises one itself, or lets one out of a
    task it awaited, has failed, and must not make the engine give the run back to be re-run at
    once, forever. ``SystemExit`` and ``KeyboardInterrupt`` are when they come from a ``def``
    run in a worker thread (*in_thread*): a signal never lands there, so it is that code's own
    ``sys.exit()`` or ``raise``, and it must not end the worker process.
    """
    if isinstance(error, Exception):
        return True
    if isinstance(error, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is not None and task.cancelling() == 0
    return in_thread and isinstance(error, KeyboardInterrupt | SystemExit)


def _type(cls: type[DurableError]) -> str:
    # The name users import it by (effects.durable re-exports every one).
    return f"effects.durable.{cls.__name__}"


def lost_worker() -> StepError:
    """The failure recovery records for an attempt whose claim expired."""
    return StepError(
        message="worker lost: its claim on the task expired before it reported a result",
        code=WORKER_LOST,
        type=_type(_WorkerLost),
        retryable=True,
    )


def lost_dispatch(lease_ms: int | None, redispatches: int) -> StepError:
    """The failure that settles a dispatch lost past ``remote_redispatch_max`` re-drives."""
    return StepError(
        message=f"no result or heartbeat within {lease_ms} ms, {redispatches} re-dispatches spent",
        code=STEP_LOST,
        details={"lease_ms": lease_ms, "redispatches": redispatches},
        type=_type(RemoteStepLost),
        retryable=False,
    )


def lapsed_dispatch(lease_ms: int | None) -> StepError:
    """What hooks are told of a dispatch whose lease lapsed and that is sent again."""
    return StepError(
        message=f"no result or heartbeat within {lease_ms} ms; dispatched again",
        code=REDISPATCHED,
        type=_type(RemoteStepLost),
    )


def no_handler(name: str) -> StepError:
    """The non-retryable failure a worker reports for a step it has no handler of."""
    return StepError(
        message=f"no handler for {name}", code=NO_HANDLER, type=_type(NoHandler), retryable=False
    )


def dead_run(count: int, limit: int | None) -> StepError:
    """The error of a run made dead after *count* recoveries."""
    return StepError(
        message=f"the run's lease expired after {count} recoveries (max_recovery_attempts={limit})",
        code=MAX_RECOVERY,
        type=_type(RunDead),
        retryable=False,
    )


def cancelled_attempt() -> StepError:
    """
    The failure a cancel records on a dispatched step it stopped waiting for (its attempts
    withdrawn): a ``requeue`` of the cancelled run resets it to a fresh first attempt.
    """
    return StepError(
        message="cancelled: the run was cancelled while this step was awaited",
        code=CANCELLED,
        type=_type(RunCancelled),
        retryable=False,
    )


def cancelled_run(compensation_failed: list[str]) -> StepError:
    """The error of a run cancelled with compensation whose undos of these steps failed."""
    return StepError(
        message="cancelled",
        code=CANCELLED,
        details={"compensation_failed": list(compensation_failed)},
        type=_type(RunCancelled),
        retryable=False,
    )


def timed_out_attempt() -> StepError:
    """
    The failure a run's whole-run timeout records on each dispatched step it stops waiting
    for (its attempts withdrawn; not final: a requeue gives the step a fresh first attempt).
    """
    return StepError(
        message="withdrawn: the run passed its deadline (workflow timeout)",
        code=WORKFLOW_TIMEOUT,
        type=_type(WorkflowTimeout),
        retryable=False,
    )


def child_failure(status: str, error: StepError | None) -> StepError:
    """
    The ``step_error`` of the ``ChildWorkflowError`` a child run that ended with *status* and
    *error* raises into its parent: a failed child's own error; for a cancelled child code
    ``cancelled`` (its error, if undos failed); for a dead child code ``run_dead``.
    """
    if status == "cancelled":
        return error or StepError(
            message="cancelled", code=CANCELLED, type=_type(RunCancelled), retryable=False
        )
    if status == "dead":
        message = "the run is dead" if error is None else error.message
        details = None if error is None else error.details
        return StepError(
            message=message, code=RUN_DEAD, details=details, type=_type(RunDead), retryable=False
        )
    return error or StepError("the run failed")
