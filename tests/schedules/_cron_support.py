"""Helpers for the cron tests: ISO times in and out, and a brute-force oracle, minute by minute."""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

from schedules import Schedule
from tests.schedules._support import ConstantRandom

UTC = datetime.UTC
RNG = ConstantRandom(0.5)


def epoch(iso: str) -> float:
    """``"2026-03-28T12:00Z"`` (or with seconds, fractions, an offset) as epoch seconds."""
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def iso(seconds: float) -> str:
    """Epoch seconds as ``"2026-03-29T03:00Z"`` (UTC; seconds shown only when not 0)."""
    moment = datetime.datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    return moment.isoformat(timespec="minutes" if moment.second == 0 else "seconds") + "Z"


def local(seconds: float, tz: str) -> str:
    """Epoch seconds as local ISO time with its offset: ``"2026-03-29T03:00+02:00"``."""
    return datetime.datetime.fromtimestamp(seconds, ZoneInfo(tz)).isoformat(timespec="minutes")


def dues(schedule: Schedule[Any, Any], start: str, n: int) -> list[str]:
    """The first *n* due times (ISO UTC), each step made at the previous due time."""
    return [iso(due) for due in due_times(schedule, epoch(start), n)]


def due_times(schedule: Schedule[Any, Any], now: float, n: int) -> list[float]:
    """The first *n* outputs (epoch seconds), each step made at the previous due time."""
    state = schedule.initial()
    found: list[float] = []
    for _ in range(n):
        state, due, delay = schedule.step(now, None, state, RNG)
        if delay is None:
            break
        found.append(due)
        now = due
    return found


def next_due(schedule: Schedule[Any, Any], now: float) -> float:
    """The output of one first step at *now*."""
    _, due, delay = schedule.step(now, None, schedule.initial(), RNG)
    assert delay is not None
    return float(due)


class Oracle:
    """
    When a cron fires, decided minute by minute from the field sets alone (no parser).

    Instant *t* (a whole UTC minute) fires if its wall time matches and is that wall time's
    first occurrence, or if the clocks jumped forward at *t* over a wall time that matches.
    """

    def __init__(
        self,
        sets: tuple[set[int], set[int], set[int], set[int], set[int]],
        *,
        day_star: bool,
        weekday_star: bool,
        tz: str,
    ) -> None:
        self.minutes, self.hours, self.days, self.months, weekdays = sets
        self.weekdays = {day % 7 for day in weekdays}
        self.either = not day_star and not weekday_star
        self.zone = datetime.UTC if tz == "UTC" else ZoneInfo(tz)

    def matches(self, wall: datetime.datetime) -> bool:
        """Whether the naive wall time matches the fields."""
        if wall.minute not in self.minutes or wall.hour not in self.hours:
            return False
        if wall.month not in self.months:
            return False
        by_date = wall.day in self.days
        by_weekday = wall.isoweekday() % 7 in self.weekdays
        return (by_date or by_weekday) if self.either else (by_date and by_weekday)

    def fires(self, minute: int) -> bool:
        """Whether the cron fires at the instant *minute* (epoch seconds, a multiple of 60)."""
        at = datetime.datetime.fromtimestamp(minute, UTC).astimezone(self.zone)
        wall = at.replace(tzinfo=None)
        first = wall.replace(tzinfo=self.zone, fold=0).timestamp()
        if first == minute and self.matches(wall):
            return True
        before = datetime.datetime.fromtimestamp(minute - 1, UTC).astimezone(self.zone)
        jump = (at.utcoffset() or datetime.timedelta(0)) - (
            before.utcoffset() or datetime.timedelta(0)
        )
        if jump <= datetime.timedelta(0):
            return False
        # Clocks jumped forward at this instant: the skipped wall times fire here.
        skipped = wall - jump
        return any(self.matches(skipped + datetime.timedelta(minutes=k)) for k in _minutes(jump))

    def first_after(self, now: float, limit: float) -> float | None:
        """The first firing instant strictly after *now* and at most *limit*, else ``None``."""
        minute = (math.floor(now) // 60 + 1) * 60
        while minute <= limit:
            if minute > now and self.fires(minute):
                return float(minute)
            minute += 60
        return None


def _minutes(span: datetime.timedelta) -> Iterator[int]:
    return iter(range(int(span.total_seconds()) // 60))
