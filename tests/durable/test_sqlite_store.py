"""The SQLite store: WAL, a versioned schema upgraded in place, foreign files refused."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from effects.durable import Engine, SqliteStore, StoreError, WorkflowContext, step, workflow
from effects.durable._store.sqlite import _MIGRATIONS, SCHEMA_VERSION, parse_sqlite_url

pytestmark = pytest.mark.anyio


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


@workflow("simple")
async def simple(ctx: WorkflowContext, value: Any) -> Any:
    """Echo the input through a local and a dispatched step."""
    local = await ctx.local_step("local", lambda: value)
    return await ctx.step(echo, local)


def digest(path: Path) -> str:
    """The file's SHA-256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_new_store_is_wal_with_the_current_schema(tmp_path: Path) -> None:
    """A fresh file is created in WAL mode and stamped with this schema version."""
    path = tmp_path / "new.db"
    async with Engine(f"sqlite:///{path}", workflows=[simple], steps=[echo]) as engine:
        run_id = await engine.start(simple, 5)
        await engine.run_until_idle()
        assert 5 == (await engine.get_run(run_id)).output
    with sqlite3.connect(path) as db:
        assert "wal" == db.execute("PRAGMA journal_mode").fetchone()[0]
        meta = dict(db.execute("SELECT key, value FROM durable_meta").fetchall())
    assert {"schema": "effects.durable", "version": str(SCHEMA_VERSION)} == meta


async def test_synchronous_full_is_applied_from_the_url(tmp_path: Path) -> None:
    """?synchronous=full makes every commit fsync; the default is NORMAL."""
    for option, expected in (("", 1), ("?synchronous=full", 2)):
        store = SqliteStore(f"sqlite:///{tmp_path / 'sync.db'}{option}")
        await store.open()
        try:
            assert expected == store._conn.execute("PRAGMA synchronous").fetchone()[0]
        finally:
            await store.close()


async def test_an_older_schema_is_upgraded_in_place_keeping_its_runs(tmp_path: Path) -> None:
    """A version-1 store gains the version-2 columns and its runs go on."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        for statement in _MIGRATIONS[0]:
            db.execute(statement)
        db.execute(
            "INSERT INTO durable_meta VALUES ('schema', 'effects.durable'), ('version', '1')"
        )
        db.execute(
            "INSERT INTO runs (run_id, workflow, version, status, input, created_at, updated_at)"
            " VALUES ('old-run', 'simple', '1', 'pending', '3', 0, 0)"
        )
    async with Engine(f"sqlite:///{path}", workflows=[simple], steps=[echo]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run("old-run")
    assert ("completed", 3) == (run.status, run.output)
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(checkpoints)")}
        version = db.execute("SELECT value FROM durable_meta WHERE key = 'version'").fetchone()
    assert {"progress", "heartbeat_at"} <= columns
    assert (str(SCHEMA_VERSION),) == version


async def test_two_engines_opening_a_new_store_together_both_work(tmp_path: Path) -> None:
    """Opening (and creating) one store from two engines at once creates the schema once."""
    url = f"sqlite:///{tmp_path / 'together.db'}"
    first, second = Engine(url, workflows=[simple]), Engine(url, steps=[echo])
    async with first, second:
        run_id = await first.start(simple, 1)
        await first.run_until_idle()
        await second.run_until_idle()
        await first.run_until_idle()
        assert "completed" == (await first.get_run(run_id)).status


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not a database at all, just text" * 100, "not a usable SQLite database"),
        (b"SQLite format 3\x00" + b"\xff" * 600, "not a usable SQLite database"),
    ],
    ids=["text", "truncated-header"],
)
async def test_a_corrupt_file_is_refused_and_left_as_it_was(
    tmp_path: Path, content: bytes, message: str
) -> None:
    """A file that is not a SQLite database is a StoreError, and its bytes are untouched."""
    path = tmp_path / "corrupt.db"
    path.write_bytes(content)
    before = digest(path)
    with pytest.raises(StoreError, match=message):
        async with Engine(f"sqlite:///{path}", workflows=[simple]):
            pass
    assert before == digest(path)
    assert not (tmp_path / "corrupt.db-wal").exists()


async def test_a_foreign_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """A SQLite file of another application is not taken over, not even switched to WAL."""
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        db.execute("INSERT INTO invoices VALUES (1, 9.5)")
    db.close()
    before = digest(path)
    with pytest.raises(
        StoreError, match=r"not an effects.durable store \(it holds tables invoices\)"
    ):
        async with Engine(f"sqlite:///{path}", workflows=[simple]):
            pass
    assert before == digest(path)


async def test_a_store_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    """A schema version above ours is refused with both versions named; nothing is changed."""
    path = tmp_path / "newer.db"
    async with Engine(f"sqlite:///{path}", workflows=[simple]):
        pass
    with sqlite3.connect(path) as db:
        db.execute("UPDATE durable_meta SET value = '99' WHERE key = 'version'")
    db.close()
    before = digest(path)
    understands = rf"schema version 99, newer .* understands \({SCHEMA_VERSION}\)"
    with pytest.raises(StoreError, match=understands):
        async with Engine(f"sqlite:///{path}", workflows=[simple]):
            pass
    assert before == digest(path)


async def test_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    """A store in a folder that does not exist names the folder; nothing is created."""
    path = tmp_path / "no" / "such" / "dir" / "durable.db"
    with pytest.raises(StoreError, match="does not exist"):
        async with Engine(f"sqlite:///{path}"):
            pass
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://relative.db", "looks like 'sqlite:///path"),
        ("mysql://x", "store must be a 'sqlite:///path.db'"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous must be one of"),
        ("sqlite:///x.db?journal=wal", "unknown option 'journal'"),
        ("sqlite:///x.db?busy_timeout_ms=-1", "busy_timeout_ms must be a whole number"),
    ],
)
def test_bad_store_urls_are_refused_by_name(url: str, message: str) -> None:
    """A store URL the engine cannot use is a ValueError that quotes it."""
    with pytest.raises(ValueError, match=message):
        Engine(url)


def test_sqlite_urls_name_relative_and_absolute_paths() -> None:
    """sqlite:///rel.db is relative, sqlite:////abs.db absolute, percent-escapes decoded."""
    assert ("rel.db", {"synchronous": "NORMAL", "busy_timeout_ms": "30000"}) == parse_sqlite_url(
        "sqlite:///rel.db"
    )
    assert "/abs/my store.db" == parse_sqlite_url("sqlite:////abs/my%20store.db")[0]
    assert "FULL" == parse_sqlite_url("sqlite:///a.db?synchronous=FULL")[1]["synchronous"]


async def test_a_damaged_page_is_a_store_error_on_read(tmp_path: Path) -> None:
    """A store whose data pages were damaged after it was written: reads raise StoreError."""
    path = tmp_path / "damaged.db"
    url = f"sqlite:///{path}"
    async with Engine(url, workflows=[simple]) as engine:
        for n in range(300):
            await engine.start(simple, "x" * 200, run_id=f"run-{n:04d}")
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(3 * page, min(len(data), 12 * page)):
        data[offset] = 0xA5
    path.write_bytes(bytes(data))

    async def read_everything() -> None:
        async with Engine(url, workflows=[simple]) as engine:
            await engine.list_runs(limit=1000)
            for n in range(300):
                await engine.get_run(f"run-{n:04d}")

    with pytest.raises(StoreError, match=r"a read failed|not a usable"):
        await read_everything()


async def test_a_run_id_that_is_not_valid_text_is_refused(tmp_path: Path) -> None:
    """A run id with a lone surrogate is a ValueError naming it, not an encoding crash."""
    async with Engine(f"sqlite:///{tmp_path / 'ids.db'}", workflows=[simple]) as engine:
        with pytest.raises(ValueError, match="valid Unicode text"):
            await engine.start(simple, 1, run_id="bad\udc80id")
