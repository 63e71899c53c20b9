"""
A retry budget shared by many calls, so a fleet cannot turn an outage into a retry storm.

Accounting: time is cut into ``BUCKETS`` (10) buckets of ``window / 10`` seconds each, counted
from ``now = 0`` of whatever clock the driver uses. Each bucket holds the number of first attempts
and of granted retries that fell into it. The *current window* is the bucket holding ``now`` and
the 9 before it, so it spans between ``0.9 * window`` and ``window`` seconds. A retry is granted
when, counting it, the retries in the current window stay within::

    floor(ratio * first_attempts_in_window) + floor(min_per_second * window)

computed exactly: each argument is read as the decimal its ``repr`` shows (``0.57`` is 57/100,
not the binary float just below it), so ``ratio=0.57`` over 100 first attempts grants 57, never
56. Under a steady flood retries settle at ``ratio`` times the rate of first attempts plus
``min_per_second`` per second. A refused retry counts nothing. Memory is constant: two counters
per bucket, however many calls go through.
"""

from __future__ import annotations

import math
from _thread import allocate_lock
from typing import Final

__all__ = ["RetryBudget"]

BUCKETS: Final = 10


def _check(name: str, value: object, *, positive: bool) -> float:
    # bool is an int, but RetryBudget(ratio=True) is surely a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number, got {value!r}"
        raise TypeError(msg)
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        msg = f"{name} must be finite and {bound}, got {value!r}"
        raise ValueError(msg)
    return number


def _decimal(value: int | float) -> tuple[int, int]:
    """*value* as the exact fraction ``(numerator, denominator)`` of the decimal it prints as."""
    if isinstance(value, int):
        return value, 1
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    numerator, scale = int(whole + fraction), len(fraction) - int(exponent or 0)
    return (numerator, 10**scale) if scale >= 0 else (numerator * 10**-scale, 1)


def _finite_now(now: object) -> float:
    if isinstance(now, int | float) and not isinstance(now, bool) and math.isfinite(now):
        return now
    msg = f"now must be finite seconds of the active clock, got {now!r}"
    raise ValueError(msg)


class RetryBudget:
    """
    A thread-safe budget of retries over a sliding time window, shared by many calls.

    Over the last *window* seconds, retries may be at most ``floor(ratio * first attempts)``
    plus ``floor(min_per_second * window)``, in exact arithmetic, so a few calls can
    always retry while a flood of failing calls retries only in proportion to its size. Give
    the same instance to every ``retry(..., budget=...)`` that calls one dependency. The
    ``now`` arguments are seconds of the active clock (monotonic), so a ``VirtualClock`` drives
    the budget too.

    Args:
        ratio: Retries allowed per first attempt in the window, >= 0 (0.1: one retry per ten
            calls).
        min_per_second: Retries allowed per second whatever the traffic, >= 0.
        window: Length of the sliding window in seconds, > 0.

    Raises:
        ValueError: If an argument is negative, NaN or infinite, or *window* is 0.
        TypeError: If an argument is not a number.

    Example:
        >>> budget = RetryBudget(ratio=0.5, min_per_second=0.0, window=10.0)
        >>> for _ in range(4):
        ...     budget.record_attempt(now=0.0)
        >>> [budget.try_retry(now=1.0) for _ in range(3)]
        [True, True, False]
        >>> budget.try_retry(now=11.0)  # the attempts at 0.0 have left the window
        False
    """

    __slots__ = (
        "_attempts",
        "_head",
        "_lock",
        "_min_per_second",
        "_ratio",
        "_ratio_exact",
        "_reserve",
        "_retries",
        "_total_attempts",
        "_total_retries",
        "_width",
        "_window",
    )

    def __init__(
        self, ratio: float = 0.1, min_per_second: float = 10.0, window: float = 10.0
    ) -> None:
        self._ratio: Final = _check("ratio", ratio, positive=False)
        self._min_per_second: Final = _check("min_per_second", min_per_second, positive=False)
        self._window: Final = _check("window", window, positive=True)
        # Integers from here on: the grant rule is exact whatever the float error of a product.
        self._ratio_exact: Final = _decimal(ratio)
        per_second, length = _decimal(min_per_second), _decimal(window)
        self._reserve: Final = (per_second[0] * length[0]) // (per_second[1] * length[1])
        self._width: Final = self._window / BUCKETS
        self._lock: Final = allocate_lock()
        # Ring of per-bucket counters; slot i % BUCKETS holds bucket i for the last BUCKETS
        # buckets up to _head. The totals are their sums, kept so a call costs O(1).
        self._attempts = [0] * BUCKETS
        self._retries = [0] * BUCKETS
        self._head: int | None = None
        self._total_attempts = 0
        self._total_retries = 0

    @property
    def ratio(self) -> float:
        """Retries allowed per first attempt in the window."""
        return self._ratio

    @property
    def min_per_second(self) -> float:
        """Retries allowed per second whatever the traffic."""
        return self._min_per_second

    @property
    def window(self) -> float:
        """Length of the sliding window in seconds."""
        return self._window

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self._ratio!r}, min_per_second={self._min_per_second!r}, "
            f"window={self._window!r})"
        )

    def _advance(self, now: float) -> int:
        """Move the window to the bucket holding *now*; return its slot. Caller holds the lock."""
        bucket = math.floor(now / self._width)
        head = self._head
        if head is None:
            self._head = bucket
        elif bucket > head:
            if bucket - head >= BUCKETS:
                self._attempts = [0] * BUCKETS
                self._retries = [0] * BUCKETS
                self._total_attempts = 0
                self._total_retries = 0
            else:
                for expired in range(head + 1, bucket + 1):
                    slot = expired % BUCKETS
                    self._total_attempts -= self._attempts[slot]
                    self._total_retries -= self._retries[slot]
                    self._attempts[slot] = 0
                    self._retries[slot] = 0
            self._head = bucket
        else:
            # A clock that went backwards (or two clocks sharing a budget) must not reopen
            # expired buckets: count into the newest one.
            bucket = head
        return bucket % BUCKETS

    def _allowed(self) -> int:
        """Retries the current window allows in all. Caller holds the lock."""
        numerator, denominator = self._ratio_exact
        return (numerator * self._total_attempts) // denominator + self._reserve

    def record_attempt(self, now: float) -> None:
        """
        Count one first attempt of a call at *now* (seconds of the active clock).

        Call it once per call, not per retry: retries earn no further retries.

        Raises:
            ValueError: If *now* is NaN or infinite (a broken clock).
        """
        now = _finite_now(now)
        with self._lock:
            slot = self._advance(now)
            self._attempts[slot] += 1
            self._total_attempts += 1

    def try_retry(self, now: float) -> bool:
        """
        Take one retry token at *now* (seconds of the active clock).

        Returns:
            True if the retry may go ahead (it is counted), False if the budget is empty (nothing
            is counted; the caller should give up with its last error).

        Raises:
            ValueError: If *now* is NaN or infinite (a broken clock).
        """
        now = _finite_now(now)
        with self._lock:
            slot = self._advance(now)
            if self._total_retries >= self._allowed():
                return False
            self._retries[slot] += 1
            self._total_retries += 1
            return True

    def available(self, now: float) -> int:
        """
        Return how many retries the budget would grant at *now*, without taking any.

        Raises:
            ValueError: If *now* is NaN or infinite (a broken clock).
        """
        now = _finite_now(now)
        with self._lock:
            self._advance(now)
            return max(0, self._allowed() - self._total_retries)
