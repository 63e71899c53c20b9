"""
Recurrences missed while no engine ran start as ``catch_up`` says ("latest": one, "all", "none");
a clock that jumps back repeats nothing, one that jumps ahead is caught up like downtime.
"""

from __future__ import annotations

import asyncio

import pytest

from effects.durable import Engine, Recurring
from effects.durable._recurring import CatchUp
from schedules import spaced
from tests.durable.support import START_MS
from tests.durable.test_recurring_runs import HOUR, dues, hours, tick

pytestmark = pytest.mark.anyio


class JumpingClock:
    """A wall clock a test sets by hand: it may jump back or ahead (NTP, a VM resumed)."""

    def __init__(self, start_ms: int) -> None:
        self.at = start_ms / 1000

    def now(self) -> float:
        """Epoch seconds."""
        return self.at

    def set(self, ms: int) -> None:
        """Read *ms* epoch milliseconds from now on."""
        self.at = ms / 1000

    def advance(self, seconds: float) -> None:
        """Move ahead (``run_for`` moves the clock with this)."""
        self.at += seconds

    def sleep(self, seconds: float) -> None:
        """Move ahead by *seconds*."""
        self.at += seconds

    async def sleep_async(self, seconds: float) -> None:
        """Move ahead by *seconds*, yielding once."""
        await asyncio.sleep(0)
        self.at += seconds


def hourly(catch_up: CatchUp) -> Recurring:
    """Every hour, catching up as *catch_up* says."""
    return Recurring(f"hourly-{catch_up}", tick, spaced("1h"), catch_up=catch_up)


@pytest.mark.parametrize(
    ("catch_up", "started"), [("latest", hours(5)), ("all", hours(1, 2, 3, 4, 5)), ("none", [])]
)
async def test_recurrences_missed_while_no_engine_ran_start_as_catch_up_says(
    durable_store_url: str,
    caplog: pytest.LogCaptureFixture,
    catch_up: CatchUp,
    started: list[int],
) -> None:
    """Down from +0 to +5.5 h: latest starts the +5 h run, all five, none none; next at +6 h."""
    caplog.set_level("INFO", logger="effects.durable")
    clock = JumpingClock(START_MS)
    recurring = hourly(catch_up)
    async with Engine(durable_store_url, workflows=[tick], recurring=[recurring], clock=clock) as e:
        await e.run_until_idle()
    clock.set(START_MS + 5 * HOUR + HOUR // 2)
    async with Engine(durable_store_url, workflows=[tick], recurring=[recurring], clock=clock) as e:
        await e.run_until_idle()
        assert started == await dues(e, recurring.name)
        (row,) = await e.store.recurring()
        runs = await e.list_runs()
    assert (START_MS + 6 * HOUR, None) == (row.next_at, row.missed_at)
    assert {"completed"} >= {r.status for r in runs}
    skipped = [r.getMessage() for r in caplog.records if "missed recurrence" in r.getMessage()]
    if catch_up == "all":
        assert [] == skipped
    else:
        assert [
            f"recurring {recurring.name!r}: {5 - len(started)} missed recurrence(s) not started"
            f" (catch_up={catch_up!r})"
        ] == skipped


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
async def test_one_recurrence_missed_while_no_engine_ran_starts_whatever_catch_up_says(
    durable_store_url: str, catch_up: CatchUp
) -> None:
    """Down from +0 to +1.9 h: the +1 h run starts in every mode."""
    clock = JumpingClock(START_MS)
    recurring = hourly(catch_up)
    async with Engine(durable_store_url, workflows=[tick], recurring=[recurring], clock=clock) as e:
        await e.run_until_idle()
    clock.set(START_MS + round(1.9 * HOUR))
    async with Engine(durable_store_url, workflows=[tick], recurring=[recurring], clock=clock) as e:
        await e.run_until_idle()
        assert hours(1) == await dues(e, recurring.name)


async def test_a_clock_set_back_repeats_nothing_and_moves_no_due_time(
    durable_store_url: str,
) -> None:
    """Runs at +1 h and +2 h; the clock goes back to +0.5 h: nothing runs until +3 h is reached."""
    clock = JumpingClock(START_MS)
    recurring = hourly("latest")
    async with Engine(durable_store_url, workflows=[tick], recurring=[recurring], clock=clock) as e:
        await e.run_until_idle()
        for at in (1, 2):
            clock.set(START_MS + at * HOUR)
            await e.run_until_idle()
        clock.set(START_MS + HOUR // 2)
        await e.run_until_idle()
        (before,) = await e.store.recurring()
        for at in (1, 2, 2.5):
            clock.set(START_MS + round(at * HOUR))
            await e.run_until_idle()
        assert hours(1, 2) == await dues(e, recurring.name)
        clock.set(START_MS + 3 * HOUR)
        await e.run_until_idle()
        assert hours(1, 2, 3) == await dues(e, recurring.name)
    assert START_MS + 3 * HOUR == before.next_at


async def test_a_clock_that_jumps_ahead_is_caught_up_like_downtime_and_repeats_nothing_after(
    durable_store_url: str,
) -> None:
    """
    A day ahead: the latest of the missed hours starts (+24 h), the grid goes on from there;
    back to the true time: nothing starts again until the clock passes +25 h (never twice).
    """
    clock = JumpingClock(START_MS)
    recurring = hourly("latest")
    async with Engine(durable_store_url, workflows=[tick], recurring=[recurring], clock=clock) as e:
        await e.run_until_idle()
        clock.set(START_MS + HOUR)
        await e.run_until_idle()
        clock.set(START_MS + 24 * HOUR + 60_000)
        await e.run_until_idle()
        assert hours(1, 24) == await dues(e, recurring.name)
        clock.set(START_MS + 2 * HOUR)
        await e.run_until_idle()
        clock.set(START_MS + 25 * HOUR)
        await e.run_until_idle()
        assert hours(1, 24, 25) == await dues(e, recurring.name)
