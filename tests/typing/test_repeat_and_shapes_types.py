"""Static typing of ``repeat``, the shared options, and retried methods (checked, never run).

Each ``# type: ignore[code]`` line is a wrong use that must stay an error.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, assert_type

from typing_extensions import Unpack

from effects import (
    AsyncEffect,
    Effect,
    Repeat,
    RepeatEvent,
    RepeatOptions,
    Retry,
    RetryOptions,
    repeat,
    retry,
)
from schedules import spaced


class TransientError(Exception):
    pass


def status() -> str:
    return "done"


async def status_async() -> str:
    return "done"


def repeats_keep_types() -> None:
    policy = repeat(spaced("1s"), until=lambda s: s == "done", times=60)
    assert_type(policy, Repeat)
    effect = Effect.attempt(status, catch=TransientError)
    assert_type(policy(effect), Effect[str, TransientError])
    assert_type(effect.repeat(spaced(1), times=3), Effect[str, TransientError])
    async_effect = AsyncEffect.attempt(status_async, catch=TransientError)
    assert_type(policy(async_effect), AsyncEffect[str, TransientError])
    assert_type(async_effect.repeat(times=3), AsyncEffect[str, TransientError])

    @repeat(spaced(1), times=3)
    def poll(job: int, *, verbose: bool = False) -> str:
        return str(job)

    @repeat(spaced(1), times=3)
    async def poll_async(job: int) -> str:
        return str(job)

    assert_type(poll(1, verbose=True), str)
    pending = assert_type(poll_async(1), Coroutine[Any, Any, str])
    pending.close()

    def listen(event: RepeatEvent) -> None:
        assert_type(event.value, object)
        assert_type(event.delay, float | None)

    repeat(times=1, on_repeat=listen)


class Service:
    @retry(times=3, on=TransientError)
    @staticmethod
    def ping(host: str) -> bool:
        return bool(host)

    @retry(times=3, on=TransientError)
    @classmethod
    def make(cls, name: str) -> Service:
        return cls()


def methods_keep_their_signature() -> None:
    assert_type(Service.ping("h"), bool)
    assert_type(Service().ping("h"), bool)
    assert_type(Service.make("n"), Service)


def wrappers_can_forward_the_options(**options: Unpack[RetryOptions]) -> Retry:
    return retry(spaced(1), **options)


def repeat_wrappers_too(**options: Unpack[RepeatOptions]) -> Repeat:
    return repeat(spaced(1), **options)


def wrong_uses_are_rejected() -> None:
    repeat(spaced(1), on=TransientError)  # type: ignore[call-arg]
    repeat(times="3")  # type: ignore[arg-type]
    retry(spaced(1), on_repeat=print)  # type: ignore[call-arg]
    Service.ping(3)  # type: ignore[arg-type]
    wrappers_can_forward_the_options(time=3)  # type: ignore[call-arg]
