"""Static typing cases for ``schedules``: checked by mypy and pyright, never run by pytest."""

from __future__ import annotations

from typing import assert_type

from schedules import (
    Schedule,
    SimulatedStep,
    StepInfo,
    cron,
    exponential,
    forever,
    from_step_options,
    recurs,
    simulate,
    spaced,
)


def constructors() -> None:
    """Constructors say what they output; they take any input."""
    assert_type(forever(), Schedule[object, int])
    assert_type(recurs(3), Schedule[object, int])
    assert_type(spaced("1s"), Schedule[object, int])
    assert_type(exponential(0.25), Schedule[object, float])
    assert_type(from_step_options(retries=3), Schedule[object, float])


def calendar() -> None:
    """A cron outputs its due time (epoch seconds); the zone is keyword-only, a str."""
    assert_type(cron("0 3 * * *"), Schedule[object, float])
    assert_type(cron("0 3 * * *", tz="Europe/Berlin").times(3), Schedule[object, float])
    assert_type(cron("0 3 * * *") | spaced("1h"), Schedule[object, tuple[float, int]])
    cron(b"0 3 * * *")  # type: ignore[arg-type]
    cron("0 3 * * *", "Europe/Berlin")  # type: ignore[call-arg]
    cron("0 3 * * *", tz=None)  # type: ignore[arg-type]


def combinators() -> None:
    """Union and intersect pair their outputs; map changes the output; wrappers keep types."""
    expo = exponential(0.25)
    count = recurs(4)
    assert_type(expo | count, Schedule[object, tuple[float, int]])
    assert_type(expo & count, Schedule[object, tuple[float, int]])
    assert_type(expo.union(count), Schedule[object, tuple[float, int]])
    assert_type(expo.and_then(count), Schedule[object, float | int])
    assert_type(expo.map(str), Schedule[object, str])
    assert_type(expo.jittered().max_delay("4s").times(4), Schedule[object, float])
    assert_type(expo.delays(3), list[float])


def takes_errors(schedule: Schedule[OSError, float]) -> Schedule[OSError, float]:
    """Accept a schedule whose input is an ``OSError``."""
    return schedule


def contravariant_input(errors: Schedule[OSError, float], counted: Schedule[OSError, int]) -> None:
    """A schedule of any input serves where a schedule of errors is wanted."""
    assert_type(takes_errors(exponential(1)), Schedule[OSError, float])
    assert_type(errors.while_input(lambda e: e.errno == 5), Schedule[OSError, float])
    assert_type(counted | exponential(1), Schedule[OSError, tuple[int, float]])


def narrower_input_is_refused(errors: Schedule[OSError, float]) -> None:
    """A schedule of ``OSError`` inputs cannot stand where any input may come."""
    anything: Schedule[object, float] = errors  # type: ignore[assignment]
    del anything


def covariant_output() -> None:
    """A schedule outputting ``int`` serves where ``object`` outputs are wanted."""
    wide: Schedule[object, object] = recurs(2)
    del wide


def step_info_and_simulate() -> None:
    """Delay functions see typed inputs and outputs; simulate keeps the types."""

    def double(info: StepInfo[object, float]) -> float:
        return info.delay * 2 + info.output

    assert_type(exponential(1).modify_delay(double), Schedule[object, float])
    steps = simulate(recurs(2), ["boom"])
    assert_type(steps, list[SimulatedStep[str, int]])
    first = steps[0]
    assert_type(first.delay, float | None)


def predicates_take_the_input_type(errors: Schedule[OSError, float]) -> None:
    """``while_input`` checks its predicate against the schedule's input type."""
    errors.while_input(lambda e: e.strerror is None)
    errors.while_input(lambda e: e.no_such_attribute)  # type: ignore[attr-defined]


def is_retryable(error: OSError) -> bool:
    """A predicate of a narrower input than ``object``."""
    return error.errno == 11


def with_retry_after(info: StepInfo[OSError, float]) -> float:
    """A delay function that reads the error."""
    return info.delay + (info.input.errno or 0)


def narrow_first(errors: Schedule[OSError, float], counted: Schedule[OSError, int]) -> None:
    """A schedule declared with an error input type keeps it through its combinators."""
    assert_type(errors.while_input(is_retryable), Schedule[OSError, float])
    assert_type(errors.modify_delay(with_retry_after), Schedule[OSError, float])
    assert_type(errors | counted, Schedule[OSError, tuple[float, int]])
    assert_type(counted.and_then(forever()), Schedule[OSError, int])


def wrong_predicate_is_refused(counted: Schedule[OSError, int]) -> None:
    """A predicate of an unrelated input type is an error."""

    def is_short(text: str) -> bool:
        return len(text) < 3

    counted.while_input(is_short)  # type: ignore[arg-type]


def step_options_take_a_bool_jitter() -> None:
    """``jitter`` is a ``bool``; a string is refused statically as it is at run time."""
    from_step_options(retries=3, jitter=True)
    from_step_options(retries=3, jitter="yes")  # type: ignore[arg-type]
    from_step_options(retries=3, backoff="linear")  # type: ignore[arg-type]
