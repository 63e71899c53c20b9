"""Normal runs: source order, saved cursor, unchanged items, failed items met again."""

from __future__ import annotations

from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people, recorder, states, write_csv


def test_first_run_migrates_every_item_in_source_order(
    csv_people: Path, tmp_path: Path, store_url: str
) -> None:
    """Every item is processed once, in source order, and stored as migrated."""
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(csv_people, window_size=3), recorder(seen)),
        store=store_url,
    )
    summary = migrate.run(config)
    assert [str(i) for i in range(1, 11)] == seen
    assert summary.status == "succeeded"
    assert migrate.Counts(migrated=10) == summary.definitions["p"].counts
    assert dict.fromkeys(seen, "migrated") == states(config, "p")


def test_run_json_has_the_issue_keys(csv_people: Path, tmp_path: Path, store_url: str) -> None:
    """RunSummary.to_json has run_id, status and per-definition counts with the fixed keys."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(csv_people), noop), store=store_url
    )
    document = migrate.run(config).to_json()
    assert {"run_id", "status", "definitions"} <= set(document)
    counts = document["definitions"]["p"]
    assert {
        key: counts[key] for key in ("migrated", "skipped", "failed", "unchanged", "needs_update")
    } == {"migrated": 10, "skipped": 0, "failed": 0, "unchanged": 0, "needs_update": 0}


def test_second_run_continues_from_the_saved_cursor(
    csv_people: Path, tmp_path: Path, store_url: str
) -> None:
    """After a complete run, a normal run finds nothing new and processes nothing."""
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(csv_people), recorder(seen)),
        store=store_url,
    )
    migrate.run(config)
    seen.clear()
    summary = migrate.run(config)
    assert ([], migrate.Counts()) == (seen, summary.definitions["p"].counts)


def test_appended_rows_are_processed_and_old_ones_unchanged(tmp_path: Path, store_url: str) -> None:
    """A changed file restarts from the top: same-version items count unchanged, new ones run."""
    path = write_csv(tmp_path / "p.csv", people(5))
    seen: list[str] = []
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder(seen)), store=store_url
    )
    migrate.run(config)
    write_csv(path, people(7))
    seen.clear()
    summary = migrate.run(config)
    assert (["6", "7"], migrate.Counts(migrated=2, unchanged=5)) == (
        seen,
        summary.definitions["p"].counts,
    )


def test_changed_item_is_processed_again(tmp_path: Path, store_url: str) -> None:
    """An item whose source version changed is processed again, not counted unchanged."""
    path = write_csv(tmp_path / "p.csv", people(3))
    seen: list[str] = []
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder(seen)), store=store_url
    )
    migrate.run(config)
    rows = people(3)
    rows[1]["name"] = "renamed"
    write_csv(path, rows)
    seen.clear()
    summary = migrate.run(config)
    assert (["2"], migrate.Counts(migrated=1, unchanged=2)) == (
        seen,
        summary.definitions["p"].counts,
    )


def test_failed_items_met_again_are_processed_again(tmp_path: Path, store_url: str) -> None:
    """A normal run that meets a failed item (same version) processes it again."""
    path = write_csv(tmp_path / "p.csv", people(4))
    fail = {"2", "3"}
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path), recorder(seen, fail)),
        store=store_url,
    )
    first = migrate.run(config)
    assert (first.status, first.definitions["p"].counts.failed) == ("failed", 2)
    fail.clear()
    write_csv(path, [*people(4), {"id": "5", "name": "new"}])
    seen.clear()
    summary = migrate.run(config)
    assert (["2", "3", "5"], migrate.Counts(migrated=3, unchanged=2)) == (
        seen,
        summary.definitions["p"].counts,
    )
    assert dict.fromkeys(["1", "2", "3", "4", "5"], "migrated") == states(config, "p")


def test_skip_stores_the_reason(csv_people: Path, tmp_path: Path, store_url: str) -> None:
    """raise Skip(reason) stores a skipped state with the reason."""
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(csv_people), recorder(seen, skip={"4"})),
        store=store_url,
    )
    summary = migrate.run(config)
    with config.open_store() as store:
        state = store.item("p", "4")
    assert state is not None
    assert (state.status, state.reason) == ("skipped", "not wanted: 4")
    assert (
        summary.definitions["p"].counts.migrated,
        summary.definitions["p"].counts.skipped,
        summary.status,
    ) == (9, 1, "succeeded")


def test_failure_evidence_is_stored(csv_people: Path, tmp_path: Path, store_url: str) -> None:
    """A process error stores kind, type, message, where, attempts; the run status is failed."""
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(csv_people), recorder(seen, fail={"3"})),
        store=store_url,
    )
    summary = migrate.run(config)
    assert summary.status == "failed"
    (failure,) = migrate.failures(config, "p")
    assert ("3", summary.run_id) == (failure.identity, failure.run_id)
    error = failure.error
    assert (
        error.kind,
        error.type,
        error.message,
        error.attempts,
    ) == ("process", "ValueError", "bad record 3", 1)
    assert "helpers.py" in error.details["where"]


def test_top_errors_counts_the_most_common(tmp_path: Path, store_url: str) -> None:
    """The summary lists the failures' most common errors, most common first."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if int(item.identity) % 2:
            raise KeyError("missing field")
        if int(item.identity) % 3 == 0:
            raise ValueError("bad")

    source = migrate.MemorySource([{"id": i} for i in range(1, 13)])
    config = config_of(tmp_path, migrate.Migration("p", source, process), store=store_url)
    summary = migrate.run(config)
    assert [(error.type, error.count) for error in summary.top_errors] == [
        ("KeyError", 6),
        ("ValueError", 2),
    ]


def test_top_errors_group_messages_that_differ_only_in_numbers(
    tmp_path: Path, store_url: str
) -> None:
    """Messages naming different ids count as one error, shown with <n> for the numbers."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if int(item.identity) < 4:
            raise ValueError(f"row {item.identity} has no title")
        if int(item.identity) == 4:
            raise ValueError("quota exceeded")

    source = migrate.MemorySource([{"id": i} for i in range(1, 7)])
    summary = migrate.run(
        config_of(tmp_path, migrate.Migration("p", source, process), store=store_url)
    )
    assert [(e.message, e.count) for e in summary.top_errors] == [
        ("row <n> has no title", 3),
        ("quota exceeded", 1),
    ]


def test_progress_reports_each_committed_window(
    csv_people: Path, tmp_path: Path, store_url: str
) -> None:
    """The progress callback gets start, one event per window with counts so far, then end."""
    events: list[migrate.ProgressEvent] = []
    source = migrate.CsvSource(csv_people, window_size=4)
    config = config_of(tmp_path, migrate.Migration("p", source, noop), store=store_url)
    migrate.run(config, progress=events.append)
    assert [(e.kind, e.window, e.processed) for e in events if e.kind != "item"] == [
        ("start", 0, 0),
        ("window", 1, 4),
        ("window", 2, 8),
        ("window", 3, 10),
        ("end", 3, 10),
    ]
    assert {"p"} == {e.definition_id for e in events}


@pytest.mark.parametrize("concurrency", [1, 3])
def test_progress_ticks_between_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrency: int, store_url: str
) -> None:
    """Item events report items processed inside a window before it is committed."""
    monkeypatch.setattr("migrate._window_loop._TICK_EVERY", 0.0)  # a tick after every item
    events: list[migrate.ProgressEvent] = []
    source = migrate.MemorySource(people(6), window_size=3)
    config = config_of(
        tmp_path, migrate.Migration("p", source, noop, concurrency=concurrency), store=store_url
    )
    migrate.run(config, progress=events.append)
    assert [(e.kind, e.window, e.processed) for e in events] == [
        ("start", 0, 0),
        ("item", 0, 1),
        ("item", 0, 2),
        ("item", 0, 3),
        ("window", 1, 3),
        ("item", 1, 4),
        ("item", 1, 5),
        ("item", 1, 6),
        ("window", 2, 6),
        ("end", 2, 6),
    ]


def test_run_record_is_stored_with_counts(csv_people: Path, tmp_path: Path, store_url: str) -> None:
    """The run is stored as succeeded with its per-definition counts and mode."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(csv_people), noop), store=store_url
    )
    summary = migrate.run(config)
    (record,) = migrate.runs(config)
    assert (summary.run_id, "succeeded", "normal") == (record.run_id, record.status, record.mode)
    assert migrate.Counts(migrated=10) == record.definitions["p"].counts
    assert record.ended_at is not None


def test_interrupted_run_loses_nothing_and_counts_nothing_twice(
    tmp_path: Path, store_url: str
) -> None:
    """Ctrl-C mid-window keeps what was done, marks the item it was in interrupted; then resume."""
    path = write_csv(tmp_path / "p.csv", people(10))
    seen: list[str] = []
    interrupt = {"on": "8"}

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity == interrupt["on"]:
            raise KeyboardInterrupt
        seen.append(item.identity)

    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path, window_size=3), process),
        store=store_url,
    )
    with pytest.raises(KeyboardInterrupt):
        migrate.run(config)
    (crashed,) = migrate.runs(config)
    assert ("failed", migrate.Counts(migrated=7, interrupted=1)) == (
        crashed.status,
        crashed.definitions["p"].counts,
    )
    assert ("interrupted", "migrated") == (states(config, "p")["8"], states(config, "p")["7"])
    with pytest.raises(KeyboardInterrupt):  # 8 is a target of --failed, like a failure
        migrate.run(config, migrate.RunOptions(failed=True))
    assert ("interrupted", 1) == (
        states(config, "p")["8"],
        migrate.runs(config)[0].definitions["p"].counts.interrupted,
    )
    interrupt["on"] = ""
    seen.clear()
    summary = migrate.run(config)
    assert ["8", "9", "10"] == seen
    assert migrate.Counts(migrated=3, unchanged=1) == summary.definitions["p"].counts
    assert 10 == sum(r.definitions["p"].counts.migrated for r in migrate.runs(config))
    assert 0 == migrate.status(config).definitions["p"].interrupted
    assert dict.fromkeys((str(i) for i in range(1, 11)), "migrated") == states(config, "p")


def test_source_read_failure_stops_the_definition_with_an_error(
    tmp_path: Path, store_url: str
) -> None:
    """A window read that fails stops the definition; the run is failed with the error."""
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(tmp_path / "missing.csv"), noop),
        store=store_url,
    )
    summary = migrate.run(config)
    result = summary.definitions["p"]
    assert (summary.status, result.status) == ("failed", "failed")
    assert result.error is not None
    assert "failed after 1 attempt:" in result.error


def test_a_definition_named_twice_runs_once(
    csv_people: Path, tmp_path: Path, store_url: str
) -> None:
    """Naming a definition twice plans it once."""
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(csv_people), recorder(seen)),
        store=store_url,
    )
    migrate.run(config, migrate.RunOptions(definitions=("p", "p")))
    assert len(seen) == 10
