"""
The observers of migration runs: where ``migrate.instrumentation.attach_otel`` hooks in.

The run, each definition, each window and each attempt to read the source open a span here
(``span``); while no observer is attached, ``span`` yields a handle that does nothing, and the
source's reads are not wrapped at all, so a run pays nothing for it.

The observers are process-wide, in a lock-guarded copy-on-write tuple (the registry of
``effects.add_hook`` works the same way, for the same reason): ``attach_otel()`` is called once
at start-up and must see every run of the process, also those started later in another thread
(the CLI's worker threads, a durable engine's step threads) or in an ``asyncio`` task, whose
contexts a context variable set at start-up would not reach.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Mapping
from typing import Final, Protocol, TypeVar

from returns.result import Failure, Result

__all__ = ["Observer", "SpanHandle", "add_observer", "observed_read", "span"]

_T = TypeVar("_T")
_X = TypeVar("_X")
#: An attribute value as OpenTelemetry takes it.
Value = str | int | float | bool


class SpanHandle(Protocol):
    """What the code inside a span tells it."""

    def set(self, key: str, value: Value) -> None:
        """Set attribute *key*."""
        ...

    def failed(self, error_type: str) -> None:
        """Mark the span failed, with ``error.type`` *error_type*."""
        ...

    def discard(self) -> None:
        """Drop the span: it turned out to hold no work (a window loop that was already done)."""
        ...


class Observer(Protocol):
    """A tracer of migration runs."""

    def span(
        self, name: str, attributes: Mapping[str, Value]
    ) -> contextlib.AbstractContextManager[SpanHandle]:
        """A span *name* with *attributes*, current for the code inside it."""
        ...


class _Nothing:
    __slots__ = ()

    def set(self, key: str, value: Value) -> None:
        del key, value

    def failed(self, error_type: str) -> None:
        del error_type

    def discard(self) -> None:
        pass


_NOTHING: Final = _Nothing()


class _Fan:
    """One handle telling several observers' spans."""

    __slots__ = ("handles",)

    def __init__(self, handles: list[SpanHandle]) -> None:
        self.handles = handles

    def set(self, key: str, value: Value) -> None:
        for handle in self.handles:
            handle.set(key, value)

    def failed(self, error_type: str) -> None:
        for handle in self.handles:
            handle.failed(error_type)

    def discard(self) -> None:
        for handle in self.handles:
            handle.discard()


class _Registry:
    __slots__ = ("_lock", "observers")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.observers: tuple[Observer, ...] = ()

    def add(self, observer: Observer) -> Callable[[], None]:
        with self._lock:
            self.observers = (*self.observers, observer)
        removed = False

        def remove() -> None:
            nonlocal removed
            with self._lock:
                if removed:
                    return
                removed = True
                index = next(i for i, o in enumerate(self.observers) if o is observer)
                self.observers = self.observers[:index] + self.observers[index + 1 :]

        return remove


_REGISTRY: Final = _Registry()


def add_observer(observer: Observer) -> Callable[[], None]:
    """Observe every migration run of the process from now on; return the remover."""
    return _REGISTRY.add(observer)


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, Value]) -> Generator[SpanHandle]:
    """
    A span *name* in every observer (nothing without one). An exception that leaves it marks it
    failed with the exception's class as ``error.type``.
    """
    observers = _REGISTRY.observers
    if not observers:
        yield _NOTHING
        return
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(o.span(name, attributes)) for o in observers]
        handle: SpanHandle = handles[0] if len(handles) == 1 else _Fan(handles)
        try:
            yield handle
        except BaseException as error:
            handle.failed(type(error).__qualname__)
            raise


def observed_read(
    run: Callable[[], Result[_T, _X]], attributes: Mapping[str, Value], count: Callable[[_T], int]
) -> Callable[[], Result[_T, _X]] | None:
    """
    *run* (one read of a source), each call in a ``migration.source.read`` span numbered by
    attempt (``migration.source.read.attempt``, from 1), with the records it read
    (``migration.source.read.records``, from *count*) or its failure. ``None`` without an
    observer (the read is then not wrapped at all).
    """
    if not _REGISTRY.observers:
        return None
    attempts = 0

    def read() -> Result[_T, _X]:
        nonlocal attempts
        attempts += 1
        with span("migration.source.read", attributes) as handle:
            handle.set("migration.source.read.attempt", attempts)
            outcome = run()
            if isinstance(outcome, Failure):
                handle.failed(type(outcome.failure()).__qualname__)
            else:
                handle.set("migration.source.read.records", count(outcome.unwrap()))
            return outcome

    return read
