"""
PostgreSQL for ``migrate_throughput.py --store``: a server (given, or a throwaway one), a fresh
schema per case, and the hand-written floor and naive loops over the same CSV rows.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The state rows of the floor: the columns a store keeps per item at least.
STATE_TABLE = (
    "CREATE TABLE item_states (definition text NOT NULL, identity text NOT NULL, "
    "status text NOT NULL, run_id text, updated_at double precision NOT NULL, "
    "PRIMARY KEY (definition, identity))"
)
UPSERT_WINDOW = (
    "INSERT INTO item_states SELECT 'rows', i, 'migrated', 'r1', t "
    "FROM unnest(%s::text[], %s::float8[]) AS u(i, t) "
    "ON CONFLICT (definition, identity) DO UPDATE SET status = excluded.status, "
    "run_id = excluded.run_id, updated_at = excluded.updated_at"
)
INSERT_ONE = (
    "INSERT INTO item_states VALUES ('rows', %s, 'migrated', 'r1', %s) "
    "ON CONFLICT (definition, identity) DO UPDATE SET updated_at = excluded.updated_at"
)


def _with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))


class PostgresBench:
    """One server for the benchmark; every schema it hands out is dropped at `close`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.dsn = urlunsplit(urlsplit(url)._replace(query=""))
        self._schemas: list[str] = []
        with psycopg.connect(self.dsn, autocommit=True) as db:
            version = db.execute("SHOW server_version").fetchone()
            settings = db.execute(
                "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings "
                "WHERE name IN ('fsync', 'synchronous_commit')"
            ).fetchone()
        self.version = "?" if version is None else str(version[0])
        self.settings = "?" if settings is None else str(settings[0])

    @classmethod
    @contextlib.contextmanager
    def at(cls, store: str) -> Iterator[PostgresBench]:
        """The server at the URL *store*, or (``postgresql``) a throwaway one, durable."""
        with contextlib.ExitStack() as stack:
            url = store
            if store == "postgresql":
                from tests.postgres_server import PostgresServer

                url = stack.enter_context(PostgresServer(durable=True)).dsn()
            bench = cls(url)
            try:
                yield bench
            finally:
                bench.close()

    def describe(self) -> str:
        """``15.4, fsync=on, synchronous_commit=on``."""
        return f"{self.version}, {self.settings}"

    def _schema(self, name: str) -> str:
        schema = f"bench_{name}_{time.monotonic_ns() % 10**9}"
        self._schemas.append(schema)
        return schema

    def store(self, name: str) -> str:
        """A migrate store URL with a schema of its own."""
        return _with_schema(self.url, self._schema(name))

    def _state_table(self, name: str) -> tuple[psycopg.Connection[tuple[object, ...]], str]:
        schema = self._schema(name)
        db = psycopg.connect(self.dsn, autocommit=True)
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        db.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        db.execute(STATE_TABLE)
        return db, schema

    def floor(self, name: str, source: Path, rows: int, window: int) -> float:
        """One batched upsert and a COMMIT per *window* rows of *source*; seconds."""
        started = time.perf_counter()
        db, _ = self._state_table(name)
        written = 0
        with db, source.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            while True:
                chunk = [row["id"] for row in itertools.islice(reader, window)]
                if not chunk:
                    break
                now = time.time()
                with db.transaction():
                    db.execute(UPSERT_WINDOW, (chunk, [now] * len(chunk)))
                written += len(chunk)
        took = time.perf_counter() - started
        if written != rows:
            raise SystemExit(f"postgres floor: expected {rows} rows, wrote {written}")
        return took

    def naive(self, name: str, source: Path, rows: int) -> float:
        """An INSERT and a COMMIT per item over the first *rows* rows of *source*; seconds."""
        started = time.perf_counter()
        db, _ = self._state_table(name)
        written = 0
        with db, source.open(newline="", encoding="utf-8") as handle:
            for row in itertools.islice(csv.DictReader(handle), rows):
                db.execute(INSERT_ONE, (row["id"], time.time()))  # autocommit: a COMMIT each
                written += 1
        took = time.perf_counter() - started
        if written != rows:
            raise SystemExit(f"postgres naive: expected {rows} rows, wrote {written}")
        return took

    def close(self) -> None:
        """Drop every schema handed out."""
        with psycopg.connect(self.dsn, autocommit=True) as db:
            for schema in self._schemas:
                db.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
        self._schemas.clear()
