"""
A run resumed from the cache of suspended runs records exactly what a replayed run records:
the same random workflows, run with ``cached_runs=0`` and ``cached_runs=1000`` on one store,
leave the same checkpoints, events, event values and outcome. Only ids differ: the run ids
(``off-N`` and ``on-N``, and the step ids and child run ids made of them) and the engines' ids
(the ``worker`` of ``step.started``); they are put back alike before comparing. Times are equal:
both engines read virtual clocks started at one time.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, cast

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effects import FatalError
from effects.durable import (
    Engine,
    RemoteStepError,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from effects.durable._engine import cached_runs_of
from effects.testing import VirtualClock
from tests.durable.support import START_MS

#: Workflows generated per store (PostgreSQL: 3).
_EXAMPLES = {"memory": 12, "sqlite": 6}
#: One operation of a generated workflow: its kind and an argument.
Op = tuple[str, int]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("local"), st.integers(0, 2)),  # failures before success
        st.tuples(st.just("remote"), st.integers(0, 3)),  # 3 attempts: 3 failures give up
        st.tuples(st.just("fatal"), st.integers(0, 1)),  # a FatalError in a dispatched step
        st.tuples(st.just("sleep"), st.integers(0, 3000)),
        st.tuples(st.just("fan"), st.integers(0, 3)),
        st.tuples(st.just("recv"), st.integers(0, 2)),  # 0: a message was sent; else none
        st.tuples(st.just("event"), st.integers(0, 9)),
        st.tuples(st.just("now"), st.just(0)),
        st.tuples(st.just("child"), st.integers(0, 2)),
    ),
    min_size=1,
    max_size=12,
)


@step("cached:flaky", retries=3, backoff_ms=100)
async def flaky(arg: dict[str, int]) -> int:
    """Fail the first ``fails`` attempts (``fatal``: with a ``FatalError``)."""
    if current_step().attempt <= arg["fails"]:
        if arg.get("fatal"):
            raise FatalError("no", "fatal")
        msg = f"attempt {current_step().attempt}"
        raise OSError(msg)
    return arg["i"] * 10


@step("cached:bump")
async def bump(n: int) -> int:
    """Add one."""
    return n + 1


@workflow("cached:child")
async def child(ctx: WorkflowContext, n: int) -> int:
    """A child workflow: one dispatched step."""
    return await ctx.step(bump, n)


def _local(fails: int, seen: list[int]) -> Any:
    def attempt() -> int:
        seen.append(1)
        if len(seen) <= fails:
            msg = f"local attempt {len(seen)}"
            raise OSError(msg)
        return len(seen)

    return attempt


@workflow("cached:generated")
async def generated(ctx: WorkflowContext, program: list[list[Any]]) -> list[Any]:
    """Run *program*'s operations in order; collect what each gave."""
    out: list[Any] = []
    for i, (kind, arg) in enumerate(program):
        if kind == "local":
            seen: list[int] = []
            out.append(
                await ctx.local_step(f"local-{i}", _local(arg, seen), retries=3, backoff_ms=50)
            )
        elif kind in ("remote", "fatal"):
            try:
                out.append(await ctx.step(flaky, {"i": i, "fails": arg, "fatal": kind == "fatal"}))
            except RemoteStepError as error:
                out.append(error.step_error.code or error.step_error.message)
        elif kind == "sleep":
            await ctx.sleep(arg / 1000)
            out.append("slept")
        elif kind == "fan":
            out.append(await ctx.all(bump, range(arg)))
        elif kind == "recv":
            out.append(await ctx.recv(f"topic-{i}", timeout=1))
        elif kind == "event":
            await ctx.set_event(f"key-{i}", arg)
            out.append(None)
        elif kind == "now":
            out.append((await ctx.now()).isoformat())
        else:
            out.append(await ctx.child(child, arg))
    return out


def _alike(value: object, run_id: str, engine_id: str) -> object:
    """*value* with *run_id* and *engine_id* put back as ``RUN`` and ``ENGINE`` everywhere."""
    if isinstance(value, str):
        return value.replace(run_id, "RUN").replace(engine_id, "ENGINE")
    if isinstance(value, dict):
        items = cast("dict[object, object]", value).items()
        return {_alike(k, run_id, engine_id): _alike(v, run_id, engine_id) for k, v in items}
    if isinstance(value, list | tuple):
        return [_alike(v, run_id, engine_id) for v in cast("list[object]", value)]
    kind: type[object] = type(value)
    if attrs.has(kind):
        return _alike(attrs.asdict(cast("Any", value), recurse=True), run_id, engine_id)
    return value


async def _record(url: str, cached: int, run_id: str, program: list[Op]) -> tuple[Any, int]:
    """Run *program* as run *run_id*; what the store holds of it, and the turns resumed."""
    engine = Engine(
        url,
        workflows=[generated, child],
        steps=[flaky, bump],
        clock=VirtualClock(start=START_MS / 1000),
        random=random.Random(7),
        cached_runs=cached,
    )
    async with engine:
        await engine.start(generated, [list(op) for op in program], run_id=run_id)
        for i, (kind, arg) in enumerate(program):
            if kind == "recv" and arg == 0:
                await engine.send(run_id, f"topic-{i}", {"for": i})
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
        children = [f"{run_id}:{cp.seq}" for cp in await engine.checkpoints(run_id)
                    if cp.kind == "child"]  # fmt: skip
        held = {
            "run": (run.status, run.output, run.error),
            "checkpoints": await engine.checkpoints(run_id),
            "events": await engine.events(run_id),
            "values": [await engine.get_event(run_id, f"key-{i}") for i in range(len(program))],
            "children": [(await engine.checkpoints(c), await engine.events(c)) for c in children],
        }
        cache = cached_runs_of(engine)
        resumed = 0 if cache is None else cache.resumed
        assert cache is None or len(cache) == 0  # a finished run keeps nothing parked
    return _alike(held, run_id, engine.id), resumed


@pytest.mark.anyio
async def test_resumed_runs_record_what_replayed_runs_record(durable_store_url: str) -> None:
    """Generated workflows leave the same records with the cache on as with it off."""
    examples: list[list[Op]] = []

    @settings(
        max_examples=_EXAMPLES.get(durable_store_url.split(":", maxsplit=1)[0], 3),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(ops)
    def collect(program: list[Op]) -> None:
        examples.append(program)

    collect()
    resumed_at_all = 0
    for n, program in enumerate(examples):
        off, none = await _record(durable_store_url, 0, f"off-{n}", program)
        on, resumed = await _record(durable_store_url, 1000, f"on-{n}", program)
        assert none == 0
        assert off == on, program
        resumed_at_all += resumed
    # The cache was used, not merely on: suspended runs were resumed in place.
    assert resumed_at_all > 0


@pytest.mark.anyio
async def test_a_long_run_resumes_without_replaying(durable_store_url: str) -> None:
    """Each turn after the first resumes the parked workflow: its body runs once."""
    entered: list[int] = []

    @workflow("cached:counted")
    async def counted(ctx: WorkflowContext, n: int) -> int:
        entered.append(1)
        for _ in range(n):
            n = await ctx.step(bump, n)
        return n

    async with Engine(durable_store_url, workflows=[counted], steps=[bump]) as engine:
        run_id = await engine.start(counted, 20)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        cache = cached_runs_of(engine)
        assert cache is not None
        assert ("completed", 40, [1], 20) == (run.status, run.output, entered, cache.resumed)


def test_the_program_strategy_runs() -> None:
    """The generated programs run under asyncio.run as well (no fixture loop needed)."""
    asyncio.run(_record("memory://cached-strategy", 1000, "r", [("remote", 1), ("sleep", 5)]))
