"""
The test side of the crash tests: spawn and kill node processes, read their execution logs, and
check a finished store for what a crash must never cause.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

import attrs
import pytest

from effects.durable import Engine
from tests.durable.crash_support.node import main as node_main

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[3]
FINISHED = frozenset({"completed", "failed", "cancelled", "dead"})


class Process(Protocol):
    """What a node's process offers: ``subprocess.Popen``'s or a ``Forked``'s."""

    @property
    def pid(self) -> int:
        """The process id."""
        ...

    @property
    def returncode(self) -> int | None:
        """The exit code, once it ended (negative: the signal that ended it)."""
        ...

    def poll(self) -> int | None:
        """The exit code if it ended, else ``None``."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; ``subprocess.TimeoutExpired`` past *timeout* s."""
        ...


#: Nodes forked from a server that has imported them already start in milliseconds (a fresh
#: interpreter spends a few hundred ms of CPU importing, which many nodes at once pay dearly).
_FORK_SERVER: Final = multiprocessing.get_context("forkserver")
_FORK_SERVER.set_forkserver_preload(
    ["tests.durable.crash_support.node", "tests.durable.crash_support.harness"]
)


def _run_forked(args: list[str], env: dict[str, str], output: str) -> None:
    """A forked node's body: its output to *output*, *env* set, then the node's ``main``."""
    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(env)
    code = node_main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Forked:
    """A node process forked from the preloaded fork server, seen through ``Popen``'s API."""

    def __init__(self, args: list[str], env: dict[str, str], output: Path) -> None:
        self._process = _FORK_SERVER.Process(
            target=_run_forked, args=(args, env, str(output)), daemon=False
        )
        self._process.start()

    @property
    def pid(self) -> int:
        """The process id."""
        pid = self._process.pid
        assert pid is not None
        return pid

    @property
    def returncode(self) -> int | None:
        """The exit code, once it ended."""
        return self._process.exitcode

    def poll(self) -> int | None:
        """The exit code if it ended, else ``None``."""
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; ``subprocess.TimeoutExpired`` past *timeout* s."""
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"node {self.pid}", timeout or 0)
        return code


@attrs.define
class Node:
    """One spawned node process, its output in ``<name>.out`` of the test's folder."""

    name: str
    process: Process
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
    """
    Spawns node processes for one test and kills whichever still run at its end: each a fresh
    ``python -m tests.durable.crash_support.node``, or with *forked* a ``Forked`` one.
    """

    def __init__(self, folder: Path, *, forked: bool = False, url: str | None = None) -> None:
        self.folder = folder
        self.logs = folder / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.spawned: list[Node] = []
        self.forked = forked
        #: The store of this test's engines: *url*, or a SQLite file in *folder*.
        self.url = url or f"sqlite:///{folder / 'durable.db'}"

    def spawn(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> Node:
        """Start a node running ``node.main(args)``; its output goes to ``<name>-<n>.out``."""
        output = self.folder / f"{name}-{len(self.spawned)}.out"
        environment = {"CRASH_LOG_DIR": str(self.logs), **(env or {})}
        process: Process
        if self.forked:
            process = Forked(list(args), environment, output)
        else:
            with output.open("wb") as sink:
                process = subprocess.Popen(
                    [sys.executable, "-m", "tests.durable.crash_support.node", *args],
                    cwd=ROOT,
                    env={**os.environ, **environment},
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


async def until(
    nodes: Nodes, what: str, check: Callable[[], Awaitable[bool]], *, timeout: float = 60
) -> None:
    """``wait_until_async`` that also fails at once, with its output, if a node died unasked."""

    async def alive_and() -> bool:
        nodes.check_alive()
        return await check()

    await wait_until_async(alive_and, timeout=timeout, what=what)


async def spawn_ready(
    nodes: Nodes, name: str, *args: str, env: Mapping[str, str] | None = None
) -> Node:
    """Spawn a node and wait until its store is open (so it is there for what comes next)."""
    ready = nodes.folder / f"ready-{len(nodes.spawned)}"
    node = nodes.spawn(name, *args, "--ready", str(ready), env=env)

    async def opened() -> bool:
        return ready.exists()

    await until(nodes, f"{name} to open the store", opened)
    return node


Scenario = Callable[[Nodes], Awaitable[T]]


def run_concurrently(
    tmp_path_factory: pytest.TempPathFactory,
    scenarios: Mapping[str, Scenario[T]],
    store: Callable[[], str] | None = None,
) -> dict[str, T | BaseException]:
    """
    Run every scenario at once (each with its own folder and nodes, killed at its end), so a
    test module waits out its windows and process starts once; return each one's result or
    error (with the end of its nodes' output), for its own test to check. *store* gives each
    scenario's store URL (a fresh PostgreSQL schema, say); by default a SQLite file of its own.
    """

    async def one(name: str, scenario: Scenario[T]) -> T:
        url = None if store is None else store()
        nodes = Nodes(tmp_path_factory.mktemp(name), forked=True, url=url)
        began = time.monotonic()
        try:
            return await scenario(nodes)
        except Exception as error:
            msg = f"scenario {name}: {error}\n{nodes.tails()}"
            raise AssertionError(msg) from error
        finally:
            nodes.kill_all()
            print(f"scenario {name}: {time.monotonic() - began:.1f} s")

    async def every() -> dict[str, T | BaseException]:
        results = await asyncio.gather(
            *(one(name, scenario) for name, scenario in scenarios.items()),
            return_exceptions=True,
        )
        return dict(zip(scenarios, results, strict=True))

    return asyncio.run(every())


def scenario_store(request: pytest.FixtureRequest) -> Callable[[], str] | None:
    """
    For a module fixture parametrized over ``STORES``: what gives each scenario its store
    (``run_concurrently``'s *store*), None for SQLite files.
    """
    if request.param == "sqlite":
        return None
    server: Any = request.getfixturevalue("postgres_server")
    url: Callable[[], str] = server.url
    return url


def outcome(results: Mapping[str, T | BaseException], name: str) -> T:
    """The result of scenario *name*, or its error raised."""
    found = results[name]
    if isinstance(found, BaseException):
        raise found
    return found


def starts(folder: Path, name: str) -> list[tuple[int, int]]:
    """``(attempt, pid)`` of every start of step *name*'s handler, by attempt."""
    return sorted(
        (r["attempt"], r["pid"])
        for r in read_execs(folder)
        if r["ev"] == "start" and r["name"] == name
    )


def read_execs(folder: Path) -> list[dict[str, Any]]:
    """
    Every handler execution line of every process, in the order they were written (by their
    monotonic time: the files' names hold pids, whose text order is not their start order once
    pids pass a power of ten); a line torn by a kill is skipped.
    """
    records: list[dict[str, Any]] = []
    for path in folder.glob("exec-*.jsonl"):
        lines = path.read_text().splitlines(keepends=True)
        records.extend(json.loads(line) for line in lines if line.endswith("\n"))
    return sorted(records, key=lambda record: float(record["mono"]))


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
