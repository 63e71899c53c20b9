"""A failed-item run over a scan source reads the source once for all targeted identities."""

from __future__ import annotations

from pathlib import Path

import migrate
from tests.migrate.helpers import config_of, noop, people, write_csv, write_jsonl


def _fail_even(item: migrate.Item, scope: migrate.Scope) -> None:
    if int(item.identity) % 2 == 0:
        raise ValueError("even")


def test_csv_failed_run_reads_the_file_once(tmp_path: Path) -> None:
    """500 failed items over several windows: the CSV file is scanned exactly once."""
    path = write_csv(tmp_path / "p.csv", people(1000))
    source = migrate.CsvSource(path, window_size=100)
    config = config_of(tmp_path, migrate.Migration("p", source, _fail_even))
    assert migrate.run(config).definitions["p"].counts.failed == 500
    assert source.scans == 0
    summary = migrate.run(config, migrate.RunOptions(failed=True))
    assert (source.scans, summary.definitions["p"].counts.failed) == (1, 500)


def test_jsonl_failed_run_reads_the_file_once(tmp_path: Path) -> None:
    """The same holds for a JSON Lines source."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": i} for i in range(1, 301)])
    source = migrate.JsonlSource(path, window_size=50)
    config = config_of(tmp_path, migrate.Migration("p", source, _fail_even))
    migrate.run(config)
    migrate.run(config, migrate.RunOptions(failed=True))
    assert source.scans == 1


def test_memory_scan_source_id_run_reads_once(tmp_path: Path) -> None:
    """An --id run over a scan source also reads it once for all identities."""
    source = migrate.MemorySource(people(100), lookup="scan", window_size=10)
    config = config_of(tmp_path, migrate.Migration("p", source, noop))
    migrate.run(config, migrate.RunOptions(ids=[str(i) for i in range(1, 60)]))
    assert source.scans == 1
