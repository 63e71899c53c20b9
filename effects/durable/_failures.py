"""Which exceptions that user code raises are its failures, and which are the engine stopping."""

from __future__ import annotations

import asyncio

__all__ = ["is_failure"]


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
