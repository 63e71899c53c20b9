"""
The test side of the crash tests: spawn and kill node processes, read their execution logs, and
check a finished store for what a crash must never cause.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from effects.durable import Engine

ROOT = Path(__file__).resolve().parents[3]
FINISHED = frozenset({"completed", "failed", "cancelled", "dead"})


@attrs.define
class Node:
    """One spawned node process, its output in ``<name>.out`` of the test's folder."""

    name: str
    process: subprocess.Popen[bytes]
    output: Path
    #: Whether the test ended it on purpose (an exit is then no surprise).
    stopped: bool = False

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def kill(self) -> int:
        """SIGKILL the process (if it still runs) and reap it; return its exit code."""
        self.stopped = True
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        return self.process.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (the engine drains) and wait; SIGKILL past *timeout*; return the exit code."""
        self.stopped = True
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def tail(self, lines: int = 30) -> str:
        """The end of what the process printed (for a failure message)."""
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return f"--- {self.name} (pid {self.pid}) ---\n" + "\n".join(text.splitlines()[-lines:])


class Nodes:
    """Spawns node processes for one test and kills whichever still run at its end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.logs = folder / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.spawned: list[Node] = []

    def spawn(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> Node:
        """Start ``python -m tests.durable.crash_support.node *args``."""
        output = self.folder / f"{name}-{len(self.spawned)}.out"
        with output.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.durable.crash_support.node", *args],
                cwd=ROOT,
                env={**os.environ, "CRASH_LOG_DIR": str(self.logs), **(env or {})},
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        node = Node(name, process, output)
        self.spawned.append(node)
        return node

    def check_alive(self) -> None:
        """``AssertionError`` with its output if a node ended that no one stopped."""
        for node in self.spawned:
            if node.process.poll() is not None and not node.stopped:
                msg = f"{node.name} exited with {node.process.returncode}\n{node.tail()}"
                raise AssertionError(msg)

    def kill_all(self) -> None:
        """SIGKILL every node still running (each by its own pid)."""
        for node in self.spawned:
            node.kill()

    def tails(self) -> str:
        """The end of every node's output."""
        return "\n".join(node.tail() for node in self.spawned)


def wait_until(
    predicate: Callable[[], bool], *, timeout: float, what: str, poll: float = 0.02
) -> None:
    """Poll *predicate* until it holds; ``AssertionError`` naming *what* after *timeout* s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout} s waiting for {what}"
            raise AssertionError(msg)
        time.sleep(poll)


async def wait_until_async(
    predicate: Callable[[], Awaitable[bool]], *, timeout: float, what: str, poll: float = 0.05
) -> None:
    """``wait_until`` for an async predicate."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout} s waiting for {what}"
            raise AssertionError(msg)
        await asyncio.sleep(poll)


def read_execs(folder: Path) -> list[dict[str, Any]]:
    """Every handler execution line of every process; a line torn by a kill is skipped."""
    records: list[dict[str, Any]] = []
    for path in sorted(folder.glob("exec-*.jsonl")):
        lines = path.read_text().splitlines(keepends=True)
        records.extend(json.loads(line) for line in lines if line.endswith("\n"))
    return records


async def unfinished(engine: Engine, run_ids: Iterable[str]) -> list[str]:
    """The runs of *run_ids* that are not finished yet."""
    return [r for r in run_ids if (await engine.get_run(r)).status not in FINISHED]


async def trail_problems(engine: Engine, expected: Mapping[str, Any]) -> list[str]:
    """
    Everything wrong with the finished runs *expected* (run id -> output): a run not completed or
    with another output, a checkpoint not completed or completed more than once, a dispatch
    attempt numbered out of turn or made twice, a retry decided twice. Empty when all is well.
    """
    problems: list[str] = []
    for run_id, output in expected.items():
        run = await engine.get_run(run_id)
        if ("completed", output) != (run.status, run.output):
            problems.append(f"{run_id}: {run.status} with {run.output!r}, error {run.error!r}")
        events = await engine.events(run_id)
        names = Counter(e.name for e in events if e.seq is None)
        if names["run.completed"] != 1:
            problems.append(f"{run_id}: {names['run.completed']} run.completed events")
        completed: Counter[int] = Counter()
        dispatched: defaultdict[int, list[int]] = defaultdict(list)
        decided: defaultdict[int, list[int]] = defaultdict(list)
        for event in events:
            if event.seq is None:
                continue
            if event.name == "step.completed":
                completed[event.seq] += 1
            elif event.name == "step.dispatched":
                dispatched[event.seq].append(event.data["attempt"])
            elif event.name == "step.retry_scheduled" and event.data.get("kind") == "remote":
                decided[event.seq].append(event.data["attempt"])
        checkpoints = await engine.checkpoints(run_id)
        for cp in checkpoints:
            where = f"{cp.step_id} ({cp.name})"
            if cp.status != "completed":
                problems.append(f"{where}: checkpoint {cp.status}")
            if completed[cp.seq] != 1:
                problems.append(f"{where}: {completed[cp.seq]} step.completed events")
            if cp.kind == "remote":
                if list(range(1, cp.attempts + 1)) != dispatched[cp.seq]:
                    problems.append(
                        f"{where}: {cp.attempts} attempts, dispatched {dispatched[cp.seq]}"
                    )
                if len(set(decided[cp.seq])) != len(decided[cp.seq]):
                    problems.append(f"{where}: retry decided twice: {decided[cp.seq]}")
        extra = set(completed) - {cp.seq for cp in checkpoints}
        if extra:
            problems.append(f"{run_id}: step.completed for seqs without a checkpoint: {extra}")
    return problems


def execution_problems(execs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Each (step_id, attempt) a handler started more than once (by any process)."""
    starts = Counter((r["step_id"], r["attempt"]) for r in execs if r["ev"] == "start")
    return [f"{key[0]} attempt {key[1]} started {n} times" for key, n in starts.items() if n > 1]


async def trail_stats(engine: Engine, run_ids: Iterable[str]) -> dict[str, int]:
    """How much went wrong on the way (to print): lost workers, recoveries, retries."""
    counts: Counter[str] = Counter()
    for run_id in run_ids:
        for event in await engine.events(run_id):
            if event.name == "step.failed":
                code = event.data["error"].get("code")
                counts["worker lost" if code == "worker_lost" else "step failed"] += 1
            elif event.name in ("run.recovered", "step.retry_scheduled"):
                counts[event.name] += 1
    return dict(sorted(counts.items()))
