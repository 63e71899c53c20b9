"""
The retry decision loop, shared by every runner (functions, effects, attempt blocks; sync and
async).

``Run.decide(attempt, error)`` is the only place that decides: it steps the schedule, asks the
budget and emits events. The runners around it only run attempts and wait the delay it returns:
``clock.sleep`` or ``await clock.sleep_async``, and only when it is > 0. Nothing here runs before
the first failure, so a call that succeeds at once costs one ``try``.

One shortcut: a ``times=n`` policy (``forever().times(n)``, no budget) that nobody listens to
answers 0 s for failed attempts 1 to *n* whatever the time, state or random source, so
``Policy.start`` hands such calls a shared ``Counting`` decider instead of a fresh ``Run``: no
schedule step, clock reading or random draw. ``tests/effects/test_counting_decisions.py`` checks
that nothing observable differs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from returns.result import Failure, Result

from effects._events import _REGISTRY as _HOOKS  # pyright: ignore[reportPrivateUsage]
from effects._events import EventKind, Hook, RetryEvent
from effects._services import Clock, current_clock, current_random

if TYPE_CHECKING:
    from effects._budget import RetryBudget
    from schedules import Schedule

__all__ = ["Attempt", "Attempts", "Counting", "Policy", "Run"]

R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)

#: What ``on=`` / ``catch=`` hold once normalised: a tuple of exception types.
ErrorTypes = tuple[type[Exception], ...]


class Policy:
    """
    The precomputed, immutable parts of a ``Retry``: composed schedule, budget, listener.

    ``Retry`` passes *times_only* = ``n`` when the composed schedule is exactly
    ``forever().times(n)``; with no budget and no ``on_retry`` too, ``start`` can then hand out
    the shared ``Counting`` decider.
    """

    __slots__ = ("_counting", "budget", "on_retry", "schedule")

    def __init__(
        self,
        schedule: Schedule[Any, Any],
        budget: RetryBudget | None,
        on_retry: Callable[[RetryEvent], object] | None,
        times_only: int | None = None,
    ) -> None:
        self.schedule = schedule
        self.budget = budget
        self.on_retry = on_retry
        self._counting = (
            Counting(times_only)
            if times_only is not None and budget is None and on_retry is None
            else None
        )

    def record_first_attempt(self) -> None:
        """Tell the budget (if any) that a call is making its first attempt."""
        if self.budget is not None:
            self.budget.record_attempt(current_clock().now())

    def start(self) -> Run | Counting:
        """The decisions of one call, made at its first failure."""
        counting = self._counting
        if counting is not None and not _HOOKS.hooks:
            return counting
        return Run(self)


class Run:
    """
    The decision state of one retried call, made at its first failure.

    The listeners (``on_retry`` and the hooks registered at that moment) are fixed here, so each
    sees every event of the call from its first failure on, or none of them.
    """

    __slots__ = ("_first", "_hooks", "_policy", "_rng", "_state", "clock", "listening")

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._hooks: tuple[Hook, ...] = (hooks := _HOOKS.hooks)
        #: Whether anyone receives this call's events; the runners announce attempts only then.
        self.listening = policy.on_retry is not None or hooks != ()
        #: The clock the call waits on and measures with.
        self.clock: Clock = current_clock()
        self._rng = current_random()
        self._state: Any = policy.schedule.initial()
        self._first = 0.0

    def decide(self, attempt: int, error: Exception) -> float | None:
        """
        Decide after failed attempt *attempt* (1-based): the seconds to wait before the next, or
        ``None`` to stop.

        An error whose ``retryable`` is ``False`` (``FatalError`` among them) stops at once and
        is never shown to the schedule or its predicates.
        """
        now = self.clock.now()
        if attempt == 1:
            self._first = now
        policy = self._policy
        if getattr(error, "retryable", True) is False:
            delay = None
        else:
            self._state, _, delay = policy.schedule.step(now, error, self._state, self._rng)
        if delay is None:
            if self.listening:
                self._emit("give_up", attempt, None, error, now)
            return None
        budget = policy.budget
        if budget is not None and not budget.try_retry(now):
            if self.listening:
                self._emit("budget_exhausted", attempt, None, error, now)
            return None
        if self.listening:
            self._emit("retry", attempt, delay, error, now)
        return delay

    def starting(self, attempt: int, previous: Exception) -> None:
        """Announce attempt *attempt*, after its wait; called only when ``listening``."""
        self._emit("attempt", attempt, None, previous, self.clock.now())

    def _emit(
        self, kind: EventKind, attempt: int, delay: float | None, error: Exception, now: float
    ) -> None:
        event = RetryEvent(kind, attempt, delay, error, now - self._first)
        on_retry = self._policy.on_retry
        if on_retry is not None:
            on_retry(event)
        for hook in self._hooks:
            hook(event)


class Counting:
    """
    ``Run.decide`` for a ``forever().times(n)`` policy (no budget) that nobody listens to.

    Such a schedule answers 0 s for failed attempts 1 to *n* and then stops, whatever the time
    or the random source, so no state is needed and one instance serves every call and thread.
    ``tests/effects/test_counting_decisions.py`` pins it to ``Run``.
    """

    __slots__ = ("_limit",)

    #: Nobody listens: ``Policy.start`` hands out a ``Run`` when a hook is registered.
    listening = False

    def __init__(self, limit: int) -> None:
        self._limit = limit

    def decide(self, attempt: int, error: Exception) -> float | None:
        """0.0 while *attempt* <= *limit* and *error* is retryable, else ``None``."""
        if attempt > self._limit or getattr(error, "retryable", True) is False:
            return None
        return 0.0

    @property
    def clock(self) -> Clock:
        """The active clock (never waited on: every delay is 0)."""
        return current_clock()

    def starting(self, attempt: int, previous: Exception) -> None:
        """Nothing to announce: nobody listens."""


# --- functions -------------------------------------------------------------------------------


# The failure path's hot call: plain positional arguments are the cheapest to pass.
def call_sync(  # noqa: PLR0917
    policy: Policy,
    on: ErrorTypes,
    fn: Callable[..., R],
    error: Exception,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """Go on retrying ``fn(*args, **kwargs)`` after its first attempt failed with *error*."""
    run = policy.start()
    attempt = 1
    while True:
        delay = run.decide(attempt, error)
        if delay is None:
            try:
                raise error
            finally:
                del error  # the traceback holds this frame; no cycle through its locals
        if delay > 0:
            run.clock.sleep(delay)
        attempt += 1
        if run.listening:
            run.starting(attempt, error)
        # Kept across the next attempt, the old error's traceback would tie this frame into a
        # reference cycle that only the cyclic GC frees: ~10% of the failure path's cost.
        del error
        try:
            return fn(*args, **kwargs)
        except on as next_error:
            error = next_error


async def call_async(  # noqa: PLR0917
    policy: Policy,
    on: ErrorTypes,
    fn: Callable[..., Awaitable[R]],
    error: Exception,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """The ``async`` form of ``call_sync``: waits with ``clock.sleep_async``."""
    run = policy.start()
    attempt = 1
    while True:
        delay = run.decide(attempt, error)
        if delay is None:
            try:
                raise error
            finally:
                del error  # the traceback holds this frame; no cycle through its locals
        if delay > 0:
            await run.clock.sleep_async(delay)
        attempt += 1
        if run.listening:
            run.starting(attempt, error)
        del error  # see call_sync
        try:
            return await fn(*args, **kwargs)
        except on as next_error:
            error = next_error


# --- effects ---------------------------------------------------------------------------------


def _retryable(result: Result[A, E], on: ErrorTypes | None) -> E | None:
    """The error of a failed *result* that *on* lets through, else ``None``."""
    if not isinstance(result, Failure):
        return None
    error: E = result.failure()
    if on is not None and not isinstance(error, on):
        return None
    return error


def effect_sync(
    policy: Policy, on: ErrorTypes | None, thunk: Callable[[], Result[A, E]]
) -> Result[A, E]:
    """Run *thunk* under *policy*; return its first success or its last failure."""
    policy.record_first_attempt()
    result = thunk()
    error = _retryable(result, on)
    if error is None:
        return result
    run = policy.start()
    attempt = 1
    while True:
        delay = run.decide(attempt, error)
        if delay is None:
            return result
        if delay > 0:
            run.clock.sleep(delay)
        attempt += 1
        if run.listening:
            run.starting(attempt, error)
        result = thunk()
        error = _retryable(result, on)
        if error is None:
            return result


async def effect_async(
    policy: Policy,
    on: ErrorTypes | None,
    thunk: Callable[[], Coroutine[Any, Any, Result[A, E]]],
) -> Result[A, E]:
    """The ``async`` form of ``effect_sync``."""
    policy.record_first_attempt()
    result = await thunk()
    error = _retryable(result, on)
    if error is None:
        return result
    run = policy.start()
    attempt = 1
    while True:
        delay = run.decide(attempt, error)
        if delay is None:
            return result
        if delay > 0:
            await run.clock.sleep_async(delay)
        attempt += 1
        if run.listening:
            run.starting(attempt, error)
        result = await thunk()
        error = _retryable(result, on)
        if error is None:
            return result


# --- attempt blocks --------------------------------------------------------------------------


class Attempt:
    """
    One attempt of an ``attempts()`` loop: run its code in ``with attempt:``.

    Leaving the block with an error of the ``on=`` types either schedules another attempt (the
    error is swallowed and the loop goes on after the wait) or, when the policy gives up,
    lets the error out of the ``with`` and the loop unchanged. Other errors pass through.
    """

    __slots__ = ("_loop", "number")

    def __init__(self, loop: _Loop, number: int) -> None:
        self._loop = loop
        #: The 1-based number of this attempt.
        self.number = number

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return self._loop.finished(exc)

    def __repr__(self) -> str:
        return f"<Attempt {self.number}>"


class _Loop:
    """The state of one ``attempts()`` loop, iterated sync or async."""

    __slots__ = ("_delay", "_error", "_number", "_on", "_policy", "_run")

    def __init__(self, policy: Policy, on: ErrorTypes) -> None:
        self._policy = policy
        self._on = on
        self._run: Run | Counting | None = None
        self._number = 0
        self._delay: float | None = None
        self._error: Exception | None = None

    def finished(self, exc: BaseException | None) -> bool:
        # Only Exception subclasses can be in `on` (checked when the Retry is built), so
        # cancellation and KeyboardInterrupt always pass through here untouched.
        if exc is None or not isinstance(exc, self._on):
            return False
        if self._run is None:
            self._run = self._policy.start()
        delay = self._run.decide(self._number, exc)
        if delay is None:
            return False
        self._delay = delay
        self._error = exc
        return True

    def _begin(self) -> Literal["first", "next", "stop"]:
        if self._number == 0:
            self._policy.record_first_attempt()
            self._number = 1
            return "first"
        if self._delay is None:
            return "stop"
        return "next"

    def _next_attempt(self) -> Attempt:
        assert self._run is not None  # set by the failure that scheduled this attempt
        assert self._error is not None
        self._delay = None
        self._number += 1
        if self._run.listening:
            self._run.starting(self._number, self._error)
        # Only the event needed it; kept, it would tie the caller's frame into a cycle.
        self._error = None
        return Attempt(self, self._number)


class _SyncLoop(_Loop):
    __slots__ = ()

    def __iter__(self) -> _SyncLoop:
        return self

    def __next__(self) -> Attempt:
        step = self._begin()
        if step == "first":
            return Attempt(self, 1)
        if step == "stop" or self._run is None or self._delay is None:
            raise StopIteration
        if self._delay > 0:
            self._run.clock.sleep(self._delay)
        return self._next_attempt()


class _AsyncLoop(_Loop):
    __slots__ = ()

    def __aiter__(self) -> _AsyncLoop:
        return self

    async def __anext__(self) -> Attempt:
        step = self._begin()
        if step == "first":
            return Attempt(self, 1)
        if step == "stop" or self._run is None or self._delay is None:
            raise StopAsyncIteration
        if self._delay > 0:
            await self._run.clock.sleep_async(self._delay)
        return self._next_attempt()


class Attempts:
    """
    Attempts of a block of code under one retry policy: ``for`` in sync code, ``async for``
    in async code (which waits with ``await``, under asyncio or trio).

    Each iteration starts an independent loop. Write nothing after the ``with attempt:`` block
    inside the loop body: it would also run after attempts that failed and will be retried.
    """

    __slots__ = ("_on", "_policy")

    def __init__(self, policy: Policy, on: ErrorTypes) -> None:
        self._policy = policy
        self._on = on

    def __iter__(self) -> _SyncLoop:
        return _SyncLoop(self._policy, self._on)

    def __aiter__(self) -> _AsyncLoop:
        return _AsyncLoop(self._policy, self._on)
