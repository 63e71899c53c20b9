"""Static typing of ``effects`` (checked by mypy and pyright, never run).

Each ``# type: ignore[code]`` line is a wrong use that must stay an error: mypy's
``warn_unused_ignores`` and pyright's ``reportUnnecessaryTypeIgnoreComment`` (pyright honours
``# type: ignore`` too) fail if it stops being one.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Never, assert_type

from returns.result import Result

from effects import (
    AsyncEffect,
    Attempt,
    Attempts,
    Effect,
    EffectTimeoutError,
    Retry,
    RetryEvent,
    add_hook,
    retry,
)
from schedules import exponential


class TransientError(Exception):
    pass


class OtherError(Exception):
    pass


policy: Retry = retry(exponential(0.25), times=4, on=TransientError)


def fetch() -> int:
    return 1


async def fetch_async() -> int:
    return 1


def effects_keep_their_types() -> None:
    effect = Effect.attempt(fetch, catch=TransientError)
    assert_type(effect, Effect[int, TransientError])
    assert_type(policy(effect), Effect[int, TransientError])
    assert_type(effect.pipe(policy), Effect[int, TransientError])
    assert_type(effect.retry(times=3), Effect[int, TransientError])
    assert_type(effect.run(), Result[int, TransientError])
    assert_type(effect.run_or_raise(), int)
    assert_type(Effect.succeed("a"), Effect[str, Never])
    assert_type(Effect.fail(OtherError()), Effect[Never, OtherError])
    assert_type(effect.map(str), Effect[str, TransientError])
    assert_type(effect.map_error(lambda e: OtherError()), Effect[int, OtherError])
    assert_type(effect.timeout(1), Effect[int, TransientError | EffectTimeoutError])
    assert_type(
        effect.flat_map(lambda n: Effect.attempt(fetch, catch=OtherError)),
        Effect[int, TransientError | OtherError],
    )


async def async_effects_stay_async() -> None:
    effect = AsyncEffect.attempt(fetch_async, catch=TransientError)
    assert_type(effect, AsyncEffect[int, TransientError])
    assert_type(policy(effect), AsyncEffect[int, TransientError])
    assert_type(effect.pipe(policy), AsyncEffect[int, TransientError])
    assert_type(effect.retry(times=3), AsyncEffect[int, TransientError])
    assert_type(await effect.run(), Result[int, TransientError])
    assert_type(await effect.run_or_raise(), int)


def decorated_functions_keep_their_signature() -> None:
    @retry(times=3, on=TransientError)
    def get(url: str, *, timeout: float = 10.0) -> bytes:
        return url.encode()

    @retry(times=3, on=TransientError)
    async def get_async(url: str, *, timeout: float = 10.0) -> bytes:
        return url.encode()

    assert_type(get("u", timeout=1.0), bytes)
    pending = assert_type(get_async("u"), Coroutine[Any, Any, bytes])
    pending.close()
    assert_type(policy.attempts(), Attempts)


async def attempts_and_pipes_keep_types() -> None:
    for attempt in policy.attempts():
        with attempt:
            assert_type(attempt, Attempt)
            assert_type(attempt.number, int)
    async for attempt in policy.attempts():
        assert_type(attempt, Attempt)

    def as_text(effect: Effect[int, TransientError]) -> Effect[str, TransientError]:
        return effect.map(str)

    effect = Effect.attempt(fetch, catch=TransientError)
    assert_type(effect.pipe(policy, as_text), Effect[str, TransientError])
    assert_type(Retry(times=2), Retry)

    def listen(event: RetryEvent) -> None:
        assert_type(event.delay, float | None)
        assert_type(event.error, Exception)

    remove = add_hook(listen)
    assert_type(remove(), None)


async def wrong_uses_are_rejected() -> None:
    @retry(times=3, on=TransientError)
    def get(url: str) -> bytes:
        return url.encode()

    @retry(times=3, on=TransientError)
    async def get_async(url: str) -> bytes:
        return url.encode()

    get(1)  # type: ignore[arg-type]
    get("u", retries=2)  # type: ignore[call-arg]
    await get_async(b"u")  # type: ignore[arg-type]
    sync_effect: Effect[int, TransientError] = Effect.attempt(fetch, catch=TransientError)
    async_effect: AsyncEffect[int, TransientError] = policy(sync_effect)  # type: ignore[assignment]
    wrong_value: Effect[str, TransientError] = policy(sync_effect)  # type: ignore[arg-type]
    policy(42)  # type: ignore[call-overload]
    retry(on=KeyboardInterrupt)  # type: ignore[arg-type]
    retry(times="3")  # type: ignore[arg-type]
    Effect.attempt(fetch, catch=SystemExit)  # type: ignore[type-var]
    AsyncEffect.attempt(fetch, catch=TransientError)  # type: ignore[arg-type]
    retry("250ms", times=3)  # type: ignore[arg-type]
    retry(times=3, on_retry=fetch)  # type: ignore[arg-type]
    del async_effect, wrong_value
