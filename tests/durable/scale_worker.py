"""
The scale test's workflow, steps and worker process: ``python -m tests.durable.scale_worker URL
LOG`` serves the dispatched steps on the store at URL until killed, appending one line to LOG as
each attempt starts (``S``) and ends (``E``): ``S|E step_id attempt pid time_ns``.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from collections import Counter
from typing import Final

from effects.durable import Engine, WorkflowContext, current_step, step, workflow

#: The workflow's steps: local ones run in the orchestrating engines, the rest are dispatched.
PLAN: Final = (
    "local",
    "bump",
    "local",
    "local",
    "flaky",
    "local",
    "bump",
    "local",
    "bump",
    "local",
)
#: Each local step's executions, by (run_id, seq): the test checks each ran once.
LOCAL_RUNS: Counter[tuple[str, int]] = Counter()
WORKER_LEASE_MS: Final = 1000

_log_fd: int | None = None


def _record(kind: str) -> None:
    if _log_fd is None:
        return
    context = current_step()
    line = f"{kind} {context.step_id} {context.attempt} {os.getpid()} {time.time_ns()}\n"
    # One small write to an O_APPEND file: whole lines even when a process is killed mid-run.
    os.write(_log_fd, line.encode())


async def _work(n: int) -> int:
    _record("S")
    try:
        await asyncio.sleep(random.uniform(0.001, 0.01))
    finally:
        _record("E")
    return n + 1


@step("scale:bump", retries=30, backoff_ms=20)
async def bump(n: int) -> int:
    """Add one, taking a few ms."""
    return await _work(n)


@step("scale:flaky", retries=30, backoff_ms=150)
async def flaky(n: int) -> int:
    """Add one, failing (retryably) on its first attempt: a durable retry with a wake_at."""
    if current_step().attempt == 1:
        _record("S")
        _record("E")
        msg = "flaky: fails on its first attempt"
        raise ConnectionError(msg)
    return await _work(n)


@workflow("scale:ten")
async def ten(ctx: WorkflowContext, n: int) -> int:
    """Ten steps: six local, four dispatched (one of them flaky)."""
    for seq, kind in enumerate(PLAN, start=1):
        if kind == "local":

            def local(seq: int = seq, n: int = n) -> int:
                LOCAL_RUNS[ctx.run_id, seq] += 1
                return n + 1

            n = await ctx.local_step(f"local-{seq}", local)
        else:
            n = await ctx.step(bump if kind == "bump" else flaky, n)
    return n


async def _serve(url: str) -> None:
    async with Engine(url, steps=[bump, flaky], lease_ms=WORKER_LEASE_MS) as engine:
        await engine.work(poll_ms=100, concurrency=8)


def main() -> int:
    """Serve the steps until killed."""
    global _log_fd  # noqa: PLW0603 - the process's one log, set once at start
    url, log = sys.argv[1], sys.argv[2]
    _log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    print("ready", flush=True)
    asyncio.run(_serve(url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
