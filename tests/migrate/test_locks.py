"""One run per definition at a time: lock rows, LockHeld, unlock, dead-pid locks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_second_run_is_refused_naming_the_holding_run(tmp_path: Path) -> None:
    """While a run holds the lock, another run of that definition raises LockHeld naming it."""
    refused: list[migrate.LockHeld] = []
    config_box: list[migrate.Config] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if not refused:
            with pytest.raises(migrate.LockHeld) as caught:
                migrate.run(config_box[0])
            refused.append(caught.value)

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), process))
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


def test_locks_are_released_when_the_run_ends(tmp_path: Path) -> None:
    """A finished (or failed) run leaves no lock behind."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), noop))
    migrate.run(config)
    with config.open_store() as store:
        assert store.locks() == ()


def test_locks_are_per_definition(tmp_path: Path) -> None:
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
    )
    box.append(config)
    migrate.run(config, migrate.RunOptions(definitions=("a",)))
    assert ran == ["succeeded"]


def test_live_lock_from_another_process_is_refused_and_unlock_breaks_it(tmp_path: Path) -> None:
    """A lock of a live process is refused; unlock(def) breaks it and returns it."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), noop))
    with config.open_store() as store:
        store.create_run("other-run", "normal", {})
        store.acquire_locks("other-run", ["p"])
    with pytest.raises(migrate.LockHeld, match="locked by run other-run"):
        migrate.run(config)
    broken = migrate.unlock(config, "p")
    assert broken is not None
    assert (broken.definition_id, broken.run_id) == ("p", "other-run")
    assert migrate.unlock(config, "p") is None
    assert migrate.run(config).status == "succeeded"


def test_lock_of_a_dead_process_on_this_host_is_broken(tmp_path: Path) -> None:
    """A crashed run (dead pid, this host) is marked failed and its lock broken on the next run."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), noop))
    dead = _dead_pid()
    with config.open_store() as store:
        store.create_run("crashed", "normal", {})
        store._db.execute(
            "UPDATE runs SET pid = ?, status = 'running' WHERE id = 'crashed'", (dead,)
        )  # pyright: ignore[reportPrivateUsage]
        store._db.execute(  # pyright: ignore[reportPrivateUsage]
            "INSERT INTO locks VALUES ('p', 'crashed', ?, ?, 0, NULL)", (dead, store.host)
        )
    assert migrate.run(config).status == "succeeded"
    crashed = next(r for r in migrate.runs(config) if r.run_id == "crashed")
    assert ("failed", f"process {dead} died") == (crashed.status, crashed.error)


def test_lock_of_another_host_is_not_broken_automatically(tmp_path: Path) -> None:
    """A lock held from another host is refused even if the pid is dead here."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), noop))
    with config.open_store() as store:
        store._db.execute(  # pyright: ignore[reportPrivateUsage]
            "INSERT INTO locks VALUES ('p', 'far-run', ?, 'elsewhere', 0, NULL)", (_dead_pid(),)
        )
    with pytest.raises(migrate.LockHeld, match="on host elsewhere"):
        migrate.run(config)


def test_unlock_of_an_unknown_definition_is_a_usage_error(tmp_path: Path) -> None:
    """unlock names unknown definitions."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop))
    with pytest.raises(migrate.UsageError, match="unknown migration 'x'"):
        migrate.unlock(config, "x")
