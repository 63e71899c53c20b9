"""Workflow and step definitions: frozen values made by ``@workflow`` and ``@step``."""

from __future__ import annotations

import inspect
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

import attrs
from typing_extensions import Unpack

from effects import is_async_callable
from effects.durable._bounds import timeout_ms
from effects.durable._codec import JSON, Codec
from effects.durable._policy import StepOptions, StepPolicy, policy_from_options
from schedules import DurationLike

if TYPE_CHECKING:
    from effects.durable._context import WorkflowContext
    from effects.durable.errors import StepError

__all__ = ["StepDef", "WorkflowDef", "check_name", "step", "workflow"]

I = TypeVar("I")  # noqa: E741 - the design's name for an input type
O = TypeVar("O")  # noqa: E741

#: An error route's handler: ``async def handler(ctx, input, error: StepError) -> output``.
ErrorHandler = Callable[["WorkflowContext", Any, "StepError"], Awaitable[Any]]
_NO_ROUTES: Mapping[str, ErrorHandler] = types.MappingProxyType({})


def check_name(value: object, what: str) -> str:
    """
    Return *value* if it is a name both stores keep as it is: a non-empty string without
    surrounding whitespace, U+0000 or lone surrogates (other control characters are kept, and
    escaped wherever they are shown).

    Names and ids are refused at the boundary (``ValueError``, before anything is written);
    payloads (inputs, outputs, errors, progress) instead round-trip whatever they hold.
    """
    if not isinstance(value, str):
        msg = f"{what} must be a string, got {value!r}"
        raise TypeError(msg)
    if not value or value.strip() != value:
        msg = f"{what} must be a non-empty name without surrounding spaces, got {value!r}"
        raise ValueError(msg)
    if "\x00" in value:
        msg = f"{what} must not hold U+0000 (PostgreSQL text cannot), got {value!r}"
        raise ValueError(msg)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        msg = f"{what} must be valid Unicode text (no lone surrogates), got {value!r}"
        raise ValueError(msg) from None
    return value


@attrs.frozen(repr=False)
class WorkflowDef(Generic[I, O]):
    """
    A workflow: an ``async def`` of a ``WorkflowContext`` and an input, replayed from its start on
    every resume. Made by ``@workflow(name)``; pass it to an ``Engine``.

    Attributes:
        name: The workflow's name, unique within an engine.
        version: The code's version; a run is resumed only by an engine with the same version.
        fn: The function.
        codec: How the input and output are stored (JSON by default).
        requeue: Whether ``engine.requeue`` (the CLI's ``retry``) may run a finished run of
            it again: ``True``; ``False`` refuses; a string refuses too and is what the
            refusal says to do instead.
        on_error: The error routes: for an error ``code``, the handler that turns an error of
            that code escaping the body into the run's output (read-only).
        timeout_ms: The whole-run timeout of its runs in ms (``engine.start``'s ``timeout=``
            wins), or ``None``: no limit.
    """

    name: str
    version: str
    fn: Callable[[WorkflowContext, I], Awaitable[O]]
    codec: Codec = JSON
    requeue: bool | str = True
    on_error: Mapping[str, ErrorHandler] = attrs.field(default=_NO_ROUTES, hash=False)
    timeout_ms: int | None = None

    def __repr__(self) -> str:
        return f"<workflow {self.name!r} version {self.version!r}>"


@attrs.frozen(repr=False)
class StepDef(Generic[I, O]):
    """
    A dispatched step: a handler of one input that a worker runs, with its declared policy.
    Made by ``@step(name, **policy)``; call it in a workflow with ``await ctx.step(def, input)``.

    Attributes:
        name: The step's name (what a worker's handler answers to), unique within an engine.
        fn: The handler (``async def`` or ``def``; a ``def`` runs in a worker thread).
        policy: The declared options (see ``StepOptions``).
        group: Which workers claim its tasks (default ``"default"``).
        codec: How its input and output are stored (JSON by default).
    """

    name: str
    fn: Callable[[I], Awaitable[O]] | Callable[[I], O]
    policy: StepPolicy
    group: str = "default"
    codec: Codec = JSON

    def __repr__(self) -> str:
        return f"<step {self.name!r} group {self.group!r}>"


def _refuse_generators(fn: object, what: str) -> None:
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        msg = f"{what} must return its result, not yield: {fn!r} is a generator function"
        raise TypeError(msg)


def workflow(
    name: str,
    *,
    version: str = "1",
    codec: Codec | None = None,
    requeue: bool | str = True,
    on_error: Mapping[str, ErrorHandler] | None = None,
    timeout: DurationLike | None = None,
) -> Callable[[Callable[[WorkflowContext, I], Awaitable[O]]], WorkflowDef[I, O]]:
    """
    Declare an ``async def`` function of ``(ctx, input)`` as a workflow.

    Args:
        name: The workflow's name, unique within an engine.
        version: The code's version (default ``"1"``); runs are resumed only by an engine that
            has this version, so change it when a change would break replay of running runs.
        codec: How the input and output are stored; default strict JSON.
        requeue: ``True`` (default): ``engine.requeue`` may run a failed, dead or cancelled
            run again. ``False``: it refuses (a run whose steps cannot safely run again, such as
            one that must start over as a new run). A string refuses too, and is what the
            refusal tells the user to do instead (one line).
        on_error: Error routes, ``{code: handler}``: when an error whose ``code`` is a key
            escapes the body (a ``FatalError``, a ``RemoteStepError`` whose worker's error has
            that code, a step's spent attempts), ``await handler(ctx, input, error)`` runs as
            part of the workflow (its steps replayed like the body's; ``error`` is the
            escaped error's ``StepError``), and what it returns completes the run (events
            ``run.error_routed``, ``run.completed``); no compensation runs. A handler that
            raises fails the run with its error (its compensations then run). An error of no
            code, an error a handler raises, and a ``NonDeterminismError`` are never routed.
        timeout: The whole-run timeout of its runs (seconds, a ``timedelta`` or a string like
            ``"1h"``; ``None``, the default: no limit); ``engine.start(..., timeout=)`` wins.
            At ``created_at + timeout`` an unfinished run fails with code
            ``"workflow_timeout"``: its pending attempts are withdrawn, its compensations run.

    Raises:
        TypeError: If the function is not ``async def``, a name is not a string,
            *requeue* is neither a bool nor a string, or *on_error* is not a mapping of
            codes to ``async def`` handlers.
        ValueError: If *name* or *version* is empty, *requeue* is an empty or multi-line
            string, a code of *on_error* is empty, or *timeout* is not a duration of at least
            1 ms.

    Example:
        >>> @workflow("greet")
        ... async def greet(ctx, name: str) -> str:
        ...     return f"hello {name}"
        >>> greet
        <workflow 'greet' version '1'>
    """
    check_name(name, "workflow name")
    check_name(version, f"version of workflow {name!r}")
    _check_requeue(requeue, name)
    routes = _routes(on_error, name)
    limit = timeout_ms(timeout, f"timeout of workflow {name!r}")

    def define(fn: Callable[[WorkflowContext, I], Awaitable[O]]) -> WorkflowDef[I, O]:
        _refuse_generators(fn, f"workflow {name!r}")
        if not is_async_callable(fn):
            msg = f"workflow {name!r} must be an async def function, got {fn!r}"
            raise TypeError(msg)
        return WorkflowDef(
            name, version, fn, JSON if codec is None else codec, requeue, routes, limit
        )

    return define


def _routes(on_error: object, name: str) -> Mapping[str, ErrorHandler]:
    """The checked error routes of workflow *name*, as a read-only copy."""
    if on_error is None:
        return _NO_ROUTES
    if not isinstance(on_error, Mapping):
        msg = (
            f"on_error of workflow {name!r} must be a mapping of error codes to async def"
            f" handlers, got {on_error!r}"
        )
        raise TypeError(msg)
    routes: dict[str, ErrorHandler] = {}
    given: Mapping[object, object] = on_error  # pyright: ignore[reportUnknownVariableType]
    for code, handler in given.items():
        where = f"on_error of workflow {name!r}"
        if not isinstance(code, str):
            msg = f"{where}: an error code must be a string, got {code!r}"
            raise TypeError(msg)
        if not code:
            msg = f"{where}: an error code must not be empty"
            raise ValueError(msg)
        _refuse_generators(handler, f"{where}: the handler of {code!r}")
        if not is_async_callable(handler):
            msg = (
                f"{where}: the handler of {code!r} must be an async def function of"
                f" (ctx, input, error), got {handler!r}"
            )
            raise TypeError(msg)
        routes[code] = cast("ErrorHandler", handler)
    return types.MappingProxyType(routes)


def _check_requeue(requeue: object, name: str) -> None:
    if isinstance(requeue, bool):
        return
    if not isinstance(requeue, str):
        msg = f"requeue of workflow {name!r} must be a bool or a string, got {requeue!r}"
        raise TypeError(msg)
    if not requeue.strip() or "\n" in requeue or "\r" in requeue:
        msg = (
            f"requeue of workflow {name!r} must be one line saying what to do instead,"
            f" got {requeue!r}"
        )
        raise ValueError(msg)


class _StepDecorator:
    """What ``step(...)`` returns: applied to a handler, it makes the ``StepDef``."""

    __slots__ = ("_codec", "_group", "_name", "_policy")

    def __init__(self, name: str, group: str, codec: Codec, policy: StepPolicy) -> None:
        self._name, self._group, self._codec, self._policy = name, group, codec, policy

    @overload
    def __call__(self, fn: Callable[[I], Awaitable[O]]) -> StepDef[I, O]: ...
    @overload
    def __call__(self, fn: Callable[[I], O]) -> StepDef[I, O]: ...
    def __call__(self, fn: Callable[[I], Any]) -> StepDef[I, Any]:
        _refuse_generators(fn, f"step {self._name!r}")
        if not callable(fn):
            msg = f"step {self._name!r} must decorate a function, got {fn!r}"
            raise TypeError(msg)
        return StepDef(self._name, fn, self._policy, self._group, self._codec)


def step(
    name: str,
    *,
    group: str = "default",
    codec: Codec | None = None,
    **policy: Unpack[StepOptions],
) -> _StepDecorator:
    """
    Declare a function of one input as a dispatched step, with its retry policy.

    Args:
        name: The step's name, unique within an engine; a worker runs the handler of this name.
        group: Which workers claim its tasks (an engine serves the groups of its steps).
        codec: How the input and output are stored; default strict JSON.
        **policy: ``StepOptions``: ``retries`` (total attempts, default 1), ``backoff``,
            ``backoff_ms``, ``backoff_max_ms``, ``jitter``, ``retry``, ``timeout_ms``,
            ``pickup_timeout_ms``, ``queue``. Each call may override any of them.

    Raises:
        TypeError: For an unknown option, a value of the wrong type, or a generator function.
        ValueError: For a value out of range (``retries < 1``, negative ms, unknown
            ``backoff``), naming the option and the value.

    Example:
        >>> @step("payments:charge", retries=4, backoff="exp", backoff_ms=500)
        ... async def charge(order: dict) -> dict:
        ...     return {"charge_id": "ch_1"}
        >>> charge
        <step 'payments:charge' group 'default'>
        >>> charge.policy.schedule()
        from_step_options(retries=4, backoff='exp', backoff_ms=500)
    """
    check_name(name, "step name")
    check_name(group, f"group of step {name!r}")
    checked = policy_from_options(policy, where=f"step {name!r}")
    return _StepDecorator(name, group, JSON if codec is None else codec, checked)
