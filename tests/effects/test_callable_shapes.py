"""@retry and @repeat on every shape of callable: retried correctly, or refused when decorated."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from unittest import mock

import pytest

import migrate
from effects import AsyncEffect, Effect, RetryUsageError, repeat, retry
from effects._callables import callable_kind, describe_callable, is_async_callable
from effects.testing import VirtualClock
from schedules import spaced


class TransientError(Exception):
    """Retried by the policies in these tests."""


class Flaky:
    """Fails *failures* times, then returns how many calls it took."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def step(self) -> int:
        """One call: raise TransientError until the failures are spent."""
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientError(self.calls)
        return self.calls


async def fetch(flaky: Flaky) -> int:
    """An async function around a Flaky."""
    return flaky.step()


class AsyncCaller:
    """An object whose __call__ is async."""

    def __init__(self, flaky: Flaky) -> None:
        self.flaky = flaky

    async def __call__(self) -> int:
        """Await nothing, fail or succeed as the Flaky says."""
        return self.flaky.step()


def numbers() -> Iterator[int]:
    """A generator function."""
    yield 1


async def async_numbers() -> AsyncIterator[int]:
    """An async generator function."""
    yield 1


@pytest.mark.parametrize(
    ("target", "kind"),
    [
        (fetch, "async"),
        (functools.partial(fetch, Flaky(0)), "async"),
        (functools.partial(functools.partial(fetch), Flaky(0)), "async"),
        (AsyncCaller(Flaky(0)), "async"),
        (functools.partial(AsyncCaller(Flaky(0))), "async"),
        (AsyncCaller.__call__, "async"),
        (mock.AsyncMock(), "async"),
        (numbers, "generator"),
        (async_numbers, "async_generator"),
        (Flaky(0).step, "sync"),
        (lambda: fetch(Flaky(0)), "sync"),
        (len, "sync"),
        (Flaky, "sync"),
        (mock.MagicMock(), "sync"),
    ],
    # Without addresses, so that every process (pytest-xdist's workers) names them alike.
    ids=lambda value: re.sub(r" at 0x[0-9a-f]+| id='[0-9]+'", "", repr(value)),
)
def test_one_helper_tells_the_kind_of_a_callable(target: object, kind: str) -> None:
    """callable_kind sees through partials, methods and __call__, without calling anything."""
    assert kind == callable_kind(target)
    assert (kind == "async") is is_async_callable(target)


@pytest.mark.anyio
async def test_an_object_with_async_call_is_retried_and_awaited(anyio_backend: str) -> None:
    """An object with ``async def __call__`` gets an async wrapper: each attempt is awaited."""
    flaky = Flaky(2)
    with_retries = retry(times=3, on=TransientError)(AsyncCaller(flaky))
    assert is_async_callable(with_retries)
    assert 3 == await with_retries()


@pytest.mark.anyio
async def test_a_partial_of_an_async_function_is_retried(anyio_backend: str) -> None:
    """``functools.partial(async_fn, ...)`` is async: retried, awaited, named after its function."""
    flaky = Flaky(2)
    assert 3 == await retry(times=3, on=TransientError)(functools.partial(fetch, flaky))()
    assert "partial(fetch)" == describe_callable(functools.partial(fetch, flaky))


@pytest.mark.anyio
async def test_a_lambda_returning_a_coroutine_is_retried(anyio_backend: str) -> None:
    """A plain callable that returns a coroutine gives back one that awaits and retries."""
    flaky = Flaky(2)
    wrapped: Callable[[], Awaitable[int]] = retry(times=3, on=TransientError)(lambda: fetch(flaky))
    assert 3 == await wrapped()
    assert 3 == flaky.calls


@pytest.mark.anyio
async def test_a_coroutine_after_synchronous_failures_is_still_retried(anyio_backend: str) -> None:
    """Attempts that fail before returning a coroutine, then a coroutine that fails: all retried."""
    flaky = Flaky(3)

    def sometimes_async() -> Any:
        if flaky.calls < 1:
            return flaky.step()  # fails synchronously
        return fetch(flaky)

    result = retry(times=5, on=TransientError)(sometimes_async)()
    assert 4 == await result
    assert 4 == flaky.calls


@pytest.mark.anyio
async def test_a_lambda_returning_a_coroutine_gives_up_with_the_last_error(
    anyio_backend: str,
) -> None:
    """When the retries run out, awaiting the result raises the last error."""
    flaky = Flaky(10)
    with pytest.raises(TransientError, match="3"):
        await retry(times=2, on=TransientError)(lambda: fetch(flaky))()


@pytest.mark.parametrize("verb", [retry, repeat])
@pytest.mark.parametrize("target", [numbers, async_numbers])
def test_generator_functions_are_refused_when_decorated(
    verb: Callable[..., Any], target: Callable[..., Any]
) -> None:
    """A generator runs only when iterated, after the call: refused at decoration, naming it."""
    policy = verb(times=3, on=TransientError) if verb is retry else verb(times=3)
    with pytest.raises(RetryUsageError, match=rf"{target.__name__}.*generator function"):
        policy(target)


class Service:
    """Methods of every kind, retried."""

    flaky = Flaky(0)

    @retry(times=3, on=TransientError)
    @staticmethod
    def static_call() -> int:
        """A staticmethod under @retry."""
        return Service.flaky.step()

    @retry(times=3, on=TransientError)
    @classmethod
    def class_call(cls) -> int:
        """A classmethod under @retry: still receives the class."""
        assert cls is Service
        return cls.flaky.step()

    @retry(times=3, on=TransientError)
    async def async_method(self) -> int:
        """An async method."""
        return self.flaky.step()


@pytest.mark.parametrize("call", ["class", "instance"])
def test_retry_above_staticmethod_and_classmethod_works(call: str) -> None:
    """@retry over @staticmethod or @classmethod keeps the method kind and retries it."""
    owner: Any = Service if call == "class" else Service()
    Service.flaky = Flaky(2)
    assert 3 == owner.static_call()
    Service.flaky = Flaky(2)
    assert 3 == owner.class_call()
    assert isinstance(Service.__dict__["static_call"], staticmethod)
    assert isinstance(Service.__dict__["class_call"], classmethod)


@pytest.mark.anyio
async def test_async_methods_are_retried(anyio_backend: str) -> None:
    """An ``async def`` method under @retry is awaited and retried, self bound."""
    Service.flaky = Flaky(2)
    assert 3 == await Service().async_method()


def test_repeat_above_staticmethod(virtual_clock: VirtualClock) -> None:
    """@repeat over @staticmethod keeps it a staticmethod."""

    class Poller:
        counter = iter(range(10))

        @repeat(spaced(1), until=lambda n: n >= 2)
        @staticmethod
        def poll() -> int:
            return next(Poller.counter)

    assert 2 == Poller().poll()
    assert [1.0, 1.0] == virtual_clock.sleeps


def test_effect_constructors_refuse_async_functions() -> None:
    """Effect.sync/attempt/from_result with an async function: a TypeError naming AsyncEffect."""
    for build in (
        lambda: Effect.sync(fetch),  # type: ignore[arg-type]
        lambda: Effect.attempt(AsyncCaller(Flaky(0)), catch=TransientError),
        lambda: Effect.from_result(functools.partial(fetch, Flaky(0))),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match=r"use AsyncEffect\."):
            build()


def test_migrate_destinations_use_the_same_helper() -> None:
    """migrate.destination sees an object with async __call__ as async, as effects does."""
    wrapped = migrate.destination(AsyncCaller(Flaky(0)))
    assert isinstance(wrapped(), AsyncEffect)


class Hostile:
    """An object whose __getattr__ fails for anything it lacks, __dict__ included."""

    __slots__ = ()

    def __getattr__(self, name: str) -> object:
        raise KeyError(name)

    def __call__(self) -> int:
        """A plain call."""
        return 1


def test_a_hostile_getattr_does_not_break_detection() -> None:
    """callable_kind and the event name read the object without tripping on its __getattr__."""
    assert ("sync", "Hostile") == (callable_kind(Hostile()), describe_callable(Hostile()))
