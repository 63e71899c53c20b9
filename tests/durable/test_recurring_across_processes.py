"""
Recurring workflows worked by real processes on one SQLite file or PostgreSQL schema: two workers
start each recurrence once (one of them killed -9 and restarted on the way), and a process killed
inside a step's transaction leaves neither the step nor its run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from effects.durable import Engine, Run
from tests.durable.crash_support.harness import FINISHED, ROOT, wait_until_async
from tests.durable.recurring_node import beat

pytestmark = [pytest.mark.anyio, pytest.mark.not_on_memory("engine processes share the store")]


class Node:
    """One ``recurring_node`` process, its output in a file of the test's folder."""

    def __init__(self, folder: Path, name: str, url: str, every_ms: int, *extra: str) -> None:
        self.ready = folder / f"ready-{name}"
        #: The file that stops it (and every node of the folder).
        self.stop = folder / "stop"
        self.output = folder / f"{name}.out"
        with self.output.open("wb") as sink:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.durable.recurring_node",
                    *("--url", url, "--every-ms", str(every_ms), "--stop", str(self.stop)),
                    *("--ready", str(self.ready), *extra),
                ],
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    async def opened(self) -> None:
        """Wait until its store is open."""

        async def ready() -> bool:
            assert self.process.poll() is None, self.tail()
            return self.ready.exists()

        await wait_until_async(ready, timeout=60, what=f"{self.output.name} to open its store")

    async def ended(self) -> int:
        """Wait for its end; its exit code."""
        return await asyncio.to_thread(self.process.wait, 90)

    def kill(self) -> None:
        """kill -9 (if it still runs), and reap it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def tail(self) -> str:
        """The end of what it printed."""
        lines = self.output.read_text(errors="replace").splitlines()
        return "\n".join([f"--- {self.output.name}", *lines[-20:]])


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Starts nodes in the test's folder; those still running at its end are killed."""
    started: list[Node] = []

    def start(name: str, url: str, every_ms: int, *extra: str) -> Node:
        node = Node(tmp_path, name, url, every_ms, *extra)
        started.append(node)
        return node

    yield start
    for node in started:
        node.kill()


async def finished_runs(url: str) -> list[Run]:
    """Every run on the store, once each is finished (an engine here works what is left)."""
    async with Engine(url, workflows=[beat], lease_ms=500) as engine:

        async def all_finished() -> bool:
            await engine.run_until_idle()
            return all(r.status in FINISHED for r in await engine.list_runs(limit=10_000))

        await wait_until_async(all_finished, timeout=60, what="the runs to finish")
        return await engine.list_runs(limit=10_000)


async def started_events(url: str, runs: list[Run]) -> list[int]:
    """How many ``run.started`` events each run has."""
    async with Engine(url, workflows=[beat]) as engine:
        return [
            len([e for e in await engine.events(r.run_id) if e.name == "run.started"]) for r in runs
        ]


def due_times(runs: list[Run]) -> list[int]:
    """The due times of the runs of recurring ``beat``, in order."""
    return sorted(int(r.run_id.rpartition("@")[2]) for r in runs)


async def test_two_worker_processes_start_each_recurrence_once(
    tmp_path: Path, durable_store_url: str, spawn: Callable[..., Node]
) -> None:
    """
    Two processes work a recurring of 150 ms for about 6 s, one killed -9 and restarted on the
    way, then stopped by a file: the runs' due times are one grid 150 ms apart with no gap,
    each run started once and completed, the schedule's row written at most once per due time.
    """
    every = 150
    url = durable_store_url
    first = spawn("a", url, every)
    second = spawn("b", url, every)
    await first.opened()
    await second.opened()
    await asyncio.sleep(2.5)
    first.kill()
    await asyncio.sleep(0.3)
    again = spawn("a-again", url, every)
    await again.opened()
    await asyncio.sleep(3)
    again.stop.write_text("stop")
    assert [0, 0] == [await second.ended(), await again.ended()], second.tail() + again.tail()
    runs = await finished_runs(url)
    async with Engine(url) as engine:
        (row,) = await engine.store.recurring()
    dues = due_times(runs)
    by_process = Counter(r.output for r in runs)
    print(f"{len(dues)} recurrences; runs by process: {dict(by_process)}")
    assert list(range(dues[0], dues[-1] + every, every)) == dues
    assert len(dues) >= 20
    # One write per due time, or fewer: a process held off the CPU for over a period passes two
    # due times in one write (catch_up "all" starts both), never more writes than due times.
    assert dues[-1] + every == row.next_at
    assert 1 < row.rev <= 1 + len(dues)
    assert {"completed"} == {r.status for r in runs}
    assert [1] * len(runs) == await started_events(url, runs)


async def test_a_process_killed_inside_a_step_leaves_neither_the_step_nor_its_run(
    tmp_path: Path, durable_store_url: str, spawn: Callable[..., Node]
) -> None:
    """
    A process dies (as kill -9) inside a step's transaction, its row updated and its run not yet
    inserted: afterwards the row is as the first write left it and no run exists (the two are
    one transaction); the next process starts that due time once, and the grid goes on.
    """
    every = 300
    url = durable_store_url
    marker = tmp_path / "died"
    doomed = spawn("doomed", url, every, "--die-in-step", str(marker))
    assert 137 == await doomed.ended(), doomed.tail()
    assert marker.exists()
    async with Engine(url) as engine:
        (row,) = await engine.store.recurring()
        runs_after_death = await engine.list_runs()
    assert (1, [], True) == (row.rev, runs_after_death, row.recurs)
    survivor = spawn("survivor", url, every)
    await survivor.opened()
    await asyncio.sleep(1.5)
    survivor.stop.write_text("stop")
    assert 0 == await survivor.ended(), survivor.tail()
    runs = await finished_runs(url)
    dues = due_times(runs)
    assert row.next_at == dues[0]
    assert list(range(dues[0], dues[-1] + every, every)) == dues
    assert [1] * len(runs) == await started_events(url, runs)
