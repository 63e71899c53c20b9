"""Retry semantics: option composition, attempt counts, delays, inputs, and the three forms."""

from __future__ import annotations

import pytest
from returns.result import Result, Success

from effects import AsyncEffect, Effect, Retry, RetryBudget, retry, use_clock
from effects.testing import VirtualClock
from schedules import exponential, forever, from_delays, recurs, spaced


class FlakyError(Exception):
    """A typed failure carrying the number of the attempt that raised it."""

    def __init__(self, attempt: int) -> None:
        super().__init__(attempt)
        self.attempt = attempt


class OtherError(Exception):
    """A typed failure outside ``on``."""


def failing(calls: list[int], succeed_at: int | None = None) -> Effect[int, FlakyError]:
    """An effect that fails with FlakyError(n) on attempt n, until attempt *succeed_at*."""

    def thunk() -> int:
        calls.append(len(calls) + 1)
        if succeed_at is None or len(calls) < succeed_at:
            raise FlakyError(len(calls))
        return len(calls)

    return Effect.attempt(thunk, catch=FlakyError)


@pytest.mark.parametrize("times", [0, 1, 4, 7])
def test_times_n_means_at_most_n_plus_one_attempts(times: int, virtual_clock: VirtualClock) -> None:
    """times=n allows n retries: n + 1 attempts in all, and the last error is the result."""
    calls: list[int] = []
    result = failing(calls).pipe(retry(times=times)).run()
    assert list(range(1, times + 2)) == calls
    assert times + 1 == result.failure().attempt


def test_times_alone_retries_without_delay(virtual_clock: VirtualClock) -> None:
    """times alone starts from forever(): no wait at all, so no sleep is ever requested."""
    calls: list[int] = []
    failing(calls).pipe(retry(times=3)).run()
    assert 4 == len(calls)
    assert [] == virtual_clock.sleeps
    assert 0.0 == virtual_clock.now()


def test_zero_delay_never_calls_sleep(virtual_clock: VirtualClock) -> None:
    """A schedule delay of 0 does not sleep; non-zero delays sleep exactly that long."""
    calls: list[int] = []
    failing(calls).pipe(retry(from_delays(0, 1.5, 0, 2))).run()
    assert 5 == len(calls)
    assert [1.5, 2.0] == virtual_clock.sleeps


def test_schedule_delays_are_waited_between_attempts(virtual_clock: VirtualClock) -> None:
    """Attempts are separated by the schedule's delays, measured on the active clock."""
    starts: list[float] = []

    def thunk() -> int:
        starts.append(virtual_clock.now())
        raise FlakyError(len(starts))

    Effect.attempt(thunk, catch=FlakyError).pipe(retry(exponential(0.5), times=3)).run()
    assert [0.0, 0.5, 1.5, 3.5] == starts
    assert [0.5, 1.0, 2.0] == virtual_clock.sleeps


def test_the_effect_runs_at_least_once() -> None:
    """Even a schedule that never recurs runs the effect once."""
    calls: list[int] = []
    result = failing(calls).pipe(retry(recurs(0))).run()
    assert [1] == calls
    assert 1 == result.failure().attempt


def test_success_stops_retrying(virtual_clock: VirtualClock) -> None:
    """The first success ends the call and is its result."""
    calls: list[int] = []
    assert Success(3) == failing(calls, succeed_at=3).pipe(retry(spaced(1))).run()
    assert [1.0, 1.0] == virtual_clock.sleeps


def test_schedule_input_is_the_error() -> None:
    """The schedule is stepped with each failed attempt's error object."""
    seen: list[object] = []
    calls: list[int] = []
    failing(calls).pipe(retry(recurs(2).tap_input(seen.append))).run()
    assert [1, 2, 3] == [error.attempt for error in seen]  # type: ignore[attr-defined]


def test_while_sees_the_error_and_stops_when_false() -> None:
    """while_ receives the error and retrying stops at the first error it rejects."""
    seen: list[int] = []

    def transient(error: FlakyError) -> bool:
        seen.append(error.attempt)
        return error.attempt < 3

    calls: list[int] = []
    result = failing(calls).pipe(retry(while_=transient)).run()
    assert [1, 2, 3] == calls
    assert [1, 2, 3] == seen
    assert 3 == result.failure().attempt


def test_until_sees_the_error_and_stops_when_true() -> None:
    """until receives the error and retrying stops at the first error it accepts."""
    calls: list[int] = []
    result = failing(calls).pipe(retry(until=lambda e: e.attempt == 2)).run()
    assert [1, 2] == calls
    assert 2 == result.failure().attempt


def test_predicates_are_checked_only_when_the_schedule_would_continue() -> None:
    """When the schedule is done, while_ and until are not consulted for that error."""
    seen_while: list[int] = []
    seen_until: list[int] = []
    calls: list[int] = []
    policy = retry(
        recurs(2),
        while_=lambda e: seen_while.append(e.attempt) is None,
        until=lambda e: seen_until.append(e.attempt) is not None,
    )
    failing(calls).pipe(policy).run()
    assert [1, 2, 3] == calls
    assert [1, 2] == seen_while
    assert [1, 2] == seen_until


def test_options_compose_schedule_then_while_then_until_then_times() -> None:
    """The policy's schedule is schedule.while_input(w).until_input(u).times(n), in that order."""

    def w(_: object) -> bool:
        return True

    def u(_: object) -> bool:
        return False

    policy = retry(spaced(1), times=2, while_=w, until=u)
    assert spaced(1).while_input(w).until_input(u).times(2) == policy.composed
    assert forever() == retry(forever()).composed
    assert forever().times(3) == retry(times=3).composed


def test_times_caps_a_longer_schedule(virtual_clock: VirtualClock) -> None:
    """times applies on top of the schedule: the smaller limit wins."""
    calls: list[int] = []
    failing(calls).pipe(retry(spaced(1).times(10), times=2)).run()
    assert 3 == len(calls)
    calls.clear()
    failing(calls).pipe(retry(spaced(1).times(1), times=5)).run()
    assert 2 == len(calls)


def test_on_narrows_which_typed_failures_are_retried() -> None:
    """For effects, on= retries only the listed typed failures; others return at once."""
    calls: list[int] = []

    def thunk() -> int:
        calls.append(1)
        raise OtherError("not retried")

    result = (
        Effect.attempt(thunk, catch=(FlakyError, OtherError))
        .pipe(retry(times=3, on=FlakyError))
        .run()
    )
    assert [1] == calls
    assert isinstance(result.failure(), OtherError)


def test_three_forms_on_effects_agree() -> None:
    """policy(effect), effect.pipe(policy) and effect.retry(...) behave the same."""
    policy = retry(times=2)
    outcomes: list[tuple[list[int], int]] = []
    for apply in (
        policy,
        lambda e: e.pipe(policy),
        lambda e: e.retry(times=2),
    ):
        calls: list[int] = []
        result: Result[int, FlakyError] = apply(failing(calls)).run()
        outcomes.append((calls, result.failure().attempt))
    assert [([1, 2, 3], 3)] * 3 == outcomes


def test_sync_stays_sync_and_async_stays_async() -> None:
    """Retrying an Effect gives an Effect; an AsyncEffect gives an AsyncEffect."""
    policy = retry(times=1)
    assert isinstance(policy(Effect.succeed(1)), Effect)
    assert isinstance(AsyncEffect.succeed(1).pipe(policy), AsyncEffect)
    assert isinstance(AsyncEffect.succeed(1).retry(times=1), AsyncEffect)


def test_retried_effect_is_rerunnable() -> None:
    """Each run of a retried effect starts a fresh policy run (fresh schedule state)."""
    calls: list[int] = []
    effect = failing(calls).pipe(retry(times=1))
    effect.run()
    effect.run()
    assert [1, 2, 3, 4] == calls


@pytest.mark.anyio
async def test_async_effect_retries_with_virtual_waits(virtual_clock: VirtualClock) -> None:
    """An AsyncEffect is retried like an Effect, waiting with the clock's async sleep."""
    calls: list[int] = []

    async def thunk() -> int:
        calls.append(1)
        if len(calls) < 4:
            raise FlakyError(len(calls))
        return len(calls)

    effect = AsyncEffect.attempt(thunk, catch=FlakyError).retry(exponential(1), times=5)
    assert Success(4) == await effect.run()
    assert [1.0, 2.0, 4.0] == virtual_clock.sleeps


def test_budget_refusal_gives_up_with_the_last_error(virtual_clock: VirtualClock) -> None:
    """A budget that allows no retries ends the call after its first attempt."""
    budget = RetryBudget(ratio=0.0, min_per_second=0.0, window=10.0)
    calls: list[int] = []
    result = failing(calls).pipe(retry(spaced(1), times=5, budget=budget)).run()
    assert [1] == calls
    assert 1 == result.failure().attempt
    assert [] == virtual_clock.sleeps


def test_budget_counts_first_attempts_and_grants_retries(virtual_clock: VirtualClock) -> None:
    """Every call records its first attempt; retries are granted while the budget allows."""
    budget = RetryBudget(ratio=0.5, min_per_second=0.0, window=10.0)
    ok_calls: list[int] = []
    policy = retry(times=5, budget=budget)
    for _ in range(4):
        Effect.sync(lambda: ok_calls.append(1)).pipe(policy).run()
    calls: list[int] = []
    failing(calls).pipe(policy).run()
    # 5 first attempts at ratio 0.5 allow 2 retries in the window.
    assert [1, 2, 3] == calls


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"times": -1}, ValueError, "times"),
        ({"times": 1.5}, TypeError, "times"),
        ({"times": True}, TypeError, "times"),
        ({"on": KeyboardInterrupt}, TypeError, "on"),
        ({"on": (ValueError, BaseException)}, TypeError, "on"),
        ({"while_": 3}, TypeError, "while_"),
        ({"until": "x"}, TypeError, "until"),
        ({"on_retry": 1}, TypeError, "on_retry"),
    ],
)
def test_bad_options_are_rejected_naming_them(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    """retry(...) validates its options at construction and names the bad one."""
    with pytest.raises(error, match=match):
        retry(**kwargs)  # type: ignore[arg-type]


def test_schedule_must_be_a_schedule() -> None:
    """Passing an effect as the schedule is refused with a hint about applying the policy."""
    with pytest.raises(TypeError, match=r"schedule.*retry\(\.\.\.\)\(target\)"):
        Retry(Effect.succeed(1))  # type: ignore[arg-type]


def test_retry_is_an_immutable_value_with_a_readable_repr() -> None:
    """Retry values are frozen, compare structurally and print like the call that built them."""
    assert retry(spaced(1), times=3, on=ValueError) == retry(spaced(1), times=3, on=ValueError)
    assert "retry(spaced(1), times=3, on=ValueError)" == repr(
        retry(spaced(1), times=3, on=ValueError)
    )
    assert "retry(forever())" == repr(retry(forever()))
    with pytest.raises(AttributeError):
        retry(times=1).times = 3  # type: ignore[misc]


def test_a_policy_with_no_way_to_stop_is_refused() -> None:
    """retry() with no schedule, times, while_ or until is refused instead of retrying forever."""
    with pytest.raises(ValueError, match="needs a way to stop") as caught:
        retry(on=ValueError)
    assert "schedule=forever()" in str(caught.value)
    assert forever() == retry(forever(), on=ValueError).composed


class _NoSleepClock(VirtualClock):
    """A clock whose sleep functions fail the test when called."""

    def sleep(self, seconds: float) -> None:
        raise AssertionError(f"sleep({seconds}) called")

    async def sleep_async(self, seconds: float) -> None:
        raise AssertionError(f"sleep_async({seconds}) called")


@pytest.mark.parametrize("policy", [retry(times=3), retry(from_delays(0, 0.0, 0), times=3)])
@pytest.mark.anyio
async def test_zero_delays_never_call_a_sleep_function(policy: Retry) -> None:
    """With only 0 s delays, no sleep function is called, sync or async, by any runner."""
    calls: list[int] = []

    def thunk() -> int:
        calls.append(1)
        raise FlakyError(len(calls))

    async def thunk_async() -> int:
        return thunk()

    async def block() -> None:
        async for attempt in retry(from_delays(0, 0), on=FlakyError).attempts():
            with attempt:
                thunk()

    with use_clock(_NoSleepClock()):
        assert 4 == Effect.attempt(thunk, catch=FlakyError).pipe(policy).run().failure().attempt
        result = await AsyncEffect.attempt(thunk_async, catch=FlakyError).pipe(policy).run()
        assert 8 == result.failure().attempt
        with pytest.raises(FlakyError):
            retry(times=3, on=FlakyError)(thunk)()
        with pytest.raises(FlakyError):
            await retry(times=3, on=FlakyError)(thunk_async)()
        with pytest.raises(FlakyError):
            await block()
    assert 19 == len(calls)
