"""
A Migration Run owned by a durable workflow run: its record and its locks are marked with the
durable run's id, and neither is taken for a dead process's once the process that started it
has exited. On every store: SQLite, PostgreSQL and in-memory.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import psycopg
import pytest
from psycopg import sql

import migrate
from migrate import DefinitionResult
from migrate._liveness import this_process
from migrate._store_postgres import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from migrate._text import format_time
from tests.migrate.cli_support import make_project
from tests.postgres_server import PostgresServer

KINDS = ("sqlite", "postgresql", "memory")


@attrs.frozen
class Stores:
    """One store of a kind, and how another process reaches it (``url``; ``None``: memory)."""

    kind: str
    store: migrate.Store
    url: str | None


@pytest.fixture(params=KINDS)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """A fresh store of each kind."""
    if request.param == "memory":
        yield Stores("memory", migrate.MemoryStore(), None)
        return
    url = (
        f"sqlite:///{tmp_path / 'state.db'}"
        if request.param == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    with migrate.open_store(url) as opened:
        yield Stores(request.param, opened, url)


def _running(definition_id: str) -> dict[str, DefinitionResult]:
    return {definition_id: DefinitionResult("normal", "running")}


# Run in a process of its own, which exits at the end: it records runs and takes their locks,
# each given as [run id, definition, the run's mark, the lock's mark] in the JSON of argv[2].
_STARTER = """
import json
import sys

import migrate

with migrate.open_store(sys.argv[1]) as store:
    for run_id, definition_id, run_mark, lock_mark in json.loads(sys.argv[2]):
        results = {definition_id: migrate.DefinitionResult("normal", "running")}
        store.create_run(run_id, "normal", results, durable_run_id=run_mark)
        store.update_run(run_id, status="running")
        store.acquire_locks(run_id, [definition_id], durable_run_id=lock_mark)
"""

#: A durable run's starter (its run and lock marked D-1) and a plain run, in one process.
_DURABLE_AND_PLAIN = (("durable-run", "p", "D-1", "D-1"), ("plain-run", "q", None, None))


def _started_by_a_process_that_exited(
    stores: Stores, runs: tuple[tuple[str, str, str | None, str | None], ...] = _DURABLE_AND_PLAIN
) -> int:
    """The *runs*, ``running``, as a process left them that has exited since; its pid."""
    if stores.url is not None:
        starter = subprocess.Popen([sys.executable, "-c", _STARTER, stores.url, json.dumps(runs)])
        assert 0 == starter.wait(timeout=60)
        return starter.pid
    # A memory store lives in this process only: the records a dead starter would have left
    # of its durable runs (a plain run of a memory store never outlives its process).
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    store = stores.store
    assert isinstance(store, migrate.MemoryStore)
    host = this_process().host
    for run_id, definition_id, run_mark, lock_mark in runs:
        if run_mark is None:
            continue
        store._runs[run_id] = migrate.RunRecord(  # pyright: ignore[reportPrivateUsage]
            run_id=run_id,
            status="running",
            mode="normal",
            started_at=0.0,
            ended_at=None,
            pid=child.pid,
            host=host,
            definitions=_running(definition_id),
            durable_run_id=run_mark,
        )
        store._locks[definition_id] = migrate.LockInfo(  # pyright: ignore[reportPrivateUsage]
            definition_id, run_id, child.pid, host, 0.0, None, lock_mark
        )
    return child.pid


def test_a_run_keeps_the_durable_run_that_owns_it(stores: Stores) -> None:
    """create_run(durable_run_id=) is read back by run, runs and latest_run_for; plain: None."""
    store = stores.store
    store.create_run("plain", "normal", _running("p"))
    store.create_run("owned", "normal", _running("p"), durable_run_id="wf-7f3a")
    latest = store.latest_run_for("p")
    assert ("wf-7f3a", None, ["wf-7f3a", None], "owned") == (
        getattr(store.run("owned"), "durable_run_id", "missing"),
        getattr(store.run("plain"), "durable_run_id", "missing"),
        [record.durable_run_id for record in store.runs()],
        getattr(latest, "run_id", None),
    )
    assert latest is not None
    assert "wf-7f3a" == latest.durable_run_id


def test_locks_are_marked_with_the_durable_run(stores: Stores) -> None:
    """acquire_locks(durable_run_id=) marks every lock it takes; plain locks are unmarked."""
    store = stores.store
    store.acquire_locks("owned", ["a", "b"], durable_run_id="wf-1")
    store.acquire_locks("plain", ["c"])
    me = this_process()
    assert [
        ("a", "owned", "wf-1", me.pid),
        ("b", "owned", "wf-1", me.pid),
        ("c", "plain", None, me.pid),
    ] == [
        (lock.definition_id, lock.run_id, lock.durable_run_id, lock.pid) for lock in store.locks()
    ]


@pytest.mark.timeout(120)
def test_a_durable_runs_lock_outlives_the_process_that_took_it(stores: Stores) -> None:
    """The starter exited: its plain run is recovered and its lock broken; the durable run's
    lock is not, nor is the durable run marked failed; LockHeld names both runs."""
    store = stores.store
    dead = _started_by_a_process_that_exited(stores)
    recovered = store.recover_dead_runs()
    durable = store.run("durable-run")
    assert durable is not None
    expected_recovered = () if stores.kind == "memory" else ("plain-run",)
    assert (expected_recovered, "running", None) == (recovered, durable.status, durable.error)

    store.acquire_locks("next-run", ["q"])  # the plain run's lock: broken, or released above
    with pytest.raises(migrate.LockHeld) as caught:
        store.acquire_locks("next-run", ["p"])
    lock = caught.value.lock
    assert ("p", "durable-run", "D-1", dead) == (
        lock.definition_id,
        lock.run_id,
        lock.durable_run_id,
        lock.pid,
    )
    assert (
        f"definition 'p' is locked by run durable-run (durable run D-1, started by pid {dead} "
        f"on host {this_process().host}, since {format_time(lock.acquired_at)}); wait for it "
        "to finish, or if it is stale run: migrate unlock p"
    ) == str(caught.value)
    assert () == store.recover_dead_runs()
    assert [("p", "durable-run", "D-1"), ("q", "next-run", None)] == [
        (held.definition_id, held.run_id, held.durable_run_id) for held in store.locks()
    ]
    assert "running" == getattr(store.run("durable-run"), "status", None)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_recovering_a_dead_plain_run_keeps_its_marked_locks(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    """A plain run whose process died is marked failed, but a lock it took marked with a
    durable run stays (SQL stores: a memory store never recovers a run)."""
    url = (
        f"sqlite:///{tmp_path / 'state.db'}"
        if kind == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    with migrate.open_store(url) as store:
        stores = Stores(kind, store, url)
        dead = _started_by_a_process_that_exited(stores, (("mixed-run", "m", None, "D-2"),))
        assert ("mixed-run",) == store.recover_dead_runs()
        mixed = store.run("mixed-run")
        assert ("failed", f"process {dead} died") == (
            getattr(mixed, "status", None),
            getattr(mixed, "error", None),
        )
        assert [("m", "mixed-run", "D-2")] == [
            (lock.definition_id, lock.run_id, lock.durable_run_id) for lock in store.locks()
        ]
        with pytest.raises(migrate.LockHeld, match="durable run D-2, started by pid"):
            store.acquire_locks("next-run", ["m"])


def test_a_plain_locks_message_is_as_before(stores: Stores) -> None:
    """LockHeld for an unmarked lock reads exactly as it did before durable runs."""
    store = stores.store
    store.acquire_locks("holder", ["p"])
    with pytest.raises(migrate.LockHeld) as caught:
        store.acquire_locks("other", ["p"])
    lock = caught.value.lock
    assert (
        f"definition 'p' is locked by run holder (pid {lock.pid} on host {lock.host}, since "
        f"{format_time(lock.acquired_at)}); wait for it to finish, or if it is stale run: "
        "migrate unlock p"
    ) == str(caught.value)


def test_a_release_with_the_wrong_mark_releases_nothing(stores: Stores) -> None:
    """release_locks(run, durable_run_id=) releases only that run's locks marked so, never
    raises for a wrong (or unstorable) mark, and is idempotent."""
    store = stores.store
    store.acquire_locks("owned", ["a", "b"], durable_run_id="wf-1")
    store.acquire_locks("other", ["c"], durable_run_id="wf-1")
    for run_id, mark in (
        ("owned", "wf-2"),
        ("owned", "wf-1 "),
        ("owned", "wf-1\x00"),
        ("owned", "wf-1\udc80"),
        ("nobody", "wf-1"),
    ):
        store.release_locks(run_id, durable_run_id=mark)
    assert ["a", "b", "c"] == [lock.definition_id for lock in store.locks()]
    store.release_locks("owned", durable_run_id="wf-1")
    store.release_locks("owned", durable_run_id="wf-1")
    assert [("c", "other")] == [(lock.definition_id, lock.run_id) for lock in store.locks()]


def test_a_release_with_a_mark_keeps_the_runs_unmarked_locks(stores: Stores) -> None:
    """With a mark only the locks marked so go; without one, every lock of the run, as before."""
    store = stores.store
    store.acquire_locks("r", ["a"], durable_run_id="wf-1")
    store.acquire_locks("r", ["b"])
    store.release_locks("r", durable_run_id="wf-1")
    assert [("b", None)] == [(lock.definition_id, lock.durable_run_id) for lock in store.locks()]
    store.acquire_locks("r", ["a"], durable_run_id="wf-1")
    store.release_locks("r")
    assert () == store.locks()


def test_unlock_breaks_a_marked_lock(stores: Stores) -> None:
    """``migrate unlock`` (Store.unlock) removes a marked lock and returns it, mark included."""
    store = stores.store
    store.acquire_locks("owned", ["p"], durable_run_id="wf-1")
    broken = store.unlock("p")
    assert ("owned", "wf-1", ()) == (
        getattr(broken, "run_id", None),
        getattr(broken, "durable_run_id", None),
        store.locks(),
    )
    store.acquire_locks("next", ["p"])


@pytest.mark.parametrize(
    ("mark", "message"),
    [
        ("", "non-empty"),
        (" wf-1", "surrounding spaces"),
        ("wf\x00-1", r"U\+0000 \(NUL\)"),
        ("wf\ud800-1", "a lone surrogate"),
    ],
)
def test_a_durable_run_id_no_store_keeps_as_it_is_is_refused(
    stores: Stores, mark: str, message: str
) -> None:
    """A mark that is empty, padded, or holds NUL or a lone surrogate: ValueError, nothing
    written (a store would otherwise refuse it, alter it, or keep it only here)."""
    store = stores.store
    with pytest.raises(ValueError, match=message):
        store.create_run("r", "normal", _running("p"), durable_run_id=mark)
    with pytest.raises(ValueError, match=message):
        store.acquire_locks("r", ["p"], durable_run_id=mark)
    assert ((), (), None) == (store.runs(), store.locks(), store.run("r"))
    store.create_run("r", "normal", _running("p"))  # the id is still free
    store.acquire_locks("r", ["p"])


# The schema of version 4 (before durable runs), as that release wrote it.
_SCHEMA_4 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE item_states (definition TEXT NOT NULL, identity TEXT NOT NULL, status TEXT NOT NULL,
    reason TEXT, error TEXT, version TEXT, journal TEXT, tracking TEXT, run_id TEXT,
    updated_at REAL NOT NULL, position TEXT, PRIMARY KEY (definition, identity)) WITHOUT ROWID;
CREATE INDEX item_states_by_status ON item_states (definition, status);
CREATE TABLE runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL, mode TEXT NOT NULL, definitions TEXT NOT NULL, error TEXT,
    started_at REAL NOT NULL, ended_at REAL, pid INTEGER NOT NULL, host TEXT NOT NULL,
    process TEXT);
CREATE TABLE cursors (definition TEXT PRIMARY KEY, cursor TEXT, updated_at REAL NOT NULL);
CREATE TABLE contracts (definition TEXT PRIMARY KEY, contract TEXT NOT NULL,
    fingerprint TEXT NOT NULL, run_id TEXT NOT NULL, recorded_at REAL NOT NULL);
CREATE TABLE update_requests (definition TEXT PRIMARY KEY, run_id TEXT NOT NULL,
    requested_at REAL NOT NULL, marked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE locks (definition TEXT PRIMARY KEY, run_id TEXT NOT NULL, pid INTEGER NOT NULL,
    host TEXT NOT NULL, acquired_at REAL NOT NULL, process TEXT);
INSERT INTO schema_version VALUES (4);
INSERT INTO item_states VALUES ('p', '1', 'migrated', NULL, NULL, 'v1', NULL, NULL, 'old-run', 0,
    'line 2');
INSERT INTO runs (id, status, mode, definitions, started_at, ended_at, pid, host, process)
    VALUES ('old-run', 'succeeded', 'normal', '{}', 1, 2, 1, 'far', NULL);
INSERT INTO locks VALUES ('q', 'old-run', 1, 'far', 3, NULL);
"""


def _schema_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT version FROM schema_version").fetchone()[0])
    finally:
        db.close()


def test_a_schema_4_sqlite_store_reads_read_only_and_upgrades_keeping_its_rows(
    tmp_path: Path,
) -> None:
    """Read-only, a schema-4 file reads with no durable run ids and stays 4; opened for writing,
    it gains the columns (version 5), keeps its rows, and takes marks."""
    path = tmp_path / "state.db"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_4)
    db.close()
    url = f"sqlite:///{path}"

    def contents(store: migrate.Store) -> object:
        return (
            [(r.run_id, r.status, r.durable_run_id) for r in store.runs()],
            getattr(store.latest_run_for("p", include_start_failed=True), "durable_run_id", "-"),
            [(lock.definition_id, lock.run_id, lock.durable_run_id) for lock in store.locks()],
            [(s.identity, s.status, s.position) for s in store.items("p")],
        )

    before = (
        [("old-run", "succeeded", None)],
        "-",  # old-run's definitions are empty: it covered no definition
        [("q", "old-run", None)],
        [("1", "migrated", "line 2")],
    )
    with migrate.open_store(url, read_only=True) as store:
        assert before == contents(store)
        assert None is getattr(store.run("old-run"), "durable_run_id", "missing")
    assert 4 == _schema_version(path)
    with migrate.open_store(url) as store:
        assert before == contents(store)
        store.create_run("new-run", "normal", _running("p"), durable_run_id="wf-1")
        store.acquire_locks("new-run", ["p"], durable_run_id="wf-1")
        assert ("wf-1", ["wf-1", None]) == (
            getattr(store.run("new-run"), "durable_run_id", None),
            [lock.durable_run_id for lock in store.locks()],
        )
    # Upgraded to the current schema (5 was the one of durable runs).
    assert migrate.SCHEMA_VERSION == _schema_version(path) >= 5


def test_a_schema_2_postgres_store_reads_read_only_and_upgrades_keeping_its_rows(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A PostgreSQL store of schema 2 (before durable runs) reads with no durable run ids when
    opened read-only, and is upgraded in place (to 3) keeping its rows."""
    with migrate.open_store(postgres_url) as store:
        store.create_run("old-run", "normal", _running("p"))
        store.acquire_locks("old-run", ["p"])
    schema = sql.Identifier(postgres_url.rsplit("schema=", 1)[1].split("&", 1)[0])
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        for table in ("runs", "locks"):
            conn.execute(
                sql.SQL("ALTER TABLE {}.{} DROP COLUMN durable_run_id").format(
                    schema, sql.Identifier(table)
                )
            )
        conn.execute(
            sql.SQL("UPDATE {}.migrate_meta SET value = '2' WHERE key = 'version'").format(schema)
        )

    def version() -> str:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
            query = sql.SQL("SELECT value FROM {}.migrate_meta WHERE key = 'version'")
            return str(conn.execute(query.format(schema)).fetchall()[0][0])

    with migrate.open_store(postgres_url, read_only=True) as store:
        assert ([("old-run", None)], [("p", "old-run", None)], None) == (
            [(r.run_id, r.durable_run_id) for r in store.runs()],
            [(lock.definition_id, lock.run_id, lock.durable_run_id) for lock in store.locks()],
            getattr(store.latest_run_for("p"), "durable_run_id", "missing"),
        )
    assert "2" == version()
    with migrate.open_store(postgres_url) as store:
        store.create_run("new-run", "normal", _running("q"), durable_run_id="wf-1")
        store.acquire_locks("new-run", ["q"], durable_run_id="wf-1")
        assert ([("new-run", "wf-1"), ("old-run", None)], ["old-run", "new-run"]) == (
            [(r.run_id, r.durable_run_id) for r in store.runs()],
            [lock.run_id for lock in store.locks()],
        )
    # Upgraded to the current schema (3 was the one of durable runs).
    assert POSTGRES_SCHEMA_VERSION == int(version()) >= 3


def test_the_cli_shows_the_durable_run_of_runs_and_locks(tmp_path: Path, store_url: str) -> None:
    """``runs --json`` has ``durable_run_id`` (null for plain runs); the ``runs`` table gains a
    ``durable`` column only when a run has one; ``run`` refusals and ``unlock`` name it."""
    project = make_project(tmp_path, ["ok", "ok"], store=store_url)
    assert 0 == project.main("run", "people").returncode
    plain = project.main("runs")
    assert "durable" not in plain.stdout.splitlines()[0]
    (record,) = json.loads(project.main("runs", "--json").stdout)["runs"]
    assert None is record["durable_run_id"]

    with migrate.open_store(store_url, base_dir=tmp_path) as store:
        store.create_run("durable-run", "normal", _running("people"), durable_run_id="wf-1")
        store.acquire_locks("durable-run", ["people"], durable_run_id="wf-1")
    # On PostgreSQL the store's session is gone now: only the mark keeps the lock held.
    assert ["wf-1", None] == [
        r["durable_run_id"] for r in json.loads(project.main("runs", "--json").stdout)["runs"]
    ]
    header, durable_row, plain_row = project.main("runs").stdout.splitlines()
    assert (["run", "status", "mode", "started", "took", "durable", "definitions"], "-") == (
        header.split(),
        plain_row.split()[5],
    )
    assert ["durable-run", "queued", "normal"] == durable_row.split()[:3]
    assert "wf-1" == durable_row.split()[5]

    for refused in (project.main("run", "people"), project.main("run", "people", "--plan")):
        assert 3 == refused.returncode
        assert "locked by run durable-run (durable run wf-1, started by pid" in (
            refused.stdout + refused.stderr
        )
    unlocked = project.main("unlock", "people")
    assert unlocked.stdout.startswith(
        "unlocked people (was held by run durable-run, durable run wf-1, started by pid "
    )
    assert 0 == project.main("run", "people").returncode
