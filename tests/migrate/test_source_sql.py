"""SqlSource over sqlite3: keyset windows, direct lookups, checked identifiers, errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import migrate


def _database(tmp_path: Path, n: int) -> Callable[[], sqlite3.Connection]:
    path = tmp_path / "src.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE authors (id INTEGER PRIMARY KEY, name TEXT, rev INTEGER)")
        # Inserted out of order: reads must follow the identity order.
        db.executemany(
            "INSERT INTO authors VALUES (?, ?, ?)",
            [(i, f"author {i}", 1) for i in reversed(range(1, n + 1))],
        )
    db.close()
    return lambda: sqlite3.connect(path)


def test_reads_rows_in_identity_order_with_a_keyset_cursor(tmp_path: Path) -> None:
    """Windows follow the identity order; the cursor is the last identity read."""
    source = migrate.SqlSource(_database(tmp_path, 7), "authors", window_size=3)
    cursor: migrate.Cursor = None
    seen: list[str] = []
    while True:
        window = source.read(cursor).run_or_raise()
        seen += [item.identity for item in window.items]
        cursor = window.next_cursor
        if window.done:
            break
    assert [str(i) for i in range(1, 8)] == seen
    assert cursor == {"after": 7}


def test_keyset_cursor_sees_rows_inserted_after_it(tmp_path: Path) -> None:
    """A saved cursor continues after its identity, including rows added since."""
    connect = _database(tmp_path, 3)
    source = migrate.SqlSource(connect, "authors", window_size=10)
    cursor = source.read(None).run_or_raise().next_cursor
    with connect() as db:
        db.execute("INSERT INTO authors VALUES (4, 'late', 1)")
    assert [item.identity for item in source.read(cursor).run_or_raise().items] == ["4"]


def test_version_column_and_data(tmp_path: Path) -> None:
    """Item data is the row as a dict; version is the named column's value as a string."""
    source = migrate.SqlSource(_database(tmp_path, 1), "authors", version="rev")
    item = source.read(None).run_or_raise().items[0]
    assert migrate.Item("1", {"id": 1, "name": "author 1", "rev": 1}, "1") == item


def test_lookup_is_direct_by_key(tmp_path: Path) -> None:
    """SqlSource declares ``direct`` and finds rows by identity string."""
    source = migrate.SqlSource(_database(tmp_path, 5), "authors")
    assert source.lookup_strategy == "direct"
    found = source.lookup("4").run_or_raise()
    assert found is not None
    assert found.data["name"] == "author 4"
    assert source.lookup("40").run_or_raise() is None


def test_count(tmp_path: Path) -> None:
    """count() is the table's row count."""
    assert migrate.SqlSource(_database(tmp_path, 5), "authors").count() == 5


@pytest.mark.parametrize("table", ["authors; DROP TABLE x", "a b", "", "a.b.c", '"x"'])
def test_table_names_are_checked(tmp_path: Path, table: str) -> None:
    """Table names that are not plain SQL names are refused, naming the argument."""
    with pytest.raises(ValueError, match="table must be a plain SQL name"):
        migrate.SqlSource(_database(tmp_path, 1), table)


def test_identity_column_is_checked(tmp_path: Path) -> None:
    """The identity column name is checked too."""
    with pytest.raises(ValueError, match="identity must be a plain SQL name"):
        migrate.SqlSource(_database(tmp_path, 1), "authors", identity="id--")


def test_schema_qualified_table_is_quoted(tmp_path: Path) -> None:
    """``main.authors`` is accepted and quoted part by part."""
    source = migrate.SqlSource(_database(tmp_path, 2), "main.authors")
    assert len(source.read(None).run_or_raise().items) == 2


def test_query_failure_is_a_source_error_keeping_the_driver_error(tmp_path: Path) -> None:
    """A missing table fails with SourceError whose cause is the sqlite3 error."""
    source = migrate.SqlSource(_database(tmp_path, 1), "missing")
    failure = source.read(None).run().failure()
    assert isinstance(failure, migrate.SourceError)
    assert isinstance(failure.cause, sqlite3.OperationalError)


def test_connect_failure_is_a_source_error(tmp_path: Path) -> None:
    """An error from the connection factory becomes a SourceError with it as cause."""

    def connect() -> sqlite3.Connection:
        raise ConnectionRefusedError("db down")

    failure = migrate.SqlSource(connect, "authors").read(None).run().failure()
    assert isinstance(failure.cause, ConnectionRefusedError)
    assert "cannot connect: db down" in str(failure)


def test_connections_are_closed_after_each_read(tmp_path: Path) -> None:
    """Every connection opened for a read or lookup is closed."""
    inner = _database(tmp_path, 3)
    opened: list[sqlite3.Connection] = []
    closed: list[int] = []

    class Tracked:
        def __init__(self) -> None:
            self.db = inner()
            opened.append(self.db)

        def cursor(self) -> sqlite3.Cursor:
            return self.db.cursor()

        def commit(self) -> None:
            self.db.commit()

        def rollback(self) -> None:
            self.db.rollback()

        def close(self) -> None:
            closed.append(1)
            self.db.close()

    source = migrate.SqlSource(Tracked, "authors")
    source.read(None).run_or_raise()
    source.lookup("2").run_or_raise()
    assert (len(opened), len(closed)) == (2, 2)
