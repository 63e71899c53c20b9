"""Helpers for the CLI, crash and lock tests: a small project on disk and the real command."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from migrate._cli import main

CONFIG_TEXT = '''
"""A test project: people (CSV) into a SQL table, then orders (SQLite) that need their person."""

import sqlite3
import time
from pathlib import Path

import migrate
from effects import retry

HERE = Path(__file__).resolve().parent


def connect_dest():
    return sqlite3.connect(HERE / "dest.db", timeout=30)


def connect_orders_dest():
    # Its own file: a window holds its database's write lock until the window commits, and a
    # run of people may be blocked mid-window while orders run.
    return sqlite3.connect(HERE / "orders_dest.db", timeout=30)


def connect_orders():
    return sqlite3.connect(HERE / "orders.db", timeout=30)


people_table = migrate.SqlDestination(connect_dest, "people", "id")
orders_table = migrate.SqlDestination(connect_orders_dest, "orders", "id")


def gate(identity):
    """Block at the identity named in the file `block_at` until the file `release` exists."""
    block_at = HERE / "block_at"
    if block_at.exists() and block_at.read_text().strip() == identity:
        (HERE / "blocked").write_text(identity)
        deadline = time.monotonic() + 120
        while not (HERE / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)


calls = {}


@retry(times=3, on=ConnectionError)
def flaky(identity):
    """Fail the first two calls for *identity* (in this process), then succeed."""
    calls[identity] = calls.get(identity, 0) + 1
    if calls[identity] <= 2:
        raise ConnectionError(f"flaky {identity}")


def migrate_person(item, scope):
    gate(item.identity)
    state = item.data["state"]
    if state == "skip":
        raise migrate.Skip("marked skip")
    if state == "bad":
        raise ValueError("marked bad")
    if state == "flaky":
        flaky(item.identity)
    people_table.upsert({"id": int(item.identity), "name": item.data["name"]}).run_or_raise()
    scope.track({"dest_id": int(item.identity)})


def migrate_order(item, scope):
    person = scope.lookup("people", str(item.data["person_id"]))
    if person is None:
        raise LookupError(f"person {item.data['person_id']} is not migrated")
    orders_table.upsert(
        {"id": int(item.identity), "person_id": person["dest_id"], "amount": item.data["amount"]}
    ).run_or_raise()


config = migrate.Config(
    migrations=[
        migrate.Migration(
            "people",
            migrate.CsvSource(HERE / "people.csv", identity="id", window_size=WINDOW),
            migrate_person,
        ),
        migrate.Migration(
            "orders",
            migrate.SqlSource(connect_orders, "orders", identity="id"),
            migrate_order,
            requires=("people",),
        ),
    ],
    store=STORE,
)
'''


def run_main(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """
    ``migrate --config CONFIG ARGS`` in this process (the command's own ``main``), for tests
    that need its exit code and output but not a process of their own; quicker than a process.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--config", str(config), *args])
    return subprocess.CompletedProcess(["migrate", *args], code, out.getvalue(), err.getvalue())


def migrate_command() -> list[str]:
    """The installed ``migrate`` command of this venv, else ``python -m migrate``."""
    beside = Path(sys.executable).parent / "migrate"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("migrate")
    return [found] if found else [sys.executable, "-m", "migrate"]


@attrs.frozen
class Project:
    """A project folder: ``migrate_config.py``, ``people.csv``, ``orders.db``, ``dest.db``
    (people) and ``orders_dest.db`` (orders)."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "migrate_config.py"

    def write_people(self, states: Sequence[str]) -> None:
        """Write ``people.csv``: person *i* (1-based) has state ``states[i - 1]``."""
        with (self.root / "people.csv").open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "name", "state"])
            for i, state in enumerate(states, start=1):
                writer.writerow([i, f"person {i}", state])

    def write_orders(self, person_ids: Iterable[int]) -> None:
        """Write ``orders.db``: order *k* (1-based) belongs to the *k*-th person id given."""
        path = self.root / "orders.db"
        path.unlink(missing_ok=True)
        db = sqlite3.connect(path)
        with db:
            db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, person_id INTEGER, amount)")
            db.executemany(
                "INSERT INTO orders VALUES (?, ?, ?)",
                [(k, p, k * 10) for k, p in enumerate(person_ids, start=1)],
            )
        db.close()

    def dest_ids(self, table: str) -> list[int]:
        """The ids written to the destination *table*, sorted."""
        db = sqlite3.connect(self.root / ("orders_dest.db" if table == "orders" else "dest.db"))
        try:
            return [row[0] for row in db.execute(f"SELECT id FROM {table} ORDER BY id")]
        finally:
            db.close()

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start ``migrate --config CONFIG ARGS`` in the background."""
        return subprocess.Popen(
            [*migrate_command(), "--config", str(self.config), *args],
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``migrate --config CONFIG ARGS`` and wait for it."""
        return subprocess.run(
            [*migrate_command(), "--config", str(self.config), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def main(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``migrate --config CONFIG ARGS`` in this process (see `run_main`)."""
        return run_main(self.config, *args)

    def json(self, *args: str) -> Any:
        """Run a ``--json`` command that must succeed and decode its output."""
        done = self.cli(*args, "--json")
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)

    def wait_for(self, name: str, process: subprocess.Popen[str], timeout: float = 60) -> None:
        """Wait until the file *name* exists in the project (while *process* still runs)."""
        deadline = time.monotonic() + timeout
        while not (self.root / name).exists():
            if process.poll() is not None:
                out, err = process.communicate()
                raise AssertionError(f"process ended first ({process.returncode}): {out}{err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {name}")
            time.sleep(0.01)


def make_project(
    root: Path,
    states: Sequence[str],
    *,
    window: int = 10,
    store: str | None = None,
) -> Project:
    """
    A project with people in *states* and one order per person, CSV windows of *window*; its
    store at the URL *store* (``None``: ``state/migrate.db`` in the project).
    """
    project = Project(root)
    root.mkdir(parents=True, exist_ok=True)
    url = "sqlite:///state/migrate.db" if store is None else store
    project.config.write_text(
        CONFIG_TEXT.replace("WINDOW", str(window)).replace("STORE", repr(url))
    )
    project.write_people(states)
    project.write_orders(range(1, len(states) + 1))
    db = sqlite3.connect(root / "dest.db")
    with db:
        db.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT)")
    db.close()
    db = sqlite3.connect(root / "orders_dest.db")
    with db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, person_id INTEGER, amount)")
    db.close()
    return project


def counts_sum(runs_json: Any, definition_id: str) -> dict[str, int]:
    """Add up one definition's counts over every run in ``migrate runs --json`` output."""
    totals = dict.fromkeys(("migrated", "skipped", "failed", "unchanged", "needs_update"), 0)
    for record in runs_json["runs"]:
        counts = record["definitions"].get(definition_id)
        if counts is not None:
            for key in totals:
                totals[key] += counts[key]
    return totals
