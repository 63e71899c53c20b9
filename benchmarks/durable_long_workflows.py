"""
Long workflows: the per-step cost of n sequential dispatched steps, 50 against 400, with the
engine's cache of suspended runs on (``cached_runs=1000``, the default) and off
(``cached_runs=0``: every resume replays the workflow from its start), side by side in one run.

Each case makes a fresh SQLite store (WAL, ``synchronous=NORMAL``), starts ``RUNS`` runs of a
workflow that awaits ``ctx.step(bump, n)`` *steps* times in a row, and times them from start to
finish under ``work()``: in one engine, or in two engines of this process sharing the store
(both claim runs and tasks; a run moves between them as they do). Per step: that time over
``RUNS * steps``. The figure that matters is the ratio ``per step at 400 / per step at 50``,
which is 1.0 for a cost linear in the workflow's length (the target is at most 1.5); the
absolute rates move with the machine's load.

The memory case suspends ``--memory-runs`` runs (10,000) in one engine, each waiting for a
dispatched step nobody serves, with the cache large enough to hold them all, and reports the
traced Python memory (``tracemalloc``) the engine holds for them after a full collection, per
run and in all, against the same runs with the cache off.

Run: ``python benchmarks/durable_long_workflows.py [--rounds 3] [--memory-runs 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from effects.durable import Engine, WorkflowContext, step, workflow

#: Runs of each case, run at once.
RUNS = 4
#: The workflow lengths compared.
SHORT, LONG = 50, 400
#: How often work() polls (ms): the second engine hears the first's writes only by polling.
POLL_MS = 5


@step("long:bump")
async def bump(n: int) -> int:
    """The dispatched step: add one."""
    return n + 1


@step("long:never", group="nobody")
async def never(n: int) -> int:
    """A step no engine of the memory case serves (its runs stay suspended)."""
    return n


@workflow("long:steps")
async def long_steps(ctx: WorkflowContext, steps: int) -> int:
    """Dispatch ``bump`` *steps* times in a row, each on the previous output."""
    n = 0
    for _ in range(steps):
        n = await ctx.step(bump, n)
    return n


@workflow("long:parked")
async def parked(ctx: WorkflowContext, n: int) -> int:
    """A short run that waits for a step nobody serves."""
    n = await ctx.local_step("first", lambda: n + 1)
    return await ctx.step(never, n)


def _cached(value: int) -> dict[str, Any]:
    """The engine argument of the cache, when this engine has it."""
    if "cached_runs" in inspect.signature(Engine).parameters:
        return {"cached_runs": value}
    if value:
        msg = "this engine has no cached_runs"
        raise SystemExit(msg)
    return {}


async def _steps_case(
    folder: Path, steps: int, engines: int, cached: int, runs: int = RUNS
) -> float:
    """Seconds per step of *runs* runs of *steps* dispatched steps, in *engines* engines."""
    url = f"sqlite:///{folder / f'long-{steps}-{engines}-{cached}.db'}"
    made = [
        Engine(url, workflows=[long_steps], steps=[bump], **_cached(cached)) for _ in range(engines)
    ]
    for engine in made:
        await engine.open()
    try:
        workers = [asyncio.create_task(e.work(poll_ms=POLL_MS)) for e in made]
        began = time.perf_counter()
        ids = [await made[i % engines].start(long_steps, steps) for i in range(runs)]
        for run_id in ids:
            run = await made[0].wait(run_id, poll_ms=POLL_MS)
            assert run.status == "completed", run
            assert run.output == steps, run
        took = time.perf_counter() - began
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    finally:
        for engine in made:
            await engine.close()
    return took / (runs * steps)


async def _memory_case(folder: Path, runs: int, cached: int) -> float:
    """Traced MB the engine holds for *runs* suspended runs (cache of *cached* runs)."""
    url = f"sqlite:///{folder / f'memory-{cached}.db'}"
    engine = Engine(url, workflows=[parked], **_cached(cached))
    await engine.open()
    try:
        for i in range(runs):
            await engine.start(parked, i, run_id=f"parked-{i}")
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        await engine.run_until_idle()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        run = await engine.get_run(f"parked-{runs - 1}")
        assert run.status == "suspended", run
    finally:
        await engine.close()
    return (after - before) / 1e6


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every case (3)")
    parser.add_argument("--memory-runs", type=int, default=10_000, help="runs suspended (10000)")
    parser.add_argument("--skip-memory", action="store_true", help="skip the memory case")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs at once ({RUNS})")
    parser.add_argument("--short", type=int, default=SHORT, help=f"the short length ({SHORT})")
    parser.add_argument("--long", type=int, default=LONG, help=f"the long length ({LONG})")
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    caches = (1000, 0) if _cached(0) else (0,)
    figures: dict[tuple[int, int, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for _ in range(args.rounds):
            # Interleaved, so a change of the machine's load touches every case alike.
            for engines in (1, 2):
                for cached in caches:
                    for steps in (args.short, args.long):
                        key = (engines, cached, steps)
                        took = await _steps_case(folder, steps, engines, cached, args.runs)
                        figures.setdefault(key, []).append(took)
        print(f"{args.runs} runs of n sequential dispatched steps, SQLite, work(poll_ms={POLL_MS})")
        print(f"median of {args.rounds} rounds; per step in microseconds")
        short_n, long_n = f"n={args.short}", f"n={args.long}"
        ratio = f"{args.long}/{args.short}"
        print(f"  {'engines':<9}{'cached_runs':<13}{short_n:>10}{long_n:>10}{ratio:>9}")
        for engines in (1, 2):
            for cached in caches:
                short = statistics.median(figures[engines, cached, args.short]) * 1e6
                long = statistics.median(figures[engines, cached, args.long]) * 1e6
                print(f"  {engines:<9}{cached:<13}{short:>10.0f}{long:>10.0f}{long / short:>8.2f}x")
        if not args.skip_memory:
            print(f"memory: {args.memory_runs:,} runs suspended on a dispatched step (tracemalloc)")
            for cached in caches:
                size = args.memory_runs if cached else 0
                mb = await _memory_case(folder, args.memory_runs, size)
                per = mb * 1e6 / args.memory_runs
                print(f"  cached_runs={size:<8} {mb:>8.1f} MB  ({per:,.0f} bytes per run)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cases and print the table."""
    return asyncio.run(_main(_parse(argv)))


if __name__ == "__main__":
    sys.exit(main())
