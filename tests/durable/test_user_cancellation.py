"""
Cancellation raised by user code is a failed attempt, not the engine stopping; a ``def`` that
raises SystemExit or KeyboardInterrupt fails its attempt and the worker keeps serving.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from effects.durable import (
    Engine,
    RemoteStepError,
    StepFailedError,
    WorkflowContext,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.cli_support import work_process
from tests.durable.support import events_named

pytestmark = pytest.mark.anyio
PATIENCE = 30.0


async def finish(engine: Engine, run_id: str) -> Any:
    """Run everything due, bounded in real time (a loop that re-runs a step forever fails)."""
    await asyncio.wait_for(engine.run_until_idle(advance_time=True), PATIENCE)
    return await engine.get_run(run_id)


async def test_a_local_step_raising_cancelled_error_fails_its_attempts(
    durable_engine: DurableEngineFactory,
) -> None:
    """An async local step's own CancelledError is retried per its policy, then fails."""
    calls: list[int] = []

    async def cancels() -> None:
        calls.append(1)
        raise asyncio.CancelledError("the code's own")

    @workflow("cancelling")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.local_step("cancels", cancels, retries=3)
        except StepFailedError as error:
            return f"{error.step_error.type}: {error.step_error.message}"
        return "not raised"

    async with durable_engine(workflows=[wf]) as engine:
        run = await finish(engine, await engine.start(wf, None))
    assert ("completed", "asyncio.exceptions.CancelledError: the code's own") == (
        run.status,
        run.output,
    )
    assert 3 == len(calls)


async def test_a_task_the_step_awaits_being_cancelled_fails_the_attempt(
    durable_engine: DurableEngineFactory,
) -> None:
    """A CancelledError let out of a task the step awaited is the step's failure."""

    async def awaits_a_cancelled_task() -> None:
        inner = asyncio.get_running_loop().create_task(asyncio.sleep(3600))
        await asyncio.sleep(0)
        inner.cancel()
        await inner

    @workflow("inner")
    async def wf(ctx: WorkflowContext, _: None) -> None:
        await ctx.local_step("inner", awaits_a_cancelled_task, retries=2)

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        run = await finish(engine, run_id)
        failed = await events_named(engine, run_id, "step.failed")
    assert "failed" == run.status
    assert [1, 2] == [e.data["attempt"] for e in failed]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "def"])
async def test_a_handler_raising_cancelled_error_fails_its_attempts(
    durable_engine: DurableEngineFactory, sync: bool
) -> None:
    """A dispatched handler's own CancelledError is a failed attempt, retried per policy."""
    calls: list[int] = []

    def cancels_sync(_: Any) -> None:
        calls.append(1)
        raise asyncio.CancelledError

    async def cancels_async(_: Any) -> None:
        calls.append(1)
        raise asyncio.CancelledError

    handler = step("cancels", retries=2)(cancels_sync if sync else cancels_async)

    @workflow("remote")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.step(handler, None)
        except RemoteStepError as error:
            return error.step_error.type
        return "not raised"

    async with durable_engine(workflows=[wf], steps=[handler]) as engine:
        run = await finish(engine, await engine.start(wf, None))
    assert ("completed", "asyncio.exceptions.CancelledError") == (run.status, run.output)
    assert 2 == len(calls)


@pytest.mark.parametrize("raised", [SystemExit(3), KeyboardInterrupt()], ids=["exit", "ctrl-c"])
async def test_a_def_handler_raising_system_exit_fails_and_the_worker_serves_on(
    durable_engine: DurableEngineFactory, raised: BaseException
) -> None:
    """SystemExit/KeyboardInterrupt from a def handler's thread: a failed attempt, type named."""

    @step("exits")
    def exits(_: Any) -> None:
        raise raised

    @step("fine")
    def fine(n: int) -> int:
        return n + 1

    @workflow("exiting")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.step(exits, None)
        except RemoteStepError as error:
            return f"{error.step_error.type} then {await ctx.step(fine, 1)}"
        return "not raised"

    async with durable_engine(workflows=[wf], steps=[exits, fine]) as engine:
        run = await finish(engine, await engine.start(wf, None))
    assert ("completed", f"builtins.{type(raised).__name__} then 2") == (run.status, run.output)


async def test_a_def_local_step_raising_system_exit_fails_its_attempt(
    durable_engine: DurableEngineFactory,
) -> None:
    """A def local step's sys.exit() in its thread is a failed attempt, not the process ending."""

    def exits() -> None:
        sys.exit(4)

    @workflow("exiting-local")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.local_step("exits", exits, retries=2)
        except StepFailedError as error:
            return error.step_error.type
        return "not raised"

    async with durable_engine(workflows=[wf]) as engine:
        run = await finish(engine, await engine.start(wf, None))
    assert ("completed", "builtins.SystemExit") == (run.status, run.output)


async def test_a_workflow_raising_cancelled_error_fails_its_run_once(
    durable_engine: DurableEngineFactory,
) -> None:
    """The workflow's own CancelledError fails the run; it is not replayed over and over."""
    turns: list[int] = []

    @workflow("self-cancelling")
    async def wf(ctx: WorkflowContext, _: None) -> None:
        turns.append(1)
        raise asyncio.CancelledError("by the workflow")

    async with durable_engine(workflows=[wf]) as engine:
        run = await finish(engine, await engine.start(wf, None))
    assert run.error is not None
    assert ("failed", "asyncio.exceptions.CancelledError") == (run.status, run.error.type)
    assert [1] == turns


@pytest.mark.parametrize("sync", [False, True], ids=["async", "def"])
async def test_the_engines_own_cancellation_still_stops_a_local_step(
    durable_engine: DurableEngineFactory, sync: bool
) -> None:
    """Cancelling work() while a local step runs gives the run back; nothing is recorded."""
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    release = threading.Event()

    async def waits() -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    def blocks() -> str:
        loop.call_soon_threadsafe(started.set)
        release.wait(60)
        return "late"

    @workflow("waiting")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        return str(await ctx.local_step("waits", blocks if sync else waits, retries=5))

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        working = loop.create_task(engine.work(poll_ms=10))
        await asyncio.wait_for(started.wait(), PATIENCE)
        working.cancel()
        with pytest.raises(asyncio.CancelledError):
            await working
        release.set()
        run = await engine.get_run(run_id)
        assert [] == await engine.checkpoints(run_id)
        assert [] == await events_named(engine, run_id, "step.failed")
    assert "pending" == run.status


EXITING_APP = """
import sys
from effects.durable import Engine, step, workflow


@step("exits")
def exits(n):
    sys.exit(3)


@step("after")
def after(n):
    return n + 1


@workflow("exiting")
async def exiting(ctx, n):
    try:
        await ctx.step(exits, n)
    except Exception as error:
        return f"{type(error).__name__} then {await ctx.step(after, n)}"


engine = Engine(URL, workflows=[exiting], steps=[exits, after])
"""


@pytest.mark.not_on_memory("a work process")
async def test_a_work_process_survives_a_def_handler_calling_sys_exit(
    durable_store_url: str, tmp_path: Path
) -> None:
    """A real `work` process: a handler's sys.exit(3) fails that attempt, the run completes."""
    (tmp_path / "exiting_app.py").write_text(
        f"URL = {durable_store_url!r}\n" + textwrap.dedent(EXITING_APP)
    )
    worker = work_process(tmp_path, "exiting_app:engine")
    try:
        async with Engine(durable_store_url) as reader:
            run_id = await _start(durable_store_url, tmp_path)
            run = await reader.wait(run_id, timeout=PATIENCE)
        assert worker.poll() is None
        assert ("completed", "RemoteStepError then 2") == (run.status, run.output)
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=PATIENCE)
    assert 0 == worker.returncode, err


async def _start(url: str, folder: Path) -> str:
    """Start a run of the app's workflow from this process (the worker runs it)."""
    sys.path.insert(0, str(folder))
    try:
        import exiting_app  # type: ignore[import-not-found]

        async with Engine(url, workflows=[exiting_app.exiting]) as starter:
            return await starter.start(exiting_app.exiting, 1)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("exiting_app", None)
