"""
A retry budget shared by many calls, so a fleet cannot turn an outage into a retry storm.

Accounting: time is cut into ``BUCKETS`` (10) buckets of ``window / 10`` seconds each, counted
from ``now = 0`` of whatever clock the driver uses. Each bucket holds the number of first attempts
and of granted retries that fell into it. The *current window* is the bucket holding ``now`` and
the 9 before it, so it spans between ``0.9 * window`` and ``window`` seconds. A retry is granted
when, counting it, the retries in the current window stay within::

    ratio * first_attempts_in_window + min_per_second * window

So at every grant the current window holds at most that many retries, and under a steady flood
retries settle at ``ratio`` times the rate of first attempts plus ``min_per_second`` per second.
A refused retry counts nothing. Memory is constant: two counters per bucket, however many calls
go through.
"""

from __future__ import annotations

import math
import threading
from typing import Final

__all__ = ["RetryBudget"]

BUCKETS: Final = 10


def _check(name: str, value: object, *, positive: bool) -> float:
    # bool is an int, but RetryBudget(ratio=True) is surely a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number, got {value!r}"
        raise TypeError(msg)
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        msg = f"{name} must be finite and {bound}, got {value!r}"
        raise ValueError(msg)
    return number


class RetryBudget:
    """
    A thread-safe budget of retries over a sliding time window, shared by many calls.

    Over the last *window* seconds, retries may be at most *ratio* times the first attempts
    plus *min_per_second* per second (``min_per_second * window`` in all), so a few calls can
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
        self._reserve: Final = self._min_per_second * self._window
        self._width: Final = self._window / BUCKETS
        self._lock: Final = threading.Lock()
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
        try:
            bucket = math.floor(now / self._width)
        except (OverflowError, ValueError):  # inf or NaN from a broken clock: keep the window
            bucket = self._head if self._head is not None else 0
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

    def record_attempt(self, now: float) -> None:
        """
        Count one first attempt of a call at *now* (seconds of the active clock).

        Call it once per call, not per retry: retries earn no further retries.
        """
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
        """
        with self._lock:
            slot = self._advance(now)
            if self._total_retries + 1 > self._ratio * self._total_attempts + self._reserve:
                return False
            self._retries[slot] += 1
            self._total_retries += 1
            return True

    def available(self, now: float) -> float:
        """
        Return how many retries the budget would grant at *now*, without taking any.

        The value may be fractional: a retry is granted while at least 1 is available.
        """
        with self._lock:
            self._advance(now)
            return max(
                0.0, self._ratio * self._total_attempts + self._reserve - self._total_retries
            )
