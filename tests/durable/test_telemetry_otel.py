"""
``attach_otel``: one trace per run across processes and retries, one span per attempt with the
design's attributes, retry waits as span events, the attempt and run counters and histograms,
and no input, output or error text in any attribute, event or label.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from effects.durable import Engine, RemoteStepTimeout, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable.instrumentation import attach_otel
from tests.durable.support import Flaky
from tests.durable.telemetry_support import SENTINEL, Telemetry, counts, flaky, traced

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def _worker_once(url: str, out: Path) -> dict[str, Any]:
    """Run the telemetry worker in a process of its own; its spans and metric points."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.durable.telemetry_support", url, str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    found: dict[str, Any] = json.loads(out.read_text())
    return found


@pytest.mark.not_on_memory("the third attempt runs in another process")
async def test_three_attempts_across_two_processes_are_one_trace_under_the_runs_root(
    durable_store_url: str, tmp_path: Path
) -> None:
    """Attempts 1 and 2 fail here, attempt 3 succeeds in a worker process: one trace."""
    here = Telemetry()
    async with (
        Engine(durable_store_url, workflows=[traced]) as orchestrator,
        Engine(durable_store_url, steps=[flaky]) as worker,
    ):
        here.attach(orchestrator)
        here.attach(worker)
        run_id = await orchestrator.start(traced, SENTINEL)
        for _ in range(2):
            await orchestrator.run_until_idle()  # dispatch (then: the retry, due at once)
            await worker.run_until_idle()  # the attempt fails
        await orchestrator.run_until_idle()  # attempt 3 dispatched
        there = _worker_once(durable_store_url, tmp_path / "worker.json")
        await orchestrator.run_until_idle()
        run = await orchestrator.get_run(run_id)
        (checkpoint,) = await orchestrator.checkpoints(run_id)
    spans = here.spans() + there["spans"]
    points = here.points() + there["points"]
    here.shutdown()
    assert ("completed", f"ok {SENTINEL}") == (run.status, run.output)

    (root,) = [s for s in spans if s["name"] == "durable.run traced"]
    assert root["parent"] is None
    assert run.traceparent is not None
    assert run.traceparent.startswith(f"00-{root['trace_id']}-{root['span_id']}-")
    attempts = sorted(
        (s for s in spans if s["name"] == "durable.step flaky"),
        key=lambda s: s["attributes"]["durable.step.attempt"],
    )
    assert [1, 2, 3] == [s["attributes"]["durable.step.attempt"] for s in attempts]
    assert {root["trace_id"]} == {s["trace_id"] for s in attempts}
    assert {root["span_id"]} == {s["parent"] for s in attempts}
    assert attempts[2] in there["spans"]  # the third ran in the worker process
    assert ["ERROR", "ERROR", "UNSET"] == [s["status"] for s in attempts]
    assert {
        "durable.run.id": run_id,
        "durable.workflow.name": "traced",
        "durable.step.name": "flaky",
        "durable.step.seq": 1,
        "durable.step.id": f"{run_id}:1",
        "durable.step.kind": "remote",
        "durable.step.attempt": 1,
        "durable.step.redispatched": False,
        "error.type": "builtins.ConnectionError",
    } == attempts[0]["attributes"]
    assert "error.type" not in attempts[2]["attributes"]

    waits = [s for s in spans if s["name"] == "durable.retry_wait flaky"]
    assert 2 == len(waits)
    assert {root["trace_id"]} == {s["trace_id"] for s in waits}
    assert all(s["start"] == s["end"] for s in [*waits, root])
    scheduled = [e for s in waits for e in s["events"]]
    assert ["durable.retry_scheduled"] * 2 == [e["name"] for e in scheduled]
    assert [1, 2] == sorted(e["attributes"]["durable.step.attempt"] for e in scheduled)
    assert all(isinstance(e["attributes"]["durable.step.wake_at"], int) for e in scheduled)

    assert {"completed": 1, "failed": 2} == counts(
        points, "durable.step.attempts", "durable.step.outcome"
    )
    assert {"completed": 1} == counts(points, "durable.runs", "durable.run.status")
    assert {"remote": 3} == counts(points, "durable.step.duration", "durable.step.kind")
    assert {"remote": 3} == counts(points, "durable.step.queue_wait", "durable.step.kind")
    assert {"s"} == {p["unit"] for p in points if p["name"].startswith("durable.step.d")}
    # The sentinel is in the run's record (so this could fail), and in no telemetry.
    assert SENTINEL in json.dumps([e.message for e in checkpoint.errors])
    assert SENTINEL not in json.dumps([spans, points])
    assert all(
        "run" not in key for p in points for key in p["attributes"] if key != "durable.run.status"
    )


async def test_a_local_step_failing_twice_then_succeeding_is_three_spans_with_retry_events(
    durable_engine: DurableEngineFactory,
) -> None:
    """Local attempts: ERROR spans with durable.retry_scheduled at wake_at, then an OK one."""
    fn = Flaky([ConnectionError(SENTINEL)] * 2, value=SENTINEL)

    @workflow("local")
    async def local(ctx: WorkflowContext, value: str) -> str:
        return await ctx.local_step("charge", fn, retries=3, backoff_ms=250)

    telemetry = Telemetry()
    async with durable_engine(workflows=[local]) as engine:
        telemetry.attach(engine)
        run_id = await engine.start(local, SENTINEL)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    spans, points = telemetry.spans(), telemetry.points()
    telemetry.shutdown()
    assert "completed" == run.status
    attempts = [s for s in spans if s["name"] == "durable.step charge"]
    assert [1, 2, 3] == [s["attributes"]["durable.step.attempt"] for s in attempts]
    assert ["ERROR", "ERROR", "UNSET"] == [s["status"] for s in attempts]
    assert {"local"} == {s["attributes"]["durable.step.kind"] for s in attempts}
    (root,) = [s for s in spans if s["name"] == "durable.run local"]
    assert {root["span_id"]} == {s["parent"] for s in attempts}
    events = [(s["attributes"]["durable.step.attempt"], s["events"]) for s in attempts]
    for attempt, found in events[:2]:
        (event,) = found
        assert "durable.retry_scheduled" == event["name"]
        assert attempt == event["attributes"]["durable.step.attempt"]
        span = attempts[attempt - 1]
        assert span["end"] // 1_000_000 + 250 == event["attributes"]["durable.step.wake_at"]
    assert [] == events[2][1]
    assert {"completed": 1, "failed": 2} == counts(
        points, "durable.step.attempts", "durable.step.outcome"
    )
    assert {"local": 3} == counts(points, "durable.step.duration", "durable.step.kind")
    assert [] == [p for p in points if p["name"] == "durable.step.queue_wait"]
    assert SENTINEL not in json.dumps([spans, points])


async def test_run_ends_are_counted_by_status_and_workflow(
    durable_engine: DurableEngineFactory,
) -> None:
    """durable.runs: one completed, one failed, one cancelled, labelled by workflow alone."""

    @workflow("ends")
    async def ends(ctx: WorkflowContext, fail: bool) -> str:
        def act() -> str:
            if fail:
                raise ValueError(SENTINEL)
            return "fine"

        return await ctx.local_step("act", act)

    telemetry = Telemetry()
    async with durable_engine(workflows=[ends]) as engine:
        telemetry.attach(engine)
        await engine.start(ends, False)
        await engine.start(ends, True)
        cancelled = await engine.start(ends, False)
        await engine.cancel(cancelled)
        await engine.run_until_idle()
    points = telemetry.points()
    telemetry.shutdown()
    runs = [p for p in points if p["name"] == "durable.runs"]
    assert {("ends", "completed", 1), ("ends", "failed", 1), ("ends", "cancelled", 1)} == {
        (
            p["attributes"]["durable.workflow.name"],
            p["attributes"]["durable.run.status"],
            p["value"],
        )
        for p in runs
    }
    assert {"durable.workflow.name", "durable.run.status"} == {
        key for p in runs for key in p["attributes"]
    }
    failed = [p for p in points if p["attributes"].get("durable.step.outcome") == "failed"]
    assert failed
    assert SENTINEL not in json.dumps(points)


async def test_the_root_is_a_child_of_the_span_current_at_start(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run started inside a request's span joins that trace."""

    @workflow("joined")
    async def joined(ctx: WorkflowContext, _: None) -> int:
        return await ctx.local_step("one", lambda: 1)

    telemetry = Telemetry()
    tracer = telemetry.tracer_provider.get_tracer("request")
    async with durable_engine(workflows=[joined]) as engine:
        telemetry.attach(engine)
        with tracer.start_as_current_span("POST /orders") as request:
            run_id = await engine.start(joined, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    spans = telemetry.spans()
    telemetry.shutdown()
    (root,) = [s for s in spans if s["name"] == "durable.run joined"]
    (attempt,) = [s for s in spans if s["name"] == "durable.step one"]
    request_id = f"{request.get_span_context().span_id:016x}"
    assert request_id == root["parent"]
    assert {f"{request.get_span_context().trace_id:032x}"} == {
        root["trace_id"],
        attempt["trace_id"],
    }
    assert run.traceparent is not None
    assert run.traceparent.split("-")[1] == root["trace_id"]


async def test_without_a_tracer_the_run_still_gets_a_traceparent_and_detach_stops_spans(
    durable_engine: DurableEngineFactory,
) -> None:
    """No adapter (or a no-op tracer): a random valid traceparent; after detach, no spans."""

    @workflow("quiet")
    async def quiet(ctx: WorkflowContext, _: None) -> int:
        return await ctx.local_step("one", lambda: 1)

    telemetry = Telemetry()
    async with durable_engine(workflows=[quiet]) as engine:
        plain = await engine.start(quiet, None)
        noop = attach_otel(engine, tracer_provider=trace.NoOpTracerProvider())
        with_noop = await engine.start(quiet, None)
        noop()
        detach = telemetry.attach(engine)
        detach()
        detach()
        await engine.start(quiet, None)
        await engine.run_until_idle()
        parents = [(await engine.get_run(r)).traceparent for r in (plain, with_noop)]
    assert [] == telemetry.spans()
    telemetry.shutdown()
    assert all(p is not None and TRACEPARENT.fullmatch(p) for p in parents)
    assert parents[0] != parents[1]


def test_attach_otel_refuses_what_is_not_an_engine() -> None:
    """A TypeError names what it got."""
    not_an_engine: Any = "sqlite:///durable.db"
    with pytest.raises(TypeError, match=r"attach_otel takes an effects\.durable Engine"):
        attach_otel(not_an_engine)


async def test_a_lost_worker_and_a_liveness_timeout_are_attempts_of_their_own_outcome(
    durable_engine: DurableEngineFactory,
) -> None:
    """A claim that expires counts ``lost``; a dispatched step nobody picks up, ``timeout``."""

    @step("silent", retries=2, backoff_ms=1000)
    async def silent(_: None) -> str:
        return "done"

    @step("unserved", timeout_ms=1000, retries=1)
    async def unserved(_: None) -> str:
        raise AssertionError("no worker serves this step")

    @workflow("lossy")
    async def lossy(ctx: WorkflowContext, _: None) -> str:
        with contextlib.suppress(RemoteStepTimeout):
            await ctx.step(unserved, None)
        return await ctx.step(silent, None)

    telemetry = Telemetry()
    async with (
        durable_engine(workflows=[lossy], lease_ms=5000) as engine,
        durable_engine(steps=[silent]) as worker,
    ):
        telemetry.attach(engine)
        telemetry.attach(worker)
        run_id = await engine.start(lossy, None)
        await engine.run_until_idle(advance_time=True)  # the liveness window passes
        now = round(durable_engine.clock.now() * 1000)
        await engine.store.claim_tasks(
            groups=["default"], now=now, claim_until=now + 5000, worker="dead", limit=1
        )
        await engine.run_until_idle(advance_time=True)  # the claim expires: worker lost
        await worker.run_until_idle()
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    spans, points = telemetry.spans(), telemetry.points()
    telemetry.shutdown()
    assert ("completed", "done") == (run.status, run.output)
    outcomes = {
        (p["attributes"]["durable.step.name"], p["attributes"]["durable.step.outcome"]): p["value"]
        for p in points
        if p["name"] == "durable.step.attempts"
    }
    assert {
        ("unserved", "timeout"): 1,
        ("silent", "lost"): 1,
        ("silent", "completed"): 1,
    } == outcomes
    lost = [
        s
        for s in spans
        if s["attributes"].get("durable.step.attempt") == 1 and s["name"] == "durable.step silent"
    ]
    assert ["ERROR"] == [s["status"] for s in lost]
    assert ["effects.durable.WorkerLost"] == [s["attributes"]["error.type"] for s in lost]
    (timed_out,) = [s for s in spans if s["name"] == "durable.step unserved"]
    assert "effects.durable.RemoteStepTimeout" == timed_out["attributes"]["error.type"]
    # Neither is a run of the step: no duration for them.
    assert {"completed": 1} == counts(points, "durable.step.duration", "durable.step.outcome")
