"""
Runs of a version nobody serves: a working engine warns once per (workflow, version) with how
many wait; ``list_runs(unserved=True)`` lists them; ``ctx.patched`` lets one version serve both.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from effects.durable import WorkflowContext, workflow
from effects.durable._pytest_plugin import DurableEngineFactory

pytestmark = pytest.mark.anyio


def greeting(version: str) -> Any:
    """Workflow 'greet' at *version*: one sleep, then a greeting."""

    @workflow("greet", version=version)
    async def greet(ctx: WorkflowContext, name: str) -> str:
        await ctx.sleep(10)
        return f"hello {name} from {version}"

    return greet


@workflow("other", version="7")
async def other(ctx: WorkflowContext, _: Any) -> None:
    """A workflow the serving engine does not have at all."""


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "effects.durable" and r.levelno == logging.WARNING and "wait for" in r.message
    ]


async def test_unserved_runs_are_listed_and_warned_of_once_per_pair(
    durable_engine: DurableEngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Two v1 runs and one v0 run wait for a v2 engine: one warning each, with their counts."""
    caplog.set_level(logging.WARNING, logger="effects.durable")
    async with (
        durable_engine(workflows=[greeting("1"), other]) as old,
        durable_engine(workflows=[greeting("0")]) as older,
    ):
        ones = [await old.start("greet", n) for n in ("ada", "bob")]
        await old.run_until_idle()  # both suspended on their sleep
        zero = await older.start("greet", "cy")  # pending
        await old.start(other, None)
        finished = await old.start("greet", "dee")
        await old.run_until_idle(advance_time=True)  # the v1 runs complete: none waits of v1
        ones_done = [(await old.get_run(r)).status for r in [*ones, finished]]
        waiting = await old.start("greet", "eve")  # one v1 run waits again
    async with durable_engine(workflows=[greeting("2")]) as new:
        await new.run_until_idle()
        listed = await new.list_runs(unserved=True)
        await new.run_until_idle()
        durable_engine.clock.advance(120)
        await new.run_until_idle()
    assert ["completed"] * 3 == ones_done
    assert sorted([zero, waiting]) == sorted(r.run_id for r in listed)
    assert [
        "1 run(s) of workflow 'greet' wait for version '0', which this engine does not serve"
        " (it serves version '2')",
        "1 run(s) of workflow 'greet' wait for version '1', which this engine does not serve"
        " (it serves version '2')",
    ] == [w.split(":", 1)[0] for w in _warnings(caplog)]


async def test_a_pair_that_appears_later_is_warned_of_then(
    durable_engine: DurableEngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A v3 engine warned of v1; a v0 run started later is warned of at the next look, once."""
    caplog.set_level(logging.WARNING, logger="effects.durable")
    async with durable_engine(workflows=[greeting("1")]) as v1:
        await v1.start("greet", "ada")
        await v1.start("greet", "bob")
    async with durable_engine(workflows=[greeting("3")]) as engine:
        await engine.run_until_idle()
        async with durable_engine(workflows=[greeting("0")]) as v0:
            await v0.start("greet", "cy")
        await engine.run_until_idle()  # within a minute of the last look: not yet
        seen_early = len(_warnings(caplog))
        durable_engine.clock.advance(61)
        await engine.run_until_idle()
        durable_engine.clock.advance(61)
        await engine.run_until_idle()
    warned = _warnings(caplog)
    assert 1 == seen_early
    assert ["2 run(s) of workflow 'greet' wait for version '1'",
            "1 run(s) of workflow 'greet' wait for version '0'"] == [
        w.split(", which")[0] for w in warned
    ]  # fmt: skip


async def test_a_served_version_and_finished_runs_are_never_unserved(
    durable_engine: DurableEngineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Runs of the served version, finished runs and other workflows: no warning, none listed."""
    caplog.set_level(logging.WARNING, logger="effects.durable")
    async with durable_engine(workflows=[greeting("1"), other]) as engine:
        run_id = await engine.start("greet", "ada")
        await engine.start(other, None)
        await engine.run_until_idle(advance_time=True)
        listed = await engine.list_runs(unserved=True)
        status = (await engine.get_run(run_id)).status
    async with durable_engine(workflows=[greeting("2")]) as engine:
        await engine.run_until_idle()
        listed_by_new = await engine.list_runs(unserved=True)
    assert ("completed", [], []) == (status, listed, listed_by_new)
    assert [] == _warnings(caplog)
