"""
``attach_prometheus``: attempts and run ends counted in a ``CollectorRegistry`` with the
workflow, step, kind and outcome (no run id, no payload); one attachment per registry.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from effects.durable import WorkflowContext, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable.instrumentation import attach_prometheus
from tests.durable.support import Flaky
from tests.durable.telemetry_support import SENTINEL, flaky

pytestmark = pytest.mark.anyio


async def test_attempts_and_run_ends_are_counted_by_their_labels(
    durable_engine: DurableEngineFactory,
) -> None:
    """A local step failing twice, a dispatched step failing twice, then both succeed."""
    fn = Flaky([ConnectionError(SENTINEL)] * 2, value="ok")

    @workflow("counted")
    async def counted(ctx: WorkflowContext, value: str) -> str:
        await ctx.local_step("prepare", fn, retries=3, backoff_ms=10)
        return await ctx.step(flaky, value)

    registry = CollectorRegistry()
    async with durable_engine(workflows=[counted], steps=[flaky]) as engine:
        detach = attach_prometheus(engine, registry=registry)
        run_id = await engine.start(counted, SENTINEL)
        await engine.run_until_idle(advance_time=True)
        assert "completed" == (await engine.get_run(run_id)).status

        def attempts(step: str, kind: str, outcome: str) -> float | None:
            labels = {"workflow": "counted", "step": step, "kind": kind, "outcome": outcome}
            return registry.get_sample_value("durable_step_attempts_total", labels)

        assert [2.0, 1.0, 2.0, 1.0] == [
            attempts("prepare", "local", "failed"),
            attempts("prepare", "local", "completed"),
            attempts("flaky", "remote", "failed"),
            attempts("flaky", "remote", "completed"),
        ]
        labels = {"workflow": "counted", "status": "completed"}
        assert 1.0 == registry.get_sample_value("durable_runs_total", labels)
        exposed = generate_latest(registry).decode()
        assert SENTINEL not in exposed
        assert run_id not in exposed
        detach()
        detach()
        assert registry.get_sample_value("durable_runs_total", labels) is None


async def test_one_registry_holds_one_attachment_at_a_time(
    durable_engine: DurableEngineFactory,
) -> None:
    """A second attach on one registry is refused saying why; after detach it works."""
    registry = CollectorRegistry()
    async with durable_engine() as engine:
        detach = attach_prometheus(engine, registry=registry)
        with pytest.raises(ValueError, match="this registry has durable_step_attempts already"):
            attach_prometheus(engine, registry=registry)
        detach()
        attach_prometheus(engine, registry=registry)()


def test_attach_prometheus_refuses_what_is_not_an_engine() -> None:
    """A TypeError names what it got."""
    not_an_engine: Any = object()
    with pytest.raises(TypeError, match=r"attach_prometheus takes an effects\.durable Engine"):
        attach_prometheus(not_an_engine)
