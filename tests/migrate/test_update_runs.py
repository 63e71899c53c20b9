"""--update marks migrated items needs-update and restarts discovery from the top."""

from __future__ import annotations

from pathlib import Path

import migrate
from tests.migrate.helpers import config_of, noop, people, recorder, states, write_csv

UPDATE = migrate.RunOptions(update=True)


def test_update_reprocesses_every_item_from_the_top(tmp_path: Path, store_url: str) -> None:
    """All migrated items are processed again, unchanged or not, in source order."""
    path = write_csv(tmp_path / "p.csv", people(5))
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path, window_size=2), recorder(seen)),
        store=store_url,
    )
    migrate.run(config)
    seen.clear()
    summary = migrate.run(config, UPDATE)
    assert seen == ["1", "2", "3", "4", "5"]
    assert migrate.Counts(migrated=5) == summary.definitions["p"].counts
    assert dict.fromkeys(seen, "migrated") == states(config, "p")


def test_items_gone_from_the_source_stay_needs_update(tmp_path: Path, store_url: str) -> None:
    """Items no longer in the source keep the needs-update state and are counted."""
    path = write_csv(tmp_path / "p.csv", people(4))
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), noop), store=store_url
    )
    migrate.run(config)
    write_csv(path, people(2))
    summary = migrate.run(config, UPDATE)
    assert migrate.Counts(migrated=2, needs_update=2) == summary.definitions["p"].counts
    assert states(config, "p") == {
        "1": "migrated",
        "2": "migrated",
        "3": "needs-update",
        "4": "needs-update",
    }
    assert migrate.status(config).definitions["p"].needs_update == 2


def test_needs_update_items_are_processed_by_a_later_normal_run(
    tmp_path: Path, store_url: str
) -> None:
    """An interrupted update leaves needs-update items a normal run picks up again."""
    path = write_csv(tmp_path / "p.csv", people(4))
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(path, window_size=2), recorder(seen)),
        store=store_url,
    )
    migrate.run(config)
    with config.open_store() as store:
        store.mark_needs_update("p", "manual")
    seen.clear()
    summary = migrate.run(config)
    assert (seen, summary.definitions["p"].counts.migrated) == (["1", "2", "3", "4"], 4)


def test_update_keeps_failed_and_skipped_states(tmp_path: Path, store_url: str) -> None:
    """Only migrated items are marked; failed and skipped ones are handled by their rules."""
    config = config_of(
        tmp_path,
        migrate.Migration(
            "p", migrate.MemorySource(people(3)), recorder([], fail={"1"}, skip={"2"})
        ),
        store=store_url,
    )
    migrate.run(config)
    with config.open_store() as store:
        marked = store.mark_needs_update("p", "manual")
    assert (marked, states(config, "p")["1"], states(config, "p")["2"]) == (1, "failed", "skipped")
