"""
``CrashingStore``: a ``Store`` that delegates to the store its URL names (SQLite or PostgreSQL) and
kills its own process at one chosen persistence point, so a test can show what a crash at exactly
that write leaves behind.

The process dies by ``os._exit(137)``: no ``finally`` block, no ``atexit``, no lease released,
which is what a ``kill -9`` or a power cut of the process leaves. Just before dying it writes the
point's name to a marker file, so a test knows the crash happened where it meant it to.

``CountingStore``: a store that logs every heartbeat write it receives.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from effects.durable import Task
from effects.durable._engine import open_store
from effects.durable._store import ClaimedRun, TaskOutcome, TurnCommit

#: The points, with when the process dies there:
POINTS: dict[str, str] = {
    "dispatch": "after the commit that writes the first pending checkpoint and its task",
    "claim": "after a worker's claim of a task commits (the handler never runs)",
    "result-lost": "after the handler ran, before its result is recorded",
    "result": "after a worker's result is recorded",
    "wake-at": "after the commit that stamps wake_at on a failed attempt",
    "redispatch": "after the commit that dispatches attempt 2",
    "local-backoff": "half-way through a local step's in-memory backoff",
    "local-done": "after a retried local step's outcome is committed",
    "local-first": "after the fast-path commit of a local step that succeeded at once",
    "run-claim": "after a turn's claim of the run commits (its lease is then held by no one)",
    "finish": "after the workflow returned, before the run's completion is committed",
}
#: The points of a durable timer (``ctx.sleep``), apart from ``POINTS`` (whose every point the
#: fault-injection workflow meets).
TIMER_POINTS: dict[str, str] = {
    "sleep-arm": "after the commit that writes the pending sleep and suspends the run",
    "sleep-due": "when a turn finds the sleep due, before it completes it",
    "sleep-fire": "after the commit that completes the sleep",
}
#: Every point a ``CrashingStore`` knows.
ALL_POINTS: dict[str, str] = {**POINTS, **TIMER_POINTS}


def _commit_point(commit: TurnCommit) -> str | None:
    """Which persistence point a turn's commit is, if any."""
    if commit.advance.action == "finish":
        return "finish"
    for write in commit.checkpoints:
        if write.checkpoint.kind == "sleep":
            return "sleep-arm" if write.checkpoint.status == "pending" else "sleep-fire"
    if commit.tasks:
        return "dispatch" if commit.tasks[0].attempt == 1 else "redispatch"
    for write in commit.checkpoints:
        cp = write.checkpoint
        if cp.kind == "remote" and cp.status == "failed" and cp.wake_at is not None:
            return "wake-at"
        if cp.kind == "local" and cp.status == "completed":
            return "local-done"
    if any(e.name == "step.retry_scheduled" for e in commit.events):
        return "local-backoff"
    return None


def _backoff_ms(commit: TurnCommit) -> int:
    (event,) = [e for e in commit.events if e.name == "step.retry_scheduled"]
    delay: int = event.data["delay_ms"]
    return delay


class CrashingStore:
    """
    The store on *url* whose process dies at the first write that is *point*.

    Its calls are made one at a time. A PostgreSQL store awaits the server, so without that
    another loop of the process (woken by the write's own NOTIFY) could claim or write between
    the write and the death; serialized, nothing of the process reaches the store after the
    write, as with SQLite, whose calls do not yield.

    Args:
        url: The store URL (``sqlite:///...`` or ``postgresql://...``).
        point: One of ``POINTS``.
        marker: The file to write *point* to just before dying.
    """

    def __init__(self, url: str, point: str, marker: Path) -> None:
        if point not in ALL_POINTS:
            msg = f"unknown crash point {point!r}; known: {', '.join(ALL_POINTS)}"
            raise ValueError(msg)
        self._inner = open_store(url)
        self.url = url
        self._point = point
        self._marker = marker
        self._one_at_a_time = asyncio.Lock()

    def __getattr__(self, name: str) -> Any:
        # Every method that is no persistence point of ours goes to the store, one at a time.
        found = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(found):
            return found

        async def serialized(*args: Any, **kwargs: Any) -> Any:
            async with self._one_at_a_time:
                return await found(*args, **kwargs)

        return serialized

    def _die(self) -> None:
        self._marker.write_text(self._point)
        os._exit(137)

    async def commit_turn(self, commit: TurnCommit) -> None:
        """Commit, dying before or after as the point asks."""
        point = _commit_point(commit)
        async with self._one_at_a_time:
            # Before the write: the run's completion, or a due sleep's.
            if (self._point, point) in (("finish", "finish"), ("sleep-due", "sleep-fire")):
                self._die()
            await self._inner.commit_turn(commit)
            if point != self._point:
                return
            if point == "local-backoff":
                # The turn is about to sleep: die in the middle of that sleep.
                delay = _backoff_ms(commit) / 2000
                asyncio.get_running_loop().call_later(delay, self._die)
                return
            self._die()

    async def record_local_step(self, run_id: str, token: str, **kwargs: Any) -> None:
        """Record a first-time local success, dying after it when the point asks."""
        async with self._one_at_a_time:
            await self._inner.record_local_step(run_id, token, **kwargs)
            if self._point == "local-first":
                self._die()

    async def claim_runs(self, **kwargs: Any) -> list[ClaimedRun]:
        """Claim runs, dying after the claim when it took one and the point asks."""
        async with self._one_at_a_time:
            claimed = await self._inner.claim_runs(**kwargs)
            if claimed and self._point == "run-claim":
                self._die()
            return claimed

    async def claim_tasks(self, **kwargs: Any) -> list[Task]:
        """Claim tasks, dying after the claim when it took one and the point asks."""
        async with self._one_at_a_time:
            tasks: Sequence[Task] = await self._inner.claim_tasks(**kwargs)
            if tasks and self._point == "claim":
                self._die()
            return list(tasks)

    async def record_result(self, task: Task, worker: str, outcome: TaskOutcome, now: int) -> bool:
        """Record a result, dying before or after it as the point asks."""
        async with self._one_at_a_time:
            if self._point == "result-lost":
                self._die()
            recorded = await self._inner.record_result(task, worker, outcome, now)
            if self._point == "result":
                self._die()
            return recorded


class CountingStore:
    """
    The store on *url* (SQLite or PostgreSQL), appending a line (the beat's epoch ms) to *log*
    for every heartbeat write it receives, so a test can count a worker process's writes.
    """

    def __init__(self, url: str, log: Path) -> None:
        self._inner = open_store(url)
        self.url = url
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def heartbeat(
        self, task: Task, *, now: int, progress: str | None, lease_until: int | None
    ) -> bool:
        """Log the write, then persist the beat."""
        line = f"{now}\n".encode()
        fd = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return await self._inner.heartbeat(
            task, now=now, progress=progress, lease_until=lease_until
        )
