"""
The repeat loop: run again on *success* while the schedule (fed each result) says so.

Effect's ``repeat``, to the millisecond: the first step is at the end of the first run; every
success, the last one too, is given to the schedule; a failed run ends the call at once and the
schedule never sees it; a delay of 0 never sleeps. ``RepeatRun.decide`` is the only place that
decides; the runners around it run, wait and run again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from effects._events import RepeatEvent, RepeatKind
from effects._services import Clock, checked_now, current_clock, current_random, wall_time

if TYPE_CHECKING:
    from returns.result import Result

    from schedules import Schedule

__all__ = ["RepeatPolicy", "RepeatRun", "call_async", "call_sync", "effect_async", "effect_sync"]

R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)


class RepeatPolicy:
    """The precomputed parts of a ``Repeat``: composed schedule, listener, name."""

    __slots__ = ("epoch", "name", "on_repeat", "schedule")

    def __init__(
        self,
        schedule: Schedule[Any, Any],
        on_repeat: Callable[[RepeatEvent], object] | None,
        name: str | None,
    ) -> None:
        self.schedule = schedule
        #: Whether the schedule reads epoch seconds (a cron): it is stepped with the wall clock.
        self.epoch = schedule.reads_epoch
        self.on_repeat = on_repeat
        self.name = name

    def named(self, name: str) -> RepeatPolicy:
        """This policy for work called *name* (unless the policy has a name of its own)."""
        return self if self.name is not None else RepeatPolicy(self.schedule, self.on_repeat, name)


class RepeatRun:
    """The decision state of one repeated call, made when its first run ends."""

    __slots__ = ("_first", "_policy", "_rng", "_state", "clock")

    def __init__(self, policy: RepeatPolicy) -> None:
        self._policy = policy
        #: The clock the call waits on and measures with.
        self.clock: Clock = current_clock()
        self._rng = current_random()
        self._state: Any = policy.schedule.initial()
        self._first = 0.0

    def decide(self, run: int, value: object) -> float | None:
        """
        Decide after successful run *run* (1-based) returned *value*: the seconds to wait before
        the next run, or ``None`` to stop (*value* is then the call's result).

        Raises:
            ValueError: If the clock's reading is NaN or infinite.
        """
        now = checked_now(self.clock)
        if run == 1:
            self._first = now
        at = wall_time(self.clock) if self._policy.epoch else now
        self._state, _, delay = self._policy.schedule.step(at, value, self._state, self._rng)
        if self._policy.on_repeat is not None:
            kind: RepeatKind = "done" if delay is None else "repeat"
            self._emit(kind, run, delay, value, now)
        return delay

    def starting(self, run: int, previous: object) -> None:
        """Announce run *run* (2 or more), after its wait."""
        if self._policy.on_repeat is not None:
            self._emit("attempt", run, None, previous, checked_now(self.clock))

    def _emit(
        self, kind: RepeatKind, run: int, delay: float | None, value: object, now: float
    ) -> None:
        on_repeat = self._policy.on_repeat
        assert on_repeat is not None  # checked by the callers
        name = self._policy.name or "repeated call"
        on_repeat(RepeatEvent(kind, run, delay, value, now - self._first, name))


def call_sync(
    policy: RepeatPolicy, fn: Callable[..., R], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> R:
    """
    Run ``fn(*args, **kwargs)`` and repeat it per *policy*; return the last run's result.

    An exception from a run propagates at once. A run that returns a coroutine (*fn* is a plain
    function around an ``async def``) makes the call async: the coroutine that finishes it is
    returned.
    """
    value = fn(*args, **kwargs)
    if type(value) is CoroutineType:
        return resume_async(policy, fn, cast("Any", value), args, kwargs)  # type: ignore[return-value]
    run = RepeatRun(policy)
    number = 1
    while True:
        delay = run.decide(number, value)
        if delay is None:
            return value
        if delay > 0:
            run.clock.sleep(delay)
        number += 1
        run.starting(number, value)
        value = fn(*args, **kwargs)
        if type(value) is CoroutineType:
            coroutine = cast("Any", value)
            return resume_async(policy, fn, coroutine, args, kwargs, run, number)  # type: ignore[return-value]


async def call_async(
    policy: RepeatPolicy,
    fn: Callable[..., Awaitable[R]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """The ``async`` form of ``call_sync``: waits with ``clock.sleep_async``."""
    result: R = await resume_async(policy, fn, fn(*args, **kwargs), args, kwargs)
    return result


async def resume_async(  # noqa: PLR0917 - internal
    policy: RepeatPolicy,
    fn: Callable[..., Any],
    awaitable: Awaitable[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run: RepeatRun | None = None,
    number: int = 1,
) -> Any:
    """Await run *number*'s *awaitable*, then repeat per *policy* (continuing *run*)."""
    value = await awaitable
    if run is None:
        run = RepeatRun(policy)
    while True:
        delay = run.decide(number, value)
        if delay is None:
            return value
        if delay > 0:
            await run.clock.sleep_async(delay)
        number += 1
        run.starting(number, value)
        value = await fn(*args, **kwargs)


def effect_sync(policy: RepeatPolicy, thunk: Callable[[], Result[A, E]]) -> Result[A, E]:
    """Run *thunk* and repeat it per *policy*; return the last success or the first failure."""
    from returns.result import Success  # noqa: PLC0415 - see _driver._retried_error

    result = thunk()
    if not isinstance(result, Success):
        return result
    run = RepeatRun(policy)
    number = 1
    while True:
        delay = run.decide(number, result.unwrap())
        if delay is None:
            return result
        if delay > 0:
            run.clock.sleep(delay)
        number += 1
        run.starting(number, result.unwrap())
        result = thunk()
        if not isinstance(result, Success):
            return result


async def effect_async(
    policy: RepeatPolicy, thunk: Callable[[], Coroutine[Any, Any, Result[A, E]]]
) -> Result[A, E]:
    """The ``async`` form of ``effect_sync``."""
    from returns.result import Success  # noqa: PLC0415 - see _driver._retried_error

    result = await thunk()
    if not isinstance(result, Success):
        return result
    run = RepeatRun(policy)
    number = 1
    while True:
        delay = run.decide(number, result.unwrap())
        if delay is None:
            return result
        if delay > 0:
            await run.clock.sleep_async(delay)
        number += 1
        run.starting(number, result.unwrap())
        result = await thunk()
        if not isinstance(result, Success):
            return result
