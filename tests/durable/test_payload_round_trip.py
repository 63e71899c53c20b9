"""
Every payload round-trips exactly on both stores, on every path: text holding U+0000 or a lone
surrogate, and every JSON number; names that no store can hold are refused before any write.
"""

from __future__ import annotations

from typing import Any

import pytest

from effects import FatalError
from effects.durable import (
    RemoteStepError,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import rows

pytestmark = pytest.mark.anyio

#: Text a Python string holds that PostgreSQL's jsonb (and text, raw) does not.
HOSTILE = "nul\x00, high \ud800, low \udfff, bidi \u202e, and é"
#: Numbers jsonb would rewrite (1e16 as an int, -0.0 as 0) or that are at the edges.
NUMBERS = [1e16, -0.0, 1e308, 5e-324, 2**70, -(2**63), 0.1, 12345678901234567890, 1.5e-7]


def exactly(value: Any) -> Any:
    """*value* with each number's type and sign made visible (so 0.0 != -0.0, 1e16 != 10**16)."""
    if isinstance(value, list):
        return [exactly(v) for v in value]
    if isinstance(value, dict):
        return {k: exactly(v) for k, v in value.items()}
    if isinstance(value, float):
        return ("float", repr(value))
    return value


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    current_step().heartbeat({"seen": value})
    return value


async def test_inputs_outputs_and_progress_round_trip_exactly(
    durable_engine: DurableEngineFactory,
) -> None:
    """The run's input and output, a local and a dispatched step's values, and progress."""
    payload = {"text": HOSTILE, HOSTILE: NUMBERS, "numbers": NUMBERS}
    turns: list[Any] = []

    @workflow("round-trip")
    async def wf(ctx: WorkflowContext, given: Any) -> Any:
        local = await ctx.local_step("local", lambda: given)
        remote = await ctx.step(echo, local)
        turns.append(exactly([given, local, remote]))
        return remote

    async with durable_engine(workflows=[wf], steps=[echo]) as engine:
        run_id = await engine.start(wf, payload)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        _, remote = await engine.checkpoints(run_id)
    assert "completed" == run.status
    assert exactly(payload) == exactly(run.input) == exactly(run.output)
    assert [exactly([payload] * 3)] == turns[-1:]
    assert exactly({"seen": payload}) == exactly(remote.progress)
    assert exactly(payload) == exactly(remote.input)


class DetailedError(Exception):
    """An error with a code and details holding hostile text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = f"code {HOSTILE}"
        self.details = {"why": HOSTILE, "numbers": NUMBERS}
        self.retryable = False


async def test_a_remote_error_holding_hostile_text_is_kept_and_not_retried(
    durable_engine: DurableEngineFactory,
) -> None:
    """A non-retryable error with U+0000 in message, code and details: recorded, not retried."""
    calls: list[int] = []

    @step("refuses", retries=5)
    async def refuses(_: Any) -> None:
        calls.append(1)
        raise DetailedError(f"message {HOSTILE}")

    @workflow("refusing")
    async def wf(ctx: WorkflowContext, _: None) -> Any:
        try:
            await ctx.step(refuses, None)
        except RemoteStepError as error:
            return [error.step_error.message, error.step_error.code, error.step_error.details]
        return None

    async with durable_engine(workflows=[wf], steps=[refuses]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    expected = [f"message {HOSTILE}", f"code {HOSTILE}", {"why": HOSTILE, "numbers": NUMBERS}]
    assert ("completed", exactly(expected)) == (run.status, exactly(run.output))
    assert [1] == calls


async def test_a_local_steps_hostile_exception_and_the_runs_error_round_trip(
    durable_engine: DurableEngineFactory,
) -> None:
    """A local step's exception (and the run's error) keep U+0000 on the first turn and replay."""
    seen: list[str] = []

    def fails() -> None:
        raise FatalError(f"declined {HOSTILE}", f"code {HOSTILE}")

    @workflow("local-error")
    async def wf(ctx: WorkflowContext, _: None) -> None:
        try:
            await ctx.local_step("fails", fails)
        except FatalError as error:
            seen.append(f"{error} [{error.code}]")
        await ctx.step(echo, None)
        raise FatalError(f"run {HOSTILE}", "run-code")

    # The cache of suspended runs off: the turn after the step is a replay (what this is about).
    async with durable_engine(workflows=[wf], steps=[echo], cached_runs=0) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        events = await engine.events(run_id)
    assert [f"declined {HOSTILE} [code {HOSTILE}]"] * 2 == seen
    assert run.error is not None
    assert ("failed", f"run {HOSTILE}", False) == (
        run.status,
        run.error.message,
        run.error.retryable,
    )
    assert f"run {HOSTILE}" == events[-1].data["error"]["message"]


@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"], ids=["nul", "surrogate"])
async def test_names_no_store_can_hold_are_refused_before_anything_is_written(
    durable_engine: DurableEngineFactory, bad: str
) -> None:
    """U+0000 or a lone surrogate in a name or id: a ValueError naming it, no row written."""
    with pytest.raises(ValueError, match="workflow name"):
        workflow(bad)
    with pytest.raises(ValueError, match="step name"):
        step(bad)
    with pytest.raises(ValueError, match="group of step"):
        step("ok", group=bad)

    @workflow("named")
    async def wf(ctx: WorkflowContext, _: None) -> None:
        await ctx.local_step(bad, lambda: None)

    async with durable_engine(workflows=[wf]) as engine:
        with pytest.raises(ValueError, match="run_id"):
            await engine.start(wf, None, run_id=bad)
        assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        assert [] == await engine.checkpoints(run_id)
    assert run.error is not None
    assert "failed" == run.status
    assert "local step name" in run.error.message
