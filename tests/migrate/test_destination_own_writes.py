"""
A pipeline's own writes beside SqlDestination's (an audit row for each upsert), on SQLite and
PostgreSQL: in the window's transaction through ``execute``, or on connections of their own
with ``batch=False``.
"""

from __future__ import annotations

import secrets
import sqlite3
import subprocess
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

ROWS = 20


@attrs.frozen
class Database:
    """A destination database with ``people`` and ``audit`` (a foreign key to people)."""

    connect: Callable[[], Any]
    #: A connection of the process's own that gives up waiting for a lock after a moment.
    connect_own: Callable[[], Any]
    paramstyle: Literal["qmark", "format"]
    marker: str

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of *sql*, on a connection of its own."""
        db = self.connect()
        try:
            cursor = db.cursor()
            cursor.execute(sql)
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            db.close()


def _sqlite(tmp_path: Path) -> Database:
    path = tmp_path / "dest.db"
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        db.execute(
            "CREATE TABLE audit (id INTEGER PRIMARY KEY, person INTEGER NOT NULL "
            "REFERENCES people (id), note TEXT NOT NULL)"
        )
    db.close()

    def connect_own() -> sqlite3.Connection:
        own = sqlite3.connect(path, timeout=0.2)
        own.execute("PRAGMA foreign_keys = ON")
        return own

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(path, timeout=30)
        connection.execute("PRAGMA foreign_keys = ON")
        return connection

    return Database(connect, connect_own, "qmark", "?")


def _postgres(server: PostgresServer) -> Database:
    schema = f"dest_{secrets.token_hex(6)}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"CREATE TABLE {schema}.people (id integer PRIMARY KEY, name text NOT NULL)")
        admin.execute(
            f"CREATE TABLE {schema}.audit (id serial PRIMARY KEY, person integer NOT NULL "
            f"REFERENCES {schema}.people (id), note text NOT NULL)"
        )

    def connect() -> Any:
        return psycopg.connect(server.dsn(), options=f"-c search_path={schema}")

    def connect_own() -> Any:
        return psycopg.connect(server.dsn(), options=f"-c search_path={schema} -c lock_timeout=200")

    return Database(connect, connect_own, "format", "%s")


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """The destination database, on SQLite (a file in tmp_path) or PostgreSQL (a schema)."""
    if request.param == "sqlite":
        yield _sqlite(tmp_path)
    else:
        yield _postgres(request.getfixturevalue("postgres_server"))


def _audit_sql(database: Database) -> str:
    return f"INSERT INTO audit (person, note) VALUES ({database.marker}, {database.marker})"


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_audit_row_beside_each_upsert_goes_in_the_window_transaction(
    tmp_path: Path, database: Database, concurrency: int
) -> None:
    """execute() beside each upsert: every item migrates, one audit row per person."""
    table = migrate.SqlDestination(database.connect, "people", "id", paramstyle=database.paramstyle)

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        person = int(item.identity)
        table.upsert({"id": person, "name": item.data["name"]}).run_or_raise()
        table.execute(_audit_sql(database), (person, "upserted")).run_or_raise()

    source = migrate.MemorySource(people(ROWS), window_size=8)
    config = config_of(tmp_path, migrate.Migration("p", source, process, concurrency=concurrency))
    summary = migrate.run(config)
    assert migrate.Counts(migrated=ROWS) == summary.definitions["p"].counts
    expected = [(i, "upserted") for i in range(1, ROWS + 1)]
    assert expected == database.rows("SELECT person, note FROM audit ORDER BY person")


def test_with_batch_false_the_process_writes_through_its_own_connection(
    tmp_path: Path, database: Database
) -> None:
    """batch=False: the process's own connection meets no open transaction; all migrate."""
    table = migrate.SqlDestination(
        database.connect, "people", "id", paramstyle=database.paramstyle, batch=False
    )

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        person = int(item.identity)
        table.upsert({"id": person, "name": item.data["name"]}).run_or_raise()
        own = database.connect_own()
        try:
            own.cursor().execute(_audit_sql(database), (person, "own"))
            own.commit()
        finally:
            own.close()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(5)), process))
    summary = migrate.run(config)
    assert migrate.Counts(migrated=5) == summary.definitions["p"].counts
    assert [(5,)] == database.rows("SELECT count(*) FROM audit")
    assert "batch=False" in repr(table)


def test_a_locked_own_write_fails_with_a_hint_saying_what_to_do(tmp_path: Path) -> None:
    """SQLite, batched, own connection: "database is locked", and the evidence says why."""
    database = _sqlite(tmp_path)
    table = migrate.SqlDestination(database.connect, "people", "id")

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        person = int(item.identity)
        table.upsert({"id": person, "name": item.data["name"]}).run_or_raise()
        own = database.connect_own()
        try:
            own.execute(_audit_sql(database), (person, "own"))
            own.commit()
        finally:
            own.close()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), process))
    migrate.run(config)
    failures = migrate.failures(config, "p")
    assert ["database is locked"] * 2 == [f.error.message for f in failures]
    hint = failures[0].error.details["hint"]
    assert "the window's transaction of sql:people holds the database's write lock" in hint
    assert "execute(sql, params)" in hint
    assert "batch=False" in hint


def test_a_failing_own_statement_fails_its_item_alone(tmp_path: Path, database: Database) -> None:
    """A refused audit insert (NOT NULL) fails that item; the others' rows are committed."""
    table = migrate.SqlDestination(database.connect, "people", "id", paramstyle=database.paramstyle)

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        person = int(item.identity)
        table.upsert({"id": person, "name": item.data["name"]}).run_or_raise()
        note = None if person == 3 else "upserted"
        table.execute(_audit_sql(database), (person, note)).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(5)), process))
    migrate.run(config)
    assert {"1": "migrated", "2": "migrated", "3": "failed", "4": "migrated", "5": "migrated"} == (
        states(config, "p")
    )
    (failure,) = migrate.failures(config, "p")
    assert ("destination", "DestinationError") == (failure.error.kind, failure.error.type)
    assert failure.error.message.startswith(
        "sql:people: statement 'INSERT INTO audit (person, note) VALUES"
    )
    assert [(1,), (2,), (4,), (5,)] == database.rows("SELECT person FROM audit ORDER BY person")


def test_execute_returns_rows_and_works_outside_a_run(database: Database) -> None:
    """Outside a run: its own transaction; RETURNING and SELECT rows come back as tuples."""
    table = migrate.SqlDestination(database.connect, "people", "id", paramstyle=database.paramstyle)
    table.upsert({"id": 7, "name": "seven"}).run_or_raise()
    returned = table.execute(
        f"INSERT INTO audit (person, note) VALUES ({database.marker}, {database.marker}) "
        "RETURNING person, note",
        (7, "by hand"),
    ).run_or_raise()
    assert [(7, "by hand")] == returned
    assert [] == table.execute("DELETE FROM audit").run_or_raise()
    assert [(0,)] == table.execute("SELECT count(*) FROM audit").run_or_raise()


@pytest.mark.parametrize(
    "sql",
    ["COMMIT", "  rollback", "BEGIN", "begin transaction", "SAVEPOINT x", "RELEASE x", "END", ""],
)
def test_transaction_statements_are_refused_at_once(sql: str) -> None:
    """execute() runs in the window's transaction: BEGIN, COMMIT, ... are a ValueError."""
    table = migrate.SqlDestination(lambda: sqlite3.connect(":memory:"), "people", "id")
    with pytest.raises(ValueError, match="execute"):
        table.execute(sql)


CRASH_CONFIG = """
import sqlite3
import time
from pathlib import Path

import migrate

HERE = Path(__file__).resolve().parent


def connect():
    return sqlite3.connect(HERE / "dest.db", timeout=30)


people = migrate.SqlDestination(connect, "people", "id")


def process(item, scope):
    person = int(item.identity)
    people.upsert({"id": person, "name": f"person {person}"}).run_or_raise()
    audit = "INSERT INTO audit (person, note) VALUES (?, ?)"
    people.execute(audit, (person, "upserted")).run_or_raise()
    if person == 15 and not (HERE / "release").exists():
        (HERE / "blocked").write_text("")
        time.sleep(120)


source = migrate.MemorySource([{"id": i} for i in range(1, 31)], window_size=10)
config = migrate.Config([migrate.Migration("p", source, process)], store="sqlite:///state.db")
"""


@pytest.mark.timeout(120)
def test_a_run_killed_mid_window_keeps_audit_rows_and_states_together(tmp_path: Path) -> None:
    """kill -9 mid-window: its upserts and audit rows vanish with it; the rerun writes each once."""
    database = _sqlite(tmp_path)
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
    committed = [(i,) for i in range(1, 11)]
    assert committed == database.rows("SELECT person FROM audit ORDER BY person")
    assert committed == database.rows("SELECT id FROM people ORDER BY id")
    (tmp_path / "release").write_text("")
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert 0 == rerun.returncode, rerun.stderr
    every = [(i,) for i in range(1, 31)]
    assert every == database.rows("SELECT person FROM audit ORDER BY person")
    assert every == database.rows("SELECT id FROM people ORDER BY id")


def test_a_statement_smuggling_a_commit_never_leaves_an_item_stored_migrated(
    tmp_path: Path, database: Database
) -> None:
    """``INSERT ...; COMMIT``: refused (sqlite3), or it ends the window's transaction
    (psycopg), and then no item of the window is stored as migrated."""
    table = migrate.SqlDestination(database.connect, "people", "id", paramstyle=database.paramstyle)

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        person = int(item.identity)
        table.upsert({"id": person, "name": item.data["name"]}).run_or_raise()
        sql = _audit_sql(database)
        if person == 2:
            sql = f"INSERT INTO audit (person, note) VALUES ({person}, 'x'); COMMIT"
            table.execute(sql).run_or_raise()
        table.execute(sql, (person, "upserted")).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), process))
    migrate.run(config)
    if database.paramstyle == "qmark":  # sqlite3 runs one statement at a time: refused
        assert {"1": "migrated", "2": "failed", "3": "migrated"} == states(config, "p")
        assert [(1,), (3,)] == database.rows("SELECT person FROM audit ORDER BY person")
        return
    assert {"1": "failed", "2": "failed", "3": "failed"} == states(config, "p")
    messages = [f.error.message for f in migrate.failures(config, "p")]
    assert all("ended the window's transaction" in m for m in messages), messages


def test_execute_refuses_what_is_not_a_statement() -> None:
    """A non-string statement is a ValueError at once, naming what was given."""
    table = migrate.SqlDestination(lambda: sqlite3.connect(":memory:"), "people", "id")
    with pytest.raises(ValueError, match="execute needs one SQL statement, got 42"):
        table.execute(42)  # type: ignore[arg-type]
