"""
A store of the schema version before messages, event values and child runs gains them in place
(one upgrade): its run in mid-flight goes on, and new runs send, receive, publish and start
children on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import effects.durable._store.postgres as pg
import effects.durable._store.sqlite as lite
from effects.durable import Engine, WorkflowContext, workflow
from tests.durable.support import rows
from tests.durable.test_store_contract import dialect_columns
from tests.durable.test_store_upgrade import (
    _older,  # pyright: ignore[reportPrivateUsage]
    echo,
    mid_flight,
    version_before,
)

pytestmark = [pytest.mark.anyio, pytest.mark.not_on_memory("stores of older versions")]


@workflow("talks")
async def talks(ctx: WorkflowContext, n: int) -> Any:
    """A message, an event, and a child."""
    got = await ctx.recv("in")
    await ctx.set_event("got", got)
    return await ctx.child(mid_flight, got + n)


async def test_a_store_from_before_messages_gains_their_tables_in_place_and_runs_go_on(
    durable_store_url: str, tmp_path: Path
) -> None:
    """The previous version: one upgrade; its run completes; a new run uses every new table."""
    sqlite = durable_store_url.startswith("sqlite:")
    current = lite.SCHEMA_VERSION if sqlite else pg.SCHEMA_VERSION
    url = _older(
        durable_store_url, tmp_path, version_before(durable_store_url, "CREATE TABLE messages")
    )
    before = dialect_columns(url)
    async with Engine(url, workflows=[mid_flight, talks], steps=[echo]) as engine:
        await engine.run_until_idle()
        old = await engine.get_run("r")
        await engine.start(talks, 1, run_id="new")
        await engine.send("new", "in", 4, message_id="m")
        await engine.run_until_idle()
        new = await engine.get_run("new")
        got = await engine.get_event("new", "got")
        (child,) = await engine.store.child_runs("new")
    after = dialect_columns(url)
    assert ("completed", 5, None) == (old.status, old.output, old.parent_id)
    assert ("completed", 5, 4) == (new.status, new.output, got)
    assert ("new:3", "new") == (child.run_id, child.parent_id)
    assert [(str(current),)] == rows(url, "SELECT value FROM durable_meta WHERE key = 'version'")
    assert {"messages", "event_values"} == set(after) - set(before)
    assert {"parent_id"} == after["runs"] - before["runs"]
    assert [("in", "4", "m", 1)] == rows(url, "SELECT topic, body, message_id, seq FROM messages")
    assert [("got", "4", 2)] == rows(url, "SELECT key, value, seq FROM event_values")
