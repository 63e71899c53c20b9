"""Durable retries follow the schedule: attempt times are what ``schedules.simulate`` predicts."""

from __future__ import annotations

import asyncio
import random
from itertools import accumulate
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from effects.durable import Engine, RemoteStepError, WorkflowContext, step, workflow
from effects.testing import VirtualClock
from schedules import Schedule, exponential, fibonacci, from_step_options, simulate, spaced
from tests.durable.support import START_MS

SEED = 1234

step_options = st.fixed_dictionaries(
    {
        "retries": st.integers(1, 8),
        "backoff": st.sampled_from(["fixed", "exp"]),
        "backoff_ms": st.integers(0, 5_000) | st.just(0),
        "jitter": st.booleans(),
    },
    optional={"backoff_max_ms": st.integers(0, 20_000)},
)

custom_schedules: st.SearchStrategy[Schedule[Any, Any]] = st.one_of(
    st.builds(lambda ms, n: spaced(ms / 1000).times(n), st.integers(0, 3000), st.integers(0, 6)),
    st.builds(
        lambda ms, n, cap: exponential(ms / 1000).max_delay(cap / 1000).times(n),
        st.integers(1, 2000),
        st.integers(0, 6),
        st.integers(1, 10_000),
    ),
    st.builds(
        lambda ms, n: fibonacci(ms / 1000).jittered().times(n),
        st.integers(1, 2000),
        st.integers(0, 6),
    ),
)


def run_pattern(options: dict[str, Any], failures: list[bool]) -> tuple[list[int], str, int]:
    """Run one dispatched step failing per *failures*; return dispatch times (ms), status, calls."""
    calls: list[int] = []

    @step("flaky", **options)
    async def flaky(_: None) -> str:
        calls.append(len(calls))
        if len(calls) <= len(failures) and failures[len(calls) - 1]:
            raise OSError(f"failure {len(calls)}")
        return "ok"

    @workflow("once")
    async def once(ctx: WorkflowContext, _: None) -> str:
        try:
            return await ctx.step(flaky, None)
        except RemoteStepError:
            return "gave up"

    async def main() -> tuple[list[int], str, int]:
        clock = VirtualClock(start=START_MS / 1000)
        engine = Engine(
            "sqlite:///:memory:",
            workflows=[once],
            steps=[flaky],
            clock=clock,
            random=random.Random(SEED),
        )
        async with engine:
            run_id = await engine.start(once, None)
            await engine.run_until_idle(advance_time=True)
            run = await engine.get_run(run_id)
            times = [
                e.at - START_MS for e in await engine.events(run_id) if e.name == "step.dispatched"
            ]
        return times, str(run.output), len(calls)

    return asyncio.run(main())


def predicted(schedule: Schedule[Any, Any], failures: list[bool]) -> tuple[list[int], str]:
    """Dispatch times and outcome that simulate gives for the same failures."""
    delays: list[int] = []
    for failed_attempts, failed in enumerate(failures, start=1):
        if not failed:
            return [0, *accumulate(delays)], "ok"
        steps = simulate(schedule, [None] * failed_attempts, seed=SEED, start=START_MS / 1000)
        delay = steps[-1].delay
        if delay is None:
            return [0, *accumulate(delays)], "gave up"
        delays.append(round(delay * 1000))
    # The step succeeds once the pattern runs out.
    return [0, *accumulate(delays)], "ok"


@settings(max_examples=60)
@given(options=step_options, failures=st.lists(st.booleans(), max_size=10))
def test_step_options_give_the_simulated_attempt_times(
    options: dict[str, Any], failures: list[bool]
) -> None:
    """Any StepOptions and failure pattern: dispatches happen exactly when simulate says."""
    schedule = from_step_options(**options)
    assert predicted(schedule, failures) == run_pattern(options, failures)[:2]


@settings(max_examples=40)
@given(schedule=custom_schedules, failures=st.lists(st.booleans(), max_size=8))
def test_any_schedule_gives_the_simulated_attempt_times(
    schedule: Schedule[Any, Any], failures: list[bool]
) -> None:
    """retry= any schedule: the durable retry follows simulate to the millisecond."""
    assert predicted(schedule, failures) == run_pattern({"retry": schedule}, failures)[:2]
