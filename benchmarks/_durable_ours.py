"""
Our side of the durable-steps benchmarks, on any store: the workflows and steps, the cases of
``effects.durable`` (each takes its store's URL, or a ``Store``), and the worker process.

A case that starts worker processes takes the ``Children`` of its case process; the workers are
the benchmark's script run again with ``ours_worker(...)``'s arguments, which its ``--worker``
hands to ``serve_ours``. What only one store can do is passed in: the store's counts of write
transactions and statements (``Counts``, SQLite's counting connection) and the CPU meter of a
timed window (``Meter``, PostgreSQL's server processes).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from _durable_harness import (
    GATED,
    STEPS_PER_RUN,
    WAIT_POLL,
    Children,
    Dispatch,
    Figures,
    Gate,
    Meter,
    interleaved,
    rate,
    timed_async,
)

from effects import FatalError
from effects.durable import (
    Engine,
    Queue,
    Run,
    StepDef,
    StepOptions,
    Store,
    Task,
    WorkflowContext,
    WorkflowDef,
    current_step,
    step,
    workflow,
)

STEP_NAMES = tuple(f"step-{i}" for i in range(STEPS_PER_RUN))
#: The flow-control queues of the admission case: one never full, one of concurrency 1.
QUEUE_FREE = "bench-free"
QUEUE_ONE = "bench-one"

#: One way of running a case's workflow on an engine; it returns the units it did.
Variant = Callable[[Engine], Awaitable[int]]
#: A store's counts of write transactions and statements per unit of each variant (see
#: ``durable_steps.counted_figures``), given the variants and the engine's arguments.
Counts = Callable[[dict[str, Variant], dict[str, Any]], Awaitable[Figures]]

# -- workflows and steps --------------------------------------------------------------------------


async def _add_one(n: int) -> int:
    return n + 1


def _add_one_sync(n: int) -> int:
    return n + 1


@workflow("bench:ten-async")
async def ten_async(ctx: WorkflowContext, n: int) -> int:
    """Ten local ``async def`` steps, each adding one."""
    for name in STEP_NAMES:
        n = await ctx.local_step(name, partial(_add_one, n))
    return n


@workflow("bench:ten-sync")
async def ten_sync(ctx: WorkflowContext, n: int) -> int:
    """Ten local ``def`` steps (run in a thread), each adding one."""
    for name in STEP_NAMES:
        n = await ctx.local_step(name, partial(_add_one_sync, n))
    return n


@step("bench:bump")
async def bump(n: int) -> int:
    """The dispatched step: add one."""
    return n + 1


@step("bench:flaky", retries=2, backoff_ms=0)
async def flaky(n: int) -> int:
    """Add one, failing on the first attempt."""
    if current_step().attempt == 1:
        msg = "fails on its first attempt"
        raise RuntimeError(msg)
    return n + 1


@workflow("bench:one-step")
async def one_step(ctx: WorkflowContext, n: int) -> int:
    """Dispatch ``bump`` and return its output."""
    return await ctx.step(bump, n)


@workflow("bench:one-flaky-step")
async def one_flaky_step(ctx: WorkflowContext, n: int) -> int:
    """Dispatch ``flaky`` (one durable retry) and return its output."""
    return await ctx.step(flaky, n)


@workflow("bench:fan")
async def fan(ctx: WorkflowContext, size: int) -> int:
    """Dispatch ``bump`` for 0 .. size - 1 at once (``ctx.all``); the outputs' sum."""
    return sum(await ctx.all(bump, range(size)))


@workflow("bench:sequence")
async def sequence(ctx: WorkflowContext, size: int) -> int:
    """The same steps as ``fan``, dispatched one after another; the outputs' sum."""
    total = 0
    for n in range(size):
        total += await ctx.step(bump, n)
    return total


def fan_output(size: int) -> int:
    """What ``fan`` and ``sequence`` return."""
    return size * (size + 1) // 2


@workflow("bench:one-step-free-queue")
async def one_step_free_queue(ctx: WorkflowContext, n: int) -> int:
    """``one_step`` admitted through a queue that always has a free slot."""
    return await ctx.step(bump, n, queue=QUEUE_FREE)


@workflow("bench:one-step-queue-of-one")
async def one_step_queue_of_one(ctx: WorkflowContext, n: int) -> int:
    """``one_step`` admitted through a queue of concurrency 1."""
    return await ctx.step(bump, n, queue=QUEUE_ONE)


async def _undo(undo: dict[str, Any]) -> int:
    """A local step's undo: give back what it added."""
    return int(undo["output"]) - 1


def _refuse(n: int) -> int:
    msg = f"refused at {n}"
    raise FatalError(msg, "refused")


async def _refuse_async(n: int) -> int:
    """``_refuse`` as a local step of the saga: ``async`` like its other steps (a ``def`` step
    would run in a thread, whose hand-off the undos would be charged with)."""
    return _refuse(n)


@step("bench:unbump")
async def unbump(undo: dict[str, Any]) -> int:
    """The dispatched undo of ``bump``: give back what it added."""
    return int(undo["output"]) - 1


@step("bench:refuse")
async def refuse(n: int) -> int:
    """A dispatched step that fails for good (a ``FatalError``)."""
    return _refuse(n)


@workflow("bench:saga-local")
async def saga_local(ctx: WorkflowContext, fail: bool) -> int:
    """
    Ten local steps, each adding one with an undo; with *fail* the tenth fails instead, so the
    nine before it are undone (nine local compensations) and the run fails.
    """
    n = 0
    for i, name in enumerate(STEP_NAMES):
        if fail and i == len(STEP_NAMES) - 1:
            await ctx.local_step(name, partial(_refuse_async, n))
        n = await ctx.local_step(name, partial(_add_one, n), compensate=_undo)
    return n


@workflow("bench:saga-remote")
async def saga_remote(ctx: WorkflowContext, fail: bool) -> int:
    """``saga_local`` of dispatched steps: ``bump`` undone by ``unbump``; ``refuse`` fails."""
    n = 0
    for i in range(STEPS_PER_RUN):
        if fail and i == STEPS_PER_RUN - 1:
            await ctx.step(refuse, n)
        n = await ctx.step(bump, n, compensate=unbump)
    return n


# -- the worker -----------------------------------------------------------------------------------


def _work(poll_ms: int, concurrency: int | None) -> dict[str, int]:
    """``engine.work``'s arguments: *concurrency* ``None`` is the engine's default."""
    return {"poll_ms": poll_ms} | ({} if concurrency is None else {"concurrency": concurrency})


def ours_worker(
    url: str, poll_ms: int, *, concurrency: int | None = None, gated: bool = False
) -> list[str]:
    """The arguments that make the benchmark's script a worker of ours (see ``serve_ours``)."""
    shown = "default" if concurrency is None else str(concurrency)
    return ["--worker", "ours", url, str(poll_ms), shown, *((GATED,) if gated else ())]


def serve_ours(args: Sequence[str]) -> None:
    """Be the worker that *args* (``ours_worker``'s, after ``--worker ours``) describe."""
    url, poll_ms, concurrency, *flags = args
    asyncio.run(
        worker_ours(
            url,
            int(poll_ms),
            concurrency=None if concurrency == "default" else int(concurrency),
            gated=GATED in flags,
        )
    )


async def worker_ours(
    url: str, poll_ms: int, *, concurrency: int | None = None, gated: bool = False
) -> None:
    """Serve the steps until SIGTERM, SIGINT or stdin closes (*gated*: from SIGUSR1 on)."""
    async with Engine(url, steps=[bump, flaky]) as engine:
        gate = Gate(gated, engine.stop)
        print("ready", flush=True)
        await gate.go.wait()
        # work() forgets a stop() that came before it: a worker told to leave does not start.
        if not gate.left.is_set():
            await engine.work(**_work(poll_ms, concurrency))


# -- local steps ----------------------------------------------------------------------------------


async def case_ours_local(url: str, sync_steps: bool, seconds: float) -> Figures:
    """Runs of the 10-step local workflow, one after another (``start`` + ``run_until_idle``)."""
    definition = ten_sync if sync_steps else ten_async
    async with Engine(url, workflows=[definition]) as engine:

        async def one_run() -> int:
            await engine.start(definition, 0)
            await engine.run_until_idle()
            return STEPS_PER_RUN

        await one_run()
        figures = await timed_async(seconds, one_run)
        runs = round(figures["count"]) // STEPS_PER_RUN + 1
        done = await engine.list_runs(status="completed", limit=runs + 1)
        if runs != len(done) or any(run.output != STEPS_PER_RUN for run in done):
            msg = f"expected {runs} runs completed with output {STEPS_PER_RUN}, got {done[:3]}"
            raise RuntimeError(msg)
    return figures


#: The slices the telemetry case alternates, in seconds (each side in turn, so load from other
#: processes hits both alike).
TELEMETRY_SLICE_S = 0.25


async def case_ours_telemetry(url: str, seconds: float) -> Figures:
    """
    The local-step case (runs of the 10-step workflow, ``start`` + ``run_until_idle``) on one
    engine, without and with ``attach_otel`` in alternating slices: the SDK's tracer provider
    with a ``BatchSpanProcessor`` (what production uses) whose exporter drops what it is given
    (it counts the spans, so the case checks one span per step and one root per run), and a
    meter provider read by an ``InMemoryMetricReader``. Steps/s of each side over all its slices.

    A third side, interleaved too, is the SDK's floor (``sdk_floor``): the spans and histogram
    values the telemetry exports, made by hand on providers set up alike, with no engine.
    """
    # Imported here: only this case needs the SDK (a dev dependency).
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from effects.durable.instrumentation import attach_otel

    class Dropped(SpanExporter):
        """Counts the spans it is given, keeps none."""

        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

    exporter = Dropped()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    floor_tracers = TracerProvider()
    floor_tracers.add_span_processor(BatchSpanProcessor(Dropped()))
    floor_meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    floor = sdk_floor(floor_tracers, floor_meters)
    # Per side: items, wall-clock seconds, and this thread's CPU seconds.
    totals = {"plain": [0.0, 0.0, 0.0], "otel": [0.0, 0.0, 0.0], "sdk": [0.0, 0.0, 0.0]}

    def add(side: str, figures: Figures) -> None:
        totals[side][0] += figures["count"]
        totals[side][1] += figures["seconds"]
        totals[side][2] += figures["cpu_us"] * figures["count"] / 1e6

    traced_runs = 0
    async with Engine(url, workflows=[ten_async]) as engine:

        async def one_run() -> int:
            await engine.start(ten_async, 0)
            await engine.run_until_idle()
            return STEPS_PER_RUN

        await one_run()
        slices = max(2, round(seconds / TELEMETRY_SLICE_S))
        for n in range(slices):
            for side in ("plain", "otel", "sdk") if n % 2 == 0 else ("sdk", "otel", "plain"):
                if side == "sdk":
                    add(side, await timed_async(TELEMETRY_SLICE_S, floor))
                    continue
                detach = (
                    attach_otel(
                        engine, tracer_provider=tracer_provider, meter_provider=meter_provider
                    )
                    if side == "otel"
                    else None
                )
                figures = await timed_async(TELEMETRY_SLICE_S, one_run)
                if detach is not None:
                    detach()
                    traced_runs += round(figures["count"]) // STEPS_PER_RUN
                add(side, figures)
    for provider in (tracer_provider, meter_provider, floor_tracers, floor_meters):
        provider.shutdown()
    expected = traced_runs * (STEPS_PER_RUN + 1)
    if exporter.spans != expected:
        msg = (
            f"expected {expected} spans (a root and {STEPS_PER_RUN} steps per run),"
            f" got {exporter.spans}"
        )
        raise RuntimeError(msg)
    plain, otel, sdk = (count / elapsed for count, elapsed, _ in totals.values())
    plain_cpu, otel_cpu, sdk_cpu = (cpu / count * 1e6 for count, _, cpu in totals.values())
    return {
        "plain_rate": plain,
        "otel_rate": otel,
        "rate": otel,
        "spans": exporter.spans,
        "sdk_floor_us": 1e6 / sdk,
        "plain_cpu_us": plain_cpu,
        "otel_cpu_us": otel_cpu,
        "sdk_floor_cpu_us": sdk_cpu,
    }


def sdk_floor(tracer_provider: Any, meter_provider: Any) -> Callable[[], Awaitable[int]]:
    """
    One run's telemetry made by hand, the SDK's work alone (the floor of ``attach_otel``): a
    root span, then per step a child span with the eight attributes a step's span has and one
    histogram value; the counters are left out (``attach_otel`` counts them in ints, and a
    collection reads them). It returns the steps it stood for.
    """
    from opentelemetry import trace

    tracer = tracer_provider.get_tracer("bench.floor")
    histogram = meter_provider.get_meter("bench.floor").create_histogram("bench.duration")
    labels = {
        "durable.workflow.name": ten_async.name,
        "durable.step.name": STEP_NAMES[0],
        "durable.step.kind": "local",
        "durable.step.outcome": "completed",
    }
    runs = 0

    async def once() -> int:
        nonlocal runs
        runs += 1
        run_id = f"floor-{runs}"
        at = time.time_ns()
        root = tracer.start_span(
            f"durable.run {ten_async.name}",
            start_time=at,
            attributes={"durable.run.id": run_id, "durable.workflow.name": ten_async.name},
        )
        root.end(end_time=at)
        made = root.get_span_context()
        parent = trace.set_span_in_context(
            trace.NonRecordingSpan(
                trace.SpanContext(
                    made.trace_id, made.span_id, is_remote=True, trace_flags=made.trace_flags
                )
            )
        )
        for seq, name in enumerate(STEP_NAMES, 1):
            span = tracer.start_span(
                f"durable.step {name}",
                context=parent,
                start_time=at,
                attributes={
                    "durable.run.id": run_id,
                    "durable.workflow.name": ten_async.name,
                    "durable.step.name": name,
                    "durable.step.seq": seq,
                    "durable.step.id": f"{run_id}:{seq}",
                    "durable.step.kind": "local",
                    "durable.step.attempt": 1,
                    "durable.step.redispatched": False,
                },
            )
            span.end(end_time=at)
            histogram.record(0.0, labels)
        return STEPS_PER_RUN

    return once


async def _timed_while_working(
    engine: Engine, seconds: float, once: Callable[[], Awaitable[int]], **work: int
) -> Figures:
    """*once* warmed up, then timed for *seconds*, while the engine's ``work(**work)`` runs."""
    worker = asyncio.get_running_loop().create_task(engine.work(**work))
    try:
        await once()
        return await timed_async(seconds, once)
    finally:
        engine.stop()
        await worker


async def case_ours_local_work(url: str, seconds: float) -> Figures:
    """Runs of the 10-step local workflow, one after another: start, then wait (work() runs)."""
    async with Engine(url, workflows=[ten_async]) as engine:

        async def one_run() -> int:
            run = await engine.wait(await engine.start(ten_async, 0))
            if run.output != STEPS_PER_RUN:
                msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
                raise RuntimeError(msg)
            return STEPS_PER_RUN

        return await _timed_while_working(engine, seconds, one_run, poll_ms=50)


async def case_ours_concurrent_work(url: str, runs: int, seconds: float, poll_ms: int) -> Figures:
    """Batches of *runs* runs of the 10-step workflow started together, waited for, work() runs."""
    async with Engine(url, workflows=[ten_async]) as engine:

        async def one_batch() -> int:
            run_ids = await asyncio.gather(*(engine.start(ten_async, i) for i in range(runs)))
            done = await asyncio.gather(*(engine.wait(r, poll_ms=poll_ms) for r in run_ids))
            for i, run in enumerate(done):
                if run.status != "completed" or run.output != i + STEPS_PER_RUN:
                    msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
                    raise RuntimeError(msg)
            return STEPS_PER_RUN * runs

        return await _timed_while_working(
            engine, seconds, one_batch, poll_ms=poll_ms, concurrency=runs
        )


async def case_ours_concurrent(
    store: str | Store, *, runs: int, seconds: float, counts: Counts | None = None
) -> Figures:
    """
    Batches of *runs* runs of the 10-step local workflow, started together, run together
    (``run_until_idle``); with *counts*, the store's counts per step too.
    """

    async def once(engine: Engine) -> int:
        run_ids = await asyncio.gather(*(engine.start(ten_async, 0) for _ in range(runs)))
        await engine.run_until_idle()
        last[:] = run_ids
        return runs * STEPS_PER_RUN

    last: list[str] = []
    async with Engine(store, workflows=[ten_async]) as engine:
        await once(engine)
        figures = await timed_async(seconds, partial(once, engine))
        for run_id in last:
            run = await engine.get_run(run_id)
            if (run.status, run.output) != ("completed", STEPS_PER_RUN):
                msg = f"run {run_id} ended {run.status} with {run.output!r} {run.error!r}"
                raise RuntimeError(msg)
    if counts is not None:
        figures.update(await counts({"step": once}, {"workflows": [ten_async]}))
    return figures


# -- dispatched steps -----------------------------------------------------------------------------


async def wait_completed(
    engine: Engine, run_ids: Sequence[str], outputs: Sequence[Any] | None = None
) -> None:
    """
    Wait (polling every ``WAIT_POLL``) until every run completed with its output in *outputs*
    (by default: run *n* with ``n + 1``, the output of ``one_step`` started with *n*).
    """
    for n, run_id in enumerate(run_ids):
        while (run := await engine.get_run(run_id)).status in ("pending", "running", "suspended"):
            await asyncio.sleep(WAIT_POLL)
        if run.status != "completed" or run.output != (n + 1 if outputs is None else outputs[n]):
            msg = f"run {run_id} ended {run.status} with {run.output!r} {run.error!r}"
            raise RuntimeError(msg)


async def _start_and_wait(engine: Engine, batch: int, poll_ms: int) -> None:
    """Start runs 0..batch-1 of ``one_step``, each waited for from its start; check outputs."""
    waits: list[asyncio.Task[Run]] = []
    for n in range(batch):
        run_id = await engine.start(one_step, n)
        waits.append(asyncio.get_running_loop().create_task(engine.wait(run_id, poll_ms=poll_ms)))
    for n, run in enumerate(await asyncio.gather(*waits)):
        if run.status != "completed" or run.output != n + 1:
            msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
            raise RuntimeError(msg)


async def case_ours_dispatch(
    children: Children,
    url: str,
    dispatch: Dispatch,
    *,
    concurrency: int | None = None,
    wait_each: bool = False,
    meter: Meter | None = None,
) -> Figures:
    """
    Batches of runs dispatching one step to worker processes, the orchestrator's ``work()`` in
    this process (it and the workers at *concurrency*; ``None``: the engine's default). A
    batch's runs are started, then polled for until all completed; with *wait_each*, each is
    waited for (``engine.wait``) from its start. With *meter*, the CPU per run too.
    """
    workers, seconds, batch, poll_ms = dispatch
    async with Engine(url, workflows=[one_step]) as engine:
        for _ in range(workers):
            children.start(*ours_worker(url, poll_ms, concurrency=concurrency))
        loop = asyncio.get_running_loop()
        orchestrator = loop.create_task(
            engine.work(**_work(poll_ms, concurrency)), name="engine.work()"
        )
        try:

            async def one_batch() -> int:
                if wait_each:
                    await _start_and_wait(engine, batch, poll_ms)
                else:
                    run_ids = [await engine.start(one_step, n) for n in range(batch)]
                    await children.watch(wait_completed(engine, run_ids), orchestrator)
                return batch

            await one_batch()
            window = None if meter is None else meter(children.pids)
            figures = await timed_async(seconds, one_batch)
            if window is not None:
                figures.update(window.per_item(figures["count"]))
        finally:
            engine.stop()
            await orchestrator
    return figures


async def case_ours_drain(
    children: Children,
    url: str,
    *,
    workers: int,
    items: int,
    poll_ms: int,
    concurrency: int,
    wait_poll_ms: int,
    meter: Meter,
) -> Figures:
    """
    *items* runs suspended on their dispatched step, then drained by *workers* processes that
    begin together; each run waited for (``engine.wait``, reading the store every
    *wait_poll_ms*) in this process, whose ``work()`` completes them.
    """
    async with Engine(url, workflows=[one_step]) as engine:
        loop = asyncio.get_running_loop()
        orchestrator = loop.create_task(engine.work(poll_ms=poll_ms, concurrency=concurrency))
        try:
            run_ids: list[str] = []
            for first in range(0, items, concurrency):
                chunk = range(first, min(items, first + concurrency))
                run_ids += await asyncio.gather(*(engine.start(one_step, n) for n in chunk))
            # Each run's first turn dispatches its step and suspends it; no one serves the step.
            while len(await engine.list_runs(status="suspended", limit=items)) < items:
                await asyncio.sleep(0.05)
            for _ in range(workers):
                children.start(*ours_worker(url, poll_ms, concurrency=concurrency, gated=True))
            waits = [
                loop.create_task(engine.wait(run_id, poll_ms=wait_poll_ms)) for run_id in run_ids
            ]
            await asyncio.sleep(0)  # every wait is listening before the workers begin
            window = meter(children.pids)
            start = time.perf_counter()
            children.go()
            runs = await asyncio.gather(*waits)
            elapsed = time.perf_counter() - start
            cpu = window.per_item(items)
            children.stop()
            for n, run in enumerate(runs):
                if run.status != "completed" or run.output != n + 1:
                    msg = f"run {run.run_id} ended {run.status} with {run.output!r}"
                    raise RuntimeError(msg)
        finally:
            engine.stop()
            await orchestrator
    return {**rate(items, elapsed), **cpu}


async def case_ours_retry(url: str, seconds: float) -> Figures:
    """Per-run time of a dispatched step with one durable retry, and without, interleaved."""
    async with Engine(url, workflows=[one_step, one_flaky_step], steps=[bump, flaky]) as engine:
        spent = {one_step.name: 0.0, one_flaky_step.name: 0.0}
        runs = {one_step.name: 0, one_flaky_step.name: 0}
        last = ""

        async def block() -> int:
            nonlocal last
            for definition in (one_step, one_flaky_step):
                start = time.perf_counter()
                for n in range(5):
                    last = await engine.start(definition, n)
                    await engine.run_until_idle()
                spent[definition.name] += time.perf_counter() - start
                runs[definition.name] += 5
            return 10

        await block()
        for name in spent:
            spent[name] = 0.0
            runs[name] = 0
        await timed_async(seconds, block)
        (checkpoint,) = await engine.checkpoints(last)
        if (checkpoint.attempts, checkpoint.status) != (2, "completed"):
            msg = f"the flaky step should complete on attempt 2, got {checkpoint!r}"
            raise RuntimeError(msg)
    plain = spent[one_step.name] / runs[one_step.name]
    retried = spent[one_flaky_step.name] / runs[one_flaky_step.name]
    return {
        "runs": runs[one_step.name] + runs[one_flaky_step.name],
        "rate": 1 / retried,
        "plain_us": plain * 1e6,
        "retried_us": retried * 1e6,
        "cost_us": (retried - plain) * 1e6,
    }


async def case_ours_saga(url: str | Store, seconds: float) -> Figures:
    """
    The cost of an undo beside the cost of a step of its kind (issue 21): a 10-step run that
    completes, and the same run failing at its last step and undoing the nine before it,
    interleaved, one engine serving the steps; local steps, then dispatched ones. Per kind:
    ``{kind}_completed_us``, ``{kind}_compensated_us`` (per run), ``{kind}_step_us`` (a
    completed run's time over its ten steps) and ``{kind}_undo_us`` (the compensated run's
    extra time over its nine undos), and their ratio ``{kind}_undo_per_step``.
    """
    last: dict[str, str] = {}

    def variant(definition: WorkflowDef[bool, int], fail: bool) -> Variant:
        expected = "failed" if fail else "completed"

        async def once(engine: Engine) -> int:
            run_id = await engine.start(definition, fail)
            await engine.run_until_idle()
            run = await engine.get_run(run_id)
            if run.status != expected:
                msg = f"{definition.name} ended {run.status}, not {expected}: {run.error!r}"
                raise RuntimeError(msg)
            last[definition.name] = run_id
            return 1

        return once

    variants = {
        "local_completed": variant(saga_local, False),
        "local_compensated": variant(saga_local, True),
        "remote_completed": variant(saga_remote, False),
        "remote_compensated": variant(saga_remote, True),
    }
    async with Engine(
        url, workflows=[saga_local, saga_remote], steps=[bump, unbump, refuse]
    ) as engine:
        figures = await interleaved(engine, variants, seconds)
        for name, run_id in last.items():
            undone = [
                c for c in await engine.checkpoints(run_id) if c.name.startswith("compensate:")
            ]
            if [c.status for c in undone] != ["completed"] * (STEPS_PER_RUN - 1):
                msg = f"{name}: the failed run should have undone nine steps, got {undone!r}"
                raise RuntimeError(msg)
    for kind in ("local", "remote"):
        completed = figures[f"{kind}_completed_us"]
        compensated = figures[f"{kind}_compensated_us"]
        step_us = completed / STEPS_PER_RUN
        undo_us = (compensated - completed) / (STEPS_PER_RUN - 1)
        figures[f"{kind}_step_us"] = step_us
        figures[f"{kind}_undo_us"] = undo_us
        figures[f"{kind}_undo_per_step"] = undo_us / step_us
    return figures


# -- fans and queues ------------------------------------------------------------------------------


async def case_ours_fan(
    url: str, size: int, seconds: float, counts: Counts | None = None
) -> Figures:
    """
    A fan of *size* steps against *size* steps one after another, one engine serving all; with
    *counts*, the store's counts per run too.
    """

    def variant(definition: WorkflowDef[int, int]) -> Variant:
        async def once(engine: Engine) -> int:
            run_id = await engine.start(definition, size)
            await engine.run_until_idle()
            run = await engine.get_run(run_id)
            if (run.status, run.output) != ("completed", fan_output(size)):
                msg = f"{definition.name} run ended {run.status} with {run.output!r} {run.error!r}"
                raise RuntimeError(msg)
            return 1

        return once

    variants = {"fan": variant(fan), "sequence": variant(sequence)}
    engine_args: dict[str, Any] = {"workflows": [fan, sequence], "steps": [bump]}
    async with Engine(url, **engine_args) as engine:
        figures = await interleaved(engine, variants, seconds)
    if counts is not None:
        figures.update(await counts(variants, engine_args))
    return figures


async def case_ours_fan_procs(
    children: Children, url: str, *, workers: int, size: int, seconds: float, poll_ms: int
) -> Figures:
    """The fan against the sequence, their steps served by *workers* worker processes."""
    async with Engine(url, workflows=[fan, sequence]) as engine:
        for _ in range(workers):
            children.start(*ours_worker(url, poll_ms))
        loop = asyncio.get_running_loop()
        orchestrator = loop.create_task(engine.work(poll_ms=poll_ms), name="engine.work()")

        def variant(definition: WorkflowDef[int, int]) -> Variant:
            async def once(engine: Engine) -> int:
                run_id = await engine.start(definition, size)
                waited = wait_completed(engine, [run_id], [fan_output(size)])
                await children.watch(waited, orchestrator)
                return 1

            return once

        try:
            variants = {"fan": variant(fan), "sequence": variant(sequence)}
            figures = await interleaved(engine, variants, seconds)
        finally:
            engine.stop()
            await orchestrator
    return figures


async def case_ours_queue(
    url: str, batch: int, seconds: float, counts: Counts | None = None
) -> Figures:
    """
    Batches of runs dispatching one step: without a queue, through a queue with a free slot for
    every run, and through a queue of concurrency 1 (all but one attempt wait for admission);
    with *counts*, the store's counts per attempt too.
    """
    definitions = {
        "plain": one_step,
        "free": one_step_free_queue,
        "saturated": one_step_queue_of_one,
    }
    engine_args: dict[str, Any] = {
        "workflows": list(definitions.values()),
        "steps": [bump],
        "queues": [Queue(QUEUE_FREE, concurrency=batch), Queue(QUEUE_ONE, concurrency=1)],
    }
    last: dict[str, list[str]] = {}

    def variant(kind: str) -> Variant:
        definition = definitions[kind]

        async def once(engine: Engine) -> int:
            # Started together, as concurrent callers would: under FULL they share a commit.
            run_ids = await asyncio.gather(*(engine.start(definition, n) for n in range(batch)))
            await engine.run_until_idle()
            last[kind] = list(run_ids)
            return batch

        return once

    variants = {kind: variant(kind) for kind in definitions}
    async with Engine(url, **engine_args) as engine:
        figures = await interleaved(engine, variants, seconds)
        for run_ids in last.values():
            await wait_completed(engine, run_ids)
        # The saturated queue did make attempts wait: count the runs with a step.queued event.
        waited = 0
        for run_id in last["saturated"]:
            events = await engine.events(run_id)
            waited += any(event.name == "step.queued" for event in events)
        if batch > 1 and waited == 0:
            msg = "no attempt waited for the queue of concurrency 1"
            raise RuntimeError(msg)
        figures["waited"] = waited
    if counts is not None:
        figures.update(await counts(variants, engine_args))
    return figures


# -- heartbeats -----------------------------------------------------------------------------------

#: The handler variants of the heartbeat case: no beats, beats inside the half-window (kept in
#: memory), beats each past the half-window (each persisted), and a store write per beat.
BEAT_KINDS = ("none", "throttled", "persisted", "naive")
#: The liveness window (``timeout_ms``) or the lost-dispatch lease of the heartbeat case (ms).
BEAT_WINDOW_MS = 10_000
#: Event-loop turns a handler yields after each beat, in every variant: enough for a persisted
#: beat's write to finish (under group commit it is queued, flushed, then resumed), so that the
#: next beat is never skipped for a write still in flight.
BEAT_YIELDS = 3
#: The engine's lease in the heartbeat case: its clock jumps by half a window per persisted
#: beat, and no claim or run lease may lapse meanwhile.
LONG_LEASE_MS = 10**9


class SkipClock:
    """
    The wall clock plus an offset that the ``persisted`` handler moves by half a window before
    each beat, so that every beat is due for a write without the run sleeping. It has no
    ``advance``, so the engine treats it as a real clock: no wait is parked.
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        """Epoch seconds, skipped ahead."""
        return time.time() + self.offset

    def skip(self, ms: int) -> None:
        """Move the clock *ms* ahead."""
        self.offset += ms / 1000

    def sleep(self, seconds: float) -> None:
        """Block the thread for *seconds*."""
        time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        """Suspend the task for *seconds*."""
        await asyncio.sleep(seconds)


def _dispatching(name: str, definition: StepDef[int, int]) -> WorkflowDef[int, int]:
    @workflow(name)
    async def dispatch(ctx: WorkflowContext, n: int) -> int:
        return await ctx.step(definition, n)

    return dispatch


def heartbeat_defs(
    path: str, beats: int, store: Store, clock: SkipClock, spent: dict[str, list[float]]
) -> tuple[dict[str, WorkflowDef[int, int]], list[StepDef[int, int]]]:
    """
    For each of ``BEAT_KINDS``, a workflow dispatching a step whose handler beats *beats* times
    so; *path* is ``liveness`` (the step has ``timeout_ms``) or ``lease`` (a durable step, the
    engine has ``remote_redispatch_ms``). Each handler appends its own duration (seconds) to
    ``spent[kind]``: what runs on the event loop while it yields (a beat's write, the waiting
    turn woken by a beat) is inside it, the run's other commits are not.
    """
    lease = BEAT_WINDOW_MS if path == "lease" else None
    options: StepOptions = {"timeout_ms": BEAT_WINDOW_MS} if path == "liveness" else {}

    async def pause() -> None:
        for _ in range(BEAT_YIELDS):
            await asyncio.sleep(0)

    async def none(n: int) -> int:
        for _ in range(beats):
            await pause()
        return n + 1

    async def throttled(n: int) -> int:
        beat = current_step().heartbeat
        for i in range(beats):
            beat(i)
            await pause()
        return n + 1

    async def persisted(n: int) -> int:
        beat = current_step().heartbeat
        for i in range(beats):
            clock.skip(BEAT_WINDOW_MS // 2)
            beat(i)
            await pause()
        return n + 1

    async def naive(n: int) -> int:
        here = current_step()
        task = Task(0, here.run_id, here.seq, here.step_id, here.name, "default", n, here.attempt)
        for i in range(beats):
            now = round(clock.now() * 1000)
            until = None if lease is None else now + lease
            await store.heartbeat(task, now=now, progress=json.dumps(i), lease_until=until)
            await pause()
        return n + 1

    def timed(kind: str, fn: Callable[[int], Awaitable[int]]) -> Callable[[int], Awaitable[int]]:
        async def handler(n: int) -> int:
            start = time.perf_counter()
            try:
                return await fn(n)
            finally:
                spent[kind].append(time.perf_counter() - start)

        return handler

    handlers = {"none": none, "throttled": throttled, "persisted": persisted, "naive": naive}
    steps = {
        kind: step(f"bench:beat-{kind}", **options)(timed(kind, fn))
        for kind, fn in handlers.items()
    }
    workflows = {kind: _dispatching(f"bench:beats-{kind}", steps[kind]) for kind in handlers}
    return workflows, list(steps.values())


async def case_ours_heartbeat(store: Store, path: str, beats: int, seconds: float) -> Figures:
    """
    Per-run time of a dispatched step beating *beats* times in each of ``BEAT_KINDS``, one
    engine serving the workflow and the step, runs one after another, interleaved; and the beats
    each variant persisted per run (the checkpoint's revisions beyond those of ``none``).
    """
    clock = SkipClock()
    spent: dict[str, list[float]] = {kind: [] for kind in BEAT_KINDS}
    workflows, steps = heartbeat_defs(path, beats, store, clock, spent)
    last: dict[str, str] = {}

    def variant(kind: str) -> Variant:
        async def once(engine: Engine) -> int:
            last[kind] = await engine.start(workflows[kind], 1)
            await engine.run_until_idle()
            return 1

        return once

    async with Engine(
        store,
        workflows=workflows.values(),
        steps=steps,
        clock=clock,
        lease_ms=LONG_LEASE_MS,
        remote_redispatch_ms=BEAT_WINDOW_MS if path == "lease" else None,
    ) as engine:
        figures = await interleaved(engine, {kind: variant(kind) for kind in BEAT_KINDS}, seconds)
        for kind, durations in spent.items():
            # The warm-up block's durations are left out, as interleaved leaves out its times.
            figures[f"{kind}_handler_us"] = statistics.median(durations[1:]) * 1e6
        revisions: dict[str, int] = {}
        for kind, run_id in last.items():
            await wait_completed(engine, [run_id], [2])
            (checkpoint,) = await engine.checkpoints(run_id)
            revisions[kind] = checkpoint.rev
    writes = {kind: revisions[kind] - revisions["none"] for kind in BEAT_KINDS}
    expected = {"none": 0, "throttled": 0, "persisted": beats, "naive": beats}
    if writes != expected:
        msg = f"expected these beats persisted per run: {expected}; got {writes}"
        raise RuntimeError(msg)
    figures.update({f"{kind}_writes": writes[kind] for kind in BEAT_KINDS})
    figures["beats"] = beats
    return figures
