"""Identities: null, empty, missing and odd-typed values in every source; one stable form."""

from __future__ import annotations

import datetime
import decimal
import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import migrate
from tests.migrate.helpers import config_of, recorder, states, write_csv, write_jsonl


def _failure(config: migrate.Config, definition: str, identity: str) -> migrate.FailureRecord:
    (found,) = [f for f in migrate.failures(config, definition) if f.identity == identity]
    return found


def test_csv_row_with_an_empty_identity_is_a_failed_item_naming_its_line(
    tmp_path: Path, store_url: str
) -> None:
    """An empty identity cell fails that row under <line N>; the rows after it are migrated."""
    path = write_csv(
        tmp_path / "p.csv", [{"id": "1", "n": "a"}, {"id": "", "n": "b"}, {"id": "3", "n": "c"}]
    )
    seen: list[str] = []
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder(seen)), store=store_url
    )
    summary = migrate.run(config)
    assert (["1", "3"], {"1": "migrated", "3": "migrated", "<line 3>": "failed"}) == (
        seen,
        states(config, "p"),
    )
    assert (2, 1, "failed") == (
        summary.definitions["p"].counts.migrated,
        summary.definitions["p"].counts.failed,
        summary.status,
    )
    failure = _failure(config, "p", "<line 3>")
    assert ("source", "MissingIdentity", "line 3") == (
        failure.error.kind,
        failure.error.type,
        failure.position,
    )
    assert f"csv:{path} line 3 has an identity field 'id' that is empty" in failure.error.message


@pytest.mark.parametrize(
    ("record", "kind", "said"),
    [
        ({"id": None, "n": 1}, "MissingIdentity", "that is null"),
        ({"n": 1}, "MissingIdentity", "has no identity field 'id' (its fields: n)"),
        ({"id": "", "n": 1}, "MissingIdentity", "that is empty"),
        ({"id": [1], "n": 1}, "BadIdentity", "is a list"),
        ({"id": True, "n": 1}, "BadIdentity", "is a bool"),
        ({"id": {"a": 1}, "n": 1}, "BadIdentity", "is a dict"),
    ],
)
def test_jsonl_record_without_a_usable_identity_is_a_failed_item(
    tmp_path: Path, record: dict[str, Any], kind: str, said: str, store_url: str
) -> None:
    """A JSONL object whose identity is null, absent, empty or of a bad type fails alone."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": 1}, record, {"id": 3}])
    seen: list[str] = []
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.JsonlSource(path), recorder(seen)), store=store_url
    )
    migrate.run(config)
    failure = _failure(config, "p", "<line 2>")
    assert (["1", "3"], kind) == (seen, failure.error.type)
    assert said in failure.error.message
    assert "None" not in states(config, "p")


def test_jsonl_1_and_quoted_1_are_one_identity(tmp_path: Path, store_url: str) -> None:
    """``1`` and ``"1"`` are the same identity: in one file a duplicate, across runs one state."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": 1, "n": "a"}, {"id": "1", "n": "b"}])
    seen: list[str] = []
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.JsonlSource(path), recorder(seen)), store=store_url
    )
    migrate.run(config)
    failure = _failure(config, "p", "1")
    assert ([], "DuplicateIdentity", ["line 1", "line 2"]) == (
        seen,
        failure.error.type,
        failure.error.details["positions"],
    )
    write_jsonl(path, [{"id": 1, "n": "a"}])
    migrate.run(config)
    write_jsonl(path, [{"id": "1", "n": "a"}])
    migrate.run(config)
    assert (["1", "1"], {"1": "migrated"}) == (seen, states(config, "p"))


def _sql_table(path: Path, ids: Sequence[object], declared: str = "INTEGER") -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(f"CREATE TABLE t (id {declared}, n TEXT)")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(v, f"n{k}") for k, v in enumerate(ids)])
    db.close()


def test_sql_null_identities_fail_alone_and_never_end_discovery(
    tmp_path: Path, store_url: str
) -> None:
    """Rows with a NULL id are failed items; every row with an id, before and after, is read."""
    path = tmp_path / "src.db"
    _sql_table(path, [1, None, 2, 3, None, 4, 5])
    seen: list[str] = []
    source = migrate.SqlSource(lambda: sqlite3.connect(path), "t", window_size=2)
    config = config_of(tmp_path, migrate.Migration("t", source, recorder(seen)), store=store_url)
    summary = migrate.run(config)
    assert (["1", "2", "3", "4", "5"], 5, 2) == (
        seen,
        summary.definitions["t"].counts.migrated,
        summary.definitions["t"].counts.failed,
    )
    assert {"<row 1 with a null id>", "<row 2 with a null id>"} == {
        f.identity for f in migrate.failures(config, "t")
    }
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO t VALUES (6, 'late')")
    migrate.run(config)
    assert ["1", "2", "3", "4", "5", "6"] == seen


def test_sql_window_ending_on_a_null_id_reads_on(tmp_path: Path, store_url: str) -> None:
    """A window made only of NULL-id rows does not stop the run: the keyed rows follow."""
    path = tmp_path / "src.db"
    _sql_table(path, [None, None, 7, 8])
    seen: list[str] = []
    source = migrate.SqlSource(lambda: sqlite3.connect(path), "t", window_size=2)
    config = config_of(tmp_path, migrate.Migration("t", source, recorder(seen)), store=store_url)
    migrate.run(config)
    assert ["7", "8"] == seen


def test_memory_identities_that_cannot_be_used_fail_by_index() -> None:
    """A memory record with a missing, null or bool identity fails naming its index."""
    source = migrate.MemorySource(
        [{"id": 1}, {"id": None}, {"name": "x"}, {"id": False}, {"id": 2.0}]
    )
    window = source.read_window(None)
    assert (["1", "2"], ["<index 1>", "<index 2>", "<index 3>"]) == (
        [i.identity for i in window.items],
        [f.key for f in window.faults],
    )


class _Typed:
    """A DB-API connection over sqlite3 whose key column comes back as another Python type."""

    def __init__(self, path: Path, convert: Callable[[Any], Any]) -> None:
        self.db = sqlite3.connect(path)
        self.convert = convert

    def cursor(self) -> _TypedCursor:
        return _TypedCursor(self.db.cursor(), self.convert)

    def commit(self) -> None:
        self.db.commit()

    def rollback(self) -> None:
        self.db.rollback()

    def close(self) -> None:
        self.db.close()


def _stored(value: object) -> object:
    if isinstance(value, int):
        return value
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return str(value)


class _TypedCursor:
    def __init__(self, cursor: sqlite3.Cursor, convert: Callable[[Any], Any]) -> None:
        self.cursor = cursor
        self.convert = convert

    @property
    def description(self) -> Any:
        return self.cursor.description

    def execute(self, sql: str, params: Any = ()) -> None:
        # Parameters of the driver's own types are stored as text, like the rows were.
        self.cursor.execute(sql, tuple(_stored(v) for v in params))

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [(self.convert(row[0]), *row[1:]) for row in self.cursor.fetchall()]


KEYS: list[tuple[str, Callable[[Any], Any], list[object], Callable[[str], Any]]] = [
    ("uuid", uuid.UUID, [str(uuid.UUID(int=i)) for i in range(1, 6)], uuid.UUID),
    ("decimal", decimal.Decimal, ["1.5", "2.5", "3.5", "4.5", "5.5"], decimal.Decimal),
    (
        "datetime",
        datetime.datetime.fromisoformat,
        [f"2024-01-0{i}T10:00:00" for i in range(1, 6)],
        datetime.datetime.fromisoformat,
    ),
]


@pytest.mark.parametrize(("name", "convert", "keys", "back"), KEYS, ids=[k[0] for k in KEYS])
def test_driver_key_types_give_stable_identities_and_cursors(
    tmp_path: Path,
    name: str,
    convert: Callable[[Any], Any],
    keys: list[object],
    back: Callable[[str], Any],
) -> None:
    """UUID, Decimal and datetime keys give their documented identity; the cursor resumes."""
    path = tmp_path / "src.db"
    _sql_table(path, keys, "TEXT")
    seen: list[str] = []
    source = migrate.SqlSource(
        lambda: _Typed(path, convert), "t", window_size=2, identity_type=back
    )
    expected = [migrate.identity_text(convert(k)) for k in keys]
    config = config_of(
        tmp_path,
        migrate.Migration("t", source, recorder(seen, fail={expected[1]})),
    )
    migrate.run(config)
    with config.open_store() as store:
        saved = store.cursor("t")
    assert expected == seen
    assert json.loads(json.dumps(saved)) == saved
    migrate.run(config, migrate.RunOptions(failed=True))
    assert [*expected, expected[1]] == seen


def test_blob_keys_are_hex_and_found_again(tmp_path: Path, store_url: str) -> None:
    """BLOB keys become lowercase hex identities; bytes.fromhex looks them up again."""
    path = tmp_path / "src.db"
    _sql_table(path, [b"\x00\x01", b"\x00\x02", b"\xff"], "BLOB")
    seen: list[str] = []
    source = migrate.SqlSource(
        lambda: sqlite3.connect(path), "t", window_size=2, identity_type=bytes.fromhex
    )
    config = config_of(
        tmp_path, migrate.Migration("t", source, recorder(seen, fail={"0002"})), store=store_url
    )
    migrate.run(config)
    migrate.run(config, migrate.RunOptions(failed=True))
    assert ["0001", "0002", "ff", "0002"] == seen


@given(st.integers())
def test_integers_and_their_text_are_one_identity(number: int) -> None:
    """An int, its decimal text, an integral float (when exact) and a Decimal agree."""
    text = migrate.identity_text(number)
    assert (
        text == migrate.identity_text(str(number)) == migrate.identity_text(decimal.Decimal(number))
    )
    if abs(number) < 2**53:
        assert text == migrate.identity_text(float(number))


@given(st.uuids())
def test_uuids_are_canonical(value: uuid.UUID) -> None:
    """A UUID's identity is its canonical form, whatever case its text had."""
    assert str(value) == migrate.identity_text(value) == str(uuid.UUID(str(value).upper()))


@given(st.binary(min_size=1))
def test_bytes_identities_round_trip_through_hex(value: bytes) -> None:
    """bytes.fromhex gives back the bytes a hex identity came from."""
    assert value == bytes.fromhex(migrate.identity_text(value))


def test_a_fixed_record_clears_its_positional_failure(tmp_path: Path, store_url: str) -> None:
    """--failed reads the source for <line N>: still broken it stays, fixed it is forgotten."""
    path = write_csv(tmp_path / "p.csv", [{"id": "1"}, {"id": ""}, {"id": "3"}])
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder([])), store=store_url
    )
    migrate.run(config)
    assert "failed" == states(config, "p")["<line 3>"]
    still = migrate.run(config, migrate.RunOptions(failed=True))
    assert (1, "failed") == (still.definitions["p"].counts.failed, states(config, "p")["<line 3>"])
    write_csv(path, [{"id": "1"}, {"id": "2"}, {"id": "3"}])
    fixed = migrate.run(config, migrate.RunOptions(failed=True))
    assert ("succeeded", "<line 3>" not in states(config, "p")) == (fixed.status, True)
    assert any("no longer in csv:" in note and "forgotten" in note for note in fixed.notes)
    migrate.run(config)  # the file changed: read again from the top, 2 migrates
    assert {"1": "migrated", "2": "migrated", "3": "migrated"} == states(config, "p")


def test_a_normal_pass_from_the_top_clears_positional_failures_it_no_longer_meets(
    tmp_path: Path,
    store_url: str,
) -> None:
    """A normal run reading the whole (changed) file forgets <line N> it does not meet again."""
    path = write_csv(tmp_path / "p.csv", [{"id": "1"}, {"id": ""}, {"id": "3"}])
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder([])), store=store_url
    )
    migrate.run(config)
    write_csv(path, [{"id": "1"}, {"id": "2"}, {"id": "3"}])
    summary = migrate.run(config)
    assert ("succeeded", {"1": "migrated", "2": "migrated", "3": "migrated"}) == (
        summary.status,
        states(config, "p"),
    )


def test_a_sql_row_given_an_id_clears_its_null_failure_with_failed(
    tmp_path: Path, store_url: str
) -> None:
    """A NULL-id row fixed in the table migrates under its id; --failed forgets its old key."""
    path = tmp_path / "src.db"
    _sql_table(path, [1, None, 2])
    seen: list[str] = []
    source = migrate.SqlSource(lambda: sqlite3.connect(path), "t")
    config = config_of(tmp_path, migrate.Migration("t", source, recorder(seen)), store=store_url)
    migrate.run(config)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE t SET id = 99 WHERE id IS NULL")
    db.close()
    migrate.run(config)
    assert "failed" == states(config, "t")["<row 1 with a null id>"]
    summary = migrate.run(config, migrate.RunOptions(failed=True))
    assert ("succeeded", ["1", "2", "99"]) == (summary.status, seen)
    assert {"1": "migrated", "2": "migrated", "99": "migrated"} == states(config, "t")


json_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    st.lists(st.integers(), max_size=2),
)


@given(json_values)
def test_a_file_source_gives_every_value_the_identity_identity_text_gives(value: Any) -> None:
    """The JSONL fast path for string identities agrees with identity_text on every value."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.jsonl"
        path.write_text(json.dumps({"id": "first"}) + "\n" + json.dumps({"id": value}) + "\n")
        window = migrate.JsonlSource(path).read_window(None)
    try:
        expected = migrate.identity_text(value)
    except ValueError:
        assert (["first"], ["<line 2>"]) == (
            [item.identity for item in window.items],
            [f.key for f in window.faults],
        )
    else:
        # Two records holding "first" are a duplicate: the window has no item, one fault for it.
        identities = [] if expected == "first" else ["first", expected]
        assert identities == [item.identity for item in window.items]
