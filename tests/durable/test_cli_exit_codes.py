"""
Exit codes of ``python -m effects.durable``, every command against every class of error: 2 a
usage error, an unknown run or an unusable ``--app``; 3 the run's status refuses the command;
5 the store cannot be used. Each is one line on stderr, and the store is left as it was.
"""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from effects.durable._store.postgres import parse_postgres_url
from tests.durable.cli_support import App, assert_one_line_error, digest, make_app, run_async
from tests.durable.support import execute, rows
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")

APP = ("--app", "app:engine")
COMMANDS: dict[str, tuple[str, ...]] = {
    "work": ("work",),
    "runs": ("runs",),
    "show": ("show", "r-1"),
    "retry": ("retry", "r-1"),
    "redispatch": ("redispatch", "r-1"),
    "prune": ("prune", "--older-than", "30d"),
}
INSPECTION = {name: args for name, args in COMMANDS.items() if name != "work"}
ON_A_RUN = {name: COMMANDS[name] for name in ("show", "retry", "redispatch")}


def seeded(app: App) -> App:
    """*app*, its store holding one completed run ``r-1``."""

    async def main() -> None:
        async with app.engine() as engine:
            await engine.start("greet", "ada", run_id="r-1")
            await engine.run_until_idle()

    run_async(main)
    return app


def answers(
    app: App, commands: Mapping[str, tuple[str, ...]], *before: str, after: tuple[str, ...] = ()
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Run every command (``before`` ahead of it, ``after`` behind it), a few at a time."""
    done = app.cli_many([(*before, *args, *after) for args in commands.values()])
    return {name: done[(*before, *args, *after)] for name, args in commands.items()}


def codes(done: dict[str, subprocess.CompletedProcess[str]]) -> dict[str, int]:
    """The exit code of each command."""
    return {name: result.returncode for name, result in done.items()}


def each_one_line(
    done: dict[str, subprocess.CompletedProcess[str]], code: int, *fragments: str
) -> None:
    """Every command exited *code* with one line on stderr holding *fragments*."""
    for result in done.values():
        assert_one_line_error(result, *fragments, code=code)


@pytest.mark.sqlite_only("a usage error is found before any store is opened")
def test_an_unknown_flag_exits_2_for_every_command(cli_app: App) -> None:
    """``--bogus`` after any command: exit 2, one line naming it, nothing created."""
    done = answers(cli_app, COMMANDS, *APP, after=("--bogus",))

    each_one_line(done, 2, "unrecognized arguments: --bogus")
    assert not cli_app.db.exists()


@pytest.mark.sqlite_only("an unusable --app is found before any store is opened")
def test_an_unusable_app_exits_2_for_every_command(cli_app: App) -> None:
    """``--app`` naming no module: exit 2 for every command, one line naming the module."""
    done = answers(cli_app, COMMANDS, "--app", "no_such_module:engine")

    each_one_line(done, 2, "no module named 'no_such_module'")


def test_an_unknown_run_exits_2_for_every_command_on_a_run(cli_app: App) -> None:
    """``show``, ``retry`` and ``redispatch`` of an id no run has: exit 2, naming the id."""
    app = seeded(cli_app)
    commands = {name: (args[0], "r-404") for name, args in ON_A_RUN.items()}
    before = app.shown("r-1")

    done = answers(app, commands, *APP)

    each_one_line(done, 2, "'r-404'")
    assert before == app.shown("r-1")


def test_a_status_that_refuses_the_command_exits_3(cli_app: App) -> None:
    """``retry`` and ``redispatch`` of a completed run: exit 3 naming its status, run unchanged."""
    app = seeded(cli_app)
    commands = {name: ON_A_RUN[name] for name in ("retry", "redispatch")}
    before = app.shown("r-1")

    done = answers(app, commands, *APP)

    each_one_line(done, 3, "refused", "r-1 is completed")
    assert before == app.shown("r-1")
    assert {"show": 0} == codes(answers(app, {"show": ("show", "r-1")}, *APP))


def _folder(path: Path) -> None:
    path.mkdir()


def _random_bytes(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 64)


def _foreign(path: Path) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.close()


def _newer(path: Path) -> None:
    seeded(make_app(path.parent))
    db = sqlite3.connect(path)  # closed, so the write is checkpointed into the file
    with db:
        db.execute("UPDATE durable_meta SET value = '99' WHERE key = 'version'")
    db.close()


@pytest.mark.sqlite_only("what is at the SQLite store's path")
@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (_folder, "unable to open database file"),
        (_random_bytes, "not a usable SQLite database"),
        (_foreign, "not an effects.durable store"),
        (_newer, "schema version 99"),
    ],
    ids=["a-folder", "not-sqlite", "foreign-sqlite", "newer-schema"],
)
def test_an_unusable_sqlite_store_exits_5_for_every_command(
    cli_app: App, damage: Callable[[Path], None], fragment: str
) -> None:
    """A folder, a file that is not SQLite, a foreign database, a newer schema: exit 5."""
    damage(cli_app.db)
    before = digest(cli_app.db) if cli_app.db.is_file() else None

    done = answers(cli_app, COMMANDS, *APP)

    each_one_line(done, 5, "store error", fragment)
    assert before == (digest(cli_app.db) if cli_app.db.is_file() else None)


def _schema(url: str) -> str:
    return parse_postgres_url(url)[1].schema


def _pg_newer(url: str, root: Path) -> None:
    seeded(make_app(root, url))
    execute(url, "UPDATE durable_meta SET value = '99' WHERE key = 'version'")


def _pg_foreign(url: str, root: Path) -> None:
    libpq = parse_postgres_url(url)[0]
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(_schema(url))))
        db.execute(
            sql.SQL("CREATE TABLE {}.users (id int PRIMARY KEY)").format(
                sql.Identifier(_schema(url))
            )
        )


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [(_pg_newer, "schema version 99"), (_pg_foreign, "not an effects.durable store")],
    ids=["newer-schema", "foreign-tables"],
)
def test_an_unusable_postgres_store_exits_5_for_every_command(
    postgres_url: str, tmp_path: Path, damage: Callable[[str, Path], None], fragment: str
) -> None:
    """A PostgreSQL schema of a newer version or holding other tables: exit 5, left as it was."""
    damage(postgres_url, tmp_path / "seed")
    app = make_app(tmp_path / "app", postgres_url)
    tables = rows(postgres_url, "SELECT table_name FROM information_schema.tables ORDER BY 1")

    done = answers(app, COMMANDS, *APP)

    each_one_line(done, 5, "store error", fragment)
    assert tables == rows(
        postgres_url, "SELECT table_name FROM information_schema.tables ORDER BY 1"
    )


def test_an_unreachable_postgres_store_exits_5_for_every_command(tmp_path: Path) -> None:
    """A PostgreSQL URL where no server listens: exit 5 for every command, one line."""
    app = make_app(tmp_path, "postgresql://durable@127.0.0.1:1/durable?connect_timeout=5")

    done = answers(app, COMMANDS, *APP)

    each_one_line(done, 5, "store error", "cannot connect", "127.0.0.1")


def test_a_database_that_does_not_exist_exits_5(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A server that refuses the connection (no such database): the store cannot be used."""
    app = make_app(tmp_path, postgres_server.dsn("no_such_database"))

    done = answers(app, COMMANDS, *APP)

    each_one_line(done, 5, "store error", "no_such_database")


def _no_store(app: App) -> None:
    """The store of *app* does not exist: no SQLite file, no PostgreSQL schema."""
    if app.store_url is None:
        assert not app.db.exists()
        return
    found = rows(
        app.store_url,
        "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ?",
        (_schema(app.store_url),),
    )
    assert [] == found


def test_inspecting_a_store_nobody_used_exits_2_and_creates_nothing(cli_app: App) -> None:
    """``runs``, ``show``, ``retry``, ``redispatch`` on a fresh store: exit 2, none created."""
    done = answers(cli_app, {**INSPECTION, "runs --json": ("runs", "--json")}, *APP)

    each_one_line(done, 2, "no store")
    _no_store(cli_app)


def test_inspecting_a_fresh_postgres_database_exits_2(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A database nobody ran an engine in (no ``effects_durable`` schema): exit 2, none made."""
    name = f"fresh_{tmp_path.name.lower().replace('-', '_')[-40:]}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as db:
        db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = f"{postgres_server.dsn(name)}?schema=effects_durable"
    app = make_app(tmp_path, url)

    done = answers(app, INSPECTION, *APP)

    each_one_line(done, 2, "no store", "effects_durable")
    _no_store(app)


def test_work_creates_the_store_that_inspection_refuses(cli_app: App) -> None:
    """After a worker opened the fresh store, ``runs`` lists its (no) runs: exit 0."""
    worker = cli_app.worker()
    worker.terminate()
    worker.communicate(timeout=60)

    done = answers(cli_app, {"runs": ("runs", "--json")}, *APP)

    assert ({"runs": 0}, "[]") == (codes(done), done["runs"].stdout.strip())
