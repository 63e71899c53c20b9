"""
Scale on PostgreSQL: four worker processes and two engines on one server, 200 runs of a ten-step
workflow with a flaky dispatched step, workers killed with SIGKILL again and again and the server
restarted once in the middle. Every run completes once, every checkpoint completes once, no
attempt runs in two workers at the same time, and durable retries wait out their ``wake_at``.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from effects.durable import Engine
from tests.durable.scale_worker import LOCAL_RUNS, PLAN, ten
from tests.durable.support import rows
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
RUNS = 200
WORKERS = 4
#: A bound on a hang, not a timing claim: the test normally ends in well under a minute.
PATIENCE = 240.0


class Workers:
    """Worker processes, killed and replaced at will; when each one died (ns)."""

    def __init__(self, url: str, log: Path, errors: Path) -> None:
        self.url, self.log, self.errors = url, log, errors
        self.procs: list[subprocess.Popen[bytes]] = []
        self.died: dict[int, int] = {}
        self.kills = 0

    def spawn(self) -> None:
        """Start one more worker."""
        with self.errors.open("ab") as errors:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.durable.scale_worker", self.url, str(self.log)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        self.procs.append(proc)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL *proc* and note when it was dead."""
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.died[proc.pid] = time.time_ns()
        self.procs.remove(proc)

    def kill_random(self, rng: random.Random) -> None:
        """Kill one worker at random and start a new one in its place."""
        self.kill(rng.choice(self.procs))
        self.kills += 1
        self.spawn()

    def kill_all(self) -> None:
        """Kill every worker left."""
        for proc in list(self.procs):
            self.kill(proc)


def overlaps(log: Path, died: dict[int, int]) -> list[str]:
    """The attempts whose executions overlap in time, from the workers' ``S``/``E`` lines."""
    started: dict[tuple[str, str, str], int] = {}
    spans: defaultdict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        kind, step_id, attempt, pid, at = line.split()
        key = (step_id, attempt, pid)
        if kind == "S":
            started[key] = int(at)
        else:
            spans[step_id].append((started.pop(key), int(at), pid))
    for (step_id, _, pid), start in started.items():
        # Never ended: its worker was killed mid-attempt, so it ran until its death.
        spans[step_id].append((start, died[int(pid)], pid))
    found: list[str] = []
    for step_id, intervals in spans.items():
        intervals.sort()
        busy_until, busy_pid = -1, ""
        for start, end, pid in intervals:
            if start < busy_until:
                found.append(f"{step_id}: worker {pid} started before {busy_pid} ended")
            if end > busy_until:
                busy_until, busy_pid = end, pid
    return found


def test_the_overlap_check_sees_two_workers_on_one_step(tmp_path: Path) -> None:
    """The interval check itself: a killed worker's open attempt runs until its death."""
    log = tmp_path / "attempts.log"
    log.write_text(
        "S r:1 1 10 100\nE r:1 1 10 200\nS r:1 2 11 200\nE r:1 2 11 300\n"
        "S r:2 1 12 100\nS r:2 2 13 150\nE r:2 2 13 160\nS r:3 1 14 100\n"
    )
    assert ["r:2: worker 13 started before 12 ended"] == overlaps(log, {12: 500, 14: 900})


async def test_workers_killed_and_a_server_restart_lose_and_double_nothing(
    postgres_server: PostgresServer, postgres_url: str, tmp_path: Path
) -> None:
    """200 runs x 10 steps, SIGKILLed workers, a restart: each run and checkpoint completes once."""
    LOCAL_RUNS.clear()
    rng = random.Random(11)
    log, errors = tmp_path / "attempts.log", tmp_path / "workers.err"
    workers = Workers(postgres_url, log, errors)
    # The runs' lease outlasts the server's restart even on a loaded machine: a lease lapsing while
    # every engine waits for the server would let a local step run again (at least once, as
    # designed); what this test pins is that a restart alone repeats nothing.
    engines = [Engine(postgres_url, workflows=[ten], lease_ms=60_000) for _ in range(2)]
    for engine in engines:
        await engine.open()
    loops: list[asyncio.Task[None]] = []
    restarted = False
    try:
        for _ in range(WORKERS):
            workers.spawn()
        ids = [await engines[n % 2].start(ten, 0, run_id=f"run-{n:03}") for n in range(RUNS)]
        loops = [asyncio.create_task(engine.work(poll_ms=100)) for engine in engines]

        async def chaos() -> None:
            nonlocal restarted
            deadline = time.monotonic() + PATIENCE
            while time.monotonic() < deadline:
                done = len(await engines[0].list_runs(status="completed", limit=RUNS))
                if done == RUNS:
                    return
                # Progress by steps, not runs: the runs go forward together, and most of them
                # complete at the end, so counting runs could miss the middle altogether.
                ((steps,),) = await asyncio.to_thread(
                    rows,
                    postgres_url,
                    "SELECT COUNT(*) FROM checkpoints WHERE status = 'completed'",
                )
                if not restarted and steps >= RUNS * len(PLAN) // 3:
                    await asyncio.to_thread(postgres_server.restart)
                    restarted = True
                elif workers.kills < 40:
                    workers.kill_random(rng)
                await asyncio.sleep(rng.uniform(0.2, 0.5))
            pytest.fail(f"not every run completed within {PATIENCE} s")

        await asyncio.wait_for(chaos(), PATIENCE + 10)
    finally:
        workers.kill_all()
        for engine in engines:
            engine.stop()
        await asyncio.wait_for(asyncio.gather(*loops, return_exceptions=True), 60)
    try:
        runs = [await engines[0].get_run(run_id) for run_id in ids]
        trails = [await engines[0].events(run_id) for run_id in ids]
        checkpoints = [await engines[0].checkpoints(run_id) for run_id in ids]
    finally:
        for engine in engines:
            await engine.close()

    assert restarted
    assert workers.kills >= 5, errors.read_text()[-2000:]
    assert [("completed", len(PLAN))] * RUNS == [(run.status, run.output) for run in runs]
    assert [1] * RUNS == [[e.name for e in trail].count("run.completed") for trail in trails]
    assert [["completed"] * len(PLAN)] * RUNS == [[c.status for c in cps] for cps in checkpoints]
    completions = Counter(
        (trail_run.run_id, e.seq)
        for trail_run, trail in zip(runs, trails, strict=True)
        for e in trail
        if e.name == "step.completed"
    )
    assert {1} == set(completions.values())
    assert RUNS * len(PLAN) == len(completions)
    local_seqs = [seq for seq, kind in enumerate(PLAN, start=1) if kind == "local"]
    assert {(run_id, seq): 1 for run_id in ids for seq in local_seqs} == dict(LOCAL_RUNS)
    assert [] == overlaps(log, workers.died)
    late: list[str] = []
    retried = 0
    for run_id, trail in zip(ids, trails, strict=True):
        wake = {
            (e.seq, e.data["attempt"] + 1): e.data["wake_at"]
            for e in trail
            if e.name == "step.retry_scheduled"
        }
        for e in trail:
            if e.name == "step.started" and (e.seq, e.data["attempt"]) in wake:
                retried += 1
                if e.at < wake[e.seq, e.data["attempt"]]:
                    late.append(f"{run_id}:{e.seq} attempt {e.data['attempt']} started early")
    assert [] == late
    assert retried >= RUNS  # every flaky step retried at least once
