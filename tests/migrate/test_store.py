"""The SQLite store: file, WAL, schema version, cursors with window states, queries."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people


def test_store_is_created_on_demand_in_wal_mode(tmp_path: Path) -> None:
    """Opening a store creates its folder and file, in WAL journal mode."""
    with migrate.open_store("sqlite:///deep/er/state.db", base_dir=tmp_path) as store:
        assert store.path == tmp_path / "deep" / "er" / "state.db"
    db = sqlite3.connect(tmp_path / "deep" / "er" / "state.db")
    try:
        assert "wal" == db.execute("PRAGMA journal_mode").fetchone()[0]
        assert [(migrate.SCHEMA_VERSION,)] == db.execute(
            "SELECT version FROM schema_version"
        ).fetchall()
    finally:
        db.close()


def test_absolute_store_url(tmp_path: Path) -> None:
    """``sqlite:////abs/path`` is an absolute path."""
    target = tmp_path / "abs.db"
    with migrate.open_store(f"sqlite:///{target}") as store:
        assert target == store.path


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A store written by a newer schema version is refused with a clear error."""
    path = tmp_path / "state.db"
    migrate.open_store(f"sqlite:///{path}").close()
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_version SET version = ?", (migrate.SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(migrate.StoreSchemaError, match="newer than this version of migrate"):
        migrate.open_store(f"sqlite:///{path}")


def test_reopening_keeps_the_schema_version_row_single(tmp_path: Path) -> None:
    """Opening an existing store does not add schema rows or lose data."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    for _ in range(3):
        migrate.open_store(url).close()
    db = sqlite3.connect(tmp_path / "s.db")
    try:
        assert 1 == db.execute("SELECT count(*) FROM schema_version").fetchone()[0]
    finally:
        db.close()


def test_status_report_json_keys(tmp_path: Path) -> None:
    """status().to_json() has per-definition stored counts and the latest run."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), noop))
    summary = migrate.run(config)
    document = migrate.status(config).to_json()
    entry = document["definitions"]["p"]
    assert (3, 0, 0, 0) == (
        entry["migrated"],
        entry["skipped"],
        entry["failed"],
        entry["needs_update"],
    )
    assert (summary.run_id, "succeeded") == (
        entry["latest_run"]["run_id"],
        entry["latest_run"]["status"],
    )


def test_status_of_a_never_run_definition(tmp_path: Path) -> None:
    """A definition that never ran has zero counts and no latest run."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop))
    never: dict[str, object] = {"migrated": 0, "skipped": 0, "failed": 0, "needs_update": 0}
    assert {**never, "interrupted": 0, "latest_run": None} == (
        migrate.status(config).to_json()["definitions"]["p"]
    )


def test_failures_json_keys_and_limit(tmp_path: Path) -> None:
    """failures() lists identity, run_id and error evidence; limit caps it."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        raise RuntimeError(f"no {item.identity}")

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), process))
    migrate.run(config)
    (first,) = migrate.failures(config, "p", limit=1)
    document = first.to_json()
    assert {"identity", "run_id", "error"} <= set(document)
    assert {"kind", "type", "message", "details", "attempts"} == set(document["error"])
    assert ("1", "RuntimeError", "no 1") == (
        document["identity"],
        document["error"]["type"],
        document["error"]["message"],
    )


def test_runs_newest_first_with_limit(tmp_path: Path) -> None:
    """runs() lists runs newest first; limit caps the list."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), noop))
    ids = [migrate.run(config).run_id for _ in range(3)]
    assert list(reversed(ids)) == [r.run_id for r in migrate.runs(config)]
    assert [ids[-1]] == [r.run_id for r in migrate.runs(config, limit=1)]
    assert {"run_id", "status", "mode", "definitions"} <= set(migrate.runs(config)[0].to_json())


# The schema of version 2 (before positions and process tokens), as that release wrote it.
_SCHEMA_2 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE item_states (definition TEXT NOT NULL, identity TEXT NOT NULL, status TEXT NOT NULL,
    reason TEXT, error TEXT, version TEXT, journal TEXT, tracking TEXT, run_id TEXT,
    updated_at REAL NOT NULL, PRIMARY KEY (definition, identity)) WITHOUT ROWID;
CREATE INDEX item_states_by_status ON item_states (definition, status);
CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL, mode TEXT NOT NULL, definitions TEXT NOT NULL, error TEXT,
    started_at REAL NOT NULL, ended_at REAL, pid INTEGER NOT NULL, host TEXT NOT NULL);
CREATE TABLE cursors (definition TEXT PRIMARY KEY, cursor TEXT, updated_at REAL NOT NULL);
CREATE TABLE contracts (definition TEXT PRIMARY KEY, contract TEXT NOT NULL,
    fingerprint TEXT NOT NULL, run_id TEXT NOT NULL, recorded_at REAL NOT NULL);
CREATE TABLE locks (definition TEXT PRIMARY KEY, run_id TEXT NOT NULL, pid INTEGER NOT NULL,
    host TEXT NOT NULL, acquired_at REAL NOT NULL);
"""


def _old_store(path: Path, version: int) -> None:
    """Write a store as schema *version* (1 or 2) left it, holding one migrated state of p."""
    db = sqlite3.connect(path)
    with db:
        db.executescript(_SCHEMA_2)
        if version == 1:
            db.execute("DROP TABLE contracts")
        db.execute("INSERT INTO schema_version VALUES (?)", (version,))
        db.execute(
            "INSERT INTO item_states VALUES ('p', '1', 'migrated', NULL, NULL, 'v1', NULL, "
            "'{\"dest\": 7}', 'old-run', 0)"
        )
    db.close()


@pytest.mark.parametrize("version", [1, 2])
def test_older_store_is_upgraded_keeping_its_data(tmp_path: Path, version: int) -> None:
    """A schema-1 or -2 store gains the later tables and columns and the current version."""
    _old_store(tmp_path / "state.db", version)
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), noop))
    with config.open_store() as store:
        (state,) = store.items("p")
        assert (None, "migrated", {"dest": 7}, None) == (
            store.contract("p"),
            state.status,
            state.tracking,
            state.position,
        )
    db = sqlite3.connect(tmp_path / "state.db")
    try:
        assert [(migrate.SCHEMA_VERSION,)] == db.execute(
            "SELECT version FROM schema_version"
        ).fetchall()
    finally:
        db.close()
    migrate.run(config)  # the first run since the upgrade records the contract
    with config.open_store() as store:
        assert migrate.Contract("memory", "id", None, "direct") == store.contract("p")
        assert {"1": "migrated", "2": "migrated"} == {
            s.identity: s.status for s in store.items("p")
        }


def test_older_store_reads_as_it_is_when_read_only(tmp_path: Path) -> None:
    """A read-only open of a schema-2 store reads it without upgrading it."""
    _old_store(tmp_path / "state.db", 2)
    with migrate.open_store("sqlite:///state.db", base_dir=tmp_path, read_only=True) as store:
        assert ("1", None) == (store.items("p")[0].identity, store.items("p")[0].position)
        assert () == store.locks()
    db = sqlite3.connect(tmp_path / "state.db")
    try:
        assert [(2,)] == db.execute("SELECT version FROM schema_version").fetchall()
    finally:
        db.close()


def _schema_3_store(path: Path) -> None:
    """A store as schema 3 left it (before update requests), holding one migrated state of p."""
    with migrate.SqliteStore(path) as store:
        store.create_run("old-run", "normal", {})
        store.commit_window(
            migrate.WindowCommit("p", "old-run", [migrate.StateWrite("1", "migrated", "v1")], {})
        )
    db = sqlite3.connect(path)
    with db:
        db.execute("DROP TABLE update_requests")
        db.execute("UPDATE schema_version SET version = 3")
    db.close()


def test_a_schema_3_store_gains_update_requests_keeping_its_data(tmp_path: Path) -> None:
    """Opened for writing, a schema-3 store is upgraded in place (to the current version);
    read-only, it is not."""
    path = tmp_path / "state.db"
    _schema_3_store(path)
    with migrate.open_store("sqlite:///state.db", base_dir=tmp_path, read_only=True) as store:
        assert (None, "migrated") == (store.update_request("p"), store.items("p")[0].status)
    with migrate.open_store("sqlite:///state.db", base_dir=tmp_path) as store:
        store.request_update("p", "old-run")
        assert (["1"], "old-run") == (
            [s.identity for s in store.items("p")],
            getattr(store.update_request("p"), "run_id", None),
        )
    db = sqlite3.connect(path)
    try:
        assert [(migrate.SCHEMA_VERSION,)] == db.execute(
            "SELECT version FROM schema_version"
        ).fetchall()
    finally:
        db.close()
