"""Duration parsing: numbers, timedeltas and strings, and the errors for bad values."""

from __future__ import annotations

import datetime
import math

import pytest
from hypothesis import given, settings

from schedules import MAX_DELAY, exponential, spaced, to_seconds
from schedules.testing import durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250ms", 0.25),
        ("250 millis", 0.25),
        ("1 millisecond", 0.001),
        ("4s", 4.0),
        ("4 seconds", 4.0),
        ("1.5 minutes", 90.0),
        ("2 minutes", 120.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1 hour", 3600.0),
        ("1 day", 86400.0),
        ("1 week", 604800.0),
        ("500us", 0.0005),
        ("0s", 0.0),
        (" 3 S ", 3.0),
        ("1e3ms", 1.0),
    ],
)
def test_strings_parse_to_seconds(text: str, expected: float) -> None:
    """Each unit spelling converts to the right number of seconds."""
    assert expected == pytest.approx(to_seconds(text), rel=1e-12)


def test_milliseconds_are_exact() -> None:
    """'250ms' is exactly 0.25, not 0.25000000000000006."""
    assert 0.25 == to_seconds("250ms")


def test_numbers_and_timedeltas() -> None:
    """Ints and floats are seconds; a timedelta gives its total seconds."""
    assert (2.0, 0.5, 1.5) == (
        to_seconds(2),
        to_seconds(0.5),
        to_seconds(datetime.timedelta(seconds=1, milliseconds=500)),
    )


@pytest.mark.parametrize(
    "bad",
    [-1, -0.5, math.nan, math.inf, "-1s", "5", "abc", "1 parsec", "s", "", "inf s", "1e400s", True],
)
def test_bad_durations_name_the_argument_and_value(bad: object) -> None:
    """Negative, NaN, infinite, unitless, unknown and bool durations: ValueError naming both."""
    with pytest.raises(ValueError, match="interval") as caught:
        spaced(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(caught.value)


def test_negative_timedelta_is_refused() -> None:
    """A negative timedelta is as wrong as a negative number."""
    with pytest.raises(ValueError, match="base"):
        exponential(datetime.timedelta(seconds=-1))


def test_wrong_type_is_a_type_error() -> None:
    """A value of no duration type raises TypeError naming the argument."""
    with pytest.raises(TypeError, match="limit"):
        spaced(1).max_delay([1])  # type: ignore[arg-type]


def test_huge_durations_are_accepted_and_delays_clamped() -> None:
    """Durations beyond MAX_DELAY are valid arguments; the delays they give are clamped."""
    assert [MAX_DELAY] == spaced("100 weeks").delays(1)


@settings(max_examples=100)
@given(durations(max_value=1000.0))
def test_every_drawn_duration_converts_within_bounds(value: object) -> None:
    """Every form the strategy draws parses, to a value inside the requested range."""
    seconds = to_seconds(value)  # type: ignore[arg-type]
    assert 0.0 <= seconds <= 1000.0


def test_negative_zero_is_plain_zero() -> None:
    """-0.0 is a valid duration and comes back as +0.0, so no delay prints as -0.0."""
    seconds = to_seconds(-0.0)
    assert (0.0, 1.0) == (seconds, math.copysign(1.0, seconds))
    assert "spaced(0)" == repr(spaced(-0.0))


def test_huge_integers_are_infinite_not_an_overflow() -> None:
    """An int beyond float range raises ValueError naming it, never OverflowError."""
    with pytest.raises(ValueError, match="interval"):
        spaced(10**400)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1h30m", 5400.0),
        ("2m 30s", 150.0),
        ("1 hour 30 minutes", 5400.0),
        ("1d 2h 3m 4s 5ms", 93784.005),
        ("1s500ms", 1.5),
        ("1.5h 1m", 5460.0),
        ("  2m\t30s  ", 150.0),
    ],
)
def test_compound_durations_add_their_terms(text: str, expected: float) -> None:
    """Terms from the largest unit to the smallest add up, rounded once."""
    assert expected == to_seconds(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("30m1h", "largest to the smallest"),
        ("1s1s", "largest to the smallest"),
        ("1h30", "needs a unit"),
        ("1h -30m", "negative"),
        ("1 2s", "needs a unit"),
    ],
)
def test_compound_durations_in_the_wrong_shape_are_refused(text: str, reason: str) -> None:
    """Units out of order or repeated, a number without a unit, a negative term: all refused."""
    with pytest.raises(ValueError, match=reason):
        to_seconds(text, name="timeout")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250\u00a0ms", 0.25),  # no-break space, as number formatting often writes it
        ("1\u2009h\u202f30m", 5400.0),  # thin space, narrow no-break space
        ("\u30002s\u3000", 2.0),  # ideographic space
        ("500\u00b5s", 0.0005),  # micro sign
        ("500\u03bcs", 0.0005),  # Greek small letter mu
    ],
)
def test_unicode_spaces_and_micro_signs_are_accepted(text: str, expected: float) -> None:
    """Any Unicode whitespace separates; both micro characters spell microseconds."""
    assert expected == to_seconds(text)


@pytest.mark.parametrize("text", ["\u0663s", "\uff13s", "1\u0660s", "\u00b2s"])
def test_only_ascii_digits_are_numbers(text: str) -> None:
    """Arabic-Indic, fullwidth or superscript digits are refused, never read as numbers."""
    with pytest.raises(ValueError, match="interval"):
        spaced(text)


def test_huge_malformed_strings_are_refused_with_a_short_message() -> None:
    """A million-character bad duration is refused in one pass, its message cut short."""
    for text in ("1" * 1_000_000 + "x", " " * 1_000_000, "1s" * 500_000, "9" * 1_000_000 + "s"):
        with pytest.raises(ValueError, match="characters") as caught:
            to_seconds(text, name="limit")
        assert len(str(caught.value)) < 300
