"""Helpers shared by the durable engine's tests: flaky handlers, event queries, raw store reads."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql as sql_

from effects.durable import Engine, Event
from effects.durable._store.memory import MemoryStore, parse_memory_url
from effects.durable._store.postgres import parse_postgres_url

#: The fixture clock's start, in epoch ms.
START_MS = 1_767_225_600_000


class Flaky:
    """A callable that raises the given errors in turn, then returns *value* (or its input)."""

    def __init__(self, errors: Sequence[BaseException], value: Any = None) -> None:
        self.errors = list(errors)
        self.calls: list[Any] = []
        self.value = value

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args[0] if args else None)
        if len(self.calls) <= len(self.errors):
            raise self.errors[len(self.calls) - 1]
        return self.value if self.value is not None or not args else args[0]


async def names(engine: Engine, run_id: str, prefix: str = "") -> list[str]:
    """The names of the run's events, in order, optionally only those starting with *prefix*."""
    return [e.name for e in await engine.events(run_id) if e.name.startswith(prefix)]


async def events_named(engine: Engine, run_id: str, name: str) -> list[Event]:
    """The run's events called *name*, in order."""
    return [e for e in await engine.events(run_id) if e.name == name]


def rows(url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """
    Rows of a read query on the store at *url*, SQLite or PostgreSQL, on a connection of its own.
    The query is written for SQLite (``?`` placeholders); on PostgreSQL, JSON columns read back
    as JSON text and booleans as 0 or 1, as SQLite gives them; a memory store's rows are copied
    into a private SQLite database with its columns and read there.
    """
    if url.startswith("memory:"):
        with contextlib.closing(memory_rows_in_sqlite(url)) as db:
            return db.execute(sql, params).fetchall()
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return db.execute(sql, params).fetchall()
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute(sql_.SQL("SET search_path TO {}").format(sql_.Identifier(options.schema)))
        cursor = db.execute(sql.replace("?", "%s"), params or None)  # type: ignore[arg-type]
        found = cursor.fetchall()
        jsonb = [column.type_code == _JSONB_OID for column in cursor.description or ()]
    return [
        tuple(_as_sqlite(value, is_json) for value, is_json in zip(row, jsonb, strict=True))
        for row in found
    ]


_JSONB_OID = 3802


def memory_rows_in_sqlite(url: str) -> sqlite3.Connection:
    """A private SQLite database holding a copy of the rows of the memory store at *url*."""
    db = sqlite3.connect(":memory:")
    for table, (columns, found) in MemoryStore.dump(parse_memory_url(url)).items():
        db.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
        marks = ", ".join("?" for _ in columns)
        db.executemany(f"INSERT INTO {table} VALUES ({marks})", found)
    return db


def execute(url: str, sql: str, params: Sequence[Any] = ()) -> int:
    """Run one write statement on the store at *url* (as another process would); its row count."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            return db.execute(sql, params).rowcount
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute(sql_.SQL("SET search_path TO {}").format(sql_.Identifier(options.schema)))
        return db.execute(sql.replace("?", "%s"), params or None).rowcount  # type: ignore[arg-type]


def _as_sqlite(value: Any, is_json: bool) -> Any:
    if isinstance(value, bool):
        return int(value)
    if is_json and value is not None:
        return json.dumps(value, separators=(",", ":"))
    return value


def relative(times: Sequence[int | None]) -> list[int | None]:
    """Epoch ms times as ms after the fixture clock's start."""
    return [None if t is None else t - START_MS for t in times]


Handler = Callable[[Any], Any]


class Intercepting:
    """
    A store that delegates to *store* and calls ``after[name](result, *args, **kwargs)`` once a
    method of that name returns (for tests that act as another process at an exact moment).
    """

    def __init__(self, store: Any, **after: Callable[..., Any]) -> None:
        self._store = store
        self._after = after

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        hook = self._after.get(name)
        if hook is None:
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = await attribute(*args, **kwargs)
            await hook(result, *args, **kwargs)
            return result

        return call
