"""Helpers shared by the schedules tests: fixed random sources and step-by-step runners."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from schedules import Schedule


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
    """Step *schedule* up to *n* times; return ``(output, delay, now)`` per step.

    Attempt *k + 1* takes ``durations[k]`` seconds (0 once they run out). With *json_state*,
    the state goes through ``json.dumps``/``json.loads`` between every two steps.
    """
    took = list(durations)
    state = schedule.initial()
    now = start
    steps: list[tuple[Any, float | None, float]] = []
    for k in range(n):
        now += took[k] if k < len(took) else 0.0
        if json_state:
            state = json.loads(json.dumps(state, allow_nan=False))
        state, output, delay = schedule.step(now, input, state, rng)
        steps.append((output, delay, now))
        if delay is None:
            break
        now += delay
    return steps


def delays_of(steps: list[tuple[Any, float | None, float]]) -> list[float | None]:
    """The delays of ``run``'s steps."""
    return [delay for _, delay, _ in steps]


def outputs(schedule: Schedule[Any, Any], n: int, input: object = None) -> list[Any]:  # noqa: A002
    """The first *n* outputs (the stopping step's included), attempts taking no time."""
    return [output for output, _, _ in run(schedule, n, ConstantRandom(0.5), input=input)]
