"""
Fixtures of the effects.durable tests. Its async tests run under asyncio alone. Every test on the
``durable_engine`` fixture runs on the three stores: memory (a store name of its own per test),
SQLite and PostgreSQL (a schema of its own per test), unless it is marked ``sqlite_only`` with the
reason (then on SQLite alone), or ``not_on_memory`` with the reason: it needs what a memory store
cannot be (a file, a server, or a store another process shares). Also: the crash tests' engine
processes, and an app folder for the CLI tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from effects.durable._store.memory import MemoryStore
from tests.conftest import fresh_store_url
from tests.durable.cli_support import App, make_app
from tests.durable.crash_support.harness import Nodes

#: The stores that engines of several processes can share.
STORES = ("sqlite", "postgresql")
#: The stores of ``durable_store_url``: those, and this process's memory.
ENGINE_STORES = ("memory", *STORES)


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``sqlite_only(reason)`` and ``not_on_memory(reason)`` markers."""
    config.addinivalue_line(
        "markers", "sqlite_only(reason): the test is about the SQLite store and runs on it alone"
    )
    config.addinivalue_line(
        "markers",
        "not_on_memory(reason): the test needs a file, a server or a second process, so it does"
        " not run on the memory store",
    )


def _left_out(item: pytest.Item, store: object) -> bool:
    if item.get_closest_marker("sqlite_only") is not None:
        return store in ("postgresql", "memory")
    return store == "memory" and item.get_closest_marker("not_on_memory") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the store variants that the ``sqlite_only`` and ``not_on_memory`` marks refuse."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        store = None if callspec is None else callspec.params.get("durable_store_url")
        (dropped if _left_out(item, store) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def anyio_backend() -> str:
    """Run every ``@pytest.mark.anyio`` test of this folder under asyncio."""
    return "asyncio"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    """The engine processes of a crash test; those still running at its end are killed."""
    spawned = Nodes(tmp_path)
    yield spawned
    spawned.kill_all()


@pytest.fixture
def cli_app(tmp_path: Path, durable_store_url: str) -> Iterator[App]:
    """
    An app module and its folder for the CLI tests, on either store (``durable.db`` in the
    folder, or a PostgreSQL schema of its own); its processes end with the test. (The CLI runs
    in processes of its own: never on the memory store.)
    """
    app = make_app(tmp_path, None if durable_store_url.startswith("sqlite:") else durable_store_url)
    yield app
    app.reap()


@pytest.fixture(params=ENGINE_STORES)
def durable_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """
    The store of ``durable_engine``: a fresh memory store (dropped after the test), a fresh
    SQLite file, or a fresh PostgreSQL schema.
    """
    if request.param != "memory":
        yield fresh_store_url(request, tmp_path / "durable.db")
        return
    name = f"test-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)
