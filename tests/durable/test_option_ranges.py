"""Numeric options out of their range are refused where they are given, naming the range."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import Engine, Queue, WorkflowContext, step, workflow
from effects.durable._bounds import MAX_COUNT, MAX_MS
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio

HUGE_MS = [1e300, 10**19, MAX_MS + 1, float("inf"), float("nan"), 0.4, 0, -1]
HUGE_COUNTS = [10**30, MAX_COUNT + 1, -1]


@pytest.mark.parametrize("value", HUGE_MS)
@pytest.mark.parametrize("option", ["lease_ms", "reconcile_ms", "remote_redispatch_ms"])
def test_an_engine_window_out_of_range_is_refused(option: str, value: float) -> None:
    """lease_ms=10**19 and the like: a ValueError naming the option, at construction."""
    with pytest.raises(ValueError, match=option):
        Engine("sqlite:///:memory:", **{option: value})


@pytest.mark.parametrize("value", HUGE_COUNTS)
@pytest.mark.parametrize("option", ["remote_redispatch_max", "max_recovery_attempts"])
def test_an_engine_count_out_of_range_is_refused(option: str, value: int) -> None:
    """remote_redispatch_max=10**30 and the like: refused with the range."""
    with pytest.raises(ValueError, match=rf"{option} must be"):
        Engine("sqlite:///:memory:", **{option: value})


@pytest.mark.parametrize("value", [10**30, MAX_COUNT + 1, 0])
def test_a_queue_concurrency_out_of_range_is_refused(value: int) -> None:
    """Queue(concurrency=10**30): refused, naming the queue and the range."""
    with pytest.raises(ValueError, match="concurrency of queue 'q' must be"):
        Queue("q", concurrency=value)


@pytest.mark.parametrize("value", HUGE_MS)
@pytest.mark.parametrize("option", ["timeout_ms", "pickup_timeout_ms"])
def test_a_step_window_out_of_range_is_refused(option: str, value: float) -> None:
    """timeout_ms=1e300: refused when the step is defined, naming the step and the option."""
    with pytest.raises(ValueError, match=rf"step 'w'.*{option}"):
        step("w", **{"timeout_ms": 1000, option: value})(_handler)


@pytest.mark.parametrize("value", [10**30, MAX_COUNT + 1])
def test_a_step_retries_out_of_range_is_refused(value: int) -> None:
    """retries=10**30: refused with the range."""
    with pytest.raises(ValueError, match="retries must be at most"):
        step("r", retries=value)(_handler)


async def test_work_and_wait_options_out_of_range_are_refused(
    durable_engine: DurableEngineFactory,
) -> None:
    """work(poll_ms=..., concurrency=...) and wait(poll_ms=...) out of range: refused at once."""

    @workflow("idle")
    async def idle(ctx: WorkflowContext, _: Any) -> None:
        return None

    async with durable_engine(workflows=[idle]) as engine:
        run_id = await engine.start(idle, None)
        for poll in (1e300, 10**19, 0):
            with pytest.raises(ValueError, match="poll_ms"):
                await engine.work(poll_ms=poll)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="poll_ms"):
                await engine.wait(run_id, poll_ms=poll)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="concurrency must be"):
            await engine.work(concurrency=10**30)
        with pytest.raises(TypeError, match="concurrency must be an int"):
            await engine.work(concurrency=True)


def test_the_largest_values_in_range_are_accepted() -> None:
    """MAX_MS and MAX_COUNT themselves are allowed everywhere."""
    Engine(
        "sqlite:///:memory:",
        lease_ms=MAX_MS,
        reconcile_ms=MAX_MS,
        remote_redispatch_ms=MAX_MS,
        remote_redispatch_max=MAX_COUNT,
        max_recovery_attempts=MAX_COUNT,
        queues=[Queue("q", MAX_COUNT)],
    )
    step("big", retries=MAX_COUNT, timeout_ms=MAX_MS, pickup_timeout_ms=MAX_MS)(_handler)


async def _handler(_: Any) -> None:
    return None
