"""--skipped re-evaluates skipped items; --id targets identities whatever their state."""

from __future__ import annotations

from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people, recorder, states


def test_skipped_run_reevaluates_only_skipped_items(tmp_path: Path, store_url: str) -> None:
    """--skipped processes the skipped items again and nothing else."""
    skip = {"2", "4"}
    seen: list[str] = []
    source = migrate.MemorySource(people(5))
    config = config_of(
        tmp_path, migrate.Migration("p", source, recorder(seen, skip=skip)), store=store_url
    )
    migrate.run(config)
    skip.discard("2")
    seen.clear()
    summary = migrate.run(config, migrate.RunOptions(skipped=True))
    assert seen == ["2", "4"]
    assert migrate.Counts(migrated=1, skipped=1) == summary.definitions["p"].counts
    assert states(config, "p")["2"] == "migrated"


def test_normal_run_does_not_reevaluate_unchanged_skipped_items(
    tmp_path: Path, store_url: str
) -> None:
    """A normal run meeting a skipped item at the same version counts it unchanged."""
    seen: list[str] = []
    source = migrate.MemorySource(people(3), window_size=10)
    config = config_of(
        tmp_path, migrate.Migration("p", source, recorder(seen, skip={"1"})), store=store_url
    )
    migrate.run(config)
    with config.open_store() as store:
        store.reset_cursor("p")
    seen.clear()
    summary = migrate.run(config)
    assert (seen, summary.definitions["p"].counts.unchanged) == ([], 3)


def test_id_run_processes_the_given_identities_whatever_their_state(
    tmp_path: Path, store_url: str
) -> None:
    """--id X --id Y reprocesses exactly those identities, even when migrated."""
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(5)), recorder(seen)),
        store=store_url,
    )
    migrate.run(config)
    seen.clear()
    summary = migrate.run(config, migrate.RunOptions(ids=("4", "1", "4")))
    assert seen == ["4", "1"]
    assert migrate.Counts(migrated=2) == summary.definitions["p"].counts


def test_id_run_for_an_unknown_identity_reports_it_and_stores_nothing(
    tmp_path: Path, store_url: str
) -> None:
    """An --id the source does not have is reported in the notes; no state is stored for it."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), noop), store=store_url
    )
    summary = migrate.run(config, migrate.RunOptions(definitions=("p",), ids=("77", "1")))
    assert ({"1": "migrated"}, "succeeded") == (states(config, "p"), summary.status)
    (note,) = summary.notes
    assert "1 identity not in memory:2 items ('77'): nothing was stored for them" in note


def test_id_run_for_a_stored_identity_gone_from_the_source_keeps_its_state(
    tmp_path: Path,
    store_url: str,
) -> None:
    """An --id whose record left the source keeps its stored state and offers forget."""
    first = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), noop), store=store_url
    )
    migrate.run(first)
    later = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), noop), store=store_url
    )
    summary = migrate.run(later, migrate.RunOptions(definitions=("p",), ids=("3",)))
    assert "migrated" == states(later, "p")["3"]
    assert "to drop them: migrate forget p --id 3" in summary.notes[0]


def test_forget_removes_states_no_run_can_clear(tmp_path: Path, store_url: str) -> None:
    """forget() drops the named states; a later run treats them as never seen."""
    seen: list[str] = []
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(3)), recorder(seen, fail={"2"})),
        store=store_url,
    )
    migrate.run(config)
    removed = migrate.forget(config, "p", ["2", "9"])
    assert (["2"], {"1": "migrated", "3": "migrated"}) == (
        [s.identity for s in removed],
        states(config, "p"),
    )
    with pytest.raises(migrate.UsageError, match="name the identities to forget"):
        migrate.forget(config, "p", [])


def test_forget_is_refused_while_a_run_holds_the_definition(tmp_path: Path, store_url: str) -> None:
    """forget takes the definition's lock: a live run holding it makes it LockHeld."""
    refused: list[migrate.LockHeld] = []
    box: list[migrate.Config] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        with pytest.raises(migrate.LockHeld) as caught:
            migrate.forget(box[0], "p", ["1"])
        refused.append(caught.value)

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process), store=store_url
    )
    box.append(config)
    migrate.run(config)
    assert 1 == len(refused)


def test_id_without_a_definition_is_refused_when_there_are_several(
    tmp_path: Path, store_url: str
) -> None:
    """--id with no definition named (or --all) is refused unless the config has just one."""
    config = config_of(
        tmp_path,
        migrate.Migration("a", migrate.MemorySource(people(1)), noop),
        migrate.Migration("b", migrate.MemorySource(people(1)), noop),
        store=store_url,
    )
    for options in (migrate.RunOptions(ids=("1",)), migrate.RunOptions(all=True, ids=("1",))):
        with pytest.raises(migrate.UsageError, match="--id needs the definition"):
            migrate.run(config, options)
    assert {} == states(config, "a")
    single = config_of(
        tmp_path, migrate.Migration("a", migrate.MemorySource(people(1)), noop), store=store_url
    )
    assert ("a",) == migrate.plan(single, migrate.RunOptions(ids=("1",))).definition_ids


def test_id_run_plan_shows_the_identities(tmp_path: Path, store_url: str) -> None:
    """The printed plan shows the mode and the targeted identities."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop), store=store_url
    )
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
    tmp_path: Path, options: migrate.RunOptions, message: str, store_url: str
) -> None:
    """Only one of failed / skipped / ids / update may be given."""
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource([]), noop), store=store_url
    )
    with pytest.raises(migrate.UsageError, match=message):
        migrate.plan(config, options)
