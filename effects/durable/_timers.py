"""
Durable timers: a checkpoint that is ``pending`` with a ``wake_at`` until it is due, then
``completed`` (keeping its ``wake_at``), while its run waits on the engine's wake-up machinery.

A turn that meets a timer suspends its run with the timer's ``wake_at`` (the same column a
dispatched step's durable retry stamps), so the worker loop's due-time polling and
``run_until_idle(advance_time=True)`` wake it; nothing is held in memory meanwhile. The time is
read once, when the timer is first written: a replay, a crash, a restart or a clock read after
that never moves it.

Three moves make a timer, for any primitive that waits for a time (``ctx.sleep``; a receive's
timeout): ``arm`` writes the pending checkpoint and suspends the run until its ``wake_at``;
``wait`` suspends again a run whose recorded timer is not due yet; ``fire`` completes a due one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Final

import attrs

from effects.durable._records import Checkpoint, CheckpointKind
from effects.durable._store import CheckpointWrite, NewEvent, RunAdvance
from effects.durable._turn import HOLD, Turn
from schedules import DurationLike, to_seconds

__all__ = ["MAX_WAKE_MS", "arm", "due", "duration_ms", "fire", "pending", "wait"]

#: The latest epoch ms a timer or a deadline may fall on: 2**53 - 1 (about the year 287,000),
#: which every store and every JSON reader keeps exactly.
MAX_WAKE_MS: Final = 2**53 - 1


def duration_ms(duration: DurationLike, now: int, *, name: str = "duration") -> int:
    """
    *duration* in whole ms (``round(seconds * 1000)``), checked so that ``now + it`` is a time
    the stores keep.

    Raises:
        TypeError: If *duration* is not seconds, a ``timedelta`` or a string.
        ValueError: If it is negative, NaN, infinite, a ``bool``, a string that does not parse,
            or so long that ``now + it`` passes ``MAX_WAKE_MS``; the message names *name*.
    """
    seconds = to_seconds(duration, name=name)
    ms = seconds * 1000
    if not math.isfinite(ms) or now + ms > MAX_WAKE_MS:
        msg = (
            f"{name} must end by epoch ms {MAX_WAKE_MS} (about the year 287,000), got {duration!r}"
        )
        raise ValueError(msg)
    return round(ms)


def due(cp: Checkpoint, now: int) -> bool:
    """Whether the pending timer *cp* has come due at epoch ms *now*."""
    return cp.status == "pending" and cp.wake_at is not None and cp.wake_at <= now


def pending(
    turn: Turn, seq: int, *, name: str, kind: CheckpointKind, wake_at: int | None, now: int
) -> Checkpoint:
    """The pending timer at *seq*, due at epoch ms *wake_at* (``None``: when something wakes it)."""
    return Checkpoint(
        run_id=turn.run.run_id,
        seq=seq,
        name=name,
        kind=kind,
        step_id=f"{turn.run.run_id}:{seq}",
        status="pending",
        attempts=0,
        wake_at=wake_at,
        output=None,
        error=None,
        errors=(),
        final=False,
        created_at=now,
        updated_at=now,
    )


async def arm(
    turn: Turn,
    seq: int,
    *,
    name: str,
    kind: CheckpointKind,
    wake_at: int | None,
    now: int,
    events: Sequence[NewEvent] = (),
) -> Checkpoint:
    """
    Write the ``pending`` timer at *seq* and suspend the run until *wake_at* (epoch ms;
    ``None``: until something wakes it) in one commit; return the checkpoint as written. The
    caller then raises its suspension.
    """
    cp = pending(turn, seq, name=name, kind=kind, wake_at=wake_at, now=now)
    await turn.commit(
        RunAdvance("suspend", wake_at=wake_at),
        checkpoints=(CheckpointWrite(cp, None),),
        events=events,
        now=now,
    )
    return cp


async def wait(turn: Turn, cp: Checkpoint, now: int) -> None:
    """
    Suspend the run again until the recorded timer *cp* is due (its ``wake_at``, read from
    the record: a replay never moves it). The caller then raises its suspension.
    """
    await turn.commit(RunAdvance("suspend", wake_at=cp.wake_at), now=now)


async def fire(
    turn: Turn,
    cp: Checkpoint,
    *,
    now: int,
    output: str | None = None,
    events: Sequence[NewEvent] = (),
    recorded: bool = True,
) -> Checkpoint:
    """
    Complete the timer *cp* (keeping its ``wake_at``) with *output* (JSON text, or ``None``),
    in one commit that keeps the turn going; return it as written. With *recorded* false, *cp*
    is a new row (a timer due at once, such as a zero-length sleep).
    """
    value = None if output is None else json.loads(output)
    done = attrs.evolve(cp, status="completed", output=value, updated_at=now)
    write = CheckpointWrite(done, cp.rev if recorded else None, output)
    await turn.commit(HOLD, checkpoints=(write,), events=events, now=now)
    return done
