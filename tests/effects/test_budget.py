"""RetryBudget: argument checks, sliding-window accounting, thread safety, a fleet of callers."""

from __future__ import annotations

import math
import threading
from collections import Counter
from decimal import Decimal
from typing import NoReturn

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effects import AsyncEffect, RetryBudget, RetryEvent, retry, use_clock
from effects.testing import VirtualClock


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"ratio": -0.1}, "ratio"),
        ({"ratio": math.nan}, "ratio"),
        ({"ratio": math.inf}, "ratio"),
        ({"min_per_second": -1.0}, "min_per_second"),
        ({"min_per_second": math.inf}, "min_per_second"),
        ({"window": 0.0}, "window"),
        ({"window": -10.0}, "window"),
        ({"window": math.nan}, "window"),
    ],
)
def test_bad_numbers_raise_value_error_naming_the_argument(
    kwargs: dict[str, float], name: str
) -> None:
    """A negative, NaN or infinite value, or a zero window, is refused naming the argument."""
    with pytest.raises(ValueError, match=name) as info:
        RetryBudget(**kwargs)
    assert repr(next(iter(kwargs.values()))) in str(info.value)


@pytest.mark.parametrize("kwargs", [{"ratio": "0.1"}, {"window": True}, {"min_per_second": None}])
def test_non_numbers_raise_type_error(kwargs: dict[str, object]) -> None:
    """A string, bool or None is a type error, not silently coerced."""
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        RetryBudget(**kwargs)  # type: ignore[arg-type]


def test_defaults_and_repr() -> None:
    """The defaults are the design's and the repr reads like the call that built it."""
    budget = RetryBudget()
    assert (0.1, 10.0, 10.0) == (budget.ratio, budget.min_per_second, budget.window)
    assert "RetryBudget(ratio=0.1, min_per_second=10.0, window=10.0)" == repr(budget)


def test_reserve_alone_grants_min_per_second_times_window() -> None:
    """With no first attempts, exactly min_per_second * window retries are granted."""
    budget = RetryBudget(ratio=0.1, min_per_second=2.0, window=5.0)
    granted = sum(budget.try_retry(now=1.0) for _ in range(100))
    assert 10 == granted


def test_ratio_of_first_attempts_is_added_to_the_reserve() -> None:
    """Retries in the window are bounded by ratio * first attempts + min_per_second * window."""
    budget = RetryBudget(ratio=0.25, min_per_second=1.0, window=4.0)
    for _ in range(40):
        budget.record_attempt(now=0.5)
    assert 14.0 == budget.available(now=0.5)
    granted = sum(budget.try_retry(now=0.5) for _ in range(100))
    assert 14 == granted
    assert 0.0 == budget.available(now=0.5)


def test_zero_budget_never_grants() -> None:
    """ratio=0 and min_per_second=0 mean no retries at all."""
    budget = RetryBudget(ratio=0.0, min_per_second=0.0, window=1.0)
    budget.record_attempt(now=0.0)
    assert budget.try_retry(now=0.0) is False


def test_refused_retry_is_not_counted() -> None:
    """A refusal takes no token, so the available count does not go below zero."""
    budget = RetryBudget(ratio=0.0, min_per_second=1.0, window=1.0)
    assert budget.try_retry(now=0.0) is True
    assert budget.try_retry(now=0.0) is False
    assert 0.0 == budget.available(now=0.0)


def test_buckets_expire_one_by_one() -> None:
    """Retries leave the window bucket by bucket (window / 10 s each), refilling the reserve."""
    budget = RetryBudget(ratio=0.0, min_per_second=1.0, window=10.0)
    assert [True, True] == [budget.try_retry(now=0.5), budget.try_retry(now=3.5)]
    for _ in range(8):
        assert budget.try_retry(now=9.5) is True
    assert budget.try_retry(now=9.9) is False
    # At 10.0 the bucket [0, 1) has expired: one token back.
    assert 1.0 == budget.available(now=10.0)
    assert budget.try_retry(now=10.0) is True
    assert budget.try_retry(now=10.0) is False
    # At 14.0 the bucket [3, 4) has expired as well.
    assert 1.0 == budget.available(now=14.0)


def test_attempts_leave_the_window_too() -> None:
    """First attempts older than the window no longer earn retries."""
    budget = RetryBudget(ratio=1.0, min_per_second=0.0, window=1.0)
    for _ in range(5):
        budget.record_attempt(now=0.0)
    assert 5.0 == budget.available(now=0.95)
    assert 0.0 == budget.available(now=1.0)


def test_long_gap_clears_everything() -> None:
    """After more than a window of silence the budget is back to its reserve alone."""
    budget = RetryBudget(ratio=1.0, min_per_second=1.0, window=2.0)
    for _ in range(7):
        budget.record_attempt(now=0.0)
        budget.try_retry(now=0.0)
    assert 2.0 == budget.available(now=1000.0)


def test_clock_going_backwards_counts_into_the_newest_bucket() -> None:
    """A smaller now never reopens expired buckets nor lets retries escape the window."""
    budget = RetryBudget(ratio=0.0, min_per_second=1.0, window=1.0)
    assert budget.try_retry(now=5.0) is True
    assert budget.try_retry(now=1.0) is False
    assert 0.0 == budget.available(now=5.05)


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf])
def test_broken_clock_values_are_a_clear_error(now: float) -> None:
    """NaN or infinite now is refused naming it, and counts nothing."""
    budget = RetryBudget(ratio=0.0, min_per_second=1.0, window=1.0)
    for method in (budget.try_retry, budget.record_attempt, budget.available):
        with pytest.raises(ValueError, match=f"now must be finite.*{now!r}"):
            method(now)
    assert budget.try_retry(now=0.0) is True


@pytest.mark.parametrize(
    ("ratio", "attempts", "granted"),
    [(0.57, 100, 57), (0.1, 30, 3), (0.29, 100, 29), (0.7, 10, 7), (1 / 3, 3, 0), (0.3, 10, 3)],
)
def test_grants_are_floor_of_ratio_times_attempts_exactly(
    ratio: float, attempts: int, granted: int
) -> None:
    """ratio 0.57 over 100 first attempts grants 57 (not 56, as 0.57 * 100 in floats would)."""
    budget = RetryBudget(ratio=ratio, min_per_second=0.0, window=10.0)
    for _ in range(attempts):
        budget.record_attempt(now=0.0)
    assert (granted, granted) == (
        budget.available(now=0.0),
        sum(budget.try_retry(now=0.0) for _ in range(attempts + 5)),
    )


@pytest.mark.parametrize(
    ("min_per_second", "window", "reserve"), [(0.7, 10.0, 7), (0.3, 3.0, 0), (10.0, 10.0, 100)]
)
def test_the_reserve_is_floor_of_min_per_second_times_window(
    min_per_second: float, window: float, reserve: int
) -> None:
    """min_per_second 0.7 over a 10 s window reserves 7 retries (0.7 * 10 is 7.000000000000001)."""
    budget = RetryBudget(ratio=0.0, min_per_second=min_per_second, window=window)
    assert reserve == sum(budget.try_retry(now=0.0) for _ in range(reserve + 5))


@given(
    st.decimals(min_value=0, max_value=5, places=3),
    st.integers(0, 2_000),
    st.decimals(min_value=0, max_value=20, places=2),
    st.sampled_from([1, 2.5, 10, 60]),
)
def test_grants_follow_the_exact_rule(
    ratio: Decimal, attempts: int, per_second: Decimal, window: float
) -> None:
    """For decimal arguments, grants are floor(ratio*attempts) + floor(min_per_second*window)."""
    budget = RetryBudget(ratio=float(ratio), min_per_second=float(per_second), window=window)
    for _ in range(attempts):
        budget.record_attempt(now=0.0)
    rule = math.floor(Decimal(repr(float(ratio))) * attempts) + math.floor(
        Decimal(repr(float(per_second))) * Decimal(repr(float(window)))
    )
    assert rule == budget.available(now=0.0)


def test_threads_hammering_never_exceed_the_bound() -> None:
    """16 threads racing on one budget are granted exactly the bound, never more."""
    budget = RetryBudget(ratio=0.5, min_per_second=3.0, window=10.0)
    for _ in range(200):
        budget.record_attempt(now=1.0)
    granted: list[int] = []
    barrier = threading.Barrier(16, timeout=60)

    def hammer() -> None:
        barrier.wait()
        granted.append(sum(budget.try_retry(now=1.0) for _ in range(500)))

    threads = [threading.Thread(target=hammer) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert 0.5 * 200 + 3.0 * 10.0 == sum(granted)


class DeadDependency:
    """A dependency that always fails; remembers each caller's latest error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.last: dict[int, ConnectionError] = {}

    def fail(self, caller: int) -> NoReturn:
        error = ConnectionError(caller)
        with self._lock:
            self.calls += 1
            self.last[caller] = error
        raise error


def check_fleet(
    budget: RetryBudget,
    dead: DeadDependency,
    events: list[RetryEvent],
    outcomes: dict[int, Exception],
    callers: int,
) -> None:
    """The bound holds exactly, refusals are reported, and each caller got its own last error."""
    # All callers run at virtual time 0 (zero delay never sleeps), so one window holds them all:
    # granted retries <= ratio * first attempts + min_per_second * window, and it is reached.
    bound = budget.ratio * callers + budget.min_per_second * budget.window
    retries = Counter(e.error.args[0] for e in events if e.kind == "retry")
    refused = [e.error.args[0] for e in events if e.kind == "budget_exhausted"]
    gave_up = [e.error.args[0] for e in events if e.kind == "give_up"]
    assert bound == retries.total()
    assert callers + retries.total() == dead.calls
    # A caller that used all 3 retries gave up; every other caller was refused, exactly once.
    finished = {caller for caller, count in retries.items() if count == 3}
    assert sorted(finished) == sorted(gave_up)
    assert sorted(set(range(callers)) - finished) == sorted(refused)
    # Refused or not, each caller ends with the error of its own last attempt.
    assert dead.last == outcomes


@pytest.mark.anyio
async def test_thousand_async_callers_against_a_dead_dependency() -> None:
    """1,000 concurrent tasks retrying times=3 get exactly ratio*1000 + min_per_second*window."""
    budget = RetryBudget(ratio=0.1, min_per_second=10.0, window=10.0)
    dead = DeadDependency()
    events: list[RetryEvent] = []
    outcomes: dict[int, Exception] = {}
    policy = retry(times=3, budget=budget, on_retry=events.append)

    async def call(caller: int) -> None:
        async def attempt() -> None:
            await anyio.lowlevel.checkpoint()  # let the other callers interleave
            dead.fail(caller)

        result = await AsyncEffect.attempt(attempt, catch=ConnectionError).pipe(policy).run()
        outcomes[caller] = result.failure()

    with use_clock(VirtualClock()) as clock:
        async with anyio.create_task_group() as group:
            for caller in range(1000):
                group.start_soon(call, caller)
    assert [] == clock.sleeps
    check_fleet(budget, dead, events, outcomes, callers=1000)


def test_thousand_calls_from_threads_against_a_dead_dependency() -> None:
    """20 threads making 1,000 decorated calls share one budget and never pass the bound."""
    budget = RetryBudget(ratio=0.1, min_per_second=10.0, window=10.0)
    dead = DeadDependency()
    events: list[RetryEvent] = []
    outcomes: dict[int, Exception] = {}
    lock = threading.Lock()
    clock = VirtualClock()

    @retry(times=3, budget=budget, on=ConnectionError, on_retry=events.append)
    def call(caller: int) -> None:
        dead.fail(caller)

    def worker(callers: range) -> None:
        with use_clock(clock):  # a thread starts with an empty context: set the clock here
            for caller in callers:
                try:
                    call(caller)
                except ConnectionError as error:
                    with lock:
                        outcomes[caller] = error

    threads = [threading.Thread(target=worker, args=(range(i, 1000, 20),)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check_fleet(budget, dead, events, outcomes, callers=1000)


def test_bursty_fleet_over_time_keeps_the_invariant_at_every_grant() -> None:
    """Bursts over 40 s: at each grant, window retries <= ratio * window firsts + reserve."""
    budget = RetryBudget(ratio=0.1, min_per_second=2.0, window=10.0)
    dead = DeadDependency()
    clock = VirtualClock()
    timeline: list[tuple[str, int]] = []  # ("first" | "retry", bucket), in order

    def on_retry(event: RetryEvent) -> None:
        if event.kind == "retry":
            timeline.append(("retry", math.floor(clock.now())))

    @retry(times=3, budget=budget, on=ConnectionError, on_retry=on_retry)
    def call(caller: int) -> None:
        dead.fail(caller)

    bursts = [120, 0, 0, 7, 0, 300, 0, 0, 0, 0, 0, 0, 15, 0, 0, 0, 0, 0, 0, 0, 0, 0, 60] + [3] * 17
    with use_clock(clock):
        caller = 0
        for size in bursts:
            clock.advance(1.0)
            for _ in range(size):
                timeline.append(("first", math.floor(clock.now())))
                with pytest.raises(ConnectionError):
                    call(caller)
                caller += 1
    seen: Counter[tuple[str, int]] = Counter()
    for kind, bucket in timeline:
        seen[kind, bucket] += 1
        if kind == "retry":
            window = range(bucket - 9, bucket + 1)
            retries = sum(seen["retry", b] for b in window)
            firsts = sum(seen["first", b] for b in window)
            assert retries <= 0.1 * firsts + 2.0 * 10.0
    # The budget is spent, not merely respected: the first burst gets its full allowance.
    assert 0.1 * 120 + 20.0 == sum(1 for kind, b in timeline if kind == "retry" and b == 1)
    assert dead.calls == len(timeline)
