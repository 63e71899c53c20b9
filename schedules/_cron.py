"""Calendar schedules: ``cron(expression, tz=...)`` waits for the next match of an expression."""

# ruff: noqa: A002 - `input` is the step contract's argument name; overrides must keep it.

from __future__ import annotations

import datetime
import math
from typing import Any, Final

from schedules._cron_fields import CronFields, Wall, parse_fields
from schedules._durations import MAX_DELAY, shown
from schedules._frozen import field, frozen
from schedules._schedule import RandomLike, Schedule, bad_now

__all__ = ["cron"]

_UTC: Final = datetime.UTC
_EPOCH: Final = datetime.datetime(1970, 1, 1)  # naive: a wall time in UTC
_MINUTE: Final = datetime.timedelta(minutes=1)
_ZERO: Final = datetime.timedelta(0)
_DAY_SECONDS: Final = 86_400


def _seconds(moment: datetime.datetime) -> int:
    """A naive UTC datetime as whole epoch seconds (exact: integer arithmetic only)."""
    since = moment - _EPOCH
    return since.days * _DAY_SECONDS + since.seconds


# The readings of `now` a step accepts, as epoch seconds: a day inside datetime's range at
# each end, so that no zone's offset (at most about 16 h) carries a wall time out of it.
_FIRST_NOW: Final = _seconds(datetime.datetime(1, 1, 2))
_END_NOW: Final = _seconds(datetime.datetime(9999, 12, 31))


@frozen(repr=False)
class _Cron(Schedule[object, float]):
    """
    State: the due time given by the last step (epoch seconds), or ``None`` before the first.

    Equality is the expression (whitespace-normalized, as written) and the zone's name.
    """

    expression: str
    tz: str
    fields: CronFields = field(eq=False)
    zone: datetime.tzinfo = field(eq=False)

    @property
    def reads_epoch(self) -> bool:
        """Always: a cron reads *now* as epoch seconds."""
        return True

    def initial(self) -> Any:
        return None

    def step(
        self, now: float, input: object, state: Any, rng: RandomLike
    ) -> tuple[Any, float, float | None]:
        try:
            if now * 0.0:  # NaN or infinite: only a finite number times 0.0 is 0.0
                raise ValueError
        except (ArithmeticError, TypeError, ValueError):
            raise bad_now(now) from None
        if state is not None and now < state:
            # Stepped again before the due time it gave (a clock set back, a early wake-up):
            # the same due time, never an earlier one, so nothing runs twice. Effect does this.
            due: float | None = state
        else:
            due = self._due_after(now)
        if due is None:
            # No match before the end of the year 9999: the schedule is done.
            return state, 0.0 if state is None else float(state), None
        delay = due - now
        return due, due, delay if delay < MAX_DELAY else MAX_DELAY

    def _due_after(self, now: float) -> float | None:
        """The first instant strictly after *now* (epoch seconds) at which the expression fires."""
        second = math.floor(now)
        if not _FIRST_NOW <= second < _END_NOW:
            raise _out_of_range(now)
        moment = _EPOCH + datetime.timedelta(seconds=second)
        zone = self.zone
        if zone is not _UTC:
            moment = zone.fromutc(moment.replace(tzinfo=zone)).replace(tzinfo=None)
        # The next whole wall minute: its instant is after `now` unless the zone turned its
        # clocks back (then the loop below passes the wall times that already fired).
        start = moment.replace(second=0) + _MINUTE
        fields = self.fields
        while True:
            wall = fields.next_wall(_wall(start))
            if wall is None:
                return None
            due = _instant(wall, zone)
            if due > now:
                return float(due)
            start = datetime.datetime(*wall) + _MINUTE

    def __repr__(self) -> str:
        if self.tz == "UTC":
            return f"cron({self.expression!r})"
        return f"cron({self.expression!r}, tz={self.tz!r})"


def _wall(moment: datetime.datetime) -> Wall:
    return moment.year, moment.month, moment.day, moment.hour, moment.minute


def _instant(wall: Wall, zone: datetime.tzinfo) -> int:
    """
    The instant (epoch seconds) at which wall time *wall* fires in *zone*.

    A wall time that occurs twice (clocks set back) fires at its first occurrence; one that
    does not occur (clocks set forward over it) fires at the first instant after the gap.
    """
    naive = datetime.datetime(*wall)
    if zone is _UTC:
        return _seconds(naive)
    # zoneinfo (PEP 495): fold=0 takes the offset from before a transition, fold=1 the one
    # after, both in a repeated hour and in a skipped one.
    before = naive.replace(tzinfo=zone).utcoffset() or _ZERO
    after = naive.replace(tzinfo=zone, fold=1).utcoffset() or _ZERO
    if after <= before:
        return _seconds(naive - before)
    # In a gap: the transition lies after `naive - after` and at or before `naive - before`.
    low, high = _seconds(naive - after), _seconds(naive - before)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset_at(middle, zone) == before:
            low = middle
        else:
            high = middle
    return high


def _offset_at(instant: int, zone: datetime.tzinfo) -> datetime.timedelta:
    moment = _EPOCH + datetime.timedelta(seconds=instant)
    return zone.fromutc(moment.replace(tzinfo=zone)).utcoffset() or _ZERO


def _out_of_range(now: float) -> ValueError:
    reason = f"now must be epoch seconds from 0001-01-02 to 9999-12-30 (UTC), got {shown(now)}"
    if _FIRST_NOW <= now / 1000 < _END_NOW:
        reason += " (milliseconds? cron reads seconds)"
    return ValueError(reason)


def _zone(tz: str) -> datetime.tzinfo:
    """The time zone named *tz*; ``"UTC"`` needs no zone data."""
    if tz == "UTC":
        return _UTC
    # Imported here: zoneinfo costs more to import than all of schedules, and UTC needs none.
    import zoneinfo  # noqa: PLC0415

    try:
        return zoneinfo.ZoneInfo(tz)
    except (KeyError, ValueError, OSError):
        # ZoneInfoNotFoundError is a KeyError; a path-like key is a ValueError, a directory or
        # an overlong name an OSError, a file that is not zone data a ValueError.
        msg = (
            f"tz {shown(tz)} is not a time zone: give an IANA name such as 'Europe/Berlin' or "
            "'UTC' (zone data comes from the system's zoneinfo files, or the tzdata package)"
        )
        raise ValueError(msg) from None


def cron(expression: str, *, tz: str = "UTC") -> Schedule[object, float]:
    """
    Recur forever at the times a five-field cron expression names, in the time zone *tz*.

    Each step waits until the next match strictly after *now*, which this schedule reads as
    seconds since the Unix epoch (the durable engine's clock is such a clock); the output is
    that due time, in epoch seconds, and the delay is ``due - now`` (waits longer than
    ``MAX_DELAY`` wait ``MAX_DELAY``, the output keeps the true due time). Stepped again before
    the due time it gave, it gives the same due time, never an earlier one.

    The fields are minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
    ``jan``-``dec``) and day of week (0-7, 0 and 7 are Sunday, or ``sun``-``sat``); names are
    case-insensitive. Each field is ``*``, a value, a range ``a-b`` or a list of these
    (``1,15,30``), each with an optional step (``*/15``, ``1-10/2``; ``5/15`` is ``5-59/15``).
    When both day fields are restricted, a day matching either fires; when one starts with
    ``*`` (``*/2`` too), both must match (Vixie cron's rule).

    Time zones: wall times are read in *tz*. A wall time that a change of clocks skips fires at
    the first instant after the gap (in Europe/Berlin on 2026-03-29, ``30 2 * * *`` fires at
    03:00 CEST); one that occurs twice fires once, at its first occurrence. No match before
    the year 10000: the schedule stops.

    Args:
        expression: Five fields separated by whitespace, such as ``"0 3 * * *"``.
        tz: An IANA time zone name such as ``"Europe/Berlin"``; default ``"UTC"`` (not the
            host's zone).

    Raises:
        ValueError: If the expression is malformed (the message names the field and the bad
            value), has other than five fields (a seconds field is refused), can never match
            (``0 0 30 2 *``), or *tz* names no time zone; when stepping, if *now* is not in the
            years 1 to 9999.
        TypeError: If *expression* or *tz* is not a ``str``.

    Example:
        >>> import datetime
        >>> from zoneinfo import ZoneInfo
        >>> at_three = cron("0 3 * * *")
        >>> now = datetime.datetime(2026, 3, 28, 12, 0, tzinfo=datetime.timezone.utc).timestamp()
        >>> state, due, delay = at_three.step(now, None, at_three.initial(), None)
        >>> datetime.datetime.fromtimestamp(due, datetime.timezone.utc).isoformat(), delay
        ('2026-03-29T03:00:00+00:00', 54000.0)
        >>> skipped = cron("30 2 * * *", tz="Europe/Berlin")
        >>> state, due, delay = skipped.step(now, None, skipped.initial(), None)
        >>> datetime.datetime.fromtimestamp(due, ZoneInfo("Europe/Berlin")).isoformat()
        '2026-03-29T03:00:00+02:00'
    """
    # Callers without a type checker pass bytes or None: say so rather than fail later.
    if not isinstance(expression, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        msg = f"cron expression must be a str such as '0 3 * * *', got {shown(expression)}"
        raise TypeError(msg)
    if not isinstance(tz, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        msg = f"tz must be a str naming a time zone such as 'Europe/Berlin', got {shown(tz)}"
        raise TypeError(msg)
    fields = parse_fields(expression)
    return _Cron(" ".join(expression.split()), tz, fields, _zone(tz))
