"""
``--rollback-orphans`` over several pages of orphans (`migrate._orphans.PAGE` made small), in
one process and as a durable run whose worker is killed (SIGKILL) in the middle of a page: the
next worker recovers the run, the pages already checkpointed are not rolled back again, and no
undo is done twice (each takes 10 ms, so it is committed at its end:
`migrate._rollback.BATCH_SECONDS`). On SQLite and PostgreSQL migrate stores.
"""

from __future__ import annotations

import asyncio
import csv
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import migrate
from migrate import _orphans, durable
from tests.migrate.cli_support import migrate_command
from tests.migrate.rollback_support import RollbackProject, make_rollback_project
from tests.postgres_server import PostgresServer

PEOPLE = 40
KEPT = 5
PAGE = 7
#: An orphan of the third page. The store selects a page in the order of its identity index
#: (text: 10..19, 20..29, ...), so the third page is 24..30 and two of its undos come first.
BLOCK_AT = "26"
LEASE_MS = 800

DURABLE_CONFIG = """

import os

import migrate._orphans
import migrate.durable

migrate._orphans.PAGE = int(os.environ.get("ORPHAN_PAGE", migrate._orphans.PAGE))
engine = migrate.durable.engine(config, lease_ms=LEASE)
"""


def _keep_only(project: RollbackProject, count: int) -> None:
    """The source now holds people 1..count: the other stored states are orphans."""
    with (project.root / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "name"])
        writer.writerows([i, f"name {i}"] for i in range(1, count + 1))


def _orphan_checkpoints(config: migrate.Config, durable_run_id: str) -> list[tuple[Any, ...]]:
    async def read() -> list[Any]:
        async with durable.engine(config) as engine:
            return list(await engine.checkpoints(durable_run_id))

    return [
        (c.output["n"], c.output["done"], c.output.get("rolled_back"), c.attempts)
        for c in asyncio.run(read())
        if c.name == "migrate.orphans" and c.output["definition"] == "people"
    ]


@pytest.mark.parametrize("form", ["plain", "durable"])
def test_orphans_over_several_pages_are_each_rolled_back_once(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    monkeypatch.setattr(_orphans, "PAGE", PAGE)
    project = make_rollback_project(tmp_path, store_url, people=PEOPLE, window=6)
    assert 0 == project.main("run", "people").returncode
    _keep_only(project, KEPT)
    config = migrate.load_config(project.config)
    options = migrate.RunOptions(rollback_orphans=True)
    summary = (durable.run if form == "durable" else migrate.run)(config, options)

    assert "succeeded" == summary.status, summary
    assert PEOPLE - KEPT == summary.definitions["people"].orphans_rolled_back
    assert Counter(str(i) for i in range(KEPT + 1, PEOPLE + 1)) == project.call_counts("people")
    assert [str(i) for i in range(1, KEPT + 1)] == sorted(project.states("people"), key=int)
    assert list(range(1, KEPT + 1)) == project.dest_ids("people")
    if form == "durable":
        with config.using_store(read_only=True) as store:
            (record, *_) = store.runs(limit=1)
        assert record.durable_run_id is not None
        # 35 orphans, 7 a page: five full pages, then one that finds none left.
        pages = _orphan_checkpoints(config, record.durable_run_id)
        assert [(n, False, PAGE, 1) for n in range(5)] + [(5, True, None, 1)] == pages


def _drop_durable_schema(request: pytest.FixtureRequest) -> None:
    # The database's effects_durable schema is shared by every test's durable runs.
    server: PostgresServer = request.getfixturevalue("postgres_server")
    with psycopg.connect(server.dsn(), autocommit=True) as db:
        db.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier("effects_durable"))
        )


def _wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"worker ended first: {process.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {path.name}")
        time.sleep(0.01)


@pytest.mark.timeout(180)
def test_a_worker_killed_mid_page_is_recovered_with_no_undo_done_twice(
    tmp_path: Path, store_url: str, request: pytest.FixtureRequest
) -> None:
    if store_url.startswith("postgresql"):
        _drop_durable_schema(request)
    project = make_rollback_project(tmp_path, store_url, people=PEOPLE, window=6)
    with project.config.open("a") as handle:
        handle.write(DURABLE_CONFIG.replace("LEASE", str(LEASE_MS)))
    assert 0 == project.main("run", "people").returncode
    _keep_only(project, KEPT)
    env = {**os.environ, "ORPHAN_PAGE": str(PAGE)}
    started = project.main("run", "--durable", "--detach", "--rollback-orphans")
    assert 0 == started.returncode, started.stderr
    durable_run_id = started.stdout.strip()

    (tmp_path / "block_at").write_text(BLOCK_AT)
    (tmp_path / "slow").write_text("0.01")  # each undo committed at its end
    work = [*migrate_command(), "--config", str(project.config), "work", "--poll", "20"]
    first = subprocess.Popen(work, cwd=tmp_path, env=env, text=True, stderr=subprocess.PIPE)
    try:
        _wait_for(tmp_path / "blocked", first)
        first.send_signal(signal.SIGKILL)
        first.wait()
        before = project.call_counts("people")
        survived = set(project.states("people"))
        # Pages 0 and 1 are done and checkpointed; two undos of page 2 are done, and their
        # deletes committed each at its end.
        assert 2 * PAGE + 2 == len(before)
        assert BLOCK_AT not in before
        assert BLOCK_AT in survived
        assert set() == set(before) & survived
        (tmp_path / "block_at").unlink()
        second = subprocess.Popen(work, cwd=tmp_path, env=env, text=True, stderr=subprocess.PIPE)
        try:
            config = migrate.load_config(project.config)
            deadline = time.monotonic() + 90
            while True:
                with config.using_store(read_only=True) as store:
                    (record,) = [r for r in store.runs(None) if r.durable_run_id == durable_run_id]
                if record.status in ("succeeded", "failed"):
                    break
                assert time.monotonic() < deadline, "the recovered run did not end"
                time.sleep(0.05)
        finally:
            second.send_signal(signal.SIGINT)
            second.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()

    assert ("succeeded", PEOPLE - KEPT) == (
        record.status,
        record.definitions["people"].orphans_rolled_back,
    ), record
    counts = project.call_counts("people")
    assert {str(i) for i in range(KEPT + 1, PEOPLE + 1)} == set(counts)
    assert all(count == 1 for count in counts.values()), counts
    assert [str(i) for i in range(1, KEPT + 1)] == sorted(project.states("people"), key=int)
    pages = _orphan_checkpoints(config, durable_run_id)
    # 35 orphans, 7 a page: 0 and 1 before the kill; the recovered page 2 finds the two its
    # killed attempt deleted gone, so 19 are left: pages 2, 3 and 4 (5 orphans, the last).
    assert [(2, False, PAGE), (3, False, PAGE), (4, True, None)] == [p[:3] for p in pages[2:]]
    assert [n for n, *_ in pages] == [0, 1, 2, 3, 4]
    assert all(attempts == 1 for *_, attempts in pages)
    if store_url.startswith("postgresql"):
        _drop_durable_schema(request)
