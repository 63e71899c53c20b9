"""
Dispatched steps: the durable path (one step or a fan of them) and the liveness path.

On the durable path each member is *planned* from its checkpoint: dispatch it, re-dispatch it,
stamp its retry's ``wake_at``, settle it, or wait. All of a call's writes go in one commit, and
the run suspends if any member is still outstanding. The liveness path (``timeout_ms``) instead
awaits each attempt in memory, inside the turn, re-dispatching on silence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from effects import hooks
from effects.durable._codec import Codec, from_data
from effects.durable._failures import lapsed_dispatch, lost_dispatch
from effects.durable._policy import StepPolicy
from effects.durable._probes import Attempt, RetryWait
from effects.durable._records import Checkpoint
from effects.durable._store import CheckpointWrite, NewEvent, NewTask, RunAdvance
from effects.durable._store.rules import task_name
from effects.durable._turn import HOLD, Turn, tell_hooks, wait_ms
from effects.durable.errors import RemoteStepError, RemoteStepTimeout, StepError, remote_error

__all__ = ["Member", "compensation_failed", "liveness", "settle_members"]

_WAITING: Final = "waiting"


@attrs.define(slots=True)
class Member:
    """One dispatched step of a call (a plain ``ctx.step`` is a fan of one)."""

    seq: int
    name: str
    group: str
    policy: StepPolicy
    codec: Codec
    recorded: Checkpoint | None
    input_text: str | None
    #: For a compensation: the step its tasks run (its checkpoint is ``compensate:<undoes>``).
    handler: str | None = None
    #: For a compensation: the name of the step it undoes (its failure is then told as
    #: ``step.compensation_failed`` in the commit that settles it).
    undoes: str | None = None
    # Filled in by planning:
    output: Any = None
    error: RemoteStepError | None = None
    state: Literal["waiting", "done", "failed"] = "waiting"
    wake: int | None = None


# (kind, checkpoint, delay in s, an error after the checkpoint's own, or None).
_Told = tuple[Literal["retry", "give_up"], Checkpoint, float | None, StepError | None]


@attrs.define(slots=True)
class _Plan:
    writes: list[CheckpointWrite] = attrs.field(factory=list[CheckpointWrite])
    tasks: list[NewTask] = attrs.field(factory=list[NewTask])
    events: list[NewEvent] = attrs.field(factory=list[NewEvent])
    # Told to effects hooks once the plan is committed.
    hooks: list[_Told] = attrs.field(factory=list[_Told])
    # Told to the engine's probes once the plan is committed: the retries it stamped.
    waits: list[RetryWait] = attrs.field(factory=list[RetryWait])

    def tell(self, turn: Turn, now: int) -> None:
        for wait in self.waits:
            turn.probes.retry_wait(wait)
        if not hooks():
            return  # nobody listens: build no error (it would decode every attempt's)
        for kind, cp, delay, extra in self.hooks:
            errors = cp.errors if extra is None else (*cp.errors, extra)
            tell_hooks(
                kind,
                attempt=cp.attempts,
                delay=delay,
                error=RemoteStepError(cp.step_id, cp.name, errors or (StepError("failed"),)),
                elapsed=(now - cp.created_at) / 1000,
                name=f"{turn.run.workflow}/{cp.name}",
            )


def _text(data: Any) -> str | None:
    return None if data is None else json.dumps(data, separators=(",", ":"))


def _task(
    turn: Turn, cp: Checkpoint, input_text: str, attempt: int, now: int, **extra: Any
) -> NewTask:
    queue = cp.queue
    return NewTask(
        cp.run_id,
        cp.seq,
        cp.step_id,
        task_name(cp),
        cp.group,
        input_text,
        attempt,
        now,
        queue,
        queue_limit=None if queue is None else turn.host.queue_limit(queue),
        workflow=turn.run.workflow,
        traceparent=turn.run.traceparent,
        **extra,
    )


def _dispatched(cp: Checkpoint, attempt: int) -> dict[str, Any]:
    """The data of ``step.dispatched``; a compensation's also names the step its tasks run."""
    data: dict[str, Any] = {"attempt": attempt, "name": cp.name}
    if cp.handler is not None:
        data["handler"] = cp.handler
    return data


def _dispatch_new(turn: Turn, member: Member, plan: _Plan, now: int) -> None:
    run_id = turn.run.run_id
    lease = turn.host.redispatch_ms
    assert member.input_text is not None
    cp = Checkpoint(
        run_id=run_id,
        seq=member.seq,
        name=member.name,
        kind="remote",
        step_id=f"{run_id}:{member.seq}",
        status="pending",
        attempts=1,
        wake_at=None if lease is None else now + lease,
        output=None,
        error=None,
        errors=(),
        final=False,
        created_at=now,
        updated_at=now,
        group=member.group,
        queue=member.policy.queue,
        dispatched_at=now,
        lease_ms=lease,
        handler=member.handler,
        policy=member.policy.stored()[0],
    )
    plan.writes.append(CheckpointWrite(cp, None, input=member.input_text))
    plan.tasks.append(_task(turn, cp, member.input_text, 1, now))
    plan.events.append(NewEvent("step.dispatched", now, member.seq, _dispatched(cp, 1)))
    member.wake = cp.wake_at


def _redispatch(
    turn: Turn,
    member: Member,
    cp: Checkpoint,
    plan: _Plan,
    now: int,
    *,
    lost: bool = False,
    retry_state: Any = None,
    events: Sequence[NewEvent] = (),
) -> None:
    attempt = cp.attempts + 1
    input_text = _text(cp.input) or "null"
    lease = cp.lease_ms
    changes: dict[str, Any] = {
        "status": "pending",
        "attempts": attempt,
        "wake_at": None if lease is None else now + lease,
        "dispatched_at": now,
        "final": False,
    }
    if lost:
        changes["redispatches"] = cp.redispatches + 1
    if retry_state is not None:
        changes["retry_state"] = retry_state
    updated = attrs.evolve(cp, **changes)
    plan.writes.append(CheckpointWrite(updated, cp.rev, input=input_text))
    plan.tasks.append(_task(turn, updated, input_text, attempt, now, redispatched=lost))
    plan.events.extend(events)
    if lost:
        plan.events.append(
            NewEvent(
                "step.redispatched",
                now,
                cp.seq,
                {"attempt": attempt, "redispatches": cp.redispatches + 1, "reason": "lease lapsed"},
                "warning",
            )
        )
    plan.events.append(NewEvent("step.dispatched", now, cp.seq, _dispatched(cp, attempt)))
    member.wake = updated.wake_at


def _settle(member: Member, cp: Checkpoint, plan: _Plan, now: int, **changes: Any) -> None:
    settled = attrs.evolve(cp, final=True, **changes)
    plan.writes.append(CheckpointWrite(settled, cp.rev, input=_text(cp.input)))
    member.state = "failed"
    member.error = remote_error(settled.step_id, settled.name, settled.errors)
    if member.undoes is not None:
        plan.events.append(
            compensation_failed(
                settled.seq, member.undoes, settled.attempts, member.error.step_error, now
            )
        )


def compensation_failed(
    seq: int, undoes: str, attempts: int, error: StepError, now: int
) -> NewEvent:
    """
    ``step.compensation_failed``: the compensation at *seq* of step *undoes* spent its
    *attempts*, the last failing with *error*. Written in the commit that settles it.
    """
    data = {"step": undoes, "attempts": attempts, "error": error.to_json()}
    return NewEvent("step.compensation_failed", now, seq, data, "error")


def _plan_member(turn: Turn, member: Member, plan: _Plan, now: int) -> None:
    cp = member.recorded
    host = turn.host
    if cp is None:
        _dispatch_new(turn, member, plan, now)
        return
    if cp.status == "completed":
        member.state = "done"
        member.output = from_data(member.codec, cp.output)
        return
    if cp.status in ("pending", "running"):
        if cp.lease_ms is None or cp.wake_at is None:
            return  # waits for its result
        if now < cp.wake_at:
            member.wake = cp.wake_at
            return
        if cp.redispatches >= host.redispatch_max:
            lost = lost_dispatch(cp.lease_ms, cp.redispatches)
            plan.events.append(
                NewEvent(
                    "step.lost",
                    now,
                    cp.seq,
                    {"attempt": cp.attempts, "redispatches": cp.redispatches},
                    "error",
                )
            )
            _settle(
                member,
                cp,
                plan,
                now,
                status="failed",
                wake_at=None,
                error=lost,
                errors=(*cp.errors, lost),
            )
            plan.hooks.append(("give_up", cp, None, lost))
            return
        _redispatch(turn, member, cp, plan, now, lost=True)
        plan.hooks.append(("retry", cp, 0.0, lapsed_dispatch(cp.lease_ms)))
        return
    # A failed attempt.
    if cp.final:
        member.state = "failed"
        member.error = remote_error(cp.step_id, cp.name, cp.errors)
        return
    if cp.wake_at is not None:
        if now < cp.wake_at:
            member.wake = cp.wake_at
            return
        _redispatch(turn, member, cp, plan, now)
        return
    error = cp.error or StepError("the step failed")
    delay: float | None = None
    state = cp.retry_state
    if error.retryable:
        schedule = member.policy.schedule()
        if state is None:
            state = schedule.initial()
        state, _, delay = schedule.step(now / 1000, error, state, turn.rng)
    if delay is None:
        plan.events.append(
            NewEvent(
                "step.gave_up",
                now,
                cp.seq,
                {"attempts": cp.attempts, "retryable": error.retryable},
                "error",
            )
        )
        _settle(member, cp, plan, now, retry_state=state)
        plan.hooks.append(("give_up", cp, None, None))
        return
    delay_ms = wait_ms(delay, error.retry_after)
    wake_at = now + delay_ms
    plan.hooks.append(("retry", cp, delay_ms / 1000, None))
    if turn.probes.probes:
        run = turn.run
        plan.waits.append(
            RetryWait(
                run_id=run.run_id,
                workflow=run.workflow,
                traceparent=run.traceparent,
                name=task_name(cp),
                seq=cp.seq,
                step_id=cp.step_id,
                attempt=cp.attempts,
                at=now,
                wake_at=wake_at,
            )
        )
    scheduled = NewEvent(
        "step.retry_scheduled",
        now,
        cp.seq,
        {"attempt": cp.attempts, "kind": "remote", "delay_ms": delay_ms, "wake_at": wake_at},
    )
    if delay_ms == 0:
        # Due at once: stamped and re-dispatched in the same commit.
        _redispatch(
            turn,
            member,
            attrs.evolve(cp, wake_at=wake_at),
            plan,
            now,
            retry_state=state,
            events=(scheduled,),
        )
        return
    stamped = attrs.evolve(cp, wake_at=wake_at, retry_state=state)
    plan.writes.append(CheckpointWrite(stamped, cp.rev, input=_text(cp.input)))
    plan.events.append(scheduled)
    member.wake = wake_at


async def settle_members(turn: Turn, members: Sequence[Member]) -> bool:
    """
    Plan every member, commit the plan in one transaction, and say whether the run suspended
    (some member is still outstanding). Members end ``done`` (``output``), ``failed``
    (``error``) or ``waiting``.
    """
    now = turn.now()
    plan = _Plan()
    for member in members:
        _plan_member(turn, member, plan, now)
    waiting = [m for m in members if m.state == _WAITING]
    if waiting:
        wakes = [m.wake for m in waiting if m.wake is not None]
        wake_at = min(wakes) if wakes else None
        if wake_at is not None and any(m.recorded is None or m.recorded.lease_ms for m in waiting):
            # A lease wake is never later than the reconcile wake would be.
            wake_at = min(wake_at, now + turn.host.reconcile_ms)
        await turn.commit(
            RunAdvance("suspend", wake_at=wake_at),
            checkpoints=plan.writes,
            tasks=plan.tasks,
            events=plan.events,
            now=now,
        )
        if plan.tasks:
            turn.notify()
        plan.tell(turn, now)
        return True
    if plan.writes or plan.events:
        await turn.commit(HOLD, checkpoints=plan.writes, events=plan.events, now=now)
    plan.tell(turn, now)
    return False


async def liveness(turn: Turn, member: Member) -> Any:
    """
    The liveness path: dispatch, await the attempt in memory, re-dispatch on silence.

    The window is ``pickup_timeout_ms`` until a worker claims the task (its pickup beat), then
    ``timeout_ms``, re-armed by every heartbeat. Before timing out the checkpoint is read again:
    a result or a heartbeat recorded by another process wins. Re-dispatches are back to back, up
    to ``retries`` attempts; a reported error surfaces at once.
    """
    policy = member.policy
    timeout_ms = policy.timeout_ms or 1
    pickup_ms = policy.pickup_timeout_ms or timeout_ms
    retries = policy.retries or 1
    cp = member.recorded
    host = turn.host
    run_id = turn.run.run_id
    step_id = f"{run_id}:{member.seq}"
    errors: list[StepError] = [] if cp is None else list(cp.errors)
    input_text = member.input_text if cp is None else (_text(cp.input) or "null")
    assert input_text is not None
    timeout: RemoteStepTimeout | None = None
    for round_ in range(retries):
        now = turn.now()
        attempt = 1 if cp is None else cp.attempts + 1
        fresh = Checkpoint(
            run_id=run_id,
            seq=member.seq,
            name=member.name,
            kind="remote",
            step_id=step_id,
            status="pending",
            attempts=attempt,
            wake_at=None,
            output=None,
            error=None if cp is None else cp.error,
            errors=tuple(errors),
            final=False,
            created_at=now if cp is None else cp.created_at,
            updated_at=now,
            group=member.group,
            queue=policy.queue,
            dispatched_at=now,
            timeout_ms=timeout_ms,
            progress=None if cp is None else cp.progress,
        )
        waiter = host.waiter(step_id)
        waiter.attempt, waiter.picked_up, waiter.last_beat = attempt, False, None
        waiter.finished = False
        await turn.commit(
            turn.lease(now),
            checkpoints=(CheckpointWrite(fresh, None if cp is None else cp.rev, input=input_text),),
            tasks=(_task(turn, fresh, input_text, attempt, now),),
            events=(
                NewEvent(
                    "step.dispatched",
                    now,
                    member.seq,
                    {"attempt": attempt, "name": member.name, "timeout_ms": timeout_ms},
                ),
            ),
            now=now,
        )
        turn.notify()
        try:
            outcome, cp = await _await_attempt(
                turn,
                seq=member.seq,
                attempt=attempt,
                dispatched=now,
                pickup_ms=pickup_ms,
                timeout_ms=timeout_ms,
                waiter=waiter,
            )
        finally:
            host.drop_waiter(step_id)
        if outcome == "completed":
            return from_data(member.codec, cp.output)
        if outcome == "failed":
            # A reported error surfaces on the first attempt: no retry on this path.
            settled = attrs.evolve(cp, final=True)
            await turn.commit(
                HOLD, checkpoints=(CheckpointWrite(settled, cp.rev, input=input_text),)
            )
            raise remote_error(step_id, member.name, settled.errors)
        phase: Literal["pickup", "running"] = "running" if outcome == "running" else "pickup"
        window = timeout_ms if phase == "running" else pickup_ms
        timeout = RemoteStepTimeout(step_id, window, phase, name=member.name, errors=tuple(errors))
        errors.append(timeout.step_error)
        now = turn.now()
        timed_out = attrs.evolve(
            cp, status="failed", error=timeout.step_error, errors=tuple(errors), updated_at=now
        )
        await turn.commit(
            turn.lease(now),
            checkpoints=(CheckpointWrite(timed_out, cp.rev, input=input_text),),
            events=(
                NewEvent(
                    "step.failed",
                    now,
                    member.seq,
                    {"attempt": attempt, "kind": "remote", "error": timeout.step_error.to_json()},
                    "warning",
                ),
            ),
            now=now,
        )
        cp = attrs.evolve(timed_out, rev=cp.rev + 1)
        if turn.probes.probes:
            turn.probes.attempt(
                Attempt(
                    run_id=run_id,
                    workflow=turn.run.workflow,
                    traceparent=turn.run.traceparent,
                    name=member.name,
                    seq=member.seq,
                    step_id=step_id,
                    kind="remote",
                    attempt=attempt,
                    redispatched=False,
                    started_at=fresh.dispatched_at or now,
                    ended_at=now,
                    outcome="timeout",
                    error_type=timeout.step_error.type,
                )
            )
        last = round_ == retries - 1
        tell_hooks(
            "give_up" if last else "retry",
            attempt=attempt,
            delay=None if last else 0.0,
            error=timeout,
            elapsed=(now - cp.created_at) / 1000,
            name=f"{turn.run.workflow}/{member.name}",
        )
    assert timeout is not None
    assert cp is not None
    settled = attrs.evolve(cp, final=True)
    await turn.commit(HOLD, checkpoints=(CheckpointWrite(settled, cp.rev, input=input_text),))
    raise timeout


async def _await_attempt(
    turn: Turn,
    *,
    seq: int,
    attempt: int,
    dispatched: int,
    pickup_ms: int,
    timeout_ms: int,
    waiter: Any,
) -> tuple[Literal["completed", "failed", "pickup", "running"], Checkpoint]:
    """Wait for one liveness attempt; say how it ended and return the checkpoint as last read."""
    host = turn.host
    running = False
    last = dispatched
    read_at = dispatched
    while True:
        window = timeout_ms if running else pickup_ms
        deadline = last + window
        now = turn.now()
        turn.check_deadline(now)
        if now < deadline:
            if turn.lease_until - now < turn.lease_ms // 2:
                # Renewed as time passes (virtual time too), so a crash is recovered within a lease.
                await turn.commit(turn.lease(now), now=now)
            # Cut short at the run's deadline, which ends the wait (the run times out).
            wait = turn.until_deadline(min(deadline - now, turn.lease_ms // 2), now)
            await host.sleep_until(now + wait, waiter.event)
            waiter.event.clear()
            turn.check_deadline()
        if waiter.picked_up and not running:
            running = True
            last = max(last, waiter.last_beat or last)
        if waiter.last_beat is not None:
            last = max(last, waiter.last_beat)
        now = turn.now()
        window = timeout_ms if running else pickup_ms
        if not waiter.finished and now < last + window and now - read_at < host.poll_ms:
            continue  # a beat heard in this process: the window moved, nothing to read yet
        read_at = now
        cp = await turn.store.get_checkpoint(turn.run.run_id, seq)
        if cp is None:
            msg = f"checkpoint {seq} of run {turn.run.run_id} vanished"
            raise RuntimeError(msg)
        if cp.status == "completed":
            return "completed", cp
        if cp.status == "failed" and cp.attempts == attempt:
            code = cp.error.code if cp.error else None
            if code != "worker_lost":
                return "failed", cp
            # A lost claim is silence, not a verdict: time the attempt out.
            return ("running" if running else "pickup"), cp
        if cp.attempts == attempt and cp.status == "running" and not running:
            running = True
            last = max(last, cp.heartbeat_at or last)
        if cp.heartbeat_at is not None and cp.attempts == attempt:
            last = max(last, cp.heartbeat_at)
        window = timeout_ms if running else pickup_ms
        if turn.now() >= last + window:
            return ("running" if running else "pickup"), cp
