"""
A full disk under the PostgreSQL store: the store's tables live in a tablespace on a small tmpfs
(the suite runs as root in CI), which fills while runs write at once (their writes grouped). Each
failing write is a clear ``StoreError`` naming the cause, nothing committed is lost or changed, no
run is failed by it, and every run finishes once the space is freed, each step recorded once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import attrs
import pytest

from effects.durable import Engine, StoreError, UnknownRunError, WorkflowContext, workflow
from tests.durable.support import rows
from tests.postgres_server import (
    NoSmallDiskError,
    PostgresServer,
    no_small_disk,
    tablespace_on_tmpfs,
)

pytestmark = pytest.mark.anyio

#: How long a test waits for work that must finish (a bound on a hang, not a timing claim).
PATIENCE = 90.0
#: What PostgreSQL says when a relation cannot grow.
FULL = "No space left on device"
RUNS = 8
STEPS = 30


@pytest.fixture
def anyio_backend() -> str:
    """The PostgreSQL store is an asyncio store (psycopg's asyncio connections)."""
    return "asyncio"


@attrs.define
class SmallDisk:
    """A tablespace on an 8 MiB tmpfs, and a store URL whose tables are created in it."""

    folder: Path
    url: str

    def fill(self) -> None:
        """Use up every byte left."""
        fd = os.open(self.folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for chunk in (1 << 16, 1 << 12, 1 << 9):
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * chunk)
            with pytest.raises(OSError, match="No space") as raised:
                os.write(fd, b"\0" * 512)
            assert errno.ENOSPC == raised.value.errno
        finally:
            os.close(fd)

    def free(self) -> None:
        """Give the space back."""
        (self.folder / "filler").unlink(missing_ok=True)


@pytest.fixture
def small_disk(postgres_server: PostgresServer) -> Iterator[SmallDisk]:
    """The tablespace and the URL; where no tmpfs can be mounted, the test is skipped, saying so."""
    schema = f"full_disk_{secrets.token_hex(4)}"
    try:
        with tablespace_on_tmpfs(postgres_server, "8m", schema) as (name, folder):
            url = postgres_server.url(
                schema, options=quote(f"-c default_tablespace={name}"), reconnect_timeout_ms="300"
            )
            yield SmallDisk(folder, url)
    except NoSmallDiskError as error:
        no_small_disk(error)


@workflow("disk:pg-writes")
async def writes(ctx: WorkflowContext, n: int) -> int:
    """Local steps with outputs of 2 KB each, a little apart; the total of their lengths."""
    total = 0
    for i in range(STEPS):

        async def work(i: int = i) -> str:
            await asyncio.sleep(0.005)
            # Random, so TOAST cannot compress it: every write needs new pages, never free room.
            return f"{n:02d}:{i:03d}" + secrets.token_hex(1_000)

        total += len(await ctx.local_step(f"write-{i}", work))
    return total


@workflow("disk:pg-length")
async def length(ctx: WorkflowContext, text: str) -> int:
    """The length of its input."""
    return len(text)


def _committed(url: str) -> dict[tuple[str, int], tuple[str, str]]:
    """Every completed checkpoint: (run, seq) -> (status, output)."""
    found = rows(
        url, "SELECT run_id, seq, status, output FROM checkpoints WHERE status = 'completed'"
    )
    return {(run_id, seq): (status, output) for run_id, seq, status, output in found}


async def test_a_full_disk_fails_writes_clearly_and_every_run_finishes_once_freed(
    small_disk: SmallDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """The tablespace fills under eight runs at once: nothing committed changes; all finish."""
    caplog.set_level("ERROR", logger="effects.durable")
    async with Engine(small_disk.url, workflows=[writes, length], lease_ms=2_000) as engine:
        work = asyncio.create_task(engine.work(poll_ms=20, concurrency=RUNS))
        try:
            ids = [await engine.start(writes, n, run_id=f"w{n}") for n in range(RUNS)]

            async def written(count: int) -> None:
                while len(_committed(small_disk.url)) < count:
                    assert not work.done(), work
                    await asyncio.sleep(0.02)

            await asyncio.wait_for(written(RUNS * STEPS // 4), PATIENCE)
            small_disk.fill()

            async def refused() -> None:
                while not any(FULL in r.getMessage() for r in caplog.records):
                    assert not work.done(), work
                    await asyncio.sleep(0.02)

            await asyncio.wait_for(refused(), PATIENCE)
            before = _committed(small_disk.url)
            # A start meets the full disk too: a StoreError naming the cause, and no run. (Its
            # input is random, so TOAST cannot compress it into a page that has room.)
            with pytest.raises(StoreError, match=FULL):
                await engine.start(length, secrets.token_urlsafe(200_000), run_id="late")
            with pytest.raises(UnknownRunError):
                await engine.get_run("late")
            small_disk.free()
            runs = await asyncio.wait_for(
                asyncio.gather(*(engine.wait(run_id) for run_id in ids)), PATIENCE
            )
        finally:
            engine.stop()
            await asyncio.wait_for(work, PATIENCE)
    after = _committed(small_disk.url)
    assert [("completed", STEPS * 2_006)] * RUNS == [(r.status, r.output) for r in runs]
    assert {k: after[k] for k in before} == before
    assert RUNS * STEPS == len(after)
    assert [] == rows(
        small_disk.url,
        "SELECT run_id, seq FROM events WHERE name = 'step.completed'"
        " GROUP BY run_id, seq HAVING COUNT(*) > 1",
    )
