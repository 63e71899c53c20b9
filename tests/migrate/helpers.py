"""Helpers shared by the migrate tests: real files in tmp_path, a store per test."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import migrate


def write_csv(
    path: Path, rows: Iterable[Mapping[str, Any]], fields: list[str] | None = None
) -> Path:
    """Write *rows* as a CSV file with a header (fields from the first row unless given)."""
    rows = list(rows)
    header = fields if fields is not None else list(rows[0])
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write *rows* as JSON Lines."""
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return path


def people(n: int, *, start: int = 1) -> list[dict[str, Any]]:
    """*n* simple records with ids ``start..start+n-1``."""
    return [{"id": str(i), "name": f"person {i}"} for i in range(start, start + n)]


def config_of(
    tmp_path: Path, *migrations: migrate.Migration, store: str = "sqlite:///state.db"
) -> migrate.Config:
    """A config with its files in *tmp_path* and its store there (or at the URL *store*)."""
    return migrate.Config(migrations, store=store, base_dir=tmp_path)


def states(config: migrate.Config, definition_id: str) -> dict[str, str]:
    """identity -> stored status."""
    with config.open_store() as store:
        return {s.identity: s.status for s in store.items(definition_id)}


Recorder = Callable[[migrate.Item, migrate.Scope], None]


def recorder(
    seen: list[str], fail: set[str] | None = None, skip: set[str] | None = None
) -> Recorder:
    """A process appending each identity to *seen*; fails/skips the identities given."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append(item.identity)
        if fail and item.identity in fail:
            raise ValueError(f"bad record {item.identity}")
        if skip and item.identity in skip:
            raise migrate.Skip(f"not wanted: {item.identity}")

    return process


def noop(item: migrate.Item, scope: migrate.Scope) -> None:
    """A process that does nothing."""


class UnavailableError(Exception):
    """A provider error the retry strategies in these tests classify as transient."""

    transient = True


class FlakySource(migrate.MemorySource):
    """A memory source whose window reads and lookups fail a given number of times first."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        *,
        read_failures: int = 0,
        lookup_failures: int = 0,
        lookup: migrate.LookupStrategy = "direct",
    ) -> None:
        super().__init__(rows, lookup=lookup, window_size=2)
        self.read_failures = read_failures
        self.lookup_failures = lookup_failures
        self.reads = 0
        self.finds = 0

    def read_window(self, cursor: migrate.Cursor) -> migrate.Window:
        self.reads += 1
        if self.read_failures:
            self.read_failures -= 1
            raise migrate.SourceError("read failed", UnavailableError("try later"))
        return super().read_window(cursor)

    def find(self, identities: Collection[str]) -> dict[str, migrate.Item]:
        self.finds += 1
        if self.lookup_failures:
            self.lookup_failures -= 1
            raise migrate.SourceError("lookup failed", UnavailableError("try later"))
        return super().find(identities)
