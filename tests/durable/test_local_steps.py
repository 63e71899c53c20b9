"""Local steps: the seed's in-memory retries; only the outcome is checkpointed."""

from __future__ import annotations

import math
from typing import Any

import pytest

from effects import FatalError
from effects.durable import StepFailedError, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import Flaky, events_named, rows

pytestmark = pytest.mark.anyio


class Unpicklable(Exception):  # noqa: N818 - a name for what it is
    """An error whose constructor takes two arguments but records one, so it cannot be rebuilt."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(a)
        self.b = b


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


def local_workflow(fn: Flaky, **policy: Any) -> Any:
    """A workflow of one local step running *fn* with *policy*, returning its output."""

    @workflow("local")
    async def wf(ctx: WorkflowContext, _: None) -> Any:
        return await ctx.local_step("work", fn, **policy)

    return wf


async def test_exponential_backoff_doubles_until_the_cap(
    durable_engine: DurableEngineFactory,
) -> None:
    """backoff='exp', backoff_ms=200: waits 200, 400, 800 ms, then the cap."""
    fn = Flaky([ConnectionError("reset")] * 5, value="ok")
    wf = local_workflow(fn, retries=6, backoff="exp", backoff_ms=200, backoff_max_ms=1000)
    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", "ok") == (run.status, run.output)
    assert [0.2, 0.4, 0.8, 1.0, 1.0] == durable_engine.clock.sleeps
    assert 6 == len(fn.calls)


async def test_fixed_backoff_and_no_sleep_after_the_last_attempt(
    durable_engine: DurableEngineFactory,
) -> None:
    """retries=3, fixed 50 ms: two waits of 50 ms, and none after the third, failing attempt."""
    fn = Flaky([ValueError("no")] * 3)
    wf = local_workflow(fn, retries=3, backoff_ms=50)
    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
    assert [0.05, 0.05] == durable_engine.clock.sleeps
    assert "failed" == run.status
    assert run.error is not None
    assert ("no", "builtins.ValueError") == (run.error.message, run.error.type)
    assert ("failed", 3, True) == (checkpoint.status, checkpoint.attempts, checkpoint.final)
    assert 3 == len(checkpoint.errors)


async def test_jitter_lands_in_the_top_half_in_whole_ms_and_varies(
    durable_engine: DurableEngineFactory,
) -> None:
    """jitter=True: each wait is a whole ms in [50 %, 100 %] of the computed delay, not constant."""
    fn = Flaky([OSError("flap")] * 30, value=1)
    wf = local_workflow(fn, retries=31, backoff_ms=1000, jitter=True)
    async with durable_engine(workflows=[wf]) as engine:
        await engine.start(wf, None)
        await engine.run_until_idle()
    sleeps = durable_engine.clock.sleeps
    assert 30 == len(sleeps)
    assert all(0.5 <= s <= 1.0 for s in sleeps)
    assert all(math.isclose(s * 1000, round(s * 1000), abs_tol=1e-9) for s in sleeps)
    assert len(set(sleeps)) > 10


async def test_huge_exponential_is_clamped_without_overflow(
    durable_engine: DurableEngineFactory,
) -> None:
    """Attempt 40+ of an exponential waits 2**31 - 1 ms, the seed's clamp, and never overflows."""
    fn = Flaky([OSError("down")] * 45, value="up")
    wf = local_workflow(fn, retries=46, backoff="exp", backoff_ms=1000)
    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        assert "completed" == (await engine.get_run(run_id)).status
        scheduled = await events_named(engine, run_id, "step.retry_scheduled")
    sleeps = durable_engine.clock.sleeps
    assert (2**31 - 1) / 1000 == sleeps[-1]
    assert 2**31 - 1 == scheduled[-1].data["delay_ms"]
    assert sleeps[:3] == [1.0, 2.0, 4.0]


async def test_retries_counts_every_attempt_and_defaults_to_one(
    durable_engine: DurableEngineFactory,
) -> None:
    """Without options a local step is tried once; retries=2 means two attempts in all."""
    once = Flaky([KeyError("a")])
    twice = Flaky([KeyError("a"), KeyError("b")], value=2)

    @workflow("counts")
    async def wf(ctx: WorkflowContext, _: None) -> list[Any]:
        results: list[Any] = []
        try:
            await ctx.local_step("once", once)
        except KeyError as error:
            results.append(str(error))
        results.append(await ctx.local_step("twice", twice, retries=3))
        return results

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ["'a'", 2] == run.output
    assert [1, 3] == [cp.attempts for cp in checkpoints]
    assert 1 == len(once.calls)
    assert [] == durable_engine.clock.sleeps


async def test_fatal_error_is_never_retried_and_its_code_fails_the_run(
    durable_engine: DurableEngineFactory,
) -> None:
    """FatalError stops a local step at once; uncaught, the run fails with its code."""
    fn = Flaky([FatalError("card declined", "declined")])
    wf = local_workflow(fn, retries=5, backoff_ms=10)
    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert 1 == len(fn.calls)
    assert "failed" == run.status
    assert run.error is not None
    assert ("declined", "card declined") == (run.error.code, run.error.message)


async def test_retryable_false_has_no_effect_on_a_local_step(
    durable_engine: DurableEngineFactory,
) -> None:
    """An error marked retryable = False is still retried by a local step (the seed's rule)."""
    error = ValueError("worker verdict")
    error.retryable = False  # type: ignore[attr-defined]
    fn = Flaky([error], value="second try")
    wf = local_workflow(fn, retries=2)
    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        assert "second try" == (await engine.get_run(run_id)).output
    assert 2 == len(fn.calls)


async def test_only_the_outcome_is_checkpointed_with_its_attempt_count(
    durable_engine: DurableEngineFactory,
) -> None:
    """One checkpoint row per local step, written once with the output and the attempts."""
    fn = Flaky([OSError("x"), OSError("y")], value={"total": 12})
    wf = local_workflow(fn, retries=3)
    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        (checkpoint,) = await engine.checkpoints(run_id)
    assert ("completed", 3, {"total": 12}) == (
        checkpoint.status,
        checkpoint.attempts,
        checkpoint.output,
    )
    stored = rows(durable_engine.url, "SELECT status, attempts, rev FROM checkpoints")
    assert [("completed", 3, 1)] == stored


async def test_a_completed_local_step_is_not_run_again_on_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """Replay returns the recorded output of a completed local step without calling it."""
    first = Flaky([], value=[1, 2])
    second = Flaky([OSError("later")])

    @workflow("replayed")
    async def wf(ctx: WorkflowContext, _: None) -> Any:
        a = await ctx.local_step("first", first)
        b = await ctx.local_step("second", second, retries=1)
        return [a, b]

    async with durable_engine(workflows=[wf]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        assert "failed" == (await engine.get_run(run_id)).status
        second.errors = []
        await engine.requeue(run_id)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", [[1, 2], None]) == (run.status, run.output)
    assert 1 == len(first.calls)
    assert 2 == len(second.calls)


async def test_a_failed_local_step_raises_the_same_type_on_replay(
    durable_engine: DurableEngineFactory,
) -> None:
    """A caught local failure replays as the same exception type, so the workflow branches alike."""
    fn = Flaky([LookupError("gone")])
    seen: list[str] = []

    @workflow("branching")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.local_step("lookup", fn)
        except LookupError as error:
            seen.append(f"{type(error).__name__}: {error}")
        await ctx.step(echo, None)  # suspends, so the next turn replays the failure
        return "done"

    # The cache of suspended runs off: the turn after the step is a replay (what this is about).
    async with durable_engine(workflows=[wf], steps=[echo], cached_runs=0) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        assert "completed" == (await engine.get_run(run_id)).status
    assert ["LookupError: gone", "LookupError: gone"] == seen
    assert 1 == len(fn.calls)


async def test_a_failure_that_cannot_be_rebuilt_is_step_failed_error_on_every_turn(
    durable_engine: DurableEngineFactory,
) -> None:
    """
    A failure whose class cannot be made again from its record raises StepFailedError carrying
    the recorded error, on the first turn (the original as its cause) and on replay alike.
    """
    fn = Flaky([Unpicklable("bad", "args")])
    seen: list[str] = []

    @workflow("unpicklable")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        try:
            await ctx.local_step("step", fn)
        except Unpicklable:
            seen.append("original")
        except StepFailedError as error:
            cause = type(error.__cause__).__name__
            seen.append(f"{error.step_error.message} {error.step_error.type} from {cause}")
        await ctx.step(echo, None)
        return "done"

    # The cache of suspended runs off: the turn after the step is a replay (what this is about).
    async with durable_engine(workflows=[wf], steps=[echo], cached_runs=0) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        assert "completed" == (await engine.get_run(run_id)).status
    assert [
        "bad tests.durable.test_local_steps.Unpicklable from Unpicklable",
        "bad tests.durable.test_local_steps.Unpicklable from NoneType",
    ] == seen
    assert 1 == len(fn.calls)


async def test_the_lease_covers_a_local_backoff(durable_engine: DurableEngineFactory) -> None:
    """Before a backoff the run's lease is renewed past the wait, so no engine recovers it."""
    observed: list[int] = []
    url = durable_engine.url

    def look() -> str:
        ((lease_until,),) = rows(url, "SELECT lease_until FROM runs")
        observed.append(lease_until)
        if len(observed) == 1:
            raise OSError("first")
        return "ok"

    @workflow("leased")
    async def wf(ctx: WorkflowContext, _: None) -> str:
        return await ctx.local_step("slow", look, retries=2, backoff_ms=120_000)

    async with durable_engine(workflows=[wf], lease_ms=30_000) as engine:
        start = round(durable_engine.clock.now() * 1000)
        run_id = await engine.start(wf, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", 0) == (run.status, run.recovery_attempts)
    # The second attempt saw a lease reaching past the 120 s wait plus a full lease.
    assert observed[1] >= start + 120_000 + 30_000
