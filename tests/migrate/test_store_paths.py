"""A SQLite store path that can hold no store: every command exits 5 with one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

import migrate
from tests.migrate.cli_support import make_project

COMMANDS = [
    ("status",),
    ("status", "--json"),
    ("status", "people"),
    ("runs",),
    ("runs", "--json"),
    ("failures", "people"),
    ("failures", "people", "--json"),
    ("run", "people"),
    ("run", "people", "--json"),
    ("run", "people", "--failed"),
    ("run", "people", "--plan"),
    ("forget", "people", "--id", "1"),
    ("unlock", "people"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_store_folder_that_is_a_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    """``state/migrate.db`` where ``state`` is a file: exit 5, one line naming it, file kept."""
    project = make_project(tmp_path, ["ok"])
    (tmp_path / "state").write_text("notes, not a folder\n")
    done = project.main(*command)
    assert (5, "") == (done.returncode, done.stdout)
    expected = (
        f"migrate: store error: store {tmp_path}/state/migrate.db cannot be opened: "
        f"{tmp_path}/state is a file, not a folder\n"
    )
    assert expected == done.stderr
    assert "notes, not a folder\n" == (tmp_path / "state").read_text()


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_store_path_that_is_a_folder(tmp_path: Path, command: tuple[str, ...]) -> None:
    """``state/migrate.db`` is a folder: exit 5, one line naming it, the folder kept as it was."""
    project = make_project(tmp_path, ["ok"])
    (tmp_path / "state" / "migrate.db").mkdir(parents=True)
    (tmp_path / "state" / "migrate.db" / "keep.txt").write_text("kept")
    done = project.main(*command)
    assert (5, "") == (done.returncode, done.stdout)
    expected = (
        f"migrate: store error: store {tmp_path}/state/migrate.db cannot be opened: "
        "it is a folder, not a store file\n"
    )
    assert expected == done.stderr
    assert ["keep.txt"] == [p.name for p in (tmp_path / "state" / "migrate.db").iterdir()]


def test_the_store_option_is_checked_alike(tmp_path: Path) -> None:
    """``--store sqlite:///FILE/x.db`` on the command line: the same error for a query."""
    project = make_project(tmp_path, ["ok"])
    (tmp_path / "plain").write_text("")
    done = project.main("--store", f"sqlite:///{tmp_path}/plain/x.db", "status")
    assert 5 == done.returncode
    assert f"{tmp_path}/plain is a file, not a folder" in done.stderr


def test_the_api_raises_store_error_naming_the_path(tmp_path: Path) -> None:
    """``migrate.status``, ``runs``, ``failures`` and ``open_store``: StoreError, not empty."""
    (tmp_path / "state").write_text("")
    config = migrate.Config(
        [migrate.Migration("p", migrate.MemorySource([{"id": 1}]), lambda item, scope: None)],
        store="sqlite:///state/m.db",
        base_dir=tmp_path,
    )
    calls = [
        lambda: migrate.status(config),
        lambda: migrate.runs(config),
        lambda: migrate.failures(config, "p"),
        lambda: migrate.open_store("sqlite:///state/m.db", base_dir=tmp_path, read_only=True),
        lambda: migrate.run(config),
    ]
    for call in calls:
        with pytest.raises(migrate.StoreError, match=r"state is a file, not a folder"):
            call()
