"""
An attempt costs the same however many came before: no attempt decodes (or rewrites) the errors
of those before it. Counted, not timed (benchmarks/durable_attempts.py shows the times).
"""

from __future__ import annotations

from typing import Any

import pytest

from effects.durable import RemoteStepError, StepError, WorkflowContext, step, workflow
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio


async def test_decoding_errors_grows_with_attempts_not_with_their_square(
    durable_engine: DurableEngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 failing attempts of one dispatched step decode far fewer than 300 * 300 / 2 errors."""
    attempts = 300
    decoded: list[int] = []
    real = StepError.from_json.__func__  # type: ignore[attr-defined]

    def counting(cls: type[StepError], data: Any) -> StepError:
        decoded.append(1)
        return real(cls, data)  # type: ignore[no-any-return]

    monkeypatch.setattr(StepError, "from_json", classmethod(counting))

    @step("flaky", retries=attempts)
    async def flaky(_: Any) -> None:
        raise ConnectionError("down")

    @workflow("retrying")
    async def wf(ctx: WorkflowContext, _: Any) -> int:
        try:
            await ctx.step(flaky, None)
        except RemoteStepError as error:
            return len(error.errors)
        return 0

    async with durable_engine(workflows=[wf], steps=[flaky]) as engine:
        run_id = await engine.start(wf, None)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("completed", attempts) == (run.status, run.output)
    # Each turn reads its checkpoint's last error; the full list is decoded once, at the end.
    assert len(decoded) <= 4 * attempts
