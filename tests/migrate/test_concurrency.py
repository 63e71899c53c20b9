"""Async processes and per-definition concurrency."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import migrate
from tests.migrate.helpers import config_of, people


def test_async_process_runs_for_every_item(tmp_path: Path) -> None:
    """An ``async def`` process is awaited for each item; Skip and errors work as in sync."""

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        await asyncio.sleep(0)
        if item.identity == "2":
            raise migrate.Skip("two")
        if item.identity == "3":
            raise ValueError("three")

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(4)), process))
    summary = migrate.run(config)
    assert migrate.Counts(migrated=2, skipped=1, failed=1) == summary.definitions["p"].counts


def test_async_concurrency_is_bounded(tmp_path: Path) -> None:
    """With concurrency=3, at most 3 async items are in progress at once, and 3 are reached."""
    active = [0]
    peak = [0]

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        await asyncio.sleep(0.001)
        active[0] -= 1

    source = migrate.MemorySource(people(20), window_size=10)
    config = config_of(tmp_path, migrate.Migration("p", source, process, concurrency=3))
    summary = migrate.run(config)
    assert (3, 20) == (peak[0], summary.definitions["p"].counts.migrated)


def test_sync_process_with_concurrency_runs_in_threads(tmp_path: Path) -> None:
    """A sync process with concurrency > 1 runs in worker threads, bounded, states in order."""
    lock = threading.Lock()
    active = [0]
    peak = [0]
    barrier = threading.Barrier(2, timeout=60)

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        if item.identity in ("1", "2"):
            barrier.wait()  # only passes if two items really run at once
        scope.track({"n": int(item.identity)})
        with lock:
            active[0] -= 1

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(6)), process, concurrency=2)
    )
    summary = migrate.run(config)
    assert (2, 6) == (peak[0], summary.definitions["p"].counts.migrated)
    with config.open_store() as store:
        assert [{"n": i} for i in range(1, 7)] == [s.tracking for s in store.items("p")]


def test_run_options_concurrency_overrides_the_definition(tmp_path: Path) -> None:
    """RunOptions(concurrency=N) (the -c flag) overrides each definition's concurrency."""
    active = [0]
    peak = [0]

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        await asyncio.sleep(0.001)
        active[0] -= 1

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(8)), process))
    migrate.run(config, migrate.RunOptions(concurrency=4))
    assert 4 == peak[0]


def test_journal_entries_stay_with_their_item_under_concurrency(tmp_path: Path) -> None:
    """Destination journal entries go to the right item when items run concurrently."""

    @migrate.destination(name="api", key=lambda identity: identity)
    async def put(identity: str) -> None:
        await asyncio.sleep(0.001 * (int(identity) % 3))

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        await put(item.identity).run_or_raise()

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(9)), process, concurrency=5)
    )
    migrate.run(config)
    with config.open_store() as store:
        keys = {s.identity: [e["key"] for e in s.journal] for s in store.items("p")}
    assert {str(i): [str(i)] for i in range(1, 10)} == keys
