"""--skipped re-evaluates skipped items; --id targets identities whatever their state."""

from __future__ import annotations

from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people, recorder, states


def test_skipped_run_reevaluates_only_skipped_items(tmp_path: Path) -> None:
    """--skipped processes the skipped items again and nothing else."""
    skip = {"2", "4"}
    seen: list[str] = []
    source = migrate.MemorySource(people(5))
    config = config_of(tmp_path, migrate.Migration("p", source, recorder(seen, skip=skip)))
    migrate.run(config)
    skip.discard("2")
    seen.clear()
    summary = migrate.run(config, migrate.RunOptions(skipped=True))
    assert seen == ["2", "4"]
    assert migrate.Counts(migrated=1, skipped=1) == summary.definitions["p"].counts
    assert states(config, "p")["2"] == "migrated"


def test_normal_run_does_not_reevaluate_unchanged_skipped_items(tmp_path: Path) -> None:
    """A normal run meeting a skipped item at the same version counts it unchanged."""
    seen: list[str] = []
    source = migrate.MemorySource(people(3), window_size=10)
    config = config_of(tmp_path, migrate.Migration("p", source, recorder(seen, skip={"1"})))
    migrate.run(config)
    with config.open_store() as store:
        store.reset_cursor("p")
    seen.clear()
    summary = migrate.run(config)
    assert (seen, summary.definitions["p"].counts.unchanged) == ([], 3)


def test_id_run_processes_the_given_identities_whatever_their_state(tmp_path: Path) -> None:
    """--id X --id Y reprocesses exactly those identities, even when migrated."""
    seen: list[str] = []
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(5)), recorder(seen))
    )
    migrate.run(config)
    seen.clear()
    summary = migrate.run(config, migrate.RunOptions(ids=("4", "1", "4")))
    assert seen == ["4", "1"]
    assert migrate.Counts(migrated=2) == summary.definitions["p"].counts


def test_id_run_for_an_unknown_identity_fails_it_saying_so(tmp_path: Path) -> None:
    """An --id that the source does not have becomes a failed state (not found)."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), noop))
    summary = migrate.run(config, migrate.RunOptions(ids=("77",)))
    (failure,) = migrate.failures(config, "p")
    assert (failure.identity, failure.error.type, summary.status) == ("77", "NotFound", "failed")


def test_id_run_plan_shows_the_identities(tmp_path: Path) -> None:
    """The printed plan shows the mode and the targeted identities."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop))
    text = str(migrate.plan(config, migrate.RunOptions(ids=("a", "b"))))
    assert "mode ids" in text
    assert "identities: a, b" in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (migrate.RunOptions(skipped=True, ids=("1",)), "--skipped and --id"),
        (migrate.RunOptions(failed=True, update=True), "--failed and --update"),
        (migrate.RunOptions(ids=("1",), update=True), "--id and --update"),
    ],
)
def test_other_mode_mixes_are_refused(
    tmp_path: Path, options: migrate.RunOptions, message: str
) -> None:
    """Only one of failed / skipped / ids / update may be given."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop))
    with pytest.raises(migrate.UsageError, match=message):
        migrate.plan(config, options)
