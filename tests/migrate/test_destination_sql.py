"""SqlDestination and the destination() helper: effects, idempotence, journal, errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import migrate
from effects import Effect, FatalError, retry
from migrate import Scope


def _database(tmp_path: Path) -> Callable[[], sqlite3.Connection]:
    path = tmp_path / "dest.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, email TEXT)")
    db.close()
    return lambda: sqlite3.connect(path)


def _rows(connect: Callable[[], sqlite3.Connection]) -> list[tuple[Any, ...]]:
    db = connect()
    try:
        return db.execute("SELECT * FROM people ORDER BY id").fetchall()
    finally:
        db.close()


def test_upsert_is_an_effect_that_runs_only_when_run(tmp_path: Path) -> None:
    """upsert returns an Effect; nothing is written until it runs."""
    connect = _database(tmp_path)
    effect = migrate.SqlDestination(connect, "people", "id").upsert({"id": 1, "name": "Ada"})
    assert isinstance(effect, Effect)
    assert _rows(connect) == []
    effect.run_or_raise()
    assert _rows(connect) == [(1, "Ada", None)]


def test_upsert_is_idempotent_by_key(tmp_path: Path) -> None:
    """Upserting the same key twice leaves one row with the latest values."""
    connect = _database(tmp_path)
    people = migrate.SqlDestination(connect, "people", "id")
    people.upsert({"id": 1, "name": "Ada", "email": "a@x"}).run_or_raise()
    people.upsert({"id": 1, "name": "Ada L.", "email": "a@x"}).run_or_raise()
    people.upsert({"id": 1, "name": "Ada L.", "email": "a@x"}).run_or_raise()
    assert _rows(connect) == [(1, "Ada L.", "a@x")]


def test_delete_is_idempotent(tmp_path: Path) -> None:
    """Deleting a key removes its row; deleting it again succeeds."""
    connect = _database(tmp_path)
    people = migrate.SqlDestination(connect, "people", "id")
    people.upsert({"id": 1, "name": "Ada"}).run_or_raise()
    people.delete(1).run_or_raise()
    people.delete(1).run_or_raise()
    assert _rows(connect) == []


def test_success_records_a_journal_change_entry(tmp_path: Path) -> None:
    """Inside a scope, a successful upsert/delete adds a change entry to the item's journal."""
    people = migrate.SqlDestination(_database(tmp_path), "people", "id")
    seen: list[list[dict[str, Any]]] = []

    def process(item: migrate.Item, scope: Scope) -> None:
        people.upsert({"id": int(item.identity), "name": item.data["name"]}).run_or_raise()
        people.delete(int(item.identity)).run_or_raise()
        seen.append(scope.journal.entries)

    config = migrate.Config(
        [migrate.Migration("p", migrate.MemorySource([{"id": 3, "name": "C"}]), process)],
        base_dir=tmp_path,
    )
    migrate.run(config)
    expected = [
        {
            "kind": "change",
            "destination": "sql:people",
            "operation": "upsert",
            "key": 3,
            "created": True,
        },
        {"kind": "change", "destination": "sql:people", "operation": "delete", "key": 3},
    ]
    assert [expected] == seen
    with config.open_store() as store:
        state = store.item("p", "3")
    assert state is not None
    assert tuple(expected) == state.journal


def test_failure_is_a_destination_error_keeping_the_driver_error(tmp_path: Path) -> None:
    """A failing write is a DestinationError whose cause is the driver's error."""
    people = migrate.SqlDestination(_database(tmp_path), "people", "id")
    failure = people.upsert({"id": 1, "nope": "x"}).run().failure()
    assert isinstance(failure, migrate.DestinationError)
    assert isinstance(failure.cause, sqlite3.OperationalError)
    assert "sql:people: upsert of key 1 failed" in str(failure)


def test_failed_write_adds_no_journal_entry(tmp_path: Path) -> None:
    """A failed call records nothing in the journal."""
    people = migrate.SqlDestination(_database(tmp_path), "people", "id")
    scope = Scope("r", "d", "1")
    from migrate._pipeline import _CURRENT  # pyright: ignore[reportPrivateUsage]

    token = _CURRENT.set(scope)
    try:
        people.upsert({"id": 1, "nope": "x"}).run()
    finally:
        _CURRENT.reset(token)
    assert scope.journal.entries == []


def test_record_without_key_is_refused_at_once(tmp_path: Path) -> None:
    """upsert of a record lacking the key column raises ValueError naming the key."""
    people = migrate.SqlDestination(_database(tmp_path), "people", "id")
    with pytest.raises(ValueError, match="record must have the key column 'id'"):
        people.upsert({"name": "x"})


def test_unsafe_column_names_are_refused(tmp_path: Path) -> None:
    """Record columns that are not plain SQL names are refused."""
    people = migrate.SqlDestination(_database(tmp_path), "people", "id")
    with pytest.raises(ValueError, match="record column must be a plain SQL name"):
        people.upsert({"id": 1, "name; DROP TABLE people": "x"})


def test_retry_repeats_a_transiently_failing_upsert(tmp_path: Path) -> None:
    """A Retry applied with .pipe repeats the upsert until it succeeds."""
    inner = _database(tmp_path)
    calls = [0]

    def flaky() -> sqlite3.Connection:
        calls[0] += 1
        if calls[0] < 3:
            raise ConnectionResetError("reset")
        return inner()

    people = migrate.SqlDestination(flaky, "people", "id")
    people.upsert({"id": 1, "name": "Ada"}).pipe(retry(times=5)).run_or_raise()
    assert (calls[0], _rows(inner)) == (3, [(1, "Ada", None)])


def test_destination_helper_wraps_a_sync_callable() -> None:
    """destination(fn) returns a function producing Effects; errors become DestinationError."""
    calls: list[int] = []

    @migrate.destination(name="crm", key=lambda n: n)
    def put(n: int) -> int:
        calls.append(n)
        if n < 0:
            raise RuntimeError("negative")
        return n * 2

    effect = put(21)
    assert calls == []
    assert effect.run_or_raise() == 42
    failure = put(-1).run().failure()
    assert isinstance(failure, migrate.DestinationError)
    assert isinstance(failure.cause, RuntimeError)
    assert str(failure) == "crm: RuntimeError: negative"


def test_destination_helper_keeps_fatal_errors_unretried() -> None:
    """A FatalError cause makes the DestinationError non-retryable: one attempt only."""
    calls: list[int] = []

    def charge() -> None:
        calls.append(1)
        raise FatalError("declined")

    failure = migrate.destination(charge)().pipe(retry(times=5)).run().failure()
    assert (len(calls), failure.retryable) == (1, False)


def test_destination_helper_journals_success_in_a_scope() -> None:
    """A successful helper call records a change entry named after the destination."""

    def put(record: dict[str, Any]) -> None:
        pass

    wrapped = migrate.destination(put, name="crm", key=lambda r: r["id"])
    scope = Scope("r", "d", "1")
    from migrate._pipeline import _CURRENT  # pyright: ignore[reportPrivateUsage]

    token = _CURRENT.set(scope)
    try:
        wrapped({"id": 9}).run_or_raise()
    finally:
        _CURRENT.reset(token)
    assert (scope.journal.entries) == [
        {"kind": "change", "destination": "crm", "operation": "put", "key": 9}
    ]


@pytest.mark.anyio
async def test_destination_helper_wraps_an_async_callable() -> None:
    """An async function becomes an AsyncEffect-returning destination call."""

    async def put(n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return n + 1

    wrapped = migrate.destination(put)
    assert await wrapped(2).run_or_raise() == 3
    failure = (await wrapped(-1).run()).failure()
    assert isinstance(failure, migrate.DestinationError)
    assert isinstance(failure.cause, ValueError)
