"""
A process of the messages and child-workflow crash tests:
``python -m tests.durable.crash_support.messages_node URL MODE ...``.

Modes: ``work RUN`` (the worker loop until run RUN is finished, then exit 0; a workflow may
SIGKILL this process at a point it reaches once: see ``die_once``) and ``send RUN GO COUNT``
(wait for the file GO, then send COUNT messages to RUN on topic ``t`` with ids ``m-0`` ...,
each twice; print ``sent``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from effects.durable import Engine, WorkflowContext, workflow

#: The lease of these processes' engines: a killed one's run is taken up this soon.
LEASE_MS = 300
FINISHED = frozenset({"completed", "failed", "cancelled", "dead"})


def die_once(marker: str) -> None:
    """SIGKILL this process, unless the file *marker* exists (then it did once already)."""
    path = Path(marker)
    if path.exists():
        return
    path.write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


@workflow("crash:recv")
async def recv_twice(ctx: WorkflowContext, data: dict[str, Any]) -> list[Any]:
    """Two messages, the process killed between the first recv's checkpoint and the next step."""
    first = await ctx.recv("t")
    await ctx.local_step("after-recv", lambda: die_once(data["marker"]))
    second = await ctx.recv("t")
    return [first, second]


@workflow("crash:kid")
async def kid(ctx: WorkflowContext, data: dict[str, Any]) -> int:
    """Double ``n``; killed once in its first step when ``marker`` is given."""
    if data.get("marker"):
        await ctx.local_step("kid-step", lambda: die_once(data["marker"]))
    return 2 * int(data["n"])


@workflow("crash:parent")
async def parent(ctx: WorkflowContext, data: dict[str, Any]) -> list[Any]:
    """A child started without waiting (killed right after), then one waited for (killed in it)."""
    started = await ctx.start_child(kid, {"n": 1})
    await ctx.local_step("after-start", lambda: die_once(data["started"]))
    waited = await ctx.child(kid, {"n": 5, "marker": data["in-child"]})
    return [started, waited]


@workflow("crash:count")
async def count(ctx: WorkflowContext, n: int) -> list[Any]:
    """*n* messages on 't'."""
    return [await ctx.recv("t") for _ in range(n)]


WORKFLOWS = [recv_twice, kid, parent, count]


async def _work(url: str, run_id: str) -> int:
    async with Engine(url, workflows=WORKFLOWS, lease_ms=LEASE_MS) as engine:
        worker = asyncio.ensure_future(engine.work(poll_ms=20))
        try:
            while (await engine.get_run(run_id)).status not in FINISHED:
                if worker.done():
                    return 1
                await asyncio.sleep(0.02)
        finally:
            engine.stop()
            await worker
    return 0


async def _send(url: str, run_id: str, go: str, count: int) -> int:
    async with Engine(url) as engine:
        while not Path(go).exists():
            await asyncio.sleep(0.001)
        for _ in range(2):
            for i in range(count):
                await engine.send(run_id, "t", {"i": i, "pid": os.getpid()}, message_id=f"m-{i}")
    print("sent", flush=True)
    return 0


def main(argv: list[str]) -> int:
    """Run the mode *argv* names; the exit code."""
    url, mode, *rest = argv
    if mode == "work":
        return asyncio.run(_work(url, rest[0]))
    return asyncio.run(_send(url, rest[0], rest[1], int(rest[2])))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
