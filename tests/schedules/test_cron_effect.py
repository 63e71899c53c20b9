"""cron(...) beside Effect's ``Schedule.cron``: the same due times, but where we differ on purpose.

The table below was recorded from Effect 3.22.4 (npm ``effect@3``, node 20) by stepping
``Schedule.cron(expression, tz)`` through ``Schedule.step``, each step at the previous due time,
and taking the start of each decision's interval (``benchmarks/effect3_timelines.py`` runs the
same cases live against an installed Effect). No code of Effect is copied: only its outputs.
Times are ISO UTC; the first step is made at the start time.
"""

from __future__ import annotations

import pytest

from schedules import cron
from tests.schedules._cron_support import dues

# (expression, tz, start, Effect's due times)
EFFECT = [
    (
        "0 3 * * *",
        "UTC",
        "2026-03-28T12:00Z",
        [
            "2026-03-29T03:00Z",
            "2026-03-30T03:00Z",
            "2026-03-31T03:00Z",
            "2026-04-01T03:00Z",
            "2026-04-02T03:00Z",
        ],
    ),
    (
        "*/15 * * * *",
        "UTC",
        "2026-03-28T12:07:30Z",
        [
            "2026-03-28T12:15Z",
            "2026-03-28T12:30Z",
            "2026-03-28T12:45Z",
            "2026-03-28T13:00Z",
            "2026-03-28T13:15Z",
            "2026-03-28T13:30Z",
        ],
    ),
    (
        "1-10/4 * * * *",
        "UTC",
        "2026-03-28T12:00Z",
        [
            "2026-03-28T12:01Z",
            "2026-03-28T12:05Z",
            "2026-03-28T12:09Z",
            "2026-03-28T13:01Z",
            "2026-03-28T13:05Z",
        ],
    ),
    (
        "50/5 * * * *",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-03-28T12:50Z", "2026-03-28T12:55Z", "2026-03-28T13:50Z", "2026-03-28T13:55Z"],
    ),
    (
        "0 9-17/4 * * *",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-03-28T13:00Z", "2026-03-28T17:00Z", "2026-03-29T09:00Z", "2026-03-29T13:00Z"],
    ),
    (
        "0,30 1,23 * * *",
        "UTC",
        "2026-03-28T12:00Z",
        [
            "2026-03-28T23:00Z",
            "2026-03-28T23:30Z",
            "2026-03-29T01:00Z",
            "2026-03-29T01:30Z",
            "2026-03-29T23:00Z",
        ],
    ),
    (
        "0 0 1,15 * *",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-04-01T00:00Z", "2026-04-15T00:00Z", "2026-05-01T00:00Z", "2026-05-15T00:00Z"],
    ),
    (
        "0 0 1 jan,jul *",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-07-01T00:00Z", "2027-01-01T00:00Z", "2027-07-01T00:00Z"],
    ),
    (
        "0 0 1 JUN-Aug *",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-06-01T00:00Z", "2026-07-01T00:00Z", "2026-08-01T00:00Z", "2027-06-01T00:00Z"],
    ),
    (
        "0 0 1 */5 *",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-06-01T00:00Z", "2026-11-01T00:00Z", "2027-01-01T00:00Z", "2027-06-01T00:00Z"],
    ),
    (
        "0 12 * * mon",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-03-30T12:00Z", "2026-04-06T12:00Z", "2026-04-13T12:00Z"],
    ),
    (
        "0 9 * * mon-fri",
        "UTC",
        "2026-03-28T12:00Z",
        [
            "2026-03-30T09:00Z",
            "2026-03-31T09:00Z",
            "2026-04-01T09:00Z",
            "2026-04-02T09:00Z",
            "2026-04-03T09:00Z",
            "2026-04-06T09:00Z",
        ],
    ),
    (
        "0 6 * * 7",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-03-29T06:00Z", "2026-04-05T06:00Z", "2026-04-12T06:00Z"],
    ),
    (
        "0 6 * * 0",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-03-29T06:00Z", "2026-04-05T06:00Z", "2026-04-12T06:00Z"],
    ),
    (
        "0 9 * * 5-7",
        "UTC",
        "2026-03-28T12:00Z",
        ["2026-03-29T09:00Z", "2026-04-03T09:00Z", "2026-04-04T09:00Z", "2026-04-05T09:00Z"],
    ),
    (
        "0 0 13 * 5",
        "UTC",
        "2026-03-01T00:00Z",
        [
            "2026-03-06T00:00Z",
            "2026-03-13T00:00Z",
            "2026-03-20T00:00Z",
            "2026-03-27T00:00Z",
            "2026-04-03T00:00Z",
            "2026-04-10T00:00Z",
            "2026-04-13T00:00Z",
        ],
    ),
    (
        "0 0 1-31 * 5",
        "UTC",
        "2026-03-01T00:00Z",
        ["2026-03-02T00:00Z", "2026-03-03T00:00Z", "2026-03-04T00:00Z", "2026-03-05T00:00Z"],
    ),
    (
        "0 0 */2 * 5",
        "UTC",
        "2026-03-01T00:00Z",
        [
            "2026-03-13T00:00Z",
            "2026-03-27T00:00Z",
            "2026-04-03T00:00Z",
            "2026-04-17T00:00Z",
            "2026-05-01T00:00Z",
        ],
    ),
    (
        "0 0 13 * */5",
        "UTC",
        "2026-03-01T00:00Z",
        ["2026-03-13T00:00Z", "2026-09-13T00:00Z", "2026-11-13T00:00Z"],
    ),
    (
        "0 0 31 * *",
        "UTC",
        "2026-03-01T00:00Z",
        ["2026-03-31T00:00Z", "2026-05-31T00:00Z", "2026-07-31T00:00Z", "2026-08-31T00:00Z"],
    ),
    (
        "0 0 29 2 *",
        "UTC",
        "2026-03-01T00:00Z",
        ["2028-02-29T00:00Z", "2032-02-29T00:00Z", "2036-02-29T00:00Z"],
    ),
    ("0 0 29 2 *", "UTC", "2095-01-01T00:00Z", ["2096-02-29T00:00Z", "2104-02-29T00:00Z"]),
    ("59 23 31 12 *", "UTC", "2026-12-31T23:59Z", ["2027-12-31T23:59Z", "2028-12-31T23:59Z"]),
    ("0 0 1 1 *", "UTC", "2026-12-31T23:59:59Z", ["2027-01-01T00:00Z", "2028-01-01T00:00Z"]),
    (
        "* * * * *",
        "UTC",
        "2026-12-31T23:58:30Z",
        ["2026-12-31T23:59Z", "2027-01-01T00:00Z", "2027-01-01T00:01Z"],
    ),
    (
        "0 3 * * *",
        "Europe/Berlin",
        "2026-06-01T00:00Z",
        ["2026-06-01T01:00Z", "2026-06-02T01:00Z", "2026-06-03T01:00Z"],
    ),
    (
        "0 9 * * mon-fri",
        "America/New_York",
        "2026-06-05T00:00Z",
        ["2026-06-05T13:00Z", "2026-06-08T13:00Z", "2026-06-09T13:00Z"],
    ),
    (
        "0 3 * * *",
        "Europe/Berlin",
        "2026-03-27T12:00Z",
        ["2026-03-28T02:00Z", "2026-03-29T01:00Z", "2026-03-30T01:00Z"],
    ),
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2026-10-24T12:00Z",
        ["2026-10-25T00:30Z", "2026-10-26T01:30Z", "2026-10-27T01:30Z"],
    ),
    (
        "*/30 * * * *",
        "Europe/Berlin",
        "2026-10-24T23:45Z",
        ["2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T02:00Z", "2026-10-25T02:30Z"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00Z",
        ["2026-11-01T05:30Z", "2026-11-02T06:30Z"],
    ),
    (
        "30 2 * * *",
        "Europe/Berlin",
        "2026-03-28T12:00Z",
        ["2026-03-29T01:30Z", "2026-03-30T00:30Z", "2026-03-31T00:30Z"],
    ),
    (
        "0,30 2,3 * * *",
        "Europe/Berlin",
        "2026-03-28T23:00Z",
        ["2026-03-29T01:00Z", "2026-03-29T01:30Z", "2026-03-30T00:00Z"],
    ),
    (
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00Z",
        ["2026-03-08T07:30Z", "2026-03-09T06:30Z"],
    ),
]

# Wall times skipped by a change of clocks: Effect moves them on by the length of the gap
# (02:30 fires at 03:30 CEST), we fire at the first instant after the gap (03:00 CEST).
# Keyed by (expression, tz, start): our due times.
ON_PURPOSE = {
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00Z"): [
        "2026-03-29T01:00Z",
        "2026-03-30T00:30Z",
        "2026-03-31T00:30Z",
    ],
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00Z"): [
        "2026-03-08T07:00Z",
        "2026-03-09T06:30Z",
    ],
}


@pytest.mark.parametrize(
    ("expression", "tz", "start", "theirs"), EFFECT, ids=[f"{e} {t}" for e, t, _, _ in EFFECT]
)
def test_due_times_match_effects_schedule_cron(
    expression: str, tz: str, start: str, theirs: list[str]
) -> None:
    """Stepped at each due time from the same start, the same due times as Effect's cron."""
    ours = dues(cron(expression, tz=tz), start, len(theirs))

    expected = ON_PURPOSE.get((expression, tz, start), theirs)
    assert expected == ours


def test_the_differences_on_purpose_are_real_differences() -> None:
    """Each case listed as differing does differ from Effect's recorded due times."""
    recorded = {(e, t, s): theirs for e, t, s, theirs in EFFECT}

    for key, ours in ON_PURPOSE.items():
        assert ours != recorded[key]
