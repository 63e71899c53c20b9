"""
SqlDestination in a run sends a window's upserts together (an ``executemany`` per window), and a
row the database refuses still fails only its item: on SQLite and PostgreSQL, with bad rows,
duplicate keys, NULL, odd-typed and invalid text values, ``kill -9`` and a full disk mid-window.
"""

from __future__ import annotations

import contextvars
import secrets
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import psycopg
import pytest

import migrate
from tests.migrate.cli_support import migrate_command
from tests.migrate.helpers import config_of, people, states
from tests.postgres_server import PostgresServer


@attrs.define
class Database:
    """A destination database with a table ``people (id integer key, name text not null)``."""

    connect: Callable[[], Any]
    paramstyle: Literal["qmark", "format"]
    kind: str
    #: ``executemany`` calls and single ``INSERT`` executes seen on the destination's cursors.
    calls: dict[str, int] = attrs.field(factory=lambda: {"executemany": 0, "insert": 0})

    def rows(self, sql: str = "SELECT id, name FROM people ORDER BY id") -> list[tuple[Any, ...]]:
        """The rows of *sql*, on a connection of its own."""
        db = self.connect()
        try:
            cursor = db.cursor()
            cursor.execute(sql)
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            db.close()

    def table(self, **options: Any) -> migrate.SqlDestination:
        """The destination of ``people``, counting its sends."""
        return migrate.SqlDestination(
            self.counting, "people", "id", paramstyle=self.paramstyle, **options
        )

    def counting(self) -> Any:
        return _Counting(self.connect(), self.calls)


class _Counting:
    """A DB-API connection whose cursors count ``executemany`` and single ``INSERT`` calls."""

    def __init__(self, db: Any, calls: dict[str, int]) -> None:
        self.db = db
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def cursor(self) -> Any:
        return _CountingCursor(self.db.cursor(), self.calls)


class _CountingCursor:
    def __init__(self, cursor: Any, calls: dict[str, int]) -> None:
        self.cursor = cursor
        self.calls = calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith("INSERT"):
            self.calls["insert"] += 1
        return self.cursor.execute(sql, params)

    def executemany(self, sql: str, params: Any) -> Any:
        self.calls["executemany"] += 1
        return self.cursor.executemany(sql, params)


def _sqlite(path: Path) -> Database:
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    db.close()
    return Database(lambda: sqlite3.connect(path, timeout=30), "qmark", "sqlite")


def _postgres(server: PostgresServer) -> Database:
    schema = f"dest_{secrets.token_hex(6)}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"CREATE TABLE {schema}.people (id integer PRIMARY KEY, name text NOT NULL)")

    def connect() -> Any:
        return psycopg.connect(server.dsn(), options=f"-c search_path={schema}")

    return Database(connect, "format", "postgresql")


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """The destination database, on SQLite (a file in tmp_path) or PostgreSQL (a schema)."""
    if request.param == "sqlite":
        yield _sqlite(tmp_path / "dest.db")
        return
    yield _postgres(request.getfixturevalue("postgres_server"))


def _journal(config: migrate.Config, identity: str) -> list[dict[str, Any]]:
    with config.open_store() as store:
        state = store.item("p", identity)
    assert state is not None
    return [dict(entry) for entry in state.journal]


def _upserted(key: Any, created: bool) -> dict[str, Any]:
    return {
        "kind": "change",
        "destination": "sql:people",
        "operation": "upsert",
        "key": key,
        "created": created,
    }


def test_a_window_sends_its_upserts_in_one_executemany(tmp_path: Path, database: Database) -> None:
    """40 items in windows of 20: two executemany calls, no INSERT sent alone; all migrate."""
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        table.upsert({"id": int(item.identity), "name": item.data["name"]}).run_or_raise()

    source = migrate.MemorySource(people(40), window_size=20)
    summary = migrate.run(config_of(tmp_path, migrate.Migration("p", source, process)))
    assert (40, {"executemany": 2, "insert": 0}) == (
        summary.definitions["p"].counts.migrated,
        database.calls,
    )
    assert [(i, f"person {i}") for i in range(1, 41)] == database.rows()


def test_one_bad_row_among_good_ones_fails_its_item_alone(
    tmp_path: Path, database: Database
) -> None:
    """A NULL in a NOT NULL column: that item fails with the database's refusal, naming the
    process's line; the window's other rows are committed; its journal keeps no upsert."""
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        name = None if item.identity == "5" else item.data["name"]
        scope.journal.diagnostic("before")
        table.upsert({"id": int(item.identity), "name": name}).run_or_raise()  # the call

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(9)), process))
    summary = migrate.run(config)
    assert migrate.Counts(migrated=8, failed=1) == summary.definitions["p"].counts
    (failure,) = migrate.failures(config, "p")
    assert ("5", "destination") == (failure.identity, failure.error.kind)
    assert "sql:people: upsert of key 5 failed" in failure.error.message
    assert "null" in failure.error.message.lower()
    assert failure.error.details["where"].startswith(f"{__file__}:")
    assert failure.error.details["where"].endswith(" in process")
    assert [i for i in range(1, 10) if i != 5] == [row[0] for row in database.rows()]
    assert [{"kind": "diagnostic", "message": "before"}] == _journal(config, "5")
    assert [{"kind": "diagnostic", "message": "before"}, _upserted(4, True)] == _journal(
        config, "4"
    )


def test_a_window_whose_every_row_is_refused_fails_each_item_with_its_own_error(
    tmp_path: Path, database: Database
) -> None:
    """Every row refused: each item fails with its own key in the message, nothing is kept;
    once the data is fixed, a --failed run migrates them all."""
    table = database.table()
    fixed = {"on": False}

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        name = item.data["name"] if fixed["on"] else None
        table.upsert({"id": int(item.identity), "name": name}).run_or_raise()

    source = migrate.MemorySource(people(6), window_size=3)
    config = config_of(tmp_path, migrate.Migration("p", source, process))
    migrate.run(config)
    failures = migrate.failures(config, "p")
    assert [str(i) for i in range(1, 7)] == [f.identity for f in failures]
    assert all(f"upsert of key {f.identity} failed" in f.error.message for f in failures)
    assert [] == database.rows()
    fixed["on"] = True
    migrate.run(config, migrate.RunOptions(failed=True))
    assert {str(i): "migrated" for i in range(1, 7)} == states(config, "p")
    assert [(i, f"person {i}") for i in range(1, 7)] == database.rows()


def test_two_items_upserting_one_key_in_a_window_record_created_as_one_after_the_other(
    tmp_path: Path, database: Database
) -> None:
    """Items 1 and 2 of one window upsert key 7: the row holds item 2's values; item 1 created
    it, item 2 found it; rolling item 2 back leaves the row, rolling item 1 back deletes it."""
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        table.upsert({"id": 7, "name": item.data["name"]}).run_or_raise()

    source = migrate.MemorySource(people(2))
    migration = migrate.Migration("p", source, process, rollback=table.rollback)
    config = config_of(tmp_path, migration)
    migrate.run(config)
    assert [(7, "person 2")] == database.rows()
    assert ([_upserted(7, True)], [_upserted(7, False)]) == (
        _journal(config, "1"),
        _journal(config, "2"),
    )
    migrate.rollback(config, ("p",), ids=("2",))
    assert [(7, "person 2")] == database.rows()
    migrate.rollback(config, ("p",), ids=("1",))
    assert [] == database.rows()


def test_a_key_the_database_takes_for_another_queued_one_is_found_by_the_probe(
    tmp_path: Path,
) -> None:
    """SQLite: item 1 upserts key "7" (text), item 2 key 7 (int): one row (the column's
    affinity makes them one key), so item 2's probe must see item 1's queued row."""
    database = _sqlite(tmp_path / "dest.db")
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        key = "7" if item.identity == "1" else 7
        table.upsert({"id": key, "name": item.data["name"]}).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), process))
    migrate.run(config)
    assert [(7, "person 2")] == database.rows()
    assert ([_upserted("7", True)], [_upserted(7, False)]) == (
        _journal(config, "1"),
        _journal(config, "2"),
    )


def test_null_and_odd_typed_values_fail_only_the_items_the_database_refuses(
    tmp_path: Path, database: Database
) -> None:
    """NULL where it is allowed: kept; a mapping the driver cannot send, text for an integer
    column (refused by PostgreSQL; SQLite keeps it as text): each fails its own item alone."""
    db = database.connect()
    try:
        cursor = db.cursor()
        cursor.execute("CREATE TABLE extra (id integer PRIMARY KEY, note text, n integer)")
        db.commit()
    finally:
        db.close()
    table = migrate.SqlDestination(database.connect, "extra", "id", paramstyle=database.paramstyle)
    odd: dict[str, dict[str, Any]] = {
        "1": {"id": 1, "note": None, "n": None},
        "2": {"id": 2, "note": "plain", "n": 3},
        "3": {"id": 3, "note": {"a": 1}, "n": 1},
        "4": {"id": 4, "note": "n is text", "n": "not a number"},
        "5": {"id": 5, "note": "fine", "n": 5},
    }

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        table.upsert(odd[item.identity]).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(5)), process))
    migrate.run(config)
    refused = {"3"} if database.kind == "sqlite" else {"3", "4"}  # SQLite keeps the text
    assert {i: "failed" if i in refused else "migrated" for i in odd} == states(config, "p")
    assert [int(i) for i in odd if i not in refused] == [
        row[0] for row in database.rows("SELECT id FROM extra ORDER BY id")
    ]


def test_text_no_database_can_hold_fails_its_item_alone(tmp_path: Path, database: Database) -> None:
    """A lone surrogate (no UTF-8 for it), and on PostgreSQL a NUL: that item fails, naming
    its key; the other rows of the window are kept."""
    bad = {"2": "a\ud800b", "4": "nul\x00" if database.kind == "postgresql" else "x\udc80"}
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        name = bad.get(item.identity, item.data["name"])
        table.upsert({"id": int(item.identity), "name": name}).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(5)), process))
    migrate.run(config)
    assert ["2", "4"] == [f.identity for f in migrate.failures(config, "p")]
    assert [1, 3, 5] == [row[0] for row in database.rows()]


def test_execute_and_delete_see_the_upserts_queued_before_them(
    tmp_path: Path, database: Database
) -> None:
    """An item's query through execute() finds the row it upserted just before; a delete
    after an upsert leaves no row: they run after what was queued, in order."""
    table = database.table()
    seen: dict[str, list[tuple[Any, ...]]] = {}
    marker = "?" if database.paramstyle == "qmark" else "%s"

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        person = int(item.identity)
        table.upsert({"id": person, "name": item.data["name"]}).run_or_raise()
        query = f"SELECT name FROM people WHERE id = {marker}"
        seen[item.identity] = table.execute(query, (person,)).run_or_raise()
        if person % 2 == 0:
            table.delete(person).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(4)), process))
    migrate.run(config)
    assert {str(i): [(f"person {i}",)] for i in range(1, 5)} == seen
    assert [(1, "person 1"), (3, "person 3")] == database.rows()


def test_a_bad_row_among_concurrent_items_fails_alone(tmp_path: Path) -> None:
    """concurrency=4 (items in worker threads, the window's connection in a thread of its
    own): the bad row's item fails alone, the others are committed."""
    database = _sqlite(tmp_path / "dest.db")
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        name = None if item.identity == "13" else item.data["name"]
        table.upsert({"id": int(item.identity), "name": name}).run_or_raise()

    source = migrate.MemorySource(people(30), window_size=10)
    config = config_of(tmp_path, migrate.Migration("p", source, process, concurrency=4))
    migrate.run(config)
    assert ["13"] == [f.identity for f in migrate.failures(config, "p")]
    assert [i for i in range(1, 31) if i != 13] == [row[0] for row in database.rows()]


def test_a_call_from_a_thread_the_window_did_not_start_fails_saying_what_to_do(
    tmp_path: Path,
) -> None:
    """concurrency=1 uses the window's connection in its own thread: a call from a thread the
    process starts fails with a DestinationError naming concurrency and batch=False."""
    database = _sqlite(tmp_path / "dest.db")
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        table.upsert({"id": 1, "name": "first"}).run_or_raise()
        outcome: list[object] = []
        effect = table.upsert({"id": int(item.identity) + 1, "name": "elsewhere"})
        context = contextvars.copy_context()
        worker = threading.Thread(target=lambda: outcome.append(context.run(effect.run)))
        worker.start()
        worker.join()
        raise outcome[0].failure()  # type: ignore[attr-defined]

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert "called from a thread the window did not start" in failure.error.message
    assert "batch=False" in failure.error.message


CRASH_CONFIG = """
import sqlite3
import time
from pathlib import Path

import migrate

HERE = Path(__file__).resolve().parent
people = migrate.SqlDestination(
    lambda: sqlite3.connect(HERE / "dest.db", timeout=30), "people", "id"
)


def process(item, scope):
    person = int(item.identity)
    people.upsert({"id": person, "name": f"person {person}"}).run_or_raise()
    if person == 25 and not (HERE / "release").exists():
        (HERE / "blocked").write_text("")
        time.sleep(120)


source = migrate.MemorySource([{"id": i} for i in range(1, 41)], window_size=10)
config = migrate.Config(
    [migrate.Migration("p", source, process, rollback=people.rollback)], store="sqlite:///state.db"
)
"""


@pytest.mark.timeout(120)
def test_a_run_killed_mid_window_commits_none_of_its_queued_rows(tmp_path: Path) -> None:
    """kill -9 with half a window's upserts queued: the destination and the store hold the
    committed windows only; the rerun writes every row once, each created by its item."""
    database = _sqlite(tmp_path / "dest.db")
    (tmp_path / "migrate_config.py").write_text(CRASH_CONFIG)
    command = [*migrate_command(), "--config", str(tmp_path / "migrate_config.py"), "run"]
    crashed = subprocess.Popen(
        [*command, "--progress", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        while not (tmp_path / "blocked").exists():
            assert crashed.poll() is None, crashed.communicate()
            time.sleep(0.01)
    finally:
        crashed.kill()  # SIGKILL: no clean-up of any kind
        crashed.communicate()
    assert list(range(1, 21)) == [row[0] for row in database.rows()]
    config = migrate.Config([], store=f"sqlite:///{tmp_path / 'state.db'}")
    with config.open_store() as store:
        assert [str(i) for i in range(1, 21)] == sorted(
            (s.identity for s in store.items("p")), key=int
        )
    (tmp_path / "release").write_text("")
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert 0 == rerun.returncode, rerun.stderr
    assert [(i, f"person {i}") for i in range(1, 41)] == database.rows()
    with config.open_store() as store:
        journals = {s.identity: [dict(e) for e in s.journal] for s in store.items("p")}
    assert {str(i): [_upserted(i, True)] for i in range(1, 41)} == journals


@pytest.fixture
def small_disk_kib() -> int:
    """This module's ``small_disk`` (tests/migrate/conftest.py) is 256 KiB."""
    return 256


def test_a_full_disk_mid_window_fails_that_window_s_items_and_half_commits_nothing(
    tmp_path: Path, small_disk: Path
) -> None:
    """The destination's disk fills up while a window is sent: the rows each migrated item
    wrote are all there, no failed item has one; after the disk grows, a --failed run
    migrates the rest, each row once."""
    database = _sqlite(small_disk / "dest.db")
    table = database.table()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        table.upsert({"id": int(item.identity), "name": "x" * 2000}).run_or_raise()

    source = migrate.MemorySource(people(400), window_size=40)
    config = config_of(tmp_path, migrate.Migration("p", source, process))
    migrate.run(config)
    stored = states(config, "p")
    migrated = sorted(int(i) for i, status in stored.items() if status == "migrated")
    failures = migrate.failures(config, "p")
    assert failures, "the disk never filled up"
    assert all("full" in f.error.message for f in failures), failures[0].error.message
    assert migrated == [row[0] for row in database.rows("SELECT id FROM people ORDER BY id")]
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    migrate.run(config, migrate.RunOptions(failed=True))
    assert {str(i): "migrated" for i in range(1, 401)} == states(config, "p")
    assert list(range(1, 401)) == [row[0] for row in database.rows("SELECT id FROM people")]
