"""Every error of the command line is one line on stderr (exit 2, 3 or 5), and changes no store."""

from __future__ import annotations

import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.durable.cli_support import App, assert_one_line_error, digest, make_app, run_async

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")

COMMANDS = [("runs",), ("show", "r-1"), ("retry", "r-1"), ("runs", "--json")]


def seed_one_run(app: App) -> None:
    """Store one completed run, ``r-1``."""

    async def main() -> None:
        async with app.engine() as engine:
            await engine.start("greet", "ada", run_id="r-1")
            await engine.run_until_idle()

    run_async(main)


@pytest.fixture
def app(cli_app: App) -> App:
    """An app whose store holds one completed run, ``r-1``."""
    seed_one_run(cli_app)
    return cli_app


USAGE = [
    ((), ["the following arguments are required: COMMAND"]),
    (("runs",), ["--app MODULE:ENGINE is required"]),
    (("--app", "app:engine", "launch"), ["invalid choice: 'launch'"]),
    (("--app", "app:engine", "runs", "--limit", "0"), ["--limit", "'0'"]),
    (("--app", "app:engine", "runs", "--stale", "soon"), ["--stale", "'soon'"]),
    (("--app", "app:engine", "runs", "--stale=-5m"), ["--stale", "'-5m'"]),
    (("--app", "app:engine", "runs", "--status", "asleep"), ["--status", "'asleep'"]),
    (("--app", "app:engine", "show"), ["required: RUN"]),
    (("--app", "app:engine", "show", "r-1", "extra"), ["unrecognized arguments: extra"]),
    (("--app", "app:engine", "work", "--poll", "0"), ["--poll", "'0'"]),
    # Bytes that are not UTF-8 reach Python as surrogates; no store can hold them.
    (("--app", "app:engine", "show", "r-\udcff"), ["b'r-\\xff' is not valid UTF-8"]),
    (("--app", "app:engine", "retry", "\udcff"), ["b'\\xff' is not valid UTF-8"]),
    (("--app", "app:engine", "runs", "--workflow", "\udcfe"), ["--workflow", "UTF-8"]),
    (("--app", "app:\udcff", "runs"), ["module:attribute", "app:\\udcff"]),
]
APPS = [
    ("app", ["module:attribute", "'app'"]),
    ("app:", ["module:attribute"]),
    ("app:engine extra", ["module:attribute"]),
    ("no_such_module:engine", ["no module named 'no_such_module'", "working directory"]),
    ("app.sub:engine", ["no module named 'app.sub'"]),
    ("app:missing", ["app has no attribute 'missing'", "its engines: engine"]),
    ("app:engine.nothing", ["has no attribute 'engine.nothing'"]),
    ("app:not_an_engine", ["app.not_an_engine is a int, not an effects.durable.Engine"]),
    ("app:needs_args", ["app.needs_args needs arguments"]),
    ("app:broken_factory", ["calling app.broken_factory() raised RuntimeError: no config"]),
    ("app:wrong_factory", ["app.wrong_factory() returned a str, not an Engine"]),
    ("app:make_engine_async", ["app.make_engine_async() is async"]),
    ("raising:engine", ["importing raising raised ZeroDivisionError"]),
    ("needs_dependency:engine", ["No module named 'a_dependency_nobody_installed'"]),
    ("exits:engine", ["importing exits raised SystemExit: 3"]),
]
WORK_APPS = [
    ("no_such_module:engine", ["no module named 'no_such_module'"]),
    ("app:not_an_engine", ["not an effects.durable.Engine"]),
    ("raising:engine", ["importing raising raised ZeroDivisionError"]),
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], Any]:
    """What every usage and ``--app`` case of this module prints, run a few at a time."""
    app = make_app(tmp_path_factory.mktemp("cli-errors"))
    (app.root / "raising.py").write_text("engine = 1 / 0\n")
    (app.root / "needs_dependency.py").write_text("import a_dependency_nobody_installed\n")
    (app.root / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (app.root / "app").mkdir()  # a folder beside app.py: the module still wins
    seed_one_run(app)
    commands = [
        *(args for args, _ in USAGE),
        *(("--app", spec, "runs") for spec, _ in APPS),
        *(("--app", spec, "work") for spec, _ in WORK_APPS),
    ]
    return app.cli_many(commands)


@pytest.mark.parametrize(("args", "fragments"), USAGE)
def test_usage_errors_are_one_line(
    answers: dict[tuple[str, ...], Any], args: tuple[str, ...], fragments: list[str]
) -> None:
    """A usage error: one line naming the problem, exit 2, no usage block, no traceback."""
    assert_one_line_error(answers[args], *fragments)


@pytest.mark.parametrize(("spec", "fragments"), APPS)
def test_an_unusable_app_is_one_line(
    answers: dict[tuple[str, ...], Any], spec: str, fragments: list[str]
) -> None:
    """``--app`` naming no module, no attribute, no Engine, or a module that raises: one line."""
    assert_one_line_error(answers[("--app", spec, "runs")], *fragments)


@pytest.mark.parametrize(("spec", "fragments"), WORK_APPS)
def test_work_with_an_unusable_app_is_one_line(
    answers: dict[tuple[str, ...], Any], spec: str, fragments: list[str]
) -> None:
    """``work`` refuses an unusable ``--app`` in one line too."""
    assert_one_line_error(answers[("--app", spec, "work")], *fragments)


def test_help_exits_zero(app: App) -> None:
    """``--help`` is not an error."""
    done = app.cli("--help")
    assert 0 == done.returncode
    assert "work" in done.stdout
    assert "retry" in done.stdout


@pytest.mark.parametrize("command", ["show", "retry"])
def test_an_unknown_run_id_is_one_line(app: App, command: str) -> None:
    """``show`` and ``retry`` of an id no run has: one line naming the id, exit 2."""
    assert_one_line_error(app.cli("--app", "app:engine", command, "r-404"), "'r-404'")


def test_retry_of_a_run_that_has_not_failed_is_one_line(app: App) -> None:
    """``retry`` of a completed run is refused in one line (exit 3); the run stays completed."""
    done = app.cli("--app", "app:engine", "retry", "r-1")
    assert_one_line_error(done, "refused", "r-1 is completed", code=3)
    assert "completed" == app.shown("r-1")["run"]["status"]


def _random_bytes(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 64)


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    with db:
        for statement in statements:
            db.execute(statement)
    db.close()


def _foreign(path: Path) -> None:
    _sql(
        path,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO users VALUES (1, 'ada')",
    )


def _newer(path: Path) -> None:
    _sql(path, "UPDATE durable_meta SET value = '99' WHERE key = 'version'")


def _other_schema(path: Path) -> None:
    _sql(
        path,
        "CREATE TABLE durable_meta (key TEXT PRIMARY KEY, value TEXT)",
        "INSERT INTO durable_meta VALUES ('schema', 'someone.else')",
    )


@pytest.mark.sqlite_only("a store file that is damaged, foreign or missing")
@pytest.mark.parametrize(
    ("damage", "fragments"),
    [
        (_random_bytes, ["not a usable SQLite database"]),
        (_foreign, ["not an effects.durable store", "users"]),
        (_newer, ["schema version 99", "newer"]),
        (_other_schema, ["not an effects.durable store", "someone.else"]),
    ],
)
@pytest.mark.parametrize("args", [("show", "r-1"), ("work",)])
def test_a_store_that_is_not_an_engine_store_is_one_line_and_untouched(
    app: App, damage: object, fragments: list[str], args: tuple[str, ...]
) -> None:
    """A corrupt file, a foreign SQLite db, a newer schema: one line, exit 5, file unchanged."""
    if damage is not _newer:
        app.db.unlink()
    assert callable(damage)
    damage(app.db)
    before = digest(app.db)
    assert_one_line_error(app.cli("--app", "app:engine", *args), *fragments, code=5)
    assert before == digest(app.db)


@pytest.mark.sqlite_only("a store file that is damaged, foreign or missing")
def test_damaged_pages_of_a_store_are_one_line_and_untouched(app: App, tmp_path: Path) -> None:
    """Whichever page of a store is garbage, a command succeeds or fails in one line."""
    clean = app.db.read_bytes()
    page = 4096
    assert len(clean) // page > 3
    damaged: list[tuple[App, str]] = []
    for number in range(1, len(clean) // page):  # every page but the header page
        data = bytearray(clean)
        data[number * page : (number + 1) * page] = bytes((7 * i) & 0xFF for i in range(page))
        copy = make_app(tmp_path / f"page-{number}")
        copy.db.write_bytes(bytes(data))
        damaged.append((copy, digest(copy.db)))

    def show(copy: App) -> subprocess.CompletedProcess[str]:
        # show reads the run, its checkpoints and its events.
        return copy.cli("--app", "app:engine", "show", "r-1")

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(show, [copy for copy, _ in damaged]))
    failed = 0
    for (copy, before), done in zip(damaged, results, strict=True):
        assert "Traceback" not in done.stderr, (copy.root.name, done.stderr)
        if done.returncode != 0:
            failed += 1
            assert_one_line_error(done, "store", "sqlite:///durable.db", code=5)
        assert before == digest(copy.db), copy.root.name
    assert failed > 0


@pytest.mark.sqlite_only("a store file that is damaged, foreign or missing")
@pytest.mark.parametrize("args", COMMANDS)
def test_a_missing_store_is_one_line_and_not_created(cli_app: App, args: tuple[str, ...]) -> None:
    """A read command where no store exists says so and creates none."""
    app = cli_app
    assert_one_line_error(app.cli("--app", "app:engine", *args), "no store at", "durable.db")
    assert not app.db.exists()


def test_error_lines_escape_control_characters(app: App) -> None:
    """A run id full of escape sequences comes back escaped in the error line."""
    done = app.cli("--app", "app:engine", "show", "r\x1b]0;owned\x07")
    assert_one_line_error(done, "r\\x1b]0;owned\\x07")
