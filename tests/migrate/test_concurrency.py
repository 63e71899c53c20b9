"""Async processes and per-definition concurrency."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import migrate
from tests.migrate.helpers import config_of, people


def test_async_process_runs_for_every_item(tmp_path: Path, store_url: str) -> None:
    """An ``async def`` process is awaited for each item; Skip and errors work as in sync."""

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        await asyncio.sleep(0)
        if item.identity == "2":
            raise migrate.Skip("two")
        if item.identity == "3":
            raise ValueError("three")

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(4)), process), store=store_url
    )
    summary = migrate.run(config)
    assert migrate.Counts(migrated=2, skipped=1, failed=1) == summary.definitions["p"].counts


def test_async_concurrency_is_bounded(tmp_path: Path, store_url: str) -> None:
    """With concurrency=3, at most 3 async items are in progress at once, and 3 are reached."""
    active = [0]
    peak = [0]

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        await asyncio.sleep(0.001)
        active[0] -= 1

    source = migrate.MemorySource(people(20), window_size=10)
    config = config_of(
        tmp_path, migrate.Migration("p", source, process, concurrency=3), store=store_url
    )
    summary = migrate.run(config)
    assert (3, 20) == (peak[0], summary.definitions["p"].counts.migrated)


def test_sync_process_with_concurrency_runs_in_threads(tmp_path: Path, store_url: str) -> None:
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
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(6)), process, concurrency=2),
        store=store_url,
    )
    summary = migrate.run(config)
    assert (2, 6) == (peak[0], summary.definitions["p"].counts.migrated)
    with config.open_store() as store:
        assert [{"n": i} for i in range(1, 7)] == [s.tracking for s in store.items("p")]


def test_run_options_concurrency_overrides_the_definition(tmp_path: Path, store_url: str) -> None:
    """RunOptions(concurrency=N) (the -c flag) overrides each definition's concurrency."""
    active = [0]
    peak = [0]

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        await asyncio.sleep(0.001)
        active[0] -= 1

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(8)), process), store=store_url
    )
    migrate.run(config, migrate.RunOptions(concurrency=4))
    assert 4 == peak[0]


def test_journal_entries_stay_with_their_item_under_concurrency(
    tmp_path: Path, store_url: str
) -> None:
    """Destination journal entries go to the right item when items run concurrently."""

    @migrate.destination(name="api", key=lambda identity: identity)
    async def put(identity: str) -> None:
        await asyncio.sleep(0.001 * (int(identity) % 3))

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        await put(item.identity).run_or_raise()

    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(9)), process, concurrency=5),
        store=store_url,
    )
    migrate.run(config)
    with config.open_store() as store:
        keys = {s.identity: [e["key"] for e in s.journal] for s in store.items("p")}
    assert {str(i): [str(i)] for i in range(1, 10)} == keys


def test_sync_concurrency_runs_that_many_items_at_once(tmp_path: Path, store_url: str) -> None:
    """concurrency=10 runs 10 plain processes at once (more than asyncio's default threads)."""
    barrier = threading.Barrier(10, timeout=60)

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        barrier.wait()  # breaks (and fails every item) unless all 10 are in here together

    source = migrate.MemorySource(people(20), window_size=10)
    config = config_of(
        tmp_path, migrate.Migration("p", source, process, concurrency=10), store=store_url
    )
    summary = migrate.run(config)
    assert migrate.Counts(migrated=20) == summary.definitions["p"].counts


def test_a_sync_process_over_its_timeout_fails_and_the_others_go_on(
    tmp_path: Path, store_url: str
) -> None:
    """timeout= fails items that overran; their threads are replaced, so N still run at once."""
    release = threading.Event()
    barrier = threading.Barrier(2, timeout=60)

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity in ("1", "2"):
            release.wait(60)  # stuck well past the timeout, holding both workers
        elif item.identity in ("3", "4"):
            barrier.wait()  # passes only if two new workers took the stuck ones' places

    source = migrate.MemorySource(people(5))
    config = config_of(
        tmp_path,
        migrate.Migration("p", source, process, concurrency=2, timeout="300ms"),
        store=store_url,
    )
    try:
        summary = migrate.run(config)
    finally:
        release.set()
    failures = migrate.failures(config, "p")
    assert (["1", "2"], {"TimeoutError"}) == (
        [f.identity for f in failures],
        {f.error.type for f in failures},
    )
    assert "did not finish within its timeout of 0.3s" in failures[0].error.message
    assert migrate.Counts(migrated=3, failed=2) == summary.definitions["p"].counts


def test_an_async_process_over_its_timeout_is_cancelled(tmp_path: Path, store_url: str) -> None:
    """An async process over timeout= is cancelled and its item fails with TimeoutError."""
    cancelled: list[str] = []

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity == "2":
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(item.identity)
                raise

    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(3)), process, timeout=0.1),
        store=store_url,
    )
    summary = migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert (["2"], "TimeoutError", 2) == (
        cancelled,
        failure.error.type,
        summary.definitions["p"].counts.migrated,
    )


def test_a_plain_process_with_a_timeout_and_concurrency_1_still_runs_in_order(
    tmp_path: Path,
    store_url: str,
) -> None:
    """With timeout= and concurrency 1, items run one at a time (in a worker thread), in order."""
    seen: list[str] = []
    main = threading.get_ident()
    threads: set[bool] = set()

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        threads.add(threading.get_ident() == main)
        seen.append(item.identity)

    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(4)), process, timeout=30),
        store=store_url,
    )
    migrate.run(config)
    assert (["1", "2", "3", "4"], {False}) == (seen, threads)
