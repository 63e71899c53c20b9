"""Definition contracts: recorded at the first run; a changed one is refused unless forced."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, noop, people, recorder, states, write_csv, write_jsonl

FORCE = migrate.RunOptions(force=True)


def _csv_config(tmp_path: Path, seen: list[str], **source: str | None) -> migrate.Config:
    path = tmp_path / "p.csv"
    if not path.exists():
        write_csv(path, [{**row, "isbn": f"b{row['id']}", "rev": "1"} for row in people(4)])
    csv = migrate.CsvSource(path, **source)  # type: ignore[arg-type]
    return config_of(tmp_path, migrate.Migration("p", csv, recorder(seen)))


def _stored_contract(config: migrate.Config, definition_id: str) -> migrate.Contract | None:
    with config.open_store() as store:
        return store.contract(definition_id)


def test_first_run_records_the_source_contract(tmp_path: Path) -> None:
    """The first run stores the source's kind, identity field, version field and lookup."""
    config = _csv_config(tmp_path, [], version="rev")
    migrate.run(config)
    expected = migrate.Contract(kind="csv", identity="id", version="rev", lookup="scan")
    assert expected == _stored_contract(config, "p")
    assert expected == config.get("p").source.contract()


def test_builtin_sources_declare_their_contracts(tmp_path: Path) -> None:
    """Each built-in source names its kind, identity and version fields and lookup strategy."""
    sql = migrate.SqlSource(lambda: sqlite3.connect(":memory:"), "t", "key", "v")
    assert [
        ("csv", "id", None, "scan"),
        ("jsonl", "isbn", "rev", "scan"),
        ("sql", "key", "v", "direct"),
        ("memory", "id", None, "scan"),
    ] == [
        (c.kind, c.identity, c.version, c.lookup)
        for c in (
            migrate.CsvSource(tmp_path / "a.csv").contract(),
            migrate.JsonlSource(tmp_path / "a.jsonl", "isbn", "rev").contract(),
            sql.contract(),
            migrate.MemorySource([], lookup="scan").contract(),
        )
    ]


def test_a_custom_source_is_known_by_its_class_name() -> None:
    """A Source subclass without a kind is named by its class; subclasses keep a built-in kind."""

    class Catalogue(migrate.MemorySource):
        pass

    class Remote(migrate.Source):
        identity = "uid"

        def describe(self) -> str:
            return "remote"

        def read_window(self, cursor: migrate.Cursor) -> migrate.Window:
            return migrate.Window((), None, True)

        def find(self, identities: object) -> dict[str, migrate.Item]:
            return {}

    assert "memory" == Catalogue([]).contract().kind
    assert migrate.Contract("Remote", "uid", None, "direct") == Remote().contract()


@pytest.mark.parametrize(
    ("before", "after", "change"),
    [
        ({}, {"identity": "isbn"}, "identity field 'id' -> 'isbn'"),
        ({}, {"version": "rev"}, "version field None -> 'rev'"),
        ({"version": "rev"}, {"version": "name"}, "version field 'rev' -> 'name'"),
    ],
)
def test_changed_field_is_refused_naming_the_change(
    tmp_path: Path, before: dict[str, str], after: dict[str, str], change: str
) -> None:
    """A run after the identity or version field changed is refused: what changed, how to go on."""
    seen: list[str] = []
    migrate.run(_csv_config(tmp_path, seen, **before))
    seen.clear()
    config = _csv_config(tmp_path, seen, **{**before, **after})
    with pytest.raises(migrate.ContractChanged) as refused:
        migrate.run(config)
    message = str(refused.value)
    assert (
        f"definition 'p' changed its source contract since its states were stored: {change}."
        in (message)
    )
    assert "Its 4 stored item states" in message
    assert "migrate run p --force --update" in message
    assert {"p": (change,)} == refused.value.changes
    assert [] == seen
    (record, _first) = migrate.runs(config)
    assert ("start-failed", message) == (record.status, record.error)


def test_changed_kind_and_lookup_are_refused(tmp_path: Path, store_url: str) -> None:
    """Replacing a CSV source by a JSON Lines one, or a direct lookup by a scan, is refused."""
    rows = people(3)
    write_csv(tmp_path / "p.csv", rows)
    write_jsonl(tmp_path / "p.jsonl", rows)
    migrate.run(
        config_of(
            tmp_path,
            migrate.Migration("p", migrate.CsvSource(tmp_path / "p.csv"), noop),
            store=store_url,
        )
    )
    jsonl = config_of(
        tmp_path,
        migrate.Migration("p", migrate.JsonlSource(tmp_path / "p.jsonl"), noop),
        store=store_url,
    )
    with pytest.raises(migrate.ContractChanged, match="source kind 'csv' -> 'jsonl'"):
        migrate.run(jsonl)

    migrate.run(
        config_of(
            tmp_path, migrate.Migration("m", migrate.MemorySource(rows), noop), store=store_url
        )
    )
    scan = migrate.MemorySource(rows, lookup="scan")
    with pytest.raises(migrate.ContractChanged, match="lookup strategy 'direct' -> 'scan'"):
        migrate.run(config_of(tmp_path, migrate.Migration("m", scan, noop), store=store_url))


def test_every_mode_is_refused(tmp_path: Path) -> None:
    """Failed-item, skipped, id and update runs are refused too: identities may differ now."""
    seen: list[str] = []
    migrate.run(_csv_config(tmp_path, seen))
    seen.clear()
    config = _csv_config(tmp_path, seen, identity="isbn")
    for options in (
        migrate.RunOptions(failed=True),
        migrate.RunOptions(skipped=True),
        migrate.RunOptions(ids=("b1",)),
        migrate.RunOptions(update=True),
    ):
        with pytest.raises(migrate.ContractChanged):
            migrate.run(config, options)
    assert [] == seen


def test_moving_the_file_keeps_the_contract(tmp_path: Path, store_url: str) -> None:
    """Where the source reads from is not part of the contract: a moved file runs normally."""
    write_csv(tmp_path / "old.csv", people(3))
    migrate.run(
        config_of(
            tmp_path,
            migrate.Migration("p", migrate.CsvSource(tmp_path / "old.csv"), noop),
            store=store_url,
        )
    )
    (tmp_path / "old.csv").rename(tmp_path / "new.csv")
    moved = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(tmp_path / "new.csv"), noop),
        store=store_url,
    )
    summary = migrate.run(moved)  # same content: the saved cursor still holds
    assert ("succeeded", migrate.Counts()) == (summary.status, summary.definitions["p"].counts)


def test_force_accepts_and_records_the_new_contract(tmp_path: Path) -> None:
    """--force runs under the new contract, records it, and notes it; later runs need no force."""
    seen: list[str] = []
    migrate.run(_csv_config(tmp_path, seen))
    config = _csv_config(tmp_path, seen, identity="isbn")
    seen.clear()
    forced = migrate.run(config, FORCE)
    assert ["b1", "b2", "b3", "b4"] == seen  # discovery restarted under the new identity
    assert migrate.Contract("csv", "isbn", None, "scan") == _stored_contract(config, "p")
    assert (
        "p: accepted the changed source contract (identity field 'id' -> 'isbn'); discovery "
        "starts again from the first item; to process every migrated item again under it: "
        "migrate run p --update",
    ) == forced.notes
    assert forced.to_json()["notes"] == list(forced.notes)
    again = migrate.run(config)
    assert ("succeeded", ()) == (again.status, again.notes)


def test_force_with_update_needs_no_advice(tmp_path: Path) -> None:
    """--force --update accepts the contract and processes every migrated item again."""
    seen: list[str] = []
    migrate.run(_csv_config(tmp_path, seen))
    seen.clear()
    config = _csv_config(tmp_path, seen, version="rev")
    summary = migrate.run(config, migrate.RunOptions(force=True, update=True))
    assert (["1", "2", "3", "4"], migrate.Counts(migrated=4)) == (
        seen,
        summary.definitions["p"].counts,
    )
    assert (
        "p: accepted the changed source contract (version field None -> 'rev'); discovery "
        "starts again from the first item",
    ) == (summary.notes)


def test_force_on_a_new_kind_reads_from_the_start(tmp_path: Path, store_url: str) -> None:
    """Accepting another kind of source forgets the old cursor (it belongs to the old kind)."""
    rows = people(3)
    write_csv(tmp_path / "p.csv", rows)
    migrate.run(
        config_of(
            tmp_path,
            migrate.Migration("p", migrate.CsvSource(tmp_path / "p.csv"), noop),
            store=store_url,
        )
    )
    seen: list[str] = []
    memory = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(4)), recorder(seen)),
        store=store_url,
    )
    summary = migrate.run(memory, FORCE)
    assert migrate.Counts(migrated=4) == summary.definitions["p"].counts
    assert dict.fromkeys(["1", "2", "3", "4"], "migrated") == states(memory, "p")


def test_a_contract_without_stored_states_changes_freely(tmp_path: Path, store_url: str) -> None:
    """When nothing was stored under the old contract, the new one is recorded without refusal."""
    missing = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(tmp_path / "later.csv"), noop),
        store=store_url,
    )
    assert migrate.run(missing).definitions["p"].error is not None  # the file is not there yet
    write_csv(tmp_path / "later.csv", people(2))
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.CsvSource(tmp_path / "later.csv", "name"), noop),
        store=store_url,
    )
    summary = migrate.run(config)
    assert (migrate.Counts(migrated=2), ()) == (summary.definitions["p"].counts, summary.notes)
    assert migrate.Contract("csv", "name", None, "scan") == _stored_contract(config, "p")


def test_a_blocked_definition_records_no_contract(tmp_path: Path, store_url: str) -> None:
    """A definition not run (blocked by a failed dependency in the plan) records no contract."""
    bad = migrate.Migration("a", migrate.MemorySource(people(2)), recorder([], fail={"1"}))
    b = migrate.Migration("b", migrate.MemorySource(people(2)), noop, requires=("a",))
    config = config_of(tmp_path, bad, b, store=store_url)
    summary = migrate.run(config)
    assert "blocked" == summary.definitions["b"].status
    assert None is _stored_contract(config, "b")
    assert None is not _stored_contract(config, "a")
