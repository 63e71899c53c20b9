"""
The ``Store`` contract, driven directly, with the same cases and the same expected rows on the
memory, SQLite and PostgreSQL stores; each PostgreSQL fast path against its general path; and the
two SQL dialects' schemas against each other and the column lists of ``rows.py``.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import attrs
import psycopg
import pytest

from effects.durable._engine import open_store
from effects.durable._records import Checkpoint
from effects.durable._store import (
    CheckpointWrite,
    ChildRun,
    EventValue,
    EventWrite,
    Message,
    NewEvent,
    NewMessage,
    NewRun,
    NewTask,
    RecurringRow,
    RecurringWrite,
    RunAdvance,
    RunQuery,
    StaleTurnError,
    Store,
    Take,
    TaskOutcome,
    TurnCommit,
)
from effects.durable._store.memory import MemoryStore
from effects.durable._store.postgres import PostgresStore, parse_postgres_url
from effects.durable._store.rows import (
    CHECKPOINT_COLUMNS,
    EVENT_VALUE_COLUMNS,
    MESSAGE_COLUMNS,
    RUN_COLUMNS,
    RUN_DATA_TABLES,
    RUN_TABLES,
    TASK_COLUMNS,
)
from effects.durable._store.sqlite import SqliteStore
from effects.durable.errors import StepError
from tests.durable.support import START_MS, rows
from tests.durable.test_postgres_group_commit import CountingGroups, held_two, locked_run

pytestmark = pytest.mark.anyio

NOW = START_MS
WF = ("wf", "1")
LEASE = 30_000
#: How long a test waits for writes that must land (a bound on a hang, not a timing claim).
PATIENCE = 60.0


@pytest.fixture
async def store(durable_store_url: str) -> AsyncIterator[Store]:
    """The store of the case, opened: memory, SQLite or PostgreSQL."""
    opened = open_store(durable_store_url)
    await opened.open()
    yield opened
    await opened.close()


def remote(seq: int, *, status: str = "pending", attempts: int = 1, **fields: Any) -> Checkpoint:
    """A dispatched step's checkpoint of run ``r1``, as a turn writes it."""
    values: dict[str, Any] = {
        "run_id": "r1",
        "seq": seq,
        "name": "charge",
        "kind": "remote",
        "step_id": f"r1:{seq}",
        "status": status,
        "attempts": attempts,
        "wake_at": None,
        "output": None,
        "error": None,
        "errors": (),
        "final": False,
        "created_at": NOW,
        "updated_at": NOW,
        "dispatched_at": NOW,
        "input": {"n": seq},
    }
    values.update(fields)
    return Checkpoint(**values)


#: The W3C trace context of run ``r1``.
TRACEPARENT: Final = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def task(seq: int, attempt: int = 1, **fields: Any) -> NewTask:
    """An attempt of checkpoint *seq* of run ``r1``, carrying its workflow and traceparent."""
    fields = {"workflow": WF[0], "traceparent": TRACEPARENT, **fields}
    return NewTask("r1", seq, f"r1:{seq}", "charge", "default", '{"n":1}', attempt, NOW, **fields)


async def claimed(store: Store, now: int = NOW, lease_ms: int = LEASE) -> str:
    """Run ``r1`` (made here, with its traceparent) claimed by ``e1``: its lease token."""
    made = NewRun("r1", *WF, '{"a":1}', NOW, traceparent=TRACEPARENT)
    await store.create_run(made, [NewEvent("run.started", NOW)])
    (run,) = await store.claim_runs(
        workflows=[WF], now=now, lease_until=now + lease_ms, owner="e1", limit=5
    )
    return run.token


async def dispatched(store: Store, seq: int = 1, **task_fields: Any) -> str:
    """Run ``r1`` suspended on dispatched step *seq* (queued): the turn's lease token."""
    token = await claimed(store)
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("suspend"),
            checkpoints=[CheckpointWrite(remote(seq), None, input='{"n":1}')],
            tasks=[task(seq, **task_fields)],
            events=[NewEvent("step.dispatched", NOW, seq, {"attempt": 1})],
        )
    )
    return token


async def trail(store: Store, run_id: str = "r1") -> list[tuple[str, int | None, dict[str, Any]]]:
    """The run's events as ``(name, seq, data)``, oldest first."""
    return [(e.name, e.seq, e.data) for e in await store.events(run_id)]


def table(url: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of *query* on the store (a memory store's read from a copy in SQLite)."""
    return rows(url, query)


async def test_a_run_is_created_claimed_turned_and_completed(
    store: Store, durable_store_url: str
) -> None:
    """A run goes pending, running (leased), completed, with its checkpoint and events."""
    assert None is await store.create_run(NewRun("r1", *WF, '{"a":1}', NOW), [])
    again = await store.create_run(NewRun("r1", *WF, '{"b":2}', NOW + 5), [])
    assert again is not None
    assert not hasattr(again, "token")
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    assert ("r1", "running", {"a": 1}, ()) == (
        turn.run.run_id, turn.run.status, turn.run.input, tuple(turn.checkpoints)
    )  # fmt: skip
    await store.record_local_step(
        "r1", turn.token, seq=1, name="quote", output='{"total":7}', started=NOW, now=NOW + 1
    )
    await store.commit_turn(
        TurnCommit(
            "r1",
            turn.token,
            NOW + 2,
            RunAdvance("finish", status="completed", output='"done"'),
            events=[NewEvent("run.completed", NOW + 2)],
        )
    )
    run = await store.get_run("r1")
    assert run is not None
    assert ("completed", "done", None, NOW + 2) == (
        run.status,
        run.output,
        run.error,
        run.updated_at,
    )
    (cp,) = await store.checkpoints("r1")
    assert ("quote", "local", "r1:1", "completed", 1, {"total": 7}, 1) == (
        cp.name, cp.kind, cp.step_id, cp.status, cp.attempts, cp.output, cp.rev
    )  # fmt: skip
    assert [("run.completed", None, {})] == await trail(store)
    assert [("r1", "completed", None, None, 0)] == table(
        durable_store_url,
        "SELECT run_id, status, lease_token, lease_until, woken FROM runs",
    )


async def test_a_runs_traceparent_is_kept_and_every_attempt_carries_it(store: Store) -> None:
    """The run keeps its traceparent; its attempts, a redispatch too, carry it and the workflow."""
    await dispatched(store)
    run = await store.get_run("r1")
    assert run is not None
    assert TRACEPARENT == run.traceparent
    (first,) = await store.claim_tasks(
        groups=["default"], now=NOW + 3, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert (WF[0], TRACEPARENT, NOW, False) == (
        first.workflow, first.traceparent, first.available_at, first.redispatched
    )  # fmt: skip
    assert 1 == await store.redispatch_pending("r1", now=NOW + 5)
    (again,) = await store.claim_tasks(
        groups=["default"], now=NOW + 6, claim_until=NOW + 100, worker="w2", limit=5
    )
    assert (2, WF[0], TRACEPARENT, NOW + 5, True) == (
        again.attempt, again.workflow, again.traceparent, again.available_at, again.redispatched
    )  # fmt: skip


async def test_a_tap_hears_each_committed_write_and_nothing_of_a_refused_one(
    store: Store,
) -> None:
    """Events as committed, the derived ones of a first-try local step; a stale commit: none."""
    heard: list[list[tuple[str, str, int | None, int]]] = []
    untap = store.tap(
        lambda events: heard.append([(e.run_id, e.name, e.seq, e.at) for e in events])
    )
    token = await claimed(store)
    await store.record_local_step(
        "r1", token, seq=1, name="q", output="7", started=NOW, now=NOW + 1
    )
    stale = TurnCommit(
        "r1", "not-the-token", NOW + 2, RunAdvance("continue"), events=[NewEvent("run.failed", NOW)]
    )
    with pytest.raises(StaleTurnError):
        await store.commit_turn(stale)
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW + 3,
            RunAdvance("finish", status="completed", output='"done"'),
            events=[NewEvent("run.error_routed", NOW + 3), NewEvent("run.completed", NOW + 3)],
        )
    )
    untap()
    untap()
    await store.create_run(NewRun("r2", *WF, "1", NOW), [NewEvent("run.started", NOW)])
    assert [
        [("r1", "run.started", None, NOW)],
        [("r1", "step.started", 1, NOW), ("r1", "step.completed", 1, NOW + 1)],
        [("r1", "run.error_routed", None, NOW + 3), ("r1", "run.completed", None, NOW + 3)],
    ] == heard


async def test_a_live_lease_refuses_another_claim_and_a_stranger_token(store: Store) -> None:
    """A leased run is not claimed again, and a token that does not hold it renews nothing."""
    token = await claimed(store)
    assert [] == await store.claim_runs(
        workflows=[WF], now=NOW + 1, lease_until=NOW + LEASE, owner="e2", limit=5
    )
    assert not await store.renew_lease("r1", "e2:stranger", NOW + 2 * LEASE)
    assert await store.renew_lease("r1", token, NOW + 2 * LEASE)


async def test_a_stale_turn_writes_nothing(store: Store, durable_store_url: str) -> None:
    """A commit on a lost lease, an insert at a taken seq, or an update at an old rev: refused."""
    token = await dispatched(store)
    (run,) = await store.claim_runs(
        workflows=[WF], now=NOW + 1, lease_until=NOW + LEASE, owner="e1", limit=5
    ) or [None]
    assert run is None  # suspended without a wake time: not runnable
    before = (await store.checkpoints("r1"), await store.events("r1"), await store.get_run("r1"))
    stale = [
        TurnCommit("r1", token, NOW + 3, RunAdvance("release")),
        TurnCommit("r1", "e9:nobody", NOW + 3, RunAdvance("continue")),
    ]
    for commit in stale:
        with pytest.raises(StaleTurnError):
            await store.commit_turn(commit)
    with pytest.raises(StaleTurnError):
        await store.record_local_step(
            "r1", token, seq=9, name="x", output="1", started=NOW, now=NOW
        )
    # A fresh turn, then writes that race a checkpoint another writer moved.
    await store.create_run(NewRun("r2", *WF, "null", NOW), [])
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    first = CheckpointWrite(attrs.evolve(remote(1), run_id="r2", step_id="r2:1"), None)
    await store.commit_turn(TurnCommit("r2", turn.token, NOW, RunAdvance("continue"), [first]))
    for write in (first, CheckpointWrite(first.checkpoint, expected_rev=7)):
        with pytest.raises(StaleTurnError):
            await store.commit_turn(
                TurnCommit(
                    "r2",
                    turn.token,
                    NOW + 4,
                    RunAdvance("finish", status="completed", output="1"),
                    [write],
                    events=[NewEvent("run.completed", NOW + 4)],
                )
            )
    assert before == (
        await store.checkpoints("r1"), await store.events("r1"), await store.get_run("r1")
    )  # fmt: skip
    assert [("r2", "running")] == table(
        durable_store_url, "SELECT run_id, status FROM runs WHERE run_id = 'r2'"
    )
    assert [] == await store.events("r2")


async def test_a_result_moves_the_checkpoint_and_wakes_the_run(
    store: Store, durable_store_url: str
) -> None:
    """Claim makes the step running (with ``step.started``); a failure fails it, waking the run."""
    await dispatched(store)
    (claim,) = await store.claim_tasks(
        groups=["default"], now=NOW + 1, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert ("r1:1", 1, {"n": 1}) == (claim.step_id, claim.attempt, claim.input)
    cp = await store.get_checkpoint("r1", 1)
    assert cp is not None
    assert ("running", NOW + 1, 2) == (cp.status, cp.heartbeat_at, cp.rev)
    error = StepError("declined", "card", {"why": 1}, "FatalError", retryable=False)
    assert await store.record_result(claim, "w1", TaskOutcome(error=error), NOW + 2)
    cp = await store.get_checkpoint("r1", 1)
    assert cp is not None
    assert ("failed", error, (error,), False, 3) == (
        cp.status, cp.error, cp.errors, cp.final, cp.rev
    )  # fmt: skip
    assert [("pending", None, 1)] == table(
        durable_store_url, "SELECT status, wake_at, woken FROM runs"
    )
    assert [] == table(durable_store_url, "SELECT * FROM tasks")
    assert [
        ("step.dispatched", 1, {"attempt": 1}),
        ("step.started", 1, {"attempt": 1, "kind": "remote", "worker": "w1"}),
        ("step.failed", 1, {"attempt": 1, "kind": "remote", "error": error.to_json()}),
    ] == (await trail(store))[1:]


async def test_a_late_success_completes_an_unsettled_failure_never_a_settled_one(
    store: Store,
) -> None:
    """A success after a retryable failure completes the step; after a settled one it is moot."""
    await dispatched(store)
    (claim,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    lost = TaskOutcome(error=StepError("lost", "worker_lost", None, "WorkerLost"))
    assert await store.record_result(claim, "w1", lost, NOW + 1)
    assert await store.record_result(claim, "w1", TaskOutcome(output='"late"'), NOW + 2)
    cp = await store.get_checkpoint("r1", 1)
    assert cp is not None
    assert ("completed", "late", None) == (cp.status, cp.output, cp.error)
    # Settled: a turn gave up on step 2; a success of its attempt changes nothing.
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW + 3, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    await store.commit_turn(
        TurnCommit(
            "r1",
            turn.token,
            NOW + 3,
            RunAdvance("continue"),
            [CheckpointWrite(remote(2), None, input='{"n":2}')],
            [task(2)],
        )
    )
    (second,) = await store.claim_tasks(
        groups=["default"], now=NOW + 3, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert await store.record_result(second, "w1", lost, NOW + 4)
    (_, failed) = await store.checkpoints("r1")
    settled = attrs.evolve(failed, final=True)
    await store.commit_turn(
        TurnCommit(
            "r1",
            turn.token,
            NOW + 5,
            RunAdvance("finish", status="failed", error=lost.error),
            [CheckpointWrite(settled, failed.rev)],
        )
    )
    assert not await store.record_result(second, "w1", TaskOutcome(output='"late"'), NOW + 6)
    after = await store.get_checkpoint("r1", 2)
    assert after is not None
    assert ("failed", True, None) == (after.status, after.final, after.output)


async def test_a_settled_failure_withdraws_queued_and_claimed_attempts(
    store: Store, durable_store_url: str
) -> None:
    """The queued attempt is deleted, the claimed one withdrawn; its result is discarded."""
    await dispatched(store)
    (claim,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    error = StepError("no", "x", None, "ValueError")
    assert await store.record_result(claim, "w9", TaskOutcome(error=error), NOW + 1)
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW + 2, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    (failed,) = turn.checkpoints
    # Attempt 2 goes out and is queued; then the turn gives up while attempt 1 still runs.
    retry = CheckpointWrite(
        attrs.evolve(failed, status="pending", attempts=2, error=None), failed.rev
    )
    await store.commit_turn(
        TurnCommit("r1", turn.token, NOW + 2, RunAdvance("continue"), [retry], [task(1, 2)])
    )
    (pending,) = await store.checkpoints("r1")
    given_up = attrs.evolve(pending, status="failed", final=True, error=error)
    await store.commit_turn(
        TurnCommit(
            "r1",
            turn.token,
            NOW + 3,
            RunAdvance("finish", status="failed", error=error),
            [CheckpointWrite(given_up, pending.rev)],
        )
    )
    assert [("withdrawn", 1)] == table(durable_store_url, "SELECT status, attempt FROM tasks")
    assert not await store.record_result(claim, "w1", TaskOutcome(output="1"), NOW + 4)
    assert [] == table(durable_store_url, "SELECT * FROM tasks")
    assert [
        ("step.withdrawn", 1, {"attempt": 2, "claimed": False}),
        ("step.withdrawn", 1, {"attempt": 1, "claimed": True}),
        ("step.result_discarded", 1, {"attempt": 1, "outcome": "completed", "reason": (
            "withdrawn: the engine had given up on the step, or reset it")}),
    ] == sorted(  # one commit's withdrawals come in an order of each dialect's own
        (e for e in await trail(store) if e[0].startswith(("step.withdrawn", "step.result"))),
        key=lambda e: (e[0] != "step.withdrawn", -e[2]["attempt"]),
    )  # fmt: skip


async def test_a_timed_out_step_withdraws_its_attempts_and_stays_unsettled(
    store: Store, durable_store_url: str
) -> None:
    """Failed, not final, code workflow_timeout: its claimed attempt withdrawn, its result lost."""
    token = await claimed(store)
    dispatch = [CheckpointWrite(remote(1), None, input='{"n":1}')]
    await store.commit_turn(
        TurnCommit("r1", token, NOW, RunAdvance("continue"), dispatch, [task(1)])
    )
    (claim,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    (awaited,) = await store.checkpoints("r1")
    error = StepError("withdrawn", "workflow_timeout", None, "effects.durable.WorkflowTimeout")
    stopped = attrs.evolve(awaited, status="failed", final=False, error=error, errors=(error,))
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW + 3,
            RunAdvance("continue"),
            [CheckpointWrite(stopped, awaited.rev, input='{"n":1}')],
        )
    )
    assert [("withdrawn", 1)] == table(durable_store_url, "SELECT status, attempt FROM tasks")
    assert not await store.record_result(claim, "w1", TaskOutcome(output="1"), NOW + 4)
    cp = await store.get_checkpoint("r1", 1)
    assert cp is not None
    assert ("failed", False, "workflow_timeout", {"n": 1}) == (
        cp.status, cp.final, cp.error and cp.error.code, cp.input
    )  # fmt: skip
    assert [("step.withdrawn", 1, {"attempt": 1, "claimed": True})] == [
        e for e in await trail(store) if e[0] == "step.withdrawn"
    ]


async def test_a_deadline_is_kept_parks_a_reconciling_run_and_goes_with_a_requeue(
    store: Store, durable_store_url: str
) -> None:
    """The run keeps its deadline; recovery parks it until then at most; requeue clears it."""
    made = NewRun("r1", *WF, "null", NOW, deadline=NOW + 500)
    await store.create_run(made, [NewEvent("run.started", NOW)])
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW, lease_until=NOW + 100, owner="e1", limit=5
    )
    assert NOW + 500 == turn.run.deadline
    live = attrs.evolve(remote(1), timeout_ms=60_000)
    await store.commit_turn(
        TurnCommit("r1", turn.token, NOW, RunAdvance("continue"), [CheckpointWrite(live, None)])
    )
    report = await store.recover(now=NOW + 101, max_recovery_attempts=None, reconcile_ms=10_000)
    assert ["r1"] == list(report.recovered_runs)
    run = await store.get_run("r1")
    assert run is not None
    assert ("suspended", NOW + 500, NOW + 500) == (run.status, run.wake_at, run.deadline)
    (again,) = await store.claim_runs(
        workflows=[WF], now=NOW + 500, lease_until=NOW + 600, owner="e1", limit=5
    )
    await store.commit_turn(
        TurnCommit(
            "r1",
            again.token,
            NOW + 500,
            RunAdvance("finish", status="failed", error=StepError("late", "workflow_timeout")),
        )
    )
    requeued = await store.requeue("r1", NOW + 600)
    assert ("pending", None) == (requeued.status, requeued.deadline)
    assert [(None,)] == table(durable_store_url, "SELECT deadline FROM runs")


async def test_a_queue_admits_attempts_up_to_its_limit(store: Store) -> None:
    """Beyond the queue's limit an attempt waits; a result frees its slot for the oldest one."""
    token = await claimed(store)
    checkpoints = [CheckpointWrite(attrs.evolve(remote(s), queue="q"), None) for s in (1, 2)]
    tasks = [task(s, queue="q", queue_limit=1) for s in (1, 2)]
    await store.commit_turn(TurnCommit("r1", token, NOW, RunAdvance("suspend"), checkpoints, tasks))
    (first,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert 1 == first.seq
    assert [] == await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert await store.record_result(first, "w1", TaskOutcome(output="1"), NOW + 1)
    (second,) = await store.claim_tasks(
        groups=["default"], now=NOW + 1, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert 2 == second.seq
    queue_events = [e for e in await trail(store) if e[0] in ("step.queued", "step.admitted")]
    assert [
        ("step.queued", 2, {"attempt": 1, "queue": "q"}),
        ("step.admitted", 2, {"attempt": 1, "queue": "q"}),
    ] == queue_events


async def test_recovery_of_expired_leases_and_claims(store: Store, durable_store_url: str) -> None:
    """An expired lease makes the run pending (counted), then dead; an expired claim is lost."""
    await dispatched(store)
    (claim,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert NOW + 101 == await store.next_due(NOW)
    report = await store.recover(now=NOW + 101, max_recovery_attempts=None, reconcile_ms=1000)
    assert ((), (), ("r1:1",)) == tuple(map(tuple, (report.recovered_runs, report.dead_runs,
                                                    report.lost_tasks)))  # fmt: skip
    cp = await store.get_checkpoint("r1", 1)
    assert cp is not None
    assert cp.error is not None
    assert ("failed", "worker_lost", True) == (cp.status, cp.error.code, cp.error.retryable)
    assert not await store.renew_claim(claim.task_id, "w1", NOW + 500)
    for n, verdict in ((1, "recovered"), (2, "dead")):
        turns = await store.claim_runs(
            workflows=[WF], now=NOW + 200 * n, lease_until=NOW + 200 * n + 10, owner="e1", limit=5
        )
        assert 1 == len(turns)
        report = await store.recover(
            now=NOW + 200 * n + 11, max_recovery_attempts=1, reconcile_ms=1000
        )
        assert ["r1"] == list(report.recovered_runs if verdict == "recovered" else report.dead_runs)
    assert [("dead", 1)] == table(durable_store_url, "SELECT status, recovery_attempts FROM runs")
    assert [("run.recovered", None, {"recovery_attempts": 1}),
            ("run.dead", None, {"recovery_attempts": 1})] == [
        e for e in await trail(store) if e[0].startswith("run.")][1:]  # fmt: skip


async def test_requeue_resets_failed_steps_and_makes_the_run_pending(store: Store) -> None:
    """Requeue: failed steps get attempt 0 due now, the run pending; other statuses refuse."""
    with pytest.raises(LookupError):
        await store.requeue("nope", NOW)
    token = await dispatched(store)
    (claim,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    error = StepError("no", "x", None, "ValueError", retryable=False)
    await store.record_result(claim, "w1", TaskOutcome(error=error), NOW + 1)
    with pytest.raises(ValueError, match="pending"):
        await store.requeue("r1", NOW + 2)
    del token
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW + 2, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    (failed,) = turn.checkpoints
    await store.commit_turn(
        TurnCommit(
            "r1",
            turn.token,
            NOW + 3,
            RunAdvance("finish", status="failed", error=error),
            [CheckpointWrite(attrs.evolve(failed, final=True), failed.rev)],
        )
    )
    run = await store.requeue("r1", NOW + 4)
    assert ("pending", None, 0) == (run.status, run.error, run.recovery_attempts)
    (cp,) = await store.checkpoints("r1")
    assert ("failed", 0, NOW + 4, False, None, ()) == (
        cp.status, cp.attempts, cp.wake_at, cp.final, cp.error, cp.errors
    )  # fmt: skip
    assert ("run.requeued", None, {"checkpoints_reset": 1}) == (await trail(store))[-1]


async def test_runs_are_listed_newest_first_and_filtered(store: Store) -> None:
    """``list_runs`` by status, workflow, limit and stale dispatch, newest first."""
    await dispatched(store)
    for n, workflow in ((2, "wf"), (3, "other"), (4, "wf")):
        await store.create_run(NewRun(f"r{n}", workflow, "1", "null", NOW + n), [])

    async def ids(**filters: Any) -> list[str]:
        return [r.run_id for r in await store.list_runs(RunQuery(**filters))]

    assert ["r4", "r3", "r2", "r1"] == await ids()
    assert ["r4", "r2"] == await ids(status="pending", workflow="wf")
    assert ["r4"] == await ids(limit=1)
    assert ["r1"] == await ids(status="suspended")
    assert ["r1"] == await ids(stale_before=NOW + 1)
    assert [] == await ids(stale_before=NOW)


async def test_runs_are_paged_by_keyset_and_filtered_by_prefix_and_retryable(
    store: Store,
) -> None:
    """``after`` pages newest first (ties by id), an id prefix, and the requeueable runs."""
    for run_id, at in (("b", 5), ("a", 5), ("c", 5), ("x<1>", 4), ("xy", 3), ("ab", 9)):
        await store.create_run(NewRun(run_id, *WF, "null", NOW + at), [])

    async def ids(**filters: Any) -> list[str]:
        return [r.run_id for r in await store.list_runs(RunQuery(**filters))]

    assert ["ab", "a", "b", "c", "x<1>", "xy"] == await ids()
    assert ["b", "c"] == await ids(after=(NOW + 5, "a"), limit=2)
    assert ["x<1>", "xy"] == await ids(after=(NOW + 5, "c"))
    assert [] == await ids(after=(NOW + 3, "xy"))
    assert ["ab", "a"] == await ids(id_prefix="a")
    assert ["x<1>"] == await ids(id_prefix="x<")
    assert [] == await ids(id_prefix="%")
    assert [] == await ids(retryable=True)
    assert {"pending": 6} == await store.count_runs()
    assert {"pending": 2} == await store.count_runs(RunQuery(id_prefix="x", after=(0, "z")))
    assert {} == await store.count_runs(RunQuery(status="failed"))


async def test_retrying_runs_are_those_with_a_failed_step_whose_next_attempt_is_ahead(
    store: Store,
) -> None:
    """``retrying``: a failed, unsettled checkpoint with ``wake_at`` after now; and its filter."""
    token = await claimed(store)
    error = StepError("boom", "x", None, "ValueError")
    waiting = remote(1, status="failed", wake_at=NOW + 100, error=error, errors=(error,))
    settled = remote(2, status="failed", wake_at=NOW + 100, error=error, final=True)
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("suspend", wake_at=NOW + 100),
            [CheckpointWrite(waiting, None, input="1"), CheckpointWrite(settled, None, input="1")],
        )
    )
    await store.create_run(NewRun("r2", *WF, "null", NOW + 1), [])
    assert {"r1"} == await store.retrying(["r1", "r2", "nope"], now=NOW + 99)
    assert set() == await store.retrying(["r1", "r2"], now=NOW + 100)
    assert set() == await store.retrying([], now=NOW)
    assert ["r1"] == [r.run_id for r in await store.list_runs(RunQuery(retrying_at=NOW + 99))]
    assert [] == await store.list_runs(RunQuery(retrying_at=NOW + 100))
    assert {"suspended": 1} == await store.count_runs(RunQuery(retrying_at=NOW))


async def test_a_checkpoint_keeps_the_policy_it_was_first_written_with(store: Store) -> None:
    """The policy is written with the row (fast path too); an update of the row keeps it."""
    token = await claimed(store)
    five = {"retries": 3, "backoff": "exp", "backoff_ms": 10, "backoff_max_ms": None,
            "jitter": False}  # fmt: skip
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("continue"),
            [CheckpointWrite(remote(1, policy=five), None, input="1")],
        )
    )
    await store.record_local_step(
        "r1", token, seq=2, name="q", output="1", started=NOW, now=NOW,
        policy='{"retry":"spaced(1)","retries":null}',
    )  # fmt: skip
    first, _ = await store.checkpoints("r1")
    changed = attrs.evolve(first, status="failed", policy={"retries": 99})
    await store.commit_turn(
        TurnCommit("r1", token, NOW + 1, RunAdvance("continue"), [
            CheckpointWrite(changed, first.rev, input="1")])
    )  # fmt: skip
    assert [five, {"retry": "spaced(1)", "retries": None}] == [
        c.policy for c in await store.checkpoints("r1")
    ]


async def test_queue_stats_count_slots_in_use_and_attempts_waiting(store: Store) -> None:
    """``queue_stats``: per queue, the attempts holding a slot and those waiting for one."""
    assert {} == await store.queue_stats()
    token = await claimed(store)
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("suspend"),
            [CheckpointWrite(remote(s, queue="q"), None, input="1") for s in (1, 2, 3)]
            + [CheckpointWrite(remote(4), None, input="1")],
            [task(s, queue="q", queue_limit=2) for s in (1, 2, 3)] + [task(4)],
        )
    )
    assert {"q": (2, 1)} == await store.queue_stats()
    await store.claim_tasks(groups=["default"], now=NOW, claim_until=NOW + 9, worker="w", limit=1)
    assert {"q": (2, 1)} == await store.queue_stats()


async def test_the_attempts_of_one_commit_are_claimed_in_the_commits_order(store: Store) -> None:
    """Steps dispatched together, listed out of sequence order: workers claim them as listed."""
    token = await claimed(store)
    seqs = (3, 1, 2)
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("suspend"),
            [CheckpointWrite(remote(seq), None, input='{"n":1}') for seq in seqs],
            [task(seq) for seq in seqs],
        )
    )
    claims = await store.claim_tasks(
        groups=["default"], now=NOW + 1, claim_until=NOW + 100, worker="w1", limit=2
    )
    assert [3, 1] == [claim.seq for claim in claims]
    assert claims[0].task_id < claims[1].task_id


async def test_heartbeats_and_a_claim_handed_back(store: Store) -> None:
    """A beat keeps its progress; a released claim is queued again for the next worker."""
    await dispatched(store, 1)
    (claim,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
    )
    assert await store.heartbeat(claim, now=NOW + 5, progress='{"p":1}', lease_until=None)
    assert await store.heartbeat(claim, now=NOW + 6, progress=None, lease_until=None)
    cp = await store.get_checkpoint("r1", 1)
    assert cp is not None
    assert ({"p": 1}, NOW + 6) == (cp.progress, cp.heartbeat_at)
    await store.release_claim(claim.task_id, "w1", now=NOW + 7)
    (again,) = await store.claim_tasks(
        groups=["default"], now=NOW + 8, claim_until=NOW + 100, worker="w2", limit=5
    )
    assert (claim.task_id, {"p": 1}) == (again.task_id, again.last_progress)


async def test_a_plain_cancel_withdraws_attempts_fails_awaited_steps_and_ends_the_lease(
    store: Store, durable_store_url: str
) -> None:
    """cancel_run: queued attempts deleted, claimed ones withdrawn, run cancelled, turn stale."""
    token = await claimed(store)
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("continue"),
            [CheckpointWrite(remote(s), None, input='{"n":1}') for s in (1, 2)],
            [task(1), task(2)],
        )
    )
    (first,) = await store.claim_tasks(
        groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=1
    )
    run = await store.cancel_run("r1", compensate=False, now=NOW + 5)
    assert ("cancelled", "plain", None, None) == (run.status, run.cancel, run.error, run.wake_at)
    assert [("cancelled", "plain", None, None, 0)] == table(
        durable_store_url, "SELECT status, cancel, lease_token, lease_until, woken FROM runs"
    )
    assert [("withdrawn", 1)] == table(durable_store_url, "SELECT status, seq FROM tasks")
    for cp in await store.checkpoints("r1"):
        assert cp.error is not None
        assert ("failed", False, "cancelled", NOW + 5) == (
            cp.status, cp.final, cp.error.code, cp.updated_at
        )  # fmt: skip
        assert ["cancelled"] == [e.code for e in cp.errors]
    with pytest.raises(StaleTurnError):
        await store.commit_turn(TurnCommit("r1", token, NOW + 6, RunAdvance("continue")))
    assert not await store.record_result(first, "w1", TaskOutcome(output='"late"'), NOW + 7)
    assert [] == table(durable_store_url, "SELECT * FROM tasks")
    trail_ = [e for e in await trail(store) if e[0] != "step.started"]
    assert ("run.cancelled", None, {"compensate": False, "compensation_failed": []}) in trail_
    assert [1, 2] == sorted(e[1] for e in trail_ if e[0] == "step.withdrawn")
    assert trail_[-1][0] == "step.result_discarded"
    for compensate in (False, True):
        with pytest.raises(ValueError, match="is cancelled; only a pending"):
            await store.cancel_run("r1", compensate=compensate, now=NOW + 8)
    with pytest.raises(LookupError):
        await store.cancel_run("nope", compensate=False, now=NOW)


async def test_a_compensating_cancel_asks_for_a_turn_and_keeps_its_undos_going(
    store: Store, durable_store_url: str
) -> None:
    """With completed steps: pending, cancel compensate; a dispatched undo keeps its attempt."""
    token = await claimed(store)
    done = attrs.evolve(remote(1), status="completed", output="1")
    undo = attrs.evolve(remote(3), name="compensate:charge", handler="refund")
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("suspend"),
            [
                CheckpointWrite(done, None, input='{"n":1}', output="1"),
                CheckpointWrite(remote(2), None, input='{"n":1}'),
                CheckpointWrite(undo, None, input='{"n":1}'),
            ],
            [task(2), attrs.evolve(task(3), name="refund")],
        )
    )
    assert ["charge", "refund"] == [
        t.name
        for t in await store.claim_tasks(
            groups=["default"], now=NOW, claim_until=NOW + 100, worker="w1", limit=5
        )
    ]
    asked = await store.cancel_run("r1", compensate=True, now=NOW + 1)
    assert ("pending", "compensate") == (asked.status, asked.cancel)
    assert [("claimed", 3), ("withdrawn", 2)] == sorted(
        table(durable_store_url, "SELECT status, seq FROM tasks")
    )
    statuses = {cp.seq: cp.status for cp in await store.checkpoints("r1")}
    assert {1: "completed", 2: "failed", 3: "running"} == statuses
    assert ("run.cancel_requested", None, {}) == (await trail(store))[-1]
    # Asked again: nothing changes. A claim takes it (its turn undoes); then a plain cancel.
    before = await trail(store)
    again = await store.cancel_run("r1", compensate=True, now=NOW + 2)
    assert (asked.status, asked.updated_at, before) == (again.status, again.updated_at,
                                                        await trail(store))  # fmt: skip
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW + 3, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    assert "compensate" == turn.run.cancel
    plain = await store.cancel_run("r1", compensate=False, now=NOW + 4)
    assert ("cancelled", "compensate") == (plain.status, plain.cancel)
    assert [("withdrawn", 2), ("withdrawn", 3)] == sorted(
        table(durable_store_url, "SELECT status, seq FROM tasks")
    )
    with pytest.raises(ValueError, match="cancelled with compensation"):
        await store.requeue("r1", NOW + 5)


async def test_a_compensating_cancel_of_a_run_with_nothing_completed_cancels_it_at_once(
    store: Store,
) -> None:
    """No completed checkpoint: no undo can be registered, so it is cancelled in the call."""
    await dispatched(store)
    run = await store.cancel_run("r1", compensate=True, now=NOW + 1)
    assert ("cancelled", "compensate") == (run.status, run.cancel)
    assert ("run.cancelled", None, {"compensate": True, "compensation_failed": []}) == (
        await trail(store)
    )[-1]


async def test_requeue_resumes_a_plain_cancel_and_refuses_an_unwound_run(store: Store) -> None:
    """A requeue clears the plain cancel (the cancelled step due now); compensate: refused."""
    await dispatched(store)
    await store.cancel_run("r1", compensate=False, now=NOW + 1)
    run = await store.requeue("r1", NOW + 2)
    assert ("pending", None) == (run.status, run.cancel)
    (cp,) = await store.checkpoints("r1")
    assert ("failed", 0, NOW + 2, None, ()) == (cp.status, cp.attempts, cp.wake_at, cp.error,
                                               cp.errors)  # fmt: skip
    # A run that failed after its compensation ran is never requeued.
    await store.create_run(NewRun("r2", *WF, "null", NOW), [])
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW + 3, lease_until=NOW + LEASE, owner="e1", limit=1
    )
    if turn.run.run_id != "r2":
        (turn,) = await store.claim_runs(
            workflows=[WF], now=NOW + 3, lease_until=NOW + LEASE, owner="e1", limit=1
        )
    await store.record_local_step(
        "r2", turn.token, seq=1, name="compensate:a", output="1", started=NOW, now=NOW + 3
    )
    error = StepError("no", "no")
    await store.commit_turn(
        TurnCommit("r2", turn.token, NOW + 4, RunAdvance("finish", status="failed", error=error))
    )
    with pytest.raises(ValueError, match="failed and its completed steps were undone"):
        await store.requeue("r2", NOW + 5)


async def test_prune_deletes_every_row_of_the_chosen_finished_runs(
    store: Store, durable_store_url: str
) -> None:
    """Completed and dead runs ended before the cutoff go, from every table; the rest stay."""
    token = await claimed(store)  # r1: a checkpoint, an error row, a task, events
    failed = attrs.evolve(
        remote(1), status="failed", error=StepError("x"), errors=(StepError("x"),)
    )
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("finish", status="completed", output="1"),
            [CheckpointWrite(failed, None, input="1")],
            [task(1)],
            [NewEvent("step.failed", NOW, 1)],
        )
    )
    await store.create_run(NewRun("r2", *WF, "null", NOW), [NewEvent("run.started", NOW)])
    (dying,) = await store.claim_runs(
        workflows=[WF], now=NOW, lease_until=NOW + 10, owner="e1", limit=5
    )
    await store.recover(now=NOW + 11, max_recovery_attempts=0, reconcile_ms=1000)
    await store.create_run(NewRun("r3", *WF, "null", NOW), [NewEvent("run.started", NOW)])
    assert "r2" == dying.run.run_id
    statuses = ("completed", "dead")
    assert 0 == await store.prune(before=NOW, statuses=statuses)
    assert 2 == await store.prune(before=NOW + 12, statuses=statuses, dry_run=True)
    assert 2 == await store.prune(before=NOW + 12, statuses=statuses)
    for name in ("runs", *RUN_TABLES):
        left = table(durable_store_url, f"SELECT DISTINCT run_id FROM {name} ORDER BY 1")
        assert left in ([], [("r3",)]), name
    assert [("r3", "pending")] == table(durable_store_url, "SELECT run_id, status FROM runs")
    assert 0 == await store.prune(before=NOW + 12, statuses=("failed", "cancelled"))


async def test_unserved_counts_the_waiting_runs_of_other_versions(store: Store) -> None:
    """Pending and suspended runs of a served workflow at another version, by (name, version)."""
    for run_id, workflow, version in (
        ("a", "wf", "0"), ("b", "wf", "0"), ("c", "wf", "2"), ("d", "wf", "1"),
        ("e", "other", "9"),
    ):  # fmt: skip
        await store.create_run(NewRun(run_id, workflow, version, "null", NOW), [])
    await store.cancel_run("b", compensate=False, now=NOW)
    found = await store.unserved([WF])
    listed = await store.list_runs(RunQuery(unserved=(WF,)))
    assert {("wf", "0"): 1, ("wf", "2"): 1} == found
    assert ["a", "c"] == sorted(r.run_id for r in listed)
    assert {} == await store.unserved([])


# -- messages, event values and child runs ---------------------------------------------------------


def recv_cp(seq: int, topic: str, *, status: str = "pending", run_id: str = "r1") -> Checkpoint:
    """A recv checkpoint of run *run_id*."""
    return Checkpoint(
        run_id, seq, topic, "recv", f"{run_id}:{seq}", status, 1, None, None, None, (), False,
        NOW, NOW,
    )  # fmt: skip


def child_cp(seq: int, child: str, *, status: str = "pending", run_id: str = "r1") -> Checkpoint:
    """A child checkpoint of run *run_id* that started run *child*."""
    return Checkpoint(
        run_id, seq, "kid", "child", f"{run_id}:{seq}", status, 1, None, None, None, (), False,
        NOW, NOW, input=child,
    )  # fmt: skip


def message(topic: str, body: str, now: int = NOW, message_id: str | None = None) -> NewMessage:
    """A message to run ``r1``."""
    return NewMessage("r1", topic, body, now, message_id=message_id)


async def test_messages_are_numbered_in_send_order_deduplicated_and_refused_when_finished(
    store: Store, durable_store_url: str
) -> None:
    """send: numbered 1, 2, ...; a known id stores nothing; an unknown run, a finished one: no."""
    await store.create_run(NewRun("r1", *WF, "null", NOW), [])
    assert await store.send(message("a", '"x"', message_id="m1"))
    assert await store.send(message("b", "2"))
    assert not await store.send(message("a", '"again"', NOW + 1, message_id="m1"))
    assert await store.send(message("a", "3", NOW + 2))
    assert [(1, "a", '"x"', "m1", NOW, None), (2, "b", "2", None, NOW, None),
            (3, "a", "3", None, NOW + 2, None)] == table(
        durable_store_url,
        "SELECT n, topic, body, message_id, sent_at, seq FROM messages ORDER BY n",
    )  # fmt: skip
    first = await store.next_message("r1", "a")
    assert Message("r1", 1, "a", "x", "m1", NOW) == first
    assert None is await store.next_message("r1", "c")
    with pytest.raises(LookupError):
        await store.send(NewMessage("nope", "a", "1", NOW))
    await store.cancel_run("r1", compensate=False, now=NOW + 3)
    with pytest.raises(ValueError, match="run r1 is cancelled"):
        await store.send(message("a", "4", NOW + 4))
    assert [(3,)] == table(durable_store_url, "SELECT COUNT(*) FROM messages")


async def test_a_message_wakes_a_running_run_or_one_waiting_in_recv_on_its_topic(
    store: Store, durable_store_url: str
) -> None:
    """Running: woken (its suspension becomes pending); suspended in recv('a'): 'b' no, 'a' yes."""
    token = await claimed(store)
    assert await store.send(message("a", "1"))
    await store.commit_turn(
        TurnCommit(
            "r1", token, NOW, RunAdvance("suspend"), [CheckpointWrite(recv_cp(1, "a"), None)]
        )
    )
    assert [("pending", 1)] == table(durable_store_url, "SELECT status, woken FROM runs")
    (turn,) = await store.claim_runs(
        workflows=[WF], now=NOW, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    await store.commit_turn(TurnCommit("r1", turn.token, NOW + 1, RunAdvance("suspend")))
    assert [("suspended", 0)] == table(durable_store_url, "SELECT status, woken FROM runs")
    assert await store.send(message("b", "2", NOW + 2))
    assert [("suspended", 0)] == table(durable_store_url, "SELECT status, woken FROM runs")
    assert await store.send(message("a", "3", NOW + 3))
    assert [("pending", 1, NOW + 3)] == table(
        durable_store_url, "SELECT status, woken, updated_at FROM runs"
    )


async def test_a_turn_takes_a_message_once_with_its_recv_checkpoint(
    store: Store, durable_store_url: str
) -> None:
    """The commit that completes the recv marks the message read; taking it again: stale."""
    token = await claimed(store)
    assert await store.send(message("a", '{"k":1}'))
    found = await store.next_message("r1", "a")
    assert found is not None
    done = recv_cp(1, "a", status="completed")
    await store.commit_turn(
        TurnCommit(
            "r1", token, NOW, RunAdvance("continue"),
            [CheckpointWrite(done, None, output='{"k":1}')], taken=[Take(found.n, 1)],
        )
    )  # fmt: skip
    assert [(1, 1)] == table(durable_store_url, "SELECT n, seq FROM messages")
    assert None is await store.next_message("r1", "a")
    (cp,) = await store.checkpoints("r1")
    assert ("a", "recv", "completed", {"k": 1}) == (cp.name, cp.kind, cp.status, cp.output)
    with pytest.raises(StaleTurnError):
        await store.commit_turn(
            TurnCommit(
                "r1", token, NOW + 1, RunAdvance("continue"),
                [CheckpointWrite(recv_cp(2, "a", status="completed"), None, output="1")],
                taken=[Take(found.n, 2)],
            )
        )  # fmt: skip
    assert [(1,)] == table(durable_store_url, "SELECT COUNT(*) FROM checkpoints")


async def test_event_values_are_set_by_commits_and_the_latest_is_read(store: Store) -> None:
    """A value per key; a later commit of the key replaces it; another key is apart."""
    token = await claimed(store)
    for seq, key, value in ((1, "stage", '"one"'), (2, "other", "2"), (3, "stage", '"two"')):
        cp = attrs.evolve(recv_cp(seq, key, status="completed"), kind="event")
        await store.commit_turn(
            TurnCommit(
                "r1", token, NOW + seq, RunAdvance("continue"),
                [CheckpointWrite(cp, None, output=value)], values=[EventWrite(key, value, seq)],
            )
        )  # fmt: skip
    assert EventValue("r1", "stage", "two", 3, NOW + 3) == await store.event_value("r1", "stage")
    assert EventValue("r1", "other", 2, 2, NOW + 2) == await store.event_value("r1", "other")
    assert None is await store.event_value("r1", "none")
    assert None is await store.event_value("nope", "stage")


async def test_a_commit_starts_child_runs_and_a_childs_finish_wakes_its_waiting_parent(
    store: Store, durable_store_url: str
) -> None:
    """The child is made pending with its parent and events; its finish makes the parent pending."""
    token = await claimed(store)
    child = ChildRun(
        NewRun("r1:1", "kid", "1", "5", NOW, parent_id="r1"),
        [NewEvent("run.started", NOW, None, {"workflow": "kid", "parent": "r1"})],
    )
    await store.commit_turn(
        TurnCommit(
            "r1", token, NOW, RunAdvance("suspend"),
            [CheckpointWrite(child_cp(1, "r1:1"), None, input='"r1:1"')], runs=[child],
        )
    )  # fmt: skip
    (made,) = await store.child_runs("r1")
    assert ("r1:1", "kid", "pending", 5, "r1") == (
        made.run_id, made.workflow, made.status, made.input, made.parent_id
    )  # fmt: skip
    assert [("run.started", None, {"workflow": "kid", "parent": "r1"})] == await trail(
        store, "r1:1"
    )
    (kid_turn,) = await store.claim_runs(
        workflows=[("kid", "1")], now=NOW + 1, lease_until=NOW + LEASE, owner="e1", limit=5
    )
    await store.commit_turn(
        TurnCommit(
            "r1:1", kid_turn.token, NOW + 2, RunAdvance("finish", status="completed", output="10")
        )
    )
    assert [("r1", "pending", 1, NOW + 2), ("r1:1", "completed", 0, NOW + 2)] == table(
        durable_store_url, "SELECT run_id, status, woken, updated_at FROM runs ORDER BY run_id"
    )


async def test_a_childs_finish_wakes_only_a_parent_that_waits_for_that_child(
    store: Store, durable_store_url: str
) -> None:
    """A child started without waiting finishes while the parent waits for another: no wake."""
    token = await claimed(store)
    await store.commit_turn(
        TurnCommit(
            "r1", token, NOW, RunAdvance("suspend"),
            [
                CheckpointWrite(child_cp(1, "r1:1", status="completed"), None, '"r1:1"', '"r1:1"'),
                CheckpointWrite(child_cp(2, "r1:2"), None, input='"r1:2"'),
            ],
            runs=[
                ChildRun(NewRun("r1:1", "kid", "1", "5", NOW, parent_id="r1")),
                ChildRun(NewRun("r1:2", "kid", "1", "6", NOW + 1, parent_id="r1")),
            ],
        )
    )  # fmt: skip
    for child, at in (("r1:1", NOW + 2), ("r1:2", NOW + 3)):
        (kid_turn,) = await store.claim_runs(
            workflows=[("kid", "1")], now=at, lease_until=at + LEASE, owner="e1", limit=1
        )
        assert child == kid_turn.run.run_id
        await store.commit_turn(
            TurnCommit(child, kid_turn.token, at, RunAdvance("finish", status="failed"))
        )
        if child == "r1:1":
            assert [("r1", "suspended", 0)] == table(
                durable_store_url, "SELECT run_id, status, woken FROM runs WHERE run_id = 'r1'"
            )
    assert [("r1", "pending", 1, NOW + 3)] == table(
        durable_store_url,
        "SELECT run_id, status, woken, updated_at FROM runs WHERE run_id = 'r1'",
    )


async def test_a_child_run_id_another_run_has_is_refused_and_the_commit_writes_nothing(
    store: Store, durable_store_url: str
) -> None:
    """An id taken by a run of no parent: StaleTurnError; the same parent's child: kept as is."""
    token = await claimed(store)
    await store.create_run(NewRun("taken", "kid", "1", "1", NOW), [])
    with pytest.raises(StaleTurnError):
        await store.commit_turn(
            TurnCommit(
                "r1", token, NOW, RunAdvance("continue"),
                [CheckpointWrite(child_cp(1, "taken"), None, input='"taken"')],
                runs=[ChildRun(NewRun("taken", "kid", "1", "2", NOW, parent_id="r1"))],
            )
        )  # fmt: skip
    assert [] == await store.checkpoints("r1")
    assert [("taken", None, "1")] == table(
        durable_store_url, "SELECT run_id, parent_id, input FROM runs WHERE run_id = 'taken'"
    )


async def test_a_cancel_reaches_every_unfinished_run_below_in_one_transaction(
    store: Store, durable_store_url: str
) -> None:
    """Child and grandchild cancelled (an attempt withdrawn), a finished child kept as it is."""
    await claimed(store)
    kid = [("kid", "1")]
    await store.create_run(NewRun("c2", "kid", "1", "1", NOW, parent_id="r1"), [])
    (done,) = await store.claim_runs(
        workflows=kid, now=NOW, lease_until=NOW + LEASE, owner="e", limit=1
    )
    await store.commit_turn(
        TurnCommit("c2", done.token, NOW, RunAdvance("finish", status="completed"))
    )
    await store.create_run(NewRun("g1", "kid", "1", "1", NOW, parent_id="c1"), [])
    (g1,) = await store.claim_runs(
        workflows=kid, now=NOW, lease_until=NOW + LEASE, owner="e", limit=1
    )
    await store.commit_turn(
        TurnCommit(
            "g1", g1.token, NOW, RunAdvance("suspend"),
            [CheckpointWrite(attrs.evolve(remote(1), run_id="g1", step_id="g1:1"), None, "1")],
            [attrs.evolve(task(1), run_id="g1", step_id="g1:1")],
        )
    )  # fmt: skip
    for run_id, parent in (("c1", "r1"), ("other", None)):
        await store.create_run(NewRun(run_id, "kid", "1", "1", NOW, parent_id=parent), [])
    run = await store.cancel_run("r1", compensate=False, now=NOW + 5)
    assert "cancelled" == run.status
    assert [
        ("c1", "cancelled", NOW + 5), ("c2", "completed", NOW), ("g1", "cancelled", NOW + 5),
        ("other", "pending", NOW), ("r1", "cancelled", NOW + 5),
    ] == table(
        durable_store_url, "SELECT run_id, status, updated_at FROM runs ORDER BY run_id"
    )  # fmt: skip
    assert [] == table(durable_store_url, "SELECT * FROM tasks")
    assert [("step.withdrawn", 1, {"attempt": 1, "claimed": False})] == [
        e for e in await trail(store, "g1") if e[0] == "step.withdrawn"
    ]
    assert ["c1", "c2"] == sorted(c.run_id for c in await store.child_runs("r1"))


async def test_a_child_made_dead_by_recovery_wakes_its_waiting_parent(
    store: Store, durable_store_url: str
) -> None:
    """Recovery past max_recovery_attempts: the child is dead and its parent pending."""
    token = await claimed(store)
    await store.commit_turn(
        TurnCommit(
            "r1", token, NOW, RunAdvance("suspend"),
            [CheckpointWrite(child_cp(1, "r1:1"), None, input='"r1:1"')],
            runs=[ChildRun(NewRun("r1:1", "kid", "1", "5", NOW, parent_id="r1"))],
        )
    )  # fmt: skip
    await store.claim_runs(
        workflows=[("kid", "1")], now=NOW, lease_until=NOW + 10, owner="ghost", limit=1
    )
    report = await store.recover(now=NOW + 11, max_recovery_attempts=0, reconcile_ms=1000)
    assert ["r1:1"] == list(report.dead_runs)
    assert [("r1", "pending", 1), ("r1:1", "dead", 0)] == table(
        durable_store_url, "SELECT run_id, status, woken FROM runs ORDER BY run_id"
    )


async def test_a_memory_store_is_shared_by_name_and_dropped() -> None:
    """Two stores of one name see the same rows; a dropped name starts empty; no name is refused."""
    durable_store_url = "memory://shared-by-name"
    first, second = open_store(durable_store_url), open_store(durable_store_url)
    assert not await first.exists()
    await first.open()
    await second.open()
    await first.create_run(NewRun("r1", *WF, "null", NOW), [])
    assert await second.exists()
    assert await second.get_run("r1") is not None
    await first.close()
    await second.close()
    assert MemoryStore.drop(durable_store_url.removeprefix("memory://"))
    assert not await first.exists()
    with pytest.raises(ValueError, match="memory://"):
        open_store("memory://")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("memory://", "names no store"),
        ("memory://  ", "names no store"),
        ("memory://a?x=1", "takes no options"),
        ("memory://a#b", "takes no options"),
        ("memory://a\x00b", "control character"),
        ("memory://a\nb", "control character"),
        ("memory://\ud800", "lone surrogate"),
        ("memory:a", "looks like 'memory://NAME'"),
    ],
)
def test_a_memory_url_that_names_no_clear_store_is_refused_saying_why(url: str, said: str) -> None:
    """Blank names, options and unprintable names are refused, not taken as another store's name."""
    with pytest.raises(ValueError, match=re.escape(said)) as refused:
        open_store(url)
    assert repr(url) in str(refused.value)


# -- PostgreSQL's fast paths against their general paths -------------------------------------------


async def scripted_writes(store: PostgresStore) -> None:
    """
    Writes that take each one-statement path: a start, a local step, turns, results. A turn
    dispatches several steps, listed out of their order: their tasks take ids in the commit's order.
    """
    await store.open()
    try:
        token = await claimed(store)
        await store.record_local_step(
            "r1", token, seq=1, name="q", output="7", started=NOW, now=NOW
        )
        await store.commit_turn(
            TurnCommit("r1", token, NOW + 1, RunAdvance("continue", lease_until=NOW + 50_000))
        )
        error = StepError("no", "x", None, "ValueError")
        for turn_no, seqs in enumerate(((3, 2), (6, 4, 5))):
            now = NOW + 100 * (turn_no + 1)
            if turn_no:
                (turn,) = await store.claim_runs(
                    workflows=[WF], now=now, lease_until=now + LEASE, owner="e1", limit=5
                )
                token = turn.token
            await store.commit_turn(
                TurnCommit(
                    "r1",
                    token,
                    now,
                    RunAdvance("suspend"),
                    [CheckpointWrite(remote(seq), None, input='{"n":1}') for seq in seqs],
                    [task(seq) for seq in seqs],
                    [NewEvent("step.dispatched", now, seq, {"attempt": 1}) for seq in seqs],
                )
            )
            claims = await store.claim_tasks(
                groups=["default"], now=now + 1, claim_until=now + 100, worker="w1", limit=5
            )
            assert list(seqs) == [claim.seq for claim in claims]
            for n, claim in enumerate(claims):
                outcome = TaskOutcome(output='"ok"') if n % 2 else TaskOutcome(error=error)
                assert await store.record_result(claim, "w1", outcome, now + 2 + n)
    finally:
        await store.close()


def everything(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the lease tokens (random by design)."""
    ignored = {"lease_token", "claimed_by"}
    found: dict[str, list[tuple[Any, ...]]] = {}
    for name in ("runs", "checkpoints", "step_errors", "tasks", "events"):
        columns = [c for c in sorted(dialect_columns(url)[name]) if c not in ignored]
        # Sorted whole: the ordering columns of a table need not be a key of it.
        found[name] = sorted(rows(url, f"SELECT {', '.join(columns)} FROM {name}"), key=repr)
    return found


async def test_one_statement_paths_write_what_the_general_transactions_write(
    postgres_server: Any,
) -> None:
    """Turn commits and results on their one-statement paths, and alone: the same rows."""
    fast_url, general_url = postgres_server.url(), postgres_server.url()
    general = PostgresStore(general_url)
    general._one_statement_paths = False  # pyright: ignore[reportPrivateUsage]
    await scripted_writes(PostgresStore(fast_url))
    await scripted_writes(general)
    assert everything(fast_url) == everything(general_url)


async def test_group_commit_writes_what_the_writes_alone_write(postgres_server: Any) -> None:
    """Local steps of many runs in one pipelined group commit, or each alone: the same rows."""
    grouped_url, alone_url = postgres_server.url(), postgres_server.url()
    count = 8
    for url in (grouped_url, alone_url):
        store = CountingGroups(url)
        await store.open()
        try:
            for n in range(count + 1):
                await store.create_run(NewRun(f"r{n}", *WF, "null", NOW), [])
            turns = await store.claim_runs(
                workflows=[WF], now=NOW, lease_until=NOW + LEASE, owner="e", limit=count + 1
            )
            tokens = {t.run.run_id: t.token for t in turns}

            def step(run_id: str, seq: int, tokens: dict[str, str] = tokens, s: Any = store) -> Any:
                # As held_two writes them.
                return s.record_local_step(
                    run_id,
                    tokens[run_id],
                    seq=seq,
                    name=f"s{seq}",
                    output="1",
                    started=NOW,
                    now=NOW,
                )

            if url == grouped_url:
                with locked_run(url, "r0") as lock:
                    held = await held_two(store, tokens)
                    queued = [asyncio.ensure_future(step(f"r{n}", 1)) for n in range(1, count + 1)]
                    await asyncio.sleep(0.05)
                    lock.commit()
                await asyncio.wait_for(asyncio.gather(*held, *queued), PATIENCE)
                assert [count] == store.groups
            else:
                for seq in (1, 2):
                    await step("r0", seq)
                for n in range(1, count + 1):
                    await step(f"r{n}", 1)
                assert [] == store.groups
        finally:
            await store.close()
    assert everything(grouped_url) == everything(alone_url)


async def test_a_cancel_that_meets_a_queue_it_did_not_lock_locks_it_and_tries_again(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: a step of a queue read too late (a dispatch meanwhile) is locked on a retry."""
    import effects.durable._store.postgres_sql as pq

    store = PostgresStore(postgres_url)
    await store.open()
    try:
        token = await claimed(store)
        await store.commit_turn(
            TurnCommit(
                "r1",
                token,
                NOW,
                RunAdvance("suspend"),
                [CheckpointWrite(attrs.evolve(remote(1), queue="q"), None, input='{"n":1}')],
                [task(1, queue="q", queue_limit=1)],
            )
        )
        # As if the step were dispatched after the cancel read the queues it must lock.
        monkeypatch.setattr(
            pq, "PENDING_QUEUES_OF_RUNS", "SELECT NULL::text WHERE %s::text[] IS NULL"
        )
        tries: list[Any] = []
        cancel = store._cancel  # pyright: ignore[reportPrivateUsage]

        async def counted(*args: Any, **kwargs: Any) -> Any:
            tries.append(kwargs["locked"])
            return await cancel(*args, **kwargs)

        monkeypatch.setattr(store, "_cancel", counted)
        run = await store.cancel_run("r1", compensate=False, now=NOW + 1)
    finally:
        await store.close()
    assert ("cancelled", [None, {"q"}]) == (run.status, tries)
    assert [] == rows(postgres_url, "SELECT * FROM tasks")


# -- recurring workflows -------------------------------------------------------------------------


def recurring_row(name: str, next_at: int | None, **fields: Any) -> RecurringRow:
    """A recurring's row as an engine writes it (``rev`` is the store's)."""
    values: dict[str, Any] = {
        "workflow": "wf",
        "schedule": "spaced(3600)",
        "state": "1",
        "recurs": True,
        "missed_at": None,
        "rev": 0,
        "created_at": NOW,
        "updated_at": NOW,
        **fields,
    }
    return RecurringRow(name=name, next_at=next_at, **values)


def recurrence(name: str, due: int) -> tuple[NewRun, NewEvent]:
    """The run of recurring *name* due at *due*, with its ``run.started``."""
    data = {"workflow": "wf", "recurring": name, "due_at": due}
    return NewRun(f"{name}@{due}", *WF, "null", NOW), NewEvent("run.started", NOW, None, data)


async def test_recurring_rows_are_compare_and_set_writes_with_their_runs(
    store: Store, durable_store_url: str
) -> None:
    """
    A first write lands once; an update lands only on the revision it read, and only a write
    that lands makes its runs (a run whose id exists is left as it is); one transaction may
    hold writes that land and writes that do not.
    """
    assert [True] == await store.write_recurring([RecurringWrite(recurring_row("a", 10), None)])
    assert [False] == await store.write_recurring(
        [RecurringWrite(recurring_row("a", 99, state="9"), None, [recurrence("a", 5)])]
    )
    await store.create_run(NewRun("a@20", "other", "1", '"mine"', NOW), [])
    stepped = recurring_row("a", 30, state="3", updated_at=NOW + 20)
    assert [True] == await store.write_recurring(
        [RecurringWrite(stepped, 1, [recurrence("a", 10), recurrence("a", 20)])]
    )
    stale = recurring_row("a", 40, state="4", updated_at=NOW + 30)
    assert [False, True] == await store.write_recurring(
        [
            RecurringWrite(stale, 1, [recurrence("a", 30)]),
            RecurringWrite(recurring_row("b", None, recurs=False), None),
        ]
    )
    (a,) = await store.recurring(["a", "nobody"])
    assert attrs.evolve(stepped, rev=2) == a
    assert ["a", "b"] == [row.name for row in await store.recurring()]
    assert [("a@10", "wf", "null"), ("a@20", "other", '"mine"')] == table(
        durable_store_url, "SELECT run_id, workflow, input FROM runs ORDER BY run_id"
    )
    assert [
        ("run.started", None, {"workflow": "wf", "recurring": "a", "due_at": 10})
    ] == await trail(store, "a@10")
    assert [] == await trail(store, "a@20")


async def test_due_recurring_rows_are_read_earliest_first(store: Store) -> None:
    """Rows due at now or before, by due time then name; a done row (no next time) never."""
    await store.write_recurring(
        [
            RecurringWrite(recurring_row("late", 20), None),
            RecurringWrite(recurring_row("done", None, recurs=False), None),
            RecurringWrite(recurring_row("b-first", 5), None),
            RecurringWrite(recurring_row("a-first", 5, recurs=False), None),
            RecurringWrite(recurring_row("on-time", 10), None),
        ]
    )
    assert [] == await store.due_recurring(4)
    due = await store.due_recurring(10)
    assert [("a-first", 5, False), ("b-first", 5, True), ("on-time", 10, True)] == [
        (row.name, row.next_at, row.recurs) for row in due
    ]


# -- the schema, the same in both dialects ---------------------------------------------------------


def dialect_columns(url: str) -> dict[str, set[str]]:
    """The columns of each table of the live store at *url* (SQLite, PostgreSQL or memory)."""
    if url.startswith("memory:"):
        dumped = MemoryStore.dump(url.removeprefix("memory://"))
        return {name: set(columns) for name, (columns, _) in dumped.items()}
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            return {
                name: {r[1] for r in db.execute(f"PRAGMA table_info({name})")}
                for name in names
                if not name.startswith("sqlite_")
            }
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq, autocommit=True) as db:
        found = db.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = %s",
            (options.schema,),
        ).fetchall()
    tables: dict[str, set[str]] = {}
    for name, column in found:
        tables.setdefault(name, set()).add(column)
    return tables


#: The columns only one dialect has, each for a reason of that dialect alone. Any other column
#: that one dialect has and the other lacks fails the schema check.
DIALECT_ONLY: Final = {
    # A claim whose commit was cut off with its connection is taken up again by its nonce.
    ("postgresql", "tasks", "claim_nonce"),
}


def expected_columns() -> dict[str, Sequence[str]]:
    """What ``rows.py`` reads of each table (``errors`` is read from ``step_errors``)."""
    return {
        "runs": RUN_COLUMNS,
        "checkpoints": [c for c in CHECKPOINT_COLUMNS if c != "errors"],
        "tasks": TASK_COLUMNS,
        "messages": MESSAGE_COLUMNS,
        "event_values": EVENT_VALUE_COLUMNS,
    }


async def test_the_dialects_keep_the_same_columns_as_rows_py(
    tmp_path: Any, postgres_url: str
) -> None:
    """Each table has the same columns in SQLite, PostgreSQL and memory, and those rows.py reads."""
    sqlite_url, memory_url = f"sqlite:///{tmp_path / 'durable.db'}", "memory://schema-check"
    for url, kind in (
        (sqlite_url, SqliteStore),
        (postgres_url, PostgresStore),
        (memory_url, MemoryStore),
    ):
        opened = kind(url)
        await opened.open()
        await opened.close()
    try:
        sqlite_tables, postgres_tables = dialect_columns(sqlite_url), dialect_columns(postgres_url)
        memory_tables = dialect_columns(memory_url)
    finally:
        MemoryStore.drop("schema-check")
    for dialect, table_name, column in DIALECT_ONLY:
        (postgres_tables if dialect == "postgresql" else sqlite_tables)[table_name].discard(column)
    assert sqlite_tables == postgres_tables
    assert {k: v for k, v in sqlite_tables.items() if k != "durable_meta"} == memory_tables
    for name, columns in expected_columns().items():
        assert set(columns) <= sqlite_tables[name], name
    # Every table of a run's rows is one prune deletes from (a new one must join RUN_TABLES).
    holding = {name for name, columns in sqlite_tables.items() if "run_id" in columns}
    assert {"runs", *RUN_TABLES} == holding
    for name in RUN_DATA_TABLES:
        assert "run_id" in sqlite_tables[name], name


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_memory_store_runs_under_trio() -> None:
    """The memory store needs no asyncio: a run is created, claimed and finished under trio."""
    name = "trio-contract"
    store = MemoryStore(f"memory://{name}")
    await store.open()
    try:
        token = await claimed(store)
        await store.commit_turn(
            TurnCommit("r1", token, NOW, RunAdvance("finish", status="completed", output="1"))
        )
        run = await store.get_run("r1")
        assert run is not None
        assert "completed" == run.status
    finally:
        await store.close()
        MemoryStore.drop(name)


async def test_a_claim_of_a_known_run_reads_its_checkpoints_after_the_point_it_names(
    store: Store,
) -> None:
    """claim_runs(known=...) returns the checkpoints after s, and (count, sum of revs) up to s."""
    token = await claimed(store)
    for seq in (1, 2):
        await store.record_local_step(
            "r1", token, seq=seq, name=f"l{seq}", output="1", started=NOW, now=NOW
        )
    failed = attrs.evolve(remote(3), status="failed", error=StepError("x"))
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("continue", lease_until=NOW + LEASE),
            checkpoints=[CheckpointWrite(remote(3), None, input="1")],
        )
    )
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("continue", lease_until=NOW + LEASE),
            checkpoints=[CheckpointWrite(failed, 1, input="1")],
        )
    )
    await store.commit_turn(
        TurnCommit(
            "r1",
            token,
            NOW,
            RunAdvance("suspend", wake_at=NOW),
            checkpoints=[CheckpointWrite(remote(4), None, input="1")],
        )
    )
    first = await store.claim_runs(
        workflows=[WF], now=NOW + 1, lease_until=NOW + LEASE, owner="e1", limit=5,
        known={"r1": 3, "r9": 1},
    )  # fmt: skip
    assert [(3, (3, 4), [4])] == [
        (c.since, c.upto, [cp.seq for cp in c.checkpoints]) for c in first
    ]
    await store.commit_turn(TurnCommit("r1", first[0].token, NOW + 1, RunAdvance("release")))
    for known in (None, {"r1": 0}, {"other": 2}):
        (again,) = await store.claim_runs(
            workflows=[WF], now=NOW + 2, lease_until=NOW + LEASE, owner="e1", limit=5,
            known=known,
        )  # fmt: skip
        assert (0, (0, 0), [1, 2, 3, 4]) == (
            again.since, again.upto, [cp.seq for cp in again.checkpoints]
        )  # fmt: skip
        await store.commit_turn(TurnCommit("r1", again.token, NOW + 2, RunAdvance("release")))
