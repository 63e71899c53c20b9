"""The index of states by status holds the states that are not migrated: upgrades and lookups."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import cast

import psycopg
import pytest
from psycopg import sql

import migrate
from migrate import ItemStatus, StateWrite, WindowCommit
from migrate._store_postgres import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from tests.postgres_server import PostgresServer

#: States of every status, and more migrated ones than the rest.
_STATES = [
    *(StateWrite(f"m{i}", "migrated", "v") for i in range(20)),
    StateWrite("f1", "failed", "v", error='{"type": "E", "message": "m"}'),
    StateWrite("f2", "failed", "v", error='{"type": "E", "message": "m"}'),
    StateWrite("s1", "skipped", "v", reason="no"),
    StateWrite("i1", "interrupted", "v", error='{"type": "I", "message": "m"}'),
    StateWrite("n1", "needs-update", "v"),
]


def _answers(store: migrate.Store) -> object:
    """What the lookups by status say of `_STATES`."""
    statuses: tuple[ItemStatus, ...] = (
        "migrated",
        "failed",
        "skipped",
        "interrupted",
        "needs-update",
    )
    return (
        {status: store.identities("d", status) for status in statuses},
        {status: store.count_status("d", status) for status in statuses},
        store.count_status("d", "failed", "r1"),
        store.counts("d"),
    )


_EXPECTED = (
    {
        "migrated": sorted(f"m{i}" for i in range(20)),
        "failed": ["f1", "f2"],
        "skipped": ["s1"],
        "interrupted": ["i1"],
        "needs-update": ["n1"],
    },
    {"migrated": 20, "failed": 2, "skipped": 1, "interrupted": 1, "needs-update": 1},
    2,
    migrate.Counts(migrated=20, skipped=1, failed=2, interrupted=1, needs_update=1),
)


def _sqlite_indexes(path: Path) -> dict[str, str]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = "
            "'item_states' AND sql IS NOT NULL"
        ).fetchall()
    finally:
        db.close()
    return dict(rows)


def test_an_older_sqlite_store_gets_the_partial_index_and_answers_alike(tmp_path: Path) -> None:
    """A store of the previous schema (every state in the status index) is upgraded: that
    index is dropped, the one of the states that are not migrated made; answers unchanged."""
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}"
    with migrate.open_store(url) as store:
        store.create_run("r1", "normal", {})
        store.commit_window(WindowCommit("d", "r1", _STATES, {}))
    db = sqlite3.connect(path)
    with db:
        db.execute("DROP INDEX item_states_waiting")
        db.execute("CREATE INDEX item_states_by_status ON item_states (definition, status)")
        db.execute("UPDATE schema_version SET version = ?", (migrate.SCHEMA_VERSION - 1,))
    db.close()
    with migrate.open_store(url, read_only=True) as store:
        assert _EXPECTED == _answers(store)
    with migrate.open_store(url) as store:
        assert _EXPECTED == _answers(store)
    (name,) = _sqlite_indexes(path)
    assert "item_states_waiting" == name
    assert "WHERE status <> 'migrated'" in _sqlite_indexes(path)[name]
    db = sqlite3.connect(path)
    try:
        assert [(migrate.SCHEMA_VERSION,)] == db.execute(
            "SELECT version FROM schema_version"
        ).fetchall()
    finally:
        db.close()


def test_sqlite_lookups_by_status_use_the_partial_index(tmp_path: Path) -> None:
    """The statements the store runs for failed (and interrupted) states read the index."""
    path = tmp_path / "state.db"
    with migrate.open_store(f"sqlite:///{path}") as store:
        store.create_run("r1", "normal", {})
        store.commit_window(WindowCommit("d", "r1", _STATES, {}))
        db = cast(sqlite3.Connection, getattr(store, "_db"))  # noqa: B009
        statements: list[str] = []
        db.set_trace_callback(statements.append)
        store.identities("d", "failed")
        store.count_status("d", "interrupted")
        db.set_trace_callback(None)
        plans = [db.execute(f"EXPLAIN QUERY PLAN {text}").fetchall() for text in statements]
    assert 2 == len(plans)
    assert all("item_states_waiting" in str(plan) for plan in plans), plans


@pytest.mark.parametrize("status", ["migrated", "failed"])
def test_sqlite_by_status_lookups_name_the_index_condition(status: str) -> None:
    """The query of a status other than migrated names the index's condition in so many
    words (SQLite uses a partial index only then); migrated's does not (it is not indexed)."""
    from migrate._store_sqlite import _by_status  # pyright: ignore[reportPrivateUsage]

    expected = "status = ?" if status == "migrated" else "status <> 'migrated' AND status = ?"
    assert expected == _by_status(status)


def _schema(url: str) -> sql.Identifier:
    return sql.Identifier(url.rsplit("schema=", 1)[1].split("&", 1)[0])


def test_an_older_postgres_store_gets_the_partial_index_and_answers_alike(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """The PostgreSQL store's upgrade step drops the index of every state by status and makes
    the one of the states that are not migrated; read-only it answers alike before."""
    with migrate.open_store(postgres_url) as store:
        store.create_run("r1", "normal", {})
        store.commit_window(WindowCommit("d", "r1", _STATES, {}))
    schema = _schema(postgres_url)
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP INDEX {}.item_states_waiting").format(schema))
        conn.execute(
            sql.SQL(
                "CREATE INDEX item_states_by_status ON {}.item_states (definition, status)"
            ).format(schema)
        )
        conn.execute(
            sql.SQL("UPDATE {}.migrate_meta SET value = %s WHERE key = 'version'").format(schema),
            (str(POSTGRES_SCHEMA_VERSION - 1),),
        )

    def indexes() -> list[tuple[str, str]]:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
                "AND tablename = 'item_states' AND indexname <> 'item_states_pkey'",
                (schema.as_string(conn).strip('"'),),
            ).fetchall()
        return [(str(row[0]), str(row[1])) for row in rows]

    with migrate.open_store(postgres_url, read_only=True) as store:
        assert _EXPECTED == _answers(store)
    assert ["item_states_by_status"] == [name for name, _ in indexes()]
    with migrate.open_store(postgres_url) as store:
        assert _EXPECTED == _answers(store)
    ((name, definition),) = indexes()
    assert "item_states_waiting" == name
    assert "WHERE (status <> 'migrated'::text)" in definition
