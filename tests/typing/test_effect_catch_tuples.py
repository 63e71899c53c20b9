"""Static typing cases: a tuple of catch types is a union of typed failures, in mypy too."""

from __future__ import annotations

from typing import assert_type

from effects import AsyncEffect, Effect


def parse(text: str) -> int:
    """Raises ValueError, or KeyError, or LookupError."""
    return int(text)


async def fetch() -> bytes:
    """Raises OSError or TimeoutError."""
    return b""


def sync_tuples() -> None:
    """One, two and three catch types keep each type; longer tuples share a base."""
    assert_type(Effect.attempt(lambda: parse("1"), catch=ValueError), Effect[int, ValueError])
    assert_type(
        Effect.attempt(lambda: parse("1"), catch=(KeyError, ValueError)),
        Effect[int, KeyError | ValueError],
    )
    assert_type(
        Effect.attempt(lambda: parse("1"), catch=(KeyError, ValueError, LookupError)),
        Effect[int, KeyError | ValueError | LookupError],
    )
    assert_type(Effect.attempt(lambda: parse("1"), catch=(ValueError,)), Effect[int, ValueError])


def async_tuples() -> None:
    """The same on AsyncEffect."""
    assert_type(
        AsyncEffect.attempt(fetch, catch=(OSError, TimeoutError)),
        AsyncEffect[bytes, OSError | TimeoutError],
    )
    assert_type(
        AsyncEffect.attempt(fetch, catch=(OSError, TimeoutError, ValueError)),
        AsyncEffect[bytes, OSError | TimeoutError | ValueError],
    )


def non_exception_is_refused() -> None:
    """A catch type that is not an Exception subclass is an error."""
    Effect.attempt(lambda: 1, catch=(KeyError, int))  # type: ignore[type-var]
