"""
pytest plugin of ``effects`` (registered through the ``pytest11`` entry point).

Fixture ``virtual_clock``: a fresh ``effects.testing.VirtualClock`` installed with
``effects.use_clock`` for the test, so every retry in it waits no real time and its waits can be
asserted through ``virtual_clock.sleeps``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Generator, Iterator
from typing import Any

import pytest

from effects._services import use_clock
from effects.testing import VirtualClock

__all__ = ["pytest_pyfunc_call", "virtual_clock"]


@pytest.fixture
def virtual_clock() -> Iterator[VirtualClock]:
    """A ``VirtualClock(start=0.0)`` in use for the whole test (sync and async)."""
    with use_clock(VirtualClock()) as clock:
        yield clock


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Install the test's ``virtual_clock`` inside async test bodies too.

    An async test runs in a task of its async plugin (anyio, ...), whose context may have been
    copied before the fixture set the clock (for instance when an async fixture started the
    runner first). Entering ``use_clock`` again inside the test body makes the clock visible
    there whatever the fixture order.
    """
    clock = pyfuncitem.funcargs.get("virtual_clock")
    original: Callable[..., Any] = pyfuncitem.obj
    if not isinstance(clock, VirtualClock) or not inspect.iscoroutinefunction(original):
        return (yield)

    @functools.wraps(original)
    async def with_clock(*args: Any, **kwargs: Any) -> Any:
        with use_clock(clock):
            return await original(*args, **kwargs)

    wrapped: Callable[..., Coroutine[Any, Any, Any]] = with_clock
    pyfuncitem.obj = wrapped
    try:
        return (yield)
    finally:
        pyfuncitem.obj = original
