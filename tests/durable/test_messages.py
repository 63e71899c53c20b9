"""
Messages in: ``engine.send`` and ``ctx.recv``, in send order, each delivered once, kept until
read, deduplicated by ``message_id``; and what a send refuses, writing nothing.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from effects.durable import (
    MAX_DEPTH,
    Engine,
    NonDeterminismError,
    UnknownRunError,
    WorkflowContext,
    workflow,
)
from effects.durable._engine import open_store
from effects.durable._pytest_plugin import DurableEngineFactory
from tests.durable.support import Intercepting, rows

pytestmark = pytest.mark.anyio


@workflow("inbox")
async def inbox(ctx: WorkflowContext, count: int) -> list[Any]:
    """Receive *count* messages on 'orders', then one on 'refunds'."""
    received = [await ctx.recv("orders") for _ in range(count)]
    return [*received, await ctx.recv("refunds")]


def messages_table(url: str, run_id: str) -> list[tuple[Any, ...]]:
    """The run's messages as ``(n, topic, body, message_id, seq)``, in send order."""
    return rows(
        url,
        "SELECT n, topic, body, message_id, seq FROM messages WHERE run_id = ? ORDER BY n",
        (run_id,),
    )


async def test_messages_are_received_in_send_order_per_topic_each_once(
    durable_engine: DurableEngineFactory,
) -> None:
    """Sends on two topics, interleaved: each recv gets the next of its topic, in send order."""
    async with durable_engine(workflows=[inbox]) as engine:
        run_id = await engine.start(inbox, 3, run_id="in-1")
        for topic, body in [
            ("refunds", "r1"),
            ("orders", 1),
            ("orders", {"n": 2}),
            ("refunds", "r2"),
            ("orders", [3]),
        ]:
            await engine.send(run_id, topic, body)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", [1, {"n": 2}, [3], "r1"]) == (run.status, run.output)
    assert [("orders", "recv"), ("orders", "recv"), ("orders", "recv"), ("refunds", "recv")] == [
        (c.name, c.kind) for c in checkpoints
    ]
    assert [
        (1, "refunds", '"r1"', None, 4),
        (2, "orders", "1", None, 1),
        (3, "orders", '{"n":2}', None, 2),
        (4, "refunds", '"r2"', None, None),
        (5, "orders", "[3]", None, 3),
    ] == messages_table(durable_engine.url, run_id)


async def test_messages_sent_before_the_workflow_reaches_recv_are_kept(
    durable_engine: DurableEngineFactory,
) -> None:
    """A run sent messages before its first turn reads them when it gets to recv."""
    async with durable_engine(workflows=[inbox]) as engine:
        run_id = await engine.start(inbox, 1, run_id="early")
        await engine.send(run_id, "orders", "o1")
        await engine.send(run_id, "refunds", "r1")
        assert "pending" == (await engine.get_run(run_id)).status
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", ["o1", "r1"]) == (run.status, run.output)


async def test_a_run_waiting_in_recv_is_woken_by_a_send_on_its_topic_alone(
    durable_engine: DurableEngineFactory,
) -> None:
    """Suspended in recv('orders'): a 'refunds' message leaves it suspended; an order wakes it."""
    async with durable_engine(workflows=[inbox]) as engine:
        run_id = await engine.start(inbox, 1, run_id="waits")
        await engine.run_until_idle()
        waiting = await engine.get_run(run_id)
        (pending,) = await engine.checkpoints(run_id)
        await engine.send(run_id, "refunds", "r1")
        after_other = await engine.get_run(run_id)
        await engine.send(run_id, "orders", "o1")
        after_own = await engine.get_run(run_id)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("suspended", None) == (waiting.status, waiting.wake_at)
    assert ("orders", "recv", "pending") == (pending.name, pending.kind, pending.status)
    assert "suspended" == after_other.status
    assert "pending" == after_own.status
    assert ("completed", ["o1", "r1"]) == (run.status, run.output)


async def test_a_message_sent_while_the_turn_looked_and_found_none_is_not_lost(
    durable_engine: DurableEngineFactory,
) -> None:
    """A send that lands after the turn read no message, before it suspended: the run wakes."""
    store = open_store(durable_engine.url)
    sent: list[str] = []

    async def send_meanwhile(found: Any, run_id: str, topic: str) -> None:
        if found is None and not sent:
            sent.append(topic)
            async with durable_engine() as other:
                await other.send(run_id, topic, "just in time")

    watched = Intercepting(store, next_message=send_meanwhile)
    async with durable_engine(workflows=[inbox]) as engine:
        await engine.start(inbox, 0, run_id="race")
    orchestrator = Engine(
        watched, workflows=[inbox], clock=durable_engine.clock, random=durable_engine.random
    )
    async with orchestrator as engine:
        await engine.run_until_idle()
        run = await engine.get_run("race")
    assert ["refunds"] == sent
    assert ("completed", ["just in time"]) == (run.status, run.output)


async def test_a_message_id_is_delivered_once_and_stays_known_after_it_was_read(
    durable_engine: DurableEngineFactory,
) -> None:
    """The same id twice, then again after its recv: one message, once; a new id is new."""
    async with durable_engine(workflows=[inbox]) as engine:
        run_id = await engine.start(inbox, 2, run_id="dedup")
        await engine.send(run_id, "orders", "first", message_id="m-1")
        await engine.send(run_id, "orders", "first again", message_id="m-1")
        await engine.run_until_idle()
        await engine.send(run_id, "orders", "first, late", message_id="m-1")
        await engine.send(run_id, "orders", "second", message_id="m-2")
        await engine.send(run_id, "refunds", "r", message_id="m-1-on-refunds")
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", ["first", "second", "r"]) == (run.status, run.output)
    assert [
        (1, "orders", '"first"', "m-1", 1),
        (2, "orders", '"second"', "m-2", 2),
        (3, "refunds", '"r"', "m-1-on-refunds", 3),
    ] == messages_table(durable_engine.url, run_id)


async def test_a_message_id_is_per_run(durable_engine: DurableEngineFactory) -> None:
    """Two runs each take a message of one id: ids are unique within a run, not across runs."""
    async with durable_engine(workflows=[inbox]) as engine:
        for run_id in ("a", "b"):
            await engine.start(inbox, 0, run_id=run_id)
            await engine.send(run_id, "refunds", run_id, message_id="same")
        await engine.run_until_idle()
        outputs = [(await engine.get_run(r)).output for r in ("a", "b")]
    assert [["a"], ["b"]] == outputs


async def test_recv_on_replay_returns_the_recorded_message_and_reads_no_other(
    durable_engine: DurableEngineFactory,
) -> None:
    """A replay (after a later suspension) answers recv from its checkpoint, not the table."""
    async with durable_engine(workflows=[inbox]) as engine:
        run_id = await engine.start(inbox, 2, run_id="replayed")
        await engine.send(run_id, "orders", "o1")
        await engine.run_until_idle()
        await engine.send(run_id, "orders", "o2")
        await engine.run_until_idle()
        await engine.send(run_id, "refunds", "r1")
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        checkpoints = await engine.checkpoints(run_id)
    assert ("completed", ["o1", "o2", "r1"]) == (run.status, run.output)
    assert ["o1", "o2", "r1"] == [c.output for c in checkpoints]
    assert [1, 2, 3] == [s for *_, s in messages_table(durable_engine.url, run_id)]


async def test_a_send_to_an_unknown_run_is_unknown_run_error(
    durable_engine: DurableEngineFactory,
) -> None:
    """An id no run has (also one no store could hold): UnknownRunError, nothing written."""
    async with durable_engine(workflows=[inbox]) as engine:
        for run_id in ("nope", "nul\x00", "surrogate\udcff"):
            with pytest.raises(UnknownRunError) as raised:
                await engine.send(run_id, "orders", 1)
            assert run_id == raised.value.run_id
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM messages")


async def test_a_send_to_a_finished_run_is_refused_naming_its_status(
    durable_engine: DurableEngineFactory,
) -> None:
    """A completed run and a cancelled one: ValueError naming the status, nothing written."""
    async with durable_engine(workflows=[inbox]) as engine:
        await engine.start(inbox, 0, run_id="done")
        await engine.send("done", "refunds", "r")
        await engine.run_until_idle()
        await engine.start(inbox, 0, run_id="stopped")
        await engine.cancel("stopped")
        for run_id, status in (("done", "completed"), ("stopped", "cancelled")):
            with pytest.raises(ValueError, match=f"run {run_id} is {status}"):
                await engine.send(run_id, "orders", 1, message_id="late")
    assert [(1,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM messages")


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        (object(), "not JSON serializable"),
        (math.nan, "Out of range float"),
        (-math.inf, "Out of range float"),
        ({"a": {1, 2}}, "not JSON serializable"),
        (b"bytes", "not JSON serializable"),
        (_nested(MAX_DEPTH + 1), f"more than {MAX_DEPTH} deep"),
        (_nested(100_000), "cannot be stored"),
    ],
    ids=["object", "nan", "infinity", "set", "bytes", "too-deep", "far-too-deep"],
)
async def test_a_message_that_is_not_json_is_a_type_error_and_nothing_is_written(
    durable_engine: DurableEngineFactory, message: Any, fragment: str
) -> None:
    """Not JSON, NaN, infinity, deeper than MAX_DEPTH: TypeError naming the run and topic."""
    async with durable_engine(workflows=[inbox]) as engine:
        await engine.start(inbox, 0, run_id="r")
        with pytest.raises(TypeError, match=fragment) as raised:
            await engine.send("r", "orders", message)
        run = await engine.get_run("r")
    assert "message to run 'r' on topic 'orders'" in str(raised.value)
    assert "codec" not in str(raised.value)
    assert "pending" == run.status
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM messages")


@pytest.mark.parametrize(
    ("topic", "message_id", "error"),
    [
        (None, None, TypeError),
        (3, None, TypeError),
        (b"orders", None, TypeError),
        ("", None, ValueError),
        (" orders", None, ValueError),
        ("ord\x00ers", None, ValueError),
        ("ord\udcffers", None, ValueError),
        ("orders", 7, TypeError),
        ("orders", b"m-1", TypeError),
        ("orders", "", ValueError),
        ("orders", "m\x00", ValueError),
        ("orders", "m\ud800", ValueError),
    ],
)
async def test_a_bad_topic_or_message_id_is_refused_before_anything_is_written(
    durable_engine: DurableEngineFactory, topic: Any, message_id: Any, error: type[Exception]
) -> None:
    """None, odd types, empty, spaced, NUL, lone surrogates: refused, naming the argument."""
    async with durable_engine(workflows=[inbox]) as engine:
        await engine.start(inbox, 0, run_id="r")
        with pytest.raises(error, match="topic" if message_id is None else "message_id"):
            await engine.send("r", topic, 1, message_id=message_id)
    assert [(0,)] == rows(durable_engine.url, "SELECT COUNT(*) FROM messages")


async def test_payloads_round_trip_whatever_text_they_hold(
    durable_engine: DurableEngineFactory,
) -> None:
    """NUL, a lone surrogate, control characters and big numbers in a message come back as sent."""
    body = {"nul": "a\x00b", "surrogate": "\udcff", "bell": "\x07", "big": 10**30, "neg": -0.0}
    async with durable_engine(workflows=[inbox]) as engine:
        await engine.start(inbox, 0, run_id="r")
        await engine.send("r", "refunds", body, message_id="\x07 odd but valid")
        await engine.run_until_idle()
        (received,) = (await engine.get_run("r")).output
    assert body == received
    assert "-0.0" == repr(received["neg"])


@workflow("bad-topic")
async def bad_topic(ctx: WorkflowContext, topic: Any) -> Any:
    """recv on the topic of its input."""
    return await ctx.recv(topic)


@pytest.mark.parametrize(
    ("topic", "kind"), [(None, "TypeError"), ("", "ValueError"), ("a\x00", "ValueError")]
)
async def test_recv_on_a_bad_topic_raises_in_the_workflow_and_records_nothing(
    durable_engine: DurableEngineFactory, topic: Any, kind: str
) -> None:
    """ctx.recv(None), ctx.recv(''): the workflow's own error; the run fails with it."""
    async with durable_engine(workflows=[bad_topic]) as engine:
        await engine.start(bad_topic, topic, run_id="r")
        await engine.run_until_idle()
        run = await engine.get_run("r")
        checkpoints = await engine.checkpoints("r")
    assert run.error is not None
    assert ("failed", f"builtins.{kind}", []) == (run.status, run.error.type, checkpoints)
    assert "topic" in run.error.message


@workflow("changed")
async def changed(ctx: WorkflowContext, version: int) -> Any:
    """recv in its first version; set_event at that position in its second."""
    if version == 1:
        return await ctx.recv("orders")
    await ctx.set_event("orders", 1)
    return None


async def test_another_primitive_where_a_recv_is_recorded_is_non_determinism(
    durable_engine: DurableEngineFactory,
) -> None:
    """A recv recorded at a position, a set_event asked for there on replay: the run fails."""
    async with durable_engine(workflows=[changed]) as engine:
        await engine.start(changed, 1, run_id="r")
        await engine.run_until_idle()
    store = open_store(durable_engine.url)
    await store.open()
    try:
        run = await store.get_run("r")
        assert run is not None
        assert "suspended" == run.status
    finally:
        await store.close()

    @workflow("changed")
    async def changed_again(ctx: WorkflowContext, version: int) -> Any:
        return await changed.fn(ctx, 2)

    async with durable_engine(workflows=[changed_again]) as engine:
        await engine.send("r", "orders", 1)
        await engine.run_until_idle()
        run = await engine.get_run("r")
    assert run.error is not None
    assert ("failed", "non_determinism") == (run.status, run.error.code)
    assert NonDeterminismError.__name__ in run.error.type


@workflow("timed")
async def timed(ctx: WorkflowContext, timeout: Any) -> list[Any]:
    """A recv with the given timeout ('nan': NaN), then another that waits as long as it takes."""
    first = await ctx.recv("orders", timeout=math.nan if timeout == "nan" else timeout)
    return [first, await ctx.recv("refunds")]


async def test_recv_times_out_at_exactly_its_deadline_with_none(
    durable_engine: DurableEngineFactory,
) -> None:
    """An hour's timeout and no message: None at +3,600,000 ms, not a ms sooner or later."""
    async with durable_engine(workflows=[timed]) as engine:
        await engine.start(timed, "1h", run_id="t")
        await engine.run_until_idle()
        waiting = await engine.get_run("t")
        await engine.run_for(3599.999)
        (still,) = await engine.checkpoints("t")
        await engine.run_for("1ms")
        first, second = await engine.checkpoints("t")
    start = first.created_at
    assert ("suspended", start + 3_600_000) == (waiting.status, waiting.wake_at)
    assert ("pending", start + 3_600_000) == (still.status, still.wake_at)
    assert ("orders", "recv", "completed", None) == (
        first.name, first.kind, first.status, first.output
    )  # fmt: skip
    assert (start + 3_600_000, start + 3_600_000) == (first.wake_at, first.updated_at)
    assert ("refunds", "pending") == (second.name, second.status)


async def test_a_message_before_the_deadline_is_received_and_the_timer_is_moot(
    durable_engine: DurableEngineFactory,
) -> None:
    """Sent half way: the run wakes at once, takes it, and nothing more happens at the deadline."""
    async with durable_engine(workflows=[timed]) as engine:
        await engine.start(timed, 60, run_id="t")
        await engine.run_until_idle()
        await engine.run_for(30)
        await engine.send("t", "orders", "in time")
        await engine.run_until_idle()
        first = (await engine.checkpoints("t"))[0]
        await engine.run_for(60)
        await engine.send("t", "refunds", "r")
        await engine.run_until_idle()
        run = await engine.get_run("t")
    assert ("completed", "in time") == (first.status, first.output)
    assert (first.created_at + 60_000, first.created_at + 30_000) == (
        first.wake_at, first.updated_at
    )  # fmt: skip
    assert ("completed", ["in time", "r"]) == (run.status, run.output)


async def test_a_restart_does_not_move_the_deadline(durable_engine: DurableEngineFactory) -> None:
    """Engines come and go (and replay) during the wait: the timeout still ends at +10 s."""
    async with durable_engine(workflows=[timed]) as engine:
        await engine.start(timed, 10, run_id="t")
        await engine.run_until_idle()
    for _ in range(3):
        async with durable_engine(workflows=[timed]) as engine:
            await engine.run_for(2)
    async with durable_engine(workflows=[timed]) as engine:
        await engine.run_until_idle(advance_time=True)
        first = (await engine.checkpoints("t"))[0]
    assert ("completed", None) == (first.status, first.output)
    assert first.created_at + 10_000 == first.updated_at


async def test_a_zero_timeout_takes_a_message_only_if_it_is_there(
    durable_engine: DurableEngineFactory,
) -> None:
    """timeout=0: None at once with no message (no wait); the message when there is one."""
    async with durable_engine(workflows=[timed]) as engine:
        await engine.start(timed, 0, run_id="none")
        await engine.start(timed, 0, run_id="one")
        await engine.send("one", "orders", "here")
        for run_id in ("none", "one"):
            await engine.send(run_id, "refunds", "r")
        await engine.run_until_idle()
        outputs = [(await engine.get_run(r)).output for r in ("none", "one")]
        (timed_out, _) = await engine.checkpoints("none")
    assert [[None, "r"], ["here", "r"]] == outputs
    assert (timed_out.created_at, timed_out.created_at) == (timed_out.wake_at, timed_out.updated_at)


@pytest.mark.parametrize(
    ("timeout", "error"),
    [
        (-1, ValueError),
        ("nan", ValueError),
        ("soon", ValueError),
        (True, ValueError),
        ([1], TypeError),
    ],
)
async def test_a_bad_timeout_is_refused_in_the_workflow_and_records_nothing(
    durable_engine: DurableEngineFactory, timeout: Any, error: type[Exception]
) -> None:
    """A negative, NaN, unparsable or odd-typed timeout: the workflow's error, no checkpoint."""
    async with durable_engine(workflows=[timed]) as engine:
        await engine.start(timed, timeout, run_id="t")
        await engine.run_until_idle()
        run = await engine.get_run("t")
        checkpoints = await engine.checkpoints("t")
    assert run.error is not None
    assert ("failed", f"builtins.{error.__name__}", []) == (
        run.status, run.error.type, checkpoints
    )  # fmt: skip
    assert "timeout" in run.error.message
