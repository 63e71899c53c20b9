"""
Errors of ``effects.durable``, in one tree.

::

    Exception
    ├── DurableError                     operational: what a workflow or a caller handles
    │   ├── StepFailedError              a local step failed and its exception could not be
    │   │                                restored on replay (carries the recorded StepError)
    │   ├── RemoteStepError              a dispatched step failed for good: not retryable, or
    │   │   │                            its attempts are spent (.step_error, .errors)
    │   │   └── RemoteStepTimeout        a dispatched step with timeout_ms went silent
    │   ├── NonDeterminismError          replay met a different step at a sequence number
    │   └── StoreError                   the store cannot be used (corrupt, foreign, newer schema)
    ├── TypeError                        misuse: a value that is not JSON, a bad option type
    └── ValueError                       misuse: an option out of range, an unknown name
        └── UnknownRunError              no run has that id (also a LookupError)

``StepError`` is not an exception: it is the frozen value a failure is recorded as (on a failed
checkpoint, on a failed run, and in ``RemoteStepError.errors``). Misuse errors subclass the builtin
they mean, so ``except DurableError`` never hides a bug.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

__all__ = [
    "DurableError",
    "NonDeterminismError",
    "RemoteStepError",
    "RemoteStepTimeout",
    "StepError",
    "StepFailedError",
    "StoreError",
    "UnknownRunError",
]


@attrs.frozen
class StepError:
    """
    A failure as the engine records it: on a checkpoint, a run, or a ``RemoteStepError``.

    Built from an exception as ``message = str(e)``, ``type`` = the qualified name of its class,
    ``code`` and ``details`` from attributes of those names when present, ``retryable`` from its
    ``retryable`` attribute (default ``True``; ``effects.FatalError`` is ``False``), and
    ``retry_after`` (seconds) from a ``retry_after`` attribute, as ``effects.http`` errors have.

    Attributes:
        message: What went wrong, for people.
        code: A machine-readable code, or ``None``.
        details: JSON data about the failure, or ``None``.
        type: The qualified name of the exception's class (``"builtins.ValueError"``).
        retryable: ``False`` when the failure is a deterministic verdict that must not be retried.
        retry_after: The least wait in seconds the failure asked for before a retry, or ``None``.

    Example:
        >>> from effects import FatalError
        >>> error = StepError.from_exception(FatalError("card declined", "declined"))
        >>> error.message, error.code, error.type, error.retryable
        ('card declined', 'declined', 'effects.errors.FatalError', False)
    """

    message: str
    code: str | None = None
    details: Any = None
    type: str = "builtins.Exception"
    retryable: bool = True
    retry_after: float | None = None

    @classmethod
    def from_exception(cls, error: BaseException) -> StepError:
        """
        Record *error*; never raises, whatever its ``__str__`` or attributes do.

        A ``details`` value that is not JSON is kept as its ``repr`` (a string); a ``code`` that
        is not a string is converted with ``str``.
        """
        return cls(
            message=_safe_str(error),
            code=_safe_code(error),
            details=_safe_details(error),
            type=_qualified_name(type(error)),
            retryable=_safe_retryable(error),
            retry_after=_safe_retry_after(error),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form stored by the engine."""
        data: dict[str, Any] = {
            "message": self.message,
            "code": self.code,
            "details": self.details,
            "type": self.type,
            "retryable": self.retryable,
        }
        if self.retry_after is not None:
            data["retry_after"] = self.retry_after
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepError:
        """Read the form ``to_json`` wrote (unknown keys are ignored)."""
        retry_after = data.get("retry_after")
        return cls(
            message=str(data.get("message", "")),
            code=None if data.get("code") is None else str(data["code"]),
            details=data.get("details"),
            type=str(data.get("type", "builtins.Exception")),
            retryable=bool(data.get("retryable", True)),
            retry_after=None if retry_after is None else float(retry_after),
        )


def _qualified_name(cls: type[BaseException]) -> str:
    module = getattr(cls, "__module__", None) or "builtins"
    # Public names, as users import them: effects._x.FatalError is effects.FatalError.
    parts = [part for part in str(module).split(".") if not part.startswith("_")] or ["builtins"]
    return f"{'.'.join(parts)}.{getattr(cls, '__qualname__', cls.__name__)}"


def _safe_str(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the failure
        return f"<unprintable {type(error).__name__}>"


def _safe_code(error: BaseException) -> str | None:
    try:
        code = getattr(error, "code", None)
        return None if code is None else str(code)
    except Exception:  # noqa: BLE001 - as above
        return None


def _safe_details(error: BaseException) -> Any:
    import json  # noqa: PLC0415 - only failures pay for it

    details: Any = None
    try:
        details = getattr(error, "details", None)
        if details is None:
            return None
        json.dumps(details, allow_nan=False)
    except Exception:  # noqa: BLE001 - details that cannot be stored are kept as text
        try:
            return repr(details)
        except Exception:  # noqa: BLE001
            return "<unprintable details>"
    return details


def _safe_retryable(error: BaseException) -> bool:
    try:
        return getattr(error, "retryable", True) is not False
    except Exception:  # noqa: BLE001 - a raising property: keep the safe default
        return True


def _safe_retry_after(error: BaseException) -> float | None:
    try:
        value = getattr(error, "retry_after", None)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        seconds = float(value)
    except Exception:  # noqa: BLE001
        return None
    return seconds if 0.0 <= seconds < math.inf else None


class DurableError(Exception):
    """Base of the operational errors of ``effects.durable``."""


class StepFailedError(DurableError):
    """
    A local step failed, and its original exception cannot be raised again on replay.

    The engine records a failed local step's exception (as a ``StepError`` and a pickle); replay
    raises the unpickled exception so the workflow takes the same branch. Where the exception
    cannot be pickled or unpickled, this is raised instead.

    Attributes:
        step_error: The recorded failure.
        code: ``step_error.code``, so a run failed by this error keeps the code.
    """

    def __init__(self, step_error: StepError) -> None:
        super().__init__(step_error.message)
        self.step_error = step_error
        self.code = step_error.code

    def __repr__(self) -> str:
        return f"StepFailedError({self.step_error!r})"


class RemoteStepError(DurableError):
    """
    A dispatched step failed for good: its error was not retryable, or its attempts are spent.

    Attributes:
        step_id: The step's idempotency key, ``"{run_id}:{seq}"``.
        name: The step's name.
        step_error: The last attempt's error (``message``, ``code``, ``details``).
        errors: Every attempt's error, oldest first.
        code: ``step_error.code``, so a run failed by this error keeps the code.
        details: ``step_error.details``.
    """

    def __init__(self, step_id: str, name: str, errors: Sequence[StepError]) -> None:
        if not errors:
            msg = "RemoteStepError needs at least one StepError"
            raise ValueError(msg)
        self.step_id = step_id
        self.name = name
        self.errors: tuple[StepError, ...] = tuple(errors)
        self.step_error = self.errors[-1]
        self.code = self.step_error.code
        self.details = self.step_error.details
        attempts = len(self.errors)
        super().__init__(
            f"step {name!r} ({step_id}) failed after {attempts} "
            f"attempt{'s' if attempts != 1 else ''}: {self.step_error.message}"
        )

    def __repr__(self) -> str:
        return f"RemoteStepError({self.step_id!r}, {self.name!r}, errors={len(self.errors)})"


class RemoteStepTimeout(RemoteStepError):  # noqa: N818 - the design's name
    """
    A dispatched step with ``timeout_ms`` produced neither a result nor a heartbeat in time.

    Retryable: each expiry re-dispatches the step, back to back, up to its ``retries``; the last
    one's timeout is raised into the workflow.

    Attributes:
        timeout_ms: The window that expired, in ms (the pickup window in the pickup phase).
        phase: ``"pickup"`` (no worker claimed the task) or ``"running"`` (the worker went silent).
    """

    retryable = True

    def __init__(
        self,
        step_id: str,
        timeout_ms: int,
        phase: Literal["pickup", "running"] = "running",
        *,
        name: str = "",
        errors: Sequence[StepError] = (),
    ) -> None:
        self.timeout_ms = timeout_ms
        self.phase = phase
        own = StepError(
            message=f"no result or heartbeat within {timeout_ms} ms ({phase})",
            code="remote_step_timeout",
            details={"timeout_ms": timeout_ms, "phase": phase},
            type="effects.durable.RemoteStepTimeout",
        )
        super().__init__(step_id, name or step_id, (*errors, own) if errors else (own,))

    def __repr__(self) -> str:
        return f"RemoteStepTimeout({self.step_id!r}, {self.timeout_ms!r}, phase={self.phase!r})"


class NonDeterminismError(DurableError):
    """
    Replay met a different step than the one recorded at a sequence number.

    The workflow's code changed under a running run (or it branches on something that is not
    recorded, such as the time or a random number). The run fails with this error; catching it in
    the workflow does not help.

    Attributes:
        seq: The sequence number.
        recorded: ``"name (kind)"`` of the checkpoint on record.
        requested: ``"name (kind)"`` of the step the code asked for.
    """

    code = "non_determinism"

    def __init__(self, seq: int, recorded: str, requested: str) -> None:
        super().__init__(
            f"replay met step {requested} at sequence {seq}, but the run recorded {recorded} there"
        )
        self.seq = seq
        self.recorded = recorded
        self.requested = requested


class StoreError(DurableError):
    """The store cannot be used: corrupt, not an engine store, a newer schema, or unreachable."""


class UnknownRunError(ValueError, LookupError):
    """No run has the given id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id
