"""
OpenTelemetry traces of migration runs: ``attach_otel()`` instruments every run of the process.

Spans, each a child of the one before: ``migration.run`` (attributes ``migration.run.id``,
``migration.run.mode``, and at its end ``migration.run.status`` and the items' counts
``migration.items.<outcome>``, the outcomes that are not 0), ``migration.definition`` (one per
definition the run processes: ``migration.run.id``, ``migration.definition.id``,
``migration.definition.mode``, its status and counts), ``migration.source.window`` (one per
window read and committed: ``migration.window.index`` from 1, and the window's counts), and
``migration.source.read`` (one per attempt to read the source, retries included:
``migration.source.read.attempt`` from 1, ``migration.source.read.records`` read). A span ends
with ERROR status and ``error.type`` when its work failed: a read's error class, a window whose
source could not be read (``SourceError``), a definition or run that did not succeed
(``DefinitionFailed``, ``MigrationFailed``), or the exception that left it. No span is made per
item (an item's evidence is in the store), and no attribute holds an item's data or an error's
message. Needs the ``otel`` extra (opentelemetry-api); importing this module never does.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Generator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from migrate._telemetry import SpanHandle, Value, add_observer

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["attach_otel"]

_SCOPE: Final = "migrate"


def _require(module: str, extra: str, adapter: str) -> ModuleType:
    """*module*, or an ``ImportError`` naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.partition(".")[0]
        msg = f"{adapter} needs {package}: pip install 'effect-schedules[{extra}]'"
        raise ImportError(msg, name=error.name) from error


class _Span:
    """A handle on one OpenTelemetry span."""

    __slots__ = ("_error", "discarded", "span")

    def __init__(self, span: Any, error: Any) -> None:
        self.span = span
        self._error = error
        self.discarded = False

    def set(self, key: str, value: Value) -> None:
        self.span.set_attribute(key, value)

    def failed(self, error_type: str) -> None:
        self.span.set_attribute("error.type", error_type)
        self.span.set_status(self._error)

    def discard(self) -> None:
        self.discarded = True


class _Tracer:
    """The observer ``attach_otel`` adds."""

    def __init__(self, trace: ModuleType, context: ModuleType, tracer: Any) -> None:
        self._trace = trace
        self._context = context
        self._tracer = tracer
        self._error = trace.Status(trace.StatusCode.ERROR)
        self.detached = False

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Value]) -> Generator[SpanHandle]:
        if self.detached:
            yield _Detached()
            return
        span = self._tracer.start_span(name, attributes=dict(attributes))
        token = self._context.attach(self._trace.set_span_in_context(span))
        handle = _Span(span, self._error)
        try:
            yield handle
        finally:
            self._context.detach(token)
            # A discarded span is never ended, so never exported.
            if not handle.discarded:
                span.end()


class _Detached:
    __slots__ = ()

    def set(self, key: str, value: Value) -> None:
        del key, value

    def failed(self, error_type: str) -> None:
        del error_type

    def discard(self) -> None:
        pass


def attach_otel(*, tracer_provider: TracerProvider | None = None) -> Callable[[], None]:
    """
    Trace every migration run of this process from now on (see the module docstring for the
    spans and their attributes); runs started in any thread are traced.

    Args:
        tracer_provider: Where spans go; default OpenTelemetry's global provider.

    Returns:
        ``detach()``: stop tracing (idempotent); spans already open end as they would.

    Raises:
        ImportError: Without opentelemetry-api (``pip install 'effect-schedules[otel]'``).
    """
    trace = _require("opentelemetry.trace", "otel", "attach_otel")
    context = _require("opentelemetry.context", "otel", "attach_otel")
    tracer = (
        trace.get_tracer(_SCOPE) if tracer_provider is None else tracer_provider.get_tracer(_SCOPE)
    )
    observer = _Tracer(trace, context, tracer)
    remove = add_observer(observer)

    def detach() -> None:
        observer.detached = True
        remove()

    return detach
