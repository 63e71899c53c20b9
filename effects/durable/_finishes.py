"""
What ``Engine.wait`` and ``Engine.get_event`` learn in memory: the runs that turns of its engine
finish, and the events they set.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Final

from effects.durable._records import Run

__all__ = ["Finishes"]

# The most runs remembered as suspended here by their last turn, waiting for results.
_WAITING_HERE_MAX: Final = 10_000


class Finishes:
    """
    The waiters of ``wait()`` by run id, the runs in a turn of this engine now, and the runs whose
    last turn here suspended them to wait for results (bounded: the oldest are forgotten). A
    turn that finishes its run answers the run's waiters with it; any other end of a turn
    answers ``None`` (read the store).
    """

    __slots__ = ("_in_turn", "event_waiters", "waiters", "waiting_here")

    def __init__(self) -> None:
        self.waiters: dict[str, list[asyncio.Future[Run | None]]] = {}
        #: The waiters of ``get_event`` by run id: told when a turn here sets an event of it.
        self.event_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._in_turn: collections.Counter[str] = collections.Counter()
        self.waiting_here: dict[str, None] = {}

    def watch(self, run_id: str, waiter: asyncio.Future[Run | None]) -> None:
        """Answer *waiter* when a turn of the run here ends."""
        self.waiters.setdefault(run_id, []).append(waiter)

    def unwatch(self, run_id: str, waiter: asyncio.Future[Run | None]) -> None:
        """Forget *waiter*."""
        waiters = self.waiters[run_id]
        waiters.remove(waiter)
        if not waiters:
            del self.waiters[run_id]

    def known(self, run_id: str) -> bool:
        """
        Whether the run is in a turn of this engine, or its last turn here suspended it to wait
        for results: its finish is then told in memory, with nothing to read first (a run
        another engine takes up meanwhile is read at the next poll).
        """
        return run_id in self._in_turn or run_id in self.waiting_here

    def began(self, run_id: str) -> None:
        """A turn of the run is spawned here (counted at once, before it runs)."""
        self._in_turn[run_id] += 1

    def finished(self, run: Run) -> None:
        """A turn of this engine finished *run* (as stored): hand it to whoever waits for it."""
        for waiter in self.waiters.get(run.run_id, ()):
            if not waiter.done():
                waiter.set_result(run)

    def ended(self, run_id: str, *, waits: bool) -> None:
        """
        A turn of the run ended (*waits*: it suspended the run to wait for results alone):
        whoever waits for the run and has no answer reads.
        """
        self._in_turn[run_id] -= 1
        if not self._in_turn[run_id]:
            del self._in_turn[run_id]
        for waiter in self.waiters.get(run_id, ()):
            if not waiter.done():
                waiter.set_result(None)
        self.waiting_here.pop(run_id, None)
        if waits:
            self.waiting_here[run_id] = None
            if len(self.waiting_here) > _WAITING_HERE_MAX:
                del self.waiting_here[next(iter(self.waiting_here))]

    def watch_events(self, run_id: str, waiter: asyncio.Future[None]) -> None:
        """Answer *waiter* when a turn here sets an event of the run."""
        self.event_waiters.setdefault(run_id, []).append(waiter)

    def unwatch_events(self, run_id: str, waiter: asyncio.Future[None]) -> None:
        """Forget *waiter*."""
        waiters = self.event_waiters[run_id]
        waiters.remove(waiter)
        if not waiters:
            del self.event_waiters[run_id]

    def event_set(self, run_id: str) -> None:
        """A turn here set an event of the run: its ``get_event`` waiters read it."""
        for waiter in self.event_waiters.get(run_id, ()):
            if not waiter.done():
                waiter.set_result(None)
