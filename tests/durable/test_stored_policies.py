"""Each checkpoint stores its step's effective policy when first written, overrides included."""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import WorkflowContext, step, workflow
from effects.durable._policy import attempts_bound, policy_repr
from effects.durable._pytest_plugin import DurableEngineFactory
from schedules import spaced
from tests.durable.support import Flaky

pytestmark = pytest.mark.anyio

DEFAULT = {"retries": 1, "backoff": "fixed", "backoff_ms": 0, "backoff_max_ms": None,
           "jitter": False}  # fmt: skip


@step("charge", retries=3, backoff="exp", backoff_ms=10, backoff_max_ms=80)
def charge(order: Any) -> Any:
    """Echo the order."""
    return order


@step("ship", retry=spaced(0.01))
def ship(order: Any) -> Any:
    """Echo the order."""
    return order


def policies() -> Any:
    """Steps with a declared policy, an override of it, a schedule, and local steps."""
    flaky = Flaky([ValueError("once")])

    @workflow("policies")
    async def run(ctx: WorkflowContext, order: Any) -> Any:
        await ctx.local_step("quote", lambda: 1)
        await ctx.local_step("reserve", lambda: flaky(order), retries=2, jitter=True)
        await ctx.step(charge, order)
        await ctx.step(charge, order, retries=5, backoff="fixed")
        await ctx.step(ship, order)
        return await ctx.step(ship, order, retries=7)

    return run


async def test_every_checkpoint_holds_its_effective_policy(
    durable_engine: DurableEngineFactory,
) -> None:
    """Declared, overridden (the call's fields win), schedule repr with its cap, local steps."""
    wf = policies()
    async with durable_engine(workflows=[wf], steps=[charge, ship]) as engine:
        run_id = await engine.start(wf, 1)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert "completed" == run.status
    stored = [c.policy for c in checkpoints]
    assert [
        DEFAULT,
        DEFAULT | {"retries": 2, "jitter": True},
        {"retries": 3, "backoff": "exp", "backoff_ms": 10, "backoff_max_ms": 80, "jitter": False},
        {"retries": 5, "backoff": "fixed", "backoff_ms": 10, "backoff_max_ms": 80, "jitter": False},
        {"retry": "spaced(0.01)", "retries": None},
        {"retry": "spaced(0.01)", "retries": 7},
    ] == stored
    assert [1, 2, 3, 5, None, 7] == [attempts_bound(p) for p in stored]
    assert [
        "from_step_options(retries=1)",
        "from_step_options(retries=2, jitter=True)",
        "spaced(0.01)",
        "spaced(0.01) & recurs(6)",
    ] == [policy_repr(p) for p in (stored[0], stored[1], stored[4], stored[5])]


def test_a_policy_of_an_older_store_or_written_by_hand_is_shown_as_it_is() -> None:
    """No policy: no bound and no repr; a hand-written one is shown as its JSON."""
    assert (None, None) == (attempts_bound(None), policy_repr(None))
    assert (None, None) == (attempts_bound({"retries": True}), attempts_bound({"retries": "3"}))
    assert '{"retries": -1}' == policy_repr({"retries": -1})
