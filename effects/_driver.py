"""
The retry decision loop, shared by every runner (functions, effects, attempt blocks; sync and
async).

``Run.decide(attempt, error)`` is the only place that decides: it steps the schedule, asks the
budget and emits events. The runners around it only run attempts and wait the delay it returns:
``clock.sleep`` or ``await clock.sleep_async``, and only when it is > 0. Nothing here runs before
the first failure, so a call that succeeds at once costs one ``try``.

User code runs inside ``decide``: the schedule (its predicates, delay functions, taps), a
``retryable`` property, the budget's clock, ``on_retry`` and the hooks. When any of it raises,
the call stops at once (the failure is a bug, never a reason to retry) and the error being
retried is kept visible as the failure's ``__context__``. A ``retryable`` property that raises
is the one exception: the error is its own verdict's subject, so the call gives up with that
error itself (not retried, as ``retryable = False``), the property's failure named in a note on
it (see ``unreadable_retryable``).

One shortcut: a ``times=n`` policy (``forever().times(n)``, no budget) that nobody listens to
answers 0 s for failed attempts 1 to *n* whatever the time, state or random source, so
``Policy.start`` hands such calls a shared ``Counting`` decider instead of a fresh ``Run``: no
schedule step, clock reading or random draw. ``tests/effects/test_counting_decisions.py`` checks
that nothing observable differs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType, TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast

from effects._events import _REGISTRY as _HOOKS  # pyright: ignore[reportPrivateUsage]
from effects._events import EventKind, Hook, RetryEvent
from effects._services import (
    Clock,
    bad_reading,
    checked_now,
    current_clock,
    current_random,
    wall_time,
)

if TYPE_CHECKING:
    from returns.result import Result

    from effects._budget import RetryBudget
    from schedules import Schedule

__all__ = ["Attempt", "Attempts", "Counting", "Policy", "Run", "keep_visible"]

R = TypeVar("R")
A = TypeVar("A")
E = TypeVar("E", bound=Exception)

#: What ``on=`` / ``catch=`` hold once normalised: a tuple of exception types.
ErrorTypes = tuple[type[Exception], ...]

_MISSING: Final[Any] = object()
_CHAIN_LIMIT: Final = 100


def keep_visible(failure: BaseException, error: BaseException) -> None:
    """
    Make *error* (the one being retried) visible in *failure*'s traceback, as its context.

    Python chains an exception raised while another is handled; code that runs between
    attempts is not inside an ``except``, so the chain is made here: *error* becomes the
    ``__context__`` of the last exception in *failure*'s context chain, unless it is already
    in the chain.
    """
    link = failure
    for _ in range(_CHAIN_LIMIT):
        if link is error:
            return
        following = link.__context__
        if following is None:
            link.__context__ = error
            return
        link = following


class Policy:
    """
    The precomputed, immutable parts of a ``Retry``: composed schedule, budget, listener, the
    ``on`` types and the name events give the work.

    ``Retry`` passes *times_only* = ``n`` when the composed schedule is exactly
    ``forever().times(n)``; with no budget and no ``on_retry`` too, ``start`` can then hand out
    the shared ``Counting`` decider.
    """

    __slots__ = (
        "_counting",
        "budget",
        "epoch",
        "name",
        "on",
        "on_retry",
        "plain_class",
        "retryable_classes",
        "schedule",
    )

    def __init__(
        self,
        schedule: Schedule[Any, Any],
        *,
        budget: RetryBudget | None,
        on_retry: Callable[[RetryEvent], object] | None,
        on: ErrorTypes | None,
        name: str | None,
        times_only: int | None = None,
    ) -> None:
        self.schedule = schedule
        #: Whether the schedule reads epoch seconds (a cron): it is stepped with the wall clock.
        self.epoch = schedule.reads_epoch
        self.budget = budget
        self.on_retry = on_retry
        #: The exception types retried (``None``: every typed failure of an effect).
        self.on = on
        #: The name of the retried work, or ``None`` until a target gives one.
        self.name = name
        #: Exception classes seen, and whether each defines `retryable` (see `retryable_slow`);
        #: made at the first failure that needs it. `plain_class` is the last one seen without:
        #: the failures of one call are mostly of one class, told by one identity check.
        self.retryable_classes: dict[type[BaseException], bool] | None = None
        self.plain_class: type[BaseException] | None = None
        self._counting = (
            Counting(times_only)
            if times_only is not None and budget is None and on_retry is None
            else None
        )

    def named(self, name: str) -> Policy:
        """This policy for work called *name* (unless the policy has a name of its own)."""
        if self.name is not None:
            return self
        policy = Policy(
            self.schedule, budget=self.budget, on_retry=self.on_retry, on=self.on, name=name
        )
        policy._counting = self._counting
        return policy

    def record_first_attempt(self) -> None:
        """Tell the budget (if any) that a call is making its first attempt."""
        if self.budget is not None:
            self.budget.record_attempt(checked_now(current_clock()))

    def start(self) -> Run | Counting:
        """The decisions of one call, made at its first failure."""
        counting = self._counting
        if counting is not None and not _HOOKS.hooks:
            return counting
        return Run(self)


def retryable_slow(error: Exception, owner: Policy | Counting) -> object:
    """
    *error*'s ``retryable`` value when the fast path could not tell: its class is not
    *owner*'s ``plain_class`` (the last class seen without a ``retryable`` of its own), or it
    defines ``retryable`` (a property, usually) that ``getattr`` found missing.

    ``getattr`` with a default swallows an ``AttributeError`` raised inside a property and would
    make the error look retryable; reading the attribute again raises that bug to the caller,
    which gives it to ``unreadable_retryable``. Whether a class defines ``retryable`` is
    remembered in ``retryable_classes``, so each class is inspected once.
    """
    classes = owner.retryable_classes
    if classes is None:
        classes = owner.retryable_classes = {}
    cls = type(error)
    defines = classes.get(cls)
    if defines is None:
        defines = classes[cls] = any("retryable" in vars(k) for k in cls.__mro__)
    if not defines:
        owner.plain_class = cls
        return True
    return error.retryable  # type: ignore[attr-defined] # raises what the property raised


def unreadable_retryable(error: Exception, failure: Exception) -> bool:
    """
    The verdict for *error* when reading its ``retryable`` raised *failure*: ``False``.

    Not retried, because a retry is only made when nothing says it is unsafe, and a verdict
    that cannot be read cannot say it is safe (the property exists to answer ``False`` for
    some errors); and because between attempts a failure of user code never causes a retry.
    The call then gives up with *error* itself, the one the caller handles (``except``, a
    ``Failure``, a ``give_up`` event), never with *failure* in its place; *failure* is named
    in a note on *error* (once, however often it is seen), so the bug stays visible.
    """
    try:
        text = str(failure)
    except Exception:  # noqa: BLE001 - a hostile __str__ must not replace the error either
        text = "<unprintable>"
    note = f"not retried: reading its retryable property raised {type(failure).__qualname__}"
    note += f": {text}" if text else ""
    try:
        if note not in getattr(error, "__notes__", ()):
            error.add_note(note)
    except Exception:  # noqa: BLE001, S110 - a __notes__ that is not a list: no note, same error
        pass
    return False


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

        An error whose ``retryable`` is ``False`` (``FatalError`` among them), or whose
        ``retryable`` property raises (``unreadable_retryable``), stops at once and is never
        shown to the schedule or its predicates.

        Raises:
            ValueError: If the clock's reading is NaN or infinite.
            Exception: Whatever user code raised (a predicate, a delay function, a hook), with
                *error* as its ``__context__``.
        """
        try:
            clock = self.clock
            now = clock.now()
            # Finite numbers only (checked_now, inlined): NaN - NaN and inf - inf are NaN.
            try:
                finite = now - now == 0.0
            except TypeError:  # a str, None, ...
                finite = False
            if not finite:
                raise bad_reading(clock, now)
            if attempt == 1:
                self._first = now
            policy = self._policy
            try:
                # The fast path of retryable_slow: most errors have no `retryable` at all.
                value = getattr(error, "retryable", _MISSING)
                if value is _MISSING and type(error) is not policy.plain_class:
                    value = retryable_slow(error, policy)
            except Exception as failure:  # noqa: BLE001 - a broken property: give up with `error`
                value = unreadable_retryable(error, failure)
            if value is False:
                delay = None
            else:
                at = wall_time(clock) if policy.epoch else now
                self._state, _, delay = policy.schedule.step(at, error, self._state, self._rng)
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
        except Exception as failure:
            keep_visible(failure, error)
            raise

    def starting(self, attempt: int, previous: Exception) -> None:
        """Announce attempt *attempt*, after its wait; called only when ``listening``."""
        try:
            self._emit("attempt", attempt, None, previous, checked_now(self.clock))
        except Exception as failure:
            keep_visible(failure, previous)
            raise

    def _emit(
        self, kind: EventKind, attempt: int, delay: float | None, error: Exception, now: float
    ) -> None:
        name = self._policy.name or "retried call"
        event = RetryEvent(kind, attempt, delay, error, now - self._first, name)
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

    __slots__ = ("_limit", "plain_class", "retryable_classes")

    #: Nobody listens: ``Policy.start`` hands out a ``Run`` when a hook is registered.
    listening = False

    def __init__(self, limit: int) -> None:
        self._limit = limit
        #: As ``Policy.retryable_classes`` and ``plain_class``, for the errors this one sees.
        self.retryable_classes: dict[type[BaseException], bool] | None = None
        self.plain_class: type[BaseException] | None = None

    def decide(self, attempt: int, error: Exception) -> float | None:
        """0.0 while *attempt* <= *limit* and *error* is retryable, else ``None``."""
        if attempt > self._limit:
            return None
        # Run.decide's retryable check, inlined: this is the cheapest failure path there is.
        try:
            value = getattr(error, "retryable", _MISSING)
            if value is _MISSING and type(error) is not self.plain_class:
                value = retryable_slow(error, self)
        except Exception as failure:  # noqa: BLE001 - a broken property: give up with `error`
            value = unreadable_retryable(error, failure)
        return None if value is False else 0.0

    @property
    def clock(self) -> Clock:
        """The active clock (never waited on: every delay is 0)."""
        return current_clock()

    def starting(self, attempt: int, previous: Exception) -> None:
        """Nothing to announce: nobody listens."""


# --- functions -------------------------------------------------------------------------------


def call_sync(
    policy: Policy,
    fn: Callable[..., R],
    error: Exception,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> R:
    """
    Go on retrying ``fn(*args, **kwargs)`` after its first attempt failed with *error*.

    If a later attempt returns a coroutine (*fn* is a plain function around an ``async def``),
    the rest of the call is async: the coroutine that finishes it is returned.
    """
    on: ErrorTypes = policy.on  # type: ignore[assignment] # functions always have `on`
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
            result = fn(*args, **kwargs)
        except on as next_error:
            error = next_error
        else:
            if type(result) is CoroutineType:
                coroutine = cast("Any", result)
                return resume_async(policy, fn, coroutine, args, kwargs, run, attempt)  # type: ignore[return-value]
            return result


async def call_async(  # noqa: PLR0917 - the failure path's hot call: positional is cheapest
    policy: Policy,
    fn: Callable[..., Awaitable[R]],
    error: Exception,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run: Run | Counting | None = None,
    attempt: int = 1,
) -> R:
    """The ``async`` form of ``call_sync``: waits with ``clock.sleep_async``."""
    on: ErrorTypes = policy.on  # type: ignore[assignment] # functions always have `on`
    if run is None:
        run = policy.start()
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


async def resume_async(  # noqa: PLR0917 - internal, mirrors call_async
    policy: Policy,
    fn: Callable[..., Any],
    awaitable: Awaitable[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run: Run | Counting | None = None,
    attempt: int = 1,
) -> Any:
    """
    Await *awaitable*, the result of attempt *attempt* of a plain function that returned a
    coroutine (a lambda or ``partial`` around an ``async def``), and retry from there.
    """
    on: ErrorTypes = policy.on  # type: ignore[assignment] # functions always have `on`
    try:
        return await awaitable
    except on as error:
        failed = error
    try:
        return await call_async(policy, fn, failed, args, kwargs, run, attempt)
    finally:
        del failed  # the traceback holds this frame


# --- effects ---------------------------------------------------------------------------------


def _retried_error(result: Result[A, E], on: ErrorTypes | None) -> E | None:
    """The error of a failed *result* that *on* lets through, else ``None``."""
    # Imported here: `returns` is needed only once effects run, not to import effects.
    from returns.result import Failure  # noqa: PLC0415

    if not isinstance(result, Failure):
        return None
    error: E = result.failure()
    if on is not None and not isinstance(error, on):
        return None
    return error


def effect_sync(policy: Policy, thunk: Callable[[], Result[A, E]]) -> Result[A, E]:
    """Run *thunk* under *policy*; return its first success or its last failure."""
    policy.record_first_attempt()
    result = thunk()
    error = _retried_error(result, policy.on)
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
        error = _retried_error(result, policy.on)
        if error is None:
            return result


async def effect_async(
    policy: Policy, thunk: Callable[[], Coroutine[Any, Any, Result[A, E]]]
) -> Result[A, E]:
    """The ``async`` form of ``effect_sync``."""
    policy.record_first_attempt()
    result = await thunk()
    error = _retried_error(result, policy.on)
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
        error = _retried_error(result, policy.on)
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

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._on: ErrorTypes = policy.on  # type: ignore[assignment] # attempts() checks it
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

    __slots__ = ("_policy",)

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    def __iter__(self) -> _SyncLoop:
        return _SyncLoop(self._policy)

    def __aiter__(self) -> _AsyncLoop:
        return _AsyncLoop(self._policy)
