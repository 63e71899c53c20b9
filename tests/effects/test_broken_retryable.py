"""An error whose ``retryable`` property raises: never retried, and the error itself surfaces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from returns.result import Failure

from effects import AsyncEffect, Effect, RetryEvent, retry
from effects.testing import VirtualClock
from schedules import spaced


class BrokenFlagError(Exception):
    """Its ``retryable`` reads an attribute that was never set (an ``AttributeError``)."""

    @property
    def retryable(self) -> bool:
        """Read an attribute that was never set."""
        return bool(self.missing)  # type: ignore[attr-defined]


class RaisingFlagError(Exception):
    """Its ``retryable`` raises a ``RuntimeError``."""

    @property
    def retryable(self) -> bool:
        """Fail outright."""
        raise RuntimeError("flag bug")


class UnprintableError(Exception):
    """An exception whose ``str()`` raises too."""

    def __str__(self) -> str:
        raise ValueError("no text")


class HostileFlagError(Exception):
    """Its ``retryable`` raises an exception that cannot even be printed."""

    @property
    def retryable(self) -> bool:
        """Fail with an unprintable exception."""
        raise UnprintableError


class InterruptedFlagError(Exception):
    """Ctrl-C arrives while its ``retryable`` is read."""

    @property
    def retryable(self) -> bool:
        """Raise KeyboardInterrupt."""
        raise KeyboardInterrupt


BROKEN: list[type[Exception]] = [BrokenFlagError, RaisingFlagError, HostileFlagError]
NOTES = {
    BrokenFlagError: (
        "not retried: reading its retryable property raised AttributeError: "
        "'BrokenFlagError' object has no attribute 'missing'"
    ),
    RaisingFlagError: ("not retried: reading its retryable property raised RuntimeError: flag bug"),
    HostileFlagError: (
        "not retried: reading its retryable property raised UnprintableError: <unprintable>"
    ),
}
# times only and nobody listening: the shared Counting decider; on_retry: a full Run.
DECIDERS: dict[str, dict[str, Any]] = {"counting": {}, "run": {"on_retry": lambda _: None}}
broken = pytest.mark.parametrize("cls", BROKEN, ids=lambda cls: cls.__name__)
deciders = pytest.mark.parametrize("options", list(DECIDERS.values()), ids=list(DECIDERS))


def attempt_counter(error: Exception) -> tuple[list[Exception], Callable[[], None]]:
    """A function that records and raises *error* on every call."""
    raised: list[Exception] = []

    def attempt() -> None:
        raised.append(error)
        raise error

    return raised, attempt


@broken
@deciders
def test_a_function_raises_the_error_itself_after_one_attempt(
    cls: type[Exception], options: dict[str, Any], virtual_clock: VirtualClock
) -> None:
    """A decorated function stops after one attempt and raises the original error, noted."""
    error = cls("original")
    calls, attempt = attempt_counter(error)

    with pytest.raises(cls) as caught:
        retry(spaced(1), times=5, on=cls, **options)(attempt)()

    assert (1, error, []) == (len(calls), caught.value, virtual_clock.sleeps)
    assert [NOTES[cls]] == caught.value.__notes__


@broken
@deciders
def test_an_effect_fails_with_the_error_itself(
    cls: type[Exception], options: dict[str, Any], virtual_clock: VirtualClock
) -> None:
    """Effect.run() records the original error as its failure; run_or_raise raises it."""
    error = cls("original")
    calls, attempt = attempt_counter(error)
    effect = Effect.attempt(attempt, catch=cls).pipe(retry(times=5, **options))

    assert Failure(error) == effect.run()
    with pytest.raises(cls) as caught:
        effect.run_or_raise()
    assert (2, error) == (len(calls), caught.value)


@broken
@deciders
def test_an_attempts_block_raises_the_error_itself(
    cls: type[Exception], options: dict[str, Any], virtual_clock: VirtualClock
) -> None:
    """``for attempt in policy.attempts(): with attempt:`` raises the original after one try."""
    error = cls("original")
    calls, attempt = attempt_counter(error)

    def block() -> None:
        for each in retry(times=5, on=cls, **options).attempts():
            with each:
                attempt()

    with pytest.raises(cls) as caught:
        block()

    assert (1, error) == (len(calls), caught.value)


@pytest.mark.anyio
@broken
@deciders
async def test_async_code_raises_the_error_itself(
    cls: type[Exception], options: dict[str, Any], anyio_backend: str, virtual_clock: VirtualClock
) -> None:
    """Async functions and AsyncEffects, under asyncio and trio, surface the original error."""
    error = cls("original")
    calls: list[int] = []

    async def attempt() -> None:
        calls.append(1)
        raise error

    policy = retry(spaced(1), times=5, on=cls, **options)
    with pytest.raises(cls) as caught:
        await policy(attempt)()
    result = await AsyncEffect.attempt(attempt, catch=cls).pipe(policy).run()

    assert (error, Failure(error), 2) == (caught.value, result, len(calls))
    assert [] == virtual_clock.sleeps


@broken
def test_the_give_up_event_and_the_schedule(cls: type[Exception]) -> None:
    """The call gives up with the original error in its event; the schedule never sees it."""
    events: list[tuple[str, Exception]] = []
    inputs: list[object] = []
    error = cls("original")
    _, attempt = attempt_counter(error)
    policy = retry(
        spaced(0).tap_input(inputs.append),
        times=5,
        on=cls,
        on_retry=lambda event: events.append((event.kind, event.error)),
    )

    with pytest.raises(cls):
        policy(attempt)()

    assert ([("give_up", error)], []) == (events, inputs)


def test_the_note_is_added_once_per_error() -> None:
    """The same error instance raised by two calls carries the note once."""
    error = BrokenFlagError("original")
    _, attempt = attempt_counter(error)
    wrapped = retry(times=5, on=BrokenFlagError)(attempt)

    for _ in range(2):
        with pytest.raises(BrokenFlagError):
            wrapped()

    assert [NOTES[BrokenFlagError]] == error.__notes__


def test_an_error_whose_notes_cannot_grow_is_still_raised_itself() -> None:
    """An error with a ``__notes__`` that is not a list is raised unchanged, without a note."""
    error = RaisingFlagError("original")
    error.__notes__ = ("frozen",)  # type: ignore[assignment]
    calls, attempt = attempt_counter(error)

    with pytest.raises(RaisingFlagError) as caught:
        retry(times=5, on=RaisingFlagError)(attempt)()

    assert (1, error, ("frozen",)) == (len(calls), caught.value, tuple(error.__notes__))


def test_ctrl_c_while_reading_retryable_propagates() -> None:
    """A KeyboardInterrupt raised by the property is never caught: it propagates as it is."""
    calls, attempt = attempt_counter(InterruptedFlagError("original"))

    with pytest.raises(KeyboardInterrupt):
        retry(times=5, on=InterruptedFlagError)(attempt)()

    assert 1 == len(calls)


def test_a_working_property_still_decides(virtual_clock: VirtualClock) -> None:
    """A property that works is obeyed: False stops at once, True retries, no note added."""

    class FlagError(Exception):
        def __init__(self, flag: bool) -> None:
            super().__init__(flag)
            self.flag = flag

        @property
        def retryable(self) -> bool:
            return self.flag

    events: list[RetryEvent] = []
    for flag, attempts in ((False, 1), (True, 3)):
        calls, attempt = attempt_counter(FlagError(flag))
        with pytest.raises(FlagError) as caught:
            retry(times=2, on=FlagError, on_retry=events.append)(attempt)()
        assert (attempts, None) == (len(calls), getattr(caught.value, "__notes__", None))
