"""cron(...) refuses malformed and hostile expressions, zones and clock readings, naming them."""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import cron
from tests.schedules._cron_support import RNG, dues, epoch

LONGEST_MESSAGE = 600


@pytest.mark.parametrize(
    ("expression", "field", "says"),
    [
        ("60 * * * *", "minute field '60'", "60, out of range: allowed are 0-59"),
        ("* 24 * * *", "hour field '24'", "24, out of range: allowed are 0-23"),
        ("* * 0 * *", "day-of-month field '0'", "0, out of range: allowed are 1-31"),
        ("* * 32 * *", "day-of-month field '32'", "out of range: allowed are 1-31"),
        ("* * * 0 *", "month field '0'", "out of range: allowed are 1-12 or jan-dec"),
        ("* * * 13 *", "month field '13'", "out of range: allowed are 1-12 or jan-dec"),
        ("* * * * 8", "day-of-week field '8'", "out of range: allowed are 0-7"),
        ("*/0 * * * *", "minute field '*/0'", "the step 0; a step must be at least 1"),
        ("*/60 * * * *", "minute field '*/60'", "a step must be at most 59"),
        ("* * * */13 *", "month field '*/13'", "a step must be at most 12"),
        ("1,,2 * * * *", "minute field '1,,2'", "an empty list element"),
        ("1, * * * *", "minute field '1,'", "an empty list element"),
        (",1 * * * *", "minute field ',1'", "an empty list element"),
        ("10-5 * * * *", "minute field '10-5'", "the range 10-5, which runs backwards"),
        ("* * * * sat-sun", "day-of-week field 'sat-sun'", "runs backwards (6 > 0)"),
        ("-1 * * * *", "minute field '-1'", "is missing a value"),
        ("1- * * * *", "minute field '1-'", "is missing a value"),
        ("/5 * * * *", "minute field '/5'", "is missing a value"),
        ("5/ * * * *", "minute field '5/'", "is missing a step"),
        ("*-5 * * * *", "minute field '*-5'", "'*' stands alone or before '/'"),
        ("**/2 * * * *", "minute field '**/2'", "the value '**', which is not valid"),
        ("1-2-3 * * * *", "minute field '1-2-3'", "the value '2-3', which is not valid"),
        ("1/2/3 * * * *", "minute field '1/2/3'", "the step '2/3', which is not valid"),
        ("+1 * * * *", "minute field '+1'", "a number is ASCII digits 0-9"),
        ("1.5 * * * *", "minute field '1.5'", "a number is ASCII digits 0-9"),
        ("x * * * *", "minute field 'x'", "expected a number; allowed are 0-59"),
        ("jan * * * *", "minute field 'jan'", "expected a number; allowed are 0-59"),
        ("* * * foo *", "month field 'foo'", "expected a number or a name"),
        ("* * * * monday", "day-of-week field 'monday'", "or sun-sat"),
        ("* * * * mon-jan", "day-of-week field 'mon-jan'", "the value 'jan', which is not valid"),
        ("? * * * *", "minute field '?'", "which is not valid"),
        ("* * L * *", "day-of-month field 'L'", "which is not valid"),
        ("* * * * 5#3", "day-of-week field '5#3'", "which is not valid"),
        ("* * 15W * *", "day-of-month field '15W'", "which is not valid"),
    ],
)
def test_each_malformed_field_is_named(expression: str, field: str, says: str) -> None:
    """A bad field is a ValueError naming the expression, the field, its text and the fault."""
    with pytest.raises(ValueError, match="cron expression") as raised:
        cron(expression)

    message = str(raised.value)
    assert f"cron expression {expression!r}: the {field}" in message
    assert says in message


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("", "cron expression is empty"),
        (" \t\n ", "cron expression is empty"),
        ("0 3 * *", "has 4 fields; give five: minute hour day-of-month month day-of-week"),
        ("0", "has 1 field; give five"),
        ("0 0 3 * * *", "has 6 fields; give five: minute hour day-of-month month day-of-week (a "),
        ("0 0 3 * * * 2026", "has 7 fields; give five"),
        ("0 3 * * * *", "(a seconds or a year field is not supported)"),
        ("@daily", "nicknames such as @daily are not supported"),
        ("@every 5m", "nicknames such as @daily are not supported"),
        ("0 3 * * *\n0 4 * * *", "has 10 fields"),
    ],
)
def test_wrong_shapes_are_refused(expression: str, says: str) -> None:
    """Empty, too few or too many fields (six: a seconds field) and nicknames are refused."""
    with pytest.raises(ValueError, match="cron expression") as raised:
        cron(expression)

    assert says in str(raised.value)


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("0 0 30 2 *", "month field (2) has a day from the day-of-month field (30)"),
        ("0 0 31 2,4,6,9,11 *", "(2, 4, 6, 9, 11) has a day from the day-of-month field (31)"),
        ("0 0 30,31 feb *", "(2) has a day from the day-of-month field (30, 31)"),
        # Starting with `*`, the weekday field does not rescue the date: both must match.
        ("0 0 30 2 */2", "never matches"),
    ],
)
def test_a_cron_that_can_never_fire_is_refused_at_construction(expression: str, says: str) -> None:
    """A day no chosen month has: a ValueError at construction, not an endless search."""
    with pytest.raises(ValueError, match="never matches") as raised:
        cron(expression)

    assert says in str(raised.value)


def test_a_weekday_rescues_an_impossible_date_when_both_are_restricted() -> None:
    """``0 0 30 2 mon``: the 30th never comes in February, but Mondays do (either matches)."""
    assert ["2026-02-02T00:00Z", "2026-02-09T00:00Z"] == dues(
        cron("0 0 30 2 mon"), "2026-01-01T00:00Z", 2
    )


@pytest.mark.parametrize("digit", ["\u0663", "\uff13", "\u09e9", "\u00b3", "\U0001d7d1"])
def test_unicode_digits_are_refused(digit: str) -> None:
    """Arabic-Indic, full-width, Bengali, superscript and mathematical digits are not numbers."""
    with pytest.raises(ValueError, match="a number is ASCII digits 0-9") as raised:
        cron(f"{digit} * * * *")

    assert "minute field" in str(raised.value)


@pytest.mark.parametrize("letter", ["\u0130", "\u212a", "j\u0430n", "\uff4a\uff41\uff4e"])
def test_look_alike_names_are_refused(letter: str) -> None:
    """Names are ASCII: a Cyrillic a, full-width letters or a Kelvin sign do not pass as names."""
    with pytest.raises(ValueError, match="month field"):
        cron(f"0 0 1 {letter} *")


@pytest.mark.parametrize(
    "text",
    [
        "0 3 * * *",
        "  0 3 * * *  ",
        "0\t3\t*\t*\t*",
        "0   3 *  * *",
        "0 3 * * *\n",
        "0\u00a03\u2009*\u3000*\u2028*",
    ],
    ids=["plain", "padded", "tabs", "runs", "newline", "unicode-spaces"],
)
def test_any_whitespace_separates_fields(text: str) -> None:
    """Tabs, runs of spaces, a trailing newline, Unicode spaces: the same schedule and repr."""
    schedule = cron(text)

    assert cron("0 3 * * *") == schedule
    assert "cron('0 3 * * *')" == repr(schedule)


@pytest.mark.parametrize("digits", [5, 100, 4301, 50_000])
def test_huge_numbers_are_refused_without_converting_them(digits: int) -> None:
    """A number of thousands of digits is out of range, said in a short message (no int())."""
    huge = "9" * digits
    for expression in [f"{huge} * * * *", f"*/{huge} * * * *", f"1-{huge} * * * *"]:
        with pytest.raises(ValueError, match="minute field") as raised:
            cron(expression)
        assert len(str(raised.value)) < LONGEST_MESSAGE


def test_leading_zeros_are_plain_numbers() -> None:
    """``00``, ``007`` and ``0000000005`` are 0, 7 and 5."""
    assert cron("7 0 * * *").fields == cron("007 00 * * *").fields
    assert cron("5 * * * *").fields == cron("0000000005 * * * *").fields


@pytest.mark.parametrize("value", [b"0 3 * * *", None, 3, ["0", "3", "*", "*", "*"], 3.0])
def test_an_expression_that_is_not_a_str_is_a_type_error(value: object) -> None:
    """Bytes, None, numbers and lists are a TypeError naming what was given."""
    with pytest.raises(TypeError, match="cron expression must be a str") as raised:
        cron(value)  # type: ignore[arg-type]

    assert repr(value) in str(raised.value)


@pytest.mark.parametrize("tz", [b"UTC", None, 0])
def test_a_zone_that_is_not_a_str_is_a_type_error(tz: object) -> None:
    """tz must be a str: bytes, None or a number is a TypeError."""
    with pytest.raises(TypeError, match="tz must be a str"):
        cron("0 3 * * *", tz=tz)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "tz",
    [
        "Nowhere/City",
        "",
        "utc ",
        "Europe",
        "../../etc/passwd",
        "/etc/localtime",
        "Europe/Berlin\x00",
        "x" * 5000,
        "\udcff",
        "zone1970.tab",
        "+01:00",
    ],
    ids=[
        "unknown",
        "empty",
        "space",
        "directory",
        "dotdot",
        "absolute",
        "nul",
        "long",
        "surrogate",
        "not-zone-data",
        "offset",
    ],
)
def test_an_unknown_zone_is_a_value_error_naming_it(tz: str) -> None:
    """Unknown names, paths, directories, files that are not zone data: one ValueError."""
    with pytest.raises(ValueError, match="is not a time zone: give an IANA name") as raised:
        cron("0 3 * * *", tz=tz)

    assert len(str(raised.value)) < LONGEST_MESSAGE


def test_the_expression_is_checked_before_the_zone() -> None:
    """Both wrong: the expression's error comes first."""
    with pytest.raises(ValueError, match="minute field"):
        cron("61 * * * *", tz="Nowhere/City")


@pytest.mark.parametrize(
    ("now", "error"),
    [
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-math.inf, ValueError),
        (10**400, ValueError),
        (None, TypeError),
        ("1774699200", TypeError),
    ],
)
def test_a_broken_clock_reading_is_refused(now: object, error: type[Exception]) -> None:
    """NaN, infinities, ints no float holds, non-numbers: the same errors as every schedule."""
    schedule = cron("0 3 * * *")

    with pytest.raises(error, match="now must be"):
        schedule.step(now, None, schedule.initial(), RNG)  # type: ignore[arg-type]


def test_milliseconds_for_seconds_is_refused_with_a_hint() -> None:
    """A reading in milliseconds (year 58,000 as seconds) names the likely mistake."""
    schedule = cron("0 3 * * *")

    with pytest.raises(ValueError, match=r"\(milliseconds\? cron reads seconds\)"):
        schedule.step(epoch("2026-03-28T12:00Z") * 1000, None, schedule.initial(), RNG)


@pytest.mark.parametrize("now", [1e300, -1e300, 253402214400.0, -62135510401.0])
def test_a_reading_outside_the_calendar_is_refused(now: float) -> None:
    """Epoch seconds outside 0001-01-02 to 9999-12-30: a ValueError naming the range."""
    schedule = cron("0 3 * * *")

    with pytest.raises(ValueError, match="now must be epoch seconds from 0001-01-02 to 9999-12-30"):
        schedule.step(now, None, schedule.initial(), RNG)


_FIELD_TEXT = st.text(alphabet="0123456789*/-,abcdefjlmnorstuvwyASZ \t٣", max_size=40)


@settings(max_examples=400, deadline=None)
@given(_FIELD_TEXT)
def test_any_text_builds_a_schedule_or_raises_value_error(text: str) -> None:
    """Drawn text: a schedule that steps, or a ValueError; never another error, never a hang."""
    try:
        schedule = cron(text)
    except ValueError as error:
        refused: ValueError | None = error
    else:
        refused = None
    if refused is not None:
        assert str(refused).startswith("cron expression")
        assert len(str(refused)) < LONGEST_MESSAGE + len(text) * 2
        return
    _, due, delay = schedule.step(epoch("2026-03-28T12:00Z"), None, schedule.initial(), RNG)
    assert delay is not None
    assert due > epoch("2026-03-28T12:00Z")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_any_unicode_builds_a_schedule_or_raises_value_error(text: str) -> None:
    """Arbitrary Unicode (surrogates, controls, digits of every script): ValueError at worst."""
    refused = ""
    try:
        cron(text)
    except ValueError as error:
        refused = str(error)
    assert refused == "" or refused.startswith("cron expression")


def test_the_digit_limit_is_not_reached() -> None:
    """Refusing huge numbers never meets Python's int digit limit (no int() of them)."""
    limit = sys.get_int_max_str_digits()
    with pytest.raises(ValueError, match="out of range"):
        cron("9" * (limit + 1) + " * * * *")
