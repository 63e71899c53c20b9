"""
An ``--update`` request is kept in the store until the update is carried out: a run killed
before its first commit, stopped, or blocked leaves it for the next run, plain or ``--update``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import migrate
from tests.migrate.cli_support import Project, make_project
from tests.migrate.helpers import config_of, people, recorder

N = 30
WINDOW = 10


def _counts(done: Any) -> dict[str, int]:
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)["definitions"]["people"]
    return {key: record[key] for key in ("migrated", "unchanged", "needs_update", "failed")}


def _killed_update(project: Project, block_at: int) -> None:
    """``migrate run people --update`` killed (SIGKILL) while it processes item *block_at*."""
    (project.root / "block_at").write_text(str(block_at))
    crashed = project.popen("run", "people", "--update", "--progress", "none")
    try:
        project.wait_for("blocked", crashed)
    finally:
        crashed.kill()  # SIGKILL: no clean-up of any kind
        crashed.communicate()
    assert crashed.returncode < 0
    (project.root / "block_at").unlink()
    (project.root / "blocked").unlink()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rerun", [(), ("--update",)], ids=["plain", "update"])
def test_an_update_killed_before_its_first_commit_is_done_by_the_next_run(
    tmp_path: Path, store_url: str, rerun: tuple[str, ...]
) -> None:
    """kill -9 in the first window of --update: the next run updates every item, once."""
    project = make_project(tmp_path, ["ok"] * N, window=WINDOW, store=store_url)
    assert N == _counts(project.cli("run", "people", "--json"))["migrated"]
    _killed_update(project, block_at=2)
    after = project.cli("run", "people", *rerun, "--json")
    assert {"migrated": N, "unchanged": 0, "needs_update": 0, "failed": 0} == _counts(after)
    stored = project.json("status", "people")["definitions"]["people"]
    assert (N, 0) == (stored["migrated"], stored["needs_update"])
    # Carried out, so cleared: the next plain run has nothing to do.
    assert {"migrated": 0, "unchanged": 0, "needs_update": 0, "failed": 0} == _counts(
        project.cli("run", "people", "--json")
    )


@pytest.mark.timeout(120)
def test_an_update_killed_after_its_first_commit_is_finished_from_the_cursor(
    tmp_path: Path, store_url: str
) -> None:
    """kill -9 in the second window: the next plain run updates the rest, not window 1 again."""
    project = make_project(tmp_path, ["ok"] * N, window=WINDOW, store=store_url)
    project.cli("run", "people")
    _killed_update(project, block_at=WINDOW + 5)
    after = project.cli("run", "people", "--json")
    assert {"migrated": N - WINDOW, "unchanged": 0, "needs_update": 0, "failed": 0} == _counts(
        after
    )
    stored = project.json("status", "people")["definitions"]["people"]
    assert (N, 0) == (stored["migrated"], stored["needs_update"])
    assert 0 == _counts(project.cli("run", "people", "--json"))["migrated"]


class _Unreadable(migrate.MemorySource):
    """A memory source whose reads fail while ``broken`` is set."""

    broken = False

    def read_window(self, cursor: migrate.Cursor) -> migrate.Window:
        if self.broken:
            raise migrate.SourceError("the source is down")
        return super().read_window(cursor)


def test_an_update_whose_source_could_not_be_read_is_done_by_the_next_plain_run(
    tmp_path: Path, store_url: str
) -> None:
    """--update stopped at its first read: states untouched, and the next plain run updates."""
    seen: list[str] = []
    source = _Unreadable(people(5), window_size=2)
    config = config_of(tmp_path, migrate.Migration("p", source, recorder(seen)), store=store_url)
    migrate.run(config)
    source.broken = True
    stopped = migrate.run(config, migrate.RunOptions(update=True))
    assert stopped.definitions["p"].error is not None
    assert 5 == migrate.status(config).definitions["p"].migrated
    source.broken = False
    seen.clear()
    summary = migrate.run(config)
    assert (["1", "2", "3", "4", "5"], 5) == (seen, summary.definitions["p"].counts.migrated)
    assert any("carrying out the --update" in note for note in summary.notes), summary.notes
    seen.clear()
    migrate.run(config)
    assert [] == seen


def test_an_update_blocked_by_its_dependency_stays_requested(
    tmp_path: Path, store_url: str
) -> None:
    """--update of a definition blocked in that run: the next plain run of it updates it."""
    seen: list[str] = []
    failing = {"1"}
    config = config_of(
        tmp_path,
        migrate.Migration("a", migrate.MemorySource(people(2)), recorder([], fail=failing)),
        migrate.Migration("b", migrate.MemorySource(people(3)), recorder(seen), requires=("a",)),
        store=store_url,
    )
    failing.clear()
    migrate.run(config)
    failing.add("1")
    blocked = migrate.run(config, migrate.RunOptions(["a", "b"], update=True))
    assert "blocked" == blocked.definitions["b"].status
    failing.clear()
    seen.clear()
    summary = migrate.run(config, migrate.RunOptions(["b"], force=True))
    assert (["1", "2", "3"], 3) == (seen, summary.definitions["b"].counts.migrated)


def test_a_targeted_run_leaves_the_request_and_says_so(tmp_path: Path, store_url: str) -> None:
    """A --failed run between: the request waits (a note says so) for the next normal run."""
    seen: list[str] = []
    source = _Unreadable(people(3), window_size=2)
    config = config_of(
        tmp_path, migrate.Migration("p", source, recorder(seen, fail={"2"})), store=store_url
    )
    migrate.run(config)
    source.broken = True
    migrate.run(config, migrate.RunOptions(update=True))
    source.broken = False
    failed = migrate.run(config, migrate.RunOptions(failed=True))
    assert any("--update" in note and "next normal run" in note for note in failed.notes), (
        failed.notes
    )
    seen.clear()
    summary = migrate.run(config)
    assert ["1", "2", "3"] == seen
    assert 2 == summary.definitions["p"].counts.migrated


def test_an_update_stopped_by_ctrl_c_in_its_first_window_is_finished_by_a_plain_run(
    tmp_path: Path, store_url: str
) -> None:
    """Ctrl-C at item 3 of --update: the next plain run updates what the stopped run did not."""
    seen: list[str] = []
    stop_at: set[str] = set()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity in stop_at:
            raise KeyboardInterrupt
        seen.append(item.identity)

    source = migrate.MemorySource(people(6), window_size=4)
    config = config_of(tmp_path, migrate.Migration("p", source, process), store=store_url)
    migrate.run(config)
    stop_at.add("3")
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        migrate.run(config, migrate.RunOptions(update=True))
    assert ["1", "2"] == seen
    stop_at.clear()
    seen.clear()
    summary = migrate.run(config)
    assert (["3", "4", "5", "6"], 4, 2) == (
        seen,
        summary.definitions["p"].counts.migrated,
        summary.definitions["p"].counts.unchanged,
    )
    seen.clear()
    migrate.run(config)
    assert [] == seen
