"""Laws of cron(...) over drawn expressions, zones and times, checked by brute force."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from schedules import MAX_DELAY, Schedule, cron
from tests.schedules._cron_support import RNG, Oracle, epoch

ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kathmandu",
]
# Changes of clocks in those zones, 2026, so drawn times fall near them often.
CHANGES = [
    epoch(moment)
    for moment in [
        "2026-03-29T01:00Z",
        "2026-10-25T01:00Z",
        "2026-03-08T07:00Z",
        "2026-11-01T06:00Z",
        "2026-04-04T15:00Z",
        "2026-10-03T15:30Z",
        "2026-04-04T14:00Z",
        "2026-09-26T14:00Z",
    ]
]
# The brute-force window: two days of minutes.
WINDOW = 2 * 86_400.0

NAMES = {
    "month": ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
    "day-of-week": ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
}
LONGEST = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}
# (name, low, high), in field order.
FIELDS = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
]


def _values(name: str, low: int, high: int) -> st.SearchStrategy[tuple[str, int]]:
    """A value as text (a number, or for months and weekdays maybe a name) and as a number."""
    names = NAMES.get(name, [])

    def shown(drawn: tuple[int, bool, bool]) -> tuple[str, int]:
        number, named, upper = drawn
        # Months count from 1 (jan), weekdays from 0 (sun).
        index = number - 1 if name == "month" else number
        if not named or index >= len(names):
            return str(number), number
        return (names[index].upper() if upper else names[index]), number

    return st.tuples(st.integers(low, high), st.booleans(), st.booleans()).map(shown)


def _elements(name: str, low: int, high: int) -> st.SearchStrategy[tuple[str, set[int]]]:
    """One list element as text, and the values it stands for, read from the spec."""
    steps = st.none() | st.integers(1, high)
    values = _values(name, low, high)

    def star(step: int | None) -> tuple[str, set[int]]:
        return ("*" if step is None else f"*/{step}"), set(range(low, high + 1, step or 1))

    def single(drawn: tuple[tuple[str, int], int | None]) -> tuple[str, set[int]]:
        (text, first), step = drawn
        if step is None:
            return text, {first}
        return f"{text}/{step}", set(range(first, high + 1, step))

    def span(drawn: tuple[tuple[str, int], tuple[str, int], int | None]) -> tuple[str, set[int]]:
        (one, a), (other, b), step = drawn
        (first_text, first), (last_text, last) = sorted([(one, a), (other, b)], key=lambda v: v[1])
        suffix = "" if step is None else f"/{step}"
        return f"{first_text}-{last_text}{suffix}", set(range(first, last + 1, step or 1))

    return st.one_of(
        steps.map(star),
        st.tuples(values, steps).map(single),
        st.tuples(values, values, steps).map(span),
    )


def _fields(index: int) -> st.SearchStrategy[tuple[str, set[int]]]:
    name, low, high = FIELDS[index]
    lists = st.lists(_elements(name, low, high), min_size=1, max_size=3).map(
        lambda elements: (
            ",".join(text for text, _ in elements),
            set().union(*(values for _, values in elements)),
        )
    )
    if index < 2:
        return lists
    # Day and month fields are mostly `*`, so drawn crons fire often enough for brute force.
    return st.one_of(st.just(("*", set(range(low, high + 1)))), lists)


FIELD_VALUES = [_fields(index) for index in range(5)]


@st.composite
def crons(draw: st.DrawFn) -> tuple[Schedule[Any, float], Oracle]:
    """A drawn cron (mostly firing often, so brute force sees many matches) and its oracle."""
    fields = [draw(strategy) for strategy in FIELD_VALUES]
    tz = draw(st.sampled_from(ZONES))
    texts = [text for text, _ in fields]
    expression = " ".join(texts)
    minutes, hours, days, months, weekdays = (values for _, values in fields)
    either = not texts[2].startswith("*") and not texts[4].startswith("*")
    # Only a day that no chosen month has can make a cron never fire (cron refuses it).
    assume(either or any(day <= LONGEST[month] for month in months for day in days))
    schedule = cron(expression, tz=tz)
    oracle = Oracle(
        (minutes, hours, days, months, weekdays),
        day_star=texts[2].startswith("*"),
        weekday_star=texts[4].startswith("*"),
        tz=tz,
    )
    return schedule, oracle


nows = st.one_of(
    # Within hours of a change of clocks, so due times fall in skipped and repeated hours often.
    st.sampled_from(CHANGES).flatmap(lambda change: st.floats(change - 3 * 3600, change + 3600)),
    st.sampled_from(CHANGES).flatmap(
        lambda change: st.floats(change - 2 * 86_400, change + 2 * 86_400)
    ),
    st.floats(epoch("2020-01-01T00:00Z"), epoch("2035-01-01T00:00Z")),
)


@settings(max_examples=200, deadline=None)
@given(crons(), nows)
def test_the_due_time_is_the_first_firing_strictly_after_now(
    drawn: tuple[Schedule[Any, float], Oracle], now: float
) -> None:
    """Due > now; delay = due - now (capped); no firing between; the due fires (brute force)."""
    schedule, oracle = drawn

    state, due, delay = schedule.step(now, None, schedule.initial(), RNG)

    assert due > now
    assert state == due
    assert min(due - now, MAX_DELAY) == delay
    limit = min(due, now + WINDOW)
    assert (due if due <= limit else None) == oracle.first_after(now, limit)


@settings(max_examples=100, deadline=None)
@given(crons(), nows)
def test_stepped_at_each_due_every_due_fires_and_none_is_skipped(
    drawn: tuple[Schedule[Any, float], Oracle], now: float
) -> None:
    """Stepping at each due time walks the firings one by one, as brute force lists them."""
    schedule, oracle = drawn
    start, end = now, now + WINDOW / 4
    state = schedule.initial()
    found: list[float] = []
    while True:
        state, due, _ = schedule.step(now, None, state, RNG)
        if due > end:
            break
        found.append(due)
        now = due

    expected: list[float] = []
    moment = oracle.first_after(start, end)
    while moment is not None:
        expected.append(moment)
        moment = oracle.first_after(moment, end)
    assert expected == found


@settings(max_examples=150, deadline=None)
@given(crons(), nows, st.lists(st.floats(0.0, 7200.0), min_size=1, max_size=12))
def test_due_times_never_go_back_when_time_goes_forward(
    drawn: tuple[Schedule[Any, float], Oracle], now: float, gaps: list[float]
) -> None:
    """Steps at non-decreasing times (early or late) give non-decreasing due times after now."""
    schedule, _ = drawn
    state, previous = schedule.initial(), None
    for gap in gaps:
        now += gap
        state, due, delay = schedule.step(now, None, state, RNG)
        assert due > now
        assert delay is not None
        if previous is not None:
            assert due >= previous
        previous = due


@settings(max_examples=150, deadline=None)
@given(crons(), nows, st.lists(st.floats(-7200.0, 7200.0), min_size=1, max_size=12))
def test_state_through_json_changes_nothing(
    drawn: tuple[Schedule[Any, float], Oracle], now: float, moves: list[float]
) -> None:
    """The state survives json.dumps/loads between any two steps, the clock moving both ways."""
    schedule, _ = drawn
    kept, sent = schedule.initial(), schedule.initial()
    for move in moves:
        now += move
        kept, due, delay = schedule.step(now, None, kept, RNG)
        sent, sent_due, sent_delay = schedule.step(now, None, json.loads(json.dumps(sent)), RNG)
        assert (due, delay) == (sent_due, sent_delay)


@settings(max_examples=150, deadline=None)
@given(crons(), nows, st.floats(0.0, 1.0, exclude_max=True))
def test_a_step_before_the_last_due_gives_the_same_due(
    drawn: tuple[Schedule[Any, float], Oracle], now: float, back: float
) -> None:
    """Stepped at any time before the due time it gave (a clock set back), the same due time."""
    schedule, _ = drawn
    state, due, _ = schedule.step(now, None, schedule.initial(), RNG)
    earlier = now - back * 86_400.0

    _, again, delay = schedule.step(earlier, None, state, RNG)

    assert (due, min(due - earlier, MAX_DELAY)) == (again, delay)
