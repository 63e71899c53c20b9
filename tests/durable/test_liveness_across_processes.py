"""
The liveness path (``timeout_ms``) with real processes: the dispatcher dies mid-wait, a worker
dies mid-step, a heartbeating worker outlives its window and hands its progress on.

The scenarios run at once (``run_concurrently``); each test checks one of them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.conftest import STORES
from tests.durable.crash_support.app import guarded
from tests.durable.crash_support.harness import (
    FINISHED,
    Nodes,
    outcome,
    run_concurrently,
    scenario_store,
    starts,
    trail_problems,
    until,
)

#: The dispatcher's run lease: how long after its death another engine may take the run over.
DISPATCHER_LEASE_MS = 300
#: Everything else holds its leases and claims this long: nothing of it expires in a test.
LONG_MS = 30_000
#: The reconcile wake of the scenario in which no result ever comes.
RECONCILE_MS = 800
#: The liveness window of the heartbeating scenario, and how far past it the worker beats.
TIMEOUT_MS = 1200
WELL_PAST_MS = 3000
RUN = "order-7"
Facts = dict[str, Any]


def _node(url: str, role: str, lease_ms: int, reconcile_ms: int = LONG_MS) -> list[str]:
    # Any engine may be the one that recovers a dead dispatcher's run (a worker too), so all the
    # engines of a scenario get the same reconcile_ms.
    return [
        *("--url", url, "--role", role, "--lease-ms", str(lease_ms), "--poll-ms", "20"),
        *("--reconcile-ms", str(reconcile_ms)),
    ]


def _hold(nodes: Nodes) -> dict[str, str]:
    """The environment of a worker whose ``crash:wait`` attempts wait for ``release``."""
    folder = nodes.folder / "hold"
    folder.mkdir(exist_ok=True)
    return {"CRASH_WAIT": str(folder)}


def _release(nodes: Nodes) -> None:
    (nodes.folder / "hold" / "release").write_text("go")


def _started(nodes: Nodes, name: str) -> Any:
    async def check() -> bool:
        return bool(starts(nodes.logs, name))

    return check


def _finished(engine: Engine) -> Any:
    async def check() -> bool:
        return (await engine.get_run(RUN)).status in FINISHED

    return check


async def _names(engine: Engine) -> Counter[str]:
    return Counter(e.name for e in await engine.events(RUN))


async def _seq_events(engine: Engine) -> list[tuple[str, Any]]:
    """(name, attempt) of the step's events, in commit order."""
    return [(e.name, e.data.get("attempt")) for e in await engine.events(RUN) if e.seq == 1]


# -- the scenarios --------------------------------------------------------------------------------


async def late_result(nodes: Nodes) -> Facts:
    """The dispatcher is SIGKILLed mid-wait; the run is parked; then the worker reports."""
    url = nodes.url
    data = {"step": "crash:wait", "order": 7, "policy": {"timeout_ms": 60_000}}
    async with Engine(url, workflows=[guarded]) as engine:
        await engine.start(guarded, data, run_id=RUN)
        dispatcher = nodes.spawn("dispatcher", *_node(url, "orchestrator", DISPATCHER_LEASE_MS))
        worker = nodes.spawn("worker", *_node(url, "worker", LONG_MS), env=_hold(nodes))
        await until(nodes, "the worker to start the step", _started(nodes, "crash:wait"))
        dispatcher.kill()  # it was awaiting the step in memory, holding the run's lease
        nodes.spawn("survivor", *_node(url, "orchestrator", LONG_MS))

        async def parked() -> bool:
            return (await _names(engine))["run.reconciling"] > 0

        await until(nodes, "the run to be parked", parked)
        facts: Facts = {
            "parked": await engine.get_run(RUN),
            "reconciling": [e for e in await engine.events(RUN) if e.name == "run.reconciling"],
            "waiting": await engine.checkpoints(RUN),
        }
        _release(nodes)  # the worker publishes its result now
        await until(nodes, "the run to finish", _finished(engine))
        return {
            **facts,
            "run": await engine.get_run(RUN),
            "problems": await trail_problems(engine, {RUN: f"done 7 by {worker.pid}"}),
            "names": await _names(engine),
            "starts": starts(nodes.logs, "crash:wait"),
            "worker": worker.pid,
        }


async def no_result(nodes: Nodes) -> Facts:
    """Dispatcher and worker both SIGKILLed; the step is dispatched again at the reconcile wake."""
    url = nodes.url
    data = {"step": "crash:wait", "order": 7, "policy": {"timeout_ms": 60_000}}
    async with Engine(url, workflows=[guarded]) as engine:
        await engine.start(guarded, data, run_id=RUN)
        dispatcher = nodes.spawn(
            "dispatcher", *_node(url, "orchestrator", DISPATCHER_LEASE_MS, RECONCILE_MS)
        )
        # Its claim lasts 30 s: no worker-lost failure ends the attempt first.
        lost = nodes.spawn("lost", *_node(url, "worker", LONG_MS, RECONCILE_MS), env=_hold(nodes))
        await until(nodes, "the worker to start the step", _started(nodes, "crash:wait"))
        lost.kill()
        dispatcher.kill()
        nodes.spawn("survivor", *_node(url, "orchestrator", LONG_MS, RECONCILE_MS))
        worker = nodes.spawn("worker", *_node(url, "worker", LONG_MS, RECONCILE_MS))
        await until(nodes, "the run to finish", _finished(engine))
        events = await engine.events(RUN)
        return {
            "run": await engine.get_run(RUN),
            "reconciling": [e for e in events if e.name == "run.reconciling"],
            "dispatched": [e for e in events if e.name == "step.dispatched"],
            "problems": await trail_problems(engine, {RUN: f"done 7 by {worker.pid}"}),
            "names": await _names(engine),
            "starts": starts(nodes.logs, "crash:wait"),
            "pids": (lost.pid, worker.pid),
        }


async def heartbeats(nodes: Nodes) -> Facts:
    """A worker beats long past timeout_ms, is SIGKILLed, and a live worker takes over."""
    url = nodes.url
    policy = {
        "timeout_ms": TIMEOUT_MS,
        "pickup_timeout_ms": 60_000,
        "retries": 3,
        "backoff_ms": 600_000,  # never waited: re-dispatches on this path are back to back
    }
    data = {"step": "crash:beats", "every_ms": 20, "policy": policy}
    async with Engine(url, workflows=[guarded]) as engine:
        await engine.start(guarded, data, run_id=RUN)
        nodes.spawn("dispatcher", *_node(url, "orchestrator", LONG_MS))
        beating = nodes.spawn("beating", *_node(url, "worker", LONG_MS))
        await until(nodes, "the worker to start the step", _started(nodes, "crash:beats"))
        # Attempt 1 is claimed: a second worker can only get a later attempt.
        successor = nodes.spawn("successor", *_node(url, "worker", LONG_MS))

        async def well_past() -> bool:
            (cp,) = await engine.checkpoints(RUN)
            return cp.progress is not None and cp.progress["ms"] >= WELL_PAST_MS

        await until(nodes, "progress well past timeout_ms", well_past)
        facts: Facts = {
            "alive": await engine.checkpoints(RUN),
            "alive_events": await _seq_events(engine),
        }
        beating.kill()
        facts["dead"] = await engine.checkpoints(RUN)  # holds the last progress it persisted
        await until(nodes, "the run to finish", _finished(engine))
        return {
            **facts,
            "run": await engine.get_run(RUN),
            "checkpoints": await engine.checkpoints(RUN),
            "events": await _seq_events(engine),
            "failed": [e for e in await engine.events(RUN) if e.name == "step.failed"],
            "starts": starts(nodes.logs, "crash:beats"),
            "pids": (beating.pid, successor.pid),
        }


@pytest.fixture(scope="module", params=STORES)
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Facts | BaseException]:
    """Every scenario of this module, run at once."""
    scenarios = {"late_result": late_result, "no_result": no_result, "heartbeats": heartbeats}
    return run_concurrently(tmp_path_factory, scenarios, scenario_store(request))


# -- the checks -----------------------------------------------------------------------------------


def test_a_killed_dispatcher_parks_the_run_and_the_workers_result_resumes_it(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """SIGKILL of the process awaiting a timeout_ms step: parked uncounted; a late result wins."""
    facts = outcome(outcomes, "late_result")
    parked, run, names = facts["parked"], facts["run"], facts["names"]
    (reconciling,) = facts["reconciling"]
    (waiting,) = facts["waiting"]
    assert ("suspended", 0) == (parked.status, parked.recovery_attempts)
    assert reconciling.at + LONG_MS == parked.wake_at == reconciling.data["wake_at"]
    assert ("running", 1) == (waiting.status, waiting.attempts)
    assert ([], 0) == (facts["problems"], run.recovery_attempts)
    assert (1, 0, 1, 0) == (
        names["run.reconciling"],
        names["run.recovered"],
        names["step.dispatched"],
        names["step.failed"],
    )
    assert [(1, facts["worker"])] == facts["starts"]


def test_with_no_result_by_the_reconcile_wake_the_step_is_dispatched_again(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """Dispatcher and worker both SIGKILLed: after the reconcile wake, a new attempt finishes."""
    facts = outcome(outcomes, "no_result")
    run, names, dispatched = facts["run"], facts["names"], facts["dispatched"]
    (reconciling,) = facts["reconciling"]
    lost, worker = facts["pids"]
    assert ([], 0) == (facts["problems"], run.recovery_attempts)
    assert reconciling.at + RECONCILE_MS == reconciling.data["wake_at"]
    assert [1, 2] == [e.data["attempt"] for e in dispatched]
    assert dispatched[1].at >= reconciling.data["wake_at"]
    assert (1, 0, 0) == (names["run.reconciling"], names["run.recovered"], names["step.failed"])
    assert [(1, lost), (2, worker)] == facts["starts"]


def test_a_heartbeating_worker_outlives_its_window_and_its_successor_reads_its_progress(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """
    Beats keep a step alive long past timeout_ms; SIGKILLed, it times out (running) and is
    re-dispatched at once to a live worker, which reads the persisted progress.
    """
    facts = outcome(outcomes, "heartbeats")
    (alive,), (dead,), (checkpoint,) = facts["alive"], facts["dead"], facts["checkpoints"]
    (failed,) = facts["failed"]
    beating, successor = facts["pids"]
    run = facts["run"]
    assert ("running", 1) == (alive.status, alive.attempts)
    assert [("step.dispatched", 1), ("step.started", 1)] == facts["alive_events"]
    assert dead.progress is not None
    assert dead.progress["ms"] >= WELL_PAST_MS
    assert ("completed", {"resumed": dead.progress, "by": successor}) == (run.status, run.output)
    # Silence after the kill: a running timeout, and attempt 2 dispatched straight after it.
    assert [
        ("step.dispatched", 1),
        ("step.started", 1),
        ("step.failed", 1),
        ("step.dispatched", 2),
        ("step.started", 2),
        ("step.completed", 2),
    ] == facts["events"]
    assert {"timeout_ms": TIMEOUT_MS, "phase": "running"} == failed.data["error"]["details"]
    assert (2, ["remote_step_timeout"], None) == (
        checkpoint.attempts,
        [e.code for e in checkpoint.errors],
        checkpoint.wake_at,
    )
    assert [(1, beating), (2, successor)] == facts["starts"]
