"""The engine's log lines name the workflow and the step, read as text, at fitting levels."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from effects.durable import WorkflowContext, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import Flaky

pytestmark = pytest.mark.anyio


async def test_a_local_retry_is_info_and_its_final_failure_a_warning(
    durable_engine: DurableEngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Retried attempts log at INFO with the wait; the last at WARNING; the run's end at ERROR."""
    fn = Flaky([ConnectionError("reset by peer")] * 3)

    @workflow("checkout")
    async def checkout(ctx: WorkflowContext, _: Any) -> None:
        await ctx.local_step("quote", fn, retries=3, backoff_ms=200)

    caplog.set_level(logging.INFO, logger="effects.durable")
    async with durable_engine(workflows=[checkout]) as engine:
        run_id = await engine.start(checkout, None)
        await engine.run_until_idle()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "effects.durable"]
    where = f"run {run_id} (checkout) step 'quote' (#1): step.failed, attempt"
    reset = "ConnectionError: reset by peer"
    failures = [line for line in lines if "step.failed" in line[1] or "run.failed" in line[1]]
    assert [
        ("INFO", f"{where} 1: {reset}; retrying in 200 ms"),
        ("INFO", f"{where} 2: {reset}; retrying in 200 ms"),
        ("WARNING", f"{where} 3: {reset}"),
        ("ERROR", f"run {run_id} (checkout): run.failed: {reset}"),
    ] == failures
    assert not [text for _, text in lines if "step None" in text or "{'" in text]
