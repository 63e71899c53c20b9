"""Retry events: on_retry, global hooks, stdlib logging, and silence when nobody listens."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable

import pytest

from effects import Effect, FatalError, RetryBudget, RetryEvent, add_hook, log_retries, retry
from effects._events import _REGISTRY, hooks
from effects.testing import VirtualClock
from schedules import exponential, spaced


class FlakyError(Exception):
    """A retried typed failure."""


def failing_effect(fail_times: int) -> Effect[str, FlakyError]:
    calls: list[int] = []

    def thunk() -> str:
        calls.append(1)
        if len(calls) <= fail_times:
            raise FlakyError(len(calls))
        return "ok"

    return Effect.attempt(thunk, catch=FlakyError)


def summary(events: list[RetryEvent]) -> list[tuple[str, int, float | None, float]]:
    return [(e.kind, e.attempt, e.delay, e.elapsed) for e in events]


def test_on_retry_sees_retries_attempts_and_give_up(virtual_clock: VirtualClock) -> None:
    """Each failed attempt yields retry or give_up; each later attempt an attempt event."""
    events: list[RetryEvent] = []
    failing_effect(5).pipe(retry(exponential(1), times=2, on_retry=events.append)).run()
    assert [
        ("retry", 1, 1.0, 0.0),
        ("attempt", 2, None, 1.0),
        ("retry", 2, 2.0, 1.0),
        ("attempt", 3, None, 3.0),
        ("give_up", 3, None, 3.0),
    ] == summary(events)
    assert [1, 1, 2, 2, 3] == [e.error.args[0] for e in events]


def test_success_after_retries_ends_without_give_up(virtual_clock: VirtualClock) -> None:
    """A call that succeeds on a retry emits no give_up."""
    events: list[RetryEvent] = []
    failing_effect(1).pipe(retry(spaced(1), on_retry=events.append)).run()
    assert ["retry", "attempt"] == [e.kind for e in events]


def test_fatal_error_emits_give_up() -> None:
    """A never-retried error still reports its give_up."""
    events: list[RetryEvent] = []
    error = FatalError("no")
    Effect.fail(error).pipe(retry(times=3, on_retry=events.append)).run()
    assert [("give_up", 1, None, 0.0)] == summary(events)
    assert error is events[0].error


def test_budget_refusal_emits_budget_exhausted(virtual_clock: VirtualClock) -> None:
    """When the budget refuses a retry the event says so and the call gives up."""
    events: list[RetryEvent] = []
    budget = RetryBudget(ratio=0.0, min_per_second=0.0, window=1.0)
    failing_effect(5).pipe(retry(times=3, budget=budget, on_retry=events.append)).run()
    assert [("budget_exhausted", 1, None, 0.0)] == summary(events)


def test_hooks_see_every_policy_until_removed(virtual_clock: VirtualClock) -> None:
    """add_hook applies to all retried calls; its remover stops delivery (idempotently)."""
    events: list[RetryEvent] = []
    remove = add_hook(events.append)
    try:
        failing_effect(1).pipe(retry(times=1)).run()
    finally:
        remove()
    remove()
    failing_effect(1).pipe(retry(times=1)).run()
    assert ["retry", "attempt"] == [e.kind for e in events]


def test_hooks_are_process_wide(virtual_clock: VirtualClock) -> None:
    """A hook added in one thread sees retries made in another thread."""
    events: list[RetryEvent] = []
    remove = add_hook(events.append)
    try:
        thread = threading.Thread(target=lambda: failing_effect(5).pipe(retry(times=0)).run())
        thread.start()
        thread.join()
    finally:
        remove()
    assert ["give_up"] == [e.kind for e in events]


def test_on_retry_and_hooks_both_receive_the_same_event() -> None:
    """on_retry is called first, then each hook in registration order, with one event object."""
    order: list[tuple[str, RetryEvent]] = []
    first = add_hook(lambda e: order.append(("hook1", e)))
    second = add_hook(lambda e: order.append(("hook2", e)))
    try:
        Effect.fail(FlakyError()).pipe(
            retry(times=0, on_retry=lambda e: order.append(("own", e)))
        ).run()
    finally:
        first()
        second()
    assert ["own", "hook1", "hook2"] == [name for name, _ in order]
    assert len({id(event) for _, event in order}) == 1


def test_add_hook_rejects_non_callables() -> None:
    """add_hook checks its argument."""
    with pytest.raises(TypeError, match="hook"):
        add_hook(3)  # type: ignore[arg-type]


def test_no_event_is_built_when_nobody_listens(
    monkeypatch: pytest.MonkeyPatch, virtual_clock: VirtualClock
) -> None:
    """Without on_retry or hooks, the runtime never constructs a RetryEvent."""

    def forbidden(*args: object, **kwargs: object) -> RetryEvent:
        raise AssertionError("event built with nobody listening")

    # Nobody listening means no hook either, whatever earlier code in this process registered.
    monkeypatch.setattr(_REGISTRY, "hooks", ())
    monkeypatch.setattr("effects._driver.RetryEvent", forbidden)
    failing_effect(5).pipe(retry(spaced(1), times=3)).run()
    assert [1.0, 1.0, 1.0] == virtual_clock.sleeps


def test_log_retries_logs_through_stdlib(
    caplog: pytest.LogCaptureFixture, virtual_clock: VirtualClock
) -> None:
    """log_retries logs retries and the give-up at the chosen level until turned off."""
    logger = logging.getLogger("test.effects.retries")
    stop = log_retries(logger, level=logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="test.effects.retries"):
            failing_effect(5).pipe(retry(spaced(2), times=1)).run()
    finally:
        stop()
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [
        (
            logging.INFO,
            "failing_effect.<locals>.thunk: attempt 1 failed with FlakyError(1);"
            " retrying in 2.000 s (0.000 s elapsed)",
        ),
        (
            logging.INFO,
            "failing_effect.<locals>.thunk: attempt 2 failed with FlakyError(2);"
            " giving up (2.000 s elapsed)",
        ),
    ] == messages


def test_log_retries_defaults_to_the_effects_logger(
    caplog: pytest.LogCaptureFixture, virtual_clock: VirtualClock
) -> None:
    """Without a logger, log_retries uses logging.getLogger('effects') at WARNING."""
    stop = log_retries()
    try:
        with caplog.at_level(logging.DEBUG, logger="effects"):
            budget = RetryBudget(ratio=0.0, min_per_second=0.0, window=1.0)
            failing_effect(1).pipe(retry(times=3, budget=budget)).run()
            failing_effect(1).pipe(retry(times=3)).run()
    finally:
        stop()
    assert [
        ("effects", logging.WARNING, "retry budget exhausted"),
        ("effects", logging.WARNING, "retrying in 0.000 s"),
        ("effects", logging.DEBUG, "starting attempt 2"),
    ] == [
        (r.name, r.levelno, next(p for p in _PHRASES if p in r.getMessage()))
        for r in caplog.records
    ]


_PHRASES = ("retry budget exhausted", "retrying in 0.000 s", "starting attempt 2")


def test_listeners_are_fixed_at_the_first_failure(virtual_clock: VirtualClock) -> None:
    """A hook added mid-call hears nothing of it; one removed mid-call hears it to the end."""
    early: list[RetryEvent] = []
    late: list[RetryEvent] = []
    remove_early = add_hook(early.append)
    removers: list[Callable[[], None]] = []
    calls: list[int] = []

    def thunk() -> str:
        calls.append(1)
        if len(calls) == 2:
            remove_early()
            removers.append(add_hook(late.append))
        if len(calls) <= 2:
            raise FlakyError(len(calls))
        return "ok"

    try:
        Effect.attempt(thunk, catch=FlakyError).pipe(retry(spaced(1), times=3)).run()
        Effect.fail(FlakyError(9)).pipe(retry(times=0)).run()
    finally:
        for remove in removers:
            remove()
    assert ["retry", "attempt", "retry", "attempt"] == [e.kind for e in early]
    assert [("give_up", 1)] == [(e.kind, e.attempt) for e in late]


class _CountedReprError(Exception):
    """Counts how often it is formatted with repr()."""

    reprs = 0

    def __repr__(self) -> str:
        type(self).reprs += 1
        return "_CountedReprError()"


def test_log_retries_formats_nothing_below_the_logger_level(virtual_clock: VirtualClock) -> None:
    """A logger not enabled for the level never formats the message or the error."""
    logger = logging.getLogger("test.effects.quiet")
    logger.setLevel(logging.ERROR)
    stop = log_retries(logger, level=logging.WARNING)
    try:
        Effect.fail(_CountedReprError()).pipe(retry(spaced(1), times=3)).run()
    finally:
        stop()
        logger.setLevel(logging.NOTSET)
    assert 0 == _CountedReprError.reprs
    assert [1.0, 1.0, 1.0] == virtual_clock.sleeps


def test_hook_registration_is_thread_safe() -> None:
    """Hooks added and removed from many threads at once are neither lost nor left behind."""
    barrier = threading.Barrier(8, timeout=60)
    before = hooks()
    seen_all: list[bool] = []

    def churn() -> None:
        own = [lambda event: None for _ in range(300)]
        barrier.wait()
        removers = [add_hook(hook) for hook in own]
        registered = hooks()
        seen_all.append(all(any(h is hook for h in registered) for hook in own))
        for remove in removers:
            remove()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    # Switch threads as often as possible, so an unlocked read-modify-write would lose updates.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert [True] * 8 == seen_all
    assert before == hooks()


class Client:
    """Owns a retried method, to show qualified names."""

    @retry(times=1, on=FlakyError)
    def get(self) -> None:
        """Always fails."""
        raise FlakyError(0)


def load_user() -> str:
    """A named function for effect names."""
    raise FlakyError(1)


def failing_block() -> None:
    """An attempts() block that always fails."""
    for attempt in retry(times=1, on=FlakyError).attempts():
        with attempt:
            raise FlakyError(2)


def test_events_name_what_is_retried(virtual_clock: VirtualClock) -> None:
    """Events carry the function's qualified name, the effect's name, or name= when given."""
    seen: list[str] = []
    remove = add_hook(lambda event: seen.append(event.name))
    try:
        with pytest.raises(FlakyError):
            Client().get()
        Effect.attempt(load_user, catch=FlakyError).map(str.upper).retry(times=1).run()
        Effect.attempt(load_user, catch=FlakyError).retry(times=1, name="users.load").run()
        with pytest.raises(FlakyError):
            failing_block()
    finally:
        remove()
    assert ["Client.get"] * 3 + ["load_user"] * 3 + ["users.load"] * 3 + ["attempts()"] * 3 == seen


def test_log_lines_start_with_the_name(
    caplog: pytest.LogCaptureFixture, virtual_clock: VirtualClock
) -> None:
    """Each log line names what is retried, then attempt, error, delay and elapsed time."""
    stop = log_retries()
    try:
        with caplog.at_level(logging.WARNING, logger="effects"):
            Effect.attempt(load_user, catch=FlakyError).retry(spaced(1), times=1).run()
    finally:
        stop()
    assert [
        "load_user: attempt 1 failed with FlakyError(1); retrying in 1.000 s (0.000 s elapsed)",
        "load_user: attempt 2 failed with FlakyError(1); giving up (1.000 s elapsed)",
    ] == [record.getMessage() for record in caplog.records]
