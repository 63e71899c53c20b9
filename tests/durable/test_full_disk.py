"""
A full disk under the SQLite store: writes fail with a clear ``StoreError``, nothing committed is
lost, no run is failed or corrupted by it, and the engine carries on once space is freed.

The disk is a real one: a 2 MiB tmpfs mounted for the test (the suite runs as root). Where
mounting is not permitted, ``PRAGMA max_page_count`` on the store's connection emulates it (SQLite
then fails with the same ``SQLITE_FULL``), and the test says so in its output;
``DURABLE_EMULATE_FULL_DISK=1`` forces the emulation.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from effects.durable import SqliteStore, StoreError
from effects.durable._store import NewRun

pytestmark = pytest.mark.anyio

FULL = "database or disk is full"


# -- the store alone: a statement that runs out of pages ------------------------------------------


async def test_a_statement_that_runs_out_of_space_is_a_store_error(tmp_path: Path) -> None:
    """SQLITE_FULL inside a transaction (not at its commit) is a StoreError too; nothing is kept."""
    url = f"sqlite:///{tmp_path / 'durable.db'}"
    store = SqliteStore(url)
    await store.open()
    try:
        db: sqlite3.Connection = store._conn
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count = {pages}")
        run = NewRun("r1", "w", "1", '"' + "z" * 100_000 + '"', 0)
        with pytest.raises(StoreError) as raised:
            await store.create_run(run, ())
        in_transaction = db.in_transaction
        db.execute("PRAGMA max_page_count = 4294967294")
        assert await store.get_run("r1") is None
        assert await store.create_run(run, ()) is None
        created = await store.get_run("r1")
    finally:
        await store.close()
    message = str(raised.value)
    assert (True, True, False) == (url in message, FULL in message, in_transaction), message
    assert created is not None
