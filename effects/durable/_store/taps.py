"""
A store's taps: who hears the events each of its transactions wrote, right after the commit.

A store object keeps one ``Taps``; ``Store.tap`` adds an observer. While it has none, a store
collects nothing (each dialect checks ``Taps.active``, one attribute load, before anything else),
so an engine without listeners pays nothing on its writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final

from effects.durable._records import Event
from effects.durable._store.rows import dumps
from effects.durable._store.trail import EventRow

__all__ = ["Observer", "Taps", "local_step_rows"]

_log: Final = logging.getLogger("effects.durable")

#: What a tap calls: the events one transaction wrote, in their order.
Observer = Callable[[Sequence[Event]], None]

_FIRST_LOCAL: Final = dumps({"attempt": 1, "kind": "local"})


def local_step_rows(run_id: str, seq: int, started: int, now: int) -> list[EventRow]:
    """
    The events ``Engine.events`` derives from a local step that succeeded on its first attempt
    (``merge_events``): its ``step.started`` at *started* and its ``step.completed`` at *now*.
    """
    return [
        (run_id, seq, "step.started", "info", started, _FIRST_LOCAL),
        (run_id, seq, "step.completed", "info", now, _FIRST_LOCAL),
    ]


class Taps:
    """The observers of one store object (a copy-on-write tuple, read with no lock)."""

    __slots__ = ("observers",)

    def __init__(self) -> None:
        self.observers: tuple[Observer, ...] = ()

    @property
    def active(self) -> bool:
        """Whether anyone listens."""
        return bool(self.observers)

    def add(self, observer: Observer) -> Callable[[], None]:
        """Add *observer*; return its remover (calling it again does nothing)."""
        if not callable(observer):
            msg = f"a store's tap takes a callable, got {observer!r}"
            raise TypeError(msg)
        self.observers = (*self.observers, observer)
        removed = False

        def remove() -> None:
            nonlocal removed
            if removed:
                return
            removed = True
            index = next(i for i, o in enumerate(self.observers) if o is observer)
            self.observers = self.observers[:index] + self.observers[index + 1 :]

        return remove

    def deliver(self, events: Sequence[Event]) -> None:
        """Tell every observer *events* (a committed transaction's); one that raises is logged."""
        if not events:
            return
        for observer in self.observers:
            try:
                observer(events)
            except Exception:  # noqa: BLE001 - the write has committed; nothing may undo it
                _log.exception("an observer of store events raised; ignored")
