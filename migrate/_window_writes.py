"""
Destination writes a window commits together: one connection and one transaction per
destination database per window, committed before the window's item states.

While a run processes a window, `current_writes` gives that window's `WindowWrites` (a context
variable, so the tasks and worker threads of ``concurrency > 1`` see it too). A destination that
can batch asks it for its `Batch` and notes which item wrote; the window loop then `finish`\\ es
it: every batch sends what it queued (a write refused then fails its item alone: a
`RowFailure`) and commits, and the items that wrote to a batch whose commit failed fail with it.
Outside a run there is no window, and destinations write and commit per call.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Hashable
from contextvars import ContextVar
from typing import Any, Protocol

import attrs

__all__ = ["Batch", "BatchFailure", "RowFailure", "WindowWrites", "current_writes", "writing"]


class Batch(Protocol):
    """One destination database's open transaction for a window."""

    def flush(self) -> list[RowFailure]:
        """Send the writes queued to go together; the ones refused, each undone alone."""
        ...

    def commit(self) -> None:
        """Commit what the window wrote, and let the connection go; raises if it failed."""
        ...

    def rollback(self) -> None:
        """Undo what the window wrote, and let the connection go; never raises."""
        ...


@attrs.frozen
class RowFailure:
    """
    A queued write the database refused when its batch was sent: it fails its item alone.

    Attributes:
        name: The destination.
        identity: The item that made the write.
        error: Why (a `DestinationError` whose traceback is the process's call).
        journal: The item's journal entries without the refused write's entry, or ``None`` if
            the item has none left.
    """

    name: str
    identity: str
    error: BaseException
    journal: list[dict[str, Any]] | None


@attrs.frozen
class BatchFailure:
    """A batch whose commit failed: which destination, why, and the items that wrote to it."""

    name: str
    error: BaseException
    identities: tuple[str, ...]


class WindowWrites:
    """The batches of one window (see the module docstring). Thread-safe."""

    def __init__(self, *, one_thread: bool = False) -> None:
        #: Whether the window's items run in the thread that made it, one at a time, and
        #: `finish` is called there too: a batch may then use its connection in that thread.
        self.one_thread = one_thread
        self._lock = threading.Lock()
        self._batches: dict[Hashable, tuple[str, Batch, dict[str, None]]] = {}
        self._closed = False

    def batch(
        self, key: Hashable, name: str, make: Callable[[WindowWrites], Batch]
    ) -> Batch | None:
        """
        The window's batch for *key* (made with ``make(self)`` on first use), or ``None`` once
        the window is over (a call still running in an abandoned thread writes on its own then).
        """
        with self._lock:
            if self._closed:
                return None
            found = self._batches.get(key)
            if found is None:
                writers: dict[str, None] = {}
                found = (name, make(self), writers)
                self._batches[key] = found
            return found[1]

    def wrote(self, key: Hashable, identity: str) -> None:
        """Note that the item *identity* wrote through the batch of *key*."""
        # No lock: a batch, once made, stays; its writers dict takes one key at a time.
        found = self._batches.get(key)
        if found is not None:
            found[2][identity] = None

    def names(self) -> list[str]:
        """The destinations with a batch open in this window, in the order they opened."""
        with self._lock:
            return [name for name, _batch, _writers in self._batches.values()]

    def finish(self) -> tuple[list[RowFailure], list[BatchFailure]]:
        """
        Send and commit every batch; return the writes refused when sent (each failing its item
        alone) and the batches whose sending or commit failed (they are rolled back).
        """
        with self._lock:
            self._closed = True
            batches = list(self._batches.values())
        rows: list[RowFailure] = []
        failures: list[BatchFailure] = []
        for name, batch, identities in batches:
            try:
                refused = batch.flush()
                batch.commit()
            except Exception as error:  # noqa: BLE001 - reported as the items' failure
                batch.rollback()
                failures.append(BatchFailure(name, error, tuple(identities)))
            else:
                rows.extend(refused)
        return rows, failures

    def abandon(self) -> None:
        """Roll every batch back (the window's states will not be committed either)."""
        with self._lock:
            self._closed = True
            batches = list(self._batches.values())
        for _name, batch, _identities in batches:
            batch.rollback()


_WRITES: ContextVar[WindowWrites | None] = ContextVar("migrate_window_writes", default=None)


def current_writes() -> WindowWrites | None:
    """The window being processed in this thread or task, if any."""
    return _WRITES.get()


@contextlib.contextmanager
def writing(writes: WindowWrites) -> Generator[WindowWrites]:
    """Make *writes* the current window's for the code run inside (and what it starts)."""
    token = _WRITES.set(writes)
    try:
        yield writes
    finally:
        _WRITES.reset(token)
