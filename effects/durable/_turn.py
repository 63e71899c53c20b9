"""One turn's state: the lease it holds, its engine's services, and how it suspends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import attrs

from effects import Clock, RetryEvent, notify_hooks
from effects.durable._definitions import StepDef, WorkflowDef
from effects.durable._probes import Probes
from effects.durable._records import Run
from effects.durable._store import (
    CheckpointWrite,
    ChildRun,
    EventWrite,
    NewEvent,
    NewTask,
    RunAdvance,
    Store,
    Take,
    TurnCommit,
)
from effects.durable._store.rules import parked_until
from effects.durable._time import epoch_ms
from effects.durable.errors import StoreError
from schedules import MAX_DELAY, RandomLike

__all__ = [
    "HOLD",
    "DeadlinePassed",
    "StepWaiter",
    "Stopped",
    "Suspended",
    "Turn",
    "TurnHost",
    "tell_hooks",
    "wait_ms",
]

_MAX_DELAY_MS: Final = round(MAX_DELAY * 1000)
_log: Final = logging.getLogger("effects.durable")
_LEVELS: Final = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
# A commit that keeps the turn going: its lease is checked, not rewritten (the renewer and the
# waits renew it), so a step's commit writes no page of the runs table.
HOLD: Final = RunAdvance("continue")


class Suspended(BaseException):
    """The run suspends here; not an error, and not catchable by ``except Exception``."""


class Stopped(BaseException):
    """
    A run being cancelled with compensation stops here: its replay met a step with no settled
    record. Not an error, and not catchable by ``except Exception``.
    """


class DeadlinePassed(BaseException):
    """
    The run's whole-run deadline came during a turn: the turn stops where it is and gives the
    run back, and the next turn (which finds the deadline passed) fails it. Not an error, and
    not catchable by ``except Exception``.
    """


@attrs.define(slots=True, eq=False)
class StepWaiter:
    """What an in-memory wait for a dispatched step hears from workers in the same process."""

    event: asyncio.Event = attrs.field(factory=asyncio.Event)
    attempt: int = 0
    picked_up: bool = False
    last_beat: int | None = None
    finished: bool = False


class TurnHost(Protocol):
    """The engine services a turn uses beyond its store (the worker loop implements this)."""

    @property
    def redispatch_ms(self) -> int | None:
        """The lease of a pending dispatched step (lost-dispatch detection) in ms; ``None``: off."""
        ...

    @property
    def redispatch_max(self) -> int:
        """How many times a lost dispatch is re-driven before the step is lost."""
        ...

    @property
    def reconcile_ms(self) -> int:
        """The wake of a run waiting on the liveness path, should its dispatcher die (ms)."""
        ...

    @property
    def compensation_retries(self) -> int:
        """Each compensation's attempts, the first included."""
        ...

    @property
    def poll_ms(self) -> int:
        """How often a wait reads the store again for what other processes recorded (ms)."""
        ...

    def waiter(self, step_id: str) -> StepWaiter:
        """The in-memory waiter of a dispatched step (made on first use)."""
        ...

    def drop_waiter(self, step_id: str) -> None:
        """Forget the waiter of a dispatched step."""
        ...

    async def sleep_until(self, deadline: int, event: asyncio.Event) -> None:
        """Wait until epoch ms *deadline* or until *event* is set, whichever comes first."""
        ...

    def queue_limit(self, name: str) -> int:
        """The concurrency of the engine's queue *name*; ``ValueError`` if it has none."""
        ...

    def due_changed(self) -> None:
        """A commit of a turn brought a time to come: a timer, or a task available later."""
        ...

    def event_set(self, run_id: str) -> None:
        """A commit of a turn set an event of the run (``get_event`` waiters here read)."""
        ...


@attrs.define(slots=True)
class Turn:
    """What a turn needs from its engine, and the lease it holds."""

    store: Store
    clock: Clock
    rng: RandomLike
    lease_ms: int
    run: Run
    token: str
    steps: Mapping[str, StepDef[Any, Any]]
    notify: Callable[[], None]
    host: TurnHost
    lease_until: int = 0
    #: The store error a write of this turn met: the turn is then abandoned, whatever the
    #: workflow does with the error (it must not finish or fail the run on a record it lacks).
    broken: StoreError | None = None
    #: Whether the turn's last commit suspended the run to wait for results alone (no timer,
    #: no task for later): its end then leaves nothing runnable by itself.
    waits_only: bool = False
    #: Whether a commit of the turn started child runs (work for some engine to claim now).
    made_runs: bool = False
    #: The step names of this turn by sequence number (for log lines).
    names: dict[int, str] = attrs.field(factory=dict[int, str])
    #: The engine's telemetry probes.
    probes: Probes = attrs.field(factory=Probes)
    #: Checkpoint writes and events made without a commit of their own (``ctx.patched``'s
    #: markers, a due timer's completion): the turn's next commit carries them (``defer``).
    #: Lost with a crash before it, they are made again by the replay, which reaches them with
    #: nothing after them recorded either.
    unwritten: list[CheckpointWrite] = attrs.field(factory=list[CheckpointWrite])
    unwritten_events: list[NewEvent] = attrs.field(factory=list[NewEvent])
    #: Whether this turn times its run out (its deadline had passed when it was claimed).
    timing_out: bool = False
    #: The engine's workflows by name (a child workflow named by a string is looked up here).
    workflows: Mapping[str, WorkflowDef[Any, Any]] = attrs.field(
        factory=dict[str, WorkflowDef[Any, Any]]
    )
    #: With the engine's cache of suspended runs on: the revision each checkpoint this turn
    #: wrote has now, by sequence number (what ``_cached_runs`` checks the store against).
    revs: dict[int, int] | None = None

    def now(self) -> int:
        """Epoch ms now."""
        return epoch_ms(self.clock)

    def defer(self, write: CheckpointWrite, events: Sequence[NewEvent] = ()) -> None:
        """Have the turn's next commit carry *write* and *events* (see ``unwritten``)."""
        self.unwritten.append(write)
        self.unwritten_events.extend(events)

    @property
    def has_unwritten(self) -> bool:
        """Whether the next commit carries deferred writes (then it takes the general path)."""
        return bool(self.unwritten)

    @property
    def deadline(self) -> int | None:
        """
        The whole-run deadline this turn keeps (epoch ms), or ``None``: none when the run has
        none, when this turn times the run out (it is past), and while the run is being
        cancelled with compensation (the cancel ends it; its undos are not cut short).
        """
        if self.timing_out or self.run.cancel == "compensate":
            return None
        return self.run.deadline

    def check_deadline(self, now: int | None = None) -> None:
        """
        Raise ``DeadlinePassed`` if the deadline this turn keeps has come (at epoch ms *now*,
        default the clock's reading).
        """
        deadline = self.deadline
        if deadline is not None and (self.now() if now is None else now) >= deadline:
            raise DeadlinePassed

    def until_deadline(self, wait_ms: int, now: int) -> int:
        """*wait_ms* from epoch ms *now*, cut short at the turn's deadline (never below 0)."""
        deadline = self.deadline
        if deadline is None:
            return wait_ms
        return max(0, min(wait_ms, deadline - now))

    async def commit(
        self,
        advance: RunAdvance,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        tasks: Sequence[NewTask] = (),
        events: Sequence[NewEvent] = (),
        now: int | None = None,
        runs: Sequence[ChildRun] = (),
        taken: Sequence[Take] = (),
        values: Sequence[EventWrite] = (),
    ) -> None:
        """
        One transaction of this turn (raises ``StaleTurnError`` if the lease was lost, and
        ``StoreError`` if the store failed, which also marks the turn ``broken``).
        """
        at = self.now() if now is None else now
        if advance.action == "suspend" and self.deadline is not None:
            # A waiting run is woken at its deadline, to time out then.
            advance = attrs.evolve(advance, wake_at=parked_until(advance.wake_at, self.deadline))
        # A release gives the run back and a broken turn writes nothing more of its own: the
        # replay records the unwritten checkpoints again.
        carried = self.unwritten if self.broken is None and advance.action != "release" else []
        if carried:
            checkpoints = [*carried, *checkpoints]
            events = [*self.unwritten_events, *events]
        try:
            await self.store.commit_turn(
                TurnCommit(
                    self.run.run_id,
                    self.token,
                    at,
                    advance,
                    checkpoints,
                    tasks,
                    events,
                    runs,
                    taken,
                    values,
                )
            )
        except StoreError as error:
            self.broken = error
            raise
        if carried:
            self.unwritten = []
            self.unwritten_events = []
        revs = self.revs
        if revs is not None:
            for write in checkpoints:
                rev = write.expected_rev
                revs[write.checkpoint.seq] = 1 if rev is None else rev + 1
        if advance.lease_until is not None:
            self.lease_until = advance.lease_until
        if runs:
            self.made_runs = True
        later = (advance.action == "suspend" and advance.wake_at is not None) or any(
            task.available_at > at for task in tasks
        )
        if later:
            self.host.due_changed()
        self.waits_only = advance.action == "suspend" and not later
        if events:
            log_events(self.run, self.names, events)

    def lease(self, now: int, extra_ms: int = 0) -> RunAdvance:
        """The advance that keeps the turn going with its lease renewed from *now*."""
        return RunAdvance("continue", lease_until=now + self.lease_ms + extra_ms)


def _error_text(data: Mapping[str, Any]) -> str:
    error = data.get("error")
    if not isinstance(error, Mapping):
        return ""
    shown: Mapping[str, Any] = error  # pyright: ignore[reportUnknownVariableType]
    code = shown.get("code")
    kind = str(shown.get("type", "")).rpartition(".")[2]
    message = str(shown.get("message", ""))
    return f"{kind}{f' [{code}]' if code else ''}: {message}"


def log_events(run: Run, names: Mapping[int, str], events: Sequence[NewEvent]) -> None:
    """
    Log a commit's events on ``effects.durable``, one line each, readable by people: the run,
    its workflow, the step's name and position, the attempt, and the error as ``Type [code]:
    message``. A failed attempt that a retry follows is INFO (with the wait); a step's final
    failure is WARNING; the run's failure (and a step given up) is ERROR.
    """
    waits = {
        (e.seq, e.data.get("attempt")): e.data.get("delay_ms")
        for e in events
        if e.name == "step.retry_scheduled"
    }
    for event in events:
        data = event.data
        attempt = data.get("attempt")
        retried = event.name == "step.failed" and (event.seq, attempt) in waits
        if retried:
            level = logging.INFO
        elif event.name == "step.retry_scheduled":
            level = logging.DEBUG  # told by the step.failed line before it, with the wait
        elif event.name in ("step.gave_up", "run.failed", "run.dead"):
            level = logging.ERROR
        else:
            level = _LEVELS.get(event.level, logging.INFO)
        if not _log.isEnabledFor(level):
            continue
        text = f"run {run.run_id} ({run.workflow})"
        if event.seq is not None:
            text += f" step {names.get(event.seq, '?')!r} (#{event.seq})"
        text += f": {event.name}"
        if attempt is not None:
            text += f", attempt {attempt}"
        if event.name in ("step.failed", "run.failed", "run.dead"):
            text += f": {_error_text(data)}"
        elif event.name == "step.gave_up":
            text += f" after {data.get('attempts')} attempts"
        if retried:
            text += f"; retrying in {waits[event.seq, attempt]} ms"
        _log.log(level, "%s", text, extra={"durable_event": event.name, "run_id": run.run_id})


def tell_hooks(
    kind: Literal["retry", "give_up"],
    *,
    attempt: int,
    delay: float | None,
    error: Exception,
    elapsed: float,
    name: str,
) -> None:
    """
    Report a durable retry or give-up to the hooks of ``effects.add_hook`` (and so to
    ``effects.log_retries``). A hook that raises is logged, never allowed to break the engine.
    """
    try:
        notify_hooks(RetryEvent(kind, attempt, delay, error, elapsed, name))
    except Exception:  # noqa: BLE001 - a listener's bug must not stop a workflow
        _log.exception("an effects hook raised on a durable event of %s; ignored", name)


def wait_ms(delay: float, retry_after: float | None) -> int:
    """A schedule's delay in whole ms, at least what the failure asked for, at most the clamp."""
    ms = round(delay * 1000)
    if retry_after is not None:
        ms = max(ms, round(retry_after * 1000))
    return min(ms, _MAX_DELAY_MS)
