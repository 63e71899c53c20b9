"""
effects.durable is asyncio only: its async tests run under asyncio alone. Every test on the
``durable_engine`` fixture runs on both stores, SQLite and PostgreSQL (a schema of its own per
test), unless it is marked ``sqlite_only`` with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.fixture(params=STORES)
def durable_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of ``durable_engine``: a fresh SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'durable.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url
