"""
An engine's recurring workflows at work: it writes each one's first step when the engine first
sees it, then steps the due ones and starts their runs, each step one compare-and-set with its
runs (``Store.write_recurring``), and knows when it has something to step next.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final

import attrs

from effects.durable._definitions import WorkflowDef
from effects.durable._probes import Probes, RunTrace
from effects.durable._recurring import Plan, Recurring, advance, first, run_id, schedule_key
from effects.durable._store import NewEvent, NewRun, RecurringRow, RecurringWrite, Store
from effects.durable._views import iso
from effects.durable.errors import StoreError
from schedules import RandomLike

__all__ = ["Recurrences", "Scheduled"]

_log: Final = logging.getLogger("effects.durable")
#: How long a recurring this engine leaves alone (another engine's schedule, a broken row) waits
#: before it looks at its row again, in ms.
_RECHECK_MS: Final = 60_000


@attrs.frozen
class Scheduled:
    """A recurring as an engine runs it: the value, its workflow as served, its input as stored."""

    recurring: Recurring
    workflow: WorkflowDef[Any, Any]
    input: str

    @property
    def key(self) -> str:
        """Its schedule's key (``schedule_key``)."""
        return schedule_key(self.recurring.schedule)


class Recurrences:
    """
    The recurring workflows of one engine and what it knows of their rows: when each is next to
    be stepped (kept in a heap, so the next time costs O(log n), and a poll reads only the rows
    that are due).

    What the engine knows may be early, never late: another engine's step only moves a row's
    time on, and a poll that finds a row not due (or a write refused) reads it again.
    """

    def __init__(
        self,
        *,
        store: Store,
        random: RandomLike,
        scheduled: Mapping[str, Scheduled],
        probes: Probes,
    ) -> None:
        self._store, self._random = store, random
        self._scheduled = dict(scheduled)
        self._probes = probes
        self._seen = False
        self._next: dict[str, int | None] = {}
        self._heap: list[tuple[int, str]] = []
        self._retry_at: int | None = None
        # What was said about each recurring left alone, so it is said once, not every poll.
        self._said: dict[str, str] = {}

    @property
    def active(self) -> bool:
        """Whether the engine has recurring workflows."""
        return bool(self._scheduled)

    def earliest(self) -> int | None:
        """When (epoch ms) a recurring of this engine is next to be stepped; ``None``: never."""
        if not self._scheduled:
            return None
        if not self._seen:
            return self._retry_at or 0
        heap, known = self._heap, self._next
        while heap and known.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        if not heap:
            return None
        return heap[0][0] if self._retry_at is None else max(heap[0][0], self._retry_at)

    def due(self, now: int) -> bool:
        """Whether something is to be stepped at epoch ms *now*."""
        earliest = self.earliest()
        return earliest is not None and earliest <= now

    def _known_due(self, now: int) -> list[str]:
        """
        The recurrings this engine knows to be due at *now*: the heap's entries at or before
        it, found from its root (O(due), not O(all)).
        """
        heap, known = self._heap, self._next
        found: list[str] = []
        below = [0]
        while below:
            i = below.pop()
            if i >= len(heap) or heap[i][0] > now:
                continue
            at, name = heap[i]
            if known.get(name) == at:
                found.append(name)
            below += (2 * i + 1, 2 * i + 2)
        return found

    def _know(self, name: str, at: int | None) -> None:
        self._next[name] = at
        if at is not None:
            heapq.heappush(self._heap, (at, name))

    async def poll(self, now: int, *, retry_ms: int = 1000) -> list[StoreError]:
        """
        Step what is due at epoch ms *now* (writing the first steps first, the first time) and
        start its runs; return the errors of the recurrings whose rows cannot be stepped (each
        logged once, its row left as it is). How many runs it started is logged.

        Raises:
            StoreError: If the store cannot be used (tried again *retry_ms* later).
        """
        self._retry_at = None
        try:
            broken: list[StoreError] = []
            if not self._seen:
                await self._register(now, broken)
                self._seen = True
            await self._step_due(now, broken)
        except StoreError:
            self._retry_at = now + retry_ms
            raise
        return broken

    # -- first sight -------------------------------------------------------------------------------

    async def _register(
        self, now: int, broken: list[StoreError], names: Sequence[str] | None = None
    ) -> None:
        """
        Read the rows of *names* (default: all of this engine's); write the first step of each
        that has none, and restart the grid of each whose schedule changed in the code.
        """
        wanted = sorted(self._scheduled) if names is None else list(names)
        stored = {row.name: row for row in await self._store.recurring(wanted)}
        writes: list[RecurringWrite] = []
        for name in wanted:
            scheduled = self._scheduled[name]
            row = stored.get(name)
            if row is not None and row.schedule == scheduled.key:
                self._know(name, row.next_at)
                continue
            made = partial(first, scheduled.recurring, now, self._random)
            plan = self._plan(broken, scheduled, made, now)
            if plan is None:
                continue
            created = now if row is None else row.created_at
            writes.append(
                RecurringWrite(
                    plan.row(scheduled.recurring, now=now, created_at=created, rev=0),
                    None if row is None else row.rev,
                )
            )
        landed = await self._store.write_recurring(writes) if writes else []
        again: list[str] = []
        for write, held in zip(writes, landed, strict=True):
            name = write.row.name
            if not held:
                again.append(name)  # another engine wrote it first: read what it wrote
                continue
            self._know(name, write.row.next_at)
            before = stored.get(name)
            if before is not None:
                _log.warning(
                    "recurring %r: its schedule changed from %s to %s; its recurrences restart"
                    " from now (next %s)",
                    name,
                    before.schedule,
                    write.row.schedule,
                    _when(write.row),
                )
        if again:
            for row in await self._store.recurring(again):
                self._adopt(row, now)

    def _adopt(self, row: RecurringRow, now: int) -> None:
        """Know *row* as read: this engine's to step, or (another schedule) left alone."""
        scheduled = self._scheduled[row.name]
        if row.schedule == scheduled.key:
            self._said.pop(row.name, None)
            self._know(row.name, row.next_at)
            return
        # Written by an engine whose code has another schedule for it (a deploy under way):
        # that engine steps it; this one looks again now and then.
        message = (
            f"recurring {row.name!r}: its row has schedule {row.schedule}, this engine's is"
            f" {scheduled.key}; it is left to the engines with that schedule"
        )
        if self._said.get(row.name) != message:
            self._said[row.name] = message
            _log.warning("%s", message)
        self._know(row.name, max(now, row.next_at or now) + _RECHECK_MS)

    def _plan(
        self,
        broken: list[StoreError],
        scheduled: Scheduled,
        make: Callable[[], Plan],
        now: int,
    ) -> Plan | None:
        """
        ``make()``, the plan of *scheduled*, or ``None`` if it raises: the error logged once and
        kept, and the recurring looked at again later.
        """
        try:
            plan = make()
        except (StoreError, TypeError) as error:
            name = scheduled.recurring.name
            error_ = error if isinstance(error, StoreError) else StoreError(str(error))
            broken.append(error_)
            if self._said.get(name) != str(error_):
                self._said[name] = str(error_)
                _log.error("%s", error_)
            self._know(name, now + _RECHECK_MS)
            return None
        return plan

    # -- due times ---------------------------------------------------------------------------------

    async def _step_due(self, now: int, broken: list[StoreError]) -> None:
        if self.earliest() is None or not self.due(now):
            return
        rows = {
            r.name: r for r in await self._store.due_recurring(now) if r.name in self._scheduled
        }
        # Due as this engine knew them, but not due in the store: stepped by another engine
        # (or the row is gone); read them again.
        stale = [name for name in self._known_due(now) if name not in rows]
        if stale:
            found = {row.name: row for row in await self._store.recurring(stale)}
            for name in stale:
                row = found.get(name)
                if row is None:
                    await self._register(now, broken, [name])
                else:
                    self._adopt(row, now)
        steps: list[tuple[Scheduled, RecurringRow, Plan]] = []
        for name, row in rows.items():
            scheduled = self._scheduled[name]
            if row.schedule != scheduled.key:
                self._adopt(row, now)
                continue
            made = partial(advance, scheduled.recurring, row, now, self._random)
            plan = self._plan(broken, scheduled, made, now)
            if plan is not None:
                steps.append((scheduled, row, plan))
        if steps:
            await self._write(steps, now)

    async def _write(self, steps: Sequence[tuple[Scheduled, RecurringRow, Plan]], now: int) -> None:
        writes: list[RecurringWrite] = []
        traces: list[list[RunTrace]] = []
        for scheduled, row, plan in steps:
            starts, made = self._starts(scheduled, plan, now)
            writes.append(
                RecurringWrite(
                    plan.row(scheduled.recurring, now=now, created_at=row.created_at, rev=row.rev),
                    row.rev,
                    starts,
                )
            )
            traces.append(made)
        landed = await self._store.write_recurring(writes)
        lost: list[str] = []
        for (scheduled, _, plan), write, made, held in zip(
            steps, writes, traces, landed, strict=True
        ):
            name = scheduled.recurring.name
            if not held:
                lost.append(name)
                continue
            self._know(name, plan.next_at)
            for trace in made:
                trace.made()
            for run, _ in write.starts:
                _log.info("recurring %r: started run %s", name, run.run_id)
            if plan.skipped:
                _log.warning(
                    "recurring %r: %d missed recurrence(s) not started (catch_up=%r)",
                    name,
                    plan.skipped,
                    scheduled.recurring.catch_up,
                )
            if plan.next_at is None:
                _log.info("recurring %r: its schedule is done; no more runs", name)
        if lost:
            # Another engine stepped them first: read where they are now.
            for row in await self._store.recurring(lost):
                self._adopt(row, now)

    def _starts(
        self, scheduled: Scheduled, plan: Plan, now: int
    ) -> tuple[list[tuple[NewRun, NewEvent]], list[RunTrace]]:
        workflow = scheduled.workflow
        name = scheduled.recurring.name
        starts: list[tuple[NewRun, NewEvent]] = []
        traces: list[RunTrace] = []
        for due in plan.starts:
            made = run_id(name, due)
            trace = self._probes.run_trace(made, workflow.name, now)
            traces.append(trace)
            run = NewRun(
                made,
                workflow.name,
                workflow.version,
                scheduled.input,
                now,
                traceparent=trace.traceparent,
                deadline=None if workflow.timeout_ms is None else now + workflow.timeout_ms,
            )
            data = {"workflow": workflow.name, "recurring": name, "due_at": due}
            starts.append((run, NewEvent("run.started", now, None, data)))
        return starts, traces


def _when(row: RecurringRow) -> str:
    if row.next_at is None:
        return "never: the schedule is done"
    return f"{'due' if row.recurs else 'step'} at {iso(row.next_at)}"
