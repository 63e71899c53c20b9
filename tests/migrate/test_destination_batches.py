"""SqlDestination in a run: one connection and one transaction per window, failures per item."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import migrate
from tests.migrate.helpers import config_of, people, states


class Counted:
    """A sqlite3 connection factory counting the connections opened and the commits made."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connections = 0
        self.commits = 0

    def __call__(self) -> Any:
        self.connections += 1
        return _CountingConnection(sqlite3.connect(self.path), self)


class _CountingConnection:
    def __init__(self, db: sqlite3.Connection, owner: Counted) -> None:
        self.db = db
        self.owner = owner

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def cursor(self) -> sqlite3.Cursor:
        return self.db.cursor()

    def commit(self) -> None:
        self.owner.commits += 1
        self.db.commit()

    def rollback(self) -> None:
        self.db.rollback()

    def close(self) -> None:
        self.db.close()


def _table(path: Path, schema: str = "id INTEGER PRIMARY KEY, name TEXT NOT NULL") -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute(f"CREATE TABLE people ({schema})")
    db.close()


def _ids(path: Path) -> list[int]:
    with sqlite3.connect(path) as db:
        ids = [row[0] for row in db.execute("SELECT id FROM people ORDER BY id")]
    db.close()
    return ids


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_window_writes_in_one_connection_and_one_transaction(
    tmp_path: Path, concurrency: int
) -> None:
    """1,000 rows in windows of 500: two connections, two commits, every row written."""
    path = tmp_path / "dest.db"
    _table(path)
    connect = Counted(path)
    table = migrate.SqlDestination(connect, "people", "id")

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        table.upsert({"id": int(item.identity), "name": item.data["name"]}).run_or_raise()

    source = migrate.MemorySource(people(1000), window_size=500)
    config = config_of(tmp_path, migrate.Migration("p", source, process, concurrency=concurrency))
    summary = migrate.run(config)
    assert (1000, 2, 2) == (
        summary.definitions["p"].counts.migrated,
        connect.connections,
        connect.commits,
    )
    assert list(range(1, 1001)) == _ids(path)


def test_a_failing_write_fails_its_item_alone_pointing_at_the_process_line(
    tmp_path: Path,
) -> None:
    """A write the database refuses is undone alone; its evidence names the process's line."""
    path = tmp_path / "dest.db"
    _table(path)
    table = migrate.SqlDestination(lambda: sqlite3.connect(path), "people", "id")

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        name = None if item.identity == "2" else item.data["name"]
        table.upsert({"id": int(item.identity), "name": name}).run_or_raise()  # the line

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), process))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert ([1, 3], "destination", "2") == (_ids(path), failure.error.kind, failure.identity)
    assert "NOT NULL constraint failed" in failure.error.message
    assert f"{__file__}:" in failure.error.details["where"]
    assert failure.error.details["where"].endswith(" in process")


def test_a_window_whose_commit_fails_fails_every_item_that_wrote_in_it(tmp_path: Path) -> None:
    """A commit refused by the database (a deferred constraint) fails the window's writers."""
    path = tmp_path / "dest.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE teams (id INTEGER PRIMARY KEY)")
        db.execute(
            "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, team INTEGER "
            "REFERENCES teams (id) DEFERRABLE INITIALLY DEFERRED)"
        )
    db.close()

    def connect() -> sqlite3.Connection:
        db = sqlite3.connect(path)
        db.execute("PRAGMA foreign_keys = ON")
        return db

    table = migrate.SqlDestination(connect, "people", "id")

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        team = 99 if item.identity == "3" else None  # no team 99: refused at commit
        table.upsert({"id": int(item.identity), "name": "x", "team": team}).run_or_raise()

    source = migrate.MemorySource(people(6), window_size=3)
    config = config_of(tmp_path, migrate.Migration("p", source, process))
    summary = migrate.run(config)
    failures = migrate.failures(config, "p")
    assert ([4, 5, 6], ["1", "2", "3"]) == (_ids(path), [f.identity for f in failures])
    assert "committing the window's writes failed" in failures[0].error.message
    assert "FOREIGN KEY constraint failed" in failures[0].error.message
    assert migrate.Counts(migrated=3, failed=3) == summary.definitions["p"].counts
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO teams VALUES (99)")
    db.close()
    migrate.run(config, migrate.RunOptions(failed=True))
    assert ([1, 2, 3, 4, 5, 6], "migrated") == (_ids(path), states(config, "p")["3"])


def test_outside_a_run_each_call_commits_at_once(tmp_path: Path) -> None:
    """Without a window (a script, a test), upsert commits per call, as before."""
    path = tmp_path / "dest.db"
    _table(path)
    connect = Counted(path)
    table = migrate.SqlDestination(connect, "people", "id")
    for i in (1, 2):
        table.upsert({"id": i, "name": "x"}).run_or_raise()
    assert (2, 2, [1, 2]) == (connect.connections, connect.commits, _ids(path))
