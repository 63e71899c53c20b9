"""
Cron fields: parse the five fields of a cron expression and find the next matching wall time.

Wall times here are naive: ``(year, month, day, hour, minute)`` on a calendar without zones.
``_cron`` maps them to instants in a time zone.
"""

from __future__ import annotations

import datetime
from bisect import bisect_left
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, TypeAlias

from schedules._durations import shown
from schedules._frozen import frozen

__all__ = ["LAST_DAY", "CronFields", "Wall", "parse_fields"]

Wall: TypeAlias = tuple[int, int, int, int, int]
"""A wall time: year, month (1-12), day (1-31), hour (0-23), minute (0-59)."""

LAST_DAY: Final = (9999, 12, 30)
"""The last calendar day searched: later wall times are past the end of ``datetime``'s range
once a zone's offset is applied."""

_MONTHS: Final[Mapping[str, int]] = MappingProxyType(
    {
        name: number
        for number, name in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
            start=1,
        )
    }
)
_WEEKDAYS: Final[Mapping[str, int]] = MappingProxyType(
    {name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
)
_NO_NAMES: Final[Mapping[str, int]] = MappingProxyType({})
# The longest day of each month in any year (February 29 in leap years).
_LONGEST: Final = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_DIGITS: Final = frozenset("0123456789")
# More digits than any field's largest value has: refused before int() sees them, so a
# 10,000-digit number costs nothing and never meets Python's digit limit.
_MOST_DIGITS: Final = 4


@frozen
class _Field:
    """One field's rules: its name in messages, its range, and its names (months, weekdays)."""

    label: str
    low: int
    high: int
    names: Mapping[str, int]

    def span(self) -> str:
        """The accepted values, as an error message shows them."""
        if self.names is _MONTHS:
            return f"{self.low}-{self.high} or jan-dec"
        if self.names is _WEEKDAYS:
            return f"{self.low}-{self.high} (0 and 7 are Sunday) or sun-sat"
        return f"{self.low}-{self.high}"


_FIELDS: Final = (
    _Field("minute", 0, 59, _NO_NAMES),
    _Field("hour", 0, 23, _NO_NAMES),
    _Field("day-of-month", 1, 31, _NO_NAMES),
    _Field("month", 1, 12, _MONTHS),
    _Field("day-of-week", 0, 7, _WEEKDAYS),
)


class _FieldError(ValueError):
    """A field's text is wrong: *problem* says how (the caller adds the expression)."""


@frozen
class CronFields:
    """
    The parsed fields: sorted allowed values, and how the two day fields combine.

    Attributes:
        minutes: Allowed minutes, ascending.
        hours: Allowed hours, ascending.
        days: Allowed days of the month, ascending.
        months: Allowed months, ascending.
        weekdays: Allowed days of the week, 0 (Sunday) to 6 (7 is folded into 0).
        either_day: True when both day fields are restricted (neither starts with ``*``): a
            day matches if either field allows it, as Vixie cron does; else both must.
    """

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: frozenset[int]
    either_day: bool

    def next_wall(self, start: Wall) -> Wall | None:
        """
        The first matching wall time at or after *start*, or ``None`` if none comes by
        ``LAST_DAY``.

        The search jumps field by field (to the next allowed month, day, hour, minute), so it
        takes a few steps per month it passes, never one per minute.
        """
        year, month, day, hour, minute = start
        months, hours, minutes = self.months, self.hours, self.minutes
        while (year, month, day) <= LAST_DAY:
            at = bisect_left(months, month)
            if at == len(months):
                year, month, day, hour, minute = year + 1, months[0], 1, 0, 0
                continue
            if months[at] != month:
                month, day, hour, minute = months[at], 1, 0, 0
            found = self._day_from(year, month, day)
            if found is None:
                year, month = (year, month + 1) if month < 12 else (year + 1, 1)
                day, hour, minute = 1, 0, 0
                continue
            if found != day:
                day, hour, minute = found, 0, 0
            at = bisect_left(hours, hour)
            if at == len(hours):
                day, hour, minute = day + 1, 0, 0
                continue
            if hours[at] != hour:
                hour, minute = hours[at], 0
            at = bisect_left(minutes, minute)
            if at == len(minutes):
                hour, minute = hour + 1, 0
                continue
            if (year, month, day) > LAST_DAY:
                return None
            return year, month, day, hour, minutes[at]
        return None

    def _day_from(self, year: int, month: int, day: int) -> int | None:
        """The first matching day of this month from *day* on, or ``None``."""
        last = _days_in(year, month)
        if day > last:
            return None
        days, weekdays, either = self.days, self.weekdays, self.either_day
        # Sunday is 0, as cron counts.
        weekday = datetime.date(year, month, day).isoweekday() % 7
        for candidate in range(day, last + 1):
            by_date = candidate in days
            by_weekday = weekday in weekdays
            if (by_date or by_weekday) if either else (by_date and by_weekday):
                return candidate
            weekday = (weekday + 1) % 7
        return None


def _days_in(year: int, month: int) -> int:
    if month != 2:
        return _LONGEST[month]
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 29 if leap else 28


def parse_fields(expression: str) -> CronFields:
    """
    Parse a five-field cron expression (already known to be a ``str``).

    Raises:
        ValueError: Naming the expression and, for a bad field, the field and what is wrong.
    """
    parts = expression.split()
    if not parts:
        msg = "cron expression is empty; give five fields such as '0 3 * * *'"
        raise ValueError(msg)
    if parts[0].startswith("@"):
        msg = (
            f"cron expression {shown(expression)}: nicknames such as @daily are not "
            "supported; give five fields (minute hour day-of-month month day-of-week) "
            "such as '0 0 * * *'"
        )
        raise ValueError(msg)
    if len(parts) != len(_FIELDS):
        extra = " (a seconds or a year field is not supported)" if len(parts) in (6, 7) else ""
        msg = (
            f"cron expression {shown(expression)} has {len(parts)} field"
            f"{'' if len(parts) == 1 else 's'}; give five: minute hour day-of-month month "
            f"day-of-week{extra}"
        )
        raise ValueError(msg)
    values: list[set[int]] = []
    for field, text in zip(_FIELDS, parts, strict=True):
        try:
            values.append(_parse_field(field, text))
        except _FieldError as error:
            where = f"the {field.label} field {shown(text)}"
            msg = f"cron expression {shown(expression)}: {where} {error}"
            raise ValueError(msg) from None
    minutes, hours, days, months, weekdays = values
    # Vixie cron's rule: a day field that starts with `*` (even `*/2`) does not restrict the
    # day on its own; if both are restricted, either may match.
    either = not parts[2].startswith("*") and not parts[4].startswith("*")
    fields = CronFields(
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=tuple(sorted(days)),
        months=tuple(sorted(months)),
        weekdays=frozenset(day % 7 for day in weekdays),
        either_day=either,
    )
    if not either and not any(day <= _LONGEST[month] for month in months for day in days):
        # Weekdays cannot make it impossible: every (month, day) that exists falls on each
        # weekday in some year. Only a day no chosen month has can.
        shown_days = ", ".join(str(day) for day in fields.days)
        shown_months = ", ".join(str(month) for month in fields.months)
        msg = (
            f"cron expression {shown(expression)} never matches: no month in the month field "
            f"({shown_months}) has a day from the day-of-month field ({shown_days})"
        )
        raise ValueError(msg)
    return fields


def _parse_field(field: _Field, text: str) -> set[int]:
    values: set[int] = set()
    for element in text.split(","):
        values.update(_parse_element(field, element))
    return values


def _parse_element(field: _Field, element: str) -> range:
    """One list element: ``*``, ``N``, ``A-B``, each with an optional ``/STEP``."""
    if not element:
        raise _FieldError("has an empty list element (a comma too many?)")
    body, slash, step_text = element.partition("/")
    step = 1
    if slash:
        step = _number(field, step_text, what="step", names=False)
        if step < 1:
            raise _FieldError(f"has the step {step}; a step must be at least 1")
        if step > field.high:
            raise _FieldError(
                f"has the step {step}; a step must be at most {field.high}, the field's largest"
            )
    if body == "*":
        return range(field.low, field.high + 1, step)
    first_text, dash, last_text = body.partition("-")
    first = _value(field, first_text)
    if not dash:
        # `N/STEP` runs from N to the field's end, as Effect and most crons read it.
        return range(first, (field.high if slash else first) + 1, step)
    last = _value(field, last_text)
    if first > last:
        raise _FieldError(f"has the range {body}, which runs backwards ({first} > {last})")
    return range(first, last + 1, step)


def _value(field: _Field, text: str) -> int:
    value = _number(field, text, what="value", names=True)
    if not field.low <= value <= field.high:
        raise _FieldError(f"has {value}, out of range: allowed are {field.span()}")
    return value


def _number(field: _Field, text: str, *, what: str, names: bool) -> int:
    if not text:
        raise _FieldError(f"is missing a {what} (nothing before or after '-' or '/'?)")
    if names and field.names and text.isascii():
        named = field.names.get(text.lower())
        if named is not None:
            return named
    if not _DIGITS.issuperset(text):
        if text == "*":
            reason = "'*' stands alone or before '/'"
        elif any(character.isdigit() for character in text):
            reason = "a number is ASCII digits 0-9"
        else:
            kind = "a number or a name" if names and field.names else "a number"
            reason = f"expected {kind}; allowed are {field.span()}"
        raise _FieldError(f"has the {what} {shown(text)}, which is not valid: {reason}")
    if len(text.lstrip("0")) > _MOST_DIGITS:
        # Larger than any field's largest value: said without converting a huge number.
        if what == "step":
            raise _FieldError(f"has the step {shown(text)}; a step must be at most {field.high}")
        raise _FieldError(f"has {shown(text)}, out of range: allowed are {field.span()}")
    return int(text)
