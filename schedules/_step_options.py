"""``from_step_options``: the StepOptions retry policy of durable workflow engines."""

# ruff: noqa: A002 - `input` is the step contract's argument name; overrides must keep it.

from __future__ import annotations

import math
from typing import Any, Final, Literal

from schedules._durations import MAX_DELAY, format_seconds, shown
from schedules._frozen import field, frozen
from schedules._schedule import RandomLike, Schedule, bad_now, check_count

__all__ = ["from_step_options"]

# Exponential delays stop growing here (ms). Far above twice MAX_DELAY, so saturating before the
# cap and the jitter gives the same clamped result as exact arithmetic would.
_SATURATION_DOUBLINGS: Final = 40
_SATURATED_MS: Final = 2.0**_SATURATION_DOUBLINGS


@frozen(repr=False)
class _StepOptions(Schedule[object, float]):
    """State: how many attempts have failed so far."""

    retries: int
    backoff: Literal["fixed", "exp"]
    backoff_ms: float
    backoff_max_ms: float | None
    jitter: bool
    # Doublings after which the exponential delay is surely >= _SATURATED_MS.
    _saturated_at: int = field(init=False, eq=False)

    def __post_init__(self) -> None:
        limit = 0
        if self.backoff_ms > 0.0:
            limit = max(0, math.ceil(_SATURATION_DOUBLINGS - math.log2(self.backoff_ms)))
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
        failed = state + 1
        if failed >= self.retries:
            return failed, 0.0, None
        ms = self.backoff_ms
        if self.backoff == "exp" and ms > 0.0:
            doublings = failed - 1
            ms = math.ldexp(ms, doublings) if doublings < self._saturated_at else _SATURATED_MS
        if self.backoff_max_ms is not None and ms > self.backoff_max_ms:
            ms = self.backoff_max_ms
        if self.jitter:
            # JavaScript's Math.round: halves round up.
            ms = math.floor(ms * (0.5 + rng.random() * 0.5) + 0.5)
        delay = ms / 1000
        delay = MAX_DELAY if delay > MAX_DELAY else delay
        return failed, delay, delay

    def __repr__(self) -> str:
        parts = [f"retries={self.retries}"]
        if self.backoff != "fixed":
            parts.append(f"backoff={self.backoff!r}")
        if self.backoff_ms:
            parts.append(f"backoff_ms={format_seconds(self.backoff_ms)}")
        if self.backoff_max_ms is not None:
            parts.append(f"backoff_max_ms={format_seconds(self.backoff_max_ms)}")
        if self.jitter:
            parts.append("jitter=True")
        return f"from_step_options({', '.join(parts)})"


def _milliseconds(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number of milliseconds >= 0, got {shown(value)}"
        raise TypeError(msg)
    try:
        ms = float(value) + 0.0
    except OverflowError:  # an int too large for a float
        ms = math.inf
    if not (0.0 <= ms < math.inf):
        msg = f"{name} must be a finite number of milliseconds >= 0, got {shown(value)}"
        raise ValueError(msg)
    return ms


def from_step_options(
    retries: int = 1,
    backoff: Literal["fixed", "exp"] = "fixed",
    backoff_ms: float = 0,
    backoff_max_ms: float | None = None,
    jitter: bool = False,
) -> Schedule[object, float]:
    """
    The StepOptions policy of durable workflow engines; outputs the delay in seconds.

    The delay before attempt *k + 1* is *backoff_ms* (``"fixed"``) or
    ``backoff_ms * 2 ** (k - 1)`` (``"exp"``), then capped at *backoff_max_ms*, then with *jitter*
    scaled to a random point in its top half (``round(capped * (0.5 + r * 0.5))`` ms, halves
    rounding up as JavaScript does), then clamped to ``MAX_DELAY``.

    Args:
        retries: Total number of attempts, the first included (default 1: a single try, so
            ``retries - 1`` recurrences); must be >= 1.
        backoff: ``"fixed"`` keeps the delay constant, ``"exp"`` doubles it each attempt.
        backoff_ms: Base delay in milliseconds; 0 retries with no delay.
        backoff_max_ms: Upper bound in milliseconds, or ``None`` for none.
        jitter: ``True`` scales each delay to a random point in ``[50%, 100%]`` of itself,
            rounded to whole milliseconds; default ``False``.

    Raises:
        ValueError: If *retries* < 1, *backoff* is not ``"fixed"`` or ``"exp"``, or a millisecond
            value is negative, NaN or infinite. The message names the argument and the value.
        TypeError: If *retries* is not an ``int``, a millisecond value is not a number, or
            *jitter* is not a ``bool`` (``jitter="yes"`` is refused, not taken as true).

    Example:
        >>> from_step_options(retries=4, backoff="exp", backoff_ms=200).delays()
        [0.2, 0.4, 0.8]
        >>> from_step_options(retries=5, backoff="exp", backoff_ms=200, backoff_max_ms=500,
        ...                   jitter=True).delays(seed=3)
        [0.124, 0.309, 0.342, 0.401]
    """
    check_count(retries, "retries")
    if retries < 1:
        msg = f"retries must be >= 1 (it counts the first attempt), got {shown(retries)}"
        raise ValueError(msg)
    if backoff not in ("fixed", "exp"):
        msg = f"backoff must be 'fixed' or 'exp', got {shown(backoff)}"
        raise ValueError(msg)
    # A truthy non-bool ("yes", 1) is a misreading of the option, not a request for jitter.
    if not isinstance(jitter, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
        msg = f"jitter must be True or False, got {shown(jitter)}"
        raise TypeError(msg)
    cap = None if backoff_max_ms is None else _milliseconds(backoff_max_ms, "backoff_max_ms")
    return _StepOptions(retries, backoff, _milliseconds(backoff_ms, "backoff_ms"), cap, jitter)
