"""Item failures and skips are stored, never printed: no traceback reaches the terminal."""

from __future__ import annotations

import gc
import logging
import subprocess
from pathlib import Path

import pytest

import migrate
from tests.migrate.cli_support import migrate_command
from tests.migrate.helpers import config_of, people

CONFIG = """
import time

import migrate

TIMEOUT = SECONDS


def process(item, scope):
    number = int(item.identity)
    if number % 3 == 0:
        raise ValueError(f"bad record {number}")
    if number % 3 == 1:
        raise migrate.Skip(f"not wanted: {number}")
    if number == 8 and TIMEOUT:
        time.sleep(3)  # past the timeout: the item fails, its thread is left to finish
        raise ValueError("too late to matter")


config = migrate.Config(
    [
        migrate.Migration(
            "p",
            migrate.MemorySource([{"id": i} for i in range(1, 13)], window_size=4),
            process,
            timeout=TIMEOUT,
        )
    ],
    store="sqlite:///state.db",
)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("concurrency", "timeout"), [("4", "None"), ("1", "0.5"), ("4", "0.5")])
def test_the_cli_prints_no_traceback_for_failed_and_skipped_items(
    tmp_path: Path, concurrency: str, timeout: str
) -> None:
    """Plain processes in worker threads (-c N or a timeout): stderr holds no traceback."""
    (tmp_path / "migrate_config.py").write_text(CONFIG.replace("SECONDS", timeout))
    done = subprocess.run(
        [*migrate_command(), "run", "-c", concurrency, "--progress", "none"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert 1 == done.returncode, done.stdout + done.stderr
    printed = [
        line
        for line in done.stderr.splitlines()
        if "never retrieved" in line or "Traceback" in line
    ]
    assert [] == printed, done.stderr
    expected_failed = 4 + (1 if timeout != "None" else 0)
    expected_skipped = 4
    status = migrate.status(migrate.load_config(tmp_path / "migrate_config.py"))
    counts = status.definitions["p"]
    assert (expected_failed, expected_skipped) == (counts.failed, counts.skipped)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_no_exception_is_left_unretrieved_in_process(
    tmp_path: Path, concurrency: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A run with failing and skipping items leaves asyncio nothing to report, even after gc."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if int(item.identity) % 2:
            raise ValueError(f"bad record {item.identity}")
        raise migrate.Skip("even")

    config = config_of(
        tmp_path,
        migrate.Migration(
            "p",
            migrate.MemorySource(people(20), window_size=5),
            process,
            concurrency=concurrency,
            timeout=30.0,
        ),
    )
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        summary = migrate.run(config)
        gc.collect()
    assert migrate.Counts(skipped=10, failed=10) == summary.definitions["p"].counts
    assert [] == [record.getMessage() for record in caplog.records if record.name == "asyncio"]
