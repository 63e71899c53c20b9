"""
Fixtures for the migrate tests. A test on the ``store_url`` fixture runs on both SQL stores,
SQLite and PostgreSQL (a schema of its own per test).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import fresh_store_url
from tests.migrate.helpers import people, write_csv
from tests.postgres_server import PostgresServer

STORES = ("sqlite", "postgresql")


@pytest.fixture
def csv_people(tmp_path: Path) -> Path:
    """A CSV file of 10 people with ids 1..10."""
    return write_csv(tmp_path / "people.csv", people(10))


@pytest.fixture(autouse=True)
def _config_modules_stay_in_their_test(tmp_path: Path) -> Iterator[None]:
    """load_config puts a config's folder on sys.path and imports it and its siblings: undo it,
    so a module of one test's folder never answers another test's import."""
    path = list(sys.path)
    yield
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).is_relative_to(tmp_path):
            del sys.modules[name]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """
    A fresh store: a SQLite file in tmp_path, or a PostgreSQL schema of its own. On PostgreSQL
    the database's ``effects_durable`` schema (the default durable store of every migrate store
    there, shared by the tests of one session) is dropped before and after the test: a durable
    run one test left would otherwise be worked by the next test's engine, whose config does
    not know it.
    """
    url = fresh_store_url(request, tmp_path / "state.db")
    if not url.startswith("postgresql"):
        yield url
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    _drop_durable_schema(server)
    try:
        yield url
    finally:
        _drop_durable_schema(server)


def _drop_durable_schema(server: PostgresServer) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as db:
        db.execute("DROP SCHEMA IF EXISTS effects_durable CASCADE")


@pytest.fixture
def small_disk_kib() -> int:
    """The size of ``small_disk`` in KiB; a module overrides this fixture for another size."""
    return 192


@pytest.fixture
def small_disk(tmp_path: Path, small_disk_kib: int) -> Iterator[Path]:
    """
    A tmpfs of ``small_disk_kib`` KiB: a real disk that fills up (``mount -o remount,size=...``
    resizes it).
    """
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root, so no real full disk can be made here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={small_disk_kib}k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
