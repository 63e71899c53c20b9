"""Rollback's destination side: SqlDestination's created flag, rollback and undo; compensate."""

from __future__ import annotations

import json
import pickle
import secrets
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import migrate
from effects import Effect
from migrate import RollbackItem, Scope, SqlDestination
from tests.migrate.helpers import config_of
from tests.postgres_server import PostgresServer

Connect = Callable[[], sqlite3.Connection]
Process = Callable[[migrate.Item, Scope], None]


def _database(tmp_path: Path, statements: list[str] | None = None) -> Connect:
    """A SQLite destination file with a ``people`` table; *statements*: every SQL it runs."""
    path = tmp_path / "dest.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
    db.close()

    def connect() -> sqlite3.Connection:
        connection = sqlite3.connect(path)
        if statements is not None:
            connection.set_trace_callback(statements.append)
        return connection

    return connect


def _rows(connect: Connect) -> list[tuple[Any, ...]]:
    db = connect()
    try:
        return db.execute("SELECT id, name FROM people ORDER BY id").fetchall()
    finally:
        db.close()


def _insert_by_hand(connect: Connect, *rows: tuple[int, str]) -> None:
    db = connect()
    try:
        db.executemany("INSERT INTO people VALUES (?, ?)", rows)
        db.commit()
    finally:
        db.close()


def _upserting(table: SqlDestination) -> Process:
    def process(item: migrate.Item, scope: Scope) -> None:
        table.upsert({"id": int(item.identity), "name": item.data["name"]}).run_or_raise()

    return process


def _config(
    tmp_path: Path,
    records: Iterable[dict[str, Any]],
    process: Process,
    store: str = "sqlite:///state.db",
) -> migrate.Config:
    migration = migrate.Migration("people", migrate.MemorySource(records), process)
    return config_of(tmp_path, migration, store=store)


def _item(config: migrate.Config, identity: str, definition: str = "people") -> RollbackItem:
    """The RollbackItem of a stored state, built as the rollback runner builds it."""
    with config.open_store() as store:
        state = store.item(definition, identity)
    assert state is not None
    journal = tuple(entry for entry in state.journal if entry.get("kind") == "change")
    return RollbackItem(state.identity, state.status, state.version, journal, (), state.tracking)


def _scope(identity: str = "1") -> Scope:
    return Scope("rollback-run", "people", identity)


def _change(destination: str, operation: str, **details: Any) -> dict[str, Any]:
    return {"kind": "change", "destination": destination, "operation": operation, **details}


def _upserted(key: Any, created: bool) -> dict[str, Any]:
    return _change("sql:people", "upsert", key=key, created=created)


# --- created ---------------------------------------------------------------------------------


def test_an_upsert_records_whether_it_created_the_row(tmp_path: Path) -> None:
    """A row inserted by the upsert is created; a row that was there first is not."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (2, "by hand"))
    table = SqlDestination(connect, "people", "id")
    config = _config(
        tmp_path, [{"id": 1, "name": "Ada"}, {"id": 2, "name": "Alan"}], _upserting(table)
    )
    migrate.run(config)
    assert (_upserted(1, True),) == _item(config, "1").journal
    assert (_upserted(2, False),) == _item(config, "2").journal


def test_created_stays_true_across_a_run_that_updates_and_costs_no_query(
    tmp_path: Path, store_url: str
) -> None:
    """An --update run finds the rows existing, yet its entries keep created from the first
    run's journal (kept by either store), without a query to find the row; the first run
    queried once per upsert."""
    statements: list[str] = []
    connect = _database(tmp_path, statements)
    _insert_by_hand(connect, (2, "by hand"))
    table = SqlDestination(connect, "people", "id")
    records = [{"id": 1, "name": "Ada"}, {"id": 2, "name": "Alan"}]
    config = _config(tmp_path, records, _upserting(table), store_url)
    statements.clear()
    migrate.run(config)
    assert 2 == sum(s.startswith('SELECT 1 FROM "people"') for s in statements)
    statements.clear()
    second = migrate.run(config, migrate.RunOptions(update=True))
    assert 2 == second.definitions["people"].counts.migrated
    assert not [s for s in statements if s.startswith("SELECT")]
    with config.open_store() as store:
        assert {second.run_id} == {state.run_id for state in store.items("people")}
    assert (_upserted(1, True),) == _item(config, "1").journal
    assert (_upserted(2, False),) == _item(config, "2").journal


def test_the_scope_shows_the_journal_stored_by_the_earlier_run(tmp_path: Path) -> None:
    """scope.prior_journal is the stored journal of the item's state, () for a new item."""
    table = SqlDestination(_database(tmp_path), "people", "id")
    seen: list[tuple[Any, ...]] = []

    def process(item: migrate.Item, scope: Scope) -> None:
        seen.append(tuple(dict(entry) for entry in scope.prior_journal))
        scope.journal.diagnostic("seen", run=len(seen))
        table.upsert({"id": 1, "name": "Ada"}).run_or_raise()

    config = _config(tmp_path, [{"id": 1, "name": "Ada"}], process)
    migrate.run(config)
    migrate.run(config, migrate.RunOptions(update=True))
    first_journal = ({"kind": "diagnostic", "message": "seen", "run": 1}, _upserted(1, True))
    assert [(), first_journal] == seen


def test_a_second_upsert_of_a_key_in_one_run_keeps_created(tmp_path: Path) -> None:
    """Upserting a key twice in one item: the second finds the row, but it is still created."""
    connect = _database(tmp_path)
    table = SqlDestination(connect, "people", "id")

    def process(item: migrate.Item, scope: Scope) -> None:
        table.upsert({"id": 1, "name": "Ada"}).run_or_raise()
        table.upsert({"id": 1, "name": "Ada L."}).run_or_raise()

    config = _config(tmp_path, [{"id": 1}], process)
    migrate.run(config)
    assert (_upserted(1, True), _upserted(1, True)) == _item(config, "1").journal


def test_created_is_recorded_without_batching_too(tmp_path: Path) -> None:
    """batch=False: the query and the upsert commit on their own connection, same entries."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (2, "by hand"))
    table = SqlDestination(connect, "people", "id", batch=False)
    config = _config(
        tmp_path, [{"id": 1, "name": "Ada"}, {"id": 2, "name": "Alan"}], _upserting(table)
    )
    migrate.run(config)
    assert (_upserted(1, True),) == _item(config, "1").journal
    assert (_upserted(2, False),) == _item(config, "2").journal


# --- SqlDestination.rollback and undo ---------------------------------------------------------


def test_rollback_deletes_created_rows_and_keeps_rows_that_were_there(tmp_path: Path) -> None:
    """A row inserted by hand before the first migration, then migrated (updated) and rolled
    back, is still there (with the migrated values); the row the migration created is gone."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (2, "by hand"))
    table = SqlDestination(connect, "people", "id")
    config = _config(
        tmp_path, [{"id": 1, "name": "Ada"}, {"id": 2, "name": "Alan"}], _upserting(table)
    )
    migrate.run(config)
    migrate.run(config, migrate.RunOptions(update=True))
    for identity in ("1", "2"):
        table.rollback(_item(config, identity), _scope(identity))
    assert [(2, "Alan")] == _rows(connect)


def test_rolling_back_twice_or_a_missing_row_is_a_success(tmp_path: Path) -> None:
    """A row already gone (rolled back before, or deleted by hand) is a successful undo."""
    connect = _database(tmp_path)
    table = SqlDestination(connect, "people", "id")
    config = _config(
        tmp_path, [{"id": 1, "name": "Ada"}, {"id": 3, "name": "Cy"}], _upserting(table)
    )
    migrate.run(config)
    first = _item(config, "1")
    table.rollback(first, _scope())
    table.rollback(first, _scope())
    table.undo(first.journal[0], _scope())
    db = connect()
    db.execute("DELETE FROM people WHERE id = 3")
    db.commit()
    db.close()
    table.rollback(_item(config, "3"), _scope("3"))
    assert [] == _rows(connect)


def test_rollback_in_a_run_commits_at_once(tmp_path: Path) -> None:
    """Called while a run's window batches this table's writes, undo still commits alone."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (7, "made"))
    table = SqlDestination(connect, "people", "id")
    done: list[list[tuple[Any, ...]]] = []

    def process(item: migrate.Item, scope: Scope) -> None:
        table.undo(_upserted(7, True), scope)
        done.append(_rows(connect))

    migrate.run(_config(tmp_path, [{"id": 1}], process))
    assert [[]] == done


def test_rollback_skips_what_an_earlier_attempt_undid(tmp_path: Path) -> None:
    """An entry listed by an earlier attempt is not undone again (its row stays)."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (1, "recreated by hand"), (2, "made"))
    table = SqlDestination(connect, "people", "id")
    attempt = {"run_id": "r1", "entries": [_upserted(1, True)], "error": {}, "failed_at": 1.0}
    item = RollbackItem("1", "migrated", None, (_upserted(1, True), _upserted(2, True)), (attempt,))
    table.rollback(item, _scope())
    assert [(1, "recreated by hand")] == _rows(connect)


def test_rollback_refuses_changes_of_another_destination(tmp_path: Path) -> None:
    """An item that also changed another destination is refused whole: use compensate."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (1, "made"))
    table = SqlDestination(connect, "people", "id")
    item = RollbackItem(
        "1", "migrated", None, (_upserted(1, True), _change("api", "PUT /x", key=1))
    )
    with pytest.raises(ValueError, match=r"'api'.*migrate\.compensate.*nothing was undone"):
        table.rollback(item, _scope())
    assert [(1, "made")] == _rows(connect)


def test_undo_leaves_deletes_and_entries_without_created(tmp_path: Path) -> None:
    """A delete entry and an upsert entry without created (an older journal) keep the row."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (1, "kept"))
    table = SqlDestination(connect, "people", "id")
    table.undo(_change("sql:people", "delete", key=1), _scope())
    table.undo(_change("sql:people", "upsert", key=1), _scope())
    table.undo(_change("sql:people", "upsert", key=1, created="yes"), _scope())
    assert [(1, "kept")] == _rows(connect)


@pytest.mark.parametrize(
    ("entry", "error", "message"),
    [
        (_change("sql:people", "upsert", created=True), ValueError, "has no key"),
        (_upserted([1, 2], True), ValueError, "key of type list"),
        (_upserted({"id": 1}, True), ValueError, "key of type dict"),
        (_change("sql:people", "truncate", key=1), ValueError, "only upsert and delete"),
        (_upserted(1, True) | {"destination": "sql:other"}, ValueError, "not a change entry of"),
        (_upserted(1, True) | {"kind": "diagnostic"}, ValueError, "not a change entry"),
        ("upsert 1", TypeError, "must be a mapping"),
    ],
)
def test_undo_refuses_hostile_entries(
    tmp_path: Path, entry: Any, error: type[Exception], message: str
) -> None:
    """An entry without a usable key, of another destination or operation, or not a mapping,
    is refused with a message saying why; nothing is deleted."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (1, "kept"))
    table = SqlDestination(connect, "people", "id")
    with pytest.raises(error, match=message):
        table.undo(entry, _scope())
    assert [(1, "kept")] == _rows(connect)


def test_rollback_checks_every_entry_before_deleting(tmp_path: Path) -> None:
    """One unusable entry refuses the item's rollback with no row deleted."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (1, "made"))
    table = SqlDestination(connect, "people", "id")
    item = RollbackItem(
        "1", "migrated", None, (_change("sql:people", "upsert", created=True), _upserted(1, True))
    )
    with pytest.raises(ValueError, match="has no key"):
        table.rollback(item, _scope())
    assert [(1, "made")] == _rows(connect)


def test_a_failing_delete_is_a_destination_error_and_keeps_every_row(tmp_path: Path) -> None:
    """The deletes of one item commit together: one that fails undoes none."""
    connect = _database(tmp_path)
    db = connect()
    db.execute(
        "CREATE TRIGGER no_two BEFORE DELETE ON people WHEN old.id = 2 BEGIN "
        "SELECT RAISE(ABORT, 'row 2 is pinned'); END"
    )
    db.executemany("INSERT INTO people VALUES (?, ?)", [(1, "a"), (2, "b")])
    db.commit()
    db.close()
    table = SqlDestination(connect, "people", "id")
    item = RollbackItem("1", "migrated", None, (_upserted(2, True), _upserted(1, True)))
    with pytest.raises(migrate.DestinationError, match="row 2 is pinned") as caught:
        table.rollback(item, _scope())
    assert "rollback of item '1'" in str(caught.value)
    assert [(1, "a"), (2, "b")] == _rows(connect)


def test_created_and_rollback_on_a_postgresql_destination(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """On PostgreSQL (format paramstyle), the query, the created flags and the rollback."""
    schema = f"dest_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"CREATE TABLE {schema}.people (id integer PRIMARY KEY, name text)")
        admin.execute(f"INSERT INTO {schema}.people VALUES (2, 'by hand')")

    def connect() -> Any:
        return psycopg.connect(postgres_server.dsn(), options=f"-c search_path={schema}")

    table = SqlDestination(connect, "people", "id", paramstyle="format")
    records = [{"id": 1, "name": "Ada"}, {"id": 2, "name": "Alan"}]
    config = _config(tmp_path, records, _upserting(table))
    migrate.run(config)
    migrate.run(config, migrate.RunOptions(update=True))
    assert (_upserted(1, True),) == _item(config, "1").journal
    assert (_upserted(2, False),) == _item(config, "2").journal
    for identity in ("1", "2", "1"):
        table.rollback(_item(config, identity), _scope(identity))
    with connect() as db:
        assert [(2, "Alan")] == db.execute("SELECT id, name FROM people").fetchall()


# --- compensate ---------------------------------------------------------------------------------


def _two_destinations(tmp_path: Path) -> tuple[migrate.Config, SqlDestination, Connect]:
    """A run writing the people table, then an HTTP-like API, for ids 1 and 2 (2 pre-existing)."""
    connect = _database(tmp_path)
    _insert_by_hand(connect, (2, "by hand"))
    table = SqlDestination(connect, "people", "id")

    def process(item: migrate.Item, scope: Scope) -> None:
        table.upsert({"id": int(item.identity), "name": item.data["name"]}).run_or_raise()
        scope.journal.diagnostic("between")
        scope.journal.change("api", "PUT /x", key=f"/people/{item.identity}", status=201)

    config = _config(tmp_path, [{"id": 1, "name": "Ada"}, {"id": 2, "name": "Alan"}], process)
    migrate.run(config)
    return config, table, connect


def test_two_destinations_are_undone_in_reverse_order(tmp_path: Path) -> None:
    """compensate walks the stored journal newest first: the API's entry, then the table's."""
    config, table, connect = _two_destinations(tmp_path)
    calls: list[tuple[str, Any]] = []

    def undo_table(entry: dict[str, Any], scope: Scope) -> None:
        calls.append(("sql", entry["key"]))
        table.undo(entry, scope)

    def undo_api(entry: dict[str, Any], scope: Scope) -> None:
        calls.append(("api", entry["key"]))

    handlers = {table.name: undo_table, "api": undo_api}
    undone = migrate.compensate(_item(config, "1"), _scope("1"), handlers)
    migrate.compensate(_item(config, "2"), _scope("2"), handlers)
    expected_calls = [("api", "/people/1"), ("sql", 1), ("api", "/people/2"), ("sql", 2)]
    assert expected_calls == calls
    assert (_change("api", "PUT /x", key="/people/1", status=201), _upserted(1, True)) == undone
    assert [(2, "Alan")] == _rows(connect)


def test_a_failing_handler_stops_the_walk_and_carries_what_was_undone() -> None:
    """The newest entry is undone, the next fails: the oldest is not called, and the error
    names the failed entry and carries the undone one, with the handler's error as cause."""
    journal = (
        _change("audit", "POST /log", key=1),
        _upserted(1, True),
        _change("api", "PUT /x", key=1),
    )
    item = RollbackItem("1", "migrated", None, journal)
    calls: list[str] = []
    pinned = RuntimeError("row is pinned")

    def failing(entry: dict[str, Any], scope: Scope) -> None:
        calls.append(entry["destination"])
        if entry["destination"] == "sql:people":
            raise pinned

    handlers = {"audit": failing, "sql:people": failing, "api": failing}
    with pytest.raises(migrate.CompensationError) as caught:
        migrate.compensate(item, _scope(), handlers)
    error = caught.value
    assert ["api", "sql:people"] == calls
    assert (journal[2],) == error.entries
    assert (journal[1], "sql:people") == (error.entry, error.destination)
    assert pinned is error.cause
    assert pinned is error.__cause__
    assert isinstance(error, migrate.MigrateError)
    assert "stopped at 'sql:people' upsert of key 1: RuntimeError: row is pinned" in str(error)
    assert "1 entry undone before it" in str(error)
    # What a runner records is JSON as it is, and the error survives pickling.
    json.dumps({"entries": list(error.entries), "error": {"type": "x", "message": str(error)}})
    copy = pickle.loads(pickle.dumps(error))
    assert (error.entries, error.destination, str(error)) == (
        copy.entries,
        copy.destination,
        str(copy),
    )


def test_entries_undone_by_an_earlier_failed_attempt_are_skipped(tmp_path: Path) -> None:
    """A second attempt starts after what the first recorded as undone (stored as JSON)."""
    config, table, connect = _two_destinations(tmp_path)
    calls: list[str] = []
    fail = [True]

    def undo_table(entry: dict[str, Any], scope: Scope) -> None:
        calls.append("sql")
        if fail[0]:
            raise migrate.DestinationError("database is locked")
        table.undo(entry, scope)

    def undo_api(entry: dict[str, Any], scope: Scope) -> None:
        calls.append("api")

    handlers = {table.name: undo_table, "api": undo_api}
    item = _item(config, "1")
    with pytest.raises(migrate.CompensationError) as caught:
        migrate.compensate(item, _scope(), handlers)
    attempt = json.loads(
        json.dumps(
            {
                "run_id": "r9",
                "entries": list(caught.value.entries),
                "error": {"type": "CompensationError", "message": str(caught.value)},
                "failed_at": 1.5,
            }
        )
    )
    fail[0] = False
    again = RollbackItem(item.identity, item.status, item.source_version, item.journal, (attempt,))
    assert (_upserted(1, True),) == migrate.compensate(again, _scope(), handlers)
    assert ["api", "sql", "sql"] == calls
    assert [(2, "Alan")] == _rows(connect)


def test_an_entry_recorded_twice_is_skipped_once() -> None:
    """Two equal entries, one undone by an earlier attempt: the other is still undone."""
    entry = _change("api", "POST /counter", key=1)
    attempt = {"run_id": "r1", "entries": [entry], "error": {}, "failed_at": 1.0}
    calls: list[dict[str, Any]] = []
    item = RollbackItem("1", "migrated", None, (entry, entry), (attempt,))
    migrate.compensate(item, _scope(), {"api": lambda e, s: calls.append(e)})
    assert [entry] == calls


def test_a_destination_without_a_handler_undoes_nothing() -> None:
    """Every entry's destination is checked first: one without a handler (or without a name)
    refuses the walk before any handler runs, naming it."""
    calls: list[str] = []
    handlers = {"api": lambda entry, scope: calls.append("api")}
    journal = (_change("sql:people", "upsert", key=1), _change("api", "PUT /x"))
    with pytest.raises(ValueError, match=r"no handler for destination 'sql:people'.*'api'"):
        migrate.compensate(RollbackItem("1", "migrated", None, journal), _scope(), handlers)
    nameless = ({"kind": "change", "operation": "PUT"}, _change("api", "PUT /x"))
    with pytest.raises(ValueError, match="names no destination"):
        migrate.compensate(RollbackItem("1", "migrated", None, nameless), _scope(), handlers)
    odd = ({"kind": "change", "destination": 5}, _change("api", "PUT /x"))
    with pytest.raises(ValueError, match="names no destination"):
        migrate.compensate(RollbackItem("1", "migrated", None, odd), _scope(), handlers)
    assert [] == calls


def test_entries_that_record_no_change_are_passed_over() -> None:
    """Diagnostics, values that are not mappings, and malformed attempts are passed over."""
    calls: list[Any] = []
    journal: tuple[Any, ...] = (
        "not an entry",
        7,
        None,
        {"kind": "diagnostic", "message": "x"},
        _change("api", "PUT /x", key=1),
    )
    attempts: tuple[Any, ...] = ("junk", {"entries": "junk"}, {"entries": [3, None]}, {})
    item = RollbackItem("1", "migrated", None, journal, attempts)
    migrate.compensate(item, _scope(), {"api": lambda entry, scope: calls.append(entry["key"])})
    assert [1] == calls


def test_a_handler_gets_a_copy_of_its_entry() -> None:
    """A handler changing its entry changes neither the item nor what is reported undone."""
    entry = _change("api", "PUT /x", key=1)
    item = RollbackItem("1", "migrated", None, (entry,))

    def meddle(got: dict[str, Any], scope: Scope) -> None:
        got["key"] = 99

    assert (entry,) == migrate.compensate(item, _scope(), {"api": meddle})
    assert 1 == item.journal[0]["key"]


def test_handlers_that_do_not_do_their_work_fail() -> None:
    """compensate refuses an async handler before undoing anything; a handler returning an
    effect (never run) or a coroutine fails its entry."""

    async def undo_async(entry: dict[str, Any], scope: Scope) -> None:
        return None

    item = RollbackItem("1", "migrated", None, (_change("api", "PUT /x"),))
    with pytest.raises(TypeError, match=r"undo_async, is async.*compensate_async"):
        migrate.compensate(item, _scope(), {"api": undo_async})
    with pytest.raises(TypeError, match="handlers must map"):
        migrate.compensate(item, _scope(), [undo_async])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not callable"):
        migrate.compensate(item, _scope(), {"api": "undo"})  # type: ignore[dict-item]
    returns_effect = {"api": lambda entry, scope: Effect.succeed(None)}
    with pytest.raises(migrate.CompensationError, match="returned an effect") as caught:
        migrate.compensate(item, _scope(), returns_effect)
    assert isinstance(caught.value.cause, TypeError)
    assert () == caught.value.entries

    def returns_coroutine(entry: dict[str, Any], scope: Scope) -> Any:
        return undo_async(entry, scope)

    with pytest.raises(migrate.CompensationError, match="use compensate_async"):
        migrate.compensate(item, _scope(), {"api": returns_coroutine})


@pytest.mark.anyio
async def test_compensate_async_awaits_async_handlers_and_calls_plain_ones() -> None:
    """compensate_async: async and plain handlers in reverse order; a failure as compensate's."""
    calls: list[str] = []

    async def undo_api(entry: dict[str, Any], scope: Scope) -> None:
        calls.append("api")

    def undo_table(entry: dict[str, Any], scope: Scope) -> None:
        calls.append("sql")

    journal = (_upserted(1, True), _change("api", "PUT /x"))
    item = RollbackItem("1", "migrated", None, journal)
    undone = await migrate.compensate_async(
        item, _scope(), {"sql:people": undo_table, "api": undo_api}
    )
    assert ["api", "sql"] == calls
    assert (journal[1], journal[0]) == undone

    async def failing(entry: dict[str, Any], scope: Scope) -> None:
        raise ConnectionError("api down")

    with pytest.raises(migrate.CompensationError) as caught:
        await migrate.compensate_async(item, _scope(), {"sql:people": undo_table, "api": failing})
    assert isinstance(caught.value.cause, ConnectionError)
    assert ("api", ()) == (caught.value.destination, caught.value.entries)
    with pytest.raises(ValueError, match="no handler"):
        await migrate.compensate_async(item, _scope(), {"api": undo_api})


def test_an_item_with_no_changes_compensates_to_nothing() -> None:
    """An empty journal (a skipped item) is a successful, empty walk."""
    assert () == migrate.compensate(RollbackItem("1", "skipped", None), _scope(), {})
