"""
Child workflows: ``ctx.child`` starts a run once (its id derived from the parent's unless given),
waits for it and returns its output or raises ``ChildWorkflowError`` with the child's code;
``ctx.start_child`` starts one without waiting; cancelling a parent reaches every unfinished run
below it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from effects import FatalError
from effects.durable import ChildWorkflowError, WorkflowContext, workflow
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import events_named, rows

pytestmark = pytest.mark.anyio


@workflow("kid")
async def kid(ctx: WorkflowContext, n: int) -> int:
    """Double *n*; a negative one is declined; zero waits for a message first."""
    if n < 0:
        raise FatalError(f"no {n}", "declined")
    if n == 0:
        return int(await ctx.recv("go"))
    return 2 * n


@workflow("parent")
async def parent(ctx: WorkflowContext, n: int) -> Any:
    """The child's output, or the code of its ChildWorkflowError."""
    try:
        return await ctx.child(kid, n)
    except ChildWorkflowError as error:
        return {"code": error.code, "run_id": error.run_id, "message": error.step_error.message}


@workflow("strict")
async def strict(ctx: WorkflowContext, n: int) -> int:
    """The child's output, its error uncaught."""
    return int(await ctx.child(kid, n))


async def test_a_child_returns_its_output_and_its_run_records_its_parent(
    durable_engine: DurableEngineFactory,
) -> None:
    """The child runs as f'{parent}:{seq}', starts once, and its output is the parent's."""
    async with durable_engine(workflows=[parent, kid]) as engine:
        await engine.start(parent, 21, run_id="p")
        await engine.run_until_idle()
        run = await engine.get_run("p")
        child = await engine.get_run("p:1")
        (cp,) = await engine.checkpoints("p")
        (started,) = await events_named(engine, "p:1", "run.started")
        children = await engine.store.child_runs("p")
    assert ("completed", 42) == (run.status, run.output)
    assert ("kid", "completed", 42, "p") == (
        child.workflow, child.status, child.output, child.parent_id
    )  # fmt: skip
    assert ("kid", "child", "completed", "p:1", 42) == (
        cp.name, cp.kind, cp.status, cp.input, cp.output
    )  # fmt: skip
    assert {"workflow": "kid", "parent": "p"} == started.data
    assert ["p:1"] == [c.run_id for c in children]
    assert [(2,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")


async def test_a_failed_child_raises_child_workflow_error_with_its_code(
    durable_engine: DurableEngineFactory,
) -> None:
    """Caught: its code, run id and message; uncaught: the parent fails with that code."""
    async with durable_engine(workflows=[parent, strict, kid]) as engine:
        await engine.start(parent, -1, run_id="caught")
        await engine.start(strict, -2, run_id="uncaught")
        await engine.run_until_idle()
        caught = await engine.get_run("caught")
        uncaught = await engine.get_run("uncaught")
        (cp,) = await engine.checkpoints("uncaught")
    assert {"code": "declined", "run_id": "caught:1", "message": "no -1"} == caught.output
    assert uncaught.error is not None
    assert ("failed", "declined", "effects.durable.errors.ChildWorkflowError") == (
        uncaught.status, uncaught.error.code, uncaught.error.type
    )  # fmt: skip
    assert "child workflow run 'uncaught:1' did not complete: no -2" == uncaught.error.message
    assert cp.error is not None
    assert ("failed", True, "declined", "effects.errors.FatalError") == (
        cp.status, cp.final, cp.error.code, cp.error.type
    )  # fmt: skip


async def test_a_cancelled_child_raises_code_cancelled_in_its_waiting_parent(
    durable_engine: DurableEngineFactory,
) -> None:
    """The child waits for a message; cancelling it alone wakes the parent: code 'cancelled'."""
    async with durable_engine(workflows=[parent, kid]) as engine:
        await engine.start(parent, 0, run_id="p")
        await engine.run_until_idle()
        assert ("suspended", "suspended") == (
            (await engine.get_run("p")).status, (await engine.get_run("p:1")).status
        )  # fmt: skip
        await engine.cancel("p:1")
        assert "pending" == (await engine.get_run("p")).status
        await engine.run_until_idle()
        run = await engine.get_run("p")
    assert ("completed", {"code": "cancelled", "run_id": "p:1", "message": "cancelled"}) == (
        run.status, run.output
    )  # fmt: skip


async def test_a_dead_child_raises_code_run_dead(durable_engine: DurableEngineFactory) -> None:
    """A child whose lease expired past max_recovery_attempts is dead: code 'run_dead'."""
    async with durable_engine(workflows=[parent], max_recovery_attempts=0) as engine:
        await engine.start(parent, 5, run_id="p")
        await engine.run_until_idle()
        now = round(durable_engine.clock.now() * 1000)
        # A ghost engine takes the child and dies holding it.
        (taken,) = await engine.store.claim_runs(
            workflows=[("kid", "1")], now=now, lease_until=now + 1000, owner="ghost", limit=1
        )
        await engine.run_for("2s")
        child = await engine.get_run("p:1")
        run = await engine.get_run("p")
    assert "p:1" == taken.run.run_id
    assert "dead" == child.status
    assert "completed" == run.status
    assert "run_dead" == run.output["code"]


@workflow("many")
async def many(ctx: WorkflowContext, ids: list[Any]) -> list[Any]:
    """Children with the given run ids (None: the default), then a message."""
    outputs = [await ctx.child(kid, 1 + i, run_id=run_id) for i, run_id in enumerate(ids)]
    await ctx.recv("done")
    return outputs


async def test_no_child_is_started_twice_however_often_the_parent_replays(
    durable_engine: DurableEngineFactory,
) -> None:
    """Replays after each child (and a long wait) start no other: one run per child id."""
    async with durable_engine(workflows=[many, kid]) as engine:
        await engine.start(many, [None, "given-id", None], run_id="p")
        for _ in range(3):
            await engine.run_until_idle()
            await engine.run_for("1h")
        await engine.send("p", "done", None)
        await engine.run_until_idle()
        run = await engine.get_run("p")
        children = await engine.store.child_runs("p")
    assert ("completed", [2, 4, 6]) == (run.status, run.output)
    assert ["given-id", "p:1", "p:3"] == [c.run_id for c in children]  # at one time: by id
    assert [(4,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")
    assert [(3,)] == rows(
        durable_engine.url,
        "SELECT COUNT(*) FROM events WHERE name = 'run.started' AND run_id <> 'p'",
    )


async def test_a_child_run_id_taken_by_another_run_is_a_value_error_and_starts_nothing(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run_id an unrelated run has: ValueError in the parent, naming it; no run is made."""
    async with durable_engine(workflows=[many, kid]) as engine:
        await engine.start(kid, 5, run_id="taken")
        await engine.start(many, ["taken"], run_id="p")
        await engine.run_until_idle()
        run = await engine.get_run("p")
        taken = await engine.get_run("taken")
    assert run.error is not None
    assert ("failed", "builtins.ValueError") == (run.status, run.error.type)
    assert "run 'taken' exists and is not a child of this run" in run.error.message
    assert None is taken.parent_id
    assert [(2,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")


@workflow("fan-out")
async def fan_out(ctx: WorkflowContext, n: int) -> list[str]:
    """Start two children without waiting, then wait for a message."""
    started = [await ctx.start_child(kid, n), await ctx.start_child("kid", 0, run_id="named")]
    await ctx.recv("done")
    return started


async def test_start_child_starts_without_waiting_and_their_ends_do_not_wake_the_parent(
    durable_engine: DurableEngineFactory,
) -> None:
    """The parent goes on to its recv; a child's finish leaves it suspended (nothing waits)."""
    async with durable_engine(workflows=[fan_out, kid]) as engine:
        await engine.start(fan_out, 4, run_id="p")
        await engine.run_until_idle()
        parent_run = await engine.get_run("p")
        first = await engine.get_run("p:1")
        checkpoints = await engine.checkpoints("p")
        await engine.send("named", "go", 9)
        await engine.run_until_idle()
        after = await engine.get_run("p")
        named = await engine.get_run("named")
        await engine.send("p", "done", None)
        await engine.run_until_idle()
        run = await engine.get_run("p")
    assert ("suspended", "completed", 8) == (parent_run.status, first.status, first.output)
    assert [("kid", "child", "completed", "p:1"), ("kid", "child", "completed", "named")] == [
        (c.name, c.kind, c.status, c.output) for c in checkpoints[:2]
    ]
    assert ("suspended", "completed", 9) == (after.status, named.status, named.output)
    assert ("completed", ["p:1", "named"]) == (run.status, run.output)


@workflow("grandparent")
async def grandparent(ctx: WorkflowContext, _: Any) -> Any:
    """A child started without waiting, one that completes, and one waited for."""
    await ctx.start_child(kid, 0, run_id="side")
    done = await ctx.child(kid, 3, run_id="done-kid")
    return [done, await ctx.child(middle, None, run_id="middle")]


@workflow("middle")
async def middle(ctx: WorkflowContext, _: Any) -> Any:
    """Waits for its own child, which waits for a message."""
    return await ctx.child(kid, 0, run_id="grandchild")


@pytest.mark.parametrize("compensate", [False, True], ids=["plain", "compensating"])
async def test_cancelling_a_parent_cancels_its_unfinished_children_and_theirs(
    durable_engine: DurableEngineFactory, compensate: bool
) -> None:
    """The child, the grandchild and the child started without waiting end cancelled; a child
    that completed stays completed."""
    async with durable_engine(workflows=[grandparent, middle, kid]) as engine:
        await engine.start(grandparent, None, run_id="top")
        await engine.run_until_idle()
        before = {r: (await engine.get_run(r)).status for r in ("side", "middle", "grandchild")}
        await engine.cancel("top", compensate=compensate)
        await engine.run_until_idle()
        after = {
            r: (await engine.get_run(r)).status
            for r in ("top", "side", "done-kid", "middle", "grandchild")
        }
        told = await events_named(engine, "grandchild", "run.cancelled")
    assert {"side": "suspended", "middle": "suspended", "grandchild": "suspended"} == before
    assert {
        "top": "cancelled",
        "side": "cancelled",
        "done-kid": "completed",
        "middle": "cancelled",
        "grandchild": "cancelled",
    } == after
    assert [{"compensate": compensate, "compensation_failed": []}] == [e.data for e in told]


@workflow("by-name")
async def by_name(ctx: WorkflowContext, name: Any) -> Any:
    """A child of the workflow named by the input."""
    return await ctx.child(name, 1)


@pytest.mark.parametrize(
    ("name", "kind", "fragment"),
    [
        ("nobody", "ValueError", "unknown workflow 'nobody'"),
        (None, "TypeError", "a child workflow is a WorkflowDef or a workflow's name"),
        ("", "ValueError", "child workflow name"),
    ],
)
async def test_a_child_workflow_this_engine_cannot_name_is_refused(
    durable_engine: DurableEngineFactory, name: Any, kind: str, fragment: str
) -> None:
    """A name the engine lacks, or no name: the workflow's own error, and no run is made."""
    async with durable_engine(workflows=[by_name, kid]) as engine:
        await engine.start(by_name, name, run_id="p")
        await engine.run_until_idle()
        run = await engine.get_run("p")
    assert run.error is not None
    assert ("failed", f"builtins.{kind}") == (run.status, run.error.type)
    assert fragment in run.error.message
    assert [(1,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")


async def test_a_child_served_by_another_engine_wakes_its_parent_there(
    durable_engine: DurableEngineFactory,
) -> None:
    """The parent's engine lacks the child's workflow: another engine runs it; the parent ends."""
    async with (
        durable_engine(workflows=[strict]) as orchestrator,
        durable_engine(workflows=[kid]) as other,
    ):
        await orchestrator.start(strict, 8, run_id="p")
        await orchestrator.run_until_idle()
        waiting = await orchestrator.get_run("p")
        await other.run_until_idle()
        woken = await orchestrator.get_run("p")
        await orchestrator.run_until_idle()
        run = await orchestrator.get_run("p")
    assert ("suspended", "pending") == (waiting.status, woken.status)
    assert ("completed", 16) == (run.status, run.output)


@workflow("bad-input")
async def bad_input(ctx: WorkflowContext, _: Any) -> str:
    """A child whose input is not JSON: refused in the parent."""
    try:
        await ctx.start_child(kid, {1, 2})
    except TypeError as error:
        return str(error)
    return "started"


async def test_a_child_input_that_is_not_json_is_a_type_error_and_nothing_is_written(
    durable_engine: DurableEngineFactory,
) -> None:
    """start_child of a set: TypeError naming the child workflow, no run, no checkpoint."""
    async with durable_engine(workflows=[bad_input, kid]) as engine:
        await engine.start(bad_input, None, run_id="p")
        await engine.run_until_idle()
        run = await engine.get_run("p")
        checkpoints = await engine.checkpoints("p")
    assert "input of child workflow 'kid' cannot be stored as JSON" in run.output
    assert [] == checkpoints
    assert [(1,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM runs")


async def test_two_engines_cancelling_one_parent_at_once_cancel_the_tree_once(
    durable_engine: DurableEngineFactory,
) -> None:
    """Both cancels race: one cancels the parent and its child, the other is refused (finished)."""
    async with (
        durable_engine(workflows=[parent, kid]) as first,
        durable_engine(workflows=[parent, kid]) as second,
    ):
        await first.start(parent, 0, run_id="p")
        await first.run_until_idle()
        outcomes = await asyncio.gather(
            first.cancel("p"), second.cancel("p"), return_exceptions=True
        )
        statuses = [(await first.get_run(r)).status for r in ("p", "p:1")]
        told = await events_named(first, "p:1", "run.cancelled")
    refused = [o for o in outcomes if isinstance(o, ValueError)]
    assert 1 == len(refused), outcomes
    assert "run p is cancelled" in str(refused[0])
    assert ["cancelled", "cancelled"] == statuses
    assert 1 == len(told)
