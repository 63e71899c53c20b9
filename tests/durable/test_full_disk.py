"""
A full disk under the SQLite store: writes fail with a clear ``StoreError``, nothing committed is
lost, no run is failed or corrupted by it, and the engine carries on once space is freed.

The disk is a real one: a 2 MiB tmpfs mounted for the test (the suite runs as root). Where
mounting is not permitted, ``PRAGMA max_page_count`` on the store's connection emulates it (SQLite
then fails with the same ``SQLITE_FULL``), and the test says so in its output;
``DURABLE_EMULATE_FULL_DISK=1`` forces the emulation.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from effects.durable import (
    Checkpoint,
    Engine,
    Recurring,
    SqliteStore,
    StoreError,
    WorkflowContext,
    step,
    workflow,
)
from effects.durable._engine import open_store
from effects.durable._pytest_plugin import DurableEngineFactory
from effects.durable._store import NewRun
from effects.testing import VirtualClock
from schedules import spaced
from tests.durable.crash_support.harness import FINISHED, trail_problems, wait_until_async
from tests.durable.support import START_MS, relative

pytestmark = [pytest.mark.anyio, pytest.mark.not_on_memory("a store file on a disk that fills up")]

# The engine's leases: a turn that could not write (nor release its lease) is recovered after it.
LEASE_MS = 500
FULL = "database or disk is full"


@attrs.define
class Disk:
    """
    A folder whose space runs out on ``fill()`` and comes back on ``free()``: a tmpfs mounted
    there, or (``mounted`` false) ``PRAGMA max_page_count`` on a store connection.
    """

    folder: Path
    mounted: bool
    why_emulated: str = ""

    def describe(self) -> str:
        """What kind of full disk this is (printed by each test)."""
        return "a 2 MiB tmpfs" if self.mounted else f"emulated ({self.why_emulated})"

    def fill(self, db: sqlite3.Connection, *, leave: int = 0) -> None:
        """Use up the free space but about *leave* bytes (or cap the store at its pages)."""
        if not self.mounted:
            (pages,) = db.execute("PRAGMA page_count").fetchone()
            db.execute(f"PRAGMA max_page_count = {pages + leave // 4096}")
            return
        filler = self.folder / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            for chunk in (1 << 16, 1 << 12, 1 << 9):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * chunk)
            error = None
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as raised:
                error = raised
            assert error is not None
            assert errno.ENOSPC == error.errno
            if leave:
                os.ftruncate(fd, os.fstat(fd).st_size - leave)
        finally:
            os.close(fd)

    def free(self, db: sqlite3.Connection) -> None:
        """Give the space back."""
        if not self.mounted:
            db.execute("PRAGMA max_page_count = 4294967294")
            return
        (self.folder / "filler").unlink(missing_ok=True)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    """A 2 MiB tmpfs on a fresh folder, unmounted afterwards; an emulation where mount fails."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.environ.get("DURABLE_EMULATE_FULL_DISK"):
        yield Disk(folder, mounted=False, why_emulated="DURABLE_EMULATE_FULL_DISK is set")
        return
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError as error:
        yield Disk(folder, mounted=False, why_emulated=f"no mount command: {error}")
        return
    if mounted.returncode != 0:
        reason = mounted.stderr.strip() or f"mount exited with {mounted.returncode}"
        yield Disk(folder, mounted=False, why_emulated=f"mount not permitted: {reason}")
        return
    try:
        yield Disk(folder, mounted=True)
    finally:
        if subprocess.run(["umount", str(folder)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=False)


def _connection(engine: Engine) -> sqlite3.Connection:
    """The engine's own SQLite connection (where the emulation caps the pages)."""
    db: sqlite3.Connection = engine.store._conn  # type: ignore[attr-defined]
    return db


def _integrity(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        (verdict,) = db.execute("PRAGMA integrity_check").fetchone()
    return str(verdict)


def _completed(checkpoints: list[Checkpoint]) -> dict[int, tuple[str, Any, int]]:
    """What is committed as done: seq -> (name, output, attempts) of the completed checkpoints."""
    return {
        cp.seq: (cp.name, cp.output, cp.attempts) for cp in checkpoints if cp.status == "completed"
    }


def _full_disk_records(caplog: pytest.LogCaptureFixture, about: str = "") -> list[str]:
    """What the engine logged about writes that failed for want of space (containing *about*)."""
    found: list[str] = []
    for record in caplog.records:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" | {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        if FULL in text and about in text:
            found.append(text)
    return found


@asynccontextmanager
async def _working(engine: Engine) -> AsyncIterator[asyncio.Task[None]]:
    """The engine's worker loop, running for the block (stopped, drained, at its end)."""
    work = asyncio.get_running_loop().create_task(engine.work(poll_ms=20))
    try:
        yield work
    finally:
        engine.stop()
        await asyncio.gather(work, return_exceptions=True)


async def _finish(engine: Engine, work: asyncio.Task[None], run_id: str) -> None:
    async def finished() -> bool:
        assert not work.done(), f"the worker loop ended: {work}"
        return (await engine.get_run(run_id)).status in FINISHED

    await wait_until_async(finished, timeout=60, what=f"run {run_id} to finish")


# -- a run of many writes, the disk filling under it --------------------------------------------

STEPS = 24
#: Every this many local steps, a dispatched one.
DISPATCH_EVERY = 6


@step("disk:scale", retries=10, backoff="fixed", backoff_ms=20)
async def scale(i: int) -> int:
    """Ten times its input."""
    return 10 * i


@workflow("disk:writes")
async def writes(ctx: WorkflowContext, count: int) -> dict[str, Any]:
    """Local steps with outputs of half a KB, and every few of them a dispatched step."""
    texts: list[str] = []
    scaled: list[int] = []
    for i in range(count):

        async def work(i: int = i) -> str:
            await asyncio.sleep(0.01)
            return f"{i:04d}" + "x" * 500

        texts.append(await ctx.local_step(f"write-{i}", work))
        if i % DISPATCH_EVERY == DISPATCH_EVERY - 1:
            scaled.append(await ctx.step(scale, i))
    return {"lengths": sum(map(len, texts)), "scaled": scaled}


def _writes_output(count: int) -> dict[str, Any]:
    return {
        "lengths": count * 504,
        "scaled": [10 * i for i in range(count) if i % DISPATCH_EVERY == DISPATCH_EVERY - 1],
    }


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_a_full_disk_fails_writes_clearly_and_the_run_finishes_once_freed(
    disk: Disk, caplog: pytest.LogCaptureFixture, synchronous: str
) -> None:
    """The disk fills mid-run: StoreError naming store and cause; once freed, the run finishes."""
    print("full disk:", disk.describe())
    caplog.set_level("WARNING", logger="effects.durable")
    path = disk.folder / "durable.db"
    url = f"sqlite:///{path}?synchronous={synchronous}"
    async with (
        Engine(url, workflows=[writes], steps=[scale], lease_ms=LEASE_MS) as engine,
        _working(engine) as work,
    ):
        db = _connection(engine)
        await engine.start(writes, STEPS, run_id="writes")

        async def some_written() -> bool:
            return len(await engine.checkpoints("writes")) >= STEPS // 3

        await wait_until_async(some_written, timeout=60, what="the first checkpoints")
        disk.fill(db)
        before = await engine.checkpoints("writes")
        with pytest.raises(StoreError) as refused:
            # An input of many pages: no free page or byte is left for it either way.
            await engine.start("disk:writes", "z" * 100_000, run_id="refused")
        # Full for longer than the run's lease, so the worker loop's recovery meets it too.
        about = "worker loop" if disk.mounted else ""

        async def failures_logged() -> bool:
            assert not work.done(), f"the worker loop ended: {work}"
            return bool(_full_disk_records(caplog, about))

        await wait_until_async(failures_logged, timeout=60, what="writes failing on the full disk")
        during = await engine.checkpoints("writes")
        run = await engine.get_run("writes")
        integrity = _integrity(path)
        disk.free(db)
        await _finish(engine, work, "writes")
        problems = await trail_problems(engine, {"writes": _writes_output(STEPS)})
        after = await engine.checkpoints("writes")
        refused_run = await engine.store.get_run("refused")
    message = str(refused.value)
    assert (True, True) == (url in message, FULL in message), message
    # While full: everything committed before is still there, unchanged, and the file is sound.
    assert _completed(before).items() <= _completed(during).items()
    assert ("ok", False) == (integrity, run.status in FINISHED)
    # Once freed: the run finished right, each step completed once, nothing committed rewritten.
    assert [] == problems
    assert _completed(during).items() <= _completed(after).items()
    assert ("ok", None) == (_integrity(path), refused_run)


# -- one write larger than the space left -------------------------------------------------------

BIG = 256 * 1024


@workflow("disk:big")
async def big(ctx: WorkflowContext, swallow: bool) -> dict[str, Any]:
    """
    A small local step, then one whose output is larger than the space the test leaves; with
    *swallow*, the workflow catches whatever that step raises and returns it.
    """
    small = await ctx.local_step("small", lambda: "small")
    try:
        large = await ctx.local_step("large", lambda: "y" * BIG)
    except Exception as error:
        if not swallow:
            raise
        return {"small": small, "caught": f"{type(error).__name__}: {error}"}
    return {"small": small, "large": len(large)}


@pytest.mark.parametrize("swallow", [False, True], ids=["uncaught", "swallowed"])
async def test_a_write_larger_than_the_space_left_fails_the_turn_not_the_run(
    disk: Disk, caplog: pytest.LogCaptureFixture, swallow: bool
) -> None:
    """A commit that does not fit (small ones do) is retried, caught or not; the run goes on."""
    print("full disk:", disk.describe())
    caplog.set_level("WARNING", logger="effects.durable")
    path = disk.folder / "durable.db"
    async with Engine(f"sqlite:///{path}", workflows=[big], lease_ms=LEASE_MS) as engine:
        db = _connection(engine)
        # Room for small commits (a run's end is one; each WAL frame a whole page of every
        # table and index it touches), none for the large step's output.
        disk.fill(db, leave=96 * 1024)
        await engine.start(big, swallow, run_id="big")
        async with _working(engine) as work:

            async def failed_or_finished() -> bool:
                assert not work.done(), f"the worker loop ended: {work}"
                finished = (await engine.get_run("big")).status in FINISHED
                return finished or bool(_full_disk_records(caplog))

            await wait_until_async(failed_or_finished, timeout=60, what="the large write to fail")
            while_full = await engine.get_run("big")
            checkpoints = await engine.checkpoints("big")
            disk.free(db)
            await _finish(engine, work, "big")
            run = await engine.get_run("big")
    assert while_full.status not in FINISHED, while_full
    assert [("small", "completed")] == [(cp.name, cp.status) for cp in checkpoints]
    assert ("completed", {"small": "small", "large": BIG}) == (run.status, run.output)
    assert "ok" == _integrity(path)


# -- the engine alone: one failed write, on the virtual clock -------------------------------------


class FailingOnce:
    """A store whose first commit of a local step's outcome fails as a full disk does."""

    def __init__(self, url: str) -> None:
        self._inner = open_store(url)
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def record_local_step(self, *args: Any, **kwargs: Any) -> None:
        """Fail the first call with the store's own error; then record."""
        if not self.failed:
            self.failed += 1
            msg = f"store {self._inner.url}: commit failed: {FULL}"
            raise StoreError(msg)
        await self._inner.record_local_step(*args, **kwargs)


async def test_a_turn_whose_write_failed_is_replayed_a_second_later_uncounted(
    durable_engine: DurableEngineFactory,
) -> None:
    """A turn whose write failed is abandoned: the run waits 1 s (not a lease), uncounted."""
    calls: list[int] = []

    @workflow("disk:once")
    async def once(ctx: WorkflowContext, _: None) -> str:
        calls.append(1)
        try:
            return await ctx.local_step("only", lambda: "recorded")
        except StoreError:
            return "swallowed"

    store = FailingOnce(durable_engine.url)
    engine = Engine(store, workflows=[once], clock=durable_engine.clock, lease_ms=60_000)
    async with engine:
        run_id = await engine.start(once, None)
        await engine.run_until_idle()
        parked = await engine.get_run(run_id)
        await engine.run_until_idle(advance_time=True)
        run = await engine.get_run(run_id)
    assert ("suspended", [1000], 0) == (
        parked.status,
        relative([parked.wake_at]),
        parked.recovery_attempts,
    )
    assert ("completed", "recorded", 0) == (run.status, run.output, run.recovery_attempts)
    assert [1, 1] == calls


# -- the store alone: statements SQLite refuses, with or without group commit -----------------


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_a_statement_that_runs_out_of_space_is_a_store_error(
    tmp_path: Path, synchronous: str
) -> None:
    """SQLITE_FULL inside a transaction (not at its commit) is a StoreError too; nothing is kept."""
    url = f"sqlite:///{tmp_path / 'durable.db'}?synchronous={synchronous}"
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


@pytest.mark.parametrize("synchronous", ["normal", "full"])
async def test_a_statement_sqlite_refuses_fails_alone_as_a_store_error(
    tmp_path: Path, synchronous: str
) -> None:
    """A value over SQLite's length limit: StoreError for that write; the one beside it commits."""
    url = f"sqlite:///{tmp_path / 'durable.db'}?synchronous={synchronous}"
    store = SqliteStore(url)
    await store.open()
    try:
        db: sqlite3.Connection = store._conn
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 10_000)
        too_big = NewRun("too-big", "w", "1", '"' + "z" * 20_000 + '"', 0)
        beside = NewRun("beside", "w", "1", '"fine"', 0)
        # Issued together: with synchronous=full they share one transaction (group commit).
        refused, accepted = await asyncio.gather(
            store.create_run(too_big, ()), store.create_run(beside, ()), return_exceptions=True
        )
        kept = [await store.get_run(r) is not None for r in ("too-big", "beside")]
    finally:
        await store.close()
    assert isinstance(refused, StoreError), repr(refused)
    assert (True, True) == (url in str(refused), "too big" in str(refused)), refused
    assert (None, [False, True]) == (accepted, kept)


# -- a cancel on a full disk ----------------------------------------------------------------------


@step("disk:elsewhere")
async def elsewhere(n: int) -> int:
    """A step no engine of the test serves: its run waits on its pending task."""
    return n


@workflow("disk:waits")
async def waits(ctx: WorkflowContext, n: int) -> int:
    """A local step (undone by a no-op), then a dispatched step nobody serves."""
    await ctx.local_step("first", lambda: n, compensate=lambda undo: None)
    return await ctx.step(elsewhere, n)


@pytest.mark.parametrize("compensate", [False, True], ids=["plain", "compensating"])
async def test_a_cancel_on_a_full_disk_is_all_or_nothing(disk: Disk, compensate: bool) -> None:
    """Cancelling while the disk is full either fails with a StoreError naming the store and
    cause, leaving the run, its task and its trail exactly as they were, or is done whole; once
    freed, a cancel (again) ends the run cancelled, its task withdrawn, the file sound."""
    print("full disk:", disk.describe())
    path = disk.folder / "durable.db"
    url = f"sqlite:///{path}"
    async with Engine(url, workflows=[waits], lease_ms=LEASE_MS) as engine:
        await engine.start(waits, 3, run_id="waits")
        await engine.run_until_idle()
        assert ["queued"] == _task_statuses(path)
        before = (
            await engine.get_run("waits"),
            await engine.checkpoints("waits"),
            await engine.events("waits"),
        )
        assert "suspended" == before[0].status
        db = _connection(engine)
        disk.fill(db)
        try:
            await engine.cancel("waits", compensate=compensate)
        except StoreError as refused:
            message = str(refused)
            assert (True, True) == (url in message, FULL in message), message
            during = (
                await engine.get_run("waits"),
                await engine.checkpoints("waits"),
                await engine.events("waits"),
            )
            assert before == during
            assert ["queued"] == _task_statuses(path)
            cancelled_while_full = False
        else:
            cancelled_while_full = True
        integrity = _integrity(path)
        disk.free(db)
        if not cancelled_while_full:
            await engine.cancel("waits", compensate=compensate)
        await engine.run_until_idle()
        run = await engine.get_run("waits")
    print("cancelled while full:", cancelled_while_full)
    assert "ok" == integrity
    assert "cancelled" == run.status
    assert "queued" not in _task_statuses(path)
    assert "ok" == _integrity(path)


def _task_statuses(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return [status for (status,) in db.execute("SELECT status FROM tasks ORDER BY task_id")]


@workflow("disk:short")
async def short(ctx: WorkflowContext, n: int) -> int:
    """Two local steps: a run with checkpoints and events to prune."""
    first = await ctx.local_step("one", lambda: n)
    return await ctx.local_step("two", lambda: first + 1, retries=2)


async def test_a_prune_on_a_full_disk_is_whole_runs_or_nothing(disk: Disk) -> None:
    """Pruning while the disk is full fails with a StoreError or goes whole; each run is kept
    with all its rows or gone with all of them; once freed, the next prune finishes the job."""
    print("full disk:", disk.describe())
    path = disk.folder / "durable.db"
    clock = VirtualClock(start=1_767_225_600)
    async with Engine(f"sqlite:///{path}", workflows=[short], clock=clock) as engine:
        run_ids = [await engine.start(short, n) for n in range(8)]
        await engine.run_until_idle()
        clock.advance(86_400)

        async def shape() -> dict[str, tuple[int, int]]:
            kept = {r.run_id for r in await engine.list_runs(limit=100)}
            return {
                r: (len(await engine.checkpoints(r)), len(await engine.events(r)))
                for r in run_ids
                if r in kept
            }

        before = await shape()
        db = _connection(engine)
        disk.fill(db)
        refused = ""
        try:
            pruned_while_full = await engine.prune(older_than="1h")
        except StoreError as error:
            refused, pruned_while_full = str(error), None
        during = await shape()
        integrity = _integrity(path)
        disk.free(db)
        after = await engine.prune(older_than="1h")
        left = await engine.list_runs()
    print("pruned while full:", pruned_while_full)
    assert pruned_while_full is not None or FULL in refused, refused
    assert "ok" == integrity
    assert {r: before[r] for r in during} == during
    assert (pruned_while_full or 0) + after == len(run_ids)
    assert [] == left
    assert "ok" == _integrity(path)


# -- a recurring workflow's step ---------------------------------------------------------------


@workflow("disk:tick")
async def disk_tick(ctx: WorkflowContext, value: str) -> int:
    """The length of the input."""
    return len(value)


async def test_a_recurring_step_on_a_full_disk_writes_nothing_and_is_taken_again_once_freed(
    disk: Disk,
) -> None:
    """
    The disk fills before a due time: the step and its run (one transaction) fail with a
    StoreError saying the disk is full, and nothing of them is written; once freed, that due
    time starts once and the grid goes on.
    """
    print("full disk:", disk.describe())
    path = disk.folder / "durable.db"
    clock = VirtualClock(START_MS / 1000)
    # An input of many pages: the run cannot fit in what a full disk leaves.
    hourly = Recurring("hourly", disk_tick, spaced("1h"), input="x" * 200_000)
    async with Engine(
        f"sqlite:///{path}", workflows=[disk_tick], recurring=[hourly], clock=clock
    ) as engine:
        db = _connection(engine)
        await engine.run_until_idle()
        (before,) = await engine.store.recurring()
        disk.fill(db)
        clock.advance("1h")
        with pytest.raises(StoreError) as refused:
            await engine.run_until_idle()
        (during,) = await engine.store.recurring()
        runs_during = await engine.list_runs()
        integrity = _integrity(path)
        disk.free(db)
        await engine.run_until_idle()
        (after,) = await engine.store.recurring()
        run = await engine.get_run(f"hourly@{START_MS + 3_600_000}")
        runs_after = await engine.list_runs()
    assert FULL in str(refused.value)
    assert (before, [], "ok") == (during, runs_during, integrity)
    assert (before.rev + 1, START_MS + 2 * 3_600_000) == (after.rev, after.next_at)
    assert ("completed", 200_000, 1) == (run.status, run.output, len(runs_after))
