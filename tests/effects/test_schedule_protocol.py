"""A schedule written against the step contract, without subclassing Schedule, drives retries."""

from __future__ import annotations

from typing import Any

import pytest

from effects import Effect, repeat, retry
from effects.testing import VirtualClock
from schedules import RandomLike, Schedule, ScheduleLike, as_schedule, simulate, spaced


class Doubling:
    """1 s, 2 s, 4 s, ... for *limit* retries: the contract by hand, no Schedule base class."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def initial(self) -> Any:
        """No retries yet."""
        return 0

    def step(
        self,
        now: float,
        input: object,  # noqa: A002 - the contract's name
        state: Any,
        rng: RandomLike,
    ) -> tuple[Any, float, float | None]:
        """Double the delay; stop after *limit*."""
        delay = 2.0**state
        return state + 1, delay, delay if state < self.limit else None

    def __repr__(self) -> str:
        return f"Doubling({self.limit})"


class TransientError(Exception):
    """Retried."""


def test_an_object_with_the_contract_is_a_schedule_like() -> None:
    """isinstance against the ScheduleLike protocol holds for built-ins and hand-written ones."""
    assert isinstance(Doubling(3), ScheduleLike)
    assert isinstance(spaced(1), ScheduleLike)
    assert not isinstance(object(), ScheduleLike)


def test_retry_accepts_it(virtual_clock: VirtualClock) -> None:
    """retry(Doubling(3)) waits 1, 2, 4 s and gives up, as a Schedule would."""
    calls: list[int] = []

    @retry(Doubling(3), on=TransientError)
    def flaky() -> None:
        calls.append(1)
        raise TransientError

    with pytest.raises(TransientError):
        flaky()
    assert (4, [1.0, 2.0, 4.0]) == (len(calls), virtual_clock.sleeps)


def test_options_compose_on_it(virtual_clock: VirtualClock) -> None:
    """times= and predicates apply to it as to any schedule; the repr shows it."""
    policy = retry(Doubling(10), times=2, until=lambda e: False)
    assert "retry(Doubling(10), times=2, until=" in repr(policy)
    Effect.fail(TransientError()).pipe(policy).run()
    assert [1.0, 2.0] == virtual_clock.sleeps


def test_repeat_accepts_it(virtual_clock: VirtualClock) -> None:
    """repeat(Doubling(2)) runs three times, waiting 1 and 2 s."""
    runs = iter(range(10))
    assert 2 == repeat(Doubling(2))(runs.__next__)()
    assert [1.0, 2.0] == virtual_clock.sleeps


def test_as_schedule_gives_it_the_combinators() -> None:
    """as_schedule wraps it in a Schedule with the same steps and repr; a Schedule stays itself."""
    wrapped = as_schedule(Doubling(5))
    assert isinstance(wrapped, Schedule)
    assert "Doubling(5).max_delay(3)" == repr(wrapped.max_delay(3))
    assert [1.0, 2.0, 3.0] == wrapped.max_delay(3).times(3).delays()
    plain = spaced(1)
    assert plain is as_schedule(plain)


def test_simulate_runs_it() -> None:
    """simulate takes anything with the contract."""
    assert [1.0, 2.0, None] == [s.delay for s in simulate(Doubling(2), [None] * 5)]


@pytest.mark.parametrize("bad", [object(), 3, "spaced(1)"])
def test_something_without_the_contract_is_refused(bad: object) -> None:
    """A value without initial() and step() is a TypeError naming the contract."""
    with pytest.raises(TypeError, match=r"initial\(\) and step\(\)"):
        retry(bad, on=TransientError)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"initial\(\) and step"):
        as_schedule(bad)  # type: ignore[arg-type]
