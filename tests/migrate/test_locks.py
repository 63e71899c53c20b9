"""One run per definition at a time: lock rows, LockHeld, unlock, dead-pid locks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import migrate
from migrate._liveness import this_process
from migrate._store_postgres import PostgresStore
from tests.migrate.helpers import config_of, noop, people


def _execute(store: migrate.Store, query: str, *params: object) -> None:
    """Run *query* (``?`` placeholders) on the store's own connection, SQLite or PostgreSQL."""
    if isinstance(store, migrate.SqliteStore):
        store._db.execute(query, params)  # pyright: ignore[reportPrivateUsage]
        return
    assert isinstance(store, PostgresStore)
    assert store._conn is not None  # pyright: ignore[reportPrivateUsage]
    store._conn.execute(query.replace("?", "%s"), params)  # type: ignore[arg-type]


def _insert_lock(store: migrate.Store, definition: str, run_id: str, pid: int, host: str) -> None:
    """A lock row as a process *pid* of *host* left it (on PostgreSQL: its session gone)."""
    query = "INSERT INTO locks (definition, run_id, pid, host, acquired_at"
    if isinstance(store, migrate.SqliteStore):
        _execute(store, f"{query}) VALUES (?, ?, ?, ?, 0)", definition, run_id, pid, host)
    else:
        holder = 1  # no session holds this key: the store's are random and never 1 in practice
        _execute(
            store,
            f"{query}, holder) VALUES (?, ?, ?, ?, 0, ?)",
            definition,
            run_id,
            pid,
            host,
            holder,
        )


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_second_run_is_refused_naming_the_holding_run(tmp_path: Path, store_url: str) -> None:
    """While a run holds the lock, another run of that definition raises LockHeld naming it."""
    refused: list[migrate.LockHeld] = []
    config_box: list[migrate.Config] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if not refused:
            with pytest.raises(migrate.LockHeld) as caught:
                migrate.run(config_box[0])
            refused.append(caught.value)

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), process), store=store_url
    )
    config_box.append(config)
    summary = migrate.run(config)
    (error,) = refused
    assert (summary.run_id, os.getpid(), "p") == (
        error.lock.run_id,
        error.lock.pid,
        error.definition_id,
    )
    assert f"locked by run {summary.run_id}" in str(error)
    assert "migrate unlock p" in str(error)
    statuses = sorted(record.status for record in migrate.runs(config))
    assert statuses == ["start-failed", "succeeded"]


def test_locks_are_released_when_the_run_ends(tmp_path: Path, store_url: str) -> None:
    """A finished (or failed) run leaves no lock behind."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), noop), store=store_url
    )
    migrate.run(config)
    with config.open_store() as store:
        assert store.locks() == ()


def test_locks_are_per_definition(tmp_path: Path, store_url: str) -> None:
    """A run holding one definition's lock does not block a run of another definition."""
    ran: list[str] = []
    box: list[migrate.Config] = []

    def process_a(item: migrate.Item, scope: migrate.Scope) -> None:
        if not ran:
            ran.append(migrate.run(box[0], migrate.RunOptions(definitions=("b",))).status)

    config = config_of(
        tmp_path,
        migrate.Migration("a", migrate.MemorySource(people(1)), process_a),
        migrate.Migration("b", migrate.MemorySource(people(1)), noop),
        store=store_url,
    )
    box.append(config)
    migrate.run(config, migrate.RunOptions(definitions=("a",)))
    assert ran == ["succeeded"]


def test_live_lock_from_another_process_is_refused_and_unlock_breaks_it(
    tmp_path: Path, store_url: str
) -> None:
    """A lock of a live process is refused; unlock(def) breaks it and returns it."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), noop), store=store_url
    )
    # The holder's store stays open, as another process's would.
    with config.open_store() as holder:
        holder.create_run("other-run", "normal", {})
        holder.acquire_locks("other-run", ["p"])
        with pytest.raises(migrate.LockHeld, match="locked by run other-run"):
            migrate.run(config)
        broken = migrate.unlock(config, "p")
        assert broken is not None
        assert (broken.definition_id, broken.run_id) == ("p", "other-run")
        assert migrate.unlock(config, "p") is None
        assert migrate.run(config).status == "succeeded"


def test_lock_of_a_dead_process_on_this_host_is_broken(tmp_path: Path, store_url: str) -> None:
    """A crashed run (dead pid, this host) is marked failed and its lock broken on the next run."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), noop), store=store_url
    )
    dead = _dead_pid()
    with config.open_store() as store:
        store.create_run("crashed", "normal", {})
        _execute(store, "UPDATE runs SET pid = ?, status = 'running' WHERE id = 'crashed'", dead)
        _insert_lock(store, "p", "crashed", dead, this_process().host)
    assert migrate.run(config).status == "succeeded"
    crashed = next(r for r in migrate.runs(config) if r.run_id == "crashed")
    assert ("failed", f"process {dead} died") == (crashed.status, crashed.error)


def test_lock_of_another_host_is_not_broken_automatically(tmp_path: Path) -> None:
    """A lock held from another host is refused even if the pid is dead here (SQLite: the
    PostgreSQL store asks the server whether that holder lives, see test_store_postgres)."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), noop))
    with config.open_store() as store:
        store._db.execute(  # pyright: ignore[reportPrivateUsage]
            "INSERT INTO locks (definition, run_id, pid, host, acquired_at) "
            "VALUES ('p', 'far-run', ?, 'elsewhere', 0)",
            (_dead_pid(),),
        )
    with pytest.raises(migrate.LockHeld, match="on host elsewhere"):
        migrate.run(config)


def test_unlock_of_an_unknown_definition_is_a_usage_error(tmp_path: Path, store_url: str) -> None:
    """unlock names unknown definitions."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop), store=store_url
    )
    with pytest.raises(migrate.UsageError, match="unknown migration 'x'"):
        migrate.unlock(config, "x")
