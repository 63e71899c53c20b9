"""
Fixtures of the effects.durable tests. Its async tests run under asyncio alone. Every test on the
``durable_engine`` fixture runs on both stores, SQLite and PostgreSQL (a schema of its own per
test), unless it is marked ``sqlite_only`` with the reason. Also: the crash tests' engine
processes, and an app folder for the CLI tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import fresh_store_url
from tests.durable.cli_support import App, make_app
from tests.durable.crash_support.harness import Nodes

STORES = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``sqlite_only(reason)`` marker."""
    config.addinivalue_line(
        "markers", "sqlite_only(reason): the test is about the SQLite store and runs on it alone"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the PostgreSQL variant of the tests marked ``sqlite_only``."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        store = None if callspec is None else callspec.params.get("durable_store_url")
        only = item.get_closest_marker("sqlite_only")
        (dropped if only is not None and store == "postgresql" else kept).append(item)
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
    folder, or a PostgreSQL schema of its own); its processes end with the test.
    """
    app = make_app(tmp_path, None if durable_store_url.startswith("sqlite:") else durable_store_url)
    yield app
    app.reap()


@pytest.fixture(params=STORES)
def durable_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of ``durable_engine``: a fresh SQLite file, or a fresh PostgreSQL schema."""
    return fresh_store_url(request, tmp_path / "durable.db")
