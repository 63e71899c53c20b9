"""
A working engine takes the runs it starts as it makes them (no claim), and ``Engine.wait``
returns a run once it has finished, in memory when this engine finished it.
"""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Engine, UnknownRunError, WorkflowContext, step, workflow
from effects.durable import _finishes as finishes_module
from effects.durable._engine import open_store
from effects.durable._store import ClaimedRun, NewRun, Store
from effects.durable.errors import StoreError
from effects.testing import VirtualClock

pytestmark = pytest.mark.anyio

#: A bound on a hang, not a timing claim.
PATIENCE = 60.0
#: A poll no test waits for.
NEVER_MS = 600_000
#: Set by a caller of start(); a turn must not see it.
CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")
#: What each run's first local step saw of CALLER, by input.
SEEN: dict[int, str] = {}
#: Holds the blocking workflow's first step until set.
GATE: dict[str, asyncio.Event] = {}


async def _plus(n: int, k: int) -> int:
    return n + k


@workflow("counted")
async def counted(ctx: WorkflowContext, n: int) -> dict[str, Any]:
    """Three local steps; an object as output (its keys in an order jsonb would not keep)."""
    for k in range(3):
        n = await ctx.local_step(f"plus-{k}", lambda n=n, k=k: _plus(n, k))
    return {"zz": n, "a": [n], "mid": {"y": 1, "b": 2}}


@workflow("fails")
async def fails(ctx: WorkflowContext, n: int) -> int:
    """Fails at once."""
    msg = f"no good: {n}"
    raise ValueError(msg)


@workflow("sees-caller")
async def sees_caller(ctx: WorkflowContext, n: int) -> int:
    """Records what its first step sees of CALLER."""

    async def look() -> str:
        return CALLER.get()

    SEEN[n] = await ctx.local_step("look", look)
    return n


@workflow("gated")
async def gated(ctx: WorkflowContext, n: int) -> int:
    """Waits (in its first step) for GATE["open"]."""

    async def wait_for_gate() -> int:
        await GATE["open"].wait()
        return n

    return await ctx.local_step("gate", wait_for_gate)


@step("one")
async def one(n: int) -> int:
    """The dispatched step of ``by_keys``."""
    return n


@workflow("by-keys")
async def by_keys(ctx: WorkflowContext, given: dict[str, int]) -> list[str]:
    """A local step per input key, in the input's key order, around a dispatched step."""
    names = [await ctx.local_step(f"before-{key}", lambda key=key: _name(key)) for key in given]
    await ctx.step(one, 1)
    return [
        *names,
        *[await ctx.local_step(f"after-{key}", lambda key=key: _name(key)) for key in given],
    ]


async def _name(key: str) -> str:
    return key


#: How many times ``counted_once``'s step ran, by input.
RAN: dict[int, int] = {}


@workflow("counted-once")
async def counted_once(ctx: WorkflowContext, n: int) -> int:
    """One local step that counts its executions in RAN."""

    async def count() -> int:
        RAN[n] = RAN.get(n, 0) + 1
        return n

    return await ctx.local_step("count", count)


@workflow("waits-for-one")
async def waits_for_one(ctx: WorkflowContext, n: int) -> int:
    """Dispatches ``one`` (served elsewhere, or not at all)."""
    return await ctx.step(one, n)


ALL = [counted, fails, sees_caller, gated, by_keys, counted_once, waits_for_one]


def _quiet(url: str) -> str:
    return url if url.startswith("sqlite:") else f"{url}&listen=false"


class _Claims:
    """Counts the claim_runs calls of a store (an instance attribute over the method)."""

    def __init__(self, store: Store) -> None:
        self.calls = 0
        inner = store.claim_runs

        async def claim_runs(**kwargs: Any) -> list[ClaimedRun]:
            self.calls += 1
            return await inner(**kwargs)

        store.claim_runs = claim_runs  # type: ignore[method-assign]


async def _working(engine: Engine, **kwargs: Any) -> asyncio.Task[None]:
    loop = asyncio.get_running_loop().create_task(engine.work(poll_ms=NEVER_MS, **kwargs))
    await asyncio.sleep(0.05)  # its first look at the store is over
    return loop


async def _stopped(engine: Engine, loop: asyncio.Task[None]) -> None:
    engine.stop()
    await asyncio.wait_for(loop, PATIENCE)


async def test_a_working_engine_runs_a_run_it_starts_without_claiming_it(
    durable_store_url: str,
) -> None:
    """start() leases the run as it inserts it; the first turn runs; no claim is made."""
    store = open_store(_quiet(durable_store_url))
    claims = _Claims(store)
    async with Engine(store, workflows=ALL) as engine:
        loop = await _working(engine)
        before = claims.calls
        run_id = await engine.start(counted, 1)
        run = await asyncio.wait_for(engine.wait(run_id), PATIENCE)
        assert before == claims.calls
        await _stopped(engine, loop)
        stored = await engine.get_run(run_id)
    assert ("completed", {"zz": 4, "a": [4], "mid": {"y": 1, "b": 2}}) == (run.status, run.output)
    # What wait() built in memory is the stored record.
    assert stored == run
    assert 0 == stored.recovery_attempts


async def test_an_engine_that_is_not_working_leaves_a_started_run_pending(
    durable_store_url: str,
) -> None:
    """No work() loop: the run waits for a claim, as before; run_until_idle runs it."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        run_id = await engine.start(counted, 1)
        assert "pending" == (await engine.get_run(run_id)).status
        await engine.run_until_idle()
        assert "completed" == (await engine.get_run(run_id)).status


async def test_a_run_started_after_work_ended_is_left_pending(durable_store_url: str) -> None:
    """A stopped loop takes nothing: the run is pending for whoever works next."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        loop = await _working(engine)
        await _stopped(engine, loop)
        run_id = await engine.start(counted, 1)
        assert "pending" == (await engine.get_run(run_id)).status


@pytest.mark.parametrize(
    ("concurrency", "starts", "together"), [(1, 2, False), (2, 6, True)], ids=["after", "together"]
)
async def test_runs_started_beyond_the_loops_concurrency_are_left_to_a_claim(
    durable_store_url: str, concurrency: int, starts: int, together: bool
) -> None:
    """
    The slots taken, by turns running (starts one after another) or by starts still inserting
    (starts gathered): the runs beyond them are pending, and claimed once slots free.
    """
    GATE["open"] = asyncio.Event()
    async with Engine(durable_store_url, workflows=ALL) as engine:
        loop = await _working(engine, concurrency=concurrency)
        if together:
            ids = await asyncio.gather(*(engine.start(gated, n) for n in range(starts)))
        else:
            ids = [await engine.start(gated, n) for n in range(starts)]
        statuses = sorted([(await engine.get_run(run_id)).status for run_id in ids])
        GATE["open"].set()
        done = await asyncio.wait_for(asyncio.gather(*map(engine.wait, ids)), PATIENCE)
        await _stopped(engine, loop)
    assert ["pending"] * (starts - concurrency) + ["running"] * concurrency == statuses
    assert ["completed"] * starts == [run.status for run in done]


async def test_a_turn_taken_at_start_runs_in_the_loops_context_not_the_callers(
    durable_store_url: str,
) -> None:
    """A context variable the caller of start() set does not leak into the run's turn."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        loop = await _working(engine)
        token = CALLER.set("the caller")
        try:
            run_id = await engine.start(sees_caller, 7)
        finally:
            CALLER.reset(token)
        await asyncio.wait_for(engine.wait(run_id), PATIENCE)
        await _stopped(engine, loop)
    assert "none" == SEEN[7]


async def test_a_lease_taken_at_start_is_given_back_if_work_stops_meanwhile(
    durable_store_url: str,
) -> None:
    """stop() lands while the insert is in flight: the lease is released, the run pending."""
    store = open_store(durable_store_url)
    inner = store.create_run
    engines: list[Engine] = []

    async def create_run(run: NewRun, events: Any) -> Any:
        created = await inner(run, events)
        assert run.lease_token is not None
        engines[0].stop()
        return created

    store.create_run = create_run  # type: ignore[method-assign]
    async with Engine(store, workflows=ALL) as engine:
        engines.append(engine)
        loop = await _working(engine)
        run_id = await engine.start(counted, 1)
        await asyncio.wait_for(loop, PATIENCE)
        run = await engine.get_run(run_id)
        assert ("pending", 0) == (run.status, run.recovery_attempts)
        await engine.run_until_idle()
        assert "completed" == (await engine.get_run(run_id)).status


async def test_a_start_the_store_refuses_leaves_the_loop_its_slot(durable_store_url: str) -> None:
    """The insert fails (a full disk, say): start raises it, and the slot it took is free again."""
    store = open_store(durable_store_url)
    inner = store.create_run
    failures = [StoreError("disk full")]

    async def create_run(run: NewRun, events: Any) -> Any:
        if failures:
            raise failures.pop()
        return await inner(run, events)

    store.create_run = create_run  # type: ignore[method-assign]
    async with Engine(store, workflows=ALL) as engine:
        loop = await _working(engine, concurrency=1)
        with pytest.raises(StoreError, match="disk full"):
            await engine.start(counted, 1)
        assert 0 == engine._loop._starting
        # The one slot is free: the next start takes its run and runs it.
        run = await asyncio.wait_for(engine.wait(await engine.start(counted, 2)), PATIENCE)
        await _stopped(engine, loop)
    assert ("completed", 0) == (run.status, run.recovery_attempts)


async def test_starting_an_existing_id_on_a_working_engine_changes_nothing(
    durable_store_url: str,
) -> None:
    """Idempotent start: the finished run is left as it is, and no second turn runs."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        loop = await _working(engine)
        run_id = await engine.start(counted, 1, run_id="same")
        first = await asyncio.wait_for(engine.wait(run_id), PATIENCE)
        assert "same" == await engine.start(counted, 1, run_id="same")
        again = await asyncio.wait_for(engine.wait(run_id), PATIENCE)
        await _stopped(engine, loop)
        with pytest.raises(ValueError, match="is a run of workflow 'counted'"):
            await engine.start(fails, 1, run_id="same")
    assert first == again


async def test_wait_returns_a_failed_run_with_its_error(durable_store_url: str) -> None:
    """A run that fails is finished too; wait returns it with the error, raising nothing."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        loop = await _working(engine)
        run = await asyncio.wait_for(engine.wait(await engine.start(fails, 3)), PATIENCE)
        await _stopped(engine, loop)
        stored = await engine.get_run(run.run_id)
    assert "failed" == run.status
    assert run.error is not None
    assert "no good: 3" in run.error.message
    assert stored == run


async def test_wait_sees_a_run_another_engine_finishes(durable_store_url: str) -> None:
    """Finished elsewhere: the waiting engine reads it at its next poll."""
    async with (
        Engine(durable_store_url, workflows=ALL) as waiter,
        Engine(durable_store_url, workflows=ALL) as runner,
    ):
        run_id = await waiter.start(counted, 2)
        waiting = asyncio.get_running_loop().create_task(waiter.wait(run_id, poll_ms=10))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await runner.run_until_idle()
        run = await asyncio.wait_for(waiting, PATIENCE)
    assert ("completed", 5) == (run.status, run.output["zz"])


async def test_wait_times_out_naming_the_run_and_its_status(durable_store_url: str) -> None:
    """Nobody runs it: TimeoutError after the timeout, and the run is untouched."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        run_id = await engine.start(counted, 1)
        with pytest.raises(TimeoutError, match=f"run '{run_id}' has not finished.*pending"):
            await engine.wait(run_id, timeout=0.05, poll_ms=10)
        assert "pending" == (await engine.get_run(run_id)).status


async def test_wait_refuses_an_unknown_run_and_bad_arguments(durable_store_url: str) -> None:
    """Unknown id: UnknownRunError; a bad timeout or poll: an error naming it."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        with pytest.raises(UnknownRunError, match="no run with id 'nope'"):
            await engine.wait("nope")
        run_id = await engine.start(counted, 1)
        with pytest.raises(ValueError, match="poll_ms"):
            await engine.wait(run_id, poll_ms=0)
        with pytest.raises((TypeError, ValueError), match="poll_ms"):
            await engine.wait(run_id, poll_ms="10")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout"):
            await engine.wait(run_id, timeout=-1)
        with pytest.raises(ValueError, match="timeout"):
            await engine.wait(run_id, timeout="soon")


async def test_many_waiters_of_one_run_all_get_it(durable_store_url: str) -> None:
    """Waiters registered before and during the turn are all answered, and none is left."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        loop = await _working(engine)
        run_id = await engine.start(counted, 1)
        runs = await asyncio.wait_for(
            asyncio.gather(*(engine.wait(run_id) for _ in range(5))), PATIENCE
        )
        await _stopped(engine, loop)
        assert not engine._finishes.waiters
    assert 1 == len({(run.status, run.updated_at) for run in runs})


async def test_a_first_turn_taken_at_start_sees_the_input_as_replays_do(
    durable_store_url: str,
) -> None:
    """The first turn reads the input as stored (its key order, on both stores): replays agree."""
    async with Engine(durable_store_url, workflows=ALL, steps=[one]) as engine:
        loop = await _working(engine)
        run = await asyncio.wait_for(
            engine.wait(await engine.start(by_keys, {"bb": 1, "a": 2})), PATIENCE
        )
        await _stopped(engine, loop)
    assert "completed" == run.status, run.error
    assert ["bb", "a", "bb", "a"] == run.output


async def test_a_cancelled_wait_leaves_nothing_registered(durable_store_url: str) -> None:
    """Ctrl-C (a cancellation) of a waiter: it stops at once, and its registration goes."""
    async with Engine(durable_store_url, workflows=ALL) as engine:
        run_id = await engine.start(counted, 1)
        waiting = asyncio.get_running_loop().create_task(engine.wait(run_id, poll_ms=10))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not engine._finishes.waiters
        assert "pending" == (await engine.get_run(run_id)).status


async def test_a_wait_timeout_is_real_time_whatever_the_engines_clock(
    durable_store_url: str,
) -> None:
    """A virtual clock that jumps hours ahead does not end a wait early (nor late)."""
    clock = VirtualClock(1_700_000_000.0)
    async with Engine(durable_store_url, workflows=ALL, clock=clock) as engine:
        run_id = await engine.start(counted, 1)
        waiting = asyncio.get_running_loop().create_task(engine.wait(run_id, timeout=3, poll_ms=10))
        for _ in range(5):
            clock.advance(3600)
            await asyncio.sleep(0.01)
        assert not waiting.done()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waiting, PATIENCE)


async def test_one_run_id_started_twice_at_once_runs_once(durable_store_url: str) -> None:
    """Two starts of one id, on one working engine and on two: one run, its step run once."""
    RAN.clear()
    async with (
        Engine(durable_store_url, workflows=ALL) as first,
        Engine(durable_store_url, workflows=ALL) as second,
    ):
        loops = [await _working(first), await _working(second)]
        ids = await asyncio.gather(
            first.start(counted_once, 11, run_id="twice"),
            first.start(counted_once, 11, run_id="twice"),
            second.start(counted_once, 11, run_id="twice"),
        )
        runs = await asyncio.wait_for(
            asyncio.gather(first.wait("twice"), second.wait("twice")), PATIENCE
        )
        await _stopped(first, loops[0])
        await _stopped(second, loops[1])
        events = await first.events("twice")
    assert ["twice"] * 3 == ids
    assert [("completed", 11)] * 2 == [(run.status, run.output) for run in runs]
    assert 1 == RAN[11]
    assert 1 == sum(event.name == "run.started" for event in events)


async def test_the_runs_wait_need_not_read_first_are_bounded(
    durable_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Suspended runs remembered for wait(): at most the bound, the oldest forgotten."""
    monkeypatch.setattr(finishes_module, "_WAITING_HERE_MAX", 3)
    async with Engine(durable_store_url, workflows=ALL) as engine:
        loop = await _working(engine)
        ids: list[str] = []
        for n in range(5):
            # One after another, each suspended before the next starts: their order is known.
            ids.append(await engine.start(waits_for_one, n))
            for _ in range(int(PATIENCE * 100)):
                if ids[-1] in engine._finishes.waiting_here:
                    break
                await asyncio.sleep(0.01)
        remembered = list(engine._finishes.waiting_here)
        await _stopped(engine, loop)
    assert ids[2:] == remembered


@pytest.mark.not_on_memory("a process killed mid-turn")
def test_a_process_killed_during_a_turn_it_took_at_start_loses_nothing(
    tmp_path: Path, durable_store_url: str
) -> None:
    """kill at the first step of a run taken at start: another engine recovers and finishes it."""
    script = tmp_path / "starter.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, os, sys
            sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
            from effects.durable import Engine, WorkflowContext, workflow

            @workflow("dies")
            async def dies(ctx: WorkflowContext, n: int) -> int:
                async def die() -> int:
                    os._exit(9)
                return await ctx.local_step("die", die)

            async def main() -> None:
                async with Engine(sys.argv[1], workflows=[dies], lease_ms=300) as engine:
                    asyncio.get_running_loop().create_task(engine.work(poll_ms=600000))
                    await asyncio.sleep(0.05)
                    await engine.start(dies, 1, run_id="taken")
                    await asyncio.sleep(60)

            asyncio.run(main())
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script), durable_store_url], timeout=PATIENCE, check=False
    )
    assert 9 == done.returncode

    @workflow("dies")
    async def survives(ctx: WorkflowContext, n: int) -> int:
        return await ctx.local_step("die", lambda: _plus(n, 1))

    async def recover() -> Any:
        async with Engine(durable_store_url, workflows=[survives], lease_ms=300) as engine:
            run = await engine.get_run("taken")
            assert "running" == run.status
            await asyncio.sleep(0.4)  # the dead process's lease runs out
            await engine.run_until_idle()
            return await engine.get_run("taken"), await engine.events("taken")

    run, events = asyncio.run(recover())
    assert ("completed", 2, 1) == (run.status, run.output, run.recovery_attempts)
    assert 1 == sum(event.name == "run.started" for event in events)
