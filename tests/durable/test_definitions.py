"""Definitions and bad input: values checked at once, errors naming the value, nothing written."""

from __future__ import annotations

import math
from typing import Any

import pytest

from effects.durable import Engine, Queue, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from schedules import spaced
from tests.durable.support import rows

pytestmark = pytest.mark.anyio


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


@workflow("simple")
async def simple(ctx: WorkflowContext, value: Any) -> Any:
    """Echo the input through a dispatched step."""
    return await ctx.step(echo, value)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"retries": 0}, ValueError, r"retries must be >= 1 .* got 0"),
        ({"retries": 2.5}, TypeError, "retries must be an int"),
        ({"retries": True}, TypeError, "retries must be an int"),
        ({"backoff_ms": -1}, ValueError, "backoff_ms .* got -1"),
        ({"backoff_ms": math.nan}, ValueError, "backoff_ms .* got nan"),
        ({"backoff_max_ms": -5}, ValueError, "backoff_max_ms .* got -5"),
        ({"backoff": "linear"}, ValueError, "backoff must be 'fixed' or 'exp', got 'linear'"),
        ({"jitter": "yes"}, TypeError, "jitter must be True or False"),
        ({"timeout_ms": 0}, ValueError, "timeout_ms must be .* > 0, got 0"),
        ({"pickup_timeout_ms": -1}, ValueError, "pickup_timeout_ms"),
        ({"retires": 3}, TypeError, "unknown option 'retires'"),
        ({"retry": "exp"}, TypeError, "retry must be a schedules.Schedule"),
        ({"retry": spaced(1), "backoff_ms": 5}, ValueError, "retry= replaces backoff_ms"),
        ({"queue": ""}, TypeError, "queue must be a non-empty queue name"),
    ],
)
def test_step_policy_values_out_of_range_are_refused_by_name(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    """@step refuses a bad option at definition time, naming the step, the option and the value."""
    with pytest.raises(error, match=message) as raised:
        step("bad", **options)
    assert "step 'bad'" in str(raised.value)


def test_names_must_be_real_names() -> None:
    """Empty, padded or non-string names are refused."""
    with pytest.raises(ValueError, match="non-empty name"):
        step("")
    with pytest.raises(ValueError, match="non-empty name"):
        workflow(" padded ")
    with pytest.raises(TypeError, match="must be a string"):
        workflow(7)  # type: ignore[arg-type]


def test_a_workflow_must_be_async() -> None:
    """A plain def as a workflow is refused at decoration (it could not await steps)."""
    with pytest.raises(TypeError, match="must be an async def"):

        @workflow("sync")  # type: ignore[arg-type]
        def sync(ctx: WorkflowContext, value: None) -> None:
            return None


def test_generator_functions_are_refused() -> None:
    """A generator function cannot be a step or a workflow: it would yield, not return."""
    with pytest.raises(TypeError, match="generator function"):

        @step("gen")
        def gen(_: None) -> Any:
            yield 1


def test_an_engine_refuses_duplicate_names_and_unknown_queues() -> None:
    """Two definitions with one name, or a step naming a missing queue, are ValueErrors."""

    @step("echo")
    async def other_echo(value: Any) -> Any:
        return value

    @step("queued", queue="slow")
    async def queued(value: Any) -> Any:
        return value

    with pytest.raises(ValueError, match="two steps are named 'echo'"):
        Engine("sqlite:///:memory:", steps=[echo, other_echo])
    with pytest.raises(ValueError, match="two workflows are named 'simple'"):
        Engine("sqlite:///:memory:", workflows=[simple, simple])
    with pytest.raises(ValueError, match="names queue 'slow'"):
        Engine("sqlite:///:memory:", steps=[queued])
    Engine("sqlite:///:memory:", steps=[queued], queues=[Queue("slow", 2)])
    with pytest.raises(TypeError, match="must be made by @workflow"):
        Engine("sqlite:///:memory:", workflows=[echo])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="lease_ms must be > 0"):
        Engine("sqlite:///:memory:", lease_ms=0)
    with pytest.raises(ValueError, match="concurrency of queue 'q' must be >= 1"):
        Queue("q", 0)


async def test_non_json_input_to_start_writes_nothing(durable_engine: DurableEngineFactory) -> None:
    """A workflow input that is not JSON is a TypeError naming the workflow; no run is made."""
    async with durable_engine(workflows=[simple]) as engine:
        with pytest.raises(TypeError, match="input of workflow 'simple' cannot be stored"):
            await engine.start(simple, {"when": object()})
        with pytest.raises(TypeError, match="input of workflow 'simple'"):
            await engine.start(simple, math.inf)
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")


async def test_non_json_step_input_and_output_are_named(
    durable_engine: DurableEngineFactory,
) -> None:
    """A step input or output that is not JSON is a TypeError naming the step; nothing written."""

    @step("returns-a-set")
    async def returns_a_set(_: None) -> Any:
        return {1, 2}

    @workflow("bad-values")
    async def bad_values(ctx: WorkflowContext, _: None) -> list[str]:
        raised: list[str] = []
        try:
            await ctx.step(echo, {1, 2, 3})
        except TypeError as error:
            raised.append(str(error))
        try:
            await ctx.local_step("local-set", lambda: {4})
        except TypeError as error:
            raised.append(str(error))
        try:
            await ctx.step(returns_a_set, None, retries=3)
        except Exception as error:  # noqa: BLE001 - the test looks at what arrives
            raised.append(str(error))
        return raised

    async with durable_engine(workflows=[bad_values], steps=[returns_a_set, echo]) as engine:
        run_id = await engine.start(bad_values, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert "completed" == run.status
    raised = run.output
    assert "input of step 'echo' cannot be stored" in raised[0]
    assert "output of local step 'local-set' cannot be stored" in raised[1]
    assert "output of step 'returns-a-set' cannot be stored" in raised[2]
    # Only the third step got a checkpoint: the first two wrote nothing; the third is not retried.
    assert [("returns-a-set", 1)] == [(c.name, c.attempts) for c in checkpoints]


async def test_a_non_json_workflow_output_fails_the_run_by_name(
    durable_engine: DurableEngineFactory,
) -> None:
    """A workflow returning something JSON cannot hold fails its run with a TypeError naming it."""

    @workflow("bad-output")
    async def bad_output(ctx: WorkflowContext, _: None) -> Any:
        return object()

    async with durable_engine(workflows=[bad_output]) as engine:
        run_id = await engine.start(bad_output, None)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert "output of workflow 'bad-output' cannot be stored" in run.error.message


async def test_an_error_that_cannot_describe_itself_is_still_recorded(
    durable_engine: DurableEngineFactory,
) -> None:
    """An exception whose __str__ and details raise is still recorded; the engine goes on."""

    class Broken(Exception):  # noqa: N818 - a name for what it is
        def __str__(self) -> str:
            raise RuntimeError("no str")

        @property
        def details(self) -> Any:
            raise RuntimeError("no details")

        @property
        def retryable(self) -> bool:
            raise RuntimeError("no verdict")

    @step("broken", retries=2)
    async def broken(_: None) -> None:
        raise Broken

    @workflow("uses-broken")
    async def uses_broken(ctx: WorkflowContext, _: None) -> None:
        await ctx.step(broken, None)

    async with durable_engine(workflows=[uses_broken], steps=[broken]) as engine:
        run_id = await engine.start(uses_broken, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        (checkpoint,) = await engine.checkpoints(run_id)
    assert "failed" == run.status
    assert 2 == checkpoint.attempts
    assert checkpoint.error is not None
    assert "<unprintable Broken>" == checkpoint.error.message
