"""Static typing cases: a destination's key type-checks in strict mode the way users write it."""

from __future__ import annotations

from typing import Any, assert_type

import migrate
from effects import AsyncEffect, Effect


def put(path: str, record: dict[str, Any]) -> str:
    """A destination call."""
    return path


async def put_async(path: str, record: dict[str, Any]) -> str:
    """An async destination call."""
    return path


def key_forms() -> None:
    """A lambda key's parameters are typed from the wrapped function; a name always works."""
    direct = migrate.destination(put, name="catalogue", key=lambda path, record: path.lower())
    assert_type(direct("/a", {}), Effect[str, migrate.DestinationError])
    named = migrate.destination(put_async, name="catalogue", key="path")
    assert_type(named("/a", {}), AsyncEffect[str, migrate.DestinationError])

    @migrate.destination(name="catalogue", key="path")
    def decorated(path: str, record: dict[str, Any]) -> int:
        return len(path)

    assert_type(decorated("/a", {}), Effect[int, migrate.DestinationError])


def wrong_lambda_key_is_refused() -> None:
    """A lambda key whose parameters do not fit the function's is an error."""
    migrate.destination(put, key=lambda path: path)  # type: ignore[arg-type, misc]
