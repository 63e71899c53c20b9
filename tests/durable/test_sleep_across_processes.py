"""
A durable sleep across real processes: a worker killed (``kill -9``) during a real 2 s sleep, and
a process that dies at each write of a sleep, leave a sleep that a fresh process neither shortens
nor repeats.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from effects.durable import Engine
from tests.durable.conftest import STORES
from tests.durable.crash_support.crash_store import TIMER_POINTS
from tests.durable.crash_support.harness import Nodes, trail_problems, wait_until
from tests.postgres_server import PostgresServer

# The dying process's leases: what the fresh process waits out before it may recover them.
LEASE_MS = 1500
#: The real sleep of the kill -9 case, and of each crash point's run.
KILLED_MS = 2000
POINT_MS = 300


@attrs.frozen
class Case:
    """One scenario's processes: the one that died and the fresh one that finished the run."""

    nodes: Nodes
    url: str
    run_id: str
    ms: int
    first: int
    second: int
    marker: str


def _args(url: str, run_id: str, lease_ms: int) -> list[str]:
    return [
        *("--url", url, "--role", "solo", "--lease-ms", str(lease_ms), "--poll-ms", "20"),
        *("--until-finished", run_id, "--deadline-s", "60"),
    ]


def _start(run_id: str, ms: int) -> list[str]:
    return ["--start", json.dumps([["crash:sleeper", run_id, {"ms": ms}]])]


async def _sleep_written(url: str, run_id: str) -> bool:
    async with Engine(url) as engine:
        return any(cp.kind == "sleep" for cp in await engine.store.checkpoints(run_id))


@pytest.fixture(scope="module", params=STORES)
def cases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Case]]:
    """
    At once, each on a store of its own: a process killed while its run sleeps for real, and a
    process dying at each point of ``TIMER_POINTS``; then a fresh process on each store.
    """
    names = ["killed", *TIMER_POINTS]
    plans = {name: Nodes(tmp_path_factory.mktemp(name)) for name in names}
    if request.param == "sqlite":
        urls = {name: f"sqlite:///{nodes.folder / 'durable.db'}" for name, nodes in plans.items()}
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        urls = {name: server.url() for name in names}
    try:
        first: dict[str, Any] = {}
        for name, nodes in plans.items():
            run_id = f"nap-{name}"
            if name == "killed":
                first[name] = nodes.spawn(
                    "first", *_args(urls[name], run_id, LEASE_MS), *_start(run_id, KILLED_MS)
                )
                continue
            first[name] = nodes.spawn(
                "first",
                *_args(urls[name], run_id, LEASE_MS),
                *_start(run_id, POINT_MS),
                *("--crash", name, "--marker", str(nodes.folder / "marker")),
            )
        # kill -9 once the sleep is written: the run then sleeps, in no turn of anyone.
        wait_until(
            lambda: asyncio.run(_sleep_written(urls["killed"], "nap-killed")),
            timeout=60,
            what="the killed process to write its sleep",
            poll=0.05,
        )
        first["killed"].kill()
        first_codes = {name: node.process.wait(60) for name, node in first.items()}
        second = {
            name: nodes.spawn("second", *_args(urls[name], f"nap-{name}", 30_000))
            for name, nodes in plans.items()
        }
        second_codes = {name: node.process.wait(90) for name, node in second.items()}
        found: dict[str, Case] = {}
        for name, nodes in plans.items():
            marker = nodes.folder / "marker"
            found[name] = Case(
                nodes,
                urls[name],
                f"nap-{name}",
                KILLED_MS if name == "killed" else POINT_MS,
                first_codes[name],
                second_codes[name],
                marker.read_text() if marker.exists() else "",
            )
        yield found
    finally:
        for nodes in plans.values():
            nodes.kill_all()


async def _check(case: Case) -> dict[str, Any]:
    """What the finished run shows of its sleep."""
    async with Engine(case.url) as engine:
        run = await engine.get_run(case.run_id)
        problems = await trail_problems(engine, {case.run_id: run.output})
        checkpoints = await engine.checkpoints(case.run_id)
        events = await engine.events(case.run_id)
    (sleep,) = [cp for cp in checkpoints if cp.kind == "sleep"]
    armed = [e for e in events if e.seq == sleep.seq and e.name == "step.started"]
    assert sleep.wake_at is not None
    return {
        "problems": problems,
        "status": run.status,
        "sleep": (sleep.status, sleep.wake_at - sleep.created_at),
        "armed": [(e.at, e.data["wake_at"]) for e in armed],
        "woke after wake_at": run.output["after"] >= sleep.wake_at,
        "slept after before": sleep.created_at >= run.output["before"],
        "recovered": sum(1 for e in events if e.name == "run.recovered"),
        "created": sleep.created_at,
        "wake_at": sleep.wake_at,
    }


@pytest.mark.anyio
async def test_a_worker_killed_during_a_real_sleep_neither_shortens_nor_repeats_it(
    cases: dict[str, Case],
) -> None:
    """kill -9 mid-sleep: the fresh process wakes the run at the recorded wake_at, armed once."""
    case = cases["killed"]
    assert (-9, 0) == (case.first, case.second), case.nodes.tails()
    seen = await _check(case)
    expected = {
        "problems": [],
        "status": "completed",
        "sleep": ("completed", KILLED_MS),
        "armed": [(seen["created"], seen["wake_at"])],
        "woke after wake_at": True,
        "slept after before": True,
        "recovered": 0,
    }
    assert expected == {k: v for k, v in seen.items() if k in expected}, case.nodes.tails()


#: Runs recovered after each point: the run slept in no turn at "sleep-arm"; a turn held it at
#: the other two when its process died.
RECOVERED = {"sleep-arm": 0, "sleep-due": 1, "sleep-fire": 1}


@pytest.mark.anyio
@pytest.mark.parametrize("point", list(TIMER_POINTS))
async def test_a_process_dying_at_each_write_of_a_sleep_leaves_it_whole(
    point: str, cases: dict[str, Case]
) -> None:
    """Died at the point: the fresh process finishes the run; the sleep armed once, not cut."""
    case = cases[point]
    assert (137, point, 0) == (case.first, case.marker, case.second), case.nodes.tails()
    seen = await _check(case)
    expected = {
        "problems": [],
        "status": "completed",
        "sleep": ("completed", POINT_MS),
        "armed": [(seen["created"], seen["wake_at"])],
        "woke after wake_at": True,
        "slept after before": True,
        "recovered": RECOVERED[point],
    }
    assert expected == {k: v for k, v in seen.items() if k in expected}, case.nodes.tails()


def test_every_timer_point_has_an_expectation() -> None:
    """Each timer crash point is covered above."""
    assert sorted(TIMER_POINTS) == sorted(RECOVERED)
