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
    │   ├── ChildWorkflowError           a child workflow (ctx.child) ended failed, cancelled
    │   │                                or dead (.run_id, .step_error, .code)
    │   ├── RunCancelled                 the run of a running attempt was cancelled (raised by
    │   │                                heartbeat() once the engine knows)
    │   ├── WorkflowTimeout              a run passed its whole-run deadline (its error's type)
    │   ├── StoreError                   the store cannot be used (corrupt, foreign, newer schema)
    │   └── WorkerLost, RemoteStepLost,  the engine's own failures, as a StepError's type names
    │       NoHandler, RunDead           them (recorded, never raised by the engine)
    ├── TypeError                        misuse: a value that is not JSON, a bad option type
    └── ValueError                       misuse: an option out of range, an unknown name
        └── UnknownRunError              no run has that id (also a LookupError)

``StepError`` is not an exception: it is the frozen value a failure is recorded as (on a failed
checkpoint, on a failed run, and in ``RemoteStepError.errors``). Misuse errors subclass the builtin
they mean, so ``except DurableError`` never hides a bug.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from effects.durable import _names
from effects.durable._codec import deeper_than

__all__ = [
    "ChildWorkflowError",
    "DurableError",
    "NoHandler",
    "NonDeterminismError",
    "RemoteStepError",
    "RemoteStepLost",
    "RemoteStepTimeout",
    "RunCancelled",
    "RunDead",
    "StepError",
    "StepFailedError",
    "StoreError",
    "UnknownRunError",
    "WorkerLost",
    "WorkflowTimeout",
    "remote_error",
    "restore_exception",
]


@attrs.frozen
class StepError:
    """
    A failure as the engine records it: on a checkpoint, a run, or a ``RemoteStepError``.

    Built from an exception as ``message = str(e)``, ``type`` = the qualified name of its class,
    ``code`` and ``details`` from attributes of those names when present, ``retryable`` from its
    ``retryable`` attribute (default ``True``; ``effects.FatalError`` is ``False``),
    ``retry_after`` (seconds) from a ``retry_after`` attribute, as ``effects.http`` errors have,
    and ``args`` from the exception's arguments when they are JSON and not just its message (so
    replay can build the exception again without ``pickle``: see ``restore_exception``).

    Attributes:
        message: What went wrong, for people.
        code: A machine-readable code, or ``None``.
        details: JSON data about the failure, or ``None``.
        type: The qualified name of the exception's class (``"builtins.ValueError"``).
        retryable: ``False`` when the failure is a deterministic verdict that must not be retried.
        retry_after: The least wait in seconds the failure asked for before a retry, or ``None``.
        args: The exception's constructor arguments (JSON), when they are not ``(message,)``;
            else ``None``.

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
    args: tuple[Any, ...] | None = attrs.field(default=None, repr=False)

    @classmethod
    def from_exception(cls, error: BaseException) -> StepError:
        """
        Record *error*; never raises, whatever its ``__str__`` or attributes do.

        A ``details`` value that is not JSON (or nested deeper than ``MAX_DEPTH``) is kept as
        its ``repr`` (a string); a ``code`` that is not a string is converted with ``str``.
        """
        message = _safe_str(error)
        return cls(
            message=message,
            code=_safe_code(error),
            details=_safe_details(error),
            type=_qualified_name(type(error)),
            retryable=_safe_retryable(error),
            retry_after=_safe_retry_after(error),
            args=_safe_args(error, message),
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
        if self.args is not None:
            data["args"] = list(self.args)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepError:
        """Read the form ``to_json`` wrote (unknown keys are ignored)."""
        retry_after = data.get("retry_after")
        args: Any = data.get("args")
        return cls(
            message=str(data.get("message", "")),
            code=None if data.get("code") is None else str(data["code"]),
            details=data.get("details"),
            type=str(data.get("type", "builtins.Exception")),
            retryable=bool(data.get("retryable", True)),
            retry_after=None if retry_after is None else float(retry_after),
            args=tuple(args) if isinstance(args, list) else None,  # pyright: ignore[reportUnknownArgumentType]
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


_json_text: Final = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode


def _storable(value: Any) -> bool:
    """Whether *value* is JSON the store can keep (no NaN, at most ``MAX_DEPTH`` deep)."""
    try:
        return not deeper_than(_json_text(value))
    except Exception:  # noqa: BLE001 - not JSON, or too deep for the encoder itself
        return False


def _safe_details(error: BaseException) -> Any:
    details: Any = None
    try:
        details = getattr(error, "details", None)
        if details is None or _storable(details):
            return details
        raise TypeError  # kept as text, below
    except Exception:  # noqa: BLE001 - details that cannot be stored are kept as text
        try:
            return repr(details)
        except Exception:  # noqa: BLE001
            return "<unprintable details>"
    return details


def _safe_args(error: BaseException, message: str) -> tuple[Any, ...] | None:
    """The exception's arguments when replay needs them (JSON, and not just its message)."""
    try:
        args = tuple(error.args)
        if args in ((), (message,)) or not _storable(list(args)):
            return None
    except Exception:  # noqa: BLE001 - a broken args: replay builds from the message
        return None
    return args


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
    A local step failed with an exception that cannot be built again from its record.

    The engine records a failed local step's exception as a ``StepError`` (never a pickle), and
    replay builds an exception of the same class from it (see ``restore_exception``), so the
    workflow takes the same branch. Where that cannot be done (a class that is not imported, not
    an ``Exception``, or not constructible from its recorded arguments), this is raised instead,
    on the first turn as on every replay, with the original as its ``__cause__`` on the first.

    Attributes:
        step_error: The recorded failure.
        code: ``step_error.code``, so a run failed by this error keeps the code.
        retryable: ``step_error.retryable``.
    """

    def __init__(self, step_error: StepError) -> None:
        super().__init__(step_error.message)
        self.step_error = step_error
        self.code = step_error.code
        self.details = step_error.details

    @property
    def retryable(self) -> bool:
        """Whether the recorded failure was retryable (a run failed by it reports the same)."""
        return self.step_error.retryable

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
        retryable: ``step_error.retryable``: a step that failed on a ``FatalError`` fails its
            run with a non-retryable error too.
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

    @property
    def retryable(self) -> bool:
        """Whether the last attempt's error was retryable."""
        return self.step_error.retryable

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
            code=_names.TIMEOUT,
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

    code = _names.NON_DETERMINISM

    def __init__(self, seq: int, recorded: str, requested: str) -> None:
        super().__init__(
            f"replay met step {requested} at sequence {seq}, but the run recorded {recorded} there"
        )
        self.seq = seq
        self.recorded = recorded
        self.requested = requested


class ChildWorkflowError(DurableError):
    """
    A child workflow started with ``ctx.child`` ended without completing: it failed, was
    cancelled, or is dead. Raised into the parent (the same on every replay); uncaught, it fails
    the parent with the child's code.

    Attributes:
        run_id: The child's run id.
        step_error: The child's failure: its run's error when it failed; for a cancelled child
            one with code ``"cancelled"``; for a dead one with code ``"run_dead"``.
        code: ``step_error.code`` (the child's code; ``"cancelled"`` or ``"run_dead"`` for a
            child that ended so), so a parent failed by this error keeps it.
        details: ``step_error.details``.
        retryable: ``step_error.retryable``.

    Example:
        >>> error = ChildWorkflowError("order-7:2", StepError("no courier", code="undeliverable"))
        >>> error.run_id, error.code
        ('order-7:2', 'undeliverable')
        >>> str(error)
        "child workflow run 'order-7:2' did not complete: no courier"
    """

    def __init__(self, run_id: str, step_error: StepError) -> None:
        self.run_id = run_id
        self.step_error = step_error
        self.code = step_error.code
        self.details = step_error.details
        super().__init__(f"child workflow run {run_id!r} did not complete: {step_error.message}")

    @property
    def retryable(self) -> bool:
        """Whether the child's failure was retryable."""
        return self.step_error.retryable

    def __repr__(self) -> str:
        return f"ChildWorkflowError({self.run_id!r}, {self.step_error!r})"


class RunCancelled(DurableError):  # noqa: N818 - the design's name
    """
    The run of this step attempt was cancelled (``engine.cancel``): the attempt was withdrawn,
    and whatever it returns is discarded. ``current_step().heartbeat()`` raises it once the
    engine knows (its own cancel, or a renewal or beat the store refused), so a long handler
    can stop early; let it propagate.

    Attributes:
        run_id: The cancelled run.
        code: ``"cancelled"``.
        retryable: ``False``.
    """

    code = _names.CANCELLED
    retryable = False

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} was cancelled; this attempt's result will be discarded")
        self.run_id = run_id


class WorkflowTimeout(DurableError):  # noqa: N818 - the name a StepError's type gives
    """
    A run passed its whole-run deadline (``timeout=`` of ``engine.start`` or ``@workflow``): it
    failed with this as its error's type, code ``"workflow_timeout"``, after its pending
    attempts were withdrawn and its compensations ran.

    Attributes:
        run_id: The run.
        timeout_ms: The run's timeout, in ms.
        deadline: Epoch ms of its deadline (its start plus the timeout).
        code: ``"workflow_timeout"``.
        retryable: ``False``.
    """

    code = _names.WORKFLOW_TIMEOUT
    retryable = False

    def __init__(self, run_id: str, timeout_ms: int, deadline: int) -> None:
        super().__init__(
            f"run {run_id!r} passed its deadline: it did not finish within its timeout of"
            f" {timeout_ms} ms"
        )
        self.run_id = run_id
        self.timeout_ms = timeout_ms
        self.deadline = deadline
        self.details = {"timeout_ms": timeout_ms, "deadline": deadline}


class StoreError(DurableError):
    """The store cannot be used: corrupt, not an engine store, a newer schema, or unreachable."""


class WorkerLost(DurableError):  # noqa: N818 - the name a StepError's type gives
    """A worker's claim on an attempt expired before it reported (a retryable failure)."""


class RemoteStepLost(DurableError):  # noqa: N818 - the name a StepError's type gives
    """A dispatch's lease lapsed without a result or a heartbeat (re-driven, or given up)."""


class NoHandler(DurableError):  # noqa: N818 - the name a StepError's type gives
    """No worker of the step's group has a handler of its name (not retryable)."""


class RunDead(DurableError):  # noqa: N818 - the name a StepError's type gives
    """A run's lease expired more than ``max_recovery_attempts`` times."""


class UnknownRunError(ValueError, LookupError):
    """No run has the given id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id!r}")
        self.run_id = run_id


def _exception_class(qualified: str) -> type[Exception] | None:
    """
    The exception class *qualified* names (as ``StepError.type`` writes it), looked up among the
    modules this process has imported already; ``None`` if there is none. Nothing is imported,
    so a name in the store can never make a process load code.
    """
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        found: Any = module
        for name in parts[cut:]:
            found = getattr(found, name, None)
            if found is None:
                break
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return None


def restore_exception(error: StepError) -> Exception:
    """
    The exception a failed local step raises into its workflow, rebuilt from its record alone
    (never from a pickle): an instance of the recorded class, made from its recorded arguments
    (or its message) and given back its ``code`` and ``details``, when that class is one the
    process has imported, derives from ``Exception`` and can be made that way; otherwise a
    ``StepFailedError`` carrying *error*. The first turn raises what every replay will.
    """
    cls = _exception_class(error.type)
    if cls is not None and not issubclass(cls, DurableError):
        for args in (error.args, (error.message,)):
            if args is None:
                continue
            try:
                rebuilt = cls(*args)
            except Exception:  # noqa: BLE001, S112 - this way of making it does not work
                continue
            if type(rebuilt) is not cls:
                continue
            for name, value in (("code", error.code), ("details", error.details)):
                if value is not None and getattr(rebuilt, name, None) != value:
                    try:
                        setattr(rebuilt, name, value)
                    except Exception:  # noqa: BLE001 - kept as the class made it
                        _ = name
            return rebuilt
    return StepFailedError(error)


def remote_error(step_id: str, name: str, errors: Sequence[StepError]) -> RemoteStepError:
    """
    The error a dispatched step that failed for good raises, the same on every replay: a
    ``RemoteStepTimeout`` when its last attempt timed out, else a ``RemoteStepError``.
    """
    last = errors[-1] if errors else None
    found: Any = None if last is None or last.code != _names.TIMEOUT else last.details
    if isinstance(found, Mapping):
        details: Mapping[str, Any] = found  # pyright: ignore[reportUnknownVariableType]
        window, phase = details.get("timeout_ms"), details.get("phase")
        if isinstance(window, int) and phase in ("pickup", "running"):
            return RemoteStepTimeout(
                step_id, window, "pickup" if phase == "pickup" else "running", name=name,
                errors=errors[:-1],
            )  # fmt: skip
    return RemoteStepError(step_id, name, errors)
