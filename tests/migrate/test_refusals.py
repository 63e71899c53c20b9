"""migrate.refusals: what a run would refuse, asked without running or writing anything."""

from __future__ import annotations

import hashlib
from pathlib import Path

import migrate
from tests.migrate.helpers import config_of, noop, people


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_refusals_predict_what_the_run_refuses_and_write_nothing(tmp_path: Path) -> None:
    """A failing preflight and a changed contract are predicted; the store is not touched."""
    authors = migrate.Migration("authors", migrate.MemorySource(people(2)), noop)
    books = migrate.Migration("books", migrate.MemorySource(people(2)), noop, requires=["authors"])
    config = config_of(tmp_path, authors, books)
    only_books = migrate.RunOptions(definitions=("books",))
    assert [migrate.PreflightRefused] == [type(r) for r in migrate.refusals(config, only_books)]
    assert not (tmp_path / "state.db").exists()  # asking created nothing
    migrate.run(config, migrate.RunOptions(definitions=("authors",)))
    changed = config_of(
        tmp_path,
        migrate.Migration("authors", migrate.MemorySource(people(2), identity="name"), noop),
        books,
    )
    before = _digest(tmp_path / "state.db")
    found = migrate.refusals(changed, migrate.RunOptions(definitions=("authors", "books")))
    assert [migrate.ContractChanged] == [type(r) for r in found]
    assert () == migrate.refusals(config)
    assert before == _digest(tmp_path / "state.db")
    assert 1 == len(migrate.runs(config))


def test_refusals_name_a_lock_a_live_run_holds(tmp_path: Path) -> None:
    """While this process's run holds a definition, refusals() names the lock."""
    seen: list[tuple[migrate.RefusedError, ...]] = []
    box: list[migrate.Config] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append(migrate.refusals(box[0]))

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    box.append(config)
    summary = migrate.run(config)
    ((held,),) = seen
    assert isinstance(held, migrate.LockHeld)
    assert summary.run_id == held.lock.run_id
