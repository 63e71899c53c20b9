"""Durations: parse seconds, ``timedelta`` and strings like ``"250ms"`` into float seconds."""

from __future__ import annotations

import datetime
import math
import sys
from typing import Final, TypeAlias

__all__ = ["MAX_DELAY", "DurationLike", "format_seconds", "shown", "to_seconds", "whole_ms"]

MAX_DELAY: Final[float] = (2**31 - 1) / 1000
"""The longest delay any schedule yields, in seconds: ``2**31 - 1`` ms, about 24.8 days."""

DurationLike: TypeAlias = int | float | datetime.timedelta | str
"""Seconds (``int`` or ``float``), a ``timedelta``, or a string like ``"250ms"`` or ``"1h30m"``."""

_UNITS: Final[dict[str, float]] = {}
for _names, _scale in (
    (("ns", "nano", "nanos", "nanosecond", "nanoseconds"), 1e-9),
    # Both the micro sign (U+00B5) and the Greek mu (U+03BC): keyboards give either.
    (("us", "\u00b5s", "\u03bcs", "micro", "micros", "microsecond", "microseconds"), 1e-6),
    (("ms", "milli", "millis", "millisecond", "milliseconds"), 1e-3),
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hr", "hrs", "hour", "hours"), 3600.0),
    (("d", "day", "days"), 86400.0),
    (("w", "week", "weeks"), 604800.0),
):
    for _name in _names:
        _UNITS[_name] = _scale


def to_seconds(value: DurationLike, *, name: str = "duration") -> float:
    """
    Convert a duration to float seconds.

    Numbers are seconds. Strings are one or more terms of a number and a unit: ``ns``, ``us``
    (or ``µs``), ``ms``/``millis``, ``s``/``seconds``, ``m``/``minutes``, ``h``/``hours``,
    ``d``/``days``, ``w``/``weeks`` (singular, plural and short forms, case-insensitive). Terms
    go from the largest unit to the smallest, each unit once: ``"1h30m"``, ``"2m 30s"``,
    ``"1 hour 30 minutes"``; their sum is rounded once. A number is ASCII digits with an
    optional fraction and exponent (``"1.5"``, ``".5"``, ``"1e3"``); other Unicode digits
    (``"٣s"``) are refused. Whitespace, which may be any Unicode space (``str.isspace``: a
    no-break or thin space too), is allowed around and between terms and between a number and
    its unit. Parsing takes time linear in the length of the string.

    Args:
        value: Seconds, a ``timedelta`` or a string like ``"250ms"``, ``"1.5 minutes"`` or
            ``"1h30m"``.
        name: The argument's name, used in the error message.

    Raises:
        ValueError: If *value* is negative, NaN, infinite, a ``bool``, or a string that does not
            parse. The message names *name*, the bad value (cut short when long) and, for a
            string, what is wrong with it.
        TypeError: If *value* is none of the accepted types.

    Example:
        >>> to_seconds("250ms"), to_seconds("1.5 minutes"), to_seconds(2)
        (0.25, 90.0, 2.0)
        >>> to_seconds("1h30m"), to_seconds("2m 30s")
        (5400.0, 150.0)
        >>> to_seconds("-1s", name="base")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: base must be a duration >= 0 (...), got '-1s': it is negative
    """
    # bool is an int subclass; `spaced(True)` is a bug, not one second.
    if isinstance(value, bool):
        msg = f"{name} must be a duration, not a bool, got {shown(value)}"
        raise ValueError(msg)
    if isinstance(value, str):
        seconds = _parse(value, name)
        if not math.isfinite(seconds):
            raise _refuse(name, value, "it is too large (infinite)")
        return seconds + 0.0
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond float range: as infinite as float("inf")
            seconds = math.inf
    elif isinstance(value, datetime.timedelta):  # pyright: ignore[reportUnnecessaryIsInstance]
        seconds = value.total_seconds()
    else:
        msg = f"{name} must be seconds, a timedelta or a string like '250ms', got {shown(value)}"
        raise TypeError(msg)
    if not (seconds >= 0.0 and math.isfinite(seconds)):
        msg = f"{name} must be {_WHY}, got {shown(value)}"
        raise ValueError(msg)
    # -0.0 passes the check above; adding 0.0 makes it 0.0 so no delay ever prints as "-0.0".
    return seconds + 0.0


_SHOWN_CHARACTERS: Final = 60
_WHY: Final = "a duration >= 0 (seconds, a timedelta or a string like '250ms' or '1h30m')"


def _shown(text: str) -> str:
    """*text* for an error message: its repr, cut short when long (hostile input can be huge)."""
    if len(text) <= _SHOWN_CHARACTERS:
        return repr(text)
    return f"{text[:_SHOWN_CHARACTERS]!r}... ({len(text)} characters)"


def shown(value: object) -> str:
    """
    *value* for an error message: its repr, cut short when long, never an error itself.

    A caller's bad value can be anything: a string of megabytes, an int too long to print
    (beyond ``sys.get_int_max_str_digits()``), an object whose ``repr`` raises.
    """
    if isinstance(value, str):
        return _shown(value)
    try:
        text = repr(value)
    except ValueError:  # an int with more digits than Python converts
        if isinstance(value, int):
            return f"an int of more than {sys.get_int_max_str_digits()} digits"
        return f"a {type(value).__qualname__} (its repr failed)"
    except Exception:  # noqa: BLE001 - a repr that fails must not hide the real error
        return f"a {type(value).__qualname__} (its repr failed)"
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    return f"{text[:_SHOWN_CHARACTERS]}... ({len(text)} characters)"


def _refuse(name: str, text: str, reason: str) -> ValueError:
    return ValueError(f"{name} must be {_WHY}, got {_shown(text)}: {reason}")


def _digits_end(text: str, index: int) -> int:
    """The index after the run of ASCII digits starting at *index*."""
    end = len(text)
    while index < end and "0" <= text[index] <= "9":
        index += 1
    return index


def _parse(text: str, name: str) -> float:
    """
    Parse one or more ``<number><unit>`` terms, units from largest to smallest, in one pass.

    A hand-written scanner rather than a regular expression: the time is linear in the length of
    the text whatever it holds (a backtracking pattern took seconds on long malformed input).
    """
    terms: list[float] = []
    previous_scale = math.inf
    index, end = 0, len(text)
    while True:
        while index < end and text[index].isspace():
            index += 1
        if index == end:
            break
        start = index
        index = _digits_end(text, index)
        whole = index > start
        if index < end and text[index] == ".":
            after = _digits_end(text, index + 1)
            if not whole and after == index + 1:
                raise _refuse(name, text, f"a number must have a digit at position {start}")
            index = after
        elif not whole:
            raise _start_error(name, text, start)
        if index < end and text[index] in "eE":
            sign = index + 2 if index + 1 < end and text[index + 1] in "+-" else index + 1
            after = _digits_end(text, sign)
            if after > sign:  # otherwise the "e" starts a unit (and fails as one)
                index = after
        number = text[start:index]
        while index < end and text[index].isspace():
            index += 1
        unit_start = index
        while index < end and text[index].isalpha():
            index += 1
        if unit_start == index:
            raise _refuse(
                name, text, f"the number {_shown(number)} needs a unit such as 's' or 'ms'"
            )
        unit = text[unit_start:index]
        scale = _UNITS.get(unit.lower())
        if scale is None:
            raise _refuse(name, text, f"unknown unit {unit[:_SHOWN_CHARACTERS]!r}")
        if scale >= previous_scale:
            raise _refuse(name, text, "units must go from the largest to the smallest, once each")
        previous_scale = scale
        magnitude = float(number)
        # Keep "250ms" exactly 0.25 (250 * 1e-3 would be 0.25000000000000006).
        terms.append(magnitude / round(1.0 / scale) if scale < 1.0 else magnitude * scale)
    if not terms:
        raise _refuse(name, text, "it is empty")
    # fsum: "1h 30m 0.1s" is the correctly rounded sum of its terms, whatever their order.
    return math.fsum(terms)


def _start_error(name: str, text: str, index: int) -> ValueError:
    character = text[index]
    if character == "-":
        return _refuse(name, text, "it is negative")
    if character.isdigit():  # a digit, but not ASCII: Arabic-Indic, fullwidth, ...
        return _refuse(name, text, f"only the ASCII digits 0-9 are accepted, not {character!r}")
    return _refuse(name, text, f"expected a number at position {index}, found {character!r}")


def format_seconds(seconds: float) -> str:
    """Render seconds for a ``repr``: ``4`` when whole, else the shortest float (``0.25``)."""
    if seconds.is_integer() and abs(seconds) < 1e15:
        return str(int(seconds))
    return repr(seconds)


_WHOLE_MS_RANGE: Final = 1e15
_WHOLE_MS_BEYOND: Final = 10**18


def whole_ms(seconds: float) -> int:
    """
    *seconds* rounded to whole milliseconds, halves up: how time boundaries are decided.

    Effect's clock counts whole milliseconds, so its sums of delays are exact. Ours are floats,
    and ``0.1 + 0.1 + 0.1`` is not ``0.3``, nor is ``t + 0.3 - t`` for a clock reading ``t``
    near ``time.monotonic()``; rounded to the millisecond, both are 300.
    """
    if -_WHOLE_MS_RANGE < seconds < _WHOLE_MS_RANGE:
        return math.floor(seconds * 1000.0 + 0.5)
    # A clock that jumped absurdly far (or a NaN, which no comparison admits): beyond every
    # limit, never an OverflowError from floor(inf).
    return _WHOLE_MS_BEYOND if seconds > 0 else -_WHOLE_MS_BEYOND
