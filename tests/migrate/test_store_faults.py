"""
A store that cannot be written or read: a full disk, an I/O error, a lock held past the
timeout, and corrupt, truncated, foreign, newer or read-only files (real processes, real files).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

import migrate
from tests.migrate.cli_support import counts_sum, migrate_command, run_main

N = 3000
WINDOW = 100

CONFIG = """
import time
from pathlib import Path

import migrate

HERE = Path(__file__).resolve().parent


def process(item, scope):
    if (HERE / "pause_at").exists() and (HERE / "pause_at").read_text() == item.identity:
        (HERE / "paused").write_text("")
        while not (HERE / "go").exists():
            time.sleep(0.01)
    scope.track({"seen": item.identity, "pad": "x" * 40})


config = migrate.Config(
    [migrate.Migration("p", migrate.CsvSource(HERE / "p.csv", window_size=WINDOW), process)],
    store=STORE,
)
"""


def _project(root: Path, store: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with (root / "p.csv").open("w") as handle:
        handle.write("id,name\n")
        handle.writelines(f"{i},name {i}\n" for i in range(1, N + 1))
    config = root / "migrate_config.py"
    config.write_text(CONFIG.replace("WINDOW", str(WINDOW)).replace("STORE", repr(store)))
    return config


def _cli(config: Path, *args: str, **popen: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [*migrate_command(), "--config", str(config), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **popen,
    )


def _runs(config: Path) -> list[dict[str, object]]:
    done = _cli(config, "runs", "--json", "--limit", "100")
    assert 0 == done.returncode, done.stderr
    runs: list[dict[str, object]] = json.loads(done.stdout)["runs"]
    return runs


def _assert_each_item_counted_once(config: Path) -> None:
    """After the rerun: every identity migrated, and the runs' counts add up to N once."""
    status = json.loads(_cli(config, "status", "--json").stdout)["definitions"]["p"]
    assert (N, 0) == (status["migrated"], status["failed"])
    totals = counts_sum({"runs": _runs(config)}, "p")
    assert (N, 0) == (totals["migrated"], totals["unchanged"])


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert 1 == len(lines), stderr
    return lines[0]


def _remount(mount: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


@pytest.mark.timeout(180)
def test_a_full_disk_fails_the_commit_counts_nothing_of_it_and_the_rerun_finishes(
    tmp_path: Path, small_disk: Path
) -> None:
    """The run stops with exit 5 naming the store and 'disk is full'; nothing is counted twice."""
    store = small_disk / "state.db"
    config = _project(tmp_path / "project", f"sqlite:///{store}")
    full = _cli(config, "run", "--progress", "none")
    assert 5 == full.returncode, full.stdout + full.stderr
    line = _one_line(full.stderr)
    assert f"store {store}" in line
    assert "database or disk is full" in line
    _remount(small_disk, "size=64m")
    (first,) = _runs(config)
    first_counts = first["definitions"]["p"]  # type: ignore[index]
    assert 0 < first_counts["migrated"] < N  # type: ignore[index, operator]
    assert 0 == first_counts["migrated"] % WINDOW  # type: ignore[index, operator]
    rerun = _cli(config, "run", "--progress", "none")
    assert 0 == rerun.returncode, rerun.stderr
    _assert_each_item_counted_once(config)


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an EFBIG error instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (160_000, 160_000))


@pytest.mark.timeout(180)
def test_an_io_error_fails_the_commit_and_the_rerun_finishes(tmp_path: Path) -> None:
    """Writes past RLIMIT_FSIZE fail with an I/O error: exit 5 naming it; the rerun finishes."""
    store = tmp_path / "state.db"
    config = _project(tmp_path / "project", f"sqlite:///{store}")
    failed = _cli(config, "run", "--progress", "none", preexec_fn=_limit_file_size)
    assert 5 == failed.returncode, failed.stdout + failed.stderr
    line = _one_line(failed.stderr)
    assert f"store {store}" in line
    assert "disk I/O error" in line
    rerun = _cli(config, "run", "--progress", "none")
    assert 0 == rerun.returncode, rerun.stderr
    _assert_each_item_counted_once(config)


@pytest.mark.timeout(180)
def test_a_lock_held_past_the_timeout_fails_the_commit_and_the_rerun_finishes(
    tmp_path: Path,
) -> None:
    """Another connection holding the write lock past ?timeout= fails the window's commit."""
    store = tmp_path / "state.db"
    root = tmp_path / "project"
    config = _project(root, f"sqlite:///{store}?timeout=0.2")
    (root / "pause_at").write_text(str(WINDOW + 50))  # inside the second window
    running = subprocess.Popen(
        [*migrate_command(), "--config", str(config), "run", "--progress", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not (root / "paused").exists():
            assert running.poll() is None, running.communicate()
            time.sleep(0.01)
        blocker = sqlite3.connect(store, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        (root / "go").write_text("")
        _out, err = running.communicate(timeout=60)
        blocker.execute("ROLLBACK")
        blocker.close()
    finally:
        running.kill()
    assert 5 == running.returncode, err
    line = _one_line(err)
    assert "database is locked" in line
    assert "another connection held a lock for more than 0.2s" in line
    (root / "pause_at").unlink()
    assert 0 == _cli(config, "run", "--progress", "none").returncode
    _assert_each_item_counted_once(config)
    (first, _rerun) = reversed(_runs(config))
    assert WINDOW == first["definitions"]["p"]["migrated"]  # type: ignore[index]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _small_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "p.csv").write_text("id,name\n1,a\n2,b\n")
    config = root / "migrate_config.py"
    config.write_text(CONFIG.replace("WINDOW", "10").replace("STORE", repr("sqlite:///state.db")))
    return config


def _make_foreign(path: Path) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers VALUES (1, 'Ada')")
    db.close()


def _make_newer(path: Path) -> None:
    migrate.run(migrate.load_config(_small_project(path.parent)))
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE schema_version SET version = version + 1")
    db.close()


def _make_truncated(path: Path) -> None:
    migrate.run(migrate.load_config(_small_project(path.parent)))
    data = path.read_bytes()
    assert len(data) > 8192
    path.write_bytes(data[: len(data) // 2])


def _make_garbage(path: Path) -> None:
    path.write_bytes(os.urandom(5000))


FAULTS = [
    ("garbage", _make_garbage, 5, "is not a SQLite database"),
    ("truncated", _make_truncated, 5, "is truncated"),
    ("foreign", _make_foreign, 5, "is a SQLite database but not a migrate store (its tables: "),
    ("newer", _make_newer, 3, "newer than this version of migrate understands"),
]


@pytest.mark.parametrize(("name", "make", "code", "said"), FAULTS, ids=[f[0] for f in FAULTS])
@pytest.mark.parametrize("command", [["run"], ["status"]])
def test_a_store_file_that_is_not_a_usable_store_is_refused_and_left_as_it_is(  # noqa: PLR0917
    tmp_path: Path, name: str, make: object, code: int, said: str, command: list[str]
) -> None:
    """Each command says so in one line, with its documented exit code; the file is unchanged."""
    root = tmp_path / "project"
    root.mkdir()
    store = root / "state.db"
    make(store)  # type: ignore[operator]
    config = _small_project(root)
    before = _digest(store)
    done = run_main(config, *command)
    assert code == done.returncode, done.stdout + done.stderr
    line = _one_line(done.stderr)
    assert f"store {store}" in line
    assert said in line
    assert before == _digest(store)
    assert not Path(f"{store}-wal").exists() or name == "newer"


@pytest.mark.timeout(120)
def test_a_read_only_store_serves_the_read_commands_and_refuses_a_run(
    tmp_path: Path, small_disk: Path
) -> None:
    """On a read-only mount: status, runs and failures work; run exits 5 in one line."""
    _remount(small_disk, "size=16m")
    root = tmp_path / "project"
    config = _project(root, f"sqlite:///{small_disk / 'state.db'}")
    (root / "p.csv").write_text("id,name\n1,a\n2,b\n,c\n")
    assert 1 == run_main(config, "run").returncode  # the row without id fails
    _remount(small_disk, "ro")
    before = _digest(small_disk / "state.db")
    status = run_main(config, "status", "--json")
    assert 0 == status.returncode, status.stderr
    assert (2, 1) == (
        json.loads(status.stdout)["definitions"]["p"]["migrated"],
        json.loads(status.stdout)["definitions"]["p"]["failed"],
    )
    assert 0 == run_main(config, "runs").returncode
    failures = run_main(config, "failures", "p", "--json")
    assert ["<line 4>"] == [f["identity"] for f in json.loads(failures.stdout)]
    refused = run_main(config, "run")
    assert 5 == refused.returncode
    assert "is read-only" in _one_line(refused.stderr)
    assert before == _digest(small_disk / "state.db")


def test_a_store_that_does_not_exist_yet_is_not_created_by_read_commands(tmp_path: Path) -> None:
    """status and runs on a project that never ran report nothing and create no file."""
    config = _small_project(tmp_path)
    status = run_main(config, "status", "--json")
    assert (0, None) == (
        status.returncode,
        json.loads(status.stdout)["definitions"]["p"]["latest_run"],
    )
    assert 0 == run_main(config, "runs").returncode
    assert not (tmp_path / "state.db").exists()
