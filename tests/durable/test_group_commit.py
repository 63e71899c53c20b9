"""Group commit with synchronous=full: concurrent writes share one fsync, and fail alone."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Engine, SqliteStore, StaleTurnError, WorkflowContext, workflow
from effects.durable._store import NewEvent, NewRun

pytestmark = pytest.mark.anyio


async def one() -> int:
    """A local step's work."""
    return 1


@workflow("ten")
async def ten(ctx: WorkflowContext, _: None) -> int:
    """Ten local steps."""
    total = 0
    for n in range(10):
        total += await ctx.local_step(f"s{n}", one)
    return total


async def test_concurrent_runs_share_commits_and_all_complete(tmp_path: Path) -> None:
    """40 runs at once under synchronous=full: every step recorded, in far fewer commits."""
    url = f"sqlite:///{tmp_path / 'grouped.db'}?synchronous=full"
    commits: list[str] = []
    async with Engine(url, workflows=[ten]) as engine:
        store: Any = engine.store
        store._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
        ids = [await engine.start(ten, None) for _ in range(40)]
        commits.clear()
        await engine.run_until_idle()
        runs = [await engine.get_run(run_id) for run_id in ids]
        checkpoints = [len(await engine.checkpoints(run_id)) for run_id in ids]
    assert {("completed", 10)} == {(r.status, r.output) for r in runs}
    assert [10] * 40 == checkpoints
    # 400 step writes and 40 finishes, without group commit 440 commits or more.
    assert len(commits) < 200


async def test_a_stale_write_in_a_group_fails_alone(tmp_path: Path) -> None:
    """In one group, a write whose lease is gone is refused while the others commit."""
    store = SqliteStore(f"sqlite:///{tmp_path / 'alone.db'}?synchronous=full")
    await store.open()
    try:
        for run_id in ("a", "b"):
            await store.create_run(NewRun(run_id, "ten", "1", "null", 0), [NewEvent("x", 0)])
        claimed = await store.claim_runs(
            workflows=[("ten", "1")], now=0, lease_until=10**9, owner="me", limit=2
        )
        tokens = {c.run.run_id: c.token for c in claimed}
        results = await asyncio.gather(
            store.record_local_step(
                "a", tokens["a"], seq=1, name="s", output="1", started=0, now=1
            ),
            store.record_local_step(
                "b", "not-the-token", seq=1, name="s", output="1", started=0, now=1
            ),
            store.record_local_step(
                "b", tokens["b"], seq=2, name="s", output="2", started=0, now=1
            ),
            return_exceptions=True,
        )
        assert [None, StaleTurnError, None] == [r if r is None else type(r) for r in results]
        assert [1] == [cp.seq for cp in await store.checkpoints("a")]
        assert [2] == [cp.seq for cp in await store.checkpoints("b")]
    finally:
        await store.close()
