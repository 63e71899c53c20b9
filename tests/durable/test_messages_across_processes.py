"""
Messages and child workflows over real processes: an engine SIGKILLed between a recv's
checkpoint and its next step delivers no message twice and loses none; one SIGKILLed right after
starting a child (and one inside the child) starts no child twice; two processes sending the same
message ids at once store each id once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Engine
from tests.durable.crash_support.harness import ROOT
from tests.durable.crash_support.messages_node import WORKFLOWS
from tests.durable.support import rows

pytestmark = [pytest.mark.anyio, pytest.mark.not_on_memory("processes share the store")]
#: A bound on a process's life (never a timing claim).
PATIENCE = 60.0


def node(url: str, *args: str) -> subprocess.Popen[str]:
    """A ``messages_node`` process."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.durable.crash_support.messages_node", url, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ended(process: subprocess.Popen[str]) -> tuple[int, str]:
    """The exit code and output of *process*, once it ends."""
    out, _ = process.communicate(timeout=PATIENCE)
    return process.returncode, out


def work_until_done(url: str, run_id: str, most: int) -> list[int]:
    """Worker processes one after another until one finishes the run; their exit codes."""
    codes: list[int] = []
    while len(codes) < most:
        code, out = ended(node(url, "work", run_id))
        assert code in (0, -9), out
        codes.append(code)
        if code == 0:
            break
    return codes


async def test_a_kill_between_a_recv_and_the_next_step_delivers_each_message_once(
    durable_store_url: str, tmp_path: Path
) -> None:
    """Killed after the first recv's commit: the next process replays it and takes the second."""
    marker = tmp_path / "killed"
    async with Engine(durable_store_url, workflows=WORKFLOWS) as engine:
        await engine.start("crash:recv", {"marker": str(marker)}, run_id="r")
        await engine.send("r", "t", "one")
        await engine.send("r", "t", "two")
    codes = work_until_done(durable_store_url, "r", most=3)
    async with Engine(durable_store_url, workflows=WORKFLOWS) as engine:
        run = await engine.get_run("r")
        checkpoints = await engine.checkpoints("r")
    assert [-9, 0] == codes
    assert ("completed", ["one", "two"]) == (run.status, run.output)
    assert [("t", "one"), ("after-recv", None), ("t", "two")] == [
        (c.name, c.output) for c in checkpoints
    ]
    assert [(1, '"one"', 1), (2, '"two"', 3)] == rows(
        durable_store_url, "SELECT n, body, seq FROM messages ORDER BY n"
    )


async def test_a_kill_right_after_a_child_starts_and_one_inside_a_child_start_none_twice(
    durable_store_url: str, tmp_path: Path
) -> None:
    """Two kills: each child run exists once, started once, and the parent gets its output."""
    data = {"started": str(tmp_path / "started"), "in-child": str(tmp_path / "in-child")}
    async with Engine(durable_store_url, workflows=WORKFLOWS) as engine:
        await engine.start("crash:parent", data, run_id="p")
    codes = work_until_done(durable_store_url, "p", most=4)
    async with Engine(durable_store_url, workflows=WORKFLOWS) as engine:
        run = await engine.get_run("p")
        children = await engine.store.child_runs("p")
    assert [-9, -9, 0] == codes
    assert ("completed", ["p:1", 10]) == (run.status, run.output)
    assert [("p:1", "completed", 2), ("p:3", "completed", 10)] == [
        (c.run_id, c.status, c.output) for c in children
    ]
    assert [(3,)] == rows(durable_store_url, "SELECT COUNT(*) FROM runs")
    assert [("p:1", 1), ("p:3", 1)] == rows(
        durable_store_url,
        "SELECT run_id, COUNT(*) FROM events WHERE name = 'run.started' AND run_id <> 'p'"
        " GROUP BY run_id ORDER BY run_id",
    )


async def test_two_processes_sending_the_same_message_ids_at_once_store_each_once(
    durable_store_url: str, tmp_path: Path
) -> None:
    """Both send ids m-0 .. m-19 twice, together: 20 messages, numbered 1..20, received in order."""
    count = 20
    go = tmp_path / "go"
    async with Engine(durable_store_url, workflows=WORKFLOWS) as engine:
        await engine.start("crash:count", count, run_id="c")
    senders = [node(durable_store_url, "send", "c", str(go), str(count)) for _ in range(2)]
    go.write_text("go")
    results = [ended(sender) for sender in senders]
    stored = rows(durable_store_url, "SELECT n, message_id, body FROM messages ORDER BY n")
    assert [(0, "sent\n"), (0, "sent\n")] == results
    assert list(range(1, count + 1)) == [n for n, _, _ in stored]
    assert sorted(f"m-{i}" for i in range(count)) == sorted(m for _, m, _ in stored)
    codes = work_until_done(durable_store_url, "c", most=1)
    async with Engine(durable_store_url, workflows=WORKFLOWS) as engine:
        run = await engine.get_run("c")
    received: Sequence[Any] = run.output
    assert ([0], "completed") == (codes, run.status)
    assert [json.loads(body) for _, _, body in stored] == received
    assert list(range(count)) == sorted(message["i"] for message in received)
