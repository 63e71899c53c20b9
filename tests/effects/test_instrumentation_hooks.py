"""
``effects.instrumentation``: the OpenTelemetry, Prometheus and structlog hooks count and log each
failed attempt by outcome, name the error's class, never its message, and stop on ``detach``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry
from structlog.testing import CapturingLogger

from effects import Effect, RetryBudget, retry
from effects.instrumentation import otel_hook, prometheus_hook, structlog_hook

SENTINEL = "SENTINEL-secret-in-an-error-message"


class Outer:
    """Holds an error class, so its ``__qualname__`` differs from its ``__name__``."""

    class FlakyError(Exception):
        """The error the calls fail with."""


def _calls() -> None:
    """One call failing twice then succeeding; one failing every time (three attempts)."""
    failures = iter([Outer.FlakyError(SENTINEL)] * 2)

    @retry(times=2, on=Outer.FlakyError, name="flaky")
    def flaky() -> str:
        error = next(failures, None)
        if error is not None:
            raise error
        return "ok"

    @retry(times=2, on=Outer.FlakyError, name="broken")
    def broken() -> str:
        raise Outer.FlakyError(SENTINEL)

    assert "ok" == flaky()
    with pytest.raises(Outer.FlakyError):
        broken()


def _budgeted() -> None:
    """A call whose retry a spent budget refuses."""
    budget = RetryBudget(ratio=0.0, min_per_second=0.0, window=10.0)
    with pytest.raises(KeyError):
        Effect.fail(KeyError("id")).pipe(
            retry(times=3, budget=budget, name="budgeted")
        ).run_or_raise()


@pytest.fixture
def meter() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    """A meter provider of its own and its in-memory reader, shut down after the test."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    provider.shutdown()


def _points(reader: InMemoryMetricReader) -> dict[tuple[str, str, str], int]:
    data = reader.get_metrics_data()
    assert data is not None
    (metric,) = [m for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
    assert ("effects.retries", "{attempt}") == (metric.name, metric.unit)
    return {
        (
            p.attributes["retry.name"],
            p.attributes["error.type"],
            p.attributes["retry.outcome"],
        ): p.value
        for p in metric.data.data_points
        if p.attributes is not None
    }


def test_otel_hook_counts_each_failed_attempt_by_outcome_and_error_class(
    meter: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    """retry, give_up and budget_exhausted, by name and the class's qualified name."""
    provider, reader = meter
    detach = otel_hook(meter_provider=provider)
    try:
        _calls()
        _budgeted()
    finally:
        detach()
        detach()
    _calls()  # detached: not counted
    assert {
        ("flaky", "Outer.FlakyError", "retry"): 2,
        ("broken", "Outer.FlakyError", "retry"): 2,
        ("broken", "Outer.FlakyError", "give_up"): 1,
        ("budgeted", "KeyError", "budget_exhausted"): 1,
    } == _points(reader)
    assert SENTINEL not in repr(reader.get_metrics_data())


def test_prometheus_hook_counts_into_its_registry_and_detach_unregisters() -> None:
    """effects_retries_total{name, error_type, outcome}; a second hook on one registry: refused."""
    registry = CollectorRegistry()
    detach = prometheus_hook(registry=registry)
    with pytest.raises(ValueError, match="this registry has effects_retries already"):
        prometheus_hook(registry=registry)
    _calls()
    _budgeted()

    def sample(name: str, outcome: str, error_type: str = "Outer.FlakyError") -> float | None:
        labels = {"name": name, "error_type": error_type, "outcome": outcome}
        return registry.get_sample_value("effects_retries_total", labels)

    assert [2.0, 2.0, 1.0, None, 1.0] == [
        sample("flaky", "retry"),
        sample("broken", "retry"),
        sample("broken", "give_up"),
        sample("flaky", "give_up"),
        sample("budgeted", "budget_exhausted", "KeyError"),
    ]
    detach()
    detach()
    assert sample("flaky", "retry") is None
    again = prometheus_hook(registry=registry)
    _calls()
    again()
    text = "".join(str(m) for m in registry.collect())
    assert SENTINEL not in text


def test_structlog_hook_logs_every_event_with_its_keys() -> None:
    """Warnings for retries and give-ups, debug lines for later attempts, with their keys."""
    logger = CapturingLogger()
    detach = structlog_hook(logger=logger)
    try:
        _calls()
    finally:
        detach()
    _calls()
    calls = [(c.method_name, c.args, c.kwargs) for c in logger.calls]
    assert [
        ("warning", ("retry",), 1),
        ("debug", ("attempt",), 2),
        ("warning", ("retry",), 2),
        ("debug", ("attempt",), 3),
    ] == [(method, args, kwargs["attempt"]) for method, args, kwargs in calls[:4]]
    assert ["retry", "attempt", "retry", "attempt", "give_up"] == [
        args[0] for _, args, _ in calls[4:]
    ]
    first = calls[0][2]
    assert {"name", "attempt", "error_type", "error", "elapsed", "delay"} == set(first)
    assert ("flaky", "Outer.FlakyError") == (first["name"], first["error_type"])
    assert first["error"] == repr(Outer.FlakyError(SENTINEL))
    assert "delay" not in calls[-1][2]


def test_structlog_hook_defaults_to_the_effects_logger() -> None:
    """Without a logger, structlog.get_logger("effects") logs (captured here)."""
    with structlog.testing.capture_logs() as logs:
        detach = structlog_hook()
        try:
            _calls()
        finally:
            detach()
    assert ["retry", "attempt", "retry", "attempt", "retry", "attempt", "retry", "attempt"] == [
        entry["event"] for entry in logs
    ][:8]
    assert {"warning", "debug"} == {entry["log_level"] for entry in logs}
