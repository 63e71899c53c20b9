"""The Pipeline Execution Scope: journal, tracking records, lookups, error kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import migrate
from tests.migrate.helpers import config_of, people


def test_scope_carries_run_definition_and_identity(tmp_path: Path) -> None:
    """scope.run_id, definition_id and identity describe the item being processed."""
    seen: list[tuple[str, str, str]] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append((scope.run_id, scope.definition_id, scope.identity))

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), process))
    summary = migrate.run(config)
    assert [(summary.run_id, "p", "1"), (summary.run_id, "p", "2")] == seen


def test_journal_is_kept_on_a_failed_item(tmp_path: Path) -> None:
    """Journal entries recorded before a failure are stored with the failed state."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.journal.change("crm", "POST /authors", key=7)
        scope.journal.diagnostic("name was blank", field="name")
        raise RuntimeError("second write failed")

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert (
        {"kind": "change", "destination": "crm", "operation": "POST /authors", "key": 7},
        {"kind": "diagnostic", "message": "name was blank", "field": "name"},
    ) == failure.journal


def test_tracking_record_is_stored_and_seen_by_the_next_run(tmp_path: Path) -> None:
    """scope.track stores a record; a later run of the item sees it as scope.tracking."""
    seen: list[Any] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append(scope.tracking)
        scope.track({"destination_id": 100 + int(item.identity)})

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    migrate.run(config, migrate.RunOptions(ids=("1",)))
    assert [None, {"destination_id": 101}] == seen


def test_lookup_reads_another_definitions_tracking_record(tmp_path: Path) -> None:
    """scope.lookup(definition, identity) returns that item's tracking record, or None."""
    found: list[Any] = []

    def author(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.track({"destination_id": f"A-{item.identity}"})

    def book(item: migrate.Item, scope: migrate.Scope) -> None:
        found.append(scope.lookup("authors", item.data["author"]))

    books = migrate.MemorySource([{"id": "b1", "author": 2}, {"id": "b2", "author": 9}])
    config = config_of(
        tmp_path,
        migrate.Migration("authors", migrate.MemorySource(people(3)), author),
        migrate.Migration("books", books, book, requires=["authors"]),
    )
    migrate.run(config)
    assert [{"destination_id": "A-2"}, None] == found


def test_unjsonable_tracking_record_fails_the_item_with_kind_tracking(tmp_path: Path) -> None:
    """A tracking record that is not JSON-able fails the item with kind ``tracking``."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.track({"when": object()})

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert ("tracking", "TrackingError") == (failure.error.kind, failure.error.type)


def test_lookup_of_an_unknown_definition_fails_with_kind_tracking(tmp_path: Path) -> None:
    """Looking up an unknown definition fails the item with kind ``tracking``."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.lookup("nope", "1")

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert "tracking" == failure.error.kind
    assert "unknown definition 'nope'" in failure.error.message


def test_destination_error_is_kind_destination_with_cause_details(tmp_path: Path) -> None:
    """A DestinationError out of the process is kind ``destination`` with its cause in details."""

    class ApiError(Exception):
        status = 422

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        raise migrate.DestinationError("crm rejected the record", ApiError("invalid email"))

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    error = migrate.failures(config, "p")[0].error
    assert ("destination", "crm rejected the record") == (error.kind, error.message)
    assert ("ApiError: invalid email", 422) == (error.details["cause"], error.details["status"])


def test_previous_tracking_is_kept_when_the_item_fails(tmp_path: Path) -> None:
    """A failing reprocess keeps the tracking record saved earlier."""
    fail: set[str] = set()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity in fail:
            raise ValueError("now failing")
        scope.track({"destination_id": 5})

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    fail.add("1")
    migrate.run(config, migrate.RunOptions(ids=("1",)))
    with config.open_store() as store:
        state = store.item("p", "1")
    assert state is not None
    assert ("failed", {"destination_id": 5}) == (state.status, state.tracking)
