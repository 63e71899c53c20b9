"""
What a recurring's stored row holds and what the engine does with a row it did not expect: a
state that is not JSON (or does not fit) is a clear error naming the recurring and is left as it
is; a schedule changed in the code restarts the grid from then, saying so; an engine of older
code leaves the row to the engines with its new schedule; odd names round-trip.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from effects.durable import Engine, Recurring, StoreError
from effects.durable._store import RecurringWrite
from effects.testing import VirtualClock
from schedules import RandomLike, spaced
from tests.durable.support import START_MS
from tests.durable.test_recurring_runs import HOUR, MINUTE, clock_at, dues, hours, tick

pytestmark = pytest.mark.anyio


async def _spoil(engine: Engine, name: str, state: str) -> None:
    """Overwrite the stored state of recurring *name* with *state* (through the store)."""
    (row,) = await engine.store.recurring([name])
    (landed,) = await engine.store.write_recurring(
        [RecurringWrite(attrs.evolve(row, state=state), row.rev)]
    )
    assert landed


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("{not json", "its stored state '{not json' is not JSON"),
        ('"text"', "its schedule cannot step from its stored state"),
    ],
)
async def test_a_stored_state_that_is_not_json_is_an_error_naming_the_recurring(
    durable_store_url: str, caplog: pytest.LogCaptureFixture, state: str, said: str
) -> None:
    """
    A corrupt state: run_until_idle raises a StoreError naming the recurring (again whenever it
    looks, logged once); the row is left as it was (never reset); the other recurring runs.
    """
    caplog.set_level("ERROR", logger="effects.durable")
    clock = clock_at()
    broken = Recurring("broken", tick, spaced("1h"))
    other = Recurring("other", tick, spaced("1h"))
    async with Engine(
        durable_store_url, workflows=[tick], recurring=[broken, other], clock=clock
    ) as e:
        await e.run_until_idle()
        await _spoil(e, "broken", state)
        (before,) = await e.store.recurring(["broken"])
        clock.advance("1h")
        with pytest.raises(StoreError) as raised:
            await e.run_until_idle()
        clock.advance("30s")
        await e.run_until_idle()  # looked at again a minute on, not at every poll
        clock.advance("1h")
        with pytest.raises(StoreError) as again:
            await e.run_until_idle()
        (after,) = await e.store.recurring(["broken"])
        assert ([], hours(1, 2)) == (await dues(e, "broken"), await dues(e, "other"))
    message = str(raised.value)
    assert message == str(again.value)
    assert message.startswith("recurring 'broken' (spaced(3600)): ")
    assert said in message
    assert "left as it is" in message
    assert before == after
    assert [message] == [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


async def test_a_schedule_changed_in_the_code_restarts_the_grid_from_then_saying_so(
    durable_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """hourly, then every 30 min from +1 h 10 min: a WARNING; runs at +1 h, +1 h 40, +2 h 10."""
    caplog.set_level("WARNING", logger="effects.durable")
    clock = clock_at()
    old = Recurring("report", tick, spaced("1h"))
    new = Recurring("report", tick, spaced("30m"))
    async with Engine(durable_store_url, workflows=[tick], recurring=[old], clock=clock) as e:
        await e.run_until_idle()
        await e.run_for("1h10m")
    async with Engine(durable_store_url, workflows=[tick], recurring=[new], clock=clock) as e:
        await e.run_until_idle()
        await e.run_for("1h")
        found = await dues(e, "report")
        (row,) = await e.store.recurring()
    assert [HOUR, HOUR + 40 * MINUTE, 2 * HOUR + 10 * MINUTE] == found
    assert "spaced(1800)" == row.schedule
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith(
        "recurring 'report': its schedule changed from spaced(3600) to spaced(1800); its"
        " recurrences restart from now (next due at 2026-01-01T01:40:00.000Z)"
    )


async def test_an_engine_of_older_code_leaves_the_row_to_the_engines_of_the_new_schedule(
    durable_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """
    A deploy under way: the old engine (hourly) and a new one (30 min) share the store; the new
    one restarts the grid; the old one, seeing another schedule, steps nothing and says so once.
    """
    caplog.set_level("WARNING", logger="effects.durable")
    clock = clock_at()
    old = Recurring("report", tick, spaced("1h"))
    new = Recurring("report", tick, spaced("30m"))
    async with Engine(durable_store_url, workflows=[tick], recurring=[old], clock=clock) as first:
        await first.run_until_idle()
        clock.advance("10m")
        async with Engine(
            durable_store_url, workflows=[tick], recurring=[new], clock=clock
        ) as second:
            await second.run_until_idle()
            for _ in range(8):
                clock.advance("15m")
                await first.run_until_idle()
                await second.run_until_idle()
            found = await dues(first, "report")
    assert [40 * MINUTE + n * 30 * MINUTE for n in range(4)] == found
    left = [r.getMessage() for r in caplog.records if "left to the engines" in r.getMessage()]
    assert [
        "recurring 'report': its row has schedule spaced(1800), this engine's is spaced(3600);"
        " it is left to the engines with that schedule"
    ] == left


class Every:
    """A schedule written without a repr of its own: every *seconds*."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def initial(self) -> Any:
        """A count."""
        return 0

    def step(self, now: float, input: Any, state: Any, rng: RandomLike) -> tuple[Any, Any, float]:  # noqa: A002
        """Count, and wait *seconds*."""
        return state + 1, state, self.seconds


async def test_a_schedule_with_a_default_repr_goes_on_across_a_restart(
    durable_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its key has no address: a new process (a new object) goes on with the grid, no warning."""
    caplog.set_level("WARNING", logger="effects.durable")
    clock = clock_at()
    for _ in range(3):
        recurring = Recurring("custom", tick, Every(3600))
        async with Engine(
            durable_store_url, workflows=[tick], recurring=[recurring], clock=clock
        ) as e:
            await e.run_until_idle()
            await e.run_for("1h")
            found = await dues(e, "custom")
            (row,) = await e.store.recurring()
    assert (hours(1, 2, 3), "4") == (found, row.state)  # the first step, then one per run
    assert [] == [r for r in caplog.records if r.levelname == "WARNING"]


async def test_odd_names_run_and_their_ids_parse_back(durable_store_url: str) -> None:
    """'a', 'a@1', an escape sequence and non-ASCII: each its own runs, ids ending in @due."""
    clock = VirtualClock(START_MS / 1000)
    names = ["a", "a@1", "x\x1b[2J", "ünï €"]
    recurring = [Recurring(name, tick, spaced("1h"), input=name) for name in names]
    async with Engine(durable_store_url, workflows=[tick], recurring=recurring, clock=clock) as e:
        await e.run_until_idle()
        await e.run_for("2h")
        runs = await e.list_runs()
        rows = await e.store.recurring()
    by_name: dict[str, list[int]] = {}
    for run in runs:
        name, _, due = run.run_id.rpartition("@")
        assert name == run.output
        by_name.setdefault(name, []).append(int(due) - START_MS)
    assert {name: hours(1, 2) for name in names} == {k: sorted(v) for k, v in by_name.items()}
    assert sorted(names) == sorted(row.name for row in rows)
