"""The basic schedules: counts, fixed and growing delays, explicit delays, elapsed time."""

# ruff: noqa: A002 - `input` is the step contract's argument name; overrides must keep it.

from __future__ import annotations

import math
import sys
from typing import Any

from schedules._durations import MAX_DELAY, DurationLike, format_seconds, shown, to_seconds
from schedules._frozen import field, frozen
from schedules._schedule import RandomLike, Schedule, bad_now, check_count, check_factor

__all__ = [
    "decorrelated",
    "elapsed",
    "exponential",
    "fibonacci",
    "fixed",
    "forever",
    "from_delays",
    "linear",
    "once",
    "recurs",
    "spaced",
    "stop",
]


@frozen(repr=False)
class _Forever(Schedule[object, int]):
    def initial(self) -> Any:
        return 0

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, int, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        return state + 1, state, 0.0

    def __repr__(self) -> str:
        return "forever()"


@frozen(repr=False)
class _Recurs(Schedule[object, int]):
    n: int

    def initial(self) -> Any:
        return 0

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, int, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        # The count goes on after the stop, as Effect's `whileOutput(forever, n => n < times)`
        # does: in a union whose other side continues, the output keeps counting the steps.
        return state + 1, state, 0.0 if state < self.n else None

    def __repr__(self) -> str:
        return f"recurs({self.n})"


@frozen(repr=False)
class _Spaced(Schedule[object, int]):
    interval: float

    def initial(self) -> Any:
        return 0

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, int, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        interval = self.interval
        return state + 1, state, interval if interval < MAX_DELAY else MAX_DELAY

    def __repr__(self) -> str:
        return f"spaced({format_seconds(self.interval)})"


@frozen(repr=False)
class _Fixed(Schedule[object, int]):
    """State ``(count, planned start of the attempt that just ran, or None)``.

    The planned start is always a grid point, so the grid is measured from it rather than from
    the first step: float error cannot pile up over many steps.
    """

    interval: float

    def initial(self) -> Any:
        return (0, None)

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, int, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        count, planned = state
        interval = self.interval
        if planned is None or not interval:
            delay = interval
        else:
            # Within float error of a grid point counts as on it: wait a whole interval, never ~0.
            slack = interval * 1e-9 + 4 * math.ulp(now)
            if now - planned > interval + slack:
                # The attempt overran its slot: run again at once; the grid restarts here.
                delay = 0.0
            else:
                delay = interval - (now - planned) % interval
                # `not >` also catches NaN: a clock that jumped back by more than a float holds
                # (now - planned = -inf) waits a whole interval.
                if not delay > slack:
                    delay = interval
        delay = MAX_DELAY if delay > MAX_DELAY else delay
        return (count + 1, now + delay), count, delay

    def __repr__(self) -> str:
        return f"fixed({format_seconds(self.interval)})"


@frozen(repr=False)
class _Exponential(Schedule[object, float]):
    base: float
    factor: float
    # First step index whose delay surely reaches MAX_DELAY, so huge indexes never call pow.
    _saturated_at: int = field(init=False, eq=False)

    def __post_init__(self) -> None:
        if self.base > 0.0 and self.factor > 1.0:
            steps = (math.log(MAX_DELAY) - math.log(self.base)) / math.log(self.factor)
            limit = max(0, math.ceil(steps) + 1)
        else:
            limit = sys.maxsize
        object.__setattr__(self, "_saturated_at", limit)

    def initial(self) -> Any:
        return 0

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, float, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        if state >= self._saturated_at:
            return state + 1, MAX_DELAY, MAX_DELAY
        try:
            delay = self.base * self.factor**state
        except OverflowError:
            # Only a base of 0 with factor > 1 or a denormal base reach here.
            delay = MAX_DELAY if self.base else 0.0
        delay = MAX_DELAY if delay > MAX_DELAY else delay
        return state + 1, delay, delay

    def __repr__(self) -> str:
        base = format_seconds(self.base)
        if self.factor == 2.0:
            return f"exponential({base})"
        return f"exponential({base}, factor={format_seconds(self.factor)})"


@frozen(repr=False)
class _Fibonacci(Schedule[object, float]):
    """State ``(this delay, next delay)``, each saturating at ``MAX_DELAY``."""

    one: float

    def initial(self) -> Any:
        one = min(self.one, MAX_DELAY)
        return (one, one)

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, float, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        delay, following = state
        after = delay + following
        return (following, after if after < MAX_DELAY else MAX_DELAY), delay, delay

    def __repr__(self) -> str:
        return f"fibonacci({format_seconds(self.one)})"


@frozen(repr=False)
class _Linear(Schedule[object, float]):
    base: float

    def initial(self) -> Any:
        return 0

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, float, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        delay = self.base * (state + 1)
        delay = MAX_DELAY if delay > MAX_DELAY else delay
        return state + 1, delay, delay

    def __repr__(self) -> str:
        return f"linear({format_seconds(self.base)})"


@frozen(repr=False)
class _FromDelays(Schedule[object, float]):
    delays_: tuple[float, ...]

    def initial(self) -> Any:
        return 0

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, float, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        index: int = state
        if index >= len(self.delays_):
            return index, 0.0, None
        delay = self.delays_[index]
        delay = MAX_DELAY if delay > MAX_DELAY else delay
        return state + 1, delay, delay

    def __repr__(self) -> str:
        return f"from_delays({', '.join(format_seconds(d) for d in self.delays_)})"


@frozen(repr=False)
class _Decorrelated(Schedule[object, float]):
    """State: the previous delay (``base`` before the first step)."""

    base: float
    cap: float

    def initial(self) -> Any:
        return min(self.base, MAX_DELAY)

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, float, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        base = self.base
        delay = base + rng.random() * (state * 3.0 - base)
        cap = self.cap if self.cap < MAX_DELAY else MAX_DELAY
        delay = cap if delay > cap else delay
        return delay, delay, delay

    def __repr__(self) -> str:
        return f"decorrelated({format_seconds(self.base)}, {format_seconds(self.cap)})"


@frozen(repr=False)
class _Elapsed(Schedule[object, float]):
    """State: the time of the first step, or ``None`` before it."""

    def initial(self) -> Any:
        return None

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, float, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        if state is None:
            return now, 0.0, 0.0
        return state, now - state, 0.0

    def __repr__(self) -> str:
        return "elapsed()"


def forever() -> Schedule[object, int]:
    """
    Recur forever with no delay; the output counts steps from 0.

    Example:
        >>> forever().delays(3)
        [0.0, 0.0, 0.0]
    """
    return _Forever()


def recurs(n: int) -> Schedule[object, int]:
    """
    Recur *n* times with no delay, then stop; ``recurs(0)`` stops at once. Outputs count from 0.

    *n* counts recurrences (retries), not the first attempt: ``recurs(2)`` allows 3 attempts.
    The step that stops outputs *n*; stepped again (inside a union whose other side goes on),
    it keeps stopping and its output keeps counting, as Effect's does.

    Args:
        n: How many recurrences, >= 0.

    Raises:
        ValueError: If *n* < 0.
        TypeError: If *n* is not an ``int`` (``bool`` included).

    Example:
        >>> recurs(2).delays(), recurs(0).delays()
        ([0.0, 0.0], [])
    """
    return _Recurs(check_count(n, "n"))


def once() -> Schedule[object, int]:
    """
    Recur once: ``recurs(1)``.

    Example:
        >>> once().delays()
        [0.0]
    """
    return _Recurs(1)


def stop() -> Schedule[object, int]:
    """
    Never recur: ``recurs(0)``.

    Example:
        >>> stop().delays()
        []
    """
    return _Recurs(0)


def spaced(interval: DurationLike) -> Schedule[object, int]:
    """
    Recur forever, waiting *interval* after each attempt; the output counts steps from 0.

    Args:
        interval: The wait: seconds, a ``timedelta`` or a string like ``"250ms"``. Values above
            ``MAX_DELAY`` are accepted and wait ``MAX_DELAY``.

    Raises:
        ValueError: If *interval* is negative, NaN, infinite or unparseable.

    Example:
        >>> spaced("1.5s").delays(3)
        [1.5, 1.5, 1.5]
    """
    return _Spaced(to_seconds(interval, name="interval"))


def fixed(interval: DurationLike) -> Schedule[object, int]:
    """
    Recur forever on a grid of *interval*, counted from the first step (the end of attempt 1).

    Each wait runs to the next grid point, so attempts start every *interval* whatever they take.
    An attempt that overran its slot is followed at once and the grid restarts there (as the
    design says; Effect keeps the old grid's phase after an overrun, which gives the same starts
    in the examples below but not after an overrun followed by short attempts). A time within
    float error of a grid point counts as on it, so a wait is never a near-0 sliver. The output
    counts steps from 0.

    Args:
        interval: Seconds, a ``timedelta`` or a string like ``"1s"``.

    Raises:
        ValueError: If *interval* is negative, NaN, infinite or unparseable.

    Example:
        Attempts of 0.3 s start at 0, 1.3, 2.3, 3.3; attempts of 1.5 s at 0, 2.5, 4.0, 5.5:

        >>> from schedules import simulate
        >>> def starts(took):
        ...     steps = simulate(fixed(1), [None] * 4, attempt_time=took)
        ...     return [round(step.started, 9) for step in steps]
        >>> starts(0.3), starts(1.5)
        ([0.0, 1.3, 2.3, 3.3], [0.0, 2.5, 4.0, 5.5])
    """
    return _Fixed(to_seconds(interval, name="interval"))


def exponential(base: DurationLike, factor: float = 2.0) -> Schedule[object, float]:
    """
    Recur forever, waiting ``base * factor ** n`` seconds before retry *n + 1*; outputs the delay.

    The first retry waits *base*. Delays saturate at ``MAX_DELAY``; there is no overflow.

    Args:
        base: Delay before the first retry: seconds, a ``timedelta`` or a string like ``"250ms"``.
        factor: Growth per retry (a plain number), finite and > 0; default 2.0. Below 1 the
            delays shrink toward 0.

    Raises:
        ValueError: If *base* is a negative, NaN, infinite or unparseable duration, or *factor*
            is <= 0, NaN or infinite.
        TypeError: If *factor* is not a number.

    Example:
        >>> exponential("250ms").delays(4)
        [0.25, 0.5, 1.0, 2.0]
        >>> exponential(0.1).delays(5000)[-1]
        2147483.647
    """
    growth = check_factor(factor, "factor", positive=True)
    return _Exponential(to_seconds(base, name="base"), growth)


def fibonacci(one: DurationLike) -> Schedule[object, float]:
    """
    Recur forever with delays *one*, *one*, 2 *one*, 3 *one*, 5 *one*, ...; outputs the delay.

    Delays saturate at ``MAX_DELAY``; there is no overflow.

    Args:
        one: The unit delay: seconds, a ``timedelta`` or a string like ``"100ms"``.

    Raises:
        ValueError: If *one* is negative, NaN, infinite or unparseable.

    Example:
        >>> fibonacci(1).delays(6)
        [1.0, 1.0, 2.0, 3.0, 5.0, 8.0]
    """
    return _Fibonacci(to_seconds(one, name="one"))


def linear(base: DurationLike) -> Schedule[object, float]:
    """
    Recur forever with delays *base*, 2 *base*, 3 *base*, ...; outputs the delay.

    Delays saturate at ``MAX_DELAY``; there is no overflow.

    Args:
        base: The first delay and the step: seconds, a ``timedelta`` or a string like ``"1s"``.

    Raises:
        ValueError: If *base* is negative, NaN, infinite or unparseable.

    Example:
        >>> linear("500ms").delays(4)
        [0.5, 1.0, 1.5, 2.0]
    """
    return _Linear(to_seconds(base, name="base"))


def from_delays(*delays: DurationLike) -> Schedule[object, float]:
    """
    Wait exactly *delays*, in order, then stop; outputs the delay (0.0 on the stopping step).

    ``from_delays()`` with no delays stops at once. Delays above ``MAX_DELAY`` wait ``MAX_DELAY``.

    Args:
        delays: Each a duration: seconds, a ``timedelta`` or a string like ``"2s"``.

    Raises:
        ValueError: If a delay is negative, NaN, infinite or unparseable; the message names it
            by position (``delays[1]``).

    Example:
        >>> from_delays(1, "2s", 0.5).delays()
        [1.0, 2.0, 0.5]
    """
    return _FromDelays(tuple(to_seconds(d, name=f"delays[{i}]") for i, d in enumerate(delays)))


def decorrelated(base: DurationLike, cap: DurationLike) -> Schedule[object, float]:
    """
    AWS "decorrelated jitter": each delay is ``min(cap, uniform(base, previous * 3))``.

    The first "previous" is *base*. Recurs forever; outputs the delay. A *base* of 0 waits 0
    forever (the formula can never leave 0).

    Args:
        base: The smallest delay: seconds, a ``timedelta`` or a string like ``"100ms"``.
        cap: The largest delay, in the same forms; must be >= *base*.

    Raises:
        ValueError: If a duration is negative, NaN, infinite or unparseable, or *cap* < *base*.

    Example:
        >>> [round(d, 3) for d in decorrelated("100ms", 1).delays(4, seed=1)]
        [0.127, 0.338, 0.798, 0.685]
    """
    low, high = to_seconds(base, name="base"), to_seconds(cap, name="cap")
    if high < low:
        msg = f"decorrelated needs cap >= base, got base={shown(base)}, cap={shown(cap)}"
        raise ValueError(msg)
    return _Decorrelated(low, high)


def elapsed() -> Schedule[object, float]:
    """
    Recur forever with no delay; outputs the seconds since the first step.

    Example:
        >>> from schedules import simulate
        >>> [s.output for s in simulate(elapsed(), [1, 2, 3], start=5.0)]
        [0.0, 0.0, 0.0]
        >>> [s.output for s in simulate(elapsed() & spaced(2), [1, 2, 3])]
        [(0.0, 0), (2.0, 1), (4.0, 2)]
    """
    return _Elapsed()
