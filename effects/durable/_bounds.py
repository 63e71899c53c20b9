"""
The ranges of the engine's numeric options, checked where each option is given.

Times are stored as epoch ms in 64-bit integers and counts in 32-bit ones (PostgreSQL's
``integer``), so every window is at most ``MAX_MS`` (2**31 - 1 ms, about 24.8 days, the clamp of
every retry delay) and every count at most ``MAX_COUNT``: a value beyond is refused when given,
not met later as an overflow inside a store.
"""

from __future__ import annotations

import math
from typing import Final

from schedules import DurationLike, to_seconds

__all__ = [
    "MAX_COUNT",
    "MAX_MS",
    "MAX_WAKE_MS",
    "checked_count",
    "checked_ms",
    "duration_ms",
    "timeout_ms",
]

#: The longest window of any option (lease, timeout, poll, redispatch, reconcile), in ms.
MAX_MS: Final = 2**31 - 1
#: The latest epoch ms a timer or a deadline may fall on: 2**53 - 1 (about the year 287,000),
#: which every store and every JSON reader keeps exactly.
MAX_WAKE_MS: Final = 2**53 - 1
#: The largest count of any option (attempts, slots, recoveries, re-dispatches, concurrency).
MAX_COUNT: Final = 2**31 - 1


def checked_ms(value: object, name: str) -> int:
    """
    *value* as whole ms, if it is a number of ms from 1 to ``MAX_MS`` once rounded.

    Raises:
        TypeError: If *value* is not an int or float (``bool`` is not a number here).
        ValueError: If it is NaN, infinite, or out of that range; the message names *name*.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{name} must be a number of milliseconds from 1 to {MAX_MS}, got {value!r}"
        raise TypeError(msg)
    if isinstance(value, float) and not math.isfinite(value):
        msg = f"{name} must be a finite number of milliseconds from 1 to {MAX_MS}, got {value!r}"
        raise ValueError(msg)
    if value > MAX_MS or round(value) > MAX_MS:
        msg = f"{name} must be at most {MAX_MS} milliseconds (about 24.8 days), got {value!r}"
        raise ValueError(msg)
    if round(value) < 1:
        msg = (
            f"{name} must be > 0 milliseconds and at most {MAX_MS}; rounded to whole ms it"
            f" must stay > 0, got {value!r}"
        )
        raise ValueError(msg)
    return round(value)


def checked_count(value: object, name: str, *, least: int) -> int:
    """
    *value*, if it is an int from *least* to ``MAX_COUNT``.

    Raises:
        TypeError: If *value* is not an int (``bool`` is not a count here).
        ValueError: If it is out of that range; the message names *name*.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name} must be an int from {least} to {MAX_COUNT}, got {value!r}"
        raise TypeError(msg)
    if value < least:
        msg = f"{name} must be >= {least} (and at most {MAX_COUNT}), got {value!r}"
        raise ValueError(msg)
    if value > MAX_COUNT:
        msg = f"{name} must be at most {MAX_COUNT}, got {value!r}"
        raise ValueError(msg)
    return value


def duration_ms(duration: DurationLike, now: int, *, name: str = "duration") -> int:
    """
    *duration* in whole ms (``round(seconds * 1000)``), checked so that epoch ms *now* plus it
    is a time the stores keep (a durable sleep's ``wake_at``, a run's deadline).

    Raises:
        TypeError: If *duration* is not seconds, a ``timedelta`` or a string.
        ValueError: If it is negative, NaN, infinite, a ``bool``, a string that does not parse,
            or so long that ``now + it`` passes ``MAX_WAKE_MS``; the message names *name*.
    """
    seconds = to_seconds(duration, name=name)
    ms = seconds * 1000
    if not math.isfinite(ms) or now + ms > MAX_WAKE_MS:
        msg = (
            f"{name} must end by epoch ms {MAX_WAKE_MS} (about the year 287,000), got {duration!r}"
        )
        raise ValueError(msg)
    return round(ms)


def timeout_ms(timeout: DurationLike | None, name: str) -> int | None:
    """
    A whole-run *timeout* in whole ms (``None`` stays ``None``: no limit), at least 1 ms.

    Raises:
        TypeError: If *timeout* is not seconds, a ``timedelta``, a string or ``None``.
        ValueError: If it is negative, NaN, infinite, a ``bool``, shorter than half a ms, or
            longer than ``MAX_WAKE_MS`` ms; the message names *name*.
    """
    if timeout is None:
        return None
    ms = duration_ms(timeout, 0, name=name)
    if ms < 1:
        msg = f"{name} must be at least 1 ms (None: no timeout), got {timeout!r}"
        raise ValueError(msg)
    return ms
