"""
One engine process of the crash tests: ``python -m tests.durable.crash_support.node ...``.

Roles: ``orchestrator`` (the workflows, no steps), ``worker`` (the steps, no workflows), ``solo``
(both). ``--ready FILE`` is written once the store is open; ``--go FILE`` then waits for that file
(a barrier, so several processes act at the same moment). ``--start JSON`` starts the runs it
lists (``[[workflow, run_id, input], ...]``) and prints their ids. Then, by ``--mode``: ``work``
(the worker loop until SIGTERM, which drains and writes ``stopping-<pid>`` in ``CRASH_LOG_DIR``,
or until the runs named by ``--until-finished`` are finished), ``idle`` (``run_until_idle()``
once) or ``start`` (nothing more). ``--crash POINT`` wraps the store in ``CrashingStore``;
``--clock-offset-s`` sets the engine's clock that far ahead of the wall clock (a clock that
jumped); ``--log-level`` shows the engine's log. ``--steps`` limits the steps served (a worker
of one lane); ``--redispatch-ms`` / ``--redispatch-max`` / ``--reconcile-ms`` /
``--queue-concurrency`` are the engine options of issue 10; ``--count-heartbeats FILE`` appends a
line to FILE for every heartbeat write the store receives; ``--compensation-retries`` is the
engine's option of issue 21.

Exit codes: 0 done, 137 a crash point was reached, 3 ``--until-finished`` passed its deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from effects.durable import Engine, Queue, Store
from effects.durable._time import WallClock
from tests.durable.crash_support.app import QUEUE, STEPS, WORKFLOWS
from tests.durable.crash_support.crash_store import ALL_POINTS, CountingStore, CrashingStore

_FINISHED = frozenset({"completed", "failed", "cancelled", "dead"})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crash node")
    parser.add_argument("--url", required=True)
    parser.add_argument("--role", choices=("orchestrator", "worker", "solo"), default="solo")
    parser.add_argument("--mode", choices=("work", "idle", "start"), default="work")
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument("--poll-ms", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--crash", choices=sorted(ALL_POINTS))
    parser.add_argument("--marker", type=Path)
    parser.add_argument("--go", type=Path)
    parser.add_argument("--ready", type=Path)
    parser.add_argument("--until-finished", nargs="*", default=())
    parser.add_argument("--deadline-s", type=float, default=60.0)
    parser.add_argument("--start", help="JSON list of [workflow, run_id, input] to start")
    parser.add_argument("--clock-offset-s", type=float, default=0.0)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--steps", nargs="*", choices=sorted(STEPS))
    parser.add_argument("--redispatch-ms", type=int)
    parser.add_argument("--redispatch-max", type=int, default=10)
    parser.add_argument("--reconcile-ms", type=int, default=300_000)
    parser.add_argument("--queue-concurrency", type=int, default=1)
    parser.add_argument("--count-heartbeats", type=Path)
    parser.add_argument("--compensation-retries", type=int, default=1)
    parser.add_argument("--cached-runs", type=int, default=1000)
    return parser


class ShiftedClock(WallClock):
    """The wall clock, *offset* seconds ahead (a process whose clock jumped)."""

    __slots__ = ("offset",)

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        """Epoch seconds, shifted."""
        return time.time() + self.offset


def _engine(args: argparse.Namespace) -> Engine:
    store: str | Store = args.url
    if args.crash is not None:
        store = CrashingStore(args.url, args.crash, args.marker)
    elif args.count_heartbeats is not None:
        store = CountingStore(args.url, args.count_heartbeats)
    workflows = list(WORKFLOWS.values()) if args.role != "worker" else []
    served = STEPS if args.steps is None else {name: STEPS[name] for name in args.steps}
    steps = list(served.values()) if args.role != "orchestrator" else []
    return Engine(
        store,
        workflows=workflows,
        steps=steps,
        queues=[Queue(QUEUE, args.queue_concurrency)],
        lease_ms=args.lease_ms,
        reconcile_ms=args.reconcile_ms,
        remote_redispatch_ms=args.redispatch_ms,
        remote_redispatch_max=args.redispatch_max,
        compensation_retries=args.compensation_retries,
        cached_runs=args.cached_runs,
        random=random.Random(args.seed),
        clock=ShiftedClock(args.clock_offset_s) if args.clock_offset_s else None,
    )


async def _wait_for(path: Path) -> None:
    while not path.exists():
        await asyncio.sleep(0.001)


async def _until_finished(
    engine: Engine, run_ids: list[str], poll: float, deadline_s: float
) -> bool:
    deadline = time.monotonic() + deadline_s
    pending = set(run_ids)
    while pending and time.monotonic() < deadline:
        for run_id in sorted(pending):
            if (await engine.get_run(run_id)).status in _FINISHED:
                pending.discard(run_id)
        if pending:
            await asyncio.sleep(poll)
    return not pending


async def _main(args: argparse.Namespace) -> int:
    async with _engine(args) as engine:
        if args.ready is not None:
            args.ready.write_text("ready")
        if args.go is not None:
            await _wait_for(args.go)
        if args.start is not None:
            started: list[Any] = []
            for workflow, run_id, data in json.loads(args.start):
                started.append(await engine.start(workflow, data, run_id=run_id))
            print(json.dumps(started), flush=True)
        if args.mode == "start":
            return 0
        if args.mode == "idle":
            await engine.run_until_idle()
            return 0
        loop = asyncio.get_running_loop()

        def stop() -> None:
            engine.stop()
            folder = os.environ.get("CRASH_LOG_DIR")
            if folder:
                (Path(folder) / f"stopping-{os.getpid()}").write_text("stopping")

        loop.add_signal_handler(signal.SIGTERM, stop)
        worker = loop.create_task(engine.work(poll_ms=args.poll_ms, concurrency=args.concurrency))
        if not args.until_finished:
            await worker
            return 0
        done = await _until_finished(
            engine, list(args.until_finished), args.poll_ms / 1000, args.deadline_s
        )
        engine.stop()
        await worker
        return 0 if done else 3


def main(argv: list[str] | None = None) -> int:
    """Run one node; see the module docstring."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(main())
