"""
The engine's probes: what telemetry adapters (``effects.durable.instrumentation``) hear beyond
the event trail: a run's trace context at ``start``, each step attempt as one value with its
timing, each retry wait of a dispatched step, each run's end.

An engine keeps one ``Probes``; the code that runs a step asks ``Probes.probes`` (one attribute
load) before it builds anything, so an engine without adapters pays nothing. A probe that raises
is logged and ignored: telemetry never stops a workflow.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Final, Literal, Protocol

import attrs

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "Probe",
    "Probes",
    "RetryWait",
    "RunTrace",
    "new_traceparent",
]

_log: Final = logging.getLogger("effects.durable")

AttemptOutcome = Literal["completed", "failed", "timeout", "lost"]


def new_traceparent() -> str:
    """A fresh W3C ``traceparent`` (version 00, random trace and span ids, sampled)."""
    ids = os.urandom(24).hex()
    return f"00-{ids[:32]}-{ids[32:]}-01"


@attrs.frozen
class RunTrace:
    """
    The trace context a run gets at ``start``: its *traceparent*, and *made*, called once the
    run was created (not for a start of an id that existed).
    """

    traceparent: str
    made: Callable[[], None] = lambda: None


@attrs.frozen
class Attempt:
    """
    One attempt of a step, as it ended.

    Attributes:
        run_id: The run.
        workflow: The run's workflow (``None``: an attempt enqueued before telemetry).
        traceparent: The run's trace context, or ``None``.
        name: The step's name (a dispatched step's handler).
        seq: The checkpoint's sequence number.
        step_id: ``"{run_id}:{seq}"``.
        kind: ``"local"`` or ``"remote"``.
        attempt: 1-based attempt number.
        redispatched: Whether it re-drove a dispatch that looked lost.
        started_at: Epoch ms when it started (a dispatched attempt: when it was claimed).
        ended_at: Epoch ms when it ended.
        outcome: ``completed``, ``failed``, ``timeout`` (its liveness window passed) or ``lost``
            (its worker's claim expired).
        error_type: The failure's ``StepError.type``, else ``None``.
        queue_wait_ms: A dispatched attempt's wait from dispatch (or its ``wake_at``) to its
            claim, else ``None``.
        wake_at: Epoch ms of the retry a failed local attempt scheduled, else ``None``.
    """

    run_id: str
    workflow: str | None
    traceparent: str | None
    name: str
    seq: int
    step_id: str
    kind: Literal["local", "remote"]
    attempt: int
    redispatched: bool
    started_at: int
    ended_at: int
    outcome: AttemptOutcome
    error_type: str | None = None
    queue_wait_ms: int | None = None
    wake_at: int | None = None


@attrs.frozen
class RetryWait:
    """A dispatched step's failed *attempt* stamped a retry at epoch ms *wake_at*, at *at*."""

    run_id: str
    workflow: str
    traceparent: str | None
    name: str
    seq: int
    step_id: str
    attempt: int
    at: int
    wake_at: int


class Probe(Protocol):
    """What a telemetry adapter implements (every method is called on the engine's loop)."""

    def run_trace(self, run_id: str, workflow: str, at: int) -> RunTrace | None:
        """The trace context of a run being started at epoch ms *at*, or ``None`` (no tracer)."""
        ...

    def attempt(self, attempt: Attempt) -> None:
        """An attempt ended (after the commit that recorded it)."""
        ...

    def retry_wait(self, wait: RetryWait) -> None:
        """A dispatched step's retry was scheduled (after the commit that stamped it)."""
        ...

    def run_ended(self, run_id: str, workflow: str, status: str) -> None:
        """A run ended ``completed``, ``failed``, ``cancelled`` or ``dead``, here."""
        ...


class Probes:
    """An engine's probes: a copy-on-write tuple, read with one attribute load."""

    __slots__ = ("probes",)

    def __init__(self) -> None:
        self.probes: tuple[Probe, ...] = ()

    def add(self, probe: Probe) -> Callable[[], None]:
        """Add *probe*; return its remover (calling it again does nothing)."""
        self.probes = (*self.probes, probe)
        removed = False

        def remove() -> None:
            nonlocal removed
            if removed:
                return
            removed = True
            index = next(i for i, p in enumerate(self.probes) if p is probe)
            self.probes = self.probes[:index] + self.probes[index + 1 :]

        return remove

    def run_trace(self, run_id: str, workflow: str, at: int) -> RunTrace:
        """The first probe's trace context for the run, else a fresh random one."""
        for probe in self.probes:
            try:
                trace = probe.run_trace(run_id, workflow, at)
            except Exception:  # noqa: BLE001 - telemetry must not stop a start
                _log.exception("a telemetry probe raised making the trace of run %s", run_id)
                continue
            if trace is not None:
                return trace
        return RunTrace(new_traceparent())

    def attempt(self, attempt: Attempt) -> None:
        """Tell every probe *attempt*."""
        for probe in self.probes:
            try:
                probe.attempt(attempt)
            except Exception:  # noqa: BLE001
                _log.exception("a telemetry probe raised on an attempt of %s", attempt.step_id)

    def retry_wait(self, wait: RetryWait) -> None:
        """Tell every probe *wait*."""
        for probe in self.probes:
            try:
                probe.retry_wait(wait)
            except Exception:  # noqa: BLE001
                _log.exception("a telemetry probe raised on a retry of %s", wait.step_id)

    def run_ended(self, run_id: str, workflow: str, status: str) -> None:
        """Tell every probe that the run ended with *status*."""
        for probe in self.probes:
            try:
                probe.run_ended(run_id, workflow, status)
            except Exception:  # noqa: BLE001
                _log.exception("a telemetry probe raised on the end of run %s", run_id)
