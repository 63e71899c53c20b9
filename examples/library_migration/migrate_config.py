"""
Migrate a library's authors (CSV) and books (SQLite) into the catalogue API.

``migrate`` loads this file and takes its ``config``. Two environment variables point it at the
demo's work folder and the running catalogue (``demo.py`` sets both):

- ``LIBRARY_DEMO_DIR``: folder holding ``authors.csv``, ``books.db`` and the state store
  (default: ``./library-demo``).
- ``LIBRARY_API``: the catalogue's base URL (default: ``http://127.0.0.1:8765``).
- ``LIBRARY_DEMO_PAUSE_AT``: a book id at which this process's work stops for good (the demo
  then kills it, to show another worker finishing a durable run).

``engine`` is the durable engine of ``migrate run --durable`` and ``migrate work``: a lease of 2 s,
so a worker that dies is replaced within about 2 s.

Every destination call is an effect wrapped in ``destination_retry``: jittered exponential
backoff capped at 0.5 s, at least what a ``Retry-After`` header asks (up to 60 s), transient
errors only, at most 4 retries. A rejected record (400/422) fails its item at once, with the
catalogue's answer kept as evidence.
"""

from __future__ import annotations

import http.client
import json
import os
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import migrate
import migrate.durable
from effects import retry
from effects.http import ApiRequestError, request_failure, respect_retry_after
from schedules import exponential

WORK = Path(os.environ.get("LIBRARY_DEMO_DIR", "library-demo")).resolve()
API = os.environ.get("LIBRARY_API", "http://127.0.0.1:8765")


class Catalogue:
    """A small client of the catalogue API: one keep-alive connection per thread."""

    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.timeout = timeout
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.connection = connection
        return connection

    def put(self, path: str, record: dict[str, Any]) -> str:
        """
        ``PUT path`` with *record* as JSON; return the destination id the catalogue answers.

        Raises:
            ApiRequestError: For an error status (with the catalogue's message and Retry-After)
                or when no response arrives (status ``None``, transient).
        """
        body = json.dumps(record).encode()
        headers = {"Content-Type": "application/json"}
        connection = self._connection()
        try:
            connection.request("PUT", path, body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            self._local.connection = None
            raise ApiRequestError(None, transient=True, message=f"PUT {path}: {error}") from error
        answer: dict[str, Any] = json.loads(payload or b"{}")
        if response.status >= 400:
            # The message is the catalogue's verdict alone, so equal errors group together.
            failure = ApiRequestError.from_response(response)
            raise ApiRequestError(
                response.status,
                retry_after=failure.retry_after,
                message=str(answer.get("error", response.reason)),
            )
        return str(answer["id"])

    def delete(self, path: str) -> None:
        """``DELETE path``; a record that is not there (404) is deleted already."""
        connection = self._connection()
        try:
            connection.request("DELETE", path)
            response = connection.getresponse()
            response.read()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            self._local.connection = None
            raise ApiRequestError(
                None, transient=True, message=f"DELETE {path}: {error}"
            ) from error
        if response.status >= 400 and response.status != 404:
            raise ApiRequestError(response.status, message=f"DELETE {path}: {response.reason}")


catalogue = Catalogue(API)


def transient(error: Exception) -> bool:
    """Retry only what may succeed unchanged: 429, 5xx-unavailable and lost connections."""
    failure = request_failure(error)
    return failure is not None and failure.transient


destination_retry = retry(
    respect_retry_after(exponential("20ms").jittered().max_delay("500ms"), limit=60),
    times=4,
    while_=transient,
)


@migrate.destination(name="catalogue", catch=ApiRequestError, key="path")
def put(path: str, record: dict[str, Any]) -> str:
    """Create or replace one catalogue record (idempotent by path) and return its id."""
    return catalogue.put(path, record)


def migrate_author(item: migrate.Item, scope: migrate.Scope) -> None:
    """Send one author; its tracking record keeps the catalogue's id for the books."""
    row = item.data
    record = {"name": row["name"], "email": row["email"], "country": row["country"]}
    record["born"] = int(row["born"])
    author_id = put(f"/authors/{item.identity}", record).pipe(destination_retry).run_or_raise()
    scope.track({"catalogue_id": author_id})


def pause_at(identity: str) -> None:
    """Stop this process's work at the book ``LIBRARY_DEMO_PAUSE_AT`` names, until it is killed."""
    if os.environ.get("LIBRARY_DEMO_PAUSE_AT") == identity:
        (WORK / "paused").write_text(f"{os.getpid()} {identity}")
        time.sleep(3600)


def migrate_book(item: migrate.Item, scope: migrate.Scope) -> None:
    """Send one book, pointing at its author's catalogue id (from the authors' tracking)."""
    pause_at(item.identity)
    row = item.data
    author = scope.lookup("authors", row["author_id"])
    if author is None:
        raise LookupError(f"author {row['author_id']} is not migrated yet")
    record = {"author": author["catalogue_id"], "title": row["title"], "isbn": row["isbn"]}
    record.update(year=row["year"], pages=row["pages"])
    book_id = put(f"/books/{item.identity}", record).pipe(destination_retry).run_or_raise()
    scope.track({"catalogue_id": book_id})


def unput_book(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
    """Roll one book back: delete what its journal says it PUT (``migrate rollback books``)."""
    for entry in reversed(item.journal):
        if entry.get("destination") == "catalogue":
            catalogue.delete(str(entry["key"]))


def connect_books() -> sqlite3.Connection:
    """Open the books database (the source's connection factory)."""
    return sqlite3.connect(WORK / "books.db")


config = migrate.Config(
    migrations=[
        migrate.Migration(
            "authors",
            migrate.CsvSource(WORK / "authors.csv", identity="id", version="updated_at"),
            migrate_author,
            concurrency=8,
        ),
        migrate.Migration(
            "books",
            migrate.SqlSource(connect_books, "books", identity="id", version="revision"),
            migrate_book,
            rollback=unput_book,
            requires=("authors",),
            concurrency=8,
        ),
    ],
    store=f"sqlite:///{WORK / 'state.db'}",
)

engine = migrate.durable.engine(config, lease_ms=2_000)
