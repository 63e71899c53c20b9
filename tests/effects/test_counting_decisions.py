"""The counting shortcut for ``times=n`` policies behaves exactly like the general decision loop.

``retry(times=n)`` with no schedule, predicates, budget or listener is decided by a counter
(``effects._driver.Counting``); ``retry(forever(), times=n)`` composes the same schedule but goes
through ``Run``, which steps it. Every observable must agree: attempts, outcome, waits, time,
and the events a hook sees, including a hook added in the middle of a call.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effects import Effect, FatalError, Retry, RetryBudget, RetryEvent, add_hook, retry, use_clock
from effects import use_random as use_rng
from effects._driver import Counting, Run
from effects._events import _REGISTRY
from effects.testing import VirtualClock
from schedules import forever


class TransientError(Exception):
    """Retried."""


class NotRetryableError(Exception):
    """Opts out of retries through its attribute."""

    retryable = False


class DefectError(Exception):
    """Outside every ``on=`` / ``catch=`` of these tests."""


@pytest.fixture(autouse=True)
def no_global_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start each test with no process-wide hook, whatever ran before in this process.

    A registered hook turns the shortcut off, which would make these comparisons vacuous.
    """
    monkeypatch.setattr(_REGISTRY, "hooks", ())


OUTCOMES = ("transient", "fatal", "not_retryable", "defect", "interrupt", "ok")
RETRIED = (TransientError, FatalError, NotRetryableError)


def raise_or_return(outcome: str, number: int) -> int:
    """Attempt *number*'s outcome: return *number* or raise the named error (carrying it)."""
    errors: dict[str, BaseException] = {
        "transient": TransientError(number),
        "fatal": FatalError(f"fatal {number}", code=str(number)),
        "not_retryable": NotRetryableError(number),
        "defect": DefectError(number),
        "interrupt": KeyboardInterrupt(number),
    }
    if outcome == "ok":
        return number
    raise errors[outcome]


def describe(error: BaseException) -> tuple[str, str]:
    return (type(error).__name__, str(error))


Observed = tuple[list[int], tuple[str, ...], list[tuple[Any, ...]], list[float], float]


def observe(
    form: str,
    policy: Retry,
    outcomes: list[str],
    hook_at: int | None,
    advance: float,
) -> Observed:
    """Run one call of *form* under *policy*; return everything a user could observe.

    Attempt *k* advances the virtual clock by *advance* seconds and returns or raises per
    ``outcomes[k - 1]`` (transient failures once they run out). A hook is added before the call
    when *hook_at* is 0, or by attempt *hook_at*; then a second call shows it hears new calls.
    """
    clock = VirtualClock(start=100.0)
    numbers: list[int] = []
    events: list[RetryEvent] = []
    removers: list[Callable[[], None]] = []
    count = 0

    def attempt() -> int:
        nonlocal count
        count += 1
        numbers.append(count)
        if hook_at == count and not removers:
            removers.append(add_hook(events.append))
        clock.advance(advance)
        return raise_or_return(
            outcomes[count - 1] if count <= len(outcomes) else "transient", count
        )

    def call() -> tuple[str, ...]:
        nonlocal count
        count = 0
        try:
            return ("value", str(run_form(form, policy, attempt)))
        except (*RETRIED, DefectError, KeyboardInterrupt) as error:
            return ("raised", *describe(error))

    if hook_at == 0:
        removers.append(add_hook(events.append))
    # A random source that fails if touched: times=n never draws jitter on either path.
    with use_clock(clock), use_rng(_NoRandom()):
        try:
            outcome = call()
            if removers:
                outcome += ("second call", *call())
        finally:
            for remove in removers:
                remove()
    seen = [(e.kind, e.attempt, e.delay, describe(e.error), e.elapsed) for e in events]
    return numbers, outcome, seen, clock.sleeps, clock.now()


class _NoRandom:
    def random(self) -> float:
        raise AssertionError("a times-only policy drew a random number")


def run_form(form: str, policy: Retry, attempt: Callable[[], int]) -> object:
    """Retry *attempt* as a decorated function, an effect, an attempts() block or async."""
    if form == "function":
        return policy(attempt)()
    if form == "effect":
        return Effect.attempt(attempt, catch=RETRIED).pipe(policy).run_or_raise()
    if form == "attempts":
        for block in policy.attempts():
            with block:
                return attempt()
        raise AssertionError("unreachable: the loop returns or raises")

    async def attempt_async() -> int:
        return attempt()

    return asyncio.run(policy(attempt_async)())


@pytest.mark.parametrize("form", ["function", "effect", "attempts", "async function"])
@settings(max_examples=40, deadline=None)
@given(
    times=st.integers(0, 5),
    outcomes=st.lists(st.sampled_from(OUTCOMES), max_size=7),
    hook_at=st.none() | st.integers(0, 4),
    advance=st.sampled_from([0.0, 0.25, 1.0]),
)
def test_counting_matches_the_general_loop(
    form: str, times: int, outcomes: list[str], hook_at: int | None, advance: float
) -> None:
    """retry(times=n) and retry(forever(), times=n) are indistinguishable from outside."""
    counting = retry(times=times, on=RETRIED)
    general = retry(forever(), times=times, on=RETRIED)
    assert counting.composed == general.composed
    assert observe(form, general, outcomes, hook_at, advance) == observe(
        form, counting, outcomes, hook_at, advance
    )


def test_a_hook_added_mid_call_hears_the_next_call_from_its_start() -> None:
    """Listeners are fixed at a call's first failure: a hook added later hears only new calls."""
    outcomes = ["transient", "transient", "ok"]
    numbers, outcome, seen, sleeps, now = observe(
        "function", retry(times=3, on=RETRIED), outcomes, 2, 0.5
    )
    assert [1, 2, 3, 1, 2, 3] == numbers
    assert ("value", "3", "second call", "value", "3") == outcome
    error_1, error_2 = ("TransientError", "1"), ("TransientError", "2")
    assert [
        ("retry", 1, 0.0, error_1, 0.0),
        ("attempt", 2, None, error_1, 0.0),
        ("retry", 2, 0.0, error_2, 0.5),
        ("attempt", 3, None, error_2, 0.5),
    ] == seen
    assert ([], 103.0) == (sleeps, now)


def test_times_only_policies_decide_by_counting() -> None:
    """Only times=n with no schedule, predicate, budget, listener or hook takes the shortcut."""
    assert isinstance(retry(times=3)._policy.start(), Counting)
    general = [
        retry(forever(), times=3),
        retry(times=3, while_=bool),
        retry(times=3, until=bool),
        retry(times=3, budget=RetryBudget()),
        retry(times=3, on_retry=print),
    ]
    assert [Run] * len(general) == [type(p._policy.start()) for p in general]
    remove = add_hook(lambda event: None)
    try:
        assert isinstance(retry(times=3)._policy.start(), Run)
    finally:
        remove()


class _UntouchableClock(VirtualClock):
    """A clock that fails the test if the runtime reads or waits on it."""

    def now(self) -> float:
        raise AssertionError("clock read")


@pytest.mark.parametrize(
    ("policy", "reads"), [(retry(times=3), False), (retry(forever(), times=3), True)]
)
def test_counting_reads_neither_clock_nor_random(policy: Retry, reads: bool) -> None:
    """The shortcut never asks the clock for the time; the general path does (a control)."""
    calls: list[int] = []

    def thunk() -> int:
        calls.append(1)
        raise TransientError(len(calls))

    with use_clock(_UntouchableClock()), use_rng(random.Random(0)):
        if reads:
            with pytest.raises(AssertionError, match="clock read"):
                Effect.attempt(thunk, catch=TransientError).pipe(policy).run()
        else:
            result = Effect.attempt(thunk, catch=TransientError).pipe(policy).run()
            assert 4 == result.failure().args[0]
