"""
Starts a working engine takes on PostgreSQL: one leased run's insert at a time goes at once beside
the group commits, never queued behind the writes in flight; an unleased start, or a second leased
one while the first is in flight, still waits for the next group.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from effects.durable._store import ClaimedRun, NewRun
from effects.durable._store.postgres import PostgresStore, parse_postgres_url
from tests.durable.support import START_MS, rows

pytestmark = pytest.mark.anyio

#: How long a test waits for work that must finish (a bound on a hang, not a timing claim).
PATIENCE = 60.0
LEASE_UNTIL = START_MS + 600_000


@pytest.fixture
def anyio_backend() -> str:
    """The PostgreSQL store is an asyncio store (psycopg's asyncio connections)."""
    return "asyncio"


@contextlib.contextmanager
def locked_run(url: str, run_id: str) -> Iterator[psycopg.Connection[Any]]:
    """Hold run *run_id*'s row locked (``FOR UPDATE``) on a connection of its own for the block."""
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
        conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))
        yield conn


@contextlib.asynccontextmanager
async def held_writes(
    url: str,
) -> AsyncIterator[tuple[PostgresStore, Callable[[], Awaitable[None]]]]:
    """
    An open store whose two writes in flight (local steps of run ``r0``) wait for a row lock, so
    every grouped write queues; and the call that lets them go and waits for them.
    """
    store = PostgresStore(url)
    await store.open()
    try:
        await store.create_run(NewRun("r0", "w", "", "0", START_MS), [])
        [claimed] = await store.claim_runs(
            workflows=[("w", "")], now=START_MS, lease_until=LEASE_UNTIL, owner="e1", limit=1
        )
        with locked_run(url, "r0") as lock:
            held = [
                asyncio.create_task(
                    store.record_local_step(
                        "r0",
                        claimed.token,
                        seq=seq,
                        name=f"s{seq}",
                        output="1",
                        started=START_MS,
                        now=START_MS,
                    )
                )
                for seq in (1, 2)
            ]
            for _ in range(500):
                if store._in_flight == 2:
                    break
                await asyncio.sleep(0.01)
            assert 2 == store._in_flight

            async def release() -> None:
                lock.commit()
                await asyncio.wait_for(asyncio.gather(*held), PATIENCE)

            yield store, release
            await release()
    finally:
        await store.close()


def leased(run_id: str) -> NewRun:
    """A run made leased to engine ``e1`` (a working engine's start)."""
    return NewRun(run_id, "w", "", "1", START_MS, f"e1:{run_id}", LEASE_UNTIL)


async def test_a_leased_start_goes_at_once_while_writes_are_held(postgres_url: str) -> None:
    """Two writes held by a lock: a leased start lands anyway, leased, and nothing queued."""
    async with held_writes(postgres_url) as (store, _):
        made = await asyncio.wait_for(store.create_run(leased("a"), []), PATIENCE)
        assert isinstance(made, ClaimedRun)
        assert ("a", "e1:a") == (made.run.run_id, made.token)
        assert [] == store._group
    assert [("a", "running", "e1:a")] == rows(
        postgres_url, "SELECT run_id, status, lease_token FROM runs WHERE run_id = 'a'"
    )


async def test_a_second_leased_start_while_one_is_in_flight_waits_for_a_group(
    postgres_url: str,
) -> None:
    """Two leased starts at once behind held writes: one goes at once, the other is queued."""
    async with held_writes(postgres_url) as (store, release):
        starts = [asyncio.create_task(store.create_run(leased(i), [])) for i in ("a", "b")]
        done, _ = await asyncio.wait(starts, timeout=PATIENCE, return_when="FIRST_COMPLETED")
        assert 1 == len(done)
        assert 1 == len(store._group)
        await release()
        made = await asyncio.wait_for(asyncio.gather(*starts), PATIENCE)
    assert ["a", "b"] == [m.run.run_id for m in made if isinstance(m, ClaimedRun)]


async def test_an_unleased_start_waits_for_the_next_group(postgres_url: str) -> None:
    """Behind held writes, a start of a pending run (no engine takes it) is queued for a group."""
    async with held_writes(postgres_url) as (store, release):
        start = asyncio.create_task(store.create_run(NewRun("p", "w", "", "1", START_MS), []))
        for _ in range(500):
            if store._group:
                break
            await asyncio.sleep(0.01)
        assert ["p"] == [queued.run_id for queued in store._group]
        assert not start.done()
        await release()
        assert None is await asyncio.wait_for(start, PATIENCE)
