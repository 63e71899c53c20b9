"""Retries per definition in a run: counted, stored with the run, shown in its JSON."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

import migrate
from effects import FatalError, retry
from tests.migrate.helpers import FlakySource, UnavailableError, config_of, noop, people


class FlakyApi:
    """A destination failing each identity's first *failures* calls; thread-safe."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def put(self, identity: str) -> None:
        with self.lock:
            seen = self.calls[identity] = self.calls.get(identity, 0) + 1
        if seen <= self.failures:
            raise UnavailableError(f"503 for {identity}")


#: No delay between attempts: the counts are the point here, not the waits.
SOURCE_RETRY = retry(times=4)


def flaky_process(api: FlakyApi, times: int = 4) -> migrate.Process:
    """A process putting each item through *api*, retried up to *times* times."""
    put = migrate.destination(api.put, name="api")
    policy = retry(times=times)

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        put(item.identity).pipe(policy).run_or_raise()

    return process


def async_flaky_process(api: FlakyApi) -> migrate.Process:
    """An ``async def`` process putting each item through *api*, retried up to 4 times."""

    async def call(identity: str) -> None:
        api.put(identity)

    put = migrate.destination(call, name="api")
    policy = retry(times=4)

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        await put(item.identity).pipe(policy).run_or_raise()

    return process


def retry_counts(summary: migrate.RunSummary) -> dict[str, tuple[int, int]]:
    """definition id -> (retries, gave_up) of *summary*."""
    return {key: (r.retries, r.gave_up) for key, r in summary.definitions.items()}


def test_flaky_destination_retries_count_for_its_definition_only(tmp_path: Path) -> None:
    """Five items failing twice each show 10 retries on their definition and none elsewhere."""
    config = config_of(
        tmp_path,
        migrate.Migration("clean", migrate.MemorySource(people(3)), noop),
        migrate.Migration("flaky", migrate.MemorySource(people(5)), flaky_process(FlakyApi(2))),
        migrate.Migration("after", migrate.MemorySource(people(3)), noop),
    )
    summary = migrate.run(config)
    assert summary.status == "succeeded"
    assert {"clean": (0, 0), "flaky": (10, 0), "after": (0, 0)} == retry_counts(summary)


def test_calls_out_of_retries_count_as_gave_up(tmp_path: Path) -> None:
    """A call failing past its 2 retries counts 2 retries and 1 gave-up per item."""
    config = config_of(
        tmp_path,
        migrate.Migration(
            "down", migrate.MemorySource(people(3)), flaky_process(FlakyApi(99), times=2)
        ),
    )
    summary = migrate.run(config)
    assert (3, {"down": (6, 3)}) == (
        summary.definitions["down"].counts.failed,
        retry_counts(summary),
    )


def test_a_call_failing_once_without_retry_counts_nothing(tmp_path: Path) -> None:
    """A non-retryable error on the first attempt is neither a retry nor a retried call."""

    @migrate.destination(name="api")
    def reject(identity: str) -> None:
        raise FatalError(f"invalid {identity}")

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        reject(item.identity).pipe(retry(times=4)).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(2)), process))
    summary = migrate.run(config)
    assert (2, {"p": (0, 0)}) == (summary.definitions["p"].counts.failed, retry_counts(summary))


def test_source_cursor_retries_count_for_the_definition_read(tmp_path: Path) -> None:
    """Window reads retried by source_cursor_retry count for the definition whose source it is."""
    source = FlakySource(people(3), read_failures=3)
    config = config_of(
        tmp_path,
        migrate.Migration("clean", migrate.MemorySource(people(3)), noop),
        migrate.Migration("read", source, noop, source_cursor_retry=SOURCE_RETRY),
    )
    summary = migrate.run(config)
    assert summary.status == "succeeded"
    assert {"clean": (0, 0), "read": (3, 0)} == retry_counts(summary)


def test_source_cursor_giving_up_counts_retries_and_the_gave_up_read(tmp_path: Path) -> None:
    """A window read that keeps failing counts its 4 retries and 1 gave-up."""
    source = FlakySource(people(3), read_failures=99)
    config = config_of(
        tmp_path, migrate.Migration("read", source, noop, source_cursor_retry=SOURCE_RETRY)
    )
    summary = migrate.run(config)
    assert ("failed", {"read": (4, 1)}) == (summary.status, retry_counts(summary))


@pytest.mark.parametrize("lookup", ["direct", "scan"])
def test_source_lookup_retries_count_in_a_targeted_run(tmp_path: Path, lookup: str) -> None:
    """Lookups retried by source_lookup_retry (per identity or one scan) count for the run."""
    source = FlakySource(people(4), lookup="scan" if lookup == "scan" else "direct")
    config = config_of(
        tmp_path, migrate.Migration("p", source, noop, source_lookup_retry=SOURCE_RETRY)
    )
    assert migrate.run(config).status == "succeeded"
    source.lookup_failures = 2
    summary = migrate.run(config, migrate.RunOptions(ids=("1", "3")))
    assert (2, {"p": (2, 0)}) == (summary.definitions["p"].counts.migrated, retry_counts(summary))


@pytest.mark.parametrize("concurrency", [1, 4])
def test_sync_process_retries_count_under_concurrency(tmp_path: Path, concurrency: int) -> None:
    """Retries made in worker threads (concurrency > 1) count as in the calling thread."""
    config = config_of(
        tmp_path,
        migrate.Migration(
            "p", migrate.MemorySource(people(40)), flaky_process(FlakyApi(1)), concurrency=4
        ),
    )
    summary = migrate.run(config, migrate.RunOptions(concurrency=concurrency))
    assert {"p": (40, 0)} == retry_counts(summary)


def test_async_process_retries_count_per_definition(tmp_path: Path) -> None:
    """Two concurrent async definitions: each counts its own retries, not the other's."""
    config = config_of(
        tmp_path,
        migrate.Migration(
            "first",
            migrate.MemorySource(people(10)),
            async_flaky_process(FlakyApi(1)),
            concurrency=3,
        ),
        migrate.Migration(
            "second",
            migrate.MemorySource(people(20)),
            async_flaky_process(FlakyApi(2)),
            concurrency=3,
        ),
        migrate.Migration("clean", migrate.MemorySource(people(5)), noop, concurrency=3),
    )
    summary = migrate.run(config)
    assert {"first": (10, 0), "second": (40, 0), "clean": (0, 0)} == retry_counts(summary)


def test_retries_are_stored_with_the_run_and_in_its_json(tmp_path: Path) -> None:
    """The run record and both JSON documents carry the retries and the gave-up calls."""
    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(2)), flaky_process(FlakyApi(3))),
    )
    summary = migrate.run(config)
    (record,) = migrate.runs(config)
    assert (6, 0) == (record.definitions["p"].retries, record.definitions["p"].gave_up)
    for document in (summary.to_json(), record.to_json()):
        definition = document["definitions"]["p"]
        assert (6, 0, 2) == (definition["retries"], definition["gave_up"], definition["migrated"])


def test_progress_events_carry_the_retries_so_far(tmp_path: Path) -> None:
    """Each window's progress event holds the retries made up to that window."""
    events: list[migrate.ProgressEvent] = []
    config = config_of(
        tmp_path,
        migrate.Migration(
            "p", migrate.MemorySource(people(4), window_size=2), flaky_process(FlakyApi(1))
        ),
    )
    migrate.run(config, progress=events.append)
    windows = [(e.kind, e.retries) for e in events if e.kind in ("window", "end")]
    assert [("window", 2), ("window", 4), ("end", 4)] == windows


def test_run_records_without_retry_counts_still_load(tmp_path: Path) -> None:
    """A run stored before retries were counted reads 0 retries and keeps its counts."""
    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), noop))
    run_id = migrate.run(config).run_id
    db = sqlite3.connect(tmp_path / "state.db")
    with db:
        (stored,) = db.execute("SELECT definitions FROM runs WHERE id = ?", (run_id,)).fetchone()
        old = json.loads(stored)
        for result in old.values():
            del result["retries"], result["gave_up"]
        db.execute("UPDATE runs SET definitions = ? WHERE id = ?", (json.dumps(old), run_id))
    db.close()
    (record,) = migrate.runs(config)
    result = record.definitions["p"]
    assert (3, 0, 0) == (result.counts.migrated, result.retries, result.gave_up)
    assert 0 == record.to_json()["definitions"]["p"]["retries"]
