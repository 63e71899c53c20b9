"""
A project for the rollback tests: people (CSV) and orders (CSV, requiring people) written into
a SQLite table each, with rollback functions of their own that delete by the journal's keys.

Files in the project steer the rollback functions (so a real ``migrate rollback`` process can be
steered too): ``fail_ids`` (identities whose undo raises), ``slow`` (seconds each undo sleeps),
``block_at`` (an identity whose undo writes ``blocked`` and waits for ``release``). Every undo
done appends ``DEF IDENTITY`` to ``undo_calls`` once its delete is done.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

import migrate
from tests.migrate.cli_support import migrate_command, run_main

CONFIG_TEXT = '''
"""Rollback test project (see tests/migrate/rollback_support.py)."""

import sqlite3
import time
from pathlib import Path

import migrate

HERE = Path(__file__).resolve().parent


def dest():
    return sqlite3.connect(HERE / "dest.db", timeout=30)


def listed(name):
    path = HERE / name
    return set(path.read_text().split()) if path.exists() else set()


def write(table, identity, name):
    db = dest()
    with db:
        db.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?)", (int(identity), name))
    db.close()


def migrate_person(item, scope):
    write("people", item.identity, item.data["name"])
    scope.journal.diagnostic("written")
    scope.journal.change("sqlite:people", "insert", key=int(item.identity))


def migrate_order(item, scope):
    write("orders", item.identity, item.data["name"])
    scope.journal.change("sqlite:orders", "insert", key=int(item.identity))


def gate(identity):
    block_at = HERE / "block_at"
    if block_at.exists() and block_at.read_text().strip() == identity:
        (HERE / "blocked").write_text(identity)
        deadline = time.monotonic() + 120
        while not (HERE / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)


def undoing(table):
    def rollback(item, scope):
        slow = HERE / "slow"
        if slow.exists():
            time.sleep(float(slow.read_text()))
        gate(item.identity)
        if item.identity in listed("fail_ids"):
            raise ValueError(f"cannot undo {item.identity}")
        db = dest()
        with db:
            for entry in item.journal:
                assert entry["kind"] == "change", entry
                db.execute(f"DELETE FROM {table} WHERE id = ?", (entry["key"],))
        db.close()
        with (HERE / "undo_calls").open("a") as calls:
            calls.write(f"{scope.definition_id} {item.identity}\\n")

    return rollback


config = migrate.Config(
    migrations=[
        migrate.Migration(
            "people",
            migrate.CsvSource(HERE / "people.csv", identity="id", window_size=WINDOW),
            migrate_person,
            rollback=undoing("people"),
        ),
        migrate.Migration(
            "orders",
            migrate.CsvSource(HERE / "orders.csv", identity="id", window_size=WINDOW),
            migrate_order,
            requires=("people",),
            rollback=ORDERS_ROLLBACK,
        ),
    ],
    store=STORE,
)
'''


@attrs.frozen
class RollbackProject:
    """A project folder of `CONFIG_TEXT`, its store at `url`."""

    root: Path
    url: str

    @property
    def config(self) -> Path:
        return self.root / "migrate_config.py"

    def main(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``migrate --config CONFIG ARGS`` in this process."""
        return run_main(self.config, *args)

    def json(self, *args: str, codes: tuple[int, ...] = (0,)) -> Any:
        """A ``--json`` command in this process whose exit code is one of *codes*, decoded."""
        done = self.main(*args, "--json")
        assert done.returncode in codes, (done.returncode, done.stdout, done.stderr)
        return json.loads(done.stdout)

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``migrate --config CONFIG ARGS`` as a process of its own."""
        return subprocess.Popen(
            [*migrate_command(), "--config", str(self.config), *args],
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def dest_ids(self, table: str) -> list[int]:
        db = sqlite3.connect(self.root / "dest.db")
        try:
            return [row[0] for row in db.execute(f"SELECT id FROM {table} ORDER BY id")]
        finally:
            db.close()

    def calls(self) -> list[tuple[str, str]]:
        """The undos done, in order: ``(definition, identity)``."""
        path = self.root / "undo_calls"
        if not path.exists():
            return []
        return [
            (line.split(" ", 1)[0], line.split(" ", 1)[1]) for line in path.read_text().splitlines()
        ]

    def call_counts(self, definition_id: str) -> Counter[str]:
        return Counter(i for d, i in self.calls() if d == definition_id)

    def fail(self, *identities: str) -> None:
        """Make the undo of *identities* raise (none: every undo succeeds again)."""
        (self.root / "fail_ids").write_text(" ".join(identities))

    def states(self, definition_id: str) -> dict[str, migrate.ItemState]:
        """identity -> stored state."""
        with migrate.open_store(self.url) as store:
            return {s.identity: s for s in store.items(definition_id)}

    def cursor(self, definition_id: str) -> migrate.Cursor:
        with migrate.open_store(self.url) as store:
            return store.cursor(definition_id)

    def runs(self) -> list[dict[str, Any]]:
        return list(self.json("runs")["runs"])


def _write_csv(path: Path, ids: range) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "name"])
        writer.writerows([i, f"name {i}"] for i in ids)


def make_rollback_project(
    root: Path,
    url: str,
    *,
    people: int = 12,
    orders: int = 0,
    window: int = 5,
    orders_rollback: bool = True,
) -> RollbackProject:
    """A project of *people* people and *orders* orders (CSV windows of *window*), its store at
    *url*; ``orders_rollback=False``: orders have no ``rollback=``."""
    root.mkdir(parents=True, exist_ok=True)
    text = (
        CONFIG_TEXT.replace("WINDOW", str(window))
        .replace("STORE", repr(url))
        .replace("ORDERS_ROLLBACK", 'undoing("orders")' if orders_rollback else "None")
    )
    (root / "migrate_config.py").write_text(text)
    _write_csv(root / "people.csv", range(1, people + 1))
    _write_csv(root / "orders.csv", range(1, orders + 1))
    db = sqlite3.connect(root / "dest.db")
    with db:
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, name TEXT)")
    db.close()
    return RollbackProject(root, url)
