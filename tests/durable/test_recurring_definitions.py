"""
``Recurring`` values and ``Engine(recurring=...)`` refuse what cannot work when they are built,
with an error naming what is wrong, before any store is opened.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

from effects.durable import Engine, Recurring, WorkflowContext, workflow
from effects.durable._recurring import run_id, schedule_key
from schedules import cron, spaced
from tests.durable.test_recurring_runs import tick


@workflow("tick", version="2")
async def tick_v2(ctx: WorkflowContext, value: Any) -> Any:
    """``tick`` at another version."""
    return value


class StateOfSets:
    """A schedule whose state is not JSON."""

    def initial(self) -> Any:
        """A set."""
        return {1}

    def step(self, now: float, input: Any, state: Any, rng: Any) -> tuple[Any, Any, float | None]:  # noqa: A002
        """Every hour."""
        return state, None, 3600.0


@pytest.mark.parametrize(
    ("name", "error", "said"),
    [
        ("", ValueError, "recurring name must be a non-empty name"),
        (" nightly", ValueError, "without surrounding spaces"),
        ("night\x00ly", ValueError, "must not hold U+0000"),
        ("night\udc80ly", ValueError, "no lone surrogates"),
        (b"nightly", TypeError, "recurring name must be a string"),
        (None, TypeError, "recurring name must be a string"),
    ],
)
def test_a_name_no_store_can_keep_is_refused(name: Any, error: type[Exception], said: str) -> None:
    """Empty, padded, NUL, a lone surrogate (invalid UTF-8), bytes, None: refused, saying why."""
    with pytest.raises(error, match=re.escape(said)):
        Recurring(name, tick, spaced("1h"))


def test_odd_names_that_a_store_keeps_are_taken_and_their_run_ids_stay_apart() -> None:
    """'@', control characters and non-ASCII are kept; an id's due time follows the last '@'."""
    names = ["a", "a@1", "x\x1b[2J", "ünï €"]
    made = [Recurring(name, tick, spaced("1h")).name for name in names]
    assert names == made
    assert ["a@1@5", "a@15"] == [run_id("a@1", 5), run_id("a", 15)]
    assert ("a@1", "5") == tuple(run_id("a@1", 5).rpartition("@")[::2])


@pytest.mark.parametrize(
    ("fields", "error", "said"),
    [
        ({"catch_up": "some"}, ValueError, "must be one of 'latest', 'all', 'none', got 'some'"),
        ({"catch_up": None}, ValueError, "must be one of"),
        ({"schedule": 3600}, TypeError, "the schedule of recurring 'r' must be a Schedule"),
        ({"schedule": None}, TypeError, "must be a Schedule"),
        ({"workflow": 42}, TypeError, "must be made by @workflow or be its name, got 42"),
        ({"workflow": None}, TypeError, "must be made by @workflow"),
        ({"workflow": ""}, ValueError, "workflow name of recurring 'r' must be a non-empty"),
    ],
)
def test_a_bad_field_is_refused_naming_it(
    fields: dict[str, Any], error: type[Exception], said: str
) -> None:
    """An unknown catch_up, no schedule, no workflow: refused at construction."""
    given: dict[str, Any] = {"workflow": tick, "schedule": spaced("1h"), **fields}
    with pytest.raises(error, match=re.escape(said)):
        Recurring("r", **given)


def test_a_recurring_is_a_frozen_value_compared_by_its_fields() -> None:
    """Frozen; equal when built alike; its repr names the workflow and the schedule."""
    nightly = Recurring("nightly", tick, cron("0 3 * * *"), input={"n": 1})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        nightly.name = "other"  # type: ignore[misc]
    assert Recurring("nightly", tick, cron("0 3 * * *"), input={"n": 1}) == nightly
    assert (
        "Recurring(name='nightly', workflow='tick', schedule=cron('0 3 * * *'),"
        " input={'n': 1}, catch_up='latest')"
    ) == repr(nightly)
    assert ("tick", "tick") == (
        nightly.workflow_name,
        Recurring("n", "tick", spaced(1)).workflow_name,
    )


def test_two_recurrings_of_one_name_in_an_engine_are_refused() -> None:
    """A duplicate name: ValueError naming it."""
    with pytest.raises(ValueError, match="two recurrings are named 'nightly'"):
        Engine(
            "memory://dupes",
            workflows=[tick],
            recurring=[
                Recurring("nightly", tick, cron("0 3 * * *")),
                Recurring("nightly", tick, spaced("1h")),
            ],
        )


@pytest.mark.parametrize(
    ("workflow_given", "said"),
    [
        ("report", "starts workflow 'report', which this engine does not serve"),
        (tick_v2, "starts workflow 'tick' (version 2), which this engine does not serve"),
    ],
)
def test_a_recurring_of_a_workflow_the_engine_does_not_serve_is_refused(
    workflow_given: Any, said: str
) -> None:
    """Unknown by name, or served at another version: ValueError naming what it has."""
    with pytest.raises(ValueError, match=re.escape(said)) as refused:
        Engine(
            "memory://unserved",
            workflows=[tick],
            recurring=[Recurring("r", workflow_given, spaced("1h"))],
        )
    assert "(it has 'tick' (version 1))" in str(refused.value)


def test_a_workflow_named_by_its_name_is_taken() -> None:
    """Recurring(name, "tick", ...) with tick in the engine: accepted."""
    made = Engine("memory://named", workflows=[tick], recurring=[Recurring("r", "tick", spaced(1))])
    assert ["r"] == list(made.recurring)


def test_what_is_not_a_recurring_is_refused() -> None:
    """A bare schedule in recurring=: TypeError."""
    with pytest.raises(TypeError, match=r"recurring takes Recurring\(name, workflow, schedule\)"):
        Engine("memory://not", workflows=[tick], recurring=[spaced("1h")])  # type: ignore[list-item]


def test_an_input_that_cannot_be_stored_is_refused_naming_the_recurring() -> None:
    """A set as input: TypeError naming the recurring's input."""
    with pytest.raises(TypeError, match="input of recurring 'r' cannot be stored as JSON"):
        Engine("memory://x", workflows=[tick], recurring=[Recurring("r", tick, spaced(1), {1})])


def test_a_schedule_whose_state_is_not_json_is_refused() -> None:
    """A state that cannot be stored: TypeError at construction, not at the first poll."""
    with pytest.raises(TypeError, match="the schedule of recurring 'r' has a state that cannot"):
        Engine("memory://x", workflows=[tick], recurring=[Recurring("r", tick, StateOfSets())])


def test_a_default_repr_is_keyed_without_its_address() -> None:
    """A schedule without a repr of its own is known across processes by its class alone."""
    assert schedule_key(StateOfSets()).endswith(".StateOfSets object>")
    assert "0x" not in schedule_key(StateOfSets())
