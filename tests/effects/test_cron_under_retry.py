"""
A ``cron`` under ``effects.retry`` and ``effects.repeat`` is stepped with the wall clock (epoch
seconds: ``time.time()`` for the system clock, the virtual time for a ``VirtualClock``), while
every other schedule keeps the monotonic reading it measures differences with.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

import effects
from effects import SystemClock, use_clock
from effects.testing import VirtualClock
from schedules import cron, exponential, spaced

#: 2027-01-15 10:07:30 UTC.
START = datetime(2027, 1, 15, 10, 7, 30, tzinfo=UTC).timestamp()


def test_a_cron_retry_waits_until_the_next_match_of_the_wall_clock() -> None:
    clock = VirtualClock(start=START)
    calls: list[float] = []

    @effects.retry(cron("*/15 * * * *").times(2), on=ConnectionError)
    def flaky() -> str:
        calls.append(clock.now())
        if len(calls) < 3:
            raise ConnectionError("down")
        return "up"

    with use_clock(clock):
        assert "up" == flaky()
    # 10:07:30 -> 10:15:00 -> 10:30:00.
    assert [START, START + 450, START + 450 + 900] == calls


def test_a_composed_cron_is_stepped_with_the_wall_clock_too() -> None:
    clock = VirtualClock(start=START)
    delays: list[float] = []

    @effects.retry(
        (cron("0 * * * *") | exponential(1)).times(1),
        on=ConnectionError,
        on_retry=lambda event: event.kind == "retry" and delays.append(event.delay),  # type: ignore[func-returns-value,arg-type]
    )
    def broken() -> None:
        raise ConnectionError("down")

    with use_clock(clock), pytest.raises(ConnectionError):
        broken()
    assert [1.0] == delays  # the union waits the shorter: exponential's 1 s, not 52.5 min


def test_repeat_with_a_cron_runs_at_the_wall_clock_matches() -> None:
    clock = VirtualClock(start=START)
    runs: list[float] = []

    def poll() -> int:
        runs.append(clock.now())
        return len(runs)

    with use_clock(clock):
        assert 3 == effects.repeat(cron("0 11 * * *").times(2))(poll)()
    assert [START, START + 3150, START + 3150 + 86_400] == runs


def test_the_system_clock_gives_a_cron_epoch_seconds_not_monotonic_ones() -> None:
    """With the real clock the first wait is the time to the next whole minute (at most 60 s,
    never the decades a monotonic reading as 1970 would give)."""
    delays: list[float] = []

    @effects.retry(
        cron("* * * * *").times(1),
        on=ConnectionError,
        on_retry=lambda e: e.kind == "retry" and delays.append(e.delay),  # type: ignore[func-returns-value,arg-type]
    )
    def broken() -> None:
        raise ConnectionError("down")

    sleeps: list[float] = []

    class Recording(SystemClock):
        def sleep(self, seconds: float) -> None:
            sleeps.append(seconds)

    before = time.time()
    with use_clock(Recording()), pytest.raises(ConnectionError):
        broken()
    (delay,) = delays
    assert 0 < delay <= 60
    assert abs((before + delay) % 60) < 2 or abs((before + delay) % 60 - 60) < 2
    assert [delay] == sleeps


def test_other_schedules_still_read_the_monotonic_clock() -> None:
    class NoWall(VirtualClock):
        def wall(self) -> float:
            raise AssertionError("a schedule without a cron read the wall clock")

    clock = NoWall(start=5.0)
    seen: list[float] = []

    @effects.retry(spaced(2).times(2), on=ConnectionError)
    def flaky() -> str:
        seen.append(clock.now())
        if len(seen) < 3:
            raise ConnectionError("down")
        return "ok"

    with use_clock(clock):
        assert "ok" == flaky()
    assert [5.0, 7.0, 9.0] == seen


def test_a_clock_without_wall_gives_its_now_and_a_broken_reading_is_refused() -> None:
    class Plain:
        def __init__(self, at: float) -> None:
            self.at = at

        def now(self) -> float:
            return self.at

        def sleep(self, seconds: float) -> None:
            self.at += seconds

        async def sleep_async(self, seconds: float) -> None:
            self.at += seconds

    @effects.retry(cron("0 0 * * *").times(1), on=ConnectionError)
    def broken() -> None:
        raise ConnectionError("down")

    plain = Plain(START)
    with use_clock(plain), pytest.raises(ConnectionError):
        broken()
    assert datetime(2027, 1, 16, tzinfo=UTC).timestamp() == plain.at

    class Broken(VirtualClock):
        def wall(self) -> float:
            return float("nan")

    with use_clock(Broken(start=START)), pytest.raises(ValueError, match="finite seconds"):
        broken()
