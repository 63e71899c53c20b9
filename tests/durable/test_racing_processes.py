"""Two processes doing the same thing at the same moment: one start, one recovery, one run."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from effects.durable import Engine
from tests.durable.crash_support.app import hold, one, record
from tests.durable.crash_support.harness import Node, Nodes, trail_problems, wait_until

pytestmark = pytest.mark.not_on_memory("engine processes share the store")

RUNS = 60
LEASE_MS = 300


def _barrier(nodes: Nodes, args: dict[str, list[str]], *, release_after: float = 0.0) -> list[Node]:
    """
    Spawn one node per name with its *args*, wait until each has its store open and the wall
    clock has passed *release_after* (epoch s), then release them all at once.
    """
    go = nodes.folder / "go"
    ready = {name: nodes.folder / f"ready-{name}" for name in args}
    spawned = [
        nodes.spawn(name, *argv, "--ready", str(ready[name]), "--go", str(go))
        for name, argv in args.items()
    ]
    wait_until(lambda: all(p.exists() for p in ready.values()), timeout=60, what="nodes to open")
    wait_until(lambda: time.time() > release_after, timeout=60, what="the release time")
    go.write_text("go")
    return spawned


@pytest.mark.anyio
async def test_processes_starting_the_same_run_ids_at_once_make_each_run_once(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """3 processes start the same 60 run ids at the same moment: 60 runs, each started once."""
    url = durable_store_url
    run_ids = [f"same-{i}" for i in range(RUNS)]
    names = [f"starter{n}" for n in range(3)]
    starts: dict[str, str] = {}
    for n, name in enumerate(names):
        order = run_ids[:]
        random.Random(n).shuffle(order)
        starts[name] = json.dumps(
            [
                ["crash:one", run_id, {"i": int(run_id[5:]), "seed": n, "work_ms": 0}]
                for run_id in order
            ]
        )
    starters = _barrier(
        nodes,
        {
            name: ["--url", url, "--role", "orchestrator", "--mode", "start", "--start", text]
            for name, text in starts.items()
        },
    )
    assert [0, 0, 0] == [s.process.wait(60) for s in starters], nodes.tails()
    # Each start returned the id it was given, whether it made the run or found it.
    for name, starter in zip(names, starters, strict=True):
        printed = json.loads(starter.output.read_text().splitlines()[-1])
        assert [entry[1] for entry in json.loads(starts[name])] == printed
    async with Engine(url, workflows=[one], steps=[record]) as engine:
        runs = await engine.list_runs(limit=1000)
        assert sorted(run_ids) == sorted(r.run_id for r in runs)
        # Whichever process won, the run has that one input: none was overwritten or mixed.
        assert all(
            run.input["i"] == int(run.run_id[5:]) and run.input["seed"] in (0, 1, 2) for run in runs
        )
        print(f"runs made per starter: {Counter(run.input['seed'] for run in runs)}")
        for run_id in run_ids:
            names_seen = Counter(e.name for e in await engine.events(run_id))
            assert 1 == names_seen["run.started"]
        await engine.run_until_idle()
        problems = await trail_problems(engine, {f"same-{i}": i * i for i in range(RUNS)})
    assert [] == problems


@pytest.mark.anyio
async def test_two_processes_recovering_the_same_expired_runs_recover_each_once(
    tmp_path: Path, nodes: Nodes, durable_store_url: str
) -> None:
    """Two processes recover 20 expired runs at the same moment: each recovered and counted once."""
    url = durable_store_url
    run_ids = [f"held-{i}" for i in range(20)]
    held = tmp_path / "held"
    held.mkdir()
    async with Engine(url, workflows=[hold]) as engine:
        for i, run_id in enumerate(run_ids):
            await engine.start(hold, {"i": i}, run_id=run_id)
        # A process takes every run and hangs in its local step, holding the leases; kill -9.
        holder = nodes.spawn(
            "holder",
            *("--url", url, "--role", "orchestrator", "--lease-ms", str(LEASE_MS)),
            env={"CRASH_HOLD": str(held)},
        )
        wait_until(
            lambda: len(list(held.iterdir())) == len(run_ids), timeout=60, what="runs to be held"
        )
        holder.kill()
        killed_at = time.time()
        assert {"running"} == {r.status for r in await engine.list_runs(limit=1000)}
        # Two recoverers, released at once when every lease has lapsed (the last renewal was
        # before the kill, so no lease outlives killed_at + LEASE_MS).
        args = ["--url", url, "--role", "orchestrator", "--mode", "idle", "--lease-ms", "30000"]
        recoverers = _barrier(
            nodes,
            {f"recoverer{n}": args for n in range(2)},
            release_after=killed_at + (LEASE_MS + 50) / 1000,
        )
        assert [0, 0] == [r.process.wait(60) for r in recoverers], nodes.tails()
        runs = {r.run_id: r for r in await engine.list_runs(limit=1000)}
        recovered = {
            run_id: sum(1 for e in await engine.events(run_id) if e.name == "run.recovered")
            for run_id in run_ids
        }
        problems = await trail_problems(engine, {f"held-{i}": i + 100 for i in range(20)})
    assert dict.fromkeys(run_ids, 1) == recovered
    assert dict.fromkeys(run_ids, 1) == {r: runs[r].recovery_attempts for r in run_ids}
    assert [] == problems
