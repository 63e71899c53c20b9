"""The liveness path: timeout_ms windows, pickup beats, heartbeats, back-to-back re-dispatch."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from effects.durable import (
    Engine,
    RemoteStepError,
    RemoteStepTimeout,
    Task,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from effects.durable._engine import open_store
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable._store import TaskOutcome
from tests.durable.support import START_MS, Intercepting, events_named, execute, relative

pytestmark = pytest.mark.anyio


def watched(handler: Any, **policy: Any) -> tuple[Any, Any]:
    """A step 'render' running *handler* with *policy*, and a workflow awaiting it once."""

    @step("render", **policy)
    async def render(value: Any) -> Any:
        return await handler(value)

    @workflow("renders")
    async def renders(ctx: WorkflowContext, value: Any) -> Any:
        try:
            return await ctx.step(render, value)
        except RemoteStepTimeout as timeout:
            return {"timeout": timeout.phase, "window": timeout.timeout_ms, "step": timeout.step_id}

    return render, renders


async def test_pickup_timeout_redispatches_back_to_back_then_raises(
    durable_engine: DurableEngineFactory,
) -> None:
    """No worker claims the task: each attempt times out after pickup_timeout_ms, no backoff."""

    async def never(_: Any) -> Any:
        return None

    _, renders = watched(never, timeout_ms=1000, pickup_timeout_ms=5000, retries=3, backoff_ms=9999)
    async with durable_engine(workflows=[renders]) as engine:  # no worker at all
        run_id = await engine.start(renders, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
        (checkpoint,) = await engine.checkpoints(run_id)
    assert {"timeout": "pickup", "window": 5000, "step": f"{run_id}:1"} == run.output
    assert [0, 5000, 10000] == relative([e.at for e in dispatched])
    assert (3, True) == (checkpoint.attempts, checkpoint.final)
    assert ["remote_step_timeout"] * 3 == [e.code for e in checkpoint.errors]


def with_ghost(
    factory: DurableEngineFactory, ghost_attempts: set[int], **engine: Any
) -> tuple[Engine, list[Task]]:
    """
    An engine on the test's store where a ghost worker of another process claims the given
    attempts the moment they are dispatched, and then goes silent (the test may make it beat).
    """
    claimed: list[Task] = []

    async def steal(_: None, commit: Any) -> None:
        if any(t.attempt in ghost_attempts for t in commit.tasks):
            claimed.extend(
                await inner.claim_tasks(
                    groups=["default"],
                    now=commit.now,
                    claim_until=commit.now + 10**9,
                    worker="ghost",
                    limit=10,
                )
            )

    inner = open_store(factory.url)
    store = _GhostFirst(
        Intercepting(inner, commit_turn=steal), factory.url, ghost_attempts, claimed
    )
    options = {"clock": factory.clock, "random": factory.random, **engine}
    return Engine(store, **options), claimed


class _GhostFirst:
    """
    The ghost claims its attempts first even where the engine's own claim runs concurrently
    with the dispatch (a server store): an attempt the engine claims anyway becomes the ghost's.
    """

    def __init__(self, store: Any, url: str, attempts: set[int], claimed: list[Task]) -> None:
        self._store, self._url, self._attempts, self._claimed = store, url, attempts, claimed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def claim_tasks(self, **options: Any) -> list[Task]:
        tasks: list[Task] = await self._store.claim_tasks(**options)
        mine = [t for t in tasks if t.attempt not in self._attempts]
        for task in tasks:
            if task.attempt in self._attempts:
                execute(
                    self._url,
                    "UPDATE tasks SET claimed_by = 'ghost', claim_until = ? WHERE task_id = ?",
                    (options["now"] + 10**9, task.task_id),
                )
                self._claimed.append(task)
        return mine


async def test_running_silence_times_out_after_timeout_ms(
    durable_engine: DurableEngineFactory,
) -> None:
    """Once claimed (the pickup beat), silence longer than timeout_ms is a running timeout."""
    attempts: list[int] = []

    async def second(_: Any) -> Any:
        attempts.append(current_step().attempt)
        return "second attempt"

    render, renders = watched(second, timeout_ms=2000, pickup_timeout_ms=60_000, retries=2)
    engine, ghost = with_ghost(durable_engine, {1}, workflows=[renders], steps=[render])
    async with engine:
        run_id = await engine.start(renders, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        failed = await events_named(engine, run_id, "step.failed")
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert "second attempt" == run.output
    assert [1] == [t.attempt for t in ghost]
    assert [2] == attempts
    assert ["running"] == [e.data["error"]["details"]["phase"] for e in failed]
    # The running window (2 s), not the pickup window (60 s), timed the ghost out.
    assert [0, 2000] == relative([e.at for e in dispatched])


async def test_heartbeats_keep_a_long_step_alive(durable_engine: DurableEngineFactory) -> None:
    """A worker elsewhere beating every 1.5 s keeps a 2 s window open for 9 s, then reports."""

    async def unused(_: Any) -> Any:
        return None

    _, renders = watched(unused, timeout_ms=2000, retries=1)
    engine, ghost = with_ghost(durable_engine, {1}, workflows=[renders])
    async with engine:
        run_id = await engine.start(renders, None)
        await engine.run_until_idle()
        (task,) = ghost
        for n in range(6):
            await engine.run_for(1.5)
            now = round(durable_engine.clock.now() * 1000)
            progress = f'{{"done":{n}}}'
            assert await engine.store.heartbeat(task, now=now, progress=progress, lease_until=None)
            assert "running" == (await engine.get_run(run_id)).status
        await engine.store.record_result(task, "ghost", TaskOutcome(output='"alive"'), now)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
    assert ("completed", "alive") == (run.status, run.output)
    assert {"done": 5} == checkpoint.progress
    assert 1 == checkpoint.attempts


async def test_silence_after_the_last_heartbeat_still_times_out(
    durable_engine: DurableEngineFactory,
) -> None:
    """Beats re-arm the window; when they stop, the step times out one window after the last."""

    async def unused(_: Any) -> Any:
        return None

    _, renders = watched(unused, timeout_ms=2000, retries=1)
    engine, ghost = with_ghost(durable_engine, {1}, workflows=[renders])
    async with engine:
        run_id = await engine.start(renders, None)
        await engine.run_until_idle()
        (task,) = ghost
        await engine.run_for(1.5)
        await engine.store.heartbeat(task, now=START_MS + 1500, progress=None, lease_until=None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (failed,) = await events_named(engine, run_id, "step.failed")
    assert {"timeout": "running", "window": 2000, "step": f"{run_id}:1"} == run.output
    assert [3500] == relative([failed.at])


async def test_a_reported_error_surfaces_on_the_first_attempt(
    durable_engine: DurableEngineFactory,
) -> None:
    """On the liveness path a worker's error is not retried, whatever retries says."""
    calls: list[int] = []

    async def fails(_: Any) -> Any:
        calls.append(1)
        raise ConnectionError("reported")

    render, _ = watched(fails, timeout_ms=1000, retries=5)

    @workflow("catches")
    async def catches(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.step(render, None)
        except RemoteStepError as error:
            return error.step_error.message
        return "no error"

    async with durable_engine(workflows=[catches], steps=[render]) as engine:
        run_id = await engine.start(catches, None)
        await engine.run_until_idle(advance_time=True)
        assert "reported" == (await engine.get_run(run_id)).output
    assert [1] == calls


async def test_a_result_recorded_by_another_process_is_used(
    durable_engine: DurableEngineFactory,
) -> None:
    """Before timing out, the engine re-reads the checkpoint: another worker's result wins."""

    async def unused(_: Any) -> Any:
        return None

    _, renders = watched(unused, timeout_ms=4000, retries=1)
    async with durable_engine(workflows=[renders]) as engine:
        run_id = await engine.start(renders, 5)
        await engine.run_until_idle()  # dispatched; the turn waits in memory
        # A worker elsewhere (another engine on the store) claims and reports.
        now = START_MS
        (task,) = await engine.store.claim_tasks(
            groups=["default"], now=now, claim_until=now + 30_000, worker="elsewhere", limit=1
        )
        await engine.store.record_result(task, "elsewhere", TaskOutcome(output='"from afar"'), now)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("completed", "from afar") == (run.status, run.output)


async def test_the_next_attempt_reads_the_last_progress(
    durable_engine: DurableEngineFactory,
) -> None:
    """An attempt that went silent after reporting progress hands it to the next attempt."""
    seen: list[Any] = []

    async def resumable(_: Any) -> Any:
        seen.append(current_step().last_progress)
        return "resumed"

    render, renders = watched(resumable, timeout_ms=2000, retries=2)
    engine, ghost = with_ghost(durable_engine, {1}, workflows=[renders], steps=[render])
    async with engine:
        run_id = await engine.start(renders, None)
        await engine.run_until_idle()
        (task,) = ghost
        await engine.run_for(1)
        await engine.store.heartbeat(
            task, now=START_MS + 1000, progress='{"cursor":80}', lease_until=None
        )
        await engine.run_until_idle(advance_time=True)
        assert "resumed" == (await engine.get_run(run_id)).output
    assert [{"cursor": 80}] == seen


@pytest.mark.sqlite_only(
    "counts writes against virtual time: a server's write takes real time, during which the"
    " handler's virtual beats race on and are folded into the write in flight, by design"
)
async def test_a_worker_in_process_beats_without_writing_each_beat(
    durable_engine: DurableEngineFactory,
) -> None:
    """Beats every 10 ms for 3 s under a 1 s window persist about once per half-window."""
    clock = durable_engine.clock
    writes: list[int] = []

    async def chatty(_: Any) -> Any:
        for n in range(300):
            await clock.sleep_async(0.01)
            current_step().heartbeat({"n": n})
        return "done"

    async def count(result: bool, task: Any, **kwargs: Any) -> None:
        writes.append(kwargs["now"])

    render, renders = watched(chatty, timeout_ms=1000, retries=1)
    store = Intercepting(open_store(durable_engine.url), heartbeat=count)
    engine = Engine(
        store,
        workflows=[renders],
        steps=[render],
        clock=clock,
    )
    async with engine:
        run_id = await engine.start(renders, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
    assert "done" == run.output
    assert 5 <= len(writes) <= 7  # one per 500 ms of the 3 s
    assert {"n": 299} == checkpoint.progress


class Dying:
    """A store that works until ``die()``; after it every call fails, as in a dead process."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.dead = False

    def die(self) -> None:
        """Fail every later call."""
        self.dead = True

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.dead and name != "close":
                msg = "the process is dead"
                raise OSError(msg)
            result = attribute(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return call


async def crash_mid_wait(factory: DurableEngineFactory, renders: Any) -> str:
    """Start a run whose turn dispatches a liveness step and dies while it waits in memory."""
    store = Dying(open_store(factory.url))
    dispatcher = Engine(
        store,
        workflows=[renders],
        clock=factory.clock,
        lease_ms=5000,
        reconcile_ms=120_000,
    )
    await dispatcher.open()
    run_id = await dispatcher.start(renders, None)
    await dispatcher.run_until_idle()  # dispatched; the turn waits in memory, holding the lease
    store.die()
    await dispatcher.close()
    return run_id


async def test_a_dead_dispatcher_parks_the_run_and_a_late_result_resumes_it(
    durable_engine: DurableEngineFactory,
) -> None:
    """The dispatcher dies mid-wait: recovery parks the run uncounted; the worker's result wins."""
    calls: list[int] = []

    async def slow(_: Any) -> Any:
        calls.append(current_step().attempt)
        return "done"

    render, renders = watched(slow, timeout_ms=60_000, retries=2)
    run_id = await crash_mid_wait(durable_engine, renders)
    async with durable_engine(workflows=[renders], reconcile_ms=120_000) as survivor:
        durable_engine.clock.advance(6)  # the dead turn's lease lapses
        await survivor.run_until_idle()
        run = await survivor.get_run(run_id)
        assert ("suspended", 0) == (run.status, run.recovery_attempts)
        assert [START_MS + 6000 + 120_000] == [run.wake_at]
        async with durable_engine(steps=[render]) as worker:
            await worker.run_until_idle()  # the original task is still queued: it runs now
        await survivor.run_until_idle()
        run = await survivor.get_run(run_id)
        reconciling = await events_named(survivor, run_id, "run.reconciling")
    assert ("completed", "done", 0) == (run.status, run.output, run.recovery_attempts)
    assert [1] == calls
    assert 1 == len(reconciling)


async def test_after_the_reconcile_wake_the_step_is_dispatched_again(
    durable_engine: DurableEngineFactory,
) -> None:
    """With no result by the reconcile wake, replay dispatches the step again from attempt 1."""
    seen: list[int] = []

    async def quick(_: Any) -> Any:
        seen.append(current_step().attempt)
        return "redone"

    render, renders = watched(quick, timeout_ms=60_000, retries=1)
    run_id = await crash_mid_wait(durable_engine, renders)
    async with durable_engine(workflows=[renders], steps=[render], reconcile_ms=120_000) as engine:
        # Withdraw the original task, as if its worker took it and died without a trace.
        now = round(durable_engine.clock.now() * 1000)
        await engine.store.claim_tasks(
            groups=["default"], now=now, claim_until=now + 10**9, worker="ghost", limit=1
        )
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert ("completed", "redone", 0) == (run.status, run.output, run.recovery_attempts)
    assert [2] == seen
    # The dead turn's lease lapsed 5 s after its last renewal; then the reconcile wake.
    assert [0, 5001 + 120_000] == relative([e.at for e in dispatched])


async def test_timeouts_do_nothing_on_local_steps(durable_engine: DurableEngineFactory) -> None:
    """timeout_ms and pickup_timeout_ms are accepted and ignored by a local step."""
    clock = durable_engine.clock

    @workflow("local-slow")
    async def local_slow(ctx: WorkflowContext, _: None) -> str:
        async def slow() -> str:
            await clock.sleep_async(60)
            return "slow but fine"

        return await ctx.local_step("slow", slow, timeout_ms=10, pickup_timeout_ms=10)

    async with durable_engine(workflows=[local_slow]) as engine:
        run_id = await engine.start(local_slow, None)
        await engine.run_until_idle()
        assert "slow but fine" == (await engine.get_run(run_id)).output


async def test_pickup_timeout_alone_does_nothing(durable_engine: DurableEngineFactory) -> None:
    """pickup_timeout_ms without timeout_ms keeps the durable path: no window, no re-dispatch."""

    async def unused(_: Any) -> Any:
        return None

    _, renders = watched(unused, pickup_timeout_ms=1000, retries=3)
    async with durable_engine(workflows=[renders]) as engine:
        run_id = await engine.start(renders, None)
        await engine.run_for("1h")
        run = await engine.get_run(run_id)
        dispatched = await events_named(engine, run_id, "step.dispatched")
    assert ("suspended", 1) == (run.status, len(dispatched))


async def test_retry_events_are_logged(
    durable_engine: DurableEngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Timeouts and re-dispatches reach stdlib logging under 'effects.durable'."""

    async def unused(_: Any) -> Any:
        return None

    _, renders = watched(unused, timeout_ms=1000, retries=2)
    caplog.set_level("INFO", logger="effects.durable")
    async with durable_engine(workflows=[renders]) as engine:
        await engine.start(renders, None)
        await engine.run_until_idle(advance_time=True)
    names = [getattr(r, "durable_event", None) for r in caplog.records]
    assert ["step.dispatched", "step.failed", "step.dispatched", "step.failed"] == [
        n for n in names if n and n.startswith("step.")
    ]
    assert {"WARNING"} == {
        r.levelname for r in caplog.records if getattr(r, "durable_event", "") == "step.failed"
    }
