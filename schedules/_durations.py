"""Durations: parse seconds, ``timedelta`` and strings like ``"250ms"`` into float seconds."""

from __future__ import annotations

import datetime
import math
import re
from typing import Final, TypeAlias

__all__ = ["MAX_DELAY", "DurationLike", "format_seconds", "to_seconds"]

MAX_DELAY: Final[float] = (2**31 - 1) / 1000
"""The longest delay any schedule yields, in seconds: ``2**31 - 1`` ms, about 24.8 days."""

DurationLike: TypeAlias = int | float | datetime.timedelta | str
"""Seconds (``int`` or ``float``), a ``timedelta``, or a string such as ``"250ms"`` or ``"4s"``."""

_UNITS: Final[dict[str, float]] = {}
for _names, _scale in (
    (("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1e-9),
    (("us", "µs", "micro", "micros", "microsecond", "microseconds"), 1e-6),
    (("ms", "milli", "millis", "millisecond", "milliseconds"), 1e-3),
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hr", "hrs", "hour", "hours"), 3600.0),
    (("d", "day", "days"), 86400.0),
    (("w", "week", "weeks"), 604800.0),
):
    for _name in _names:
        _UNITS[_name] = _scale

_PATTERN: Final = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([^\d\s.].*?)\s*")


def _bad(name: str, value: object, why: str) -> ValueError:
    return ValueError(f"{name} must be {why}, got {value!r}")


def to_seconds(value: DurationLike, *, name: str = "duration") -> float:
    """
    Convert a duration to float seconds.

    Numbers are seconds. Strings are a number and a unit: ``ns``, ``us``, ``ms``/``millis``,
    ``s``/``seconds``, ``m``/``minutes``, ``h``/``hours``, ``d``/``days``, ``w``/``weeks``
    (singular, plural and short forms, case-insensitive, optional space between).

    Args:
        value: Seconds, a ``timedelta`` or a string like ``"250ms"`` or ``"1.5 minutes"``.
        name: The argument's name, used in the error message.

    Raises:
        ValueError: If *value* is negative, NaN, infinite, a ``bool``, or a string that does not
            parse. The message names *name* and the bad value.
        TypeError: If *value* is none of the accepted types.

    Example:
        >>> to_seconds("250ms"), to_seconds("1.5 minutes"), to_seconds(2)
        (0.25, 90.0, 2.0)
        >>> to_seconds("-1s", name="base")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: base must be a duration >= 0 (...), got '-1s'
    """
    # bool is an int subclass; `spaced(True)` is a bug, not one second.
    if isinstance(value, bool):
        raise _bad(name, value, "a duration, not a bool")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond float range: as infinite as float("inf")
            seconds = math.inf
    elif isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        seconds = _parse(value, name)
    else:
        msg = f"{name} must be seconds, a timedelta or a string like '250ms', got {value!r}"
        raise TypeError(msg)
    if not (seconds >= 0.0 and math.isfinite(seconds)):
        raise _bad(name, value, "a duration >= 0 (seconds, timedelta or a string like '250ms')")
    # -0.0 passes the check above; adding 0.0 makes it 0.0 so no delay ever prints as "-0.0".
    return seconds + 0.0


def _parse(text: str, name: str) -> float:
    match = _PATTERN.fullmatch(text)
    unit = _UNITS.get(match.group(3).lower()) if match else None
    if match is None or unit is None:
        raise _bad(name, text, "a duration >= 0 (seconds, timedelta or a string like '250ms')")
    number, exponent, _ = match.groups()
    magnitude = float(number + ("e" + exponent if exponent else ""))
    # Keep "250ms" exactly 0.25 (250 * 1e-3 would be 0.25000000000000006).
    if unit < 1.0:
        return magnitude / round(1.0 / unit)
    return magnitude * unit


def format_seconds(seconds: float) -> str:
    """Render seconds for a ``repr``: ``4`` when whole, else the shortest float (``0.25``)."""
    if seconds.is_integer() and abs(seconds) < 1e15:
        return str(int(seconds))
    return repr(seconds)
