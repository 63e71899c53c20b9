"""
The schedules that ``Schedule``'s methods build: each wraps one or two schedules.

Step methods are the hot path of every retry: they use locals, plain tuples and no attrs
construction. A wrapper that needs no state of its own passes its inner state through untouched,
so ``exponential(1).jittered().max_delay(4)`` has the same state as ``exponential(1)``.
"""

# ruff: noqa: A002 - `input` is the step contract's argument name; overrides must keep it.

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from schedules._durations import MAX_DELAY, format_seconds, shown, whole_ms
from schedules._frozen import field, frozen
from schedules._schedule import RandomLike, Schedule, ScheduleLike, StepInfo, bad_now

# The design calls them In and Out; the variance is in the declaration.
In = TypeVar("In", contravariant=True)  # noqa: PLC0105
Out = TypeVar("Out", covariant=True)  # noqa: PLC0105
O1_co = TypeVar("O1_co", covariant=True)
O2_co = TypeVar("O2_co", covariant=True)


def describe(f: object) -> str:
    """Name a callable for a ``repr``: its qualified name, else its ``repr``."""
    name = getattr(f, "__qualname__", None)
    return name if isinstance(name, str) else repr(f)


def user_delay(value: object, f: object) -> float:
    """
    Check and clamp the seconds a user's delay function returned.

    Negative results (``-inf`` included) become 0 and results above ``MAX_DELAY`` (``inf``
    included) become ``MAX_DELAY``, as every computed delay is clamped. NaN has no place on that
    line and is refused, as is anything that is not a number: both are bugs in the function.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"delay function {describe(f)} must return seconds as a number, got {shown(value)}"
        raise TypeError(msg)
    if isinstance(value, float) and math.isnan(value):  # ints are never NaN (and may overflow)
        msg = f"delay function {describe(f)} returned {shown(value)}, not a number of seconds"
        raise ValueError(msg)
    if value <= 0:
        return 0.0
    return MAX_DELAY if value > MAX_DELAY else float(value)


@frozen(repr=False)
class Adapted(Schedule[In, Out]):
    """``as_schedule(contract)``: a hand-written step contract given the combinators."""

    contract: ScheduleLike[In, Out]

    def initial(self) -> Any:
        return self.contract.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        return self.contract.step(now, input, state, rng)

    def __repr__(self) -> str:
        return repr(self.contract)


@frozen(repr=False)
class Jittered(Schedule[In, Out]):
    """``inner.jittered(min=low, max=high)``."""

    inner: Schedule[In, Out]
    low: float
    high: float

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        state, out, delay = self.inner.step(now, input, state, rng)
        if delay is not None:
            low, high = self.low, self.high
            plain = delay
            delay *= low + rng.random() * (high - low)
            top = high * plain
            if delay >= top and low * plain < top:
                # Float rounding (r near 1, or subnormal bounds) reached the open end of
                # [min*d, max*d): take the largest float below it instead.
                delay = math.nextafter(top, 0.0)
            delay = MAX_DELAY if delay > MAX_DELAY else delay
        return state, out, delay

    def __repr__(self) -> str:
        low, high = format_seconds(self.low), format_seconds(self.high)
        return f"{self.inner!r}.jittered(min={low}, max={high})"


@frozen(repr=False)
class MaxDelay(Schedule[In, Out]):
    """``inner.max_delay(limit)``."""

    inner: Schedule[In, Out]
    limit: float

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        state, out, delay = self.inner.step(now, input, state, rng)
        if delay is not None and delay > self.limit:
            delay = self.limit if self.limit < MAX_DELAY else MAX_DELAY
        return state, out, delay

    def __repr__(self) -> str:
        return f"{self.inner!r}.max_delay({format_seconds(self.limit)})"


@frozen(repr=False)
class AddDelay(Schedule[In, Out]):
    """``inner.add_delay(amount)`` with a fixed amount."""

    inner: Schedule[In, Out]
    amount: float

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        state, out, delay = self.inner.step(now, input, state, rng)
        if delay is not None:
            delay += self.amount
            delay = MAX_DELAY if delay > MAX_DELAY else delay
        return state, out, delay

    def __repr__(self) -> str:
        return f"{self.inner!r}.add_delay({format_seconds(self.amount)})"


@frozen(repr=False)
class _WithInfo(Schedule[In, Out]):
    """Base for wrappers whose function sees a ``StepInfo``: state ``(attempts, start, inner)``."""

    inner: Schedule[In, Out]
    f: Callable[[StepInfo[In, Out]], float]

    def initial(self) -> Any:
        return (0, None, self.inner.initial())

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        attempts, start, inner = state
        if start is None:
            start = now
        inner, out, delay = self.inner.step(now, input, inner, rng)
        attempts += 1
        if delay is not None:
            info = StepInfo(attempts, input, out, delay, now - start, now)
            delay = self._combine(delay, user_delay(self.f(info), self.f))
        return (attempts, start, inner), out, delay

    def _combine(self, delay: float, computed: float) -> float:
        raise NotImplementedError


@frozen(repr=False)
class ModifyDelay(_WithInfo[In, Out]):
    """``inner.modify_delay(f)``."""

    def _combine(self, delay: float, computed: float) -> float:
        return computed

    def __repr__(self) -> str:
        return f"{self.inner!r}.modify_delay({describe(self.f)})"


@frozen(repr=False)
class AddDelayFn(_WithInfo[In, Out]):
    """``inner.add_delay(f)`` with a function of ``StepInfo``."""

    def _combine(self, delay: float, computed: float) -> float:
        total = delay + computed
        return MAX_DELAY if total > MAX_DELAY else total

    def __repr__(self) -> str:
        return f"{self.inner!r}.add_delay({describe(self.f)})"


@frozen(repr=False)
class Times(Schedule[In, Out]):
    """
    ``inner.times(n)``: state ``(steps so far, inner state)``.

    Exactly ``inner & recurs(n)`` but for the output: every step is counted, including those
    where *inner* stops, so inside a union whose other side goes on it stops where the
    intersection would.
    """

    inner: Schedule[In, Out]
    n: int

    def initial(self) -> Any:
        return (0, self.inner.initial())

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        count, inner = state
        inner, out, delay = self.inner.step(now, input, inner, rng)
        return (count + 1, inner), out, delay if count < self.n else None

    def __repr__(self) -> str:
        return f"{self.inner!r}.times({self.n})"


@frozen(repr=False)
class Within(Schedule[In, Out]):
    """
    ``inner.within(limit)``: state ``(time of the first step or None, inner state)``.

    Decided in whole milliseconds (``whole_ms``), so float error in the times never refuses a
    wait that ends exactly at the limit.
    """

    inner: Schedule[In, Out]
    limit: float
    _limit_ms: int = field(init=False, eq=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_limit_ms", whole_ms(self.limit))

    def initial(self) -> Any:
        return (None, self.inner.initial())

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        start, inner = state
        if start is None:
            start = now
        inner, out, delay = self.inner.step(now, input, inner, rng)
        if delay is not None and whole_ms((now - start) + delay) > self._limit_ms:
            delay = None
        return (start, inner), out, delay

    def __repr__(self) -> str:
        return f"{self.inner!r}.within({format_seconds(self.limit)})"


@frozen(repr=False)
class InputCheck(Schedule[In, Out]):
    """``inner.while_input(p)`` (keep=True) or ``inner.until_input(p)`` (keep=False)."""

    inner: Schedule[In, Out]
    p: Callable[[In], bool]
    keep: bool

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        state, out, delay = self.inner.step(now, input, state, rng)
        if delay is not None and (not self.p(input)) is self.keep:
            delay = None
        return state, out, delay

    def __repr__(self) -> str:
        name = "while_input" if self.keep else "until_input"
        return f"{self.inner!r}.{name}({describe(self.p)})"


@frozen(repr=False)
class OutputCheck(Schedule[In, Out]):
    """``inner.while_output(p)`` (keep=True) or ``inner.until_output(p)`` (keep=False)."""

    inner: Schedule[In, Out]
    p: Callable[[Out], bool]
    keep: bool

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        state, out, delay = self.inner.step(now, input, state, rng)
        if delay is not None and (not self.p(out)) is self.keep:
            delay = None
        return state, out, delay

    def __repr__(self) -> str:
        name = "while_output" if self.keep else "until_output"
        return f"{self.inner!r}.{name}({describe(self.p)})"


@frozen(repr=False)
class Union(Schedule[In, tuple[O1_co, O2_co]], Generic[In, O1_co, O2_co]):
    """``left.union(right)``: state ``(left state, right state)``."""

    left: Schedule[In, O1_co]
    right: Schedule[In, O2_co]

    def initial(self) -> Any:
        return (self.left.initial(), self.right.initial())

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, tuple[O1_co, O2_co], float | None]:
        left, right = state
        left, out_left, delay_left = self.left.step(now, input, left, rng)
        right, out_right, delay_right = self.right.step(now, input, right, rng)
        if delay_left is None or (delay_right is not None and delay_right < delay_left):
            delay_left = delay_right
        return (left, right), (out_left, out_right), delay_left

    def __repr__(self) -> str:
        return f"{self.left!r}.union({self.right!r})"


@frozen(repr=False)
class Intersect(Schedule[In, tuple[O1_co, O2_co]], Generic[In, O1_co, O2_co]):
    """``left.intersect(right)``: state ``(left state, right state)``."""

    left: Schedule[In, O1_co]
    right: Schedule[In, O2_co]

    def initial(self) -> Any:
        return (self.left.initial(), self.right.initial())

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, tuple[O1_co, O2_co], float | None]:
        left, right = state
        left, out_left, delay_left = self.left.step(now, input, left, rng)
        right, out_right, delay_right = self.right.step(now, input, right, rng)
        if delay_left is None or delay_right is None:
            delay_left = None
        elif delay_right > delay_left:
            delay_left = delay_right
        return (left, right), (out_left, out_right), delay_left

    def __repr__(self) -> str:
        return f"{self.left!r}.intersect({self.right!r})"


@frozen(repr=False)
class AndThen(Schedule[In, O1_co | O2_co], Generic[In, O1_co, O2_co]):
    """``first.and_then(second)``: state ``(0 or 1 = which runs, first state, second state)``."""

    first: Schedule[In, O1_co]
    second: Schedule[In, O2_co]

    def initial(self) -> Any:
        return (0, self.first.initial(), self.second.initial())

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, O1_co | O2_co, float | None]:
        phase, first, second = state
        if not phase:
            first, out, delay = self.first.step(now, input, first, rng)
            if delay is not None:
                return (0, first, second), out, delay
        # The step that ends `first` is `second`'s first step, as in Effect.
        second, out2, delay = self.second.step(now, input, second, rng)
        return (1, first, second), out2, delay

    def __repr__(self) -> str:
        return f"{self.first!r}.and_then({self.second!r})"


@frozen(repr=False)
class Map(Schedule[In, O2_co], Generic[In, O1_co, O2_co]):
    """``inner.map(f)``."""

    inner: Schedule[In, O1_co]
    f: Callable[[O1_co], O2_co]

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, O2_co, float | None]:
        state, out, delay = self.inner.step(now, input, state, rng)
        return state, self.f(out), delay

    def __repr__(self) -> str:
        return f"{self.inner!r}.map({describe(self.f)})"


@frozen(repr=False)
class TapInput(Schedule[In, Out]):
    """``inner.tap_input(f)``."""

    inner: Schedule[In, Out]
    f: Callable[[In], object]

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        self.f(input)
        return self.inner.step(now, input, state, rng)

    def __repr__(self) -> str:
        return f"{self.inner!r}.tap_input({describe(self.f)})"


@frozen(repr=False)
class TapOutput(Schedule[In, Out]):
    """``inner.tap_output(f)``."""

    inner: Schedule[In, Out]
    f: Callable[[Out], object]

    def initial(self) -> Any:
        return self.inner.initial()

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        result = self.inner.step(now, input, state, rng)
        self.f(result[1])
        return result

    def __repr__(self) -> str:
        return f"{self.inner!r}.tap_output({describe(self.f)})"


@frozen(repr=False)
class ResetAfter(Schedule[In, Out]):
    """``inner.reset_after(duration)``: state ``(start of the current run or None, inner)``."""

    inner: Schedule[In, Out]
    duration: float
    _duration_ms: int = field(init=False, eq=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_duration_ms", whole_ms(self.duration))

    def initial(self) -> Any:
        return (None, self.inner.initial())

    def step(
        self, now: float, input: In, state: Any, rng: RandomLike
    ) -> tuple[Any, Out, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        start, inner = state
        if start is None:
            start = now
        elif whole_ms(now - start) >= self._duration_ms:  # in whole ms, as Within decides
            start, inner = now, self.inner.initial()
        inner, out, delay = self.inner.step(now, input, inner, rng)
        return (start, inner), out, delay

    def __repr__(self) -> str:
        return f"{self.inner!r}.reset_after({format_seconds(self.duration)})"


__all__ = [
    "Adapted",
    "AddDelay",
    "AddDelayFn",
    "AndThen",
    "InputCheck",
    "Intersect",
    "Jittered",
    "Map",
    "MaxDelay",
    "ModifyDelay",
    "OutputCheck",
    "ResetAfter",
    "TapInput",
    "TapOutput",
    "Times",
    "Union",
    "Within",
    "describe",
    "user_delay",
]
