"""Helpers shared by the schedules tests: fixed random sources and step-by-step runners."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import Any

from schedules import Schedule, simulate


class ConstantRandom:
    """A ``RandomLike`` that always returns the same value, so the order of draws cannot matter."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        """Return the constant."""
        return self.value


class SequenceRandom:
    """A ``RandomLike`` that returns the given values in turn, cycling."""

    def __init__(self, *values: float) -> None:
        self.values = values
        self.index = 0

    def random(self) -> float:
        """Return the next value."""
        value = self.values[self.index % len(self.values)]
        self.index += 1
        return value


class JsonState(Schedule[Any, Any]):
    """Wraps a schedule, sending its state through JSON (``dumps``, ``loads``) before each step."""

    __slots__ = ("inner",)

    def __init__(self, inner: Schedule[Any, Any]) -> None:
        self.inner = inner

    def initial(self) -> Any:
        """The wrapped schedule's initial state."""
        return self.inner.initial()

    def step(self, now: float, input: Any, state: Any, rng: Any) -> tuple[Any, Any, float | None]:  # noqa: A002
        """Step the wrapped schedule with its state decoded from JSON."""
        return self.inner.step(now, input, json.loads(json.dumps(state, allow_nan=False)), rng)


def run(
    schedule: Schedule[Any, Any],
    n: int,
    rng: Any,
    *,
    durations: Iterable[float] = (),
    start: float = 0.0,
    input: object = None,  # noqa: A002
    json_state: bool = False,
) -> list[tuple[Any, float | None, float]]:
    """Step *schedule* up to *n* times with ``simulate``; return ``(output, delay, now)`` per step.

    Attempt *k + 1* takes ``durations[k]`` seconds (0 once they run out). With *json_state*,
    the state goes through ``json.dumps``/``json.loads`` between every two steps.
    """
    took = list(durations)
    steps = simulate(
        JsonState(schedule) if json_state else schedule,
        itertools.repeat(input, n),
        rng=rng if rng is not None else ConstantRandom(0.5),
        start=start,
        attempt_time=lambda attempt: took[attempt - 1] if attempt <= len(took) else 0.0,
    )
    return [(step.output, step.delay, step.now) for step in steps]


def delays_of(steps: list[tuple[Any, float | None, float]]) -> list[float | None]:
    """The delays of ``run``'s steps."""
    return [delay for _, delay, _ in steps]


def outputs(schedule: Schedule[Any, Any], n: int, input: object = None) -> list[Any]:  # noqa: A002
    """The first *n* outputs (the stopping step's included), attempts taking no time."""
    return [output for output, _, _ in run(schedule, n, ConstantRandom(0.5), input=input)]
