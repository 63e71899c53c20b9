"""
Flow-control queues across processes: two engines (processes) share a queue of concurrency 1;
no two of its attempts ever run at once, and a step waiting out a long backoff holds no slot.

The queue's two steps are in two groups, each served by one of the processes only, so both
processes certainly run attempts of the queue. The scenarios run at once.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.conftest import STORES
from tests.durable.crash_support.app import QUEUE, guarded
from tests.durable.crash_support.harness import (
    FINISHED,
    Nodes,
    outcome,
    read_execs,
    run_concurrently,
    scenario_store,
    until,
)
from tests.durable.support import rows

RUNS = 8
#: Leases and claims: none expires in a test.
LONG_MS = 30_000
Facts = dict[str, Any]


def _lane(url: str, lane: str, *extra: str) -> list[str]:
    """A process running every workflow and serving one lane's step, with the queue's 1 slot."""
    return [
        *("--url", url, "--role", "solo", "--lease-ms", str(LONG_MS), "--poll-ms", "20"),
        *("--concurrency", "8", "--queue-concurrency", "1", "--steps", f"crash:lane-{lane}"),
        *extra,
    ]


def _call(lane: str, order: str, **extra: Any) -> dict[str, Any]:
    """The input of a ``guarded`` run calling lane *lane*'s step through the queue."""
    policy = {"queue": QUEUE, **extra.pop("policy", {})}
    return {"step": f"crash:lane-{lane}", "order": order, "work_ms": 40, "policy": policy, **extra}


def _finished(engine: Engine, run_ids: list[str]) -> Any:
    async def check() -> bool:
        return all([(await engine.get_run(r)).status in FINISHED for r in run_ids])

    return check


async def _events(engine: Engine, run_ids: list[str], name: str) -> list[Any]:
    return [e for r in run_ids for e in await engine.events(r) if e.name == name]


async def serialized(nodes: Nodes) -> Facts:
    """
    Eight runs over both lanes; the first attempt admitted holds its slot until every other
    one is waiting for it, then they all run.
    """
    url = nodes.url
    opened = nodes.folder / "open"
    async with Engine(url, workflows=[guarded]) as engine:
        run_ids = [f"run-{n}" for n in range(RUNS)]
        for n, run_id in enumerate(run_ids):
            data = _call("ab"[n % 2], run_id, until=str(opened))
            await engine.start(guarded, data, run_id=run_id)
        lanes = {lane: nodes.spawn(f"lane-{lane}", *_lane(url, lane)) for lane in "ab"}

        async def all_but_one_waiting() -> bool:
            return len(await _events(engine, run_ids, "step.queued")) == RUNS - 1

        await until(nodes, "seven attempts to wait for the slot", all_but_one_waiting)
        opened.write_text("go")
        await until(nodes, "every run to finish", _finished(engine, run_ids))
        return {
            "outputs": [(await engine.get_run(r)).output for r in run_ids],
            "queued": await _events(engine, run_ids, "step.queued"),
            "admitted": await _events(engine, run_ids, "step.admitted"),
            "intervals": sorted(
                (r["mono_start"], r["mono_end"], r["pid"], r["step_id"])
                for r in read_execs(nodes.logs)
                if r["ev"] == "end"
            ),
            "pids": {lane: node.pid for lane, node in lanes.items()},
        }


async def backoff(nodes: Nodes) -> Facts:
    """Run F fails once and waits ten minutes; run S, on the other process, is started then."""
    url = nodes.url
    async with Engine(url, workflows=[guarded]) as engine:
        flaky = _call("a", "F", fail_first=True, policy={"retries": 2, "backoff_ms": 600_000})
        await engine.start(guarded, flaky, run_id="F")
        nodes.spawn("lane-a", *_lane(url, "a"))
        steady = nodes.spawn("lane-b", *_lane(url, "b"))

        async def retry_stamped() -> bool:
            (cp,) = await engine.checkpoints("F") or [None]
            return cp is not None and cp.status == "failed" and cp.wake_at is not None

        await until(nodes, "F's retry to be stamped", retry_stamped)
        await engine.start(guarded, _call("b", "S"), run_id="S")
        await until(nodes, "S to finish", _finished(engine, ["S"]))
        f_tasks = rows(url, "SELECT status FROM tasks WHERE run_id = 'F'")
        return {
            "f": await engine.get_run("F"),
            "f_checkpoints": await engine.checkpoints("F"),
            "f_tasks": f_tasks,
            "s": await engine.get_run("S"),
            "s_events": [e.name for e in await engine.events("S")],
            "s_completed": await _events(engine, ["S"], "run.completed"),
            "steady": steady.pid,
        }


@pytest.fixture(scope="module", params=STORES)
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Facts | BaseException]:
    """Every scenario of this module, run at once."""
    return run_concurrently(
        tmp_path_factory, {"serialized": serialized, "backoff": backoff}, scenario_store(request)
    )


def test_two_processes_sharing_a_queue_of_one_never_run_two_attempts_at_once(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """Every attempt's interval (one monotonic clock) ends before the next one starts."""
    facts = outcome(outcomes, "serialized")
    pids, intervals = facts["pids"], facts["intervals"]
    assert [
        f"crash:lane-{'ab'[n % 2]} run-{n} by {pids['ab'[n % 2]]}" for n in range(RUNS)
    ] == facts["outputs"]
    assert RUNS == len(intervals)
    overlaps = [
        (a, b) for a, b in itertools.pairwise(intervals) if b[0] < a[1]
    ]  # a later start before an earlier end
    assert [] == overlaps
    assert set(pids.values()) == {pid for _, _, pid, _ in intervals}
    # Admission was at work: seven attempts waited for the slot, and each was admitted.
    assert (RUNS - 1, RUNS - 1) == (len(facts["queued"]), len(facts["admitted"]))


def test_a_step_waiting_out_a_long_backoff_holds_no_slot(
    outcomes: dict[str, Facts | BaseException],
) -> None:
    """S, started while F waits ten minutes to retry, is admitted at once and finishes."""
    facts = outcome(outcomes, "backoff")
    f, s = facts["f"], facts["s"]
    (checkpoint,) = facts["f_checkpoints"]
    (s_completed,) = facts["s_completed"]
    assert ("completed", f"crash:lane-b S by {facts['steady']}") == (s.status, s.output)
    assert "step.queued" not in facts["s_events"]
    assert ("suspended", checkpoint.wake_at) == (f.status, f.wake_at)
    assert ("failed", 1, []) == (checkpoint.status, checkpoint.attempts, facts["f_tasks"])
    assert checkpoint.wake_at > s_completed.at
