"""
An item's journal keeps the destination changes of earlier runs that a later run does not redo
(`migrate._carried`), so a rollback still undoes them: a later run that fails, skips or is
interrupted on the item, or writes another key, used to replace the journal and lose the record
of the rows the first run wrote. On the SQLite and PostgreSQL stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import migrate

#: Process item "a" again, whatever its state.
AGAIN = migrate.RunOptions(ids=("a",))


class _World:
    """A destination (key -> value), the undos done, and what the process does next."""

    def __init__(self) -> None:
        self.dest: dict[str, Any] = {}
        self.undone: list[list[Any]] = []
        self.behaviour = "write"

    def process(self, item: migrate.Item, scope: migrate.Scope) -> None:
        if self.behaviour == "fail":
            raise ValueError("the destination refused it")
        if self.behaviour == "skip":
            raise migrate.Skip("not wanted now")
        if self.behaviour == "interrupt":
            raise KeyboardInterrupt
        key = f"{item.identity}-{item.data['v']}" if self.behaviour == "rekey" else item.identity
        self.dest[key] = item.data["v"]
        scope.journal.diagnostic(f"wrote {key}")
        scope.journal.change("memory:dest", "upsert", key=key)

    def rollback(self, item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        self.undone.append([entry.get("key") for entry in item.journal])
        for entry in reversed(item.journal):
            self.dest.pop(entry["key"], None)

    def config(self, store_url: str, tmp_path: Path, version: int) -> migrate.Config:
        source = migrate.MemorySource([{"id": "a", "v": version}, {"id": "b", "v": 0}])
        return migrate.Config(
            [migrate.Migration("p", source, self.process, rollback=self.rollback)],
            store=store_url,
            base_dir=tmp_path,
        )


def _journal(config: migrate.Config) -> list[Any]:
    with config.using_store(read_only=True) as store:
        state = store.item("p", "a")
        assert state is not None
        return list(state.journal)


@pytest.mark.parametrize("behaviour", ["fail", "skip", "interrupt"])
def test_a_later_run_that_does_not_write_keeps_the_first_runs_change(
    tmp_path: Path, store_url: str, behaviour: str
) -> None:
    world = _World()
    assert "succeeded" == migrate.run(world.config(store_url, tmp_path, 1)).status
    world.behaviour = behaviour
    config = world.config(store_url, tmp_path, 2)
    if behaviour == "interrupt":
        with pytest.raises(KeyboardInterrupt):
            migrate.run(config, AGAIN)
    else:
        assert "failed" if behaviour == "fail" else "succeeded" == migrate.run(config, AGAIN).status
    # The first run's change is kept; its diagnostic (about that run only) is not.
    assert [
        {"kind": "change", "destination": "memory:dest", "operation": "upsert", "key": "a"}
    ] == [entry for entry in _journal(config) if entry["kind"] == "change"]
    assert 1 == sum(entry["kind"] == "change" for entry in _journal(config))
    assert "succeeded" == migrate.rollback(config).status
    assert {} == world.dest
    assert sorted([["a"], ["b"]]) == sorted(world.undone)


def test_a_later_run_writing_another_key_leaves_both_to_undo_newest_first(
    tmp_path: Path, store_url: str
) -> None:
    world = _World()
    world.behaviour = "rekey"
    assert "succeeded" == migrate.run(world.config(store_url, tmp_path, 1)).status
    config = world.config(store_url, tmp_path, 2)
    assert "succeeded" == migrate.run(config, AGAIN).status
    assert {"a-1", "a-2", "b-0"} == set(world.dest)
    changes = [entry["key"] for entry in _journal(config) if entry["kind"] == "change"]
    assert ["a-1", "a-2"] == changes
    assert "succeeded" == migrate.rollback(config).status
    assert {} == world.dest


def test_repeated_updates_of_the_same_key_keep_one_entry(tmp_path: Path, store_url: str) -> None:
    world = _World()
    config = world.config(store_url, tmp_path, 0)
    for version in range(1, 6):
        config = world.config(store_url, tmp_path, version)
        assert "succeeded" == migrate.run(config, AGAIN).status
    changes = [entry for entry in _journal(config) if entry["kind"] == "change"]
    assert [("a", "upsert")] == [(entry["key"], entry["operation"]) for entry in changes]
    # This run's diagnostic stays with its change.
    assert ["wrote a"] == [e["message"] for e in _journal(config) if e["kind"] == "diagnostic"]


def test_composite_keys_compare_by_value(tmp_path: Path, store_url: str) -> None:
    """Composite keys (lists, objects) compare by value: a later run's same composite key
    supersedes, another one does not."""
    rows: list[dict[str, Any]] = [{"id": "a"}]
    keys: list[Any] = [[1, "x"], {"k": 1, "j": [2]}]

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        for key in keys:
            scope.journal.change("memory:dest", "upsert", key=key)

    def config() -> migrate.Config:
        return migrate.Config(
            [
                migrate.Migration(
                    "p", migrate.MemorySource(rows), process, rollback=lambda i, s: None
                )
            ],
            store=store_url,
            base_dir=tmp_path,
        )

    assert "succeeded" == migrate.run(config()).status
    rows[0] = {"id": "a", "v": 2}
    keys[:] = [{"j": [2], "k": 1}, [1, "y"]]  # the same object key (its order differs), a new list
    assert "succeeded" == migrate.run(config(), AGAIN).status
    changes = [entry["key"] for entry in _journal(config()) if entry["kind"] == "change"]
    assert [[1, "x"], {"j": [2], "k": 1}, [1, "y"]] == changes
