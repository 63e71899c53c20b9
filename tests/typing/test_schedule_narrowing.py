"""Static typing cases: a schedule taking any input narrows to an error-typed function's input."""

from __future__ import annotations

from typing import assert_type

from effects.http import ApiRequestError, respect_retry_after
from schedules import Schedule, StepInfo, exponential, forever, recurs, spaced


def is_transient(error: ApiRequestError) -> bool:
    """A predicate written for the errors the user expects."""
    return error.transient


def server_delay(info: StepInfo[ApiRequestError, float]) -> float:
    """A delay function that reads the error."""
    return info.input.retry_after or info.delay


def log_error(error: ApiRequestError) -> None:
    """A callback on the error."""


def narrowing() -> None:
    """Error-typed predicates, delay functions, taps and schedules narrow a schedule's input."""
    expo = exponential(1)
    assert_type(expo.while_input(is_transient), Schedule[ApiRequestError, float])
    assert_type(expo.until_input(is_transient), Schedule[ApiRequestError, float])
    assert_type(expo.modify_delay(server_delay), Schedule[ApiRequestError, float])
    assert_type(expo.add_delay(server_delay), Schedule[ApiRequestError, float])
    assert_type(expo.tap_input(log_error), Schedule[ApiRequestError, float])
    narrowed = expo.while_input(is_transient).times(3)
    assert_type(narrowed, Schedule[ApiRequestError, float])
    assert_type(recurs(2) | narrowed, Schedule[ApiRequestError, tuple[int, float]])
    assert_type(recurs(2) & narrowed, Schedule[ApiRequestError, tuple[int, float]])
    assert_type(narrowed | recurs(2), Schedule[ApiRequestError, tuple[float, int]])
    assert_type(spaced(1).union(narrowed), Schedule[ApiRequestError, tuple[int, float]])
    assert_type(spaced(1).intersect(narrowed), Schedule[ApiRequestError, tuple[int, float]])
    assert_type(forever().and_then(narrowed), Schedule[ApiRequestError, int | float])
    assert_type(
        respect_retry_after(expo.jittered(), limit=60).while_input(is_transient),
        Schedule[ApiRequestError, float],
    )


def untyped_lambdas_keep_working() -> None:
    """Lambdas still type-check against a schedule taking any input."""
    exponential(1).while_input(lambda error: error is not None).times(2)
    exponential(1).modify_delay(lambda info: info.delay * 2).delays(3)


def unrelated_input_is_refused(
    narrowed: Schedule[ApiRequestError, float], texts: Schedule[str, int]
) -> None:
    """A narrowed schedule still refuses a predicate or schedule for an unrelated input."""

    def is_short(text: str) -> bool:
        return len(text) < 3

    narrowed.while_input(is_short)  # type: ignore[arg-type]
    _ = narrowed | texts  # type: ignore[operator]
