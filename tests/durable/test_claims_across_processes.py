"""Several worker processes on one SQLite file: no task is ever handed to two of them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from effects.durable import Engine
from tests.durable.crash_support.app import one
from tests.durable.crash_support.harness import Nodes, read_execs, wait_until, wait_until_async

pytestmark = pytest.mark.not_on_memory("engine processes share the store")

TASKS = 300
WORKERS = 4


@pytest.mark.anyio
async def test_four_workers_claim_every_task_once(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """4 processes racing for 300 queued tasks run each exactly once, and every one of them."""
    url = durable_store_url
    run_ids = [f"task-{i}" for i in range(TASKS)]
    async with Engine(url, workflows=[one]) as engine:
        for i, run_id in enumerate(run_ids):
            await engine.start(one, {"i": i, "seed": 7, "work_ms": 4}, run_id=run_id)
        # Every run dispatches its step and suspends: 300 tasks queued, no worker yet.
        await engine.run_until_idle()
        assert [] == [
            r.run_id for r in await engine.list_runs(limit=1000) if r.status != "suspended"
        ]
        go = tmp_path / "go"
        ready = [tmp_path / f"ready-{n}" for n in range(WORKERS)]
        workers = [
            nodes.spawn(
                f"worker{n}",
                *("--url", url, "--role", "worker", "--poll-ms", "20", "--concurrency", "8"),
                *("--ready", str(ready[n]), "--go", str(go)),
            )
            for n in range(WORKERS)
        ]
        wait_until(lambda: all(p.exists() for p in ready), timeout=60, what="workers to open")
        go.write_text("go")

        async def all_recorded() -> bool:
            nodes.check_alive()
            # A recorded result makes its run pending again.
            return TASKS == len(await engine.list_runs(status="pending", limit=1000))

        await wait_until_async(all_recorded, timeout=90, what="every result to be recorded")
        assert [0] * WORKERS == [w.terminate() for w in workers], nodes.tails()
        await engine.run_until_idle()
        outputs = {r.run_id: r.output for r in await engine.list_runs(limit=1000)}
        lost = [
            (run_id, e.seq)
            for run_id in run_ids
            for e in await engine.events(run_id)
            if e.name == "step.failed"
        ]
    assert {f"task-{i}": i * i for i in range(TASKS)} == outputs
    execs = [r for r in read_execs(nodes.logs) if r["ev"] == "end"]
    ran = Counter(r["step_id"] for r in execs)
    twice = {step_id: n for step_id, n in ran.items() if n > 1}
    # A task may run twice only if its first claim expired; a 30 s lease never does here.
    assert ([], {}) == (lost, twice)
    assert {f"{run_id}:1" for run_id in run_ids} == set(ran)
    by_worker = Counter(r["pid"] for r in execs)
    print(f"tasks per worker process: {sorted(by_worker.values(), reverse=True)}")
    assert {w.pid for w in workers} >= set(by_worker)
