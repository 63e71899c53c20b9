"""
The ``Schedule`` base class, its step contract, and pure simulation (``delays``, ``simulate``).

A schedule never sleeps and never reads a clock: the driver hands it the time and a random source.
Combinator methods live here so they chain (``exponential(1).jittered().times(4)``); the classes
they build live in ``_combinators``.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, Generic, Protocol, TypeAlias, TypeVar, overload, runtime_checkable

from schedules._durations import DurationLike, shown, to_seconds
from schedules._frozen import frozen

__all__ = [
    "RandomLike",
    "Schedule",
    "ScheduleLike",
    "SimulatedStep",
    "StepInfo",
    "as_schedule",
    "simulate",
]

# The design calls them In and Out; the variance is in the declaration.
In = TypeVar("In", contravariant=True)  # noqa: PLC0105
Out = TypeVar("Out", covariant=True)  # noqa: PLC0105
I_co = TypeVar("I_co", covariant=True)
O_co = TypeVar("O_co", covariant=True)
I2 = TypeVar("I2")
O2 = TypeVar("O2")
# The output of a schedule that accepts any input: such a schedule narrows its input to what a
# predicate, callback or other schedule given to it accepts (`exponential(1).while_input(p)`
# with `p(error: ApiRequestError)` is a Schedule[ApiRequestError, float]).
O3 = TypeVar("O3")

_DELAYS_LIMIT: Final = 10_000


class RandomLike(Protocol):
    """Anything with ``random() -> float`` in ``[0, 1)``, such as ``random.Random``."""

    def random(self) -> float:
        """Return the next random float in ``[0, 1)``."""
        ...


@runtime_checkable
class ScheduleLike(Protocol[In, Out]):
    """
    The step contract, for schedules written without subclassing ``Schedule``.

    Anything with these two methods can drive retries (``effects.retry`` accepts it) and be
    simulated; ``as_schedule`` gives it the combinators. ``isinstance(x, ScheduleLike)`` checks
    that both methods exist (not their signatures).
    """

    def initial(self) -> Any:
        """Return the state before the first step: plain, JSON-able data."""
        ...

    def step(
        self,
        now: float,
        input: In,  # noqa: A002 - the contract's name for it
        state: Any,
        rng: RandomLike,
    ) -> tuple[Any, Out, float | None]:
        """Return ``(state, output, delay)``: delay in seconds, or ``None`` to stop."""
        ...


@frozen
class StepInfo(Generic[I_co, O_co]):
    """
    What a ``modify_delay`` or ``add_delay`` function sees about the step being decided.

    Attributes:
        attempt: 1-based number of the attempt that just failed.
        input: The schedule's input for this step (usually the error).
        output: The wrapped schedule's output for this step.
        delay: The wrapped schedule's delay in seconds.
        elapsed: Seconds since the schedule's first step (0 on the first step).
        now: The driver's time of this step, in seconds.
    """

    attempt: int
    input: I_co
    output: O_co
    delay: float
    elapsed: float
    now: float


@frozen
class SimulatedStep(Generic[I_co, O_co]):
    """
    One step of ``simulate``: attempt *attempt* started at *started* and failed at *now*.

    Attributes:
        attempt: 1-based number of the attempt that failed.
        now: Seconds at which it failed: when the schedule was stepped.
        input: The input given to the schedule.
        output: The schedule's output.
        delay: Seconds to wait before the next attempt, or ``None``: the schedule is done.
        started: Seconds at which the attempt started (``now`` minus its attempt time).
    """

    attempt: int
    now: float
    input: I_co
    output: O_co
    delay: float | None
    started: float


class Schedule(ABC, Generic[In, Out]):
    """
    An immutable retry policy: after each failed attempt, whether to go on and how long to wait.

    The step contract, which any subclass implements and any driver calls::

        state = schedule.initial()
        state, output, delay = schedule.step(now, input, state, rng)

    *now* is the driver's monotonic time in seconds, *input* usually the error, *rng* anything with
    ``random() -> float``. *delay* is the seconds to wait before the next attempt (finite, in
    ``[0, MAX_DELAY]``) or ``None``: stop. State is plain data (ints, floats, ``None``, tuples),
    so it survives ``json.dumps``/``json.loads``; ``step`` accepts lists where it gave tuples.

    Schedules are built by the constructors (``forever``, ``exponential``, ...) and the methods
    below; ``a | b`` is ``a.union(b)`` and ``a & b`` is ``a.intersect(b)``.

    Example:
        >>> from schedules import exponential
        >>> exponential("250ms").max_delay(1).times(4).delays()
        [0.25, 0.5, 1.0, 1.0]
    """

    __slots__ = ()

    @property
    def reads_epoch(self) -> bool:
        """
        Whether this schedule (or one it is built from) reads *now* as seconds since the Unix
        epoch: a calendar schedule such as ``cron``. A driver then passes it the wall clock
        (``time.time()``) instead of a monotonic one; others measure only differences of *now*.

        Example:
            >>> from schedules import cron, exponential
            >>> (cron("0 3 * * *") & exponential(1)).times(3).reads_epoch
            True
            >>> exponential(1).reads_epoch
            False
        """
        for name in ("inner", "left", "right", "first", "second", "schedule"):
            part = getattr(self, name, None)
            if isinstance(part, Schedule) and part.reads_epoch:
                return True
        return False

    @abstractmethod
    def initial(self) -> Any:
        """
        Return the state before the first step: plain, JSON-able data.

        Example:
            >>> from schedules import exponential
            >>> exponential(1).times(3).initial()
            (0, 0)
        """

    @abstractmethod
    def step(
        self,
        now: float,
        input: In,  # noqa: A002 - the contract's name for it
        state: Any,
        rng: RandomLike,
    ) -> tuple[Any, Out, float | None]:
        """
        Decide after a failed attempt.

        Time-based schedules measure from their first step, the end of the first attempt.
        Every schedule of this package refuses a *now* that is not a finite number, whether or
        not it reads the time, so a broken clock is found at its first reading.

        Args:
            now: The driver's monotonic time, in seconds: a finite ``int`` or ``float``.
            input: The step's input, usually the error.
            state: The state from ``initial()`` or the previous step (JSON-decoded form accepted:
                lists where it gave tuples).
            rng: Random source for jitter, anything with ``random() -> float`` in ``[0, 1)``.

        Returns:
            ``(state, output, delay)``: the next state, the output, and the seconds to wait
            before the next attempt (finite, in ``[0, MAX_DELAY]``), or ``None`` to stop.

        Example:
            >>> import random
            >>> from schedules import exponential
            >>> policy, rng = exponential(1).times(1), random.Random(0)
            >>> state, output, delay = policy.step(0.0, None, policy.initial(), rng)
            >>> state, output, delay
            ((1, 1), 1.0, 1.0)
            >>> policy.step(1.0, None, state, rng)
            ((2, 2), 2.0, None)
            >>> policy.step(float("nan"), None, state, rng)
            Traceback (most recent call last):
            ...
            ValueError: now must be a finite number of seconds, got nan

        Raises:
            ValueError: If *now* is NaN, infinite, or an int too large for a float.
            TypeError: If *now* is not an ``int`` or ``float`` (``None``, a string, ...).
        """

    # -- delay shaping ---------------------------------------------------------------------------

    def jittered(self, min: float = 0.8, max: float = 1.2) -> Schedule[In, Out]:  # noqa: A002
        """
        Scale each delay by a random factor drawn uniformly from ``[min, max)``.

        A delay *d* becomes a value in ``[min * d, max * d)``, clamped to ``MAX_DELAY``. Outputs
        are unchanged. ``min == max`` scales by exactly that factor.

        Args:
            min: Lowest factor (a plain number, not a duration), >= 0. Default 0.8.
            max: Highest factor (exclusive), >= *min*. Default 1.2.

        Raises:
            ValueError: If a bound is negative, NaN or infinite, or *min* > *max*.
            TypeError: If a bound is not a number.

        Example:
            >>> from schedules import spaced
            >>> [round(d, 3) for d in spaced(1).jittered().delays(3, seed=7)]
            [0.93, 0.86, 1.06]
        """
        low, high = check_factor(min, "min"), check_factor(max, "max")
        if low > high:
            msg = f"jittered needs min <= max, got min={shown(min)}, max={shown(max)}"
            raise ValueError(msg)
        return _c.Jittered(self, low, high)

    @overload
    def modify_delay(self, f: Callable[[StepInfo[In, Out]], float]) -> Schedule[In, Out]: ...
    @overload
    def modify_delay(
        self: Schedule[object, O3], f: Callable[[StepInfo[I2, O3]], float]
    ) -> Schedule[I2, O3]: ...
    def modify_delay(self, f: Callable[[StepInfo[Any, Any]], float]) -> Schedule[Any, Any]:
        """
        Replace each delay by ``f(info)`` seconds.

        *f* is called only when the schedule would continue. Its result is clamped like every
        computed delay: negative (``-inf`` included) becomes 0, above ``MAX_DELAY`` (``inf``
        included) becomes ``MAX_DELAY``.

        Args:
            f: A function of ``StepInfo`` (attempt, input, output, delay, elapsed, now)
                returning the new delay in seconds, as an ``int`` or ``float``.

        Raises:
            ValueError: When stepping, if *f* returns NaN (a bug in *f*, not a delay).
            TypeError: When stepping, if *f* returns something other than a number.

        Example:
            >>> from schedules import spaced
            >>> spaced(1).modify_delay(lambda info: info.delay * info.attempt).delays(3)
            [1.0, 2.0, 3.0]
            >>> spaced(1).modify_delay(lambda info: -5).delays(1)
            [0.0]
        """
        return _c.ModifyDelay(self, f)

    @overload
    def add_delay(
        self, amount: DurationLike | Callable[[StepInfo[In, Out]], float]
    ) -> Schedule[In, Out]: ...
    @overload
    def add_delay(
        self: Schedule[object, O3], amount: Callable[[StepInfo[I2, O3]], float]
    ) -> Schedule[I2, O3]: ...
    def add_delay(
        self, amount: DurationLike | Callable[[StepInfo[Any, Any]], float]
    ) -> Schedule[Any, Any]:
        """
        Add a fixed duration, or ``f(info)`` seconds, to each delay (clamped to ``MAX_DELAY``).

        A function is called only when the schedule would continue; its result is clamped to
        ``[0, MAX_DELAY]`` before it is added, so a negative result adds nothing.

        Args:
            amount: A duration (seconds, a ``timedelta`` or a string like ``"500ms"``), or a
                function of ``StepInfo`` returning seconds as an ``int`` or ``float``.

        Raises:
            ValueError: If *amount* is a negative, NaN, infinite or unparseable duration; when
                stepping, if the function returns NaN.
            TypeError: If *amount* is neither a duration nor callable; when stepping, if the
                function returns something other than a number.

        Example:
            >>> from schedules import exponential
            >>> exponential(1).add_delay("500ms").delays(3)
            [1.5, 2.5, 4.5]
            >>> exponential(1).add_delay(lambda info: info.attempt * 10).delays(3)
            [11.0, 22.0, 34.0]
        """
        if callable(amount):
            return _c.AddDelayFn(self, amount)
        return _c.AddDelay(self, to_seconds(amount, name="amount"))

    def max_delay(self, limit: DurationLike) -> Schedule[In, Out]:
        """
        Cap each delay at *limit*; outputs are unchanged.

        Args:
            limit: The longest wait: seconds, a ``timedelta`` or a string like ``"4s"``.

        Raises:
            ValueError: If *limit* is a negative, NaN, infinite or unparseable duration.

        Example:
            >>> from schedules import exponential
            >>> exponential(1).max_delay("3s").delays(4)
            [1.0, 2.0, 3.0, 3.0]
        """
        return _c.MaxDelay(self, to_seconds(limit, name="limit"))

    # -- stopping --------------------------------------------------------------------------------

    def times(self, n: int) -> Schedule[In, Out]:
        """
        Stop after at most *n* recurrences (retries; the first attempt is not counted).

        ``times(3)`` allows 4 attempts in all; ``times(0)`` stops at the first step. Its delays
        are exactly those of ``self & recurs(n)`` in every composition: every step counts, also
        one where this schedule stops but an enclosing union goes on.

        Args:
            n: The most recurrences, >= 0.

        Raises:
            ValueError: If *n* < 0.
            TypeError: If *n* is not an ``int`` (``bool`` included).

        Example:
            >>> from schedules import recurs, spaced
            >>> spaced(1).times(2).delays()
            [1.0, 1.0]
            >>> bounded, recurring = spaced(1).times(2), spaced(1) & recurs(2)
            >>> (bounded | spaced(3)).delays(4) == (recurring | spaced(3)).delays(4)
            True
        """
        return _c.Times(self, check_count(n, "n"))

    def within(self, limit: DurationLike) -> Schedule[In, Out]:
        """
        Stop rather than start a wait that would end more than *limit* after the first step.

        The first step is the end of the first attempt; time spent in attempts counts. Unlike
        Effect's ``upTo``, the last wait never overshoots *limit*; a wait ending exactly at
        *limit* is allowed. The comparison is made in whole milliseconds (both sides rounded,
        halves up), as Effect's millisecond clock makes it, so float error never decides it:
        ``spaced(0.1).within(0.3)`` waits three times, however large the clock's readings.

        Args:
            limit: The time budget: seconds, a ``timedelta`` or a string like ``"1 minute"``.

        Raises:
            ValueError: If *limit* is a negative, NaN, infinite or unparseable duration.

        Example:
            >>> from schedules import exponential
            >>> exponential(1).within(10).delays()
            [1.0, 2.0, 4.0]
        """
        return _c.Within(self, to_seconds(limit, name="limit"))

    @overload
    def while_input(self, p: Callable[[In], bool]) -> Schedule[In, Out]: ...
    @overload
    def while_input(self: Schedule[object, O3], p: Callable[[I2], bool]) -> Schedule[I2, O3]: ...
    def while_input(self, p: Callable[[Any], bool]) -> Schedule[Any, Any]:
        """
        Continue only while ``p(input)`` is true (checked only when the schedule would continue).

        Args:
            p: A predicate on the step's input (usually the error).

        Example:
            >>> from schedules import forever
            >>> forever().while_input(lambda n: n < 2).delays(5, input=1)
            [0.0, 0.0, 0.0, 0.0, 0.0]
            >>> forever().while_input(lambda n: n < 2).delays(5, input=3)
            []
        """
        return _c.InputCheck(self, p, keep=True)

    @overload
    def until_input(self, p: Callable[[In], bool]) -> Schedule[In, Out]: ...
    @overload
    def until_input(self: Schedule[object, O3], p: Callable[[I2], bool]) -> Schedule[I2, O3]: ...
    def until_input(self, p: Callable[[Any], bool]) -> Schedule[Any, Any]:
        """
        Continue until ``p(input)`` is true (checked only when the schedule would continue).

        Args:
            p: A predicate on the step's input (usually the error); true stops.

        Example:
            >>> from schedules import forever
            >>> forever().until_input(lambda e: isinstance(e, KeyError)).delays(2, input=KeyError())
            []
        """
        return _c.InputCheck(self, p, keep=False)

    def while_output(self, p: Callable[[Out], bool]) -> Schedule[In, Out]:
        """
        Continue only while ``p(output)`` is true (checked only when the schedule would continue).

        Args:
            p: A predicate on the schedule's output.

        Example:
            >>> from schedules import exponential
            >>> exponential(1).while_output(lambda d: d < 5).delays()
            [1.0, 2.0, 4.0]
        """
        return _c.OutputCheck(self, p, keep=True)

    def until_output(self, p: Callable[[Out], bool]) -> Schedule[In, Out]:
        """
        Continue until ``p(output)`` is true (checked only when the schedule would continue).

        Args:
            p: A predicate on the schedule's output; true stops.

        Example:
            >>> from schedules import forever
            >>> forever().until_output(lambda count: count == 3).delays()
            [0.0, 0.0, 0.0]
        """
        return _c.OutputCheck(self, p, keep=False)

    # -- combining -------------------------------------------------------------------------------

    @overload
    def union(self, other: Schedule[In, O2]) -> Schedule[In, tuple[Out, O2]]: ...
    @overload
    def union(
        self: Schedule[object, O3], other: Schedule[I2, O2]
    ) -> Schedule[I2, tuple[O3, O2]]: ...
    def union(self, other: Schedule[Any, Any]) -> Schedule[Any, tuple[Any, Any]]:
        """
        Continue while either schedule does, with the shorter delay of those continuing.

        Both sides are stepped every time, even after one has stopped. The output is
        ``(self's output, other's output)``. ``a | b`` is the same.

        Args:
            other: The schedule to combine with, taking the same input.

        Example:
            >>> from schedules import exponential, spaced
            >>> (exponential(1).times(3) | spaced(3).times(4)).delays()
            [1.0, 2.0, 3.0, 3.0]
        """
        return _c.Union(self, other)

    @overload
    def intersect(self, other: Schedule[In, O2]) -> Schedule[In, tuple[Out, O2]]: ...
    @overload
    def intersect(
        self: Schedule[object, O3], other: Schedule[I2, O2]
    ) -> Schedule[I2, tuple[O3, O2]]: ...
    def intersect(self, other: Schedule[Any, Any]) -> Schedule[Any, tuple[Any, Any]]:
        """
        Continue while both schedules do, with the longer delay.

        Both sides are stepped every time. The output is ``(self's output, other's output)``.
        ``a & b`` is the same.

        Args:
            other: The schedule to combine with, taking the same input.

        Example:
            >>> from schedules import exponential, recurs, spaced
            >>> (exponential(1) & spaced(3) & recurs(4)).delays()
            [3.0, 3.0, 4.0, 8.0]
        """
        return _c.Intersect(self, other)

    @overload
    def __or__(self, other: Schedule[In, O2]) -> Schedule[In, tuple[Out, O2]]: ...
    @overload
    def __or__(
        self: Schedule[object, O3], other: Schedule[I2, O2]
    ) -> Schedule[I2, tuple[O3, O2]]: ...
    def __or__(self, other: Schedule[Any, Any]) -> Schedule[Any, tuple[Any, Any]]:
        """``a | b`` is ``a.union(b)``."""
        return _c.Union(self, other)

    @overload
    def __and__(self, other: Schedule[In, O2]) -> Schedule[In, tuple[Out, O2]]: ...
    @overload
    def __and__(
        self: Schedule[object, O3], other: Schedule[I2, O2]
    ) -> Schedule[I2, tuple[O3, O2]]: ...
    def __and__(self, other: Schedule[Any, Any]) -> Schedule[Any, tuple[Any, Any]]:
        """``a & b`` is ``a.intersect(b)``."""
        return _c.Intersect(self, other)

    @overload
    def and_then(self, other: Schedule[In, O2]) -> Schedule[In, Out | O2]: ...
    @overload
    def and_then(self: Schedule[object, O3], other: Schedule[I2, O2]) -> Schedule[I2, O3 | O2]: ...
    def and_then(self, other: Schedule[Any, Any]) -> Schedule[Any, Any]:
        """
        Run *other* once this schedule is done; the step that ends this one is *other*'s first.

        The output is this schedule's output, then *other*'s (as Effect's ``andThen``).

        Args:
            other: The schedule that takes over, taking the same input.

        Example:
            >>> from schedules import recurs, simulate, spaced
            >>> recurs(2).and_then(spaced(5).times(2)).delays()
            [0.0, 0.0, 5.0, 5.0]
            >>> [s.output for s in simulate(recurs(1).and_then(spaced(5).times(1)), "abcd")]
            [0, 0, 1]
        """
        return _c.AndThen(self, other)

    # -- outputs and side effects ----------------------------------------------------------------

    def map(self, f: Callable[[Out], O2]) -> Schedule[In, O2]:
        """
        Transform each output with *f*; delays are unchanged.

        Args:
            f: A function of the output, called on every step (the stopping one included).

        Example:
            >>> from schedules import exponential, simulate
            >>> [s.output for s in simulate(exponential(1).map(lambda d: d * 1000), [0, 0])]
            [1000.0, 2000.0]
        """
        return _c.Map(self, f)

    @overload
    def tap_input(self, f: Callable[[In], object]) -> Schedule[In, Out]: ...
    @overload
    def tap_input(self: Schedule[object, O3], f: Callable[[I2], object]) -> Schedule[I2, O3]: ...
    def tap_input(self, f: Callable[[Any], object]) -> Schedule[Any, Any]:
        """
        Call ``f(input)`` on every step, for side effects (logging, metrics).

        Args:
            f: Called with each input, the stopping step's included; its result is ignored.

        Example:
            >>> from schedules import recurs
            >>> seen = []
            >>> recurs(2).tap_input(seen.append).delays(input="boom")
            [0.0, 0.0]
            >>> seen
            ['boom', 'boom', 'boom']
        """
        return _c.TapInput(self, f)

    def tap_output(self, f: Callable[[Out], object]) -> Schedule[In, Out]:
        """
        Call ``f(output)`` on every step, for side effects.

        Args:
            f: Called with each output, the stopping step's included; its result is ignored.

        Example:
            >>> from schedules import recurs
            >>> seen = []
            >>> recurs(2).tap_output(seen.append).delays()
            [0.0, 0.0]
            >>> seen
            [0, 1, 2]
        """
        return _c.TapOutput(self, f)

    def reset_after(self, duration: DurationLike) -> Schedule[In, Out]:
        """
        Start over from the initial state once *duration* has passed since the first step.

        The check happens before a step: a step at least *duration* after the first step of the
        current run is taken from ``initial()`` and becomes the first step of a new run. This
        gives Effect's ``resetAfter`` delays without stepping the stale state first. "At least"
        is decided in whole milliseconds, as ``within`` decides, so eight steps of
        ``spaced(0.1)`` reach ``reset_after(0.8)`` whatever float error their sum carries.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"30s"``.

        Raises:
            ValueError: If *duration* is a negative, NaN, infinite or unparseable duration.

        Example:
            >>> from schedules import exponential, simulate
            >>> [s.delay for s in simulate(exponential(1).reset_after(5), [0] * 5)]
            [1.0, 2.0, 4.0, 1.0, 2.0]
        """
        return _c.ResetAfter(self, to_seconds(duration, name="duration"))

    # -- simulation ------------------------------------------------------------------------------

    def delays(
        self,
        n: int | None = None,
        *,
        input: In | None = None,  # noqa: A002 - mirrors step()'s argument
        seed: int | None = None,
    ) -> list[float]:
        """
        Return the first *n* delays in seconds, every attempt taking no time.

        The first step is at time 0; each next step comes right after the previous delay
        (``simulate`` lets attempts take time).

        Args:
            n: How many delays at most; ``None`` (the default) means until the schedule stops.
            input: The input given to every step (default ``None``).
            seed: Seed for ``random.Random``; the same seed gives the same delays. ``None``
                (the default) seeds from the system.

        Raises:
            ValueError: If *n* is negative, or *n* is ``None`` and the schedule has not stopped
                after 10,000 steps (an infinite schedule: pass *n* or add ``times``).
            TypeError: If *n* is neither ``None`` nor an ``int``.

        Example:
            >>> from schedules import exponential
            >>> exponential("250ms").delays(4)
            [0.25, 0.5, 1.0, 2.0]
        """
        limit = _DELAYS_LIMIT if n is None else check_count(n, "n")
        # `input` may be None only when the caller passes nothing; schedules of `object` accept it.
        given: Any = input
        result = [
            delay
            for *_, delay in timeline(self, itertools.repeat(given, limit + 1), _seeded(seed))
            if delay is not None
        ]
        if len(result) > limit:
            if n is None:
                msg = (
                    f"delays() without n: {self!r} did not stop within {_DELAYS_LIMIT} steps; "
                    "pass n or bound the schedule with times()"
                )
                raise ValueError(msg)
            del result[limit:]
        return result


AttemptTime: TypeAlias = "DurationLike | Callable[[int], DurationLike]"
"""How long each attempt takes: a duration, or a function of the 1-based attempt number."""


def _seeded(seed: int | None) -> RandomLike:
    # Imported here: `random` is needed only to simulate, and `import schedules` stays light.
    import random  # noqa: PLC0415

    return random.Random(seed)


def timeline(
    schedule: ScheduleLike[Any, Any],
    inputs: Iterable[Any],
    rng: RandomLike,
    *,
    start: float = 0.0,
    took: Callable[[int], float] | None = None,
) -> Iterator[tuple[int, float, float, Any, Any, float | None]]:
    """
    The one simulation loop: ``(attempt, started, now, input, output, delay)`` per step.

    Attempt *k* starts at *started*, takes ``took(k)`` seconds (none when *took* is None) and
    fails at *now*, when the schedule is stepped; the next starts after the delay. Stops after
    the step that returns ``None`` or when *inputs* runs out. ``delays``, ``simulate`` and the
    ``show`` command all run this, so they cannot disagree.
    """
    state = schedule.initial()
    step = schedule.step
    started = start
    for attempt, value in enumerate(inputs, start=1):
        now = started if took is None else started + took(attempt)
        state, output, delay = step(now, value, state, rng)
        yield attempt, started, now, value, output, delay
        if delay is None:
            return
        started = now + delay


def _finite_start(start: object) -> float:
    # Checked at run time too: `start` often comes from untyped callers (a CLI, a config file).
    if isinstance(start, bool) or not isinstance(start, int | float):
        msg = f"start must be a number of seconds, got {shown(start)}"
        raise TypeError(msg)
    try:
        now = float(start)
    except OverflowError:  # an int too large for a float
        now = math.inf
    if not math.isfinite(now):
        msg = f"start must be a finite number of seconds, got {shown(start)}"
        raise ValueError(msg)
    return now


def _attempt_times(attempt_time: AttemptTime) -> Callable[[int], float] | None:
    if callable(attempt_time):
        function = attempt_time

        def took(attempt: int) -> float:
            return to_seconds(function(attempt), name=f"attempt_time({attempt})")

        return took
    seconds = to_seconds(attempt_time, name="attempt_time")
    return None if seconds == 0.0 else lambda _: seconds


def simulate(
    schedule: ScheduleLike[I2, O2],
    inputs: Iterable[I2],
    *,
    seed: int | None = None,
    start: float = 0.0,
    attempt_time: AttemptTime = 0.0,
    rng: RandomLike | None = None,
) -> list[SimulatedStep[I2, O2]]:
    """
    Run *schedule* over a timeline of failed attempts, one per input, and record each step.

    Attempt 1 starts at *start*; each attempt takes *attempt_time* and then fails with its
    input, which is when the schedule is stepped (``now``); the next attempt starts after the
    delay. Stops after the step that returns ``None`` or when *inputs* runs out.

    Args:
        schedule: The schedule to run: a ``Schedule`` or anything with its step contract.
        inputs: One input per failed attempt, in order.
        seed: Seed for ``random.Random``; the same seed gives the same steps. ``None`` (the
            default) seeds from the system.
        start: When the first attempt starts, in seconds (default 0.0); any finite number,
            such as a ``time.monotonic()`` reading.
        attempt_time: How long each attempt takes: a duration (seconds, a ``timedelta`` or a
            string like ``"300ms"``; default 0: attempts take no time) or a function of the
            1-based attempt number returning one.
        rng: A random source (``random() -> float`` in ``[0, 1)``) to use instead of a
            seeded ``random.Random``; give *seed* or *rng*, not both.

    Raises:
        ValueError: If *start* is NaN or infinite, an attempt time is not a valid duration,
            or both *seed* and *rng* are given.
        TypeError: If *start* is not a number.

    Example:
        >>> from schedules import fixed, recurs, spaced
        >>> for s in simulate(spaced(2) & recurs(2), ["a", "b", "c"], start=10.0):
        ...     print(s.attempt, s.now, s.input, s.output, s.delay)
        1 10.0 a (0, 0) 2.0
        2 12.0 b (1, 1) 2.0
        3 14.0 c (2, 2) None

        Attempts of 0.3 s under ``fixed(1)`` start on the grid; attempts of 1.5 s overrun it:

        >>> [s.started for s in simulate(fixed(1), [None] * 4, attempt_time=0.3)]
        [0.0, 1.3, 2.3, 3.3]
        >>> [s.started for s in simulate(fixed(1), [None] * 4, attempt_time="1.5s")]
        [0.0, 2.5, 4.0, 5.5]
    """
    now = _finite_start(start)
    if rng is not None and seed is not None:
        msg = f"simulate() takes seed or rng, not both (got seed={seed!r} and rng={rng!r})"
        raise ValueError(msg)
    source = _seeded(seed) if rng is None else rng
    return [
        SimulatedStep(attempt, now_, value, output, delay, started)
        for attempt, started, now_, value, output, delay in timeline(
            schedule, inputs, source, start=now, took=_attempt_times(attempt_time)
        )
    ]


def as_schedule(schedule: ScheduleLike[I2, O2]) -> Schedule[I2, O2]:
    """
    *schedule* as a ``Schedule``, so the combinators apply to a hand-written step contract.

    A ``Schedule`` is returned as it is; anything else with ``initial()`` and ``step()`` is
    wrapped in a schedule with the same states, outputs, delays and ``repr``.

    Raises:
        TypeError: If *schedule* has no ``initial`` or ``step`` method.

    Example:
        >>> class EveryTwoSeconds:
        ...     def initial(self):
        ...         return 0
        ...     def step(self, now, input, state, rng):
        ...         return state + 1, state, 2.0
        ...     def __repr__(self):
        ...         return "EveryTwoSeconds()"
        >>> policy = as_schedule(EveryTwoSeconds()).times(3)
        >>> policy, policy.delays()
        (EveryTwoSeconds().times(3), [2.0, 2.0, 2.0])
    """
    if isinstance(schedule, Schedule):
        return schedule
    if not isinstance(schedule, ScheduleLike):  # pyright: ignore[reportUnnecessaryIsInstance]
        msg = (
            "a schedule must be a schedules.Schedule or have initial() and "
            f"step(now, input, state, rng) methods, got {schedule!r}"
        )
        raise TypeError(msg)
    return _c.Adapted(schedule)


def check_factor(value: object, name: str, *, positive: bool = False) -> float:
    """Return *value* as a float if it is a finite number >= 0 (> 0 if *positive*), else raise."""
    bound = "> 0" if positive else ">= 0"
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number {bound}, got {shown(value)}"
        raise TypeError(msg)
    if not (0.0 <= value < math.inf) or (positive and value == 0.0):
        msg = f"{name} must be a finite number {bound}, got {shown(value)}"
        raise ValueError(msg)
    try:
        return float(value) + 0.0
    except OverflowError:  # an int too large for a float
        msg = f"{name} must be a finite number {bound}, got {shown(value)}"
        raise ValueError(msg) from None


def bad_now(now: object) -> Exception:
    """
    The error for a ``now`` that a step refuses: a ``ValueError`` for NaN, an infinity or an
    int no float holds, a ``TypeError`` for anything that is not a number.

    Every step checks its ``now`` inline, with the cheapest test there is (``now * 0.0`` is 0
    only for a finite number), and calls this only to build the error.
    """
    if isinstance(now, int | float) and not isinstance(now, bool):
        return ValueError(f"now must be a finite number of seconds, got {shown(now)}")
    return TypeError(f"now must be a number of seconds (int or float), got {shown(now)}")


def check_count(value: object, name: str) -> int:
    """Return *value* if it is an int >= 0, else raise naming *name*."""
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an int >= 0, got {shown(value)}"
        raise TypeError(msg)
    if value < 0:
        msg = f"{name} must be an int >= 0, got {shown(value)}"
        raise ValueError(msg)
    return value


# The combinator classes subclass Schedule, so they can only be imported once it exists.
from schedules import _combinators as _c  # noqa: E402
