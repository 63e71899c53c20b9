"""
PostgreSQL: a send that wakes its run, and a child's finish that wakes its parent, tell other
engines with a ``NOTIFY`` of kind "r" (a hint: they poll anyway); a send that wakes nobody, a
duplicate and a child's finish that no parent waits for tell nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

import effects.durable._store.postgres as pg
from effects.durable import Engine, WorkflowContext, workflow
from effects.durable._store.postgres import parse_postgres_url
from tests.durable.test_postgres_store import connect

pytestmark = pytest.mark.anyio
#: A bound on a wait that must end (never a timing claim).
PATIENCE = 60.0
MARK = "test:mark"


@workflow("waits")
async def waits(ctx: WorkflowContext, _: Any) -> Any:
    """A message on 'a', then a child it waits for, which waits for a message on 'b'."""
    await ctx.start_child(kid, None, run_id="side")
    got = await ctx.recv("a")
    return [got, await ctx.child(kid, None, run_id="kid")]


@workflow("kid")
async def kid(ctx: WorkflowContext, _: Any) -> Any:
    """A message on 'b'."""
    return await ctx.recv("b")


def heard(url: str, listener: Any) -> list[str]:
    """The kinds of the notifications *listener* got, up to a mark this sends now."""
    schema = parse_postgres_url(url)[1].schema
    with connect(url) as sender:
        sender.execute("SELECT pg_notify(%s, %s)", (pg.channel_name(schema, "r"), MARK))
    kinds: list[str] = []
    for note in listener.notifies(timeout=PATIENCE):
        if note.payload == MARK:
            return kinds
        kinds.append(note.payload.partition(":")[2])
    raise AssertionError(f"the mark never came; heard {kinds}")


async def test_sends_and_child_finishes_notify_when_they_wake_a_run(postgres_url: str) -> None:
    """'b' to a run waiting on 'a', a duplicate id: nothing; 'a': "r"; the child's finish: "r"."""
    schema = parse_postgres_url(postgres_url)[1].schema
    with connect(postgres_url) as listener:
        for kind in "rt":
            channel = sql.Identifier(pg.channel_name(schema, kind))
            listener.execute(sql.SQL("LISTEN {}").format(channel))
        async with Engine(postgres_url, workflows=[waits, kid]) as engine:
            await engine.start(waits, None, run_id="p")
            await engine.run_until_idle()
            heard(postgres_url, listener)
            await engine.send("p", "b", "not waited for", message_id="x")
            await engine.send("p", "b", "a duplicate", message_id="x")
            unheard = heard(postgres_url, listener)
            await engine.send("p", "a", "waited for")
            woken = heard(postgres_url, listener)
            await engine.run_until_idle()
            heard(postgres_url, listener)
            await engine.send("side", "b", "side's")
            await engine.run_until_idle()
            side_done = heard(postgres_url, listener)
            await engine.send("kid", "b", "kid's")
            await engine.run_until_idle()
            kid_done = heard(postgres_url, listener)
            run = await engine.get_run("p")
    assert ("completed", ["waited for", "kid's"]) == (run.status, run.output)
    assert ([], ["r"]) == (unheard, woken)
    assert ["r"] == side_done  # the send that woke the side child; its finish wakes no one
    assert ["r", "r"] == kid_done  # the send that woke the kid, then its finish (the parent)
