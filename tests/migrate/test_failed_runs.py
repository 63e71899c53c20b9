"""Failed-item runs: saved failed states, current source data, new runs, not-found identities."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people, recorder, states, write_csv

FAILED = migrate.RunOptions(failed=True)


def test_failed_run_processes_only_failed_items_with_current_data(
    tmp_path: Path, store_url: str
) -> None:
    """--failed reprocesses just the failed items, reading each one's current data."""
    path = write_csv(tmp_path / "p.csv", people(6))
    bad_names: set[str] = {"person 2", "person 5"}
    seen: list[tuple[str, str]] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append((item.identity, item.data["name"]))
        if item.data["name"] in bad_names:
            raise ValueError("invalid name")

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), process), store=store_url
    )
    first = migrate.run(config)
    rows = people(6)
    rows[1]["name"] = "fixed 2"
    rows[4]["name"] = "fixed 5"
    write_csv(path, rows)
    seen.clear()
    summary = migrate.run(config, FAILED)
    assert seen == [("2", "fixed 2"), ("5", "fixed 5")]
    assert summary.status == "succeeded"
    assert summary.run_id != first.run_id
    assert migrate.Counts(migrated=2) == summary.definitions["p"].counts
    assert dict.fromkeys([str(i) for i in range(1, 7)], "migrated") == states(config, "p")


def test_failed_run_reaches_failures_behind_the_cursor(tmp_path: Path, store_url: str) -> None:
    """Failures behind the saved cursor are reprocessed without a full traversal."""
    path = write_csv(tmp_path / "p.csv", people(9))
    fail = {"1"}
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path, window_size=2), recorder(seen, fail)),
        store=store_url,
    )
    migrate.run(config)
    fail.clear()
    seen.clear()
    migrate.run(config)
    assert seen == []  # the cursor is past item 1: a normal run does not meet it
    migrate.run(config, FAILED)
    assert seen == ["1"]


def test_still_failing_items_stay_failed_with_new_evidence(tmp_path: Path, store_url: str) -> None:
    """An item failing again keeps a failed state, with the new run id and evidence."""
    path = write_csv(tmp_path / "p.csv", people(3))
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path), recorder(seen, {"2"})),
        store=store_url,
    )
    migrate.run(config)
    summary = migrate.run(config, FAILED)
    (failure,) = migrate.failures(config, "p")
    assert ("2", summary.run_id, "failed") == (failure.identity, failure.run_id, summary.status)


def test_identity_not_found_becomes_a_failed_state_saying_so(
    tmp_path: Path, store_url: str
) -> None:
    """A failed identity that vanished from the source fails with a not-found source error."""
    path = write_csv(tmp_path / "p.csv", people(3))
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path), recorder(seen, {"3"})),
        store=store_url,
    )
    migrate.run(config)
    write_csv(path, people(2))
    summary = migrate.run(config, FAILED)
    (failure,) = migrate.failures(config, "p")
    assert (failure.error.kind, failure.error.type) == ("source", "NotFound")
    assert "identity '3' was not found in csv:" in failure.error.message
    assert summary.definitions["p"].counts.failed == 1


def test_failed_run_does_not_touch_the_cursor(tmp_path: Path, store_url: str) -> None:
    """A failed-item run leaves the discovery cursor where it was."""
    path = write_csv(tmp_path / "p.csv", people(4))
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path), recorder([], {"1"})),
        store=store_url,
    )
    migrate.run(config)
    with config.open_store() as store:
        before = store.cursor("p")
    migrate.run(config, FAILED)
    with config.open_store() as store:
        assert before == store.cursor("p")


def test_failed_run_with_no_failures_is_a_clean_no_op(tmp_path: Path, store_url: str) -> None:
    """With nothing failed, a failed-item run processes nothing and succeeds."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), noop), store=store_url
    )
    migrate.run(config)
    summary = migrate.run(config, FAILED)
    assert ("succeeded", migrate.Counts()) == (summary.status, summary.definitions["p"].counts)


def test_failed_run_over_a_direct_sql_source(tmp_path: Path, store_url: str) -> None:
    """A failed-item run over SqlSource looks each identity up by key."""
    db_path = tmp_path / "src.db"
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, ok INTEGER)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(i, int(i != 3)) for i in range(1, 6)])
    db.close()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if not item.data["ok"]:
            raise ValueError("not ok")

    source = migrate.SqlSource(lambda: sqlite3.connect(db_path), "t")
    config = config_of(tmp_path, migrate.Migration("t", source, process), store=store_url)
    assert migrate.run(config).definitions["t"].counts.failed == 1
    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE t SET ok = 1")
    db.close()
    summary = migrate.run(config, FAILED)
    assert migrate.Counts(migrated=1) == summary.definitions["t"].counts


def test_failed_and_skipped_together_are_refused(tmp_path: Path, store_url: str) -> None:
    """--failed with --skipped is a usage error."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop), store=store_url
    )
    with pytest.raises(migrate.UsageError, match="--failed and --skipped cannot be used together"):
        migrate.run(config, migrate.RunOptions(failed=True, skipped=True))


def test_progress_total_is_the_number_of_targets(tmp_path: Path, store_url: str) -> None:
    """In a failed-item run, progress events carry the number of targeted identities."""
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(5)), recorder([], {"1", "4"})),
        store=store_url,
    )
    migrate.run(config)
    events: list[migrate.ProgressEvent] = []
    migrate.run(config, FAILED, progress=events.append)
    assert {2} == {e.total for e in events}


def test_failures_are_listed_in_natural_identity_order(tmp_path: Path, store_url: str) -> None:
    """failures() lists "7" before "13" (numbers numerically, then text); limit takes the first."""
    rows = [{"id": key} for key in ("13", "b10", "7", "100", "a", "b2", "2")]
    config = config_of(
        tmp_path,
        migrate.Migration(
            "p", migrate.MemorySource(rows), recorder([], fail={r["id"] for r in rows})
        ),
        store=store_url,
    )
    migrate.run(config)
    listed = [f.identity for f in migrate.failures(config, "p")]
    first = [f.identity for f in migrate.failures(config, "p", limit=3)]
    assert (["2", "7", "13", "100", "a", "b2", "b10"], ["2", "7", "13"]) == (listed, first)
