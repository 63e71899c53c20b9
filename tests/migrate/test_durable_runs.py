"""
``migrate.durable``: a Migration Run as the durable workflow ``migrate.run``, in this process.

Its steps and their attempts, a failed window failing the run (exit 4 for a source, 5 for the
store), a one-off store error in ``migrate.complete`` retried, ``begin`` refusals on attempt 1
that write nothing, the locks a durable run holds, and ``retry`` refused. The crash and
many-worker cases, with real processes, are in ``test_durable_crashes.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import migrate
from effects.durable import Checkpoint, Run
from migrate import durable
from migrate._cli import main

ROWS = 2_500
WINDOW = 1_000


def people(count: int = ROWS) -> list[dict[str, Any]]:
    return [{"id": str(n), "name": f"person {n}"} for n in range(count)]


def noop(item: migrate.Item, scope: migrate.Scope) -> None:
    """Migrate nothing anywhere: the item's state is what the test reads."""


def bad_seven(item: migrate.Item, scope: migrate.Scope) -> None:
    if item.identity == "7":
        raise ValueError("bad row 7")


def config_of(store_url: str, tmp_path: Path, *migrations: migrate.Migration) -> migrate.Config:
    return migrate.Config(list(migrations), store=store_url, base_dir=tmp_path)


def people_config(store_url: str, tmp_path: Path, process: Any = noop) -> migrate.Config:
    source = migrate.MemorySource(people(), window_size=WINDOW)
    return config_of(store_url, tmp_path, migrate.Migration("people", source, process))


def facts(config: migrate.Config, durable_run_id: str) -> tuple[Run, list[Checkpoint]]:
    async def read() -> tuple[Run, list[Checkpoint]]:
        async with durable.engine(config) as engine:
            return await engine.get_run(durable_run_id), await engine.checkpoints(durable_run_id)

    return asyncio.run(read())


def latest(config: migrate.Config) -> migrate.RunRecord:
    with config.using_store(read_only=True) as store:
        (record, *_) = store.runs(limit=1)
        return record


def steps(checkpoints: list[Checkpoint]) -> list[tuple[str, str, int]]:
    return [(c.name, c.status, c.attempts) for c in checkpoints]


def test_a_durable_run_is_begin_a_window_step_per_window_and_complete(
    store_url: str, tmp_path: Path
) -> None:
    """Every window one attempt, output ``{definition, n, done}``; the summary as a plain run's."""
    config = people_config(store_url, tmp_path, bad_seven)
    summary = durable.run(config)
    assert ("failed", 2_499, 1) == (
        summary.status,
        summary.definitions["people"].counts.migrated,
        summary.definitions["people"].counts.failed,
    )
    assert [("people", "process", "ValueError", "bad row 7", 1)] == [
        (e.definition_id, e.kind, e.type, e.message, e.count) for e in summary.top_errors
    ]
    record = latest(config)
    assert record.durable_run_id is not None
    run, checkpoints = facts(config, record.durable_run_id)
    assert ("completed", None) == (run.status, run.error)
    # Three windows of rows, then the read at the end that says the source is done.
    assert [
        ("migrate.begin", "completed", 1),
        *[("migrate.window", "completed", 1)] * 4,
        ("migrate.complete", "completed", 1),
    ] == steps(checkpoints)
    windows = [c.output for c in checkpoints if c.name == "migrate.window"]
    assert [(n, n == 3) for n in range(4)] == [(w["n"], w["done"]) for w in windows]
    assert {"people"} == {w["definition"] for w in windows}
    with config.using_store(read_only=True) as store:
        assert () == store.locks()
        assert record.status == "failed"
        assert ROWS == len(store.items("people"))


def test_a_one_off_store_error_in_complete_is_retried_and_the_locks_released(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``migrate.complete`` survives a lost write: attempt 2 releases the locks."""
    config = people_config(store_url, tmp_path)
    with config.using_store() as store:
        kind = type(store)
    release = kind.release_locks
    failures = iter([migrate.StoreError("disk I/O error (injected)")])

    def flaky_release(self: migrate.Store, run_id: str, **marks: Any) -> None:
        error = next(failures, None)
        if error is not None:
            raise error
        release(self, run_id, **marks)

    monkeypatch.setattr(kind, "release_locks", flaky_release)
    summary = durable.run(config)
    assert "succeeded" == summary.status
    record = latest(config)
    assert record.durable_run_id is not None
    _, checkpoints = facts(config, record.durable_run_id)
    assert ("migrate.complete", "completed", 2) == steps(checkpoints)[-1]
    with config.using_store(read_only=True) as store:
        assert () == store.locks()
        assert "succeeded" == store.run(record.run_id).status  # type: ignore[union-attr]


CONFIG = """
import migrate
import migrate.durable

ROWS = [{{"id": str(n)}} for n in range(2500)]


class Broken(migrate.MemorySource):
    def read_window(self, cursor):
        if cursor is None or {broken} is False:
            return super().read_window(cursor)
        raise migrate.SourceError("the source is down")


def process(item, scope):
    return None


config = migrate.Config(
    [migrate.Migration("people", Broken(ROWS, window_size=1000), process)],
    store={store!r},
)
"""


def project(tmp_path: Path, store_url: str, *, broken: bool) -> Path:
    path = tmp_path / "migrate_config.py"
    path.write_text(CONFIG.format(store=store_url, broken=broken))
    return path


def test_a_window_whose_source_cannot_be_read_fails_the_run_after_one_attempt(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 4; ``migrate.fail`` stores the run failed with the error and releases the locks."""
    path = project(tmp_path, store_url, broken=True)
    assert 4 == main(["--config", str(path), "run", "--durable", "--progress", "none"])
    err = capsys.readouterr().err
    assert "source unreadable: people" in err
    assert "the source is down" in err
    config = migrate.load_config(path)
    record = latest(config)
    assert ("failed", "people") == (record.status, next(iter(record.definitions)))
    assert "the source is down" in (record.definitions["people"].error or "")
    assert record.durable_run_id is not None
    run, checkpoints = facts(config, record.durable_run_id)
    assert ("failed", "source") == (run.status, run.error.code if run.error else None)
    assert [
        ("migrate.begin", "completed", 1),
        ("migrate.window", "completed", 1),
        ("migrate.window", "failed", 1),
        ("migrate.fail", "completed", 1),
    ] == steps(checkpoints)
    with config.using_store(read_only=True) as store:
        assert () == store.locks()
        assert WINDOW == len(store.items("people"))
    assert 0 == main(["--config", str(path), "status"])


def test_a_window_whose_commit_fails_fails_the_run_with_exit_5(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A store error in a window: one attempt, exit 5, the committed window kept."""
    path = project(tmp_path, store_url, broken=False)
    config = migrate.load_config(path)
    with config.using_store() as store:
        kind = type(store)
    commit = kind.commit_window
    seen: list[int] = []

    def second_fails(self: migrate.Store, window: Any) -> None:
        seen.append(1)
        if len(seen) == 2:
            raise migrate.StoreError("database or disk is full (injected)")
        commit(self, window)

    monkeypatch.setattr(kind, "commit_window", second_fails)
    assert 5 == main(["--config", str(path), "run", "--durable", "--progress", "none"])
    assert "store error: " in capsys.readouterr().err
    record = latest(config)
    assert "failed" == record.status
    assert "database or disk is full" in (record.error or "")
    assert WINDOW == record.definitions["people"].counts.migrated
    assert record.durable_run_id is not None
    run, checkpoints = facts(config, record.durable_run_id)
    assert ("failed", "store") == (run.status, run.error.code if run.error else None)
    assert [("migrate.window", "failed", 1), ("migrate.fail", "completed", 1)] == steps(
        checkpoints
    )[2:]
    with config.using_store(read_only=True) as store:
        assert () == store.locks()


def test_a_begin_refusal_fails_on_attempt_1_and_writes_nothing(
    store_url: str, tmp_path: Path
) -> None:
    """A preflight refusal: start-failed, no item state, locks released, no migrate.fail."""
    source = migrate.MemorySource(people(20), window_size=10)
    authors = migrate.Migration("authors", source, bad_seven)
    books = migrate.Migration(
        "books", migrate.MemorySource(people(20), window_size=10), noop, requires=("authors",)
    )
    config = config_of(store_url, tmp_path, authors, books)
    assert "failed" == migrate.run(config, migrate.RunOptions(definitions=("authors",))).status
    with pytest.raises(migrate.RefusedError, match="authors"):
        durable.run(config, migrate.RunOptions(definitions=("books",)))
    record = latest(config)
    assert ("start-failed", ("books",)) == (record.status, tuple(record.definitions))
    assert record.durable_run_id is not None
    run, checkpoints = facts(config, record.durable_run_id)
    assert ("failed", "preflight") == (run.status, run.error.code if run.error else None)
    assert [("migrate.begin", "failed", 1)] == steps(checkpoints)
    with config.using_store(read_only=True) as store:
        assert () == store.items("books")
        assert () == store.locks()


def test_a_live_durable_run_holds_its_locks_and_a_plain_run_is_refused_naming_both(
    store_url: str, tmp_path: Path
) -> None:
    """Started, not yet worked: a plain run meets LockHeld naming both ids; the lock stays."""
    config = people_config(store_url, tmp_path)

    async def started() -> str:
        async with durable.engine(config) as engine:
            return await durable.start(config, engine)

    durable_run_id = asyncio.run(started())
    record = latest(config)
    with pytest.raises(migrate.LockHeld) as held:
        migrate.run(config)
    assert record.run_id in str(held.value)
    assert durable_run_id in str(held.value)
    with config.using_store() as store:
        assert [(record.run_id, durable_run_id)] == [
            (lock.run_id, lock.durable_run_id) for lock in store.locks()
        ]
        assert () == store.recover_dead_runs()

    async def finish() -> migrate.RunSummary:
        async with durable.engine(config) as engine:
            return await durable.wait(config, engine, durable_run_id)

    summary = asyncio.run(finish())
    assert (record.run_id, "succeeded") == (summary.run_id, summary.status)
    assert "succeeded" == migrate.run(config).status


class BrokenSource(migrate.MemorySource):
    """Its second window cannot be read."""

    def read_window(self, cursor: migrate.Cursor) -> migrate.Window:
        if cursor is None:
            return super().read_window(cursor)
        raise migrate.SourceError("the source is down")


def test_requeue_of_a_migrate_run_is_refused_naming_migrate_run(
    store_url: str, tmp_path: Path
) -> None:
    """``engine.requeue`` (the CLI's retry) of a failed migrate.run: a ValueError, unchanged."""
    config = config_of(
        store_url,
        tmp_path,
        migrate.Migration("people", BrokenSource(people(), window_size=WINDOW), noop),
    )
    assert "failed" == durable.run(config).status
    record = latest(config)
    assert record.durable_run_id is not None

    async def requeue() -> Run:
        async with durable.engine(config) as engine:
            with pytest.raises(ValueError, match=r"not requeued.*run `migrate run` again"):
                await engine.requeue(record.durable_run_id or "")
            return await engine.get_run(record.durable_run_id or "")

    assert "failed" == asyncio.run(requeue()).status


def test_the_default_durable_store_sits_beside_the_migrate_store(tmp_path: Path) -> None:
    """SQLite: durable.db beside it; PostgreSQL: the same database, schema effects_durable."""
    sqlite = migrate.Config([], store="sqlite:///sub/state.db", base_dir=tmp_path)
    assert f"sqlite:///{tmp_path / 'sub' / 'durable.db'}" == durable.default_store_url(sqlite)
    pg = migrate.Config([], store="postgresql://u@h:5/db?schema=mine&connect_timeout=3")
    assert "postgresql://u@h:5/db?connect_timeout=3&schema=effects_durable" == (
        durable.default_store_url(pg)
    )
