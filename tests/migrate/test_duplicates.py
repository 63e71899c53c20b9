"""Two records with one identity: reported with both positions, never processed twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import migrate
from tests.migrate.helpers import config_of, recorder, states, write_csv


def _only_failure(config: migrate.Config) -> migrate.FailureRecord:
    (failure,) = migrate.failures(config, "p")
    return failure


def test_duplicates_in_one_window_fail_once_with_both_positions(tmp_path: Path) -> None:
    """Neither record is processed; one failed state names both lines; counted once."""
    rows = [{"id": "1", "n": "a"}, {"id": "2", "n": "b"}, {"id": "1", "n": "c"}]
    path = write_csv(tmp_path / "p.csv", rows)
    seen: list[str] = []
    config = config_of(tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder(seen)))
    summary = migrate.run(config)
    failure = _only_failure(config)
    assert (["2"], "DuplicateIdentity", ["line 2", "line 4"]) == (
        seen,
        failure.error.type,
        failure.error.details["positions"],
    )
    assert "identity '1' appears 2 times" in failure.error.message
    assert migrate.Counts(migrated=1, failed=1) == summary.definitions["p"].counts


def test_duplicates_in_different_windows_are_caught_and_counted_once(tmp_path: Path) -> None:
    """The second record of an identity, windows later, fails it; the run counts it once."""
    rows = [{"id": str(i), "n": str(i)} for i in (1, 2, 3, 4, 1, 5)]
    path = write_csv(tmp_path / "p.csv", rows)
    seen: list[str] = []
    source = migrate.CsvSource(path, window_size=2)
    config = config_of(tmp_path, migrate.Migration("p", source, recorder(seen)))
    summary = migrate.run(config)
    failure = _only_failure(config)
    assert (["1", "2", "3", "4", "5"], "1", ["line 2", "line 6"]) == (
        seen,
        failure.identity,
        failure.error.details["positions"],
    )
    assert "read it before at line 2 and processed it (migrated)" in failure.error.message
    assert migrate.Counts(migrated=4, failed=1) == summary.definitions["p"].counts
    stored = migrate.status(config).definitions["p"]
    assert (4, 1) == (stored.migrated, stored.failed)


def test_a_failed_run_finds_the_duplicate_again_until_it_is_fixed(tmp_path: Path) -> None:
    """--failed over a scan source reports the duplicate again; once fixed, it migrates."""
    rows = [{"id": "1", "n": "a"}, {"id": "1", "n": "b"}]
    path = write_csv(tmp_path / "p.csv", rows)
    seen: list[str] = []
    config = config_of(tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder(seen)))
    migrate.run(config)
    again = migrate.run(config, migrate.RunOptions(failed=True))
    assert (1, "DuplicateIdentity") == (
        again.definitions["p"].counts.failed,
        _only_failure(config).error.type,
    )
    write_csv(path, rows[:1])
    migrate.run(config, migrate.RunOptions(failed=True))
    assert (["1"], {"1": "migrated"}) == (seen, states(config, "p"))


def test_sql_duplicate_keys_across_a_window_boundary_are_read_and_reported(
    tmp_path: Path,
) -> None:
    """A non-unique key spanning the window limit is read whole: reported, and rows after read."""
    path = tmp_path / "src.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER, n TEXT)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "b"), (2, "c"), (3, "d")])
    db.close()
    seen: list[str] = []
    source = migrate.SqlSource(lambda: sqlite3.connect(path), "t", window_size=2)
    config = config_of(tmp_path, migrate.Migration("p", source, recorder(seen)))
    migrate.run(config)
    failure = _only_failure(config)
    assert (["1", "3"], "2", 2) == (
        seen,
        failure.identity,
        len(failure.error.details["positions"]),
    )


def test_direct_lookup_of_a_duplicate_is_a_fault() -> None:
    """A memory source's direct lookup of an identity it holds twice gives a Fault."""
    source = migrate.MemorySource([{"id": 1}, {"id": 1}, {"id": 2}])
    found = source.lookup("1").run_or_raise()
    assert isinstance(found, migrate.Fault)
    assert (["index 0", "index 1"], "1") == (found.details["positions"], found.identity)
