"""
Group commit on PostgreSQL: beyond two one-statement writes in flight, the writes that come
meanwhile share one transaction; each still fails alone, a write cancelled before its group is
never sent, and a group whose reply is lost is retried write by write without landing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg import sql

from effects.durable import Engine, Run, StoreError, WorkflowContext, workflow
from effects.durable._store import NewEvent, NewRun, RunAdvance, StaleTurnError, TurnCommit
from effects.durable._store.postgres import PostgresStore, parse_postgres_url
from tests.durable.support import START_MS, rows

pytestmark = pytest.mark.anyio

#: How long a test waits for work that must finish (a bound on a hang, not a timing claim).
PATIENCE = 60.0
#: Runs whose writes queue behind the two held ones.
QUEUED = 12


@pytest.fixture
def anyio_backend() -> str:
    """The PostgreSQL store is an asyncio store (psycopg's asyncio connections)."""
    return "asyncio"


class CountingGroups(PostgresStore):
    """
    A store that records the size of every group it commits in one transaction, and each write
    a failed group sent again alone.
    """

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.groups: list[int] = []
        self.alone_again: list[str] = []
        self._in_group = False

    async def _commit_group(self, group: Any) -> None:
        self.groups.append(len(group))
        self._in_group = True
        try:
            await super()._commit_group(group)
        finally:
            self._in_group = False

    async def _commit_alone(self, queued: Any, *, again: bool) -> None:
        if self._in_group:
            self.alone_again.append(queued.run_id)
        await super()._commit_alone(queued, again=again)


class LosingGroupReplies(CountingGroups):
    """A store whose first group commit lands and then loses its reply (the line drops)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.lost = 0

    async def _call(self, fn: Any, **options: Any) -> Any:
        if "_commit_group" not in getattr(fn, "__qualname__", "") or self.lost:
            return await super()._call(fn, **options)

        async def then_drop(conn: Any, retry: Any) -> Any:
            await fn(conn, retry)
            self.lost += 1
            msg = "server closed the connection unexpectedly"
            raise psycopg.OperationalError(msg)

        return await super()._call(then_drop, **options)


@contextlib.contextmanager
def locked_run(url: str, run_id: str) -> Iterator[psycopg.Connection[Any]]:
    """Hold run *run_id*'s row locked (``FOR UPDATE``) on a connection of its own for the block."""
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
        conn.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))
        yield conn


@contextlib.asynccontextmanager
async def leased_runs(store: PostgresStore, count: int) -> AsyncIterator[dict[str, str]]:
    """*count* runs ``r0``.. made and claimed on *store*: their lease tokens by id."""
    await store.open()
    try:
        for n in range(count):
            await store.create_run(NewRun(f"r{n}", "w", "", "null", START_MS), [])
        claimed = await store.claim_runs(
            workflows=[("w", "")],
            now=START_MS,
            lease_until=START_MS + 600_000,
            owner="e1",
            limit=count,
        )
        yield {c.run.run_id: c.token for c in claimed}
    finally:
        await store.close()


def local_step(
    store: PostgresStore, run_id: str, token: str, seq: int, output: str = "1"
) -> asyncio.Task[None]:
    """A local step's checkpoint write, as a task of its own."""
    return asyncio.create_task(
        store.record_local_step(
            run_id, token, seq=seq, name=f"s{seq}", output=output, started=START_MS, now=START_MS
        )
    )


async def held_two(store: PostgresStore, tokens: dict[str, str]) -> list[asyncio.Task[None]]:
    """Two writes of run ``r0`` sent and held by its row lock: every later write queues."""
    held = [local_step(store, "r0", tokens["r0"], seq) for seq in (1, 2)]
    for _ in range(200):
        if store._in_flight == 2:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert 2 == store._in_flight
    return held


def landed(url: str) -> list[tuple[Any, ...]]:
    """The checkpoints written, as ``(run_id, seq)``."""
    return rows(url, "SELECT run_id, seq FROM checkpoints ORDER BY run_id, seq")


async def test_writes_beyond_two_in_flight_share_one_transaction(postgres_url: str) -> None:
    """Two writes are held by a lock; the twelve that come meanwhile land in one group commit."""
    store = CountingGroups(postgres_url)
    async with leased_runs(store, QUEUED + 1) as tokens:
        with locked_run(postgres_url, "r0") as lock:
            held = await held_two(store, tokens)
            queued = [local_step(store, f"r{n}", tokens[f"r{n}"], 1) for n in range(1, QUEUED + 1)]
            await asyncio.sleep(0.05)
            assert QUEUED == len(store._group)
            assert [] == store.groups
            lock.commit()
        await asyncio.wait_for(asyncio.gather(*held, *queued), PATIENCE)
    assert [QUEUED] == store.groups
    expected = [("r0", 1), ("r0", 2), *((f"r{n}", 1) for n in range(1, QUEUED + 1))]
    assert sorted(expected) == sorted(landed(postgres_url))


async def test_a_failing_write_in_a_group_fails_alone(postgres_url: str) -> None:
    """A stale lease and an unstorable output in one group: those two fail; the rest land."""
    store = CountingGroups(postgres_url)
    async with leased_runs(store, QUEUED + 1) as tokens:
        with locked_run(postgres_url, "r0") as lock:
            held = await held_two(store, tokens)
            queued = {n: local_step(store, f"r{n}", tokens[f"r{n}"], 1) for n in range(3, QUEUED)}
            stale = local_step(store, "r1", "not-the-token", 1)
            # A raw U+0000 (the engine's own JSON escapes it): text the server refuses.
            nul = local_step(store, "r2", tokens["r2"], 1, output='"a\x00b"')
            lock.commit()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*held, *queued.values(), stale, nul, return_exceptions=True), PATIENCE
        )
    *fine, stale_error, nul_error = outcomes
    assert [None] * len(fine) == fine
    assert isinstance(stale_error, StaleTurnError)
    assert isinstance(nul_error, TypeError)
    assert "U+0000" in str(nul_error)
    # The group was tried once whole; its failure sent each write again alone.
    assert [len(queued) + 2] == store.groups
    expected = [("r0", 1), ("r0", 2), *((f"r{n}", 1) for n in queued)]
    assert sorted(expected) == sorted(landed(postgres_url))


async def test_a_write_cancelled_while_queued_is_never_sent(postgres_url: str) -> None:
    """A caller cancelled before its group starts: its checkpoint is never written."""
    store = CountingGroups(postgres_url)
    async with leased_runs(store, 4) as tokens:
        with locked_run(postgres_url, "r0") as lock:
            held = await held_two(store, tokens)
            kept = [local_step(store, f"r{n}", tokens[f"r{n}"], 1) for n in (1, 3)]
            dropped = local_step(store, "r2", tokens["r2"], 1)
            await asyncio.sleep(0.05)
            dropped.cancel()
            with pytest.raises(asyncio.CancelledError):
                await dropped
            lock.commit()
        await asyncio.wait_for(asyncio.gather(*held, *kept), PATIENCE)
    assert [2] == store.groups
    assert [("r0", 1), ("r0", 2), ("r1", 1), ("r3", 1)] == landed(postgres_url)


async def test_writes_queued_when_the_store_closes_fail_clearly_and_land_nothing(
    postgres_url: str,
) -> None:
    """The store is closed while writes wait for a group: each is a StoreError, none lands."""
    store = CountingGroups(postgres_url)
    async with leased_runs(store, 4) as tokens:
        with locked_run(postgres_url, "r0") as lock:
            held = await held_two(store, tokens)
            queued = [local_step(store, f"r{n}", tokens[f"r{n}"], 1) for n in (1, 2, 3)]
            await asyncio.sleep(0.05)
            closing = asyncio.create_task(store.close())
            outcomes = await asyncio.wait_for(
                asyncio.gather(*queued, return_exceptions=True), PATIENCE
            )
            lock.commit()
        await asyncio.wait_for(asyncio.gather(*held, closing, return_exceptions=True), PATIENCE)
    assert [StoreError] * 3 == [type(o) for o in outcomes]
    assert all("was not sent" in str(o) for o in outcomes)
    assert [] == store.groups
    assert [] == rows(postgres_url, "SELECT run_id, seq FROM checkpoints WHERE run_id <> 'r0'")


async def test_a_group_whose_reply_is_lost_lands_each_write_once(postgres_url: str) -> None:
    """The group commits, then its connection drops: each write, retried alone, lands once."""
    store = LosingGroupReplies(postgres_url)
    async with leased_runs(store, QUEUED + 1) as tokens:
        with locked_run(postgres_url, "r0") as lock:
            held = await held_two(store, tokens)
            queued = [local_step(store, f"r{n}", tokens[f"r{n}"], 1) for n in range(1, QUEUED + 1)]
            await asyncio.sleep(0.05)
            lock.commit()
        await asyncio.wait_for(asyncio.gather(*held, *queued), PATIENCE)
    assert (1, [QUEUED]) == (store.lost, store.groups)
    expected = [("r0", 1), ("r0", 2), *((f"r{n}", 1) for n in range(1, QUEUED + 1))]
    assert sorted(expected) == sorted(landed(postgres_url))


async def test_starts_of_one_id_in_one_group_make_one_run(postgres_url: str) -> None:
    """Three starts of one id queued in one group: one run; each start is told of it."""
    store = CountingGroups(postgres_url)
    async with leased_runs(store, 1) as tokens:
        with locked_run(postgres_url, "r0") as lock:
            held = await held_two(store, tokens)
            starts = [
                asyncio.create_task(
                    store.create_run(
                        NewRun("dup", "w", "", "7", START_MS), [NewEvent("run.created", START_MS)]
                    )
                )
                for _ in range(3)
            ]
            await asyncio.sleep(0.05)
            lock.commit()
        made = await asyncio.wait_for(asyncio.gather(*starts), PATIENCE)
        await asyncio.wait_for(asyncio.gather(*held), PATIENCE)
    assert [3] == store.groups
    assert None is made[0]
    assert [("dup", 7), ("dup", 7)] == [(r.run_id, r.input) for r in made[1:] if isinstance(r, Run)]
    assert [(1,)] == rows(postgres_url, "SELECT COUNT(*) FROM runs WHERE run_id = 'dup'")
    assert [(1,)] == rows(
        postgres_url, "SELECT COUNT(*) FROM events WHERE run_id = 'dup' AND name = 'run.created'"
    )


@workflow("ten-local")
async def ten_local(ctx: WorkflowContext, n: int) -> int:
    """Ten local steps, each adding one."""
    for seq in range(10):
        n = await ctx.local_step(f"add-{seq}", partial(int.__add__, n, 1))
    return n


async def test_runs_at_once_group_their_writes_and_each_step_lands_once(postgres_url: str) -> None:
    """64 runs of ten local steps at once on a working engine: grouped, all complete, once."""
    store = CountingGroups(postgres_url)
    async with Engine(store, workflows=[ten_local]) as engine:
        worker = asyncio.create_task(engine.work(poll_ms=50, concurrency=64))
        try:
            ids = await asyncio.gather(*(engine.start(ten_local, n) for n in range(64)))
            runs = await asyncio.wait_for(
                asyncio.gather(*(engine.wait(run_id) for run_id in ids)), PATIENCE
            )
        finally:
            engine.stop()
            await asyncio.wait_for(worker, PATIENCE)
    assert [(n + 10, "completed") for n in range(64)] == [(r.output, r.status) for r in runs]
    assert max(store.groups) > 1
    assert [(64 * 10,)] == rows(postgres_url, "SELECT COUNT(*) FROM checkpoints")
    assert [] == rows(
        postgres_url,
        "SELECT run_id, seq FROM events WHERE name = 'step.completed'"
        " GROUP BY run_id, seq HAVING COUNT(*) > 1",
    )


@workflow("ten-slow-local")
async def ten_slow_local(ctx: WorkflowContext, n: int) -> int:
    """Ten local steps, each adding one after 20 ms."""

    async def add(n: int) -> int:
        await asyncio.sleep(0.02)
        return n + 1

    for seq in range(10):
        n = await ctx.local_step(f"add-{seq}", partial(add, n))
    return n


async def test_runs_at_once_survive_their_connections_being_cut(postgres_url: str) -> None:
    """
    The server ends every connection of the engine eight times, 100 ms apart, while 64 runs
    write at once (a failover after a failover): every run completes, each step landed once.
    """
    libpq, _ = parse_postgres_url(postgres_url)
    store = CountingGroups(postgres_url)

    async def cut() -> int:
        cuts = 0
        async with await psycopg.AsyncConnection.connect(libpq, autocommit=True) as admin:
            for _ in range(8):
                await asyncio.sleep(0.1)
                cursor = await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND backend_type = 'client backend'"
                )
                cuts += sum(1 for (ended,) in await cursor.fetchall() if ended)
        return cuts

    async with Engine(store, workflows=[ten_slow_local]) as engine:
        worker = asyncio.create_task(engine.work(poll_ms=50, concurrency=64))
        try:
            ids = await asyncio.gather(*(engine.start(ten_slow_local, n) for n in range(64)))
            cuts = await asyncio.wait_for(cut(), PATIENCE)
            runs = await asyncio.wait_for(
                asyncio.gather(*(engine.wait(run_id) for run_id in ids)), PATIENCE
            )
        finally:
            engine.stop()
            await asyncio.wait_for(worker, PATIENCE)
    assert cuts > 0
    assert [(n + 10, "completed") for n in range(64)] == [(r.output, r.status) for r in runs]
    assert [(64 * 10,)] == rows(postgres_url, "SELECT COUNT(*) FROM checkpoints")
    assert [] == rows(
        postgres_url,
        "SELECT run_id, seq FROM events WHERE name = 'step.completed'"
        " GROUP BY run_id, seq HAVING COUNT(*) > 1",
    )


async def test_two_engines_grouping_one_set_of_runs_lock_them_in_one_order(
    postgres_url: str,
) -> None:
    """
    Two stores queue lease renewals of the same ten runs, one in the order r1..r10 and the other
    in r10..r1, and both groups meet the runs' rows locked: each group takes them in run order,
    so neither deadlocks the other (no group fails and is sent again write by write).
    """
    first, second = CountingGroups(postgres_url), CountingGroups(postgres_url)
    async with leased_runs(first, 11) as tokens:
        await second.open()
        try:
            libpq, options = parse_postgres_url(postgres_url)
            with psycopg.connect(libpq) as rows_lock:
                rows_lock.execute(
                    sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema))
                )
                rows_lock.execute("SELECT 1 FROM runs WHERE run_id <> 'r0' FOR UPDATE")
                with locked_run(postgres_url, "r0") as lock:
                    held = [
                        *await held_two(first, tokens),
                        local_step(second, "r0", tokens["r0"], 3),
                        local_step(second, "r0", tokens["r0"], 4),
                    ]
                    await asyncio.sleep(0.1)
                    order = [f"r{n}" for n in range(1, 11)]
                    renewals = [
                        asyncio.create_task(
                            store.commit_turn(
                                TurnCommit(
                                    run_id,
                                    tokens[run_id],
                                    START_MS,
                                    RunAdvance("continue", lease_until=START_MS + 700_000),
                                )
                            )
                        )
                        for store, runs in ((first, order), (second, order[::-1]))
                        for run_id in runs
                    ]
                    await asyncio.sleep(0.1)
                    assert (10, 10) == (len(first._group), len(second._group))
                    lock.commit()
                # Both groups are sent, and wait on the rows of r1..r10.
                await asyncio.wait_for(asyncio.gather(*held), PATIENCE)
                await asyncio.sleep(0.2)
                rows_lock.commit()
            await asyncio.wait_for(asyncio.gather(*renewals), PATIENCE)
        finally:
            await second.close()
    assert ([10], [10]) == (first.groups, second.groups)
    assert ([], []) == (first.alone_again, second.alone_again)
    assert [(START_MS + 700_000,)] * 10 == rows(
        postgres_url, "SELECT lease_until FROM runs WHERE run_id <> 'r0'"
    )
