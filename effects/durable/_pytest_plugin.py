"""
pytest plugin of ``effects.durable`` (registered through the ``pytest11`` entry point).

Fixture ``durable_engine``: a factory of engines on the store ``durable_store_url`` names (by
default a fresh SQLite file in the test's temporary folder; override that fixture to run the same
tests on another store, e.g. a PostgreSQL schema per test), all sharing one
``effects.testing.VirtualClock`` (started at 2026-01-01 00:00 UTC, read as epoch seconds) and one
seeded random source, so a test skips every wait with
``await engine.run_until_idle(advance_time=True)`` and sees the same jitter on every run.

No async plugin is needed: an ``async def`` test that uses ``durable_engine`` runs on asyncio
(a new event loop per test, as the engine needs), unless another plugin runs it first (anyio
for ``@pytest.mark.anyio``, pytest-asyncio). Where anyio is not installed this plugin declares
the ``anyio`` marker, so such a test, copied from the docs (``docs/how-to/testing.md``), passes
with or without anyio.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from pathlib import Path
from typing import Any, Protocol

import pytest

from effects import is_async_callable
from effects.durable import Engine, Queue, StepDef, WorkflowDef
from effects.testing import VirtualClock

__all__ = [
    "DurableEngineFactory",
    "durable_engine",
    "durable_store_url",
    "pytest_configure",
    "pytest_pyfunc_call",
]

#: Where the fixture's virtual clock starts: 2026-01-01T00:00:00Z, in epoch seconds.
START: float = 1_767_225_600.0


class DurableEngineFactory(Protocol):
    """What the ``durable_engine`` fixture gives: call it to make an (unopened) engine."""

    clock: VirtualClock
    random: random.Random
    url: str

    def __call__(
        self,
        *,
        workflows: list[WorkflowDef[Any, Any]] | tuple[WorkflowDef[Any, Any], ...] = (),
        steps: list[StepDef[Any, Any]] | tuple[StepDef[Any, Any], ...] = (),
        queues: list[Queue] | tuple[Queue, ...] = (),
        **options: Any,
    ) -> Engine:
        """An engine on the test's store, clock and random source; *options* go to ``Engine``."""
        ...


class _Factory:
    def __init__(self, url: str) -> None:
        self.clock = VirtualClock(start=START)
        self.random = random.Random(0)
        self.url = url

    def __call__(
        self,
        *,
        workflows: list[WorkflowDef[Any, Any]] | tuple[WorkflowDef[Any, Any], ...] = (),
        steps: list[StepDef[Any, Any]] | tuple[StepDef[Any, Any], ...] = (),
        queues: list[Queue] | tuple[Queue, ...] = (),
        **options: Any,
    ) -> Engine:
        options.setdefault("clock", self.clock)
        options.setdefault("random", self.random)
        return Engine(self.url, workflows=workflows, steps=steps, queues=queues, **options)

    def __repr__(self) -> str:
        return f"durable_engine({self.url!r}, clock={self.clock!r})"


@pytest.fixture
def durable_store_url(tmp_path: Path) -> str:
    """The store URL of ``durable_engine``: a fresh SQLite file in ``tmp_path``."""
    return f"sqlite:///{tmp_path / 'durable.db'}"


@pytest.fixture
def durable_engine(durable_store_url: str) -> DurableEngineFactory:
    """
    A factory of ``Engine`` values on one fresh store (``durable_store_url``), one virtual clock
    (``.clock``) and one seeded random source. Use each engine as ``async with``.
    """
    return _Factory(durable_store_url)


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``anyio`` marker when anyio's own plugin is not there to declare it."""
    if not config.pluginmanager.hasplugin("anyio"):
        config.addinivalue_line(
            "markers",
            "anyio: run this async test with anyio; without anyio installed, effects.durable's "
            "plugin runs the async tests that use durable_engine on asyncio",
        )


def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """
    Run an ``async def`` test that uses ``durable_engine`` on a new asyncio event loop, when no
    other plugin (anyio, pytest-asyncio) has run it. Its fixtures must be plain (sync) ones.

    Not ``trylast``: pytest's own implementation is, and it refuses every coroutine. anyio's
    runs first (``tryfirst``), and pytest-asyncio makes its tests' functions plain ones.
    """
    function = pyfuncitem.obj
    if "durable_engine" not in pyfuncitem.funcargs or not is_async_callable(function):
        return None
    names = inspect.signature(function).parameters
    arguments = {name: pyfuncitem.funcargs[name] for name in names if name in pyfuncitem.funcargs}
    asyncio.run(function(**arguments))
    return True
