"""
An engine process of the recurring tests: ``python -m tests.durable.recurring_node ...``.

It serves one recurring workflow, ``beat`` (``spaced(--every-ms)``, catch_up ``all``), with the
wall clock, working (``work(poll_ms=20)``) until the file ``--stop FILE`` exists (then it drains
and exits); it writes ``--ready FILE`` once its store is open. With ``--die-in-step MARKER`` it dies
(``os._exit(137)``, as ``kill -9`` leaves it) inside the transaction of its first recurring step
that starts a run: after the step's row update, before the run's insert, having written MARKER.

Exit codes: 0 done, 137 died on purpose.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from effects.durable import Engine, Recurring, WorkflowContext, workflow
from effects.durable._store.postgres import PostgresStore
from effects.durable._store.sqlite import SqliteStore
from schedules import spaced


@workflow("beat")
async def beat(ctx: WorkflowContext, _: Any) -> str:
    """Say which process ran it."""
    return await ctx.local_step("pid", lambda: str(os.getpid()))


def _die_in_step(marker: Path) -> None:
    """Make the first run insert of a recurring step (inside its transaction) kill the process."""

    def die(*_: Any, **__: Any) -> Any:
        marker.write_text("in the step's transaction, its row updated, its run not inserted")
        os._exit(137)

    # Only a recurring step inserts runs in this process: it starts none by hand.
    SqliteStore._create_run = die  # type: ignore[method-assign]
    PostgresStore._run_params = die  # type: ignore[method-assign]


async def _main(args: argparse.Namespace) -> int:
    recurring = Recurring("beat", beat, spaced(args.every_ms / 1000), catch_up="all")
    async with Engine(args.url, workflows=[beat], recurring=[recurring]) as engine:
        args.ready.write_text("ready")
        work = asyncio.ensure_future(engine.work(poll_ms=20))
        while not args.stop.exists() and not work.done():
            await asyncio.sleep(0.02)
        # Asked again until it ends: a stop asked before work() began would be forgotten.
        while not work.done():
            engine.stop()
            await asyncio.wait({work}, timeout=0.1)
        await work
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse *argv* and run the node."""
    parser = argparse.ArgumentParser(prog="recurring node")
    parser.add_argument("--url", required=True)
    parser.add_argument("--every-ms", type=int, required=True)
    parser.add_argument("--stop", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--die-in-step", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    if args.die_in_step is not None:
        _die_in_step(args.die_in_step)
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
