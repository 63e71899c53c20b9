"""source_cursor_retry / source_lookup_retry and destination retries, under a virtual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import migrate
from effects import Effect, retry
from effects.testing import VirtualClock
from migrate import SourceError
from schedules import exponential
from tests.migrate.helpers import FlakySource, UnavailableError, config_of, noop, people


def _transient(error: Exception) -> bool:
    return isinstance(error, SourceError) and isinstance(error.cause, UnavailableError)


TRANSIENT = retry(exponential("250ms"), times=4, while_=_transient)


def test_cursor_retry_recovers_a_flaky_window_read(
    tmp_path: Path, virtual_clock: VirtualClock
) -> None:
    """A Retry as source_cursor_retry repeats failed window reads with its backoff."""
    source = FlakySource(people(3), read_failures=2)
    config = config_of(
        tmp_path, migrate.Migration("p", source, noop, source_cursor_retry=TRANSIENT)
    )
    summary = migrate.run(config)
    assert (summary.status, summary.definitions["p"].counts.migrated) == ("succeeded", 3)
    assert virtual_clock.sleeps == [0.25, 0.5]


def test_cursor_retry_giving_up_stops_the_definition_with_the_attempts(
    tmp_path: Path, virtual_clock: VirtualClock
) -> None:
    """When retries run out, the definition stops with an error naming the attempts made."""
    source = FlakySource(people(3), read_failures=99)
    config = config_of(
        tmp_path, migrate.Migration("p", source, noop, source_cursor_retry=TRANSIENT)
    )
    summary = migrate.run(config)
    error = summary.definitions["p"].error
    assert error is not None
    assert "failed after 5 attempts:" in error
    assert (source.reads, len(virtual_clock.sleeps)) == (5, 4)


def test_without_a_cursor_retry_a_read_is_attempted_once(tmp_path: Path) -> None:
    """No source_cursor_retry: one attempt, then the definition stops."""
    source = FlakySource(people(3), read_failures=1)
    config = config_of(tmp_path, migrate.Migration("p", source, noop))
    assert migrate.run(config).status == "failed"
    assert source.reads == 1


def test_lookup_retry_recovers_flaky_direct_lookups(
    tmp_path: Path, virtual_clock: VirtualClock
) -> None:
    """source_lookup_retry repeats a failed lookup by identity in a failed-item run."""
    fail = {"2"}

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity in fail:
            raise ValueError("bad")

    source = FlakySource(people(3))
    config = config_of(
        tmp_path, migrate.Migration("p", source, process, source_lookup_retry=TRANSIENT)
    )
    migrate.run(config)
    fail.clear()
    source.lookup_failures = 1
    summary = migrate.run(config, migrate.RunOptions(failed=True))
    assert (summary.status, virtual_clock.sleeps) == ("succeeded", [0.25])


def test_lookup_giving_up_fails_the_item_with_source_evidence_and_attempts(
    tmp_path: Path, virtual_clock: VirtualClock
) -> None:
    """A lookup that keeps failing fails the item: kind source, the cause, attempts made."""
    source = FlakySource(people(2))
    config = config_of(
        tmp_path, migrate.Migration("p", source, noop, source_lookup_retry=TRANSIENT)
    )
    source.lookup_failures = 99
    summary = migrate.run(config, migrate.RunOptions(ids=("1",)))
    (failure,) = migrate.failures(config, "p")
    assert (
        summary.status,
        failure.error.kind,
        failure.error.type,
        failure.error.attempts,
    ) == ("failed", "source", "SourceError", 5)
    assert failure.error.details["cause"] == "UnavailableError: try later"
    assert len(virtual_clock.sleeps) == 4


def test_scan_lookup_retry_wraps_the_single_batch_read(
    tmp_path: Path, virtual_clock: VirtualClock
) -> None:
    """For a scan source the retry wraps the one batch read of all targets."""
    source = FlakySource(people(6), lookup="scan")
    config = config_of(
        tmp_path, migrate.Migration("p", source, noop, source_lookup_retry=TRANSIENT)
    )
    source.lookup_failures = 2
    summary = migrate.run(config, migrate.RunOptions(ids=("1", "3", "5")))
    assert (summary.definitions["p"].counts.migrated, source.finds) == (3, 3)
    assert virtual_clock.sleeps == [0.25, 0.5]


def test_any_effect_to_effect_function_is_a_strategy(tmp_path: Path) -> None:
    """A plain function from Effect to Effect works as a source retry strategy."""
    applied: list[str] = []

    def strategy(read: Effect[Any, SourceError]) -> Effect[Any, SourceError]:
        applied.append("read")
        return read.retry(times=1)

    source = FlakySource(people(3), read_failures=1)
    config = config_of(tmp_path, migrate.Migration("p", source, noop, source_cursor_retry=strategy))
    assert migrate.run(config).status == "succeeded"
    assert applied == ["read", "read"]


def test_permanent_errors_are_not_retried(tmp_path: Path, virtual_clock: VirtualClock) -> None:
    """A malformed-data SourceError (no transient cause) is not retried by a classifying policy."""

    class Broken(migrate.MemorySource):
        def read_window(self, cursor: migrate.Cursor) -> migrate.Window:
            raise SourceError("malformed row 3")

    config = config_of(
        tmp_path, migrate.Migration("p", Broken(people(1)), noop, source_cursor_retry=TRANSIENT)
    )
    summary = migrate.run(config)
    assert (virtual_clock.sleeps, summary.status) == ([], "failed")


def test_destination_retry_attempts_are_recorded_in_evidence(
    tmp_path: Path, virtual_clock: VirtualClock
) -> None:
    """A destination call retried until it gives up stores the number of attempts it made."""

    @migrate.destination(name="api")
    def put(identity: str) -> None:
        raise UnavailableError("503")

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        put(item.identity).pipe(retry(exponential(1), times=2)).run_or_raise()

    config = config_of(tmp_path, migrate.Migration("p", migrate.MemorySource(people(1)), process))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert (
        failure.error.kind,
        failure.error.type,
        failure.error.attempts,
    ) == ("destination", "DestinationError", 3)
    assert virtual_clock.sleeps == [1.0, 2.0]


def test_a_run_leaves_no_retry_hook_behind(tmp_path: Path) -> None:
    """The hook counting attempts for evidence is registered during a run only, then removed."""
    from effects._events import hooks

    before = hooks()
    seen_during: list[int] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen_during.append(len(hooks()))
        Effect.fail(ConnectionError("down")).pipe(retry(times=2)).run_or_raise()

    source = migrate.MemorySource([{"id": 1}])
    config = config_of(tmp_path, migrate.Migration("p", source, process))
    summary = migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert [len(before) + 1] == seen_during
    assert before == hooks()
    assert ("failed", 3) == (summary.status, failure.error.attempts)
