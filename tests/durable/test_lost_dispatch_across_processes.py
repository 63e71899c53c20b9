"""
Lost dispatch (``remote_redispatch_ms``) with real processes: a worker SIGKILLed while holding a
long claim is re-driven when the step's lease lapses, the bound ends in the workflow's own except
branch, a worker beating every few ms renews the lease with few writes, and without the option a
slow worker is never double-run.

The scenarios run at once (``run_concurrently``); each test checks one of them.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.conftest import STORES
from tests.durable.crash_support.app import fan, guarded
from tests.durable.crash_support.harness import (
    FINISHED,
    Node,
    Nodes,
    outcome,
    read_execs,
    run_concurrently,
    scenario_store,
    spawn_ready,
    starts,
    trail_problems,
    until,
)

#: The step's lease (remote_redispatch_ms) where a worker dies.
REDISPATCH_MS = 800
#: The lease the heartbeating worker renews, and how long it beats.
BEAT_LEASE_MS = 1000
BEAT_FOR_MS = 2500
#: The lease of the slow-worker scenario that has one, and how long the one without is watched.
SLOW_LEASE_MS = 600
WATCH_S = 3 * SLOW_LEASE_MS / 1000
#: Claims and run leases last this long: none expires in a test, so no worker-lost failure or
#: run recovery comes before a lapsed step lease.
LONG_MS = 30_000
RUN = "order-7"
Facts = dict[str, Any]


def _node(url: str, role: str, *extra: str) -> list[str]:
    return ["--url", url, "--role", role, "--lease-ms", str(LONG_MS), "--poll-ms", "20", *extra]


def _leased(redispatch_ms: int | None, redispatch_max: int = 10) -> list[str]:
    if redispatch_ms is None:
        return []
    return ["--redispatch-ms", str(redispatch_ms), "--redispatch-max", str(redispatch_max)]


def _hold(nodes: Nodes) -> dict[str, str]:
    """The environment of a worker whose ``crash:wait`` attempts wait for ``release``."""
    folder = nodes.folder / "hold"
    folder.mkdir(exist_ok=True)
    return {"CRASH_WAIT": str(folder)}


def _release(nodes: Nodes, name: str = "release") -> None:
    (nodes.folder / "hold" / name).write_text("go")


def _started(nodes: Nodes, name: str, count: int = 1) -> Any:
    async def check() -> bool:
        return len(starts(nodes.logs, name)) >= count

    return check


def _finished(engine: Engine) -> Any:
    async def check() -> bool:
        return (await engine.get_run(RUN)).status in FINISHED

    return check


async def _named(engine: Engine, name: str) -> list[Any]:
    return [e for e in await engine.events(RUN) if e.name == name]


# -- the scenarios --------------------------------------------------------------------------------


async def _waiting(nodes: Nodes, name: str, *args: str, **env: str) -> tuple[Node, Path]:
    """A node with its store open, waiting (before it works) for the file it returns."""
    go = nodes.folder / f"go-{name}"
    node = await spawn_ready(nodes, name, *args, "--go", str(go), env=env or None)
    return node, go


def _dispatched(engine: Engine, attempt: int) -> Any:
    async def check() -> bool:
        return any(e.data["attempt"] == attempt for e in await _named(engine, "step.dispatched"))

    return check


async def relapsed(nodes: Nodes) -> Facts:
    """
    The orchestrator dispatches and is SIGKILLed; a worker claims the step (a 30 s claim) and is
    SIGKILLed mid-step; a fresh orchestrator finds the lease lapsed and re-drives the step, and
    another worker finishes it. No orchestrator lives while the lost worker does, so nothing
    can be re-driven before its death.
    """
    url = nodes.url
    orchestrate = _node(url, "orchestrator", *_leased(REDISPATCH_MS))
    async with Engine(url, workflows=[guarded]) as engine:
        await engine.start(guarded, {"step": "crash:wait", "order": 7}, run_id=RUN)
        (lost, go_lost), (worker, go_worker), (_, go_orchestrator) = await asyncio.gather(
            _waiting(nodes, "lost", *_node(url, "worker"), **_hold(nodes)),
            _waiting(nodes, "worker", *_node(url, "worker")),
            _waiting(nodes, "orchestrator-2", *orchestrate),
        )
        first = nodes.spawn("orchestrator", *orchestrate)
        await until(nodes, "attempt 1 to be dispatched", _dispatched(engine, 1))
        first.kill()
        go_lost.write_text("go")
        await until(nodes, "the worker to start the step", _started(nodes, "crash:wait"))
        lost.kill()
        go_worker.write_text("go")
        go_orchestrator.write_text("go")
        await until(nodes, "the run to finish", _finished(engine))
        return {
            "run": await engine.get_run(RUN),
            "problems": await trail_problems(engine, {RUN: f"done 7 by {worker.pid}"}),
            "redispatched": await _named(engine, "step.redispatched"),
            "started": [
                (e.data["attempt"], e.data.get("redispatched"))
                for e in await _named(engine, "step.started")
            ],
            "failed": await _named(engine, "step.failed"),
            "starts": starts(nodes.logs, "crash:wait"),
            "pids": (lost.pid, worker.pid),
        }


async def bound(nodes: Nodes) -> Facts:
    """
    Each attempt's worker is SIGKILLed mid-step, and each orchestrator once it has dispatched
    (so no lease lapses before a kill); after one re-drive the step is lost for good, and the
    workflow's except branch compensates.
    """
    url = nodes.url
    orchestrate = _node(url, "orchestrator", *_leased(REDISPATCH_MS, 1))
    async with Engine(url, workflows=[guarded]) as engine:
        await engine.start(guarded, {"step": "crash:wait", "order": 7}, run_id=RUN)
        waiting = await asyncio.gather(
            _waiting(nodes, "first", *_node(url, "worker"), **_hold(nodes)),
            _waiting(nodes, "second", *_node(url, "worker"), **_hold(nodes)),
            _waiting(nodes, "compensator", *_node(url, "worker")),
            _waiting(nodes, "orchestrator-2", *orchestrate),
            _waiting(nodes, "orchestrator-3", *orchestrate),
        )
        (first, go_1), (second, go_2), (compensator, go_3) = waiting[:3]
        (orchestrator_2, go_o2), (_, go_o3) = waiting[3:]
        orchestrator = nodes.spawn("orchestrator", *orchestrate)
        await until(nodes, "attempt 1 to be dispatched", _dispatched(engine, 1))
        orchestrator.kill()
        go_1.write_text("go")
        await until(nodes, "attempt 1 to start", _started(nodes, "crash:wait"))
        first.kill()
        go_o2.write_text("go")
        await until(nodes, "attempt 2 to be dispatched", _dispatched(engine, 2))
        orchestrator_2.kill()
        go_2.write_text("go")
        await until(nodes, "attempt 2 to start", _started(nodes, "crash:wait", 2))
        second.kill()
        go_3.write_text("go")
        go_o3.write_text("go")
        await until(nodes, "the run to finish", _finished(engine))
        return {
            "run": await engine.get_run(RUN),
            "checkpoints": await engine.checkpoints(RUN),
            "redispatched": await _named(engine, "step.redispatched"),
            "lost": await _named(engine, "step.lost"),
            "starts": starts(nodes.logs, "crash:wait"),
            "compensated_by": [pid for _, pid in starts(nodes.logs, "crash:add")],
            "pids": (first.pid, second.pid, compensator.pid),
        }


async def beats(nodes: Nodes) -> Facts:
    """A worker beating every 2 ms for 2.5 s renews a 1 s lease; its store logs every write."""
    url = nodes.url
    writes = nodes.folder / "heartbeat-writes"
    data = {"step": "crash:beats", "every_ms": 2, "for_ms": BEAT_FOR_MS}
    async with Engine(url, workflows=[guarded]) as engine:
        await engine.start(guarded, data, run_id=RUN)
        nodes.spawn("orchestrator", *_node(url, "orchestrator", *_leased(BEAT_LEASE_MS)))
        # The task carries the lease: the worker needs no option to renew it.
        worker = nodes.spawn("worker", *_node(url, "worker", "--count-heartbeats", str(writes)))
        await until(nodes, "the run to finish", _finished(engine))
        return {
            "run": await engine.get_run(RUN),
            "checkpoints": await engine.checkpoints(RUN),
            "redispatched": await _named(engine, "step.redispatched"),
            "writes": [int(line) for line in writes.read_text().split()] if writes.exists() else [],
            "worker": worker.pid,
        }


def _member_1_starts(nodes: Nodes) -> list[int]:
    """The attempts of the fan's first member that a handler started, in order."""
    return sorted(
        r["attempt"]
        for r in read_execs(nodes.logs)
        if r["ev"] == "start" and r["step_id"] == f"{RUN}:1"
    )


async def _slow(nodes: Nodes, redispatch_ms: int | None) -> Facts:
    """
    A fan of three on one worker that holds member 1 until released: members 2 and 3 complete
    (once a fresh orchestrator replaced the first), waking the run while member 1 is pending.
    """
    url = nodes.url
    hold = _hold(nodes)
    quick = str(nodes.folder / "hold" / "quick")
    inputs = [
        {"order": 0},
        {"order": 1, "hold": False, "until": quick},
        {"order": 2, "hold": False, "until": quick},
    ]
    orchestrator = [*_node(url, "orchestrator"), *_leased(redispatch_ms)]
    async with Engine(url, workflows=[fan]) as engine:
        await engine.start(fan, {"step": "crash:wait", "inputs": inputs}, run_id=RUN)
        # The worker is up before anything is dispatched: a claim slower than the lease would
        # let the first orchestrator re-drive a member before its first attempt ever started.
        worker = await spawn_ready(nodes, "worker", *_node(url, "worker"), env=hold)
        first = nodes.spawn("orchestrator", *orchestrator)
        await until(nodes, "the worker to start the fan", _started(nodes, "crash:wait", 3))
        first.kill()
        await spawn_ready(nodes, "orchestrator", *orchestrator)
        _release(nodes, "quick")

        async def others_done() -> bool:
            done = [cp.status for cp in await engine.checkpoints(RUN)]
            run = await engine.get_run(RUN)
            return ["running", "completed", "completed"] == done and run.status == "suspended"

        await until(nodes, "members 2 and 3 to complete", others_done)
        if redispatch_ms is None:
            await asyncio.sleep(WATCH_S)  # several leases' worth of waiting: nothing may happen
        else:

            async def double_run() -> bool:
                return len(_member_1_starts(nodes)) >= 2

            await until(nodes, "a re-drive of member 1 to run beside it", double_run)
        watched = await engine.checkpoints(RUN)
        _release(nodes)
        await until(nodes, "the run to finish", _finished(engine))
        pid = worker.pid
        output = {"outputs": [f"done {n} by {pid}" for n in range(3)]}
        return {
            "watched": watched,
            "run": await engine.get_run(RUN),
            "problems": await trail_problems(engine, {RUN: output}),
            "redispatched": await _named(engine, "step.redispatched"),
            "member_1_starts": _member_1_starts(nodes),
        }


async def slow_unleased(nodes: Nodes) -> Facts:
    """``_slow`` without remote_redispatch_ms."""
    return await _slow(nodes, None)


async def slow_leased(nodes: Nodes) -> Facts:
    """``_slow`` with a lease and a worker that never beats (the control)."""
    return await _slow(nodes, SLOW_LEASE_MS)


@pytest.fixture(scope="module", params=STORES)
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Facts | BaseException]:
    """Every scenario of this module, run at once."""
    scenarios = {
        "relapsed": relapsed,
        "bound": bound,
        "beats": beats,
        "slow_unleased": slow_unleased,
        "slow_leased": slow_leased,
    }
    return run_concurrently(tmp_path_factory, scenarios, scenario_store(request))


# -- the checks -----------------------------------------------------------------------------------


def test_a_killed_workers_step_is_redispatched_when_its_lease_lapses(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """SIGKILL with a long claim: no worker-lost failure; the lease lapses; attempt 2 elsewhere."""
    facts = outcome(outcomes, "relapsed")
    lost, worker = facts["pids"]
    (redispatched,) = facts["redispatched"]
    assert ([], "completed") == (facts["problems"], facts["run"].status)
    assert ("warning", 2, "lease lapsed") == (
        redispatched.level,
        redispatched.data["attempt"],
        redispatched.data["reason"],
    )
    assert [(1, None), (2, True)] == facts["started"]
    assert [] == facts["failed"]
    assert [(1, lost), (2, worker)] == facts["starts"]


def test_the_redispatch_bound_ends_in_the_workflows_own_except_branch(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """remote_redispatch_max spent: RemoteStepError remote_step_lost, caught and compensated."""
    facts = outcome(outcomes, "bound")
    first, second, compensator = facts["pids"]
    step, compensation = facts["checkpoints"]
    (lost,) = facts["lost"]
    run = facts["run"]
    assert ("completed", {"code": "remote_step_lost", "attempts": 1, "compensated": 1}) == (
        run.status,
        run.output,
    )
    assert (1, "error", {"attempt": 2, "redispatches": 1}) == (
        len(facts["redispatched"]),
        lost.level,
        lost.data,
    )
    assert ("failed", True, 2, ["remote_step_lost"]) == (
        step.status,
        step.final,
        step.attempts,
        [e.code for e in step.errors],
    )
    assert ("crash:add", "completed") == (compensation.name, compensation.status)
    assert [(1, first), (2, second)] == facts["starts"]
    assert [compensator] == facts["compensated_by"]


def test_a_worker_beating_every_few_ms_writes_once_per_half_lease(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """Hundreds of beats, at most one heartbeat write per half-window, and the lease held."""
    facts = outcome(outcomes, "beats")
    run, writes = facts["run"], facts["writes"]
    (checkpoint,) = facts["checkpoints"]
    beat_count = run.output["beats"]
    half = BEAT_LEASE_MS // 2
    assert ("completed", facts["worker"], []) == (
        run.status,
        run.output["by"],
        facts["redispatched"],
    )
    assert beat_count >= 100, beat_count
    assert 1 <= len(writes) <= BEAT_FOR_MS // half + 1, writes
    assert all(b - a >= half for a, b in itertools.pairwise(writes)), writes
    # The last beats' progress, never written by a beat, came with the result.
    assert (1, beat_count) == (checkpoint.attempts, checkpoint.progress["beat"])


def test_without_redispatch_a_slow_worker_is_never_double_run(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """No lease: the runs re-driven by results and a fresh engine re-suspend member 1 untouched."""
    facts = outcome(outcomes, "slow_unleased")
    assert [] == facts["problems"]
    assert ("running", 1, None) == (
        facts["watched"][0].status,
        facts["watched"][0].attempts,
        facts["watched"][0].wake_at,
    )
    assert ([], [1]) == (facts["redispatched"], facts["member_1_starts"])


def test_with_a_lease_a_slow_worker_that_never_beats_is_double_run(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """The control: the same fan with a lease and no beats re-drives member 1 while it runs."""
    facts = outcome(outcomes, "slow_leased")
    assert [] == facts["problems"]
    assert facts["redispatched"]
    assert facts["watched"][0].attempts >= 2
    assert [1, 2] == facts["member_1_starts"][:2]
