"""
Recurring workflows on a virtual clock, on the memory, SQLite and PostgreSQL stores: one run per
recurrence at its exact due time, on the schedule's grid whatever the latency, across restarts,
for calendar, spaced and fixed schedules, until the schedule is done.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest

from effects.durable import Engine, Recurring, WorkflowContext, step, workflow
from effects.testing import VirtualClock
from schedules import MAX_DELAY, cron, fixed, from_delays, recurs, spaced
from tests.durable.crash_support.harness import wait_until_async
from tests.durable.support import START_MS

pytestmark = pytest.mark.anyio

HOUR = 3_600_000
MINUTE = 60_000


@workflow("tick")
async def tick(ctx: WorkflowContext, value: Any) -> Any:
    """Return the input."""
    return value


@step("nobody-serves", group="elsewhere")
async def never(_: Any) -> None:
    """A step no engine of these tests serves: its run stays suspended."""


@workflow("stuck")
async def stuck(ctx: WorkflowContext, _: Any) -> None:
    """Wait for a step that never runs."""
    await ctx.step(never, None)


def engine(url: str, clock: VirtualClock, *recurring: Recurring) -> Engine:
    """An engine serving ``tick`` and ``stuck`` with *recurring*, on *clock*."""
    return Engine(url, workflows=[tick, stuck], recurring=recurring, clock=clock)


def clock_at(ms: int = START_MS) -> VirtualClock:
    """A virtual clock at epoch ms *ms* (default 2026-01-01T00:00Z)."""
    return VirtualClock(ms / 1000)


async def dues(engine: Engine, name: str) -> list[int]:
    """The due times (ms after the clock's start) of the runs recurring *name* started."""
    runs = await engine.list_runs(limit=10_000)
    found = [int(r.run_id.rpartition("@")[2]) for r in runs if r.run_id.rpartition("@")[0] == name]
    return sorted(due - START_MS for due in found)


def hours(*values: float) -> list[int]:
    """Hours as ms."""
    return [round(v * HOUR) for v in values]


def utc(text: str) -> int:
    """An ISO-8601 time as epoch ms."""
    return round(datetime.datetime.fromisoformat(text).timestamp() * 1000)


async def test_the_first_run_comes_after_the_first_wait_at_its_exact_time(
    durable_store_url: str,
) -> None:
    """spaced 1 h: nothing at first sight; at +1 h exactly one run, id name@due, with the input."""
    clock = clock_at()
    hourly = Recurring("hourly", tick, spaced("1h"), input={"report": 7})
    async with engine(durable_store_url, clock, hourly) as e:
        await e.run_until_idle()
        assert [] == await dues(e, "hourly")
        clock.advance(3599.999)
        await e.run_until_idle()
        assert [] == await dues(e, "hourly")
        clock.advance(0.001)
        await e.run_until_idle()
        run = await e.get_run(f"hourly@{START_MS + HOUR}")
        (started,) = [ev for ev in await e.events(run.run_id) if ev.name == "run.started"]
    assert ("completed", {"report": 7}, {"report": 7}) == (run.status, run.input, run.output)
    assert {"workflow": "tick", "recurring": "hourly", "due_at": START_MS + HOUR} == started.data


async def test_a_due_time_noticed_late_starts_once_and_the_grid_stays(
    durable_store_url: str,
) -> None:
    """A due noticed 50 min late (even with catch_up="none") starts; the next stays on the hour."""
    clock = clock_at()
    hourly = Recurring("hourly", tick, spaced("1h"), catch_up="none")
    async with engine(durable_store_url, clock, hourly) as e:
        await e.run_until_idle()
        clock.advance("1h50m")
        await e.run_until_idle()
        await e.run_until_idle()
        assert hours(1) == await dues(e, "hourly")
        (row,) = await e.store.recurring(["hourly"])
        clock.advance("10m")
        await e.run_until_idle()
        assert hours(1, 2) == await dues(e, "hourly")
    assert START_MS + 2 * HOUR == row.next_at


async def test_run_until_idle_with_advance_time_does_not_move_to_a_recurrence(
    durable_store_url: str,
) -> None:
    """advance_time moves to timers, not to recurring due times: the clock stays, no run starts."""
    clock = clock_at()
    async with engine(durable_store_url, clock, Recurring("hourly", tick, spaced("1h"))) as e:
        await e.run_until_idle(advance_time=True)
        await e.run_until_idle(advance_time=True)
        assert (START_MS, []) == (round(clock.now() * 1000), await dues(e, "hourly"))


async def test_run_for_stops_at_each_recurrence_on_the_way(durable_store_url: str) -> None:
    """run_for 5 h (as work() would) starts each of the five hourly runs, none caught up."""
    clock = clock_at()
    async with engine(durable_store_url, clock, Recurring("hourly", tick, spaced("1h"))) as e:
        await e.run_for("5h")
        assert hours(1, 2, 3, 4, 5) == await dues(e, "hourly")
        runs = await e.list_runs()
    assert {"completed"} == {r.status for r in runs}


async def test_a_restart_neither_skips_nor_repeats_a_recurrence(durable_store_url: str) -> None:
    """Three engines in turn on one store, each for part of the day: every hour once, in order."""
    clock = clock_at()
    hourly = Recurring("hourly", tick, spaced("1h"))
    for until in ("2h30m", "1h", "2h"):
        async with engine(durable_store_url, clock, hourly) as e:
            await e.run_until_idle()
            await e.run_for(until)
            await e.run_until_idle()
    async with engine(durable_store_url, clock, hourly) as e:
        assert hours(1, 2, 3, 4, 5) == await dues(e, "hourly")
        started = [len([ev for ev in await e.events(r.run_id) if ev.name == "run.started"])
                   for r in await e.list_runs()]  # fmt: skip
    assert [1] * 5 == started


async def test_a_recurrence_starts_while_the_previous_run_still_runs(
    durable_store_url: str,
) -> None:
    """Runs of a workflow that never finishes: one per hour all the same."""
    clock = clock_at()
    async with engine(durable_store_url, clock, Recurring("stuck", stuck, spaced("1h"))) as e:
        await e.run_for("3h")
        runs = await e.list_runs()
    assert (hours(1, 2, 3), {"suspended"}) == (
        sorted(int(r.run_id.rpartition("@")[2]) - START_MS for r in runs),
        {r.status for r in runs},
    )


async def test_two_engines_on_one_store_start_each_recurrence_once(
    durable_store_url: str,
) -> None:
    """Two engines step the same recurring in turn and at once: each hour has one run."""
    clock = clock_at()
    hourly = Recurring("hourly", tick, spaced("1h").jittered(), input=1)
    async with (
        engine(durable_store_url, clock, hourly) as first,
        engine(durable_store_url, clock, hourly) as second,
    ):
        for _ in range(12):
            await first.run_until_idle()
            await second.run_until_idle()
            clock.advance("20m")
        (row,) = await first.store.recurring()
        found = await dues(first, "hourly")
        events = [
            len([ev for ev in await first.events(r.run_id) if ev.name == "run.started"])
            for r in await first.list_runs()
        ]
    # Jittered: 0.8 to 1.2 h apart, each step taken once (rev: the first write, then one per run).
    gaps = [b - a for a, b in zip([0, *found], found, strict=False)]
    assert all(0.8 * HOUR <= gap < 1.2 * HOUR for gap in gaps), gaps
    assert len(found) + 1 == row.rev
    assert [1] * len(found) == events
    assert len(found) >= 2


# -- grids ---------------------------------------------------------------------------------------


async def test_cron_due_times_across_the_changes_of_clocks_in_berlin(
    durable_store_url: str,
) -> None:
    """Berlin 02:30: 03-29 at 03:00 CEST (skipped hour), 10-25 once at 02:30 CEST (repeated)."""
    found: dict[str, list[int]] = {}
    for name, start in (("spring", "2026-03-27T12:00+00:00"), ("autumn", "2026-10-23T12:00+00:00")):
        clock = clock_at(utc(start))
        nightly = Recurring(name, tick, cron("30 2 * * *", tz="Europe/Berlin"))
        async with engine(durable_store_url, clock, nightly) as e:
            await e.run_until_idle()
            await e.run_for("3d")
            found[name] = [START_MS + due for due in await dues(e, name)]
    assert {
        "spring": [
            utc("2026-03-28T02:30+01:00"),
            utc("2026-03-29T03:00+02:00"),
            utc("2026-03-30T02:30+02:00"),
        ],
        "autumn": [
            utc("2026-10-24T02:30+02:00"),
            utc("2026-10-25T02:30+02:00"),
            utc("2026-10-26T02:30+01:00"),
        ],
    } == found


async def test_a_fixed_grid_stays_on_multiples_of_its_period_from_the_first_step(
    durable_store_url: str,
) -> None:
    """fixed 15 min, first seen at +7 s: runs at +7 s + 15, 30, 45, 60 min, noticed late or not."""
    clock = clock_at(START_MS + 7_000)
    quarter = Recurring("quarter", tick, fixed("15m"))
    async with engine(durable_store_url, clock, quarter) as e:
        await e.run_until_idle()
        clock.advance("17m")  # noticed 2 min late
        await e.run_until_idle()
        await e.run_for("43m")
        found = await dues(e, "quarter")
    assert [7_000 + n * 15 * MINUTE for n in (1, 2, 3, 4)] == found


async def test_a_jittered_fixed_grid_starts_each_due_time_once_in_order(
    durable_store_url: str,
) -> None:
    """fixed 15 min jittered: runs at distinct, increasing ms, each once, none past its slot."""
    clock = clock_at()
    quarter = Recurring("quarter", tick, fixed("15m").jittered())
    async with engine(durable_store_url, clock, quarter) as e:
        await e.run_until_idle()
        await e.run_for("2h")
        found = await dues(e, "quarter")
        started = [len([ev for ev in await e.events(r.run_id) if ev.name == "run.started"])
                   for r in await e.list_runs(limit=1000)]  # fmt: skip
    assert found == sorted(set(found))
    assert [1] * len(found) == started
    # Each slot of 15 min has a run no later than 1.2 slots after its start.
    slots = {due // (15 * MINUTE) for due in found}
    assert set(range(1, 8)) <= slots, found


async def test_a_done_schedule_stops_recurring(durable_store_url: str) -> None:
    """spaced 1 h times 3: three runs, then none; recurs(3): three runs a ms apart."""
    clock = clock_at()
    three = Recurring("three", tick, spaced("1h").times(3))
    burst = Recurring("burst", tick, recurs(3))
    async with engine(durable_store_url, clock, three, burst) as e:
        await e.run_until_idle()
        await e.run_for("10h")
        rows = {row.name: row for row in await e.store.recurring()}
        assert hours(1, 2, 3) == await dues(e, "three")
        assert [0, 1, 2] == await dues(e, "burst")
    assert (None, None) == (rows["three"].next_at, rows["burst"].next_at)


async def test_a_schedule_done_at_its_first_step_never_runs(durable_store_url: str) -> None:
    """recurs(0): stored as done at first sight; no run ever."""
    clock = clock_at()
    async with engine(durable_store_url, clock, Recurring("never", tick, recurs(0))) as e:
        await e.run_until_idle()
        await e.run_for("1d")
        (row,) = await e.store.recurring()
        assert [] == await dues(e, "never")
    assert (None, False) == (row.next_at, row.recurs)


async def test_a_wait_of_max_delay_is_a_wake_up_and_a_calendar_keeps_its_due_time(
    durable_store_url: str,
) -> None:
    """
    spaced(30 d) waits MAX_DELAY each step: wake-ups, never a run. A yearly cron runs on
    1 January exactly, though its wait is longer than MAX_DELAY. A delay just under MAX_DELAY
    is a recurrence.
    """
    max_ms = round(MAX_DELAY * 1000)
    clock = clock_at()
    monthly = Recurring("monthly", tick, spaced("30d"))
    yearly = Recurring("yearly", tick, cron("0 0 1 1 *"))
    almost = Recurring("almost", tick, from_delays(MAX_DELAY - 0.001))
    async with engine(durable_store_url, clock, monthly, yearly, almost) as e:
        await e.run_until_idle()
        rows = {row.name: row for row in await e.store.recurring()}
        assert (max_ms, False) == (rows["monthly"].next_at - START_MS, rows["monthly"].recurs)
        assert (utc("2027-01-01T00:00+00:00"), True) == (
            rows["yearly"].next_at, rows["yearly"].recurs
        )  # fmt: skip
        assert (max_ms - 1, True) == (rows["almost"].next_at - START_MS, rows["almost"].recurs)
        clock.advance(MAX_DELAY)
        await e.run_until_idle()
        (monthly_row,) = await e.store.recurring(["monthly"])
        assert (2 * max_ms, False) == (monthly_row.next_at - START_MS, monthly_row.recurs)
        clock.advance("366d")
        await e.run_until_idle()
        assert [] == await dues(e, "monthly")
        assert [utc("2027-01-01T00:00+00:00") - START_MS] == await dues(e, "yearly")
        assert [max_ms - 1] == await dues(e, "almost")


async def test_a_catch_up_of_more_than_a_batch_goes_on_over_several_writes(
    durable_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With at most 4 due times a write, 10 missed: all start them all; latest the 10th alone."""
    monkeypatch.setattr("effects.durable._recurring.BATCH", 4)
    clock = clock_at()
    every = Recurring("every", tick, spaced("1m"), catch_up="all")
    latest = Recurring("latest", tick, spaced("1m"), catch_up="latest")
    none = Recurring("none", tick, spaced("1m"), catch_up="none")
    async with engine(durable_store_url, clock, every, latest, none) as e:
        await e.run_until_idle()
    clock.advance("10m30s")
    async with engine(durable_store_url, clock, every, latest, none) as e:
        await e.run_until_idle()
        rows = {row.name: row for row in await e.store.recurring()}
        assert [n * MINUTE for n in range(1, 11)] == await dues(e, "every")
        assert [10 * MINUTE] == await dues(e, "latest")
        assert [] == await dues(e, "none")
    # The first write, then three writes of 4, 4 and 2 due times.
    assert {"every": 4, "latest": 4, "none": 4} == {name: row.rev for name, row in rows.items()}
    assert {11 * MINUTE} == {row.next_at - START_MS for row in rows.values() if row.next_at}


async def test_work_wakes_at_a_recurrences_due_time_not_at_its_next_poll(
    durable_store_url: str,
) -> None:
    """work(poll_ms=60 s) on the wall clock, every 200 ms: runs start without waiting a poll."""
    every = Recurring("every", tick, spaced("200ms"), catch_up="all")  # late on a busy machine
    async with Engine(durable_store_url, workflows=[tick], recurring=[every]) as e:
        work = asyncio.get_running_loop().create_task(e.work(poll_ms=60_000))

        async def three_done() -> bool:
            assert not work.done(), work
            runs = await e.list_runs()
            return len([r for r in runs if r.status == "completed"]) >= 3

        try:
            await wait_until_async(three_done, timeout=30, what="three recurrences")
        finally:
            e.stop()
            await work
        found = sorted(int(r.run_id.rpartition("@")[2]) for r in await e.list_runs())
    assert [found[0] + 200 * n for n in range(len(found))] == found
