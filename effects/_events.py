"""
Retry events, the process-wide hook registry, and stdlib logging of retries.

Hooks are process-wide on purpose, unlike the clock and the random source: ``log_retries()``
called at start-up must also see retries made in worker threads, and ``threading.Thread`` and
thread pools start with an empty context in Python 3.11, so a context variable would silently
drop them. For listeners scoped to one policy, use ``retry(..., on_retry=...)``.

Registration is thread-safe: ``add_hook`` and its remover swap an immutable tuple under a lock,
so the retry runtime reads the hooks with one attribute load and no lock. A retried call takes
that tuple once, at its first failure, and reports every later event to those hooks: each hook
hears a call from its first event to its last, or not at all (a hook added while a call is
already retrying hears only later calls; one removed meanwhile hears that call to its end).
"""

from __future__ import annotations

from _thread import allocate_lock
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from schedules._frozen import frozen

if TYPE_CHECKING:
    import logging

__all__ = [
    "EventKind",
    "RepeatEvent",
    "RepeatKind",
    "RetryEvent",
    "add_hook",
    "hooks",
    "log_retries",
    "notify_hooks",
]

EventKind = Literal["retry", "attempt", "give_up", "budget_exhausted"]
RepeatKind = Literal["repeat", "attempt", "done"]

# logging.WARNING, written out so that importing effects does not import logging.
_WARNING = 30


@frozen
class RetryEvent:
    """
    One step of a retried call, as seen by ``on_retry`` and hooks.

    Kinds, per failed attempt exactly one of ``"retry"``, ``"give_up"``, ``"budget_exhausted"``:

    - ``"retry"``: attempt *attempt* failed with *error*; the next starts in *delay* seconds.
    - ``"give_up"``: attempt *attempt* failed with *error* and no retry follows (the schedule is
      done, or the error is never retried); *error* is what the caller gets.
    - ``"budget_exhausted"``: the schedule would retry but the ``RetryBudget`` refused; *error*
      is what the caller gets.
    - ``"attempt"``: attempt *attempt* (2 or more) is starting, after its wait; *error* is the
      previous attempt's error. The first attempt emits nothing, so success costs nothing.

    Attributes:
        kind: One of the kinds above.
        attempt: The 1-based number of the attempt concerned.
        delay: Seconds until the next attempt (``"retry"`` only), else ``None``.
        error: The error of the failed attempt (of the previous one for ``"attempt"``).
        elapsed: Seconds since the first attempt failed, on the active clock.
        name: What is retried: the ``name=`` given to ``retry``, else the function's qualified
            name (``fetch_user``, ``Client.get``), the effect's (the name of the function
            given to ``Effect.attempt`` and the like), or ``"attempts()"`` for a block.
    """

    kind: EventKind
    attempt: int
    delay: float | None
    error: Exception
    elapsed: float
    name: str


@frozen
class RepeatEvent:
    """
    One step of a repeated call (``effects.repeat``), as its ``on_repeat`` sees it.

    Kinds, per successful run exactly one of ``"repeat"`` and ``"done"``:

    - ``"repeat"``: run *attempt* succeeded with *value*; the next starts in *delay* seconds.
    - ``"done"``: run *attempt* succeeded with *value* and no run follows: *value* is what the
      caller gets.
    - ``"attempt"``: run *attempt* (2 or more) is starting, after its wait; *value* is the
      previous run's.

    A run that fails ends the call at once, with no event: the failure is the caller's.

    Attributes:
        kind: One of the kinds above.
        attempt: The 1-based number of the run concerned.
        delay: Seconds until the next run (``"repeat"`` only), else ``None``.
        value: The run's result (the previous run's for ``"attempt"``).
        elapsed: Seconds since the first run ended, on the active clock.
        name: What is repeated, named as ``RetryEvent.name`` names it.
    """

    kind: RepeatKind
    attempt: int
    delay: float | None
    value: object
    elapsed: float
    name: str


Hook = Callable[[RetryEvent], object]


class _Registry:
    """A copy-on-write tuple of hooks: readers load ``hooks`` without locking."""

    __slots__ = ("_lock", "hooks")

    def __init__(self) -> None:
        self._lock = allocate_lock()
        self.hooks: tuple[Hook, ...] = ()

    def add(self, hook: Hook) -> Callable[[], None]:
        with self._lock:
            self.hooks = (*self.hooks, hook)
        removed = False

        def remove() -> None:
            nonlocal removed
            with self._lock:
                if removed:
                    return
                removed = True
                index = next(i for i, h in enumerate(self.hooks) if h is hook)
                self.hooks = self.hooks[:index] + self.hooks[index + 1 :]

        return remove


_REGISTRY = _Registry()


def hooks() -> tuple[Hook, ...]:
    """
    The hooks added with ``add_hook`` and not yet removed, oldest first.

    A runtime that calls ``notify_hooks`` may skip building an event nobody hears.
    """
    return _REGISTRY.hooks


def notify_hooks(event: RetryEvent) -> None:
    """
    Send *event* to every hook added with ``add_hook``, oldest first, in the calling thread.

    For runtimes built on ``effects`` that retry outside ``retry(...)`` (``effects.durable``'s
    engine), so one hook or ``log_retries()`` hears every retry of the process. An exception a
    hook raises propagates to the caller.

    Args:
        event: The event.

    Example:
        >>> seen = []
        >>> remove = add_hook(lambda event: seen.append((event.name, event.kind)))
        >>> notify_hooks(RetryEvent("retry", 1, 0.5, OSError("x"), 0.0, "checkout/charge"))
        >>> remove()
        >>> seen
        [('checkout/charge', 'retry')]
    """
    for hook in _REGISTRY.hooks:
        hook(event)


def add_hook(hook: Hook) -> Callable[[], None]:
    """
    Call *hook* with every ``RetryEvent`` of every retried call in this process.

    Hooks run in the thread (or task) of the retried call, in the order they were added. An
    exception raised by a hook is a bug: it ends the call at once, never retried, and
    propagates with the error being retried as its ``__context__``. Adding the same function
    twice calls it twice. A call already retrying when the hook is added is not
    reported to it (see the module docstring). Thread-safe.

    Args:
        hook: A function of one ``RetryEvent``; its return value is ignored.

    Returns:
        A function that removes this registration (calling it again does nothing).

    Raises:
        TypeError: If *hook* is not callable.

    Example:
        >>> from effects import Effect, FatalError
        >>> seen = []
        >>> remove = add_hook(lambda event: seen.append(event.kind))
        >>> Effect.fail(FatalError("no")).retry(times=3).run()
        <Failure: no>
        >>> remove()
        >>> seen
        ['give_up']
    """
    if not callable(hook):
        msg = f"hook must be callable, got {hook!r}"
        raise TypeError(msg)
    return _REGISTRY.add(hook)


def log_retries(logger: logging.Logger | None = None, level: int = _WARNING) -> Callable[[], None]:
    """
    Log every retry, give-up and budget refusal through stdlib ``logging``.

    Each line starts with what is retried (``RetryEvent.name``), then the attempt, the error,
    the delay and the time elapsed. Messages are formatted by ``logging`` only when *logger*
    is enabled for *level*; ``"attempt"`` events are logged at ``DEBUG``.

    Args:
        logger: Where to log; ``None`` means ``logging.getLogger("effects")``.
        level: The level of retry, give-up and budget messages (default ``logging.WARNING``).

    Returns:
        A function that turns this logging off again.

    Example:
        >>> import logging, sys
        >>> from effects import Effect, retry, use_clock
        >>> from effects.testing import VirtualClock
        >>> from schedules import spaced
        >>> logger = logging.getLogger("example.retries")
        >>> logger.addHandler(handler := logging.StreamHandler(sys.stdout))
        >>> stop = log_retries(logger)
        >>> with use_clock(VirtualClock()):
        ...     Effect.fail(KeyError("id")).pipe(retry(spaced(2), times=1, name="load")).run()
        load: attempt 1 failed with KeyError('id'); retrying in 2.000 s (0.000 s elapsed)
        load: attempt 2 failed with KeyError('id'); giving up (2.000 s elapsed)
        <Failure: 'id'>
        >>> stop(); logger.removeHandler(handler)
    """
    # Imported here: only a program that logs its retries needs logging loaded.
    import logging  # noqa: PLC0415

    target = logging.getLogger("effects") if logger is None else logger

    def log(event: RetryEvent) -> None:
        if event.kind == "retry":
            target.log(
                level,
                "%s: attempt %d failed with %r; retrying in %.3f s (%.3f s elapsed)",
                event.name,
                event.attempt,
                event.error,
                event.delay,
                event.elapsed,
            )
        elif event.kind == "give_up":
            target.log(
                level,
                "%s: attempt %d failed with %r; giving up (%.3f s elapsed)",
                event.name,
                event.attempt,
                event.error,
                event.elapsed,
            )
        elif event.kind == "budget_exhausted":
            target.log(
                level,
                "%s: attempt %d failed with %r; retry budget exhausted, giving up (%.3f s elapsed)",
                event.name,
                event.attempt,
                event.error,
                event.elapsed,
            )
        else:
            target.debug(
                "%s: starting attempt %d (%.3f s elapsed)", event.name, event.attempt, event.elapsed
            )

    return add_hook(log)
