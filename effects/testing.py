"""
Test helpers: a virtual clock under which retries wait no real time.

Install one with ``effects.use_clock(VirtualClock())``, or take the pytest fixture
``virtual_clock`` that the ``effects`` plugin registers (it does exactly that for one test).
"""

from __future__ import annotations

import math
from _thread import allocate_lock
from typing import cast

from effects._services import checkpoint
from schedules import DurationLike, to_seconds

__all__ = ["VirtualClock"]


class VirtualClock:
    """
    A clock whose time moves only when something sleeps on it or ``advance`` is called.

    Sleeping (sync or async, under asyncio or trio) records the requested delay in ``sleeps``
    and moves ``now()`` forward by it at once; the async form also yields to the event loop once,
    so cancellation still reaches a task that waits on this clock. Thread-safe.

    Args:
        start: The initial reading of ``now()``, in seconds: any finite number (a value like
            ``time.monotonic()`` tests code against a clock that does not start at 0).

    Raises:
        ValueError: If *start* is NaN, infinite or not a number.

    Example:
        >>> clock = VirtualClock(start=10.0)
        >>> clock.sleep(1.5)
        >>> clock.advance("500ms")
        >>> (clock.now(), clock.sleeps)
        (12.0, [1.5])
    """

    __slots__ = ("_lock", "_now", "sleeps")

    def __init__(self, start: float = 0.0) -> None:
        given = cast("object", start)  # checked at run time: tests pass all sorts of things
        if (
            isinstance(given, bool)
            or not isinstance(given, int | float)
            or not math.isfinite(given)
        ):
            msg = f"start must be a finite number of seconds, got {start!r}"
            raise ValueError(msg)
        self._now = float(start)
        self._lock = allocate_lock()
        #: Every delay requested through ``sleep`` or ``sleep_async``, in order, in seconds.
        self.sleeps: list[float] = []

    def now(self) -> float:
        """The virtual time in seconds."""
        return self._now

    def wall(self) -> float:
        """The virtual time too, read as epoch seconds by calendar schedules (``cron``): start
        the clock at an epoch reading (``VirtualClock(start=1_800_000_000)``) to test one."""
        return self._now

    def advance(self, duration: DurationLike) -> None:
        """
        Move the time forward by *duration* without recording a sleep.

        Args:
            duration: Seconds, a ``timedelta`` or a string like ``"250ms"``.

        Raises:
            ValueError: If *duration* is negative, NaN, infinite or unparseable.
        """
        seconds = to_seconds(duration, name="duration")
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        """Record *seconds* and move the time forward by it, without waiting."""
        with self._lock:
            self.sleeps.append(seconds)
            self._now += seconds

    async def sleep_async(self, seconds: float) -> None:
        """Record *seconds*, move the time forward by it, and yield to the event loop once."""
        self.sleep(seconds)
        await checkpoint()

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now!r}, sleeps={len(self.sleeps)})"
