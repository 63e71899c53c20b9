"""A source's identity= / version= field missing from its records: a clear error, no state."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people, states, write_csv, write_jsonl


def _versioned(n: int) -> list[dict[str, str]]:
    return [{**row, "rev": "1"} for row in people(n)]


def _table(tmp_path: Path) -> Callable[[], sqlite3.Connection]:
    path = tmp_path / "src.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE authors (id INTEGER PRIMARY KEY, name TEXT, rev INTEGER)")
        db.executemany("INSERT INTO authors (id, name) VALUES (?, ?)", [(1, "Ada"), (2, "Alan")])
    db.close()
    return lambda: sqlite3.connect(path)


def _execute(connect: Callable[[], sqlite3.Connection], sql: str) -> None:
    db = connect()
    with db:
        db.execute(sql)
    db.close()


def _cursor(config: migrate.Config, definition_id: str) -> migrate.Cursor:
    with config.open_store() as store:
        return store.cursor(definition_id)


def test_csv_version_column_missing_from_the_header_fails_the_read(tmp_path: Path) -> None:
    """A version= column the header lacks is a SourceError naming it, the file and the header."""
    path = write_csv(tmp_path / "p.csv", people(3))
    failure = migrate.CsvSource(path, version="updated").read(None).run().failure()
    assert isinstance(failure, migrate.SourceError)
    assert (
        f"csv:{path} header has no version field 'updated'; its fields are 'id', 'name'"
    ) in str(failure)


def test_csv_identity_column_missing_from_the_header_names_the_header(tmp_path: Path) -> None:
    """An identity= column the header lacks is a SourceError listing the header's columns."""
    path = write_csv(tmp_path / "p.csv", people(3))
    failure = migrate.CsvSource(path, identity="isbn").read(None).run().failure()
    assert "header has no identity field 'isbn'; its fields are 'id', 'name'" in str(failure)


def test_csv_lookup_with_a_missing_version_column_fails_too(tmp_path: Path) -> None:
    """A lookup by identity checks the header as a read does: no item without its version."""
    path = write_csv(tmp_path / "p.csv", people(3))
    failure = migrate.CsvSource(path, version="updated").lookup("2").run().failure()
    assert "has no version field 'updated'" in str(failure)


def test_jsonl_record_without_the_version_field_names_its_line(tmp_path: Path) -> None:
    """A JSONL object lacking the version= field fails the read naming the line and its fields."""
    rows = _versioned(3)
    del rows[1]["rev"]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    failure = migrate.JsonlSource(path, version="rev").read(None).run().failure()
    assert isinstance(failure, migrate.SourceError)
    assert (f"jsonl:{path} line 2 has no version field 'rev'; its fields are 'id', 'name'") in str(
        failure
    )


def test_null_or_empty_version_values_fall_back_to_a_content_hash(tmp_path: Path) -> None:
    """A null or empty version value is versioned by content: equal content, equal version."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": 1, "rev": None}, {"id": 2, "rev": ""}])
    first = migrate.JsonlSource(path, version="rev").read(None).run_or_raise().items
    again = migrate.JsonlSource(path, version="rev").read(None).run_or_raise().items
    assert all(item.version for item in first)
    assert [i.version for i in first] == [i.version for i in again]
    assert first[0].version != first[1].version


def test_items_with_null_versions_are_unchanged_until_their_content_changes(
    tmp_path: Path,
) -> None:
    """After a file change restarts discovery, only the null-versioned item that changed runs."""
    seen: list[str] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append(item.identity)

    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"id": 1, "rev": None, "name": "a"}, {"id": 2, "rev": None, "name": "b"}])
    config = migrate.Config(
        [migrate.Migration("p", migrate.JsonlSource(path, version="rev"), process)],
        store="sqlite:///state.db",
        base_dir=tmp_path,
    )
    migrate.run(config)
    write_jsonl(path, [{"id": 1, "rev": None, "name": "a"}, {"id": 2, "rev": None, "name": "B"}])
    second = migrate.run(config)
    assert (["1", "2", "2"], 1) == (seen, second.definitions["p"].counts.unchanged)


def test_jsonl_lookup_passes_over_a_record_without_identity(tmp_path: Path) -> None:
    """A lookup meeting an object without the identity field goes on and finds the others."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": 1}, {"key": 2}, {"id": 3}])
    found = migrate.JsonlSource(path).lookup("3").run_or_raise()
    assert isinstance(found, migrate.Item)
    assert ("3", "line 3") == (found.identity, found.position)


def test_jsonl_lookup_fails_when_no_record_has_the_identity_field(tmp_path: Path) -> None:
    """A file in which no object has the identity field fails the lookup naming the field."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"key": 1}, {"key": 2}])
    failure = migrate.JsonlSource(path).lookup("2").run().failure()
    assert "line 1 has no identity field 'id'; its fields are 'key'" in str(failure)


def test_sql_version_column_missing_from_the_table_fails_the_read(tmp_path: Path) -> None:
    """A version= column the table lacks is a SourceError naming it, the table and its columns."""
    source = migrate.SqlSource(_table(tmp_path), "authors", version="updated")
    failure = source.read(None).run().failure()
    assert isinstance(failure, migrate.SourceError)
    assert (
        "sql:authors table 'authors' has no version field 'updated'; "
        "its fields are 'id', 'name', 'rev'"
    ) in str(failure)


def test_sql_missing_columns_fail_even_an_empty_read_and_lookups(tmp_path: Path) -> None:
    """The columns are checked when no row matches too: lookups and reads past the end."""
    connect = _table(tmp_path)
    failures = [
        migrate.SqlSource(connect, "authors", identity="isbn").lookup("99").run().failure(),
        migrate.SqlSource(connect, "authors", version="updated")
        .read({"after": 99})
        .run()
        .failure(),
    ]
    assert ["identity field 'isbn'", "version field 'updated'"] == [
        str(f).split(" has no ")[1].split(";")[0] for f in failures
    ]


def test_memory_item_without_the_version_field_fails_at_construction() -> None:
    """MemorySource checks version= on every item when built, naming the item and its fields."""
    with pytest.raises(migrate.SourceError) as caught:
        migrate.MemorySource([{"id": 1, "rev": 1}, {"id": 2}], version="rev")
    assert "memory item 1 has no version field 'rev'; its fields are 'id'" in str(caught.value)


def test_memory_version_typo_fails_config_loading_naming_the_field(tmp_path: Path) -> None:
    """A config building a MemorySource with a missing version field fails to load."""
    path = tmp_path / "migrate_config.py"
    path.write_text(
        "import migrate\n"
        "src = migrate.MemorySource([{'id': 1, 'rev': 1}], version='revision')\n"
        "config = migrate.Config([migrate.Migration('a', src, lambda item, scope: None)])\n",
        encoding="utf-8",
    )
    with pytest.raises(migrate.ConfigError) as caught:
        migrate.load_config(path)
    assert "no version field 'revision'" in str(caught.value.__cause__)


def test_run_with_a_missing_version_field_fails_and_stores_nothing(tmp_path: Path) -> None:
    """A normal run stops the definition with the message; no state, no cursor is saved."""
    path = write_csv(tmp_path / "p.csv", people(5))
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path, version="updated"), noop)
    )
    summary = migrate.run(config)
    result = summary.definitions["p"]
    assert (summary.status, result.status, result.counts) == ("failed", "failed", migrate.Counts())
    assert result.error is not None
    assert "has no version field 'updated'; its fields are 'id', 'name'" in result.error
    assert ({}, None) == (states(config, "p"), _cursor(config, "p"))


@pytest.mark.parametrize(
    "options",
    [
        migrate.RunOptions(failed=True),
        migrate.RunOptions(ids=("1", "2")),
        migrate.RunOptions(update=True),
    ],
    ids=["failed", "ids", "update"],
)
@pytest.mark.parametrize("kind", ["csv", "sql"])
def test_a_version_field_gone_from_the_data_leaves_stored_states_as_they_were(
    tmp_path: Path, kind: str, options: migrate.RunOptions
) -> None:
    """failed / ids / update runs over data that lost its version field change no state."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity == "3":
            raise ValueError("bad")

    source: migrate.Source
    if kind == "csv":
        path = write_csv(tmp_path / "p.csv", _versioned(4))
        source = migrate.CsvSource(path, version="rev")
    else:
        connect = _table(tmp_path)
        _execute(connect, "INSERT INTO authors VALUES (3, 'Ann', 1), (4, 'Bob', 1)")
        source = migrate.SqlSource(connect, "authors", version="rev")
    config = config_of(tmp_path, migrate.Migration("p", source, process))
    migrate.run(config)
    before = states(config, "p")
    if kind == "csv":
        write_csv(path, people(4))
    else:
        _execute(connect, "ALTER TABLE authors DROP COLUMN rev")
    summary = migrate.run(config, options)
    result = summary.definitions["p"]
    assert result.error is not None
    assert ("failed", "has no version field 'rev'", before) == (
        summary.status,
        result.error[result.error.index("has no") :].split(";")[0],
        states(config, "p"),
    )
    assert {"1": "migrated", "2": "migrated", "3": "failed", "4": "migrated"} == before
