"""
Shared run reads on PostgreSQL: while one ``get_run`` is in flight, the reads that come meanwhile
share the next statement; each still sees what was committed before it was asked for, a read
cancelled while it waits is not sent, and closing the store fails the reads still waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from effects.durable import Run, StoreError
from effects.durable._store import NewRun
from effects.durable._store.postgres import PostgresStore, parse_postgres_url
from tests.durable.support import START_MS

pytestmark = pytest.mark.anyio

#: How long a test waits for work that must finish (a bound on a hang, not a timing claim).
PATIENCE = 60.0


@pytest.fixture
def anyio_backend() -> str:
    """The PostgreSQL store is an asyncio store (psycopg's asyncio connections)."""
    return "asyncio"


class HeldReads(PostgresStore):
    """
    A store whose single-run reads wait for ``gate`` before they are sent, and which records the
    ids of each shared read it sends (as their ``text[]`` literal).
    """

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.gate = asyncio.Event()
        self.shared: list[str] = []

    async def _call(self, fn: Any, **options: Any) -> Any:
        name = getattr(fn, "__qualname__", "")
        if name.startswith("PostgresStore.get_run.") and not self.gate.is_set():
            await self.gate.wait()
        elif name.startswith("PostgresStore._read_shared."):
            shared = fn.__closure__[0].cell_contents
            self.shared.append(shared)
        return await super()._call(fn, **options)


def cancel_elsewhere(url: str, run_id: str) -> None:
    """Mark run *run_id* cancelled on a connection of its own (committed when this returns)."""
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
        conn.execute("UPDATE runs SET status = 'cancelled' WHERE run_id = %s", (run_id,))


@contextlib.asynccontextmanager
async def three_runs(url: str) -> AsyncIterator[HeldReads]:
    """A held-reads store, open, with runs ``r0``, ``r1`` and ``r2`` made (input 0, 1, 2)."""
    store = HeldReads(url)
    await store.open()
    try:
        for n in range(3):
            await store.create_run(NewRun(f"r{n}", "w", "", str(n), START_MS), [])
        yield store
    finally:
        await store.close()


async def until_queued(store: HeldReads, count: int) -> None:
    """Wait until *count* run ids wait for the next shared read."""
    for _ in range(500):
        if len(store._run_reads) == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} queued ids, got {list(store._run_reads)}")


async def test_reads_that_come_while_one_is_in_flight_share_one_statement(
    postgres_url: str,
) -> None:
    """Four reads behind a held one: one statement reads them; each gets its own run or None."""
    async with three_runs(postgres_url) as store:
        first = asyncio.create_task(store.get_run("r0"))
        await asyncio.sleep(0.05)
        later = [asyncio.create_task(store.get_run(i)) for i in ("r1", "r2", "nope", "r1")]
        await until_queued(store, 3)
        store.gate.set()
        found = await asyncio.wait_for(asyncio.gather(first, *later), PATIENCE)
    assert ["r0", "r1", "r2", None, "r1"] == [None if r is None else r.run_id for r in found]
    assert [0, 1, 2, None, 1] == [None if r is None else r.input for r in found]
    assert ['{"r1","r2","nope"}'] == store.shared


async def test_a_shared_read_sees_a_commit_made_before_it_was_asked_for(
    postgres_url: str,
) -> None:
    """A run cancelled by another connection while a read is in flight: the next read says so."""
    async with three_runs(postgres_url) as store:
        first = asyncio.create_task(store.get_run("r1"))
        await asyncio.sleep(0.05)
        cancel_elsewhere(postgres_url, "r1")
        second = asyncio.create_task(store.get_run("r1"))
        await until_queued(store, 1)
        store.gate.set()
        before, after = await asyncio.wait_for(asyncio.gather(first, second), PATIENCE)
    assert after is not None
    assert before is not None
    assert "cancelled" == after.status
    assert ['{"r1"}'] == store.shared


async def test_a_read_cancelled_while_it_waits_is_not_sent(postgres_url: str) -> None:
    """Of two queued reads, one is cancelled before the shared read: only the other is read."""
    async with three_runs(postgres_url) as store:
        first = asyncio.create_task(store.get_run("r0"))
        await asyncio.sleep(0.05)
        dropped = asyncio.create_task(store.get_run("r1"))
        kept = asyncio.create_task(store.get_run("r2"))
        await until_queued(store, 2)
        dropped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dropped
        store.gate.set()
        found = await asyncio.wait_for(asyncio.gather(first, kept), PATIENCE)
    assert ["r0", "r2"] == [None if r is None else r.run_id for r in found]
    assert ['{"r2"}'] == store.shared


async def test_a_shared_read_the_server_refuses_fails_only_the_read_that_made_it(
    postgres_url: str,
) -> None:
    """An id with a U+0000 among queued reads: the shared read fails; each is read again alone."""
    async with three_runs(postgres_url) as store:
        first = asyncio.create_task(store.get_run("r0"))
        await asyncio.sleep(0.05)
        later = [asyncio.create_task(store.get_run(i)) for i in ("r1", "a\x00b", "r2")]
        await until_queued(store, 3)
        store.gate.set()
        found = await asyncio.wait_for(
            asyncio.gather(first, *later, return_exceptions=True), PATIENCE
        )
    r0, r1, refused, r2 = found
    assert ["r0", "r1", "r2"] == [r.run_id for r in (r0, r1, r2) if isinstance(r, Run)]
    assert isinstance(refused, psycopg.DataError)
    assert ['{"r1","a\x00b","r2"}'] == store.shared


async def test_closing_the_store_fails_the_reads_that_wait(postgres_url: str) -> None:
    """A read queued behind a held one when the store closes: it raises StoreError, not hangs."""
    store = HeldReads(postgres_url)
    await store.open()
    first = asyncio.create_task(store.get_run("r0"))
    await asyncio.sleep(0.05)
    queued = asyncio.create_task(store.get_run("r1"))
    await until_queued(store, 1)
    await store.close()
    with pytest.raises(StoreError, match="was closed while a read of run 'r1' waited"):
        await asyncio.wait_for(queued, PATIENCE)
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError, StoreError, RuntimeError):
        await first
