"""
A send on a full disk (SQLite): a clear ``StoreError``, nothing of the message stored and the run
as it was; once space is freed the same send goes through and the run receives it once.
"""

from __future__ import annotations

import pytest

from effects.durable import Engine, StoreError
from tests.durable.support import rows
from tests.durable.test_full_disk import FULL, Disk, _connection, _integrity  # pyright: ignore[reportPrivateUsage]
from tests.durable.test_full_disk import disk as disk  # noqa: PLC0414 - the fixture, used here
from tests.durable.test_messages import inbox

pytestmark = [pytest.mark.anyio, pytest.mark.not_on_memory("a store file on a disk that fills up")]

#: A message of many pages: no free page or byte is left for it either way.
BIG = "m" * 200_000


async def test_a_send_on_a_full_disk_fails_clearly_and_writes_nothing(disk: Disk) -> None:
    """StoreError naming store and cause; the run and its messages unchanged; freed, it lands."""
    print("full disk:", disk.describe())
    path = disk.folder / "durable.db"
    url = f"sqlite:///{path}"
    async with Engine(url, workflows=[inbox]) as engine:
        await engine.start(inbox, 1, run_id="r")
        await engine.send("r", "orders", "small", message_id="m-0")
        await engine.run_until_idle()
        before = (await engine.get_run("r"), await engine.checkpoints("r"))
        db = _connection(engine)
        disk.fill(db)
        with pytest.raises(StoreError) as refused:
            await engine.send("r", "refunds", BIG, message_id="m-1")
        during = (await engine.get_run("r"), await engine.checkpoints("r"))
        stored = rows(url, "SELECT n, message_id FROM messages ORDER BY n")
        integrity = _integrity(path)
        disk.free(db)
        await engine.send("r", "refunds", BIG, message_id="m-1")
        await engine.send("r", "refunds", BIG, message_id="m-1")
        await engine.run_until_idle()
        run = await engine.get_run("r")
    message = str(refused.value)
    assert (True, True) == (url in message, FULL in message), message
    assert before == during
    assert [(1, "m-0")] == stored
    assert "ok" == integrity
    assert ("completed", ["small", BIG]) == (run.status, run.output)
    assert [(1, "m-0"), (2, "m-1")] == rows(url, "SELECT n, message_id FROM messages ORDER BY n")
