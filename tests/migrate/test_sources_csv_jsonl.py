"""CSV and JSON Lines sources: windows, cursors, fingerprints, lookups."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import people, write_csv, write_jsonl


def _read_all(source: migrate.Source) -> tuple[list[str], list[migrate.Cursor]]:
    cursor: migrate.Cursor = None
    identities: list[str] = []
    cursors: list[migrate.Cursor] = []
    while True:
        window = source.read(cursor).run_or_raise()
        identities += [item.identity for item in window.items]
        cursors.append(window.next_cursor)
        cursor = window.next_cursor
        if window.done:
            return identities, cursors


def test_csv_reads_every_row_in_order_in_windows(tmp_path: Path) -> None:
    """A CSV source yields every row, in file order, window_size rows per window."""
    path = write_csv(tmp_path / "p.csv", people(10))
    source = migrate.CsvSource(path, window_size=3)
    identities, cursors = _read_all(source)
    assert [str(i) for i in range(1, 11)] == identities
    assert len(cursors) == 4


def test_csv_items_carry_data_and_version_field(tmp_path: Path) -> None:
    """Each item has identity, the row as data, and the version column's value."""
    path = write_csv(tmp_path / "p.csv", [{"key": "a", "name": "Ada", "rev": "7"}])
    source = migrate.CsvSource(path, identity="key", version="rev")
    window = source.read(None).run_or_raise()
    expected = migrate.Item("a", {"key": "a", "name": "Ada", "rev": "7"}, "7", "line 2")
    assert [expected] == list(window.items)


def test_csv_without_version_field_versions_by_content(tmp_path: Path) -> None:
    """Without a version column, equal rows have equal versions and changed rows differ."""
    path = write_csv(tmp_path / "p.csv", [{"id": "1", "n": "x"}, {"id": "2", "n": "y"}])
    first = migrate.CsvSource(path).read(None).run_or_raise().items
    write_csv(tmp_path / "p.csv", [{"id": "1", "n": "x"}, {"id": "2", "n": "CHANGED"}])
    second = migrate.CsvSource(path).read(None).run_or_raise().items
    assert first[0].version == second[0].version
    assert first[1].version != second[1].version


def test_csv_cursor_resumes_after_the_last_row(tmp_path: Path) -> None:
    """Reading from a saved cursor continues with the next row, also with quoted newlines."""
    rows = [{"id": str(i), "text": f"line one\nline two {i}"} for i in range(1, 6)]
    path = write_csv(tmp_path / "p.csv", rows)
    source = migrate.CsvSource(path, window_size=2)
    first = source.read(None).run_or_raise()
    fresh = migrate.CsvSource(path, window_size=2)
    second = fresh.read(first.next_cursor).run_or_raise()
    assert [item.identity for item in second.items] == ["3", "4"]
    assert second.items[0].data["text"] == "line one\nline two 3"


def test_csv_cursor_is_json_plain_data(tmp_path: Path) -> None:
    """The cursor survives a JSON round trip (the store saves it as JSON)."""
    path = write_csv(tmp_path / "p.csv", people(4))
    source = migrate.CsvSource(path, window_size=2)
    cursor = json.loads(json.dumps(source.read(None).run_or_raise().next_cursor))
    assert [item.identity for item in source.read(cursor).run_or_raise().items] == ["3", "4"]


def test_changed_file_restarts_from_the_top(tmp_path: Path) -> None:
    """When the file changes, a saved cursor is ignored and reading restarts at the first row."""
    path = write_csv(tmp_path / "p.csv", people(4))
    source = migrate.CsvSource(path, window_size=2)
    cursor = source.read(None).run_or_raise().next_cursor
    write_csv(tmp_path / "p.csv", people(5))
    window = source.read(cursor).run_or_raise()
    assert [item.identity for item in window.items] == ["1", "2"]


def test_touched_file_with_same_size_restarts_from_the_top(tmp_path: Path) -> None:
    """A file rewritten with the same size but a new modification time restarts discovery."""
    path = write_csv(tmp_path / "p.csv", people(4))
    source = migrate.CsvSource(path, window_size=2)
    cursor = source.read(None).run_or_raise().next_cursor
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    assert [i.identity for i in source.read(cursor).run_or_raise().items] == ["1", "2"]


def test_rewritten_file_with_same_size_and_time_restarts_from_the_top(tmp_path: Path) -> None:
    """New content of the same size, even with the old modification time, restarts discovery."""
    # A rewrite within one tick of a coarse file-system clock keeps the modification time, so
    # the content itself must tell the files apart; the old time is put back to make it so here.
    path = write_csv(tmp_path / "p.csv", people(4))
    source = migrate.CsvSource(path, window_size=2)
    cursor = source.read(None).run_or_raise().next_cursor
    stat = path.stat()
    write_csv(path, [{"id": str(i), "name": f"person {i}"} for i in (5, 6, 7, 8)])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (stat.st_size, stat.st_mtime_ns) == (path.stat().st_size, path.stat().st_mtime_ns)
    assert [i.identity for i in source.read(cursor).run_or_raise().items] == ["5", "6"]


def test_csv_with_bom_and_crlf(tmp_path: Path) -> None:
    """A UTF-8 byte order mark and CRLF line ends are handled."""
    path = tmp_path / "p.csv"
    path.write_bytes(b"\xef\xbb\xbfid,name\r\n1,Ada\r\n2,Alan\r\n")
    window = migrate.CsvSource(path).read(None).run_or_raise()
    assert [dict(item.data) for item in window.items] == [
        {"id": "1", "name": "Ada"},
        {"id": "2", "name": "Alan"},
    ]


def test_empty_csv_is_one_empty_done_window(tmp_path: Path) -> None:
    """A header-only CSV gives an empty window marked done."""
    path = tmp_path / "p.csv"
    path.write_text("id,name\n", encoding="utf-8")
    window = migrate.CsvSource(path).read(None).run_or_raise()
    assert (window.items, window.done) == ((), True)


def test_row_with_wrong_field_count_is_a_fault_naming_the_line(tmp_path: Path) -> None:
    """A row with more fields than the header is a fault naming its line; reading goes on."""
    path = tmp_path / "p.csv"
    path.write_text("id,name\n1,Ada\n2,Alan,extra\n3,Grace\n", encoding="utf-8")
    window = migrate.CsvSource(path).read(None).run_or_raise()
    (fault,) = window.faults
    assert (["1", "3"], "line 3", "MalformedRecord", "<line 3>") == (
        [i.identity for i in window.items],
        fault.position,
        fault.type,
        fault.key,
    )
    assert "line 3 has 3 fields, the header has 2" in fault.message


def test_missing_identity_column_is_a_source_error(tmp_path: Path) -> None:
    """Rows without the identity column fail the read, naming the field."""
    path = write_csv(tmp_path / "p.csv", [{"key": "1"}])
    failure = migrate.CsvSource(path).read(None).run().failure()
    assert "has no identity field 'id'" in str(failure)


def test_missing_file_is_a_source_error_keeping_the_cause(tmp_path: Path) -> None:
    """A missing file fails with SourceError whose cause is the OSError."""
    failure = migrate.CsvSource(tmp_path / "none.csv").read(None).run().failure()
    assert isinstance(failure, migrate.SourceError)
    assert isinstance(failure.cause, FileNotFoundError)
    assert failure.__cause__ is failure.cause


def test_csv_lookup_is_scan_and_finds_by_identity(tmp_path: Path) -> None:
    """CsvSource declares ``scan`` and finds an item by identity (None when absent)."""
    source = migrate.CsvSource(write_csv(tmp_path / "p.csv", people(5)))
    assert source.lookup_strategy == "scan"
    found = source.lookup("4").run_or_raise()
    assert found is not None
    assert found.data["name"] == "person 4"
    assert source.lookup("99").run_or_raise() is None


def test_csv_lookup_many_reads_the_file_once(tmp_path: Path) -> None:
    """lookup_many finds many identities in one pass over the file."""
    source = migrate.CsvSource(write_csv(tmp_path / "p.csv", people(50)))
    found = source.lookup_many(["3", "40", "77"]).run_or_raise()
    assert (sorted(found), source.scans) == (["3", "40"], 1)


def test_jsonl_reads_objects_in_order_skipping_blank_lines(tmp_path: Path) -> None:
    """A JSON Lines source yields each object in order; blank lines are ignored."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 1, "n": "a"}\n\n{"id": 2, "n": "b"}\n{"id": 3, "n": "c"}\n')
    source = migrate.JsonlSource(path, window_size=2)
    identities, _cursors = _read_all(source)
    assert identities == ["1", "2", "3"]


def test_jsonl_cursor_resumes_and_version_field(tmp_path: Path) -> None:
    """JSONL resumes from a cursor; the version field is used when named."""
    rows = [{"id": i, "v": i * 10} for i in range(1, 6)]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    source = migrate.JsonlSource(path, version="v", window_size=2)
    cursor = source.read(None).run_or_raise().next_cursor
    window = source.read(cursor).run_or_raise()
    assert [(i.identity, i.version) for i in window.items] == [("3", "30"), ("4", "40")]


def test_jsonl_invalid_line_is_a_fault_naming_the_line(tmp_path: Path) -> None:
    """A line that is not JSON is a fault naming the line; the lines after it are read."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 1}\n{oops\n{"id": 3}\n')
    window = migrate.JsonlSource(path).read(None).run_or_raise()
    (fault,) = window.faults
    assert (["1", "3"], "<line 2>") == ([i.identity for i in window.items], fault.key)
    assert "line 2 is not valid JSON" in fault.message


def test_jsonl_line_that_is_not_an_object_is_a_fault(tmp_path: Path) -> None:
    """A JSON value that is not an object is a fault, not an item."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": 1}\n[1, 2]\n')
    (fault,) = migrate.JsonlSource(path).read(None).run_or_raise().faults
    assert "line 2 is JSON but not an object" in fault.message


def test_jsonl_changed_file_restarts(tmp_path: Path) -> None:
    """A changed JSONL file restarts discovery from the first line."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": i} for i in range(4)])
    source = migrate.JsonlSource(path, window_size=2)
    cursor = source.read(None).run_or_raise().next_cursor
    write_jsonl(tmp_path / "p.jsonl", [{"id": i} for i in range(6)])
    assert [i.identity for i in source.read(cursor).run_or_raise().items] == ["0", "1"]


def test_window_size_below_one_is_refused(tmp_path: Path) -> None:
    """window_size must be >= 1."""
    with pytest.raises(ValueError, match="window_size must be >= 1, got 0"):
        migrate.CsvSource(tmp_path / "p.csv", window_size=0)


def test_memory_source_direct_and_scan_lookups() -> None:
    """MemorySource finds by index (direct) or by a counted pass (scan)."""
    rows = [{"id": i} for i in range(5)]
    direct = migrate.MemorySource(rows)
    scan = migrate.MemorySource(rows, lookup="scan")
    assert (direct.lookup_strategy, scan.lookup_strategy) == ("direct", "scan")
    assert sorted(scan.lookup_many(["1", "3", "9"]).run_or_raise()) == ["1", "3"]
    assert (direct.scans, scan.scans) == (0, 1)


def test_memory_source_rejects_an_unknown_lookup_strategy() -> None:
    """lookup must be 'direct' or 'scan'."""
    with pytest.raises(ValueError, match="lookup must be 'direct' or 'scan', got 'index'"):
        migrate.MemorySource([], lookup="index")  # type: ignore[arg-type]
