"""A process whose clock jumped ahead takes over a live run: the run still completes once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from effects.durable import Engine
from tests.durable.crash_support.app import hold
from tests.durable.crash_support.harness import Nodes, trail_problems, wait_until_async

pytestmark = pytest.mark.not_on_memory("engine processes share the store")

LEASE_MS = 30_000


@pytest.mark.anyio
async def test_a_live_turn_overtaken_by_a_jumped_clock_writes_nothing(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """A clock 2 min ahead recovers a live 30 s lease; the overtaken turn's commit is refused."""
    url = durable_store_url
    held = tmp_path / "held"
    held.mkdir()
    async with Engine(url, workflows=[hold]) as engine:
        await engine.start(hold, {"i": 5}, run_id="held-5")
        holder = nodes.spawn(
            "holder",
            *("--url", url, "--role", "orchestrator", "--lease-ms", str(LEASE_MS)),
            # One turn at a time: while its turn hangs, the holder claims nothing else.
            *("--poll-ms", "20", "--concurrency", "1", "--log-level", "INFO"),
            env={"CRASH_HOLD": str(held)},
        )

        async def holding() -> bool:
            nodes.check_alive()
            return (held / "held-held-5").exists()

        await wait_until_async(holding, timeout=60, what="the holder to take the run")
        # Its lease runs 30 s; to a clock 120 s ahead it has long expired.
        jumper = nodes.spawn(
            "jumper",
            *("--url", url, "--role", "orchestrator", "--mode", "idle"),
            *("--lease-ms", str(LEASE_MS), "--clock-offset-s", "120"),
        )
        assert 0 == await asyncio.to_thread(jumper.process.wait, 60), jumper.tail()
        jumper.stopped = True
        assert "completed" == (await engine.get_run("held-5")).status
        # The overtaken turn now finishes its step and tries to commit it.
        (held / "release").write_text("go")

        async def refused() -> bool:
            nodes.check_alive()
            return "run held-5: turn ended" in holder.output.read_text()

        # (The engine logs the end of a turn whose write was refused.)
        await wait_until_async(refused, timeout=60, what="the holder's commit to be refused")
        assert 0 == holder.terminate(), holder.tail()
        run = await engine.get_run("held-5")
        problems = await trail_problems(engine, {"held-5": 105})
        recovered = [e.name for e in await engine.events("held-5") if e.name == "run.recovered"]
    assert (1, ["run.recovered"], []) == (run.recovery_attempts, recovered, problems)
