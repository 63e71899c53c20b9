"""A new run's id: 32 hex digits, its start time first, then 80 random bits."""

from __future__ import annotations

import re

import pytest

from effects.durable import WorkflowContext, workflow
from effects.durable._engine import new_run_id
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio


@workflow("ids")
async def ids(ctx: WorkflowContext, n: int) -> int:
    """Nothing to do."""
    del ctx
    return n


def test_ids_of_one_millisecond_differ_and_later_ones_sort_after() -> None:
    """Ids made at one ms differ; an id of a later ms sorts after every earlier one."""
    same = {new_run_id(1_700_000_000_000) for _ in range(1000)}
    later = new_run_id(1_700_000_000_001)
    assert 1000 == len(same)
    assert all(later > earlier for earlier in same)


def test_the_time_is_the_first_twelve_digits() -> None:
    """The first 12 hex digits are epoch ms; the id is 32 lowercase hex digits."""
    run_id = new_run_id(0x0123_4567_89AB)
    assert re.fullmatch(r"0123456789ab[0-9a-f]{20}", run_id)


async def test_start_gives_ids_in_the_order_runs_were_started(
    durable_engine: DurableEngineFactory,
) -> None:
    """Runs started one after another (virtual clock moving) get ids in that order."""
    async with durable_engine(workflows=[ids]) as engine:
        started = []
        for n in range(5):
            started.append(await engine.start(ids, n))
            durable_engine.clock.advance(0.001)
    assert sorted(started) == started
    assert all(re.fullmatch(r"[0-9a-f]{32}", run_id) for run_id in started)
