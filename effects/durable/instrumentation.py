"""
OpenTelemetry traces and metrics, and Prometheus counters, of an ``effects.durable`` engine.

``attach_otel(engine)`` gives every run one trace, whichever processes run it and however often
it resumes: ``start`` stores a W3C ``traceparent`` on the run (its span is a zero-length root,
``durable.run <workflow>``, exported by the starting process when it has ``attach_otel``), and
every dispatched attempt carries it, so each attempt's span (``durable.step <name>``, in the
process that ran it) is a child of that root. ``attach_prometheus(engine)`` counts attempts and
run ends. Both need their extra (``otel``: opentelemetry-api; ``prometheus``: prometheus-client);
importing this module never does. No attribute or label holds a run's input, output or an
error's message or details, and no metric label holds a run id.

Each adapter returns ``detach()``, which stops it (calling it again does nothing).
"""

from __future__ import annotations

import hashlib
import importlib
import re
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from effects.durable._engine import Engine, probes_of
from effects.durable._probes import Attempt, RetryWait, RunTrace

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

__all__ = ["attach_otel", "attach_prometheus"]

_SCOPE: Final = "effects.durable"
_TRACEPARENT: Final = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# Parsed trace contexts kept per adapter; past this many the cache starts again (a process
# serving many runs must not grow without bound).
_CACHED: Final = 4096


def _require(module: str, extra: str, adapter: str) -> ModuleType:
    """*module*, or an ``ImportError`` naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = module.partition(".")[0]
        msg = f"{adapter} needs {package}: pip install 'effect-schedules[{extra}]'"
        raise ImportError(msg, name=error.name) from error


def _check_engine(engine: object, adapter: str) -> Engine:
    if not isinstance(engine, Engine):
        msg = f"{adapter} takes an effects.durable Engine, got {engine!r}"
        raise TypeError(msg)
    return engine


def _ns(epoch_ms: int) -> int:
    return epoch_ms * 1_000_000


def _ids(traceparent: str | None, run_id: str) -> tuple[int, int, int]:
    """
    The trace id, parent span id and flags of *traceparent*; for a run without one (a store from
    before telemetry) or a malformed one, ids derived from the run id, so every process still
    puts the run's attempts in one trace.
    """
    found = None if traceparent is None else _TRACEPARENT.fullmatch(traceparent)
    if found is not None:
        trace_id, span_id = int(found[1], 16), int(found[2], 16)
        if trace_id and span_id:
            return trace_id, span_id, int(found[3], 16)
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:16]) or 1, int.from_bytes(digest[16:24]) or 1, 1


def _workflow(name: str | None) -> str:
    return "unknown" if name is None else name


class _Tally:
    """
    The instruments of one meter: two counters, counted in plain ints and reported by
    observable counters, and two histograms.

    An attempt adds one to an int here instead of making a measurement (the SDK's ``add``
    costs as much as a histogram's ``record``); a collection reads the totals. Every probe
    attached to the meter keeps its own counts (a probe is told things on its engine's loop
    alone, so no count is shared between threads), and the meter's one pair of instruments
    reports their sums, a detached probe's included: the counters keep what they counted.
    """

    def __init__(self, metrics: ModuleType, meter: Any) -> None:
        self._metrics = metrics
        self.attempts: list[dict[tuple[str, ...], int]] = []
        self.runs: list[dict[tuple[str, ...], int]] = []
        meter.create_observable_counter(
            "durable.step.attempts",
            callbacks=[self._observe_attempts],
            unit="{attempt}",
            description="Step attempts that ended, by outcome (completed, failed, timeout, lost)",
        )
        meter.create_observable_counter(
            "durable.runs",
            callbacks=[self._observe_runs],
            unit="{run}",
            description="Runs that ended, by status",
        )
        self.duration = meter.create_histogram(
            "durable.step.duration", unit="s", description="How long a step attempt ran"
        )
        self.queue_wait = meter.create_histogram(
            "durable.step.queue_wait",
            unit="s",
            description="A dispatched attempt's wait from its dispatch (or wake_at) to its claim",
        )

    def _observe_attempts(self, options: object) -> list[Any]:
        del options
        return self._observe(self.attempts, _ATTEMPT_KEYS)

    def _observe_runs(self, options: object) -> list[Any]:
        del options
        return self._observe(self.runs, _RUN_KEYS)

    def _observe(
        self, sources: list[dict[tuple[str, ...], int]], keys: tuple[str, ...]
    ) -> list[Any]:
        totals: dict[tuple[str, ...], int] = {}
        # list() copies each dict in one step of C code: an engine's loop may add meanwhile.
        for counts in list(sources):
            for values, count in list(counts.items()):
                totals[values] = totals.get(values, 0) + count
        observation = self._metrics.Observation
        return [
            observation(count, dict(zip(keys, values, strict=True)))
            for values, count in totals.items()
        ]


_ATTEMPT_KEYS: Final = (
    "durable.workflow.name",
    "durable.step.name",
    "durable.step.kind",
    "durable.step.outcome",
)
_RUN_KEYS: Final = ("durable.workflow.name", "durable.run.status")
# The tallies by meter (a provider gives the same meter for the same scope): several engines
# attached to one meter share its instruments, which OpenTelemetry creates once per name.
_TALLIES: Final[weakref.WeakKeyDictionary[Any, _Tally]] = weakref.WeakKeyDictionary()
_TALLIES_LOCK: Final = threading.Lock()


_GLOBAL_METER: Final[list[Any]] = []


def _global_meter(metrics: ModuleType) -> Any:
    """
    The global provider's meter, the same one on every call: before a provider is set,
    OpenTelemetry hands out a new proxy meter on each call, and each would make instruments
    of its own that the real meter, once set, refuses (one instrument per name).
    """
    with _TALLIES_LOCK:
        if not _GLOBAL_METER:
            _GLOBAL_METER.append(metrics.get_meter(_SCOPE))
        return _GLOBAL_METER[0]


def _tally(metrics: ModuleType, meter: Any) -> _Tally:
    """The tally of *meter*, made (with its instruments) the first time."""
    with _TALLIES_LOCK:
        found = _TALLIES.get(meter)
        if found is None:
            found = _TALLIES[meter] = _Tally(metrics, meter)
        return found


class _OtelProbe:
    """The probe ``attach_otel`` adds: spans and metrics of one engine's process."""

    def __init__(self, trace: ModuleType, tracer: Any, meter: Any, tally: _Tally) -> None:
        self._trace = trace
        self._tracer = tracer
        self._error = trace.Status(trace.StatusCode.ERROR)
        self._parents: dict[str, Context] = {}
        self._labels: dict[tuple[str, ...], dict[str, str]] = {}
        # This probe's counts, which the meter's observable counters report (see _Tally).
        self._attempts: dict[tuple[str, ...], int] = {}
        self._runs: dict[tuple[str, ...], int] = {}
        tally.attempts.append(self._attempts)
        tally.runs.append(self._runs)
        self._duration = tally.duration
        self._queue_wait = tally.queue_wait
        self._span_names: dict[str, str] = {}

    def _parent(self, traceparent: str | None, run_id: str) -> Context:
        key = traceparent or run_id
        found = self._parents.get(key)
        if found is None:
            trace = self._trace
            trace_id, span_id, flags = _ids(traceparent, run_id)
            context = trace.SpanContext(
                trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags)
            )
            if len(self._parents) >= _CACHED:
                self._parents.clear()
            found = self._parents[key] = trace.set_span_in_context(trace.NonRecordingSpan(context))
        return found

    def _label(self, *values: str) -> dict[str, str]:
        found = self._labels.get(values)
        if found is None:
            if len(values) == 4:
                workflow, step, kind, outcome = values
                found = {
                    "durable.workflow.name": workflow,
                    "durable.step.name": step,
                    "durable.step.kind": kind,
                    "durable.step.outcome": outcome,
                }
            elif len(values) == 3:
                workflow, step, kind = values
                found = {
                    "durable.workflow.name": workflow,
                    "durable.step.name": step,
                    "durable.step.kind": kind,
                }
            else:
                workflow, status = values
                found = {"durable.workflow.name": workflow, "durable.run.status": status}
            if len(self._labels) >= _CACHED:
                self._labels.clear()
            self._labels[values] = found
        return found

    def run_trace(self, run_id: str, workflow: str, at: int) -> RunTrace | None:
        span = self._tracer.start_span(
            f"durable.run {workflow}",
            start_time=_ns(at),
            attributes={"durable.run.id": run_id, "durable.workflow.name": workflow},
        )
        context = span.get_span_context()
        if not context.is_valid:
            return None  # a no-op tracer: the engine makes a traceparent of its own
        traceparent = (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
        )
        return RunTrace(traceparent, lambda: span.end(end_time=_ns(at)))

    def attempt(self, attempt: Attempt) -> None:
        workflow = _workflow(attempt.workflow)
        name, kind, outcome = attempt.name, attempt.kind, attempt.outcome
        key = (workflow, name, kind, outcome)
        counts = self._attempts
        counts[key] = counts.get(key, 0) + 1
        span_name = self._span_names.get(name)
        if span_name is None:
            if len(self._span_names) >= _CACHED:
                self._span_names.clear()
            span_name = self._span_names[name] = f"durable.step {name}"
        attributes: dict[str, Any] = {
            "durable.run.id": attempt.run_id,
            "durable.workflow.name": workflow,
            "durable.step.name": attempt.name,
            "durable.step.seq": attempt.seq,
            "durable.step.id": attempt.step_id,
            "durable.step.kind": attempt.kind,
            "durable.step.attempt": attempt.attempt,
            "durable.step.redispatched": attempt.redispatched,
        }
        failed = attempt.outcome != "completed"
        if failed:
            attributes["error.type"] = attempt.error_type or attempt.outcome
        span = self._tracer.start_span(
            span_name,
            context=self._parent(attempt.traceparent, attempt.run_id),
            start_time=_ns(attempt.started_at),
            attributes=attributes,
        )
        if failed:
            span.set_status(self._error)
        if attempt.wake_at is not None:
            span.add_event(
                "durable.retry_scheduled",
                {"durable.step.wake_at": attempt.wake_at, "durable.step.attempt": attempt.attempt},
                timestamp=_ns(attempt.ended_at),
            )
        span.end(end_time=_ns(attempt.ended_at))
        if outcome in ("completed", "failed"):
            # Timeouts and lost workers are the engine's verdicts, not a run of the step.
            seconds = max(0, attempt.ended_at - attempt.started_at) / 1000
            self._duration.record(seconds, self._label(*key))
        if attempt.queue_wait_ms is not None:
            self._queue_wait.record(attempt.queue_wait_ms / 1000, self._label(workflow, name, kind))

    def retry_wait(self, wait: RetryWait) -> None:
        span = self._tracer.start_span(
            f"durable.retry_wait {wait.name}",
            context=self._parent(wait.traceparent, wait.run_id),
            start_time=_ns(wait.at),
            attributes={
                "durable.run.id": wait.run_id,
                "durable.workflow.name": wait.workflow,
                "durable.step.name": wait.name,
                "durable.step.seq": wait.seq,
                "durable.step.id": wait.step_id,
                "durable.step.kind": "remote",
                "durable.step.attempt": wait.attempt,
            },
        )
        span.add_event(
            "durable.retry_scheduled",
            {"durable.step.wake_at": wait.wake_at, "durable.step.attempt": wait.attempt},
            timestamp=_ns(wait.at),
        )
        span.end(end_time=_ns(wait.at))

    def run_ended(self, run_id: str, workflow: str, status: str) -> None:
        del run_id  # never a metric label
        key = (workflow, status)
        self._runs[key] = self._runs.get(key, 0) + 1


def attach_otel(
    engine: Engine,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> Callable[[], None]:
    """
    Trace and measure *engine*'s runs with OpenTelemetry, in this process.

    Spans: at ``start``, a zero-length root ``durable.run <workflow>`` (a child of the span
    current in the caller, if any), whose context the run keeps as its ``traceparent``; one span
    per step attempt, ``durable.step <name>``, in the process that ran it (the worker, for a
    dispatched step), a child of the root, with attributes ``durable.run.id``,
    ``durable.workflow.name``, ``durable.step.name``, ``durable.step.seq``, ``durable.step.id``,
    ``durable.step.kind`` (``local``/``remote``), ``durable.step.attempt``,
    ``durable.step.redispatched``, and, when it failed, ``error.type`` (the ``StepError.type``)
    and ERROR status. A retry's wait is a span event ``durable.retry_scheduled``
    (``durable.step.wake_at`` in epoch ms, ``durable.step.attempt``): on the failed attempt's
    span for a local step, on a zero-length ``durable.retry_wait <name>`` span for a dispatched
    one (in the process that scheduled it). A liveness timeout and a lost worker are attempts
    too (outcome ``timeout``/``lost``, from the engine that decided it). Times are the engine
    clock's, in whole ms.

    Metrics: counter ``durable.step.attempts`` {``durable.workflow.name``,
    ``durable.step.name``, ``durable.step.kind``, ``durable.step.outcome`` = completed | failed
    | timeout | lost}; counter ``durable.runs`` {``durable.workflow.name``,
    ``durable.run.status`` = completed | failed | cancelled | dead}; histograms
    ``durable.step.duration`` (s, one value per completed or failed attempt) and
    ``durable.step.queue_wait`` (s, from dispatch or ``wake_at`` to claim, dispatched attempts).

    Args:
        engine: The engine.
        tracer_provider: Where spans go; default OpenTelemetry's global provider.
        meter_provider: Where metrics go; default the global one.

    Returns:
        ``detach()``: stop (idempotent); the counters keep reporting what they counted.

    Raises:
        ImportError: Without opentelemetry-api (``pip install 'effect-schedules[otel]'``).
        TypeError: If *engine* is not an ``Engine``.
    """
    trace = _require("opentelemetry.trace", "otel", "attach_otel")
    metrics = _require("opentelemetry.metrics", "otel", "attach_otel")
    checked = _check_engine(engine, "attach_otel")
    tracer = (
        trace.get_tracer(_SCOPE) if tracer_provider is None else tracer_provider.get_tracer(_SCOPE)
    )
    meter = _global_meter(metrics) if meter_provider is None else meter_provider.get_meter(_SCOPE)
    # The instruments stay with the meter (OpenTelemetry cannot take them back): once detached,
    # they keep what they counted, which no longer grows.
    return probes_of(checked).add(_OtelProbe(trace, tracer, meter, _tally(metrics, meter)))


class _PrometheusProbe:
    """The probe ``attach_prometheus`` adds: two counters."""

    def __init__(self, attempts: Any, runs: Any) -> None:
        self._attempts = attempts
        self._runs = runs

    def run_trace(self, run_id: str, workflow: str, at: int) -> RunTrace | None:
        del run_id, workflow, at
        return None

    def attempt(self, attempt: Attempt) -> None:
        self._attempts.labels(
            _workflow(attempt.workflow), attempt.name, attempt.kind, attempt.outcome
        ).inc()

    def retry_wait(self, wait: RetryWait) -> None:
        del wait

    def run_ended(self, run_id: str, workflow: str, status: str) -> None:
        del run_id
        self._runs.labels(workflow, status).inc()


def attach_prometheus(
    engine: Engine, *, registry: CollectorRegistry | None = None
) -> Callable[[], None]:
    """
    Count *engine*'s step attempts and run ends in Prometheus, in this process:
    ``durable_step_attempts_total{workflow, step, kind, outcome}`` (outcome completed | failed |
    timeout | lost) and ``durable_runs_total{workflow, status}``.

    Args:
        engine: The engine.
        registry: Where the counters are registered; default prometheus-client's ``REGISTRY``.
            One registry holds one attachment at a time (its counters are named once).

    Returns:
        ``detach()``: stop, and unregister the counters (idempotent).

    Raises:
        ImportError: Without prometheus-client (``pip install 'effect-schedules[prometheus]'``).
        TypeError: If *engine* is not an ``Engine``.
        ValueError: If *registry* has these counters already (another attachment).
    """
    prometheus = _require("prometheus_client", "prometheus", "attach_prometheus")
    checked = _check_engine(engine, "attach_prometheus")
    target = prometheus.REGISTRY if registry is None else registry
    try:
        attempts = prometheus.Counter(
            "durable_step_attempts",
            "Step attempts of effects.durable that ended, by outcome",
            ("workflow", "step", "kind", "outcome"),
            registry=target,
        )
    except ValueError as error:
        msg = (
            f"this registry has durable_step_attempts already ({error}): detach the other"
            " attach_prometheus first, or give another registry"
        )
        raise ValueError(msg) from error
    try:
        runs = prometheus.Counter(
            "durable_runs",
            "Runs of effects.durable that ended, by status",
            ("workflow", "status"),
            registry=target,
        )
    except ValueError as error:
        target.unregister(attempts)
        msg = (
            f"this registry has durable_runs already ({error}): detach the other"
            " attach_prometheus first, or give another registry"
        )
        raise ValueError(msg) from error
    remove = probes_of(checked).add(_PrometheusProbe(attempts, runs))
    detached = False

    def detach() -> None:
        nonlocal detached
        if detached:
            return
        detached = True
        remove()
        target.unregister(attempts)
        target.unregister(runs)

    return detach
