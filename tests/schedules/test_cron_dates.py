"""cron(...) against known dates: every field syntax, the day-fields rule, leap days, year ends."""

from __future__ import annotations

import pytest

from schedules import MAX_DELAY, cron
from tests.schedules._cron_support import RNG, dues, epoch, iso, next_due


def test_next_daily_time_after_an_instant() -> None:
    """``0 3 * * *`` after noon on 2026-03-28 (UTC) is 03:00 the next day, then daily."""
    expected = ["2026-03-29T03:00Z", "2026-03-30T03:00Z", "2026-03-31T03:00Z"]

    assert expected == dues(cron("0 3 * * *"), "2026-03-28T12:00Z", 3)


@pytest.mark.parametrize(
    ("now", "due"),
    [
        ("2026-03-29T02:59:59.999Z", "2026-03-29T03:00Z"),
        ("2026-03-29T03:00Z", "2026-03-30T03:00Z"),
        ("2026-03-29T03:00:00.001Z", "2026-03-30T03:00Z"),
        ("2026-03-29T03:00:30Z", "2026-03-30T03:00Z"),
    ],
)
def test_the_due_time_is_strictly_after_now(now: str, due: str) -> None:
    """A step exactly at a match waits for the next one; a millisecond before, for this one."""
    assert due == iso(next_due(cron("0 3 * * *"), epoch(now)))


def test_output_is_the_due_time_and_delay_the_seconds_until_it() -> None:
    """The output is the due time in epoch seconds; the delay is due - now, in seconds."""
    schedule = cron("*/15 * * * *")
    now = epoch("2026-03-28T12:07:30.25Z")

    state, due, delay = schedule.step(now, None, schedule.initial(), RNG)

    assert (epoch("2026-03-28T12:15Z"), 449.75) == (due, delay)
    assert due == state
    assert isinstance(due, float)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("* * * * *", ["2026-03-28T12:01Z", "2026-03-28T12:02Z", "2026-03-28T12:03Z"]),
        ("7 * * * *", ["2026-03-28T12:07Z", "2026-03-28T13:07Z", "2026-03-28T14:07Z"]),
        ("5,20 * * * *", ["2026-03-28T12:05Z", "2026-03-28T12:20Z", "2026-03-28T13:05Z"]),
        ("10-12 * * * *", ["2026-03-28T12:10Z", "2026-03-28T12:11Z", "2026-03-28T12:12Z"]),
        ("*/20 * * * *", ["2026-03-28T12:20Z", "2026-03-28T12:40Z", "2026-03-28T13:00Z"]),
        ("1-10/4 * * * *", ["2026-03-28T12:01Z", "2026-03-28T12:05Z", "2026-03-28T12:09Z"]),
        # A value with a step runs to the end of the field: 50/5 is 50-59/5.
        ("50/5 * * * *", ["2026-03-28T12:50Z", "2026-03-28T12:55Z", "2026-03-28T13:50Z"]),
        ("0 9-17/4 * * *", ["2026-03-28T13:00Z", "2026-03-28T17:00Z", "2026-03-29T09:00Z"]),
        ("0,30 1,23 * * *", ["2026-03-28T23:00Z", "2026-03-28T23:30Z", "2026-03-29T01:00Z"]),
        ("0 0 1,15 * *", ["2026-04-01T00:00Z", "2026-04-15T00:00Z", "2026-05-01T00:00Z"]),
        ("0 0 1 jan,jul *", ["2026-07-01T00:00Z", "2027-01-01T00:00Z", "2027-07-01T00:00Z"]),
        ("0 0 1 1,7 *", ["2026-07-01T00:00Z", "2027-01-01T00:00Z", "2027-07-01T00:00Z"]),
        ("0 0 1 JUN-Aug *", ["2026-06-01T00:00Z", "2026-07-01T00:00Z", "2026-08-01T00:00Z"]),
        ("0 0 1 */5 *", ["2026-06-01T00:00Z", "2026-11-01T00:00Z", "2027-01-01T00:00Z"]),
        # 2026-03-28 is a Saturday.
        ("0 12 * * mon", ["2026-03-30T12:00Z", "2026-04-06T12:00Z", "2026-04-13T12:00Z"]),
        ("0 12 * * 1", ["2026-03-30T12:00Z", "2026-04-06T12:00Z", "2026-04-13T12:00Z"]),
        ("0 9 * * Mon-FRI", ["2026-03-30T09:00Z", "2026-03-31T09:00Z", "2026-04-01T09:00Z"]),
        ("0 9 * * sat,sun", ["2026-03-29T09:00Z", "2026-04-04T09:00Z", "2026-04-05T09:00Z"]),
        ("0 9 * * 5-7", ["2026-03-29T09:00Z", "2026-04-03T09:00Z", "2026-04-04T09:00Z"]),
    ],
)
def test_each_field_syntax(expression: str, expected: list[str]) -> None:
    """Values, lists, ranges, steps, names and mixes of them, from noon on 2026-03-28 (UTC)."""
    assert expected == dues(cron(expression), "2026-03-28T12:00Z", 3)


@pytest.mark.parametrize("sunday", ["0", "7", "sun", "SUN", "0,7", "7-7"])
def test_sunday_is_0_7_or_sun(sunday: str) -> None:
    """Day of week 0, 7 and ``sun`` are all Sunday."""
    expected = ["2026-03-29T06:00Z", "2026-04-05T06:00Z"]

    assert expected == dues(cron(f"0 6 * * {sunday}"), "2026-03-28T12:00Z", 2)


# March 2026: Sunday the 1st; Fridays 6, 13, 20, 27. April: Fridays 3, 10, 17, 24; Monday 13.
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # Both restricted: the 13th or a Friday.
        ("0 0 13 * 5", ["03-06", "03-13", "03-20", "03-27", "04-03", "04-10", "04-13"]),
        ("0 0 13 * fri", ["03-06", "03-13", "03-20", "03-27", "04-03", "04-10", "04-13"]),
        # 1-31 does not start with `*`: still restricted, so every day matches by date.
        ("0 0 1-31 * 5", ["03-02", "03-03", "03-04", "03-05", "03-06", "03-07", "03-08"]),
        # A day field starting with `*` (a step too) makes it "both": odd days that are Fridays.
        ("0 0 */2 * 5", ["03-13", "03-27", "04-03", "04-17", "05-01", "05-15", "05-29"]),
        # The 13th that is a Sunday or a Friday (dow `*/5` is 0 and 5).
        ("0 0 13 * */5", ["03-13", "09-13"]),
        ("0 0 13 * *", ["03-13", "04-13", "05-13"]),
        ("0 0 * * 5", ["03-06", "03-13", "03-20"]),
    ],
)
def test_both_day_fields_follow_vixie_cron(expression: str, expected: list[str]) -> None:
    """Restricted day-of-month and day-of-week match either; one starting with ``*``: both."""
    found = dues(cron(expression), "2026-03-01T00:00Z", len(expected))

    assert [f"2026-{day}T00:00Z" for day in expected] == found


def test_leap_day_fires_only_in_leap_years() -> None:
    """``0 0 29 2 *`` skips common years and 2100 (not a leap year), keeps 2000 and 2400."""
    assert ["2028-02-29T00:00Z", "2032-02-29T00:00Z"] == dues(
        cron("0 0 29 2 *"), "2026-03-01T00:00Z", 2
    )
    assert ["2096-02-29T00:00Z", "2104-02-29T00:00Z"] == dues(
        cron("0 0 29 2 *"), "2095-01-01T00:00Z", 2
    )
    assert ["2000-02-29T00:00Z", "2004-02-29T00:00Z"] == dues(
        cron("0 0 29 2 *"), "1999-01-01T00:00Z", 2
    )
    assert ["2396-02-29T00:00Z", "2400-02-29T00:00Z"] == dues(
        cron("0 0 29 2 *"), "2395-01-01T00:00Z", 2
    )


def test_day_31_skips_shorter_months() -> None:
    """``0 0 31 * *`` fires only in months with 31 days."""
    expected = ["2026-03-31T00:00Z", "2026-05-31T00:00Z", "2026-07-31T00:00Z", "2026-08-31T00:00Z"]

    assert expected == dues(cron("0 0 31 * *"), "2026-03-01T00:00Z", 4)


@pytest.mark.parametrize(
    ("expression", "now", "expected"),
    [
        ("0 0 1 1 *", "2026-12-31T23:59:59Z", ["2027-01-01T00:00Z", "2028-01-01T00:00Z"]),
        ("59 23 31 12 *", "2026-12-31T23:59Z", ["2027-12-31T23:59Z", "2028-12-31T23:59Z"]),
        ("* * * * *", "2026-12-31T23:58:30Z", ["2026-12-31T23:59Z", "2027-01-01T00:00Z"]),
        ("0 0 * * *", "2028-12-31T12:00Z", ["2029-01-01T00:00Z", "2029-01-02T00:00Z"]),
        ("0 12 * dec mon", "2026-12-28T13:00Z", ["2027-12-06T12:00Z", "2027-12-13T12:00Z"]),
    ],
)
def test_year_boundaries(expression: str, now: str, expected: list[str]) -> None:
    """The search carries over into the next year (and past a leap year's last day)."""
    assert expected == dues(cron(expression), now, 2)


def test_a_wait_beyond_max_delay_keeps_the_true_due_time() -> None:
    """A due time years away: the delay is MAX_DELAY (a wake-up), the output the real due."""
    schedule = cron("0 0 29 2 *")
    now = epoch("2026-03-01T00:00Z")

    state, due, delay = schedule.step(now, None, schedule.initial(), RNG)

    assert (epoch("2028-02-29T00:00Z"), MAX_DELAY) == (due, delay)
    # Woken after MAX_DELAY, stepped again: the same due time, again at most MAX_DELAY.
    state, again, rest = schedule.step(now + MAX_DELAY, None, state, RNG)
    assert (due, MAX_DELAY) == (again, rest)
    # Close to it, the delay is the true rest of the wait.
    late = epoch("2028-02-28T00:00Z")
    assert (due, 86400.0) == schedule.step(late, None, state, RNG)[1:]


def test_a_step_before_the_last_due_time_gives_it_again() -> None:
    """Stepped again before the due time it gave (a clock set back), never an earlier one."""
    schedule = cron("0 * * * *")
    state, due, _ = schedule.step(epoch("2026-03-28T12:30Z"), None, schedule.initial(), RNG)
    assert epoch("2026-03-28T13:00Z") == due

    # The clock went back two hours: a fresh schedule would say 11:00; this one waits for 13:00.
    back = epoch("2026-03-28T10:30Z")
    state, again, delay = schedule.step(back, None, state, RNG)

    assert (due, 9000.0) == (again, delay)
    assert epoch("2026-03-28T11:00Z") == next_due(schedule, back)
    # At the due time it moves on.
    assert epoch("2026-03-28T14:00Z") == schedule.step(due, None, state, RNG)[1]


def test_no_match_before_the_year_10000_stops() -> None:
    """Past the last match the calendar holds, the schedule is done (delay None)."""
    schedule = cron("0 0 29 2 *")
    state, due, _ = schedule.step(epoch("9995-06-01T00:00Z"), None, schedule.initial(), RNG)
    assert "9996-02-29T00:00Z" == iso(due)

    assert (state, due, None) == schedule.step(due, None, state, RNG)
    assert (None, 0.0, None) == schedule.step(due, None, schedule.initial(), RNG)


def test_the_last_day_searched_is_9999_12_30() -> None:
    """Due times run to 9999-12-30 23:59 UTC; one more step stops."""
    schedule = cron("59 23 * * *")

    assert ["9999-12-29T23:59Z", "9999-12-30T23:59Z"] == dues(schedule, "9999-12-29T12:00Z", 5)


def test_early_years_and_negative_epoch_seconds() -> None:
    """Times before 1970 (negative epoch seconds) and in the year 1 work."""
    assert ["1969-12-31T03:00Z", "1970-01-01T03:00Z"] == dues(
        cron("0 3 * * *"), "1969-12-30T12:00Z", 2
    )
    assert ["0001-01-02T03:00Z"] == dues(cron("0 3 * * *"), "0001-01-02T00:00Z", 1)


def test_a_rare_match_is_found_quickly_by_jumping() -> None:
    """The 13th that is a Sunday and in February: years apart, found by field jumps."""
    schedule = cron("0 0 13 2 */7")

    assert ["2028-02-13T00:00Z", "2033-02-13T00:00Z", "2039-02-13T00:00Z"] == dues(
        schedule, "2026-01-01T00:00Z", 3
    )
