"""
Sagas over real processes: an orchestrator SIGKILLed between steps rebuilds the registered undos
from history and they run once each, last first; orchestrators SIGKILLed mid-unwind never run a
completed undo again (an interrupted local undo runs again, as undos must allow). Side effects are
counted in the processes' append-only execution logs.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.conftest import STORES
from tests.durable.crash_support.app import saga
from tests.durable.crash_support.harness import (
    FINISHED,
    Nodes,
    outcome,
    read_execs,
    run_concurrently,
    scenario_store,
    spawn_ready,
    until,
)

#: The lease of the orchestrators that die mid-turn: their run is recovered this soon.
SHORT_LEASE_MS = 400
#: Everyone else's leases and claims: none expires in the test.
LONG_MS = 30_000
Facts = dict[str, Any]


def _node(url: str, role: str, lease_ms: int = LONG_MS, *extra: str) -> list[str]:
    return ["--url", url, "--role", role, "--lease-ms", str(lease_ms), "--poll-ms", "20", *extra]


def _effects(nodes: Nodes) -> list[dict[str, Any]]:
    """Every side effect the saga's steps and undos made, in the order they were made."""
    return sorted(
        (r for r in read_execs(nodes.logs) if r["ev"] == "effect"), key=lambda r: r["mono"]
    )


def _has(nodes: Nodes, what: str, **fields: Any) -> Any:
    async def check() -> bool:
        return any(
            r["what"] == what and all(r.get(k) == v for k, v in fields.items())
            for r in _effects(nodes)
        )

    return check


async def _facts(engine: Engine, nodes: Nodes, run_id: str) -> Facts:
    return {
        "run": await engine.get_run(run_id),
        "checkpoints": await engine.checkpoints(run_id),
        "events": await engine.events(run_id),
        "effects": _effects(nodes),
    }


async def killed_between_steps(nodes: Nodes) -> Facts:
    """
    Hold, then book four items; the orchestrator dies (kill -9) while item 2 is being booked.
    Another orchestrator takes the run up, books item 3, fails, and undoes everything.
    """
    url = nodes.url
    gate = nodes.folder / "gate"
    gate.mkdir()
    data = {"n": 1, "steps": 4, "gate": str(gate), "hold": ["book-2"]}
    await spawn_ready(nodes, "worker", *_node(url, "worker"))
    first = await spawn_ready(nodes, "orchestrator-1", *_node(url, "orchestrator"))
    async with Engine(url, workflows=[saga]) as engine:
        await engine.start(saga, data, run_id="saga-between")
        await until(nodes, "item 2 to be booked", _has(nodes, "book", i=2))
        first.kill()
        (gate / "release-book-2").write_text("go")
        await spawn_ready(nodes, "orchestrator-2", *_node(url, "orchestrator"))

        async def finished() -> bool:
            return (await engine.get_run("saga-between")).status in FINISHED

        await until(nodes, "the run to finish", finished)
        return await _facts(engine, nodes, "saga-between")


async def killed_mid_unwind(nodes: Nodes) -> Facts:
    """
    Hold, book three items, fail. The first orchestrator dies while the worker undoes item 1
    (item 2 undone already); the second dies inside the local undo of the hold; a third ends it.
    """
    url = nodes.url
    gate = nodes.folder / "gate"
    gate.mkdir()
    data = {"n": 2, "steps": 3, "gate": str(gate), "hold": ["unbook-1", "unhold"]}
    retries = ("--compensation-retries", "3")
    await spawn_ready(nodes, "worker", *_node(url, "worker", LONG_MS, *retries))
    first = await spawn_ready(
        nodes, "orchestrator-1", *_node(url, "orchestrator", LONG_MS, *retries)
    )
    async with Engine(url, workflows=[saga]) as engine:
        await engine.start(saga, data, run_id="saga-unwind")
        await until(nodes, "the undo of item 1 to start", _has(nodes, "unbook-start", i=1))
        first.kill()
        second = await spawn_ready(
            nodes, "orchestrator-2", *_node(url, "orchestrator", SHORT_LEASE_MS, *retries)
        )
        (gate / "release-unbook-1").write_text("go")
        await until(nodes, "the hold's undo to start", _has(nodes, "unhold-start"))
        second.kill()
        (gate / "release-unhold").write_text("go")
        await spawn_ready(
            nodes, "orchestrator-3", *_node(url, "orchestrator", SHORT_LEASE_MS, *retries)
        )

        async def finished() -> bool:
            return (await engine.get_run("saga-unwind")).status in FINISHED

        await until(nodes, "the run to finish", finished)
        facts = await _facts(engine, nodes, "saga-unwind")
        facts["pids"] = {"orchestrator-2": second.pid}
        return facts


async def ctrl_c_mid_undo(nodes: Nodes) -> Facts:
    """
    Hold, book three items, fail. The worker undoing item 1 gets Ctrl-C (SIGINT) while the undo
    blocks: it hands the attempt back at once, and a second worker runs that undo again.
    """
    url = nodes.url
    gate = nodes.folder / "gate"
    gate.mkdir()
    data = {"n": 3, "steps": 3, "gate": str(gate), "hold": ["unbook-1"]}
    first = await spawn_ready(nodes, "worker-1", *_node(url, "worker"))
    await spawn_ready(nodes, "orchestrator", *_node(url, "orchestrator"))
    async with Engine(url, workflows=[saga]) as engine:
        await engine.start(saga, data, run_id="saga-ctrl-c")
        await until(nodes, "the undo of item 1 to start", _has(nodes, "unbook-start", i=1))
        os.kill(first.pid, signal.SIGINT)
        code = await asyncio.to_thread(first.process.wait, 60)
        first.stopped = True
        (gate / "release-unbook-1").write_text("go")
        second = await spawn_ready(nodes, "worker-2", *_node(url, "worker"))

        async def finished() -> bool:
            return (await engine.get_run("saga-ctrl-c")).status in FINISHED

        await until(nodes, "the run to finish", finished)
        facts = await _facts(engine, nodes, "saga-ctrl-c")
        facts["pids"] = {"worker-1": first.pid, "worker-2": second.pid, "code": code}
        return facts


@pytest.fixture(scope="module", params=STORES)
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Facts | BaseException]:
    """The scenarios of this module, run at once (each on a store of its own)."""
    return run_concurrently(
        tmp_path_factory,
        {
            "killed_between_steps": killed_between_steps,
            "killed_mid_unwind": killed_mid_unwind,
            "ctrl_c_mid_undo": ctrl_c_mid_undo,
        },
        scenario_store(request),
    )


def _done(facts: Facts) -> list[tuple[str, Any]]:
    """The finished side effects, in the order they were made."""
    return [
        (r["what"], r.get("i"))
        for r in facts["effects"]
        if r["what"] in ("book", "unbook", "unhold")
    ]


def test_undos_are_rebuilt_after_a_kill_between_steps_and_run_once_each_last_first(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """Four bookings once each; then unbook 3, 2, 1, 0 and unhold, once each; original error."""
    facts = outcome(outcomes, "killed_between_steps")
    run = facts["run"]
    assert run.error is not None
    assert ("failed", "last_step_failed", None) == (run.status, run.error.code, run.error.details)
    counts = Counter(_done(facts))
    assert {("book", i): 1 for i in range(4)} == {k: v for k, v in counts.items() if k[0] == "book"}
    undone = [what for what in _done(facts) if what[0] != "book"]
    assert [("unbook", 3), ("unbook", 2), ("unbook", 1), ("unbook", 0), ("unhold", None)] == undone
    names = [(cp.name, cp.status) for cp in facts["checkpoints"]]
    assert [
        ("hold", "completed"),
        *[("crash:book", "completed")] * 4,
        *[("compensate:crash:book", "completed")] * 4,
        ("compensate:hold", "completed"),
    ] == names
    completed = Counter(e.seq for e in facts["events"] if e.name == "step.completed")
    assert set(completed.values()) == {1}


def test_a_kill_mid_unwind_never_runs_a_completed_undo_again(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """unbook 2, 1, 0 once each across three orchestrators; the interrupted unhold ran again."""
    facts = outcome(outcomes, "killed_mid_unwind")
    run = facts["run"]
    assert run.error is not None
    assert ("failed", "last_step_failed", None) == (run.status, run.error.code, run.error.details)
    undone = [what for what in _done(facts) if what[0] != "book"]
    assert [("unbook", 2), ("unbook", 1), ("unbook", 0), ("unhold", None)] == undone
    starts = Counter(r["what"] for r in facts["effects"] if r["what"].endswith("-start"))
    # Each dispatched undo started once (the worker outlived the orchestrators); the local undo
    # was interrupted by the second kill and ran again in the third orchestrator.
    assert {"unbook-start": 3, "unhold-start": 2} == dict(starts)
    killed = facts["pids"]["orchestrator-2"]
    assert [killed] == [
        r["pid"] for r in facts["effects"] if r["what"] == "unhold-start" and r["pid"] == killed
    ]
    assert [] == [e for e in facts["events"] if e.name == "step.compensation_failed"]
    undo_checkpoints = [cp for cp in facts["checkpoints"] if cp.name.startswith("compensate:")]
    assert [("compensate:crash:book", 1)] * 3 + [("compensate:hold", 1)] == [
        (cp.name, cp.attempts) for cp in undo_checkpoints
    ]
    assert all(cp.status == "completed" for cp in undo_checkpoints)


def test_ctrl_c_on_a_worker_mid_undo_hands_it_back_and_each_undo_is_done_once(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """The stopped worker exits with its undo unfinished (never recorded done); the second
    worker runs it; unbook 2, 1, 0 and unhold are each done once; the original error is kept."""
    facts = outcome(outcomes, "ctrl_c_mid_undo")
    run = facts["run"]
    assert run.error is not None
    assert ("failed", "last_step_failed") == (run.status, run.error.code)
    assert 0 != facts["pids"]["code"]
    undone = [what for what in _done(facts) if what[0] != "book"]
    assert [("unbook", 2), ("unbook", 1), ("unbook", 0), ("unhold", None)] == undone
    first, second = facts["pids"]["worker-1"], facts["pids"]["worker-2"]
    starts = [(r["pid"], r.get("i")) for r in facts["effects"] if r["what"] == "unbook-start"]
    assert (first, 1) in starts
    assert (second, 1) in starts
    assert [] == [e for e in facts["events"] if e.name == "step.compensation_failed"]
    undo_checkpoints = [cp for cp in facts["checkpoints"] if cp.name.startswith("compensate:")]
    assert all(cp.status == "completed" for cp in undo_checkpoints)
    assert 4 == len(undo_checkpoints)
