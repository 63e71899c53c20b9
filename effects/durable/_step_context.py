"""``StepContext``: what a running attempt of a step (dispatched or local) knows about itself."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from effects.durable._codec import JSON, dump

__all__ = ["StepContext", "current_step", "step_context"]


class StepContext:
    """
    The running attempt of a step, as ``current_step()`` returns it: in a dispatched step's
    handler, and in the function of a local step (``ctx.local_step``), so the side effects of
    either can be keyed by ``step_id`` (and ``attempt``).

    Attributes:
        step_id: ``"{run_id}:{seq}"``, the idempotency key (the same on every attempt: use it to
            make the handler's side effects idempotent).
        run_id: The run.
        seq: The step's position in the workflow.
        name: The step's name.
        attempt: 1-based attempt number (a local step's attempts count from 1 again in a turn
            that replays it after a crash: only its outcome is recorded).
        redispatched: Whether this attempt re-drives a dispatch that looked lost (``False`` for a
            local step).
        last_progress: The last progress an earlier attempt reported, or ``None`` (always for a
            local step).
    """

    __slots__ = (
        "_beat",
        "attempt",
        "last_progress",
        "name",
        "progress",
        "redispatched",
        "run_id",
        "seq",
        "step_id",
    )

    def __init__(
        self,
        *,
        step_id: str,
        run_id: str,
        seq: int,
        name: str,
        attempt: int,
        redispatched: bool = False,
        last_progress: Any = None,
        beat: Callable[[Any], None] | None = None,
    ) -> None:
        self.step_id = step_id
        self.run_id = run_id
        self.seq = seq
        self.name = name
        self.attempt = attempt
        self.redispatched = redispatched
        self.last_progress = last_progress
        #: The progress of this attempt's latest heartbeat, or ``None``.
        self.progress: Any = None
        self._beat = beat

    def heartbeat(self, progress: Any = None) -> None:
        """
        Tell the engine this attempt is alive, optionally with JSON *progress*.

        Re-arms a ``timeout_ms`` window; the progress is persisted (throttled) and shown by
        ``show RUN``, and the next attempt reads it as ``last_progress``. In a local step it
        only checks *progress* and keeps it as ``progress`` (the turn holds the run's lease
        anyway).

        Raises:
            TypeError: If *progress* is not JSON.
        """
        if progress is not None:
            dump(JSON, progress, f"heartbeat progress of step {self.name!r}")
            self.progress = progress
        if self._beat is not None:
            self._beat(progress)

    def __repr__(self) -> str:
        return f"<StepContext {self.name!r} {self.step_id} attempt {self.attempt}>"


_current: ContextVar[StepContext] = ContextVar("effects.durable.step")
step_context = _current


def current_step() -> StepContext:
    """
    The ``StepContext`` of the step attempt running in this task or thread: a dispatched
    step's handler, or a local step's function.

    Raises:
        LookupError: Outside a step (in a workflow's own code, say).
    """
    try:
        return _current.get()
    except LookupError:
        msg = (
            "current_step() is only available inside a dispatched step's handler or a local"
            " step's function"
        )
        raise LookupError(msg) from None
