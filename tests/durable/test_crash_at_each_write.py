"""A process that dies at each persistence point: a fresh process on the store finishes the run."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from effects.durable import Engine
from tests.durable.conftest import STORES
from tests.durable.crash_support.app import faults_output
from tests.durable.crash_support.crash_store import POINTS
from tests.durable.crash_support.harness import (
    Nodes,
    execution_problems,
    read_execs,
    trail_problems,
)
from tests.postgres_server import PostgresServer

# The crashing process's leases: what a fresh process waits out before it may recover them. The
# fresh process holds its own for 30 s, so however loaded the machine, none of its expires.
LEASE_MS = 1500


@attrs.frozen
class Crashed:
    """One point's two processes: the one that died there and the fresh one after it."""

    nodes: Nodes
    url: str
    run_id: str
    first: int
    second: int
    marker: str


#: The stores, each with the engines' cache of suspended runs on (its default: the crashing
#: process resumes its parked workflows, so it dies in resumed turns too), and SQLite with it off
#: (every turn replays): both must leave what ``EXPECTED`` says.
_MODES = [*((store, 1000) for store in STORES), ("sqlite", 0)]


@pytest.fixture(scope="module", params=_MODES, ids=[f"{s}-cached_runs={c}" for s, c in _MODES])
def crashed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Crashed]]:
    """
    For every point, at once: a process that dies there, then a fresh one on the same store (a
    SQLite file, or a PostgreSQL schema, of the point's own).
    """
    store, cached = request.param
    plans = {point: Nodes(tmp_path_factory.mktemp(point)) for point in POINTS}
    if store == "sqlite":
        urls = {point: f"sqlite:///{nodes.folder / 'durable.db'}" for point, nodes in plans.items()}
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        urls = {point: server.url() for point in POINTS}

    def args(point: str, lease_ms: int = 30_000) -> list[str]:
        url = urls[point]
        return [
            *("--url", url, "--lease-ms", str(lease_ms), "--poll-ms", "20"),
            *("--cached-runs", str(cached)),
            *("--until-finished", f"faults-{point}", "--deadline-s", "60"),
        ]

    try:
        first = {
            point: nodes.spawn(
                "first",
                *args(point, LEASE_MS),
                *("--start", json.dumps([["crash:faults", f"faults-{point}", 4]])),
                *("--crash", point, "--marker", str(nodes.folder / "marker")),
            )
            for point, nodes in plans.items()
        }
        first_codes = {point: node.process.wait(60) for point, node in first.items()}
        second = {point: nodes.spawn("second", *args(point)) for point, nodes in plans.items()}
        second_codes = {point: node.process.wait(90) for point, node in second.items()}
        found: dict[str, Crashed] = {}
        for point, nodes in plans.items():
            marker = nodes.folder / "marker"
            found[point] = Crashed(
                nodes,
                args(point)[1],
                f"faults-{point}",
                first_codes[point],
                second_codes[point],
                marker.read_text() if marker.exists() else "",
            )
        yield found
    finally:
        for nodes in plans.values():
            nodes.kill_all()


def _summary(checkpoints: list[Any], events: list[Any], execs: list[dict[str, Any]]) -> Any:
    """What tells the points apart: recoveries, local attempts, remote errors, executions."""
    ran: defaultdict[int, list[int]] = defaultdict(list)
    for record in execs:
        if record["ev"] == "start":
            ran[int(record["step_id"].rsplit(":", 1)[1])].append(record["attempt"])
    return {
        "recovered": sum(1 for e in events if e.name == "run.recovered"),
        "local attempts started": [
            e.data["attempt"] for e in events if e.name == "step.started" and e.seq == 1
        ],
        "remote errors": [e.code or e.type for e in checkpoints[1].errors],
        "executions": dict(sorted(ran.items())),
    }


# What each point must leave once the run finished: a run whose lease was held when its process
# died is recovered once; a crash between local attempts replays from attempt 1; a claim or a
# result that died with its worker becomes one "worker lost" failure; nothing runs twice.
_TWICE = {2: [1, 2], 3: [1]}
EXPECTED: dict[str, dict[str, Any]] = {
    "dispatch": {
        "recovered": 0,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "claim": {"recovered": 0, "local": [1, 2], "errors": ["worker_lost"], "ran": {2: [2], 3: [1]}},
    "result-lost": {"recovered": 0, "local": [1, 2], "errors": ["worker_lost"], "ran": _TWICE},
    "result": {
        "recovered": 0,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "wake-at": {
        "recovered": 0,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "redispatch": {
        "recovered": 0,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "local-backoff": {
        "recovered": 1,
        "local": [1, 1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "local-first": {
        "recovered": 1,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "local-done": {
        "recovered": 1,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "run-claim": {
        "recovered": 1,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
    "finish": {
        "recovered": 1,
        "local": [1, 2],
        "errors": ["builtins.ConnectionError"],
        "ran": _TWICE,
    },
}


def test_every_point_has_an_expectation() -> None:
    """Each crash point of the store is covered below."""
    assert sorted(POINTS) == sorted(EXPECTED)


@pytest.mark.anyio
@pytest.mark.parametrize("point", list(POINTS))
async def test_run_finishes_after_a_crash_at(point: str, crashed: dict[str, Crashed]) -> None:
    """The first process died at the point; the second finished the run, nothing twice."""
    case = crashed[point]
    assert (137, point, 0) == (case.first, case.marker, case.second), case.nodes.tails()
    async with Engine(case.url) as engine:
        problems = await trail_problems(engine, {case.run_id: faults_output(4)})
        checkpoints = await engine.checkpoints(case.run_id)
        events = await engine.events(case.run_id)
    execs = read_execs(case.nodes.logs)
    assert [] == problems + execution_problems(execs), case.nodes.tails()
    want = EXPECTED[point]
    summary = _summary(checkpoints, events, execs)
    expected = {
        "recovered": want["recovered"],
        "local attempts started": want["local"],
        "remote errors": want["errors"],
        "executions": want["ran"],
    }
    assert expected == summary, case.nodes.tails()
