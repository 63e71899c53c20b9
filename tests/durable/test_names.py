"""The engine's own failure codes and types are named once, and every type names a real class."""

from __future__ import annotations

import pytest

import effects.durable
from effects.durable import StepError
from effects.durable._failures import (
    cancelled_attempt,
    cancelled_run,
    dead_run,
    lapsed_dispatch,
    lost_dispatch,
    lost_worker,
    no_handler,
)
from effects.durable._names import EVENT_NAMES, FAILURE_CODES
from effects.durable.errors import DurableError

OWN = [
    lost_worker(),
    lost_dispatch(1000, 3),
    lapsed_dispatch(1000),
    no_handler("x"),
    dead_run(2, 2),
]


@pytest.mark.parametrize("error", OWN, ids=lambda e: e.code)
def test_each_own_failure_names_a_class_of_effects_durable_and_a_known_code(
    error: StepError,
) -> None:
    """Its type is importable as written (effects.durable.X, a DurableError) and its code known."""
    module, _, name = error.type.rpartition(".")
    assert "effects.durable" == module
    assert issubclass(getattr(effects.durable, name), DurableError)
    assert error.code in FAILURE_CODES


def test_the_timeout_and_non_determinism_codes_are_among_the_known_ones() -> None:
    """RemoteStepTimeout's and NonDeterminismError's codes come from the same list."""
    timeout = effects.durable.RemoteStepTimeout("r:1", 10)
    assert {timeout.code, effects.durable.NonDeterminismError.code} <= FAILURE_CODES


@pytest.mark.parametrize(
    "error", [cancelled_attempt(), cancelled_run(["charge"])], ids=["attempt", "run"]
)
def test_the_failures_a_cancel_records_name_a_class_and_a_known_code(error: StepError) -> None:
    """A cancelled step's error and a cancelled run's are RunCancelled, code "cancelled"."""
    module, _, name = error.type.rpartition(".")
    assert ("effects.durable", "RunCancelled", "cancelled") == (module, name, error.code)
    assert issubclass(getattr(effects.durable, name), DurableError)
    assert error.code in FAILURE_CODES
    assert effects.durable.RunCancelled.code == error.code


def test_the_saga_events_are_named_once() -> None:
    """The events of compensation, error routes and cancel are among the known names."""
    assert {
        "step.compensation_failed",
        "run.error_routed",
        "run.cancel_requested",
        "run.cancelled",
    } <= EVENT_NAMES
