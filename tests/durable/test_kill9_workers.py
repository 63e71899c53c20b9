"""kill -9 of workers and of the orchestrator at random moments: every run still completes once."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.crash_support.app import pipeline, pipeline_output
from tests.durable.crash_support.harness import (
    Node,
    Nodes,
    execution_problems,
    read_execs,
    trail_problems,
    trail_stats,
    unfinished,
)

FIRST_RUNS = 8
RUNS_PER_KILL = 2
WORKERS = 3
KILLS = 16
LEASE_MS = 500


def _seed() -> int:
    given = os.environ.get("DURABLE_CRASH_SEED")
    return int(given) if given else random.SystemRandom().randrange(2**32)


@pytest.mark.anyio
async def test_runs_complete_once_through_kill9_of_workers_and_orchestrator(
    tmp_path: Path, nodes: Nodes
) -> None:
    """SIGKILLed and restarted workers and orchestrator: right outputs, each step completed once."""
    seed = _seed()
    print(f"seed {seed} (DURABLE_CRASH_SEED={seed} replays this kill schedule and these failures)")
    rng = random.Random(seed)
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    common = ["--url", url, "--lease-ms", str(LEASE_MS), "--poll-ms", "50"]
    expected: dict[str, Any] = {}

    def spawn(role: str) -> Node:
        if role == "orchestrator":
            return nodes.spawn(role, *common, "--role", role, "--seed", str(rng.randrange(2**31)))
        return nodes.spawn(role, *common, "--role", "worker", "--concurrency", "8")

    async with Engine(url, workflows=[pipeline]) as engine:

        async def start(count: int) -> None:
            for n in range(len(expected), len(expected) + count):
                data = {"n": n, "seed": seed, "work_ms": 200, "rate": 0.35}
                expected[await engine.start(pipeline, data, run_id=f"run-{n}")] = pipeline_output(n)

        await start(FIRST_RUNS)
        roles = {role: spawn(role) for role in ["orchestrator", *(f"w{i}" for i in range(WORKERS))]}
        orchestrator_kills = {2, rng.randrange(6, KILLS)}
        killed: Counter[str] = Counter()
        for index in range(KILLS):
            # New runs keep arriving, so every kill meets work in flight.
            await start(RUNS_PER_KILL)
            await asyncio.sleep(rng.uniform(0.05, 0.4))
            nodes.check_alive()
            victim = "orchestrator" if index in orchestrator_kills else f"w{rng.randrange(WORKERS)}"
            roles[victim].kill()
            killed[victim] += 1
            await asyncio.sleep(rng.choice((0.0, 0.05, 0.2)))
            roles[victim] = spawn(victim)
        deadline = time.monotonic() + 90
        while await unfinished(engine, expected) and time.monotonic() < deadline:
            nodes.check_alive()
            await asyncio.sleep(0.1)
        nodes.kill_all()
        problems = await trail_problems(engine, expected)
        stats = await trail_stats(engine, expected)
    execs = read_execs(nodes.logs)
    print(f"{len(expected)} runs; kills {dict(sorted(killed.items()))}; {stats}")
    assert [] == problems + execution_problems(execs), nodes.tails()
    assert 2 == killed["orchestrator"]
