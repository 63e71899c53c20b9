"""cron(..., tz=...) across changes of clocks: a skipped wall time fires after, a repeated once."""

from __future__ import annotations

import pytest

from schedules import cron
from tests.schedules._cron_support import RNG, dues, epoch, iso, local, next_due

# Europe/Berlin 2026: at 01:00 UTC on 03-29 clocks go 02:00 CET -> 03:00 CEST (02:00-02:59 never
# happen); at 01:00 UTC on 10-25 they go 03:00 CEST -> 02:00 CET (02:00-02:59 happen twice).
BERLIN = "Europe/Berlin"
# America/New_York 2026: 03-08 at 07:00 UTC 02:00 EST -> 03:00 EDT; 11-01 at 06:00 UTC
# 02:00 EDT -> 01:00 EST.
NEW_YORK = "America/New_York"


def test_a_skipped_wall_time_fires_at_the_first_instant_after_the_gap() -> None:
    """Berlin spring forward: ``30 2 * * *`` fires at 03:00 CEST (01:00 UTC), then at 02:30."""
    found = dues(cron("30 2 * * *", tz=BERLIN), "2026-03-28T12:00Z", 3)

    assert ["2026-03-29T01:00Z", "2026-03-30T00:30Z", "2026-03-31T00:30Z"] == found
    assert "2026-03-29T03:00+02:00" == local(epoch(found[0]), BERLIN)
    assert "2026-03-30T02:30+02:00" == local(epoch(found[1]), BERLIN)


def test_skipped_wall_times_and_the_first_after_the_gap_fire_once() -> None:
    """02:00, 02:30 (skipped) and 03:00 (the first wall time after the gap): one run, 01:00 UTC."""
    found = dues(cron("0,30 2,3 * * *", tz=BERLIN), "2026-03-28T23:00Z", 3)

    assert ["2026-03-29T01:00Z", "2026-03-29T01:30Z", "2026-03-30T00:00Z"] == found


def test_every_quarter_hour_across_spring_forward() -> None:
    """``*/15``: 01:45 CET, then 03:00 CEST: the quarter hours of the skipped hour fire once."""
    found = dues(cron("*/15 * * * *", tz=BERLIN), "2026-03-29T00:40Z", 3)

    assert ["2026-03-29T00:45Z", "2026-03-29T01:00Z", "2026-03-29T01:15Z"] == found
    assert ["01:45+01:00", "03:00+02:00", "03:15+02:00"] == [
        local(epoch(due), BERLIN)[11:] for due in found
    ]


def test_a_repeated_wall_time_fires_once_at_its_first_occurrence() -> None:
    """Berlin fall back: ``30 2 * * *`` fires at 02:30 CEST (00:30 UTC), not again at 02:30 CET."""
    found = dues(cron("30 2 * * *", tz=BERLIN), "2026-10-24T12:00Z", 3)

    assert ["2026-10-25T00:30Z", "2026-10-26T01:30Z", "2026-10-27T01:30Z"] == found
    assert "2026-10-25T02:30+02:00" == local(epoch(found[0]), BERLIN)


@pytest.mark.parametrize("now", ["2026-10-25T01:10Z", "2026-10-25T01:30Z", "2026-10-25T01:59Z"])
def test_inside_the_repeated_hour_the_passed_wall_time_is_not_repeated(now: str) -> None:
    """A fresh schedule stepped in the second 02:xx hour (CET) waits for the next day's 02:30."""
    assert "2026-10-26T01:30Z" == iso(next_due(cron("30 2 * * *", tz=BERLIN), epoch(now)))


def test_every_half_hour_is_quiet_in_the_repeated_hour() -> None:
    """``*/30``: 02:00 and 02:30 CEST fire; their repeats in CET do not; 03:00 CET does."""
    found = dues(cron("*/30 * * * *", tz=BERLIN), "2026-10-24T23:45Z", 4)

    assert ["2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T02:00Z", "2026-10-25T02:30Z"] == (
        found
    )


def test_daily_time_keeps_its_wall_clock_across_both_changes() -> None:
    """``0 3 * * *`` in Berlin is 02:00 UTC in winter, 01:00 UTC in summer."""
    assert ["2026-03-28T02:00Z", "2026-03-29T01:00Z", "2026-03-30T01:00Z"] == dues(
        cron("0 3 * * *", tz=BERLIN), "2026-03-27T12:00Z", 3
    )
    assert ["2026-10-24T01:00Z", "2026-10-25T02:00Z", "2026-10-26T02:00Z"] == dues(
        cron("0 3 * * *", tz=BERLIN), "2026-10-23T12:00Z", 3
    )


def test_new_york_spring_forward_and_fall_back() -> None:
    """New York: 02:30 (skipped) fires at 03:00 EDT; 01:30 (repeated) fires once, in EDT."""
    spring = dues(cron("30 2 * * *", tz=NEW_YORK), "2026-03-07T12:00Z", 2)
    fall = dues(cron("30 1 * * *", tz=NEW_YORK), "2026-10-31T12:00Z", 2)

    assert ["2026-03-08T07:00Z", "2026-03-09T06:30Z"] == spring
    assert "2026-03-08T03:00-04:00" == local(epoch(spring[0]), NEW_YORK)
    assert ["2026-11-01T05:30Z", "2026-11-02T06:30Z"] == fall
    assert "2026-11-01T01:30-04:00" == local(epoch(fall[0]), NEW_YORK)


def test_new_york_weekday_mornings_across_the_change() -> None:
    """``0 9 * * mon-fri``: 14:00 UTC on Friday 03-06 (EST), 13:00 UTC on Monday 03-09 (EDT)."""
    found = dues(cron("0 9 * * mon-fri", tz=NEW_YORK), "2026-03-06T12:00Z", 2)

    assert ["2026-03-06T14:00Z", "2026-03-09T13:00Z"] == found


def test_a_half_hour_change_of_clocks() -> None:
    """Lord Howe Island moves its clocks 30 minutes (02:00 -> 02:30 on 2026-10-04)."""
    found = dues(cron("15 2 * * *", tz="Australia/Lord_Howe"), "2026-10-03T00:00Z", 2)

    assert ["2026-10-04T02:30+11:00", "2026-10-05T02:15+11:00"] == [
        local(epoch(due), "Australia/Lord_Howe") for due in found
    ]


def test_zones_with_odd_offsets() -> None:
    """Kathmandu (+05:45) and Chatham (+13:45 in summer) read wall times in their own offset."""
    assert ["2026-03-28T21:15Z"] == dues(
        cron("0 3 * * *", tz="Asia/Kathmandu"), "2026-03-28T12Z", 1
    )
    assert ["2026-03-28T13:15Z"] == dues(
        cron("0 3 * * *", tz="Pacific/Chatham"), "2026-03-28T12Z", 1
    )


def test_a_leap_day_in_a_zone_east_of_utc_is_the_day_before_in_utc() -> None:
    """Midnight of 2028-02-29 in Berlin is 23:00 UTC on 02-28."""
    assert ["2028-02-28T23:00Z", "2032-02-28T23:00Z"] == dues(
        cron("0 0 29 2 *", tz=BERLIN), "2026-01-01T00:00Z", 2
    )


def test_utc_by_name_is_the_default() -> None:
    """``tz="UTC"`` is the default and equals a cron built without it; Etc/UTC gives the same."""
    assert cron("0 3 * * *") == cron("0 3 * * *", tz="UTC")
    assert dues(cron("0 3 * * *"), "2026-06-01T00:00Z", 3) == dues(
        cron("0 3 * * *", tz="Etc/UTC"), "2026-06-01T00:00Z", 3
    )


def test_a_skipped_day_fires_once_after_the_gap() -> None:
    """Samoa skipped 2011-12-30 entirely: its noon fires at the first instant of the 31st."""
    found = dues(cron("0 12 30 12 *", tz="Pacific/Apia"), "2011-12-29T00:00Z", 1)

    assert ["2011-12-31T00:00+14:00"] == [local(epoch(due), "Pacific/Apia") for due in found]


def test_dues_strictly_increase_through_a_change_of_clocks() -> None:
    """Stepped at each due time through a whole day of each change, every due is later."""
    changes = [
        (BERLIN, "2026-03-28T20:00Z"),
        (BERLIN, "2026-10-24T20:00Z"),
        (NEW_YORK, "2026-03-08T00:00Z"),
        (NEW_YORK, "2026-10-31T20:00Z"),
    ]
    for tz, start in changes:
        schedule = cron("*/10 * * * *", tz=tz)
        now, state = epoch(start), schedule.initial()
        previous = now
        for _ in range(200):
            state, due, delay = schedule.step(now, None, state, RNG)
            assert delay is not None
            assert due > previous
            assert delay == due - now
            previous = now = due
