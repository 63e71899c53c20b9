"""
``migrate.instrumentation.attach_otel``: a run is one trace of run, definition, window and read
spans (one per read attempt), with ids and counts and no item data; detach stops it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import migrate
from effects import retry
from migrate.instrumentation import attach_otel
from tests.migrate.helpers import FlakySource, config_of, noop

SENTINEL = "SENTINEL-a-record's-private-value"


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": str(i), "secret": f"{SENTINEL}-{i}"} for i in range(1, n + 1)]


@pytest.fixture
def traced() -> Iterator[tuple[InMemorySpanExporter, Any]]:
    """Every migration run traced into memory while the test runs; the exporter and detach."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    detach = attach_otel(tracer_provider=provider)
    yield exporter, detach
    detach()
    provider.shutdown()


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


def _parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _own(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def test_a_run_is_one_trace_of_run_definition_window_and_read_attempt_spans(
    tmp_path: Path, traced: tuple[InMemorySpanExporter, Any]
) -> None:
    """Two failed reads then one that works: three read spans under the first window."""
    exporter, _ = traced
    config = config_of(
        tmp_path,
        migrate.Migration(
            "people",
            FlakySource(_rows(5), read_failures=2),
            noop,
            source_cursor_retry=retry(times=4),
        ),
    )
    summary = migrate.run(config)
    assert "succeeded" == summary.status
    spans = exporter.get_finished_spans()
    (run,) = _by_name(spans, "migration.run")
    (definition,) = _by_name(spans, "migration.definition")
    windows = _by_name(spans, "migration.source.window")
    reads = _by_name(spans, "migration.source.read")
    assert {run.context.trace_id} == {s.context.trace_id for s in spans if s.context}  # type: ignore[union-attr]
    assert None is _parent(run)
    assert _own(run) == _parent(definition)
    assert [_own(definition)] * len(windows) == [_parent(w) for w in windows]
    assert [1, 2, 3] == [w.attributes["migration.window.index"] for w in windows]  # type: ignore[index]
    assert {_own(w) for w in windows} == {_parent(r) for r in reads}
    first = [r for r in reads if _parent(r) == _own(windows[0])]
    assert [1, 2, 3] == [r.attributes["migration.source.read.attempt"] for r in first]  # type: ignore[index]
    assert ["ERROR", "ERROR", "UNSET"] == [r.status.status_code.name for r in first]
    assert ["SourceError", "SourceError"] == [r.attributes["error.type"] for r in first[:2]]  # type: ignore[index]
    assert 2 == first[2].attributes["migration.source.read.records"]  # type: ignore[index]
    assert {
        "migration.run.id": summary.run_id,
        "migration.definition.id": "people",
        "migration.definition.mode": "normal",
        "migration.definition.status": "succeeded",
        "migration.items.migrated": 5,
    } == dict(definition.attributes or {})
    assert (summary.run_id, "succeeded", 5) == (
        run.attributes["migration.run.id"],  # type: ignore[index]
        run.attributes["migration.run.status"],  # type: ignore[index]
        run.attributes["migration.items.migrated"],  # type: ignore[index]
    )
    assert [2, 2, 1] == [w.attributes["migration.items.migrated"] for w in windows]  # type: ignore[index]
    shown = json.dumps([dict(s.attributes or {}) for s in spans])
    assert SENTINEL not in shown


def test_a_source_that_cannot_be_read_fails_its_window_definition_and_run(
    tmp_path: Path, traced: tuple[InMemorySpanExporter, Any]
) -> None:
    """Out of read attempts: the reads, the window, the definition and the run are ERROR."""
    exporter, _ = traced
    config = config_of(
        tmp_path,
        migrate.Migration(
            "down",
            FlakySource(_rows(3), read_failures=99),
            noop,
            source_cursor_retry=retry(times=1),
        ),
    )
    summary = migrate.run(config)
    assert "failed" == summary.status
    spans = exporter.get_finished_spans()
    statuses = {s.name: s.status.status_code.name for s in spans}
    assert {
        "migration.run": "ERROR",
        "migration.definition": "ERROR",
        "migration.source.window": "ERROR",
        "migration.source.read": "ERROR",
    } == statuses
    assert 2 == len(_by_name(spans, "migration.source.read"))
    errors = {s.name: (s.attributes or {}).get("error.type") for s in spans}
    assert {
        "migration.run": "MigrationFailed",
        "migration.definition": "DefinitionFailed",
        "migration.source.window": "SourceError",
        "migration.source.read": "SourceError",
    } == errors


def test_after_detach_runs_make_no_spans(
    tmp_path: Path, traced: tuple[InMemorySpanExporter, Any]
) -> None:
    """detach() stops tracing; calling it twice does nothing."""
    exporter, detach = traced
    detach()
    detach()
    config = config_of(tmp_path, migrate.Migration("quiet", migrate.MemorySource(_rows(2)), noop))
    assert "succeeded" == migrate.run(config).status
    assert () == exporter.get_finished_spans()
