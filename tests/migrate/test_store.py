"""The SQLite store: file, WAL, schema version, cursors with window states, queries."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import migrate
from migrate._state import DefinitionResult
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


def test_window_states_and_cursor_commit_together(tmp_path: Path) -> None:
    """commit_window writes the states, the run's counts and the cursor in one transaction."""
    with migrate.open_store("sqlite:///s.db", base_dir=tmp_path) as store:
        store.create_run("r1", "normal", {})
        row = ("d", "1", "migrated", None, None, "v1", None, None, "r1", 0.0)
        results = {"d": DefinitionResult("normal", "running", migrate.Counts(migrated=1))}
        store.commit_window(
            "d", [row], run_id="r1", definitions=results, cursor={"position": 1}, save_cursor=True
        )
        assert {"position": 1} == store.cursor("d")
        assert migrate.Counts(migrated=1) == store.counts("d")
        record = store.run("r1")
        assert record is not None
        assert migrate.Counts(migrated=1) == record.definitions["d"].counts


def test_failed_commit_keeps_the_old_cursor(tmp_path: Path) -> None:
    """If writing a window's states fails, its cursor is not saved either."""
    with migrate.open_store("sqlite:///s.db", base_dir=tmp_path) as store:
        store.create_run("r1", "normal", {})
        bad_row: Any = ("d", "1", "migrated", None, None, None, None, None, "r1")  # 1 column short
        with pytest.raises(sqlite3.ProgrammingError):
            store.commit_window(
                "d",
                [bad_row],
                run_id="r1",
                definitions={},
                cursor={"position": 5},
                save_cursor=True,
            )
        assert store.cursor("d") is None


def test_one_state_per_definition_and_identity(tmp_path: Path) -> None:
    """Writing an identity again replaces its state: never two states for one item."""
    with migrate.open_store("sqlite:///s.db", base_dir=tmp_path) as store:
        store.create_run("r", "normal", {})
        for status in ("failed", "migrated"):
            row = ("d", "1", status, None, None, None, None, None, "r", 0.0)
            store.commit_window("d", [row], run_id="r", definitions={})
        assert [("1", "migrated")] == [(s.identity, s.status) for s in store.items("d")]


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
    assert {"migrated": 0, "skipped": 0, "failed": 0, "needs_update": 0, "latest_run": None} == (
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


def test_version_1_store_is_upgraded_keeping_its_data(tmp_path: Path) -> None:
    """A schema-1 store (before contracts) gets the contracts table and version 2, states kept."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), noop))
    migrate.run(config)
    db = sqlite3.connect(tmp_path / "state.db")
    with db:
        db.execute("DROP TABLE contracts")
        db.execute("UPDATE schema_version SET version = 1")
    db.close()
    with config.open_store() as store:
        assert (None, 2) == (store.contract("p"), store.counts("p").migrated)
    db = sqlite3.connect(tmp_path / "state.db")
    try:
        assert [(2,)] == db.execute("SELECT version FROM schema_version").fetchall()
    finally:
        db.close()
    migrate.run(config)  # the first run since the upgrade records the contract
    with config.open_store() as store:
        assert migrate.Contract("memory", "id", None, "direct") == store.contract("p")
