"""
Fans (``ctx.all``) over real worker processes: one worker SIGKILLed mid-fan, every member still
completed exactly once and the outputs in input order; a member that spends its retries raises
only after the others have settled.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.conftest import STORES
from tests.durable.crash_support.app import fan
from tests.durable.crash_support.harness import (
    FINISHED,
    Nodes,
    execution_problems,
    outcome,
    read_execs,
    run_concurrently,
    scenario_store,
    spawn_ready,
    trail_problems,
    until,
)

MEMBERS = 20
#: The victim's claims: after its death, its members are worker-lost failures this soon.
VICTIM_LEASE_MS = 400
VICTIM_CONCURRENCY = 3
#: Everyone else's leases and claims: none expires in the test.
LONG_MS = 30_000
Facts = dict[str, Any]


def _node(url: str, role: str, lease_ms: int = LONG_MS, *extra: str) -> list[str]:
    return ["--url", url, "--role", role, "--lease-ms", str(lease_ms), "--poll-ms", "20", *extra]


async def fan_with_a_kill(nodes: Nodes) -> Facts:
    """
    Run A fans 20 members out; the victim worker takes three and holds them until it is
    SIGKILLed; then two healthy workers serve A and run B, a fan of five whose third member
    always fails and whose fifth waits until the third has settled.
    """
    url = nodes.url
    hold = nodes.folder / "hold"
    hold.mkdir()
    slow = nodes.folder / "slow-release"
    inputs_a = [{"i": i, "seed": 7, "work_ms": 100} for i in range(MEMBERS)]
    inputs_b: list[dict[str, Any]] = [{"i": i, "seed": 8, "work_ms": 20} for i in range(5)]
    inputs_b[2]["fail"] = True
    inputs_b[4]["until"] = str(slow)
    async with Engine(url, workflows=[fan]) as engine:
        await engine.start(fan, {"step": "crash:member", "inputs": inputs_a}, run_id="fan-a")
        go = nodes.folder / "go"
        healthy = await asyncio.gather(
            *(
                spawn_ready(nodes, f"healthy-{n}", *_node(url, "worker"), "--go", str(go))
                for n in (1, 2)
            )
        )
        nodes.spawn("orchestrator", *_node(url, "orchestrator"))
        victim = nodes.spawn(
            "victim",
            *_node(url, "worker", VICTIM_LEASE_MS, "--concurrency", str(VICTIM_CONCURRENCY)),
            env={"CRASH_WAIT": str(hold)},
        )

        async def victim_full() -> bool:
            mine = [r for r in read_execs(nodes.logs) if r["pid"] == victim.pid]
            return len(mine) >= VICTIM_CONCURRENCY

        await until(nodes, "the victim to take its members", victim_full)
        await engine.start(fan, {"step": "crash:member", "inputs": inputs_b}, run_id="fan-b")
        victim.kill()  # mid-fan: three members in its hands, seventeen not yet taken
        go.write_text("go")

        async def third_settled() -> bool:
            checkpoints = await engine.checkpoints("fan-b")
            return len(checkpoints) == 5 and checkpoints[2].final

        await until(nodes, "run B's failing member to settle", third_settled)
        slow.write_text("go")

        async def both_finished() -> bool:
            runs = [await engine.get_run(r) for r in ("fan-a", "fan-b")]
            return all(run.status in FINISHED for run in runs)

        await until(nodes, "both fans to finish", both_finished)
        expected_a = {"outputs": [i * i for i in range(MEMBERS)]}
        execs = read_execs(nodes.logs)
        return {
            "a": await engine.get_run("fan-a"),
            "b": await engine.get_run("fan-b"),
            "a_problems": await trail_problems(engine, {"fan-a": expected_a}),
            "a_events": await engine.events("fan-a"),
            "b_events": await engine.events("fan-b"),
            "b_checkpoints": await engine.checkpoints("fan-b"),
            "victim_starts": [
                (r["step_id"], r["attempt"])
                for r in execs
                if r["pid"] == victim.pid and r["ev"] == "start"
            ],
            "execution_problems": execution_problems(execs),
            "pids": {victim.pid, *(node.pid for node in healthy)},
            "ran": {r["pid"] for r in execs if r["ev"] == "start"},
        }


@pytest.fixture(scope="module", params=STORES)
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Facts | BaseException]:
    """The scenario of this module."""
    return run_concurrently(
        tmp_path_factory, {"fan_with_a_kill": fan_with_a_kill}, scenario_store(request)
    )


def test_a_worker_killed_mid_fan_loses_no_member_and_none_completes_twice(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """Each of 20 members completed once (the trail says so); outputs in input order."""
    facts = outcome(outcomes, "fan_with_a_kill")
    run = facts["a"]
    lost = {
        (f"fan-a:{e.seq}", e.data["attempt"])
        for e in facts["a_events"]
        if e.name == "step.failed" and e.data["error"]["code"] == "worker_lost"
    }
    completed = Counter(e.seq for e in facts["a_events"] if e.name == "step.completed")
    assert ("completed", {"outputs": [i * i for i in range(MEMBERS)]}) == (run.status, run.output)
    assert ([], []) == (facts["a_problems"], facts["execution_problems"])
    assert dict.fromkeys(range(1, MEMBERS + 1), 1) == dict(completed)
    # The victim died holding three members: each became a worker-lost attempt, run again.
    assert VICTIM_CONCURRENCY == len(facts["victim_starts"])
    assert set(facts["victim_starts"]) <= lost
    assert facts["ran"] <= facts["pids"]


def test_a_member_that_spends_its_retries_raises_after_the_others_settle(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """Member 3 of run B fails for good first; the workflow hears of it once all have settled."""
    facts = outcome(outcomes, "fan_with_a_kill")
    run, checkpoints = facts["b"], facts["b_checkpoints"]
    assert ("completed", {"failed": "fan-b:3", "attempts": 4, "after": 1}) == (
        run.status,
        run.output,
    )
    assert [
        ("crash:member", "completed"),
        ("crash:member", "completed"),
        ("crash:member", "failed"),
        ("crash:member", "completed"),
        ("crash:member", "completed"),
        ("crash:add", "completed"),
    ] == [(cp.name, cp.status) for cp in checkpoints]
    assert (4, True) == (checkpoints[2].attempts, checkpoints[2].final)
    # In commit order: member 3 gave up while member 5 still ran; the step after the fan was
    # dispatched only once every other member had completed.
    order = [(e.name, e.seq) for e in facts["b_events"]]
    gave_up = order.index(("step.gave_up", 3))
    last_completed = max(order.index(("step.completed", seq)) for seq in (1, 2, 4, 5))
    after_fan = order.index(("step.dispatched", 6))
    assert gave_up < order.index(("step.completed", 5)) < after_fan
    assert last_completed < after_fan
