"""migrate run --rollback-orphans: states of records gone from the source, rolled back after a
complete scan, on the SQLite and PostgreSQL stores."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import migrate
from migrate import durable
from migrate._sources import Cursor, Window
from tests.migrate.rollback_support import _write_csv, make_rollback_project  # pyright: ignore[reportPrivateUsage]


def test_orphans_are_rolled_back_after_a_complete_scan(tmp_path: Path, store_url: str) -> None:
    """Rows deleted at the source: their states (and destination rows) are undone and counted;
    the rows still there are untouched; a plain run's JSON has no orphan fields."""
    project = make_rollback_project(tmp_path, store_url, people=12)
    first = project.json("run", "people")
    assert "orphans_rolled_back" not in first["definitions"]["people"]
    _write_csv(tmp_path / "people.csv", range(1, 9))  # 9..12 deleted at the source

    plan = project.main("run", "people", "--rollback-orphans", "--plan")
    assert 0 == plan.returncode, plan.stderr
    assert "orphans: rolled back after each complete scan" in plan.stdout

    document = project.json("run", "people", "--rollback-orphans")
    result = document["definitions"]["people"]
    assert (8, 4, 0, "succeeded") == (
        result["unchanged"],
        result["orphans_rolled_back"],
        result["orphans_failed"],
        result["status"],
    )
    assert [("people", str(i)) for i in range(9, 13)] == project.calls()
    assert [str(i) for i in range(1, 9)] == sorted(project.states("people"), key=int)
    assert list(range(1, 9)) == project.dest_ids("people")
    assert any("4 orphans rolled back" in note for note in document["notes"])
    # The stored run keeps them too.
    stored = project.runs()[0]["definitions"]["people"]
    assert (4, 0) == (stored["orphans_rolled_back"], stored["orphans_failed"])

    # Nothing left to do: a new scan from the start finds no orphan.
    again = project.json("run", "people", "--rollback-orphans")
    assert (8, 0) == (
        again["definitions"]["people"]["unchanged"],
        again["definitions"]["people"]["orphans_rolled_back"],
    )
    assert 4 == len(project.calls())


def test_a_failing_undo_keeps_the_orphan_with_an_attempt_and_fails_the_run(
    tmp_path: Path, store_url: str
) -> None:
    project = make_rollback_project(tmp_path, store_url, people=6)
    assert 0 == project.main("run", "people").returncode
    _write_csv(tmp_path / "people.csv", range(1, 4))
    project.fail("5")
    done = project.main("run", "people", "--rollback-orphans", "--json")
    assert 1 == done.returncode, done.stderr
    states = project.states("people")
    assert ["1", "2", "3", "5"] == sorted(states, key=int)
    assert 1 == len(states["5"].rollback_attempts)
    assert "cannot undo 5" in states["5"].rollback_attempts[0]["error"]["message"]
    assert [("people", "4"), ("people", "6")] == project.calls()


def test_a_definition_without_rollback_refuses_the_flag(tmp_path: Path, store_url: str) -> None:
    project = make_rollback_project(tmp_path, store_url, people=3, orders=2, orders_rollback=False)
    done = project.main("run", "--all", "--rollback-orphans")
    assert 3 == done.returncode
    assert "refusing --rollback-orphans for 'orders'" in done.stderr
    assert [] == project.runs()
    with pytest.raises(migrate.RefusedError):
        migrate.run(
            migrate.Config(
                [migrate.Migration("p", migrate.MemorySource([]), _noop)],
                store=migrate.MemoryStore(),
            ),
            migrate.RunOptions(rollback_orphans=True),
        )


def test_only_scanning_modes_take_the_flag(tmp_path: Path, store_url: str) -> None:
    project = make_rollback_project(tmp_path, store_url, people=3)
    done = project.main("run", "people", "--failed", "--rollback-orphans")
    assert 2 == done.returncode
    assert "--rollback-orphans and --failed cannot be used together" in done.stderr


def _noop(item: migrate.Item, scope: migrate.Scope) -> None:
    scope.journal.change("memory:dest", "insert", key=item.identity)


class _Breaking(migrate.MemorySource):
    """A memory source whose reads from position *at* to its end fail while ``broken`` is set."""

    def __init__(self, rows: list[dict[str, Any]], at: int) -> None:
        super().__init__(rows, window_size=2)
        self.at = at
        self.size = len(rows)
        self.broken = False

    def read_window(self, cursor: Cursor) -> Window:
        position = 0 if cursor is None else int(cursor["position"])
        if self.broken and self.at <= position < self.size:
            raise migrate.SourceError("the source went away")
        return super().read_window(cursor)


def _rows(ids: range) -> list[dict[str, Any]]:
    return [{"id": str(i)} for i in ids]


def _config(store_url: str, tmp_path: Path, *migrations: migrate.Migration) -> migrate.Config:
    return migrate.Config(list(migrations), store=store_url, base_dir=tmp_path)


def _states(config: migrate.Config, definition_id: str) -> list[str]:
    with config.using_store(read_only=True) as store:
        return sorted((s.identity for s in store.items(definition_id)), key=int)


def test_a_run_resumed_from_a_saved_cursor_rolls_back_none(tmp_path: Path, store_url: str) -> None:
    """The first flagged run stops mid-way (a source error); the next resumes from the saved
    cursor, so its scan is not complete: nothing rolled back, a note says why; the run after
    that scans from the start (the saved cursor is at the end) and rolls them back."""
    undone: list[str] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        undone.append(item.identity)

    store = store_url
    all_rows = migrate.MemorySource(_rows(range(1, 9)), window_size=2)
    config = _config(store, tmp_path, migrate.Migration("p", all_rows, _noop, rollback=undo))
    assert "succeeded" == migrate.run(config).status
    source = _Breaking(_rows(range(1, 7)), at=4)  # 7 and 8 deleted at the source
    config = _config(store, tmp_path, migrate.Migration("p", source, _noop, rollback=undo))
    options = migrate.RunOptions(rollback_orphans=True)

    source.broken = True
    stopped = migrate.run(config, options)  # from the start (the cursor was at the end)
    assert ("failed", 0) == (stopped.status, stopped.definitions["p"].orphans_rolled_back)
    assert any("did not reach the end" in note for note in stopped.notes)

    source.broken = False
    resumed = migrate.run(config, options)
    assert "succeeded" == resumed.status
    assert (False, 0) == (
        resumed.definitions["p"].from_start,
        resumed.definitions["p"].orphans_rolled_back,
    )
    assert any("from the saved cursor" in note for note in resumed.notes)
    assert [] == undone
    assert [str(i) for i in range(1, 9)] == _states(config, "p")

    complete = migrate.run(config, options)
    assert (True, 2) == (
        complete.definitions["p"].from_start,
        complete.definitions["p"].orphans_rolled_back,
    )
    assert ["7", "8"] == undone
    assert [str(i) for i in range(1, 7)] == _states(config, "p")


def _two(
    store_url: str, tmp_path: Path, authors: range, books: range, undone: list[str]
) -> migrate.Config:
    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        undone.append(f"{scope.definition_id} {item.identity}")

    return _config(
        store_url,
        tmp_path,
        migrate.Migration(
            "authors", migrate.MemorySource(_rows(authors), window_size=3), _noop, rollback=undo
        ),
        migrate.Migration(
            "books",
            migrate.MemorySource(_rows(books), window_size=3),
            _noop,
            requires=("authors",),
            rollback=undo,
        ),
    )


def test_the_durable_form_rolls_back_orphans_in_steps_dependents_first(
    tmp_path: Path, store_url: str
) -> None:
    undone: list[str] = []
    config = _two(store_url, tmp_path, range(1, 6), range(1, 8), undone)
    assert "succeeded" == durable.run(config).status
    config = _two(store_url, tmp_path, range(1, 4), range(1, 5), undone)
    summary = durable.run(config, migrate.RunOptions(rollback_orphans=True))
    assert "succeeded" == summary.status, summary
    assert ["books 5", "books 6", "books 7", "authors 4", "authors 5"] == undone
    assert (3, 2) == (
        summary.definitions["books"].orphans_rolled_back,
        summary.definitions["authors"].orphans_rolled_back,
    )
    assert [str(i) for i in range(1, 4)] == _states(config, "authors")
    assert [str(i) for i in range(1, 5)] == _states(config, "books")

    with config.using_store(read_only=True) as store:
        (record, *_) = store.runs(limit=1)
    assert record.durable_run_id is not None

    async def read() -> list[Any]:
        async with durable.engine(config) as engine:
            return await engine.checkpoints(record.durable_run_id)  # type: ignore[arg-type]

    checkpoints = asyncio.run(read())
    names = [c.name for c in checkpoints]
    assert "migrate.orphans" in names
    orphans = [c for c in checkpoints if c.name == "migrate.orphans"]
    assert [("books", 0, True), ("authors", 0, True)] == [
        (c.output["definition"], c.output["n"], c.output["done"]) for c in orphans
    ]
    assert all(c.attempts == 1 for c in orphans)
    assert names.index("migrate.orphans") > max(
        i for i, name in enumerate(names) if name == "migrate.window"
    )


def test_orphans_of_the_dependent_go_before_those_of_the_dependency(
    tmp_path: Path, store_url: str
) -> None:
    undone: list[str] = []
    assert (
        "succeeded"
        == migrate.run(_two(store_url, tmp_path, range(1, 4), range(1, 4), undone)).status
    )
    config = _two(store_url, tmp_path, range(1, 3), range(1, 3), undone)
    summary = migrate.run(config, migrate.RunOptions(rollback_orphans=True))
    assert "succeeded" == summary.status
    assert ["books 3", "authors 3"] == undone


def _named(ids: list[str]) -> list[dict[str, Any]]:
    return [{"id": i} for i in ids]


ODD = ["1", "01", "é", "e\u0301", "a b", "\x1b[31m", "\u202eevil", "x" * 300, "<line 3>", "10"]


def test_odd_identities_are_orphans_like_any_other(tmp_path: Path, store_url: str) -> None:
    """Identities alike in text but not equal ("1"/"01"/"10", a composed and a decomposed é),
    escapes, bidi controls, a long one, one shaped like a positional key: exactly the ones
    gone from the source are undone, each once."""
    undone: list[str] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        undone.append(item.identity)

    def config(ids: list[str]) -> migrate.Config:
        source = migrate.MemorySource(_named(ids), window_size=3)
        return _config(store_url, tmp_path, migrate.Migration("p", source, _noop, rollback=undo))

    assert "succeeded" == migrate.run(config(ODD)).status
    gone = {"01", "e\u0301", "\x1b[31m", "<line 3>"}
    kept = [i for i in ODD if i not in gone]
    summary = migrate.run(config(kept), migrate.RunOptions(rollback_orphans=True))
    assert ("succeeded", 4) == (summary.status, summary.definitions["p"].orphans_rolled_back)
    assert sorted(gone) == sorted(undone)
    with config(kept).using_store(read_only=True) as store:
        assert sorted(kept) == sorted(s.identity for s in store.items("p"))


def test_items_failing_in_the_scan_are_seen_and_not_orphans(tmp_path: Path, store_url: str) -> None:
    """An item still at the source whose processing fails in the flagged run keeps its (failed)
    state: the scan met it. Only the record gone from the source is undone."""
    undone: list[str] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        undone.append(item.identity)

    def failing(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity == "2":
            raise ValueError("2 breaks now")
        _noop(item, scope)

    rows = migrate.MemorySource(_rows(range(1, 6)), window_size=2)
    first = _config(store_url, tmp_path, migrate.Migration("p", rows, _noop, rollback=undo))
    assert "succeeded" == migrate.run(first).status
    changed = [{**row, "v": 2} if row["id"] == "2" else row for row in _rows(range(1, 5))]
    fewer = migrate.MemorySource(changed, window_size=2)  # 2 changed: processed again
    config = _config(store_url, tmp_path, migrate.Migration("p", fewer, failing, rollback=undo))
    summary = migrate.run(config, migrate.RunOptions(rollback_orphans=True))
    assert 1 == summary.definitions["p"].orphans_rolled_back
    assert ["5"] == undone
    with config.using_store(read_only=True) as store:
        assert {"1": "migrated", "2": "failed", "3": "migrated", "4": "migrated"} == {
            s.identity: s.status for s in store.items("p")
        }


def test_ctrl_c_in_an_orphan_undo_keeps_what_was_undone_and_the_next_run_finishes(
    tmp_path: Path, store_url: str
) -> None:
    """A KeyboardInterrupt in the third orphan's undo stops the run (stored failed,
    interrupted) once the undos before it are committed; the next flagged run scans again and
    rolls back the rest, undoing none twice."""
    undone: list[str] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        if item.identity == "8" and "8" not in undone:
            undone.append("8")
            raise KeyboardInterrupt
        undone.append(item.identity)

    rows = migrate.MemorySource(_rows(range(1, 11)), window_size=4)
    first = _config(store_url, tmp_path, migrate.Migration("p", rows, _noop, rollback=undo))
    assert "succeeded" == migrate.run(first).status
    fewer = migrate.MemorySource(_rows(range(1, 6)), window_size=4)
    config = _config(store_url, tmp_path, migrate.Migration("p", fewer, _noop, rollback=undo))
    options = migrate.RunOptions(rollback_orphans=True)
    with pytest.raises(KeyboardInterrupt):
        migrate.run(config, options)
    assert ["6", "7", "8"] == undone
    assert ["1", "2", "3", "4", "5", "8", "9", "10"] == _states(config, "p")
    with config.using_store(read_only=True) as store:
        stopped = store.runs(1)[0]
        assert "Interrupted" == store.item("p", "8").rollback_attempts[0]["error"]["type"]  # type: ignore[union-attr]
    assert (stopped.error or "").startswith("interrupted: KeyboardInterrupt"), stopped
    assert "failed" == stopped.status

    finished = migrate.run(config, options)
    assert ("succeeded", 3) == (finished.status, finished.definitions["p"].orphans_rolled_back)
    # The rerun selects in the store's identity order (text: "10" before "8"), then undoes in
    # natural order within a page.
    assert undone in (["6", "7", "8", "10", "8", "9"], ["6", "7", "8", "8", "9", "10"])
    assert [str(i) for i in range(1, 6)] == _states(config, "p")
