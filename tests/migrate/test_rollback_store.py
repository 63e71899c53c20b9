"""The store side of rollbacks on every store: run kinds, rollback attempts, commit_rollback, and
the schema upgrade that added them (SQLite 6, PostgreSQL 4)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import migrate
from migrate import DefinitionResult, RollbackCommit, StateWrite, WindowCommit
from migrate._store_postgres import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from tests.postgres_server import PostgresServer


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[migrate.Store]:
    """A fresh store of each kind."""
    if request.param == "memory":
        yield migrate.MemoryStore()
        return
    url = (
        "sqlite:///state.db"
        if request.param == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    with migrate.open_store(url, base_dir=tmp_path) as opened:
        yield opened


def _attempt(run_id: str, message: str, entries: list[object] | None = None) -> str:
    return json.dumps(
        {
            "run_id": run_id,
            "entries": entries or [],
            "error": {"type": "ValueError", "message": message},
            "failed_at": 1.5,
        }
    )


def _results(rolled_back: int, failed: int) -> dict[str, DefinitionResult]:
    counts = migrate.Counts(rolled_back=rolled_back, failed=failed)
    return {"d": DefinitionResult("rollback", "running", counts)}


def _seed(store: migrate.Store, identities: str = "abcd") -> None:
    store.create_run("r", "normal", {})
    states = [
        StateWrite(i, "migrated", "v1", journal='[{"kind": "change", "key": 1}]')
        for i in identities
    ]
    store.commit_window(WindowCommit("d", "r", states, {}))


def test_runs_have_a_kind(store: migrate.Store) -> None:
    """create_run records "run" unless told "rollback"; every read gives it back."""
    store.create_run("r", "normal", {})
    store.create_run("rb", "rollback", _results(0, 0), kind="rollback")
    assert [("rb", "rollback"), ("r", "run")] == [(r.run_id, r.kind) for r in store.runs()]
    assert "rollback" == getattr(store.run("rb"), "kind", None)
    assert "rollback" == getattr(store.latest_run_for("d"), "kind", None)
    document = store.runs()[0].to_json()
    assert ("rollback", {"rolled_back": 0, "failed": 0, "skipped": 0}) == (
        document["kind"],
        {key: document["definitions"]["d"][key] for key in ("rolled_back", "failed", "skipped")},
    )


def test_commit_rollback_deletes_appends_and_counts_together(store: migrate.Store) -> None:
    """Deleted states go; failed ones keep their state with the attempts appended in order; the
    run's counts are those of the commit; an attempt sent twice, or for a state that is gone,
    is not kept."""
    _seed(store)
    store.create_run("rb", "rollback", _results(0, 0), kind="rollback")
    store.commit_rollback(
        RollbackCommit(
            "d", "rb", ["a", "zz"], [("b", _attempt("rb", "one", [{"k": 1}]))], _results(1, 1)
        )
    )
    again = _attempt("rb2", "two")
    store.commit_rollback(
        RollbackCommit("d", "rb", ["c"], [("b", again), ("b", again)], _results(2, 2))
    )
    store.commit_rollback(
        RollbackCommit("d", "rb", [], [("a", again), ("b", again)], _results(2, 3))
    )
    kept = {s.identity: s for s in store.items("d")}
    assert ["b", "d"] == sorted(kept)
    assert [("rb", "one", [{"k": 1}]), ("rb2", "two", [])] == [
        (a["run_id"], a["error"]["message"], a["entries"]) for a in kept["b"].rollback_attempts
    ]
    assert ((), "migrated", "v1") == (
        kept["d"].rollback_attempts,
        kept["b"].status,
        kept["b"].version,
    )
    assert ({"kind": "change", "key": 1},) == kept["b"].journal
    record = store.run("rb")
    assert record is not None
    assert (2, 3) == (
        record.definitions["d"].counts.rolled_back,
        record.definitions["d"].counts.failed,
    )


def test_failures_list_the_states_whose_rollback_failed(store: migrate.Store) -> None:
    """A failed state, and a migrated one whose rollback failed, in natural order; the latter's
    error is its last attempt's (kind rollback, attempts counted)."""
    store.create_run("r", "normal", {})
    failed = json.dumps(
        {"kind": "process", "type": "E", "message": "m", "details": {}, "attempts": 1}
    )
    store.commit_window(
        WindowCommit(
            "d",
            "r",
            [
                StateWrite("10", "migrated", None),
                StateWrite("9", "failed", None, error=failed),
                StateWrite("8", "migrated", None),
            ],
            {},
        )
    )
    store.commit_rollback(
        RollbackCommit(
            "d", "r", [], [("10", _attempt("x", "first")), ("10", _attempt("y", "second"))], {}
        )
    )
    found = store.failures("d")
    assert [("9", "failed", 0), ("10", "migrated", 2)] == [
        (f.identity, f.status, len(f.rollback_attempts)) for f in found
    ]
    evidence = found[1].error
    assert ("rollback", "ValueError", "second", 2, "y") == (
        evidence.kind,
        evidence.type,
        evidence.message,
        evidence.attempts,
        evidence.details["run_id"],
    )
    assert {"identity", "status", "rollback_attempts", "error", "journal"} <= set(
        found[1].to_json()
    )


def test_a_state_written_again_starts_without_attempts_and_a_mark_keeps_them(
    store: migrate.Store,
) -> None:
    """A run writing a state again drops its attempts (made against the journal it replaces);
    marking it needs-update keeps them."""
    _seed(store, "ab")
    store.commit_rollback(
        RollbackCommit("d", "r", [], [("a", _attempt("x", "1")), ("b", _attempt("x", "1"))], {})
    )
    store.commit_window(WindowCommit("d", "r", [StateWrite("a", "migrated", "v2")], {}))
    store.mark_needs_update("d", "r")
    kept = {s.identity: s for s in store.items("d")}
    assert ((), 1) == (kept["a"].rollback_attempts, len(kept["b"].rollback_attempts))
    assert "needs-update" == kept["b"].status


@pytest.mark.parametrize(
    ("journal", "problem"),
    [
        ('{"a": 1}', "the stored journal is a JSON object, not a list of entries"),
        ("5", "the stored journal is a JSON number, not a list of entries"),
        ('["x", {"kind": "change"}]', "stored journal entry 0 is a JSON string, not an object"),
    ],
)
def test_a_journal_that_is_not_a_list_of_entries_reads_with_its_problem(
    store: migrate.Store, journal: str, problem: str
) -> None:
    """Never an exception on reading: the problem is said, the objects that could be read kept."""
    store.create_run("r", "normal", {})
    store.commit_window(
        WindowCommit("d", "r", [StateWrite("a", "failed", None, journal=journal)], {})
    )
    (state,) = store.items("d")
    assert problem == state.journal_problem
    assert all(isinstance(entry, dict) for entry in state.journal)
    (record,) = store.failures("d")
    assert all(isinstance(entry, dict) for entry in record.journal)


# The schema of version 5 (durable runs, before rollbacks), as that release wrote it.
_SCHEMA_5 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE item_states (definition TEXT NOT NULL, identity TEXT NOT NULL, status TEXT NOT NULL,
    reason TEXT, error TEXT, version TEXT, journal TEXT, tracking TEXT, run_id TEXT,
    updated_at REAL NOT NULL, position TEXT, PRIMARY KEY (definition, identity)) WITHOUT ROWID;
CREATE INDEX item_states_by_status ON item_states (definition, status);
CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL, mode TEXT NOT NULL, definitions TEXT NOT NULL, error TEXT,
    started_at REAL NOT NULL, ended_at REAL, pid INTEGER NOT NULL, host TEXT NOT NULL,
    process TEXT, durable_run_id TEXT);
CREATE TABLE cursors (definition TEXT PRIMARY KEY, cursor TEXT, updated_at REAL NOT NULL);
CREATE TABLE contracts (definition TEXT PRIMARY KEY, contract TEXT NOT NULL,
    fingerprint TEXT NOT NULL, run_id TEXT NOT NULL, recorded_at REAL NOT NULL);
CREATE TABLE update_requests (definition TEXT PRIMARY KEY, run_id TEXT NOT NULL,
    requested_at REAL NOT NULL, marked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE locks (definition TEXT PRIMARY KEY, run_id TEXT NOT NULL, pid INTEGER NOT NULL,
    host TEXT NOT NULL, acquired_at REAL NOT NULL, process TEXT, durable_run_id TEXT);
INSERT INTO schema_version VALUES (5);
INSERT INTO item_states VALUES ('p', '1', 'migrated', NULL, NULL, 'v1', '[]', NULL, 'old-run', 0,
    'line 2');
INSERT INTO item_states VALUES ('p', '2', 'failed', NULL,
    '{"kind": "process", "type": "E", "message": "m", "details": {}, "attempts": 1}', 'v1', NULL,
    NULL, 'old-run', 0, 'line 3');
INSERT INTO runs (id, status, mode, definitions, started_at, ended_at, pid, host, process)
    VALUES ('old-run', 'failed', 'normal', '{}', 1, 2, 1, 'far', NULL);
"""


def _schema_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT version FROM schema_version").fetchone()[0])
    finally:
        db.close()


def test_a_schema_5_sqlite_store_reads_read_only_and_upgrades_keeping_its_rows(
    tmp_path: Path,
) -> None:
    """Read-only, a schema-5 file reads its runs as kind "run" and its states without attempts,
    and stays 5; opened for writing it gains the columns (version 6) and keeps its rows."""
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_5)
    db.close()
    url = f"sqlite:///{path}"

    def contents(store: migrate.Store) -> object:
        return (
            [(r.run_id, r.kind) for r in store.runs()],
            [(s.identity, s.status, s.rollback_attempts) for s in store.items("p")],
            [(f.identity, f.status, f.rollback_attempts) for f in store.failures("p")],
        )

    before = (
        [("old-run", "run")],
        [("1", "migrated", ()), ("2", "failed", ())],
        [("2", "failed", ())],
    )
    with migrate.open_store(url, read_only=True) as store:
        assert before == contents(store)
    assert 5 == _schema_version(path)
    with migrate.open_store(url) as store:
        assert before == contents(store)
        store.create_run("rb", "rollback", {}, kind="rollback")
        store.commit_rollback(RollbackCommit("p", "rb", ["2"], [("1", _attempt("rb", "no"))], {}))
        assert ([("rb", "rollback"), ("old-run", "run")], ["1"]) == (
            [(r.run_id, r.kind) for r in store.runs()],
            [f.identity for f in store.failures("p")],
        )
    assert migrate.SCHEMA_VERSION == _schema_version(path) >= 6


def test_a_schema_3_postgres_store_reads_read_only_and_upgrades_keeping_its_rows(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A PostgreSQL store of schema 3 (before rollbacks) reads its runs as kind "run" and its
    states without attempts when opened read-only, and is upgraded in place (to 4)."""
    with migrate.open_store(postgres_url) as store:
        store.create_run("old-run", "normal", {})
        store.commit_window(WindowCommit("p", "old-run", [StateWrite("1", "migrated", "v")], {}))
    schema = sql.Identifier(postgres_url.rsplit("schema=", 1)[1].split("&", 1)[0])
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        for table, column in (("runs", "kind"), ("item_states", "rollback_attempts")):
            conn.execute(
                sql.SQL("ALTER TABLE {}.{} DROP COLUMN {}").format(
                    schema, sql.Identifier(table), sql.Identifier(column)
                )
            )
        conn.execute(
            sql.SQL("UPDATE {}.migrate_meta SET value = '3' WHERE key = 'version'").format(schema)
        )

    def version() -> str:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
            query = sql.SQL("SELECT value FROM {}.migrate_meta WHERE key = 'version'")
            return str(conn.execute(query.format(schema)).fetchall()[0][0])

    with migrate.open_store(postgres_url, read_only=True) as store:
        assert ([("old-run", "run")], [("1", ())], []) == (
            [(r.run_id, r.kind) for r in store.runs()],
            [(s.identity, s.rollback_attempts) for s in store.items("p")],
            list(store.failures("p")),
        )
        assert "run" == getattr(store.run("old-run"), "kind", None)
    assert "3" == version()
    with migrate.open_store(postgres_url) as store:
        store.create_run("rb", "rollback", {}, kind="rollback")
        store.commit_rollback(RollbackCommit("p", "rb", [], [("1", _attempt("rb", "no"))], {}))
        assert ([("rb", "rollback"), ("old-run", "run")], [("1", 1)]) == (
            [(r.run_id, r.kind) for r in store.runs()],
            [(f.identity, len(f.rollback_attempts)) for f in store.failures("p")],
        )
    assert POSTGRES_SCHEMA_VERSION == int(version()) >= 4


def _drop_seen_by(url: str, server: PostgresServer | None, version: int) -> None:
    """Make the store at *url* what schema *version* (before ``seen_by``) wrote."""
    if server is None:
        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        with db:
            db.execute("ALTER TABLE item_states DROP COLUMN seen_by")
            db.execute("UPDATE schema_version SET version = ?", (version,))
        db.close()
        return
    schema = sql.Identifier(url.rsplit("schema=", 1)[1].split("&", 1)[0])
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {}.item_states DROP COLUMN seen_by").format(schema))
        conn.execute(
            sql.SQL("UPDATE {}.migrate_meta SET value = %s WHERE key = 'version'").format(schema),
            (str(version),),
        )


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_store_from_before_orphans_reads_read_only_and_upgrades_to_mark_seen_states(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A store of the schema before ``seen_by`` (SQLite 6, PostgreSQL 4) reads read-only as it
    is and stays so; opened for writing it gains the column in place, keeps its rows, and a
    window's ``seen`` marks are then what `Store.orphans` leaves out."""
    server: PostgresServer | None = None
    if kind == "sqlite":
        url, old = f"sqlite:///{tmp_path / 'state.db'}", 6
    else:
        server = request.getfixturevalue("postgres_server")
        url, old = str(request.getfixturevalue("postgres_url")), 4
    with migrate.open_store(url) as store:
        store.create_run("old-run", "normal", {})
        writes = [StateWrite(str(i), "migrated", "v") for i in (1, 2, 3)]
        store.commit_window(WindowCommit("p", "old-run", writes, {}))
    _drop_seen_by(url, server, old)

    with migrate.open_store(url, read_only=True) as store:
        assert (["1", "2", "3"], ["old-run"]) == (
            [s.identity for s in store.items("p")],
            [r.run_id for r in store.runs()],
        )
    with migrate.open_store(url) as store:
        store.create_run("scan", "normal", {})
        seen = [StateWrite("1", "migrated", "v")]
        store.commit_window(WindowCommit("p", "scan", seen, {}, seen=["1", "3"]))
        assert ["2"] == [s.identity for s in store.orphans("p", "scan")]
        assert ["1", "2", "3"] == [s.identity for s in store.items("p")]
    with migrate.open_store(url, read_only=True) as store:
        assert ["2"] == [s.identity for s in store.orphans("p", "scan")]
