"""
A durable workflow engine whose step retries survive a crash.

A **workflow** is an ``async def`` that the engine replays from its start whenever the run
resumes; each step it awaits is checkpointed in a store, so a completed step returns its recorded
output on replay and never runs again. **Local steps** (``ctx.local_step``) run in the engine's
process and retry in memory; **dispatched steps** (``ctx.step``) run on a worker and retry
durably: the wait before the next attempt is persisted on the checkpoint, so a worker or the whole
orchestrator may die between attempts and nothing is lost or run twice.

Example:
    >>> import asyncio
    >>> from effects.durable import Engine, step, workflow
    >>> @step("double", retries=3, backoff_ms=100)
    ... async def double(n: int) -> int:
    ...     return 2 * n
    >>> @workflow("twice")
    ... async def twice(ctx, n: int) -> int:
    ...     once = await ctx.local_step("add-one", lambda: n + 1)
    ...     return await ctx.step(double, once)
    >>> async def main() -> object:
    ...     async with Engine("sqlite:///:memory:", workflows=[twice], steps=[double]) as engine:
    ...         run_id = await engine.start(twice, 20)
    ...         await engine.run_until_idle()
    ...         return (await engine.get_run(run_id)).output
    >>> asyncio.run(main())
    42
"""

import contextlib
from typing import TYPE_CHECKING, Any

from effects.durable._codec import MAX_DEPTH, Codec, JsonCodec
from effects.durable._context import WorkflowContext
from effects.durable._definitions import StepDef, WorkflowDef, step, workflow
from effects.durable._engine import Engine
from effects.durable._policy import StepOptions
from effects.durable._queue import Queue
from effects.durable._records import Checkpoint, Event, Run, Task
from effects.durable._recurring import Recurring
from effects.durable._step_context import StepContext, current_step
from effects.durable._store import StaleTurnError, Store
from effects.durable._store.sqlite import SqliteStore
from effects.durable.errors import (
    ChildWorkflowError,
    DurableError,
    NoHandler,
    NonDeterminismError,
    RemoteStepError,
    RemoteStepLost,
    RemoteStepTimeout,
    RunCancelled,
    RunDead,
    StepError,
    StepFailedError,
    StoreError,
    UnknownRunError,
    WorkerLost,
    WorkflowTimeout,
)

if TYPE_CHECKING:
    from effects.durable._store.memory import MemoryStore

__all__ = [
    "Checkpoint",
    "ChildWorkflowError",
    "Codec",
    "DurableError",
    "Engine",
    "Event",
    "JsonCodec",
    "MAX_DEPTH",
    "MemoryStore",
    "NoHandler",
    "NonDeterminismError",
    "Queue",
    "Recurring",
    "RemoteStepError",
    "RemoteStepLost",
    "RemoteStepTimeout",
    "Run",
    "RunCancelled",
    "RunDead",
    "SqliteStore",
    "StaleTurnError",
    "StepContext",
    "StepDef",
    "StepError",
    "StepFailedError",
    "StepOptions",
    "Store",
    "StoreError",
    "Task",
    "UnknownRunError",
    "WorkerLost",
    "WorkflowContext",
    "WorkflowDef",
    "WorkflowTimeout",
    "current_step",
    "step",
    "workflow",
]


def __getattr__(name: str) -> Any:
    # The memory store is for tests: a service that never names it never pays for its import.
    if name == "MemoryStore":
        from effects.durable._store.memory import MemoryStore  # noqa: PLC0415

        MemoryStore.__module__ = __name__
        globals()[name] = MemoryStore
        return MemoryStore
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


def _publish(names: list[str]) -> None:
    """Public names in reprs and tracebacks: effects.durable.Engine, not ..._engine.Engine."""
    for name in names:
        if name == "MemoryStore":
            continue
        value = globals()[name]
        if str(getattr(value, "__module__", "")).startswith("effects.durable._"):
            with contextlib.suppress(AttributeError, TypeError):
                value.__module__ = __name__


_publish(__all__)
