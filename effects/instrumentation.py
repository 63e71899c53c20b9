"""
Retry telemetry for ``effects.add_hook``: OpenTelemetry and Prometheus counters, structlog lines.

Each function returns ``detach()`` after adding its hook (the registration ``add_hook`` makes, so
hooks are process-wide, as ``add_hook`` explains). A retried call reports one event per failed
attempt, of outcome ``retry`` (another attempt follows), ``give_up`` (none follows) or
``budget_exhausted`` (a ``RetryBudget`` refused the retry); a call that succeeds at once reports
nothing, so with no hook attached nothing is counted or built. ``error.type`` is the error's
class's ``__qualname__``; no attribute or label holds the error's message.

Each adapter needs its extra (``otel``: opentelemetry-api; ``prometheus``: prometheus-client;
``structlog``); importing this module never does, and calling one without it raises
``ImportError`` naming the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from effects._events import RetryEvent, add_hook

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from prometheus_client import CollectorRegistry

__all__ = ["otel_hook", "prometheus_hook", "structlog_hook"]

_SCOPE: Final = "effects"
#: The event kinds that end a failed attempt, as ``retry.outcome`` names them.
_OUTCOMES: Final = frozenset({"retry", "give_up", "budget_exhausted"})


def _require(module: str, extra: str, adapter: str) -> ModuleType:
    """*module*, or an ``ImportError`` naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.partition(".")[0]
        msg = f"{adapter} needs {package}: pip install 'effect-schedules[{extra}]'"
        raise ImportError(msg, name=error.name) from error


def _error_type(event: RetryEvent) -> str:
    return type(event.error).__qualname__


def otel_hook(*, meter_provider: MeterProvider | None = None) -> Callable[[], None]:
    """
    Count retries with OpenTelemetry: counter ``effects.retries`` with attributes
    ``retry.name`` (``RetryEvent.name``), ``error.type`` (the error class's ``__qualname__``)
    and ``retry.outcome`` (``retry``, ``give_up`` or ``budget_exhausted``).

    Args:
        meter_provider: Where the counter goes; default OpenTelemetry's global provider.

    Returns:
        ``detach()``: remove the hook (idempotent).

    Raises:
        ImportError: Without opentelemetry-api (``pip install 'effect-schedules[otel]'``).

    Example:
        >>> from opentelemetry.sdk.metrics import MeterProvider
        >>> from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        >>> from effects import Effect
        >>> reader = InMemoryMetricReader()
        >>> detach = otel_hook(meter_provider=MeterProvider(metric_readers=[reader]))
        >>> Effect.fail(KeyError("id")).retry(times=2, name="load").run()
        <Failure: 'id'>
        >>> detach()
        >>> [metric] = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        >>> sorted((p.attributes["retry.outcome"], p.value) for p in metric.data.data_points)
        [('give_up', 1), ('retry', 2)]
    """
    metrics = _require("opentelemetry.metrics", "otel", "otel_hook")
    meter = (
        metrics.get_meter(_SCOPE) if meter_provider is None else meter_provider.get_meter(_SCOPE)
    )
    counter = meter.create_counter(
        "effects.retries",
        unit="{attempt}",
        description="Failed attempts of retried calls, by what followed (retry, give_up,"
        " budget_exhausted)",
    )
    labels: dict[tuple[str, str, str], dict[str, str]] = {}

    def hook(event: RetryEvent) -> None:
        if event.kind not in _OUTCOMES:
            return
        key = (event.name, _error_type(event), event.kind)
        found = labels.get(key)
        if found is None:
            found = {"retry.name": key[0], "error.type": key[1], "retry.outcome": key[2]}
            labels[key] = found
        counter.add(1, found)

    return add_hook(hook)


def prometheus_hook(*, registry: CollectorRegistry | None = None) -> Callable[[], None]:
    """
    Count retries in Prometheus: ``effects_retries_total{name, error_type, outcome}`` (outcome
    ``retry``, ``give_up`` or ``budget_exhausted``; error_type the class's ``__qualname__``).

    Args:
        registry: Where the counter is registered; default prometheus-client's ``REGISTRY``. One
            registry holds one ``prometheus_hook`` at a time.

    Returns:
        ``detach()``: remove the hook and unregister the counter (idempotent).

    Raises:
        ImportError: Without prometheus-client (``pip install 'effect-schedules[prometheus]'``).
        ValueError: If *registry* has ``effects_retries`` already (another ``prometheus_hook``).

    Example:
        >>> from prometheus_client import CollectorRegistry
        >>> from effects import Effect
        >>> registry = CollectorRegistry()
        >>> detach = prometheus_hook(registry=registry)
        >>> Effect.fail(KeyError("id")).retry(times=2, name="load").run()
        <Failure: 'id'>
        >>> labels = {"name": "load", "error_type": "KeyError", "outcome": "retry"}
        >>> registry.get_sample_value("effects_retries_total", labels)
        2.0
        >>> detach()
    """
    prometheus = _require("prometheus_client", "prometheus", "prometheus_hook")
    target = prometheus.REGISTRY if registry is None else registry
    try:
        counter = prometheus.Counter(
            "effects_retries",
            "Failed attempts of retried calls, by what followed",
            ("name", "error_type", "outcome"),
            registry=target,
        )
    except ValueError as error:
        msg = (
            f"this registry has effects_retries already ({error}): detach the other"
            " prometheus_hook first, or give another registry"
        )
        raise ValueError(msg) from error

    def hook(event: RetryEvent) -> None:
        if event.kind in _OUTCOMES:
            counter.labels(event.name, _error_type(event), event.kind).inc()

    remove = add_hook(hook)
    detached = False

    def detach() -> None:
        nonlocal detached
        if detached:
            return
        detached = True
        remove()
        target.unregister(counter)

    return detach


def structlog_hook(*, logger: Any = None) -> Callable[[], None]:
    """
    Log every retry, give-up and budget refusal with structlog: event ``"retry"``,
    ``"give_up"`` or ``"budget_exhausted"`` (warning), and ``"attempt"`` (debug, an attempt
    after its wait), with keys ``name``, ``attempt``, ``error_type``, ``error`` (its ``repr``,
    as ``log_retries`` prints it), ``delay`` (seconds, a retry's) and ``elapsed`` (seconds).

    Args:
        logger: A structlog logger (anything with ``warning`` and ``debug`` taking an event and
            keys); default ``structlog.get_logger("effects")``.

    Returns:
        ``detach()``: remove the hook (idempotent).

    Raises:
        ImportError: Without structlog (``pip install 'effect-schedules[structlog]'``).
    """
    structlog = _require("structlog", "structlog", "structlog_hook")
    target = structlog.get_logger(_SCOPE) if logger is None else logger

    def hook(event: RetryEvent) -> None:
        log = target.debug if event.kind == "attempt" else target.warning
        fields: dict[str, Any] = {
            "name": event.name,
            "attempt": event.attempt,
            "error_type": _error_type(event),
            "error": repr(event.error),
            "elapsed": event.elapsed,
        }
        if event.delay is not None:
            fields["delay"] = event.delay
        log(event.kind, **fields)

    return add_hook(hook)
