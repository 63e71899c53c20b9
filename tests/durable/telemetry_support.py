"""
What the telemetry tests share: OpenTelemetry SDK providers reading into memory, spans and metric
points as plain JSON data (so a worker process can hand its own back in a file), the app of the
cross-process test, and that worker's entry point.

Run as ``python -m tests.durable.telemetry_support URL OUT.json`` (from the repository root): an
engine serving ``flaky`` with ``attach_otel`` runs what is due once, then writes its spans and
metric points to ``OUT.json``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from effects.durable import Engine, WorkflowContext, current_step, step, workflow
from effects.durable.instrumentation import attach_otel

#: What the runs' inputs carry, to be found in no attribute, event or label.
SENTINEL = "SENTINEL-7f3a-secret-input"


@step("flaky", retries=3, backoff_ms=0)
async def flaky(value: str) -> str:
    """Fail attempts 1 and 2 (the message holds the input); succeed on attempt 3."""
    if current_step().attempt < 3:
        msg = f"refused {value}"
        raise ConnectionError(msg)
    return f"ok {value}"


@workflow("traced")
async def traced(ctx: WorkflowContext, value: str) -> str:
    """One dispatched step."""
    return await ctx.step(flaky, value)


class Telemetry:
    """An SDK tracer provider and meter provider of this process, reading into memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def attach(self, engine: Engine) -> Any:
        """``attach_otel`` of *engine* to these providers; its ``detach``."""
        return attach_otel(
            engine, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def spans(self) -> list[dict[str, Any]]:
        """The finished spans as data (``span_data``)."""
        return [span_data(s) for s in self.exporter.get_finished_spans()]

    def points(self) -> list[dict[str, Any]]:
        """The metric points as data (``metric_points``)."""
        return metric_points(self.reader)

    def shutdown(self) -> None:
        """Shut both providers down (no warning about open ones at exit)."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def span_data(span: ReadableSpan) -> dict[str, Any]:
    """A span's name, ids (hex), parent, attributes, events, status and times, as JSON data."""
    context = span.context
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent": None if span.parent is None else f"{span.parent.span_id:016x}",
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "status": span.status.status_code.name,
        "start": span.start_time,
        "end": span.end_time,
    }


def metric_points(reader: InMemoryMetricReader) -> list[dict[str, Any]]:
    """Every point read now: metric name, attributes, and value (a sum, or a histogram count)."""
    found: list[dict[str, Any]] = []
    data = reader.get_metrics_data()
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    found.append(
                        {
                            "name": metric.name,
                            "unit": metric.unit,
                            "attributes": dict(point.attributes or {}),
                            "value": getattr(point, "count", None) if value is None else value,
                        }
                    )
    return found


def counts(points: Sequence[dict[str, Any]], name: str, key: str) -> dict[str, int]:
    """The values of metric *name* summed by its attribute *key*."""
    summed: dict[str, int] = {}
    for point in points:
        if point["name"] == name:
            label = point["attributes"][key]
            summed[label] = summed.get(label, 0) + point["value"]
    return summed


async def _serve_once(url: str, out: Path) -> None:
    telemetry = Telemetry()
    async with Engine(url, steps=[flaky]) as engine:
        telemetry.attach(engine)
        await engine.run_until_idle()
    out.write_text(json.dumps({"spans": telemetry.spans(), "points": telemetry.points()}))
    telemetry.shutdown()


if __name__ == "__main__":
    asyncio.run(_serve_once(sys.argv[1], Path(sys.argv[2])))
