"""
The cost of a step's attempt against the attempts before it: N and 8N failing attempts of one
step, dispatched (durable retries) and local (in-memory retries), on SQLite and PostgreSQL.

An attempt should cost the same however many came before, so 8N attempts should take about 8x
the time of N. Before each attempt's error became a row of its own, 800 dispatched attempts took
about 23x the time of 100 (each attempt re-read, decoded and rewrote the whole error history).
The peer (DBOS Transact) has no durable retry of a step's attempts to compare with: its step
retries are in memory, which the local case is.

    .venv/bin/python benchmarks/durable_attempts.py [--attempts 100] [--store postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from effects.durable import Engine, RemoteStepError, WorkflowContext, step, workflow
from effects.testing import VirtualClock


def _definitions(attempts: int, kind: str) -> tuple[Any, Any]:
    @step("flaky", retries=attempts)
    async def flaky(_: Any) -> None:
        raise ConnectionError("down")

    def fails() -> None:
        raise ConnectionError("down")

    @workflow("retrying")
    async def retrying(ctx: WorkflowContext, _: Any) -> int:
        try:
            if kind == "dispatched":
                await ctx.step(flaky, None)
            else:
                await ctx.local_step("flaky", fails, retries=attempts)
        except (RemoteStepError, ConnectionError) as error:
            return len(getattr(error, "errors", ())) or attempts
        return 0

    return flaky, retrying


async def _timed(url: str, attempts: int, kind: str) -> float:
    flaky, retrying = _definitions(attempts, kind)
    clock = VirtualClock(start=1_767_225_600.0)
    async with Engine(url, workflows=[retrying], steps=[flaky], clock=clock) as engine:
        began = time.perf_counter()
        run_id = await engine.start(retrying, None)
        await engine.run_until_idle(advance_time=True)
        elapsed = time.perf_counter() - began
        run = await engine.get_run(run_id)
    assert (run.status, run.output) == ("completed", attempts), run
    return elapsed


@contextlib.contextmanager
def _stores(kind: str, folder: Path) -> Iterator[Any]:
    """A factory of fresh store URLs: SQLite files, or schemas of a PostgreSQL server."""
    if kind == "sqlite":
        counter = iter(range(10**9))
        yield lambda: f"sqlite:///{folder / f'attempts-{next(counter)}.db'}"
        return
    if kind == "postgresql":
        from tests.postgres_server import PostgresServer

        with PostgresServer(durable=True) as server:
            yield server.url
        return
    yield lambda: f"{kind}{'&' if '?' in kind else '?'}schema=bench_{time.time_ns()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=100, help="N (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="best of N rounds (3)")
    parser.add_argument(
        "--store",
        default="sqlite",
        help="sqlite (default), postgresql (a throwaway server) or a postgresql:// URL",
    )
    args = parser.parse_args()
    logging.getLogger("effects.durable").setLevel(logging.CRITICAL)
    small, large = args.attempts, 8 * args.attempts
    with tempfile.TemporaryDirectory() as folder, _stores(args.store, Path(folder)) as fresh:
        print(f"store {args.store}; best of {args.rounds} rounds; ms per attempt")
        print(f"{'case':<12} {small:>8} {large:>8}   time ratio (8 is flat)")
        for kind in ("dispatched", "local"):
            best = {small: float("inf"), large: float("inf")}
            for _ in range(args.rounds):
                for n in (small, large):  # interleaved
                    best[n] = min(best[n], asyncio.run(_timed(fresh(), n, kind)))
            per = {n: 1000 * best[n] / n for n in best}
            ratio = best[large] / best[small]
            print(f"{kind:<12} {per[small]:>8.3f} {per[large]:>8.3f}   {ratio:.1f}x")


if __name__ == "__main__":
    main()
