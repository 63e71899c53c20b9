"""Static typing cases for migrate (checked by mypy and pyright, never run)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, assert_type

import migrate
from effects import AsyncEffect, Effect, retry
from migrate import DestinationError, SourceError
from schedules import exponential

if not TYPE_CHECKING:
    # Run (pytest given this file's path collects it despite --ignore), the cases below would
    # write migrate stores (state.db, .migrate/state.db) into the current folder: skip instead.
    import pytest

    pytest.skip("typing cases: checked by mypy and pyright, never run", allow_module_level=True)


def process(item: migrate.Item, scope: migrate.Scope) -> None:
    assert_type(item.identity, str)
    assert_type(item.version, str | None)
    assert_type(scope.run_id, str)
    assert_type(scope.lookup("authors", 1), dict[str, Any] | None)
    scope.track({"destination_id": 1})
    scope.journal.change("crm", "upsert", key=1)


async def process_async(item: migrate.Item, scope: migrate.Scope) -> None:
    scope.journal.diagnostic("async")


def strategy(read: Effect[Any, SourceError]) -> Effect[Any, SourceError]:
    return read.retry(times=2)


source = migrate.CsvSource("authors.csv", identity="id", version="updated_at")
transient = retry(exponential("250ms"), times=4)

# A Retry value, and any Effect -> Effect function, are source retry strategies.
migration = migrate.Migration(
    "authors",
    source,
    process,
    source_cursor_retry=transient,
    source_lookup_retry=strategy,
    concurrency=4,
)
books = migrate.Migration("books", migrate.MemorySource([]), process_async, requires=["authors"])
config = migrate.Config([migration, books], store="sqlite:///.migrate/state.db")

assert_type(migration.requires, tuple[str, ...])
assert_type(migration.source_cursor_retry, migrate.SourceRetryStrategy | None)
assert_type(config.migrations, tuple[migrate.Migration, ...])
assert_type(source.read(None), Effect[migrate.Window, SourceError])
assert_type(source.lookup("1"), Effect[migrate.Item | migrate.Fault | None, SourceError])
assert_type(source.read(None).pipe(transient), Effect[migrate.Window, SourceError])

people = migrate.SqlDestination(lambda: sqlite3.connect("dest.db"), "people", "id")
assert_type(people.upsert({"id": 1}), Effect[None, DestinationError])
assert_type(people.delete(1), Effect[None, DestinationError])

# Rollback: the table's own rollback, or compensate over several destinations' handlers.
undoing_people = migrate.Migration("people", source, process, rollback=people.rollback)


def undo_crm(entry: dict[str, Any], scope: migrate.Scope) -> None:
    assert_type(entry["key"], Any)


async def undo_crm_async(entry: dict[str, Any], scope: migrate.Scope) -> None:
    pass


def rollback_two(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
    assert_type(scope.prior_journal, tuple[Mapping[str, Any], ...])
    undone = migrate.compensate(item, scope, {people.name: people.undo, "crm": undo_crm})
    assert_type(undone, tuple[dict[str, Any], ...])


async def rollback_two_async(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
    # Inline: mypy joins a plain and an async function held in a variable to `function`.
    await migrate.compensate_async(item, scope, {people.name: people.undo, "crm": undo_crm_async})


try:
    rollback_two(migrate.RollbackItem("1", "migrated", None), migrate.Scope("r", "people", "1"))
except migrate.CompensationError as failed:
    assert_type(failed.entries, tuple[dict[str, Any], ...])
    assert_type(failed.cause, BaseException | None)
undoing_both = migrate.Migration("both", source, process, rollback=rollback_two)
undoing_async = migrate.Migration("both_async", source, process, rollback=rollback_two_async)


@migrate.destination(name="crm")
def put_author(author: dict[str, Any]) -> int:
    return 1


@migrate.destination
async def put_book(book: dict[str, Any]) -> str:
    return "b"


assert_type(put_author({"id": 1}), Effect[int, DestinationError])
assert_type(put_book({"id": 1}), AsyncEffect[str, DestinationError])

summary = migrate.run(config, migrate.RunOptions(failed=True), progress=lambda event: None)
assert_type(summary.status, Literal["succeeded", "failed"])
assert_type(summary.definitions["authors"].counts.failed, int)
assert_type(migrate.plan(config), migrate.Plan)
assert_type(migrate.failures(config, "authors"), tuple[migrate.FailureRecord, ...])
assert_type(migrate.unlock(config, "authors"), migrate.LockInfo | None)

# The source contract a definition's stored states depend on, and the refusal when it changes.
assert_type(source.contract(), migrate.Contract)
assert_type(
    source.contract().changes(migrate.Contract("csv", "isbn", None, "scan")), tuple[str, ...]
)
assert_type(source.contract().fingerprint, str)
refusal = migrate.ContractChanged("changed", {"authors": ("identity field 'id' -> 'isbn'",)})
assert_type(refusal.changes, dict[str, tuple[str, ...]])
assert_type(summary.notes, tuple[str, ...])


def on_progress(event: migrate.ProgressEvent) -> None:
    assert_type(event.kind, Literal["start", "item", "window", "end"])


# Stores: the protocol, both implementations, and a config holding a store object.
memory: migrate.Store = migrate.MemoryStore()
sqlite_store: migrate.Store = migrate.SqliteStore("state.db")
in_memory = migrate.Config([books], store=memory)
assert_type(migrate.open_store("sqlite:///s.db", read_only=True), migrate.Store)
assert_type(memory.failures("books"), tuple[migrate.FailureRecord, ...])
commit = migrate.WindowCommit("books", "r1", [migrate.StateWrite("1", "migrated", None)], {})
memory.commit_window(commit)

# Identities, faults, forgetting, refusals, timeouts.
assert_type(migrate.identity_text(7), str)
fault = migrate.Fault("line 3", "MissingIdentity", "no id")
assert_type(fault.key, str)
assert_type(migrate.forget(config, "authors", ["7"]), tuple[migrate.ItemState, ...])
assert_type(migrate.refusals(config), tuple[migrate.RefusedError, ...])
timed = migrate.Migration("slow", migrate.MemorySource([]), process, timeout="30s")
assert_type(timed.timeout, float | None)
assert_type(summary.definitions["authors"].failed_stored, int)
assert_type(migrate.Counts().interrupted, int)
