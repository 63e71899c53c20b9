"""
A step's error is raised the same on every replay, without pickle; a run failed by a
non-retryable error says so.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from effects import FatalError
from effects.durable import (
    RemoteStepError,
    RemoteStepTimeout,
    StepError,
    StepFailedError,
    WorkflowContext,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable.errors import restore_exception
from tests.durable.support import Flaky

pytestmark = pytest.mark.anyio


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input (a dispatched step: the workflow suspends, so the next turn replays)."""
    return value


class Declined(Exception):  # noqa: N818 - a name for what it is
    """A user error of two arguments, both recorded as its args."""

    def __init__(self, reason: str, amount: int) -> None:
        super().__init__(reason, amount)
        self.reason = reason
        self.amount = amount


def describe(error: BaseException) -> str:
    """What a workflow's branch can see of *error*: its class, message, code and .errors."""
    code = getattr(error, "code", None)
    errors = len(getattr(error, "errors", ()))
    return f"{type(error).__name__}: {error} [{code}] {errors}"


async def replayed(
    durable_engine: DurableEngineFactory, run: Any, *, steps: tuple[Any, ...] = ()
) -> list[str]:
    """What the workflow saw of its step's error on each turn (the first, then a replay)."""
    seen: list[str] = []

    @workflow("replays")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        try:
            await run(ctx)
        except Exception as error:  # noqa: BLE001 - the point: what was raised, each turn
            seen.append(describe(error))
        await ctx.step(echo, None)
        return "done"

    # The cache of suspended runs off: the step after makes the next turn a replay.
    async with durable_engine(workflows=[wf], steps=[echo, *steps], cached_runs=0) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle(advance_time=True)
        assert "completed" == (await engine.get_run(run_id)).status
    return seen


@pytest.mark.parametrize(
    "raised",
    [
        ValueError("bad value"),
        KeyError("missing"),
        FatalError("card declined", "declined"),
        Declined("insufficient funds", 120),
        OSError(2, "No such file"),
    ],
    ids=["ValueError", "KeyError", "FatalError", "two-args", "OSError"],
)
async def test_a_local_steps_own_exception_is_raised_alike_on_replay(
    durable_engine: DurableEngineFactory, raised: Exception
) -> None:
    """The first turn and the replay raise the same class, message, code (no pickle)."""
    fn = Flaky([raised])

    async def run(ctx: WorkflowContext) -> None:
        await ctx.local_step("step", fn)

    seen = await replayed(durable_engine, run)
    assert [describe(raised)] * 2 == seen
    assert 1 == len(fn.calls)


async def test_a_remote_timeout_is_a_remote_step_timeout_on_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """A liveness step's last RemoteStepTimeout is raised again as RemoteStepTimeout."""

    @step("silent", group="unserved", timeout_ms=1000, retries=2)
    async def silent(_: Any) -> None:
        return None

    phases: list[tuple[str, int]] = []

    async def run(ctx: WorkflowContext) -> None:
        try:
            await ctx.step(silent, None)
        except RemoteStepTimeout as error:
            phases.append((error.phase, error.timeout_ms))
            raise

    # No engine serves its group: every attempt times out in its pickup phase.
    seen = await replayed(durable_engine, run)
    assert 2 == len(seen)
    assert seen[0] == seen[1]
    assert seen[0].startswith("RemoteStepTimeout: step 'silent'")
    assert seen[0].endswith("after 2 attempts: no result or heartbeat within 1000 ms (pickup)"
                            " [remote_step_timeout] 2")  # fmt: skip
    assert [("pickup", 1000)] * 2 == phases


async def test_a_remote_failure_is_a_remote_step_error_on_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """A dispatched step that fails for good raises the same RemoteStepError every turn."""

    @step("refuses", retries=2)
    async def refuses(_: Any) -> None:
        raise FatalError("no", "refused")

    async def run(ctx: WorkflowContext) -> None:
        await ctx.step(refuses, None)

    seen = await replayed(durable_engine, run, steps=(refuses,))
    assert 2 == len(seen)
    assert seen[0] == seen[1]
    assert seen[0].startswith("RemoteStepError: ")
    assert seen[0].endswith("[refused] 1")


@pytest.mark.not_on_memory("an engine process without the error's class")
async def test_a_failure_of_a_class_not_loaded_is_step_failed_error_on_every_turn(
    durable_engine: DurableEngineFactory,
) -> None:
    """A class defined inside a function cannot be found again: StepFailedError each turn."""

    class LocalError(Exception):
        pass

    fn = Flaky([LocalError("inner")])

    async def run(ctx: WorkflowContext) -> None:
        await ctx.local_step("step", fn)

    seen = await replayed(durable_engine, run)
    assert ["StepFailedError: inner [None] 0"] * 2 == seen


@pytest.mark.parametrize(
    "recorded",
    [
        "os.system",
        "subprocess.Popen",
        "antigravity.Thing",
        "builtins.SystemExit",
        "builtins.KeyboardInterrupt",
        "asyncio.exceptions.CancelledError",
        "effects.durable.RemoteStepError",
        "no.such.module.Error",
        "",
        "builtins.",
    ],
)
def test_a_stored_type_name_never_imports_or_runs_code(recorded: str) -> None:
    """Only Exception classes already imported are rebuilt; nothing is imported for a name."""
    before = set(sys.modules)
    rebuilt = restore_exception(StepError("x", type=recorded, args=("echo hi",)))
    assert isinstance(rebuilt, StepFailedError)
    assert before == set(sys.modules)


def test_a_rebuilt_exception_gets_its_code_and_details_back() -> None:
    """FatalError takes only its message as args: its code comes back from the record."""
    error = StepError.from_exception(FatalError("card declined", "declined"))
    rebuilt = restore_exception(error)
    assert isinstance(rebuilt, FatalError)
    assert ("card declined", "declined", False) == (str(rebuilt), rebuilt.code, rebuilt.retryable)


@pytest.mark.parametrize("where", ["local", "remote"])
async def test_a_run_failed_by_a_fatal_error_is_not_retryable(
    durable_engine: DurableEngineFactory, where: str
) -> None:
    """A FatalError (in a local or a dispatched step) fails the run with retryable false."""

    @step("fatal")
    async def fatal(_: Any) -> None:
        raise FatalError("card declined", "declined")

    @workflow("fails")
    async def fails(ctx: WorkflowContext, _: None) -> None:
        if where == "local":
            await ctx.local_step("fatal", lambda: fatal.fn(None))
        else:
            await ctx.step(fatal, None)

    async with durable_engine(workflows=[fails], steps=[fatal]) as engine:
        run_id = await engine.start(fails, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert run.error is not None
    assert ("failed", "declined", False) == (run.status, run.error.code, run.error.retryable)


def test_remote_errors_are_as_retryable_as_their_last_attempt() -> None:
    """RemoteStepError and StepFailedError report their recorded error's retryable."""
    fatal = StepError("no", code="declined", retryable=False)
    assert not RemoteStepError("r:1", "s", [fatal]).retryable
    assert not StepFailedError(fatal).retryable
    assert RemoteStepError("r:1", "s", [StepError("flaky")]).retryable
    assert not StepError.from_exception(RemoteStepError("r:1", "s", [fatal])).retryable
