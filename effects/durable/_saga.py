"""
How a turn's workflow ends: its body, then an error route or its compensations (a saga).

The body is replayed. If it returns, the run completes. If an error escapes it and the
workflow's ``on_error`` has a handler for the error's ``code``, the handler runs as part of the
workflow (replayed like the body) and what it returns completes the run. Otherwise the run is
about to fail: the compensations its completed steps registered run, last registered first,
and the run fails with its original error. A run being cancelled with compensation replays what
it recorded, unwinds, and ends ``cancelled``. A ``NonDeterminismError`` fails the run with no
route and no compensation. ``play`` decides; the turn runner commits what it decided.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Final, Literal

import attrs

from effects.durable._codec import dump, from_data
from effects.durable._context import WorkflowContext, stopped, suspended, unwind
from effects.durable._definitions import WorkflowDef
from effects.durable._failures import is_failure
from effects.durable._store import StaleTurnError
from effects.durable._turn import Turn
from effects.durable.errors import StepError, StoreError, WorkflowTimeout

__all__ = ["Ending", "play", "with_failed_undos"]

_SUSPENDED: Final = suspended()
_STOPPED: Final = stopped()


@attrs.frozen
class Ending:
    """
    How a turn ended its run, or that it did not (``"none"``: suspended, or a write failed).

    - ``"completed"``: *output* (the stored text), *routed* the error code an ``on_error``
      handler took, if one did.
    - ``"failed"``: *error*, and the steps whose undo failed (*compensation_failed*).
    - ``"cancelled"``: cancelled with compensation; *compensation_failed* as above.
    """

    kind: Literal["none", "completed", "failed", "cancelled"]
    output: str | None = None
    routed: str | None = None
    error: BaseException | None = None
    compensation_failed: tuple[str, ...] = ()


_NONE: Final = Ending("none")


@attrs.frozen
class _Returned:
    value: Any


@attrs.frozen
class _Raised:
    error: BaseException


_Outcome = _Returned | _Raised | None


async def _outcome(ctx: WorkflowContext, turn: Turn, running: Awaitable[Any]) -> _Outcome:
    """
    What the workflow's code did: returned, raised a failure, or ``None``: it suspended (or a
    write of the turn failed, or, in cancel mode, it stopped: ``ctx`` tells these apart).
    """
    try:
        return _Returned(await running)
    except (_SUSPENDED, _STOPPED):
        return None
    except (StaleTurnError, StoreError):
        raise
    except BaseException as error:
        if not is_failure(error, in_thread=False):
            raise  # the engine stops: the turn gives the run back
        if turn.broken is not None:
            # Whatever the workflow made of a failed write, the run is not failed by it.
            raise turn.broken from error
        if ctx.fatal is None and ctx.is_suspended:
            return None
        return _Raised(error)


def _ends_here(ctx: WorkflowContext, turn: Turn) -> Ending | None:
    """The ending a turn has whatever the code did: nothing (suspended), or non-determinism."""
    if turn.broken is not None:
        return _NONE  # the workflow swallowed a failed write: finish nothing
    if ctx.fatal is not None:
        return Ending("failed", error=ctx.fatal)
    if ctx.is_suspended:
        return _NONE
    return None


async def play(definition: WorkflowDef[Any, Any], ctx: WorkflowContext, turn: Turn) -> Ending:
    """Replay the run's workflow, route or compensate as it ends, and say how it ended."""
    run = turn.run
    body = await _outcome(ctx, turn, definition.fn(ctx, from_data(definition.codec, run.input)))
    early = _ends_here(ctx, turn)
    if early is not None:
        return early
    if ctx.timing_out:
        # Past its deadline: whatever the body did, it fails with workflow_timeout once what
        # its steps registered is undone.
        limit = (run.deadline or run.created_at) - run.created_at
        timed_out = WorkflowTimeout(run.run_id, limit, run.deadline or run.created_at)
        return await _unwound(ctx, turn, timed_out)
    if ctx.cancelling:
        # Whatever the body did (stopped at its first unsettled step, returned or raised),
        # the cancel wins: what its steps registered is undone.
        return await _unwound(ctx, turn, None)
    if body is None:
        return _NONE  # stopped outside cancel mode cannot happen; suspended is told above
    error: BaseException
    if isinstance(body, _Returned):
        try:
            return Ending("completed", dump(definition.codec, body.value, _what(definition)))
        except TypeError as unstorable:
            error = unstorable  # not raised by the body: not routed
    else:
        error = body.error
        routed = await _route(definition, ctx, turn, error)
        if routed is not None:
            if not isinstance(routed, BaseException):
                return routed
            error = routed
    return await _unwound(ctx, turn, error)


def _what(definition: WorkflowDef[Any, Any]) -> str:
    return f"output of workflow {definition.name!r}"


async def _route(
    definition: WorkflowDef[Any, Any], ctx: WorkflowContext, turn: Turn, error: BaseException
) -> Ending | BaseException | None:
    """
    Run the ``on_error`` handler of *error*'s code, if the workflow has one: its ending, or the
    error it raised (the run then fails with that); ``None`` when no route takes *error*.
    """
    step_error = StepError.from_exception(error)
    code = step_error.code
    handler = None if code is None else definition.on_error.get(code)
    if handler is None:
        return None
    value = from_data(definition.codec, turn.run.input)
    handled = await _outcome(ctx, turn, handler(ctx, value, step_error))
    early = _ends_here(ctx, turn)
    if early is not None:
        return early
    if handled is None:
        return _NONE
    if isinstance(handled, _Raised):
        return handled.error
    try:
        text = dump(definition.codec, handled.value, _what(definition))
    except TypeError as unstorable:
        return unstorable
    return Ending("completed", text, routed=code)


async def _unwound(ctx: WorkflowContext, turn: Turn, error: BaseException | None) -> Ending:
    """
    Run the compensations, then end the run: failed with *error*, or (``None``) cancelled.
    Suspends while a dispatched undo is out; an error of the unwinding itself (never an
    undo's: those are recorded) fails the run with it.
    """
    unwinding = await _outcome(ctx, turn, unwind(ctx))
    early = _ends_here(ctx, turn)
    if early is not None:
        return early
    if unwinding is None:
        return _NONE
    if isinstance(unwinding, _Raised):
        return Ending("failed", error=unwinding.error)
    failed = tuple(unwinding.value)
    if error is None:
        return Ending("cancelled", compensation_failed=failed)
    return Ending("failed", error=error, compensation_failed=failed)


def with_failed_undos(error: StepError, failed: tuple[str, ...]) -> StepError:
    """
    *error* with ``details["compensation_failed"]`` listing *failed* (when there are any),
    merged into its details when they are an object or ``None``, else beside them under
    ``details["details"]``.
    """
    if not failed:
        return error
    listed = list(failed)
    details = error.details
    if details is None:
        merged: dict[str, Any] = {"compensation_failed": listed}
    elif isinstance(details, dict):
        merged = {**details, "compensation_failed": listed}
    else:
        merged = {"details": details, "compensation_failed": listed}
    return attrs.evolve(error, details=merged)
