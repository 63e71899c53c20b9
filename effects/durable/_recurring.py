"""
Recurring workflows: the ``Recurring`` value, and the pure rules that step its schedule into due
times (``first``, ``advance``), which the engine then writes with the runs they start.

The grid: a recurring's schedule is stepped first when an engine first sees it (at that time),
then at each due time it gave, never at the time the step happens to be noticed, so its due
times stay where the schedule put them whatever the engines' latency and restarts. A step's
delay is the wait to the next recurrence; a calendar schedule (``reads_epoch``, such as
``cron``) whose wait was clamped to ``MAX_DELAY`` gives its due time in its output instead, and
any other wait of ``MAX_DELAY`` is a wake-up to step again, not a recurrence. Due times are whole
epoch ms, at least 1 ms apart (a run's id holds its due time).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, Final, Literal, get_args

import attrs

from effects.durable._definitions import WorkflowDef, check_name
from effects.durable._store import RecurringRow
from effects.durable._store.rows import dumps
from effects.durable.errors import StoreError
from schedules import MAX_DELAY, RandomLike, ScheduleLike

__all__ = [
    "BATCH",
    "CATCH_UPS",
    "CatchUp",
    "Plan",
    "Recurring",
    "advance",
    "first",
    "run_id",
    "schedule_key",
]

#: What a recurring does with recurrences missed while no engine ran: start the latest of them,
#: all of them, or none.
CatchUp = Literal["latest", "all", "none"]
CATCH_UPS: Final[tuple[CatchUp, ...]] = get_args(CatchUp)
#: The most missed recurrences one write steps over (a catch-up of more takes several writes).
BATCH: Final = 1000
#: ``MAX_DELAY`` in whole ms, as the engine stores it.
_MAX_MS: Final = round(MAX_DELAY * 1000)
# A default object repr's address changes with every process: never part of a schedule's key.
_ADDRESS: Final = re.compile(r" at 0x[0-9a-fA-F]+>")


def _check_schedule(schedule: object, name: str) -> None:
    if not (
        callable(getattr(schedule, "initial", None)) and callable(getattr(schedule, "step", None))
    ):
        msg = (
            f"the schedule of recurring {name!r} must be a Schedule (such as cron('0 3 * * *') or"
            f" spaced('1h')), got {schedule!r}"
        )
        raise TypeError(msg)


@attrs.frozen
class Recurring:
    """
    A workflow started once per recurrence of a schedule: pass it to ``Engine(recurring=[...])``.

    Each recurrence starts a run of *workflow* with *input*, whose id is ``f"{name}@{due_ms}"``
    (``due_ms`` the recurrence's due time in epoch ms), so engines sharing a store start each
    recurrence once. The schedule's state is stored: a restart neither skips nor repeats a
    recurrence. A recurrence starts even if the run of the previous one still runs.

    Args:
        name: The recurring's name, unique in an engine: a non-empty string without surrounding
            spaces, U+0000 or lone surrogates.
        workflow: The ``WorkflowDef`` its runs are of (the engine must serve it), or its name.
        schedule: Any ``Schedule`` (or object with ``initial()`` and ``step(...)``) stepped with
            the engine's clock in epoch seconds and input ``None``: ``cron("0 3 * * *")``,
            ``spaced("1h")``, ``fixed("15m")``. A schedule that is done ends the recurrences.
        input: Every run's input (JSON, or what the workflow's codec takes); default ``None``.
        catch_up: When several recurrences passed while no engine ran: ``"latest"`` (default)
            starts the latest of them, ``"all"`` each, ``"none"`` none. One passed recurrence
            is always started, however late.

    Raises:
        TypeError: If *name* is not a string, *workflow* is neither a ``WorkflowDef`` nor a
            string, or *schedule* is not a schedule.
        ValueError: If *name* (or the workflow's name) is empty or has surrounding spaces,
            U+0000 or lone surrogates, or *catch_up* is not one of ``"latest"``, ``"all"``,
            ``"none"``.

    Example:
        >>> from schedules import cron
        >>> from effects.durable import Recurring, workflow
        >>> @workflow("report")
        ... async def report(ctx, day: None) -> str:
        ...     return "sent"
        >>> nightly = Recurring("nightly-report", report, cron("0 3 * * *"), catch_up="all")
        >>> nightly.workflow_name, nightly.schedule, nightly.catch_up
        ('report', cron('0 3 * * *'), 'all')
    """

    name: str
    workflow: WorkflowDef[Any, Any] | str = attrs.field(repr=lambda w: repr(_workflow_name(w)))
    schedule: ScheduleLike[None, object]
    input: Any = None
    catch_up: CatchUp = "latest"

    def __attrs_post_init__(self) -> None:
        check_name(self.name, "recurring name")
        workflow: object = self.workflow
        if not isinstance(workflow, WorkflowDef):
            if not isinstance(workflow, str):  # pyright: ignore[reportUnnecessaryIsInstance]
                msg = (
                    f"the workflow of recurring {self.name!r} must be made by @workflow or be"
                    f" its name, got {workflow!r}"
                )
                raise TypeError(msg)
            check_name(workflow, f"workflow name of recurring {self.name!r}")
        _check_schedule(self.schedule, self.name)
        if self.catch_up not in CATCH_UPS:
            choices = ", ".join(map(repr, CATCH_UPS))
            msg = (
                f"catch_up of recurring {self.name!r} must be one of {choices},"
                f" got {self.catch_up!r}"
            )
            raise ValueError(msg)

    @property
    def workflow_name(self) -> str:
        """The name of the workflow its runs are of."""
        return _workflow_name(self.workflow)


def _workflow_name(workflow: WorkflowDef[Any, Any] | str) -> str:
    return workflow if isinstance(workflow, str) else workflow.name


def run_id(name: str, due_ms: int) -> str:
    """
    The id of the run of recurring *name* due at epoch ms *due_ms*: unique across recurrings,
    since the due time after the last ``@`` is digits (a name may hold ``@`` itself).

    Example:
        >>> run_id("nightly", 1_767_236_400_000), run_id("a@b", 5)
        ('nightly@1767236400000', 'a@b@5')
    """
    return f"{name}@{due_ms}"


def schedule_key(schedule: object) -> str:
    """
    What identifies a schedule across restarts: its ``repr`` (which reads like the expression
    that built it), without the memory address a default ``repr`` shows.

    Example:
        >>> from schedules import spaced
        >>> schedule_key(spaced("1h").jittered())
        'spaced(3600).jittered(min=0.8, max=1.2)'
    """
    return _ADDRESS.sub(">", repr(schedule))


@attrs.frozen
class Plan:
    """
    A step of a recurring, decided: its row's new state (JSON text), next step time and kind,
    the catch-up under way; the due times whose runs it starts; and how many passed due times it
    leaves unstarted (``catch_up``).
    """

    state: str
    next_at: int | None
    recurs: bool
    missed_at: int | None
    starts: tuple[int, ...] = ()
    skipped: int = 0

    def row(self, recurring: Recurring, *, now: int, created_at: int, rev: int) -> RecurringRow:
        """The row this plan stores for *recurring* at epoch ms *now*."""
        return RecurringRow(
            name=recurring.name,
            workflow=recurring.workflow_name,
            schedule=schedule_key(recurring.schedule),
            state=self.state,
            next_at=self.next_at,
            recurs=self.recurs,
            missed_at=self.missed_at,
            rev=rev,
            created_at=created_at,
            updated_at=now,
        )


def _broken(recurring: Recurring, what: str, error: BaseException) -> StoreError:
    return StoreError(
        f"recurring {recurring.name!r} ({schedule_key(recurring.schedule)}): {what}: {error};"
        " its stored row is left as it is (fix or delete it in the store's recurring table)"
    )


def _step(
    recurring: Recurring, at: int, state: Any, rng: RandomLike
) -> tuple[Any, int | None, bool]:
    """
    Step the schedule at epoch ms *at*: its next state, when to step next (``None``: done) and
    whether that is a recurrence (else a wake-up).
    """
    schedule = recurring.schedule
    try:
        state, output, delay = schedule.step(at / 1000, None, state, rng)
    except Exception as error:  # a state that does not fit: said, with the recurring's name
        raise _broken(recurring, "its schedule cannot step from its stored state", error) from error
    if delay is None:
        return state, None, False
    given: object = delay  # a schedule written without a type checker may give anything
    if not isinstance(given, int | float) or not 0 <= delay < math.inf:  # pyright: ignore[reportUnnecessaryIsInstance]
        bad = ValueError(f"a delay must be a number of seconds in [0, MAX_DELAY], got {delay!r}")
        raise _broken(recurring, "its schedule gave no delay", bad)
    if delay < MAX_DELAY:
        return state, at + round(delay * 1000), True
    # A wait of MAX_DELAY says only "longer": a calendar's output keeps the true due time.
    calendar = getattr(schedule, "reads_epoch", False) is True
    if (
        calendar
        and isinstance(output, int | float)
        and not isinstance(output, bool)
        and math.isfinite(output)
        and round(output * 1000) >= at + _MAX_MS
    ):
        return state, round(output * 1000), True
    return state, at + _MAX_MS, False


def _state_text(recurring: Recurring, state: Any) -> str:
    try:
        return dumps(state)
    except (TypeError, ValueError) as error:
        msg = (
            f"the state of recurring {recurring.name!r}'s schedule cannot be stored as JSON"
            f" ({error}): a schedule's state must be plain data"
        )
        raise TypeError(msg) from error


def first(recurring: Recurring, now: int, rng: RandomLike) -> Plan:
    """
    The first step of *recurring*, at epoch ms *now* (an engine sees it for the first time, or
    its schedule changed): its first recurrence comes after the first wait; nothing starts now.

    Raises:
        StoreError: If its schedule cannot step (naming the recurring).
        TypeError: If the schedule's state is not JSON.
    """
    state, next_at, recurs = _step(recurring, now, recurring.schedule.initial(), rng)
    return Plan(_state_text(recurring, state), next_at, recurs, None)


def advance(recurring: Recurring, row: RecurringRow, now: int, rng: RandomLike) -> Plan:
    """
    Step *recurring* from its stored *row* through every time up to epoch ms *now*, each at its
    own time: the due times passed start runs as ``catch_up`` says (one alone always starts).
    At most ``BATCH`` due times are passed in one plan; a longer catch-up goes on in the next
    one, the row keeping the latest missed due time (``missed_at``) meanwhile.

    Raises:
        StoreError: If the stored state is not JSON, or the schedule cannot step from it (the
            message names the recurring; nothing is written).
        TypeError: If the schedule's state is not JSON.
    """
    try:
        state = json.loads(row.state)
    except ValueError as error:
        raise _broken(
            recurring, f"its stored state {row.state[:80]!r} is not JSON", error
        ) from None
    at, recurs = row.next_at, row.recurs
    passed: list[int] = []
    steps = 0
    while at is not None and at <= now and len(passed) < BATCH and steps < 2 * BATCH:
        if recurs:
            passed.append(at)
        state, after, recurs = _step(recurring, at, state, rng)
        # Two recurrences in one ms would be one run: the next is at least 1 ms later.
        at = None if after is None else max(after, at + 1)
        steps += 1
    caught_up = at is None or at > now
    starts, missed_at = _starts(recurring.catch_up, passed, row.missed_at, caught_up=caught_up)
    skipped = len(set(passed) - set(starts))
    return Plan(_state_text(recurring, state), at, recurs, missed_at, tuple(starts), skipped)


def _starts(
    catch_up: CatchUp, passed: Sequence[int], missed_at: int | None, *, caught_up: bool
) -> tuple[list[int], int | None]:
    """The due times to start of those *passed*, and the ``missed_at`` to keep."""
    several = missed_at is not None or len(passed) > 1
    if catch_up == "all" or not several:
        return list(passed), None
    if not caught_up:
        # More to pass in the next write: which one is the latest is not known yet.
        return [], passed[-1] if passed else missed_at
    if catch_up == "latest":
        latest = passed[-1] if passed else missed_at
        return ([] if latest is None else [latest]), None
    return [], None
